//! Hugging Face `config.json` → [`Model`]: the first stop of the data flow for users who live on the
//! Hub. Reads the keys `transformers` itself reads for each family (the `*Config` classes in
//! `transformers/models/<family>/configuration_<family>.py`, defaults included) and maps them onto
//! tpsim's shape. What the shape cannot say is documented per family below; each omission is a
//! per-layer vector (well under 0.01% of the parameters).

use serde_json::{Map, Value};

use crate::model::{Model, ModelError, Norm};

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
        "--hf-config {path}: the config has no \"model_type\" (nor \"architectures\") key, so its architecture is unknown; add \"model_type\": one of {supported} (or describe the shape with --layers/--hidden/--heads)"
    )]
    NoModelType { path: String, supported: String },
    #[error(
        "--hf-config {path}: key \"{key}\" is missing; a {family} config.json has it (e.g. \"{key}\": {example})"
    )]
    MissingKey {
        path: String,
        key: &'static str,
        family: &'static str,
        example: &'static str,
    },
    #[error(
        "--hf-config {path}: key \"{key}\" is {found}, which is not {rule}; correct it in the config"
    )]
    BadValue {
        path: String,
        key: &'static str,
        found: String,
        rule: &'static str,
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

/// Reads a `config.json` file. `seq_len` is the user's `--seq-len`, when given: it replaces the
/// config's `max_position_embeddings` (and must fit GPT-2's learned position table).
pub fn load(path: &str, seq_len: Option<u32>) -> Result<Model, HfConfigError> {
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
    parse(&text, path, name, seq_len)
}

/// Parses the text of a `config.json`; `path` is only used in messages, `seq_len` is `--seq-len`.
pub fn parse(
    text: &str,
    path: &str,
    name: &str,
    seq_len: Option<u32>,
) -> Result<Model, HfConfigError> {
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
    // No silent default family: a config that names no architecture is refused.
    if model_type.is_empty() {
        return Err(HfConfigError::NoModelType {
            path: path.to_string(),
            supported: SUPPORTED.join(", "),
        });
    }
    let unknown = || HfConfigError::UnknownArchitecture {
        path: path.to_string(),
        found: model_type.clone(),
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
                seq_len: reader.seq_len(seq_len)?,
                gated_mlp: true,
                linear_bias: false,
                tied_embeddings: reader
                    .flag("tie_word_embeddings")?
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
                seq_len: reader.gpt2_seq_len(seq_len)?,
                gated_mlp: false,
                linear_bias: true,
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(true),
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
                seq_len: reader.seq_len(seq_len)?,
                gated_mlp: false,
                linear_bias: true,
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(false),
                learned_position_embeddings: false,
                norm: Norm::Layernorm,
                // GPT-NeoX configs: hidden_dropout / attention_dropout 0 unless set.
                dropout: reader
                    .probability("hidden_dropout")?
                    .is_some_and(|p| p > 0.0),
            }
        }
        Family::Falcon => {
            let hidden = reader.required("hidden_size", "4544")?;
            let heads = reader.required_any(&["num_attention_heads", "n_head"], "71")?;
            let kv_heads = if reader.flag("new_decoder_architecture")?.unwrap_or(false) {
                reader.optional("num_kv_heads")?.unwrap_or(heads)
            } else if reader.flag("multi_query")?.unwrap_or(true) {
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
                seq_len: reader.seq_len(seq_len)?,
                gated_mlp: false,
                linear_bias: reader.flag("bias")?.unwrap_or(false),
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(true),
                learned_position_embeddings: false,
                norm: Norm::Layernorm,
                // Falcon configs: hidden_dropout 0.0, attention_dropout 0.0.
                dropout: false,
            }
        }
    };
    reader.check_activation()?;
    model
        .check()
        .map_err(|e| reader.shape_error(e, family, seq_len.is_some()))?;
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
    fn bad(&self, key: &'static str, v: &Value, rule: &'static str) -> HfConfigError {
        HfConfigError::BadValue {
            path: self.path.to_string(),
            key,
            found: v.to_string(),
            rule,
        }
    }

    fn optional(&self, key: &'static str) -> Result<Option<u32>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(self.bad(key, v, "a positive integer")),
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

    /// A JSON boolean; anything else under the key (`"yes"`, 1) is an error naming it.
    fn flag(&self, key: &'static str) -> Result<Option<bool>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.bad(key, v, "a JSON boolean (true or false)")),
        }
    }

    /// A dropout probability in [0, 1].
    fn probability(&self, key: &'static str) -> Result<Option<f64>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
                _ => Err(self.bad(key, v, "a probability between 0 and 1")),
            },
        }
    }

    /// The training sequence: `--seq-len` when given (the config's value is then not used, nor
    /// quoted), else `max_position_embeddings`. No default: the `*Config` classes' 2048 is a
    /// class default, not the model's length, so a config without the key needs `--seq-len`.
    fn seq_len(&self, given: Option<u32>) -> Result<u32, HfConfigError> {
        const KEY: &str = "max_position_embeddings";
        if let Some(s) = given {
            return Ok(s);
        }
        match self.obj.get(KEY) {
            None | Some(Value::Null) => Err(HfConfigError::Unsupported {
                path: self.path.to_string(),
                message: format!(
                    "key \"{KEY}\" is missing, so the training sequence length is unknown; pass --seq-len (e.g. --seq-len 4096)"
                ),
            }),
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => Ok(n),
                _ => Err(HfConfigError::Unsupported {
                    path: self.path.to_string(),
                    message: format!(
                        "key \"{KEY}\" is {v}, which is not a positive integer; pass --seq-len (e.g. --seq-len 4096) or correct it in the config"
                    ),
                }),
            },
        }
    }

    /// GPT-2's learned position table has `n_positions` rows (`GPT2Config` default 1024), so a
    /// sequence longer than that cannot be trained.
    fn gpt2_seq_len(&self, given: Option<u32>) -> Result<u32, HfConfigError> {
        let rows = self.optional("n_positions")?.unwrap_or(1024);
        match given {
            Some(s) if s > rows => Err(HfConfigError::Unsupported {
                path: self.path.to_string(),
                message: format!(
                    "--seq-len {s} is longer than the learned position table: \"n_positions\" is {rows} (one row per position); use --seq-len {rows} or less"
                ),
            }),
            Some(s) => Ok(s),
            None => Ok(rows),
        }
    }

    fn missing(&self, key: &'static str, example: &'static str) -> HfConfigError {
        HfConfigError::MissingKey {
            path: self.path.to_string(),
            key,
            family: self.family,
            example,
        }
    }

    /// The config key a shape field came from (the first of the family's names present).
    fn key_of(&self, field: &str, family: Family) -> &'static str {
        let candidates: &[&'static str] = match (field, family) {
            ("--layers", Family::Gpt2) => &["n_layer", "num_hidden_layers"],
            ("--layers", Family::Falcon) => &["num_hidden_layers", "n_layer"],
            ("--layers", _) => &["num_hidden_layers"],
            ("--hidden", Family::Gpt2) => &["n_embd", "hidden_size"],
            ("--hidden", _) => &["hidden_size"],
            ("--heads", Family::Gpt2) => &["n_head", "num_attention_heads"],
            ("--heads", Family::Falcon) => &["num_attention_heads", "n_head"],
            ("--heads", _) => &["num_attention_heads"],
            ("--kv-heads", Family::Falcon) => &["num_kv_heads"],
            ("--kv-heads", _) => &["num_key_value_heads"],
            ("--ffn-hidden", Family::Gpt2) => &["n_inner"],
            ("--ffn-hidden", Family::Falcon) => &["ffn_hidden_size"],
            ("--ffn-hidden", _) => &["intermediate_size"],
            ("--vocab", _) => &["vocab_size"],
            (_, Family::Gpt2) => &["n_positions"],
            _ => &["max_position_embeddings"],
        };
        candidates
            .iter()
            .copied()
            .find(|k| self.obj.contains_key(*k))
            .unwrap_or(candidates[0])
    }

    /// A shape the model check refuses, told in the config's keys (the user wrote no flags).
    fn shape_error(&self, e: ModelError, family: Family, seq_from_user: bool) -> HfConfigError {
        let message = match e {
            // The sequence came from --seq-len: the flag's own message quotes the user's value.
            ModelError::TooLarge { what, .. } | ModelError::Zero { what, .. }
                if what == "--seq-len" && seq_from_user =>
            {
                e.to_string()
            }
            ModelError::TooLarge { what, value, max } => {
                let key = self.key_of(what, family);
                let fix = if what == "--seq-len" {
                    "pass --seq-len to train on shorter sequences"
                } else {
                    "check the config"
                };
                format!(
                    "key \"{key}\" is {value}, larger than {max}, beyond any model trained; {fix}"
                )
            }
            ModelError::Zero { what, .. } => format!(
                "key \"{}\" is 0; it must be a positive integer",
                self.key_of(what, family)
            ),
            ModelError::HiddenNotDivisibleByHeads { hidden, heads, .. } => format!(
                "key \"{}\" {hidden} is not divisible by \"{}\" {heads}; the head dimension must be whole",
                self.key_of("--hidden", family),
                self.key_of("--heads", family)
            ),
            ModelError::KvHeadsNotDivisor { kv_heads, heads } => format!(
                "key \"{}\" {kv_heads} must divide \"{}\" {heads} (grouped-query attention shares each key/value head among heads/kv_heads query heads)",
                self.key_of("--kv-heads", family),
                self.key_of("--heads", family)
            ),
        };
        HfConfigError::Unsupported {
            path: self.path.to_string(),
            message,
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
        // Falcon-7B's config.json has no max_position_embeddings; it trained on 2048 tokens
        // (Penedo et al. 2023 / the model card), given here as --seq-len would be.
        let seq_len = file.starts_with("falcon").then_some(2048);
        load(
            &format!("{}/models/hf/{file}", env!("CARGO_MANIFEST_DIR")),
            seq_len,
        )
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
            None,
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
            None,
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
               "num_hidden_layers": 28, "intermediate_size": 24576, "vocab_size": 256000,
               "max_position_embeddings": 8192}"#,
            "c.json",
            "x",
            None,
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
        let m = load(
            &format!("{}/models/hf/falcon-7b.json", env!("CARGO_MANIFEST_DIR")),
            Some(2048),
        )
        .unwrap();
        assert_eq!((m.heads, m.kv_heads, m.ffn_hidden), (71, 1, 4 * 4544));
    }

    const LLAMA: &str = r#""model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256"#;

    fn llama_with(extra: &str, seq_len: Option<u32>) -> Result<Model, String> {
        parse(&format!("{{{LLAMA}{extra}}}"), "c.json", "x", seq_len).map_err(|e| e.to_string())
    }

    #[test]
    fn a_config_without_model_type_is_refused() {
        let err = parse(
            r#"{"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
               "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 4096}"#,
            "c.json",
            "x",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"model_type\"") && err.contains("llama, mistral"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_sequence_length_needs_seq_len() {
        let err = llama_with("", None).unwrap_err();
        assert!(
            err.contains("\"max_position_embeddings\" is missing")
                && err.contains("pass --seq-len"),
            "{err}"
        );
        assert_eq!(llama_with("", Some(4096)).unwrap().seq_len, 4096);
    }

    #[test]
    fn the_users_seq_len_replaces_an_out_of_range_config_value() {
        // 2^30 positions: beyond tpsim's bound; with --seq-len it is not used, nor quoted.
        let huge = r#", "max_position_embeddings": 1073741824"#;
        let err = llama_with(huge, None).unwrap_err();
        assert!(
            err.contains("\"max_position_embeddings\" is 1073741824") && err.contains("--seq-len"),
            "{err}"
        );
        assert!(!err.contains("--seq-len 1073741824"), "{err}");
        assert_eq!(llama_with(huge, Some(8192)).unwrap().seq_len, 8192);
        let zero = r#", "max_position_embeddings": 0"#;
        assert_eq!(llama_with(zero, Some(8192)).unwrap().seq_len, 8192);
    }

    #[test]
    fn a_non_boolean_tie_word_embeddings_is_named() {
        let err = llama_with(
            r#", "max_position_embeddings": 8192, "tie_word_embeddings": "yes""#,
            None,
        )
        .unwrap_err();
        assert!(
            err.contains("\"tie_word_embeddings\" is \"yes\"") && err.contains("boolean"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_the_key_not_a_placeholder() {
        let err = llama_with(
            r#", "max_position_embeddings": 8192, "num_key_value_heads": -8"#,
            None,
        )
        .unwrap_err();
        assert!(
            err.contains("\"num_key_value_heads\" is -8") && !err.contains(": a positive integer)"),
            "{err}"
        );
        let err = llama_with(
            r#", "max_position_embeddings": 8192, "num_key_value_heads": 5"#,
            None,
        )
        .unwrap_err();
        assert!(
            err.contains("\"num_key_value_heads\" 5") && !err.contains("--kv-heads"),
            "{err}"
        );
    }

    #[test]
    fn gpt2_sequence_cannot_outgrow_its_position_table() {
        let path = format!("{}/models/hf/gpt2.json", env!("CARGO_MANIFEST_DIR"));
        let err = load(&path, Some(2048)).unwrap_err().to_string();
        assert!(
            err.contains("--seq-len 2048") && err.contains("\"n_positions\" is 1024"),
            "{err}"
        );
        assert_eq!(load(&path, Some(512)).unwrap().seq_len, 512);
        assert_eq!(load(&path, None).unwrap().seq_len, 1024);
    }
}
