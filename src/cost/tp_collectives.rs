//! How many TP collectives a layer runs (Shoeybi et al. 2019 §3: two all-reduce equivalents per
//! dense layer's forward), how many its recompute runs again, and whether sequence parallelism
//! gathers the inputs again in the backward.

use super::moe;
use super::{Estimate, LayerMix, slowest_stage_mix};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{SelectiveRecompute, Training};

/// Whether the backward all-gathers the column-parallel inputs again for the weight gradients:
/// Megatron's sequence parallelism keeps only the sequence shard (`unit_costs`); torchtitan keeps
/// the gathered inputs.
pub fn sp_regathers_in_backward(training: &Training, plan: &ParallelPlan) -> bool {
    plan.tp > 1 && plan.sequence_parallel && !training.framework.sp_keeps_gathered_inputs()
}

/// Whether a layer's column-parallel linears issue their input gradient's TP collective (the
/// all-reduce, a reduce-scatter under sequence parallelism) asynchronously before their wgrad GEMM
/// and wait for it after, so it runs under that GEMM even without TP comm overlap: Megatron-Core's
/// Transformer Engine linears (`transformer_engine/pytorch/module/layernorm_linear.py` and
/// `linear.py` at d0067d0da: `allreduce(dgrad, tp_group, async_op=True)` or
/// `reduce_scatter_along_first_dim(..., async_op=True)`, then `wgrad_gemm`, then
/// `dgrad_work.wait()`). Not taken for the other frameworks: torchtitan's eager DTensor
/// redistributes after the GEMMs; the SC'21 code all-reduces in autograd; Megatron-DeepSpeed's
/// `LinearWithGradAccumulationAndAsyncCommunication` runs the same order but is left as fitted.
/// Not under `--delay-wgrad-compute` (`Training::delay_wgrad_compute`): the same TE files store
/// the wgrad GEMM for later (`wgrad_store.put([inputmat_total, grad_output], wgrad_gemm)`) and
/// reach `dgrad_work.wait()` with no GEMM between, so the collective is waited on at once.
pub fn column_grad_collective_async(training: &Training, plan: &ParallelPlan) -> bool {
    plan.tp > 1
        && training.framework == crate::training::TrainingFramework::MegatronCore
        && !training.delay_wgrad_compute
}

/// TP all-reduce equivalents of one layer's forward on the stage that sets the step (the one the
/// estimate's TP traffic and the ledger count): the attention's, and the MLP's on the layers whose
/// MLP has one (`moe::mlp_tp_pair_share_at`; 2 for a dense layer, Shoeybi et al. 2019 §3).
pub fn tp_pairs_per_layer(model: &Model, training: &Training, estimate: &Estimate) -> f64 {
    tp_pairs_at(model, training, slowest_stage_mix(model, estimate))
}

/// TP all-reduce equivalents of the forward of one layer of `mix`: one per block that runs a
/// column- then row-parallel pair — the attention, the MLP where it has one
/// (`moe::mlp_tp_pair_share_at`), a hybrid stack's Mamba mixer (`in_proj`, `out_proj`) — by the
/// average layer's share of each block (`LayerMix::blocks`; 2 for a dense transformer layer).
pub(crate) fn tp_pairs_at(model: &Model, training: &Training, mix: LayerMix) -> f64 {
    let shares = mix.blocks;
    let mlp_pairs = shares.mlp - 1.0 + moe::mlp_tp_pair_share_at(model, training, mix.moe_share);
    shares.attention + shares.mamba + mlp_pairs
}

/// Whether the plan's recompute runs any TP collective again on the stage that sets the step
/// (`tp_recompute_share` above zero), so a reading of the TP traffic can say it includes them.
pub fn tp_recompute_repeats_collectives(
    model: &Model,
    training: &Training,
    estimate: &Estimate,
) -> bool {
    let mix = slowest_stage_mix(model, estimate);
    tp_recompute_share(model, training, &estimate.plan, mix) > 0.0
}

/// Share of a layer's forward TP collectives, counted in units of a dense layer's two all-reduce
/// equivalents, that its recompute runs again: the recomputed layers' own collectives under full
/// recompute, the framework's selective kind otherwise.
/// Layers of `mix` (one stage's).
pub(crate) fn tp_recompute_share(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    mix: LayerMix,
) -> f64 {
    match plan.recompute {
        Recompute::Full => plan.recompute_share() * tp_pairs_at(model, training, mix) / 2.0,
        Recompute::Selective => training.selective_recompute().tp_forward_share(
            plan.sequence_parallel,
            mix.dense_mlp_share(),
            mix.moe_share,
            moe::moe_mlp_has_tp_pair(model, training),
        ),
        Recompute::None => 0.0,
    }
}

/// The modules Megatron-Core recomputes in this plan, when the user listed them.
pub(crate) fn recomputed_modules(
    training: &Training,
    plan: &ParallelPlan,
) -> Option<crate::training::RecomputeModules> {
    match (plan.recompute, training.selective_recompute()) {
        (Recompute::Selective, SelectiveRecompute::Modules(modules)) => Some(modules),
        _ => None,
    }
}
