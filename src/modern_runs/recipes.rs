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
    RecomputeModule, RecomputeModules, TrainingFramework,
};

/// MTP depths a DeepSeek-V3 run trains with: as its notes say ("w/ MTP", "w/o MTP"), else what
/// the source's own FLOP count per token shows. Megatron-Bridge's `flop_utils.py` counts the MTP
/// layer when `mtp_num_layers` is set, as tpsim's model FLOPs do (same causal-halved convention),
/// so the count it published lies near one of the two: 249.7 GFLOP/token without MTP and 260.4
/// with one at 4K tokens (the 25.11 rows labelled w/o and w/ MTP). Other models have no MTP module
/// in their published configs.
pub(super) fn mtp_layers_of(run: &ModernRun, model: &Model) -> u32 {
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

/// Whether the Megatron-Bridge recipe behind a run turns on Megatron-Core's MoE all-to-all
/// overlap (`overlap_moe_expert_parallel_comm` with `delay_wgrad_compute`). 25.09:
/// `scripts/performance/run_script.py` at 9a5e79865 sets it for DeepSeek-V3 on H100 only
/// (`A2A_1F1B = bool(args.gpu.lower() in ["h100"])`); 25.11 (Megatron-Bridge v0.2.0, the NeMo
/// 25.11 container's): `moe_a2a_overlap=True` in `scripts/performance/configs/*/
/// workload_base_configs.py` for DeepSeek-V3 on H100, Qwen3-235B-A22B on B200 and H100 and
/// Qwen3-30B-A3B on H100, `set_moe_a2a_overlap_overrides` in `utils/helpers.py`. No other source
/// in the runs file states it.
pub(super) fn recipe_overlaps_moe_alltoall(run: &ModernRun) -> bool {
    let gpu = run.hardware.gpu.to_ascii_uppercase();
    let model = run.model_key.as_deref().unwrap_or("");
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
    // 26.x (validation/mbridge_26_runs.yaml): the 25.11 list above, kept where the 26.x recipes
    // keep `moe_a2a_overlap=True` for the (model, GPU) of a published row
    // (`scripts/performance/configs/qwen/qwen3_workload_base_configs.py` at the tags of those
    // containers, v0.3.0 for 26.02 to v0.4.2 for 26.04.01, whose plans match the tables):
    // Qwen3-235B-A22B on H100 in every 26.x table that has it, Qwen3-30B-A3B on H100 in 26.02 and
    // 26.02.01 (PP 2, VP 12, EP 8; from 26.04 it runs PP 1, EP 16 with the overlap off); the
    // Qwen3-235B-A22B B200 configs turned it off. Settings the 26.x recipes newly turn on for other
    // pairs are not applied here (mbridge_26_runs.md).
    if let Some(version) = run.id.strip_prefix("mbridge-26.") {
        let early = version.starts_with("02-") || version.starts_with("02.01-");
        return match model {
            "qwen3_235b_a22b" => gpu == "H100",
            "qwen3_30b_a3b" => gpu == "H100" && early,
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
/// history, validation/FIT.md "Recompute modules"): DeepSeek-V3 only
/// (`set_deepseek_v3_common_configs`: "selective"; Qwen3's set None, GPT-OSS's list modules but
/// never set selective, so Megatron-Core ignores them):
/// - 25.09 (r0.1.0 "Cherry pick perf 2509 (#959)", a288441, `scripts/performance/run_script.py`):
///   `["mla_up_proj", "mlp"]` on H100, `["mla_up_proj"]` on B200 and GB200;
/// - 25.11 (`scripts/performance/configs/deepseek/workload_base_configs.py`, v0.2.0 7af9601 and
///   the 25.11 table's branch 4a82e16): `["mla_up_proj"]` on B200 and GB200, `["mlp",
///   "moe_act"]` on GB300.
///
/// The Megatron-Core MoE report's runs (Appendix B.2, "Recompute"): DeepSeek-V3 `mlp` on GB200 and,
/// on H100, Table 17's `mlp, mla_up_proj, moe_act, layernorm` (the row's own table, over B.2's
/// shorter list); Qwen3-235B `moe_act, layernorm` on GB200 and H100; none on GB300.
pub(super) fn recipe_recompute_modules(run: &ModernRun) -> Option<RecomputeModules> {
    if from_moe_report(run) {
        return report_recompute_modules(run);
    }
    if !run.id.starts_with("mbridge") || run.model_key.as_deref() != Some("deepseek_v3") {
        return None;
    }
    let gpu = run.hardware.gpu.to_ascii_uppercase();
    let modules: &[RecomputeModule] = match gpu.as_str() {
        "H100" => &[RecomputeModule::MlaUpProj, RecomputeModule::Mlp],
        "B200" | "GB200" => &[RecomputeModule::MlaUpProj],
        "GB300" if run.id.starts_with("mbridge-25.11") => {
            &[RecomputeModule::Mlp, RecomputeModule::MoeAct]
        }
        _ => return None,
    };
    Some(RecomputeModules::of(modules))
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
    if from_moe_report(run) {
        return MoeDispatch {
            dispatcher: deepep,
            routing: MoeRouting::Random,
        };
    }
    MoeDispatch::default()
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
