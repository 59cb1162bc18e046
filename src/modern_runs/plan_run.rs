//! A published run as tpsim plans it (`plan_run` → `PlannedRun`): its published plan pinned,
//! its recipe's settings applied (`recipes`) and the settings its source leaves unstated searched.

use super::recipes;
use super::recipes::{
    automodel_config_ep, framework_of, kernel_fusion_of, loss_kernel_of, pipeline_defaults,
    recipe_fp8_scaling, recipe_grad_dtype, recipe_moe_dispatch, recipe_optimizer_states,
    recipe_overlaps_moe_alltoall, recipe_recompute_modules, recipe_stage_split, stated_recompute,
};
use super::{ModernRun, excluded, hardware_profile, model_of, precision_of};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::Recompute;
use crate::planner::{Pins, SearchOptions, StageSplitPin, refine_top, search};
use crate::specs;
use crate::training::{AttentionKernel, Training, TrainingFramework};

/// A published run as tpsim plans it: the scenario the run describes and the estimate of its
/// published plan with the unstated settings searched (`tpsim accuracy --run ID` prints it).
pub struct PlannedRun {
    pub model: Model,
    pub cluster: Cluster,
    pub training: Training,
    pub estimate: crate::cost::Estimate,
    /// The settings the search chose, as the accuracy table's last column says them.
    pub note: String,
}

/// The run's GPU count against its plan and its nodes, said in the runs file's own keys (a
/// command-line message would name `--dp` and a cluster size the file never gave).
fn check_gpu_count(run: &ModernRun) -> Result<(), String> {
    let hw = &run.hardware;
    let p = &run.plan;
    let degrees = [
        ("plan.tp", p.tp.unwrap_or(1)),
        ("plan.cp", p.cp.unwrap_or(1)),
        ("plan.pp", p.pp.unwrap_or(1)),
        ("plan.dp", p.dp.unwrap_or(1)),
    ];
    if let Some((key, _)) = degrees.iter().find(|(_, d)| *d == 0) {
        return Err(format!(
            "{key} is 0; a parallel degree is at least 1: give the published value"
        ));
    }
    let product: u64 = degrees.iter().map(|(_, d)| u64::from(*d)).product();
    if product != u64::from(hw.num_gpus) {
        let terms: Vec<String> = degrees.iter().map(|(k, d)| format!("{k} {d}")).collect();
        let model_parallel = product / u64::from(p.dp.unwrap_or(1));
        let dp_fix = if u64::from(hw.num_gpus).is_multiple_of(model_parallel) {
            format!(
                ", or plan.dp to {} if the GPU count is right",
                u64::from(hw.num_gpus) / model_parallel
            )
        } else {
            String::new()
        };
        return Err(format!(
            "hardware.num_gpus {} is not {} = {product} GPUs; change hardware.num_gpus to {product}{dp_fix}",
            hw.num_gpus,
            terms.join(" x ")
        ));
    }
    if hw.gpus_per_node == 0 || !hw.num_gpus.is_multiple_of(hw.gpus_per_node) {
        return Err(format!(
            "hardware.num_gpus {} is not whole nodes of hardware.gpus_per_node {}; change hardware.gpus_per_node to the GPUs in one node of the run (8 on DGX H100/B200, 4 on GB200/GB300 trays)",
            hw.num_gpus, hw.gpus_per_node
        ));
    }
    Ok(())
}

/// The `eval` flags a plan error names, and the current-stack runs file's keys for them (under
/// `plan.`; the model's, `--seq-len` among them, are `model_file_words`'s under `model.`).
const RUN_PLAN_KEYS: [(&str, &str); 9] = [
    ("--tp", "tp"),
    ("--pp", "pp"),
    ("--dp", "dp"),
    ("--cp", "cp"),
    ("--vpp", "vp"),
    ("--micro-batch", "mbs"),
    ("--global-batch", "gbs"),
    ("--ep", "ep"),
    ("--etp", "etp"),
];

/// A plan error said in the runs file's keys (`--tp 3 does not divide ...` is `plan.tp: 3 does
/// not divide ...`): a runs file has no flags.
fn in_runs_file_words(message: &str) -> String {
    let said = crate::model_file_words::in_file_keys(message, "plan.", &RUN_PLAN_KEYS);
    crate::model_file_words::in_runs_file_model_words(&said)
}

/// Plans `run` with its published plan pinned (see `predict`), or says why it cannot.
pub fn plan_run(run: &ModernRun) -> Result<PlannedRun, String> {
    if let Some(why) = excluded(run) {
        return Err(why);
    }
    // What the command line would refuse, refused here too: a run file is input like any other.
    // Said in the file's keys, with the fix, as every other row's reason is.
    if run.hardware.num_gpus == 0 {
        return Err(
            "hardware.num_gpus is 0; a run needs at least one GPU: give the GPUs the run trained on"
                .into(),
        );
    }
    if let Some(gbs) = run.plan.gbs
        && !(1..=crate::training::MAX_GLOBAL_BATCH).contains(&gbs)
    {
        return Err(format!(
            "plan.gbs {gbs} is outside 1 to {} sequences (rule: a step trains at least one sequence, at most tpsim's --global-batch limit); give the published global batch in sequences",
            crate::training::MAX_GLOBAL_BATCH
        ));
    }
    if !run
        .results
        .tokens_per_s_per_gpu
        .is_some_and(|t| t.is_finite() && t > 0.0)
    {
        return Err("no positive published tokens/s per GPU to compare with".into());
    }
    let model = model_of(run)?;
    let hw = &run.hardware;
    let gpu = specs::load_bundled_gpu(hardware_profile(hw).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    check_gpu_count(run)?;
    let cluster = Cluster {
        gpu,
        nodes: hw.num_gpus / hw.gpus_per_node,
        gpus_per_node: hw.gpus_per_node,
    };
    let framework = framework_of(run);
    let p = &run.plan;
    let (tp, pp, dp, gbs) = (
        p.tp.unwrap_or(1),
        p.pp.unwrap_or(1),
        p.dp.unwrap_or(1),
        p.gbs.unwrap_or(1),
    );
    let mut training =
        Training::with_framework(framework, model.seq_len, gbs, AttentionKernel::Flash);
    // torchtitan's async TP (`enable_async_tensor_parallel`, micro-pipelined all-gather and
    // reduce-scatter matmuls) is the TP-communication overlap; its rows say when it is on.
    if p.overlap
        .as_deref()
        .is_some_and(|o| o.to_ascii_lowercase().contains("async tp"))
    {
        training.overlap.tp_comm = true;
    }
    training.overlap.moe_a2a = recipe_overlaps_moe_alltoall(run);
    // Megatron-Bridge turns on delayed weight gradients with the MoE all-to-all overlap
    // (`_set_moe_a2a_overlap_overrides`: `delay_wgrad_compute = True`, scripts/performance/utils/
    // overrides.py:196 at 067f987d, helpers.py:185 at v0.2.0; run_script.py:89 at 9a5e79865 for
    // 25.09), so its column-parallel input gradients are waited at once, not hidden under their
    // wgrad GEMMs (`cost::tp_collectives::column_grad_collective_async`). The Megatron-Core MoE
    // report states the 1F1B overlap but not the delay: its rows keep the default.
    training.delay_wgrad_compute = training.overlap.moe_a2a && run.id.starts_with("mbridge-");
    recipes::recipe_comm_overlap(run, &mut training.overlap);
    if let Some(gather) = recipes::recipe_low_precision_param_gather(run) {
        training.fp8_param_gather = gather;
    }
    if let Some(factor) = recipes::recipe_capacity_factor(run) {
        training.moe_capacity_factor = Some(factor);
        training.moe_imbalance = training.moe_imbalance.min(factor);
    }
    training.moe_dispatch = recipe_moe_dispatch(run);
    training.fp8_scaling = recipe_fp8_scaling(run);
    training.bf16_layers = recipes::recipe_bf16_layers(run);
    training.module_precision = recipes::recipe_module_precision(run);
    // NeMo AutoModel runs Transformer Engine's attention (its configs' `attn: te`, the tables'
    // "TE"), whose context parallelism is TE's K/V ring, not PyTorch's context_parallel.
    if run.id.starts_with("automodel") {
        training.cp_exchange = crate::training::CpExchange::KvRing;
    }
    // PyTorch's pipelining runs one schedule per gradient-accumulation step (torchtitan `train.py`,
    // AutoModel `recipes/llm/benchmark.py`): a row that states GA > 1 with a pipeline runs its
    // local batch, gbs / (dp x GA), per schedule.
    let ga = p.ga.unwrap_or(1);
    // Said in the file's key: `ga: 0` was read as no accumulation and a `ga` that does not divide
    // gbs / dp was truncated into a `--local-batch` the file never gave.
    if ga == 0 {
        return Err(
            "plan.ga is 0; a step accumulates at least 1 local batch: give the published value"
                .into(),
        );
    }
    if framework == TrainingFramework::Torchtitan
        && pp > 1
        && ga > 1
        && gbs.is_multiple_of(dp)
        && !gbs.is_multiple_of(dp.saturating_mul(ga))
    {
        return Err(format!(
            "plan.ga: {ga} does not divide the {} sequences each data-parallel rank trains per step (plan.gbs: {gbs} / plan.dp: {dp}) into whole local batches; give the published value (one that divides it)",
            gbs / dp
        ));
    }
    if framework == TrainingFramework::Torchtitan && pp > 1 && ga > 1 {
        training.local_batch = Some(gbs / (dp * ga).max(1));
    }
    if let Some((states, grads)) = recipe_optimizer_states(run) {
        training.optimizer_states = states;
        training.grad_dtype = grads;
    }
    if let Some(grads) = recipe_grad_dtype(run) {
        training.grad_dtype = grads;
    }
    training.recompute_modules = recipe_recompute_modules(run);
    training.cpu_offload_layers = recipes::recipe_cpu_offload_layers(run).unwrap_or(0);
    // The recipe's offload checked as the command line checks `--cpu-offload-layers`: a row of
    // fewer layers was planned offloading more layers than the model has (the memory took all
    // but one), and a stated recompute beside it left the search nothing, said without a reason.
    let offload = training.cpu_offload_layers;
    if offload > 0 && offload >= model.layers {
        return Err(format!(
            "the row's Megatron-Bridge recipe offloads {offload} layers' activations to the CPU (cpu_offloading_num_layers), but model.layers is {}; Megatron-Core offloads fewer than all layers: give the published layer count",
            model.layers
        ));
    }
    if offload > 0
        && let Some(text) = p.recompute.as_deref()
        && stated_recompute(text).is_some_and(|r| r != Recompute::None)
    {
        return Err(format!(
            "plan.recompute: {} beside the row's Megatron-Bridge recipe, which offloads {offload} layers' activations to the CPU (cpu_offloading_num_layers); Megatron-Core offloads only without recompute: give recompute: null, as the recipe runs",
            crate::input_file::quote(text)
        ));
    }
    // NeMo AutoModel's MoE models reshard and reduce-scatter once per step under a pipeline,
    // not after every schedule (`MoEFSDPSyncMixin` patches the pipeline stage's backward:
    // nemo_automodel/components/moe/fsdp_mixin.py).
    training.fsdp_syncs_once_per_step = run.id.starts_with("automodel") && model.moe.is_some();
    training.pipeline_keeps_outputs = recipes::pipeline_keeps_outputs_of(run);
    training.eager_glu_clamp = recipes::eager_glu_clamp_of(run, framework);
    training.kernel_fusion = kernel_fusion_of(run);
    // torchtitan's Llama expands K and V with `repeat_kv` before SDPA; NeMo AutoModel's rows run
    // Transformer Engine's attention, which takes grouped K and V as they are.
    training.sdpa_repeats_kv = run.id.starts_with("torchtitan");
    training.loss = loss_kernel_of(run, &model, training.kernel_fusion);
    let recompute = p.recompute.as_deref().unwrap_or("");
    let fsdp = p.fsdp == Some(true);
    let (vpp, micro_batch) = pipeline_defaults(run, framework);
    let options = SearchOptions {
        allow_uneven_pp: !model.layers.is_multiple_of(pp),
        allow_cross_node_tp: false,
        precision: precision_of(p.precision.as_deref().unwrap_or("bf16"))?,
        pins: Pins {
            tp: Some(tp),
            cp: Some(p.cp.unwrap_or(1)),
            pp: Some(pp),
            dp: Some(dp),
            vpp: Some(vpp),
            micro_batch,
            // A recipe that recomputes modules runs selective granularity.
            recompute: stated_recompute(recompute)
                .or(training.recompute_modules.map(|_| Recompute::Selective))
                .or(recipes::recipe_recompute(run))
                // Megatron-Core offloads only without recompute.
                .or((training.cpu_offload_layers > 0).then_some(Recompute::None)),
            // No published row states a block-recompute layer count: searched.
            recompute_num_layers: None,
            zero: fsdp.then_some(3),
            sequence_parallel: None,
            // Unstated expert parallelism is left to the search (a dense model only has ep 1).
            ep: p.ep.or_else(|| automodel_config_ep(run)),
            etp: p.etp,
            stage_split: match recipe_stage_split(run, &model, pp, vpp) {
                Some((first, last)) => StageSplitPin::Given(first, last),
                None => StageSplitPin::Own,
            },
            // torchtitan's default `reshard_after_forward_policy = "default"` reshards after the
            // forward when there is no pipeline (torchtitan/models/llama3/infra/parallelize.py
            // `apply_fsdp`); with PP it keeps the gathered weights across micro-batches.
            reshard_after_forward: (framework == TrainingFramework::Torchtitan && fsdp)
                .then_some(pp == 1),
            // No published row states copies of the sharded states (HSDP, partial distributed
            // optimizer): one copy, as the recipes' defaults have it.
            dp_replicas: Some(1),
        },
    };
    let result = search(&model, &cluster, &training, options);
    let Some(best) = result.feasible().first() else {
        return Err(match result.closest_miss() {
            Some(miss) => format!(
                "the published plan does not fit in tpsim's memory model ({:.1} of {:.1} GiB at best)",
                miss.memory.total_bytes.0 / crate::units::GIB,
                miss.memory.capacity_bytes.0 / crate::units::GIB
            ),
            None => {
                // Name the rule: the published degrees as one request (the unstated settings at
                // their defaults) and what `ParallelPlan::build` says of it.
                let pins = options.pins;
                let request = crate::plan::PlanRequest {
                    tp,
                    cp: pins.cp.unwrap_or(1),
                    pp,
                    dp,
                    vpp: pins.vpp.unwrap_or(1),
                    micro_batch: pins.micro_batch.unwrap_or(1),
                    ep: pins.ep.unwrap_or(1),
                    etp: pins.etp.unwrap_or(1),
                    precision: options.precision,
                    allow_uneven_pp: options.allow_uneven_pp,
                    stage_split: pins.stage_split.given(),
                    // The first ZeRO stage the run's optimizer states can run at, so the rule
                    // named is the split's, not the default stage's.
                    zero: pins.zero.unwrap_or_else(|| {
                        (0..=3)
                            .find(|&z| training.optimizer_states.allows_zero(z))
                            .unwrap_or(0)
                    }),
                    ..crate::plan::PlanRequest::default()
                };
                match crate::plan::ParallelPlan::build(&request, &model, &cluster, &training) {
                    Err(why) => format!(
                        "the published plan is not a valid plan for tpsim: {}",
                        in_runs_file_words(&why.to_string())
                    ),
                    Ok(_) => "the published plan is not a valid plan for tpsim".into(),
                }
            }
        });
    };
    let refined = refine_top(&model, &cluster, &training, std::slice::from_ref(best));
    let chosen = refined.plans[0];
    let note = format!(
        "recompute {}{}, ZeRO-{}, ep {}, etp {}, micro-batch {} x {}{}{}",
        match (chosen.plan.recompute, training.recompute_modules) {
            (Recompute::Selective, Some(modules)) => format!("selective ({})", modules.describe()),
            _ => crate::report::recompute_label(&chosen.plan),
        },
        // The recipe's activation offloading (`recipes::recipe_cpu_offload_layers`), which the
        // recompute word alone would hide.
        match training.offloaded_layers(model.layers) {
            0 => String::new(),
            n => format!(" ({n} of {} layers offloaded to the CPU)", model.layers),
        },
        // As `plan`'s zero column: "3 keep", "1 x4".
        crate::report::zero_label(&chosen.plan),
        chosen.plan.ep,
        chosen.plan.etp,
        chosen.plan.micro_batch,
        chosen.plan.num_microbatches,
        if chosen.plan.vpp > 1 {
            format!(", vpp {}", chosen.plan.vpp)
        } else {
            String::new()
        },
        if chosen.plan.schedule_runs > 1 {
            format!(", {} pipeline schedules", chosen.plan.schedule_runs)
        } else {
            String::new()
        }
    );
    Ok(PlannedRun {
        model,
        cluster,
        training,
        estimate: chosen,
        note,
    })
}
