//! What a ledger holds: one row per collective (`LedgerEntry`: its operation, pass, where in the
//! layer, how often, over how many ranks, how many bytes, on which link, how long), and the
//! ledger's step totals per `Estimate::comm` group. A row's bytes and time follow nccl-tests' bus
//! factor and the α-β model of `comm::Collective::time` (`comm::alltoall_s` for the all-to-all).

use serde::Serialize;

use crate::cluster::{Link, LinkSpeed};
use crate::cost::comm::{self, Collective};
use crate::cost::groups::GroupKind;

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

    /// The ledger's name of a ring collective or send.
    pub fn of(collective: Collective) -> Op {
        match collective {
            Collective::AllReduce => Op::AllReduce,
            Collective::AllGather => Op::AllGather,
            Collective::ReduceScatter => Op::ReduceScatter,
            Collective::SendRecv => Op::SendRecv,
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
    pub(super) fn comm_wire_bytes(entries: &[LedgerEntry], group: GroupKind) -> f64 {
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
