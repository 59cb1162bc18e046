//! Context parallelism as Transformer Engine runs it under Megatron-Core
//! (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`,
//! `attn_forward_func_with_cp`): the communication of one layer's attention per micro-batch, which
//! part of it hides, and the copies around it. PyTorch's own ring, as torchtitan runs it, is
//! `torch_ring`.
//!
//! - `p2p` (`AttnFuncWithCPAndKVP2P`, Megatron-Core's default): cp − 1 ring steps, each passing this
//!   rank's K/V chunk (the K/V heads, GQA's fewer) to the next rank under the attention blocks of
//!   the step it feeds; the backward passes K/V and the accumulated dK/dV (twice the bytes) under
//!   the backward's blocks.
//! - `all_gather` (`AttnFuncWithCPAndKVAllGather`): each layer all-gathers every rank's K and V
//!   (`gather_along_first_dim`, synchronous) and puts the chunks back in sequence order
//!   (`torch.index_select`), runs the rank's two query chunks against their causal K/V prefixes,
//!   and in backward gathers K and V again, accumulates dK/dV at full length and reduce-scatters
//!   them to their owners: all of it on the critical path.
//! - `a2a` (`AttnFuncWithCPAndQKVOA2A`, `flash_attn_a2a_communicate`): Q, K and V each go through an
//!   all-to-all that trades this rank's sequence shard of every head for the whole sequence of
//!   heads/cp heads (a contiguous head-split copy before, a chunk reorder after), the attention runs
//!   on the whole sequence, and the output trades back; backward mirrors it (dO in, dQ/dK/dV out).
//!   The attention waits for the inputs and the output projection for the output, so nothing hides.
//!   DeepSpeed-Ulysses (`sequence_parallel_size`, deepspeed/runtime/sequence_parallel/ulysses_sp.py)
//!   is the same exchange, with K/V heads repeated up to cp where there are fewer
//!   (`kv_head_replication`).

use super::comm::{ACTIVATION_BYTES, Collective, alltoall_s, cp_kv_chunk_bytes};
use super::{PassComm, exposed_under};
use crate::cluster::LinkSpeed;
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, CpExchange, RecomputeModule, SelectiveRecompute, Training};

/// One layer's forward and backward communication under the point-to-point K/V ring, per
/// micro-batch: `chunk` is one rank's K and V (`comm::cp_kv_chunk_bytes`), `step_attention_*_s`
/// one ring step's attention (the layer's over cp); full recompute (`recompute_share` of the
/// layers) repeats the forward ring.
pub(crate) fn kv_ring_pass_comm(
    chunk: f64,
    cp: u32,
    speed: LinkSpeed,
    step_attention_forward_s: f64,
    step_attention_backward_s: f64,
    recompute_share: f64,
) -> PassComm {
    let steps = f64::from(cp - 1);
    let send = Collective::SendRecv.time(chunk, 2, speed);
    let forward_exposed = steps * exposed_under(send, step_attention_forward_s);
    let backward_exposed = steps * exposed_under(2.0 * send, step_attention_backward_s);
    PassComm {
        forward_s: steps * send,
        backward_s: steps * (2.0 + recompute_share) * send,
        forward_exposed_s: forward_exposed,
        backward_exposed_s: backward_exposed + recompute_share * forward_exposed,
        wire_bytes: steps * (3.0 + recompute_share) * chunk,
    }
}

/// HBM bytes per gathered K/V byte of the all-gather exchange's forward copies: the gathered
/// chunks reordered into sequence order (`torch.index_select`: read + write).
pub const ALL_GATHER_FORWARD_COPY_BYTES_PER_GATHERED_BYTE: f64 = 2.0;
/// Backward: the gathered K/V reordered again (2), dK and dV zero-filled at full length (1), the
/// two query chunks' dK/dV added into their prefixes (read both, write: 3, over about the full
/// length), and dK/dV reordered before the reduce-scatter (2).
pub const ALL_GATHER_BACKWARD_COPY_BYTES_PER_GATHERED_BYTE: f64 = 8.0;
/// HBM bytes per byte of a tensor the all-to-all exchange carries: the head-split
/// `movedim(..).contiguous()` before the all-to-all (read + write) and the sequence-chunk reorder
/// after it (read + write). DeepSpeed-Ulysses makes as many: `rearrange(..).contiguous()` of Q,
/// K and V into rank order before the all-to-all and the attention layout after it; the output
/// `reshape(..).contiguous()` before and `rearrange` + `reshape(..).contiguous()` after
/// (`UlyssesSPAttentionHF._combine_local_sequences`, `_partition_global_sequence`).
pub const ALL_TO_ALL_COPY_BYTES_PER_TENSOR_BYTE: f64 = 4.0;

/// One layer's communication per micro-batch under the K/V all-gather: `chunk` is one rank's K and V
/// (`comm::cp_kv_chunk_bytes`), gathered from all cp ranks in forward, again in backward (beside
/// the reduce-scatter of dK/dV at full length), and again in full recompute's forward.
pub(crate) fn kv_all_gather_pass_comm(
    chunk: f64,
    cp: u32,
    speed: LinkSpeed,
    recompute_share: f64,
) -> PassComm {
    let gathered = f64::from(cp) * chunk;
    let gather = Collective::AllGather.time(gathered, cp, speed);
    let scatter = Collective::ReduceScatter.time(gathered, cp, speed);
    let forward_s = gather;
    let backward_s = (1.0 + recompute_share) * gather + scatter;
    let wire = Collective::AllGather.wire_factor(cp) * gathered;
    PassComm {
        forward_s,
        backward_s,
        forward_exposed_s: forward_s,
        backward_exposed_s: backward_s,
        wire_bytes: (3.0 + recompute_share) * wire,
    }
}

/// How many copies of each K/V head the all-to-all exchange sends: DeepSpeed-Ulysses repeats a TP
/// rank's K/V heads up to cp where there are fewer (`kv_replication_factor = sp // kv_heads`,
/// `repeat_interleave` before the all-to-all, deepspeed/runtime/sequence_parallel/ulysses_sp.py),
/// so every rank receives one; 1 otherwise (Transformer Engine's a2a needs the heads to split).
pub fn kv_head_replication(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    let (_, kv_heads) = heads_per_tp_rank(model, plan.tp);
    if training.framework.replicates_kv_heads_over_cp() && plan.cp > kv_heads {
        f64::from(plan.cp / kv_heads)
    } else {
        1.0
    }
}

/// One rank's tensors the all-to-all exchange carries per layer per micro-batch, in bytes: (Q, K
/// and V together; the attention output). K and V are `comm::cp_kv_chunk_bytes`, times
/// `kv_head_replication`; Q and the output are the rank's s/cp tokens of its heads.
pub fn all_to_all_tensor_bytes(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> (f64, f64) {
    let tokens = f64::from(plan.micro_batch) * f64::from(training.seq_len / plan.cp);
    let t = f64::from(plan.tp);
    let query = tokens * model.q_width() / t * ACTIVATION_BYTES;
    let output = tokens * model.attention_out_width() / t * ACTIVATION_BYTES;
    let kv = kv_head_replication(model, training, plan) * cp_kv_chunk_bytes(model, training, plan);
    (query + kv, output)
}

/// One all-to-all of a rank's `tensor_bytes` among cp ranks: it keeps 1/cp and sends the rest.
fn all_to_all_s(tensor_bytes: f64, cp: u32, speed: LinkSpeed) -> f64 {
    let n = f64::from(cp);
    alltoall_s((n - 1.0) / n * tensor_bytes, cp, speed)
}

/// One layer's communication per micro-batch under the all-to-all exchange: Q/K/V in and the
/// output back in forward (again in full recompute), dO in and dQ/dK/dV back in backward.
pub(crate) fn head_all_to_all_pass_comm(
    qkv_bytes: f64,
    output_bytes: f64,
    cp: u32,
    speed: LinkSpeed,
    recompute_share: f64,
) -> PassComm {
    tensor_all_to_all_pass_comm(&[qkv_bytes, output_bytes], cp, speed, recompute_share)
}

/// A layer's synchronous all-to-alls per micro-batch, one per tensor of `tensor_bytes` (a rank's
/// tensor each, of which it keeps 1/cp): each once in forward, its gradient's reverse all-to-all
/// in backward (`_AllToAll.backward`, tensor_parallel/mappings.py), the forward's again on
/// `recompute_share`; nothing hides them. Transformer Engine's a2a attention (Q/K/V and the
/// output) and the Mamba mixer's exchange (`hybrid::MambaExchange`, six tensors) both.
pub(crate) fn tensor_all_to_all_pass_comm(
    tensor_bytes: &[f64],
    cp: u32,
    speed: LinkSpeed,
    recompute_share: f64,
) -> PassComm {
    let one_pass = tensor_bytes
        .iter()
        .map(|&bytes| all_to_all_s(bytes, cp, speed))
        .fold(0.0, |sum, s| sum + s);
    let tensors = tensor_bytes.iter().fold(0.0, |sum, bytes| sum + bytes);
    let n = f64::from(cp);
    PassComm {
        forward_s: one_pass,
        backward_s: (1.0 + recompute_share) * one_pass,
        forward_exposed_s: one_pass,
        backward_exposed_s: (1.0 + recompute_share) * one_pass,
        wire_bytes: (2.0 + recompute_share) * (n - 1.0) / n * tensors,
    }
}

/// Time of the copies around the exchange per layer per micro-batch at the achieved HBM bandwidth:
/// (forward, backward). Zero for the point-to-point ring (Transformer Engine receives into its
/// buffers and attends in place) and for PyTorch's (`torch_ring::merge_times_s`).
pub fn copy_times_s(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    hbm_bytes_per_s: f64,
) -> (f64, f64) {
    if plan.cp <= 1 {
        return (0.0, 0.0);
    }
    match training.cp_exchange {
        CpExchange::KvAllGather => {
            let gathered = f64::from(plan.cp) * cp_kv_chunk_bytes(model, training, plan);
            (
                ALL_GATHER_FORWARD_COPY_BYTES_PER_GATHERED_BYTE * gathered / hbm_bytes_per_s,
                ALL_GATHER_BACKWARD_COPY_BYTES_PER_GATHERED_BYTE * gathered / hbm_bytes_per_s,
            )
        }
        CpExchange::HeadAllToAll => {
            let (qkv, output) = all_to_all_tensor_bytes(model, training, plan);
            // Ulysses's K/V repeat: read the K/V, write r copies (forward); the backward sums the
            // r gradients back (read r, write one).
            let replication = kv_head_replication(model, training, plan);
            let repeat = if replication > 1.0 {
                (1.0 + replication) * cp_kv_chunk_bytes(model, training, plan)
            } else {
                0.0
            };
            let copies = ALL_TO_ALL_COPY_BYTES_PER_TENSOR_BYTE * (qkv + output) + repeat;
            (copies / hbm_bytes_per_s, copies / hbm_bytes_per_s)
        }
        CpExchange::KvRing | CpExchange::TorchAllGather => (0.0, 0.0),
    }
}

/// Bytes the exchange holds on one rank while a layer's attention runs, on top of what the layers
/// keep for the backward (transient, freed when the layer's attention ends):
/// - PyTorch's ring: every rank's repeated K/V and the fp32 accumulators
///   (`torch_ring::backward_working_bytes`);
/// - the K/V all-gather: every rank's K/V, and dK/dV at full length in backward (twice the gathered
///   K/V);
/// - the all-to-all: the head-split Q, K and V beside the sequence-split ones they came from;
/// - the point-to-point ring: two chunks of the rank's own K/V size, left out.
///
/// A hybrid stack's Mamba mixers hold their exchanged z, x, B, C and dt beside `in_proj`'s output
/// they came from (`hybrid::MambaExchange`) while the conv and scan run; the larger of the two
/// exchanges' is what the layers' peak holds.
pub fn working_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    if plan.cp <= 1 {
        return 0.0;
    }
    let mamba = super::hybrid::mamba_exchange(model, training.seq_len, plan).before_scan_bytes();
    let attention = match training.cp_exchange {
        CpExchange::TorchAllGather => {
            super::torch_ring::backward_working_bytes(model, training, plan)
        }
        CpExchange::KvAllGather => {
            2.0 * f64::from(plan.cp) * cp_kv_chunk_bytes(model, training, plan)
        }
        CpExchange::HeadAllToAll => all_to_all_tensor_bytes(model, training, plan).0,
        CpExchange::KvRing => 0.0,
    };
    attention.max(mamba)
}

/// Query and K/V heads one TP rank holds (K/V heads replicated to one per rank where there are fewer
/// than TP ranks, as Megatron-Core does): what the all-to-all exchange splits over the CP ranks.
pub fn heads_per_tp_rank(model: &Model, tp: u32) -> (u32, u32) {
    let kv_heads = if model.mla.is_some() {
        model.heads
    } else {
        model.kv_heads
    };
    (model.heads / tp.max(1), (kv_heads / tp.max(1)).max(1))
}

/// How many times per micro-batch one layer's exchange runs again before its backward: full
/// recompute's share of the layers, or once per layer where selective recompute re-runs the fused
/// attention. Transformer Engine's `checkpoint_core_attention` checkpoints the whole fused
/// attention call, and under context parallelism that call is `attn_forward_func_with_cp`, the
/// exchange inside it (`DotProductAttention.forward` → `FusedAttention`/`FlashAttention` →
/// `attn_forward_func_with_cp`), so Megatron-Core's `core_attn` recompute repeats the forward
/// exchange as full recompute does. Megatron-LM 2021's selective recompute and torchtitan's
/// per-op SAC keep the attention output and run no exchange again.
pub fn exchange_repeats(training: &Training, plan: &ParallelPlan) -> f64 {
    let core_attention_reruns = plan.recompute == Recompute::Selective
        && training.attention == AttentionKernel::Flash
        && match training.selective_recompute() {
            SelectiveRecompute::CheckpointedAttention => true,
            SelectiveRecompute::Modules(modules) => modules.contains(RecomputeModule::CoreAttn),
            SelectiveRecompute::AttentionCore | SelectiveRecompute::AlternateMatmuls => false,
        };
    if core_attention_reruns {
        1.0
    } else {
        plan.recompute_share()
    }
}
