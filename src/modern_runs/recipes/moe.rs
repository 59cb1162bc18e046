//! The MoE settings the sources ran: the all-to-all overlap, the MoE report's rows, the capacity
//! factor, the token dispatcher (Megatron-Bridge's flex/DeepEP, NeMo AutoModel's config) and the EP
//! degree AutoModel's configs give.

use crate::modern_runs::ModernRun;
use crate::training::{MoeDispatch, MoeDispatcher, MoeRouting};

use super::lookup::model_and_gpu;
use super::releases::{Bridge26, bridge_26_release};

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
pub(in crate::modern_runs) fn recipe_overlaps_moe_alltoall(run: &ModernRun) -> bool {
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
pub(in crate::modern_runs) fn recipe_capacity_factor(run: &ModernRun) -> Option<f64> {
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
///
/// The padding site of low-precision expert rows is [`bridge_router_padding`]'s.
pub(in crate::modern_runs) fn recipe_moe_dispatch(run: &ModernRun) -> MoeDispatch {
    MoeDispatch {
        router_padding: bridge_router_padding(run),
        ..dispatcher_and_routing(run)
    }
}

/// Whether a row's recipe sets Megatron-Core's `moe_router_padding_for_fp8` /
/// `moe_router_padding_for_quantization` (`MoeDispatch::router_padding`; Megatron-Core's default,
/// and every other source's, is off: the experts pad after the dispatch). Read per release in
/// NVIDIA-NeMo/Megatron-Bridge: the 25.09 and 25.11 configs (v0.1.x, v0.2.x) and 26.02/26.02.01's
/// (v0.3.0, v0.3.1) never set it on (the v0.3.x recipes `deepseek_v3.py`, `glm45.py` set it
/// `False`); 26.04 (v0.4.0 `scripts/performance/configs/nemotronh/nemotron_3_llm_pretrain.py:53-54`),
/// 26.04.01 (v0.4.2 `:55-56`) and 26.06/26.06.01 (v0.5.0/v0.5.1 `:55-56`) set it for Nemotron 3
/// Super in `fp8_mx` and `nvfp4` (`set_nemotron_3_super_common_configs`), and v0.5.x for GPT-OSS
/// 20B (`gpt_oss_llm_pretrain.py:74`, `set_gpt_oss_20b_common_configs`); 26.08 (v0.6.0
/// `src/megatron/bridge/perf_recipes/nemotronh/<gpu>/nemotronh.py`) for Nemotron 3 Super's fp8mx
/// and nvfp4 configs and Ultra's fp8mx ones, and GPT-OSS 20B (`perf_recipes/gpt_oss/common.py:95`);
/// its DeepSeek-V3 and Qwen3-235B-A22B configs that set it are `_dev_config`s, which no table
/// row names. The Megatron-Core MoE report's runs set it in FP8 and MXFP8
/// (yanring/Megatron-MoE-ModelZoo `sbatch_benchmarking.sh:91,106` at e8650517d60d:
/// `--moe-router-padding-for-fp8`, `--moe-router-padding-for-quantization`). The rows it turns on
/// run the flex dispatcher (DeepEP/HybridEP), which pads after its dispatch either way; what it
/// saves them is `TEGroupedMLP`'s explicit padding copies (`ExpertEpilogue`).
fn bridge_router_padding(run: &ModernRun) -> bool {
    let (model, _) = model_and_gpu(run);
    let low_precision_mx =
        super::lookup::precision_is(run, "mxfp8") || super::lookup::precision_is(run, "nvfp4");
    if from_moe_report(run) {
        return !super::lookup::precision_is(run, "bf16");
    }
    match bridge_26_release(run) {
        None | Some(Bridge26::V030 | Bridge26::V031) => false,
        Some(release) => match model {
            "nemotron3_super" => low_precision_mx,
            "nemotron3_ultra" => release == Bridge26::V060 && low_precision_mx,
            "gpt_oss_20b" => release >= Bridge26::V050,
            _ => false,
        },
    }
}

/// The dispatcher and routing pattern of [`recipe_moe_dispatch`].
fn dispatcher_and_routing(run: &ModernRun) -> MoeDispatch {
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
            ..MoeDispatch::default()
        };
    }
    if run.id.starts_with("mbridge-25.09")
        && key == "deepseek_v3"
        && run.hardware.gpu.eq_ignore_ascii_case("H100")
    {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::Random,
            ..MoeDispatch::default()
        };
    }
    // The Megatron-Core MoE report (§8.1): "HybridEP on GB200/GB300 NVL systems ... DeepEP on
    // H100", "force-balanced routing". HybridEP sends a token once to each node holding one of
    // its experts and forwards it there (§4.2.2), DeepEP's scheme, which tpsim models.
    if from_moe_report(run) || bridge_flex_dispatcher(run) {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::Random,
            ..MoeDispatch::default()
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
pub(in crate::modern_runs) fn automodel_config_ep(run: &ModernRun) -> Option<u32> {
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
