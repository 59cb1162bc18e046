//! Hugging Face `config.json` → [`Model`]: the first stop of the data flow for users who live on the
//! Hub. Reads the keys `transformers` itself reads for each family (the `*Config` classes in
//! `transformers/models/<family>/configuration_<family>.py`, defaults included) and maps them onto
//! tpsim's shape. What the shape cannot say is documented per family below; each omission is a
//! per-layer vector (well under 0.01% of the parameters).

use serde_json::{Map, Value};

use crate::model::{Mla, Model, ModelError, Moe, Norm, PositionEmbedding};

/// `model_type` values we read, in the order the error message lists them.
pub const SUPPORTED: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gpt2",
    "gpt_neox",
    "falcon",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
    "kimi_k2",
    "gpt_oss",
    "glm4_moe",
    "nemotron_h",
];

/// The training sequence length tpsim uses when `--seq-len` is not given: 4,096 tokens, the
/// pre-training length of Qwen3 (Qwen3 technical report §3.2, stages 1–2), DeepSeek-V3 (report §4.2)
/// and GPT-OSS (config `initial_context_length` 4096), and of the Megatron-Bridge MoE recipes in
/// validation/modern_runs.yaml. A config's `max_position_embeddings` is the longest context the
/// model serves after long-context extension (Qwen3 40,960, Mistral 32,768), not a training length.
pub const DEFAULT_TRAINING_SEQ_LEN: u32 = 4096;

/// Architecture families with their parameter layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama, Mistral, Qwen2, Qwen3 and their MoE variants (Mixtral, Qwen2-MoE, Qwen3-MoE): RMSNorm,
    /// gated MLP (SwiGLU), RoPE; biases per model type (Qwen2: q/k/v; Llama: `attention_bias`,
    /// `mlp_bias`), Qwen3's per-head q/k norms.
    LlamaLike,
    /// Gemma: as Llama with a GeLU-gated MLP (GeGLU: gate, up, down — the same three matrices as
    /// SwiGLU, so the same count), head_dim 256 and tied embeddings by default.
    Gemma,
    /// GPT-2: LayerNorm, biases, GeLU MLP of 4h (`n_inner` null), learned positions, tied output.
    Gpt2,
    /// GPT-NeoX / Pythia: LayerNorm, biases, GeLU MLP, rotary, separate `embed_out` (untied).
    GptNeox,
    /// Falcon: LayerNorm, no biases (`bias: false`), GeLU MLP of 4h, rotary, tied output;
    /// multi-query attention unless `new_decoder_architecture` gives `num_kv_heads`. The 7B
    /// parallel block has one LayerNorm per layer (`input_layernorm`), the new architecture
    /// (40B, 180B) two (`ln_attn`, `ln_mlp`).
    Falcon,
    /// DeepSeek-V3: multi-head latent attention and MoE with a shared expert after
    /// `first_k_dense_replace` dense layers (`DeepseekV3Config`), and its multi-token-prediction
    /// module (`num_nextn_predict_layers`, 1 in the published config) as `mtp_layers`.
    DeepseekV3,
    /// GPT-OSS: MoE in every layer with biases on every linear layer and on the router
    /// (`GptOssConfig`, `attention_bias` true), and the 128-token sliding window of every other
    /// layer. The per-head attention sinks (64 numbers per layer) are left out.
    GptOss,
    /// GLM-4.5 / GLM-4.6 (`Glm4MoeConfig`): grouped-query attention with q/k/v biases and, in
    /// GLM-4.5, per-head q/k norms; DeepSeek-V3's MoE block (routed and shared experts after
    /// `first_k_dense_replace` dense layers) and its multi-token-prediction layers.
    Glm4Moe,
    /// Nemotron-H and Nemotron 3 (NVIDIA's `NemotronHConfig`): a hybrid Mamba-Transformer stack
    /// whose `hybrid_override_pattern` gives each layer one block (`model::hybrid`).
    NemotronH,
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
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe" => {
            Some(Family::LlamaLike)
        }
        "gemma" => Some(Family::Gemma),
        "gpt2" => Some(Family::Gpt2),
        "gpt_neox" => Some(Family::GptNeox),
        // Falcon's first Hub uploads used the remote-code names.
        "falcon" | "RefinedWeb" | "RefinedWebModel" => Some(Family::Falcon),
        // Kimi K2 ships DeepSeek-V3's architecture under its own name (`architectures`
        // DeepseekV3ForCausalLM, remote code `configuration_deepseek.py`).
        "deepseek_v3" | "kimi_k2" => Some(Family::DeepseekV3),
        "gpt_oss" => Some(Family::GptOss),
        "glm4_moe" => Some(Family::Glm4Moe),
        "nemotron_h" => Some(Family::NemotronH),
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
        "MixtralForCausalLM" => "mixtral",
        "Qwen2MoeForCausalLM" => "qwen2_moe",
        "Qwen3MoeForCausalLM" => "qwen3_moe",
        "DeepseekV3ForCausalLM" => "deepseek_v3",
        "GptOssForCausalLM" => "gpt_oss",
        "Glm4MoeForCausalLM" => "glm4_moe",
        "NemotronHForCausalLM" => "nemotron_h",
        _ => return None,
    })
}

/// A config whose `architectures[0]` is another supported model type than its `model_type`
/// (`"model_type": "llama"` over `["MixtralForCausalLM"]`) is refused: the keys are read as
/// `model_type` says (transformers' `AutoConfig` does too), so the other architecture's keys (the
/// experts, a sliding window) would be dropped without a word. Names of one architecture agree
/// (Kimi K2's `kimi_k2` is DeepseekV3ForCausalLM; Falcon's remote-code names are falcon).
fn check_architecture_agrees(
    path: &str,
    architecture: &str,
    model_type: Option<&String>,
) -> Result<(), HfConfigError> {
    let (Some(model_type), Some(named)) = (model_type, model_type_of_architecture(architecture))
    else {
        return Ok(());
    };
    let agree = named == model_type.as_str()
        || matches!(
            (named, model_type.as_str()),
            ("deepseek_v3", "kimi_k2") | ("falcon", "RefinedWeb" | "RefinedWebModel")
        );
    if agree {
        return Ok(());
    }
    Err(HfConfigError::Unsupported {
        path: path.to_string(),
        message: format!(
            "\"model_type\": {model_type:?} and \"architectures\": [{architecture:?}] name different models ({architecture} is model_type {named:?}), and tpsim would read the keys as {model_type:?} and drop what only {named:?} has; correct one of them so they agree"
        ),
    })
}

/// A model read from a `config.json`, with a note on where its training length came from when
/// `--seq-len` was not given (printed with the model's origin).
#[derive(Debug, Clone, PartialEq)]
pub struct HfModel {
    pub model: Model,
    pub seq_len_note: Option<String>,
}

/// Reads a `config.json` file. `seq_len` is the user's `--seq-len`, when given; otherwise the model
/// trains on [`DEFAULT_TRAINING_SEQ_LEN`] tokens (fewer when the config's position limit is lower).
pub fn load(path: &str, seq_len: Option<u32>) -> Result<HfModel, HfConfigError> {
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
    parse_with_note(&text, path, name, seq_len)
}

/// Parses the text of a `config.json`; `path` is only used in messages, `seq_len` is `--seq-len`.
pub fn parse(
    text: &str,
    path: &str,
    name: &str,
    seq_len: Option<u32>,
) -> Result<Model, HfConfigError> {
    parse_with_note(text, path, name, seq_len).map(|m| m.model)
}

/// A JSON document read only to find a key one object gives twice (at any depth): serde_json's
/// `Value`, like Python's `json.load`, keeps the last of them silently.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(UniqueKeys)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let shown: String = key.chars().take(80).collect();
                return Err(serde::de::Error::custom(format!(
                    "key {shown:?} is given twice"
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

/// Per-`model_type` defaults of the `*Config` classes in transformers, for keys a config.json may
/// leave out: (num_key_value_heads, head_dim, tie_word_embeddings). `None` for the KV heads means
/// "= num_attention_heads"; `None` for head_dim means hidden_size / num_attention_heads. Each as
/// the class's fields read in transformers' `models/<type>/configuration_<type>.py`.
fn class_defaults(model_type: &str) -> (Option<u32>, Option<u32>, bool) {
    match model_type {
        // configuration_mistral.py MistralConfig(num_key_value_heads=8, head_dim=None,
        // tie_word_embeddings=False); configuration_mixtral.py MixtralConfig the same.
        "mistral" | "mixtral" => (Some(8), None, false),
        // configuration_qwen2.py Qwen2Config(num_key_value_heads=32, tie_word_embeddings=False;
        // no head_dim field).
        "qwen2" => (Some(32), None, false),
        // configuration_qwen3.py Qwen3Config(num_key_value_heads=32, head_dim=128,
        // tie_word_embeddings=False) (was read as 8 KV heads and tied embeddings).
        "qwen3" => (Some(32), Some(128), false),
        // configuration_qwen2_moe.py Qwen2MoeConfig(num_key_value_heads=16,
        // tie_word_embeddings=False); configuration_qwen3_moe.py Qwen3MoeConfig(
        // num_key_value_heads=4, tie_word_embeddings=False); neither has a head_dim field.
        "qwen2_moe" => (Some(16), None, false),
        "qwen3_moe" => (Some(4), None, false),
        // configuration_gemma.py GemmaConfig(num_key_value_heads=16, head_dim=256,
        // tie_word_embeddings=True).
        "gemma" => (Some(16), Some(256), true),
        // configuration_llama.py LlamaConfig(num_key_value_heads=None -> num_attention_heads,
        // head_dim=None -> hidden_size // num_attention_heads, tie_word_embeddings=False).
        _ => (None, None, false),
    }
}

/// Whether the `*Config` class reads `"num_key_value_heads": null` as the attention heads (`if
/// self.num_key_value_heads is None: self.num_key_value_heads = self.num_attention_heads` in
/// LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config, GptOssConfig). GemmaConfig,
/// Qwen2MoeConfig and Qwen3MoeConfig have no such rule (configuration_gemma.py,
/// configuration_qwen2_moe.py, configuration_qwen3_moe.py): None stays None there, and the model
/// cannot be built.
fn null_kv_heads_mean_heads(model_type: &str) -> bool {
    !matches!(model_type, "gemma" | "qwen2_moe" | "qwen3_moe")
}

pub fn parse_with_note(
    text: &str,
    path: &str,
    name: &str,
    seq_len: Option<u32>,
) -> Result<HfModel, HfConfigError> {
    let value: Value = serde_json::from_str(text).map_err(|e| HfConfigError::Json {
        path: path.to_string(),
        // Python's json module refuses a byte-order mark too ("Unexpected UTF-8 BOM").
        message: if text.starts_with('\u{feff}') {
            "it starts with a UTF-8 byte-order mark, which JSON does not allow and transformers' json.load refuses; save it as UTF-8 without BOM".to_string()
        } else {
            e.to_string()
        },
    })?;
    if let Err(e) = serde_json::from_str::<UniqueKeys>(text) {
        return Err(HfConfigError::Unsupported {
            path: path.to_string(),
            message: format!(
                "{e}; transformers (Python's json module) keeps the last of them without a word, so which one is meant is unclear; keep one"
            ),
        });
    }
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
    // A model_type that is there but not a string is an error, not a missing key.
    if let Some(other) = obj.get("model_type").filter(|v| !v.is_string()) {
        let shown: String = written(text, "model_type", other)
            .chars()
            .take(80)
            .collect();
        return Err(HfConfigError::Unsupported {
            path: path.to_string(),
            message: format!(
                "\"model_type\": {shown} must be a string naming the architecture, e.g. \"llama\""
            ),
        });
    }
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
    check_architecture_agrees(
        path,
        architecture,
        obj.get("model_type").and(Some(&model_type)),
    )?;
    let reader = Reader {
        obj,
        text,
        path,
        family: family_name(family),
    };
    let (training_seq_len, seq_len_note) = reader.seq_len(seq_len, family)?;
    let mut model = match family {
        Family::LlamaLike | Family::Gemma => {
            reader.llama_like(&model_type, name, training_seq_len)?
        }
        Family::DeepseekV3 => reader.deepseek_v3(name, training_seq_len)?,
        Family::GptOss => reader.gpt_oss(name, training_seq_len)?,
        Family::Glm4Moe => reader.glm4_moe(name, training_seq_len)?,
        Family::NemotronH => reader.nemotron_h(name, training_seq_len)?,
        Family::Gpt2 => {
            let hidden = reader.required_any(&["n_embd", "hidden_size"], "768")?;
            let heads = reader.required_any(&["n_head", "num_attention_heads"], "12")?;
            Model {
                rotary_base: None,
                hybrid: None,
                name: name.to_string(),
                layers: reader.required_any(&["n_layer", "num_hidden_layers"], "12")?,
                hidden,
                heads,
                kv_heads: heads,
                head_dim: hidden / heads,
                ffn_hidden: reader.optional("n_inner")?.unwrap_or(4 * hidden),
                vocab: reader.required("vocab_size", "50257")?,
                seq_len: training_seq_len,
                gated_mlp: false,
                linear_bias: true,
                qkv_bias: false,
                qk_norm: false,
                shared_layer_norm: false,
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(true),
                position_embedding: PositionEmbedding::LearnedAbsolute,
                rotary_percent: reader.no_rotary_share(
                    "1 or absent: GPT-2 learns absolute positions and rotates nothing",
                )?,
                norm: Norm::Layernorm,
                // GPT2Config: resid_pdrop (after attention and MLP), embd_pdrop and attn_pdrop,
                // 0.1 each by default.
                dropout: reader.dropout(
                    &[
                        ("resid_pdrop", 0.1),
                        ("embd_pdrop", 0.1),
                        ("attn_pdrop", 0.1),
                    ],
                    false,
                )?,
                mla: None,
                moe: None,
                mtp_layers: 0,
                attention_window: None,
            }
        }
        Family::GptNeox => {
            let heads = reader.required("num_attention_heads", "64")?;
            let hidden = reader.required("hidden_size", "6144")?;
            Model {
                rotary_base: None,
                hybrid: None,
                name: name.to_string(),
                layers: reader.required("num_hidden_layers", "44")?,
                hidden,
                heads,
                kv_heads: heads,
                head_dim: hidden / heads,
                ffn_hidden: reader.required("intermediate_size", "24576")?,
                vocab: reader.required("vocab_size", "50432")?,
                seq_len: training_seq_len,
                gated_mlp: false,
                linear_bias: true,
                qkv_bias: false,
                qk_norm: false,
                shared_layer_norm: false,
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(false),
                position_embedding: reader.rope(false)?,
                // GPTNeoXConfig: rotary_pct=0.25 by default; configs saved by later transformers
                // carry it as partial_rotary_factor (read where rotary_pct is absent; refused where
                // the two disagree, so that neither is dropped).
                rotary_percent: match (
                    reader.obj.get("rotary_pct").filter(|v| !v.is_null()),
                    reader
                        .obj
                        .get("partial_rotary_factor")
                        .filter(|v| !v.is_null()),
                ) {
                    (None, Some(_)) => reader.rotary_share("partial_rotary_factor", 0.25)?,
                    (Some(pct), Some(factor)) if pct.as_f64() != factor.as_f64() => {
                        return Err(reader.bad(
                            "partial_rotary_factor",
                            factor,
                            "the share \"rotary_pct\" gives (GPT-NeoX rotates one share of each head), or absent",
                        ));
                    }
                    _ => reader.rotary_share("rotary_pct", 0.25)?,
                },
                norm: Norm::Layernorm,
                // GPTNeoXConfig: hidden_dropout / attention_dropout 0.0 unless set.
                dropout: reader.dropout(
                    &[("hidden_dropout", 0.0), ("attention_dropout", 0.0)],
                    false,
                )?,
                mla: None,
                moe: None,
                mtp_layers: 0,
                attention_window: None,
            }
        }
        Family::Falcon => {
            let hidden = reader.required("hidden_size", "4544")?;
            let heads = reader.required_any(&["num_attention_heads", "n_head"], "71")?;
            let new_architecture = reader.flag("new_decoder_architecture")?.unwrap_or(false);
            let kv_heads = if new_architecture {
                reader.optional("num_kv_heads")?.unwrap_or(heads)
            } else if reader.flag("multi_query")?.unwrap_or(true) {
                1
            } else {
                heads
            };
            // FalconDecoderLayer: the parallel block without the new architecture reads one
            // `input_layernorm`; the new architecture has `ln_attn` and `ln_mlp`.
            let parallel = reader.flag("parallel_attn")?.unwrap_or(true);
            let alibi = reader.flag("alibi")?.unwrap_or(false);
            Model {
                rotary_base: None,
                hybrid: None,
                name: name.to_string(),
                layers: reader.required_any(&["num_hidden_layers", "n_layer"], "32")?,
                hidden,
                heads,
                kv_heads,
                head_dim: hidden / heads,
                ffn_hidden: reader.optional("ffn_hidden_size")?.unwrap_or(4 * hidden),
                vocab: reader.required("vocab_size", "65024")?,
                seq_len: training_seq_len,
                gated_mlp: false,
                linear_bias: reader.flag("bias")?.unwrap_or(false),
                qkv_bias: false,
                qk_norm: false,
                shared_layer_norm: parallel && !new_architecture,
                tied_embeddings: reader.flag("tie_word_embeddings")?.unwrap_or(true),
                // FalconConfig `alibi` (default false): ALiBi biases instead of rotary embeddings.
                position_embedding: if alibi {
                    PositionEmbedding::Alibi
                } else {
                    reader.rope(false)?
                },
                // transformers' rope setup reads partial_rotary_factor where a config has it.
                rotary_percent: if alibi {
                    reader.no_rotary_share(
                        "1 or absent: with \"alibi\": true Falcon biases attention scores and rotates nothing",
                    )?
                } else {
                    reader.rotary_share("partial_rotary_factor", 1.0)?
                },
                norm: Norm::Layernorm,
                // FalconConfig: hidden_dropout 0.0, attention_dropout 0.0.
                dropout: reader.dropout(
                    &[("hidden_dropout", 0.0), ("attention_dropout", 0.0)],
                    false,
                )?,
                mla: None,
                moe: None,
                mtp_layers: 0,
                attention_window: None,
            }
        }
    };
    reader.check_activation()?;
    if model.position_embedding.is_rotary() {
        model.rotary_base = reader.rope_theta()?;
    }
    model
        .check()
        .map_err(|e| reader.shape_error(e, family, seq_len.is_some()))?;
    Ok(HfModel {
        model,
        seq_len_note,
    })
}

fn family_name(family: Family) -> &'static str {
    match family {
        Family::LlamaLike => "Llama/Mistral/Qwen",
        Family::Gemma => "Gemma",
        Family::Gpt2 => "GPT-2",
        Family::GptNeox => "GPT-NeoX",
        Family::Falcon => "Falcon",
        Family::DeepseekV3 => "DeepSeek-V3",
        Family::GptOss => "GPT-OSS",
        Family::Glm4Moe => "GLM-4.5",
        Family::NemotronH => "Nemotron-H",
    }
}

/// The number under the key `key` as the config's text writes it (`1e30`, `1E3`), so a message
/// quotes what the user wrote rather than serde's rendering of it (`1e+30`, `1000.0`); anything
/// else, or a number not found as written, is rendered by serde.
fn written(text: &str, key: &str, v: &Value) -> String {
    if v.is_number() {
        let quoted = format!("\"{key}\"");
        let mut rest = text;
        while let Some(at) = rest.find(&quoted) {
            rest = &rest[at + quoted.len()..];
            let Some(value) = rest.trim_start().strip_prefix(':') else {
                continue;
            };
            let value = value.trim_start();
            let end = value
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
                .unwrap_or(value.len());
            let token = &value[..end];
            if serde_json::from_str::<Value>(token).ok().as_ref() == Some(v) {
                return token.to_string();
            }
        }
    }
    v.to_string()
}

struct Reader<'a> {
    obj: &'a Map<String, Value>,
    /// The config as written, for quoting its numbers ([`written`]).
    text: &'a str,
    path: &'a str,
    family: &'static str,
}

impl Reader<'_> {
    fn bad(&self, key: &'static str, v: &Value, rule: &'static str) -> HfConfigError {
        HfConfigError::BadValue {
            path: self.path.to_string(),
            key,
            found: written(self.text, key, v),
            rule,
        }
    }

    fn optional(&self, key: &'static str) -> Result<Option<u32>, HfConfigError> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().map(u32::try_from) {
                Some(Ok(n)) if n > 0 => Ok(Some(n)),
                Some(Err(_)) => Err(self.too_large(key, v)),
                _ => Err(self.bad(key, v, "a positive integer")),
            },
        }
    }

    /// A count past what tpsim reads (u32), named as too large rather than as not a count.
    fn too_large(&self, key: &'static str, v: &Value) -> HfConfigError {
        self.unsupported(format!(
            "key \"{key}\" is {}, which is too large: tpsim reads counts up to {} (and no model trained comes near that); check the config",
            written(self.text, key, v),
            u32::MAX
        ))
    }

    /// A key whose `*Config` class default applies when the key is absent. `null` is refused: the
    /// class has no rule for None there (it would build no model, or fail its type check), and
    /// reading it as the default would be a guess.
    fn class_default(&self, key: &'static str, default: u32) -> Result<u32, HfConfigError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(Value::Null) => Err(self.null_refused(key, default)),
            Some(_) => Ok(self.optional(key)?.unwrap_or(default)),
        }
    }

    fn null_refused(&self, key: &'static str, default: u32) -> HfConfigError {
        self.unsupported(format!(
            "key \"{key}\" is null, which transformers' config class reads as no value here (its default is {default}); write the number, or remove the key for the default"
        ))
    }

    /// The key-value heads as the `*Config` classes set them: the class default when the key is
    /// absent, and for `null` the attention heads where the class has that rule
    /// ([`null_kv_heads_mean_heads`]); elsewhere `null` is refused.
    fn kv_heads(
        &self,
        class_default: Option<u32>,
        heads: u32,
        null_means_heads: bool,
    ) -> Result<u32, HfConfigError> {
        const KEY: &str = "num_key_value_heads";
        match self.obj.get(KEY) {
            None => Ok(class_default.unwrap_or(heads)),
            Some(Value::Null) if null_means_heads => Ok(heads),
            Some(Value::Null) => Err(self.null_refused(KEY, class_default.unwrap_or(heads))),
            Some(_) => Ok(self.optional(KEY)?.unwrap_or(heads)),
        }
    }

    /// The head width: the class default when the key is absent, hidden / heads for `null` where
    /// the class computes it so (`null_computes`: `head_dim if head_dim is not None else
    /// hidden_size // num_attention_heads` in LlamaConfig, MistralConfig, MixtralConfig, whose
    /// default is None, and GptOssConfig, whose default is 64), and refused where the class keeps
    /// a None it has no rule for (Qwen3Config 128, GemmaConfig 256).
    fn head_dim(
        &self,
        class_default: Option<u32>,
        null_computes: bool,
        hidden: u32,
        heads: u32,
    ) -> Result<u32, HfConfigError> {
        const KEY: &str = "head_dim";
        let computed = hidden / heads.max(1);
        match (self.obj.get(KEY), class_default) {
            (None, default) => Ok(default.unwrap_or(computed)),
            (Some(Value::Null), None) => Ok(computed),
            (Some(Value::Null), Some(_)) if null_computes => Ok(computed),
            (Some(Value::Null), Some(default)) => Err(self.null_refused(KEY, default)),
            (Some(_), _) => Ok(self.optional(KEY)?.unwrap_or(computed)),
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

    /// GPT-OSS's clamp limit, `swiglu_limit` (`GptOssConfig` default 7.0 when the key is absent).
    /// transformers' `GptOssExperts` clamps without a condition (`gate.clamp(min=None,
    /// max=self.limit)`, `up.clamp(min=-self.limit, max=self.limit)`; releases that hard-code
    /// `self.limit = 7.0` ignore the key), so `null` is no "no clamp": torch refuses a clamp with
    /// neither bound, and it is refused here with the value to write.
    fn swiglu_limit(&self) -> Result<crate::model::GluClampLimit, HfConfigError> {
        const KEY: &str = "swiglu_limit";
        match self.obj.get(KEY) {
            None => Ok(crate::model::GluClampLimit::GPT_OSS),
            Some(Value::Null) => Err(self.unsupported(format!(
                "key \"{KEY}\" is null, and transformers' GptOssExperts clamps every expert's gate and linear half at this limit without a condition (torch's clamp refuses a null bound), so null gives no model to read; write the limit, \"{KEY}\": 7.0 as gpt-oss-20b and gpt-oss-120b ship it, or remove the key for that default"
            ))),
            Some(v) => v
                .as_f64()
                .and_then(crate::model::GluClampLimit::new)
                .ok_or_else(|| {
                    self.bad(
                        KEY,
                        v,
                        "a positive, finite number (the gate is clamped from above and the linear half to [-limit, limit]; gpt-oss ships 7.0)",
                    )
                }),
        }
    }

    /// The share of each head the rotary embedding rotates, from `key` (`partial_rotary_factor`;
    /// GPT-NeoX's `rotary_pct`), or the config class's `default` when absent or null; `None` for
    /// the whole head (`Model::rotary_percent`).
    fn rotary_share(&self, key: &'static str, default: f64) -> Result<Option<f64>, HfConfigError> {
        let share = match self.obj.get(key) {
            None | Some(Value::Null) => default,
            Some(v) => match v.as_f64() {
                Some(p) if p > 0.0 && p <= 1.0 => p,
                _ => {
                    return Err(self.bad(
                        key,
                        v,
                        "a share of each head in (0, 1] (the rotary embedding rotates that part of every query and key head; GPT-NeoX ships 0.25, GLM 0.5)",
                    ));
                }
            },
        };
        Ok((share < 1.0).then_some(share))
    }

    /// The rotary base θ (`Model::rotary_base`): `rope_theta` at the top level (transformers 4),
    /// inside `rope_parameters` (transformers 5 moves it there), or GPT-NeoX's `rotary_emb_base`;
    /// `None` when absent, null or the frameworks' default 10000. A value Megatron-LM's integer
    /// `--rotary-base` cannot take is refused, naming the key.
    fn rope_theta(&self) -> Result<Option<f64>, HfConfigError> {
        let nested = self
            .obj
            .get("rope_parameters")
            .and_then(Value::as_object)
            .and_then(|fields| fields.get("rope_theta"));
        let (key, value) = match (
            self.obj.get("rope_theta"),
            nested,
            self.obj.get("rotary_emb_base"),
        ) {
            (Some(v), _, _) if !v.is_null() => ("rope_theta", v),
            (_, Some(v), _) if !v.is_null() => ("rope_parameters.rope_theta", v),
            (_, _, Some(v)) if !v.is_null() => ("rotary_emb_base", v),
            _ => return Ok(None),
        };
        match value.as_f64() {
            Some(base) if base.is_finite() && base >= 1.0 && base.fract() == 0.0 && base <= 1e15 => {
                Ok((base != crate::model::DEFAULT_ROTARY_BASE).then_some(base))
            }
            _ => Err(self.bad(
                key,
                value,
                "a whole number from 1 up, the base of the rotary frequencies (Llama 3 ships 500000.0; Megatron-LM's --rotary-base takes an integer)",
            )),
        }
    }

    /// A `partial_rotary_factor` in a config whose model rotates no share of its heads that the
    /// key could set (`rule` says why): refused unless absent, null or 1, never dropped.
    fn no_rotary_share(&self, rule: &'static str) -> Result<Option<f64>, HfConfigError> {
        let key = "partial_rotary_factor";
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if v.as_f64() == Some(1.0) => Ok(None),
            Some(v) => Err(self.bad(key, v, rule)),
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

    /// Dropout as tpsim models it: one switch for the dropout after attention and MLP and the
    /// attention dropout together (Megatron's `--hidden-dropout` and `--attention-dropout`;
    /// `Model::dropout`, which keeps the masks and runs the kernels), from the config's
    /// probabilities `keys`, each with its `*Config` class default when absent (or null). On when
    /// every one is positive, off when every one is 0; a mix is refused, since either reading
    /// prices, and an emitted configuration trains, another model than the config's. A family
    /// whose blocks have no hidden dropout (the Llama-style `*Config` classes read only
    /// `attention_dropout`, default 0.0, in their attention) passes `no_hidden_dropout`: there
    /// any positive value is such a mix.
    fn dropout(
        &self,
        keys: &[(&'static str, f64)],
        no_hidden_dropout: bool,
    ) -> Result<bool, HfConfigError> {
        let mut read = Vec::with_capacity(keys.len());
        for &(key, default) in keys {
            read.push((key, self.probability(key)?.unwrap_or(default)));
        }
        let on = read.iter().filter(|(_, p)| *p > 0.0).count();
        if on == 0 {
            return Ok(false);
        }
        if on == read.len() && !no_hidden_dropout {
            return Ok(true);
        }
        let said: Vec<String> = read
            .iter()
            .map(
                |(key, p)| match self.obj.get(*key).filter(|v| !v.is_null()) {
                    Some(v) => format!("\"{key}\" {}", written(self.text, key, v)),
                    None => format!("\"{key}\" {p} (the class default)"),
                },
            )
            .collect();
        let rule = if no_hidden_dropout {
            format!(
                "the {} blocks have no other dropout (none after attention and MLP), and tpsim models dropout as one switch for the hidden and attention dropouts together (Megatron's --hidden-dropout and --attention-dropout)",
                self.family
            )
        } else {
            "tpsim models dropout as one switch for all of them (Megatron's --hidden-dropout and --attention-dropout together)".to_string()
        };
        let said = match said.split_last() {
            Some((last, rest)) if !rest.is_empty() => {
                format!("{} and {last} differ", rest.join(", "))
            }
            _ => said.join(""),
        };
        Err(self.unsupported(format!(
            "{said}: {rule}, so it would price, and an emitted configuration would train, other dropout than the config's; set {} to 0.0{}",
            if read.len() == 1 { "it" } else { "them all" },
            if no_hidden_dropout {
                ""
            } else {
                " or all above 0"
            }
        )))
    }

    /// The rotary embedding as the config's `rope_scaling` (transformers' key; `rope_parameters`
    /// in transformers 5) says it runs. The scaling types transformers knows
    /// (`modeling_rope_utils.ROPE_INIT_FUNCTIONS`: default, linear, dynamic, yarn, longrope,
    /// llama3) change only the frequencies, so each is `rope` to the kernels, except YaRN:
    /// Megatron-Bridge builds a GPT model whose config says `"rope_type": "yarn"` with
    /// `position_embedding_type = "yarn"` (`model_bridge.py`, "For GPT providers:
    /// rope_type=="yarn" → "yarn""), which it, like Megatron-LM's arguments, runs without RoPE
    /// fusion (`fusions.validate_rope_fusion_compatibility`). `yarn_kept_as_rope` is for the
    /// families whose YaRN tpsim prices as `rope`: latent attention (Megatron-Bridge keeps MLA
    /// models on "rope" and passes the YaRN factors to MLA's own rotary embedding) and GPT-OSS
    /// (priced as its bundled model, without its YaRN; `--emit megatron` says so). A
    /// `rope_scaling` that is not an object, or names no type or one transformers does not
    /// know, builds no model in transformers and is refused.
    fn rope(&self, yarn_kept_as_rope: bool) -> Result<PositionEmbedding, HfConfigError> {
        let (key, value) = match (
            self.obj.get("rope_scaling"),
            self.obj.get("rope_parameters"),
        ) {
            (Some(v), _) if !v.is_null() => ("rope_scaling", v),
            (_, Some(v)) if !v.is_null() => ("rope_parameters", v),
            _ => return Ok(PositionEmbedding::Rope),
        };
        let Some(fields) = value.as_object() else {
            return Err(self.unsupported(format!(
                "key \"{key}\" is {}, which is not an object; write it as transformers does, e.g. \"{key}\": {{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}}, or remove it for plain RoPE",
                value.to_string().chars().take(80).collect::<String>()
            )));
        };
        if fields.is_empty() {
            return Ok(PositionEmbedding::Rope);
        }
        const KNOWN: &[&str] = &["default", "linear", "dynamic", "yarn", "longrope", "llama3"];
        let kind = fields.get("rope_type").or_else(|| fields.get("type"));
        match kind.and_then(Value::as_str) {
            Some("yarn") if !yarn_kept_as_rope => Ok(PositionEmbedding::Yarn),
            Some(known) if KNOWN.contains(&known) => Ok(PositionEmbedding::Rope),
            _ => Err(self.unsupported(format!(
                "key \"{key}\" has {}, which is not a RoPE scaling type transformers knows; give \"rope_type\" one of {} (e.g. \"rope_type\": \"yarn\"), or remove \"{key}\" for plain RoPE",
                match kind {
                    Some(k) => format!("\"rope_type\" {}", k.to_string().chars().take(80).collect::<String>()),
                    None => "no \"rope_type\" (nor \"type\")".to_string(),
                },
                KNOWN.join(", ")
            ))),
        }
    }

    /// A non-negative integer with a default (`decoder_sparse_step`, `first_k_dense_replace`).
    fn count_or(&self, key: &'static str, default: u32) -> Result<u32, HfConfigError> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(Value::Null) => Err(self.null_refused(key, default)),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.bad(key, v, "a non-negative integer")),
        }
    }

    /// The shared experts' width, `count` of `width` each (DeepSeek's and GLM's `n_shared_experts`
    /// x `moe_intermediate_size`, Nemotron-H's x `moe_shared_expert_intermediate_size`). A product
    /// past the widest MLP the model check takes is told in both keys as written: the check named
    /// one key with the product (a number the config does not hold), wrapped past 2^32 in u32.
    fn shared_width(
        &self,
        count_key: &'static str,
        count: u32,
        width_key: &'static str,
        width: u32,
    ) -> Result<u32, HfConfigError> {
        let max = crate::model::MAX_FFN_WIDTH;
        count
            .checked_mul(width)
            .filter(|w| *w <= max)
            .ok_or_else(|| {
                self.unsupported(format!(
                    "keys \"{count_key}\" {count} x \"{width_key}\" {width} make the shared experts {} wide together, larger than {max}, beyond any model trained; check the config",
                    u64::from(count) * u64::from(width)
                ))
            })
    }

    fn unsupported(&self, message: String) -> HfConfigError {
        HfConfigError::Unsupported {
            path: self.path.to_string(),
            message,
        }
    }

    /// A sliding window of `sliding_window` tokens (HF attends to that many keys, itself
    /// included), and which layers keep full attention: from `layer_types` ("full_attention" /
    /// "sliding_attention", every N-th layer full as Megatron-Core's `window_attn_skip_freq`
    /// says it), else `default_full_every`. An absent `sliding_window` takes the class default
    /// `class_window` (MistralConfig 4096, GptOssConfig 128, MixtralConfig None); `null` is no
    /// window, as the classes read None. None when there is no window.
    fn attention_window(
        &self,
        default_full_every: u32,
        layers: u32,
        class_window: Option<u32>,
    ) -> Result<Option<crate::model::AttentionWindow>, HfConfigError> {
        let window = match self.obj.get("sliding_window") {
            None => class_window,
            Some(_) => self.optional("sliding_window")?,
        };
        let Some(tokens) = window else {
            return Ok(None);
        };
        let full_every = match self.obj.get("layer_types") {
            None | Some(Value::Null) => default_full_every,
            Some(value) => {
                let types = value.as_array().ok_or_else(|| {
                    self.bad(
                        "layer_types",
                        value,
                        "a list of \"full_attention\" / \"sliding_attention\"",
                    )
                })?;
                if types.len() != layers as usize {
                    return Err(self.unsupported(format!(
                        "key \"layer_types\" lists {} layers, but \"num_hidden_layers\" is {layers}; one entry per layer",
                        types.len()
                    )));
                }
                let mut full = Vec::with_capacity(types.len());
                for t in types {
                    match t.as_str() {
                        Some("full_attention") => full.push(true),
                        Some("sliding_attention") => full.push(false),
                        _ => {
                            return Err(self.bad(
                                "layer_types",
                                t,
                                "\"full_attention\" or \"sliding_attention\" in every entry",
                            ));
                        }
                    }
                }
                let every = full.iter().position(|&f| f).map_or(0, |i| i + 1);
                let regular = full
                    .iter()
                    .enumerate()
                    .all(|(i, &f)| f == (every > 0 && (i + 1) % every == 0));
                if !regular {
                    return Err(self.unsupported(
                        "key \"layer_types\" does not keep full attention on every N-th layer, the only mix of sliding-window and full layers tpsim models".into(),
                    ));
                }
                u32::try_from(every).unwrap_or(u32::MAX)
            }
        };
        Ok(Some(crate::model::AttentionWindow { tokens, full_every }))
    }

    /// The training sequence length and, when the user gave none, a note saying which was chosen
    /// and why. `--seq-len` wins (the config's value is then not used, nor quoted); else
    /// [`DEFAULT_TRAINING_SEQ_LEN`], or the model's position limit when that is shorter (GPT-2's
    /// learned table of `n_positions` rows; `max_position_embeddings`). The limit is never the
    /// default itself when longer: it is how far a model extends after long-context training.
    fn seq_len(
        &self,
        given: Option<u32>,
        family: Family,
    ) -> Result<(u32, Option<String>), HfConfigError> {
        let (key, limit) = if family == Family::Gpt2 {
            // GPT2Config default n_positions 1024: a sequence longer than the table cannot be trained.
            (
                "n_positions",
                Some(self.class_default("n_positions", 1024)?),
            )
        } else {
            const KEY: &str = "max_position_embeddings";
            let limit = match self.obj.get(KEY) {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                    Some(n) if n > 0 => Some(n),
                    // Only used for the default, so a bad value matters only without --seq-len.
                    _ if given.is_some() => None,
                    _ => {
                        return Err(self.unsupported(format!(
                            "key \"{KEY}\" is {}, which is not a positive integer; pass --seq-len (e.g. --seq-len 4096) or correct it in the config",
                            written(self.text, KEY, v)
                        )));
                    }
                },
            };
            (KEY, limit)
        };
        if let Some(s) = given {
            if family == Family::Gpt2
                && let Some(rows) = limit
                && s > rows
            {
                return Err(self.unsupported(format!(
                    "--seq-len {s} is longer than the learned position table: \"n_positions\" is {rows} (one row per position); use --seq-len {rows} or less"
                )));
            }
            return Ok((s, None));
        }
        let default = DEFAULT_TRAINING_SEQ_LEN;
        Ok(match limit {
            Some(limit) if limit < default => (
                limit,
                Some(format!(
                    "--seq-len not given: {limit} tokens, the config's \"{key}\" (shorter than tpsim's default training length {default})"
                )),
            ),
            Some(limit) => (
                default,
                Some(format!(
                    "--seq-len not given: {default} tokens, a common pre-training length (Qwen3, DeepSeek-V3, GPT-OSS); the config's \"{key}\" {limit} is the longest context it serves, not a training length"
                )),
            ),
            None => (
                default,
                Some(format!(
                    "--seq-len not given: {default} tokens, a common pre-training length (Qwen3, DeepSeek-V3, GPT-OSS); the config states no \"{key}\""
                )),
            ),
        })
    }

    /// Biases of the Llama-like attention and MLP: Qwen2 (and Qwen2-MoE) always put biases on
    /// q/k/v (`Qwen2Attention`: bias=True on q/k/v, False on o); the others follow
    /// `attention_bias` (q/k/v/o, LlamaAttention, Qwen3Attention, GemmaAttention) and `mlp_bias`
    /// (LlamaMLP), both false by default. Returns (linear_bias, qkv_bias).
    fn llama_biases(&self, model_type: &str) -> Result<(bool, bool), HfConfigError> {
        let attention = self.flag("attention_bias")?.unwrap_or(false);
        let mlp = self.flag("mlp_bias")?.unwrap_or(false);
        match (model_type, attention, mlp) {
            ("qwen2" | "qwen2_moe", false, false) => Ok((false, true)),
            (_, false, false) => Ok((false, false)),
            (_, true, true) => Ok((true, false)),
            _ => Err(self.unsupported(format!(
                "\"attention_bias\" {attention} with \"mlp_bias\" {mlp}: tpsim counts biases on every linear layer or on none (or on q/k/v only, as Qwen2); set both alike or describe the shape with flags"
            ))),
        }
    }

    /// The dense layers in front of the MoE layers from Qwen-MoE's `mlp_only_layers` (a list of
    /// layer indices), which tpsim can represent when it is 0, 1, …, K−1.
    fn mlp_only_layers(&self) -> Result<u32, HfConfigError> {
        const KEY: &str = "mlp_only_layers";
        let Some(v) = self.obj.get(KEY).filter(|v| !v.is_null()) else {
            return Ok(0);
        };
        let Some(list) = v.as_array() else {
            return Err(self.bad(KEY, v, "a list of layer indices"));
        };
        let prefix = list
            .iter()
            .enumerate()
            .all(|(i, x)| x.as_u64() == Some(i as u64));
        if !prefix {
            return Err(self.unsupported(format!(
                "\"{KEY}\" {v}: tpsim represents dense layers only as the first K layers ([0, 1, ..., K-1]); describe the shape with flags instead"
            )));
        }
        Ok(list.len() as u32)
    }

    /// Llama, Mistral, Qwen2/3, Gemma and the MoE variants Mixtral, Qwen2-MoE and Qwen3-MoE, each
    /// with its `*Config` class defaults for keys a config may leave out ([`class_defaults`]).
    fn llama_like(
        &self,
        model_type: &str,
        name: &str,
        seq_len: u32,
    ) -> Result<Model, HfConfigError> {
        let (kv_default, head_dim_default, tie_default) = class_defaults(model_type);
        let hidden = self.required("hidden_size", "4096")?;
        let heads = self.required("num_attention_heads", "32")?;
        let layers = self.required("num_hidden_layers", "32")?;
        let (linear_bias, qkv_bias) = self.llama_biases(model_type)?;
        let moe = match model_type {
            // MixtralConfig(num_local_experts=8, num_experts_per_tok=2); every layer sparse, the
            // experts' width is intermediate_size.
            "mixtral" => Some(Moe {
                experts: self.class_default("num_local_experts", 8)?,
                router_topk: self.class_default("num_experts_per_tok", 2)?,
                ffn_hidden: self.required("intermediate_size", "14336")?,
                shared_expert_ffn_hidden: 0,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: 0,
                router_groups: 0,
                router_group_topk: 0,
                glu_clamp_limit: None,
                latent_size: None,
            }),
            // Qwen2MoeConfig(num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
            // shared_expert_intermediate_size=5632, decoder_sparse_step=1), shared expert gated
            // by `shared_expert_gate` (h -> 1); Qwen3MoeConfig(num_experts=128,
            // num_experts_per_tok=8, moe_intermediate_size=768), no shared expert.
            "qwen2_moe" | "qwen3_moe" => {
                let qwen2 = model_type == "qwen2_moe";
                let step = self.count_or("decoder_sparse_step", 1)?;
                if step == 0 {
                    // modeling_qwen2_moe.py / modeling_qwen3_moe.py: an MoE layer where
                    // `(layer_idx + 1) % config.decoder_sparse_step == 0`, a modulo by zero.
                    let zero = Value::from(0);
                    return Err(self.bad(
                        "decoder_sparse_step",
                        self.obj.get("decoder_sparse_step").unwrap_or(&zero),
                        "a step of 1 or more: transformers places an MoE layer where (layer_idx + 1) % decoder_sparse_step == 0, which with 0 divides by zero (Python's ZeroDivisionError), so the config builds no model; write 1 for experts on every layer, as Qwen1.5-MoE and Qwen3-MoE ship it",
                    ));
                }
                if step != 1 {
                    return Err(self.unsupported(format!(
                        "\"decoder_sparse_step\" {step}: Qwen-MoE places MoE layers where (i+1) % step == 0, which tpsim's Megatron-style layer frequency does not express; describe the shape with flags (--moe-layer-freq)"
                    )));
                }
                Some(Moe {
                    experts: self.class_default("num_experts", if qwen2 { 60 } else { 128 })?,
                    router_topk: self
                        .class_default("num_experts_per_tok", if qwen2 { 4 } else { 8 })?,
                    ffn_hidden: self
                        .class_default("moe_intermediate_size", if qwen2 { 1408 } else { 768 })?,
                    shared_expert_ffn_hidden: if qwen2 {
                        self.count_or("shared_expert_intermediate_size", 5632)?
                    } else {
                        0
                    },
                    shared_expert_gate: qwen2,
                    layer_freq: 1,
                    first_dense_layers: self.mlp_only_layers()?,
                    router_groups: 0,
                    router_group_topk: 0,
                    glu_clamp_limit: None,
                    latent_size: None,
                })
            }
            _ => None,
        };
        let ffn_hidden = match model_type {
            // Qwen2MoeConfig / Qwen3MoeConfig intermediate_size defaults (used by dense layers only).
            "qwen2_moe" => self.class_default("intermediate_size", 5632)?,
            "qwen3_moe" => self.class_default("intermediate_size", 6144)?,
            _ => self.required("intermediate_size", "14336")?,
        };
        Ok(Model {
            rotary_base: None,
            hybrid: None,
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads: self.kv_heads(kv_default, heads, null_kv_heads_mean_heads(model_type))?,
            // No llama-like class with a numeric head_dim default computes it for None.
            head_dim: self.head_dim(head_dim_default, false, hidden, heads)?,
            ffn_hidden,
            vocab: self.required("vocab_size", "128256")?,
            seq_len,
            // SwiGLU (Llama, Mistral, Qwen) or GeGLU (Gemma): gate, up and down matrices either way.
            gated_mlp: true,
            linear_bias,
            qkv_bias,
            // Qwen3Attention / Qwen3MoeAttention: q_norm and k_norm, RMSNorm over head_dim.
            qk_norm: matches!(model_type, "qwen3" | "qwen3_moe"),
            shared_layer_norm: false,
            tied_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(tie_default),
            position_embedding: self.rope(false)?,
            // transformers' rope setup reads partial_rotary_factor where a config has it (1.0 else).
            rotary_percent: self.rotary_share("partial_rotary_factor", 1.0)?,
            norm: Norm::Rmsnorm,
            // Llama-family configs set attention_dropout 0.0 and have no hidden dropout.
            dropout: self.dropout(&[("attention_dropout", 0.0)], true)?,
            mla: None,
            moe,
            mtp_layers: 0,
            // Mistral 7B v0.1 attends over a 4,096-token window in every layer (MistralConfig's
            // default `sliding_window` 4096 when the key is absent; MixtralConfig's None); Qwen2's
            // `sliding_window` applies only with `use_sliding_window`, which its configs leave off.
            attention_window: match model_type {
                "mistral" => self.attention_window(0, layers, Some(4096))?,
                "mixtral" => self.attention_window(0, layers, None)?,
                _ if self.flag("use_sliding_window")? == Some(true) => {
                    return Err(self.unsupported(
                        "key \"use_sliding_window\" is true: Qwen's sliding window (on the layers from \"max_window_layers\" on) is not modelled, and counting full attention there would be wrong; set it to false or give the shape with flags and --attention-window".into(),
                    ));
                }
                _ => None,
            },
        })
    }

    /// DeepSeek's MoE layers as tpsim counts them (every `layer_freq`-th layer from the first MoE
    /// layer): the config's are i ≥ first_k_dense_replace with i % moe_layer_freq == 0, so the
    /// first is the first multiple of the frequency at or past first_k_dense_replace. Counted
    /// from first_k_dense_replace itself (as before), `moe_layer_freq` 7 with 3 dense layers gave
    /// 9 MoE layers of 61 where the config has 8, and 100 gave one where it has none.
    fn deepseek_moe_layers(&self, layers: u32) -> Result<(u32, u32), HfConfigError> {
        let freq = self.class_default("moe_layer_freq", 1)?;
        let first_dense = self.count_or("first_k_dense_replace", 3)?;
        // `class_default` refuses 0, a modulo by zero in DeepSeek's code.
        let first_moe = u64::from(first_dense).div_ceil(u64::from(freq)) * u64::from(freq);
        if first_moe >= u64::from(layers) {
            return Err(self.unsupported(format!(
                "\"moe_layer_freq\" {freq} with \"first_k_dense_replace\" {first_dense}: DeepSeek places MoE layers at i >= {first_dense} with i % {freq} == 0, and none of the {layers} layers is one, so the config has no experts in use; check both keys (DeepSeek-V3: 1 and 3)"
            )));
        }
        Ok((freq, first_moe as u32))
    }

    /// DeepSeek-V3 (`DeepseekV3Config` defaults: n_routed_experts 256, num_experts_per_tok 8,
    /// moe_intermediate_size 2048, n_shared_experts 1, first_k_dense_replace 3, q_lora_rank 1536,
    /// kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128). MoE layers
    /// sit at i ≥ first_k_dense_replace with i % moe_layer_freq == 0 (`DeepseekV3DecoderLayer`);
    /// tpsim counts every layer_freq-th layer from its first MoE layer, so that first layer is
    /// the first multiple of the frequency at or past first_k_dense_replace
    /// (`deepseek_moe_layers`).
    fn deepseek_v3(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
        let hidden = self.required("hidden_size", "7168")?;
        let heads = self.required("num_attention_heads", "128")?;
        let moe_ffn = self.class_default("moe_intermediate_size", 2048)?;
        // MLA gives every head its own K/V (tpsim's `kv_heads` is the heads), so the count is not
        // used; a value that is not a count is still refused, not passed over.
        self.optional("num_key_value_heads")?;
        let q_lora_rank = match self.obj.get("q_lora_rank") {
            // DeepSeek-V2-Lite: "q_lora_rank": null, a plain query projection.
            Some(Value::Null) => None,
            None => Some(1536),
            Some(_) => self.optional("q_lora_rank")?,
        };
        let v_head_dim = self.class_default("v_head_dim", 128)?;
        let layers = self.required("num_hidden_layers", "61")?;
        let (layer_freq, first_dense_layers) = self.deepseek_moe_layers(layers)?;
        Ok(Model {
            rotary_base: None,
            hybrid: None,
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads: heads,
            // Megatron's --kv-channels for DeepSeek-V3 is v_head_dim (128); MLA's own widths are in `mla`.
            head_dim: v_head_dim,
            ffn_hidden: self.class_default("intermediate_size", 18432)?,
            vocab: self.required("vocab_size", "129280")?,
            seq_len,
            gated_mlp: true,
            linear_bias: self.flag("attention_bias")?.unwrap_or(false),
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(false),
            position_embedding: self.rope(true)?,
            // Latent attention rotates only qk_rope_head_dim of each head (read above).
            rotary_percent: self.no_rotary_share(
                "1 or absent: latent attention rotates only each head's qk_rope_head_dim part, which already says the rotated share",
            )?,
            norm: Norm::Rmsnorm,
            // `*Config` attention_dropout (0.0 by default); the blocks have no hidden dropout.
            dropout: self.dropout(&[("attention_dropout", 0.0)], true)?,
            mla: Some(Mla {
                q_lora_rank,
                kv_lora_rank: self.class_default("kv_lora_rank", 512)?,
                qk_head_dim: self.class_default("qk_nope_head_dim", 128)?,
                qk_pos_emb_head_dim: self.class_default("qk_rope_head_dim", 64)?,
                v_head_dim,
            }),
            moe: Some(Moe {
                experts: self.class_default("n_routed_experts", 256)?,
                router_topk: self.class_default("num_experts_per_tok", 8)?,
                ffn_hidden: moe_ffn,
                shared_expert_ffn_hidden: self.shared_width(
                    "n_shared_experts",
                    self.count_or("n_shared_experts", 1)?,
                    "moe_intermediate_size",
                    moe_ffn,
                )?,
                shared_expert_gate: false,
                layer_freq,
                first_dense_layers,
                // DeepseekV3Config: n_group 8, topk_group 4 (node-limited routing, report
                // §2.1.2); DeepSeek-V2's config names them the same.
                router_groups: self.class_default("n_group", 8)?,
                router_group_topk: self.class_default("topk_group", 4)?,
                glu_clamp_limit: None,
                latent_size: None,
            }),
            // `num_nextn_predict_layers` (1 in DeepSeek-V3's config.json; Megatron-Bridge's
            // DeepSeek provider maps it to `mtp_num_layers`).
            mtp_layers: self.count_or("num_nextn_predict_layers", 0)?,
            attention_window: None,
        })
    }

    /// GPT-OSS (`GptOssConfig` defaults: num_local_experts 128, num_experts_per_tok 4, head_dim 64,
    /// num_key_value_heads 8, attention_bias true): every layer MoE, experts SwiGLU
    /// (`gate_up_proj` 2·ffn wide) with biases, router with a bias, untied output.
    fn gpt_oss(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
        let hidden = self.required("hidden_size", "2880")?;
        let heads = self.required("num_attention_heads", "64")?;
        let ffn = self.required("intermediate_size", "2880")?;
        Ok(Model {
            rotary_base: None,
            hybrid: None,
            name: name.to_string(),
            layers: self.required("num_hidden_layers", "36")?,
            hidden,
            heads,
            kv_heads: self.kv_heads(Some(8), heads, null_kv_heads_mean_heads("gpt_oss"))?,
            // configuration_gpt_oss.py: `self.head_dim = self.head_dim if self.head_dim is not None
            // else self.hidden_size // self.num_attention_heads` (default 64).
            head_dim: self.head_dim(Some(64), true, hidden, heads)?,
            ffn_hidden: ffn,
            vocab: self.required("vocab_size", "201088")?,
            seq_len,
            gated_mlp: true,
            linear_bias: self.flag("attention_bias")?.unwrap_or(true),
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(false),
            position_embedding: self.rope(true)?,
            // transformers' rope setup reads partial_rotary_factor where a config has it.
            rotary_percent: self.rotary_share("partial_rotary_factor", 1.0)?,
            norm: Norm::Rmsnorm,
            // `*Config` attention_dropout (0.0 by default); the blocks have no hidden dropout.
            dropout: self.dropout(&[("attention_dropout", 0.0)], true)?,
            mla: None,
            moe: Some(Moe {
                experts: self.class_default("num_local_experts", 128)?,
                router_topk: self
                    .optional("num_experts_per_tok")?
                    .or(self.optional("experts_per_token")?)
                    .unwrap_or(4),
                ffn_hidden: ffn,
                shared_expert_ffn_hidden: 0,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: 0,
                router_groups: 0,
                router_group_topk: 0,
                // `GptOssExperts` clamps both halves of the gated activation at `swiglu_limit`
                // (transformers `modeling_gpt_oss.py`; the config's default 7.0).
                glu_clamp_limit: Some(self.swiglu_limit()?),
                latent_size: None,
            }),
            mtp_layers: 0,
            // GptOssConfig (transformers `models/gpt_oss/configuration_gpt_oss.py`):
            // `sliding_window` 128 (also when the key is absent) on the layers `layer_types` calls
            // "sliding_attention", alternating with full attention (Megatron-Bridge's provider:
            // `window_size = (sliding_window - 1, 0)`, `window_attn_skip_freq = 2`).
            attention_window: self.attention_window(
                2,
                self.required("num_hidden_layers", "36")?,
                Some(128),
            )?,
        })
    }

    /// Nemotron-H and Nemotron 3 (`NemotronHConfig`, the remote code `configuration_nemotron_h.py`
    /// of NVIDIA's Hub repositories; the keys Megatron-Bridge's `NemotronHBridge` maps to
    /// Megatron-Core's hybrid stack). `hybrid_override_pattern` gives each layer a Mamba-2 mixer
    /// (M), attention (*), a squared-ReLU MLP of `intermediate_size` (-) or an MoE block (E:
    /// `n_routed_experts` of `moe_intermediate_size`, top `num_experts_per_tok`, and
    /// `n_shared_experts` shared ones of `moe_shared_expert_intermediate_size`); the mixer is
    /// `mamba_num_heads` heads of `mamba_head_dim`, state `ssm_state_size`, `n_groups` groups
    /// (the class's `mamba_n_groups`), conv `conv_kernel` (`mamba_d_conv`). No position embedding,
    /// RMSNorm, grouped-query attention of `head_dim` 128. Absent keys take the class defaults (its
    /// 8B shape); the sizes of the class's MoE defaults are no model's, so an E in the pattern
    /// needs the expert keys written.
    fn nemotron_h(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
        let layers = self.class_default("num_hidden_layers", 52)?;
        let pattern = self.hybrid_pattern()?;
        let (mtp_layers, mtp_shared_weights) = self.nemotron_h_mtp(&pattern)?;
        let hidden = self.class_default("hidden_size", 4096)?;
        let heads = self.class_default("num_attention_heads", 32)?;
        if let Some(act) = self.obj.get("mlp_hidden_act").filter(|v| !v.is_null())
            && act.as_str() != Some("relu2")
        {
            return Err(self.unsupported(format!(
                "key \"mlp_hidden_act\" is {}, and tpsim prices Nemotron-H's squared ReLU (\"relu2\", two matrices per MLP); write \"relu2\" or give the shape with a model file",
                written(self.text, "mlp_hidden_act", act)
            )));
        }
        for key in ["sliding_window"] {
            if let Some(v) = self
                .obj
                .get(key)
                .filter(|v| !v.is_null() && v.as_u64() != Some(0))
            {
                return Err(self.unsupported(format!(
                    "key \"{key}\" is {}: a hybrid stack with {} is not priced by tpsim; set it to null (or 0) to plan the stack without it",
                    written(self.text, key, v),
                    "a sliding attention window"
                )));
            }
        }
        let biases: Vec<bool> = ["use_bias", "attention_bias", "mlp_bias", "mamba_proj_bias"]
            .into_iter()
            .map(|key| Ok(self.flag(key)?.unwrap_or(false)))
            .collect::<Result<_, HfConfigError>>()?;
        let linear_bias = biases.iter().all(|b| *b);
        if !linear_bias && biases.iter().any(|b| *b) {
            return Err(self.unsupported(
                "keys \"use_bias\", \"attention_bias\", \"mlp_bias\" and \"mamba_proj_bias\" differ: tpsim counts biases on every linear layer or on none; make them agree".into(),
            ));
        }
        let moe = if pattern.contains('E') {
            let groups = self.class_default("n_group", 1)?;
            Some(Moe {
                experts: self.required("n_routed_experts", "128")?,
                router_topk: self.required("num_experts_per_tok", "6")?,
                ffn_hidden: self.required("moe_intermediate_size", "1856")?,
                shared_expert_ffn_hidden: self.shared_width(
                    "n_shared_experts",
                    self.class_default("n_shared_experts", 1)?,
                    "moe_shared_expert_intermediate_size",
                    self.class_default("moe_shared_expert_intermediate_size", 7688)?,
                )?,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: 0,
                router_groups: if groups > 1 { groups } else { 0 },
                router_group_topk: if groups > 1 {
                    self.class_default("topk_group", 1)?
                } else {
                    0
                },
                glu_clamp_limit: None,
                // Nemotron 3 Super and Ultra's LatentMoE (`NemotronHConfig.moe_latent_size`, which
                // Megatron-Bridge's nemotron_h_bridge.py copies to the provider); null or 0: none.
                latent_size: match self.obj.get("moe_latent_size") {
                    Some(v) if v.as_u64() == Some(0) => None,
                    _ => self.optional("moe_latent_size")?,
                },
            })
        } else {
            None
        };
        // The saved attribute or the constructor's argument: both given and different, one was
        // dropped without a word, though they may say different mixers.
        let attribute_or_argument = |attribute: &'static str, argument: &'static str, default| {
            match (self.optional(attribute)?, self.optional(argument)?) {
                (Some(a), Some(b)) if a != b => Err(self.unsupported(format!(
                    "keys \"{attribute}\" {a} and \"{argument}\" {b} give different values for one Mamba setting (the class saves its {argument} argument as {attribute}), so which is meant is unclear; keep one of them, or make them agree"
                ))),
                (Some(a), _) => Ok(a),
                (None, _) => self.class_default(argument, default),
            }
        };
        let mamba_groups = attribute_or_argument("n_groups", "mamba_n_groups", 8)?;
        let mamba_conv_kernel = attribute_or_argument("conv_kernel", "mamba_d_conv", 4)?;
        Ok(Model {
            rotary_base: None,
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads: self.kv_heads(Some(8), heads, true)?,
            // `self.head_dim = head_dim` (default 128), no rule for None.
            head_dim: self.head_dim(Some(128), false, hidden, heads)?,
            ffn_hidden: self.class_default("intermediate_size", 21504)?,
            vocab: self.class_default("vocab_size", 131072)?,
            seq_len,
            gated_mlp: false,
            linear_bias,
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(false),
            position_embedding: PositionEmbedding::None,
            rotary_percent: None,
            norm: Norm::Rmsnorm,
            dropout: self.dropout(
                &[("attention_dropout", 0.0), ("hidden_dropout", 0.0)],
                false,
            )?,
            mla: None,
            moe,
            mtp_layers,
            attention_window: None,
            hybrid: Some(crate::model::Hybrid {
                pattern,
                mamba_heads: self.class_default("mamba_num_heads", 128)?,
                mamba_head_dim: self.class_default("mamba_head_dim", 64)?,
                mamba_state_dim: self.class_default("ssm_state_size", 128)?,
                mamba_groups,
                mamba_conv_kernel,
                mtp_shared_weights,
            }),
        })
    }

    /// A Nemotron-H config's multi-token prediction: `num_nextn_predict_layers` depths (0 when
    /// absent or null) of the block `mtp_hybrid_override_pattern` gives, which Megatron-Bridge
    /// requires with any depth (nemotron_h_bridge.py `_hf_mtp_config`: "must define
    /// mtp_hybrid_override_pattern") and tpsim prices when it is an attention block and one of the
    /// last layer's MLP kind ("*E" in NVIDIA's Nemotron 3 configs); `mtp_use_repeated_layer`
    /// (Megatron-Bridge's default: true) shares one block's weights across the depths.
    fn nemotron_h_mtp(&self, pattern: &str) -> Result<(u32, bool), HfConfigError> {
        let depths = match self.obj.get("num_nextn_predict_layers") {
            Some(v) if v.as_u64() == Some(0) => 0,
            _ => self.optional("num_nextn_predict_layers")?.unwrap_or(0),
        };
        if depths == 0 {
            return Ok((0, false));
        }
        let block = format!("*{}", pattern.chars().last().unwrap_or('M'));
        match self.obj.get("mtp_hybrid_override_pattern") {
            Some(Value::String(given)) if *given == block && block != "*M" && block != "**" => {}
            given => {
                let given = given.map_or("absent".to_string(), |v| {
                    written(self.text, "mtp_hybrid_override_pattern", v)
                });
                return Err(self.unsupported(format!(
                    "key \"num_nextn_predict_layers\" is {depths} with \"mtp_hybrid_override_pattern\" {given}: tpsim prices an MTP depth as an attention block and one of the last layer's MLP kind (\"*E\" or \"*-\", as NVIDIA's Nemotron 3 configs give it, for a pattern ending in E or -); set num_nextn_predict_layers to 0 to plan the stack without MTP"
                )));
            }
        }
        let shared = self.flag("mtp_use_repeated_layer")?.unwrap_or(true);
        Ok((depths, shared))
    }

    /// A Nemotron-H config's layer pattern: `hybrid_override_pattern` (the class's default, the
    /// 8B's, when absent), or transformers' per-layer `layers_block_type` list (mamba, attention,
    /// mlp, moe) where a config gives that instead.
    fn hybrid_pattern(&self) -> Result<String, HfConfigError> {
        const DEFAULT: &str = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
        let given = self
            .obj
            .get("hybrid_override_pattern")
            .filter(|v| !v.is_null())
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    self.bad(
                        "hybrid_override_pattern",
                        v,
                        "a string of M, *, - and E, one per layer",
                    )
                })
            })
            .transpose()?;
        let Some(list) = self.obj.get("layers_block_type").filter(|v| !v.is_null()) else {
            return Ok(given.unwrap_or_else(|| DEFAULT.to_string()));
        };
        let symbols = list.as_array().map(|items| {
            items
                .iter()
                .map(|item| match item.as_str() {
                    Some("mamba") => Some('M'),
                    Some("attention") => Some('*'),
                    Some("mlp") => Some('-'),
                    Some("moe") => Some('E'),
                    _ => None,
                })
                .collect::<Option<String>>()
        });
        let listed = symbols.flatten().ok_or_else(|| {
            self.bad(
                "layers_block_type",
                list,
                "a list of \"mamba\", \"attention\", \"mlp\" and \"moe\", one per layer",
            )
        })?;
        // Both given: the pattern was taken and the list dropped without a word, though they
        // may say different stacks.
        match given {
            Some(pattern) if pattern != listed => Err(self.unsupported(format!(
                "keys \"hybrid_override_pattern\" {pattern:?} and \"layers_block_type\" (the pattern {listed:?}) give different layers, so which stack is meant is unclear; keep one of them, or make them agree"
            ))),
            _ => Ok(listed),
        }
    }

    /// GLM-4.5 / GLM-4.6 (transformers `models/glm4_moe`, `Glm4MoeForCausalLM`). Attention is
    /// Glm4's: `num_key_value_heads` K/V heads of `head_dim` (GLM-4.5: 96 heads of 128 over a hidden
    /// of 5,120, so the key is needed), q/k/v biases under `attention_bias` and no output-projection
    /// bias, per-head q/k RMSNorm under `use_qk_norm`. The MLP is DeepSeek-V3's
    /// (`Glm4MoeSparseMoeBlock` routes with `DeepseekV3TopkRouter`): `n_routed_experts` experts of
    /// `moe_intermediate_size` and `n_shared_experts` shared ones in every layer from
    /// `first_k_dense_replace` on, dense layers of `intermediate_size` before, and
    /// `num_nextn_predict_layers` MTP layers. The first port of the class named the routed experts
    /// `num_experts` and had other defaults, so the sizes (hidden, heads, layers, the MLP and expert
    /// widths, experts, top-k, vocabulary) are required, not defaulted; the counts both published
    /// configs state take `Glm4MoeConfig`'s defaults when missing (8 K/V heads, 1 shared expert,
    /// 1 dense layer first, no MTP); `n_group` 1 (both published configs) is no group-limited
    /// routing.
    fn glm4_moe(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
        let hidden = self.required("hidden_size", "5120")?;
        let heads = self.required("num_attention_heads", "96")?;
        let layers = self.required("num_hidden_layers", "92")?;
        let moe_ffn = self.required("moe_intermediate_size", "1536")?;
        let experts = match self.optional("n_routed_experts")? {
            Some(n) => n,
            None => self
                .optional("num_experts")?
                .ok_or_else(|| self.missing("n_routed_experts", "160"))?,
        };
        // Glm4MoeTopkRouter views the experts as n_group groups and keeps topk_group of them on
        // every token, even with one group: both are positive counts, read whatever n_group is.
        let groups = self.class_default("n_group", 1)?;
        let group_topk = self.class_default("topk_group", 1)?;
        // One group is no limit, unless the config asks a token for more groups than that (which
        // the router's topk over one group refuses): kept, so the model's group check names both
        // keys.
        let (router_groups, router_group_topk) = if groups > 1 || group_topk > groups {
            (groups, group_topk)
        } else {
            (0, 0)
        };
        Ok(Model {
            rotary_base: None,
            hybrid: None,
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads: self.kv_heads(Some(8), heads, false)?,
            head_dim: self.head_dim(None, true, hidden, heads)?,
            ffn_hidden: self.required("intermediate_size", "12288")?,
            vocab: self.required("vocab_size", "151552")?,
            seq_len,
            gated_mlp: true,
            linear_bias: false,
            qkv_bias: self.flag("attention_bias")?.unwrap_or(false),
            qk_norm: self.flag("use_qk_norm")?.unwrap_or(false),
            shared_layer_norm: false,
            tied_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(false),
            position_embedding: self.rope(false)?,
            // Glm4MoeConfig: kwargs.setdefault("partial_rotary_factor", 0.5).
            rotary_percent: self.rotary_share("partial_rotary_factor", 0.5)?,
            norm: Norm::Rmsnorm,
            // `*Config` attention_dropout (0.0 by default); the blocks have no hidden dropout.
            dropout: self.dropout(&[("attention_dropout", 0.0)], true)?,
            mla: None,
            moe: Some(Moe {
                experts,
                router_topk: self.required("num_experts_per_tok", "8")?,
                ffn_hidden: moe_ffn,
                shared_expert_ffn_hidden: self.shared_width(
                    "n_shared_experts",
                    self.count_or("n_shared_experts", 1)?,
                    "moe_intermediate_size",
                    moe_ffn,
                )?,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: self.count_or("first_k_dense_replace", 1)?,
                router_groups,
                router_group_topk,
                glu_clamp_limit: None,
                latent_size: None,
            }),
            mtp_layers: self.count_or("num_nextn_predict_layers", 0)?,
            attention_window: None,
        })
    }

    fn missing(&self, key: &'static str, example: &'static str) -> HfConfigError {
        HfConfigError::MissingKey {
            path: self.path.to_string(),
            key,
            family: self.family,
            example,
        }
    }

    /// `Model::check_hybrid`'s words, which name a model file's `hybrid:` keys (`mamba_heads`,
    /// `mamba_groups`, ...), in the Nemotron-H config's keys (`mamba_num_heads`, `n_groups` or
    /// `mamba_n_groups`, ...; `Reader::nemotron_h` reads them): the message named keys the config
    /// does not have.
    fn hybrid_words_in_config_keys(&self, words: &str) -> String {
        let present = |keys: &[&'static str]| {
            keys.iter()
                .copied()
                .find(|k| self.obj.contains_key(*k))
                .unwrap_or(keys[0])
        };
        let mut said = words.to_string();
        for (file_key, config_keys) in [
            ("mamba_heads", &["mamba_num_heads"][..]),
            ("mamba_head_dim", &["mamba_head_dim"][..]),
            ("mamba_state_dim", &["ssm_state_size"][..]),
            ("mamba_groups", &["n_groups", "mamba_n_groups"][..]),
            ("mamba_conv_kernel", &["conv_kernel", "mamba_d_conv"][..]),
        ] {
            let key = present(config_keys);
            said = said
                .replace(&format!("hybrid {file_key} "), &format!("key \"{key}\" "))
                .replace(
                    &format!("multiple of {file_key} "),
                    &format!("multiple of \"{key}\" "),
                );
        }
        // The pattern is named by the key it came from (`Reader::hybrid_pattern`): the string, the
        // per-layer list, or the class's default where the config gives neither; the rule by
        // what that key holds, not by Megatron-Core's `--hybrid-override-pattern` flag.
        let given = |key: &str| self.obj.get(key).is_some_and(|v| !v.is_null());
        let (named, written_as, units) = if given("hybrid_override_pattern") {
            (
                "key \"hybrid_override_pattern\" ".to_string(),
                "a \"hybrid_override_pattern\" of",
                "symbols",
            )
        } else if given("layers_block_type") {
            (
                "key \"layers_block_type\" (as a pattern: ".to_string(),
                "a \"layers_block_type\" of",
                "entries",
            )
        } else {
            (
                "NemotronHConfig's default \"hybrid_override_pattern\" (the config gives none) "
                    .to_string(),
                "a \"hybrid_override_pattern\" of",
                "symbols",
            )
        };
        if let Some(rest) = said.strip_prefix("hybrid pattern ") {
            said = if units == "entries" {
                // `"ME*" has ...` -> `(as a pattern: "ME*") has ...`.
                match rest.find("\" ") {
                    Some(end) => format!("{named}{}){}", &rest[..=end], &rest[end + 1..]),
                    None => format!("{named}{rest})"),
                }
            } else {
                format!("{named}{rest}")
            };
        }
        // The pattern's length against the layer count names the flag and the model file's word
        // (`give --layers N or a pattern of L symbols`): said as the config's two keys.
        said.replace(
            " (rule: one symbol per layer, as Megatron-Core's --hybrid-override-pattern)",
            " (rule: one block per layer)",
        )
        .replace(
            "; give --layers ",
            &format!(
                "; give \"{}\": ",
                self.key_of("--layers", Family::NemotronH)
            ),
        )
        .replace(" or a pattern of ", &format!(" or {written_as} "))
        .replace("; write a pattern of ", &format!("; write {written_as} "))
        .replace(" symbols", &format!(" {units}"))
        .replace(
            " (M Mamba-2, * attention, - MLP, E MoE)",
            if units == "entries" {
                " (\"mamba\", \"attention\", \"mlp\", \"moe\")"
            } else {
                " (M Mamba-2, * attention, - MLP, E MoE)"
            },
        )
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
            ("--head-dim", _) => &["head_dim"],
            ("--num-experts", Family::DeepseekV3 | Family::NemotronH) => &["n_routed_experts"],
            ("--num-experts", Family::Glm4Moe) => &["n_routed_experts", "num_experts"],
            ("--num-experts", _) => &["num_experts", "num_local_experts"],
            ("--moe-router-topk", _) => &["num_experts_per_tok"],
            ("--moe-ffn-hidden-size", Family::LlamaLike | Family::GptOss) => {
                &["moe_intermediate_size", "intermediate_size"]
            }
            ("--moe-ffn-hidden-size", _) => &["moe_intermediate_size"],
            // The shared experts' width: Nemotron-H's n_shared_experts x
            // moe_shared_expert_intermediate_size, DeepSeek's and GLM's n_shared_experts x
            // moe_intermediate_size, Qwen2-MoE's shared_expert_intermediate_size.
            ("--moe-shared-expert-intermediate-size", Family::NemotronH) => {
                &["moe_shared_expert_intermediate_size", "n_shared_experts"]
            }
            ("--moe-shared-expert-intermediate-size", Family::DeepseekV3 | Family::Glm4Moe) => {
                &["n_shared_experts", "moe_intermediate_size"]
            }
            ("--moe-shared-expert-intermediate-size", _) => &["shared_expert_intermediate_size"],
            ("--moe-layer-freq", _) => &["moe_layer_freq"],
            ("--moe-latent-size", _) => &["moe_latent_size"],
            ("--kv-lora-rank", _) => &["kv_lora_rank"],
            ("--q-lora-rank", _) => &["q_lora_rank"],
            ("--qk-head-dim", _) => &["qk_nope_head_dim"],
            ("--qk-pos-emb-head-dim", _) => &["qk_rope_head_dim"],
            ("--v-head-dim", _) => &["v_head_dim"],
            ("--mtp-layers", _) => &["num_nextn_predict_layers"],
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
            ModelError::HiddenNotDivisibleByHeads {
                hidden,
                heads,
                suggest,
            } => {
                let key = self.key_of("--heads", family);
                format!(
                    "key \"{}\" {hidden} is not divisible by \"{key}\" {heads}; the head dimension must be whole (e.g. \"{key}\": {suggest})",
                    self.key_of("--hidden", family),
                )
            }
            // An absent key is the config class's default, not a value the config gives.
            ModelError::KvHeadsNotDivisor { kv_heads, heads }
                if !self.obj.contains_key(self.key_of("--kv-heads", family)) =>
            {
                let key = self.key_of("--kv-heads", family);
                format!(
                    "the config has no \"{key}\", and transformers' config class then uses its default of {kv_heads}, which does not divide \"{}\" {heads} (grouped-query attention shares each key/value head among heads/kv_heads query heads); add \"{key}\" with a divisor of {heads}, e.g. \"{key}\": {}",
                    self.key_of("--heads", family),
                    crate::model::divisor_at_most(&heads, &kv_heads)
                )
            }
            ModelError::KvHeadsNotDivisor { kv_heads, heads } => {
                let key = self.key_of("--kv-heads", family);
                format!(
                    "key \"{key}\" {kv_heads} must divide \"{}\" {heads} (grouped-query attention shares each key/value head among heads/kv_heads query heads); give a divisor of {heads}, e.g. \"{key}\": {}",
                    self.key_of("--heads", family),
                    crate::model::divisor_at_most(&heads, &kv_heads)
                )
            }
            // Only a flag over the config can ask for KV groups on latent attention.
            ModelError::KvHeadsWithLatentAttention { .. }
            | ModelError::HeadDimWithLatentAttention { .. }
            | ModelError::HeadDimBelowRotaryPair { .. } => e.to_string(),
            // The reader checks partial_rotary_factor / rotary_pct itself, in the config's words.
            ModelError::RotaryPercentRange { .. }
            | ModelError::RotaryPercentWithoutRope { .. }
            | ModelError::RotaryPercentWithLatentAttention { .. } => e.to_string(),
            // The reader checks rope_theta itself (`Reader::rope_theta`), in the config's words.
            ModelError::RotaryBaseRange { .. } | ModelError::RotaryBaseWithoutRope { .. } => {
                e.to_string()
            }
            // The hybrid check names a model file's keys; said in the config's.
            ModelError::Hybrid(words) => self.hybrid_words_in_config_keys(&words),
            ModelError::RotaryPercentBelowOnePair {
                value,
                rotated,
                head_dim,
            } => {
                let key = ["partial_rotary_factor", "rotary_pct"]
                    .into_iter()
                    .find(|k| self.obj.contains_key(*k))
                    .unwrap_or("partial_rotary_factor");
                format!(
                    "key \"{key}\" is {}, which rotates {rotated} of the {head_dim} dimensions of each head (transformers rotates int({key} x head_dim) of them, in pairs); give at least {}, or drop it to rotate the whole head",
                    crate::units::show_number(value),
                    crate::units::show_number(2.0 / f64::from(head_dim))
                )
            }
            ModelError::RouterGroups {
                groups,
                group_topk,
                experts,
                topk,
                rule,
            } => {
                // A key the config leaves out holds the config class's default (`class_default`),
                // which the fix then has to write into the config.
                let said = |key: &str, value: u32| {
                    if self.obj.contains_key(key) {
                        format!("\"{key}\" {value}")
                    } else {
                        format!(
                            "\"{key}\" {value} (not in the config: transformers' default, so add the key to change it)"
                        )
                    }
                };
                format!(
                    "keys {} / {} with {experts} experts, top-{topk}: {rule}",
                    said("n_group", groups),
                    said("topk_group", group_topk)
                )
            }
            ModelError::TopkAboveExperts { topk, experts, .. } => format!(
                "key \"{}\" {topk} is more than \"{}\" {experts}; a token is routed to at most every expert",
                self.key_of("--moe-router-topk", family),
                self.key_of("--num-experts", family)
            ),
            ModelError::NoMoeLayer {
                first_dense,
                layers,
                ..
            } => format!(
                "{first_dense} dense layers (\"first_k_dense_replace\" / \"mlp_only_layers\") leave no MoE layer among the {layers} layers; check the config"
            ),
            ModelError::LatentWiderThanHidden { latent, hidden } => format!(
                "key \"{}\" {latent} is wider than \"{}\" {hidden} (rule: LatentMoE projects each token down from the model's width to a narrower latent width for the routed experts, Nemotron 3 Super: hidden_size 4096, moe_latent_size 1024); give a latent width below {hidden}, e.g. {}, or null for experts on the model's width",
                self.key_of("--moe-latent-size", family),
                self.key_of("--hidden", family),
                (hidden / 4).max(1)
            ),
            // Only flags and model files raise these; a config never does.
            ModelError::MoeFlagWithoutExperts { .. }
            | ModelError::ExpertsBelowTopk { .. }
            | ModelError::MlaFlagWithoutKvLoraRank { .. }
            | ModelError::WindowFlagWithoutWindow
            | ModelError::PositionKeysDisagree { .. }
            | ModelError::PositionUnsaid => e.to_string(),
        };
        HfConfigError::Unsupported {
            path: self.path.to_string(),
            message,
        }
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
            // A value that names no function (`5`, `["silu"]`) builds no model in transformers
            // (`ACT2FN[config.hidden_act]`): refused, not skipped. `null` is the class's None
            // (GemmaConfig's `hidden_activation`: its legacy default).
            let Some(value) = self.obj.get(key).filter(|v| !v.is_null()) else {
                continue;
            };
            let Some(act) = value.as_str() else {
                return Err(self.bad(key, value, "a string naming the activation (e.g. \"silu\")"));
            };
            if !KNOWN.contains(&act) {
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
        load(
            &format!("{}/models/hf/{file}", env!("CARGO_MANIFEST_DIR")),
            None,
        )
        .unwrap()
        .model
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
            ("falcon-7b.json", 6.9217, 0.0001),
            // Qwen2.5/Qwen3 with their q/k/v biases and q/k norms, Falcon with one norm per layer:
            // HF safetensors counts Qwen2.5-7B 7,615,616,512 and Falcon-7B 6,921,720,704.
            ("qwen2.5-7b.json", 7.615616512, 0.00001),
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
    fn a_head_dim_set_apart_from_hidden_is_counted() {
        // Gemma-7B: 16 heads of 256 = 4096 over hidden 3072 (refused before head_dim was a field).
        let m = parse(
            r#"{"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16, "head_dim": 256,
               "num_hidden_layers": 28, "intermediate_size": 24576, "vocab_size": 256000,
               "max_position_embeddings": 8192}"#,
            "c.json",
            "x",
            None,
        )
        .unwrap();
        assert_eq!((m.head_dim, m.kv_heads), (256, 16));
        assert_eq!(m.q_width(), 4096.0);
    }

    #[test]
    fn falcon_kv_heads_follow_the_architecture_switches() {
        let m = load(
            &format!("{}/models/hf/falcon-7b.json", env!("CARGO_MANIFEST_DIR")),
            Some(2048),
        )
        .unwrap()
        .model;
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
    fn a_missing_sequence_length_defaults_to_a_training_length_and_says_so() {
        let loaded = parse_with_note(&format!("{{{LLAMA}}}"), "c.json", "x", None).unwrap();
        assert_eq!(loaded.model.seq_len, DEFAULT_TRAINING_SEQ_LEN);
        let note = loaded.seq_len_note.unwrap();
        assert!(
            note.contains("--seq-len not given") && note.contains("no \"max_position_embeddings\""),
            "{note}"
        );
        assert_eq!(llama_with("", Some(8192)).unwrap().seq_len, 8192);
    }

    #[test]
    fn the_maximum_context_is_not_the_training_length() {
        // Qwen3-8B's 40,960 and Mistral's 32,768 are served contexts; a shorter limit wins.
        let long = r#", "max_position_embeddings": 40960"#;
        assert_eq!(llama_with(long, None).unwrap().seq_len, 4096);
        let short = r#", "max_position_embeddings": 2048"#;
        assert_eq!(llama_with(short, None).unwrap().seq_len, 2048);
        // An unusable limit is refused without --seq-len, ignored with it.
        let zero = r#", "max_position_embeddings": 0"#;
        let err = llama_with(zero, None).unwrap_err();
        assert!(
            err.contains("\"max_position_embeddings\" is 0") && err.contains("--seq-len"),
            "{err}"
        );
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
        assert_eq!(load(&path, Some(512)).unwrap().model.seq_len, 512);
        assert_eq!(load(&path, None).unwrap().model.seq_len, 1024);
    }

    #[test]
    fn a_non_string_model_type_is_refused_by_name() {
        let err = parse(
            r#"{"model_type": 7, "architectures": ["LlamaForCausalLM"], "hidden_size": 64}"#,
            "c.json",
            "c",
            Some(128),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("\"model_type\": 7 must be a string"), "{err}");
    }
}
