//! What one evaluation returns: the `Estimate` of a plan (its memory, communication, step time
//! and throughput), with the parts it is built from — `StepTime`, `Infeasible`, `cost_to_train`.
//! The bubble ratio is Narayanan et al. 2021 §2.2's (p − 1)/(v·m).

use serde::Serialize;

use super::comm::Comm;
use super::memory::Memory;
use super::terms::{StepTerms, TermKind};
use crate::model::HybridRun;
use crate::plan::ParallelPlan;
use crate::units::{Bytes, Seconds};

/// Where the time of one step goes; the parts add up to `step_s`. Each field is the exposed time of
/// one term of `Estimate::terms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    pub step_s: Seconds,
    pub compute_s: Seconds,
    pub tp_comm_exposed_s: Seconds,
    /// The attention's exchange and a hybrid stack's Mamba mixers' together (both over the CP
    /// group).
    pub cp_comm_exposed_s: Seconds,
    pub ep_comm_exposed_s: Seconds,
    pub pp_comm_exposed_s: Seconds,
    /// Gradient reduction and parameter gathers together.
    pub dp_comm_exposed_s: Seconds,
    pub dp_grad_reduce_exposed_s: Seconds,
    pub dp_param_gather_exposed_s: Seconds,
    pub bubble_s: Seconds,
    pub optimizer_s: Seconds,
    /// Activation offloading's copies left on the critical path (`--cpu-offload-layers`).
    pub offload_exposed_s: Seconds,
}

impl StepTime {
    /// Reads the step time off its terms.
    pub fn from_terms(terms: &StepTerms) -> StepTime {
        let e = |kind| Seconds(terms.exposed(kind));
        StepTime {
            step_s: Seconds(terms.step_s()),
            compute_s: e(TermKind::Compute),
            tp_comm_exposed_s: e(TermKind::TpComm),
            cp_comm_exposed_s: Seconds(
                terms.exposed(TermKind::CpComm) + terms.exposed(TermKind::MambaCpComm),
            ),
            ep_comm_exposed_s: e(TermKind::EpComm),
            pp_comm_exposed_s: e(TermKind::PpComm),
            dp_comm_exposed_s: Seconds(
                terms.exposed(TermKind::DpGradReduce) + terms.exposed(TermKind::DpParamGather),
            ),
            dp_grad_reduce_exposed_s: e(TermKind::DpGradReduce),
            dp_param_gather_exposed_s: e(TermKind::DpParamGather),
            bubble_s: e(TermKind::Bubble),
            optimizer_s: e(TermKind::Optimizer),
            offload_exposed_s: e(TermKind::HostOffload),
        }
    }
}

/// Why a plan cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Infeasible {
    OutOfMemory {
        need_bytes: Bytes,
        have_bytes: Bytes,
    },
    /// The activations offloaded to the CPU (`--cpu-offload-layers`) fit the GPU but not the
    /// host memory the profile gives each GPU (`GpuProfile::host_memory_gib_per_gpu`).
    OutOfHostMemory {
        need_bytes: Bytes,
        have_bytes: Bytes,
    },
}

impl Infeasible {
    pub fn key(&self) -> &'static str {
        match self {
            Infeasible::OutOfMemory { .. } => "out_of_memory",
            Infeasible::OutOfHostMemory { .. } => "out_of_host_memory",
        }
    }
}

/// What renting `gpus` GPUs for `seconds` costs at `price_per_gpu_hour`.
pub fn cost_to_train(seconds: f64, gpus: f64, price_per_gpu_hour: f64) -> f64 {
    seconds / 3600.0 * gpus * price_per_gpu_hour
}

/// Everything tpsim predicts for one plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    #[serde(flatten)]
    pub plan: ParallelPlan,
    pub memory: Memory,
    pub comm: Comm,
    /// The closed-form pipeline bubble ratio (p − 1)/(v·m) of Narayanan et al. 2021 §2.2: idle time
    /// over one stage's busy time, a ratio that can exceed 1 (deep pipelines, few micro-batches).
    pub bubble_ratio: f64,
    /// Share of the step the pipeline sits idle, bubble_s / step_s, in [0, 1): what the table's
    /// "bubble %" shows.
    pub bubble_share: f64,
    pub time: StepTime,
    /// The step's terms: what each costs, what of it is exposed and what hides the rest.
    pub terms: StepTerms,
    pub model_tflops_per_gpu: f64,
    pub hardware_tflops_per_gpu: f64,
    pub mfu: f64,
    pub tokens_per_s: f64,
    pub time_to_train_s: Option<f64>,
    /// The time to train x the GPUs x `--price-per-gpu-hour`, in the price's currency: what
    /// renting the cluster for the training costs (`cost_to_train`).
    pub cost_to_train: Option<f64>,
    pub infeasible: Option<Infeasible>,
    /// Transformer layers of the stage whose time sets the step: the per-layer communication in
    /// `comm` and the terms is this stage's (with pp 1, every layer).
    pub slowest_stage_layers: u32,
    /// The MoE layers among them: the ones whose all-to-alls the EP term counts.
    pub slowest_stage_moe_layers: u32,
    /// The MTP layers among them (the last stage's, or with pp 1 the only stage's): the rest of
    /// `slowest_stage_layers` are decoder layers.
    pub slowest_stage_mtp_layers: u32,
    /// A hybrid stack's run of layers on it (its own slice of the pattern,
    /// `pipeline::ChunkLayout::stage_run`): its blocks and MTP depths, in the JSON as
    /// `slowest_stage_blocks`; None (and absent) for a transformer.
    #[serde(
        rename = "slowest_stage_blocks",
        skip_serializing_if = "Option::is_none"
    )]
    pub slowest_stage_run: Option<HybridRun>,
}

impl Estimate {
    pub fn fits(&self) -> bool {
        self.infeasible.is_none()
    }
}
