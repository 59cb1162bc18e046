//! What each published source ran beyond the plan its table states: the settings read from the
//! recipes, configs and scripts behind the runs of `validation/modern_runs.yaml` and
//! `validation/mcore_moe_report.yaml` (the framework, its dispatcher and overlap, recompute
//! modules, optimizer-state formats, FP8 scaling, pipeline layouts and defaults), each with the
//! file and commit it was read from. `modern_runs::plan_run` applies them.

use super::ModernRun;
use crate::model::Model;
use crate::plan::Recompute;
use crate::training::{
    GradDtype, KernelFusion, LossKernel, MoeDispatch, MoeDispatcher, MoeRouting, OptimizerStates,
    Overlap, RecomputeModule, RecomputeModules, TrainingFramework,
};

/// MTP depths a DeepSeek-V3 run trains with: as its notes say ("w/ MTP", "w/o MTP"), else what
/// the source's own FLOP count per token shows. Megatron-Bridge's `flop_utils.py` counts the MTP
/// layer when `mtp_num_layers` is set, as tpsim's model FLOPs do (same causal-halved convention),
/// so the count it published lies near one of the two: 249.7 GFLOP/token without MTP and 260.4
/// with one at 4K tokens (the 25.11 rows labelled w/o and w/ MTP). Other models have no MTP module
/// in their published configs.
pub(super) fn mtp_layers_of(run: &ModernRun, model: &Model) -> u32 {
    // Megatron-Bridge's Nemotron 3 Super and Ultra recipes train one MTP block at depth 2
    // (recipes/nemotronh/h100/nemotron_3_super.py and nemotron_3_ultra.py at 067f987df03b:
    // `mtp_num_layers = 2`, `mtp_use_repeated_layer = True`, which the bundled models carry as
    // `mtp_shared_weights`); the performance recipes build on them (perf_recipes/nemotronh).
    if matches!(
        run.model_key.as_deref(),
        Some("nemotron3_super" | "nemotron3_ultra")
    ) && framework_of(run) == TrainingFramework::MegatronCore
    {
        return 2;
    }
    if run.model_key.as_deref() != Some("deepseek_v3") {
        return 0;
    }
    let noted = |text: &str| run.notes.iter().any(|n| n.contains(text));
    if noted("w/o MTP") {
        return 0;
    }
    if noted("w/ MTP") {
        return 1;
    }
    // 25.09 on H100 ran the layout 'Et|(tt|)*30mL' (`scripts/performance/run_script.py` at
    // 9a5e79865), whose `m` Megatron-Core requires to match `--mtp-num-layers`.
    if run.id.starts_with("mbridge-25.09") && run.hardware.gpu.eq_ignore_ascii_case("H100") {
        return 1;
    }
    let Some(published) = run.results.implied_model_flops_per_token else {
        return 0;
    };
    let per_token = |mtp_layers: u32| {
        let m = Model {
            mtp_layers,
            ..model.clone()
        };
        m.model_flops_per_token(m.seq_len).0
    };
    let miss = |mtp_layers: u32| (per_token(mtp_layers) / published).ln().abs();
    u32::from(miss(1) < miss(0))
}

/// Megatron-Bridge's DeepSeek-V3 layout without interleaving (`_get_deepseek_v3_pipeline_layout`,
/// recipes/deepseek/h100/deepseek_v3.py: pp 4 is embedding + 16, 16, 16, 13 + MTP + loss; pp 8 is
/// 8 per stage and 5 on the last; pp 16 is 4 per stage and 1 on the last): ⌈layers/pp⌉ on every
/// stage but the last, which takes the rest. None for other runs (tpsim's own split).
pub(super) fn recipe_stage_split(
    run: &ModernRun,
    model: &Model,
    pp: u32,
    vpp: u32,
) -> Option<(u32, u32)> {
    let bridge = run.id.starts_with("mbridge");
    if !bridge || run.model_key.as_deref() != Some("deepseek_v3") || pp < 2 || vpp > 1 {
        return None;
    }
    if model.layers.is_multiple_of(pp) {
        return None;
    }
    let per_stage = model.layers.div_ceil(pp);
    let last = model.layers.checked_sub(per_stage * (pp - 1))?;
    Some((per_stage, last))
}

/// The Megatron-Bridge release whose performance configs ran a row of Megatron-Bridge's 26.x tables
/// (`validation/mbridge_26_runs.yaml`), read from the container in the row's id
/// (`mbridge-<container>-…`, the container its `source.ref` names). Each container is the
/// NVIDIA-NeMo/Megatron-Bridge release tag whose configs state the tables' plans
/// (`scripts/performance/configs/<model>/*_workload_base_configs.py` with `*_llm_pretrain.py`, and
/// from v0.6.0 `src/megatron/bridge/perf_recipes/<model>/<gpu>/*.py`): 26.02 v0.3.0, 26.02.01
/// v0.3.1, 26.04 v0.4.0, 26.04.01 v0.4.2, 26.06 v0.5.0, 26.06.01 v0.5.1, 26.08 v0.6.0. Four
/// 26.02.01 rows publish the plan of another tag's config and none of v0.3.1's, and take that
/// tag's settings: Qwen3-30B-A3B on H100 (PP 2, VP 12, EP 8) and Qwen3-235B-A22B on B300 (PP 8,
/// VP 4, EP 8) v0.3.0's (`qwen3_workload_base_configs.py:421-429`, `:121-129`), GPT-OSS 120B on B300
/// and B200 (EP 8) v0.4.0's (`gpt_oss_workload_base_configs.py:111-124`). The 26.02.01 Llama rows
/// whose plans match no tag keep v0.3.1, and only its per-model rules (below) reach them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Bridge26 {
    V030,
    V031,
    V040,
    V042,
    V050,
    V051,
    V060,
}

/// The Megatron-Bridge containers whose recipes the rules below know: 25.09 and 25.11
/// (`validation/modern_runs.yaml`) and the 26.x releases of [`bridge_26_release`]
/// (`validation/mbridge_26_runs.yaml`).
pub(super) const BRIDGE_CONTAINERS: [&str; 9] = [
    "25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08",
];

/// The id prefixes the rules key on, as written (lowercase): `mbridge-<container>`, the dgxc and
/// NeMo tables, torchtitan, NeMo AutoModel and the Megatron-Core MoE report.
const ID_FAMILIES: [&str; 6] = [
    "mbridge",
    "dgxc",
    "nemo-",
    "torchtitan",
    "automodel",
    "mcore-moe-report",
];

/// A run id whose prefix names whose recipe settings apply is one the rules read: the prefix as
/// written (`MBRIDGE-26.04.01-...` matched none of them, and the row was planned without the
/// recipe's settings, without a word), and a Megatron-Bridge id's container one the rules know
/// (`mbridge-26.99-...` or `mbridge-26.-x` took the generic Megatron-Bridge settings and none of
/// a release's, as if it were one).
pub(super) fn check_id_release(id: &str) -> Result<(), String> {
    let lower = id.to_ascii_lowercase();
    if let Some(family) = ID_FAMILIES
        .iter()
        .find(|f| lower.starts_with(*f) && !id.starts_with(*f))
    {
        return Err(format!(
            "id: starts with {}, which the recipe rules read only as {family} (rule: an id's prefix says whose recipe settings apply, matched as written); write id: {family}{}",
            crate::input_file::quote(&id[..family.len()]),
            &id[family.len()..]
        ));
    }
    if !id.starts_with("mbridge") {
        return Ok(());
    }
    let container = id
        .strip_prefix("mbridge-")
        .map(|rest| rest.split('-').next().unwrap_or(rest))
        .unwrap_or("");
    if BRIDGE_CONTAINERS.contains(&container) {
        return Ok(());
    }
    Err(format!(
        "id: names Megatron-Bridge container {}, whose recipe settings tpsim does not know (rule: an id starting mbridge is mbridge-CONTAINER-..., CONTAINER one of {}); write the row's container, e.g. id: mbridge-26.04.01-pretrain-llama3_70b-gb200-64g-fp8-gbs256, or an id not starting with mbridge to plan the row without recipe settings",
        crate::input_file::quote(container),
        BRIDGE_CONTAINERS.join(", ")
    ))
}

/// [`Bridge26`] of a row of the 26.x tables; `None` for every other row.
pub(super) fn bridge_26_release(run: &ModernRun) -> Option<Bridge26> {
    use Bridge26::{V030, V031, V040, V042, V050, V051, V060};
    let container = run.id.strip_prefix("mbridge-26.")?.split('-').next()?;
    let (model, gpu) = model_and_gpu(run);
    Some(match container {
        "02" => V030,
        "02.01" => match (model, gpu.as_str()) {
            ("qwen3_30b_a3b", "H100") | ("qwen3_235b_a22b", "B300") => V030,
            ("gpt_oss_120b", "B300" | "B200") => V040,
            _ => V031,
        },
        "04" => V040,
        "04.01" => V042,
        "06" => V050,
        "06.01" => V051,
        "08" => V060,
        _ => return None,
    })
}

/// A run's `model_key` and its GPU in capitals, the key every recipe rule below matches on.
fn model_and_gpu(run: &ModernRun) -> (&str, String) {
    (
        run.model_key.as_deref().unwrap_or(""),
        run.hardware.gpu.to_ascii_uppercase(),
    )
}

/// Whether a run's published precision is `precision` (`plan.precision`: bf16, fp8, mxfp8, nvfp4).
fn precision_is(run: &ModernRun, precision: &str) -> bool {
    run.plan
        .precision
        .as_deref()
        .is_some_and(|p| p.eq_ignore_ascii_case(precision))
}

/// Whether the Megatron-Bridge recipe behind a run turns on Megatron-Core's MoE all-to-all
/// overlap (`overlap_moe_expert_parallel_comm` with `delay_wgrad_compute`). 25.09:
/// `scripts/performance/run_script.py` at 9a5e79865 sets it for DeepSeek-V3 on H100 only
/// (`A2A_1F1B = bool(args.gpu.lower() in ["h100"])`); 25.11 (Megatron-Bridge v0.2.0, the NeMo
/// 25.11 container's): `moe_a2a_overlap=True` in `scripts/performance/configs/*/
/// workload_base_configs.py` for DeepSeek-V3 on H100, Qwen3-235B-A22B on B200 and H100 and
/// Qwen3-30B-A3B on H100, `set_moe_a2a_overlap_overrides` in `utils/helpers.py`.
///
/// 26.x ([`Bridge26`]): `moe_a2a_overlap=True` in the workload config of the row's (model, GPU,
/// precision, variant), which `_set_moe_a2a_overlap_overrides` turns into
/// `overlap_moe_expert_parallel_comm` (`scripts/performance/utils/overrides.py:151` at v0.3.0,
/// `:152` v0.3.1, `:153` v0.4.0, `:158` v0.4.2, `:171` v0.5.0/v0.5.1), for the pairs with a
/// published row:
/// - v0.3.0: Qwen3-30B-A3B H100 (`configs/qwen/qwen3_workload_base_configs.py:427`),
///   Qwen3-235B-A22B B300 (`:128`) and H100 (`:179`);
/// - v0.3.1: Qwen3-235B-A22B H100 (`qwen3_workload_base_configs.py:179`);
/// - v0.4.0: GPT-OSS 120B GB200 (`configs/gpt_oss/gpt_oss_workload_base_configs.py:106`),
///   Qwen3-235B-A22B H100 (`qwen3_workload_base_configs.py:181`);
/// - v0.4.2: DeepSeek-V3 B200 MXFP8 (`configs/deepseek/deepseek_workload_base_configs.py:209`),
///   GPT-OSS 120B GB200 (`gpt_oss_workload_base_configs.py:105`), Qwen3-235B-A22B H100
///   (`qwen3_workload_base_configs.py:183`);
/// - v0.5.0: the MXFP8 full-iteration-graph configs, DeepSeek-V3 GB300 and GB200
///   (`deepseek_workload_base_configs.py:72`, `:102`), GPT-OSS 120B GB300 and GB200
///   (`gpt_oss_workload_base_configs.py:207`, `:217`), Qwen3-30B-A3B GB300, GB200 and B300
///   (`qwen3_workload_base_configs.py:360`, `:393`, `:434`), Qwen3-235B-A22B GB300 and GB200
///   (`:205`, `:232`); not DeepSeek-V3 B300, GPT-OSS B300, Qwen3-30B-A3B H100 or Kimi K2;
/// - v0.5.1: the same GB300/GB200 configs (`deepseek_workload_base_configs.py:72`, `:102`;
///   `gpt_oss_workload_base_configs.py:207`, `:217`; `qwen3_workload_base_configs.py:377`, `:410`,
///   `:205`, `:232`);
/// - v0.6.0: every 26.08 row: `_enable_deepseek_full_iteration_mxfp8`
///   (`src/megatron/bridge/perf_recipes/deepseek/common.py:76-77`),
///   `_apply_gpt_oss_120b_full_iter_fp8mx_configs` (`perf_recipes/gpt_oss/common.py:47-49`),
///   `_enable_hybridep_full_iteration_mxfp8` (`perf_recipes/qwen/common.py:56-60`).
///
/// No other source in the runs file states it.
pub(super) fn recipe_overlaps_moe_alltoall(run: &ModernRun) -> bool {
    use Bridge26::{V030, V031, V040, V042, V050, V051, V060};
    let (model, gpu) = model_and_gpu(run);
    let gpu = gpu.as_str();
    if run.id.starts_with("mbridge-25.09") {
        return model == "deepseek_v3" && gpu == "H100";
    }
    if run.id.starts_with("mbridge-25.11") {
        return match model {
            "deepseek_v3" | "qwen3_30b_a3b" => gpu == "H100",
            "qwen3_235b_a22b" => gpu == "H100" || gpu == "B200",
            _ => false,
        };
    }
    if let Some(release) = bridge_26_release(run) {
        let nvl72 = matches!(gpu, "GB300" | "GB200");
        return match (release, model) {
            (V030, "qwen3_30b_a3b") => gpu == "H100",
            (V030, "qwen3_235b_a22b") => matches!(gpu, "B300" | "H100"),
            (V031 | V040 | V042, "qwen3_235b_a22b") => gpu == "H100",
            (V040 | V042, "gpt_oss_120b") => gpu == "GB200",
            (V042, "deepseek_v3") => gpu == "B200",
            (V050, "qwen3_30b_a3b") => nvl72 || gpu == "B300",
            (V050 | V051 | V060, "deepseek_v3" | "gpt_oss_120b" | "qwen3_235b_a22b") => nvl72,
            (V051 | V060, "qwen3_30b_a3b") => nvl72,
            _ => false,
        };
    }
    // The Megatron-Core MoE report's Appendix B.2: "1F1B overlap: ON for GB300 and H100; OFF for
    // GB200" (DeepSeek-V3), "OFF for GB300; ON for GB200 and H100" (Qwen3-235B).
    if from_moe_report(run) {
        return match model {
            "deepseek_v3" => gpu == "GB300" || gpu == "H100",
            "qwen3_235b_a22b" => gpu == "GB200" || gpu == "H100",
            _ => false,
        };
    }
    false
}

/// A run of NVIDIA's Megatron-Core MoE report (arXiv 2603.07685, `validation/mcore_moe_report.yaml`).
pub(super) fn from_moe_report(run: &ModernRun) -> bool {
    run.id.starts_with("mcore-moe-report")
}

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
pub(super) fn recipe_recompute_modules(run: &ModernRun) -> Option<RecomputeModules> {
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
pub(super) fn recipe_recompute(run: &ModernRun) -> Option<Recompute> {
    let release = bridge_26_release(run)?;
    let (model, gpu) = model_and_gpu(run);
    let paged_stash = release >= Bridge26::V050 && gpu != "H100";
    (matches!(model, "qwen3_30b_a3b" | "qwen3_235b_a22b") && !paged_stash)
        .then_some(Recompute::None)
}

/// The GPUs, as the runs name them, of the Megatron-Bridge recipes that offload activations
/// ([`recipe_cpu_offload_layers`]): the only published runs tpsim's offload pricing is compared
/// with (both copy over NVLink-C2C to a Grace CPU).
pub(super) const OFFLOAD_RECIPE_GPUS: [&str; 2] = ["GB200", "GB300"];

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
pub(super) fn recipe_cpu_offload_layers(run: &ModernRun) -> Option<u32> {
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
pub(super) fn recipe_optimizer_states(run: &ModernRun) -> Option<(OptimizerStates, GradDtype)> {
    if run.id.starts_with("automodel") {
        return Some((OptimizerStates::Bf16, GradDtype::Bf16));
    }
    // The Megatron-Core MoE report lists "low-precision (BF16) optimizer states" for DeepSeek-V3
    // (Table 18) and names Megatron-Bridge's recipes for reproduction (Appendix B.3): the same.
    let bridge_or_report = run.id.starts_with("mbridge") || from_moe_report(run);
    if bridge_or_report && run.model_key.as_deref() == Some("deepseek_v3") {
        return Some((OptimizerStates::Bf16Moments, GradDtype::Bf16));
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
/// - dgxc-benchmarking's NeMo 2.0 scripts, FP8 runs only: v25.04.01's `llama3.1/pretrain_llama31.py`
///   and the NeMo 25.04 container's `scripts/performance/utils.py` that v25.05.x (161e783) launches
///   set `grad_reduce_in_fp32 = False` inside the FP8 branch; their bf16 runs keep the
///   plugin's default, fp32.
///
/// Other sources (NeMo 24.07 and its long-context tables, MaxText, torchtitan, AutoModel, the
/// Megatron-Core MoE report) are left at their framework's default or their own rule in
/// [`recipe_optimizer_states`].
pub(super) fn recipe_grad_dtype(run: &ModernRun) -> Option<GradDtype> {
    let id = run.id.as_str();
    let fp8 = run
        .plan
        .precision
        .as_deref()
        .is_some_and(|p| !p.eq_ignore_ascii_case("bf16"));
    let nemo1_yaml_in_25_04 = ["dgxc-v25.04.01-grok1", "dgxc-v25.04.01-gpt3"]
        .iter()
        .any(|p| id.starts_with(p));
    let nemo2_fp8 =
        (id.starts_with("dgxc-v25.04.01-llama31") || id.starts_with("dgxc-v25.05.x-")) && fp8;
    (id.starts_with("mbridge")
        || id.starts_with("dgxc-v25.01-")
        || nemo1_yaml_in_25_04
        || nemo2_fp8)
        .then_some(GradDtype::Bf16)
}

/// The communication overlaps a Megatron-Bridge recipe turns off where Megatron-Core's benchmark
/// defaults (`TrainingFramework::default_overlap`: TP, gradient-reduce, parameter-gather and
/// pipeline overlap on) do not hold:
/// - TP communication overlap (`CommOverlapConfig.tp_comm_overlap`) off:
///   - DeepSeek-V3 on H100, 25.09: the recipe builds its comm-overlap config with
///     `tp_comm_overlap=False` when the launcher passes none, and `run_script.py` passes none
///     (9a5e798 `src/megatron/bridge/recipes/deepseek/deepseek_v3.py:315-318`,
///     `scripts/performance/run_script.py:72-80`);
///   - Qwen3-235B-A22B on H100 (TP 2), 25.11 and 26.x:
///     `CommOverlapConfig(tp_comm_overlap=False)` (`scripts/performance/configs/qwen3/
///     qwen3_llm_pretrain.py:153` at v0.2.0 and 4a82e16; `configs/qwen/qwen3_llm_pretrain.py:184`
///     v0.3.0, `:183` v0.3.1, `:167` v0.4.0 and v0.4.2);
///   - Llama 3 70B and Llama 3.1 405B in NVFP4 on GB300 and GB200, every 26.x release: `tp_comm_overlap
///     = False if precision == "nvfp4"` (`configs/llama/llama3_llm_pretrain.py:79`, `:113` and
///     `llama31_llm_pretrain.py:74`, `:108` at v0.3.0; `llama3_llm_pretrain.py:80`, `:115` at
///     v0.3.1 to v0.5.0; `llama31_llm_pretrain.py:75`, `:110` at v0.3.1 and v0.4.0, `:87`, `:122`
///     at v0.4.2 and v0.5.0).
/// - Gradient-reduce overlap off: DeepSeek-V3 on H100, 25.09 (`run_script.py:106-107` at 9a5e798:
///   `overlap_grad_reduce = False` on H100).
/// - Parameter-gather overlap off:
///   - MXFP8 at 25.11 ("keeping this eanbled causes NaN grad norm"): DeepSeek-V3 GB300 and GB200
///     (`scripts/performance/configs/deepseek/deepseek_llm_pretrain.py:75-78`, `:112-115` at
///     v0.2.0), Qwen3-235B-A22B B200 (`configs/qwen3/qwen3_llm_pretrain.py:133-136`), Llama 3 70B
///     GB300, GB200 and B200 (`configs/llama3/llama3_llm_pretrain.py:80-83`, `:115-118`,
///     `:150-153`), Llama 3.1 405B GB300, GB200 and B200 (`configs/llama31/llama31_llm_pretrain.py:75-78`,
///     `:110-113`, `:140-143`); the same at 4a82e16;
///   - Llama 3.1 405B on GB200 in NVFP4 (the V2 configs the tables run) from v0.4.2:
///     `disable_param_gather_overlap` (`configs/llama/llama31_llm_pretrain.py:46-55`, called at
///     `:123-124`, v0.4.2 and v0.5.0).
///
/// Context parallelism is left at tpsim's K/V ring: no Megatron-Bridge recipe of a published Llama
/// CP row sets `cp_comm_type`, whose Megatron-Core default is the same ring ("p2p").
pub(super) fn recipe_comm_overlap(run: &ModernRun, overlap: &mut Overlap) {
    let (model, gpu) = model_and_gpu(run);
    let gpu = gpu.as_str();
    let release = bridge_26_release(run);
    let r25_09 = run.id.starts_with("mbridge-25.09");
    let r25_11 = run.id.starts_with("mbridge-25.11");
    let llama = matches!(model, "llama3_70b" | "llama31_405b");
    let tp_off = (r25_09 && model == "deepseek_v3" && gpu == "H100")
        || ((r25_11 || release.is_some()) && model == "qwen3_235b_a22b" && gpu == "H100")
        || (release.is_some()
            && llama
            && precision_is(run, "nvfp4")
            && matches!(gpu, "GB300" | "GB200"));
    if tp_off {
        overlap.tp_comm = false;
    }
    if r25_09 && model == "deepseek_v3" && gpu == "H100" {
        overlap.grad_reduce = false;
    }
    let param_gather_off = (r25_11
        && precision_is(run, "mxfp8")
        && match model {
            "deepseek_v3" => matches!(gpu, "GB300" | "GB200"),
            "qwen3_235b_a22b" => gpu == "B200",
            "llama3_70b" | "llama31_405b" => matches!(gpu, "GB300" | "GB200" | "B200"),
            _ => false,
        })
        || (release.is_some_and(|r| r >= Bridge26::V042)
            && model == "llama31_405b"
            && gpu == "GB200"
            && precision_is(run, "nvfp4"));
    if param_gather_off {
        overlap.param_gather = false;
    }
}

/// Whether a Megatron-Bridge 26.x recipe all-gathers its low-precision weights as the parameters
/// (`Training::fp8_param_gather`, Megatron-Core `fp8_param_gather` / `fp4_param_gather`) where it
/// departs from Megatron-Core's benchmark default (on):
/// - NVFP4 at v0.3.0, v0.3.1 and v0.4.0 (26.02 to 26.04): `bf16_with_nvfp4_mixed` sets
///   `fp8_param_gather = False` and has no FP4 parameter gather
///   (`src/megatron/bridge/training/mixed_precision.py:392-403` at v0.3.0 and v0.3.1, `:397` at
///   v0.4.0); from v0.4.2 it sets `fp4_param_gather = True` (`:422`), the default here;
/// - Kimi K2 in MXFP8: its recipes train with Muon (`optimizer_type="muon"`, the rows' note), and
///   `set_kimi_k2_common_configs` turns the MXFP8 parameter gather off for Muon
///   (`scripts/performance/configs/kimi/kimi_llm_pretrain.py:38-44`, v0.3.1 to v0.5.0);
/// - Nemotron 3 Super in NVFP4 from v0.4.2 on: "Disabled until MCore PR 4358 lands."
///   (`fp4_param_gather = False`, `scripts/performance/configs/nemotronh/nemotron_3_llm_pretrain.py`
///   l. 44-45 at v0.4.2 to v0.5.1, `perf_recipes/nemotronh/common.py` l. 69 at v0.6.0).
pub(super) fn recipe_low_precision_param_gather(run: &ModernRun) -> Option<bool> {
    let release = bridge_26_release(run)?;
    let (model, _) = model_and_gpu(run);
    let early_nvfp4 = release <= Bridge26::V040 && precision_is(run, "nvfp4");
    let kimi_muon = model == "kimi_k2" && precision_is(run, "mxfp8");
    let super_nvfp4 = model == "nemotron3_super" && precision_is(run, "nvfp4");
    (early_nvfp4 || kimi_muon || super_nvfp4).then_some(false)
}

/// The expert capacity factor (`Training::moe_capacity_factor`, Megatron-Core
/// `moe_expert_capacity_factor`) a Megatron-Bridge recipe sets: Megatron-Bridge 25.09's
/// `run_script.py` (9a5e798) drops tokens for Qwen3-30B-A3B and Qwen3-235B-A22B on every GPU and
/// for DeepSeek-V3 on B200 and GB200 (`:62`, `:84-85`, `:114`, `:121`), through
/// `apply_moe_token_drop` with its defaults, capacity factor 1.0 padded to capacity
/// (`src/megatron/bridge/training/utils/moe_token_drop.py:18-21`); the 25.09 rows say
/// "tokendrop" for exactly these. With force-balanced or balanced routing the cap changes no
/// prediction; it is recorded so the run's settings say it.
///
/// The 26.x full-iteration-graph recipes set `moe_expert_rank_capacity_factor = 1.5`, a per-rank
/// token budget for HybridEP's static buffers (Megatron-Core `transformer_config.py`), not the
/// per-expert capacity tpsim's factor is; it is not applied (validation/mbridge_26_runs.md).
pub(super) fn recipe_capacity_factor(run: &ModernRun) -> Option<f64> {
    if !run.id.starts_with("mbridge-25.09") {
        return None;
    }
    let (model, gpu) = model_and_gpu(run);
    let token_drop = match model {
        "qwen3_30b_a3b" | "qwen3_235b_a22b" => true,
        "deepseek_v3" => matches!(gpu.as_str(), "B200" | "GB200"),
        _ => false,
    };
    token_drop.then_some(1.0)
}

/// The token dispatcher and routing of a run, from the configs at the run's version:
/// - NeMo AutoModel's benchmark configs at the table's commit (36044ad,
///   examples/llm_benchmark/qwen/qwen3_moe_30b_te_deepep.yaml, gpt_oss/gptoss_20b_te_deepep.yaml)
///   set `dispatcher: deepep` with `fake_balanced_gate: true` (round-robin experts). Its GPT-OSS
///   120B config sets `dispatcher: hybridep` with the same gate (`gptoss_120b_te_deepep.yaml`,
///   read at 05de44f): HybridEP sends a token once to each node holding one of its experts and
///   forwards it inside the node, DeepEP's scheme (the Megatron-Core MoE report, arXiv 2603.07685
///   §4.2.2), so it is planned as DeepEP, as the report's HybridEP runs are;
/// - Megatron-Bridge 25.09's DeepSeek-V3 on H100 enables DeepEP with forced load balancing
///   (scripts/performance/run_script.py at 9a5e798: `enable_deepep = gpu in ["h100"]`,
///   `moe_router_force_load_balancing = True`), random routing;
/// - AutoModel's DeepSeek-V3 configs (`examples/benchmark/configs/deepseek_v3_te_deepep.yaml` and
///   `_1024.yaml`, read at 037e04a) set `enable_deepep: true` and `fake_balanced_gate: true`, with
///   `activation_checkpointing: true` (which the search finds it needs: tpsim plans these rows with
///   full recompute); its Kimi K2 config (`examples/benchmark/configs/kimi_k2_te_deepep.yaml`,
///   read at 080dca5: 32 nodes, GBS 512, LBS 8, pp 8, ep 32, interleaved 1F1B) sets the same
///   `dispatcher: deepep`, `fake_balanced_gate: true` and `activation_checkpointing: true`;
/// - the Megatron-Core MoE report's runs run HybridEP or DeepEP (below);
/// - Megatron-Bridge's 25.11 and 26.x recipes that run Megatron-Core's flex dispatcher with the
///   HybridEP or DeepEP backend ([`bridge_flex_dispatcher`]), HybridEP planned as DeepEP by the
///   rule above, with the recipes' forced load balancing (random routing);
/// - everything else runs the all-to-all dispatcher.
pub(super) fn recipe_moe_dispatch(run: &ModernRun) -> MoeDispatch {
    let deepep = MoeDispatcher::Deepep;
    let key = run.model_key.as_deref().unwrap_or("");
    if run.id.starts_with("automodel")
        && matches!(
            key,
            "qwen3_30b_a3b" | "gpt_oss_20b" | "gpt_oss_120b" | "deepseek_v3" | "kimi_k2"
        )
    {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::RoundRobin,
        };
    }
    if run.id.starts_with("mbridge-25.09")
        && key == "deepseek_v3"
        && run.hardware.gpu.eq_ignore_ascii_case("H100")
    {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::Random,
        };
    }
    // The Megatron-Core MoE report (§8.1): "HybridEP on GB200/GB300 NVL systems ... DeepEP on
    // H100", "force-balanced routing". HybridEP sends a token once to each node holding one of
    // its experts and forwards it there (§4.2.2), DeepEP's scheme, which tpsim models.
    if from_moe_report(run) || bridge_flex_dispatcher(run) {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::Random,
        };
    }
    MoeDispatch::default()
}

/// Whether a Megatron-Bridge row's recipe runs Megatron-Core's flex token dispatcher
/// (`moe_token_dispatcher_type = "flex"`) with the HybridEP or DeepEP backend
/// (`moe_flex_dispatcher_backend`), which [`recipe_moe_dispatch`] plans as DeepEP. The backend
/// takes effect only where the code of the row's release applies it (`apply_flex_dispatcher_backend`
/// sets the flex type, `src/megatron/bridge/training/flex_dispatcher_backend.py`), for the pairs
/// with a published row:
/// - 25.11 (v0.2.0, `scripts/performance/configs/*/workload_base_configs.py`, passed to the
///   recipes, which apply it: `recipes/deepseek/deepseek_v3.py:260`, `recipes/qwen/qwen3_moe.py:270`):
///   `"hybridep"` for DeepSeek-V3 GB300 and GB200 (`deepseek/workload_base_configs.py:34`, `:52`),
///   Qwen3-30B-A3B GB300 and GB200 (`qwen3/workload_base_configs.py:164`, `:197`) and
///   Qwen3-235B-A22B GB300 and GB200 (`:49`, `:77`); v0.2.0 applies HybridEP on GB200 and GB300
///   only (`flex_dispatcher_backend.py:54-55`), where these run. The 25.11 table's branch 4a82e16
///   also gives GPT-OSS 120B GB200 HybridEP; v0.2.0 does not (its GPT-OSS config names no backend
///   and its GPT-OSS recipe applies none), so that row keeps the all-to-all.
/// - v0.3.0 (26.02): applied by the recipes (`recipes/deepseek/deepseek_v3.py:267`,
///   `recipes/qwen/qwen3_moe.py:270`; from v0.3.0 HybridEP runs on every sm 8.x-10.x GPU,
///   `flex_dispatcher_backend.py:54-55`): DeepSeek-V3 GB300, GB200, B300 and B200
///   (`configs/deepseek/deepseek_workload_base_configs.py:50`, `:79`, `:97`, `:112`);
///   Qwen3-30B-A3B GB300, GB200, B300 (`configs/qwen/qwen3_workload_base_configs.py:327`, `:360`,
///   `:380`) and H100 (`"deepep"`, `:428`), not B200; Qwen3-235B-A22B GB300 and GB200 (`:74`,
///   `:101`). GPT-OSS's configs name none.
/// - v0.3.1 (26.02.01): DeepSeek-V3 on every GPU (the recipe applies `"hybridep"` itself,
///   `recipes/deepseek/deepseek_v3.py:196`; configs `:50`, `:79`, `:97`, `:112`); Kimi K2 GB300
///   (`configs/kimi/kimi_workload_base_configs.py:34`, applied at `kimi_llm_pretrain.py:79`); the
///   Qwen3 functions set the flex type for Qwen3-30B-A3B on GB300, GB200, B300 and B200 and
///   Qwen3-235B-A22B on GB300 and GB200 (`configs/qwen/qwen3_llm_pretrain.py:211`, `:237`, `:263`,
///   `:289`, `:81`, `:107`; backends `qwen3_workload_base_configs.py:318`, `:351`, `:371`, `:384`,
///   `:63`, `:103`) and the all-to-all for Qwen3-235B-A22B on H100 (`:185`: its `"deepep"` is not
///   applied).
/// - v0.4.0 (26.04) to v0.5.1: `set_workload_base_configs` applies the config's backend, else the
///   all-to-all (`scripts/performance/utils/overrides.py:226-228` at v0.4.0, `:231-233` v0.4.2,
///   `:259-261` v0.5.0/v0.5.1). `"hybridep"`: DeepSeek-V3 on every GPU (`:50`, `:79`, `:101`,
///   `:117` at v0.4.0; B200 at v0.4.2 `"deepep"`, `:205`; `:50`, `:87`, `:137` at v0.5.x), Kimi K2
///   (`kimi_workload_base_configs.py:34`), Qwen3-30B-A3B on every GPU
///   (`qwen3_workload_base_configs.py:332`, `:365`, `:385`, `:398`, `:428` at v0.4.0; `:334`,
///   `:367`, `:387`, `:400`, `:430` at v0.4.2; `:352`, `:392`, `:426`, `:476` at v0.5.0; `:369`,
///   `:409` at v0.5.1), Qwen3-235B-A22B GB300 and GB200 (`:61`, `:102`) and at v0.4.2 B300
///   (`:130`); GPT-OSS 120B GB200, B300 and B200 at v0.4.0 (`gpt_oss_workload_base_configs.py:105`,
///   `:114`, `:122`), B300 at v0.4.2 (`:113`), GB300, GB200 and B300 from v0.5.0 (`:206`, `:216`,
///   `:185`).
/// - Nemotron 3 Nano, Super and Ultra, every published row (26.02.01 to 26.08): their workload
///   configs name `"hybridep"` (`configs/nemotronh/nemotron_3_nano_workload_base_configs.py:37`
///   at v0.3.1, over the model recipe's flex type, `recipes/nemotronh/nemotron_3_nano.py:65`;
///   `nemotron_3_workload_base_configs.py:37`, `:101` from v0.4.0, applied by
///   `set_workload_base_configs`, `utils/overrides.py:226-228`; v0.6.0
///   `perf_recipes/nemotronh/{gb300,gb200,b300,b200}/nemotronh.py` set `"hybridep"` and `"flex"`
///   themselves), with the recipes' forced load balancing (`moe_router_force_load_balancing`,
///   `set_nemotron_3_*_common_configs`).
/// - v0.6.0 (26.08): every published row (`perf_recipes/deepseek/common.py:56-57`,
///   `perf_recipes/gpt_oss/common.py:31`, `:40`, `perf_recipes/qwen/gb300/qwen3_moe.py:323-324`,
///   `:483-484`, `perf_recipes/qwen/gb200/qwen3_moe.py:324-325`, `:484-485`).
pub(super) fn bridge_flex_dispatcher(run: &ModernRun) -> bool {
    use Bridge26::{V030, V040, V042, V050, V051, V060};
    let (model, gpu) = model_and_gpu(run);
    let gpu = gpu.as_str();
    let nvl72 = matches!(gpu, "GB300" | "GB200");
    if run.id.starts_with("mbridge-25.11") {
        return nvl72 && matches!(model, "deepseek_v3" | "qwen3_30b_a3b" | "qwen3_235b_a22b");
    }
    let Some(release) = bridge_26_release(run) else {
        return false;
    };
    match (release, model) {
        (_, "deepseek_v3" | "kimi_k2") => true,
        (V030, "qwen3_30b_a3b") => gpu != "B200",
        (_, "qwen3_30b_a3b") => true,
        (V042, "qwen3_235b_a22b") => nvl72 || gpu == "B300",
        (_, "qwen3_235b_a22b") => nvl72,
        (V040, "gpt_oss_120b") => matches!(gpu, "GB200" | "B300" | "B200"),
        (V042, "gpt_oss_120b") => gpu == "B300",
        (V050, "gpt_oss_120b") => nvl72 || gpu == "B300",
        (V051 | V060, "gpt_oss_120b") => true,
        (_, "nemotron3_nano" | "nemotron3_super" | "nemotron3_ultra") => true,
        _ => false,
    }
}

/// The expert-parallel size of a NeMo AutoModel run whose table leaves EP blank ("-") while its
/// kernels column says DeepEP, which exchanges tokens between expert-parallel ranks and so runs
/// only with EP > 1: the `distributed.ep_size` of the benchmark config at the table's commit
/// (36044ad, `examples/llm_benchmark/gpt_oss/gptoss_20b_te_deepep.yaml`: 8,
/// `gptoss_120b_te_deepep.yaml`: 64).
pub(super) fn automodel_config_ep(run: &ModernRun) -> Option<u32> {
    let deepep = run
        .plan
        .overlap
        .as_deref()
        .is_some_and(|o| o.contains("DeepEP"));
    if !run.id.starts_with("automodel") || !deepep {
        return None;
    }
    match run.model_key.as_deref()? {
        "gpt_oss_20b" => Some(8),
        "gpt_oss_120b" => Some(64),
        _ => None,
    }
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
pub(super) fn recipe_fp8_scaling(run: &ModernRun) -> crate::training::Fp8Scaling {
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
pub(super) fn recipe_bf16_layers(run: &ModernRun) -> crate::training::Bf16Layers {
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
pub(super) fn recipe_module_precision(run: &ModernRun) -> crate::training::ModulePrecision {
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

/// The framework a run is planned as: torchtitan for torchtitan's and NeMo AutoModel's (FSDP2)
/// rows, Megatron-Core for the rest.
pub(super) fn framework_of(run: &ModernRun) -> TrainingFramework {
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
pub(super) fn kernel_fusion_of(run: &ModernRun) -> KernelFusion {
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
pub(super) fn loss_kernel_of(
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
/// predates Megatron-LM #5940 (2026-08-13), which fused the clamp.
pub(super) fn eager_glu_clamp_of(framework: TrainingFramework) -> bool {
    framework == TrainingFramework::MegatronCore
}

/// Whether a run's pipeline keeps every micro-batch's output on its last stage until the step
/// ends (`Training::pipeline_keeps_outputs`): torchtitan before e5ef99a (2025-10-22), which is
/// every torchtitan row of the file: the 2024-08 and 2024-12 benchmark commits, the 2025-06
/// async-TP runs and Trainy's June 2025 runs (torchtitan e7c0cae).
pub(super) fn pipeline_keeps_outputs_of(run: &ModernRun) -> bool {
    [
        "torchtitan-202408",
        "torchtitan-202412",
        "torchtitan-202506",
        "torchtitan-trainy",
    ]
    .iter()
    .any(|prefix| run.id.starts_with(prefix))
}

/// The recompute a source states: "none" is none; "full AC" is full recompute; torchtitan's "selective AC" /
/// "per-op selective AC" is its per-op SAC, which `Recompute::Selective` means under the
/// torchtitan framework. Unstated (most rows) is left to the search.
pub(super) fn stated_recompute(text: &str) -> Option<Recompute> {
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

/// The run's virtual stages per rank and micro-batch size. torchtitan's pipeline rows state the
/// schedule and the local batch but not these, so they are torchtitan's defaults at the benchmark
/// commit: as many micro-batches as pipeline stages (`pipeline_parallel_microbatches`: "The
/// default value will be the number of pipeline stages"; `n_microbatches =
/// pipeline_parallel_degree` when unset) and two stages per rank for a looped schedule such as
/// Interleaved 1F1B (`generate_split_points`: `num_stages_per_rank = 2`, "the default if no
/// pipeline split is specified"). Other rows give vp and the micro-batch, or leave the
/// micro-batch to the search.
pub(super) fn pipeline_defaults(
    run: &ModernRun,
    framework: TrainingFramework,
) -> (u32, Option<u32>) {
    let p = &run.plan;
    let pp = p.pp.unwrap_or(1);
    if framework != TrainingFramework::Torchtitan || pp <= 1 || p.vp.is_some() || p.mbs.is_some() {
        return (p.vp.unwrap_or(1), p.mbs);
    }
    let interleaved = p
        .overlap
        .as_deref()
        .is_some_and(|o| o.to_ascii_lowercase().contains("interleaved"));
    let local_batch = p.gbs.unwrap_or(0) / p.dp.unwrap_or(1).max(1);
    let micro_batch = local_batch.is_multiple_of(pp).then(|| local_batch / pp);
    (
        if interleaved { 2 } else { 1 },
        micro_batch.filter(|&b| b > 0),
    )
}
