//! Hugging Face `config.json` → [`Model`]: the first stop of the data flow for users who live on the
//! Hub. Reads the keys `transformers` itself reads for each family (the `*Config` classes in
//! `transformers/models/<family>/configuration_<family>.py`, defaults included) and maps them onto
//! tpsim's shape. What the shape cannot say is documented per family below; each omission is a
//! per-layer vector (well under 0.01% of the parameters).

use serde_json::{Map, Value};

use crate::model::{Model, Norm};

/// `model_type` values we read, in the order the error message lists them.
pub const SUPPORTED: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2", "gpt_neox", "falcon",
];

/// Architecture families with their parameter layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama, Mistral, Qwen2, Qwen3: RMSNorm, gated MLP (SwiGLU), RoPE, no linear biases.
    /// Qwen2's q/k/v biases and Qwen3's per-head q/k norms are left out.
    LlamaLike,
    /// Gemma: as Llama with a GeGLU MLP and tied embeddings (`GemmaConfig` ties by default).
    Gemma,
    /// GPT-2: LayerNorm, biases, GeLU MLP of 4h (`n_inner` null), learned positions, tied output.
    Gpt2,
    /// GPT-NeoX / Pythia: LayerNorm, biases, GeLU MLP, rotary, separate `embed_out` (untied).
    GptNeox,
    /// Falcon: LayerNorm, no biases (`bias: false`), GeLU MLP of 4h, rotary, tied output;
    /// multi-query attention unless `new_decoder_architecture` gives `num_kv_heads`. The 7B/40B
    /// parallel block has one LayerNorm per layer where tpsim counts two (2h per layer).
    Falcon,
}

#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    #[error("--hf-config {path}: cannot read it: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--hf-config {path}: not valid JSON ({message}); pass the model's config.json")]
    Json { path: String, message: String },
    #[error(
        "--hf-config {path}: architecture {found:?} is not supported; supported model_type values: {supported} (or describe the shape with --layers/--hidden/--heads)"
    )]
    UnknownArchitecture {
        path: String,
        found: String,
        supported: String,
    },
    #[error(
        "--hf-config {path}: key {key:?} is missing or not a positive integer; a {family} config.json has it (e.g. \"{key}\": {example})"
    )]
    MissingKey {
        path: String,
        key: &'static str,
        family: &'static str,
        example: &'static str,
    },
    #[error("--hf-config {path}: {message}")]
    Unsupported { path: String, message: String },
}

fn family_of(model_type: &str) -> Option<Family> {
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" => Some(Family::LlamaLike),
        "gemma" => Some(Family::Gemma),
        "gpt2" => Some(Family::Gpt2),
        "gpt_neox" => Some(Family::GptNeox),
        // Falcon's first Hub uploads used the remote-code names.
        "falcon" | "RefinedWeb" | "RefinedWebModel" => Some(Family::Falcon),
        _ => None,
    }
}

/// `architectures[0]` → `model_type`, for configs written without `model_type`.
fn model_type_of_architecture(architecture: &str) -> Option<&'static str> {
    Some(match architecture {
        "LlamaForCausalLM" => "llama",
        "MistralForCausalLM" => "mistral",
        "Qwen2ForCausalLM" => "qwen2",
        "Qwen3ForCausalLM" => "qwen3",
        "GemmaForCausalLM" => "gemma",
        "GPT2LMHeadModel" => "gpt2",
        "GPTNeoXForCausalLM" => "gpt_neox",
        "FalconForCausalLM" | "RWForCausalLM" => "falcon",
        _ => return None,
    })
}

/// Reads a `config.json` file.
pub fn load(path: &str) -> Result<Model, HfConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| HfConfigError::Read {
        path: path.to_string(),
        source,
    })?;
    let stem = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("hf-model");
    // A Hub snapshot is `<model>/config.json`: name the model after its folder.
    let name = if stem == "config" {
        std::path::Path::new(path)
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or("hf-model")
    } else {
        stem
    };
    parse(&text, path, name)
}

/// Parses the text of a `config.json`; `path` is only used in messages.
pub fn parse(text: &str, path: &str, name: &str) -> Result<Model, HfConfigError> {
    let value: Value = serde_json::from_str(text).map_err(|e| HfConfigError::Json {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    let Some(obj) = value.as_object() else {
        return Err(HfConfigError::Json {
            path: path.to_string(),
            message: "the top level is not an object".into(),
        });
    };
    let architecture = obj
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("");
    let model_type = match obj.get("model_type").and_then(Value::as_str) {
        Some(t) => t.to_string(),
        None => model_type_of_architecture(architecture)
            .unwrap_or(architecture)
            .to_string(),
    };
    let unknown = || HfConfigError::UnknownArchitecture {
        path: path.to_string(),
        found: if model_type.is_empty() {
            "(no model_type or architectures key)".to_string()
        } else {
            model_type.clone()
        },
        supported: SUPPORTED.join(", "),
    };
    let family = family_of(&model_type).ok_or_else(unknown)?;
    let reader = Reader {
        obj,
        path,
        family: family_name(family),
    };
    let model = match family {
        Family::LlamaLike | Family::Gemma => {
            let hidden = reader.required("hidden_size", "4096")?;
            let heads = reader.required("num_attention_heads", "32")?;
            let model = Model {
                name: name.to_string(),
                layers: reader.required("num_hidden_layers", "32")?,
                hidden,
                heads,
                kv_heads: reader.optional("num_key_value_heads")?.unwrap_or(heads),
                ffn_hidden: reader.required("intermediate_size", "14336")?,
                vocab: reader.required("vocab_size", "128256")?,
                seq_len: reader.optional("max_position_embeddings")?.unwrap_or(2048),
                gated_mlp: true,
                linear_bias: false,
                tied_embeddings: reader
                    .flag("tie_word_embeddings")
                    .unwrap_or(family == Family::Gemma),
                learned_position_embeddings: false,
                norm: Norm::Rmsnorm,
                // Llama-family configs set attention_dropout 0.0 and have no hidden dropout.
                dropout: false,
            };
            reader.check_head_dim(&model)?;
            model
        }
        Family::Gpt2 => {
            let hidden = reader.required_any(&["n_embd", "hidden_size"], "768")?;
            let heads = reader.required_any(&["n_head", "num_attention_heads"], "12")?;
            Model {
                name: name.to_string(),
                layers: reader.required_any(&["n_layer", "num_hidden_layers"], "12")?,
                hidden,
                heads,
                kv_heads: heads,
                ffn_hidden: reader.optional("n_inner")?.unwrap_or(4 * hidden),
                vocab: reader.required("vocab_size", "50257")?,
                seq_len: reader.optional("n_positions")?.unwrap_or(1024),
                gated_mlp: false,
                linear_bias: true,
                tied_embeddings: reader.flag("tie_word_embeddings").unwrap_or(true),
                learned_position_embeddings: true,
                norm: Norm::Layernorm,
                // GPT-2 config: resid_pdrop / attn_pdrop 0.1.
                dropout: true,
            }
        }
        Family::GptNeox => {
            let heads = reader.required("num_attention_heads", "64")?;
            Model {
                name: name.to_string(),
                layers: reader.required("num_hidden_layers", "44")?,
                hidden: reader.required("hidden_size", "6144")?,
                heads,
                kv_heads: heads,
                ffn_hidden: reader.required("intermediate_size", "24576")?,
                vocab: reader.required("vocab_size", "50432")?,
                seq_len: reader.optional("max_position_embeddings")?.unwrap_or(2048),
                gated_mlp: false,
                linear_bias: true,
                tied_embeddings: reader.flag("tie_word_embeddings").unwrap_or(false),
                learned_position_embeddings: false,
                norm: Norm::Layernorm,
                // GPT-NeoX configs: hidden_dropout / attention_dropout 0 unless set.
                dropout: reader
                    .obj
                    .get("hidden_dropout")
                    .and_then(Value::as_f64)
                    .is_some_and(|p| p > 0.0),
            }
        }
        Family::Falcon => {
            let hidden = reader.required("hidden_size", "4544")?;
            let heads = reader.required_any(&["num_attention_heads", "n_head"], "71")?;
            let kv_heads = if reader.flag("new_decoder_architecture").unwrap_or(false) {
                reader.optional("num_kv_heads")?.unwrap_or(heads)
            } else if reader.flag("multi_query").unwrap_or(true) {
                1
            } else {
                heads
            };
            Model {
                name: name.to_string(),
                layers: reader.required_any(&["num_hidden_layers", "n_layer"], "32")?,
                hidden,
                heads,
                kv_heads,
                ffn_hidden: reader.optional("ffn_hidden_size")?.unwrap_or(4 * hidden),
                vocab: reader.required("vocab_size", "65024")?,
                seq_len: reader.optional("max_position_embeddings")?.unwrap_or(2048),
                gated_mlp: false,
                linear_bias: reader.flag("bias").unwrap_or(false),
                tied_embeddings: reader.flag("tie_word_embeddings").unwrap_or(true),
                learned_position_embeddings: false,
                norm: Norm::Layernorm,
                // Falcon configs: hidden_dropout 0.0, attention_dropout 0.0.
                dropout: false,
            }
        }
    };
    reader.check_activation()?;
    model.check().map_err(|e| HfConfigError::Unsupported {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    Ok(model)
}

fn family_name(family: Family) -> &'static str {
    match family {
        Family::LlamaLike => "Llama/Mistral/Qwen",
        Family::Gemma => "Gemma",
        Family::Gpt2 => "GPT-2",
        Family::GptNeox => "GPT-NeoX",
        Family::Falcon => "Falcon",
    }
}

struct Reader<'a> {
    obj: &'a Map<String, Value>,
    path: &'a str,
    family: &'static str,
}

impl Reader<'_> {
    fn optional(&self, key: &'static str) -> Result<Option<u32>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(self.missing(key, "a positive integer")),
            },
        }
    }

    fn required(&self, key: &'static str, example: &'static str) -> Result<u32, HfConfigError> {
        self.optional(key)?
            .ok_or_else(|| self.missing(key, example))
    }

    fn required_any(
        &self,
        keys: &[&'static str],
        example: &'static str,
    ) -> Result<u32, HfConfigError> {
        for key in keys {
            if let Some(n) = self.optional(key)? {
                return Ok(n);
            }
        }
        Err(self.missing(keys[0], example))
    }

    fn flag(&self, key: &str) -> Option<bool> {
        self.obj.get(key).and_then(Value::as_bool)
    }

    fn missing(&self, key: &'static str, example: &'static str) -> HfConfigError {
        HfConfigError::MissingKey {
            path: self.path.to_string(),
            key,
            family: self.family,
            example,
        }
    }

    /// tpsim's attention width is `hidden` (head_dim = hidden/heads, Megatron's convention); an
    /// explicit `head_dim` that disagrees (Gemma-7B: 16 × 256 = 4096 ≠ 3072, Qwen3-0.6B) cannot be
    /// represented, so it is refused rather than silently miscounted.
    fn check_head_dim(&self, model: &Model) -> Result<(), HfConfigError> {
        if let Some(head_dim) = self.optional("head_dim")?
            && u64::from(head_dim) * u64::from(model.heads) != u64::from(model.hidden)
        {
            return Err(HfConfigError::Unsupported {
                path: self.path.to_string(),
                message: format!(
                    "head_dim {head_dim} x {} heads = {} differs from hidden_size {}; tpsim assumes attention width = hidden_size (head_dim {}), so this model would be miscounted",
                    model.heads,
                    u64::from(head_dim) * u64::from(model.heads),
                    model.hidden,
                    model.hidden / model.heads.max(1)
                ),
            });
        }
        Ok(())
    }

    /// The activation decides nothing in the count once the gating is known, but an activation we
    /// do not recognise probably means a layout we do not either.
    fn check_activation(&self) -> Result<(), HfConfigError> {
        const KNOWN: &[&str] = &[
            "silu",
            "swish",
            "gelu",
            "gelu_new",
            "gelu_fast",
            "gelu_pytorch_tanh",
            "gelu_python",
            "relu",
        ];
        for key in ["hidden_act", "hidden_activation", "activation_function"] {
            if let Some(act) = self.obj.get(key).and_then(Value::as_str)
                && !KNOWN.contains(&act)
            {
                return Err(HfConfigError::Unsupported {
                    path: self.path.to_string(),
                    message: format!(
                        "{key} {act:?} is not one tpsim knows; known: {}",
                        KNOWN.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params_b(file: &str) -> f64 {
        load(&format!("{}/models/hf/{file}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .params()
            / 1e9
    }

    #[test]
    fn counts_match_published_sizes() {
        // Published totals: Meta's Llama 3 model card (8.03B, 70.6B); Mistral AI's 7.24B (HF
        // safetensors total 7,241,732,096); Qwen2.5 technical report Table 1 / model card (7.61B);
        // Qwen3-8B model card (8.2B); Gemma report Table 1 (2B: 2.51B incl. embeddings); GPT-2 small
        // 124M (HF count 124,439,808); Black et al. 2022, GPT-NeoX-20B §2.1 (20,554,567,680);
        // Falcon-7B (HF count 6,921,720,704).
        for (file, published_b, tolerance) in [
            ("llama-3-8b.json", 8.03, 0.003),
            ("llama-3-70b.json", 70.6, 0.003),
            ("mistral-7b-v0.1.json", 7.2417, 0.001),
            ("qwen2.5-7b.json", 7.6156, 0.001),
            ("qwen3-8b.json", 8.19, 0.005),
            ("gemma-2b.json", 2.506, 0.003),
            ("gpt2.json", 0.12444, 0.001),
            ("gpt-neox-20b.json", 20.5546, 0.001),
            ("falcon-7b.json", 6.9217, 0.001),
        ] {
            let ours = params_b(file);
            assert!(
                (ours / published_b - 1.0).abs() < tolerance,
                "{file}: ours {ours:.4}B vs published {published_b}B"
            );
        }
    }

    #[test]
    fn unknown_architecture_lists_supported_ones() {
        let err = parse(
            r#"{"model_type": "bert", "hidden_size": 768}"#,
            "c.json",
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("\"bert\""), "{err}");
        for family in SUPPORTED {
            assert!(err.contains(family), "{err}");
        }
    }

    #[test]
    fn missing_key_is_named() {
        let err = parse(
            r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}"#,
            "c.json",
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("num_hidden_layers"), "{err}");
    }

    #[test]
    fn disagreeing_head_dim_is_refused() {
        // Gemma-7B: 16 heads of 256 = 4096, hidden 3072.
        let err = parse(
            r#"{"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16, "head_dim": 256,
               "num_hidden_layers": 28, "intermediate_size": 24576, "vocab_size": 256000}"#,
            "c.json",
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("head_dim 256") && err.contains("3072"),
            "{err}"
        );
    }

    #[test]
    fn falcon_kv_heads_follow_the_architecture_switches() {
        let m = load(&format!(
            "{}/models/hf/falcon-7b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert_eq!((m.heads, m.kv_heads, m.ffn_hidden), (71, 1, 4 * 4544));
    }
}
