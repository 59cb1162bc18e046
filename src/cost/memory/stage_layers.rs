//! Which layers each pipeline stage holds: the ranks a stage stands for, its transformer and MoE
//! layers (a hybrid stack's slice of the pattern; a V schedule's two chunks,
//! `v_schedule::virtual_stage`, torchtitan `_get_pp_rank_to_stage_indices_mapping`) and those
//! of them kept in bf16 (`pipeline::Bf16Keep`).

use super::Stage;
use crate::cost::LayerMix;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// The pipeline ranks `stage` stands for, as `stage_memory`'s `middle_rank`: for a
/// [`Stage::Middle`] every middle stage of a hybrid stack, whose stages each hold their own slice
/// of the pattern (each is priced); for a transformer's one, the middle stage `stage_layer_mix`
/// makes of the most layers and MoE layers; one for any other stage.
pub(super) fn stage_ranks(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
) -> std::ops::Range<u32> {
    if stage == Stage::Middle && model.is_hybrid() && plan.pp > 2 {
        1..plan.pp - 1
    } else {
        1..2
    }
}

/// [`stage_ranks`] for memory: every middle stage as well where layers kept in bf16 reach one
/// (`stage_bf16`; an interleaved plan's bf16 count past the last chunk), each its own.
pub(super) fn memory_stage_ranks(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
) -> std::ops::Range<u32> {
    let middles = 1..plan.pp.saturating_sub(1).max(1);
    if stage == Stage::Middle
        && plan.pp > 2
        && middles
            .clone()
            .any(|rank| stage_bf16(model, training, plan, Stage::Middle, rank).is_some())
    {
        middles
    } else {
        stage_ranks(model, plan, stage)
    }
}

/// The layer mix of `stage` (`stage_layer_mix`), a hybrid stack's middle stage at pipeline rank
/// `middle_rank` (`stage_ranks`).
pub(super) fn stage_mix(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> LayerMix {
    let (layers, moe_layers) = stage_layer_mix(model, plan, stage, middle_rank);
    let run = model.is_hybrid().then(|| {
        let rank = pipeline_rank(plan, stage, middle_rank);
        crate::cost::pipeline::ChunkLayout::of(model, plan).stage_run(model, plan.pp.max(1), rank)
    });
    LayerMix::of(model, layers, moe_layers, run.flatten())
}

/// The pipeline rank `stage` is (a middle one at `middle_rank`; a V's middle rank `middle_rank`).
fn pipeline_rank(plan: &ParallelPlan, stage: Stage, middle_rank: u32) -> u32 {
    match stage {
        Stage::First | Stage::Only | Stage::Ends => 0,
        Stage::Middle | Stage::VMiddle => middle_rank,
        Stage::Last => plan.pp.max(1) - 1,
    }
}

/// Transformer layers (MTP layers included) on `stage` and how many of them are MoE layers
/// (`pipeline::stage_moe_layers`); for the middle stages, the one with the most MoE layers (its
/// experts and routed tokens weigh most), or a hybrid stack's at `middle_rank`.
fn stage_layer_mix(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> (u32, u32) {
    let layers = stage_layers(plan, model, stage);
    if model.moe.is_none() {
        return (layers, 0);
    }
    // Every layer an MoE layer: no need to place them.
    if model.every_layer_moe() {
        return (layers, layers);
    }
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let on = |s: u32| layout.stage_mix_with_mtp(model, plan.pp, s).1;
    let moe_layers = match stage {
        Stage::First | Stage::Only => on(0),
        Stage::Ends => v_ends_mix(model, plan).1,
        Stage::VMiddle => v_middle_mix(model, plan).1,
        Stage::Last => on(plan.pp - 1),
        Stage::Middle if model.is_hybrid() => on(middle_rank),
        Stage::Middle => {
            // Most middle stages past a dense prefix are all MoE: stop at the first that is.
            let mut most = 0;
            for s in 1..plan.pp.saturating_sub(1) {
                most = most.max(on(s));
                if most >= layers {
                    break;
                }
            }
            most
        }
    };
    (layers, moe_layers.min(layers))
}

/// Share of `stage`'s transformer layers with an MoE MLP (0 for a dense model).
pub fn stage_moe_share(model: &Model, plan: &ParallelPlan, stage: Stage) -> f64 {
    match stage_layer_mix(model, plan, stage, 1) {
        (0, _) => 0.0,
        (layers, moe) => f64::from(moe) / f64::from(layers),
    }
}

/// Transformer layers on `stage`.
pub(super) fn stage_layers(plan: &ParallelPlan, model: &Model, stage: Stage) -> u32 {
    match stage {
        Stage::Only | Stage::Last => crate::cost::pipeline::last_stage_layers(model, plan),
        Stage::Ends => v_ends_mix(model, plan).0,
        Stage::VMiddle => v_middle_mix(model, plan).0,
        Stage::First => plan.stages.first,
        Stage::Middle => plan.stages.middle_max,
    }
}

/// Transformer layers, and MoE layers among them, of rank `rank` of a V: its model chunks
/// `rank` and 2p − 1 − rank (`v_schedule::virtual_stage`; torchtitan
/// `_get_pp_rank_to_stage_indices_mapping`, style "v"), as `layout` splits the layers.
fn v_rank_mix(
    model: &Model,
    layout: &crate::cost::pipeline::ChunkLayout,
    p: u32,
    rank: u32,
) -> (u32, u32) {
    [0, 1]
        .map(|chunk| layout.range(crate::cost::v_schedule::virtual_stage(rank, chunk, p)))
        .iter()
        .fold((0, 0), |(layers, moe), &(start, end)| {
            (
                layers + end - start,
                moe + model.moe_layers_between(start, end),
            )
        })
}

/// [`v_rank_mix`] of the first GPU, with the MTP layers the last chunk runs.
pub(super) fn v_ends_mix(model: &Model, plan: &ParallelPlan) -> (u32, u32) {
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let (layers, moe) = v_rank_mix(model, &layout, plan.pp.max(1), 0);
    let mtp_moe = if model.mtp_layer_is_moe() {
        model.mtp_layers
    } else {
        0
    };
    (layers + model.mtp_layers, moe + mtp_moe)
}

/// [`v_rank_mix`] of the most loaded other GPU of a V: the most layers, then the most MoE layers.
/// (0, 0) without a pipeline.
pub(super) fn v_middle_mix(model: &Model, plan: &ParallelPlan) -> (u32, u32) {
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let p = plan.pp.max(1);
    (1..p)
        .map(|rank| v_rank_mix(model, &layout, p, rank))
        .max()
        .unwrap_or((0, 0))
}

/// The layers of `stage` (a middle one at `middle_rank`) kept in bf16 (`pipeline::Bf16Keep`).
pub(super) fn stage_bf16(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> Option<crate::cost::pipeline::Bf16Run> {
    let keep = crate::cost::pipeline::Bf16Keep::of(model, training, plan);
    if keep.is_none() {
        return None;
    }
    let p = plan.pp.max(1);
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let rank = pipeline_rank(plan, stage, middle_rank);
    if matches!(stage, Stage::Ends | Stage::VMiddle) {
        // A V's rank holds chunks r and 2p − 1 − r (`v_rank_mix`); the last runs the MTP layers.
        let last = 2 * p - 1;
        let [first, second] = [rank, last - rank].map(|chunk| {
            let (start, end) = layout.range(chunk);
            let depths = if chunk == last { model.mtp_layers } else { 0 };
            crate::cost::pipeline::Bf16Run::of_range(model, keep, start, end, depths)
        });
        return first.plus(second).nonempty();
    }
    layout.stage_bf16(model, keep, p, rank)
}
