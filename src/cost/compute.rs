//! Compute time of one transformer layer (and the output layer) for one micro-batch on one GPU.
//!
//! Two parts: the GEMMs of Megatron's column/row split at their shard shapes, timed with a roofline
//! (Williams et al. 2009) whose compute roof is the profile's achievable GEMM throughput; and the
//! memory-bound element-wise kernels (norms, softmax, dropout, activation, residual), timed by the HBM
//! bytes they read and write. Backward GEMMs are two per forward GEMM (input and weight gradients,
//! same FLOPs), so backward is twice the forward (Narayanan et al. 2021 §3.1).

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{AttentionKernel, KernelFusion, SelectiveRecompute};

use super::cast::{self, CastSetting, LinearInput};
use crate::units::Seconds;

/// Bytes per element of GEMM operands and activations (bf16).
const ELEMENT_BYTES: f64 = 2.0;
/// Bytes per element of the fp32 logits the loss reads (Megatron upcasts for cross-entropy).
const LOGIT_BYTES: f64 = 4.0;

/// One GEMM of shape (m × k) · (k × n), repeated `batch` times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub batch: f64,
}

impl Gemm {
    pub fn flops(&self) -> f64 {
        2.0 * self.m * self.n * self.k * self.batch
    }
    /// Operand and result traffic, each read or written once.
    pub fn bytes(&self) -> f64 {
        ELEMENT_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n) * self.batch
    }
    /// Roofline time: the larger of compute at the achievable GEMM throughput (at the sustained
    /// clock, `GpuProfile::sustained_matmul_flops`) and memory traffic at the achieved HBM
    /// bandwidth. Small or skinny shards (high TP, small micro-batch) fall onto the
    /// memory roof; this is the default efficiency curve that calibration replaces: a calibrated
    /// profile gives the measured time of the exact shard shape, or its fitted curve.
    pub fn time(&self, cluster: &Cluster) -> f64 {
        let gpu = &cluster.gpu;
        if let Some(measured) = crate::cluster::calibration::calibrated_gemm_time(
            gpu, self.m, self.n, self.k, self.batch,
        ) {
            // Calibration times short runs, at the burst clock as `gemm_efficiency` is: a shape the
            // roofline puts on its compute roof runs at the sustained clock, one on the HBM roof
            // does not depend on it.
            let burst = self.flops() / (gpu.peak_flops().0 * gpu.gemm_efficiency);
            let memory = self.bytes() / gpu.achieved_hbm_bandwidth().0;
            return if burst >= memory {
                measured / gpu.sustained_clock_factor()
            } else {
                measured
            };
        }
        let compute = self.flops() / gpu.sustained_matmul_flops(gpu.gemm_efficiency).0;
        let memory = self.bytes() / cluster.gpu.achieved_hbm_bandwidth().0;
        compute.max(memory)
    }
}

/// Where one layer runs: its micro-batch and sequence, the TP and CP split, and the settings that
/// change its kernels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShard {
    pub micro_batch: u32,
    pub seq_len: u32,
    pub tp: u32,
    pub cp: u32,
    pub sp: bool,
    pub recompute: Recompute,
    /// What `Recompute::Selective` runs again (the framework's kind of selective recompute).
    pub selective: SelectiveRecompute,
    pub attention: AttentionKernel,
    /// Pieces each linear GEMM is cut into so TP communication can overlap it (1: not cut).
    /// Megatron-Core's userbuffers ring-exchange overlap runs one GEMM per TP rank's chunk.
    pub gemm_chunks: u32,
    /// Share of the bf16 peak the fused attention kernel reaches (`GpuProfile::attention_efficiency`).
    pub attention_efficiency: f64,
    /// Fused or eager element-wise kernels.
    pub kernel_fusion: KernelFusion,
    /// K and V expanded to every query head before attention (`Training::sdpa_repeats_kv`).
    pub sdpa_repeats_kv: bool,
    /// Rotary embeddings as one fused kernel (`Training::rope_fusion`); eager PyTorch counts its
    /// own (`eager_extra_bytes_per_token`).
    pub rope_fusion: bool,
    /// The linear GEMMs' precision and how their inputs are quantized (`cost::cast`).
    pub cast: CastSetting,
}

/// K/V width one TP rank holds: kv_heads·head_dim/t, or one whole group when t exceeds the KV heads
/// (Megatron-Core replicates query groups over the extra ranks).
pub fn kv_width_per_rank(model: &Model, tp: u32) -> f64 {
    let per_rank = model.kv_width() / f64::from(tp);
    if model.kv_heads < tp {
        f64::from(model.head_dim()).min(model.kv_width())
    } else {
        per_rank
    }
}

/// The forward GEMMs of one layer on one TP rank (one micro-batch, no context parallelism).
pub fn layer_gemms(model: &Model, micro_batch: u32, seq_len: u32, tp: u32) -> [Gemm; 6] {
    layer_gemms_sharded(model, micro_batch, seq_len, tp, 1)
}

/// The forward GEMMs of one layer on one TP×CP rank, in order: QKV (column-parallel), QKᵀ and AV
/// (per head, heads split over t; with context parallelism the rank's s/cp queries meet all s keys
/// over the ring), output projection (row-parallel), MLP up (column-parallel), MLP down
/// (row-parallel) — the seeds' column-then-row split.
pub fn layer_gemms_sharded(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    cp: u32,
) -> [Gemm; 6] {
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let local_s = s / f64::from(cp);
    let h = f64::from(model.hidden);
    // Per-head widths of QKᵀ and AV (they differ under multi-head latent attention).
    let (d_qk, d_v) = model.attention_head_dims();
    let tokens = b * local_s;
    let heads_per_rank = f64::from(model.heads) / t;
    // The projections into Q, K and V as one GEMM of the same FLOPs: with MLA its width is what the
    // down- and up-projections multiply out to (DeepSeek-V2 §2.1); with TP beyond the KV heads each
    // rank keeps a whole KV group.
    let qkv_width = if model.mla.is_some() {
        (model.attention_matrix_params() - model.attention_out_width() * h) / h / t
    } else {
        model.q_width() / t + 2.0 * kv_width_per_rank(model, tp)
    };
    [
        Gemm {
            m: tokens,
            k: h,
            n: qkv_width,
            batch: 1.0,
        },
        Gemm {
            m: local_s,
            k: d_qk,
            n: s,
            batch: b * heads_per_rank,
        },
        Gemm {
            m: local_s,
            k: s,
            n: d_v,
            batch: b * heads_per_rank,
        },
        Gemm {
            m: tokens,
            k: model.attention_out_width() / t,
            n: h,
            batch: 1.0,
        },
        Gemm {
            m: tokens,
            k: h,
            n: model.mlp_up_width() / t,
            batch: 1.0,
        },
        Gemm {
            m: tokens,
            k: f64::from(model.ffn_hidden) / t,
            n: h,
            batch: 1.0,
        },
    ]
}

/// HBM bytes of the element-wise kernels of one layer's forward, per TP rank. Each kernel reads its
/// inputs and writes its outputs once (fused as Megatron fuses them), over the tensors Korthikanti
/// et al. 2022 Table 2 lists:
/// layernorm 2sbh in + 2sbh out (×2 norms); fused scale-mask-softmax 2as²b in + 2as²b out; attention
/// dropout 2as²b in + 2as²b out + as²b mask; bias-dropout-add 2sbh + 2sbh in, 2sbh out, sbh mask
/// (×2); GeLU 2sb·ffn in, 2sb·ffn out (gated: 4sb·ffn in). Without dropout the masks and the
/// attention-dropout kernel disappear; FlashAttention keeps the scores on chip, so no s² traffic.
/// Returns (outside the TP region, inside it, the attention-score part) so callers can split by t
/// and drop what is not recomputed.
pub fn layer_elementwise_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    attention: AttentionKernel,
) -> (f64, f64, f64) {
    let (b, s) = (f64::from(micro_batch), f64::from(seq_len));
    let h = f64::from(model.hidden);
    let a = f64::from(model.heads);
    let f = f64::from(model.ffn_hidden);
    let sbh = s * b * h;
    let masks = if model.dropout { 1.0 } else { 0.0 };
    let norms = 2.0 * 4.0 * sbh;
    let residuals = 2.0 * (6.0 + masks) * sbh;
    let activation = ELEMENT_BYTES * s * b * (model.mlp_up_width() + f);
    let scores = match attention {
        AttentionKernel::Flash => 0.0,
        AttentionKernel::Unfused => (4.0 + 5.0 * masks) * a * s * s * b,
    };
    (norms + residuals, activation, scores)
}

/// HBM bytes of the per-head query and key norms' forward (Qwen3's, OLMo 2's QK-norm; Megatron-Core
/// `--qk-layernorm`: `q_layernorm` / `k_layernorm` are Transformer Engine norms of their own, each
/// reading its input and writing its output, 2 + 2 bytes per element), per TP rank before the
/// split by t: Q and K are `q_width` and `kv_width` wide. 0 without QK-norm.
pub fn qk_norm_bytes(model: &Model, micro_batch: u32, seq_len: u32) -> f64 {
    if !model.qk_norm {
        return 0.0;
    }
    let tokens = f64::from(micro_batch) * f64::from(seq_len);
    2.0 * ELEMENT_BYTES * tokens * (model.q_width() + model.kv_width())
}

/// HBM bytes per element of PyTorch eager's RMSNorm forward (torchtitan/models/norms.py `RMSNorm`:
/// `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight`): upcast 2 in + 4 out,
/// pow 4 + 4, mean 4 in, multiply 4 + 4, downcast 4 + 2, weight 2 + 2 = 36, where a fused norm
/// reads 2 and writes 2.
const EAGER_RMSNORM_BYTES_PER_ELEMENT: f64 = 36.0;
/// HBM bytes per element of Q and K in torchtitan's eager `apply_rotary_emb`: upcast 2 + 4, complex
/// multiply 4 + 4, downcast 4 + 2.
const EAGER_ROPE_BYTES_PER_ELEMENT: f64 = 20.0;
/// HBM bytes per element of a fused rotary-embedding kernel that reads a bf16 tensor and writes it
/// rotated: 2 + 2.
const FUSED_ROPE_BYTES_PER_ELEMENT: f64 = 2.0 * ELEMENT_BYTES;

/// HBM bytes per element of Megatron-Core's unfused rotary embedding (`rope_utils.
/// _apply_rotary_pos_emb_bshd`, run when `apply_rope_fusion` is off): `_rotate_half` negates one
/// half (2 + 2 per half element: 2) and concatenates the halves (2 + 2: 4); `t * cos` (2 + 2),
/// `rotate_half(t) * sin` (2 + 2), their sum (2 + 2 + 2) and the final `torch.cat` with the
/// unrotated part (2 + 2): 6 + 4 + 4 + 6 + 4 = 24, where the fused kernel moves 4. The first 20
/// are per rotated element (`t[..., :rot_dim]`), the cat's 4 per element of the whole head.
const UNFUSED_ROPE_BYTES_PER_ELEMENT: f64 = 12.0 * ELEMENT_BYTES;
/// Of those, the final `torch.cat`'s bytes per element of the whole head (read 2, write 2).
const UNFUSED_ROPE_CAT_BYTES_PER_ELEMENT: f64 = 2.0 * ELEMENT_BYTES;

/// HBM bytes per token of one layer's forward rotary embedding, before the split over TP ranks
/// (Q and K are split by heads, so all of it is inside the TP region); 0 for a model without
/// rotary embeddings (learned positions, ALiBi, none). `fused` is Megatron-Core's
/// `apply_rope_fusion` (`Training::rope_fusion`), on in every stack's benchmark recipes.
/// - Standard and grouped-query attention, fused: Transformer Engine's `fused_apply_rotary_pos_emb`
///   (Megatron-Core `rope_utils.apply_rotary_pos_emb` with `apply_rope_fusion`, called on the
///   query and on the key in `Attention.forward`, megatron/core/transformer/attention.py) reads
///   each and writes a rotated copy: 2 + 2 bytes per element of Q and K. Inductor's kernel for
///   torchtitan's `apply_rotary_emb` under `torch.compile` reads and writes the same tensors.
///   A partial rotary (`rotary_percent` < 1) copies the unrotated part through, so the whole
///   width counts. Unfused: `UNFUSED_ROPE_BYTES_PER_ELEMENT` of Q and K.
/// - Multi-head latent attention, fused: Megatron-Core's `fused_mla_rope_inplace` rotates the
///   trailing `qk_pos_emb_head_dim` of every query head in place, and `fused_mla_rope_kv_split`
///   reads the up-projected K/V (heads·(qk_head_dim + v_head_dim)) and writes K with the shared
///   rotary key appended (heads·(qk_head_dim + qk_pos_emb_head_dim)) and V (heads·v_head_dim)
///   (megatron/core/fusions/fused_mla_yarn_rope_apply.py). Unfused (`MLASelfAttention`,
///   multi_latent_attention.py): the unfused rotation, after a de-interleaving `torch.cat`
///   (`mla_rotary_interleaved`), of every head's rotary part and of the shared rotary key; then
///   `torch.cat` builds Q (2 + 2 per element) and K (the shared key read once, broadcast), and V
///   is made contiguous out of the K/V split (2 + 2).
/// - A partial rotary (`Model::rotary_percent` < 1, GPT-NeoX, GLM) pays the unfused operators on
///   its rotated part only (`t[..., :rot_dim]`) and the final `torch.cat` over the whole head:
///   20 bytes per rotated element and 4 per element; fused, the whole width as above.
///
/// The backward follows the forward, as for every element-wise kernel here (twice the forward):
/// the inverse rotation of dQ and dK. (The concatenation of dQ, dK and dV that Transformer
/// Engine's `SplitAlongDim.backward` makes whenever they are not one buffer is there with or
/// without rotary embeddings, and is not counted for either.)
pub fn rope_bytes_per_token(model: &Model, fused: bool) -> f64 {
    if !model.position_embedding.is_rotary() {
        return 0.0;
    }
    let per_element = if fused {
        FUSED_ROPE_BYTES_PER_ELEMENT
    } else {
        UNFUSED_ROPE_BYTES_PER_ELEMENT
    };
    match model.mla {
        None if !fused => {
            let rotated = model.rotary_percent.unwrap_or(1.0);
            let rotation = UNFUSED_ROPE_BYTES_PER_ELEMENT - UNFUSED_ROPE_CAT_BYTES_PER_ELEMENT;
            (rotation * rotated + UNFUSED_ROPE_CAT_BYTES_PER_ELEMENT)
                * (model.q_width() + model.kv_width())
        }
        None => per_element * (model.q_width() + model.kv_width()),
        Some(mla) => {
            let heads = f64::from(model.heads);
            let (qk, rope, v) = (
                f64::from(mla.qk_head_dim),
                f64::from(mla.qk_pos_emb_head_dim),
                f64::from(mla.v_head_dim),
            );
            if fused {
                let query_in_place = per_element * heads * rope;
                let kv_split =
                    ELEMENT_BYTES * heads * (qk + v) + ELEMENT_BYTES * heads * (qk + rope + v);
                query_in_place + kv_split
            } else {
                // MLA's rotation de-interleaves first (`mla_rotary_interleaved`: one more
                // `torch.cat`, 2 + 2 per element).
                let rotations = (per_element + 2.0 * ELEMENT_BYTES) * (heads * rope + rope);
                let query_cat = 2.0 * ELEMENT_BYTES * heads * (qk + rope);
                // The shared rotary key is read once, broadcast over the heads.
                let key_cat =
                    ELEMENT_BYTES * (heads * qk + rope) + ELEMENT_BYTES * heads * (qk + rope);
                let value_copy = 2.0 * ELEMENT_BYTES * heads * v;
                rotations + query_cat + key_cat + value_copy
            }
        }
    }
}

/// HBM bytes per token of one layer's forward that PyTorch eager adds over the fused kernels
/// `layer_elementwise_bytes` counts, split as that function splits (outside the TP region, the
/// attention side inside it, the MLP side inside it); read from torchtitan's Llama
/// (torchtitan/models/llama/model.py, norms.py at the 2024-12 benchmark commit):
/// - two RMSNorms at 36 bytes per element instead of 4;
/// - rotary embedding of Q and K at 20 bytes per element, of which the fused kernel's read and
///   write (`rope_bytes_per_token`, counted for every framework) are 4: 16 more;
/// - not `repeat_kv`, which is counted compiled or not (`repeat_kv_bytes_per_token`);
/// - not the attention output's `transpose(1, 2).contiguous()`: SDPA's flash and
///   memory-efficient kernels write their output as [batch, sequence, heads, head_dim] and return
///   it transposed (`_scaled_dot_product_flash_attention_cuda`: `empty_like` of the transposed
///   query, returned `.transpose(1, 2)`; aten/src/ATen/native/transformers/cuda/attention.cu), so
///   transposing it back is already contiguous and copies nothing;
/// - SwiGLU's `silu(w1(x)) * w3(x)` as two kernels (silu 2 + 2, product 2 + 2 + 2 bytes per ffn
///   element) where the fused activation reads 4 and writes 2: 4 more per ffn element.
///
/// The backward's share follows the forward's, as for the fused kernels (twice the forward).
pub fn eager_extra_bytes_per_token(model: &Model) -> (f64, f64, f64) {
    let h = f64::from(model.hidden);
    let q = model.q_width();
    let kv = model.kv_width();
    let norms = 2.0 * (EAGER_RMSNORM_BYTES_PER_ELEMENT - 2.0 * ELEMENT_BYTES) * h;
    let rope = if model.position_embedding.is_rotary() {
        (EAGER_ROPE_BYTES_PER_ELEMENT - FUSED_ROPE_BYTES_PER_ELEMENT) * (q + kv)
    } else {
        0.0
    };
    let swiglu = if model.gated_mlp {
        2.0 * ELEMENT_BYTES * f64::from(model.ffn_hidden)
    } else {
        0.0
    };
    (norms, rope, swiglu)
}

/// HBM bytes per token of one layer's forward that expanding K and V to every query head before
/// attention takes (torchtitan's `repeat_kv`: `unsqueeze`, `expand`, `reshape`,
/// torchtitan/models/llama3/model.py; grouped-query attention only): a read of the K/V width and
/// a write of the query width, 2 bytes each, for K and V (inside the TP region). Eager or
/// compiled alike: SDPA's kernels need the expanded tensors in memory, so Inductor materialises
/// the reshape as eager does. The backward sums the copies back, as much again twice over (the
/// backward's 2× of every element-wise kernel).
pub fn repeat_kv_bytes_per_token(model: &Model) -> f64 {
    if model.kv_heads < model.heads {
        2.0 * ELEMENT_BYTES * (model.kv_width() + model.q_width())
    } else {
        0.0
    }
}

/// Forward time of FlashAttention's fused kernel on one TP rank: the QKᵀ and AV FLOPs of the pairs
/// causal masking (and a sliding window) leaves, `Model::causal_attention_share` — half for full
/// causal attention (Dao 2023, FlashAttention-2 §3.1.1) — on a roofline whose memory side is only Q, K, V and O — the s×s scores
/// never leave the chip.
pub fn flash_attention_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
) -> f64 {
    flash_attention_time_sharded(
        model,
        cluster,
        micro_batch,
        seq_len,
        tp,
        1,
        cluster.gpu.gemm_efficiency,
    )
}

/// FlashAttention's forward on one TP×CP rank. With context parallelism the rank's s/cp queries
/// attend to all s keys over cp ring steps; Megatron-Core's load balancing (each rank holds
/// sequence chunks i and 2cp−1−i) gives every rank the same half of the causal blocks
/// (Transformer Engine `context_parallel.py`, `AttnFuncWithCPAndKVP2P`), so the causal halving holds
/// per rank. K and V stream in once per ring step. `efficiency` is the share of the bf16 peak the
/// kernel reaches on its matmuls.
pub fn flash_attention_time_sharded(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    cp: u32,
    efficiency: f64,
) -> f64 {
    let gemms = layer_gemms_sharded(model, micro_batch, seq_len, tp, cp);
    let flops = model.causal_attention_share(seq_len) * (gemms[1].flops() + gemms[2].flops());
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let local_s = s / f64::from(cp);
    let q_and_o = b * local_s * (model.q_width() + model.attention_out_width()) / t;
    let k_and_v = 2.0 * b * s * kv_width_per_rank(model, tp);
    let bytes = ELEMENT_BYTES * (q_and_o + k_and_v);
    let gpu = &cluster.gpu;
    (flops / gpu.sustained_matmul_flops(efficiency).0).max(bytes / gpu.achieved_hbm_bandwidth().0)
}

/// FlashAttention's backward relative to its forward: 5 matmuls to 2 (Dao 2023, FlashAttention-2
/// §3.1), so 2.5× the forward's FLOPs, run at a lower rate. On H100 SXM5 at head dimension 128 and
/// 16K tokens, every fused kernel's backward reaches 0.87 of its forward's TFLOP/s: FlashAttention-2
/// 322 / 370, cuDNN 516 / 595, FlashAttention-3 561 / 648 (Shah et al. 2024, FlashAttention-3,
/// §4.1's "Attention forward speed" and "Attention backward speed" charts, head dimension 128,
/// no causal mask, which count the backward as 2.5× the forward's FLOPs). Measured on Hopper only;
/// taken for every GPU. The Megatron-Core MoE report's Table 9 gives cuDNN's backward 0.76–0.82
/// of its forward on DeepSeek-V3's 192-wide MLA heads (validation/FIT.md); 0.87 is kept as the
/// one ratio measured for every kernel at the width most models use.
pub const FLASH_BACKWARD_FLOPS_OVER_FORWARD: f64 = 2.5;
pub const FLASH_BACKWARD_RATE_OVER_FORWARD: f64 = 0.87;

/// The fused attention backward's time over its forward's.
pub fn flash_backward_time_over_forward() -> f64 {
    FLASH_BACKWARD_FLOPS_OVER_FORWARD / FLASH_BACKWARD_RATE_OVER_FORWARD
}

/// Forward, backward and recompute time of one layer for one micro-batch (no communication), and
/// the parts of the forward that communication can hide behind.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerTime {
    pub forward: f64,
    pub backward: f64,
    pub recompute: f64,
    /// Forward time of the four linear-layer GEMMs (what TP communication overlap hides behind).
    pub linear_gemm_forward: f64,
    /// Forward time of the two column-parallel GEMMs, QKV and MLP up: their input-gradient (dgrad)
    /// GEMMs take as long, and Megatron's backward re-gathers their sequence-parallel inputs under
    /// them.
    pub column_gemm_forward: f64,
    /// Forward time of the attention core (what the CP ring exchange hides behind).
    pub attention_forward: f64,
    /// Forward time of the dense MLP (its two GEMMs and activation), which an MoE layer replaces.
    pub mlp_forward: f64,
    /// Backward time of the dense MLP: twice its forward, plus the transposed copies of its
    /// re-gathered input and gathered output gradient (`cast::backward_transpose_bytes`).
    pub mlp_backward: f64,
    /// Of `backward`, the weight-gradient GEMMs: one per linear, the forward GEMM's FLOPs
    /// (Narayanan et al. 2021 §3.1), with its in-place accumulation (`wgrad_accumulation_s`). What a
    /// split backward runs as its own block (Qi et al. 2024's W; `cost::v_schedule`).
    pub weight_grad: f64,
    /// The dense MLP's share of `weight_grad`, which an MoE layer replaces.
    pub mlp_weight_grad: f64,
    /// Of `linear_gemm_forward` and `column_gemm_forward`, the dense MLP's GEMMs (up and down; up):
    /// what a hybrid stack's attention and MLP layers each hold (`cost::hybrid`).
    pub mlp_linear_gemm_forward: f64,
    pub mlp_column_gemm_forward: f64,
}

impl LayerTime {
    pub fn total(&self) -> f64 {
        self.forward + self.backward + self.recompute
    }

    /// `self` plus `share` of the difference `a − b`, field by field (`cost::with_bf16_layers`).
    pub fn plus_scaled_difference(&self, share: f64, a: &LayerTime, b: &LayerTime) -> LayerTime {
        let at = |x: f64, ya: f64, yb: f64| x + share * (ya - yb);
        LayerTime {
            forward: at(self.forward, a.forward, b.forward),
            backward: at(self.backward, a.backward, b.backward),
            recompute: at(self.recompute, a.recompute, b.recompute),
            linear_gemm_forward: at(
                self.linear_gemm_forward,
                a.linear_gemm_forward,
                b.linear_gemm_forward,
            ),
            column_gemm_forward: at(
                self.column_gemm_forward,
                a.column_gemm_forward,
                b.column_gemm_forward,
            ),
            attention_forward: at(
                self.attention_forward,
                a.attention_forward,
                b.attention_forward,
            ),
            mlp_forward: at(self.mlp_forward, a.mlp_forward, b.mlp_forward),
            mlp_backward: at(self.mlp_backward, a.mlp_backward, b.mlp_backward),
            weight_grad: at(self.weight_grad, a.weight_grad, b.weight_grad),
            mlp_weight_grad: at(self.mlp_weight_grad, a.mlp_weight_grad, b.mlp_weight_grad),
            mlp_linear_gemm_forward: at(
                self.mlp_linear_gemm_forward,
                a.mlp_linear_gemm_forward,
                b.mlp_linear_gemm_forward,
            ),
            mlp_column_gemm_forward: at(
                self.mlp_column_gemm_forward,
                a.mlp_column_gemm_forward,
                b.mlp_column_gemm_forward,
            ),
        }
    }
}

/// Times one layer (one micro-batch, no context parallelism, bf16 GEMMs).
#[allow(clippy::too_many_arguments)]
pub fn layer_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
    attention: AttentionKernel,
) -> LayerTime {
    layer_time_sharded(
        model,
        cluster,
        &LayerShard {
            micro_batch,
            seq_len,
            tp,
            cp: 1,
            sp,
            recompute,
            selective: SelectiveRecompute::AttentionCore,
            attention,
            gemm_chunks: 1,
            attention_efficiency: cluster.gpu.gemm_efficiency,
            kernel_fusion: KernelFusion::Fused,
            sdpa_repeats_kv: false,
            rope_fusion: true,
            cast: CastSetting::BF16,
        },
    )
}

/// Time of a linear-layer GEMM at `precision`, cut into `chunks` pieces along its rows: the roofline
/// with that format's achievable throughput and operand size; bf16 uses the calibrated shape table
/// when the profile has one.
pub(crate) fn linear_gemm_time(
    gemm: &Gemm,
    cluster: &Cluster,
    precision: Precision,
    chunks: u32,
) -> f64 {
    let pieces = f64::from(chunks.max(1));
    let piece = Gemm {
        m: gemm.m / pieces,
        ..*gemm
    };
    if precision == Precision::Bf16 {
        return pieces * piece.time(cluster);
    }
    pieces * on_the_roof(&piece, cluster, precision, forward_bytes(&piece, precision))
}

/// HBM bytes of one batch entry of a linear's forward GEMM at `precision`: the input and weight
/// at the format's size, the bf16 result.
fn forward_bytes(gemm: &Gemm, precision: Precision) -> f64 {
    cast::operand_bytes(precision) * (gemm.m * gemm.k + gemm.k * gemm.n)
        + ELEMENT_BYTES * gemm.m * gemm.n
}

/// Roofline time of a linear GEMM at `precision` moving `bytes` per batch entry (uncalibrated):
/// compute at the format's achievable rate, or the traffic at the achieved HBM bandwidth.
fn on_the_roof(gemm: &Gemm, cluster: &Cluster, precision: Precision, bytes: f64) -> f64 {
    let gpu = &cluster.gpu;
    let compute = gemm.flops() / gpu.linear_gemm_flops(precision).0;
    let memory = bytes * gemm.batch / gpu.achieved_hbm_bandwidth().0;
    compute.max(memory)
}

/// Time a linear's weight-gradient GEMM takes beyond the forward GEMM's, which the backward's 2×
/// already charges for it. Where the GEMM accumulates in place into the gradient buffer
/// (`CastSetting::wgrad_accumulates_into`, Megatron-Core's gradient-accumulation fusion) it reads
/// and writes that buffer's k × n elements in its dtype, 8 bytes per weight in fp32, where the
/// forward writes a bf16 m × n result. Same FLOPs (Narayanan et al. 2021 §3.1); with few rows,
/// as an expert's tokens, the buffer's traffic puts it on the memory roof. Both GEMMs are put on
/// the same roofline (`linear_gemm_time`'s, uncalibrated, with the operands at the plan's
/// precision as Transformer Engine's wgrad reads them), so a calibrated forward time does not
/// hide the buffer's traffic.
pub(crate) fn wgrad_accumulation_s(gemm: &Gemm, cluster: &Cluster, setting: CastSetting) -> f64 {
    let Some(buffer) = setting.wgrad_accumulates_into else {
        return 0.0;
    };
    let precision = setting.precision;
    // The input and the output gradient at the format's size; the buffer read and written.
    let wgrad_bytes = cast::operand_bytes(precision) * (gemm.m * gemm.k + gemm.m * gemm.n)
        + 2.0 * buffer.bytes() * gemm.k * gemm.n;
    let wgrad = on_the_roof(gemm, cluster, precision, wgrad_bytes);
    let forward = on_the_roof(gemm, cluster, precision, forward_bytes(gemm, precision));
    (wgrad - forward).max(0.0)
}

/// HBM bytes per parameter and micro-batch of accumulating gradients unsharded across a pipeline
/// schedule's micro-batches (PyTorch's pipelining under FSDP2, `comm::reduces_after_pipeline_schedule`).
/// Autograd hands each micro-batch a fresh bf16 gradient; FSDP2 upcasts the first to the reduce
/// dtype (read 2, write `reduce` bytes; nothing where the dtypes agree) and adds each later one
/// into it (read both, write the sum: `FSDPParam.to_accumulated_grad_if_needed` and
/// `accumulate_unsharded_grad_if_needed`, torch/distributed/fsdp/_fully_shard/_fsdp_param.py),
/// averaged over the schedule's `micro_batches`.
pub fn unsharded_grad_accumulation_bytes(
    reduce: crate::training::GradDtype,
    micro_batches: u32,
) -> f64 {
    let reduce_bytes = reduce.bytes();
    let first = if reduce_bytes == ELEMENT_BYTES {
        0.0
    } else {
        ELEMENT_BYTES + reduce_bytes
    };
    let micro_batches = f64::from(micro_batches.max(1));
    (first + gradient_add_bytes(reduce) * (micro_batches - 1.0)) / micro_batches
}

/// HBM bytes per parameter and micro-batch that sharded data parallelism copies on the compute
/// stream's path around its collectives (`TrainingFramework::sharded_dp_copies`: FSDP2 both,
/// DeepSpeed's ZeRO-3 the gathers), for the forward and the backward: each gather's copy-out reads
/// and writes the gathered parameters (`gathered_bytes` each: bf16, or torchao's one-byte float8
/// all-gather), each reduce-scatter's copy-in reads the gradient (a fresh bf16 one, or the
/// schedule's accumulated one in the reduce dtype under PyTorch's pipelining) and writes it in the
/// reduce dtype. The gathers and reduce-scatters are `comm::sharded_collectives`' counts, spread
/// over the step's micro-batches; forward gathers copy before a forward, backward gathers and
/// reductions in the backward. Per parameter of a group that shards (`sharded_dp_copied_params`).
pub fn sharded_dp_copy_bytes_per_param(
    training: &crate::training::Training,
    plan: &ParallelPlan,
    gathered_bytes: f64,
) -> (f64, f64) {
    let copies = training.framework.sharded_dp_copies(plan.zero);
    if copies == crate::training::ShardedDpCopies::default() {
        return (0.0, 0.0);
    }
    let counts = super::comm::sharded_collectives(training, plan);
    let m = f64::from(plan.num_microbatches.max(1));
    let copy_out = if copies.gathered_parameters {
        2.0 * gathered_bytes
    } else {
        0.0
    };
    let copy_in = if copies.reduced_gradients {
        let reduce = training.grad_dtype.bytes();
        let gradient_read = if super::comm::reduces_after_pipeline_schedule(training, plan) {
            reduce
        } else {
            ELEMENT_BYTES
        };
        gradient_read + reduce
    } else {
        0.0
    };
    (
        counts.forward_gathers / m * copy_out,
        (counts.backward_gathers * copy_out + counts.reduce_scatters * copy_in) / m,
    )
}

/// Of a layer's `dense` and routed-`expert` parameters per GPU, those sharded DP gathers and
/// reduce-scatters, and so copies: the dense ones where the DP×CP group has more than one member,
/// the experts' where the expert-DP group does (`moe::expert_dp`). A group of one runs no
/// collective in tpsim's DP traffic, and no copy here.
pub fn sharded_dp_copied_params(plan: &ParallelPlan, dense: f64, expert: f64) -> f64 {
    let sharded = |ranks: u32, params: f64| if ranks > 1 { params } else { 0.0 };
    sharded(plan.zero_shard_ranks(), dense) + sharded(super::moe::expert_shard_ranks(plan), expert)
}

/// HBM bytes per parameter of copying a fresh bf16 gradient into a buffer of dtype `into` (read 2,
/// write `into`): Megatron-FSDP without gradient-accumulation fusion, whose gradient buckets are
/// reduce-scattered every micro-batch.
pub fn gradient_copy_bytes(into: crate::training::GradDtype) -> f64 {
    ELEMENT_BYTES + into.bytes()
}

/// HBM bytes per parameter of adding a fresh bf16 gradient into an accumulator of dtype `into`:
/// both read, the accumulator written. FSDP2's later micro-batches; Megatron-Core's backward hook
/// without gradient-accumulation fusion, `param.main_grad.add_(param.grad.data)` every
/// micro-batch (`distributed_data_parallel.py`, `_make_backward_post_hook`).
pub fn gradient_add_bytes(into: crate::training::GradDtype) -> f64 {
    2.0 * into.bytes() + ELEMENT_BYTES
}

/// Times one layer on one TP×CP rank. Backward costs twice the forward in GEMMs and in element-wise
/// traffic (each backward kernel reads the saved input and the incoming gradient and writes the
/// outgoing one); FlashAttention's backward costs 2.5× its forward's FLOPs (5 matmuls to 2, Dao 2023
/// FlashAttention-2 §3.1) at 0.87 of its rate (`FLASH_BACKWARD_RATE_OVER_FORWARD`). Full recompute repeats the forward; selective recompute repeats the
/// attention core (QKᵀ, softmax, dropout, AV), Korthikanti et al. 2022 §5 — which FlashAttention
/// already does inside its backward. Low-precision GEMMs also cast their inputs: Transformer Engine
/// reads each bf16 input and writes its FP8 copy (and the transpose for the weight gradient) before
/// the GEMM, the bytes per element `cast::input_cast_bytes` counts for the recipe and the GPU.
pub fn layer_time_sharded(model: &Model, cluster: &Cluster, shard: &LayerShard) -> LayerTime {
    let LayerShard {
        micro_batch,
        seq_len,
        tp,
        cp,
        sp,
        recompute,
        selective,
        attention,
        gemm_chunks,
        attention_efficiency,
        kernel_fusion,
        sdpa_repeats_kv,
        rope_fusion,
        cast: setting,
    } = *shard;
    let gemms = layer_gemms_sharded(model, micro_batch, seq_len, tp, cp);
    let attention_core_gemm_time = match attention {
        AttentionKernel::Unfused => gemms[1].time(cluster) + gemms[2].time(cluster),
        AttentionKernel::Flash => flash_attention_time_sharded(
            model,
            cluster,
            micro_batch,
            seq_len,
            tp,
            cp,
            attention_efficiency,
        ),
    };
    let linear = [gemms[0], gemms[3], gemms[4], gemms[5]];
    // The attention's linears at a quantization recipe's precision for them, where it sets one
    // (`training::ModulePrecision`); the MLP's at the layer's.
    let attention_setting = setting.for_module(crate::training::QuantModule::AttentionLinears);
    let settings = [attention_setting, attention_setting, setting, setting];
    // QKV, output projection, MLP up, MLP down; the last two are the MLP an MoE layer replaces.
    let linear_times = [0, 1, 2, 3]
        .map(|i| linear_gemm_time(&linear[i], cluster, settings[i].precision, gemm_chunks));
    let linear_time: f64 = linear_times.iter().sum();
    let mlp_gemms = linear_times[2] + linear_times[3];
    // What the weight-gradient GEMMs take beyond their forward's time (in-place accumulation).
    let wgrad_extras_s =
        [0, 1, 2, 3].map(|i| wgrad_accumulation_s(&linear[i], cluster, settings[i]));
    let mlp_wgrad_extra_s = wgrad_extras_s[2] + wgrad_extras_s[3];
    let wgrad_extra_s: f64 = wgrad_extras_s.iter().sum();
    let gemm_time = linear_time + attention_core_gemm_time;
    let t = f64::from(tp);
    let local_seq = seq_len / cp.max(1);
    let (mut outside, mut inside, scores) =
        layer_elementwise_bytes(model, micro_batch, local_seq.max(1), attention);
    let mut mlp_inside = inside;
    // The QK-norm kernels, inside the TP region (Q and K are split by heads); not the MLP's. Under
    // PyTorch eager each is torchtitan's unfused RMSNorm (`EAGER_RMSNORM_BYTES_PER_ELEMENT` where a
    // fused norm moves 4).
    let qk_norm_scale = match kernel_fusion {
        KernelFusion::Eager => EAGER_RMSNORM_BYTES_PER_ELEMENT / (2.0 * ELEMENT_BYTES),
        KernelFusion::Fused => 1.0,
    };
    inside += qk_norm_scale * qk_norm_bytes(model, micro_batch, local_seq.max(1));
    let tokens = f64::from(micro_batch) * f64::from(local_seq.max(1));
    // Eager PyTorch's rotation is the fused kernel's bytes plus its own extra (below).
    let fused_rope = rope_fusion || kernel_fusion == KernelFusion::Eager;
    inside += tokens * rope_bytes_per_token(model, fused_rope);
    if kernel_fusion == KernelFusion::Eager {
        let (norms, attention_side, mlp_side) = eager_extra_bytes_per_token(model);
        outside += tokens * norms;
        inside += tokens * (attention_side + mlp_side);
        mlp_inside += tokens * mlp_side;
    }
    if sdpa_repeats_kv {
        inside += tokens * repeat_kv_bytes_per_token(model);
    }
    let scores = scores * f64::from(cp);
    // The low-precision casts of the four linear inputs (`cost::cast`): the norm-fed QKV and MLP up
    // quantize their sequence shard under sequence parallelism; the MLP's are the dense MLP's, which
    // an MoE layer replaces with its own (`moe::moe_mlp_time`).
    let gathered_from = setting.gathered_from(sp, tp);
    let cast_of = |setting: cast::CastSetting, gemm: &Gemm, input: LinearInput, gathered: u32| {
        cast::input_cast_bytes(setting, &cluster.gpu, input, gathered) * gemm.m * gemm.k
    };
    let mlp_cast_bytes = cast_of(setting, &gemms[4], LinearInput::NormOutput, gathered_from)
        + cast_of(setting, &gemms[5], LinearInput::Other, 1);
    let cast_bytes = cast_of(
        attention_setting,
        &gemms[0],
        LinearInput::NormOutput,
        gathered_from,
    ) + cast_of(attention_setting, &gemms[3], LinearInput::Other, 1)
        + mlp_cast_bytes;
    // The transposed copies the backward makes once of gathered tensors: the re-gathered QKV and
    // MLP-up inputs (m × k) and the gathered output gradients of the output projection and the MLP
    // down projection (m × n).
    let per_element = cast::backward_transpose_bytes(setting, &cluster.gpu, gathered_from);
    let attention_per_element =
        cast::backward_transpose_bytes(attention_setting, &cluster.gpu, gathered_from);
    let mlp_transposed_bytes = per_element * (gemms[4].m * gemms[4].k + gemms[5].m * gemms[5].n);
    let transposed_bytes = attention_per_element
        * (gemms[0].m * gemms[0].k + gemms[3].m * gemms[3].n)
        + mlp_transposed_bytes;
    let bandwidth = cluster.gpu.achieved_hbm_bandwidth().0;
    let outside_split = if sp { t } else { 1.0 };
    let elementwise = (outside / outside_split + (inside + scores) / t + cast_bytes) / bandwidth;
    let scores_time = scores / t / bandwidth;
    let gpu = &cluster.gpu;
    let overhead = gpu.layer_overhead_us * 1e-6;
    let forward = (gemm_time + elementwise) / gpu.framework_efficiency + overhead;
    let flash_extra = match attention {
        // The backward's attention beyond the 2× every kernel gets (`forward` holds it once).
        AttentionKernel::Flash => {
            (flash_backward_time_over_forward() - 2.0) * attention_core_gemm_time
                / gpu.framework_efficiency
        }
        AttentionKernel::Unfused => 0.0,
    };
    let recompute_time = match (recompute, selective, attention) {
        (Recompute::None, _, _)
        | (Recompute::Selective, SelectiveRecompute::AttentionCore, AttentionKernel::Flash) => 0.0,
        (
            Recompute::Selective,
            SelectiveRecompute::AttentionCore | SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Unfused,
        ) => (attention_core_gemm_time + scores_time) / gpu.framework_efficiency,
        // Transformer Engine re-runs the fused kernel's forward (`attention_forward` below).
        (
            Recompute::Selective,
            SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Flash,
        ) => attention_core_gemm_time / gpu.framework_efficiency,
        // Megatron-Core's module recompute: the attention core here when listed, as
        // `CheckpointedAttention`; the other modules in `module_recompute`.
        (Recompute::Selective, SelectiveRecompute::Modules(modules), attention) => {
            if modules.contains(crate::training::RecomputeModule::CoreAttn) {
                match attention {
                    AttentionKernel::Flash => attention_core_gemm_time / gpu.framework_efficiency,
                    AttentionKernel::Unfused => {
                        (attention_core_gemm_time + scores_time) / gpu.framework_efficiency
                    }
                }
            } else {
                0.0
            }
        }
        (Recompute::Selective, SelectiveRecompute::AlternateMatmuls, _) => {
            // wk (the K share of the fused QKV GEMM), wo, and w3 (half the fused gated up
            // projection) or, without a gate, w2; plus every element-wise kernel but the scores.
            let key_share = kv_width_per_rank(model, tp) / gemms[0].n.max(1.0);
            let third_mlp = if model.gated_mlp {
                0.5 * linear_times[2]
            } else {
                linear_times[3]
            };
            let matmuls = key_share * linear_times[0] + linear_times[1] + third_mlp;
            (matmuls + elementwise - scores_time) / gpu.framework_efficiency
        }
        (Recompute::Full, _, _) => forward,
    };
    let mlp_forward =
        (mlp_gemms + (mlp_inside / t + mlp_cast_bytes) / bandwidth) / gpu.framework_efficiency;
    LayerTime {
        forward,
        backward: 2.0 * forward
            + flash_extra
            + (wgrad_extra_s + transposed_bytes / bandwidth) / gpu.framework_efficiency,
        recompute: recompute_time,
        linear_gemm_forward: linear_time / gpu.framework_efficiency,
        column_gemm_forward: (linear_times[0] + linear_times[2]) / gpu.framework_efficiency,
        attention_forward: attention_core_gemm_time / gpu.framework_efficiency,
        mlp_forward,
        mlp_backward: 2.0 * mlp_forward
            + (mlp_wgrad_extra_s + mlp_transposed_bytes / bandwidth) / gpu.framework_efficiency,
        weight_grad: (linear_time + wgrad_extra_s) / gpu.framework_efficiency,
        mlp_weight_grad: (mlp_gemms + mlp_wgrad_extra_s) / gpu.framework_efficiency,
        mlp_linear_gemm_forward: mlp_gemms / gpu.framework_efficiency,
        mlp_column_gemm_forward: linear_times[2] / gpu.framework_efficiency,
    }
}

/// The output layer's logits GEMM on one GPU: b·s tokens (s the rank's s/cp) by h, against the
/// vocabulary's t-th share.
fn logits_gemm(model: &Model, micro_batch: u32, seq_len: u32, tp: u32) -> Gemm {
    Gemm {
        m: f64::from(micro_batch) * f64::from(seq_len),
        k: f64::from(model.hidden),
        n: f64::from(model.vocab) / f64::from(tp),
        batch: 1.0,
    }
}

/// An MTP depth's h·2h projection on one GPU (a column-parallel linear over t; Megatron-Core
/// `MultiTokenPredictionLayer.eh_proj`).
fn mtp_projection_gemm(model: &Model, micro_batch: u32, seq_len: u32, tp: u32) -> Gemm {
    Gemm {
        m: f64::from(micro_batch) * f64::from(seq_len),
        k: 2.0 * f64::from(model.hidden),
        n: f64::from(model.hidden) / f64::from(tp),
        batch: 1.0,
    }
}

/// Forward and backward time of the output layer (logits GEMM, vocabulary split over t, on the
/// rank's s/cp tokens) plus the fp32 cross-entropy: three fp32 passes over the b·s·V/t logits
/// (upcast, softmax, gradient), 12 bytes per logit, an estimate beside the output GEMM it follows
/// (a tenth of its time at a 128K vocabulary); the backward is charged twice the forward as every
/// layer's is; once more per MTP depth, with that depth's
/// projection (its transformer layer is counted with the stage's layers). Never recomputed; kept
/// in bf16 under FP8 training (Transformer Engine's FP8 autocast covers the transformer layers
/// only).
pub fn output_layer_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
) -> OutputLayerTime {
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let gemm_s = logits_gemm(model, micro_batch, seq_len, tp).time(cluster);
    let loss_bytes = 3.0 * LOGIT_BYTES * b * s * f64::from(model.vocab) / t;
    let head = gemm_s + loss_bytes / cluster.gpu.achieved_hbm_bandwidth().0;
    // Each MTP depth runs the output layer and its loss again, after its h·2h projection (a
    // column-parallel linear over t; Megatron-Core `MultiTokenPredictionLayer.eh_proj`).
    let mtp = f64::from(model.mtp_layers);
    let projection_s = if model.mtp_layers > 0 {
        mtp_projection_gemm(model, micro_batch, seq_len, tp).time(cluster)
    } else {
        0.0
    };
    let efficiency = cluster.gpu.framework_efficiency;
    let forward = ((1.0 + mtp) * head + mtp * projection_s) / efficiency;
    let time = LayerTime {
        forward,
        backward: 2.0 * forward,
        recompute: 0.0,
        linear_gemm_forward: 0.0,
        column_gemm_forward: 0.0,
        attention_forward: 0.0,
        mlp_forward: 0.0,
        mlp_backward: 0.0,
        // The output GEMM's and the MTP projections' weight gradients.
        weight_grad: ((1.0 + mtp) * gemm_s + mtp * projection_s) / efficiency,
        mlp_weight_grad: 0.0,
        mlp_linear_gemm_forward: 0.0,
        mlp_column_gemm_forward: 0.0,
    };
    OutputLayerTime {
        time,
        logits_gemm_s: gemm_s / efficiency,
        projection_gemm_s: projection_s / efficiency,
    }
}

/// The output layer's and loss's time ([`output_layer_time`]) and the GEMMs its backward's
/// asynchronous TP collectives hide under (`embedding_output_tp`): one of the logits GEMM's three
/// passes (forward, dgrad, wgrad: the same FLOPs) and one of an MTP projection's (0 without MTP),
/// each at the framework's efficiency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputLayerTime {
    pub time: LayerTime,
    pub logits_gemm_s: f64,
    pub projection_gemm_s: f64,
}

/// Adam step time on the parameters this GPU updates: memory-bound, reading the master weights
/// (or the parameters, when they are the master), momentum, variance and the gradient and writing
/// all but the gradient back, plus the 16-bit working weights when a separate master copy was
/// updated (with fp32 master and moments: 4·3 + grad bytes in, 4·3 + 2 out per parameter).
pub fn optimizer_time(
    cluster: &Cluster,
    params_updated: f64,
    grad_bytes: f64,
    states: crate::training::OptimizerStates,
    low_precision_params: bool,
) -> Seconds {
    let master_bytes = states.master_bytes_with_low_precision_params(low_precision_params);
    let master = if master_bytes > 0.0 {
        master_bytes
    } else {
        states.param_bytes()
    };
    let updated = master + states.moment_bytes();
    let working_copy = if master_bytes > 0.0 {
        states.param_bytes()
    } else {
        0.0
    };
    // A master kept as remainders (16 bits, beside bf16 weights) is rebuilt from them and the
    // weights, so those are read too.
    let remainder_source = if master_bytes == 2.0 {
        states.param_bytes()
    } else {
        0.0
    };
    let bytes_per_param = updated + grad_bytes + remainder_source + updated + working_copy;
    Seconds(params_updated * bytes_per_param / cluster.gpu.achieved_hbm_bandwidth().0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FSDP2's copies per parameter and micro-batch (torchtitan reduces in fp32): ZeRO-3 without
    /// a pipeline copies the bf16 weights out after the forward's and the backward's gathers (2 + 2 bytes each) and the bf16
    /// gradient into the fp32 reduce-scatter input (2 + 4); torchao's float8 all-gather halves the
    /// copy-outs; under PyTorch's pipelining the schedule's accumulated fp32 gradient is copied in
    /// once per schedule (4 + 4 over 4 micro-batches). Megatron-Core's buffers copy nothing, nor
    /// does a group of one.
    #[test]
    fn sharded_dp_copies_each_gathered_parameter_and_reduced_gradient_once_more() {
        use crate::training::{AttentionKernel, Training, TrainingFramework};
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let copies = |framework, pp: u32, dp: u32, zero: u8, gathered: f64| {
            let training =
                Training::with_framework(framework, 4096, dp * 4, AttentionKernel::Flash);
            let request = crate::plan::PlanRequest {
                tp: 8 / (pp * dp),
                pp,
                dp,
                micro_batch: 1,
                ..crate::plan::PlanRequest::default()
            };
            let mut plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            assert_eq!(plan.num_microbatches, 4);
            plan.zero = zero;
            sharded_dp_copy_bytes_per_param(&training, &plan, gathered)
        };
        let titan = TrainingFramework::Torchtitan;
        assert_eq!(copies(titan, 1, 8, 3, 2.0), (4.0, 4.0 + 6.0));
        assert_eq!(copies(titan, 1, 8, 3, 1.0), (2.0, 2.0 + 6.0));
        assert_eq!(copies(titan, 2, 4, 3, 2.0), (4.0, 8.0 / 4.0));
        assert_eq!(copies(titan, 1, 8, 1, 2.0), (0.0, 0.0));
        assert_eq!(
            copies(TrainingFramework::MegatronCore, 1, 8, 3, 2.0),
            (0.0, 0.0)
        );
        // DeepSpeed's ZeRO-3 concatenates the gathered parameters before the forward and the
        // backward (its gradient path is not counted); its ZeRO-2 copies nothing.
        let deepspeed = TrainingFramework::Deepspeed;
        assert_eq!(copies(deepspeed, 1, 8, 3, 2.0), (4.0, 4.0));
        assert_eq!(copies(deepspeed, 1, 8, 2, 2.0), (0.0, 0.0));
        // Only a group of more than one shards: with ep 8 on 8 GPUs the experts are whole on
        // each (expert-DP 1) and only the dense parameters are copied; with no DP, nothing is.
        let plan_with = |dp: u32, ep: u32| {
            let training = Training::with_framework(titan, 4096, dp * 4, AttentionKernel::Flash);
            let request = crate::plan::PlanRequest {
                tp: 8 / dp,
                dp,
                ..crate::plan::PlanRequest::default()
            };
            let mut plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            plan.ep = ep;
            plan.etp = plan.tp;
            plan
        };
        assert_eq!(sharded_dp_copied_params(&plan_with(8, 8), 3.0, 5.0), 3.0);
        assert_eq!(sharded_dp_copied_params(&plan_with(8, 4), 3.0, 5.0), 8.0);
        assert_eq!(sharded_dp_copied_params(&plan_with(1, 1), 3.0, 5.0), 0.0);
    }

    #[test]
    fn a_layers_backward_carries_its_linears_weight_gradient_extras_and_the_mlp_its_own() {
        // Llama 3 8B on tp 8 with 512 tokens per micro-batch: the fp32 buffers put the
        // weight-gradient GEMMs on the memory roof. The backward grows by the four linears' extras,
        // the dense MLP's backward (what an MoE layer replaces) by its two; the forward not at all.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let shard = |wgrad_accumulates_into| LayerShard {
            micro_batch: 1,
            seq_len: 512,
            tp: 8,
            cp: 1,
            sp: true,
            recompute: Recompute::None,
            selective: SelectiveRecompute::AttentionCore,
            attention: AttentionKernel::Flash,
            gemm_chunks: 1,
            attention_efficiency: cluster.gpu.gemm_efficiency,
            kernel_fusion: KernelFusion::Fused,
            sdpa_repeats_kv: false,
            rope_fusion: true,
            cast: CastSetting {
                wgrad_accumulates_into,
                ..CastSetting::BF16
            },
        };
        let fused_shard = shard(Some(crate::training::GradDtype::Fp32));
        let with = layer_time_sharded(&model, &cluster, &fused_shard);
        let without = layer_time_sharded(&model, &cluster, &shard(None));
        assert_eq!(with.forward, without.forward);
        let gemms = layer_gemms_sharded(&model, 1, 512, 8, 1);
        let extra = |i: usize| wgrad_accumulation_s(&gemms[i], &cluster, fused_shard.cast);
        let efficiency = cluster.gpu.framework_efficiency;
        let layer_extra = (extra(0) + extra(3) + extra(4) + extra(5)) / efficiency;
        let mlp_extra = (extra(4) + extra(5)) / efficiency;
        assert!(mlp_extra > 0.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12 + 1e-9 * b;
        assert!(close(with.backward - without.backward, layer_extra));
        assert!(close(with.mlp_backward - without.mlp_backward, mlp_extra));
    }

    #[test]
    fn unsharded_accumulation_upcasts_the_first_gradient_and_adds_the_rest() {
        use crate::training::GradDtype;
        // fp32 reduce: the first micro-batch reads 2 and writes 4, later ones read 4 + 2, write 4.
        assert_eq!(unsharded_grad_accumulation_bytes(GradDtype::Fp32, 1), 6.0);
        assert_eq!(
            unsharded_grad_accumulation_bytes(GradDtype::Fp32, 4),
            (6.0 + 30.0) / 4.0
        );
        // bf16 reduce: autograd keeps the first gradient as it is; later ones read 2 + 2, write 2.
        assert_eq!(unsharded_grad_accumulation_bytes(GradDtype::Bf16, 1), 0.0);
        assert_eq!(
            unsharded_grad_accumulation_bytes(GradDtype::Bf16, 3),
            12.0 / 3.0
        );
    }

    #[test]
    fn accumulating_weight_gradients_read_and_write_the_buffer_where_rows_are_few() {
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let fused = |buffer| CastSetting {
            wgrad_accumulates_into: Some(buffer),
            ..CastSetting::BF16
        };
        // An expert's few rows: 512 tokens through a 4096 × 4096 weight, bf16.
        let expert = Gemm {
            m: 512.0,
            k: 4096.0,
            n: 4096.0,
            batch: 4.0,
        };
        let bandwidth = cluster.gpu.achieved_hbm_bandwidth().0;
        let by_hand = |buffer_bytes: f64| {
            let bytes = (2.0 * 2.0 * 512.0 * 4096.0 + 2.0 * buffer_bytes * 4096.0 * 4096.0) * 4.0;
            (bytes / bandwidth - linear_gemm_time(&expert, &cluster, Precision::Bf16, 1)).max(0.0)
        };
        let fp32 = wgrad_accumulation_s(&expert, &cluster, fused(crate::training::GradDtype::Fp32));
        assert!(
            fp32 > 0.0,
            "an fp32 buffer puts 512 rows on the memory roof"
        );
        assert!((fp32 - by_hand(4.0)).abs() < 1e-12 * fp32.max(1e-9));
        let bf16 = wgrad_accumulation_s(&expert, &cluster, fused(crate::training::GradDtype::Bf16));
        assert!((bf16 - by_hand(2.0)).abs() < 1e-12 * fp32);
        assert!(bf16 < fp32);
        // A fresh gradient (torchtitan, DeepSpeed) costs what the forward does.
        assert_eq!(
            wgrad_accumulation_s(&expert, &cluster, CastSetting::BF16),
            0.0
        );
        // A dense layer's 8K tokens keep it compute-bound: nothing beyond the forward's time.
        let dense = Gemm {
            m: 8192.0,
            batch: 1.0,
            ..expert
        };
        assert_eq!(
            wgrad_accumulation_s(&dense, &cluster, fused(crate::training::GradDtype::Fp32)),
            0.0
        );
    }

    #[test]
    fn qk_norm_reads_and_writes_q_and_k_once_per_norm() {
        // Qwen3-30B-A3B: Q 32 × 128, K 4 × 128 per token; one 4K sequence.
        let model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        assert_eq!(
            qk_norm_bytes(&model, 1, 4096),
            4.0 * 4096.0 * (4096.0 + 512.0)
        );
        let mut plain = model.clone();
        plain.qk_norm = false;
        assert_eq!(qk_norm_bytes(&plain, 1, 4096), 0.0);
        // It is element-wise time inside the TP region: forward and backward grow with it.
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let time = |m: &Model| {
            layer_time(
                m,
                &cluster,
                1,
                4096,
                1,
                false,
                Recompute::None,
                AttentionKernel::Flash,
            )
        };
        let (with, without) = (time(&model), time(&plain));
        let extra = qk_norm_bytes(&model, 1, 4096)
            / cluster.gpu.achieved_hbm_bandwidth().0
            / cluster.gpu.framework_efficiency;
        assert!((with.forward - without.forward - extra).abs() < 1e-12);
        assert!((with.backward - without.backward - 2.0 * extra).abs() < 1e-12);
        // Not part of the dense MLP an MoE layer replaces.
        assert_eq!(with.mlp_forward, without.mlp_forward);
        // Under PyTorch eager each norm is an unfused RMSNorm: 36 bytes per element, not 4.
        let eager = |m: &Model| {
            layer_time_sharded(
                m,
                &cluster,
                &LayerShard {
                    micro_batch: 1,
                    seq_len: 4096,
                    tp: 1,
                    cp: 1,
                    sp: false,
                    recompute: Recompute::None,
                    selective: SelectiveRecompute::AttentionCore,
                    attention: AttentionKernel::Flash,
                    gemm_chunks: 1,
                    attention_efficiency: cluster.gpu.gemm_efficiency,
                    kernel_fusion: KernelFusion::Eager,
                    sdpa_repeats_kv: false,
                    rope_fusion: true,
                    cast: CastSetting::BF16,
                },
            )
        };
        let eager_extra = eager(&model).forward - eager(&plain).forward;
        assert!(
            (eager_extra / extra - 9.0).abs() < 1e-9,
            "{eager_extra} vs {extra}"
        );
    }
    use crate::model::tests::gpt3_175b;

    #[test]
    fn eager_kernels_add_their_counted_traffic_and_nothing_else() {
        // Llama 3 8B (h 4096, 32 query and 8 KV heads of 128, ffn 14336), counted by hand from
        // torchtitan's eager code: two RMSNorms at 36 − 4 bytes per element; RoPE on Q and K at 20;
        // no copy of the attention output (SDPA's output transposed back is already contiguous);
        // SwiGLU's two kernels 4 more per ffn element. repeat_kv, eager or compiled, reads K/V
        // (1024 wide) and writes 4096 wide, 2 bytes each, for K and V.
        let m = crate::specs::load_model("llama3-8b").unwrap();
        let (norms, attention_side, mlp_side) = eager_extra_bytes_per_token(&m);
        assert_eq!(norms, 2.0 * 32.0 * 4096.0);
        assert_eq!(attention_side, (20.0 - 4.0) * (4096.0 + 1024.0));
        assert_eq!(rope_bytes_per_token(&m, true), 4.0 * (4096.0 + 1024.0));
        assert_eq!(rope_bytes_per_token(&m, false), 24.0 * (4096.0 + 1024.0));
        assert_eq!(mlp_side, 4.0 * 14336.0);
        let repeat_kv = repeat_kv_bytes_per_token(&m);
        assert_eq!(repeat_kv, 2.0 * 2.0 * (1024.0 + 4096.0));
        // In a layer's time: the forward grows by those bytes over the achieved HBM bandwidth,
        // the MLP part (which an MoE layer replaces) by the SwiGLU share only; the GEMMs do not move.
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let shard = |kernel_fusion, sdpa_repeats_kv| LayerShard {
            micro_batch: 2,
            seq_len: 8192,
            tp: 1,
            cp: 1,
            sp: false,
            recompute: Recompute::None,
            selective: SelectiveRecompute::AttentionCore,
            attention: AttentionKernel::Flash,
            gemm_chunks: 1,
            attention_efficiency: cluster.gpu.gemm_efficiency,
            kernel_fusion,
            sdpa_repeats_kv,
            rope_fusion: true,
            cast: CastSetting::BF16,
        };
        let fused = layer_time_sharded(&m, &cluster, &shard(KernelFusion::Fused, false));
        let eager = layer_time_sharded(&m, &cluster, &shard(KernelFusion::Eager, false));
        let per_byte =
            1.0 / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency;
        let tokens = 2.0 * 8192.0;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-9);
        assert!(close(
            eager.forward - fused.forward,
            tokens * (norms + attention_side + mlp_side) * per_byte
        ));
        assert!(close(
            eager.mlp_forward - fused.mlp_forward,
            tokens * mlp_side * per_byte
        ));
        assert!(close(
            eager.backward - fused.backward,
            2.0 * (eager.forward - fused.forward)
        ));
        assert_eq!(eager.linear_gemm_forward, fused.linear_gemm_forward);
        // The K/V expansion costs the same compiled or eager, on the attention side only.
        for fusion in [KernelFusion::Fused, KernelFusion::Eager] {
            let with = layer_time_sharded(&m, &cluster, &shard(fusion, true));
            let without = layer_time_sharded(&m, &cluster, &shard(fusion, false));
            assert!(close(
                with.forward - without.forward,
                tokens * repeat_kv * per_byte
            ));
            assert_eq!(with.mlp_forward, without.mlp_forward);
        }
    }

    #[test]
    fn the_transposes_of_gathered_fp8_tensors_are_paid_once_in_the_backward() {
        // Llama 3 70B at TP 8 under sequence parallelism: per-tensor FP8 gathers row-wise copies,
        // and the backward makes the transposed ones, a read and a write of a byte each, once: of
        // the re-gathered QKV and MLP-up inputs and of the gathered output gradients of the output
        // projection and the MLP down projection (b·s × h each); not in the forward, not under
        // full recompute. On Blackwell Transformer Engine reads FP8 column-wise and pays nothing;
        // torchao's `torch._scaled_mm` wants the TN layout there too.
        let m = crate::specs::load_model("llama3-70b").unwrap();
        let run = |gpu: &str, recompute, reads_columnwise_fp8_where_supported| {
            let cluster = Cluster {
                gpu: crate::specs::load_gpu(gpu).unwrap(),
                nodes: 1,
                gpus_per_node: 8,
            };
            let shard = LayerShard {
                micro_batch: 1,
                seq_len: 8192,
                tp: 8,
                cp: 1,
                sp: true,
                recompute,
                selective: SelectiveRecompute::AttentionCore,
                attention: AttentionKernel::Flash,
                gemm_chunks: 1,
                attention_efficiency: cluster.gpu.gemm_efficiency,
                kernel_fusion: KernelFusion::Fused,
                sdpa_repeats_kv: false,
                rope_fusion: true,
                cast: CastSetting {
                    modules: crate::training::ModulePrecision::NONE,
                    precision: Precision::Fp8,
                    fp8_scaling: crate::training::Fp8Scaling::Current,
                    quantizes_in_the_norm: true,
                    casts_before_gather: true,
                    reads_columnwise_fp8_where_supported,
                    wgrad_accumulates_into: None,
                },
            };
            let per_byte =
                1.0 / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency;
            (layer_time_sharded(&m, &cluster, &shard), per_byte)
        };
        let b_s_h = 8192.0 * 8192.0;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
        let backward_extra = |layer: &LayerTime| {
            (
                layer.backward - 2.0 * layer.forward - flash_backward_extra(layer),
                layer.mlp_backward - 2.0 * layer.mlp_forward,
            )
        };
        for recompute in [Recompute::None, Recompute::Full] {
            let (h100, per_byte) = run("h100-sxm-80g", recompute, true);
            let (layer, mlp) = backward_extra(&h100);
            assert!(close(layer, 4.0 * 2.0 * b_s_h * per_byte), "{layer}");
            assert!(close(mlp, 2.0 * 2.0 * b_s_h * per_byte), "{mlp}");
            if recompute == Recompute::Full {
                assert_eq!(h100.recompute, h100.forward);
            }
            let (b200, _) = run("b200-sxm-180g", recompute, true);
            assert_eq!(backward_extra(&b200).1, 0.0);
            let (torchao_b200, per_byte) = run("b200-sxm-180g", recompute, false);
            let (layer, _) = backward_extra(&torchao_b200);
            assert!(close(layer, 4.0 * 2.0 * b_s_h * per_byte), "{layer}");
        }
    }

    /// The flash-attention backward's time beyond twice its forward.
    fn flash_backward_extra(layer: &LayerTime) -> f64 {
        (flash_backward_time_over_forward() - 2.0) * layer.attention_forward
    }

    #[test]
    fn per_op_sac_recomputes_wk_wo_w3_and_the_elementwise_kernels() {
        // torchtitan's per-op SAC on Llama 3 8B, one GPU (no TP): the recompute runs wk (the K
        // share of the fused QKV GEMM), wo and w3 (half the fused w1/w3 GEMM) again, and every
        // element-wise kernel. bf16 GEMMs at those shapes are compute-bound, so the matmul part
        // equals their FLOPs at the GEMM roof: 2·b·s·h·(kv + h + ffn).
        let m = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let shard = |recompute, selective| LayerShard {
            micro_batch: 2,
            seq_len: 8192,
            tp: 1,
            cp: 1,
            sp: false,
            recompute,
            selective,
            attention: AttentionKernel::Flash,
            gemm_chunks: 1,
            attention_efficiency: cluster.gpu.gemm_efficiency,
            kernel_fusion: KernelFusion::Fused,
            sdpa_repeats_kv: false,
            rope_fusion: true,
            cast: CastSetting::BF16,
        };
        let sac = layer_time_sharded(
            &m,
            &cluster,
            &shard(Recompute::Selective, SelectiveRecompute::AlternateMatmuls),
        );
        let megatron = layer_time_sharded(
            &m,
            &cluster,
            &shard(Recompute::Selective, SelectiveRecompute::AttentionCore),
        );
        let full = layer_time_sharded(
            &m,
            &cluster,
            &shard(Recompute::Full, SelectiveRecompute::AlternateMatmuls),
        );
        // Megatron's selective recompute is FlashAttention's own backward: nothing extra.
        assert_eq!(megatron.recompute, 0.0);
        let gpu = &cluster.gpu;
        let matmul_flops = 2.0 * 2.0 * 8192.0 * 4096.0 * (1024.0 + 4096.0 + 14336.0);
        let matmuls = matmul_flops / (gpu.peak_flops().0 * gpu.gemm_efficiency);
        let (outside, inside, _) = layer_elementwise_bytes(&m, 2, 8192, AttentionKernel::Flash);
        // The element-wise kernels include the fused RoPE on Q and K.
        let rope = 2.0 * 8192.0 * rope_bytes_per_token(&m, true);
        let elementwise = (outside + inside + rope) / gpu.achieved_hbm_bandwidth().0;
        let want = (matmuls + elementwise) / gpu.framework_efficiency;
        assert!(
            (sac.recompute / want - 1.0).abs() < 1e-9,
            "{} vs {want}",
            sac.recompute
        );
        // Between nothing and the whole forward.
        assert!(sac.recompute > 0.2 * full.recompute && sac.recompute < full.recompute);
        assert_eq!(sac.forward, megatron.forward);
    }

    #[test]
    fn flash_backward_is_its_measured_multiple_of_the_forward() {
        // FlashAttention-2 §3.1: backward runs 5 matmuls where forward runs 2 (2.5x the FLOPs), at
        // 0.87 of the forward's rate on H100 (FlashAttention-3 §4.1 speed charts): the attention
        // core's backward is 2.5 / 0.87 = 2.87x its forward; everything else stays at 2x.
        let m = gpt3_175b();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let flash = layer_time(
            &m,
            &cluster,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Flash,
        );
        let core = flash_attention_time(&m, &cluster, 1, 2048, 8);
        let expected =
            2.0 * flash.forward + (2.5 / 0.87 - 2.0) * core / cluster.gpu.framework_efficiency;
        assert!((flash.backward / expected - 1.0).abs() < 1e-12);
        assert_eq!(flash.recompute, 0.0);
        let unfused = layer_time(
            &m,
            &cluster,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        );
        assert!(
            unfused.forward > flash.forward,
            "the unfused path pays the s² memory traffic"
        );
    }

    #[test]
    fn long_sequence_flash_attention_is_causal_and_compute_bound() {
        // s = 8192: the fused kernel runs half the QKᵀ/AV FLOPs (causal blocks skipped) at the GEMM roof.
        let mut m = gpt3_175b();
        m.seq_len = 8192;
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let full: f64 = layer_gemms(&m, 1, 8192, 8)[1..3]
            .iter()
            .map(Gemm::flops)
            .sum();
        let roof = cluster.gpu.peak_flops().0 * cluster.gpu.gemm_efficiency;
        let t = flash_attention_time(&m, &cluster, 1, 8192, 8);
        assert!((t / (0.5 * full / roof) - 1.0).abs() < 1e-12, "{t}");
    }

    #[test]
    fn layer_gemm_flops_sum_to_megatron_layer_flops() {
        // 24bsh² + 4bs²h per layer forward (Narayanan et al. 2021 §3), split over t ranks.
        let m = gpt3_175b();
        for tp in [1, 2, 8] {
            let per_rank: f64 = layer_gemms(&m, 2, 2048, tp).iter().map(Gemm::flops).sum();
            let whole = m.layer_forward_flops(2, 2048).0;
            assert!((per_rank * f64::from(tp) / whole - 1.0).abs() < 1e-12);
        }
    }
}
