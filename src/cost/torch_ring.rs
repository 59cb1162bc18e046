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

/// Forward HBM bytes per output element per ring step after the first, on the rank whose every step
/// merges a full block (the last; the ring runs at its pace). `_SDPAMerger.step` casts the block
/// output to fp32 (read 2, write 4) and `_merge_one` runs three eager element-wise ops over fp32
/// tensors: `out - block_out` (read 4 + 4, write 4), `sigmoid(block_lse - lse) * that` (read 4,
/// write 4; the lse terms are per row), `out - that` (read 4 + 4, write 4): 6 + 12 + 8 + 12 = 38;
/// plus the `torch.cat` of K and V that every step makes (bf16, read 2 and write 2 per K and per V
/// element, as many as output elements each): 8. Total 46.
pub const MERGE_FORWARD_BYTES_PER_STEP: f64 = 46.0;
/// Forward bytes per output element once per layer: the first step's output cast to fp32 (read 2,
/// write 4) and the merged result cast back to bf16 (read 4, write 2).
pub const MERGE_FORWARD_BYTES_FIXED: f64 = 12.0;
/// Backward HBM bytes per output element per ring step (all cp of them): dQ added into its fp32
/// accumulator (read 2 + 4, write 4 = 10), dK and dV each added into theirs (10 each) and
/// concatenated in fp32 for the send (read 4, write 4 each): 10 + 2 x (10 + 8) = 46; plus the bf16
/// `torch.cat` of K and V for the next step (8, as in forward). Total 54.
pub const MERGE_BACKWARD_BYTES_PER_STEP: f64 = 54.0;
/// Backward bytes per output element once per layer: dQ, dK and dV cast back to bf16 (read 4,
/// write 2, three times).
pub const MERGE_BACKWARD_BYTES_FIXED: f64 = 18.0;

/// One rank's K and V after `repeat_kv`, for every local query head, in bf16.
pub fn repeated_kv_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    f64::from(plan.micro_batch)
        * f64::from(training.seq_len / plan.cp)
        * (model.q_width() + model.attention_out_width())
        / f64::from(plan.tp)
        * ACTIVATION_BYTES
}

/// Elements of one rank's attention output per layer per micro-batch.
pub fn output_elements(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    f64::from(plan.micro_batch)
        * f64::from(training.seq_len / plan.cp)
        * model.attention_out_width()
        / f64::from(plan.tp)
}

/// The fp32 dK/dV accumulators one hop carries: twice the bf16 K/V bytes.
pub fn dkv_hop_bytes(kv_bytes: f64) -> f64 {
    2.0 * kv_bytes
}

/// Merge and accumulate time per layer per micro-batch at the achieved HBM bandwidth: (forward,
/// backward).
pub fn merge_times_s(output_elements: f64, cp: u32, hbm_bytes_per_s: f64) -> (f64, f64) {
    let cp = f64::from(cp);
    let forward =
        (MERGE_FORWARD_BYTES_PER_STEP * (cp - 1.0) + MERGE_FORWARD_BYTES_FIXED) * output_elements;
    let backward =
        (MERGE_BACKWARD_BYTES_PER_STEP * cp + MERGE_BACKWARD_BYTES_FIXED) * output_elements;
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
        // Llama 3 8B at CP 4, 128K tokens: 32,768 tokens x 4,096 output columns on a rank.
        let elements = 32768.0 * 4096.0;
        let (f2, b2) = merge_times_s(elements, 2, 2.0e12);
        let (f4, b4) = merge_times_s(elements, 4, 2.0e12);
        assert!((f2 - (46.0 + 12.0) * elements / 2.0e12).abs() < 1e-12);
        assert!((b4 - (54.0 * 4.0 + 18.0) * elements / 2.0e12).abs() < 1e-12);
        assert!(f4 > f2 && b4 > b2);
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
