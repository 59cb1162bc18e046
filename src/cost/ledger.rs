//! The communication ledger: every collective one GPU issues in a step, row by row, with the same
//! volumes and times `evaluate` sums up in its terms (`Estimate::terms`, `Estimate::comm`). Pure
//! and allocating, so it is built only for the plans a report shows, never in the search's hot path.
//! Each row belongs to one of the plan's groups (`groups.rs`), whose link and speed it uses.
//!
//! Sources, per group:
//! - TP: Megatron's column-then-row split (Shoeybi et al. 2019 §3, Fig. 4): the row-split attention
//!   output projection and MLP second GEMM end in an all-reduce (`g`) in forward; the column-split
//!   QKV and MLP first GEMM start with an identity whose backward all-reduces the input gradient
//!   (`f`). With sequence parallelism each all-reduce becomes an all-gather before the column split
//!   and a reduce-scatter after the row split, and backward swaps them (Korthikanti et al. 2022
//!   §4.2.2, Fig. 5); the volume is the same. Full recompute repeats the forward pair (§4.1), on the
//!   recomputed share of the layers (`ParallelPlan::recompute_share`, Megatron's block recompute);
//!   selective recompute repeats only the attention core, which issues no collective (§5).
//! - CP: Transformer Engine's P2P ring attention (`AttnFuncWithCPAndKVP2P`): cp − 1 ring steps per
//!   layer in forward, each passing the rank's K/V chunk (`comm::cp_kv_chunk_bytes`) to the next CP
//!   rank; backward passes K/V and the accumulated dK/dV around the ring; full recompute repeats the
//!   forward ring. A hybrid stack's attention blocks only, and beside them its Mamba mixers' six
//!   all-to-alls each way (`MambaContextParallel`, `cost::hybrid::MambaExchange`).
//! - EP: Megatron-Core's alltoall token dispatcher (`MoEAlltoAllTokenDispatcher`) or DeepEP (the
//!   flex dispatcher): per MoE layer a dispatch all-to-all (routed token copies, or under DeepEP
//!   one copy per GPU reached, to their experts' GPUs) and a combine all-to-all (the expert outputs
//!   back), their gradients in backward, the forward pair again under full recompute; bytes and
//!   time from `moe::alltoall_bytes`, `comm::alltoall_s` and `moe::ep_dispatch_speed` (every pair
//!   talks; DeepEP forwards across NVLink domains).
//! - PP: one activation send forward and one gradient send backward per micro-batch per model chunk
//!   at each stage boundary, b·s·h/t bytes with Megatron's scatter/gather (Narayanan et al. 2021 §4.1).
//! - DP: ZeRO (Rajbhandari et al. 2020 §7), in `comm::dp_traffic`'s shape: plain DP all-reduces
//!   gradients once per step; ZeRO-1/2 reduce-scatter gradients (once, or every micro-batch for
//!   ZeRO-2) and all-gather updated weights after the optimizer step; ZeRO-3 reduce-scatters every
//!   micro-batch and all-gathers the weights before each forward, and before the backward (and
//!   recompute) unless they are kept from the forward (FSDP2 `reshard_after_forward=False`). Dense
//!   parameters are reduced over the DP×CP group; an MoE model's expert parameters over expert-DP
//!   (Megatron-Core parallel folding, `moe.rs`).
//!
//! Counts are per GPU of the stage `evaluate` reports on: TP and CP rows repeat once per layer of
//! the slowest stage (the one whose time sets the step, `cost::slowest_stage`) and per
//! micro-batch, EP rows once per MoE layer of that stage; DP rows cover the stage with the most
//! parameters. A count follows `evaluate`'s shares without rounding, so it is fractional where a
//! share is: the recomputed layers (`ParallelPlan::recompute_share`), the MLPs
//! `--recompute-modules` runs again, and the TP pairs of MoE layers at the slowest stage's own MoE
//! share (`moe::mlp_tp_pair_share_at`); each group's step total is then exactly `Estimate::comm`'s.

use serde::Serialize;

use super::comm::{self, Collective};
use super::groups::{self, GroupKind};
use super::moe;
use crate::cluster::{Cluster, Link, LinkSpeed};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::Training;

/// The communication operation of a row: a ring collective, a point-to-point send, or the MoE
/// token all-to-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    SendRecv,
    AllToAll,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::AllReduce => "all-reduce",
            Op::AllGather => "all-gather",
            Op::ReduceScatter => "reduce-scatter",
            Op::SendRecv => "send/recv",
            Op::AllToAll => "all-to-all",
        }
    }

    fn collective(self) -> Option<Collective> {
        match self {
            Op::AllReduce => Some(Collective::AllReduce),
            Op::AllGather => Some(Collective::AllGather),
            Op::ReduceScatter => Some(Collective::ReduceScatter),
            Op::SendRecv => Some(Collective::SendRecv),
            Op::AllToAll => None,
        }
    }

    /// Bytes one rank sends per byte of the full tensor: nccl-tests' bus factor for the ring
    /// collectives; (n − 1)/n for the all-to-all, which keeps its own share.
    pub fn wire_factor(self, ranks: u32) -> f64 {
        match self.collective() {
            Some(c) => c.wire_factor(ranks),
            None => {
                let n = f64::from(ranks);
                (n - 1.0) / n
            }
        }
    }

    /// Time of one occurrence on `tensor_bytes` among `ranks` at `speed`.
    pub fn time(self, tensor_bytes: f64, ranks: u32, speed: LinkSpeed) -> f64 {
        match self.collective() {
            Some(c) => c.time(tensor_bytes, ranks, speed),
            None => comm::alltoall_s(self.wire_factor(ranks) * tensor_bytes, ranks, speed),
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
    /// Once per CP ring step (cp − 1 of them) per layer per micro-batch.
    PerRingStepPerLayerPerMicrobatch,
    /// Once per CP rank (cp of them) per layer per micro-batch: PyTorch's ring passes the dK/dV
    /// accumulators one hop per step, the last hop back to their owner.
    PerCpRankPerLayerPerMicrobatch,
    /// Once per MoE layer per micro-batch.
    PerMoeLayerPerMicrobatch,
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
            Scope::PerRingStepPerLayerPerMicrobatch => {
                "per ring step (cp − 1) per layer per micro-batch"
            }
            Scope::PerCpRankPerLayerPerMicrobatch => "per CP rank (cp) per layer per micro-batch",
            Scope::PerMoeLayerPerMicrobatch => "per MoE layer per micro-batch",
            Scope::PerChunkPerMicrobatch => "per chunk per micro-batch",
            Scope::PerMicrobatch => "per micro-batch",
            Scope::PerStep => "per step",
        }
    }
}

/// One collective, as issued once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerEntry {
    pub group: GroupKind,
    pub op: Op,
    pub pass: Pass,
    /// What in the model issues it (e.g. "attention output projection (row split)").
    pub site: &'static str,
    pub scope: Scope,
    /// How many times it happens in one step on one GPU. Whole, except where it follows
    /// `evaluate`'s average share of a stage's MoE layers or recomputed layers (module docs): then
    /// the average number per stage, e.g. 4.5 = 1.5 MoE layers a stage on average (3 layers, every
    /// second one MoE) × 3 micro-batches, where a real stage runs 1 or 2. JSON writes a whole
    /// count as an integer.
    #[serde(serialize_with = "serialize_count")]
    pub count: f64,
    pub ranks: u32,
    /// The full tensor the collective operates on.
    pub tensor_bytes: f64,
    /// Bytes this GPU sends for one occurrence (ring algorithm, nccl-tests' bus factor).
    pub wire_bytes: f64,
    pub link: Link,
    /// Time of one occurrence on that link (α-β model of `comm::Collective::time`,
    /// `comm::alltoall_s` for the all-to-all).
    pub time_s: f64,
    /// Issued by the layers a low-precision plan keeps in bf16 (`pipeline::Bf16Keep`), whose
    /// sequence-parallel all-gathers carry bf16: listed apart from the same site's other layers.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bf16_layers: bool,
}

/// The slowest stage's layers as the TP collectives count them: all of them at the plan's
/// precision, or, where some are kept in bf16, the others and those apart.
struct TpPart {
    /// Layers of the stage in this part (fractional where the stage's mix is split).
    layers: f64,
    mix: super::LayerMix,
    gather_scale: comm::SpGatherScale,
    bf16: bool,
}

/// [`TpPart`]s of the slowest stage (`layers` layers of `mix`, `bf16` of them in bf16): the part
/// at the plan's precision holds the stage's block counts less the bf16 layers', so that the two
/// sum to what `cost::with_bf16_layers` prices.
fn tp_parts(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    mix: super::LayerMix,
    layers: u32,
    bf16: Option<super::pipeline::Bf16Run>,
) -> Vec<TpPart> {
    let whole = TpPart {
        layers: f64::from(layers),
        mix,
        gather_scale: comm::sp_gather_scale(training, plan),
        bf16: false,
    };
    let Some(b) = bf16.filter(|b| b.layers > 0 && plan.precision != crate::plan::Precision::Bf16)
    else {
        return vec![whole];
    };
    let part = super::LayerMix::of(model, b.layers, b.moe_layers, b.run);
    let (n, nb) = (f64::from(layers), f64::from(b.layers.min(layers)));
    let rest = n - nb;
    // The other layers' shares: the stage's totals less the bf16 layers', over what remains.
    let less = |all: f64, of_part: f64| {
        if rest > 0.0 {
            (n * all - nb * of_part) / rest
        } else {
            0.0
        }
    };
    let rest_mix = super::LayerMix {
        moe_share: less(mix.moe_share, part.moe_share),
        blocks: crate::model::BlockShares {
            attention: less(mix.blocks.attention, part.blocks.attention),
            mlp: less(mix.blocks.mlp, part.blocks.mlp),
            mamba: less(mix.blocks.mamba, part.blocks.mamba),
            norms: less(mix.blocks.norms, part.blocks.norms),
        },
        ..mix
    };
    let bf16_plan = ParallelPlan {
        precision: crate::plan::Precision::Bf16,
        ..*plan
    };
    vec![
        TpPart {
            layers: rest,
            mix: rest_mix,
            ..whole
        },
        TpPart {
            layers: nb,
            mix: part,
            gather_scale: comm::sp_gather_scale(training, &bf16_plan),
            bf16: true,
        },
    ]
}

/// A whole count as an integer, a fractional one as a float.
fn serialize_count<S: serde::Serializer>(count: &f64, s: S) -> Result<S::Ok, S::Error> {
    if count.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(count) {
        s.serialize_u64(*count as u64)
    } else {
        s.serialize_f64(*count)
    }
}

/// All collectives of one plan, with their step totals per `Estimate::comm` group (`comm_group`:
/// `ep_wire_bytes` counts expert TP too, `dp_wire_bytes` the expert gradients over expert-DP, as
/// `Estimate::comm.ep` and `.dp` do).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ledger {
    pub entries: Vec<LedgerEntry>,
    pub tp_wire_bytes: f64,
    pub cp_wire_bytes: f64,
    pub ep_wire_bytes: f64,
    pub pp_wire_bytes: f64,
    pub dp_wire_bytes: f64,
}

impl Ledger {
    /// Bytes one GPU sends in a step in groups of `kind`: the sum of count × wire bytes.
    pub fn step_wire_bytes(entries: &[LedgerEntry], kind: GroupKind) -> f64 {
        entries
            .iter()
            .filter(|e| e.group == kind)
            .map(|e| e.count * e.wire_bytes)
            .sum()
    }

    /// Time one GPU spends in a step in groups of `kind`, before any overlap: count × time.
    pub fn step_time_s(&self, kind: GroupKind) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.group == kind)
            .map(|e| e.count * e.time_s)
            .sum()
    }

    /// Time one GPU spends in a step in what `Estimate::comm` counts under `group`
    /// (`comm_group`), before any overlap: its `comm.*.time_s`.
    pub fn comm_time_s(&self, group: GroupKind) -> f64 {
        GroupKind::ALL
            .into_iter()
            .filter(|&kind| comm_group(kind) == group)
            .map(|kind| self.step_time_s(kind))
            .sum()
    }

    /// Bytes one GPU sends in a step that `Estimate::comm` counts under `group` (`comm_group`).
    fn comm_wire_bytes(entries: &[LedgerEntry], group: GroupKind) -> f64 {
        GroupKind::ALL
            .into_iter()
            .filter(|&kind| comm_group(kind) == group)
            .map(|kind| Ledger::step_wire_bytes(entries, kind))
            .sum()
    }

    /// The step totals of each `Estimate::comm` group that has traffic, in its order (TP, CP, EP,
    /// PP, DP), each equal to that group's `comm.*.wire_bytes`, with the ledger groups it holds.
    pub fn totals(&self) -> Vec<GroupTotal> {
        COMM_GROUPS
            .into_iter()
            .map(|group| GroupTotal {
                group,
                wire_bytes: Ledger::comm_wire_bytes(&self.entries, group),
                parts: GroupKind::ALL
                    .into_iter()
                    .filter(|&kind| comm_group(kind) == group)
                    .map(|kind| (kind, Ledger::step_wire_bytes(&self.entries, kind)))
                    .filter(|(_, bytes)| *bytes > 0.0)
                    .collect(),
            })
            .filter(|t| t.wire_bytes > 0.0)
            .collect()
    }
}

/// The groups `Estimate::comm` reports, in its order.
const COMM_GROUPS: [GroupKind; 5] = [
    GroupKind::Tp,
    GroupKind::Cp,
    GroupKind::Ep,
    GroupKind::Pp,
    GroupKind::Dp,
];

/// The `Estimate::comm` group whose traffic a ledger group's rows count in, as `evaluate` sums
/// them: expert TP's gathers and scatters sit in the EP term beside the all-to-alls, the expert
/// gradients over expert-DP in the DP terms (Megatron-Core parallel folding, `moe.rs`).
pub fn comm_group(kind: GroupKind) -> GroupKind {
    match kind {
        GroupKind::ExpertTp => GroupKind::Ep,
        GroupKind::ExpertDp | GroupKind::DpReplica | GroupKind::ExpertDpReplica => GroupKind::Dp,
        kind => kind,
    }
}

/// One `Estimate::comm` group's step total in the ledger, and the ledger groups that make it up
/// (EP: the all-to-alls and expert TP; DP: dense and expert gradients), those with traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTotal {
    pub group: GroupKind,
    /// Bytes one GPU sends in a step: `comm.*.wire_bytes` of `group`.
    pub wire_bytes: f64,
    pub parts: Vec<(GroupKind, f64)>,
}

/// A collective and where in the layer it runs.
type Site = (Op, &'static str);

/// `count` scaled by the recomputed share of the layers (Megatron's block recompute), unrounded
/// as `evaluate` scales it.
fn recomputed(count: f64, plan: &ParallelPlan) -> f64 {
    count * plan.recompute_share()
}

/// How often an MoE layer's forward token collectives run again: full recompute's share, or every
/// time under `--recompute-modules moe` (`module_recompute::moe_alltoall_repeats`).
fn moe_recomputed(count: f64, training: &Training, plan: &ParallelPlan) -> f64 {
    let repeats = plan.recompute_share()
        + super::module_recompute::moe_alltoall_repeats(super::recomputed_modules(training, plan));
    count * repeats
}

/// Builds the ledger of `plan`.
pub fn ledger(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Ledger {
    let groups = groups::groups(cluster, plan);
    let m = f64::from(plan.num_microbatches);
    let max_layers = super::pipeline::max_stage_layers(model, plan);
    // Per-layer collectives are counted on the stage whose time sets the step, as `evaluate`'s
    // terms count them.
    let super::SlowestStage {
        layers: slowest_layers,
        moe_layers: slowest_moe_layers,
        sends: slowest_sends,
        run: slowest_run,
        bf16: slowest_bf16,
    } = super::slowest_stage(model, cluster, training, plan);
    // What its average layer holds of each block (a hybrid stack's stage, its slice of the
    // pattern) and its mix of dense and MoE layers, as `evaluate` costs it (`cost::MixCosts`).
    let slowest_mix = super::LayerMix::of(model, slowest_layers, slowest_moe_layers, slowest_run);
    let mut entries = Vec::new();
    // The EP group's all-to-alls run at the dispatcher's speed (DeepEP forwards across domains).
    let ep_speed = moe::ep_dispatch_speed(
        model,
        cluster,
        plan,
        training.moe_dispatch,
        groups.get(GroupKind::Ep),
    );
    // Set while the entries of the slowest stage's layers kept in bf16 are pushed.
    let on_bf16_layers = std::cell::Cell::new(false);
    let mut push = |kind: GroupKind, op: Op, pass, site, scope, count, ranks, tensor: f64| {
        let group = groups.get(kind);
        if count <= 0.0 {
            return;
        }
        let speed = if kind == GroupKind::Ep {
            ep_speed
        } else {
            group.speed
        };
        entries.push(LedgerEntry {
            group: kind,
            op,
            pass,
            site,
            scope,
            count,
            ranks,
            tensor_bytes: tensor,
            wire_bytes: op.wire_factor(ranks) * tensor,
            link: group.link,
            time_s: op.time(tensor, ranks, speed),
            bf16_layers: on_bf16_layers.get(),
        });
    };

    // TP, per layer per micro-batch, on the slowest stage: its layers at the plan's precision and,
    // apart, those kept in bf16 (`pipeline::Bf16Keep`), whose sequence-parallel all-gathers carry
    // bf16 (`cost::with_bf16_layers` prices them so).
    for part in tp_parts(
        model,
        training,
        plan,
        slowest_mix,
        slowest_layers,
        slowest_bf16,
    ) {
        if plan.tp <= 1 || part.layers <= 0.0 {
            continue;
        }
        on_bf16_layers.set(part.bf16);
        let slowest_mix = part.mix;
        let slowest_blocks = part.mix.blocks;
        let slowest_moe_share = part.mix.moe_share;
        let tensor = comm::tp_tensor_bytes(model, training, plan);
        let count = part.layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let t = plan.tp;
        // torchtitan's per-op selective AC runs the all-gathers (or all-reduces) again, not the
        // reduce-scatters, whose outputs it saves (`SelectiveRecompute::AlternateMatmuls`).
        let per_op_sac = training.per_op_sac(plan.recompute);
        // The forward pair's collectives, the attention's then the MLP's: with sequence
        // parallelism an all-gather before each column-split GEMM and a reduce-scatter after each
        // row-split one, without it an all-reduce after each row-split GEMM.
        let (attention_sites, mlp_sites): (&[Site], &[Site]) = if plan.sequence_parallel {
            (
                &[
                    (
                        Op::AllGather,
                        "before attention QKV (column split): gather the sequence-split input",
                    ),
                    (
                        Op::ReduceScatter,
                        "after attention output projection (row split): sum partial outputs, split by sequence",
                    ),
                ],
                &[
                    (
                        Op::AllGather,
                        "before MLP first GEMM (column split): gather the sequence-split input",
                    ),
                    (
                        Op::ReduceScatter,
                        "after MLP second GEMM (row split): sum partial outputs, split by sequence",
                    ),
                ],
            )
        } else {
            (
                &[(
                    Op::AllReduce,
                    "after attention output projection (row split): sum partial outputs",
                )],
                &[(
                    Op::AllReduce,
                    "after MLP second GEMM (row split): sum partial outputs",
                )],
            )
        };
        // The MLP side's collectives run on the layers whose MLP has them (`moe::
        // mlp_tp_pair_share_at`: Megatron-Core's MoE layers without shared experts have none).
        // A hybrid stack's layer holds each block's share (`LayerMix::blocks`, the slowest
        // stage's): its attention and Mamba blocks each run one column- then row-parallel pair, at
        // the attention's sites.
        let shares = slowest_blocks;
        let mlp_share =
            shares.mlp - 1.0 + moe::mlp_tp_pair_share_at(model, training, slowest_moe_share);
        let attention_share = shares.attention + shares.mamba;
        let site_of = |site: &'static str| {
            if model.is_hybrid() {
                hybrid_site(site)
            } else {
                site
            }
        };
        // Low-precision training all-gathers quantized copies under sequence parallelism
        // (`comm::sp_gather_scale`); the reduce-scatters carry bf16.
        let gather_scale = part.gather_scale;
        let forward_tensor = |op: Op| {
            if op == Op::AllGather {
                gather_scale.forward * tensor
            } else {
                tensor
            }
        };
        let mut forward_pair = |pass: Pass| {
            let count = match (pass, plan.recompute) {
                (Pass::Recompute, Recompute::Full) => recomputed(count, plan),
                _ => count,
            };
            let sites = attention_sites
                .iter()
                .map(|s| (s, count * attention_share))
                .chain(mlp_sites.iter().map(|s| (s, count * mlp_share)));
            for (&(op, site), count) in sites {
                let site = site_of(site);
                if pass == Pass::Recompute && per_op_sac && op == Op::ReduceScatter {
                    continue;
                }
                if count > 0.0 {
                    push(
                        GroupKind::Tp,
                        op,
                        pass,
                        site,
                        scope,
                        count,
                        t,
                        forward_tensor(op),
                    );
                }
            }
        };
        forward_pair(Pass::Forward);
        if plan.recompute == Recompute::Full || per_op_sac {
            forward_pair(Pass::Recompute);
        }
        // `--recompute-modules mlp` / `moe` run the dense / MoE layers' MLP again, its
        // collectives with it.
        if let Some(modules) = super::recomputed_modules(training, plan) {
            let repeats = modules.mlp_pair_repeats(
                slowest_mix.dense_mlp_share(),
                slowest_moe_share,
                moe::moe_mlp_has_tp_pair(model, training),
            );
            let mlp_count = count * repeats;
            if mlp_count > 0.0 {
                for &(op, site) in mlp_sites {
                    push(
                        GroupKind::Tp,
                        op,
                        Pass::Recompute,
                        site,
                        scope,
                        mlp_count,
                        t,
                        forward_tensor(op),
                    );
                }
            }
        }
        let mlp_count = count * mlp_share;
        let regather_count = if training.framework.sp_keeps_gathered_inputs() {
            0.0
        } else {
            count
        };
        let attention_count = count * attention_share;
        if plan.sequence_parallel {
            for (op, site, count, scale) in [
                (
                    Op::ReduceScatter,
                    site_of("attention QKV input gradient (conjugate of the all-gather)"),
                    attention_count,
                    1.0,
                ),
                (
                    Op::AllGather,
                    site_of("attention output gradient (conjugate of the reduce-scatter)"),
                    attention_count,
                    gather_scale.grad,
                ),
                (
                    Op::ReduceScatter,
                    "MLP first GEMM input gradient (conjugate of the all-gather)",
                    mlp_count,
                    1.0,
                ),
                (
                    Op::AllGather,
                    "MLP output gradient (conjugate of the reduce-scatter)",
                    mlp_count,
                    gather_scale.grad,
                ),
                // Megatron re-gathers the column-parallel inputs it kept as sequence shards, for
                // the weight gradients (`regathers` in `cost::unit_costs`); torchtitan kept them.
                (
                    Op::AllGather,
                    site_of(
                        "attention QKV input again, for its weight gradient (the forward kept the sequence shard)",
                    ),
                    regather_count * attention_share,
                    gather_scale.regather,
                ),
                (
                    Op::AllGather,
                    "MLP first GEMM input again, for its weight gradient (the forward kept the sequence shard)",
                    regather_count * mlp_share,
                    gather_scale.regather,
                ),
            ] {
                if count > 0.0 {
                    push(
                        GroupKind::Tp,
                        op,
                        Pass::Backward,
                        site,
                        scope,
                        count,
                        t,
                        scale * tensor,
                    );
                }
            }
        } else {
            for (site, count) in [
                (
                    site_of("attention QKV input gradient (column split, Megatron's f)"),
                    attention_count,
                ),
                (
                    "MLP first GEMM input gradient (column split, Megatron's f)",
                    mlp_count,
                ),
            ] {
                if count > 0.0 {
                    push(
                        GroupKind::Tp,
                        Op::AllReduce,
                        Pass::Backward,
                        site,
                        scope,
                        count,
                        t,
                        tensor,
                    );
                }
            }
        }
    }

    on_bf16_layers.set(false);

    // How often each layer's forward exchange runs again: full recompute's share, or every layer
    // where selective recompute re-runs Transformer Engine's attention with its exchange.
    let cp_repeats = super::context_parallel::exchange_repeats(training, plan);
    // The attention blocks of the slowest stage's layers (all of them in a transformer): a hybrid
    // stack's exchange rows count its attention and Mamba blocks apart, at the stage's shares, as
    // `cost::unit_costs_at` prices them.
    let attention_layers = f64::from(slowest_layers) * slowest_mix.blocks.attention;
    // CP as PyTorch's context_parallel runs it: a K/V all-gather per layer in forward (again under
    // full recompute) and backward, and the fp32 dK/dV accumulators one hop per CP rank.
    if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::TorchAllGather {
        let kv = super::torch_ring::repeated_kv_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let gather = f64::from(c) * kv;
        let forward_site = "attention: all-gather every rank's K/V, repeated to every query head";
        push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            gather,
        );
        if cp_repeats > 0.0 {
            push(
                GroupKind::Cp,
                Op::AllGather,
                Pass::Recompute,
                forward_site,
                scope,
                count * cp_repeats,
                c,
                gather,
            );
        }
        push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Backward,
            "attention backward: all-gather every rank's K/V again",
            scope,
            count,
            c,
            gather,
        );
        push(
            GroupKind::Cp,
            Op::SendRecv,
            Pass::Backward,
            "attention backward: fp32 dK/dV accumulators to the next CP rank",
            Scope::PerCpRankPerLayerPerMicrobatch,
            count * f64::from(c),
            2,
            super::torch_ring::dkv_hop_bytes(kv),
        );
    } else if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::KvAllGather {
        // CP as Transformer Engine's all_gather: every rank's K/V gathered in forward (again under
        // full recompute) and backward, dK/dV reduce-scattered back (`context_parallel`).
        let gathered = f64::from(plan.cp) * comm::cp_kv_chunk_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward_site = "attention: all-gather every rank's K and V";
        push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            gathered,
        );
        if cp_repeats > 0.0 {
            push(
                GroupKind::Cp,
                Op::AllGather,
                Pass::Recompute,
                forward_site,
                scope,
                count * cp_repeats,
                c,
                gathered,
            );
        }
        push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Backward,
            "attention backward: all-gather every rank's K and V again",
            scope,
            count,
            c,
            gathered,
        );
        push(
            GroupKind::Cp,
            Op::ReduceScatter,
            Pass::Backward,
            "attention backward: dK and dV reduce-scattered to their owners",
            scope,
            count,
            c,
            gathered,
        );
    } else if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::HeadAllToAll {
        // CP as Transformer Engine's a2a (Ulysses): Q/K/V in and the output back per layer per
        // micro-batch, their gradients in backward (`context_parallel`).
        let (qkv, output) = super::context_parallel::all_to_all_tensor_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward = [
            (
                "attention: Q, K and V, sequence shards for head shards",
                qkv,
            ),
            (
                "attention: output, head shards back to sequence shards",
                output,
            ),
        ];
        for (site, tensor) in forward {
            push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Forward,
                site,
                scope,
                count,
                c,
                tensor,
            );
            if cp_repeats > 0.0 {
                push(
                    GroupKind::Cp,
                    Op::AllToAll,
                    Pass::Recompute,
                    site,
                    scope,
                    count * cp_repeats,
                    c,
                    tensor,
                );
            }
        }
        for (site, tensor) in [
            (
                "attention backward: output gradient, sequence shards for head shards",
                output,
            ),
            (
                "attention backward: dQ, dK and dV, head shards back to sequence shards",
                qkv,
            ),
        ] {
            push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Backward,
                site,
                scope,
                count,
                c,
                tensor,
            );
        }
    } else if plan.cp > 1 {
        // CP, cp − 1 ring steps per layer per micro-batch.
        let chunk = comm::cp_kv_chunk_bytes(model, training, plan);
        let count = f64::from(plan.cp - 1) * attention_layers * m;
        let scope = Scope::PerRingStepPerLayerPerMicrobatch;
        let c = plan.cp;
        let forward_site = "attention: this rank's K/V chunk to the next CP rank";
        push(
            GroupKind::Cp,
            Op::SendRecv,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            chunk,
        );
        if cp_repeats > 0.0 {
            let recompute = count * cp_repeats;
            push(
                GroupKind::Cp,
                Op::SendRecv,
                Pass::Recompute,
                forward_site,
                scope,
                recompute,
                c,
                chunk,
            );
        }
        for site in [
            "attention backward: K/V chunk to the next CP rank",
            "attention backward: accumulated dK/dV to the next CP rank",
        ] {
            push(
                GroupKind::Cp,
                Op::SendRecv,
                Pass::Backward,
                site,
                scope,
                count,
                c,
                chunk,
            );
        }
    }

    // A hybrid stack's Mamba mixers under CP: z, x, B, C and dt traded for head shards before the
    // conv, each by its own all-to-all, and the scan's output traded back; the gradients' reverse
    // all-to-alls in backward; the forward's again on full recompute's share
    // (`cost::hybrid::MambaExchange`, megatron/core/ssm/mamba_context_parallel.py).
    let mamba_count = f64::from(slowest_layers) * m * slowest_mix.blocks.mamba;
    if plan.cp > 1 && mamba_count > 0.0 {
        let exchange = super::hybrid::mamba_exchange(model, training.seq_len, plan);
        let [z, x, b, c_state, dt] = exchange.before_scan;
        let y = exchange.after_scan;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward = [
            ("Mamba mixer: z, sequence shards for head shards", z),
            ("Mamba mixer: x, sequence shards for head shards", x),
            (
                "Mamba mixer: B (with CP's group copies), sequence shards for head shards",
                b,
            ),
            (
                "Mamba mixer: C (with CP's group copies), sequence shards for head shards",
                c_state,
            ),
            ("Mamba mixer: dt, sequence shards for head shards", dt),
            (
                "Mamba mixer: scan output y, head shards back to sequence shards",
                y,
            ),
        ];
        let backward = [
            (
                "Mamba backward: gradient of y, sequence shards for head shards",
                y,
            ),
            (
                "Mamba backward: gradient of z, head shards back to sequence shards",
                z,
            ),
            (
                "Mamba backward: gradient of x, head shards back to sequence shards",
                x,
            ),
            (
                "Mamba backward: gradient of B, head shards back to sequence shards",
                b,
            ),
            (
                "Mamba backward: gradient of C, head shards back to sequence shards",
                c_state,
            ),
            (
                "Mamba backward: gradient of dt, head shards back to sequence shards",
                dt,
            ),
        ];
        for (site, tensor) in forward {
            push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Forward,
                site,
                scope,
                mamba_count,
                c,
                tensor,
            );
            push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Recompute,
                site,
                scope,
                recomputed(mamba_count, plan),
                c,
                tensor,
            );
        }
        for (site, tensor) in backward {
            push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Backward,
                site,
                scope,
                mamba_count,
                c,
                tensor,
            );
        }
    }

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
            push(
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
                push(
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
            push(
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
                push(
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

    // PP, per chunk per micro-batch, on the stage that sets the step (a V's first GPU sends one
    // chunk's activations and the other's gradients).
    if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        let count = f64::from(slowest_sends) / 2.0 * m;
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
                GroupKind::Pp,
                Op::SendRecv,
                pass,
                site,
                Scope::PerChunkPerMicrobatch,
                count,
                2,
                message,
            );
        }
    }

    // Gradients and parameter gathers, on the stage with the most parameters: dense parameters
    // over DP×CP, expert parameters over expert-DP.
    let super::memory::StageParams {
        total: params,
        expert: expert_params,
    } = super::memory::max_stage_params(model, training, plan);
    let gather_bytes = comm::gather_bytes_per_param(model, training, plan, params, max_layers);
    for (kind, replica_kind, share) in [
        (GroupKind::Dp, GroupKind::DpReplica, params - expert_params),
        (
            GroupKind::ExpertDp,
            GroupKind::ExpertDpReplica,
            expert_params,
        ),
    ] {
        let d = groups.get(kind).size;
        // Several copies of the sharded states: each reduce-scatter's shard is all-reduced across
        // the copies (`comm::dp_traffic`), also where a copy of the experts' states is one rank
        // (no reduce-scatter within it, the whole expert gradients all-reduced).
        let replicas = groups.get(replica_kind).size;
        if share <= 0.0 || (d <= 1 && (plan.zero == 0 || replicas <= 1)) {
            continue;
        }
        if plan.zero >= 1 && replicas > 1 {
            let reductions = comm::sharded_collectives(training, plan).reduce_scatters;
            let per_micro_batch =
                plan.zero >= 2 && !comm::reduces_after_pipeline_schedule(training, plan) && m > 1.0;
            push(
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
                share * training.grad_dtype.bytes() / f64::from(d.max(1)),
            );
        }
        if d <= 1 {
            continue;
        }
        let grads = share * training.grad_dtype.bytes();
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
            0 => push(
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
            ),
            2 | 3 if comm::reduces_after_pipeline_schedule(training, plan) => {
                // PyTorch pipelining with FSDP: one reduce-scatter after each pipeline schedule
                // (`comm::fsdp_syncs_per_step` a step); the weights gathered once per schedule
                // when kept (ZeRO-3 without resharding after the forward), once per step after
                // the optimizer (ZeRO-2), else once per micro-batch.
                let syncs = f64::from(comm::fsdp_syncs_per_step(training, plan));
                push(
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
                push(
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
                push(
                    kind,
                    Op::ReduceScatter,
                    Pass::Backward,
                    reduce_site,
                    scope,
                    count,
                    d,
                    grads,
                );
                push(
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
                push(
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
                    push(
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

    Ledger {
        tp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Tp),
        cp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Cp),
        ep_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Ep),
        pp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Pp),
        dp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Dp),
        entries,
    }
}

/// A TP site of the attention block as a hybrid stack's ledger names it: its Mamba mixers run the
/// same pair of collectives at the same places (`in_proj` column split, `out_proj` row split).
fn hybrid_site(site: &'static str) -> &'static str {
    match site {
        "before attention QKV (column split): gather the sequence-split input" => {
            "before attention QKV or Mamba in_proj (column split): gather the sequence-split input"
        }
        "after attention output projection (row split): sum partial outputs, split by sequence" => {
            "after attention output projection or Mamba out_proj (row split): sum partial outputs, split by sequence"
        }
        "after attention output projection (row split): sum partial outputs" => {
            "after attention output projection or Mamba out_proj (row split): sum partial outputs"
        }
        "attention QKV input gradient (conjugate of the all-gather)" => {
            "attention QKV or Mamba in_proj input gradient (conjugate of the all-gather)"
        }
        "attention output gradient (conjugate of the reduce-scatter)" => {
            "attention or Mamba output gradient (conjugate of the reduce-scatter)"
        }
        "attention QKV input again, for its weight gradient (the forward kept the sequence shard)" => {
            "attention QKV or Mamba in_proj input again, for its weight gradient (the forward kept the sequence shard)"
        }
        "attention QKV input gradient (column split, Megatron's f)" => {
            "attention QKV or Mamba in_proj input gradient (column split, Megatron's f)"
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::evaluate;
    use crate::cost::terms::TermKind;
    use crate::plan::PlanRequest;
    use crate::plan::Precision;
    use crate::shape::derive_shape;
    use crate::specs;
    use crate::training::{GradDtype, RecomputeModule, RecomputeModules, TrainingFramework};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    /// Llama 3 8B on 4 nodes of 8 H100s: the context-parallel ledger tests' setup.
    fn llama3_8b_on_32_h100() -> (Model, Cluster) {
        let model = specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        (model, cluster)
    }

    /// The ledger's context-parallel rows.
    fn cp_rows(l: &Ledger) -> Vec<&LedgerEntry> {
        l.entries
            .iter()
            .filter(|e| e.group == GroupKind::Cp)
            .collect()
    }

    fn training(seq_len: u32, global_batch: u32, framework: TrainingFramework) -> Training {
        Training {
            price_per_gpu_hour: None,
            module_precision: crate::training::ModulePrecision::NONE,
            bf16_layers: crate::training::Bf16Layers::NONE,
            pp_schedule: crate::training::PipelineSchedule::OneFOneB,
            cpu_offload_layers: 0,
            seq_len,
            global_batch,
            grad_dtype: GradDtype::Fp32,
            optimizer_states: crate::training::OptimizerStates::Fp32,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework,
            overlap: framework.default_overlap(),
            moe_imbalance: 1.0,
            moe_capacity_factor: None,
            moe_dispatch: crate::training::MoeDispatch::default(),
            fp8_param_gather: false,
            kernel_fusion: framework.default_kernel_fusion(),
            loss: framework.default_loss_kernel(framework.default_kernel_fusion()),
            local_batch: None,
            cp_exchange: framework.default_cp_exchange(),
            fp8_scaling: framework.default_fp8_scaling(),
            recompute_modules: None,
            fsdp_syncs_once_per_step: false,
            pipeline_keeps_outputs: false,
            eager_glu_clamp: false,
            sdpa_repeats_kv: framework.sdpa_repeats_kv(),
            gradient_accumulation_fusion: true,
            rope_fusion: true,
        }
    }

    /// The ledger's step totals per group equal the estimate's, in wire bytes and in time.
    fn assert_ledger_matches_estimate(
        model: &Model,
        cluster: &Cluster,
        training: &Training,
        request: &PlanRequest,
    ) -> Ledger {
        let plan = ParallelPlan::build(request, model, cluster, training).unwrap();
        let e = evaluate(model, cluster, training, &plan);
        let l = ledger(model, cluster, training, &plan);
        let what = format!("{request:?}");
        for (name, got, want) in [
            ("TP", l.tp_wire_bytes, e.comm.tp.wire_bytes.0),
            ("CP", l.cp_wire_bytes, e.comm.cp.wire_bytes.0),
            ("EP", l.ep_wire_bytes, e.comm.ep.wire_bytes.0),
            ("PP", l.pp_wire_bytes, e.comm.pp.wire_bytes.0),
            ("DP", l.dp_wire_bytes, e.comm.dp.wire_bytes.0),
        ] {
            assert!(close(got, want), "{name} bytes {what}: {got} vs {want}");
        }
        // Times add up too, before overlap: each group's rows against its terms.
        let term_s =
            |kinds: &[TermKind]| -> f64 { kinds.iter().map(|k| e.terms.get(*k).time_s.0).sum() };
        for (kind, want) in [
            (GroupKind::Tp, term_s(&[TermKind::TpComm])),
            (
                GroupKind::Cp,
                term_s(&[TermKind::CpComm, TermKind::MambaCpComm]),
            ),
            (GroupKind::Pp, term_s(&[TermKind::PpComm])),
        ] {
            let got = l.step_time_s(kind);
            assert!(
                (got - want).abs() <= 1e-6 * want.max(1e-9),
                "{} time {what}: {got} vs {want}",
                kind.as_str()
            );
        }
        // The EP term holds the all-to-alls and the expert-TP gathers and scatters beside them.
        let ep_got = l.comm_time_s(GroupKind::Ep);
        let ep_want = term_s(&[TermKind::EpComm]);
        assert!(
            (ep_got - ep_want).abs() <= 1e-6 * ep_want.max(1e-9),
            "EP time {what}: {ep_got} vs {ep_want}"
        );
        let dp_got = l.comm_time_s(GroupKind::Dp);
        let dp_want = term_s(&[TermKind::DpGradReduce, TermKind::DpParamGather]);
        assert!(
            (dp_got - dp_want).abs() <= 1e-6 * dp_want.max(1e-9),
            "DP time {what}: {dp_got} vs {dp_want}"
        );
        assert!(
            l.entries
                .iter()
                .all(|x| x.wire_bytes >= 0.0 && x.count > 0.0)
        );
        // The totals the report prints are `comm.*`'s, and their parts add up to them.
        let comm_bytes = |g: GroupKind| match g {
            GroupKind::Tp => e.comm.tp.wire_bytes.0,
            GroupKind::Cp => e.comm.cp.wire_bytes.0,
            GroupKind::Ep => e.comm.ep.wire_bytes.0,
            GroupKind::Pp => e.comm.pp.wire_bytes.0,
            GroupKind::Dp => e.comm.dp.wire_bytes.0,
            other => panic!("{other:?} is no comm.* group"),
        };
        for t in l.totals() {
            assert!(close(t.wire_bytes, comm_bytes(t.group)), "{t:?} {what}");
            let parts: f64 = t.parts.iter().map(|(_, b)| b).sum();
            assert!(close(parts, t.wire_bytes), "{t:?} {what}");
        }
        // Every row sits on its group's link.
        let g = groups::groups(cluster, &plan);
        assert!(l.entries.iter().all(|x| x.link == g.get(x.group).link));
        l
    }

    #[test]
    fn ledger_sums_equal_cost_model_wire_bytes() {
        let model = derive_shape(20e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        let mut checked = 0;
        // torchtitan: its selective recompute (per-op SAC) repeats the all-gathers, not the
        // reduce-scatters.
        for framework in [
            TrainingFramework::MegatronLm2021,
            TrainingFramework::Torchtitan,
        ] {
            let training = training(2048, 64, framework);
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
                            assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                            checked += 1;
                        }
                    }
                }
            }
        }
        // 24 plans with tp = 1, 72 with tp > 1, per framework.
        assert_eq!(checked, 192);
    }

    #[test]
    fn module_recompute_ledger_matches_the_estimate() {
        // Megatron-Core's module recompute on an all-MoE model and on DeepSeek-V3 (a dense
        // prefix): `mlp` repeats the dense layers' MLP pair, `moe` the MoE layers' pair and the
        // token all-to-alls (fractional shares: `fractional_shares_ledger_matches_the_estimate`).
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let mut checked = 0;
        for (name, modules) in [
            ("qwen3-30b-a3b", &[RecomputeModule::Moe][..]),
            (
                "qwen3-30b-a3b",
                &[RecomputeModule::MoeAct, RecomputeModule::Layernorm][..],
            ),
            (
                "deepseek-v3",
                &[RecomputeModule::Mlp, RecomputeModule::Moe][..],
            ),
            (
                "deepseek-v3",
                &[RecomputeModule::MlaUpProj, RecomputeModule::Mlp][..],
            ),
        ] {
            let model = specs::load_model(name).unwrap();
            let mut training = training(4096, 64, TrainingFramework::MegatronCore);
            training.recompute_modules = Some(RecomputeModules::of(modules));
            for (tp, sequence_parallel) in [(1, false), (2, true), (4, true)] {
                let request = PlanRequest {
                    tp,
                    pp: 1,
                    dp: 64 / tp,
                    ep: 8,
                    micro_batch: 1,
                    sequence_parallel,
                    recompute: Recompute::Selective,
                    zero: 1,
                    ..PlanRequest::default()
                };
                assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                checked += 1;
            }
        }
        assert_eq!(checked, 12);
    }

    /// The ledger's EP (all-to-all and expert-TP) totals equal `comm.ep`'s in bytes and time to
    /// 1e-9.
    fn assert_ep_matches(
        model: &Model,
        cluster: &Cluster,
        training: &Training,
        request: &PlanRequest,
    ) -> Ledger {
        let l = assert_ledger_matches_estimate(model, cluster, training, request);
        let plan = ParallelPlan::build(request, model, cluster, training).unwrap();
        let e = evaluate(model, cluster, training, &plan);
        let (bytes, time_s) = (e.comm.ep.wire_bytes.0, e.comm.ep.time_s.0);
        // The slowest stage pays its own MoE layers' all-to-alls: none if it holds none.
        assert_eq!(bytes > 0.0, e.slowest_stage_moe_layers > 0, "{request:?}");
        assert!(close(l.ep_wire_bytes, bytes), "{request:?}");
        assert!(close(l.comm_time_s(GroupKind::Ep), time_s), "{request:?}");
        l
    }

    #[test]
    fn moe_patterns_and_shares_ledger_matches_the_estimate() {
        // A review found the ledger rounding the busiest stage's MoE layers times micro-batches
        // where `evaluate` kept the model's average share: Mixtral with `--moe-layer-freq 3` on 16
        // stages (2 layers a stage, 11 of 32 MoE) counted 1 pair per micro-batch against 0.6875,
        // and at `--moe-layer-freq 8` no EP rows at all. Both now count the busiest stage's own
        // MoE layers (1 of its 2 in both cases); the ledger must keep matching.
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        let training_of =
            |global_batch| training(4096, global_batch, TrainingFramework::MegatronCore);
        let mut mixtral = specs::load_model("mixtral-8x7b").unwrap();
        let mut checked = 0;
        for freq in [3, 8] {
            mixtral.moe.as_mut().unwrap().layer_freq = freq;
            for (tp, ep, etp, dp) in [(1, 2, 1, 2), (1, 1, 2, 2), (2, 1, 2, 1)] {
                for recompute in [Recompute::None, Recompute::Full] {
                    let request = PlanRequest {
                        tp,
                        pp: 16,
                        dp,
                        ep,
                        etp,
                        sequence_parallel: tp > 1,
                        recompute,
                        zero: 1,
                        ..PlanRequest::default()
                    };
                    let training = training_of(2 * dp);
                    let l = assert_ep_matches(&mixtral, &cluster, &training, &request);
                    // Whole counts: 2 micro-batches × the slowest stage's own MoE layers (at
                    // freq 8 layers 0, 8, 16 and 24 are MoE, one on each of stages 0, 4, 8 and
                    // 12; the last stage, slowest with the output layer, holds none).
                    let plan =
                        ParallelPlan::build(&request, &mixtral, &cluster, &training).unwrap();
                    let slowest = crate::cost::slowest_stage(&mixtral, &cluster, &training, &plan);
                    for entry in l
                        .entries
                        .iter()
                        .filter(|x| comm_group(x.group) == GroupKind::Ep)
                    {
                        assert_eq!(entry.count.fract(), 0.0, "{request:?}");
                        // Once per micro-batch and MoE layer of the slowest stage; the recompute
                        // pass on the recomputed layers' share of them.
                        let per_step =
                            f64::from(plan.num_microbatches) * f64::from(slowest.moe_layers);
                        if entry.pass == Pass::Recompute {
                            assert!(entry.count <= per_step, "{request:?} {entry:?}");
                        } else {
                            assert_eq!(entry.count, per_step, "{request:?} {entry:?}");
                        }
                    }
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 2 * 3 * 2);

        // Block recompute of 3 of DeepSeek-V3's 61 layers at pp 1: the recomputed all-to-alls
        // are 58 MoE layers × 5 micro-batches × 3/61 = 14.26 a step (the ledger counted 14).
        let small = Cluster {
            gpus_per_node: 4,
            nodes: 1,
            ..cluster.clone()
        };
        let deepseek = specs::load_model("deepseek-v3").unwrap();
        let request = PlanRequest {
            tp: 1,
            pp: 1,
            cp: 2,
            dp: 2,
            ep: 4,
            recompute: Recompute::Full,
            recompute_num_layers: 3,
            zero: 1,
            ..PlanRequest::default()
        };
        let l = assert_ep_matches(
            &deepseek,
            &small,
            &training(2048, 10, TrainingFramework::MegatronCore),
            &request,
        );
        let recomputed = l
            .entries
            .iter()
            .find(|x| x.group == GroupKind::Ep && x.pass == Pass::Recompute)
            .unwrap();
        assert!(close(recomputed.count, 58.0 * 5.0 * 3.0 / 61.0));

        // `--recompute-modules mlp` / `moe` repeat the MLP's TP pair (and under `moe` the
        // all-to-alls) on the busiest stage's dense / MoE layers: Qwen3-30B-A3B with
        // `--moe-layer-freq 2`, 3 layers a stage (2 MoE on the busiest); Mixtral with
        // `--moe-layer-freq 3`, 16 layers a stage (6 MoE on the first).
        let mut qwen = specs::load_model("qwen3-30b-a3b").unwrap();
        qwen.moe.as_mut().unwrap().layer_freq = 2;
        mixtral.moe.as_mut().unwrap().layer_freq = 3;
        for (model, modules, pp, ep, dp) in [
            (&qwen, RecomputeModule::Mlp, 16, 1, 1),
            (&qwen, RecomputeModule::Moe, 16, 1, 1),
            (&mixtral, RecomputeModule::Moe, 2, 2, 8),
            (&mixtral, RecomputeModule::Mlp, 2, 2, 8),
        ] {
            let mut training = training(4096, dp, TrainingFramework::MegatronCore);
            training.recompute_modules = Some(RecomputeModules::of(&[modules]));
            let request = PlanRequest {
                tp: 2,
                pp,
                dp,
                ep,
                sequence_parallel: true,
                recompute: Recompute::Selective,
                zero: 1,
                ..PlanRequest::default()
            };
            let l = assert_ledger_matches_estimate(model, &cluster, &training, &request);
            let plan = ParallelPlan::build(&request, model, &cluster, &training).unwrap();
            let e = evaluate(model, &cluster, &training, &plan);
            assert!(
                close(l.tp_wire_bytes, e.comm.tp.wire_bytes.0),
                "{request:?}"
            );
            assert!(
                close(l.comm_time_s(GroupKind::Tp), e.comm.tp.time_s.0),
                "{request:?}"
            );
            if ep > 1 && modules == RecomputeModule::Moe {
                assert_ep_matches(model, &cluster, &training, &request);
            }
        }
    }

    /// ZeRO-3 under full recompute: FSDP2 (torchtitan) recomputes on the weights its pre-backward
    /// hook gathered, so a micro-batch gathers twice (forward, backward); DeepSpeed and
    /// Megatron-Core gather once more for the recomputed forward. The ledger and `comm.dp` agree
    /// either way.
    #[test]
    fn fsdp2_recomputes_on_the_weights_it_gathered_for_the_backward() {
        let model = specs::load_model("llama3-70b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let request = PlanRequest {
            tp: 8,
            pp: 1,
            dp: 8,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero: 3,
            ..PlanRequest::default()
        };
        let gathers = |framework| {
            let l = assert_ledger_matches_estimate(
                &model,
                &cluster,
                &training(8192, 64, framework),
                &request,
            );
            l.entries
                .iter()
                .filter(|x| x.group == GroupKind::Dp && x.op == Op::AllGather)
                .map(|x| x.pass)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            gathers(TrainingFramework::Torchtitan),
            vec![Pass::Forward, Pass::Backward]
        );
        assert_eq!(
            gathers(TrainingFramework::MegatronCore),
            vec![Pass::Forward, Pass::Backward, Pass::Recompute]
        );
    }

    /// Megatron-Core's MoE layers hand the sequence shard straight to the dispatcher: with every
    /// layer an MoE layer and no shared experts (Qwen3-30B-A3B) only the attention's TP pair runs;
    /// with shared experts (DeepSeek-V3's middle stages) the MLP side gathers and scatters too.
    #[test]
    fn moe_layers_without_shared_experts_run_only_the_attention_tp_pair() {
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let training = training(4096, 64, TrainingFramework::MegatronCore);
        let forward_sites = |name: &str, ep: u32| {
            let model = specs::load_model(name).unwrap();
            let request = PlanRequest {
                tp: 2,
                pp: 1,
                dp: 32,
                ep,
                micro_batch: 1,
                sequence_parallel: true,
                zero: 1,
                ..PlanRequest::default()
            };
            let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
            l.entries
                .iter()
                .filter(|x| x.group == GroupKind::Tp && x.pass == Pass::Forward)
                .map(|x| x.site)
                .collect::<Vec<_>>()
        };
        let qwen = forward_sites("qwen3-30b-a3b", 8);
        assert_eq!(qwen.len(), 2, "{qwen:?}");
        assert!(qwen.iter().all(|s| s.contains("attention")), "{qwen:?}");
        let mixtral = forward_sites("mixtral-8x7b", 8);
        assert_eq!(mixtral.len(), 2, "{mixtral:?}");
        let deepseek = forward_sites("deepseek-v3", 64);
        assert_eq!(deepseek.len(), 4, "{deepseek:?}");
    }

    #[test]
    fn context_parallel_ledger_lists_the_kv_ring_and_matches_the_estimate() {
        let (model, cluster) = llama3_8b_on_32_h100();
        let training = training(131072, 64, TrainingFramework::MegatronCore);
        let mut checked = 0;
        for (tp, cp, pp) in [(8, 2, 2), (4, 4, 1), (2, 8, 2), (1, 2, 1)] {
            for recompute in Recompute::ALL {
                for recompute_num_layers in [0, 2] {
                    if recompute_num_layers > 0 && recompute != Recompute::Full {
                        continue;
                    }
                    for zero in [0, 1, 3u8] {
                        for reshard_after_forward in [true, false] {
                            if !reshard_after_forward && zero < 3 {
                                continue;
                            }
                            let request = PlanRequest {
                                tp,
                                cp,
                                pp,
                                dp: 32 / (tp * cp * pp),
                                sequence_parallel: tp > 1,
                                recompute,
                                recompute_num_layers,
                                zero,
                                reshard_after_forward,
                                ..PlanRequest::default()
                            };
                            let l = assert_ledger_matches_estimate(
                                &model, &cluster, &training, &request,
                            );
                            let ring = cp_rows(&l);
                            // One forward K/V send, K/V and dK/dV in backward, the forward again
                            // under full recompute and under selective recompute, which re-runs
                            // Transformer Engine's attention with its ring; cp − 1 ring steps per
                            // layer per micro-batch.
                            let full = recompute != Recompute::None;
                            assert_eq!(ring.len(), 3 + usize::from(full), "{request:?}");
                            assert!(ring.iter().all(|e| e.op == Op::SendRecv && e.ranks == cp));
                            let forward = ring.iter().find(|e| e.pass == Pass::Forward).unwrap();
                            assert_eq!(forward.count % f64::from(cp - 1), 0.0);
                            assert!(l.cp_wire_bytes > 0.0);
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 4 * 4);
    }

    /// A hybrid stack under context parallelism: the attention blocks' exchange rows at the
    /// slowest stage's attention share, the Mamba mixers' twelve all-to-all rows (and six more
    /// on full recompute) at its Mamba share, and the CP totals equal the estimate's, for every
    /// exchange, recompute and pipeline split.
    #[test]
    fn hybrid_context_parallel_ledger_lists_the_mamba_all_to_alls_and_matches_the_estimate() {
        let model = crate::specs::load_model("nemotron-h-8b").unwrap();
        let (_, cluster) = llama3_8b_on_32_h100();
        let mut checked = 0;
        for exchange in [
            crate::training::CpExchange::KvRing,
            crate::training::CpExchange::KvAllGather,
            crate::training::CpExchange::HeadAllToAll,
        ] {
            let training = Training {
                cp_exchange: exchange,
                ..training(32768, 64, TrainingFramework::MegatronCore)
            };
            // tp 8 leaves one group per TP rank, which cp 2 copies; Transformer Engine's a2a
            // cannot split its one K/V head over cp 2.
            for (tp, cp, pp) in [(2, 2, 1), (4, 2, 2), (2, 4, 2), (1, 8, 1), (8, 2, 2)] {
                if tp == 8 && exchange == crate::training::CpExchange::HeadAllToAll {
                    continue;
                }
                for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                    let request = PlanRequest {
                        tp,
                        cp,
                        pp,
                        dp: 32 / (tp * cp * pp),
                        sequence_parallel: tp > 1,
                        recompute,
                        zero: 1,
                        ..PlanRequest::default()
                    };
                    let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                    let mamba: Vec<_> = cp_rows(&l)
                        .into_iter()
                        .filter(|e| e.site.starts_with("Mamba"))
                        .collect();
                    let full = recompute == Recompute::Full;
                    assert_eq!(mamba.len(), 12 + 6 * usize::from(full), "{request:?}");
                    assert!(mamba.iter().all(|e| e.op == Op::AllToAll && e.ranks == cp));
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, (5 + 5 + 4) * 3);
    }

    /// Copies of the sharded states: the ledger lists one all-reduce of each reduced shard across
    /// the copies per reduce-scatter, over as many ranks as there are copies, at the shard's size,
    /// and its DP total still equals the estimate's (dense and MoE, ZeRO 1 to 3, pipelined or not).
    #[test]
    fn dp_replica_ledger_lists_the_shard_all_reduces_and_matches_the_estimate() {
        let (model, cluster) = llama3_8b_on_32_h100();
        let mixtral = crate::specs::load_model("mixtral-8x7b").unwrap();
        for (name, model, framework) in [
            ("llama3-8b", &model, TrainingFramework::MegatronCore),
            ("llama3-8b", &model, TrainingFramework::Torchtitan),
            ("mixtral-8x7b", &mixtral, TrainingFramework::MegatronCore),
        ] {
            let training = training(8192, 64, framework);
            // (1, 1, 8) with 4 copies: each copy of the experts' states is one rank.
            for (tp, pp, ep) in [(1, 1, 1), (2, 2, 1), (1, 2, 2), (1, 1, 8)] {
                if ep > 1 && model.moe.is_none() {
                    continue;
                }
                for zero in [1u8, 2, 3] {
                    if framework.dp_replicas_refusal(zero).is_some() {
                        continue;
                    }
                    let dp = 32 / (tp * pp);
                    for replicas in [1, 2, 4] {
                        let request = PlanRequest {
                            tp,
                            pp,
                            dp,
                            ep,
                            zero,
                            sequence_parallel: tp > 1,
                            dp_replicas: replicas,
                            ..PlanRequest::default()
                        };
                        let l =
                            assert_ledger_matches_estimate(model, &cluster, &training, &request);
                        let rows: Vec<_> = l
                            .entries
                            .iter()
                            .filter(|e| {
                                matches!(e.group, GroupKind::DpReplica | GroupKind::ExpertDpReplica)
                            })
                            .collect();
                        if replicas == 1 {
                            assert!(rows.is_empty(), "{name} {request:?}");
                            continue;
                        }
                        assert!(!rows.is_empty(), "{name} {request:?}");
                        assert!(
                            rows.iter()
                                .all(|e| e.op == Op::AllReduce && e.ranks == replicas),
                            "{name} {request:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn torch_context_parallel_ledger_lists_the_gathers_and_matches_the_estimate() {
        let (model, cluster) = llama3_8b_on_32_h100();
        let training = training(131072, 64, TrainingFramework::Torchtitan);
        assert_eq!(
            training.cp_exchange,
            crate::training::CpExchange::TorchAllGather
        );
        for (tp, cp) in [(1, 2), (1, 8), (8, 4)] {
            for recompute in [Recompute::None, Recompute::Full] {
                let request = PlanRequest {
                    tp,
                    cp,
                    dp: 32 / (tp * cp),
                    sequence_parallel: tp > 1,
                    recompute,
                    zero: 3,
                    ..PlanRequest::default()
                };
                let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                let ring = cp_rows(&l);
                // Gathers in forward and backward (and the recompute), the dK/dV hops in backward.
                let full = recompute == Recompute::Full;
                assert_eq!(ring.len(), 3 + usize::from(full), "{request:?}");
                let gathers = ring.iter().filter(|e| e.op == Op::AllGather).count();
                assert_eq!(gathers, 2 + usize::from(full));
                let hop = ring.iter().find(|e| e.op == Op::SendRecv).unwrap();
                let gather = ring.iter().find(|e| e.op == Op::AllGather).unwrap();
                assert_eq!(hop.count, gather.count * f64::from(cp));
                // The hop carries fp32 accumulators: twice one rank's bf16 K/V, and each rank's
                // K/V is 1/cp of the gathered tensor.
                assert!((hop.tensor_bytes - 2.0 * gather.tensor_bytes / f64::from(cp)).abs() < 1.0);
            }
        }
    }

    #[test]
    fn transformer_engine_all_gather_and_all_to_all_ledgers_match_the_estimate() {
        use crate::training::CpExchange;
        let (model, cluster) = llama3_8b_on_32_h100();
        // The ring under every recompute: `context_parallel_ledger_lists_the_kv_ring_...`.
        for exchange in [CpExchange::KvAllGather, CpExchange::HeadAllToAll] {
            let training = Training {
                cp_exchange: exchange,
                ..training(131072, 64, TrainingFramework::MegatronCore)
            };
            // Llama 3 8B has 8 K/V heads: tp 2 leaves 4 per rank, which cp 2 and 4 split.
            for (tp, cp) in [(1, 2), (1, 8), (2, 4)] {
                // Selective recompute re-runs Transformer Engine's attention, exchange included.
                for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                    let request = PlanRequest {
                        tp,
                        cp,
                        dp: 32 / (tp * cp),
                        sequence_parallel: tp > 1,
                        recompute,
                        zero: 1,
                        ..PlanRequest::default()
                    };
                    let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                    let rows = cp_rows(&l);
                    let full = usize::from(recompute != Recompute::None);
                    match exchange {
                        // Gathers in forward, backward (and the recompute), one reduce-scatter.
                        CpExchange::KvAllGather => {
                            assert_eq!(rows.len(), 3 + full, "{request:?}");
                            let scatter = rows.iter().filter(|e| e.op == Op::ReduceScatter).count();
                            assert_eq!(scatter, 1);
                        }
                        // Q/K/V and the output in forward (and the recompute), their gradients
                        // in backward, every row an all-to-all.
                        _ => {
                            assert_eq!(rows.len(), 4 + 2 * full, "{request:?}");
                            assert!(rows.iter().all(|e| e.op == Op::AllToAll));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn moe_ledger_lists_the_all_to_alls_and_expert_gradients() {
        let model = specs::load_model("mixtral-8x7b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let mut checked = 0;
        for framework in [
            TrainingFramework::MegatronLm2021,
            TrainingFramework::MegatronCore,
        ] {
            let training = training(4096, 256, framework);
            for (tp, cp, pp, ep, etp) in [
                (2, 1, 1, 8, 1),
                (1, 1, 2, 8, 1),
                (2, 2, 1, 4, 2),
                (4, 1, 2, 2, 1),
            ] {
                for recompute in [Recompute::None, Recompute::Full] {
                    for zero in 0..=3u8 {
                        for precision in [Precision::Bf16, Precision::Fp8] {
                            // ZeRO-0 keeps no fp32 master for FP8's parameter gather; the 2021
                            // Megatron-LM has no FP8 at all.
                            if precision != Precision::Bf16
                                && (zero < 1 || framework == TrainingFramework::MegatronLm2021)
                            {
                                continue;
                            }
                            let request = PlanRequest {
                                tp,
                                cp,
                                pp,
                                ep,
                                etp,
                                dp: 64 / (tp * cp * pp),
                                sequence_parallel: tp > 1,
                                recompute,
                                zero,
                                precision,
                                ..PlanRequest::default()
                            };
                            let l = assert_ledger_matches_estimate(
                                &model, &cluster, &training, &request,
                            );
                            let a2a: Vec<_> = l
                                .entries
                                .iter()
                                .filter(|e| e.group == GroupKind::Ep)
                                .collect();
                            // Dispatch and combine in forward and backward, and again under full
                            // recompute; every MoE layer of the stage (all of Mixtral's) per
                            // micro-batch.
                            let full = recompute == Recompute::Full;
                            assert_eq!(a2a.len(), 4 + 2 * usize::from(full), "{request:?}");
                            let plan =
                                ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                            let layers = if pp == 1 {
                                model.layers
                            } else {
                                plan.stages.max_layers()
                            };
                            for e in &a2a {
                                assert_eq!(e.op, Op::AllToAll);
                                assert_eq!(e.ranks, ep);
                                if e.pass != Pass::Recompute {
                                    assert_eq!(
                                        e.count,
                                        f64::from(layers) * f64::from(plan.num_microbatches)
                                    );
                                }
                            }
                            // Expert gradients over expert-DP, dense ones over DP×CP.
                            let expert_dp = moe::expert_dp(&plan);
                            let expert_rows: Vec<_> = l
                                .entries
                                .iter()
                                .filter(|e| e.group == GroupKind::ExpertDp)
                                .collect();
                            assert_eq!(!expert_rows.is_empty(), expert_dp > 1, "{request:?}");
                            assert!(expert_rows.iter().all(|e| e.ranks == expert_dp));
                            assert!(
                                l.entries
                                    .iter()
                                    .filter(|e| e.group == GroupKind::Dp)
                                    .all(|e| e.ranks == plan.dp * plan.cp)
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        // Per framework, layout and recompute: 4 bf16 ZeRO stages, and 3 FP8 ones under
        // Megatron-Core only.
        assert_eq!(checked, 4 * 2 * (4 + (4 + 3)));
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
            price_per_gpu_hour: None,
            module_precision: crate::training::ModulePrecision::NONE,
            bf16_layers: crate::training::Bf16Layers::NONE,
            pp_schedule: crate::training::PipelineSchedule::OneFOneB,
            cpu_offload_layers: 0,
            seq_len: 2048,
            global_batch: 8,
            grad_dtype: GradDtype::Bf16,
            optimizer_states: crate::training::OptimizerStates::Fp32,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework: crate::training::TrainingFramework::MegatronLm2021,
            overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
            moe_imbalance: 1.0,
            moe_capacity_factor: None,
            moe_dispatch: crate::training::MoeDispatch::default(),
            fp8_param_gather: false,
            kernel_fusion: crate::training::KernelFusion::Fused,
            loss: crate::training::LossKernel::VocabParallel,
            local_batch: None,
            cp_exchange: crate::training::TrainingFramework::MegatronLm2021.default_cp_exchange(),
            fp8_scaling: crate::training::TrainingFramework::MegatronLm2021.default_fp8_scaling(),
            recompute_modules: None,
            fsdp_syncs_once_per_step: false,
            pipeline_keeps_outputs: false,
            eager_glu_clamp: false,
            sdpa_repeats_kv: false,
            gradient_accumulation_fusion: true,
            rope_fusion: true,
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
        assert!(l.entries.iter().all(|e| e.op == Op::AllReduce));
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
        // Megatron's backward gathers the two column-parallel inputs again for the weight
        // gradients: 14 collectives, the 12 of the same volume and two all-gathers (half an
        // all-reduce's wire bytes each).
        assert_eq!(sp.entries.len(), 14);
        assert!(sp.entries.iter().all(|e| e.op != Op::AllReduce));
        assert!(close(sp.tp_wire_bytes, l.tp_wire_bytes * 14.0 / 12.0));
    }
    #[test]
    fn low_precision_sequence_parallelism_gathers_quantized_copies() {
        // Llama-shaped 20B, tp 8 with sequence parallelism, full recompute, Megatron-Core: every
        // all-gather carries the quantized copy (FP8: half the bf16 bytes; MXFP8 on Blackwell: the
        // row-wise copy forward and for the weight gradient, both copies of the output gradient),
        // every reduce-scatter bf16; the ledger and the estimate agree row by row.
        let model = derive_shape(20e9, 2048).unwrap();
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            2048,
            8,
            crate::training::AttentionKernel::Flash,
        );
        let request = |precision| PlanRequest {
            tp: 8,
            dp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            precision,
            ..PlanRequest::default()
        };
        let gathers = |gpu: &str, precision| {
            let cluster = Cluster {
                gpu: specs::load_gpu(gpu).unwrap(),
                nodes: 1,
                gpus_per_node: 8,
            };
            let l =
                assert_ledger_matches_estimate(&model, &cluster, &training, &request(precision));
            let bf16 = ledger(
                &model,
                &cluster,
                &training,
                &ParallelPlan::build(&request(Precision::Bf16), &model, &cluster, &training)
                    .unwrap(),
            );
            // Rows pair up in order: same site, same count; bytes per row over bf16's.
            assert_eq!(l.entries.len(), bf16.entries.len());
            l.entries
                .iter()
                .zip(&bf16.entries)
                .map(|(low, high)| {
                    assert_eq!(
                        (low.op, low.pass, low.site),
                        (high.op, high.pass, high.site)
                    );
                    (
                        low.op,
                        low.pass,
                        low.site,
                        low.tensor_bytes / high.tensor_bytes,
                    )
                })
                .collect::<Vec<_>>()
        };
        for (op, pass, site, ratio) in gathers("h100-sxm-80g", Precision::Fp8) {
            let want = if op == Op::AllGather { 0.5 } else { 1.0 };
            assert!(close(ratio, want), "{pass:?} {site}: {ratio}");
        }
        let mx = 1.0 + 1.0 / 32.0;
        for (op, pass, site, ratio) in gathers("b200-sxm-180g", Precision::Mxfp8) {
            let want = match (op, pass) {
                (Op::AllGather, Pass::Backward) if site.contains("output gradient") => mx,
                (Op::AllGather, _) => mx / 2.0,
                _ => 1.0,
            };
            assert!(close(ratio, want), "{pass:?} {site}: {ratio}");
        }
    }
}
