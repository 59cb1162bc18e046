//! DeepSeek-V3 (and Kimi-K2), GPT-OSS and GLM-4.5 configs, read as `transformers`'
//! `configuration_deepseek_v3.py`, `configuration_gpt_oss.py` and `configuration_glm4_moe.py` read them.

use serde_json::Value;

use crate::model::{Mla, Model, Moe, Norm};

use super::error::HfConfigError;
use super::parse::null_kv_heads_mean_heads;
use super::reader::Reader;

impl Reader<'_> {
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
    pub(super) fn deepseek_v3(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
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
    pub(super) fn gpt_oss(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
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
    pub(super) fn glm4_moe(&self, name: &str, seq_len: u32) -> Result<Model, HfConfigError> {
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
}
