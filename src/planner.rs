//! The search: every valid plan, evaluated in parallel, ranked deterministically.
//!
//! The space is tp (divisors of the heads that fit in a node, or multiples of a node when cross-node
//! TP is asked for) × pp (even splits, or any with `allow_uneven_pp`) × dp (what is left) ×
//! micro-batch (divisors of the per-replica batch) × vpp (divisors of the layers per stage) ×
//! sequence parallelism × recompute × ZeRO stage. Evaluation order is the enumeration order and
//! rayon's `collect` keeps it, so the ranking is the same on 1 thread or 64.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

use rayon::prelude::*;

use crate::cluster::Cluster;
use crate::cost::simulated::{Simulated, simulate_plan};
use crate::cost::{Estimate, evaluate};
use crate::model::Model;
use crate::plan::{ParallelPlan, PlanRequest, Recompute, divisors};
use crate::training::{AttentionKernel, Training};

/// Which optional parts of the space to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOptions {
    pub allow_uneven_pp: bool,
    pub allow_cross_node_tp: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchStats {
    pub candidates: u64,
    pub feasible: u64,
    pub infeasible_by_reason: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub threads: usize,
}

/// Every evaluated plan, feasible ones ranked first (fastest first), then the infeasible ones by
/// how little memory they need.
#[derive(Debug, Clone)]
pub struct SearchResult {
    pub ranked: Vec<Estimate>,
    pub stats: SearchStats,
}

impl SearchResult {
    pub fn feasible(&self) -> &[Estimate] {
        &self.ranked[..self.stats.feasible as usize]
    }
    /// The infeasible plan that misses by the least memory, if nothing fits.
    pub fn closest_miss(&self) -> Option<&Estimate> {
        self.ranked.get(self.stats.feasible as usize)
    }
}

/// Tensor-parallel degrees worth trying: divisors of both head counts that divide a node, plus,
/// when allowed, multiples of a node that still divide the head counts and the GPU count.
pub fn tp_degrees(model: &Model, cluster: &Cluster, allow_cross_node_tp: bool) -> Vec<u32> {
    let gpn = cluster.gpus_per_node;
    let gpus = cluster.total_gpus();
    divisors(model.heads)
        .into_iter()
        .filter(|tp| model.kv_heads.is_multiple_of(*tp) && gpus.is_multiple_of(*tp))
        .filter(|&tp| {
            if tp <= gpn {
                gpn.is_multiple_of(tp)
            } else {
                allow_cross_node_tp && tp % gpn == 0
            }
        })
        .collect()
}

/// All plan requests of the space, in a fixed order.
pub fn enumerate(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> Vec<PlanRequest> {
    let gpus = cluster.total_gpus();
    let mut requests = Vec::new();
    for tp in tp_degrees(model, cluster, options.allow_cross_node_tp) {
        for pp in 1..=model.layers.min(gpus / tp) {
            if !(gpus / tp).is_multiple_of(pp)
                || (!model.layers.is_multiple_of(pp) && !options.allow_uneven_pp)
            {
                continue;
            }
            let dp = gpus / (tp * pp);
            if !training.global_batch.is_multiple_of(dp) {
                continue;
            }
            let replica_batch = training.global_batch / dp;
            let units = model.layers + 2;
            let vpps: Vec<u32> = if pp > 1 && model.layers.is_multiple_of(pp) {
                divisors(model.layers / pp)
            } else if pp > 1 && units.is_multiple_of(pp) {
                // Uneven split with embedding and loss counted as layers (see `ParallelPlan::build`).
                divisors(units / pp)
            } else {
                vec![1]
            };
            for micro_batch in divisors(replica_batch) {
                let num_microbatches = replica_batch / micro_batch;
                for &vpp in &vpps {
                    if vpp > 1 && !num_microbatches.is_multiple_of(pp) {
                        continue;
                    }
                    for sequence_parallel in [false, true] {
                        if sequence_parallel && tp == 1 {
                            continue;
                        }
                        for recompute in Recompute::ALL {
                            // FlashAttention already recomputes the attention core in its backward,
                            // so selective recompute is the same plan as none.
                            if recompute == Recompute::Selective
                                && training.attention == AttentionKernel::Flash
                            {
                                continue;
                            }
                            // ZeRO-2/3 shard gradients that pipeline parallelism accumulates across
                            // micro-batches: DeepSpeed's PipelineEngine refuses them and Megatron-LM
                            // offers only a ZeRO-1 distributed optimizer, so with pp > 1 the search
                            // stops at ZeRO-1 (`tpsim eval` still evaluates them, with a note).
                            let max_zero = if pp > 1 { 1 } else { 3 };
                            for zero in 0..=max_zero {
                                requests.push(PlanRequest {
                                    tp,
                                    pp,
                                    dp,
                                    vpp,
                                    micro_batch,
                                    sequence_parallel,
                                    recompute,
                                    zero,
                                    allow_uneven_pp: options.allow_uneven_pp,
                                    allow_cross_node_tp: options.allow_cross_node_tp,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    requests
}

/// A total order on plans for tie-breaking: smaller degrees and simpler settings first.
fn plan_key(plan: &ParallelPlan) -> (u32, u32, u32, u32, u32, bool, Recompute, u8) {
    (
        plan.tp,
        plan.pp,
        plan.dp,
        plan.vpp,
        plan.micro_batch,
        plan.sequence_parallel,
        plan.recompute,
        plan.zero,
    )
}

/// Ranking: feasible before infeasible; feasible by throughput (highest first), then by memory
/// (lowest first); infeasible by memory (lowest first); then by the plan key. `total_cmp` keeps it a
/// total order.
fn rank(a: &Estimate, b: &Estimate) -> std::cmp::Ordering {
    b.fits()
        .cmp(&a.fits())
        .then_with(|| {
            if a.fits() {
                b.tokens_per_s
                    .total_cmp(&a.tokens_per_s)
                    .then_with(|| a.memory.total_bytes.0.total_cmp(&b.memory.total_bytes.0))
            } else {
                a.memory.total_bytes.0.total_cmp(&b.memory.total_bytes.0)
            }
        })
        .then_with(|| plan_key(&a.plan).cmp(&plan_key(&b.plan)))
}

/// Runs the search.
pub fn search(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> SearchResult {
    let started = Instant::now();
    let requests = enumerate(model, cluster, training, options);
    let outcomes: Vec<Result<Estimate, &'static str>> = requests
        .par_iter()
        .map(
            |request| match ParallelPlan::build(request, model, cluster, training) {
                Ok(plan) => Ok(evaluate(model, cluster, training, &plan)),
                Err(_) => Err("invalid_plan"),
            },
        )
        .collect();
    let mut infeasible_by_reason = BTreeMap::new();
    let mut ranked = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        match outcome {
            Ok(estimate) => {
                if let Some(reason) = estimate.infeasible {
                    *infeasible_by_reason
                        .entry(reason.key().to_string())
                        .or_insert(0) += 1;
                }
                ranked.push(estimate);
            }
            Err(reason) => *infeasible_by_reason.entry(reason.to_string()).or_insert(0) += 1,
        }
    }
    ranked.par_sort_by(rank);
    let feasible = ranked.iter().filter(|e| e.fits()).count() as u64;
    SearchResult {
        stats: SearchStats {
            candidates: requests.len() as u64,
            feasible,
            infeasible_by_reason,
            elapsed_s: started.elapsed().as_secs_f64(),
            threads: rayon::current_num_threads(),
        },
        ranked,
    }
}

/// The shown plans after the schedule simulation refined their step times.
#[derive(Debug, Clone)]
pub struct Refined {
    pub plans: Vec<Estimate>,
    /// The simulation of each plan, same order (None where the simulator refused the schedule).
    pub simulated: Vec<Option<Simulated>>,
    /// True when the refined step times changed the order of the shown plans.
    pub reordered: bool,
}

/// Refines the top plans with the event-driven schedule simulation (`cost::simulated`) and re-ranks
/// them with the same order as the search. The search itself ranks on the closed form, which is
/// exact for equal stages; the simulation matters where stages differ (uneven split, output layer
/// on the last stage).
pub fn refine_top(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    shown: &[Estimate],
) -> Refined {
    let mut pairs: Vec<(usize, Estimate, Option<Simulated>)> = shown
        .par_iter()
        .enumerate()
        .map(
            |(i, e)| match simulate_plan(model, cluster, training, &e.plan) {
                Ok(sim) => (i, sim.estimate, Some(sim)),
                Err(_) => (i, *e, None),
            },
        )
        .collect();
    pairs.sort_by(|a, b| rank(&a.1, &b.1));
    let reordered = pairs.iter().enumerate().any(|(pos, p)| p.0 != pos);
    let (plans, simulated) = pairs.into_iter().map(|(_, e, s)| (e, s)).unzip();
    Refined {
        plans,
        simulated,
        reordered,
    }
}

/// One row of a folded top list: a plan and the settings that give the same plan again.
#[derive(Debug, Clone, PartialEq)]
pub struct FoldedRow {
    pub estimate: Estimate,
    /// The other settings with the same time and memory, each named by how it differs from this
    /// row's plan (e.g. "zero 1").
    pub alternatives: Vec<String>,
}

/// Folds rows of a ranked top list that differ only in a setting that changes nothing: same
/// tp/pp/dp/vpp/micro-batch, same step time and same memory (to 1e-9 relative), differing in
/// ZeRO stage, sequence parallelism or recompute — e.g. ZeRO stages at dp = 1, where there is
/// nothing to shard. The first (best-ranked) of each set stays, in order; the others become its
/// alternatives.
pub fn fold_equivalent(plans: &[Estimate]) -> Vec<FoldedRow> {
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    let mut rows: Vec<FoldedRow> = Vec::new();
    for e in plans {
        let (p, t) = (&e.plan, e.time.step_s.0);
        let twin = rows.iter_mut().find(|row| {
            let (q, r) = (&row.estimate.plan, &row.estimate);
            (q.tp, q.pp, q.dp, q.vpp, q.micro_batch) == (p.tp, p.pp, p.dp, p.vpp, p.micro_batch)
                && r.fits() == e.fits()
                && same(r.time.step_s.0, t)
                && same(r.memory.total_bytes.0, e.memory.total_bytes.0)
        });
        match twin {
            Some(row) => {
                let q = &row.estimate.plan;
                let mut diff = Vec::new();
                if q.zero != p.zero {
                    diff.push(format!("zero {}", p.zero));
                }
                if q.sequence_parallel != p.sequence_parallel {
                    diff.push(format!(
                        "sp {}",
                        if p.sequence_parallel { "yes" } else { "no" }
                    ));
                }
                if q.recompute != p.recompute {
                    diff.push(format!("recompute {}", p.recompute.as_str()));
                }
                row.alternatives.push(diff.join(" "));
            }
            None => rows.push(FoldedRow {
                estimate: *e,
                alternatives: Vec::new(),
            }),
        }
    }
    rows
}

/// The note under a folded table: which row stands for which alternatives, or None.
pub fn folded_note(rows: &[FoldedRow]) -> Option<String> {
    let parts: Vec<String> = rows
        .iter()
        .enumerate()
        .filter(|(_, row)| !row.alternatives.is_empty())
        .map(|(i, row)| format!("#{} also stands for {}", i + 1, row.alternatives.join(", ")))
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(format!(
            "folded (same time and memory): {}",
            parts.join("; ")
        ))
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;
    use crate::training::GradDtype;

    #[test]
    fn zero_stages_at_dp_1_fold_into_one_row() {
        // One node, tp 8: dp = 1, so every ZeRO stage shards over one rank and changes nothing.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: model.seq_len,
            global_batch: 8,
            grad_dtype: GradDtype::Bf16,
            tokens: None,
            attention: AttentionKernel::Flash,
        };
        let estimates: Vec<Estimate> = (0..=3)
            .map(|zero| {
                let request = PlanRequest {
                    tp: 8,
                    pp: 1,
                    dp: 1,
                    vpp: 1,
                    micro_batch: 1,
                    sequence_parallel: true,
                    recompute: Recompute::Selective,
                    zero,
                    allow_uneven_pp: false,
                    allow_cross_node_tp: false,
                };
                let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                evaluate(&model, &cluster, &training, &plan)
            })
            .collect();
        let rows = fold_equivalent(&estimates);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].estimate.plan.zero, 0);
        assert_eq!(rows[0].alternatives, ["zero 1", "zero 2", "zero 3"]);
        assert_eq!(
            folded_note(&rows).unwrap(),
            "folded (same time and memory): #1 also stands for zero 1, zero 2, zero 3"
        );
    }

    #[test]
    fn plans_that_differ_in_time_or_memory_stay_apart() {
        // Two nodes, dp 2: ZeRO-1 shards the optimizer, so memory differs and nothing folds.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 2,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: model.seq_len,
            global_batch: 16,
            grad_dtype: GradDtype::Bf16,
            tokens: None,
            attention: AttentionKernel::Flash,
        };
        let estimates: Vec<Estimate> = (0..=1)
            .map(|zero| {
                let request = PlanRequest {
                    tp: 8,
                    pp: 1,
                    dp: 2,
                    vpp: 1,
                    micro_batch: 1,
                    sequence_parallel: true,
                    recompute: Recompute::Selective,
                    zero,
                    allow_uneven_pp: false,
                    allow_cross_node_tp: false,
                };
                let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                evaluate(&model, &cluster, &training, &plan)
            })
            .collect();
        assert_eq!(fold_equivalent(&estimates).len(), 2);
        assert!(folded_note(&fold_equivalent(&estimates)).is_none());
    }
}
