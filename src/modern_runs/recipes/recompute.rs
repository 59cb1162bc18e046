//! The recompute the sources ran: the modules their recipes recompute, activation offloading to
//! the CPU on GB200/GB300, the MoE report's recompute modules, and recompute as a run's notes state it.

use crate::modern_runs::ModernRun;
use crate::plan::Recompute;
use crate::training::{RecomputeModule, RecomputeModules};

use super::lookup::{model_and_gpu, precision_is};
use super::moe::from_moe_report;
use super::releases::{Bridge26, bridge_26_release};

/// The Megatron-Core modules a Megatron-Bridge recipe recomputes, where its configs at the run's
/// version set `recompute_granularity = "selective"` (read in NVIDIA-NeMo/Megatron-Bridge's
/// history, validation/FIT.md "Recompute modules"). 25.09 and 25.11: DeepSeek-V3 only
/// (`set_deepseek_v3_common_configs`: "selective"; Qwen3's set None, GPT-OSS's list modules but
/// never set selective, so Megatron-Core ignores them):
/// - 25.09 (r0.1.0 "Cherry pick perf 2509 (#959)", a288441, `scripts/performance/run_script.py`):
///   `["mla_up_proj", "mlp"]` on H100, `["mla_up_proj"]` on B200 and GB200;
/// - 25.11 (`scripts/performance/configs/deepseek/workload_base_configs.py`, v0.2.0 7af9601 and
///   the 25.11 table's branch 4a82e16): `["mla_up_proj"]` on B200 and GB200, `["mlp",
///   "moe_act"]` on GB300.
///
/// 26.x ([`Bridge26`]): from v0.3.0 `_set_recompute_overrides` sets selective granularity
/// wherever a workload config lists `recompute_modules` (`scripts/performance/utils/
/// overrides.py:143` at v0.3.0, `:144` v0.3.1, `:145` v0.4.0, `:150` v0.4.2, `:156` v0.5.0/v0.5.1),
/// so GPT-OSS's lists now apply. The lists, for the pairs with a published row:
/// - DeepSeek-V3 (`configs/deepseek/deepseek_workload_base_configs.py`): `["mla_up_proj"]` on
///   GB300, GB200, B300 and B200 at v0.3.0 and v0.3.1 (`:53`, `:81`, `:96`, `:111`); at v0.4.0
///   GB200 `["mlp"]` (`:81`), the others `["mla_up_proj"]` (`:53`, `:100`, `:116`); at v0.4.2 GB200
///   `["mlp"]` (`:81`), B200 MXFP8 `["mla_up_proj", "mlp"]` (`:213`), GB300 and B300
///   `["mla_up_proj"]` (`:53`, `:186`); at v0.5.0 and v0.5.1 GB200 and B300 `["mla_up_proj"]`
///   (`:104`, `:228`) and GB300 MXFP8 `[]` (`:75`, none: [`recipe_recompute`]); at v0.6.0 GB200
///   `["mla_up_proj"]` (`perf_recipes/deepseek/gb200/deepseek_v3.py:149`) and GB300 `[]`
///   (`perf_recipes/deepseek/gb300/deepseek_v3.py:148`);
/// - Kimi K2 GB300, v0.3.1 to v0.5.0: `["mla_up_proj"]` (`configs/kimi/kimi_workload_base_configs.py:38`,
///   selective in `set_kimi_k2_common_configs`, `kimi_llm_pretrain.py:47`);
/// - GPT-OSS 120B GB200, B200 and H100, v0.3.0 to v0.4.2: `["layernorm", "moe_act"]`
///   (`configs/gpt_oss/gpt_oss_workload_base_configs.py:58`, `:75`, `:82`); GB300 and B300 list
///   none; from v0.5.0 the GB200 MXFP8 config lists `[]` (`:220`; v0.6.0
///   `perf_recipes/gpt_oss/gb200/gpt_oss.py:240-241`);
/// - Qwen3: none (granularity None, [`recipe_recompute`]);
/// - Nemotron 3 Nano on H100 (`configs/nemotronh/nemotron_3_nano_workload_base_configs.py:80-86`
///   at v0.3.1, `nemotron_3_workload_base_configs.py:78-87` at v0.4.0 to v0.5.1; v0.6.0
///   `perf_recipes/nemotronh/h100/nemotronh.py:128,182`): `["moe", "layernorm"]` in BF16,
///   `["moe", "layernorm", "core_attn", "moe_act"]` in FP8;
/// - Nemotron 3 Super (`nemotron_3_workload_base_configs.py:121-151` at v0.4.0 to v0.5.0; v0.6.0
///   `perf_recipes/nemotronh/b200/nemotronh.py:87,135,183`, `b300/nemotronh.py:88,188`): B200
///   `["moe_act", "moe", "layernorm", "core_attn"]` in BF16, `["moe_act", "layernorm"]` in MXFP8,
///   none in NVFP4 (v0.5.0's NVFP4 lists the BF16 four, v0.5.1's `["moe_act", "layernorm",
///   "core_attn"]` at tp 2, ep 8); B300 `["moe_act", "layernorm"]` in BF16 and NVFP4, none in
///   MXFP8; GB300 and GB200 none. Ultra's 26.08 `["moe_act"]` comes with an offload of the
///   experts' FC1 output to the CPU, which tpsim does not price, so its rows keep the search's
///   choice.
///
/// The Megatron-Core MoE report's runs (Appendix B.2, "Recompute"): DeepSeek-V3 `mlp` on GB200 and,
/// on H100, Table 17's `mlp, mla_up_proj, moe_act, layernorm` (the row's own table, over B.2's
/// shorter list); Qwen3-235B `moe_act, layernorm` on GB200 and H100; none on GB300.
pub(in crate::modern_runs) fn recipe_recompute_modules(
    run: &ModernRun,
) -> Option<RecomputeModules> {
    use Bridge26::{V030, V031, V040, V042, V050, V051, V060};
    use RecomputeModule::{CoreAttn, Layernorm, MlaUpProj, Mlp, Moe, MoeAct};
    if from_moe_report(run) {
        return report_recompute_modules(run);
    }
    let (model, gpu) = model_and_gpu(run);
    let gpu = gpu.as_str();
    if let Some(release) = bridge_26_release(run) {
        let modules: &[RecomputeModule] = match (release, model) {
            (V040 | V042, "deepseek_v3") if gpu == "GB200" => &[Mlp],
            (V042, "deepseek_v3") if gpu == "B200" => &[MlaUpProj, Mlp],
            (V050 | V051 | V060, "deepseek_v3") if gpu == "GB300" => return None,
            (_, "deepseek_v3") => &[MlaUpProj],
            (V031 | V040 | V042 | V050, "kimi_k2") if gpu == "GB300" => &[MlaUpProj],
            (V030 | V031 | V040 | V042, "gpt_oss_120b")
                if matches!(gpu, "GB200" | "B200" | "H100") =>
            {
                &[Layernorm, MoeAct]
            }
            (_, "nemotron3_nano") if gpu == "H100" && precision_is(run, "bf16") => {
                &[Moe, Layernorm]
            }
            (_, "nemotron3_nano") if gpu == "H100" => &[Moe, Layernorm, CoreAttn, MoeAct],
            (_, "nemotron3_super") if gpu == "B200" && precision_is(run, "bf16") => {
                &[MoeAct, Moe, Layernorm, CoreAttn]
            }
            (_, "nemotron3_super") if gpu == "B200" && precision_is(run, "mxfp8") => {
                &[MoeAct, Layernorm]
            }
            (V050, "nemotron3_super") if gpu == "B200" && precision_is(run, "nvfp4") => {
                &[MoeAct, Moe, Layernorm, CoreAttn]
            }
            (V051, "nemotron3_super") if gpu == "B200" && precision_is(run, "nvfp4") => {
                &[MoeAct, Layernorm, CoreAttn]
            }
            (_, "nemotron3_super")
                if gpu == "B300" && (precision_is(run, "bf16") || precision_is(run, "nvfp4")) =>
            {
                &[MoeAct, Layernorm]
            }
            _ => return None,
        };
        return Some(RecomputeModules::of(modules));
    }
    if !run.id.starts_with("mbridge") || model != "deepseek_v3" {
        return None;
    }
    let modules: &[RecomputeModule] = match gpu {
        "H100" => &[MlaUpProj, Mlp],
        "B200" | "GB200" => &[MlaUpProj],
        "GB300" if run.id.starts_with("mbridge-25.11") => &[Mlp, MoeAct],
        _ => return None,
    };
    Some(RecomputeModules::of(modules))
}

/// The recompute a Megatron-Bridge 26.x recipe states where it lists no modules to recompute
/// selectively ([`recipe_recompute_modules`] covers those), pinned where otherwise the search would
/// choose: none for Qwen3, whose configs set `recompute_granularity = None`
/// (`set_qwen3_common_configs`, `scripts/performance/configs/qwen/qwen3_llm_pretrain.py:33` at
/// v0.3.0 to v0.4.2, `:34` at v0.5.0). It is pinned only where the recipe keeps its activations
/// in ways tpsim expresses: from v0.5.0 the MXFP8 full-iteration-graph configs (Qwen3 on GB300,
/// GB200 and B300, `set_full_iter_cg_configs`, `qwen3_llm_pretrain.py:48-55` at v0.5.0; v0.6.0
/// `perf_recipes/qwen/common.py:36-47`) page the MoE activations into a stash with a host buffer
/// (`moe_paged_stash`), and the 26.x Llama 3 70B FP8 configs on GB300 and GB200 offload 20 and 40
/// layers' activations to the CPU (`cpu_offloading_num_layers`); tpsim has neither, so there the
/// search keeps choosing, as it does for DeepSeek-V3 GB300 and GPT-OSS 120B GB200, whose
/// `recompute_modules=[]` configs page the same way (validation/mbridge_26_runs.md).
///
/// Full recompute by block (Llama 3 8B on H100 at 25.11: `recompute_num_layers=5`,
/// `scripts/performance/configs/llama3/workload_base_configs.py:229-232` at v0.2.0) is not pinned:
/// the search offers block counts of a quarter, a half and three quarters of a chunk, not 5 of 32.
pub(in crate::modern_runs) fn recipe_recompute(run: &ModernRun) -> Option<Recompute> {
    let release = bridge_26_release(run)?;
    let (model, gpu) = model_and_gpu(run);
    let paged_stash = release >= Bridge26::V050 && gpu != "H100";
    (matches!(model, "qwen3_30b_a3b" | "qwen3_235b_a22b") && !paged_stash)
        .then_some(Recompute::None)
}

/// The GPUs, as the runs name them, of the Megatron-Bridge recipes that offload activations
/// ([`recipe_cpu_offload_layers`]): the only published runs tpsim's offload pricing is compared
/// with (both copy over NVLink-C2C to a Grace CPU).
pub(in crate::modern_runs) const OFFLOAD_RECIPE_GPUS: [&str; 2] = ["GB200", "GB300"];

/// Layers whose activations a Megatron-Bridge recipe offloads to the CPU
/// (`cpu_offloading_num_layers`, tpsim's `--cpu-offload-layers`), where the published plan is
/// the recipe's Megatron-FSDP layout (FSDP over every GPU, no pipeline) at FP8 current scaling:
/// - Llama 3 70B on GB300: 20 layers, micro-batch 2 (v0.2.0, 25.11:
///   `scripts/performance/configs/llama3/workload_base_configs.py:43-48`
///   `LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG`; 26.x: `configs/llama/llama3_workload_base_configs.py:211-216`
///   `LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2` at v0.3.0 to v0.5.0; v0.6.0
///   `perf_recipes/llama/gb300/llama3.py:286`);
/// - Llama 3 70B on GB200: 40 layers, micro-batch 2 (9a5e798, 25.09: `llama3_70b_llm_pretrain.yaml:146`
///   under `fp8_cs`; v0.2.0: `workload_base_configs.py:73-78`; 26.x `..._GB200_FP8_CS_V2`,
///   `llama3_workload_base_configs.py:241-246`; v0.6.0 `perf_recipes/llama/gb200/llama3.py:279`);
/// - Llama 3.1 405B on GB200 at tp 2: 95 layers (9a5e798, 25.09: `llama31_405b_llm_pretrain.yaml:116,123`
///   for both FP8 recipes).
///
/// Megatron-Core runs offloading without recompute (`TransformerConfig.__post_init__`), so these
/// rows are planned with none.
pub(in crate::modern_runs) fn recipe_cpu_offload_layers(run: &ModernRun) -> Option<u32> {
    let fsdp_without_pipeline = run.plan.fsdp == Some(true) && run.plan.pp.unwrap_or(1) == 1;
    if !run.id.starts_with("mbridge") || !fsdp_without_pipeline || !precision_is(run, "fp8") {
        return None;
    }
    let (model, gpu) = model_and_gpu(run);
    if !OFFLOAD_RECIPE_GPUS.contains(&gpu.as_str()) {
        return None;
    }
    match (model, gpu.as_str()) {
        ("llama3_70b", "GB300") => Some(20),
        ("llama3_70b", "GB200") => Some(40),
        ("llama31_405b", "GB200") if run.id.starts_with("mbridge-25.09") => Some(95),
        _ => None,
    }
}

/// [`recipe_recompute_modules`] for a run of the Megatron-Core MoE report.
pub(super) fn report_recompute_modules(run: &ModernRun) -> Option<RecomputeModules> {
    use RecomputeModule::{Layernorm, MlaUpProj, Mlp, MoeAct};
    let gpu = run.hardware.gpu.to_ascii_uppercase();
    let modules: &[RecomputeModule] = match (run.model_key.as_deref()?, gpu.as_str()) {
        ("deepseek_v3", "GB200") => &[Mlp],
        ("deepseek_v3", "H100") => &[Mlp, MlaUpProj, MoeAct, Layernorm],
        ("qwen3_235b_a22b", "GB200" | "H100") => &[MoeAct, Layernorm],
        _ => return None,
    };
    Some(RecomputeModules::of(modules))
}

/// The recompute a source states: "none" is none; "full AC" is full recompute; torchtitan's "selective AC" /
/// "per-op selective AC" is its per-op SAC, which `Recompute::Selective` means under the
/// torchtitan framework. Unstated (most rows) is left to the search.
pub(in crate::modern_runs) fn stated_recompute(text: &str) -> Option<Recompute> {
    let text = text.to_ascii_lowercase();
    if text == "none" {
        Some(Recompute::None)
    } else if text.starts_with("full") {
        Some(Recompute::Full)
    } else if text.contains("selective") {
        Some(Recompute::Selective)
    } else {
        None
    }
}
