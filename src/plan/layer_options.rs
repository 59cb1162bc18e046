//! Per-layer options of the training run checked against the plan: activation offloading to the
//! CPU and layers kept in bf16 under FP8 (Megatron-Core `TransformerConfig.__post_init__`).

use crate::model::Model;
use crate::training::Training;

use super::error::PlanError;
use super::request::{PlanRequest, Precision, Recompute};

/// Activation offloading to the CPU (`Training::cpu_offload_layers`): Megatron-Core refuses it
/// with a pipeline and with recompute (`TransformerConfig.__post_init__`).
pub(super) fn check_cpu_offload(r: &PlanRequest, training: &Training) -> Result<(), PlanError> {
    let layers = training.cpu_offload_layers;
    if layers == 0 {
        return Ok(());
    }
    if r.pp > 1 {
        return Err(PlanError::CpuOffloadWithPipeline { layers, pp: r.pp });
    }
    if r.recompute != Recompute::None {
        return Err(PlanError::CpuOffloadWithRecompute {
            layers,
            recompute: r.recompute.as_str(),
        });
    }
    Ok(())
}

/// Layers kept in bf16 (`Training::bf16_layers`) as Megatron-Core allows them under FP8 (per-tensor
/// or MXFP8; `TransformerConfig.__post_init__` checks neither rule under NVFP4): not with delayed
/// scaling, and at most `num_layers // pp` at each end.
/// Why `--pp pp` admits no plan with `training`'s layers kept in bf16 at `precision` (Megatron-Core's
/// per-stage limit, [`check_bf16_layers`]), for a pinned search's explanation; None where it does.
pub fn bf16_layers_pp_refusal(
    pp: u32,
    precision: Precision,
    model: &Model,
    training: &Training,
) -> Option<String> {
    let r = PlanRequest {
        pp,
        precision,
        ..PlanRequest::default()
    };
    match check_bf16_layers(&r, model, training) {
        Err(e @ PlanError::Bf16LayersPastStage { .. }) => Some(e.to_string()),
        _ => None,
    }
}

pub(super) fn check_bf16_layers(
    r: &PlanRequest,
    model: &Model,
    training: &Training,
) -> Result<(), PlanError> {
    let keep = training.bf16_layers;
    if keep.is_none() || !matches!(r.precision, Precision::Fp8 | Precision::Mxfp8) {
        return Ok(());
    }
    if r.precision == Precision::Fp8 && training.fp8_scaling == crate::training::Fp8Scaling::Delayed
    {
        return Err(PlanError::Bf16LayersWithDelayedScaling);
    }
    let max = model.layers / r.pp.max(1);
    match keep.count_past(max) {
        Some((end, count)) => Err(PlanError::Bf16LayersPastStage {
            end,
            count,
            pp: r.pp,
            max,
            layers: model.layers,
        }),
        None => Ok(()),
    }
}
