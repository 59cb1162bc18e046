//! Context parallelism as PyTorch 2.6 runs it for torchtitan (`torch.distributed.tensor.
//! experimental.context_parallel`, `_templated_ring_attention` and its backward in
//! `torch/distributed/tensor/experimental/_attention.py` at torch 1963fc8, the build of torchtitan's
//! 2024-12 benchmarks; torchtitan 9dec370 `models/llama/model.py`, `utils.py`,
//! `config_manager.py`). What differs from Transformer Engine's point-to-point ring:
//! - torchtitan repeats K and V to every query head (`repeat_kv`) before SDPA, so the ring carries
//!   K/V as wide as Q (4x Llama 3 8B's K/V heads, 16x per rank for 405B under TP 8);
//! - the default `rotate_method` is all-gather (`_cp_options.rotate_method = ALL_GATHER`, torchtitan
//!   `context_parallel_rotate_method = "allgather"`): every K/V chunk is gathered before the first
//!   (diagonal) step and waited at step 1, so only that step's attention hides it; the backward
//!   gathers again, and passes the dK/dV accumulators around the ring in fp32, one hop per step
//!   (`_AllToAllRotater`), the last hop waited after the loop;
//! - each step's output is merged eagerly in fp32 (`_SDPAMerger` with `convert_to_f32 = True`) and
//!   the backward accumulates dQ, dK and dV in fp32 and concatenates dK/dV before each send: HBM
//!   traffic on the compute stream, counted below per element of the rank's attention output.

use super::comm::{ACTIVATION_BYTES, Collective};
use super::{PassComm, exposed_under};
use crate::cluster::LinkSpeed;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Bytes of an fp32 accumulator element.
const FP32_BYTES: f64 = 4.0;

/// Forward HBM bytes per output element per ring step after the first, on the rank whose every step
/// merges a full block (the last; the ring runs at its pace). `_SDPAMerger.step` casts the block
/// output to fp32 (read 2, write 4) and `_merge_one` runs three eager element-wise ops over fp32
/// tensors: `out - block_out` (read 4 + 4, write 4), `sigmoid(block_lse - lse) * that` (read 4,
/// write 4; the lse terms are per row), `out - that` (read 4 + 4, write 4): 6 + 12 + 8 + 12 = 38.
pub const MERGE_FORWARD_BYTES_PER_OUTPUT: f64 = 38.0;
/// Bytes per K or V element of the bf16 `torch.cat` of K and V that each step but the last makes
/// for the next one (read 2, write 2), in forward and again in backward.
pub const KV_CAT_BYTES_PER_ELEMENT: f64 = 4.0;
/// Forward bytes per output element once per layer: the first step's output cast to fp32 (read 2,
/// write 4) and the merged result cast back to bf16 (read 4, write 2).
pub const MERGE_FORWARD_BYTES_FIXED: f64 = 12.0;
/// Backward bytes per element of an fp32 gradient accumulator per ring step (all cp of them): the
/// step's bf16 gradient added into it (read 2 + 4, write 4).
pub const ACCUMULATE_BYTES_PER_ELEMENT: f64 = 10.0;
/// Backward bytes per dK or dV element per ring step: their fp32 accumulators concatenated for the
/// hop to the next rank (read 4, write 4).
pub const DKV_CAT_BYTES_PER_ELEMENT: f64 = 8.0;
/// Backward bytes per gradient element once per layer: dQ, dK and dV cast back to bf16 (read 4,
/// write 2).
pub const GRAD_CAST_BYTES_PER_ELEMENT: f64 = 6.0;

/// One rank's K and V after `repeat_kv`, for every local query head, in bf16.
pub fn repeated_kv_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    f64::from(plan.micro_batch)
        * f64::from(training.seq_len / plan.cp)
        * (model.q_width() + model.attention_out_width())
        / f64::from(plan.tp)
        * ACTIVATION_BYTES
}

/// Elements of one rank's Q (and, repeated, K) and of its attention output (and V) per layer per
/// micro-batch: (query elements, output elements). They differ where the head dimensions of Q·K and
/// V differ (multi-head latent attention).
pub fn elements(model: &Model, training: &Training, plan: &ParallelPlan) -> (f64, f64) {
    let tokens = f64::from(plan.micro_batch) * f64::from(training.seq_len / plan.cp);
    let t = f64::from(plan.tp);
    (
        tokens * model.q_width() / t,
        tokens * model.attention_out_width() / t,
    )
}

/// The fp32 dK/dV accumulators one hop carries: twice the bf16 K/V bytes.
pub fn dkv_hop_bytes(kv_bytes: f64) -> f64 {
    FP32_BYTES / ACTIVATION_BYTES * kv_bytes
}

/// Bytes the ring holds on one rank while one layer's attention backward runs, on top of what the
/// layers keep for the backward: every rank's K/V chunk gathered (the backward's all-gather, bf16,
/// as wide as Q after `repeat_kv`), the fp32 dQ, dK and dV accumulators of the local chunk, and the
/// fp32 dK/dV hop in flight twice (the concatenated buffer sent and the one received,
/// `_AllToAllRotater`). The forward's working set is smaller (the same gathered K/V, one fp32 output
/// accumulator), so this is the ring's peak. Transient: freed when the layer's backward ends.
pub fn backward_working_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    let kv_bytes = repeated_kv_bytes(model, training, plan);
    let (query, output) = elements(model, training, plan);
    let gathered = f64::from(plan.cp) * kv_bytes;
    let accumulators = FP32_BYTES * (2.0 * query + output);
    gathered + accumulators + 2.0 * dkv_hop_bytes(kv_bytes)
}

/// Merge and accumulate time per layer per micro-batch at the achieved HBM bandwidth: (forward,
/// backward). `query` and `output` are [`elements`]: K is query-shaped after `repeat_kv`, V
/// output-shaped.
pub fn merge_times_s(query: f64, output: f64, cp: u32, hbm_bytes_per_s: f64) -> (f64, f64) {
    let (steps, hops) = (f64::from(cp), f64::from(cp - 1));
    let kv_cat = KV_CAT_BYTES_PER_ELEMENT * (query + output);
    let forward = hops * (MERGE_FORWARD_BYTES_PER_OUTPUT * output + kv_cat)
        + MERGE_FORWARD_BYTES_FIXED * output;
    // dQ and dK are query-shaped, dV output-shaped; dK and dV are concatenated for every hop.
    let accumulate = ACCUMULATE_BYTES_PER_ELEMENT * (2.0 * query + output)
        + DKV_CAT_BYTES_PER_ELEMENT * (query + output);
    let backward =
        steps * accumulate + hops * kv_cat + GRAD_CAST_BYTES_PER_ELEMENT * (2.0 * query + output);
    (forward / hbm_bytes_per_s, backward / hbm_bytes_per_s)
}

/// Communication per layer per micro-batch: the K/V all-gather in forward (hidden only under the
/// diagonal step's attention), again in backward, and cp hops of the fp32 dK/dV accumulators, each
/// under one backward step but the last; full recompute repeats the forward's gather.
pub(crate) fn pass_comm(
    kv_bytes: f64,
    cp: u32,
    speed: LinkSpeed,
    step_attention_forward_s: f64,
    step_attention_backward_s: f64,
    recompute_share: f64,
) -> PassComm {
    let steps = f64::from(cp);
    let gather_tensor = steps * kv_bytes;
    let gather = Collective::AllGather.time(gather_tensor, cp, speed);
    let hop = Collective::SendRecv.time(dkv_hop_bytes(kv_bytes), 2, speed);
    let forward_exposed = exposed_under(gather, step_attention_forward_s);
    let backward_exposed = exposed_under(gather, step_attention_backward_s)
        + (steps - 1.0) * exposed_under(hop, step_attention_backward_s)
        + hop;
    let gather_wire = Collective::AllGather.wire_factor(cp) * gather_tensor;
    PassComm {
        forward_s: gather,
        backward_s: (1.0 + recompute_share) * gather + steps * hop,
        forward_exposed_s: forward_exposed,
        backward_exposed_s: backward_exposed + recompute_share * forward_exposed,
        wire_bytes: (2.0 + recompute_share) * gather_wire
            + steps * Collective::SendRecv.wire_factor(2) * dkv_hop_bytes(kv_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::OVERLAP_COMPUTE_PENALTY;

    #[test]
    fn merges_grow_with_the_ring_steps() {
        // Llama 3 8B at CP 4, 128K tokens: 32,768 tokens x 4,096 query and output columns on a
        // rank. Per element: forward 38 + 8 (the K/V cat) per step after the first, 12 once;
        // backward 10 x 3 + 8 x 2 = 46 per step, 8 per step but the last, 18 once.
        let e = 32768.0 * 4096.0;
        let (f2, b2) = merge_times_s(e, e, 2, 2.0e12);
        let (f4, b4) = merge_times_s(e, e, 4, 2.0e12);
        assert!((f2 - (46.0 + 12.0) * e / 2.0e12).abs() < 1e-12);
        assert!((b4 - (46.0 * 4.0 + 8.0 * 3.0 + 18.0) * e / 2.0e12).abs() < 1e-12);
        assert!(f4 > f2 && b4 > b2);
        // Multi-head latent attention: wider Q·K heads (192) than V heads (128) move more.
        let (f_mla, _) = merge_times_s(1.5 * e, e, 2, 2.0e12);
        assert!(f_mla > f2);
    }

    #[test]
    fn the_gather_hides_only_under_the_diagonal_step() {
        let speed = LinkSpeed {
            bandwidth: crate::units::BytesPerSec(50e9),
            latency: crate::units::Seconds(5e-6),
        };
        // 268 MB of K/V per rank at CP 8 over the network: the gather of 7 chunks (37.6 ms) is
        // longer than a 13.8 ms diagonal step, so about 24 ms of it is exposed in forward.
        let c = pass_comm(268e6, 8, speed, 13.8e-3, 40e-3, 1.0);
        let gather = Collective::AllGather.time(8.0 * 268e6, 8, speed);
        assert!((c.forward_s - gather).abs() < 1e-12);
        let exposed = gather - 13.8e-3 + OVERLAP_COMPUTE_PENALTY * 13.8e-3;
        assert!((c.forward_exposed_s - exposed).abs() < 1e-9, "{c:?}");
        // Backward: the gather again, 8 fp32 dK/dV hops, the recomputed forward's gather.
        let hop = Collective::SendRecv.time(2.0 * 268e6, 2, speed);
        assert!((c.backward_s - (2.0 * gather + 8.0 * hop)).abs() < 1e-9);
        assert!(c.backward_exposed_s > exposed + hop);
    }
}
