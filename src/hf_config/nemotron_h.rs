//! Nemotron-H configs (`configuration_nemotron_h.py`): the hybrid Mamba-Transformer pattern and its
//! MTP layers.

use serde_json::Value;

use crate::model::{Model, Moe, Norm, PositionEmbedding};

use super::error::HfConfigError;
use super::reader::{Reader, written};

impl Reader<'_> {
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
    pub(super) fn nemotron_h(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
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
}
