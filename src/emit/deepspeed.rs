//! DeepSpeed out: the config JSON (DeepSpeed "Configuration JSON" docs: `train_batch_size =
//! train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size`) and the
//! Megatron-DeepSpeed launcher arguments that go beside it.

use serde::Serialize;

use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, GradDtype, Training};

/// The Megatron-DeepSpeed launcher arguments a DeepSpeed config needs beside it (Megatron-DeepSpeed
/// as of its `main` branch, megatron/arguments.py; its example scripts pass the same): the
/// model-parallel degrees, DeepSpeed-Ulysses's degree (`--ds-sequence-parallel-size`), sequence
/// parallelism and recompute (Megatron-DeepSpeed keeps Megatron-LM's names), and three that the
/// config's own keys need to take effect:
/// - `--no-pipeline-parallel` at pp 1: without it pretrain_gpt.py `model_provider` builds
///   `GPTModelPipe`, a DeepSpeed `PipelineModule`, which `deepspeed.initialize` runs in its
///   `PipelineEngine`, and that asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
///   parallelism" (deepspeed/runtime/pipe/engine.py) and checkpoints no layer under
///   `--recompute-method block` (megatron/model/gpt_model.py); the Ulysses examples
///   (examples_deepspeed/sequence_parallel/) pass it too;
/// - `--zero-stage N`, the config's `zero_optimization.stage`: pretrain_gpt.py builds the model
///   under `deepspeed.zero.Init(enabled=args.zero_stage == 3)`, and arguments.py `_add_zero_args`
///   defaults it to 1, so a ZeRO-3 config without it materialises every parameter on every GPU
///   before DeepSpeed partitions them;
/// - `--bf16`, the config's `bf16.enabled`: arguments.py sets `params_dtype = torch.bfloat16` only
///   with it, and GPTModelPipe casts the logits to fp32 for the loss only with it.
///
/// And `--use-flash-attn-v2` where tpsim prices FlashAttention: Megatron-DeepSpeed's
/// `ParallelAttention` runs the flash kernel only when one of its `--use-flash-attn-*` switches is
/// given (megatron/model/transformer.py: `self.use_flash_attn = (args.use_flash_attn_v1 or
/// args.use_flash_attn_triton or args.use_flash_attn_v2 ...)`), and otherwise its `CoreAttention`,
/// which materialises the s × s scores; its example scripts pass `--use-flash-attn-v2`.
pub fn megatron_deepspeed_args(training: &Training, plan: &ParallelPlan) -> String {
    let mut args = format!(
        "--tensor-model-parallel-size {} --pipeline-model-parallel-size {}",
        plan.tp, plan.pp
    );
    if plan.pp == 1 {
        args.push_str(" --no-pipeline-parallel");
    }
    if plan.cp > 1 {
        args.push_str(&format!(" --ds-sequence-parallel-size {}", plan.cp));
    }
    if plan.sequence_parallel {
        args.push_str(" --sequence-parallel");
    }
    args.push_str(&format!(" --zero-stage {} --bf16", plan.zero));
    if training.attention == AttentionKernel::Flash {
        args.push_str(" --use-flash-attn-v2");
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
    /// (deepspeed/runtime/engine.py, `_configure_distributed_model`; the key's spelling since
    /// deepspeedai/DeepSpeed #7175, v0.16.5: before it DeepSpeed read `seq_parallel_comm_data_type`),
    /// which defaults to "fp32"
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
    /// DeepSpeed "overlap_comm": reduce gradients during backward. Read by DeepSpeed's ZeRO
    /// optimizers only (stage_1_and_2.py, stage3.py): written as tpsim priced the plan
    /// (`cost::grad_reduce_overlaps`), off where the engine reduces after the backward (ZeRO-0;
    /// ZeRO-1 with fp32 gradients, `BF16_Optimizer`; pipelines), as `--emit deepspeed` takes only
    /// plans priced under `--framework deepspeed`.
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
            overlap_comm: crate::cost::grad_reduce_overlaps(training, plan),
        },
        sequence_parallel_size: (plan.cp > 1).then_some(plan.cp),
        seq_parallel_communication_data_type: (plan.cp > 1).then_some(grad_dtype),
    };
    serde_json::to_string_pretty(&config).expect("the DeepSpeed config serializes to JSON")
}
