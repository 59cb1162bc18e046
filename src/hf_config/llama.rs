//! The Llama-like families (llama, mistral, qwen2, qwen3, gemma, gpt2, gpt_neox, falcon and their
//! MoE kin mixtral, qwen2_moe, qwen3_moe), read as `transformers`' `configuration_<family>.py` reads them.

use serde_json::Value;

use crate::model::{Model, Moe, Norm};

use super::error::HfConfigError;
use super::parse::{class_defaults, null_kv_heads_mean_heads};
use super::reader::Reader;

impl Reader<'_> {
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
    fn mlp_only_layers(&self, layers: u32) -> Result<u32, HfConfigError> {
        const KEY: &str = "mlp_only_layers";
        let Some(v) = self.obj.get(KEY).filter(|v| !v.is_null()) else {
            return Ok(0);
        };
        let Some(list) = v.as_array() else {
            return Err(self.bad(KEY, v, "a list of layer indices"));
        };
        // An index past the stack (Qwen2MoeDecoderLayer tests `layer_idx not in mlp_only_layers`
        // for layer_idx in 0..num_hidden_layers, so it never matches): a slip, said as one.
        let past: Vec<String> = list
            .iter()
            .filter(|x| x.as_u64().is_some_and(|i| i >= u64::from(layers)))
            .map(ToString::to_string)
            .collect();
        if !past.is_empty() {
            return Err(self.unsupported(format!(
                "\"{KEY}\" {v}: {} out of range: the model has {layers} layers (\"num_hidden_layers\"), numbered 0 to {}; give indices below {layers} (e.g. [0, 1] for two dense layers first), or drop the key for none",
                if past.len() == 1 {
                    format!("index {} is", past[0])
                } else {
                    format!("indices {} are", past.join(", "))
                },
                layers.saturating_sub(1)
            )));
        }
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
    pub(super) fn llama_like(
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
                    first_dense_layers: self.mlp_only_layers(layers)?,
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
                // transformers' Qwen2Config / Qwen3Config: with `use_sliding_window`, layer i
                // slides only where `sliding_window` is set (class default 4096) and i >=
                // `max_window_layers` (class default 28), the `layer_types` they derive; a config
                // whose `max_window_layers` reaches `num_hidden_layers` (Qwen2-7B-Instruct's
                // 28 of 28, Qwen2-0.5B's 24 of 24) or whose window is null runs full attention in every layer.
                // A `layer_types` given is taken as written (checked to list every layer,
                // `layer_type_validation`), and a layer slides only where it says
                // "sliding_attention": one of `num_hidden_layers` entries, all "full_attention",
                // runs full attention everywhere (it was refused as an unmodelled window).
                _ if self.flag("use_sliding_window")? == Some(true)
                    && (matches!(self.obj.get("sliding_window"), Some(Value::Null))
                        || match self.obj.get("layer_types") {
                            None | Some(Value::Null) => {
                                self.count_or("max_window_layers", 28)? >= layers
                            }
                            Some(Value::Array(types)) => {
                                types.len() == layers as usize
                                    && types.iter().all(|t| t.as_str() == Some("full_attention"))
                            }
                            Some(_) => false,
                        }) =>
                {
                    None
                }
                // transformers' `layer_type_validation` refuses a list that does not name every
                // layer; said as that, not as the window tpsim does not model.
                _ if self.flag("use_sliding_window")? == Some(true)
                    && self.obj.get("layer_types").is_some_and(|v| {
                        !v.is_null()
                            && !v.as_array().is_some_and(|types| {
                                types.len() == layers as usize && types.iter().all(Value::is_string)
                            })
                    }) =>
                {
                    return Err(self.unsupported(format!(
                        "key \"layer_types\" is {}, not a list of {layers} attention types (one per layer of \"num_hidden_layers\" {layers}, as transformers' layer_type_validation requires); correct it in the config, or remove it for the layers \"max_window_layers\" sets",
                        match &self.obj["layer_types"] {
                            Value::Array(types) if types.iter().all(Value::is_string) =>
                                format!("a list of {} entries", types.len()),
                            Value::Array(_) => "a list with an entry that is not a string".to_string(),
                            other => super::reader::written(self.text, "layer_types", other),
                        }
                    )));
                }
                _ if self.flag("use_sliding_window")? == Some(true) => {
                    return Err(self.unsupported(
                        "key \"use_sliding_window\" is true: Qwen's sliding window (on the layers from \"max_window_layers\" on) is not modelled, and counting full attention there would be wrong; set it to false or give the shape with flags and --attention-window".into(),
                    ));
                }
                _ => None,
            },
        })
    }
}
