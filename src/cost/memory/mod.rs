//! Memory per GPU: model states (Rajbhandari et al. 2020) and activations (Korthikanti et al. 2022).
//!
//! The most loaded GPU's breakdown (`memory`), from one file per job: `activations.rs` (saved
//! bytes per layer), `params.rs` (parameters per stage), `stage_layers.rs` (which layers a stage
//! holds), `in_flight.rs` (the pipeline peak), `stage_memory.rs` (one stage's breakdown).

mod activations;
mod in_flight;
mod params;
mod stage_layers;
mod stage_memory;
#[cfg(test)]
mod tests;

pub use activations::{
    NormOutputBytes, alternate_matmul_activation_bytes, eager_saved_bytes_per_token,
    expanded_kv_saved_bytes_per_token, layer_activation_bytes, layer_activation_bytes_of,
    norm_output_bytes, norm_output_fp8_saving, norm_output_fp8_saving_at,
};
pub use params::{
    StageParams, layer_params_per_gpu, layer_params_per_gpu_at, max_stage_layer_params,
    max_stage_params,
};
pub use stage_layers::stage_moe_share;

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::{OptimizerStates, Training, WEIGHT_BYTES};
use crate::units::Bytes;
use stage_layers::memory_stage_ranks;
use stage_memory::stage_memory;

/// CUDA context, cuBLAS/NCCL workspaces and communication buffers, per GPU. A documented constant:
/// PyTorch's CUDA context alone takes 0.5–1 GiB on Ampere/Hopper, NCCL reserves buffers per
/// communicator (NCCL_BUFFSIZE 4 MiB × channels × peers), Megatron's gradient buckets and the
/// cuBLAS workspace add more. 2 GiB is our assumption; `tpsim calibrate` can measure it.
pub const RESERVED_GIB: f64 = 2.0;
/// Caching-allocator fragmentation, as a fraction of the memory the model uses (assumption: PyTorch's
/// allocator typically reserves 5–10% more than it allocates in long LLM runs).
pub const FRAGMENTATION_FRACTION: f64 = 0.05;

/// Which stage a memory breakdown belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    First,
    Middle,
    Last,
    /// pp = 1: one stage holds everything.
    Only,
    /// The first GPU of a V-shaped schedule (`cost::v_schedule`): it runs the first model chunk
    /// and the last, so it holds the embedding, the output layer and the loss.
    Ends,
    /// The most loaded of the other GPUs of a V-shaped schedule: rank r of p runs model chunks r
    /// and 2p − 1 − r (`v_schedule::virtual_stage`), neither end of the model. With uneven chunks
    /// (the last one short, or the first lighter for the embedding) it holds more layers than the
    /// first GPU.
    VMiddle,
}

impl Stage {
    /// The stage in words, as the breakdowns print it: "first stage", "a middle stage", "last
    /// stage", "the only stage".
    pub fn words(self) -> &'static str {
        match self {
            Stage::First => "first stage",
            Stage::Middle => "a middle stage",
            Stage::Last => "last stage",
            Stage::Only => "the only stage",
            Stage::Ends => "first GPU, holding the first and last chunks of the V",
            Stage::VMiddle => "a GPU past the first, holding two middle chunks of the V",
        }
    }
}

/// Memory of the most loaded GPU, broken down.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Memory {
    pub weights_bytes: Bytes,
    pub gradients_bytes: Bytes,
    pub optimizer_bytes: Bytes,
    pub activations_bytes: Bytes,
    pub other_bytes: Bytes,
    pub total_bytes: Bytes,
    pub capacity_bytes: Bytes,
    pub fits: bool,
    /// The pipeline stage this breakdown is for (the one with the largest total).
    pub stage: Stage,
    /// Its pipeline rank where it is a middle stage of a hybrid stack, whose middle stages each
    /// hold their own slice of the pattern (`stage_ranks`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub middle_rank: Option<u32>,
    /// Parameters held by one GPU of that stage before ZeRO sharding.
    /// Parameters this GPU holds before ZeRO shards them (the name says so: ZeRO-3 stores fewer).
    pub params_per_gpu_before_zero: f64,
    /// Activations of one offloaded layer for one micro-batch (`Training::cpu_offload_layers`), on
    /// average over the offloaded layers (dense and MoE ones differ): what each offload copies to
    /// host memory and back, N of them the host's share; 0 without offloading.
    pub offloaded_layer_bytes: Bytes,
    /// Host memory the offloaded activations take per GPU: the offloaded layers of every
    /// micro-batch in flight (one at pp 1, the only layout offloading allows); 0 without
    /// offloading. Transformer Engine's default handler (`OffloadableLayerState` in
    /// `transformer_engine/pytorch/cpu_offload.py`) copies each offloaded layer into its own pinned
    /// buffers and frees them only after that layer's backward (`release_all_memory`), so all N
    /// are on the host from the end of the forward until the backward reaches layer N − 1; the v1
    /// handler drops each copy at its reload, the same N at the peak. Freed pinned memory stays in
    /// PyTorch's caching host allocator for the next micro-batch. That allocator rounds every
    /// block up to a power of two (`CachingHostAllocator.h`: `c10::llvm::PowerOf2Ceil(size)`),
    /// which is not counted: tensors of non-power-of-two sizes pin up to twice their bytes, so
    /// this is a lower bound, as `host_capacity_bytes` is an upper one.
    pub host_bytes: Bytes,
    /// The profile's host memory per GPU (`GpuProfile::host_memory_gib_per_gpu`); 0 where the
    /// profile gives none (offloading is then refused before any plan is costed).
    pub host_capacity_bytes: Bytes,
    /// Whether `host_bytes` fits `host_capacity_bytes` (true without offloading).
    pub host_fits: bool,
}

impl Memory {
    /// Whether the GPU holds the plan but the host memory its offloaded activations need does
    /// not: the one misfit `eval`, `plan`, `sweep`, `compare` and the report name as the host's.
    pub fn misses_only_host(&self) -> bool {
        self.fits && !self.host_fits
    }
}

/// Memory of the most loaded GPU of the plan.
pub fn memory(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Memory {
    if plan.pp == 1 {
        return stage_memory(model, cluster, training, plan, Stage::Only, 1);
    }
    // Under a V schedule every rank holds as many chunks in flight; the first also holds both
    // ends of the model, the others may hold more layers (uneven chunks).
    if training.pp_schedule.v_kind().is_some() {
        let ends = stage_memory(model, cluster, training, plan, Stage::Ends, 1);
        let rest = stage_memory(model, cluster, training, plan, Stage::VMiddle, 1);
        return if rest.total_bytes.0 > ends.total_bytes.0 {
            rest
        } else {
            ends
        };
    }
    let mut worst = stage_memory(model, cluster, training, plan, Stage::First, 1);
    let stages: &[Stage] = if plan.pp > 2 {
        &[Stage::Middle, Stage::Last]
    } else {
        &[Stage::Last]
    };
    for &stage in stages {
        for rank in memory_stage_ranks(model, training, plan, stage) {
            let candidate = stage_memory(model, cluster, training, plan, stage, rank);
            if candidate.total_bytes.0 > worst.total_bytes.0 {
                worst = candidate;
            }
        }
    }
    worst
}

/// ZeRO §5.1's model-state bytes per GPU for Ψ parameters on N_d replicas with K = 12
/// (used by the paper's 7.5B example and our tests).
pub fn zero_model_state_bytes(params: f64, dp: u32, zero: u8, grad_bytes: f64) -> f64 {
    let dp = f64::from(dp);
    let shard = |from_stage: u8| if zero >= from_stage { dp } else { 1.0 };
    let k = OptimizerStates::Fp32.optimizer_bytes();
    params * (WEIGHT_BYTES / shard(3) + grad_bytes / shard(2) + k / shard(1))
}
