//! Activations one GPU saves per transformer layer and micro-batch: Korthikanti et al. 2022 §4
//! (Table 2, eq. 2, 4, 5), generalised to grouped-query attention, gated MLPs, models without
//! dropout and FlashAttention (Dao et al. 2022 Alg. 2), with what low-precision norms, eager
//! kernels and torchtitan's per-op selective recompute keep beside it.

use crate::cost::LayerMix;
use crate::model::{BlockShares, Model};
use crate::plan::{Precision, Recompute};
use crate::training::AttentionKernel;

/// Activation bytes of one transformer layer for one micro-batch, Korthikanti et al. 2022 §4
/// (Table 2), generalised to grouped-query attention, gated MLPs, models without dropout and
/// FlashAttention.
///
/// For a GPT layer without parallelism the paper's count is sbh(34 + 5as/h):
/// attention 11sbh + 5as²b, MLP 19sbh, two layernorms 4sbh. Our terms, per piece:
/// - attention: QKV input 2sbh, Q 2sbh, K and V 4sb·kv_width, softmax output 2as²b, its dropout mask
///   as²b and output 2as²b, projection input 2sbh, dropout mask sbh ⇒ 7sbh + 4sb·kv_width + 5as²b;
///   where the heads are not `hidden` wide (Qwen3, GPT-OSS, multi-head latent attention) Q is
///   2sb·q_width and the projection input 2sb·(heads × v head dim) instead of 2sbh each;
/// - multi-head latent attention also keeps its compressed query and key-value latents twice each,
///   as the input and the normed output of the layer-norm-fused up projections (Megatron-Core
///   `MLASelfAttention`: `linear_q_up_proj` / `linear_kv_up_proj` are `TELayerNormColumnParallelLinear`,
///   which saves both), 4sb·(q_lora_rank + kv_lora_rank): the down projections are replicated over
///   TP, so only sequence parallelism splits them (they run on the rank's sequence shard and the
///   up projections gather it again in backward; multi_latent_attention.py: "q_compressed:
///   [s / TP, b, q_lora_rank]");
/// - MLP: input 2sbh, up-projection output 2sb·up_width, activation output 2sb·ffn, dropout mask sbh
///   (GeLU with ffn = 4h: 19sbh; SwiGLU keeps gate, up and their product);
/// - layernorms: 4sbh.
///
/// Tensor parallelism divides everything inside the column/row-split region by t and leaves the
/// 10sbh outside it (layernorm inputs, the two block inputs and dropout masks) replicated (eq. 2);
/// sequence parallelism divides those too (eq. 4). Selective recompute drops the as²b terms (§5);
/// full recompute keeps only the 2sbh layer input (§4.1, eq. 5). Without dropout the masks (2sbh and
/// as²b) and the dropout output (2as²b) are not stored. FlashAttention never stores the scores; it
/// keeps one fp32 log-sum-exp per row per head (4·a·s·b bytes; Dao et al. 2022 Alg. 2).
pub fn layer_activation_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
    attention: AttentionKernel,
) -> f64 {
    let blocks = model.block_shares();
    layer_activation_bytes_of(
        model,
        micro_batch,
        seq_len,
        (tp, 1, sp),
        recompute,
        attention,
        blocks,
    )
}

/// [`layer_activation_bytes`] of a layer holding `shares` of each block (one pipeline stage's
/// average layer, `cost::LayerMix::blocks`), at TP degree, CP degree and sequence parallelism
/// `split` (`seq_len` is the CP rank's share; cp enters only through the Mamba mixers' group
/// copies, `hybrid::mamba_saved_bytes_per_token`).
pub fn layer_activation_bytes_of(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    split: (u32, u32, bool),
    recompute: Recompute,
    attention: AttentionKernel,
    shares: BlockShares,
) -> f64 {
    let (tp, cp, sp) = split;
    let (s, b, h) = (
        f64::from(seq_len),
        f64::from(micro_batch),
        f64::from(model.hidden),
    );
    let a = f64::from(model.heads);
    let t = f64::from(tp);
    let sbh = s * b * h;
    let replicated_split = if sp { t } else { 1.0 };
    if recompute == Recompute::Full {
        return 2.0 * sbh / replicated_split;
    }
    let masks = if model.dropout { 1.0 } else { 0.0 };
    let sb = s * b;
    let attention_split = 2.0 * sb * model.q_width()
        + 2.0 * sb * model.attention_out_width()
        + 4.0 * sb * model.kv_width();
    // QK-norm keeps its inputs, Q and K before the norm, for its backward (the normed copies are
    // what RoPE and the attention keep, counted above).
    let qk_norm_inputs = if model.qk_norm {
        2.0 * sb * (model.q_width() + model.kv_width())
    } else {
        0.0
    };
    let attention_split = attention_split + qk_norm_inputs;
    let latents = model.mla.map_or(0.0, |mla| {
        4.0 * sb * f64::from(mla.q_lora_rank.unwrap_or(0) + mla.kv_lora_rank)
    });
    let mlp_split = 2.0 * s * b * model.mlp_up_width() + 2.0 * s * b * f64::from(model.ffn_hidden);
    // A transformer layer's blocks: one attention and one MLP, two norms; a hybrid stack's layer
    // each block's share and one norm (`Model::block_shares_of`), plus its Mamba mixers' tensors.
    let mamba_split =
        shares.mamba * sb * crate::cost::hybrid::mamba_saved_bytes_per_token(model, tp, cp);
    // Per block: the norm's input and output and the residual's dropout mask.
    let outside_tp = shares.norms * (4.0 + masks) * sbh;
    let scores = match (attention, recompute) {
        (AttentionKernel::Flash, _) => 4.0 * a * s * b,
        (AttentionKernel::Unfused, Recompute::Selective) => 0.0,
        (AttentionKernel::Unfused, _) => (2.0 + 3.0 * masks) * a * s * s * b,
    };
    (outside_tp + shares.attention * latents) / replicated_split
        + (shares.attention * (attention_split + scores) + shares.mlp * mlp_split + mamba_split) / t
}

/// Bytes per element a layer keeps of each of its norm outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormOutputBytes {
    /// The attention side's (QKV input).
    pub attention: f64,
    /// A dense layer's MLP side.
    pub dense_mlp: f64,
    /// An MoE layer's MLP side (router, experts, shared experts).
    pub moe_mlp: f64,
}

/// What a layer keeps of its norm outputs under `precision`: bf16, two bytes each. Under low
/// precision one byte where the norm is fused into the GEMM that reads it (Transformer Engine's
/// `LayerNormLinear` / `LayerNormMLP` keep only the quantized `ln_out`); two for multi-latent
/// attention's input norm, whose output two separate down projections each quantize; for an MoE
/// layer's pre-MLP norm the router's bf16 two (`RouterGatingLinearFunction` saves `inp`,
/// Megatron-Core moe/moe_utils.py) and the shared experts' quantized copy beside them.
pub fn norm_output_bytes(model: &Model, precision: Precision) -> NormOutputBytes {
    const BF16: f64 = 2.0;
    if precision == Precision::Bf16 {
        return NormOutputBytes {
            attention: BF16,
            dense_mlp: BF16,
            moe_mlp: BF16,
        };
    }
    NormOutputBytes {
        attention: if model.mla.is_some() { 2.0 } else { 1.0 },
        dense_mlp: 1.0,
        moe_mlp: BF16 + if model.has_shared_experts() { 1.0 } else { 0.0 },
    }
}

/// Bytes per element of the two norm outputs (attention side, MLP side) low-precision training
/// saves over bf16's, per layer on average (`norm_output_bytes`; negative where it keeps more).
pub fn norm_output_fp8_saving(model: &Model) -> f64 {
    norm_output_fp8_saving_at(model, LayerMix::whole_model(model))
}

/// [`norm_output_fp8_saving`] for layers of `mix` (one stage's).
pub fn norm_output_fp8_saving_at(model: &Model, mix: LayerMix) -> f64 {
    let kept = norm_output_bytes(model, Precision::Fp8);
    let bf16 = 2.0;
    let moe_share = mix.moe_share;
    // A hybrid layer's blocks by share (`LayerMix::blocks`); a Mamba block's norm is fused into
    // `in_proj`, which keeps its quantized copy alone, as a dense MLP's.
    let shares = mix.blocks;
    shares.attention * (bf16 - kept.attention)
        + (shares.mlp - moe_share) * (bf16 - kept.dense_mlp)
        + moe_share * (bf16 - kept.moe_mlp)
        + shares.mamba * (bf16 - kept.dense_mlp)
}

/// Activation bytes per token one layer's autograd keeps under PyTorch eager beyond what
/// `layer_activation_bytes` counts for the fused kernels, per TP rank, when nothing is recomputed
/// (torchtitan's Llama without `torch.compile`, torchtitan/models/norms.py and models/llama/model.py
/// at its 2024-12 benchmark commit 9dec370):
/// - each `RMSNorm` keeps the fp32 upcast of its input (`pow` and the multiply save it) beside the
///   bf16 normalized output the weight multiply saves, where a fused norm keeps its bf16 input:
///   4 bytes per element more, for both norms (outside the TP region, split by SP);
/// - SwiGLU's product saves silu's output beside w1's and w3's outputs: 2 bytes per ffn element more
///   in dense layers (the experts of MoE layers are counted as Megatron's);
/// - with QK-norm, its two RMSNorms keep the fp32 upcasts of Q and K, 4 bytes per element.
pub fn eager_saved_bytes_per_token(model: &Model, tp: u32, sp: bool, moe_share: f64) -> f64 {
    let t = f64::from(tp);
    let sp_split = if sp { t } else { 1.0 };
    let norms = 2.0 * 4.0 * f64::from(model.hidden) / sp_split;
    let silu_output = if model.gated_mlp {
        (1.0 - moe_share) * 2.0 * f64::from(model.ffn_hidden) / t
    } else {
        0.0
    };
    // QK-norm's eager RMSNorms keep the fp32 upcast of Q and K as the block norms keep theirs.
    let qk_norms = if model.qk_norm {
        4.0 * (model.q_width() + model.kv_width()) / t
    } else {
        0.0
    };
    norms + silu_output + qk_norms
}

/// Activation bytes per token one layer keeps, per TP rank, when K and V are expanded to every
/// query head before attention (`Training::sdpa_repeats_kv`) and nothing is recomputed: SDPA
/// saves K and V as `repeat_kv` expanded them, 2 bytes × 2 × (q − kv width) more under
/// grouped-query attention, eager or compiled (the expanded tensors are SDPA's inputs).
pub fn expanded_kv_saved_bytes_per_token(model: &Model, tp: u32) -> f64 {
    if model.kv_heads < model.heads {
        2.0 * 2.0 * (model.q_width() - model.kv_width()) / f64::from(tp)
    } else {
        0.0
    }
}

/// Activation bytes one layer keeps under torchtitan's per-op selective AC
/// (`SelectiveRecompute::AlternateMatmuls`), per TP rank: the block input (the checkpoint's
/// input, 2sbh, split by sequence parallelism), the saved matmul outputs — Q (wq), V (wv) and the
/// first MLP matmul w1 (2sb × width / t each), and, with a gate, the down projection w2's local
/// output (2sbh: a row-parallel matmul's full-size partial sum) — SDPA's output and fp32
/// log-sum-exp, and under TP with sequence parallelism the two reduce-scatter outputs (2sbh/t
/// each). Everything else (norms, RoPE, the activation, wk, wo, w3) is recomputed.
pub fn alternate_matmul_activation_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
) -> f64 {
    let (sb, h, t) = (
        f64::from(seq_len) * f64::from(micro_batch),
        f64::from(model.hidden),
        f64::from(tp),
    );
    let sp_split = if sp { t } else { 1.0 };
    let block_input = 2.0 * sb * h / sp_split;
    let sharded =
        2.0 * sb * (model.q_width() + model.attention_out_width() + f64::from(model.ffn_hidden))
            / t
            + 2.0 * sb * crate::cost::compute::kv_width_per_rank(model, tp)
            + 4.0 * f64::from(model.heads) * sb / t;
    let down_output = if model.gated_mlp { 2.0 * sb * h } else { 0.0 };
    let reduce_scatter_outputs = if tp > 1 && sp {
        2.0 * 2.0 * sb * h / t
    } else {
        0.0
    };
    block_input + sharded + down_output + reduce_scatter_outputs
}
