//! Loading a `config.json` ([`load`], [`parse`], [`parse_with_note`]): duplicate keys refused, the
//! `*Config` class defaults of `transformers` (`configuration_<family>.py`) applied, and the
//! family's reader called.

use serde_json::Value;

use crate::model::{Model, Norm, PositionEmbedding};

use super::error::HfConfigError;
use super::family::{
    Family, NotRead, NotReadFix, SUPPORTED, check_architecture_agrees, family_name, family_of,
    known_not_read, model_type_of_architecture,
};
use super::reader::{Reader, written};
use super::unique_keys::UniqueKeys;

/// A model read from a `config.json`, with a note on where its training length came from when
/// `--seq-len` was not given (printed with the model's origin).
#[derive(Debug, Clone, PartialEq)]
pub struct HfModel {
    pub model: Model,
    pub seq_len_note: Option<String>,
}

/// Reads a `config.json` file. `seq_len` is the user's `--seq-len`, when given; otherwise the model
/// trains on [`DEFAULT_TRAINING_SEQ_LEN`](super::DEFAULT_TRAINING_SEQ_LEN) tokens (fewer when the
/// config's position limit is lower).
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

/// Per-`model_type` defaults of the `*Config` classes in transformers, for keys a config.json may
/// leave out: (num_key_value_heads, head_dim, tie_word_embeddings). `None` for the KV heads means
/// "= num_attention_heads"; `None` for head_dim means hidden_size / num_attention_heads. Each as
/// the class's fields read in transformers' `models/<type>/configuration_<type>.py`.
pub(super) fn class_defaults(model_type: &str) -> (Option<u32>, Option<u32>, bool) {
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
pub(super) fn null_kv_heads_mean_heads(model_type: &str) -> bool {
    !matches!(model_type, "gemma" | "qwen2_moe" | "qwen3_moe")
}

pub fn parse_with_note(
    text: &str,
    path: &str,
    name: &str,
    seq_len: Option<u32>,
) -> Result<HfModel, HfConfigError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // Python's json.dump writes a non-finite float as NaN or Infinity, which JSON has not.
        if let Some((literal, key)) = super::non_finite::non_finite(text, &e) {
            return HfConfigError::Unsupported {
                path: path.to_string(),
                message: format!(
                    "{} is {literal}, which is not a finite number (JSON has no NaN or Infinity; Python's json.dump writes them for float('nan') and float('inf'), line {} column {}); write the model's finite value there, or drop the key for transformers' default",
                    match key {
                        Some(key) => format!("key \"{key}\""),
                        None => "a value".to_string(),
                    },
                    e.line(),
                    super::non_finite::char_column(text, &e)
                ),
            };
        }
        HfConfigError::Json {
        path: path.to_string(),
        // Python's json module refuses a byte-order mark too ("Unexpected UTF-8 BOM").
        message: if text.starts_with('\u{feff}') {
            "it starts with a UTF-8 byte-order mark, which JSON does not allow and transformers' json.load refuses; save it as UTF-8 without BOM".to_string()
        } else {
            e.to_string()
        },
    }
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
    let unknown = || HfConfigError::UnreadModelType {
        path: path.to_string(),
        found: model_type.clone(),
        supported: SUPPORTED.join(", "),
        fix: match super::unknown::shape_flags(obj) {
            Some(flags) => format!(
                "this config's values: {flags}, then what the model adds beyond them, as far as tpsim's flags say it"
            ),
            None => "--layers/--hidden/--heads".to_string(),
        },
    };
    if let Some(NotRead { message, fix }) = known_not_read(&model_type) {
        return Err(HfConfigError::Unsupported {
            path: path.to_string(),
            message: match super::unknown::shape_flags(obj) {
                // The flags the message names, with this config's values.
                Some(flags) if fix == NotReadFix::ShapeFlags => {
                    format!("model_type {model_type:?}: {message}; this config's values: {flags}")
                }
                _ => format!("model_type {model_type:?}: {message}"),
            },
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf_config::DEFAULT_TRAINING_SEQ_LEN;

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
