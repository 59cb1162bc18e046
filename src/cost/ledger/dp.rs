//! The DP rows: ZeRO (Rajbhandari et al. 2020 §7), in `comm::dp_traffic`'s shape: plain DP
//! all-reduces gradients once per step; ZeRO-1/2 reduce-scatter gradients (once, or every
//! micro-batch for ZeRO-2) and all-gather updated weights after the optimizer step; ZeRO-3
//! reduce-scatters every micro-batch and all-gathers the weights before each forward, and before
//! the backward (and recompute) unless they are kept from the forward (FSDP2
//! `reshard_after_forward=False`). Dense parameters are reduced over the DP×CP group; an MoE
//! model's expert parameters over expert-DP (Megatron-Core parallel folding, `moe.rs`).

use super::{Op, Pass, Rows, Scope, Step};
use crate::cost::comm;
use crate::cost::groups::GroupKind;

/// Pushes the gradient and parameter-gather rows of the stage with the most parameters.
pub(super) fn rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        max_layers,
        ..
    } = *step;
    // Gradients and parameter gathers, on the stage with the most parameters: dense parameters
    // over DP×CP, expert parameters over expert-DP.
    let stage_params = crate::cost::memory::max_stage_params(model, training, plan);
    let crate::cost::memory::StageParams {
        total: params,
        expert: expert_params,
    } = stage_params;
    let gathers = comm::gather_bytes_per_param(model, training, plan, stage_params, max_layers);
    for (kind, replica_kind, share, gather_bytes) in [
        (
            GroupKind::Dp,
            GroupKind::DpReplica,
            params - expert_params,
            gathers.dense,
        ),
        (
            GroupKind::ExpertDp,
            GroupKind::ExpertDpReplica,
            expert_params,
            gathers.expert,
        ),
    ] {
        let d = rows.groups.get(kind).size;
        // Several copies of the sharded states: each reduce-scatter's shard is all-reduced across
        // the copies (`comm::dp_traffic`), also where a copy of the experts' states is one rank
        // (no reduce-scatter within it, the whole expert gradients all-reduced).
        let replicas = rows.groups.get(replica_kind).size;
        if share <= 0.0 || (d <= 1 && (plan.zero == 0 || replicas <= 1)) {
            continue;
        }
        if plan.zero >= 1 && replicas > 1 {
            let reductions = comm::sharded_collectives(training, plan).reduce_scatters;
            let per_micro_batch =
                plan.zero >= 2 && !comm::reduces_after_pipeline_schedule(training, plan) && m > 1.0;
            rows.push(
                replica_kind,
                Op::AllReduce,
                Pass::Backward,
                if kind == GroupKind::ExpertDp {
                    "each reduced expert gradient shard across the copies of the sharded states"
                } else {
                    "each reduced gradient shard across the copies of the sharded states"
                },
                if per_micro_batch {
                    Scope::PerMicrobatch
                } else {
                    Scope::PerStep
                },
                reductions,
                replicas,
                share * comm::dp_reduce_bytes_per_param(training, plan) / f64::from(d.max(1)),
            );
        }
        if d <= 1 {
            continue;
        }
        let grads = share * comm::dp_reduce_bytes_per_param(training, plan);
        let weights = share * gather_bytes;
        let site = |dense: &'static str, expert: &'static str| {
            if kind == GroupKind::ExpertDp {
                expert
            } else {
                dense
            }
        };
        let reduce_site = site(
            "gradients to their owning shard",
            "expert gradients to their owning shard",
        );
        match plan.zero {
            0 => {
                rows.push(
                    kind,
                    Op::AllReduce,
                    Pass::Backward,
                    site(
                        "gradients of the stage, once per step",
                        "expert gradients of the stage, once per step",
                    ),
                    Scope::PerStep,
                    1.0,
                    d,
                    grads,
                );
                // DeepSpeed's `BF16_Optimizer` steps its own shard even at ZeRO-0 and gathers
                // the bf16 parameters after (`bf16_optimizer::shards_states_at_zero0`).
                if crate::cost::bf16_optimizer::shards_states_at_zero0(training, plan) {
                    rows.push(
                        kind,
                        Op::AllGather,
                        Pass::OptimizerStep,
                        site(
                            "updated bf16 weights to every replica (DeepSpeed's BF16_Optimizer shards its fp32 states at ZeRO-0, its own ZeRO-1)",
                            "updated bf16 expert weights to every expert replica (DeepSpeed's BF16_Optimizer shards its fp32 states at ZeRO-0, its own ZeRO-1)",
                        ),
                        Scope::PerStep,
                        1.0,
                        d,
                        weights,
                    );
                }
            }
            2 | 3 if comm::reduces_after_pipeline_schedule(training, plan) => {
                // PyTorch pipelining with FSDP: one reduce-scatter after each pipeline schedule
                // (`comm::fsdp_syncs_per_step` a step); the weights gathered once per schedule
                // when kept (ZeRO-3 without resharding after the forward), once per step after
                // the optimizer (ZeRO-2), else once per micro-batch.
                let syncs = f64::from(comm::fsdp_syncs_per_step(training, plan));
                rows.push(
                    kind,
                    Op::ReduceScatter,
                    Pass::Backward,
                    site(
                        "accumulated gradients after the pipeline schedule",
                        "accumulated expert gradients after the pipeline schedule",
                    ),
                    Scope::PerStep,
                    syncs,
                    d,
                    grads,
                );
                let (pass, gather_site, scope, count) = if plan.zero == 2 {
                    (
                        Pass::OptimizerStep,
                        site(
                            "updated weights to every replica, again after each schedule",
                            "updated expert weights to every expert replica, again after each schedule",
                        ),
                        Scope::PerStep,
                        syncs,
                    )
                } else if !plan.reshard_after_forward {
                    (
                        Pass::Forward,
                        site(
                            "sharded weights, kept gathered across a schedule's micro-batches",
                            "sharded expert weights, kept gathered across a schedule's micro-batches",
                        ),
                        Scope::PerStep,
                        syncs,
                    )
                } else {
                    (
                        Pass::Forward,
                        site(
                            "sharded weights before each micro-batch",
                            "sharded expert weights before each micro-batch",
                        ),
                        Scope::PerMicrobatch,
                        m,
                    )
                };
                rows.push(
                    kind,
                    Op::AllGather,
                    pass,
                    gather_site,
                    scope,
                    count,
                    d,
                    weights,
                );
            }
            1 | 2 => {
                let (scope, count) = if plan.zero == 1 {
                    (Scope::PerStep, 1.0)
                } else {
                    (Scope::PerMicrobatch, m)
                };
                rows.push(
                    kind,
                    Op::ReduceScatter,
                    Pass::Backward,
                    reduce_site,
                    scope,
                    count,
                    d,
                    grads,
                );
                rows.push(
                    kind,
                    Op::AllGather,
                    Pass::OptimizerStep,
                    site(
                        "updated weights to every replica",
                        "updated expert weights to every expert replica",
                    ),
                    Scope::PerStep,
                    1.0,
                    d,
                    weights,
                );
            }
            _ => {
                rows.push(
                    kind,
                    Op::ReduceScatter,
                    Pass::Backward,
                    reduce_site,
                    Scope::PerMicrobatch,
                    m,
                    d,
                    grads,
                );
                let mut passes = vec![(
                    Pass::Forward,
                    site(
                        "sharded weights before the forward",
                        "sharded expert weights before the forward",
                    ),
                )];
                if plan.reshard_after_forward {
                    passes.push((
                        Pass::Backward,
                        site(
                            "sharded weights before the backward",
                            "sharded expert weights before the backward",
                        ),
                    ));
                    if comm::zero3_regathers_for_recompute(training, plan) {
                        passes.push((
                            Pass::Recompute,
                            site(
                                "sharded weights before the recompute",
                                "sharded expert weights before the recompute",
                            ),
                        ));
                    }
                }
                for (pass, site) in passes {
                    rows.push(
                        kind,
                        Op::AllGather,
                        pass,
                        site,
                        Scope::PerMicrobatch,
                        m,
                        d,
                        weights,
                    );
                }
            }
        }
    }
}
