//! DeepSpeed out: the config JSON (DeepSpeed "Configuration JSON" docs: `train_batch_size =
//! train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size`) and the
//! Megatron-DeepSpeed launcher arguments that go beside it.

use serde::Serialize;

use crate::plan::{ParallelPlan, Recompute};
use crate::training::{GradDtype, Training};

/// The Megatron-DeepSpeed launcher arguments a DeepSpeed config needs beside it: the model-parallel
/// degrees, DeepSpeed-Ulysses's degree (`--ds-sequence-parallel-size`, Megatron-DeepSpeed's
/// arguments.py), sequence parallelism and recompute (Megatron-DeepSpeed keeps Megatron-LM's
/// names).
pub fn megatron_deepspeed_args(plan: &ParallelPlan) -> String {
    let mut args = format!(
        "--tensor-model-parallel-size {} --pipeline-model-parallel-size {}",
        plan.tp, plan.pp
    );
    if plan.cp > 1 {
        args.push_str(&format!(" --ds-sequence-parallel-size {}", plan.cp));
    }
    if plan.sequence_parallel {
        args.push_str(" --sequence-parallel");
    }
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => args.push_str(" --recompute-granularity selective"),
        Recompute::Full if plan.recompute_num_layers > 0 => args.push_str(&format!(
            " --recompute-granularity full --recompute-method block --recompute-num-layers {}",
            plan.recompute_num_layers
        )),
        Recompute::Full => args.push_str(
            " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
        ),
    }
    args
}

#[derive(Serialize)]
struct DeepSpeedConfig {
    train_batch_size: u32,
    train_micro_batch_size_per_gpu: u32,
    gradient_accumulation_steps: u32,
    bf16: Enabled,
    data_types: DataTypes,
    zero_optimization: ZeroOptimization,
    /// DeepSpeed-Ulysses's degree (the ALST tutorial's `"sequence_parallel_size"`,
    /// docs/_tutorials/ulysses-alst-sequence-parallelism.md; deepspeed/runtime/config.py reads it
    /// for the data-parallel world size); absent without context parallelism.
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_parallel_size: Option<u32>,
    /// The dtype DeepSpeed reduces gradients in under Ulysses: with a sequence-parallel size above
    /// 1 the engine takes its communication dtype from `"seq_parallel_communication_data_type"`
    /// (deepspeed/runtime/engine.py, `_configure_distributed_model`), which defaults to "fp32"
    /// (deepspeed/runtime/constants.py `SEQ_PARALLEL_COMMUNICATION_DATA_TYPE_DEFAULT`), and ZeRO-1/2
    /// casts every gradient to it before the reduce (stage_1_and_2.py
    /// `gradient_reduction_w_predivide`); written as the gradient dtype tpsim prices the reduction
    /// in, so the run does not send twice the bytes. Absent without context parallelism.
    #[serde(skip_serializing_if = "Option::is_none")]
    seq_parallel_communication_data_type: Option<&'static str>,
}

/// DeepSpeed's `data_types.grad_accum_dtype` (fp32, fp16 or bf16): the gradient precision.
#[derive(Serialize)]
struct DataTypes {
    grad_accum_dtype: &'static str,
}

#[derive(Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Serialize)]
struct ZeroOptimization {
    stage: u8,
    /// DeepSpeed "overlap_comm": reduce gradients during backward.
    overlap_comm: bool,
}

/// DeepSpeed config JSON. DeepSpeed checks `train_batch_size = micro × accumulation × dp`; tp and
/// pp are Megatron-DeepSpeed launcher arguments, not config keys.
pub fn deepspeed_json(training: &Training, plan: &ParallelPlan) -> String {
    let grad_dtype = match training.grad_dtype {
        GradDtype::Fp32 => "fp32",
        GradDtype::Bf16 => "bf16",
    };
    let config = DeepSpeedConfig {
        train_batch_size: plan.global_batch,
        train_micro_batch_size_per_gpu: plan.micro_batch,
        gradient_accumulation_steps: plan.num_microbatches,
        bf16: Enabled { enabled: true },
        data_types: DataTypes {
            grad_accum_dtype: grad_dtype,
        },
        zero_optimization: ZeroOptimization {
            stage: plan.zero,
            overlap_comm: training.overlap.grad_reduce,
        },
        sequence_parallel_size: (plan.cp > 1).then_some(plan.cp),
        seq_parallel_communication_data_type: (plan.cp > 1).then_some(grad_dtype),
    };
    serde_json::to_string_pretty(&config).expect("the DeepSpeed config serializes to JSON")
}
