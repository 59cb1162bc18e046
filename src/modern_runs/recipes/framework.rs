//! The framework a run's source used, and the kernels it runs: fusions, the loss kernel, the
//! eager GLU clamp, and whether its pipeline keeps the stage outputs.

use crate::model::Model;
use crate::modern_runs::ModernRun;
use crate::training::{KernelFusion, LossKernel, TrainingFramework};

/// The framework a run is planned as: torchtitan for torchtitan's and NeMo AutoModel's (FSDP2)
/// rows, Megatron-Core for the rest.
pub(in crate::modern_runs) fn framework_of(run: &ModernRun) -> TrainingFramework {
    if run.id.starts_with("torchtitan") || run.id.starts_with("automodel") {
        TrainingFramework::Torchtitan
    } else {
        TrainingFramework::MegatronCore
    }
}

/// The element-wise kernels a run used: torchtitan's rows say "torch.compile" in their settings or
/// "compile=true" in their notes (the 2024-08 405B rows, whose toml sets `compile = true`; async TP
/// there requires it) when compiled, and nothing otherwise (eager, torchtitan's default); NeMo
/// AutoModel's rows run Transformer Engine's fused kernels ("TE + DeepEP"); every other source is
/// Megatron-Core (fused).
pub(in crate::modern_runs) fn kernel_fusion_of(run: &ModernRun) -> KernelFusion {
    let compiled = run
        .plan
        .overlap
        .as_deref()
        .is_some_and(|o| o.to_ascii_lowercase().contains("compile"))
        || run
            .notes
            .iter()
            .any(|n| n.to_ascii_lowercase().contains("compile=true"));
    if run.id.starts_with("torchtitan") && !compiled {
        KernelFusion::Eager
    } else {
        KernelFusion::Fused
    }
}

/// The cross-entropy kernel a run used, from its framework's code at the run's version:
/// - torchtitan compiles the loss with the model only since its PR #1033 (2025-04-02,
///   `build_cross_entropy_loss`); the 2024 benchmark commits (9dec370, and the 2024-08 405B
///   runs) keep it eager under `torch.compile` ("TODO: compiling loss function causes CUDA
///   errors, turning off for now" in train.py), so their rows run the eager fp32 loss;
/// - NeMo AutoModel's benchmark configs (examples/llm_benchmark at the table's commit 36044ad)
///   use `MaskedCrossEntropy` with `fp32_upcast: false` for the MoE models and its default
///   (upcast) for Llama 3 70B;
/// - everything else is the framework's default.
pub(in crate::modern_runs) fn loss_kernel_of(
    run: &ModernRun,
    model: &Model,
    kernel_fusion: KernelFusion,
) -> LossKernel {
    if run.id.starts_with("torchtitan-2024") {
        LossKernel::EagerFp32
    } else if run.id.starts_with("automodel") {
        if model.moe.is_some() {
            LossKernel::EagerBf16
        } else {
            LossKernel::EagerFp32
        }
    } else {
        framework_of(run).default_loss_kernel(kernel_fusion)
    }
}

/// Whether a run's Megatron-Core clamps a clamped GLU with kernels of its own
/// (`Training::eager_glu_clamp`): every Megatron-Core release of the file (NeMo 24.07, the DGX
/// recipes of 2025, Megatron-Bridge 25.09 and 25.11, whose container has Megatron-Core 0.15)
/// predates Megatron-LM #5940 (2026-08-13), which fused the clamp on the SwiGLU paths, and runs
/// GPT-OSS's clamped quick-GeGLU through `weighted_bias_quick_geglu_impl`, which clamps eagerly
/// (megatron/core/fusions/fused_bias_geglu.py, unchanged from 2e29a5e1e3 to d98e8a64) — except
/// where the recipe builds the experts with Transformer Engine's op fuser
/// ([`runs_te_op_fuser`]), whose `ScaledClampedQGeGLU` clamps inside the fused activation
/// (`TEGroupedMLP`'s fuser path in megatron/core/transformer/moe/experts.py, present before #5940).
pub(in crate::modern_runs) fn eager_glu_clamp_of(
    run: &ModernRun,
    framework: TrainingFramework,
) -> bool {
    framework == TrainingFramework::MegatronCore && !runs_te_op_fuser(run)
}

/// Whether a Megatron-Bridge recipe sets `use_transformer_engine_op_fuser` for a run's GPT-OSS
/// 120B experts: the MXFP8 full-iteration-graph configs on GB300 and GB200, through
/// `cutedsl_fused_grouped_mlp=True` (`scripts/performance/configs/gpt_oss/
/// gpt_oss_workload_base_configs.py` `GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2` and
/// `..._GB200_FP8_MX_V2`, which `_set_workload_base_configs` in `scripts/performance/utils/
/// overrides.py:238` turns into `use_transformer_engine_op_fuser = True`, at v0.5.0 and v0.5.1),
/// and `_apply_gpt_oss_120b_full_iter_fp8mx_configs` (`src/megatron/bridge/perf_recipes/gpt_oss/
/// common.py:42` at v0.6.0, called by the GB300 and GB200 fp8mx recipes). The B300 MXFP8 config
/// is the BF16 one (`GPT_OSS_120B_PRETRAIN_CONFIG_B300_FP8_MX_V2 = ..._B300_BF16_V2`): no fuser.
fn runs_te_op_fuser(run: &ModernRun) -> bool {
    use super::releases::{Bridge26, bridge_26_release};
    let (model, gpu) = super::lookup::model_and_gpu(run);
    model == "gpt_oss_120b"
        && matches!(gpu.as_str(), "GB300" | "GB200")
        && super::lookup::precision_is(run, "mxfp8")
        && matches!(
            bridge_26_release(run),
            Some(Bridge26::V050 | Bridge26::V051 | Bridge26::V060)
        )
}

/// Whether a run's pipeline keeps every micro-batch's output on its last stage until the step
/// ends (`Training::pipeline_keeps_outputs`): torchtitan before e5ef99a (2025-10-22), which is
/// every torchtitan row of the file: the 2024-08 and 2024-12 benchmark commits, the 2025-06
/// async-TP runs and Trainy's June 2025 runs (torchtitan e7c0cae).
pub(in crate::modern_runs) fn pipeline_keeps_outputs_of(run: &ModernRun) -> bool {
    [
        "torchtitan-202408",
        "torchtitan-202412",
        "torchtitan-202506",
        "torchtitan-trainy",
    ]
    .iter()
    .any(|prefix| run.id.starts_with(prefix))
}
