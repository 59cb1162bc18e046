//! What each published source ran beyond the plan its table states: the settings read from the
//! recipes, configs and scripts behind the runs of `validation/modern_runs.yaml` and
//! `validation/mcore_moe_report.yaml` (the framework, its dispatcher and overlap, recompute
//! modules, optimizer-state formats, FP8 scaling, pipeline layouts and defaults), each with the
//! file and commit it was read from. `modern_runs::plan_run` applies them.
//!
//! One file per kind of setting: the run's keys (`lookup.rs`), the Megatron-Bridge releases
//! (`releases.rs`), pipeline, recompute, MoE, overlap, precision and framework settings.

mod framework;
mod lookup;
mod moe;
mod overlap;
mod pipeline;
mod precision;
mod recompute;
mod releases;

pub(super) use framework::{
    eager_glu_clamp_of, framework_of, kernel_fusion_of, loss_kernel_of, pipeline_keeps_outputs_of,
};
pub(super) use moe::{
    automodel_config_ep, recipe_capacity_factor, recipe_moe_dispatch, recipe_overlaps_moe_alltoall,
};
pub(super) use overlap::{recipe_comm_overlap, recipe_low_precision_param_gather};
pub(super) use pipeline::{mtp_layers_of, pipeline_defaults, recipe_stage_split};
pub(super) use precision::{
    recipe_bf16_layers, recipe_fp8_scaling, recipe_grad_dtype, recipe_module_precision,
    recipe_optimizer_states,
};
pub(super) use recompute::{
    OFFLOAD_RECIPE_GPUS, recipe_cpu_offload_layers, recipe_recompute, recipe_recompute_modules,
    stated_recompute,
};
pub(super) use releases::check_id_release;
