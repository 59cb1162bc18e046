//! Communication per GPU per step for the TP, PP and DP groups: bytes on the wire and time on the
//! link each group uses.
//!
//! Ring algorithms (nccl-tests `doc/PERFORMANCE.md`): for a tensor of S bytes over n ranks, each rank
//! sends 2(n−1)/n·S in an all-reduce and (n−1)/n·S in an all-gather or reduce-scatter; a p2p send is S.
//! Bus bandwidth is algorithm bandwidth times that same factor, so time = wire bytes / bus bandwidth
//! plus a latency per ring step (2(n−1) steps for all-reduce, n−1 otherwise).

use serde::{Deserialize, Serialize};

use super::groups::{GroupKind, groups};
use crate::cluster::{Cluster, Link, LinkSpeed};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::Training;
use crate::units::{Bytes, Seconds};

/// Activations travel in bf16 (2 bytes per element).
pub const ACTIVATION_BYTES: f64 = 2.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    SendRecv,
}

impl Collective {
    /// Bytes one rank sends per byte of the full tensor (nccl-tests' bus-bandwidth factor).
    pub fn wire_factor(self, ranks: u32) -> f64 {
        let n = f64::from(ranks);
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            Collective::SendRecv => 1.0,
        }
    }

    /// Sequential ring steps, each paying the link latency once.
    pub fn ring_steps(self, ranks: u32) -> f64 {
        let n = f64::from(ranks);
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0),
            Collective::AllGather | Collective::ReduceScatter => n - 1.0,
            Collective::SendRecv => 1.0,
        }
    }

    /// Time of one collective on `tensor_bytes` (the full tensor) among `ranks`: α-β model.
    pub fn time(self, tensor_bytes: f64, ranks: u32, link: LinkSpeed) -> f64 {
        if ranks <= 1 && self != Collective::SendRecv {
            return 0.0;
        }
        self.ring_steps(ranks) * link.latency.0
            + self.wire_factor(ranks) * tensor_bytes / link.bandwidth.0
    }
}

/// Time of one all-to-all among `ranks` in which each GPU sends `bytes` (its share for the other
/// members): every member to every other at its own link speed (no ring: the per-GPU bandwidth,
/// not the aggregate of a node's NICs), one latency per peer. Used for MoE token dispatch and for
/// Ulysses-style context parallelism.
pub fn alltoall_s(bytes: f64, ranks: u32, link: LinkSpeed) -> f64 {
    if ranks <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    f64::from(ranks - 1) * link.latency.0 + bytes / link.bandwidth.0
}

/// One group's traffic per GPU per step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupComm {
    pub wire_bytes: Bytes,
    /// Total time of the group's collectives, before any overlap with compute.
    pub time_s: Seconds,
    /// The link the group uses; none when the group has one member (no such parallelism).
    pub link: Option<Link>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Comm {
    pub tp: GroupComm,
    pub cp: GroupComm,
    pub ep: GroupComm,
    pub pp: GroupComm,
    pub dp: GroupComm,
}

/// Where a communication group sits: the link it uses and, across nodes, how many of its members
/// share a node (each brings its own NIC) — on multi-node NVLink domains (NVL72), how many share
/// the rack, the smallest such block (`groups::place`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub link: Link,
    pub members_per_node: u32,
}

/// Links of the TP, DP and PP groups.
pub fn group_links(cluster: &Cluster, plan: &ParallelPlan) -> (Link, Link, Link) {
    let (tp, dp, pp) = group_placements(cluster, plan);
    (tp.link, dp.link, pp.link)
}

/// Achieved bus bandwidth and latency of the TP, DP and PP groups where they sit.
pub fn group_speeds(cluster: &Cluster, plan: &ParallelPlan) -> (LinkSpeed, LinkSpeed, LinkSpeed) {
    let g = groups(cluster, plan);
    (
        g.get(GroupKind::Tp).speed,
        g.get(GroupKind::Dp).speed,
        g.get(GroupKind::Pp).speed,
    )
}

/// Placements of the TP, DP and PP groups (see `groups.rs`).
pub fn group_placements(
    cluster: &Cluster,
    plan: &ParallelPlan,
) -> (Placement, Placement, Placement) {
    let g = groups(cluster, plan);
    (
        g.get(GroupKind::Tp).placement(),
        g.get(GroupKind::Dp).placement(),
        g.get(GroupKind::Pp).placement(),
    )
}

/// TP collectives per layer per micro-batch, in all-reduce equivalents: Megatron's column-then-row
/// split needs one all-reduce after attention and one after the MLP in forward, and their conjugates
/// in backward (Shoeybi et al. 2019 §3, Fig. 4); full recompute repeats the forward pair. With
/// sequence parallelism each all-reduce becomes an all-gather + reduce-scatter of the same total
/// volume (Korthikanti et al. 2022 §4.2.2).
pub fn tp_collectives_per_layer(recompute: Recompute) -> f64 {
    let forward = 2.0;
    let backward = 2.0;
    let recompute_forward = if recompute == Recompute::Full {
        2.0
    } else {
        0.0
    };
    forward + backward + recompute_forward
}

/// Bytes of the activation tensor b·(s/cp)·h a TP collective carries (a CP rank holds s/cp tokens).
pub fn tp_tensor_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    f64::from(plan.micro_batch)
        * f64::from(training.seq_len / plan.cp)
        * f64::from(model.hidden)
        * ACTIVATION_BYTES
}

/// What a sequence-parallel all-gather carries per byte of the bf16 activation it would carry in
/// bf16 training: low-precision training gathers quantized copies. Transformer Engine quantizes a
/// column-parallel linear's sequence shard and all-gathers the row-wise copy in the forward
/// (`layernorm_linear.py`/`linear.py`, `gather_along_first_dim(..., quantizer=...)`), the
/// column-wise copy again for the weight gradient, and in the backward of a row-parallel linear
/// the quantized output gradient with both copies (`base.py` `grad_output_preprocess`; per-tensor
/// FP8 gathers the row-wise copy only and transposes after, `distributed.py` `_all_gather_fp8`,
/// `_all_gather_mxfp8`); torchao's float8 TP classes do the same for tensorwise FP8
/// (`Float8ColwiseParallel` casts before its gather, `Float8RowwiseParallel` casts the output
/// gradient before the backward's gather). The reduce-scatters stay bf16 (their inputs are GEMM
/// outputs). 1 everywhere for bf16, without sequence parallelism, and where the framework gathers
/// in bf16 (torchtitan's block-scaled formats are not established here).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpGatherScale {
    /// The forward's all-gather of a column-parallel input.
    pub forward: f64,
    /// The backward's all-gather of a row-parallel linear's output gradient.
    pub grad: f64,
    /// The backward's all-gather of a column-parallel input again, for its weight gradient.
    pub regather: f64,
}

impl SpGatherScale {
    pub const BF16: SpGatherScale = SpGatherScale {
        forward: 1.0,
        grad: 1.0,
        regather: 1.0,
    };

    /// Whether the gathers carry the quantized copy, so the inputs are cast on the sequence shard
    /// before them.
    pub fn carries_quantized_copies(&self) -> bool {
        self.forward != 1.0
    }
}

pub fn sp_gather_scale(training: &Training, plan: &ParallelPlan) -> SpGatherScale {
    use crate::plan::Precision;
    use crate::training::TrainingFramework;
    if !plan.sequence_parallel || plan.tp <= 1 {
        return SpGatherScale::BF16;
    }
    let operand = super::cast::operand_bytes(plan.precision) / ACTIVATION_BYTES;
    match (training.framework, plan.precision) {
        (_, Precision::Bf16) => SpGatherScale::BF16,
        (TrainingFramework::MegatronCore, Precision::Fp8)
        | (TrainingFramework::Torchtitan, Precision::Fp8) => SpGatherScale {
            forward: operand,
            grad: operand,
            regather: operand,
        },
        (TrainingFramework::MegatronCore, Precision::Mxfp8 | Precision::Nvfp4) => SpGatherScale {
            forward: operand,
            grad: 2.0 * operand,
            regather: operand,
        },
        _ => SpGatherScale::BF16,
    }
}

/// Bytes a stage boundary carries per micro-batch per direction: b·s·h activations, divided by t
/// when each TP rank sends its share: with sequence parallelism the tensor is already split over
/// the sequence (Megatron-Core `get_tensor_shapes`: `seq_length // tp` under SP; torchtitan's
/// block output is `Shard(1)`); without it, 2021 Megatron-LM scatters the replicated tensor over
/// the TP ranks and all-gathers it after the transfer (Narayanan et al. 2021 §4.1,
/// "scatter/gather optimization") and DeepSpeed's pipeline engine partitions it
/// (`pipe_partitioned`), while Megatron-Core dropped that optimization and torchtitan sends the
/// replicated tensor: the whole b·s·h.
pub fn pp_message_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    let split = plan.sequence_parallel || training.framework.scatters_pipeline_messages();
    tp_tensor_bytes(model, training, plan) / if split { f64::from(plan.tp) } else { 1.0 }
}

/// Bytes one CP ring step sends per layer forward: the K and V of the rank's s/cp tokens for its
/// TP share of the KV heads (GQA makes this smaller than the queries), in bf16 (Transformer Engine
/// `AttnFuncWithCPAndKVP2P`: each of the cp − 1 steps passes the K/V chunk to the next rank).
pub fn cp_kv_chunk_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    2.0 * f64::from(plan.micro_batch)
        * f64::from(training.seq_len / plan.cp)
        * super::compute::kv_width_per_rank(model, plan.tp)
        * ACTIVATION_BYTES
}

/// DP traffic per step and what part of it can hide behind backward compute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpTraffic {
    pub wire_bytes: f64,
    /// Gradient reduction that overlaps with the backward pass of one micro-batch (per micro-batch).
    pub reduce_per_overlap_window_s: f64,
    /// How many such windows (1 for ZeRO 0/1, which reduce once; m for ZeRO 2/3, which reduce every
    /// micro-batch because they do not keep unsharded gradients).
    pub overlap_windows: f64,
    /// ZeRO-3's parameter all-gather before each micro-batch's forward, which prefetching overlaps
    /// with that forward (DeepSpeed `stage3_prefetch_bucket_size`, FSDP forward prefetch).
    pub forward_gather_per_mb_s: f64,
    /// The distributed optimizer's parameter all-gather after the optimizer step (ZeRO-1/2).
    pub step_gather_s: f64,
    /// Wire bytes of the gradient reduction alone (the rest are parameter gathers).
    pub grad_wire_bytes: f64,
    /// Time of the gradient reduction alone.
    pub grad_total_s: f64,
    /// One gradient bucket's reduction: the last bucket cannot overlap anything.
    pub last_bucket_s: f64,
    pub total_s: f64,
}

impl DpTraffic {
    /// Two groups' traffic on the same step (dense parameters over DP×CP, experts over expert-DP):
    /// their times add, as NCCL runs them one after the other on the same links.
    pub fn plus(&self, other: &DpTraffic) -> DpTraffic {
        let windows = self.overlap_windows.max(other.overlap_windows);
        let per_window =
            |t: &DpTraffic| t.reduce_per_overlap_window_s * t.overlap_windows / windows.max(1.0);
        DpTraffic {
            wire_bytes: self.wire_bytes + other.wire_bytes,
            reduce_per_overlap_window_s: per_window(self) + per_window(other),
            overlap_windows: windows,
            forward_gather_per_mb_s: self.forward_gather_per_mb_s + other.forward_gather_per_mb_s,
            step_gather_s: self.step_gather_s + other.step_gather_s,
            grad_wire_bytes: self.grad_wire_bytes + other.grad_wire_bytes,
            grad_total_s: self.grad_total_s + other.grad_total_s,
            last_bucket_s: self.last_bucket_s.max(other.last_bucket_s),
            total_s: self.total_s + other.total_s,
        }
    }
}

/// Whether the plan's quantized weights are its parameters, all-gathered in FP8: Megatron-Core's
/// `--fp8-param-gather` (`Training::fp8_param_gather`: the framework's default or the pasted line's), which needs low-precision GEMMs
/// and the distributed optimizer (ZeRO >= 1). One rule for memory, DP traffic and the ledger.
pub fn fp8_parameter_gather(training: &Training, plan: &ParallelPlan) -> bool {
    plan.precision != crate::plan::Precision::Bf16 && plan.zero >= 1 && training.fp8_param_gather
}

/// Whether the plan's sharded data parallelism reduces gradients once per step after the pipeline
/// schedule (`TrainingFramework::fsdp_reduces_after_pipeline_schedule`): FSDP (ZeRO-2/3) with
/// more than one pipeline stage under PyTorch's pipelining. One rule for memory, DP traffic and
/// the ledger.
pub fn reduces_after_pipeline_schedule(training: &Training, plan: &ParallelPlan) -> bool {
    plan.pp > 1 && plan.zero >= 2 && training.framework.fsdp_reduces_after_pipeline_schedule()
}

/// How many times per step FSDP under PyTorch's pipelining reduce-scatters the gradients and
/// gathers the parameters it keeps across micro-batches: once per pipeline schedule
/// (`ParallelPlan::schedule_runs`), or once per step where the framework defers both to the
/// last schedule (`Training::fsdp_syncs_once_per_step`). One rule for DP traffic and the ledger.
pub fn fsdp_syncs_per_step(training: &Training, plan: &ParallelPlan) -> u32 {
    if reduces_after_pipeline_schedule(training, plan) && !training.fsdp_syncs_once_per_step {
        plan.schedule_runs.max(1)
    } else {
        1
    }
}

/// Bytes per parameter of the ZeRO parameter gathers, per group: bf16, or with FP8 parameter
/// gather the layer weights in one byte where the gather carries them quantized
/// ([`gathers_quantized_weights`]: MXFP8 only under ZeRO-3 resharding after the forward) (the embedding and output layer stay bf16, and so do the
/// layers kept in bf16, which Megatron-Core builds outside `fp8_model_init`:
/// `get_fp8_context(..., is_init=True)` is a null context for them). Each group gathers its own
/// parameters: DP×CP the non-expert ones (the stage's layers' attention, norms, router, shared
/// experts in one byte, its embedding, output layer and MTP projection in two), expert-DP the
/// routed experts (all layer weights, one byte). Both are averaged over the stage with the most
/// parameters (`memory::max_stage_params`, whose `params` the two groups gather), its layers
/// quantized but for the share kept in bf16 on the stages with `max_layers` layers (of those, the
/// one with the most bf16 layers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherBytes {
    /// Per non-expert parameter (the DP×CP group's gathers).
    pub dense: f64,
    /// Per routed-expert parameter (the expert-DP group's gathers).
    pub expert: f64,
}

/// Whether the parameter all-gather carries the quantized weights themselves (one byte each)
/// under `--fp8-param-gather`. Per-tensor FP8 (and NVFP4, not re-checked here) gathers the FP8
/// storage: Megatron-Core maps each Float8Tensor's uint8 data into the DDP `param_data` buffer
/// (`param_and_grad_buffer.py`, `param_dtype = torch.uint8` for quantized storage,
/// `modify_underlying_storage`). MXFP8 keeps two quantized copies (row- and column-wise scaled),
/// and what one gather moves depends on who gathers:
/// - Megatron-Core's distributed optimizer (ZeRO-1): `_ParamAndGradBuffer` makes one
///   `shared_buffer` of the gradient dtype for MXFP8 parameters, "For FP32 weight grads, only half
///   of the buffer is used to store params in bf16" (`param_data` is that buffer, or its first half
///   viewed as bf16), the all-gather fills it with the bf16 values and `_post_param_sync` casts them
///   into the MXFP8 storage afterwards (`copy_tensors_to_quantized_params`; Transformer Engine's
///   `replace_raw_data` raises for MXFP8Tensor, so `--reuse-grad-buf-for-mxfp8-param-ag` is the
///   only way, and Megatron-Bridge requires it, `mixed_precision.py`): two bytes a parameter.
///   Megatron-LM d98e8a64 and core_r0.14.0 alike.
/// - Megatron-FSDP and FSDP2 (ZeRO-3) gather one copy per pass where the weights are resharded
///   after the forward: Megatron-FSDP's `model_weight_buffer` holds the uint8 row-wise data
///   (`fp8_get_raw_data`) and its `transpose_weight_buffer` the column-wise, gathered for the
///   backward (`get_bucket_key(bucket_id, bwd)`, megatron_fsdp/param_and_grad_buffer.py at
///   d98e8a64); Transformer Engine's `MXFP8Tensor.fsdp_pre_all_gather` "allgather only the
///   necessary tensors based on forward/backward pass" (mxfp8_tensor.py): one byte a gather.
///   Kept through the backward (`reshard_after_forward=False`) the forward's gather carries both
///   copies, two bytes, as bf16 would. The e8m0 scales (1/32 byte) are left out, as per-tensor
///   FP8's scale is.
/// - ZeRO-2 (Megatron-FSDP `optim_grads`) is taken as gathering both copies (not checked).
pub fn gathers_quantized_weights(plan: &ParallelPlan) -> bool {
    plan.precision != crate::plan::Precision::Mxfp8
        || (plan.zero >= 3 && plan.reshard_after_forward)
}

pub fn gather_bytes_per_param(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    params: super::memory::StageParams,
    max_layers: u32,
) -> GatherBytes {
    let bf16 = crate::training::WEIGHT_BYTES;
    if !fp8_parameter_gather(training, plan) || !gathers_quantized_weights(plan) {
        return GatherBytes {
            dense: bf16,
            expert: bf16,
        };
    }
    let keep = super::pipeline::Bf16Keep::of(model, training, plan);
    let bf16_layers = if keep.layers.is_none() {
        0
    } else {
        let layout = super::pipeline::ChunkLayout::of(model, plan);
        let p = plan.pp.max(1);
        (0..p)
            .filter(|&stage| layout.stage_mix_with_mtp(model, p, stage).0 == max_layers)
            .filter_map(|stage| layout.stage_bf16(model, keep, p, stage))
            .map(|b| b.layers)
            .max()
            .unwrap_or(0)
    };
    let quantized = if max_layers == 0 {
        0.0
    } else {
        f64::from(max_layers.saturating_sub(bf16_layers)) / f64::from(max_layers)
    };
    // The layers' weights one GPU of that stage holds: (non-expert, routed experts).
    let (dense_layers, expert_layers) =
        super::memory::max_stage_layer_params(model, training, plan);
    let share = |layer_params: f64, group_params: f64| {
        if group_params > 0.0 {
            (quantized * layer_params / group_params).min(1.0)
        } else {
            0.0
        }
    };
    GatherBytes {
        dense: bf16 - share(dense_layers, params.total - params.expert),
        expert: bf16 - share(expert_layers, params.expert),
    }
}

/// Whether ZeRO-3 gathers the weights once more for full recompute's forward, beside the gather
/// before the backward. DeepSpeed's ZeRO-3 releases and re-fetches them around the recompute (its
/// partitioned-parameter coordinator treats the recomputed forward as another forward); FSDP2 does
/// not: its pre-forward hook returns at once in the backward, "the pre-backward hook is responsible
/// for the unshard" (torch/distributed/fsdp/_fully_shard/_fsdp_state.py `_pre_forward`, with
/// `_post_forward` skipping the reshard likewise), so the recomputed forward runs on the weights the
/// pre-backward hook gathered. Megatron-FSDP gathers once for the two as well: the recomputed
/// forward runs in the `PRE_BACKWARD` state, gathers the layer's weights and releases them only
/// lazily after it ("Delay parameter resharding because this is currently running inside the
/// activation recomputation forward. The corresponding backward pass may still need these
/// parameters, and delaying avoids an unnecessary all-gather", megatron_fsdp.py `_post_forward`),
/// and the backward's gather skips every bucket not `EMPTY` (param_and_grad_buffer.py
/// `all_gather_params`) — unless the backward reads another copy: MXFP8 weights gathered
/// quantized have a `transpose_weight_buffer` of column-wise data the backward gathers on its own
/// (`get_bucket_key(bucket_id, bwd)`; `fp8_need_transpose_data` is true for `MXFP8Tensor` only),
/// so there the recompute's row-wise gather is one more (Megatron-LM d98e8a64).
pub fn zero3_regathers_for_recompute(training: &Training, plan: &ParallelPlan) -> bool {
    use crate::training::TrainingFramework;
    plan.recompute == Recompute::Full
        && match training.framework {
            TrainingFramework::Torchtitan => false,
            TrainingFramework::MegatronCore => {
                plan.precision == crate::plan::Precision::Mxfp8
                    && fp8_parameter_gather(training, plan)
                    && gathers_quantized_weights(plan)
            }
            _ => true,
        }
}

/// Gradient bucket Megatron-Core's DDP reduces at once: max(40M, 1M·dp) parameters
/// (megatron/core/distributed/distributed_data_parallel.py, `bucket_size`). Assumption: taken for
/// every framework's exposed last bucket (DeepSpeed's default `reduce_bucket_size` is 5e8 elements,
/// PyTorch DDP's 25 MiB, FSDP reduces per wrapped block); the last bucket is a small share of a
/// step's gradient traffic in each.
pub fn grad_bucket_params(dp: u32) -> f64 {
    40e6_f64.max(1e6 * f64::from(dp))
}

/// How many times per step sharded data parallelism (ZeRO >= 1) reduce-scatters the gradients and
/// gathers the parameters, each a whole stage's worth: the counts behind [`dp_traffic`]'s bytes,
/// and behind the copies sharded DP makes around each (`compute::sharded_dp_copy_bytes_per_param`).
/// One rule for both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardedCollectives {
    /// Gradient reduce-scatters.
    pub reduce_scatters: f64,
    /// Parameter gathers before (or for) a forward pass, and the distributed optimizer's gather
    /// of the updated parameters.
    pub forward_gathers: f64,
    /// Parameter gathers before a backward pass (ZeRO-3 resharded after the forward; once more
    /// for the recompute forward where the framework re-fetches).
    pub backward_gathers: f64,
}

/// [`ShardedCollectives`] of the plan (zero for ZeRO-0, which all-reduces instead). ZeRO-1 reduces
/// and gathers once per step; ZeRO-2 reduce-scatters every micro-batch and gathers once; ZeRO-3
/// gathers before every micro-batch's forward and (unless the gathered weights are kept, FSDP2
/// `reshard_after_forward=False`) its backward, and reduce-scatters every micro-batch. Under
/// PyTorch's pipelining FSDP syncs once per schedule (`fsdp_syncs_per_step`), gathering once
/// there too unless ZeRO-3 reshards after each forward.
pub fn sharded_collectives(training: &Training, plan: &ParallelPlan) -> ShardedCollectives {
    let m = f64::from(plan.num_microbatches);
    let (reduce_scatters, forward_gathers, backward_gathers) = match plan.zero {
        0 => (0.0, 0.0, 0.0),
        2 | 3 if reduces_after_pipeline_schedule(training, plan) => {
            let syncs = f64::from(fsdp_syncs_per_step(training, plan));
            let gathers_once = plan.zero == 2 || !plan.reshard_after_forward;
            (syncs, if gathers_once { syncs } else { m }, 0.0)
        }
        1 => (1.0, 1.0, 0.0),
        2 => (m, 1.0, 0.0),
        _ => {
            let backward_gathers = if !plan.reshard_after_forward {
                0.0
            } else if zero3_regathers_for_recompute(training, plan) {
                2.0
            } else {
                1.0
            };
            (m, m, m * backward_gathers)
        }
    };
    ShardedCollectives {
        reduce_scatters,
        forward_gathers,
        backward_gathers,
    }
}

/// Bytes a parameter's gradient counts for in the DP reduction's collective (`dp_traffic` and the
/// ledger's DP rows: an all-reduce at ZeRO-0, a reduce-scatter above): `Training::grad_dtype`'s,
/// except under DeepSpeed-Ulysses with DeepSpeed's `BF16_Optimizer` at ZeRO-1. That optimizer
/// all-reduces its buffer (`buffered_allreduce_fallback` → `allreduce_bucket`, which casts each
/// bucket to `communication_data_type`, engine.py at edaa7221; `bf16_optimizer`), and with a
/// sequence-parallel size above 1 the engine sets `communication_data_type` to
/// `seq_parallel_communication_data_type` (`_configure_distributed_model`), "fp32" by default
/// (runtime/constants.py `SEQ_PARALLEL_COMMUNICATION_DATA_TYPE_DEFAULT`) and the gradient dtype,
/// fp32 there, as `--emit deepspeed` writes it: an fp32 all-reduce, 2 · 4 · (d − 1)/d bytes a
/// parameter, the wire of an 8-byte reduce-scatter — twice the 4-byte one whose wire equals the
/// bf16 all-reduce it runs without Ulysses.
pub fn dp_reduce_bytes_per_param(training: &Training, plan: &ParallelPlan) -> f64 {
    let grad = training.grad_dtype.bytes();
    let ulysses_fp32_all_reduce = training.framework
        == crate::training::TrainingFramework::Deepspeed
        && plan.cp > 1
        && plan.zero == 1
        && super::bf16_optimizer::accumulates_in(training, plan).is_some();
    if ulysses_fp32_all_reduce {
        2.0 * grad
    } else {
        grad
    }
}

/// DP traffic (Rajbhandari et al. 2020 §7) over the `ranks` of the DP×CP group: plain DP
/// all-reduces gradients (2Ψ·(d−1)/d); ZeRO-1/2 reduce-scatter gradients and all-gather updated bf16
/// parameters (same volume); ZeRO-3 also all-gathers parameters before each forward and backward (3
/// transfers in all), once per micro-batch, plus once more for the recompute forward under full
/// recompute — or only before the forward when the gathered parameters are kept until the backward
/// (FSDP2 `reshard_after_forward=False`); the backward-side gathers share the gradient reduction's
/// backward window, the forward gather hides behind the forward.
///
/// With several copies of the sharded states (hybrid sharding, `ParallelPlan::dp_replicas`) the
/// `ranks` are one copy's: the reduce-scatters and gathers stay among them, and each reduction is
/// followed by an all-reduce of the reduced shard (1/ranks of the gradients) across the
/// `replicas` copies on `replica_link`, in the same overlap window (Megatron-Core's
/// param_and_grad_buffer.py runs it on its communication stream after the reduce-scatter;
/// Megatron-Bridge's performance guide: "gradient ReduceScatters occur within the distributed
/// domain, followed by AllReduce in the non-distributed domain. Parameter AllGathers are
/// performed only within the distributed domain").
#[allow(clippy::too_many_arguments)]
pub fn dp_traffic(
    training: &Training,
    plan: &ParallelPlan,
    params_per_gpu: f64,
    ranks: u32,
    link: LinkSpeed,
    replicas: u32,
    replica_link: LinkSpeed,
    gather_bytes_per_param: f64,
) -> DpTraffic {
    let d = ranks;
    let replicas = if plan.zero == 0 { 1 } else { replicas.max(1) };
    if (d <= 1 && replicas <= 1) || params_per_gpu <= 0.0 {
        return DpTraffic {
            wire_bytes: 0.0,
            reduce_per_overlap_window_s: 0.0,
            overlap_windows: 0.0,
            forward_gather_per_mb_s: 0.0,
            step_gather_s: 0.0,
            grad_wire_bytes: 0.0,
            grad_total_s: 0.0,
            last_bucket_s: 0.0,
            total_s: 0.0,
        };
    }
    let grad_bytes = dp_reduce_bytes_per_param(training, plan);
    let grads = params_per_gpu * grad_bytes;
    let weights = params_per_gpu * gather_bytes_per_param;
    let m = f64::from(plan.num_microbatches);
    let rs = Collective::ReduceScatter;
    let ag = Collective::AllGather;
    // Megatron-LM sizes its buckets by the whole DP×CP group, copies of the sharded states or not
    // (megatron/training/training.py `resolve_ddp_bucket_size`: max(40M, 1M·dp_cp)), while each
    // bucket is reduce-scattered within one copy.
    let bucket = grad_bucket_params(d.max(1) * replicas).min(params_per_gpu) * grad_bytes;
    let counts = sharded_collectives(training, plan);
    let after_schedule = reduces_after_pipeline_schedule(training, plan);
    // The all-reduce of each reduced shard across the copies (none with one copy).
    let ar = Collective::AllReduce;
    let replica_wire = |tensor: f64| ar.wire_factor(replicas) * tensor / f64::from(d.max(1));
    let replica_s = |tensor: f64| ar.time(tensor / f64::from(d.max(1)), replicas, replica_link);
    // DeepSpeed's `BF16_Optimizer` at ZeRO-0 all-reduces the gradients and, having stepped its
    // shard, gathers the bf16 parameters once a step (`bf16_optimizer::shards_states_at_zero0`).
    let own_zero1 = super::bf16_optimizer::shards_states_at_zero0(training, plan) && d > 1;
    let (grad_wire, grad_s, windows, gather_wire) = if plan.zero == 0 {
        let gather_wire = if own_zero1 {
            ag.wire_factor(d) * weights
        } else {
            0.0
        };
        (
            ar.wire_factor(d) * grads,
            ar.time(grads, d, link),
            1.0,
            gather_wire,
        )
    } else {
        let gather_wire = if d > 1 {
            rs.wire_factor(d) * weights * (counts.forward_gathers + counts.backward_gathers)
        } else {
            0.0
        };
        (
            (rs.wire_factor(d) * grads + replica_wire(grads)) * counts.reduce_scatters,
            rs.time(grads, d, link) + replica_s(grads),
            counts.reduce_scatters,
            gather_wire,
        )
    };
    // Where each gather's time goes: the backward-side gathers share each reduction's backward
    // window; forward gathers made every micro-batch hide behind its forward; the rest happen
    // once (or once per pipeline schedule) per step.
    let backward_gathers_s = if counts.backward_gathers > 0.0 {
        counts.backward_gathers / windows * ag.time(weights, d, link)
    } else {
        0.0
    };
    // Under PyTorch's pipelining a ZeRO-3 that keeps its gathered weights gathers once per schedule.
    let gathers_every_micro_batch =
        plan.zero == 3 && (plan.reshard_after_forward || !after_schedule);
    let forward_gather_per_mb_s = if gathers_every_micro_batch {
        ag.time(weights, d, link)
    } else {
        0.0
    };
    let step_gather_s = if own_zero1 {
        ag.time(weights, d, link)
    } else if plan.zero == 0 || gathers_every_micro_batch {
        0.0
    } else {
        counts.forward_gathers * ag.time(weights, d, link)
    };
    // PyTorch pipelining's reduce-scatters after each schedule are exposed whole; elsewhere only
    // the last bucket of the overlapped reduction is.
    let last_bucket_s = if plan.zero == 0 {
        Collective::AllReduce.time(bucket, d, link)
    } else if after_schedule {
        counts.reduce_scatters * (rs.time(grads, d, link) + replica_s(grads))
    } else {
        rs.time(bucket, d, link) + replica_s(bucket)
    };
    DpTraffic {
        wire_bytes: grad_wire + gather_wire,
        reduce_per_overlap_window_s: grad_s + backward_gathers_s,
        overlap_windows: windows,
        forward_gather_per_mb_s,
        step_gather_s,
        grad_wire_bytes: grad_wire,
        grad_total_s: grad_s * windows,
        last_bucket_s,
        total_s: (grad_s + backward_gathers_s) * windows
            + m * forward_gather_per_mb_s
            + step_gather_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::BytesPerSec;

    /// A stage boundary carries b·s·h/t with sequence parallelism or the 2021 Megatron-LM and
    /// DeepSpeed scatter; Megatron-Core and torchtitan without sequence parallelism send b·s·h.
    #[test]
    fn pipeline_messages_split_over_tp_only_where_something_splits_them() {
        use crate::training::{AttentionKernel, TrainingFramework};
        let model = crate::specs::load_model("llama3-70b").unwrap();
        let cluster = crate::cluster::Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 2,
            gpus_per_node: 8,
        };
        let full = 8192.0 * 8192.0 * ACTIVATION_BYTES;
        for (framework, sp, want) in [
            (TrainingFramework::MegatronCore, false, full),
            (TrainingFramework::MegatronCore, true, full / 8.0),
            (TrainingFramework::Torchtitan, false, full),
            (TrainingFramework::MegatronLm2021, false, full / 8.0),
            (TrainingFramework::Deepspeed, false, full / 8.0),
        ] {
            let training = Training::with_framework(framework, 8192, 16, AttentionKernel::Flash);
            let request = crate::plan::PlanRequest {
                tp: 8,
                pp: 2,
                dp: 1,
                micro_batch: 1,
                sequence_parallel: sp,
                ..crate::plan::PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            assert_eq!(
                pp_message_bytes(&model, &training, &plan),
                want,
                "{framework:?} sp {sp}"
            );
        }
    }

    /// The collectives each ZeRO stage runs per step, counted by hand from the frameworks' rules:
    /// with 4 micro-batches ZeRO-1 reduces and gathers once; ZeRO-2 reduce-scatters every
    /// micro-batch and gathers once; ZeRO-3 gathers before every forward and backward (and again
    /// for the recompute forward where the framework re-fetches, not under FSDP2), or before the
    /// forward only when the gathered weights are kept; PyTorch's pipelining syncs once per
    /// schedule, gathering every micro-batch only when resharding after each forward.
    #[test]
    fn sharded_collectives_count_each_zero_stages_gathers_and_reductions() {
        use crate::training::{AttentionKernel, TrainingFramework};
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = crate::cluster::Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let count = |framework, pp: u32, zero: u8, reshard: bool, recompute: Recompute| {
            let training =
                Training::with_framework(framework, 4096, 8 * 4 / pp, AttentionKernel::Flash);
            let request = crate::plan::PlanRequest {
                tp: 1,
                pp,
                dp: 8 / pp,
                micro_batch: 1,
                ..crate::plan::PlanRequest::default()
            };
            let mut plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            assert_eq!(plan.num_microbatches, 4);
            plan.zero = zero;
            plan.reshard_after_forward = reshard;
            plan.recompute = recompute;
            let c = sharded_collectives(&training, &plan);
            (c.reduce_scatters, c.forward_gathers, c.backward_gathers)
        };
        let (mcore, titan) = (
            TrainingFramework::MegatronCore,
            TrainingFramework::Torchtitan,
        );
        let none = Recompute::None;
        assert_eq!(count(mcore, 1, 0, true, none), (0.0, 0.0, 0.0));
        assert_eq!(count(mcore, 1, 1, true, none), (1.0, 1.0, 0.0));
        assert_eq!(count(mcore, 1, 2, true, none), (4.0, 1.0, 0.0));
        assert_eq!(count(mcore, 1, 3, true, none), (4.0, 4.0, 4.0));
        // Megatron-FSDP's recomputed forward gathers for the backward too (bf16: no transpose
        // buffer); DeepSpeed's ZeRO-3 re-fetches around the recompute.
        assert_eq!(count(mcore, 1, 3, true, Recompute::Full), (4.0, 4.0, 4.0));
        assert_eq!(
            count(TrainingFramework::Deepspeed, 1, 3, true, Recompute::Full),
            (4.0, 4.0, 8.0)
        );
        assert_eq!(count(titan, 1, 3, true, Recompute::Full), (4.0, 4.0, 4.0));
        assert_eq!(count(titan, 1, 3, false, none), (4.0, 4.0, 0.0));
        assert_eq!(count(titan, 2, 3, true, none), (1.0, 4.0, 0.0));
        assert_eq!(count(titan, 2, 3, false, none), (1.0, 1.0, 0.0));
        assert_eq!(count(titan, 2, 2, true, none), (1.0, 1.0, 0.0));
    }

    #[test]
    fn nccl_tests_bus_bandwidth_factors() {
        // nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n, ReduceScatter and AllGather (n-1)/n.
        assert_eq!(Collective::AllReduce.wire_factor(8), 2.0 * 7.0 / 8.0);
        assert_eq!(Collective::AllGather.wire_factor(8), 7.0 / 8.0);
        assert_eq!(Collective::ReduceScatter.wire_factor(4), 3.0 / 4.0);
        assert_eq!(Collective::SendRecv.wire_factor(2), 1.0);
        assert_eq!(Collective::AllReduce.wire_factor(1), 0.0);
    }

    #[test]
    fn collective_time_is_alpha_beta() {
        let link = LinkSpeed {
            bandwidth: BytesPerSec(100e9),
            latency: Seconds(1e-6),
        };
        let t = Collective::AllReduce.time(1e9, 8, link);
        assert!((t - (14e-6 + 1.75e9 / 100e9)).abs() < 1e-12);
        assert_eq!(Collective::AllReduce.time(1e9, 1, link), 0.0);
    }
}
