//! Number formats the sources ran beyond the GEMMs: optimizer-state and gradient dtypes, FP8
//! scaling, the layers kept in bf16, and per-module precision (Nemotron 3 Super's NVFP4 recipe).

use crate::modern_runs::ModernRun;
use crate::training::{GradDtype, OptimizerStates};

use super::lookup::{model_and_gpu, precision_is};
use super::moe::from_moe_report;
use super::releases::{Bridge26, bridge_26_release};

/// The optimizer-state format and gradient dtype a run's recipe sets where it departs from its
/// framework's default:
/// - NeMo AutoModel builds the model in bf16 (`NeMoAutoModelForCausalLM.from_config`, default
///   `torch_dtype="auto"` → `torch.bfloat16`, `nemo_automodel/_transformers/auto_model.py` at the
///   table's commit 36044ad) and its benchmark configs use `torch.optim.Adam`, whose moments take
///   the parameters' dtype: bf16 parameters, gradients and moments, no master copy. FSDP2 reduces
///   in fp32 (`MixedPrecisionPolicy(reduce_dtype=float32)`) and keeps the bf16 result.
/// - Megatron-Bridge's DeepSeek-V3 recipe (`recipes/deepseek/deepseek_v3.py`, at 9a5e79865 for
///   25.09 and v0.2.0 for 25.11) sets `use_precision_aware_optimizer = True`, fp32 main params,
///   bf16 `main_grads_dtype`, `exp_avg_dtype` and `exp_avg_sq_dtype`, and `grad_reduce_in_fp32=False`.
/// - Megatron-Bridge's performance scripts turn the precision-aware optimizer on for every bf16
///   run (`if args.compute_dtype == "bf16": recipe.optimizer.use_precision_aware_optimizer =
///   True`, NVIDIA-NeMo/Megatron-Bridge `scripts/performance/run_script.py:133` at 9a5e798 for
///   25.09; `utils/helpers.py:255` at v0.2.0; `set_post_overrides` in `utils/overrides.py` from
///   v0.3.0 to v0.6.0, with `and recipe.optimizer.optimizer == "adam"` from v0.4.0), at the
///   recipe's state dtypes: Megatron-Core's defaults (fp32 moments, the master as 16-bit
///   remainders) for every bf16 row but DeepSeek-V3's, whose recipe sets bf16 moments (above).
///   The scripts turn it off again under Megatron-FSDP (`helpers.py:87` at 9a5e798), which no
///   bf16 row runs.
pub(in crate::modern_runs) fn recipe_optimizer_states(
    run: &ModernRun,
) -> Option<(OptimizerStates, GradDtype)> {
    if run.id.starts_with("automodel") {
        return Some((OptimizerStates::Bf16, GradDtype::Bf16));
    }
    // The Megatron-Core MoE report lists "low-precision (BF16) optimizer states" for DeepSeek-V3
    // (Table 18) and names Megatron-Bridge's recipes for reproduction (Appendix B.3): the same.
    let bridge_or_report = run.id.starts_with("mbridge") || from_moe_report(run);
    if bridge_or_report && run.model_key.as_deref() == Some("deepseek_v3") {
        return Some((OptimizerStates::Bf16Moments, GradDtype::Bf16));
    }
    // Megatron-Bridge's Kimi K2 performance configs train with Muon (`optimizer_type="muon"`, the
    // default of `kimi_k2_pretrain_config_gb300`, scripts/performance/configs/kimi/
    // kimi_llm_pretrain.py:57-61 at v0.5.0; `dist_muon`, recipes/utils/optimizer_utils.py).
    if run.id.starts_with("mbridge") && run.model_key.as_deref() == Some("kimi_k2") {
        return Some((OptimizerStates::Muon, GradDtype::Bf16));
    }
    if run.id.starts_with("mbridge") && precision_is(run, "bf16") {
        return Some((OptimizerStates::PrecisionAware, GradDtype::Bf16));
    }
    None
}

/// The dtype a run's recipe reduces gradients in where it departs from Megatron-Core's fp32
/// (Megatron-LM turns `--accumulate-allreduce-grads-in-fp32` on for bf16 training,
/// `megatron/training/arguments.py`; NVIDIA's benchmark recipes turn it off):
/// - Megatron-Bridge's performance configs, every model and precision: 25.09
///   (`scripts/performance/configs/*/*_llm_pretrain.yaml` at 9a5e798: `grad_reduce_in_fp32:
///   false`), 25.11 (`set_*_common_configs` in `scripts/performance/configs/*/*_llm_pretrain.py`
///   at v0.2.0) and 26.x (`perf_recipes/_common.py` `_perf_precision` at 067f987: "Always sets
///   grad_reduce_in_fp32=False");
/// - dgxc-benchmarking v25.01 (143b90d), NeMo 1.0 configs: every model's YAML sets
///   `optim.grad_sync_dtype: bf16`, which NeMo hands Megatron-Core's DDP as
///   `grad_reduce_in_fp32=False` (`megatron_gpt_model.py`); the same YAMLs serve the Grok-1 and
///   GPT-3 175B rows of v25.04.01 (85380ff, `grok1/cfg/grok1_314b.yaml`,
///   `nemo_megatron/cfg/gpt3_175b_hydra.yaml`);
/// - dgxc-benchmarking's NeMo 2.0 scripts, bf16 and FP8 runs alike: v25.04.01's
///   `llama3.1/pretrain_llama31.py` (85380ff) and the NeMo 25.04 container's
///   `scripts/performance/llm/pretrain_*.py` that v25.05.x (161e783) launches build the recipe
///   with `pretrain_recipe(performance_mode=True)`, whose `pretrain_performance_optimizations`
///   sets `recipe.trainer.plugins.grad_reduce_in_fp32 = False` on the bf16 plugin (NVIDIA/NeMo
///   `nemo/collections/llm/recipes/llama3_8b.py:240`, `llama3_70b.py:246`, `llama31_405b.py:253`
///   at d2b2155, v25.04.01's NEMO_COMMIT; `llama31_405b.py:253`, `nemotron4_15b.py:222`,
///   `nemotron4_340b.py:226` and `scripts/performance/llm/pretrain_grok1_314b.py:221` at 6f2c6fd,
///   v25.05.x's), and `MegatronStrategy` copies the plugin's dtype fields over the recipe's DDP
///   config (`update_config_with_dtype_overrides`, `megatron_strategy.py:384` at d2b2155); the
///   FP8 branch sets the same again on its fresh `bf16_with_fp8_mixed()` plugin.
///
/// Other sources (NeMo 24.07 and its long-context tables, MaxText, torchtitan, AutoModel, the
/// Megatron-Core MoE report) are left at their framework's default or their own rule in
/// [`recipe_optimizer_states`].
pub(in crate::modern_runs) fn recipe_grad_dtype(run: &ModernRun) -> Option<GradDtype> {
    let id = run.id.as_str();
    let nemo1_yaml_in_25_04 = ["dgxc-v25.04.01-grok1", "dgxc-v25.04.01-gpt3"]
        .iter()
        .any(|p| id.starts_with(p));
    let nemo2_performance_mode =
        id.starts_with("dgxc-v25.04.01-llama31") || id.starts_with("dgxc-v25.05.x-");
    (id.starts_with("mbridge")
        || id.starts_with("dgxc-v25.01-")
        || nemo1_yaml_in_25_04
        || nemo2_performance_mode)
        .then_some(GradDtype::Bf16)
}

/// Per-tensor FP8's scaling recipe of a run, from the scripts that ran it:
/// - NVIDIA's DGX Cloud recipes (dgxc, NeMo 24.09-25.04) and NeMo 24.07's tables ran NeMo 2's
///   performance scripts, whose `--fp8_recipe` defaults to "ds", per-tensor delayed scaling
///   (NVIDIA/NeMo `scripts/performance/argument_parser.py`); before current scaling existed, NeMo's
///   FP8 was delayed scaling only;
/// - Megatron-Bridge's tables say "FP8-CS" (25.11), current scaling; its 25.09 FP8 rows are taken
///   as the same recipe: the 25.09 scripts special-case `fp8_recipe == "cs"` for exactly these
///   runs (`scripts/performance/setup_experiment.py` at a288441), and the 25.09 and 25.11 values of
///   the same H100 plans agree within 1-3% (Llama 3 70B 1,619 and 1,602 tokens/s per GPU);
/// - torchtitan's float8 is torchao's tensorwise dynamic scaling, current scaling.
pub(in crate::modern_runs) fn recipe_fp8_scaling(run: &ModernRun) -> crate::training::Fp8Scaling {
    if run.id.starts_with("dgxc") || run.id.starts_with("nemo-") {
        crate::training::Fp8Scaling::Delayed
    } else {
        crate::training::Fp8Scaling::Current
    }
}

/// The layers a Megatron-Bridge 26.x recipe keeps in bf16 (`training::Bf16Layers`): Nemotron 3
/// Super's NVFP4 runs from 26.04 (v0.4.0) on take `nemotron_3_super_bf16_with_nvfp4_mixed`
/// (`training/mixed_precision.py`: `first_last_layers_bf16 = True`, `num_layers_at_end_in_bf16 =
/// 14`, the start count left at `MixedPrecisionConfig`'s 0), set by
/// `scripts/performance/configs/nemotronh/nemotron_3_llm_pretrain.py` (v0.4.0 l. 49-50, v0.5.0
/// l. 43) and `perf_recipes/nemotronh/common.py` (v0.6.0, `_nemotron_3_super_nvfp4_precision`).
/// Every other recipe of the tables runs its layers at the plan's precision: the performance
/// scripts turn `first_last_layers_bf16` off for FP8 current scaling (`utils/precision.py` l. 31),
/// and the NVFP4 Llama rows take `bf16_with_nvfp4_mixed`, which keeps none. The same Super runs load
/// `te_quant.cfg` (`cfg.model.quant_recipe`, same files; v0.6.0 `perf_recipes/nemotronh/<gpu>/
/// nemotronh.py`), whose `mtp_bf16` matcher keeps the MTP block in bf16, which Megatron-Core alone
/// would run at NVFP4 (`training::mtp_runs_bf16`).
pub(in crate::modern_runs) fn recipe_bf16_layers(run: &ModernRun) -> crate::training::Bf16Layers {
    if super_nvfp4_recipe(run) {
        crate::training::Bf16Layers {
            at_start: 0,
            at_end: 14,
            mtp: true,
        }
    } else {
        crate::training::Bf16Layers::NONE
    }
}

/// The modules a Megatron-Bridge 26.x recipe's quantization recipe file runs at their own
/// precision (`training::ModulePrecision`): Nemotron 3 Super's NVFP4 runs from 26.04 (v0.4.0) on
/// load `te_quant.cfg` (`scripts/performance/configs/nemotronh/te_quant.cfg` at v0.4.0 and v0.5.0,
/// `perf_recipes/nemotronh/te_quant.cfg` at v0.6.0, the same file), whose matchers run
/// `*.linear_qkv`, `*.linear_proj` and `*mlp.fc[12]_latent_proj` at its bf16 config and
/// `*mixer.out_proj` at MXFP8 (its `mtp.*` matcher is [`recipe_bf16_layers`]'s `mtp`).
pub(in crate::modern_runs) fn recipe_module_precision(
    run: &ModernRun,
) -> crate::training::ModulePrecision {
    use crate::plan::Precision;
    if super_nvfp4_recipe(run) {
        crate::training::ModulePrecision {
            attention_linears: Some(Precision::Bf16),
            latent_projections: Some(Precision::Bf16),
            mamba_out_proj: Some(Precision::Mxfp8),
        }
    } else {
        crate::training::ModulePrecision::NONE
    }
}

/// Whether a run is Nemotron 3 Super's NVFP4 recipe from 26.04 (v0.4.0) on, which keeps layers and
/// modules in bf16 ([`recipe_bf16_layers`], [`recipe_module_precision`]).
fn super_nvfp4_recipe(run: &ModernRun) -> bool {
    let (model, _) = model_and_gpu(run);
    bridge_26_release(run).is_some_and(|release| release >= Bridge26::V040)
        && model == "nemotron3_super"
        && precision_is(run, "nvfp4")
}
