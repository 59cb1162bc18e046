//! Parameter counts: per-layer pieces (attention, dense MLP, one expert, shared experts, router,
//! norms), per-layer totals for dense and MoE layers, and the model's total and active counts.

use super::Model;

impl Model {
    /// Weight-matrix parameters of one layer's attention. Standard: h·(q + 2·kv_width) + out·h.
    /// MLA (DeepSeek-V3 config names): q_a h·q_lora + q_b q_lora·heads·(qk+rope) (or one h·q
    /// projection without a query bottleneck), kv_a h·(kv_lora + rope), kv_b
    /// kv_lora·heads·(qk + v), o heads·v·h.
    pub fn attention_matrix_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        match &self.mla {
            None => h * (self.q_width() + 2.0 * self.kv_width()) + self.attention_out_width() * h,
            Some(mla) => {
                let heads = f64::from(self.heads);
                let (qk, v) = (f64::from(mla.qk_head_dim), f64::from(mla.v_head_dim));
                let rope = f64::from(mla.qk_pos_emb_head_dim);
                let kv_lora = f64::from(mla.kv_lora_rank);
                let q = match mla.q_lora_rank {
                    Some(r) => h * f64::from(r) + f64::from(r) * self.q_width(),
                    None => h * self.q_width(),
                };
                q + h * (kv_lora + rope)
                    + kv_lora * heads * (qk + v)
                    + self.attention_out_width() * h
            }
        }
    }

    /// Bias vectors of the attention projections: Q, K, V and output with `linear_bias`; Q, K, V
    /// only with `qkv_bias` (Qwen2). With MLA, one per projection output.
    fn attention_bias_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let qkv = match &self.mla {
            None => self.q_width() + 2.0 * self.kv_width(),
            Some(mla) => {
                let heads = f64::from(self.heads);
                let rope = f64::from(mla.qk_pos_emb_head_dim);
                let kv_lora = f64::from(mla.kv_lora_rank);
                mla.q_lora_rank.map_or(0.0, f64::from)
                    + self.q_width()
                    + kv_lora
                    + rope
                    + heads * (f64::from(mla.qk_head_dim) + f64::from(mla.v_head_dim))
            }
        };
        if self.linear_bias {
            qkv + h
        } else if self.qkv_bias {
            qkv
        } else {
            0.0
        }
    }

    /// All parameters of one layer's attention: matrices, biases, Qwen3's per-head q/k norms
    /// (`Qwen3Attention.q_norm`/`k_norm`, RMSNorm over head_dim, shared by the heads) or MLA's
    /// latent norms (`q_a_layernorm`, `kv_a_layernorm`, which are what Megatron's `--qk-layernorm`
    /// means under MLA). The input norm is in [`Model::layer_norm_params`].
    pub fn attention_params(&self) -> f64 {
        let norms = match &self.mla {
            Some(mla) => {
                self.norm_params(mla.q_lora_rank.map_or(0.0, f64::from))
                    + self.norm_params(f64::from(mla.kv_lora_rank))
            }
            None if self.qk_norm => 2.0 * self.norm_params(f64::from(self.head_dim)),
            None => 0.0,
        };
        self.attention_matrix_params() + self.attention_bias_params() + norms
    }

    /// Parameters of one MLP of inner width `ffn` on the model's width h: h·up + ffn·h, plus
    /// biases up + h.
    fn mlp_params_of(&self, ffn: u32) -> f64 {
        self.mlp_params_at(ffn, f64::from(self.hidden))
    }

    /// Parameters of one MLP of inner width `ffn` whose input and output are `width` wide.
    fn mlp_params_at(&self, ffn: u32, width: f64) -> f64 {
        let up = self.up_width(ffn);
        let biases = if self.linear_bias { up + width } else { 0.0 };
        width * up + f64::from(ffn) * width + biases
    }

    /// Parameters of a dense layer's MLP.
    pub fn dense_mlp_params(&self) -> f64 {
        self.mlp_params_of(self.ffn_hidden)
    }

    /// Parameters of one routed expert (an MLP of `moe.ffn_hidden` on the experts' width,
    /// [`Model::expert_width`]); 0 for a dense model.
    pub fn expert_params(&self) -> f64 {
        self.moe.map_or(0.0, |moe| {
            self.mlp_params_at(moe.ffn_hidden, self.expert_width())
        })
    }

    /// LatentMoE's two projections of one MoE layer, h → latent before the dispatch and latent →
    /// h after the combine (`MoELayer.fc1_latent_proj`, `fc2_latent_proj`: `TELinear`s with the
    /// layer's bias setting); 0 without a latent width. Every TP rank holds them whole
    /// (`parallel_mode="duplicated"`).
    pub fn latent_projection_params(&self) -> f64 {
        match self.moe.and_then(|moe| moe.latent_size) {
            Some(latent) => {
                let (h, latent) = (f64::from(self.hidden), f64::from(latent));
                let biases = if self.linear_bias { latent + h } else { 0.0 };
                2.0 * h * latent + biases
            }
            None => 0.0,
        }
    }

    /// Whether the MoE layers have shared experts beside the routed ones.
    pub fn has_shared_experts(&self) -> bool {
        self.moe.is_some_and(|moe| moe.shared_expert_ffn_hidden > 0)
    }

    /// Parameters of an MoE layer's shared experts (all of them, plus Qwen2-MoE's h → 1 gate).
    pub fn shared_expert_params(&self) -> f64 {
        match self.moe {
            Some(moe) if moe.shared_expert_ffn_hidden > 0 => {
                let gate = if moe.shared_expert_gate {
                    f64::from(self.hidden)
                } else {
                    0.0
                };
                self.mlp_params_of(moe.shared_expert_ffn_hidden) + gate
            }
            _ => 0.0,
        }
    }

    /// Router of one MoE layer: an h × experts matrix (Megatron `TopKRouter.weight`), plus a bias
    /// with `linear_bias` (GPT-OSS `router.bias`).
    pub fn router_params(&self) -> f64 {
        self.moe.map_or(0.0, |moe| {
            let e = f64::from(moe.experts);
            e * f64::from(self.hidden) + if self.linear_bias { e } else { 0.0 }
        })
    }

    /// The norms in front of attention and MLP: two per layer, or one when they share it.
    pub fn layer_norm_params(&self) -> f64 {
        let count = if self.shared_layer_norm { 1.0 } else { 2.0 };
        count * self.norm_params(f64::from(self.hidden))
    }

    /// Whether layer `layer` (0-based) has an MoE MLP: after the first dense layers, every
    /// `layer_freq`-th layer (Megatron's integer `--moe-layer-freq`; DeepSeek's
    /// `first_k_dense_replace`).
    pub fn is_moe_layer(&self, layer: u32) -> bool {
        if let Some(hybrid) = &self.hybrid {
            return hybrid.pattern.as_bytes().get(layer as usize) == Some(&b'E');
        }
        self.moe.is_some_and(|moe| {
            layer < self.layers
                && layer >= moe.first_dense_layers
                && (layer - moe.first_dense_layers).is_multiple_of(moe.layer_freq)
        })
    }

    /// Whether every layer (and so every MTP layer) is an MoE layer: no dense prefix, every layer
    /// MoE; where no stage can differ from another in its mix.
    pub fn every_layer_moe(&self) -> bool {
        if let Some(hybrid) = &self.hybrid {
            return hybrid.pattern.bytes().all(|symbol| symbol == b'E');
        }
        self.moe
            .is_some_and(|moe| moe.first_dense_layers == 0 && moe.layer_freq == 1)
    }

    /// MoE layers among the layers [start, end): those at or past the dense prefix whose offset
    /// from it is a multiple of the frequency (`is_moe_layer`), counted in closed form.
    pub fn moe_layers_between(&self, start: u32, end: u32) -> u32 {
        if let Some(hybrid) = &self.hybrid {
            let end = end.min(self.layers) as usize;
            let start = (start as usize).min(end);
            return hybrid.pattern.as_bytes()[start..end]
                .iter()
                .filter(|symbol| **symbol == b'E')
                .count() as u32;
        }
        match self.moe {
            Some(moe) if moe.layer_freq > 0 => {
                let (k, f) = (moe.first_dense_layers, moe.layer_freq);
                let end = end.min(self.layers);
                let start = start.max(k);
                if end <= start {
                    0
                } else {
                    (end - k).div_ceil(f) - (start - k).div_ceil(f)
                }
            }
            _ => 0,
        }
    }

    /// Layers with an MoE MLP.
    pub fn moe_layers(&self) -> u32 {
        if let Some(hybrid) = &self.hybrid {
            return hybrid.counts().moe;
        }
        match self.moe {
            Some(moe) if self.layers > moe.first_dense_layers && moe.layer_freq > 0 => {
                (self.layers - moe.first_dense_layers).div_ceil(moe.layer_freq)
            }
            _ => 0,
        }
    }

    /// Layers with a dense MLP (all of them in a dense model).
    pub fn dense_layers(&self) -> u32 {
        self.layers - self.moe_layers()
    }

    /// All parameters of one dense layer: attention, MLP, norms. For GPT (layernorm, biases, MHA,
    /// 4h) this is 12h² + 13h, Narayanan et al. 2021 eq. 2's per-layer term.
    pub fn dense_layer_params(&self) -> f64 {
        self.attention_params() + self.dense_mlp_params() + self.layer_norm_params()
    }

    /// All parameters of one MoE layer: attention, router, every routed expert, shared experts, norms.
    pub fn moe_layer_params(&self) -> f64 {
        let experts = self.moe.map_or(0.0, |moe| f64::from(moe.experts));
        self.attention_params()
            + self.router_params()
            + self.latent_projection_params()
            + experts * self.expert_params()
            + self.shared_expert_params()
            + self.layer_norm_params()
    }

    /// Parameters of one MoE layer that one token uses: as [`Model::moe_layer_params`] with only
    /// its top-k routed experts.
    pub fn moe_layer_active_params(&self) -> f64 {
        let topk = self.moe.map_or(0.0, |moe| f64::from(moe.router_topk));
        self.attention_params()
            + self.router_params()
            + self.latent_projection_params()
            + topk * self.expert_params()
            + self.shared_expert_params()
            + self.layer_norm_params()
    }

    /// Parameters of one transformer layer, averaged over the layers: every layer's count for a
    /// dense model; for an MoE model (dense layers + MoE layers) / layers, so that
    /// layers × layer_params is still the blocks' total.
    pub fn layer_params(&self) -> f64 {
        if self.is_hybrid() {
            return self.hybrid_blocks_params(false) / f64::from(self.layers);
        }
        if self.moe.is_none() {
            return self.dense_layer_params();
        }
        (f64::from(self.dense_layers()) * self.dense_layer_params()
            + f64::from(self.moe_layers()) * self.moe_layer_params())
            / f64::from(self.layers)
    }

    /// Parameters of a hybrid stack's layers (all of them, or with `active` those one token uses):
    /// each symbol's block and its pre-norm (one per layer, fused into the block's first linear in
    /// Megatron-Core's hybrid specs but a parameter all the same).
    fn hybrid_blocks_params(&self, active: bool) -> f64 {
        self.hybrid_run_params(self.block_counts(), active)
    }

    /// Parameters of a run of a hybrid stack's layers with `counts` blocks (one pipeline stage's
    /// slice of the pattern), each block with its pre-norm, every routed expert counted.
    pub fn hybrid_blocks_params_of(&self, counts: super::BlockCounts) -> f64 {
        self.hybrid_run_params(counts, false)
    }

    fn hybrid_run_params(&self, counts: super::BlockCounts, active: bool) -> f64 {
        let experts = self.moe.map_or(0.0, |moe| {
            f64::from(if active { moe.router_topk } else { moe.experts })
        });
        let moe_block = self.router_params()
            + self.latent_projection_params()
            + experts * self.expert_params()
            + self.shared_expert_params();
        f64::from(counts.mamba) * self.mamba_params()
            + f64::from(counts.attention) * self.attention_params()
            + f64::from(counts.mlp) * self.dense_mlp_params()
            + f64::from(counts.moe) * moe_block
            + f64::from(counts.layers()) * self.norm_params(f64::from(self.hidden))
    }

    /// Routed copies of each token in an MoE layer: top-k (0 for a dense model). The EP all-to-all
    /// moves this many hidden vectors per token each way (dispatch and combine).
    pub fn routed_tokens_per_token(&self) -> f64 {
        self.moe.map_or(0.0, |moe| f64::from(moe.router_topk))
    }

    /// Input embedding (plus learned positions) parameters.
    pub fn embedding_params(&self) -> f64 {
        self.word_embedding_params() + self.position_embedding_params()
    }

    /// The vocabulary embedding, V·h: split over TP ranks by Megatron's `VocabParallelEmbedding`.
    pub fn word_embedding_params(&self) -> f64 {
        f64::from(self.vocab) * f64::from(self.hidden)
    }

    /// Learned absolute positions, s·h: a plain embedding replicated on every TP rank (Megatron-LM
    /// `language_model.py` `position_embeddings`).
    pub fn position_embedding_params(&self) -> f64 {
        if self.learned_position_embeddings() {
            f64::from(self.seq_len) * f64::from(self.hidden)
        } else {
            0.0
        }
    }

    /// Output projection parameters (zero when tied to the input embedding), plus the final norm.
    pub fn output_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let projection = if self.tied_embeddings {
            0.0
        } else {
            f64::from(self.vocab) * h
        };
        projection + self.norm_params(h)
    }

    /// Whether the multi-token-prediction layers have an MoE MLP: they take the last decoder
    /// layer's kind (Megatron-Core `get_gpt_mtp_block_spec` reuses the decoder's layer spec;
    /// DeepSeek-V3's MTP module is an MoE block).
    pub fn mtp_layer_is_moe(&self) -> bool {
        self.is_moe_layer(self.layers.saturating_sub(1))
    }

    /// What one MTP depth adds besides its transformer layer: the norms of the hidden state and of
    /// the next token's embedding (`enorm`, `hnorm`), the h·2h projection of their concatenation
    /// (`eh_proj`) and the block's final norm (DeepSeek-V3 §2.2; Megatron-Core
    /// `MultiTokenPredictionLayer`). The embedding and output layer are the model's own.
    pub fn mtp_extra_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        2.0 * h * h + 3.0 * self.norm_params(h)
    }

    /// Parameters of every MTP depth (layer and extras); 0 without MTP.
    pub fn mtp_params(&self) -> f64 {
        let layer = if self.mtp_layer_is_moe() {
            self.moe_layer_params()
        } else {
            self.dense_layer_params()
        };
        f64::from(self.mtp_weight_copies()) * (layer + self.mtp_extra_params())
    }

    /// Parameters of the MTP depths one token uses (its top-k experts in an MoE MTP layer).
    pub fn mtp_active_params(&self) -> f64 {
        let layer = if self.mtp_layer_is_moe() {
            self.moe_layer_active_params()
        } else {
            self.dense_layer_params()
        };
        f64::from(self.mtp_weight_copies()) * (layer + self.mtp_extra_params())
    }

    /// Total parameter count (every expert, and the MTP layers when there are any).
    pub fn params(&self) -> f64 {
        f64::from(self.layers) * self.layer_params()
            + self.embedding_params()
            + self.output_params()
            + self.mtp_params()
    }

    /// Parameters one token uses: every dense part, the router, top-k routed experts and the shared
    /// experts, the embedding and the output layer. Equals [`Model::params`] for a dense model.
    /// (OpenAI's GPT-OSS model card quotes active parameters without the embedding table; see the
    /// tests in `tests/models.rs`.)
    pub fn active_params(&self) -> f64 {
        if self.moe.is_none() {
            return self.params();
        }
        if self.is_hybrid() {
            return self.hybrid_blocks_params(true)
                + self.embedding_params()
                + self.output_params()
                + self.mtp_active_params();
        }
        f64::from(self.dense_layers()) * self.dense_layer_params()
            + f64::from(self.moe_layers()) * self.moe_layer_active_params()
            + self.embedding_params()
            + self.output_params()
            + self.mtp_active_params()
    }

    /// K/V parameters of one layer that each tensor-parallel rank holds beyond an even 1/tp share
    /// when `tp` exceeds the KV heads: Megatron-Core then replicates the K/V heads so that every
    /// rank keeps one whole group (issue 13 item 5), i.e. max(kv_heads/tp, 1) heads of K and of V,
    /// 2·(h + bias)·head_dim each. 0 when tp ≤ kv_heads, and with MLA (its K/V up-projection is
    /// split by query head).
    pub fn kv_replication_params_per_tp_rank(&self, tp: u32) -> f64 {
        if self.mla.is_some() || tp <= self.kv_heads {
            return 0.0;
        }
        let per_head = (f64::from(self.hidden)
            + if self.linear_bias || self.qkv_bias {
                1.0
            } else {
                0.0
            })
            * f64::from(self.head_dim);
        let kv = f64::from(self.kv_heads);
        2.0 * per_head * (1.0 - kv / f64::from(tp))
    }
}

#[cfg(test)]
mod tests {
    use crate::specs::load_model;

    #[test]
    fn kv_heads_replicated_over_tp_add_one_group_per_rank() {
        // Qwen3-30B-A3B: 4 KV heads of 128 over hidden 2048. At tp 8 each rank keeps one K and one
        // V head (2·2048·128 weights) where an even split would give half of one.
        let m = load_model("qwen3-30b-a3b").unwrap();
        assert_eq!(m.kv_replication_params_per_tp_rank(4), 0.0);
        let extra = m.kv_replication_params_per_tp_rank(8);
        assert_eq!(extra, 2.0 * 2048.0 * 128.0 * 0.5);
        // The model's own count never depends on tp.
        assert_eq!(
            load_model("llama3-8b")
                .unwrap()
                .kv_replication_params_per_tp_rank(8),
            0.0
        );
    }
}
