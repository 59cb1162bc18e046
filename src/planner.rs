//! The search: every valid plan, evaluated in parallel, ranked deterministically.
//!
//! The space is tp (divisors of the heads that fit in a node, or multiples of a node when cross-node
//! TP is asked for) × pp (even splits, or any with `allow_uneven_pp`) × dp (what is left) ×
//! cp (context-parallel degrees that split the sequence, `cp_degrees`) × micro-batch (divisors of
//! the per-replica batch) × vpp (divisors of the layers per stage) × sequence parallelism ×
//! recompute × ZeRO stage (with FSDP2's resharding choice for ZeRO-3). Evaluation order is the
//! enumeration order and rayon's `collect` keeps it, so the ranking is the same on 1 thread or 64.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

use rayon::iter::Either;
use rayon::prelude::*;

use crate::cluster::Cluster;
use crate::cost::simulated::{Simulated, simulate_plan};
use crate::cost::{Estimate, evaluate};
use crate::model::Model;
use crate::plan::{ParallelPlan, PlanRequest, Precision, Recompute, divisors};
use crate::training::{AttentionKernel, SelectiveRecompute, Training};

/// Which optional parts of the space to open, and what the user has already chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SearchOptions {
    pub allow_uneven_pp: bool,
    pub allow_cross_node_tp: bool,
    /// GEMM precision of every plan (a training choice, not searched).
    pub precision: Precision,
    pub pins: Pins,
}

/// Dimensions pinned by the user: only plans with these values are evaluated; the others are
/// counted under `ruled_out_by_pins`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pins {
    pub tp: Option<u32>,
    pub cp: Option<u32>,
    pub pp: Option<u32>,
    pub dp: Option<u32>,
    pub vpp: Option<u32>,
    pub micro_batch: Option<u32>,
    pub recompute: Option<Recompute>,
    /// Full recompute's block method on this many layers of each chunk (`PlanRequest::
    /// recompute_num_layers`; only full recompute plans have one).
    pub recompute_num_layers: Option<u32>,
    pub zero: Option<u8>,
    pub sequence_parallel: Option<bool>,
    pub ep: Option<u32>,
    pub etp: Option<u32>,
    pub reshard_after_forward: Option<bool>,
    /// Copies of the ZeRO-sharded states (`PlanRequest::dp_replicas`).
    pub dp_replicas: Option<u32>,
    /// How layers are placed on the stages of an uneven pipeline ([`StageSplitPin`]).
    pub stage_split: StageSplitPin,
}

/// How the search places the layers on pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StageSplitPin {
    /// With `allow_uneven_pp` and without interleaving, tpsim's own split and every first/last
    /// split of [`crate::plan::first_last_splits`], keeping the fastest for each candidate (the
    /// stage with the output layer and any MTP layers may deserve fewer layers than units
    /// suggest); tpsim's own split otherwise.
    #[default]
    Searched,
    /// tpsim's own split only (even, or `StageLayout::balanced_units`): what the validation
    /// runner uses where a published run does not state its split.
    Own,
    /// These first and last stage layers on every candidate (`PlanRequest::stage_split`); those
    /// it does not fit are invalid.
    Given(u32, u32),
}

impl StageSplitPin {
    /// The first/last split every candidate takes, if one is given.
    pub fn given(self) -> Option<(u32, u32)> {
        match self {
            StageSplitPin::Given(first, last) => Some((first, last)),
            StageSplitPin::Own | StageSplitPin::Searched => None,
        }
    }
}

impl Pins {
    /// Whether `request` has every pinned value.
    pub fn admit(&self, r: &PlanRequest) -> bool {
        fn ok<T: PartialEq>(pin: Option<T>, value: T) -> bool {
            pin.is_none_or(|p| p == value)
        }
        ok(self.tp, r.tp)
            && ok(self.cp, r.cp)
            && ok(self.pp, r.pp)
            && ok(self.dp, r.dp)
            && ok(self.vpp, r.vpp)
            && ok(self.micro_batch, r.micro_batch)
            && ok(self.recompute, r.recompute)
            && ok(self.recompute_num_layers, r.recompute_num_layers)
            && ok(self.zero, r.zero)
            && ok(self.sequence_parallel, r.sequence_parallel)
            && ok(self.ep, r.ep)
            && ok(self.etp, r.etp)
            && self
                .reshard_after_forward
                .is_none_or(|pin| r.zero == 3 && r.reshard_after_forward == pin)
            && ok(self.dp_replicas, r.dp_replicas)
    }
}

/// Shortest sequence share a context-parallel rank is given in the search: below it the rank's
/// GEMMs shrink and the ring exchange dominates. Assumption, a search bound and not a cost: NeMo's
/// long-context tables (the `nemo-longctx-` rows of validation/modern_runs.yaml) never give a CP
/// rank fewer than 16K tokens nor a GPU fewer than 4K (sequence / cp·tp); 2K per CP rank keeps
/// every such plan in the search and prunes only far shorter shares. `eval` takes any cp.
pub const MIN_TOKENS_PER_CP_RANK: u32 = 2048;

/// Context-parallel degrees the search tries: 1, and every cp that splits the sequence as the
/// framework splits it (2·cp equal chunks for causal load balancing, cp shards under
/// DeepSpeed-Ulysses: `plan::cp_splits_sequence`) with at least `MIN_TOKENS_PER_CP_RANK` tokens per
/// rank.
pub fn cp_degrees(
    seq_len: u32,
    model_parallel_gpus: u32,
    framework: crate::training::TrainingFramework,
) -> Vec<u32> {
    (1..=(seq_len / MIN_TOKENS_PER_CP_RANK).max(1))
        .filter(|&cp| {
            cp == 1
                || (crate::plan::cp_splits_sequence(cp, seq_len, framework)
                    && model_parallel_gpus.is_multiple_of(cp))
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchStats {
    pub candidates: u64,
    pub feasible: u64,
    pub infeasible_by_reason: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub threads: usize,
    /// The pinned dimensions by their plan key (`{"tp": 8, "pp": 4}`), the pins `plan`'s
    /// `pinned:` line names (`app::pin_conflict::pins_json`, its one source); the search leaves it
    /// empty, and JSON leaves an empty one out. A JSON object, in the line's order.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "pairs_as_map")]
    pub pinned: Vec<(String, serde_json::Value)>,
}

/// Key-value pairs written as a mapping, in their order.
fn pairs_as_map<S: serde::Serializer>(
    pairs: &[(String, serde_json::Value)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(pairs.iter().map(|(key, value)| (key, value)))
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
    let gpn = cluster.nvlink_domain();
    let gpus = cluster.total_gpus();
    divisors(model.heads)
        .into_iter()
        .filter(|tp| {
            (model.kv_heads.is_multiple_of(*tp) || tp.is_multiple_of(model.kv_heads))
                && gpus.is_multiple_of(*tp)
        })
        .filter(|&tp| {
            if tp <= gpn {
                gpn.is_multiple_of(tp)
            } else {
                allow_cross_node_tp && tp % gpn == 0
            }
        })
        .collect()
}

/// All plan requests of the space, in a fixed order (pins not applied: `search` counts what they
/// rule out).
pub fn enumerate(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> Vec<PlanRequest> {
    enumerate_with(model, cluster, training, options, PinnedOut::Counted)
}

/// What the enumeration does with the degrees a pin rules out: lists them, so that the search
/// counts them under `ruled_out_by_pins` (what `plan` reports), or skips their whole subtree (a
/// search whose statistics nobody reads: `plan`'s offload note, [`search_within_pins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinnedOut {
    Counted,
    Skipped,
}

fn enumerate_with(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
    pinned_out: PinnedOut,
) -> Vec<PlanRequest> {
    let gpus = cluster.total_gpus();
    let mut requests = Vec::new();
    // Whether a pin rules `value` out and its subtree is skipped rather than listed.
    let skipped = |pin: Option<u32>, value: u32| {
        pinned_out == PinnedOut::Skipped && pin.is_some_and(|p| p != value)
    };
    for tp in tp_degrees(model, cluster, options.allow_cross_node_tp) {
        if skipped(options.pins.tp, tp) {
            continue;
        }
        // Context parallelism runs inside the fused attention kernels (`PlanError::
        // CpWithUnfusedAttention`), so unfused attention searches cp 1 only.
        // A pinned cp is tried whatever share of the sequence it leaves each rank: the floor of
        // `cp_degrees` prunes the search, it does not overrule a degree the user (or a published
        // run) chose; `ParallelPlan::build` still checks that it splits the sequence.
        let cps = if training.framework.runs_context_parallelism()
            && training.attention == crate::training::AttentionKernel::Flash
        {
            let mut cps = cp_degrees(training.seq_len, gpus / tp, training.framework);
            if let Some(cp) = options
                .pins
                .cp
                .filter(|&cp| cp > 1 && !cps.contains(&cp) && (gpus / tp).is_multiple_of(cp))
            {
                cps.push(cp);
            }
            cps
        } else {
            vec![1]
        };
        for cp in cps {
            // The all-to-all exchange needs cp to split this tp's heads; no other cp is proposed.
            if crate::plan::cp_heads_error(cp, tp, model, training).is_some()
                || skipped(options.pins.cp, cp)
            {
                continue;
            }
            let per_pipeline = gpus / (tp * cp);
            for pp in 1..=model.layers.min(per_pipeline) {
                if skipped(options.pins.pp, pp) {
                    continue;
                }
                // DeepSpeed-Ulysses runs with neither TP nor PP beside it.
                if crate::plan::ulysses_refuses_model_parallelism(cp, tp, pp, training) {
                    continue;
                }
                // torchtitan runs tied embeddings without a pipeline only.
                if crate::plan::refuses_tied_embeddings_with_pp(pp, model, training) {
                    continue;
                }
                if !per_pipeline.is_multiple_of(pp)
                    || (!model.layers.is_multiple_of(pp) && !options.allow_uneven_pp)
                {
                    continue;
                }
                let dp = per_pipeline / pp;
                if !training.global_batch.is_multiple_of(dp) {
                    continue;
                }
                let replicas = dp_replica_choices(
                    cluster,
                    tp,
                    cp,
                    dp,
                    options.pins.dp_replicas,
                    training.framework.copies_split_cp(),
                );
                for (ep, etp) in expert_degrees(
                    model,
                    tp,
                    tp * cp * dp,
                    options.pins.etp,
                    training.framework,
                ) {
                    // Experts' states split into as many copies (one rank each at least: the
                    // expert gradients are then all-reduced whole across the copies).
                    let expert_dp = tp * cp * dp / (ep * etp).max(1);
                    let replicas: Vec<u32> = replicas
                        .iter()
                        .copied()
                        .filter(|&r| model.moe.is_none() || expert_dp.is_multiple_of(r))
                        .collect();
                    push_pipeline_variants(
                        &mut requests,
                        model,
                        training,
                        &replicas,
                        PlanRequest {
                            tp,
                            cp,
                            pp,
                            dp,
                            ep,
                            etp,
                            precision: options.precision,
                            allow_uneven_pp: options.allow_uneven_pp,
                            allow_cross_node_tp: options.allow_cross_node_tp,
                            stage_split: options.pins.stage_split.given(),
                            ..PlanRequest::default()
                        },
                        options.pins.recompute == Some(Recompute::Selective),
                        options.pins.vpp,
                    );
                }
            }
        }
    }
    requests
}

/// Expert-parallel layouts worth trying for an MoE model on a stage of `stage_gpus` GPUs (tp·cp·dp):
/// ep over the divisors of the experts that fold into the stage, and etp 1 (Megatron-Core's default,
/// experts not split) or etp = tp (experts split like the dense MLP), and a pinned etp too (Megatron-Core
/// runs any etp with ep x etp dividing the stage, as `tpsim eval` does), where the framework
/// splits experts so (`TrainingFramework::runs_expert_tp`: torchtitan only etp 1 with ep > 1 and
/// etp = tp with ep 1; a pinned etp it refuses is left to the plan check, which says why). Dense
/// models: (1, 1).
pub fn expert_degrees(
    model: &Model,
    tp: u32,
    stage_gpus: u32,
    pinned_etp: Option<u32>,
    framework: crate::training::TrainingFramework,
) -> Vec<(u32, u32)> {
    let Some(moe) = model.moe else {
        return vec![(1, 1)];
    };
    let mut out = Vec::new();
    for etp in [1, tp].into_iter().chain(pinned_etp) {
        if etp == 0 {
            continue;
        }
        if etp > 1 && !moe.ffn_hidden.is_multiple_of(etp) {
            continue;
        }
        for ep in divisors(moe.experts) {
            let searched = pinned_etp == Some(etp) || framework.runs_expert_tp(etp, ep, tp);
            if searched && stage_gpus.is_multiple_of(ep * etp) && !out.contains(&(ep, etp)) {
                out.push((ep, etp));
            }
        }
    }
    out
}

/// Copies of the ZeRO-sharded states the search tries for a (tp, cp, dp) layout: one (every
/// DP×CP rank shards the same copy), and the count that keeps each copy inside one NVLink domain,
/// where its gathers and reduce-scatters stay on NVLink and only the all-reduce of the reduced
/// shards crosses the network (Megatron-Bridge's performance guide proposes the partial
/// distributed optimizer for "slow DP communication at large scaling training"), and a pinned
/// count. Counts that leave a copy one rank, or do not divide what the framework splits into
/// copies (dp x cp under Megatron-Core, dp under torchtitan), are not offered.
pub fn dp_replica_choices(
    cluster: &Cluster,
    tp: u32,
    cp: u32,
    dp: u32,
    pinned: Option<u32>,
    copies_split_cp: bool,
) -> Vec<u32> {
    let mut out = vec![1];
    let data_ranks = dp * cp;
    // What the copies must divide (`TrainingFramework::copies_split_cp`).
    let split = if copies_split_cp { data_ranks } else { dp };
    // DP×CP ranks stride tp, so an NVLink domain holds domain / tp of one group's ranks.
    let domain = cluster.nvlink_domain();
    let per_domain = if domain.is_multiple_of(tp) {
        domain / tp
    } else {
        0
    };
    if per_domain >= 2 && data_ranks > per_domain && data_ranks.is_multiple_of(per_domain) {
        let replicas = data_ranks / per_domain;
        if split.is_multiple_of(replicas) {
            out.push(replicas);
        }
    }
    if let Some(replicas) = pinned
        .filter(|&r| r > 1 && !out.contains(&r) && split.is_multiple_of(r) && data_ranks / r >= 2)
    {
        out.push(replicas);
    }
    out
}

/// Most virtual stages offered for an uneven split (Megatron-Bridge's published uneven layouts go
/// to vp 4; interleaving deeper multiplies the pipeline messages for a bubble already below
/// 1/(8·m) of the step).
const MAX_UNEVEN_VPP: u32 = 8;

/// Every micro-batch, vpp, SP, recompute, ZeRO and resharding choice for one (tp, cp, pp, dp).
fn push_pipeline_variants(
    requests: &mut Vec<PlanRequest>,
    model: &Model,
    training: &Training,
    replica_choices: &[u32],
    base: PlanRequest,
    selective_pinned: bool,
    vpp_pinned: Option<u32>,
) {
    let PlanRequest { tp, cp, pp, dp, .. } = base;
    let replica_batch = training.global_batch / dp;
    let vpps: Vec<u32> = if !training.framework.interleaves_pipeline() {
        vec![1]
    } else if pp > 1 && model.layers.is_multiple_of(pp) {
        // A pinned --vpp that does not divide the stage's layers gives chunks of unequal size
        // (`StageLayout::balanced_chunks`) where the framework takes per-chunk layouts.
        let per_stage = model.layers / pp;
        let mut vpps = divisors(per_stage);
        // A pinned 0 is no vpp: `ParallelPlan::build` names it (a runs file's `plan.vp: 0` divided
        // the stage's layers by it here).
        vpps.extend(vpp_pinned.filter(|&v| {
            (1..=per_stage).contains(&v)
                && !vpps.contains(&v)
                && training.framework.takes_chunk_layouts()
                && training.pp_schedule.v_kind().is_none()
        }));
        vpps
    } else if pp > 1 {
        // Uneven: with the embedding, the loss and the MTP layers counted as layers where these
        // units split evenly (`plan::unit_chunks`), else with the model chunks filled front to
        // back and the remainder last (`StageLayout::filled_chunks`, Megatron-Bridge's DeepSeek-V3
        // layouts), both up to `MAX_UNEVEN_VPP` virtual stages, and a deeper --vpp the user pinned
        // where it splits so (the Megatron-Core MoE report runs Qwen3-235B's 94 layers at pp 4 x
        // vpp 12).
        let fills = |v: u32| {
            let chunks = pp * v;
            model.layers > model.layers.div_ceil(chunks) * (chunks - 1)
        };
        let counts_units = |v: u32| crate::plan::unit_chunks(model, pp, v).is_some();
        let splits = |v: u32| counts_units(v) || fills(v);
        let mut vpps = vec![1];
        vpps.extend((2..=MAX_UNEVEN_VPP).filter(|&v| counts_units(v)));
        let filled: Vec<u32> = (2..=MAX_UNEVEN_VPP)
            .filter(|&v| !vpps.contains(&v) && fills(v))
            .collect();
        vpps.extend(filled);
        vpps.extend(vpp_pinned.filter(|&v| v > MAX_UNEVEN_VPP && splits(v)));
        vpps
    } else {
        vec![1]
    };
    // ZeRO-2/3 shard gradients that pipeline parallelism accumulates across micro-batches: DeepSpeed's
    // PipelineEngine refuses them and 2021 Megatron-LM offers only ZeRO-1, while Megatron-Core FSDP
    // and torchtitan's FSDP2 run them with pipelines (`TrainingFramework::max_zero_with_pp`).
    let max_zero = if pp > 1 {
        training.framework.max_zero_with_pp()
    } else {
        3
    };
    for micro_batch in divisors(replica_batch) {
        let num_microbatches = replica_batch / micro_batch;
        for &vpp in &vpps {
            let chunk = (model.layers.div_ceil(pp) / vpp).max(1);
            // Interleaved 1F1B's rule (`plan::check_interleaving`); the V schedules have their own.
            if vpp > 1
                && !num_microbatches.is_multiple_of(pp)
                && training.pp_schedule.v_kind().is_none()
            {
                continue;
            }
            for sequence_parallel in [false, true] {
                if sequence_parallel
                    && (tp == 1
                        || !training.framework.runs_sequence_parallelism()
                        || !crate::plan::sp_splits_sequence(tp, cp, training))
                {
                    continue;
                }
                for recompute in Recompute::ALL {
                    // FlashAttention already recomputes the attention core in its backward, so
                    // Megatron's selective recompute is the same plan as none, and Megatron-Core's
                    // (the fused forward again) a slower one keeping as much (torchtitan's per-op
                    // SAC is neither: it recomputes matmuls and keeps less). A user who pins
                    // selective gets it evaluated all the same.
                    if recompute == Recompute::Selective
                        && !selective_pinned
                        && training.attention == AttentionKernel::Flash
                        && matches!(
                            training.selective_recompute(),
                            SelectiveRecompute::AttentionCore
                                | SelectiveRecompute::CheckpointedAttention
                        )
                    {
                        continue;
                    }
                    for zero in 0..=max_zero {
                        if !training.optimizer_states.allows_zero(zero)
                            || !training.framework.runs_zero_stage(zero)
                            || (zero == 3
                                && model.moe.is_some()
                                && !training
                                    .framework
                                    .runs_zero3_with_experts(tp, base.cp, base.etp))
                        {
                            continue;
                        }
                        // Resharding after forward only means something for ZeRO-3 with more than
                        // one shard, and keeping the gathered parameters is searched only where the
                        // framework can (`TrainingFramework::keeps_gathered_parameters`).
                        let reshard_choices = |dp_replicas: u32| -> &[bool] {
                            if zero == 3
                                && dp * base.cp > 1
                                && training.framework.keeps_gathered_parameters(
                                    pp,
                                    base.ep,
                                    model.tied_embeddings,
                                    dp_replicas,
                                )
                            {
                                &[true, false]
                            } else {
                                &[true]
                            }
                        };
                        // Copies of the sharded states where the framework keeps several at this
                        // stage (`TrainingFramework::dp_replicas_refusal`).
                        let replicas: &[u32] = if zero >= 1
                            && training.framework.dp_replicas_refusal(zero).is_none()
                        {
                            replica_choices
                        } else {
                            &[1]
                        };
                        for &dp_replicas in replicas {
                            for &reshard_after_forward in reshard_choices(dp_replicas) {
                                for recompute_num_layers in
                                    recompute_layer_choices(training.framework, recompute, chunk)
                                {
                                    requests.push(PlanRequest {
                                        vpp,
                                        micro_batch,
                                        sequence_parallel,
                                        recompute,
                                        zero,
                                        reshard_after_forward,
                                        recompute_num_layers,
                                        dp_replicas,
                                        ..base
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Layers per chunk full recompute may cover: all (0), or Megatron's block method with a quarter,
/// a half or three quarters of the chunk's layers, which trade memory for compute in between.
fn recompute_layer_choices(
    framework: crate::training::TrainingFramework,
    recompute: Recompute,
    chunk: u32,
) -> Vec<u32> {
    if recompute != Recompute::Full || chunk < 4 || !framework.recomputes_some_layers() {
        return vec![0];
    }
    let mut choices = vec![0, chunk / 4, chunk / 2, 3 * chunk / 4];
    choices.dedup();
    choices
}

/// A total order on plans for tie-breaking: smaller degrees and simpler settings first.
fn plan_key(plan: &ParallelPlan) -> PlanKey {
    (
        plan.tp,
        plan.cp,
        plan.pp,
        plan.dp,
        plan.vpp,
        plan.micro_batch,
        plan.sequence_parallel,
        plan.recompute,
        plan.zero,
        !plan.reshard_after_forward,
        plan.recompute_num_layers,
        plan.dp_replicas,
    )
}

/// Ranking: feasible before infeasible; feasible by throughput (highest first), then by memory
/// (lowest first); infeasible by memory (lowest first); then by the plan key. `total_cmp` keeps it a
/// total order.
fn rank(a: &Estimate, b: &Estimate) -> std::cmp::Ordering {
    RankKey::of(a).cmp(&RankKey::of(b))
}

/// What [`rank`] compares, small enough to sort hundreds of thousands of plans by without touching
/// their estimates again.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RankKey {
    infeasible: bool,
    /// Feasible: throughput, negated so that the highest comes first; infeasible: memory.
    first: TotalOrder,
    /// Feasible: memory; infeasible: nothing (0).
    second: TotalOrder,
    plan: PlanKey,
}

type PlanKey = (
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    bool,
    Recompute,
    u8,
    bool,
    u32,
    u32,
);

impl RankKey {
    fn of(estimate: &Estimate) -> Self {
        let memory_bytes = estimate.memory.total_bytes.0;
        let (first, second) = if estimate.fits() {
            (-estimate.tokens_per_s, memory_bytes)
        } else {
            (memory_bytes, 0.0)
        };
        RankKey {
            infeasible: !estimate.fits(),
            first: TotalOrder(first),
            second: TotalOrder(second),
            plan: plan_key(&estimate.plan),
        }
    }
}

/// An `f64` ordered by `total_cmp`.
#[derive(Debug, Clone, Copy)]
struct TotalOrder(f64);

impl PartialEq for TotalOrder {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for TotalOrder {}
impl PartialOrd for TotalOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TotalOrder {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Runs the search.
pub fn search(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> SearchResult {
    search_with(model, cluster, training, options, PinnedOut::Counted)
}

/// The search for a caller that reads its plans, not its statistics: the tp, cp and pp degrees
/// the pins rule out are never listed, so its `candidates` and `ruled_out_by_pins` count only
/// what was enumerated. The plans, and their order, are those of [`search`].
pub fn search_within_pins(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> SearchResult {
    search_with(model, cluster, training, options, PinnedOut::Skipped)
}

fn search_with(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
    pinned_out: PinnedOut,
) -> SearchResult {
    let started = Instant::now();
    let requests = enumerate_with(model, cluster, training, options, pinned_out);
    // Estimates are large (hundreds of bytes) and a wide search keeps hundreds of thousands of
    // them: the plans are built first (small), and each valid plan's estimate is written once,
    // straight into its slot of one allocation, in enumeration order; they are then ranked by
    // sorting their indices and permuting in place, so no estimate is moved into a second
    // buffer or held twice.
    let (valid, refused): (Vec<(&PlanRequest, ParallelPlan)>, Vec<&'static str>) = requests
        .par_iter()
        .map(|request| {
            if !options.pins.admit(request) {
                return Either::Right("ruled_out_by_pins");
            }
            match ParallelPlan::build(request, model, cluster, training) {
                Ok(plan) => Either::Left((request, plan)),
                // The local batch (torchtitan's schedules per step) gets its own count.
                Err(
                    crate::plan::PlanError::LocalBatch { .. }
                    | crate::plan::PlanError::VppScheduleMicrobatches { .. },
                ) => Either::Right("local_batch_split"),
                // Megatron-Core's limit on the layers kept in bf16 per pipeline stage.
                Err(crate::plan::PlanError::Bf16LayersPastStage { .. }) => {
                    Either::Right("bf16_layers_past_stage")
                }
                Err(_) => Either::Right("invalid_plan"),
            }
        })
        .partition_map(|outcome| outcome);
    let mut ranked = Vec::with_capacity(valid.len());
    valid
        .par_iter()
        .map(|(request, plan)| {
            let own = evaluate(model, cluster, training, plan);
            match options.pins.stage_split {
                StageSplitPin::Searched if options.allow_uneven_pp => {
                    fastest_split(model, cluster, training, request, plan, own)
                }
                _ => own,
            }
        })
        .collect_into_vec(&mut ranked);
    // The plans are read only to evaluate them: freed before the sort allocates its keys.
    drop(valid);
    let mut infeasible_by_reason = BTreeMap::new();
    let infeasible_reasons = ranked
        .iter()
        .filter_map(|estimate| estimate.infeasible.map(|reason| reason.key()));
    for reason in infeasible_reasons.chain(refused) {
        *infeasible_by_reason.entry(reason.to_string()).or_insert(0) += 1;
    }
    let mut order: Vec<usize> = (0..ranked.len()).collect();
    order.par_sort_by_cached_key(|&index| RankKey::of(&ranked[index]));
    permute_in_place(&mut ranked, order);
    let feasible = ranked.iter().filter(|e| e.fits()).count() as u64;
    SearchResult {
        stats: SearchStats {
            candidates: requests.len() as u64,
            feasible,
            infeasible_by_reason,
            elapsed_s: started.elapsed().as_secs_f64(),
            threads: rayon::current_num_threads(),
            pinned: Vec::new(),
        },
        ranked,
    }
}

/// Reorders `items` so that the k-th becomes the old `order[k]`-th (`order` a permutation of the
/// indices), following each cycle with swaps.
fn permute_in_place<T>(items: &mut [T], mut order: Vec<usize>) {
    const DONE: usize = usize::MAX;
    for start in 0..items.len() {
        let mut slot = start;
        while order[slot] != DONE {
            let source = order[slot];
            order[slot] = DONE;
            if source == start {
                break;
            }
            items.swap(slot, source);
            slot = source;
        }
    }
}

/// A first/last split replaces tpsim's own only when it is this much faster on the closed form:
/// where the closed form ties (the same slowest stage), the schedule simulation can still tell
/// them apart either way, and tpsim's own split is kept.
const SPLIT_GAIN_NEEDED: f64 = 1e-3;

/// `own` (the estimate with tpsim's split) or, for a pipeline without interleaving, the fastest of
/// the first/last splits (`plan::first_last_splits`) that builds: a split replaces the one kept
/// where it fits and the kept one does not, or both fit and it is faster by more than
/// [`SPLIT_GAIN_NEEDED`].
fn fastest_split(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    request: &PlanRequest,
    plan: &ParallelPlan,
    own: Estimate,
) -> Estimate {
    if plan.pp < 2 || plan.vpp > 1 {
        return own;
    }
    let better = |e: &Estimate, best: &Estimate| match (e.fits(), best.fits()) {
        (true, false) => true,
        (false, _) => false,
        (true, true) => e.time.step_s.0 < best.time.step_s.0 * (1.0 - SPLIT_GAIN_NEEDED),
    };
    let own_split = (plan.stages.first, plan.stages.last);
    crate::plan::first_last_splits(model.layers, request.pp, model.mtp_layers)
        .into_iter()
        .filter(|&split| split != own_split)
        .filter_map(|split| {
            let candidate = PlanRequest {
                stage_split: Some(split),
                ..*request
            };
            ParallelPlan::build(&candidate, model, cluster, training)
                .ok()
                .map(|p| evaluate(model, cluster, training, &p))
        })
        .fold(own, |best, e| if better(&e, &best) { e } else { best })
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

/// Whether two estimates are one row of a folded top list: the same degrees, vpp and micro-batch,
/// both fitting or both not, and the same step time and memory (to 1e-9 relative), so the
/// settings they differ in change nothing (`fold_equivalent`).
pub fn folds_together(a: &Estimate, b: &Estimate) -> bool {
    let same = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
    let (p, q) = (&a.plan, &b.plan);
    (p.tp, p.cp, p.pp, p.dp, p.ep, p.etp, p.vpp, p.micro_batch)
        == (q.tp, q.cp, q.pp, q.dp, q.ep, q.etp, q.vpp, q.micro_batch)
        && a.fits() == b.fits()
        && same(a.time.step_s.0, b.time.step_s.0)
        && same(a.memory.total_bytes.0, b.memory.total_bytes.0)
}

/// The indices of `plans` that stay rows of a folded top list (`fold_equivalent` keeps the first
/// of each set of twins), in order: what numbers a figure's bars as the table numbers its rows.
pub fn fold_firsts(plans: &[Estimate]) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for (i, e) in plans.iter().enumerate() {
        if !kept.iter().any(|&k| folds_together(&plans[k], e)) {
            kept.push(i);
        }
    }
    kept
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
/// degrees (tp, cp, pp, dp, ep, etp, vpp) and micro-batch, same step time and same memory (to 1e-9
/// relative), differing in ZeRO stage, sequence parallelism, recompute, resharding or precision — e.g. ZeRO stages at dp = 1, where there is
/// nothing to shard. The first (best-ranked) of each set stays, in order; the others become its
/// alternatives.
pub fn fold_equivalent(plans: &[Estimate]) -> Vec<FoldedRow> {
    let mut rows: Vec<FoldedRow> = Vec::new();
    for e in plans {
        let p = &e.plan;
        let twin = rows.iter_mut().find(|row| folds_together(&row.estimate, e));
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
                if q.reshard_after_forward != p.reshard_after_forward {
                    diff.push(format!(
                        "reshard after forward {}",
                        if p.reshard_after_forward { "yes" } else { "no" }
                    ));
                }
                if q.precision != p.precision {
                    diff.push(format!("precision {}", p.precision.as_str()));
                }
                if q.dp_replicas != p.dp_replicas {
                    diff.push(format!("dp replicas {}", p.dp_replicas));
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

    /// llama3-8b at tp 8 with selective recompute on `nodes` H100 nodes, one estimate per stage
    /// of `zeros`.
    fn estimates_by_zero(
        nodes: u32,
        global_batch: u32,
        zeros: std::ops::RangeInclusive<u8>,
    ) -> Vec<Estimate> {
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronLm2021,
            model.seq_len,
            global_batch,
            AttentionKernel::Flash,
        );
        zeros
            .map(|zero| {
                let request = PlanRequest {
                    tp: 8,
                    pp: 1,
                    dp: nodes,
                    vpp: 1,
                    micro_batch: 1,
                    sequence_parallel: true,
                    recompute: Recompute::Selective,
                    zero,
                    allow_uneven_pp: false,
                    allow_cross_node_tp: false,
                    ..PlanRequest::default()
                };
                let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                evaluate(&model, &cluster, &training, &plan)
            })
            .collect()
    }

    #[test]
    fn permuting_in_place_puts_each_item_where_the_order_says() {
        let mut items = vec!['a', 'b', 'c', 'd', 'e', 'f'];
        // Two cycles (0 -> 3 -> 1, 2 -> 5) and a fixed point (4).
        permute_in_place(&mut items, vec![3, 0, 5, 1, 4, 2]);
        assert_eq!(items, vec!['d', 'a', 'f', 'b', 'e', 'c']);
    }

    #[test]
    fn zero_stages_at_dp_1_fold_into_one_row() {
        // One node, tp 8: dp = 1, so every ZeRO stage shards over one rank and changes nothing.
        let estimates = estimates_by_zero(1, 8, 0..=3);
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
        let estimates = estimates_by_zero(2, 16, 0..=1);
        assert_eq!(fold_equivalent(&estimates).len(), 2);
        assert!(folded_note(&fold_equivalent(&estimates)).is_none());
    }
}

#[cfg(test)]
mod pinned_search_tests {
    use super::*;

    /// Skipping the subtrees the pins rule out finds the same plans, in the same order, as listing
    /// and counting them: only the statistics differ.
    #[test]
    fn searching_within_the_pins_finds_what_the_full_search_finds() {
        let model = crate::specs::load_model("mixtral-8x7b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            256,
            AttentionKernel::Flash,
        );
        for pins in [
            Pins {
                pp: Some(1),
                recompute: Some(Recompute::None),
                ..Pins::default()
            },
            Pins {
                tp: Some(2),
                cp: Some(2),
                pp: Some(4),
                ..Pins::default()
            },
        ] {
            let options = SearchOptions {
                pins,
                ..SearchOptions::default()
            };
            let full = search(&model, &cluster, &training, options);
            let within = search_within_pins(&model, &cluster, &training, options);
            assert!(!full.ranked.is_empty());
            assert_eq!(full.ranked.len(), within.ranked.len(), "{pins:?}");
            for (a, b) in full.ranked.iter().zip(&within.ranked) {
                assert_eq!(a.plan, b.plan, "{pins:?}");
                assert_eq!(a.time.step_s, b.time.step_s, "{pins:?}");
            }
            assert!(within.stats.candidates < full.stats.candidates, "{pins:?}");
        }
    }
}
