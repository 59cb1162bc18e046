//! The EP rows: Megatron-Core's alltoall token dispatcher (`MoEAlltoAllTokenDispatcher`) or
//! DeepEP (the flex dispatcher): per MoE layer a dispatch all-to-all (routed token copies, or
//! under DeepEP one copy per GPU reached, to their experts' GPUs) and a combine all-to-all (the
//! expert outputs back), their gradients in backward, the forward pair again under full
//! recompute; bytes and time from `moe::alltoall_bytes`, `comm::alltoall_s` and
//! `moe::ep_dispatch_speed` (every pair talks; DeepEP forwards across NVLink domains). Beside
//! them expert TP's gathers and scatters (`moe::expert_tp_gather_bytes`).

use super::{Op, Pass, Rows, Scope, Step};
use crate::cost::groups::GroupKind;
use crate::cost::moe;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// How often an MoE layer's forward token collectives run again: full recompute's share, or every
/// time under `--recompute-modules moe` (`module_recompute::moe_alltoall_repeats`).
fn moe_recomputed(count: f64, training: &Training, plan: &ParallelPlan) -> f64 {
    let repeats = plan.recompute_share()
        + crate::cost::module_recompute::moe_alltoall_repeats(crate::cost::recomputed_modules(
            training, plan,
        ));
    count * repeats
}

/// Pushes the all-to-all and expert-TP rows of the slowest stage's MoE layers.
pub(super) fn rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_moe_layers,
        ..
    } = *step;
    // MoE layers on the slowest stage times micro-batches: how often each token collective runs.
    let moe_count = f64::from(slowest_moe_layers) * m;

    // EP, a dispatch and a combine all-to-all per MoE layer per micro-batch.
    let bytes = moe::alltoall_bytes(
        model,
        plan,
        training.seq_len,
        moe::wire_load(model, training, plan),
        training.moe_dispatch,
    );
    if plan.ep > 1 && bytes > 0.0 {
        let e = plan.ep;
        let tensor = bytes / Op::AllToAll.wire_factor(e);
        let count = moe_count;
        let scope = Scope::PerMoeLayerPerMicrobatch;
        let forward = match training.moe_dispatch.dispatcher {
            crate::training::MoeDispatcher::Alltoall => [
                "MoE dispatch: routed token copies to their experts' GPUs",
                "MoE combine: expert outputs back to their tokens' GPUs",
            ],
            crate::training::MoeDispatcher::Deepep => [
                "MoE dispatch (DeepEP): each token once to every GPU holding one of its experts",
                "MoE combine (DeepEP): each GPU's summed expert outputs back to the token's GPU",
            ],
        };
        for site in forward {
            rows.push(
                GroupKind::Ep,
                Op::AllToAll,
                Pass::Forward,
                site,
                scope,
                count,
                e,
                tensor,
            );
        }
        let recompute = moe_recomputed(count, training, plan);
        if recompute > 0.0 {
            for site in forward {
                rows.push(
                    GroupKind::Ep,
                    Op::AllToAll,
                    Pass::Recompute,
                    site,
                    scope,
                    recompute,
                    e,
                    tensor,
                );
            }
        }
        for site in [
            "MoE combine backward: output gradients to the experts' GPUs",
            "MoE dispatch backward: input gradients back to their tokens' GPUs",
        ] {
            rows.push(
                GroupKind::Ep,
                Op::AllToAll,
                Pass::Backward,
                site,
                scope,
                count,
                e,
                tensor,
            );
        }
    }

    // Expert TP: the dispatched tokens all-gathered among the ranks that split each expert, the
    // expert outputs reduce-scattered back (`moe::expert_tp_gather_bytes`); the backward swaps the
    // two, full recompute repeats the forward pair.
    let gathered = moe::expert_tp_gather_bytes(
        model,
        plan,
        training.seq_len,
        moe::routed_load(model, training, plan),
    );
    if plan.etp > 1 && gathered > 0.0 {
        let count = moe_count;
        let scope = Scope::PerMoeLayerPerMicrobatch;
        let gather = (
            Op::AllGather,
            "expert TP: dispatched tokens to every rank of the expert",
        );
        let scatter = (
            Op::ReduceScatter,
            "expert TP: expert outputs summed back to their dispatching rank",
        );
        let mut passes = vec![(Pass::Forward, count), (Pass::Backward, count)];
        let recompute = moe_recomputed(count, training, plan);
        if recompute > 0.0 {
            passes.push((Pass::Recompute, recompute));
        }
        for (pass, n) in passes {
            for (op, site) in [gather, scatter] {
                rows.push(
                    GroupKind::ExpertTp,
                    op,
                    pass,
                    site,
                    scope,
                    n,
                    plan.etp,
                    gathered,
                );
            }
        }
    }
}
