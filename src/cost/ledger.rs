//! The communication ledger: every collective one GPU issues in a step, row by row, with the same
//! volumes and times `comm.rs` sums up in `evaluate`. Pure and allocating, so it is built only for
//! the plans a report shows, never in the search's hot path.
//!
//! Sources, per group:
//! - TP: Megatron's column-then-row split (Shoeybi et al. 2019 §3, Fig. 4): the row-split attention
//!   output projection and MLP second GEMM end in an all-reduce (`g`) in forward; the column-split
//!   QKV and MLP first GEMM start with an identity whose backward all-reduces the input gradient
//!   (`f`). With sequence parallelism each all-reduce becomes an all-gather before the column split
//!   and a reduce-scatter after the row split, and backward swaps them (Korthikanti et al. 2022
//!   §4.2.2, Fig. 5); the volume is the same. Full recompute repeats the forward pair (§4.1);
//!   selective recompute repeats only the attention core, which issues no collective (§5).
//! - PP: one activation send forward and one gradient send backward per micro-batch per model chunk
//!   at each stage boundary, b·s·h/t bytes with Megatron's scatter/gather (Narayanan et al. 2021 §4.1).
//! - DP: ZeRO (Rajbhandari et al. 2020 §7): plain DP all-reduces gradients once per step; ZeRO-1/2
//!   reduce-scatter gradients (once, or every micro-batch for ZeRO-2) and all-gather updated bf16
//!   weights after the optimizer step; ZeRO-3 reduce-scatters every micro-batch and all-gathers the
//!   weights before each forward, backward (and recompute) instead.
//!
//! Counts are per GPU of the stage `evaluate` reports on: TP rows repeat once per layer of the stage
//! with the most layers and per micro-batch; DP rows cover the stage with the most parameters.

use serde::Serialize;

use super::comm::{self, Collective};
use crate::cluster::{Cluster, Link};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{Training, WEIGHT_BYTES};

/// The parallel group a collective runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    Tp,
    Pp,
    Dp,
}

impl Group {
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Tp => "TP",
            Group::Pp => "PP",
            Group::Dp => "DP",
        }
    }
}

/// The pass a collective belongs to. `OptimizerStep` is ZeRO's parameter all-gather after the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    Forward,
    Backward,
    Recompute,
    OptimizerStep,
}

impl Pass {
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
            Pass::Recompute => "recompute",
            Pass::OptimizerStep => "after optimizer step",
        }
    }
}

/// How often a row happens in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Once per transformer layer per micro-batch.
    PerLayerPerMicrobatch,
    /// Once per model chunk per micro-batch.
    PerChunkPerMicrobatch,
    /// Once per micro-batch.
    PerMicrobatch,
    /// Once per step.
    PerStep,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::PerLayerPerMicrobatch => "per layer per micro-batch",
            Scope::PerChunkPerMicrobatch => "per chunk per micro-batch",
            Scope::PerMicrobatch => "per micro-batch",
            Scope::PerStep => "per step",
        }
    }
}

/// One collective, as issued once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerEntry {
    pub group: Group,
    pub op: Collective,
    pub pass: Pass,
    /// What in the model issues it (e.g. "attention output projection (row split)").
    pub site: &'static str,
    pub scope: Scope,
    /// How many times it happens in one step on one GPU.
    pub count: u64,
    pub ranks: u32,
    /// The full tensor the collective operates on.
    pub tensor_bytes: f64,
    /// Bytes this GPU sends for one occurrence (ring algorithm, nccl-tests' bus factor).
    pub wire_bytes: f64,
    pub link: Link,
    /// Time of one occurrence on that link (α-β model of `comm::Collective::time`).
    pub time_s: f64,
}

/// All collectives of one plan, with their step totals per group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ledger {
    pub entries: Vec<LedgerEntry>,
    pub tp_wire_bytes: f64,
    pub pp_wire_bytes: f64,
    pub dp_wire_bytes: f64,
}

impl Ledger {
    /// Bytes one GPU sends in a step for `group`: the sum of count × wire bytes.
    pub fn step_wire_bytes(entries: &[LedgerEntry], group: Group) -> f64 {
        entries
            .iter()
            .filter(|e| e.group == group)
            .map(|e| e.count as f64 * e.wire_bytes)
            .sum()
    }
}

/// Builds the ledger of `plan`.
pub fn ledger(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Ledger {
    let (tp_link, dp_link, pp_link) = comm::group_links(cluster, plan);
    let (tp_speed, dp_speed, pp_speed) = comm::group_speeds(cluster, plan);
    let m = u64::from(plan.num_microbatches);
    let mut entries = Vec::new();
    let mut push = |group, op: Collective, pass, site, scope, count, ranks, tensor: f64, link| {
        let speed = match group {
            Group::Tp => tp_speed,
            Group::Dp => dp_speed,
            Group::Pp => pp_speed,
        };
        entries.push(LedgerEntry {
            group,
            op,
            pass,
            site,
            scope,
            count,
            ranks,
            tensor_bytes: tensor,
            wire_bytes: op.wire_factor(ranks) * tensor,
            link,
            time_s: op.time(tensor, ranks, speed),
        });
    };

    // TP, per layer per micro-batch, on the stage with the most layers.
    if plan.tp > 1 {
        let tensor = comm::tp_tensor_bytes(model, training, plan);
        let count = u64::from(plan.stages.max_layers()) * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let t = plan.tp;
        let recomputed = (count as f64 * plan.recompute_share()).round() as u64;
        let mut forward_pair = |pass: Pass| {
            // Megatron's block recompute repeats only N layers of each chunk.
            let count = if pass == Pass::Recompute {
                recomputed
            } else {
                count
            };
            if plan.sequence_parallel {
                for (op, site) in [
                    (
                        Collective::AllGather,
                        "before attention QKV (column split): gather the sequence-split input",
                    ),
                    (
                        Collective::ReduceScatter,
                        "after attention output projection (row split): sum partial outputs, split by sequence",
                    ),
                    (
                        Collective::AllGather,
                        "before MLP first GEMM (column split): gather the sequence-split input",
                    ),
                    (
                        Collective::ReduceScatter,
                        "after MLP second GEMM (row split): sum partial outputs, split by sequence",
                    ),
                ] {
                    push(Group::Tp, op, pass, site, scope, count, t, tensor, tp_link);
                }
            } else {
                for site in [
                    "after attention output projection (row split): sum partial outputs",
                    "after MLP second GEMM (row split): sum partial outputs",
                ] {
                    push(
                        Group::Tp,
                        Collective::AllReduce,
                        pass,
                        site,
                        scope,
                        count,
                        t,
                        tensor,
                        tp_link,
                    );
                }
            }
        };
        forward_pair(Pass::Forward);
        if plan.recompute == Recompute::Full {
            forward_pair(Pass::Recompute);
        }
        if plan.sequence_parallel {
            for (op, site) in [
                (
                    Collective::ReduceScatter,
                    "attention QKV input gradient (conjugate of the all-gather)",
                ),
                (
                    Collective::AllGather,
                    "attention output gradient (conjugate of the reduce-scatter)",
                ),
                (
                    Collective::ReduceScatter,
                    "MLP first GEMM input gradient (conjugate of the all-gather)",
                ),
                (
                    Collective::AllGather,
                    "MLP output gradient (conjugate of the reduce-scatter)",
                ),
            ] {
                push(
                    Group::Tp,
                    op,
                    Pass::Backward,
                    site,
                    scope,
                    count,
                    t,
                    tensor,
                    tp_link,
                );
            }
        } else {
            for site in [
                "attention QKV input gradient (column split, Megatron's f)",
                "MLP first GEMM input gradient (column split, Megatron's f)",
            ] {
                push(
                    Group::Tp,
                    Collective::AllReduce,
                    Pass::Backward,
                    site,
                    scope,
                    count,
                    t,
                    tensor,
                    tp_link,
                );
            }
        }
    }

    // PP, per chunk per micro-batch.
    if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        let count = u64::from(plan.vpp) * m;
        for (pass, site) in [
            (
                Pass::Forward,
                "stage boundary: activations to the next stage",
            ),
            (
                Pass::Backward,
                "stage boundary: gradients to the previous stage",
            ),
        ] {
            push(
                Group::Pp,
                Collective::SendRecv,
                pass,
                site,
                Scope::PerChunkPerMicrobatch,
                count,
                2,
                message,
                pp_link,
            );
        }
    }

    // DP, on the stage with the most parameters.
    if plan.dp > 1 {
        let d = plan.dp;
        let params = super::memory::max_stage_params(model, plan);
        let grads = params * training.grad_dtype.bytes();
        let weights = params * WEIGHT_BYTES;
        let rs = Collective::ReduceScatter;
        let ag = Collective::AllGather;
        let gather_after_step = "updated bf16 weights to every replica";
        match plan.zero {
            0 => push(
                Group::Dp,
                Collective::AllReduce,
                Pass::Backward,
                "gradients of the stage, once per step",
                Scope::PerStep,
                1,
                d,
                grads,
                dp_link,
            ),
            1 | 2 => {
                let (scope, count) = if plan.zero == 1 {
                    (Scope::PerStep, 1)
                } else {
                    (Scope::PerMicrobatch, m)
                };
                push(
                    Group::Dp,
                    rs,
                    Pass::Backward,
                    "gradients to their owning shard",
                    scope,
                    count,
                    d,
                    grads,
                    dp_link,
                );
                push(
                    Group::Dp,
                    ag,
                    Pass::OptimizerStep,
                    gather_after_step,
                    Scope::PerStep,
                    1,
                    d,
                    weights,
                    dp_link,
                );
            }
            _ => {
                push(
                    Group::Dp,
                    rs,
                    Pass::Backward,
                    "gradients to their owning shard",
                    Scope::PerMicrobatch,
                    m,
                    d,
                    grads,
                    dp_link,
                );
                let mut passes = vec![
                    (Pass::Forward, "sharded weights before the forward"),
                    (Pass::Backward, "sharded weights before the backward"),
                ];
                if plan.recompute == Recompute::Full {
                    passes.push((Pass::Recompute, "sharded weights before the recompute"));
                }
                for (pass, site) in passes {
                    push(
                        Group::Dp,
                        ag,
                        pass,
                        site,
                        Scope::PerMicrobatch,
                        m,
                        d,
                        weights,
                        dp_link,
                    );
                }
            }
        }
    }

    Ledger {
        tp_wire_bytes: Ledger::step_wire_bytes(&entries, Group::Tp),
        pp_wire_bytes: Ledger::step_wire_bytes(&entries, Group::Pp),
        dp_wire_bytes: Ledger::step_wire_bytes(&entries, Group::Dp),
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::evaluate;
    use crate::plan::PlanRequest;
    use crate::shape::derive_shape;
    use crate::specs;
    use crate::training::GradDtype;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn ledger_sums_equal_cost_model_wire_bytes() {
        let model = derive_shape(20e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: 2048,
            global_batch: 64,
            grad_dtype: GradDtype::Fp32,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework: crate::training::TrainingFramework::MegatronLm2021,
            overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
            moe_imbalance: 1.0,
        };
        let mut checked = 0;
        for (tp, pp) in [(1, 1), (1, 4), (2, 2), (8, 2), (4, 4)] {
            for sequence_parallel in [false, true] {
                if sequence_parallel && tp == 1 {
                    continue;
                }
                for recompute in Recompute::ALL {
                    for zero in 0..=3u8 {
                        let request = PlanRequest {
                            tp,
                            pp,
                            dp: 32 / (tp * pp),
                            vpp: if pp == 2 && model.layers.is_multiple_of(4) {
                                2
                            } else {
                                1
                            },
                            micro_batch: 1,
                            sequence_parallel,
                            recompute,
                            zero,
                            allow_uneven_pp: false,
                            allow_cross_node_tp: false,
                            ..PlanRequest::default()
                        };
                        let plan =
                            ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                        let e = evaluate(&model, &cluster, &training, &plan);
                        let l = ledger(&model, &cluster, &training, &plan);
                        let what = format!("{request:?}");
                        assert!(close(l.tp_wire_bytes, e.comm.tp.wire_bytes.0), "TP {what}");
                        assert!(close(l.pp_wire_bytes, e.comm.pp.wire_bytes.0), "PP {what}");
                        assert!(close(l.dp_wire_bytes, e.comm.dp.wire_bytes.0), "DP {what}");
                        // Times add up too: TP all on the critical path.
                        let tp_time: f64 = l
                            .entries
                            .iter()
                            .filter(|x| x.group == Group::Tp)
                            .map(|x| x.count as f64 * x.time_s)
                            .sum();
                        assert!(
                            (tp_time - e.comm.tp.time_s.0).abs()
                                <= 1e-6 * e.comm.tp.time_s.0.max(1e-9),
                            "TP time {what}: {tp_time} vs {}",
                            e.comm.tp.time_s.0
                        );
                        assert!(l.entries.iter().all(|x| x.wire_bytes >= 0.0 && x.count > 0));
                        checked += 1;
                    }
                }
            }
        }
        // 24 plans with tp = 1, 72 with tp > 1.
        assert_eq!(checked, 96);
    }

    #[test]
    fn sequence_parallel_swaps_all_reduce_for_gather_and_scatter() {
        let model = derive_shape(20e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: 2048,
            global_batch: 8,
            grad_dtype: GradDtype::Bf16,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework: crate::training::TrainingFramework::MegatronLm2021,
            overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
            moe_imbalance: 1.0,
        };
        let mut request = PlanRequest {
            tp: 8,
            pp: 1,
            dp: 1,
            vpp: 1,
            micro_batch: 1,
            sequence_parallel: false,
            recompute: Recompute::Full,
            zero: 0,
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let l = ledger(&model, &cluster, &training, &plan);
        // 2 forward + 2 recompute + 2 backward all-reduces per layer (Shoeybi et al. Fig. 4).
        assert_eq!(l.entries.len(), 6);
        assert!(l.entries.iter().all(|e| e.op == Collective::AllReduce));
        assert_eq!(
            l.entries
                .iter()
                .filter(|e| e.pass == Pass::Recompute)
                .count(),
            2
        );
        request.sequence_parallel = true;
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let sp = ledger(&model, &cluster, &training, &plan);
        assert_eq!(sp.entries.len(), 12);
        assert!(sp.entries.iter().all(|e| e.op != Collective::AllReduce));
        assert!(close(sp.tp_wire_bytes, l.tp_wire_bytes));
    }
}
