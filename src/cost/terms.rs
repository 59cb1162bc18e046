//! A step's time as a sum of terms. Each term is one kind of work or communication of the most
//! loaded GPU: its bytes on the wire, its full time, the part of it that stays on the critical path
//! and what hides the rest. The step time is the sum of the exposed parts; `StepTime`, the ledger
//! totals, the report and the JSON all read these terms.

use serde::{Serialize, Serializer};

use super::groups::GroupKind;
use crate::units::{Bytes, Seconds};

/// What a term is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TermKind {
    /// Forward, backward and recompute kernels of the slowest stage over all micro-batches.
    Compute,
    /// Tensor-parallel all-reduces (or all-gathers and reduce-scatters with SP).
    TpComm,
    /// Context-parallel exchange of the attention layers (the K/V ring, all-gather or all-to-all).
    CpComm,
    /// Pipeline sends and receives at stage boundaries.
    PpComm,
    /// MoE token traffic: the dispatch and combine all-to-alls over the EP group, and the expert-TP
    /// gathers and scatters beside them.
    EpComm,
    /// Gradient all-reduce or reduce-scatter over the DP (×CP) group.
    DpGradReduce,
    /// ZeRO / distributed-optimizer / FSDP parameter all-gathers.
    DpParamGather,
    /// Pipeline fill and drain (and waiting for slower stages).
    Bubble,
    /// The optimizer step.
    Optimizer,
    /// Activations copied to host memory in the forward and back for the backward
    /// (`--cpu-offload-layers`), over the GPU's host link.
    HostOffload,
    /// A hybrid stack's Mamba mixers' context-parallel all-to-alls (sequence shards for head
    /// shards around the conv and scan, `hybrid::MambaExchange`), over the CP group. Last, so
    /// that the other terms keep their places (and colours).
    MambaCpComm,
}

impl TermKind {
    pub const ALL: [TermKind; 11] = [
        TermKind::Compute,
        TermKind::TpComm,
        TermKind::CpComm,
        TermKind::PpComm,
        TermKind::EpComm,
        TermKind::DpGradReduce,
        TermKind::DpParamGather,
        TermKind::Bubble,
        TermKind::Optimizer,
        TermKind::HostOffload,
        TermKind::MambaCpComm,
    ];
    pub const COUNT: usize = TermKind::ALL.len();

    /// The group whose link a communication term uses.
    pub fn group(self) -> Option<GroupKind> {
        match self {
            TermKind::TpComm => Some(GroupKind::Tp),
            TermKind::CpComm | TermKind::MambaCpComm => Some(GroupKind::Cp),
            TermKind::PpComm => Some(GroupKind::Pp),
            TermKind::EpComm => Some(GroupKind::Ep),
            TermKind::DpGradReduce | TermKind::DpParamGather => Some(GroupKind::Dp),
            TermKind::Compute | TermKind::HostOffload | TermKind::Bubble | TermKind::Optimizer => {
                None
            }
        }
    }

    /// Whether the term's time is spent inside the pipeline's forward and backward blocks.
    pub fn in_pipeline_blocks(self) -> bool {
        matches!(
            self,
            TermKind::Compute
                | TermKind::TpComm
                | TermKind::CpComm
                | TermKind::MambaCpComm
                | TermKind::PpComm
                | TermKind::EpComm
                | TermKind::HostOffload
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            TermKind::Compute => "compute",
            TermKind::TpComm => "TP comm",
            TermKind::CpComm => "CP comm",
            TermKind::MambaCpComm => "Mamba CP comm",
            TermKind::PpComm => "PP comm",
            TermKind::EpComm => "EP comm",
            TermKind::DpGradReduce => "DP grad reduce",
            TermKind::DpParamGather => "DP param gather",
            TermKind::HostOffload => "CPU offload",
            TermKind::Bubble => "bubble",
            TermKind::Optimizer => "optimizer",
        }
    }
}

/// What hides the hidden part of a term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HiddenBy {
    /// Nothing: the whole term is on the critical path.
    Nothing,
    /// The linear-layer GEMMs next to it (TP communication overlap in chunks).
    NeighbouringGemms,
    /// The column-parallel GEMMs of the backward, under which Megatron issues the re-gather of
    /// the sequence-parallel inputs (under the dgrad GEMMs) asynchronously whether or not TP
    /// communication overlap is on (Megatron-Core `tensor_parallel/layers.py`
    /// `LinearWithGradAccumulationAndAsyncCommunication.backward`), and Megatron-Core's Transformer
    /// Engine linears their input gradients' all-reduce or reduce-scatter (under the wgrad GEMMs,
    /// `tp_collectives::column_grad_collective_async`).
    DgradGemms,
    /// The attention blocks of the ring step it feeds (CP).
    AttentionBlocks,
    /// The first (diagonal) ring step's attention for PyTorch's K/V all-gather, and each backward
    /// step's for its dK/dV hops (CP as torchtitan runs it).
    DiagonalAttentionStep,
    /// The backward pass (bucketed gradient reduction).
    Backward,
    /// The next forward pass (parameter all-gather prefetch).
    Forward,
    /// Other micro-batches' compute in the interleaved schedule.
    PipelineCompute,
    /// The paired micro-batch's compute in Megatron-Core's combined 1F1B schedule (MoE all-to-all
    /// overlap).
    OtherMicroBatch,
    /// The next layers' forward (offload) or backward (reload), on a copy stream beside them.
    LayerCompute,
}

/// One term of the step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Term {
    pub kind: TermKind,
    pub group: Option<GroupKind>,
    /// Bytes one GPU sends for this term in a step (0 for compute terms).
    pub wire_bytes: Bytes,
    /// Full time of the term before any overlap.
    pub time_s: Seconds,
    /// What stays on the critical path, including the slowdown hidden communication still causes.
    pub exposed_s: Seconds,
    pub hidden_by: HiddenBy,
}

impl Term {
    pub fn new(kind: TermKind) -> Term {
        Term {
            kind,
            group: kind.group(),
            wire_bytes: Bytes(0.0),
            time_s: Seconds(0.0),
            exposed_s: Seconds(0.0),
            hidden_by: HiddenBy::Nothing,
        }
    }
    /// A term that nothing hides.
    pub fn exposed(kind: TermKind, wire_bytes: f64, time_s: f64) -> Term {
        Term {
            wire_bytes: Bytes(wire_bytes),
            time_s: Seconds(time_s),
            exposed_s: Seconds(time_s),
            ..Term::new(kind)
        }
    }
}

/// Every term of a step, indexed by kind; fixed-size so evaluation does not allocate. Serialized as
/// the list of terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTerms {
    items: [Term; TermKind::COUNT],
    /// Exposed time inside a pipeline-block term that runs after the last backward, outside the
    /// blocks: the PP term's embedding gradient all-reduce (`embedding_grad_sync`).
    after_pipeline_s: f64,
}

impl Default for StepTerms {
    fn default() -> StepTerms {
        StepTerms {
            items: TermKind::ALL.map(Term::new),
            after_pipeline_s: 0.0,
        }
    }
}

impl StepTerms {
    pub fn get(&self, kind: TermKind) -> &Term {
        &self.items[kind as usize]
    }
    pub fn set(&mut self, term: Term) {
        self.items[term.kind as usize] = term;
    }
    pub fn exposed(&self, kind: TermKind) -> f64 {
        self.get(kind).exposed_s.0
    }
    pub fn iter(&self) -> impl Iterator<Item = &Term> {
        self.items.iter()
    }
    /// The step time: the sum of the exposed parts.
    pub fn step_s(&self) -> f64 {
        self.items.iter().map(|t| t.exposed_s.0).sum()
    }
    /// What the pipeline's stages are busy with: compute and the communication inside their
    /// forward and backward blocks (everything but the bubble, the DP traffic after the last
    /// backward and the optimizer step).
    pub fn pipeline_busy_s(&self) -> f64 {
        self.items
            .iter()
            .filter(|t| t.kind.in_pipeline_blocks())
            .map(|t| t.exposed_s.0)
            .sum::<f64>()
            - self.after_pipeline_s
    }
    /// The exposed time of the pipeline-block terms spent after the last backward instead
    /// (`pipeline_busy_s` leaves it out; the schedule simulation adds it after the pipeline).
    pub fn after_pipeline_s(&self) -> f64 {
        self.after_pipeline_s
    }
    pub fn set_after_pipeline_s(&mut self, seconds: f64) {
        self.after_pipeline_s = seconds;
    }
    /// Sets a term's exposed time (used when the schedule simulation replaces the bubble).
    pub fn set_exposed(&mut self, kind: TermKind, exposed_s: f64) {
        self.items[kind as usize].exposed_s = Seconds(exposed_s);
        if matches!(kind, TermKind::Bubble) {
            self.items[kind as usize].time_s = Seconds(exposed_s);
        }
    }
}

impl Serialize for StepTerms {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.items.iter())
    }
}
