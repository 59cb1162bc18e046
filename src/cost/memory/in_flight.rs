//! The pipeline peak: how many micro-batches' activations a stage holds at its schedule's peak
//! (Megatron-Core `get_pp_rank_microbatches`, PyTorch `ScheduleInterleaved1F1B`, Narayanan et al.
//! 2021 §2.2.1, Korthikanti et al. 2022 §4.2.3) and the boundary tensors PyTorch's pipelining
//! keeps beside them.

use super::Stage;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Micro-batches' worth of activations a stage holds at the peak of its schedule: the warm-up
/// forwards plus the first steady-state one, each a model chunk of 1/v of the stage's layers.
/// Megatron-Core's `get_pp_rank_microbatches` (schedules.py) warms up 2·(p − rank − 1) +
/// (v − 1)·p chunks when interleaved (`microbatch_group_size_per_vp_stage` defaults to p; PyTorch's
/// `ScheduleInterleaved1F1B._get_warmup_ops` counts the same with m a multiple of p) and p − rank − 1
/// micro-batches otherwise, both at most every chunk of the m micro-batches: min(m, p − rank) for
/// 1F1B (Narayanan et al. 2021 §2.2.1) and, on the first stage, p + (p − 1)/v when interleaved
/// (Korthikanti et al. 2022 §4.2.3's factor 1 + (p − 1)/(p·v) times p), never more than m. m is
/// one pipeline schedule's where the step runs several (`ParallelPlan::schedule_runs`).
pub(super) fn in_flight(model: &Model, training: &Training, plan: &ParallelPlan, rank: u32) -> f64 {
    // The V schedules hold the same on every rank (`v_schedule::peak_chunks_in_flight`: 2p chunks
    // for ZB-V, 2p + 1 for DualPipeV, fewer with fewer micro-batches), each chunk half a stage.
    if let (Some(kind), true) = (training.pp_schedule.v_kind(), plan.pp > 1) {
        let chunks = match kind {
            crate::cost::v_schedule::VKind::ZeroBubbleV => 2 * plan.pp,
            crate::cost::v_schedule::VKind::DualPipeV => 2 * plan.pp + 1,
        };
        let m = plan.microbatches_per_schedule();
        return f64::from(chunks.min(2 * m)) / 2.0;
    }
    let (v, m) = (
        f64::from(plan.vpp),
        f64::from(plan.microbatches_per_schedule()),
    );
    let scheduled = f64::from(looped_chunks_in_flight(plan, rank)) / v;
    // The MoE all-to-all overlap schedules one extra model chunk's forward before the 1F1B
    // stages (Megatron-Core `schedules.py`), and without a pipeline runs the next micro-batch's
    // forward while the current one's activations wait for their backward.
    let overlap_extra = if training.overlap.moe_a2a
        && crate::cost::moe::alltoall_overlap_applies(model, training, plan)
    {
        1.0 / v
    } else {
        0.0
    };
    scheduled + overlap_extra.min((m - scheduled).max(0.0))
}

/// Model chunks rank `rank` of the looped (1F1B, interleaved) schedule holds at its peak: the
/// warm-up forwards, 2·(p − rank − 1) + (v − 1)·p interleaved and p − rank − 1 otherwise, plus the
/// first steady-state one, at most every chunk of the m micro-batches ([`in_flight`]).
fn looped_chunks_in_flight(plan: &ParallelPlan, rank: u32) -> u32 {
    let (p, v) = (plan.pp.max(1), plan.vpp.max(1));
    let behind = p.saturating_sub(rank + 1);
    let warmup = if v > 1 {
        2 * behind + (v - 1) * p
    } else {
        behind
    };
    (warmup + 1).min(plan.microbatches_per_schedule().saturating_mul(v))
}

/// The layers of the chunks a stage holds in flight over as many chunks of its mean size: 1 with
/// equal chunks. With unequal ones (`ParallelPlan::balanced_chunk_layers`) forward k of a rank runs
/// virtual stage (k / p) mod v (Megatron-Core's `get_model_chunk_id` over micro-batch groups of p,
/// schedules.py; PyTorch's `ScheduleInterleaved1F1B` alike), so the heavier chunks, the earliest
/// virtual stages, are the first in flight and the ones past a whole round: 80 layers on pp 4 x
/// vpp 3 hold 4 x 20 + 3 x 7 = 101 layers on the first stage, not 15/3 x 20 = 100.
pub(super) fn in_flight_layer_weight(training: &Training, plan: &ParallelPlan, rank: u32) -> f64 {
    let Some((light, heavier)) = plan
        .balanced_chunk_layers()
        .filter(|_| training.pp_schedule.v_kind().is_none())
    else {
        return 1.0;
    };
    let chunks = looped_chunks_in_flight(plan, rank);
    let layers: u32 = (0..chunks)
        .map(|k| light + u32::from((k / plan.pp) % plan.vpp < heavier))
        .sum();
    let stage = light * plan.vpp + heavier;
    f64::from(layers) * f64::from(plan.vpp) / (f64::from(chunks) * f64::from(stage))
}

/// Boundary tensors PyTorch's pipelining keeps on one stage beyond its layers' activations
/// (`TrainingFramework::keeps_pipeline_buffers_per_microbatch`): the output of every in-flight
/// model chunk that sends one (all but the model's last chunk), a receive buffer per micro-batch
/// for each chunk that receives activations (all but the model's first; an in-flight chunk's is
/// its first layer's saved input, already counted) and one per micro-batch for each chunk that
/// receives gradients (the chunks that send). `in_flight` is the stage's [`in_flight`].
pub(super) fn pipeline_buffer_bytes(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    in_flight: f64,
    stage: Stage,
) -> f64 {
    let v = f64::from(plan.vpp);
    let m = f64::from(plan.microbatches_per_schedule());
    let sending_chunks = v - if matches!(stage, Stage::Last | Stage::Ends) {
        1.0
    } else {
        0.0
    };
    let receiving_chunks = v - if matches!(stage, Stage::First | Stage::Ends) {
        1.0
    } else {
        0.0
    };
    let held_outputs = in_flight * sending_chunks;
    let idle_activation_buffers = (m - in_flight).max(0.0) * receiving_chunks;
    let gradient_buffers = m * sending_chunks;
    crate::cost::comm::pp_message_bytes(model, training, plan)
        * (held_outputs + idle_activation_buffers + gradient_buffers)
}
