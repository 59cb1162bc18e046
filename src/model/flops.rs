//! FLOP counts: forward FLOPs per layer (all-pairs attention as an unfused kernel runs it, and the
//! causal half that FlashAttention runs and model FLOPs count), per dense and MoE layer, and per
//! training step and token.

use super::Model;
use crate::units::Flops;

impl Model {
    /// Weight-matrix parameters a token multiplies in a dense layer (no biases, no norms).
    fn dense_layer_matrix_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let f = f64::from(self.ffn_hidden);
        self.attention_matrix_params() + h * self.mlp_up_width() + f * h
    }

    /// Weight-matrix parameters a token multiplies in an MoE layer: attention, router, its top-k
    /// experts (on the experts' width), the shared experts (and their gate), and LatentMoE's two
    /// projections.
    fn moe_layer_active_matrix_params(&self) -> f64 {
        let Some(moe) = self.moe else {
            return 0.0;
        };
        let h = f64::from(self.hidden);
        let width = self.expert_width();
        let expert = width * self.expert_up_width() + f64::from(moe.ffn_hidden) * width;
        let latent = moe.latent_size.map_or(0.0, |l| 2.0 * h * f64::from(l));
        let shared = if moe.shared_expert_ffn_hidden > 0 {
            let gate = if moe.shared_expert_gate { h } else { 0.0 };
            h * self.up_width(moe.shared_expert_ffn_hidden)
                + f64::from(moe.shared_expert_ffn_hidden) * h
                + gate
        } else {
            0.0
        };
        self.attention_matrix_params()
            + f64::from(moe.experts) * h
            + f64::from(moe.router_topk) * expert
            + shared
            + latent
    }

    /// A hybrid stack's weight-matrix parameters a token multiplies, averaged over its layers:
    /// each symbol's block, MoE blocks with their active experts.
    fn hybrid_layer_matrix_params(&self) -> f64 {
        let counts = self.block_counts();
        let h = f64::from(self.hidden);
        let dense_mlp = h * self.mlp_up_width() + f64::from(self.ffn_hidden) * h;
        let moe_block = self.moe_layer_active_matrix_params() - self.attention_matrix_params();
        (f64::from(counts.mamba) * self.mamba_matrix_params()
            + f64::from(counts.attention) * self.attention_matrix_params()
            + f64::from(counts.mlp) * dense_mlp
            + f64::from(counts.moe) * moe_block)
            / f64::from(self.layers)
    }

    /// Share of the s×s (query, key) pairs causal attention computes, averaged over the layers:
    /// 1/2 for full causal attention (the blocks on and below the diagonal; FlashAttention-2
    /// §3.1.1); in a layer with a window of w < s tokens each query sees at most w keys, w/s −
    /// w²/(2s²) of the pairs, the blocks a sliding-window kernel visits (FlashAttention's
    /// `window_size`, cuDNN's sliding-window mask). Layers keeping full attention under
    /// `full_every` count 1/2.
    pub fn causal_attention_share(&self, seq_len: u32) -> f64 {
        const FULL: f64 = 0.5;
        let Some(window) = self.attention_window else {
            return FULL;
        };
        let s = f64::from(seq_len.max(1));
        let w = f64::from(window.tokens).min(s);
        let local = if w >= s {
            FULL
        } else {
            w / s - 0.5 * (w / s) * (w / s)
        };
        let layers = f64::from(self.layers.max(1));
        let full_layers = f64::from(self.layers.checked_div(window.full_every).unwrap_or(0));
        (full_layers * FULL + (layers - full_layers) * local) / layers
    }

    /// Forward FLOPs of QKᵀ and AV over every (query, key) pair, for b sequences of s tokens:
    /// 2·b·s²·heads·(d_qk + d_v) (Narayanan et al. 2021 §3: 4bs²h for GPT).
    fn attention_core_all_pairs_flops(&self, b: f64, s: f64) -> f64 {
        let (qk, v) = self.attention_head_dims();
        2.0 * b * s * s * f64::from(self.heads) * (qk + v)
    }

    /// Forward FLOPs of an average layer's token mixing beyond its matrices, over `pair_share` of
    /// the (query, key) pairs for attention (1, or the causal share): a transformer layer's
    /// attention core; a hybrid layer's share of attention cores and of Mamba-2 scans
    /// (`Model::mamba_scan_flops_per_token`).
    fn mixing_flops(&self, b: f64, s: f64, pair_share: f64) -> f64 {
        let shares = self.block_shares();
        shares.attention * pair_share * self.attention_core_all_pairs_flops(b, s)
            + shares.mamba * b * s * self.mamba_scan_flops_per_token()
    }

    /// Forward FLOPs of one layer, averaged over the layers (MoE layers count their active
    /// experts), for `micro_batch` sequences of `seq_len` tokens: 2 FLOPs per weight per token for
    /// the matrices, plus QKᵀ and AV over EVERY (query, key) pair — Narayanan et al. 2021 §3:
    /// 24bsh² + 4bs²h for GPT. This is what an unfused kernel executes (it computes the masked
    /// half too); model FLOPs count the causal half only ([`Model::layer_causal_forward_flops`]).
    pub fn layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(2.0 * b * s * self.average_layer_matrix_params() + self.mixing_flops(b, s, 1.0))
    }

    /// Active weight-matrix parameters per layer, averaged over dense and MoE layers.
    fn average_layer_matrix_params(&self) -> f64 {
        if self.is_hybrid() {
            return self.hybrid_layer_matrix_params();
        }
        if self.moe.is_none() {
            return self.dense_layer_matrix_params();
        }
        (f64::from(self.dense_layers()) * self.dense_layer_matrix_params()
            + f64::from(self.moe_layers()) * self.moe_layer_active_matrix_params())
            / f64::from(self.layers)
    }

    /// Forward model FLOPs of one layer (averaged over the layers) with causal attention counted
    /// once: each query attends to the keys before it, so QKᵀ and AV cost half of
    /// [`Model::layer_forward_flops`]'s all-pairs term. This is what FlashAttention executes with a
    /// causal mask (Dao 2023, FlashAttention-2 §3.1.1) and what Megatron-Bridge 25.09+ counts
    /// (`src/megatron/bridge/training/utils/flop_utils.py` halves core attention; see
    /// validation/modern_runs.md caveat 1).
    pub fn layer_causal_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.average_layer_matrix_params()
                + self.mixing_flops(b, s, self.causal_attention_share(seq_len)),
        )
    }

    /// Causal forward model FLOPs of one dense layer (attention + dense MLP).
    pub fn dense_layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.dense_layer_matrix_params()
                + self.causal_attention_share(seq_len) * self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Causal forward model FLOPs of one MoE layer (attention, router, top-k experts, shared
    /// experts); 0 for a dense model.
    pub fn moe_layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        if self.moe.is_none() {
            return Flops(0.0);
        }
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.moe_layer_active_matrix_params()
                + self.causal_attention_share(seq_len) * self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Forward FLOPs of the matmuls torchtitan's per-op selective AC runs again in one layer
    /// (`SelectiveRecompute::AlternateMatmuls`): wk, wo and the third MLP matmul (w3, or w2 without a
    /// gate), each h × its width: 2·b·s·h·(kv_width + out_width + ffn). MoE layers are counted
    /// with the dense MLP's width, as the compute time counts them.
    pub fn alternate_matmul_recompute_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        let h = f64::from(self.hidden);
        Flops(
            2.0 * b
                * s
                * h
                * (self.kv_width() + self.attention_out_width() + f64::from(self.ffn_hidden)),
        )
    }

    /// Forward FLOPs of the attention core alone (QKᵀ and AV) with the causal mask: each query
    /// against the keys up to it, half of all pairs — what FlashAttention executes and what
    /// selective recompute repeats (Korthikanti et al. 2022 §5).
    pub fn attention_core_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        Flops(
            self.causal_attention_share(seq_len)
                * self.attention_core_all_pairs_flops(f64::from(micro_batch), f64::from(seq_len)),
        )
    }

    /// Forward FLOPs of the output (logit) layer: 2·b·s·h·V (Narayanan et al. 2021 eq. 3's V/(16lh) term).
    pub fn logits_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(2.0 * b * s * f64::from(self.hidden) * f64::from(self.vocab))
    }

    /// Model FLOPs of one training step over `sequences` sequences, without recompute: 3 × forward
    /// (backward is twice the forward), with active parameters only and causal attention counted
    /// once. For GPT this is Narayanan et al. 2021 eq. 3 with 72 in place of 96 (the 96 counts the
    /// recompute forward) and s/(12h) in place of s/(6h) (the causal half), which is
    /// Megatron-Bridge 25.09+ `flop_utils.py`.
    /// With MTP, each depth adds its layer, its h·2h projection and another pass of the output
    /// layer, as Megatron-Bridge's `flop_utils.py` counts them (`mtp_num_layers`).
    pub fn model_flops_per_step(&self, sequences: u32, seq_len: u32) -> Flops {
        let forward = self.layer_causal_forward_flops(sequences, seq_len) * f64::from(self.layers)
            + self.logits_forward_flops(sequences, seq_len)
            + self.mtp_forward_flops(sequences, seq_len);
        forward * 3.0
    }

    /// Forward FLOPs of the MTP depths: per depth, one layer of the last layer's kind, the
    /// 2h → h projection (2·b·s·2h·h) and the logits (2·b·s·h·V).
    pub fn mtp_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        if self.mtp_layers == 0 {
            return Flops(0.0);
        }
        let layer = if self.mtp_layer_is_moe() {
            self.moe_layer_forward_flops(micro_batch, seq_len)
        } else {
            self.dense_layer_forward_flops(micro_batch, seq_len)
        };
        let h = f64::from(self.hidden);
        let projection = 2.0 * f64::from(micro_batch) * f64::from(seq_len) * 2.0 * h * h;
        (layer + Flops(projection) + self.logits_forward_flops(micro_batch, seq_len))
            * f64::from(self.mtp_layers)
    }

    /// Model FLOPs per trained token (6 × active parameters in the matrices, plus causal attention
    /// and the logits): what MFU divides by.
    pub fn model_flops_per_token(&self, seq_len: u32) -> Flops {
        self.model_flops_per_step(1, seq_len) * (1.0 / f64::from(seq_len))
    }
}
