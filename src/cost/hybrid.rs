//! A hybrid Mamba-Transformer stack's average layer (`model::hybrid`): each layer is one block —
//! Mamba-2, attention, MLP or MoE — behind its own norm and residual, so the average layer carries
//! each block's share of the symbols where a transformer layer carries one attention and one MLP.
//!
//! The Mamba-2 mixer as Megatron-Core runs it (`megatron/core/ssm/mamba_mixer.py`
//! `MambaMixer.forward`, `mamba_ssm`'s `mamba_split_conv1d_scan_combined`): the block's norm fused
//! into `in_proj` (column parallel, h → z, x, B, C, dt), a depthwise causal conv over x, B, C, the
//! chunked SSD scan (chunks of 128 tokens: `chunk_size=128`), a gated RMSNorm over d_inner and
//! `out_proj` (row parallel, d_inner → h). Heads and groups split over TP like attention's.
//!
//! Under context parallelism (`megatron/core/ssm/mamba_context_parallel.py`, `MambaContextParallel`,
//! at Megatron-LM d98e8a64) the mixer trades its sequence shard of every head for the whole
//! sequence of heads/cp heads around the conv and the scan, which need every token of a channel in
//! order: `pre_conv_ssm` all-to-alls z, x, B, C and dt one by one (`_all_to_all_cp2hp`, five
//! synchronous all-to-alls over the CP group), B and C first repeated so that every CP rank gets a
//! whole group where a TP rank holds fewer groups than cp (`group_repeat_count`), concatenates them
//! and undoes the attention layers' causal load balancing (rank r holds chunks r and 2cp−1−r of
//! 2cp; `_undo_attention_load_balancing` puts them in sequence order); `post_conv_ssm` redoes the
//! balancing and trades the scan's output back (`_all_to_all_hp2cp`). Each all-to-all is
//! `tensor_parallel/mappings.py`'s `_AllToAll`, whose backward is the reverse all-to-all of the
//! gradient, so the backward moves as many bytes. Nothing runs beside them: the conv waits for
//! its inputs and `out_proj` for the scan's output.

use crate::cluster::Cluster;
use crate::model::Model;

use super::cast::{self, LinearInput};
use super::compute::{Gemm, LayerShard, LayerTime, linear_gemm_time, wgrad_accumulation_s};

/// Tokens per SSD chunk (`MambaMixer` `chunk_size=128`).
const SSD_CHUNK_TOKENS: f64 = 128.0;

/// Bytes of a bf16 activation element.
const BF16_BYTES: f64 = 2.0;

/// Bytes of an fp32 element (the SSD's chunk states and C·Bᵀ blocks).
const FP32_BYTES: f64 = 4.0;

/// Groups the mixer runs on over all TP and CP ranks, counting the copies context parallelism
/// makes: `MambaContextParallel` gives each CP rank `ngroups_local_tp / cp` groups, or, where a TP
/// rank holds fewer groups than cp, one group repeated `cp / ngroups_local_tp` times
/// (`group_repeat_count`, B and C `repeat`ed before the all-to-all). So max(groups, tp·cp); the
/// groups themselves at cp 1 (`plan::check_hybrid` keeps tp ≤ groups).
pub fn groups_with_cp_copies(model: &Model, tp: u32, cp: u32) -> u32 {
    model
        .hybrid
        .as_ref()
        .map_or(0, |h| h.mamba_groups.max(tp.max(1) * cp.max(1)))
}

/// Width of `in_proj`'s output z, x, B, C, dt with `groups` groups (`Hybrid::in_proj_width` at
/// the model's own).
fn in_proj_width_at(hybrid: &crate::model::Hybrid, groups: u32) -> f64 {
    let bc = 2.0 * f64::from(groups) * f64::from(hybrid.mamba_state_dim);
    2.0 * hybrid.inner_width() + bc + f64::from(hybrid.mamba_heads)
}

/// One Mamba-2 mixer's forward on one TP rank for one micro-batch, and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MambaTime {
    pub forward_s: f64,
    pub backward_s: f64,
    /// Of `backward_s`, the two projections' weight-gradient GEMMs.
    pub weight_grad_s: f64,
    /// The forward's `in_proj` and `out_proj` GEMMs (what TP overlap hides behind).
    pub linear_gemm_forward_s: f64,
    /// The forward's column-parallel GEMM (`in_proj`).
    pub column_gemm_forward_s: f64,
}

/// HBM bytes per token of the mixer's kernels between its two projections, on one TP rank, before
/// the split by TP: reading z, x, B, C and dt from `in_proj`'s output; the conv writing x, B, C and
/// the scan reading them; the SSD's fp32 chunk states (heads × head_dim × state per chunk, written
/// by `chunk_state`, read and written by `state_passing`, read by `chunk_scan`: three passes) and
/// its fp32 C·Bᵀ blocks (groups × chunk² per chunk, written and read); the scan's output y; the
/// gated RMSNorm reading y and z and writing `out_proj`'s input.
pub fn mixer_bytes_per_token(model: &Model) -> f64 {
    let groups = model.hybrid.as_ref().map_or(0, |h| h.mamba_groups);
    mixer_bytes_per_token_at(model, groups)
}

/// [`mixer_bytes_per_token`] with `groups` groups: under context parallelism, the groups with
/// CP's copies (`groups_with_cp_copies`), whose B and C the conv and the scan read.
fn mixer_bytes_per_token_at(model: &Model, groups: u32) -> f64 {
    let Some(hybrid) = &model.hybrid else {
        return 0.0;
    };
    let inner = hybrid.inner_width();
    let bc = 2.0 * f64::from(groups) * f64::from(hybrid.mamba_state_dim);
    let states = f64::from(hybrid.mamba_heads)
        * f64::from(hybrid.mamba_head_dim)
        * f64::from(hybrid.mamba_state_dim);
    let blocks = f64::from(groups) * SSD_CHUNK_TOKENS;
    BF16_BYTES * in_proj_width_at(hybrid, groups)
        + 2.0 * BF16_BYTES * (inner + bc)
        + 3.0 * FP32_BYTES * states / SSD_CHUNK_TOKENS
        + 2.0 * FP32_BYTES * blocks
        + BF16_BYTES * inner
        + 3.0 * BF16_BYTES * inner
}

/// Activation bytes per token one Mamba-2 mixer keeps for its backward, per TP rank before the
/// split by TP, when nothing is recomputed. Megatron-Core calls `mamba_split_conv1d_scan_combined`
/// without its norm weight and runs the norm after it (`MambaMixer._ssm_training`: `y =
/// self.norm(y)`), so three autograd nodes save: the combined kernel `in_proj`'s output z, x, B, C,
/// dt (`zxbcdt`) and the scan's output before the z gate (`out_x`), recomputing the conv in its
/// backward (its `rstd` is None without the norm weight); the group RMSNorm (`RMSNormGated`, whose
/// `LayerNormFn` saves `x, weight, bias, mean, rstd, z`) its input, the gated output, and its
/// fp32 reciprocal deviations per group; `out_proj` its input, the norm's output. Three
/// d_inner-wide bf16 tensors. The block's norm input and output are counted with the layer's
/// norms (`memory::layer_activation_bytes`). Under context parallelism (`tp`, `cp`) the combined
/// kernel saves the exchanged `zxbcdt`, whose B and C carry CP's group copies
/// (`groups_with_cp_copies`); the rest is the rank's s/cp tokens' share as at cp 1.
pub fn mamba_saved_bytes_per_token(model: &Model, tp: u32, cp: u32) -> f64 {
    let Some(hybrid) = &model.hybrid else {
        return 0.0;
    };
    BF16_BYTES * in_proj_width_at(hybrid, groups_with_cp_copies(model, tp, cp))
        + 3.0 * BF16_BYTES * hybrid.inner_width()
        + FP32_BYTES * f64::from(hybrid.mamba_groups)
}

/// Tensor-core FLOPs per token of the chunked SSD (Dao and Gu 2024, "Transformers are SSMs",
/// §6, the SSD algorithm's four matmul steps): C·Bᵀ within a chunk (groups × chunk × state), the
/// diagonal blocks' output (heads × chunk × head_dim), the chunk states and their contribution to
/// the output (heads × 2 × state × head_dim); two FLOPs per multiply-add.
pub fn scan_flops_per_token(model: &Model) -> f64 {
    let groups = model.hybrid.as_ref().map_or(0, |h| h.mamba_groups);
    scan_flops_per_token_at(model, groups)
}

/// [`scan_flops_per_token`] with `groups` groups (CP's copies included: each copy's C·Bᵀ blocks
/// are computed on the rank that holds it).
fn scan_flops_per_token_at(model: &Model, groups: u32) -> f64 {
    let Some(hybrid) = &model.hybrid else {
        return 0.0;
    };
    let (p, n) = (
        f64::from(hybrid.mamba_head_dim),
        f64::from(hybrid.mamba_state_dim),
    );
    2.0 * (f64::from(groups) * SSD_CHUNK_TOKENS * n
        + f64::from(hybrid.mamba_heads) * (SSD_CHUNK_TOKENS * p + 2.0 * n * p))
}

/// The Mamba-2 mixer of one layer on one TP rank (`shard`): its two projections at the plan's
/// precision (their inputs cast as the dense layer's are), the scan's kernels on the roofline of
/// their bytes and tensor-core FLOPs, the backward twice the forward as every kernel's
/// (`compute::layer_time_sharded`'s rule), plus the weight-gradient accumulation.
pub fn mamba_time(model: &Model, cluster: &Cluster, shard: &LayerShard) -> MambaTime {
    let Some(hybrid) = &model.hybrid else {
        return MambaTime::default();
    };
    let t = f64::from(shard.tp.max(1));
    let tokens = f64::from(shard.micro_batch) * f64::from((shard.seq_len / shard.cp.max(1)).max(1));
    let h = f64::from(model.hidden);
    let precision = shard.cast.precision;
    let in_proj = Gemm {
        m: tokens,
        k: h,
        n: hybrid.in_proj_width() / t,
        batch: 1.0,
    };
    let out_proj = Gemm {
        m: tokens,
        k: hybrid.inner_width() / t,
        n: h,
        batch: 1.0,
    };
    // `out_proj` at a quantization recipe's precision for it (`training::ModulePrecision`).
    let out_cast = shard
        .cast
        .for_module(crate::training::QuantModule::MambaOutProj);
    let in_s = linear_gemm_time(&in_proj, cluster, precision, shard.gemm_chunks);
    let out_s = linear_gemm_time(&out_proj, cluster, out_cast.precision, shard.gemm_chunks);
    let gathered_from = shard.cast.gathered_from(shard.sp, shard.tp);
    let cast_bytes = cast::input_cast_bytes(
        shard.cast,
        &cluster.gpu,
        LinearInput::NormOutput,
        gathered_from,
    ) * in_proj.m
        * in_proj.k
        + cast::input_cast_bytes(out_cast, &cluster.gpu, LinearInput::Other, 1)
            * out_proj.m
            * out_proj.k;
    let gpu = &cluster.gpu;
    let bandwidth = gpu.achieved_hbm_bandwidth().0;
    // The rank runs heads/(tp·cp) heads over the whole sequence: the s/cp tokens' share of
    // heads/tp, with CP's group copies.
    let groups = groups_with_cp_copies(model, shard.tp, shard.cp);
    let scan_memory_s = tokens * mixer_bytes_per_token_at(model, groups) / t / bandwidth;
    let scan_compute_s = tokens * scan_flops_per_token_at(model, groups)
        / t
        / gpu.sustained_matmul_flops(gpu.gemm_efficiency).0;
    let scan_s = scan_memory_s.max(scan_compute_s) + cast_bytes / bandwidth;
    let efficiency = gpu.framework_efficiency;
    let forward_s = (in_s + out_s + scan_s) / efficiency;
    let wgrad_extra_s = wgrad_accumulation_s(&in_proj, cluster, shard.cast)
        + wgrad_accumulation_s(&out_proj, cluster, out_cast);
    let per_element = cast::backward_transpose_bytes(shard.cast, &cluster.gpu, gathered_from);
    let out_per_element = cast::backward_transpose_bytes(out_cast, &cluster.gpu, gathered_from);
    let transposed_bytes =
        per_element * in_proj.m * in_proj.k + out_per_element * out_proj.m * out_proj.n;
    MambaTime {
        forward_s,
        backward_s: 2.0 * forward_s + (wgrad_extra_s + transposed_bytes / bandwidth) / efficiency,
        weight_grad_s: (in_s + out_s + wgrad_extra_s) / efficiency,
        linear_gemm_forward_s: (in_s + out_s) / efficiency,
        column_gemm_forward_s: in_s / efficiency,
    }
}

/// One CP rank's tensors the mixer's context-parallel exchange carries per mixer per micro-batch,
/// in bytes, all bf16 as `in_proj` writes them: before the conv, z, x, B, C and dt (the rank's s/cp
/// tokens of a TP rank's heads and groups, B and C with CP's group copies,
/// `groups_with_cp_copies`), each traded for the whole sequence of heads/(tp·cp) heads by its own
/// all-to-all (`pre_conv_ssm`); after the scan, its output y (d_inner/tp wide) traded back
/// (`post_conv_ssm`). Each all-to-all keeps 1/cp of its tensor and sends the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MambaExchange {
    /// z, x, B, C, dt.
    pub before_scan: [f64; 5],
    /// y.
    pub after_scan: f64,
}

impl MambaExchange {
    /// The six tensors, one all-to-all each, in the order the forward runs them.
    pub fn tensors(&self) -> [f64; 6] {
        let [z, x, b, c, dt] = self.before_scan;
        [z, x, b, c, dt, self.after_scan]
    }

    /// The five before the conv together: the tensor the combined kernel reads (`zxBCdt` after
    /// the exchange, the rank's share of it per s/cp tokens).
    pub fn before_scan_bytes(&self) -> f64 {
        self.before_scan.iter().fold(0.0, |sum, bytes| sum + bytes)
    }
}

/// [`MambaExchange`] of one mixer on a rank of `plan` for sequences of `seq_len` tokens; zero for
/// a transformer or at cp 1.
pub fn mamba_exchange(
    model: &Model,
    seq_len: u32,
    plan: &crate::plan::ParallelPlan,
) -> MambaExchange {
    let none = MambaExchange {
        before_scan: [0.0; 5],
        after_scan: 0.0,
    };
    let Some(hybrid) = model.hybrid.as_ref().filter(|_| plan.cp > 1) else {
        return none;
    };
    let tokens = f64::from(plan.micro_batch) * f64::from(seq_len / plan.cp);
    let per_token = tokens * BF16_BYTES / f64::from(plan.tp);
    let inner = per_token * hybrid.inner_width();
    let state = per_token
        * f64::from(groups_with_cp_copies(model, plan.tp, plan.cp))
        * f64::from(hybrid.mamba_state_dim);
    MambaExchange {
        before_scan: [
            inner,
            inner,
            state,
            state,
            per_token * f64::from(hybrid.mamba_heads),
        ],
        after_scan: inner,
    }
}

/// HBM bytes per byte of the tensors exchanged before the scan, forward: `all_to_all_sp2hp`'s
/// split and `torch.cat` into rank order before each all-to-all (read + write), the five
/// exchanged tensors concatenated (`torch.cat([z, x, B, C, dt])`, read + write) and the load
/// balancing undone (`_undo_attention_load_balancing`, chunks concatenated in sequence order:
/// read + write).
pub const MAMBA_BEFORE_SCAN_FORWARD_COPY_BYTES_PER_TENSOR_BYTE: f64 = 6.0;
/// Backward, autograd's reverse of each: the chunks' gradients concatenated back (read + write),
/// the concatenation's gradient handed on as strided views, which `_AllToAll` makes contiguous
/// before sending (read + write), the rank-order concatenation's gradient split back along the
/// hidden dimension (`torch.cat`, read + write) and the five gradients concatenated into
/// `in_proj`'s output gradient (the backward of `torch.split`, read + write).
pub const MAMBA_BEFORE_SCAN_BACKWARD_COPY_BYTES_PER_TENSOR_BYTE: f64 = 8.0;
/// After the scan, forward and backward alike: the load balancing redone (read + write) and
/// `all_to_all_hp2sp`'s split and `torch.cat` back into hidden order after the all-to-all (read +
/// write); the backward concatenates the gradients of both splits back.
pub const MAMBA_AFTER_SCAN_COPY_BYTES_PER_TENSOR_BYTE: f64 = 4.0;

/// Time of the copies around one mixer's exchange per micro-batch at `hbm_bytes_per_s`, (forward,
/// backward), plus B and C's repeat where CP copies groups (read the TP rank's groups, write the
/// copies; the backward sums them back: read the copies, write one). The copies run on the
/// compute stream.
pub fn mamba_exchange_copy_s(
    model: &Model,
    plan: &crate::plan::ParallelPlan,
    exchange: &MambaExchange,
    hbm_bytes_per_s: f64,
) -> (f64, f64) {
    let Some(hybrid) = model.hybrid.as_ref().filter(|_| plan.cp > 1) else {
        return (0.0, 0.0);
    };
    let copies = groups_with_cp_copies(model, plan.tp, plan.cp);
    let repeat = if copies > hybrid.mamba_groups {
        let [_, _, b, c, _] = exchange.before_scan;
        (1.0 + f64::from(hybrid.mamba_groups) / f64::from(copies)) * (b + c)
    } else {
        0.0
    };
    let before = exchange.before_scan_bytes();
    let after = MAMBA_AFTER_SCAN_COPY_BYTES_PER_TENSOR_BYTE * exchange.after_scan + repeat;
    (
        (MAMBA_BEFORE_SCAN_FORWARD_COPY_BYTES_PER_TENSOR_BYTE * before + after) / hbm_bytes_per_s,
        (MAMBA_BEFORE_SCAN_BACKWARD_COPY_BYTES_PER_TENSOR_BYTE * before + after) / hbm_bytes_per_s,
    )
}

/// One norm and one residual add of a block, per TP rank (split by TP under sequence
/// parallelism): the RMSNorm reads and writes the hidden state (4 bytes an element), the residual
/// add reads two and writes one bf16 tensor, plus the dropout mask where the model has dropout (the
/// per-block half of `compute::layer_elementwise_bytes`' norms and residuals).
fn norm_and_residual_s(model: &Model, cluster: &Cluster, shard: &LayerShard) -> f64 {
    let tokens = f64::from(shard.micro_batch) * f64::from((shard.seq_len / shard.cp.max(1)).max(1));
    let masks = if model.dropout { 1.0 } else { 0.0 };
    let bytes = (4.0 + 6.0 + masks) * tokens * f64::from(model.hidden);
    let split = if shard.sp { f64::from(shard.tp) } else { 1.0 };
    bytes / split / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency
}

/// The average layer of a hybrid stack's run of layers holding `shares` of each block (one
/// pipeline stage's, `pipeline::ChunkLayout::stage_blocks`) from the transformer layer `layer` (attention and a dense
/// MLP, two norms and one overhead, `compute::layer_time_sharded`) and the Mamba mixer: an
/// attention block is the layer less its MLP and one norm; an MLP block is the MLP with a norm; a
/// Mamba block is the mixer with a norm; each block is a layer of Megatron-Core's stack and pays
/// the per-layer overhead. The dense MLP fields stay one MLP's (the MoE layers' share replaces
/// them in `unit_costs_at`) scaled by the MLP blocks' share, so that an MoE block's delta lands on
/// its own share. Returned unchanged for a transformer.
pub fn average_layer(
    model: &Model,
    cluster: &Cluster,
    shard: &LayerShard,
    layer: LayerTime,
    shares: crate::model::BlockShares,
) -> LayerTime {
    if !model.is_hybrid() {
        return layer;
    }
    let mamba = mamba_time(model, cluster, shard);
    let norm_s = norm_and_residual_s(model, cluster, shard);
    let overhead_s = cluster.gpu.layer_overhead_us * 1e-6;
    let (a, m, d) = (shares.attention, shares.mlp, shares.mamba);
    // A part of the layer that its attention side, its MLP (`mlp` of it) and the Mamba mixer
    // (`mamba`) each hold, at the blocks' shares.
    let blocks = |whole: f64, mlp: f64, mamba: f64| a * (whole - mlp) + m * mlp + d * mamba;
    let attention_forward = layer.forward - layer.mlp_forward - norm_s;
    let attention_backward = layer.backward - layer.mlp_backward - 2.0 * norm_s;
    let block = |forward: f64| forward + norm_s + overhead_s;
    let block_backward = |backward: f64| backward + 2.0 * (norm_s + overhead_s);
    let forward = a * attention_forward + m * block(layer.mlp_forward) + d * block(mamba.forward_s);
    let backward = a * attention_backward
        + m * block_backward(layer.mlp_backward)
        + d * block_backward(mamba.backward_s);
    let attention_recompute = if shard.recompute == crate::plan::Recompute::Full {
        // Full recompute repeats each block's forward.
        forward
    } else {
        // Selective recompute re-runs attention cores, which only attention blocks hold.
        a * layer.recompute
    };
    LayerTime {
        forward,
        backward,
        recompute: attention_recompute,
        linear_gemm_forward: blocks(
            layer.linear_gemm_forward,
            layer.mlp_linear_gemm_forward,
            mamba.linear_gemm_forward_s,
        ),
        column_gemm_forward: blocks(
            layer.column_gemm_forward,
            layer.mlp_column_gemm_forward,
            mamba.column_gemm_forward_s,
        ),
        attention_forward: a * layer.attention_forward,
        mlp_forward: m * layer.mlp_forward,
        mlp_backward: m * layer.mlp_backward,
        weight_grad: blocks(
            layer.weight_grad,
            layer.mlp_weight_grad,
            mamba.weight_grad_s,
        ),
        mlp_weight_grad: m * layer.mlp_weight_grad,
        mlp_linear_gemm_forward: m * layer.mlp_linear_gemm_forward,
        mlp_column_gemm_forward: m * layer.mlp_column_gemm_forward,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::cast::CastSetting;
    use crate::cost::compute::layer_time_sharded;
    use crate::plan::Recompute;
    use crate::specs::load_model;
    use crate::training::{AttentionKernel, KernelFusion, SelectiveRecompute};

    fn h100() -> Cluster {
        Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        }
    }

    fn shard(tp: u32) -> LayerShard {
        LayerShard {
            micro_batch: 1,
            seq_len: 8192,
            tp,
            cp: 1,
            sp: tp > 1,
            recompute: Recompute::None,
            selective: SelectiveRecompute::CheckpointedAttention,
            attention: AttentionKernel::Flash,
            gemm_chunks: 1,
            attention_efficiency: 0.5,
            kernel_fusion: KernelFusion::Fused,
            sdpa_repeats_kv: false,
            rope_fusion: true,
            cast: CastSetting::BF16,
        }
    }

    #[test]
    fn the_mixer_moves_the_bytes_of_its_kernels() {
        // Nemotron 3 Nano: in_proj 2·4096 + 2·8·128 + 64 = 10,304 wide, conv over 6,144 channels,
        // 64 heads of 64 with state 128. Per token: 20,608 (zxbcdt) + 24,576 (conv out, written
        // and read) + 49,152 (fp32 chunk states, three passes over 64·64·128 per 128 tokens) +
        // 8,192 (fp32 C·Bᵀ blocks, 8 groups x 128) + 8,192 (y) + 24,576 (gated norm).
        let nano = load_model("nemotron-3-nano-30b-a3b").unwrap();
        assert_eq!(mixer_bytes_per_token(&nano), 135_296.0);
        assert_eq!(
            mixer_bytes_per_token(&load_model("llama3-8b").unwrap()),
            0.0
        );
    }

    #[test]
    fn a_transformer_layer_is_left_as_it_is() {
        let model = load_model("llama3-8b").unwrap();
        let cluster = h100();
        let layer = layer_time_sharded(&model, &cluster, &shard(2));
        let shares = model.block_shares();
        assert_eq!(
            average_layer(&model, &cluster, &shard(2), layer, shares),
            layer
        );
    }

    #[test]
    fn attention_and_mlp_blocks_add_up_to_a_transformer_layer() {
        // A stack "*-*-" is two transformer layers cut into four blocks: the same GEMMs, norms
        // and residuals, and two more per-layer overheads (each block is a layer of its own).
        let cluster = h100();
        let mut transformer = load_model("nemotron-h-8b").unwrap();
        transformer.hybrid = None;
        transformer.layers = 2;
        let mut hybrid = load_model("nemotron-h-8b").unwrap();
        hybrid.layers = 4;
        hybrid.hybrid.as_mut().unwrap().pattern = "*-*-".into();
        let shard = shard(2);
        let two = layer_time_sharded(&transformer, &cluster, &shard);
        let dense_layer = layer_time_sharded(&hybrid, &cluster, &shard);
        let four = average_layer(
            &hybrid,
            &cluster,
            &shard,
            dense_layer,
            hybrid.block_shares(),
        );
        let overhead = cluster.gpu.layer_overhead_us * 1e-6;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(close(
            4.0 * four.forward,
            2.0 * two.forward + 2.0 * overhead
        ));
        assert!(close(
            4.0 * four.backward,
            2.0 * two.backward + 4.0 * overhead
        ));
        assert!(close(4.0 * four.weight_grad, 2.0 * two.weight_grad));
        assert!(close(
            4.0 * four.linear_gemm_forward,
            2.0 * two.linear_gemm_forward
        ));
    }

    #[test]
    fn cp_copies_groups_only_where_a_tp_rank_holds_fewer_than_cp() {
        // Nemotron-H 8B, 8 groups: at tp 2 cp 2 each CP rank gets 2 of a TP rank's 4; at tp 8 cp
        // 2 the TP rank's one group goes to both CP ranks (MambaContextParallel
        // group_repeat_count 2), 16 counted over the ranks.
        let model = load_model("nemotron-h-8b").unwrap();
        assert_eq!(groups_with_cp_copies(&model, 2, 1), 8);
        assert_eq!(groups_with_cp_copies(&model, 2, 2), 8);
        assert_eq!(groups_with_cp_copies(&model, 8, 2), 16);
        assert_eq!(groups_with_cp_copies(&model, 8, 4), 32);
        // The combined kernel saves the exchanged zxBCdt: B and C with the copies, 2 x (16 − 8)
        // x 128 bf16 elements a token more.
        let more =
            mamba_saved_bytes_per_token(&model, 8, 2) - mamba_saved_bytes_per_token(&model, 8, 1);
        assert_eq!(more, 2.0 * 8.0 * 128.0 * 2.0);
        assert_eq!(
            mamba_saved_bytes_per_token(&model, 2, 2),
            mamba_saved_bytes_per_token(&model, 2, 1)
        );
    }

    #[test]
    fn a_mixer_split_over_cp_runs_the_scan_of_its_share_of_the_sequence() {
        // Heads/(tp·cp) heads over the whole sequence are the work of s/cp tokens of heads/tp
        // where CP copies no group: the mixer at cp 2 on 16K tokens is the mixer at cp 1 on 8K.
        let model = load_model("nemotron-h-8b").unwrap();
        let cluster = h100();
        let split = LayerShard {
            seq_len: 16384,
            cp: 2,
            ..shard(2)
        };
        assert_eq!(
            mamba_time(&model, &cluster, &split),
            mamba_time(&model, &cluster, &shard(2))
        );
    }

    #[test]
    fn a_wider_state_costs_the_scan_more() {
        // The chunk states grow with the state width: Nemotron-H 56B's 256 against 128.
        let cluster = h100();
        let mut narrow = load_model("nemotron-h-56b").unwrap();
        narrow.hybrid.as_mut().unwrap().mamba_state_dim = 128;
        let wide = load_model("nemotron-h-56b").unwrap();
        let (n, w) = (
            mamba_time(&narrow, &cluster, &shard(8)),
            mamba_time(&wide, &cluster, &shard(8)),
        );
        assert!(w.forward_s > n.forward_s, "{w:?} {n:?}");
    }
}
