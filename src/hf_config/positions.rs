//! Positions and the sequence: RoPE (theta, partial rotary, YaRN as `transformers`'
//! `modeling_rope_utils.py` reads it), sliding attention windows and the training length.

use serde_json::Value;

use crate::model::PositionEmbedding;

use super::error::HfConfigError;
use super::family::{DEFAULT_TRAINING_SEQ_LEN, Family};
use super::reader::{Reader, written};

impl Reader<'_> {
    /// The share of each head the rotary embedding rotates, from `key` (`partial_rotary_factor`;
    /// GPT-NeoX's `rotary_pct`), or the config class's `default` when absent or null; `None` for
    /// the whole head (`Model::rotary_percent`).
    pub(super) fn rotary_share(
        &self,
        key: &'static str,
        default: f64,
    ) -> Result<Option<f64>, HfConfigError> {
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
    pub(super) fn rope_theta(&self) -> Result<Option<f64>, HfConfigError> {
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
    pub(super) fn no_rotary_share(&self, rule: &'static str) -> Result<Option<f64>, HfConfigError> {
        let key = "partial_rotary_factor";
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if v.as_f64() == Some(1.0) => Ok(None),
            Some(v) => Err(self.bad(key, v, rule)),
        }
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
    pub(super) fn rope(&self, yarn_kept_as_rope: bool) -> Result<PositionEmbedding, HfConfigError> {
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

    /// A sliding window of `sliding_window` tokens (HF attends to that many keys, itself
    /// included), and which layers keep full attention: from `layer_types` ("full_attention" /
    /// "sliding_attention", every N-th layer full as Megatron-Core's `window_attn_skip_freq`
    /// says it), else `default_full_every`. An absent `sliding_window` takes the class default
    /// `class_window` (MistralConfig 4096, GptOssConfig 128, MixtralConfig None); `null` is no
    /// window, as the classes read None. None when there is no window.
    pub(super) fn attention_window(
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
    pub(super) fn seq_len(
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
}
