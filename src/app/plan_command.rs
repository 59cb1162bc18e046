//! `tpsim plan`: search every split of the cluster, print the best plans, and optionally save the
//! best one, emit a framework config or write a report.

use super::scenario::input_paths;
use crate::output_file;
use anyhow::{Result, bail};

use super::emit_commands::{check_emit_input, emit_best};
use super::report_commands::{Written, check_dir, details_of, write_report};
use super::scenario::{
    global_batch_advice, model_file_of, pins_of_args, precision_of_args, resolve_scenario,
    smallest_splittable_batch, summaries,
};
use super::{Outcome, print_report};
use crate::cli::{EmitTarget, PlanArgs};
use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::model::Model;
use crate::plan::PlanRequest;
use crate::planner::{SearchOptions, refine_top, search};
use crate::report::{self, Report, plan_label};
use crate::specs::{ModelRef, PlanFile};
use crate::training::{Training, TrainingFramework};
use crate::units::GIB;

/// Most worker threads we start for a search.
pub(super) const MAX_THREADS: usize = 1024;
/// Most plans `plan --top` shows.
const MAX_TOP: usize = 1000;

/// Why a search found no valid plan at all (as opposed to valid plans that do not fit memory): the
/// pins that rule every split out, or the split rules, with a batch that would split.
pub(super) fn why_no_valid_plan(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> String {
    // A local batch rules plans out on its own: say so when the search finds plans without it.
    if let Some(local) = training.local_batch {
        let without = Training {
            local_batch: None,
            ..*training
        };
        if !crate::planner::search(model, cluster, &without, options)
            .ranked
            .is_empty()
        {
            // Each schedule's micro-batch rule is its own: interleaved 1F1B's multiple of pp,
            // DualPipeV's 2 x pp, none for ZB-V (`plan::check_v_schedule`).
            use crate::cost::v_schedule::VKind;
            let schedule_rule = match training.pp_schedule.v_kind() {
                None => ", and with --vpp a multiple of --pp micro-batches".to_string(),
                Some(VKind::ZeroBubbleV) => String::new(),
                Some(VKind::DualPipeV) => format!(
                    ", and on a pipeline at least 2 x --pp micro-batches (--pp-schedule {}: PyTorch's ScheduleDualPipeV refuses fewer)",
                    training.pp_schedule.as_str()
                ),
            };
            return format!(
                "--local-batch {local} admits none of the plans the search finds without it: a local batch must be a multiple of the micro-batch and divide each data-parallel rank's share of --global-batch {} (the global batch over dp){schedule_rule}; give one that does (e.g. --global-batch / dp for one schedule per step) or drop --local-batch",
                training.global_batch
            );
        }
    }
    if let Some(why) = crate::plan::hybrid_run_refusal(model, training) {
        return why;
    }
    if let Some(why) = super::pin_conflict::explain(model, cluster, training, options) {
        return why;
    }
    let batch_fix = smallest_splittable_batch(model, cluster, options, training.global_batch)
        .map(|b| format!(" (e.g. --global-batch {b})"))
        .unwrap_or_default();
    // TP's bound is the GPUs that share NVLink (`planner::tp_degrees`): a node's on HGX, the rack's
    // (or its job segment's) on an NVL72 profile, where TP spans nodes.
    let domain = cluster.nvlink_domain();
    let tp_bound = if domain > cluster.gpus_per_node {
        format!(
            "the {domain} GPUs of an NVLink domain ({} nodes of {} GPUs)",
            domain / cluster.gpus_per_node,
            cluster.gpus_per_node
        )
    } else {
        format!("a node ({domain} GPUs, its NVLink domain)")
    };
    let cross = if options.allow_cross_node_tp {
        " (or a multiple of them, with --allow-cross-node-tp)"
    } else {
        ""
    };
    format!(
        "{} GPUs cannot be split into tp x pp x dp with tp dividing the {} and {tp_bound}{cross}, pp splitting the {}{} and dp dividing --global-batch {}; change --nodes, --global-batch{batch_fix} or the model",
        cluster.total_gpus(),
        crate::report::counted(model.heads, "head"),
        crate::report::counted(model.layers, "layer"),
        if options.allow_uneven_pp {
            ""
        } else {
            " evenly (see --allow-uneven-pp)"
        },
        training.global_batch
    )
}

/// A V schedule beside pins that leave only plans without a pipeline (`--pp 1`, or `--vpp 1`:
/// a V runs two chunks per GPU), where the schedule has nothing to order: said, as `eval` says it
/// of its one plan (the search returned pp 1 plans without a word about the schedule asked for).
pub(super) fn v_schedule_pin_note(
    training: &Training,
    pins: crate::planner::Pins,
) -> Option<String> {
    training.pp_schedule.v_kind()?;
    let name = training.pp_schedule.as_str();
    let pin = match (pins.pp, pins.vpp) {
        (Some(1), _) => "--pp 1 pins plans without a pipeline",
        (_, Some(1)) => {
            "--vpp 1 pins one model chunk per GPU, which a V (two chunks per GPU) leaves to plans without a pipeline"
        }
        _ => return None,
    };
    Some(format!(
        "note: --pp-schedule {name} orders the micro-batches of a pipeline, and {pin}, where one stage runs every micro-batch with no schedule (no bubble); drop {} to search pipelined plans with it",
        if pins.pp == Some(1) {
            "--pp 1"
        } else {
            "--vpp 1"
        }
    ))
}

/// Deepest pipeline worth naming when the even split leaves none: Megatron-Bridge's DeepSeek-V3
/// recipes and DeepSeek's own run use 16 stages for its 61 layers.
const UNEVEN_PP_HINT_DEPTH: u32 = 16;

/// A note when the best shown plan is one the framework's launch configuration cannot carry:
/// the table ranks what tpsim models, and a user copying row 1 into a launch script should know
/// before `--emit` tells them. It says what `--emit` on the same command then does, and nothing
/// else: refuse (a model or setting no plan of the run can be written with), write no plan (none
/// of those that fit can be written, e.g. every plan in FP8 for DeepSpeed), or write the fastest
/// plan it can, named by its row when the table shows it. `feasible` is the search's ranking,
/// the one `--emit` walks.
fn emit_note(
    scenario: &super::scenario::Scenario,
    shown: &[Estimate],
    feasible: &[Estimate],
) -> Option<String> {
    use crate::emit::Framework;
    let framework = match scenario.training.framework {
        TrainingFramework::MegatronCore => Framework::Megatron,
        TrainingFramework::Deepspeed => Framework::DeepSpeed,
        TrainingFramework::Torchtitan => Framework::Torchtitan,
        TrainingFramework::MegatronLm2021 => return None,
    };
    let flag = match framework {
        Framework::DeepSpeed => "deepspeed",
        Framework::Torchtitan => "torchtitan",
        _ => "megatron",
    };
    let (model, training) = (&scenario.model, &scenario.training);
    let whole = framework
        .model_unsupported(model)
        .or_else(|| framework.optimizer_states_unsupported(training))
        .or_else(|| framework.moe_routing_unsupported(training));
    if let Some(why) = whole {
        return Some(format!(
            "note: --emit {flag} writes no plan of this run, whatever the plan: {why}"
        ));
    }
    let why = framework.unsupported(model, training, &shown.first()?.plan)?;
    let writable = feasible
        .iter()
        .enumerate()
        .find(|(_, e)| framework.unsupported(model, training, &e.plan).is_none());
    let Some((rank, writable)) = writable else {
        return Some(format!(
            "note: --emit {flag} can write none of the {} plans that fit: {}",
            feasible.len(),
            framework.why_none_can_run(model, training, feasible.iter().map(|e| &e.plan))
        ));
    };
    let p = &writable.plan;
    // In the words of the offload note and the nothing-fits line.
    let words = closest_plan_words(writable);
    // The shown rows may fold it with a twin of the same time and memory, so it is named by its
    // settings; one below the table by the `--top` that shows it (`--emit` names it by that rank).
    let rank = rank + 1;
    let place = if shown.iter().any(|e| e.plan == *p) {
        "in the table".to_string()
    } else if rank <= MAX_TOP {
        format!("#{rank} of the search, below the table (--top {rank} shows it)")
    } else {
        format!("#{rank} of the search, below the table")
    };
    Some(format!(
        "note: --emit {flag} cannot write #1 ({why}); it writes the fastest plan it can: {words}, {place}"
    ))
}

/// A note when the layers split evenly over no pipeline of 2 to 16 stages (DeepSeek-V3's 61) and
/// the search was not told it may split them unevenly: the search then offers no pipeline at all,
/// which for such models is usually far from the fastest plan.
fn uneven_pp_note(model: &Model, cluster: &Cluster, options: SearchOptions) -> Option<String> {
    let deepest = UNEVEN_PP_HINT_DEPTH.min(cluster.total_gpus());
    // One layer is no pipeline however it is split: --allow-uneven-pp would add nothing.
    if options.allow_uneven_pp
        || options.pins.pp.is_some()
        || deepest < 2
        || model.layers < 2
        || (2..=deepest).any(|pp| model.layers.is_multiple_of(pp))
    {
        return None;
    }
    Some(format!(
        "note: no pipeline of 2 to {deepest} stages splits the {} layers evenly, so the search tried only plans without one; add --allow-uneven-pp to let stages hold different layer counts (Megatron's --decoder-first/last-pipeline-num-layers, as DeepSeek-V3 trains its 61 layers on 16 stages)",
        model.layers
    ))
}

/// A note when a sliding-window model is searched under Megatron-Core's default K/V ring, which
/// Transformer Engine refuses windows on (`PlanError::CpWithWindow`): every context-parallel
/// candidate is then invalid, and the search offers none without saying why, where the
/// all_gather and a2a exchanges run them.
fn windowed_cp_note(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> Option<String> {
    let window = model.attention_window?;
    if !window.windows_some_layer()
        || training.framework != TrainingFramework::MegatronCore
        || training.cp_exchange.runs_sliding_windows()
        || options.pins.cp.is_some()
        || cluster.total_gpus() < 2
    {
        return None;
    }
    Some(format!(
        "note: the search tried no context parallelism: the model's {}-token sliding window does not run on the {} exchange (Transformer Engine refuses windows on its point-to-point ring); add --cp-exchange kv-all-gather or head-all-to-all (Megatron-Core's --cp-comm-type all_gather / a2a) to search it",
        window.tokens,
        training.cp_exchange.as_str()
    ))
}

/// Share of the best plan's step left in exposed MoE all-to-alls above which `plan` says the
/// combined 1F1B schedule would hide them: a tenth of the step is where NVIDIA's MoE report starts
/// to overlap ("Scalable Training of MoE Models with Megatron Core", 2026, §4.2.3: EP takes 20-60%
/// of a step before overlap, under 5% after). A threshold for a hint, not a cost.
const EXPOSED_ALLTOALL_NOTE_SHARE: f64 = 0.10;

/// A note when Megatron-Core's MoE all-to-all overlap is off and the best plan leaves much of its
/// step in exposed all-to-alls: the search did not try the schedule NVIDIA's MoE recipes run.
fn alltoall_overlap_note(
    scenario: &super::scenario::Scenario,
    shown: &[Estimate],
) -> Option<String> {
    use crate::cost::moe::{AlltoallOverlapRefusal, alltoall_overlap_refusal};
    let training = &scenario.training;
    let best = shown.first()?;
    if training.framework != TrainingFramework::MegatronCore || training.overlap.moe_a2a {
        return None;
    }
    // Only where the schedule could run on the best plan's layout: interleaving is the one thing
    // the search can add; full recompute, recomputed MoE modules or several MTP layers rule it out.
    match alltoall_overlap_refusal(&scenario.model, training, &best.plan) {
        None | Some(AlltoallOverlapRefusal::PipelineWithoutVirtualStages { .. }) => {}
        Some(_) => return None,
    }
    let share = best.time.ep_comm_exposed_s.0 / best.time.step_s.0;
    (share > EXPOSED_ALLTOALL_NOTE_SHARE).then(|| {
        format!(
            "note: #1 spends {:.1}% of its step in exposed MoE all-to-alls; Megatron-Core's combined 1F1B schedule hides them under another micro-batch's compute (off by default; NVIDIA's Megatron-Bridge recipes turn it on for DeepSeek-V3 and Qwen3 on H100 and for Qwen3-235B on B200): add --overlap-moe-expert-parallel-comm to search with it (it needs --vpp > 1 when there is a pipeline)",
            100.0 * share
        )
    })
}

/// A note when a plan that offloads activations to host memory would beat #1 by at least 1%, under
/// Megatron-Core on a GPU whose profile gives its host link and host memory. The search offloads
/// only when asked (`--cpu-offload-layers N`, a scenario setting, not a plan dimension), so here it
/// runs again at a quarter, half, three quarters and all but one of the layers offloaded, pinned to
/// what Megatron-Core offloads with (no pipeline, no recompute), and the fastest plan found is
/// priced at the fewest offloaded layers with which it still fits (fewer copies, less host memory).
/// Offloading lets a plan fit without recompute, or at a lower TP degree or a larger micro-batch:
/// NVIDIA's Megatron-Bridge recipes offload 20 to 95 layers for Llama 3 70B and Llama 3.1 405B on
/// GB200 and GB300 (`modern_runs::recipes::recipe_cpu_offload_layers`, whose runs `tpsim accuracy`
/// compares). Pins that rule offloading out (a pipeline, a recompute) rule the note out too, and so
/// does a GPU no published offloading run used: on a PCIe-attached GPU the copies share switch
/// uplinks and host memory bandwidth with the node's other GPUs, which tpsim does not charge
/// (validation/FIT.md), and no published H100 or B200 recipe offloads; there `--cpu-offload-layers
/// N` prices it when asked.
fn cpu_offload_note(
    scenario: &super::scenario::Scenario,
    options: SearchOptions,
    shown: &[Estimate],
) -> Option<String> {
    use crate::plan::{ParallelPlan, Recompute};
    let training = &scenario.training;
    let best = shown.first()?;
    let (model, cluster) = (&scenario.model, &scenario.cluster);
    let pins = options.pins;
    let ruled_out = training.framework != TrainingFramework::MegatronCore
        || training.cpu_offload_layers > 0
        || cluster.gpu.host_link_gb_per_s.is_none()
        || cluster.gpu.host_memory_gib_per_gpu.is_none()
        || model.layers < 2
        || !crate::modern_runs::offload_validated_profiles().any(|p| p == cluster.gpu.name)
        || pins.pp.is_some_and(|pp| pp != 1)
        || pins.recompute.is_some_and(|r| r != Recompute::None)
        || pins.recompute_num_layers.is_some();
    if ruled_out {
        return None;
    }
    let offloading_options = SearchOptions {
        pins: crate::planner::Pins {
            pp: Some(1),
            recompute: Some(Recompute::None),
            ..pins
        },
        ..options
    };
    let with_offload = |layers: u32| Training {
        cpu_offload_layers: layers,
        ..*training
    };
    // The best offloading plan at each count tried; of those within 1% of the fastest, the one
    // that offloads the fewest layers (the same speed for fewer copies and less host memory).
    let found: Vec<(u32, Estimate)> = offload_counts_to_try(model.layers)
        .filter_map(|n| {
            let found = crate::planner::search_within_pins(
                model,
                cluster,
                &with_offload(n),
                offloading_options,
            );
            found.feasible().first().map(|e| (n, *e))
        })
        .collect();
    let fastest_s = found
        .iter()
        .map(|(_, e)| e.time.step_s.0)
        .min_by(f64::total_cmp)?;
    let (tried, chosen) = found
        .into_iter()
        .find(|(_, e)| e.time.step_s.0 <= 1.01 * fastest_s)?;
    // The same plan at the fewest offloaded layers with which its GPU memory keeps tpsim's margin
    // (`memory_margin::gpu_keeps_margin`), below the count it was found at or above it: GPU memory
    // only falls with the count, so those counts are the ones from some count up, found by
    // bisection; host memory only grows with it, so the fewest is also the one most likely to fit
    // the host. Where no count keeps the margin (or the host cannot take the fewest), the count it
    // was found at stays.
    let request = chosen.plan.request();
    let device_bytes = cluster.gpu.device_memory().0;
    let priced = |layers: u32| -> Option<Estimate> {
        let with = with_offload(layers);
        let plan = ParallelPlan::build(&request, model, cluster, &with).ok()?;
        Some(crate::cost::evaluate(model, cluster, &with, &plan))
    };
    let keeps_margin = |layers: u32| {
        priced(layers).is_some_and(|e| {
            crate::memory_margin::gpu_keeps_margin(&e, device_bytes, training.framework)
        })
    };
    let most = model.layers - 1;
    let fewest_with_margin = keeps_margin(most).then(|| {
        let (mut keeps_at, mut short_at) = (most, 0u32);
        while keeps_at - short_at > 1 {
            let middle = short_at + (keeps_at - short_at) / 2;
            if keeps_margin(middle) {
                keeps_at = middle;
            } else {
                short_at = middle;
            }
        }
        keeps_at
    });
    let (layers, offloading) = match fewest_with_margin.and_then(|n| Some((n, priced(n)?))) {
        Some((n, e)) if e.fits() => (n, e),
        _ => (tried, chosen),
    };
    let (alt_s, best_s) = (offloading.time.step_s.0, best.time.step_s.0);
    // Where no count keeps the margin, the note says so (the count is then the one found).
    let margin =
        crate::memory_margin::no_margin_words(&offloading, device_bytes, training.framework)
            .map(|words| format!(" ({words})"))
            .unwrap_or_default();
    (alt_s < 0.99 * best_s).then(|| {
        format!(
            "note: offloading the activations of {layers} of the {} layers to host memory (Megatron-Core's --cpu-offloading-num-layers: copies over the GPU's {:.0} GB/s host link beside the next layers' compute, no pipeline, no recompute; searched only when asked) lets {} fit at {:.1} of {:.1} GiB{margin}, with {:.1} of {:.1} GiB of host memory per GPU, and take {} s per step against #1's {} s, {:.0}% less, as NVIDIA's Megatron-Bridge recipes offload on this GPU (their published runs: tpsim accuracy --runs validation/modern_runs.yaml): add --cpu-offload-layers {layers} to search with it",
            model.layers,
            cluster.gpu.host_link_gb_per_s.unwrap_or(0.0),
            closest_plan_words(&offloading),
            offloading.memory.total_bytes.0 / GIB,
            offloading.memory.capacity_bytes.0 / GIB,
            offloading.memory.host_bytes.0 / GIB,
            offloading.memory.host_capacity_bytes.0 / GIB,
            crate::units::show_step_s(alt_s),
            crate::units::show_step_s(best_s),
            100.0 * (1.0 - alt_s / best_s)
        )
    })
}

/// What a search (`plan`, `sweep` at each point, and `compare` without plan files) refuses before it starts, so that
/// input no plan can take is said as an error (exit 2) and not as an empty search: an expert
/// all-to-all overlap for a model with no experts (as `eval` refuses it for its one plan), and a
/// precision the GPU or the framework has not.
pub(super) fn check_search_input(
    training: &crate::cli::TrainingArgs,
    model: &crate::model::Model,
    cluster: &crate::cluster::Cluster,
    framework: TrainingFramework,
) -> Result<()> {
    if training.overlap_moe_expert_parallel_comm == Some(true) && model.moe.is_none() {
        bail!(
            "--overlap-moe-expert-parallel-comm: model {} is dense (no experts), so no plan has an expert all-to-all to overlap; drop the flag",
            model.name
        );
    }
    // `--recompute-modules` says what the searched selective recompute recomputes, and an
    // offloading search holds only plans without recompute (`ParallelPlan::build`), so beside
    // `--cpu-offload-layers` the modules were dropped without a word, where `eval` refuses the pair.
    if let (Some(modules), Some(layers)) = (
        &training.recompute_modules,
        training.cpu_offload_layers.filter(|n| *n > 0),
    ) {
        bail!(
            "--recompute-modules {} with --cpu-offload-layers {layers}: the modules say what selective recompute recomputes, and Megatron-Core offloads activations only without recompute (transformer_config.py: \"CPU offloading does not work when activation recomputation is enabled\"), so no plan searched would recompute them; drop --recompute-modules or --cpu-offload-layers",
            modules.join(" ")
        );
    }
    let precision = precision_of_args(training);
    crate::plan::check_precision(cluster, precision)?;
    super::scenario::check_fp8_scaling_applies(training, precision)?;
    crate::plan::check_precision_framework(framework, precision)?;
    Ok(())
}

pub(super) fn plan(mut args: PlanArgs) -> Result<Outcome> {
    if let Some(target) = super::scenario::framework_for_emit(args.emit, &mut args.training, false)
    {
        let model = args.model.clone();
        return plan_chosen(args)
            .map_err(|err| super::scenario::in_emit_framework_words(err, &model, target));
    }
    plan_chosen(args)
}

/// `plan` once the framework is chosen.
fn plan_chosen(args: PlanArgs) -> Result<Outcome> {
    if args.top == 0 {
        bail!("--top 0 would print nothing; give how many plans to show, e.g. --top 10");
    }
    if args.top > MAX_TOP {
        bail!(
            "--top {} is more than {MAX_TOP}; every shown plan gets a schedule simulation and a detail section, so give how many to show, e.g. --top 10",
            args.top
        );
    }
    if let Some(dir) = &args.report {
        check_dir("--report", dir, &input_paths(&args.model, &args.cluster))?;
    }
    if let Some(path) = &args.save {
        // An input named as the output is said as such, before the file there is checked.
        output_file::refuse_input_overlap(
            "--save",
            path,
            &input_paths(&args.model, &args.cluster),
        )?;
        output_file::check_file(
            "--save",
            path,
            "plans/mine.yaml",
            output_file::OutputKind::Plan,
        )?;
        if let Some(dir) = &args.report {
            output_file::refuse_report_output_overlap(
                "--save",
                path,
                "--report",
                dir,
                &report::FILE_NAMES,
            )?;
        }
    }
    let scenario = resolve_scenario(&args.model, &args.cluster, &args.training, None)?;
    if let Some(target) = args.emit {
        check_emit_input(target, &scenario, precision_of_args(&args.training))?;
    }
    super::scenario::note_window_without_effect(&scenario, &args.model);
    super::scenario::note_routing_without_effect(&scenario.training);
    let options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
        precision: precision_of_args(&args.training),
        pins: pins_of_args(&args.pins, &args.training.recompute_modules)?,
    };
    super::scenario::check_zero_pin_for_optimizer_states(&scenario.training, options.pins.zero)?;
    // Every plan the pin lets through would be refused by `ParallelPlan::build` for the same
    // reason: say it once, as eval does, rather than 'no valid plan'.
    if let Some(replicas) = options.pins.dp_replicas.filter(|&r| r > 1)
        && scenario.training.optimizer_states == crate::training::OptimizerStates::Muon
    {
        return Err(crate::plan::PlanError::MuonDpReplicas { replicas }.into());
    }
    // Pinned copies the configuration cannot write make every plan of the search unwritable: an
    // input error, as `eval --emit` says it for its one plan (it was exit 1, "none of the plans
    // that fit can run", with the other reasons of plans the pin never let through).
    if let (Some(target), Some(replicas)) = (args.emit, options.pins.dp_replicas)
        && let Some(why) =
            super::emit_commands::framework_of(target).dp_replicas_unsupported(replicas)
    {
        bail!(
            "--emit {}: {why}",
            super::emit_commands::target_name(target)
        );
    }
    // Pinned copies beside pinned kept-gathered ZeRO-3: torch FSDP2 in Megatron-LM, which keeps
    // no copies (`Framework::unsupported`); every plan of the search would be refused.
    if let (Some(EmitTarget::Megatron), Some(replicas @ 2..), Some(3), Some(false)) = (
        args.emit,
        options.pins.dp_replicas,
        options.pins.zero,
        options.pins.reshard_after_forward,
    ) {
        bail!(
            "--emit megatron: --dp-replicas {replicas} with --zero 3 --reshard-after-forward false has no Megatron-LM setting: keeping the gathered parameters is torch FSDP2 (--torch-fsdp2-no-reshard-after-forward), which shards over the whole data-parallel group and ignores --num-distributed-optimizer-instances; use --dp-replicas 1, or --reshard-after-forward true (Megatron-FSDP keeps the copies)"
        );
    }
    // NeMo 1.x has no ZeRO-3 optimizer (`Framework::unsupported`): a pinned ZeRO-3, or a pinned
    // resharding (a ZeRO-3 setting), leaves no plan to write (it was exit 1, "none of the plans
    // that fit can run", and a pinned resharding was told to pin the other value, which failed
    // in turn).
    if args.emit == Some(EmitTarget::Nemo)
        && (options.pins.zero == Some(3) || options.pins.reshard_after_forward.is_some())
    {
        let pin = match (options.pins.zero, options.pins.reshard_after_forward) {
            (Some(3), _) => "--zero 3".to_string(),
            (_, Some(reshard)) => {
                format!("--reshard-after-forward {reshard} pins ZeRO-3, which")
            }
            _ => unreachable!("checked above"),
        };
        bail!(
            "--emit nemo: {pin} has no NeMo 1.x optimizer (mcore_distributed_optim is ZeRO-1, distributed_fused_adam ZeRO-2); pin --zero 0, 1 or 2, or use --emit megatron-bridge (Megatron-FSDP) or --emit megatron"
        );
    }
    // Likewise selective recompute of modules other than the attention core, pinned: NeMo 1.x
    // recomputes the attention core only.
    if let (Some(EmitTarget::Nemo), Some(crate::plan::Recompute::Selective), Some(modules)) = (
        args.emit,
        options.pins.recompute,
        scenario.training.recompute_modules,
    ) && !modules.is_core_attn_only()
    {
        bail!(
            "--emit nemo: --recompute selective of {} has no NeMo 1.x setting (its selective recompute is the attention core); drop --recompute-modules, or use --emit megatron or --emit megatron-bridge",
            modules.megatron_words()
        );
    }
    // Megatron-Bridge and NeMo write Megatron-FSDP or nothing at ZeRO-3, which releases the
    // gathered parameters after every forward: a pinned `--reshard-after-forward false` leaves no
    // plan to write (it was exit 1, "none of the plans that fit can run").
    if let (Some(target @ (EmitTarget::MegatronBridge | EmitTarget::Nemo)), Some(false)) =
        (args.emit, options.pins.reshard_after_forward)
    {
        bail!(
            "--emit {}: --reshard-after-forward false has no setting there: Megatron-FSDP releases the gathered parameters after every forward; use --reshard-after-forward true, or --emit megatron (torch FSDP2's --torch-fsdp2-no-reshard-after-forward, with pp 1, ep 1 and untied embeddings)",
            super::emit_commands::target_name(target)
        );
    }
    if let Some(n) = options.pins.recompute_num_layers
        && !scenario.training.framework.recomputes_some_layers()
    {
        bail!(
            "--recompute-num-layers {n} pins block recompute of some layers, but --framework {} checkpoints every transformer block under full recompute; pin --recompute full, or choose --framework megatron-core",
            scenario.training.framework.as_str()
        );
    }
    // An overlap asked for that no plan of this search can use is refused, as `eval` refuses it
    // for its one plan: the pins leave no tensor parallelism (or the model has no experts,
    // `check_search_input`).
    if args.training.tp_comm_overlap == Some(true) && options.pins.tp == Some(1) {
        bail!(
            "--tp-comm-overlap with --tp 1: it overlaps tensor-parallel communication, which a plan with tp 1 has none of; pin --tp 2 or more, or drop --tp-comm-overlap"
        );
    }
    if args.training.tp_comm_overlap == Some(true) && options.pins.sequence_parallel == Some(false)
    {
        bail!(
            "--tp-comm-overlap with --sequence-parallel false: the overlap needs sequence parallelism (Megatron-LM arguments.py), which the pin rules out of every plan; drop --sequence-parallel false or --tp-comm-overlap"
        );
    }
    check_search_input(
        &args.training,
        &scenario.model,
        &scenario.cluster,
        scenario.training.framework,
    )?;
    // `--threads` sized the global pool before the command ran (`thread_env`).
    let result = search(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        options,
    );
    if result.ranked.is_empty() {
        bail!(
            "no valid plan exists: {}",
            why_no_valid_plan(
                &scenario.model,
                &scenario.cluster,
                &scenario.training,
                options
            )
        );
    }
    // Said once the input is known to be valid, so a bad flag still gets a one-line error.
    super::held_notes::print_held();
    if let Some(cp) = options.pins.cp
        && let Some(note) = super::cp_exchange_note::unused_with_cp_1(
            &args.training,
            cp,
            "--cp 1 pins plans without context parallelism",
            "pin --cp 2 or more, or drop --cp, to search with it",
        )
    {
        eprintln!("{note}");
    } else if options.pins.cp.is_none()
        && let Some(note) = super::cp_exchange_note::unused_by_search(
            &args.training,
            result.ranked.iter().any(|e| e.plan.cp > 1),
            "the search",
            scenario.training.seq_len,
        )
    {
        eprintln!("{note}");
    }
    if let Some(note) = v_schedule_pin_note(&scenario.training, options.pins) {
        eprintln!("{note}");
    }
    for line in global_batch_advice(
        &scenario,
        args.training.global_batch.is_some(),
        None,
        options,
    ) {
        eprintln!("{line}");
    }
    let (model, cluster) = summaries(&scenario);
    let feasible = result.feasible();
    let top: Vec<_> = feasible.iter().take(args.top).copied().collect();
    // The search ranks on the closed form; the shown plans get the simulated schedule.
    let refined = refine_top(&scenario.model, &scenario.cluster, &scenario.training, &top);
    let details = details_of(
        (&scenario.model, &scenario.cluster, &scenario.training),
        &refined.plans,
        &refined.simulated,
    );
    let mut notes = Vec::new();
    if let Some(note) = uneven_pp_note(&scenario.model, &scenario.cluster, options) {
        notes.push(note);
    }
    if let Some(note) = windowed_cp_note(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        options,
    ) {
        notes.push(note);
    }
    if let Some(note) = emit_note(&scenario, &refined.plans, feasible) {
        notes.push(note);
    }
    if let Some(note) = alltoall_overlap_note(&scenario, &refined.plans) {
        notes.push(note);
    }
    // The offload note runs the search four times more: only where a note is read (the text
    // table or the report; JSON, YAML and --emit print none).
    let notes_read =
        args.emit.is_none() && (args.format == crate::cli::Format::Table || args.report.is_some());
    if notes_read && let Some(note) = cpu_offload_note(&scenario, options, &refined.plans) {
        notes.push(note);
    }
    if refined.reordered {
        notes.push(format!(
            "note: the event-driven schedule simulation (stages or model chunks unequal in work) changed the order of the top {} plans from the closed-form ranking; they are shown in simulated order",
            refined.plans.len()
        ));
    }
    let report = Report {
        model,
        cluster,
        training: scenario.training,
        // The pins, as the `pinned:` line under the search line names them.
        search: Some(crate::planner::SearchStats {
            pinned: super::pin_conflict::pins_json(&options.pins),
            ..result.stats.clone()
        }),
        plans: refined.plans.clone(),
        details,
    };

    if let (Some(path), Some(best)) = (&args.save, report.plans.first()) {
        let file = PlanFile {
            model: Some(ModelRef::Inline(Box::new(model_file_of(
                &scenario.model,
                scenario.spec_file.as_ref(),
            )))),
            params: None,
            // A profile file is written as its path from the plan's folder, where `eval --plan`
            // reads it from.
            gpu: Some(crate::specs::reference_for_plan(
                path,
                &scenario.gpu_reference,
            )),
            nodes: Some(scenario.cluster.nodes),
            gpus_per_node: Some(scenario.cluster.gpus_per_node),
            // The value given, also one at or above this GPU's memory (which holds nothing here,
            // but does on a GPU with more that `eval --plan FILE --gpu` may name).
            max_memory_gib: args
                .cluster
                .max_memory_gib
                .or(scenario.cluster.gpu.memory_limit_gib),
            seq_len: Some(scenario.training.seq_len),
            global_batch: Some(scenario.training.global_batch),
            tokens: args.training.tokens.clone(),
            // The price the cost was printed at, so that the file's cost is the table's.
            price_per_gpu_hour: scenario.training.price_per_gpu_hour,
            local_batch: scenario.training.local_batch,
            cp_exchange: Some(scenario.training.cp_exchange),
            fp8_scaling: Some(scenario.training.fp8_scaling),
            bf16_layers: Some(scenario.training.bf16_layers).filter(|b| !b.is_none()),
            pp_schedule: Some(scenario.training.pp_schedule)
                .filter(|s| *s != crate::training::PipelineSchedule::OneFOneB),
            cpu_offload_layers: (scenario.training.cpu_offload_layers > 0)
                .then_some(scenario.training.cpu_offload_layers),
            // Written only for a plan that recomputes selectively, the one kind they describe:
            // `eval --plan` refuses modules beside another recompute, as a value it would drop.
            recompute_modules: scenario
                .training
                .recompute_modules
                .filter(|_| best.plan.recompute == crate::plan::Recompute::Selective),
            grad_dtype: Some(scenario.training.grad_dtype),
            gradient_accumulation_fusion: (!scenario.training.gradient_accumulation_fusion)
                .then_some(false),
            rope_fusion: (scenario.training.rope_fusion
                != scenario
                    .training
                    .framework
                    .fuses_rope_by_default(scenario.model.position_embedding))
            .then_some(scenario.training.rope_fusion),
            optimizer_states: Some(scenario.training.optimizer_states),
            attention: Some(scenario.training.attention),
            framework: Some(scenario.training.framework),
            overlap: Some(scenario.training.overlap),
            // The imbalance given, not the one the capacity factor caps it to (saved beside it),
            // so that `eval --plan FILE --moe-capacity-factor F` caps the user's value at F.
            moe_imbalance: args.training.moe_imbalance.filter(|&i| i != 1.0),
            moe_capacity_factor: scenario.training.moe_capacity_factor,
            moe_dispatch: (scenario.training.moe_dispatch
                != crate::training::MoeDispatch::default())
            .then_some(scenario.training.moe_dispatch),
            fp8_param_gather: (scenario.training.fp8_param_gather
                != scenario.training.framework.fp8_param_gather())
            .then_some(scenario.training.fp8_param_gather),
            kernel_fusion: (scenario.training.kernel_fusion
                != scenario.training.framework.default_kernel_fusion())
            .then_some(scenario.training.kernel_fusion),
            plan: PlanRequest {
                allow_cross_node_tp: best.plan.tp > scenario.cluster.gpus_per_node,
                ..best.plan.request()
            },
            given: crate::specs::PlanKeysGiven::ALL,
        };
        let text = format!(
            "# Written by `tpsim plan`; read it back with `tpsim eval --plan {}`.\n{}",
            // Quoted, so a path with a line break stays inside the comment line (it broke the
            // file: the rest of the path was read as YAML).
            crate::input_file::quote(path),
            yaml_serde::to_string(&file)?
        );
        let replacing = output_file::replacing_words(std::path::Path::new(path), "plan");
        output_file::write_file(
            "--save",
            path,
            text.as_bytes(),
            output_file::OutputKind::Plan,
        )?;
        eprintln!("saved the best plan to {path}{replacing}");
    } else if let Some(path) = &args.save {
        // Said as `--report` says it: the file asked for was not written.
        eprintln!(
            "no plan saved to {}: no plan fits",
            crate::input_file::quote(path)
        );
    }

    if let Some(target) = args.emit {
        return emit_best(target, &scenario, feasible);
    }

    // The pins, under the search line of the table and of the report's page.
    let pinned_line = super::pin_conflict::pins_line(
        &options.pins,
        result
            .stats
            .infeasible_by_reason
            .get("ruled_out_by_pins")
            .copied()
            .unwrap_or(0),
    );
    if let (Some(dir), Some(Some(chosen))) = (&args.report, refined.simulated.first()) {
        // The table's rows, twins folded, each bar numbered as its row: unfolded, a twin that
        // differs only in a setting that changes nothing took a number the table gives the next
        // row (#2 a ZeRO-1 twin of #1 in the figures, ZeRO-2 in the table).
        let rows = crate::planner::fold_firsts(&report.plans);
        let report = Report {
            plans: rows.iter().map(|&i| report.plans[i]).collect(),
            details: rows
                .iter()
                .filter_map(|&i| report.details.get(i).cloned())
                .collect(),
            ..report.clone()
        };
        let labels: Vec<String> = report
            .plans
            .iter()
            .enumerate()
            .map(|(i, e)| plan_label(i + 1, e))
            .collect();
        let wrote = write_report(Written {
            flag: "--report",
            dir,
            model: &scenario.model,
            cluster: &scenario.cluster,
            training: &scenario.training,
            report: &report,
            chosen_label: format!("the best plan ({})", labels[0]),
            labels,
            evaluated: &result.ranked,
            chosen,
            notes: pinned_line.iter().chain(&notes).cloned().collect(),
            inputs: &input_paths(&args.model, &args.cluster),
        })?;
        eprintln!("{wrote}");
    } else if let Some(dir) = &args.report {
        eprintln!("no report written to {dir}: no plan fits");
    }
    // Every file is written before anything is printed: a failure prints nothing on stdout.
    print_report(&report, args.format, |r| {
        let pinned = pinned_line
            .as_ref()
            .map(|line| format!("{line}\n"))
            .unwrap_or_default();
        let mut out = format!(
            "{}\n{}\n{pinned}\n",
            report::scenario_line(r),
            report::stats_line(&result.stats)
        );
        if r.plans.is_empty() {
            return out;
        }
        // Rows that differ only in a setting that changes nothing are folded into one (issue 11).
        let folded = crate::planner::fold_equivalent(&r.plans);
        let shown: Vec<_> = folded.iter().map(|row| row.estimate).collect();
        out.push_str(&report::plans_table_fitted(
            &shown,
            scenario.training.tokens.is_some(),
            terminal_columns(),
        ));
        out.push('\n');
        // What the train column rests on, as `eval`'s time-to-train line says it.
        let train_line = scenario
            .training
            .tokens
            .zip(shown.first())
            .and_then(|(tokens, best)| {
                best.time_to_train_s.map(|seconds| {
                    let cost = match (best.cost_to_train, scenario.training.price_per_gpu_hour) {
                        (Some(cost), Some(price)) => format!(
                            "; cost {}",
                            report::cost_words(cost, seconds, &scenario.cluster, price)
                        ),
                        _ => String::new(),
                    };
                    format!(
                        "train: {}, at each plan's step time (#1: {} s per step, {}{cost})",
                        report::train_basis(tokens, &best.plan, &scenario.training),
                        // As the table's step column and `--emit`'s note show it.
                        crate::units::show_step_s(best.time.step_s.0),
                        crate::report::duration(seconds)
                    )
                })
            });
        for line in [
            report::mfu_note(&shown, r.cluster.peak_flops),
            train_line,
            report::zero_keep_note(&shown),
            crate::planner::folded_note(&folded),
            crate::uncertainty::within_error_line(
                &shown,
                &r.cluster.gpu,
                r.training.framework,
                crate::uncertainty::ModelKind::of(r.model.moe.is_some()),
            ),
            shown.first().and_then(|best| {
                crate::memory_margin::margin_line(
                    best,
                    r.cluster.gpu_memory_bytes as f64,
                    r.training.framework,
                    if shown.len() == 1 { "this plan" } else { "#1" },
                )
            }),
        ]
        .into_iter()
        .flatten()
        {
            out.push_str(&line);
            out.push('\n');
        }
        if r.plans.iter().any(|e| e.plan.pp > 1) {
            let schedule = scenario.training.pp_schedule;
            if schedule == crate::training::PipelineSchedule::OneFOneB
                && scenario.training.framework == crate::training::TrainingFramework::Torchtitan
            {
                // torchtitan names the interleaved schedule apart: its `1F1B` runs one stage
                // per rank, so a row with vpp > 1 runs `Interleaved1F1B`.
                out.push_str("step times: pipelined plans use the simulated 1F1B schedule (torchtitan's pipeline_parallel_schedule 1F1B; a row with vpp > 1 runs Interleaved1F1B, vpp stages per rank; the output layer makes the last stage slower); the search ranked on the closed form (p-1)/(v·m)\n");
            } else if schedule == crate::training::PipelineSchedule::OneFOneB {
                out.push_str("step times: pipelined plans use the simulated 1F1B schedule (the output layer makes the last stage slower); the search ranked on the closed form (p-1)/(v·m)\n");
            } else {
                out.push_str(&format!(
                    "step times: pipelined plans use the simulated {} schedule (torchtitan's {}; two chunks per GPU in a V, rank 0 holding the first and the last with the output layer, the backward split into input and weight gradients); the search ranked on {}\n",
                    schedule.words(2),
                    schedule.torchtitan_name(2),
                    schedule.closed_form_words()
                ));
            }
        }
        for note in &notes {
            out.push_str(note);
            out.push('\n');
        }
        out.push_str(&report::explain_best(
            &r.plans[0],
            &scenario.cluster,
            &scenario.model,
            crate::cost::tp_pairs_per_layer(&scenario.model, &scenario.training, &r.plans[0]),
            crate::cost::sp_regathers_in_backward(&scenario.training, &r.plans[0].plan),
            crate::cost::tp_recompute_repeats_collectives(
                &scenario.model,
                &scenario.training,
                &r.plans[0],
            ),
            crate::cost::slowest_stage(
                &scenario.model,
                &scenario.cluster,
                &scenario.training,
                &r.plans[0].plan,
            )
            .ends,
            match scenario.model.moe {
                Some(_) => crate::cost::moe::expert_dp(&r.plans[0].plan),
                None => 1,
            },
            &scenario.training,
            ep_alternative_words(&scenario, &result.ranked, feasible, &shown).as_deref(),
        ));
        out
    });
    if feasible.is_empty() {
        let miss = match result.closest_miss() {
            Some(closest) if closest.memory.misses_only_host() => format!(
                "closest: {} fits the GPU ({:.1} of {:.1} GiB) but keeps {:.1} GiB of offloaded activations in host memory, which has {:.1} GiB per GPU (misses by {} GiB); offload fewer layers (--cpu-offload-layers), add nodes, or shorten --seq-len",
                closest_plan_words(closest),
                closest.memory.total_bytes.0 / GIB,
                closest.memory.capacity_bytes.0 / GIB,
                closest.memory.host_bytes.0 / GIB,
                closest.memory.host_capacity_bytes.0 / GIB,
                miss_gib_words(
                    closest.memory.host_capacity_bytes.0,
                    closest.memory.host_bytes.0
                ),
            ),
            Some(closest) => {
                let floor = states_floor_words(&scenario, closest.memory.capacity_bytes.0);
                format!(
                    "closest: {} needs {:.1} GiB of {:.1} GiB (misses by {} GiB); {}{}{}{}",
                    closest_plan_words(closest),
                    closest.memory.total_bytes.0 / GIB,
                    closest.memory.capacity_bytes.0 / GIB,
                    miss_gib_words(
                        closest.memory.capacity_bytes.0,
                        closest.memory.total_bytes.0
                    ),
                    floor
                        .as_ref()
                        .map_or(String::new(), |words| format!("{words}; ")),
                    match scenario.cluster.gpu.memory_limit_gib {
                        Some(_) => format!(
                            "raise --max-memory-gib (the GPU has {:.1} GiB), ",
                            scenario.cluster.gpu.device_memory().0 / GIB
                        ),
                        None => String::new(),
                    },
                    match floor {
                        None => "add nodes, use a larger-memory GPU, or shorten --seq-len",
                        Some(_) => "add nodes or use a larger-memory GPU",
                    },
                    // A deeper pipeline moves layers, not the states the floor counts over all GPUs.
                    if floor.is_none()
                        && uneven_pp_comes_closer(&scenario, options, closest.memory.total_bytes.0)
                    {
                        format!(
                            ", or add --allow-uneven-pp (deeper pipelines than the {} layers split evenly)",
                            scenario.model.layers
                        )
                    } else {
                        String::new()
                    }
                )
            }
            None => unreachable!("an empty search returned an error above"),
        };
        eprintln!("nothing fits: {miss}");
        // The closest miss says which way the offloaded count should move: a GPU that overflows
        // wants more layers on the host, a host that overflows fewer.
        let host_missed = result
            .closest_miss()
            .is_some_and(|e| e.memory.misses_only_host());
        if let Some(hint) = more_offload_hint(&scenario, options, host_missed) {
            eprintln!("{hint}");
        }
        if let Some(hint) = super::pin_conflict::fit_hint(
            &scenario.model,
            &scenario.cluster,
            &scenario.training,
            options,
        ) {
            eprintln!("{hint}");
        }
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}

/// Where the weights and optimizer states alone outgrow the cluster, even sharded over every GPU
/// (ZeRO-3 / FSDP, the least any plan keeps), what `plan`'s nothing-fits line and `eval`'s note on
/// a plan that does not fit say: how many GPUs of this memory they need at the least (gradients
/// and activations come on top), since neither recompute nor a shorter --seq-len can close that
/// gap; None where they would fit. The bytes per parameter are the scenario line's "weights +
/// states" (`OptimizerStates::bytes_at_rest`, the smaller of its two readings). It is a floor for
/// every plan: the memory model keeps at least these bytes for each parameter on some GPU (ZeRO
/// divides them, TP, PP and EP split them, nothing holds less), except that low-precision
/// parameters (`--fp8-param-gather` on Blackwell, NVFP4) keep a layer weight in 1 to 1.125 bytes
/// instead of 2 (`cost::memory`), which the gradient every parameter keeps (2 or 4 bytes, however
/// sharded) more than makes up.
pub(super) fn states_floor_words(
    scenario: &super::scenario::Scenario,
    capacity_bytes: f64,
) -> Option<String> {
    let states = scenario.training.optimizer_states;
    let bytes_per_param = states.bytes_at_rest(false).min(states.bytes_at_rest(true));
    let states_bytes = bytes_per_param * scenario.model.params();
    let gpus = scenario.cluster.total_gpus();
    if capacity_bytes <= 0.0 || states_bytes <= capacity_bytes * f64::from(gpus) {
        return None;
    }
    let gpus_needed = (states_bytes / capacity_bytes).ceil();
    let per_gpu = match gpus {
        1 => "on the one GPU, where nothing shards them, so no plan on 1 GPU fits".to_string(),
        n => {
            format!("per GPU even sharded over all {n} GPUs (ZeRO-3), so no plan on {n} GPUs fits")
        }
    };
    Some(format!(
        "the weights and optimizer states alone take {:.1} GiB ({} bytes per parameter x {:.1}B parameters), {:.1} GiB {per_gpu}: at least {} GPUs of {:.1} GiB hold them, before gradients and activations",
        states_bytes / GIB,
        bytes_per_param,
        scenario.model.params() / 1e9,
        states_bytes / GIB / f64::from(gpus),
        gpus_needed,
        capacity_bytes / GIB,
    ))
}

/// By how many GiB `used_bytes` misses `capacity_bytes`, as printed, so the three numbers of the
/// nothing-fits line add up (`units::shown_gib_left`); where the two print alike, "under 0.1", as
/// `eval` says it.
fn miss_gib_words(capacity_bytes: f64, used_bytes: f64) -> String {
    match -crate::units::shown_gib_left(capacity_bytes, used_bytes) {
        miss_gib if miss_gib < 0.05 => "under 0.1".to_string(),
        miss_gib => format!("{miss_gib:.1}"),
    }
}

/// What the fastest plan that splits the experts (ep > 1) would have cost, for the "EP 1" line
/// of an MoE model's best plan at ep 1: its settings, place and step time (the simulated
/// schedule, as the table's), and how much of that its all-to-alls leave exposed; or that none
/// fits or none is valid. None where the best plan splits the experts or the model has none.
/// `shown` is the table's rows (simulated, re-ranked, folded): a plan with ep > 1 among them is
/// named by its row, as the table numbers it; otherwise the search's first (ranked on the closed
/// form) by its rank there, as `emit_note` names a plan below the table.
fn ep_alternative_words(
    scenario: &super::scenario::Scenario,
    ranked: &[Estimate],
    feasible: &[Estimate],
    shown: &[Estimate],
) -> Option<String> {
    let best = shown.first()?;
    if scenario.model.moe.is_none() || best.plan.ep > 1 || best.plan.etp > 1 {
        return None;
    }
    let (alternative, place) = if let Some((row, e)) =
        shown.iter().enumerate().find(|(_, e)| e.plan.ep > 1)
    {
        (*e, format!("#{} in the table", row + 1))
    } else {
        let Some((rank, alternative)) = feasible.iter().enumerate().find(|(_, e)| e.plan.ep > 1)
        else {
            return Some(if ranked.iter().any(|e| e.plan.ep > 1) {
                "no plan with EP > 1 fits".to_string()
            } else {
                "no plan with EP > 1 is valid here".to_string()
            });
        };
        let rank = rank + 1;
        let place = if rank <= MAX_TOP {
            format!(
                "#{rank} of the search's {}, below the table: --top {rank} shows it",
                feasible.len()
            )
        } else {
            format!(
                "#{rank} of the search's {}, below the table",
                feasible.len()
            )
        };
        let simulated = crate::cost::simulated::simulate_plan(
            &scenario.model,
            &scenario.cluster,
            &scenario.training,
            &alternative.plan,
        )
        .map_or(*alternative, |sim| sim.estimate);
        (simulated, place)
    };
    let (step, best_step) = (alternative.time.step_s.0, best.time.step_s.0);
    Some(format!(
        "the fastest plan with EP > 1 ({}, {place}) takes {} s per step, {:.1}% more, its all-to-alls {} s of it exposed",
        closest_plan_words(&alternative),
        crate::units::show_step_s(step),
        100.0 * (step / best_step - 1.0),
        crate::units::show_step_s(alternative.time.ep_comm_exposed_s.0)
    ))
}

/// A plan as `plan`'s nothing-fits line and offload note name it: its degrees, then micro-batch,
/// recompute, ZeRO stage as the table's zero column gives it ("3 keep", "1 x4") and a precision
/// other than bf16.
fn closest_plan_words(closest: &Estimate) -> String {
    format!(
        "{}{}{} mb {} recompute {} ZeRO-{}{}",
        super::pin_conflict::degrees_words(&closest.plan),
        if closest.plan.vpp > 1 {
            format!(" vpp {}", closest.plan.vpp)
        } else {
            String::new()
        },
        if closest.plan.sequence_parallel {
            " sequence-parallel"
        } else {
            ""
        },
        closest.plan.micro_batch,
        report::recompute_label(&closest.plan),
        report::zero_label(&closest.plan),
        match closest.plan.precision {
            crate::plan::Precision::Bf16 => String::new(),
            p => format!(" {}", p.as_str()),
        }
    )
}

/// The offloaded-layer counts `plan`'s offload note and hint try, fewest first and each once: a
/// quarter, half and three quarters of `layers`, and all but one (Megatron-Core's most).
fn offload_counts_to_try(layers: u32) -> impl Iterator<Item = u32> {
    let most = layers.saturating_sub(1);
    let mut last = 0;
    (1..=4u32)
        .map(move |quarter| (layers * quarter / 4).min(most))
        .filter(move |n| {
            let new = *n > last;
            last = last.max(*n);
            new
        })
}

/// Where `--cpu-offload-layers N` leaves nothing that fits, the fewest layers offloaded (in quarters
/// of the model, or all but one) with which a plan fits: offloading more is the fix the flag's user
/// reaches for first. Where the closest miss fits the GPU and overflows the host memory its
/// offloaded activations need (`host_missed`), offloading more only adds to that: then the most
/// layers below N with which a plan fits, with the host memory it takes.
fn more_offload_hint(
    scenario: &super::scenario::Scenario,
    options: SearchOptions,
    host_missed: bool,
) -> Option<String> {
    let (model, cluster) = (&scenario.model, &scenario.cluster);
    let asked = scenario.training.cpu_offload_layers;
    if asked == 0 {
        return None;
    }
    let counts: Vec<u32> = if host_missed {
        offload_counts_to_try(model.layers)
            .filter(|n| *n < asked)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    } else {
        offload_counts_to_try(model.layers)
            .filter(|n| *n > asked)
            .collect()
    };
    counts.into_iter().find_map(|n| {
        let training = Training {
            cpu_offload_layers: n,
            ..scenario.training
        };
        let found = search(model, cluster, &training, options);
        let best = found.feasible().first().copied()?;
        let host = if host_missed {
            format!(
                ", {:.1} of {:.1} GiB of host memory per GPU",
                best.memory.host_bytes.0 / GIB,
                best.memory.host_capacity_bytes.0 / GIB
            )
        } else {
            String::new()
        };
        Some(format!(
            "hint: offloading {n} of the {} layers (--cpu-offload-layers {n}) fits: {} at {} of {} GiB{host}",
            model.layers,
            super::pin_conflict::degrees_words(&best.plan),
            format_args!("{:.1}", best.memory.total_bytes.0 / GIB),
            format_args!("{:.1}", best.memory.capacity_bytes.0 / GIB)
        ))
    })
}

/// Whether `--allow-uneven-pp`, not given, would let a plan fit or miss by less than the closest
/// miss's `need_bytes`: only then is it a fix to offer. With 8 GPUs and 32 layers every pipeline
/// depth the GPUs allow already splits the layers evenly, and the flag adds no plan.
fn uneven_pp_comes_closer(
    scenario: &super::scenario::Scenario,
    options: SearchOptions,
    need_bytes: f64,
) -> bool {
    let (model, cluster) = (&scenario.model, &scenario.cluster);
    let gpus = cluster.total_gpus();
    let adds_depth = (2..=model.layers.min(gpus)).any(|pp| {
        gpus.is_multiple_of(pp)
            && !model.layers.is_multiple_of(pp)
            && options.pins.pp.is_none_or(|pin| pin == pp)
    });
    if options.allow_uneven_pp || !adds_depth {
        return false;
    }
    let widened = search(
        model,
        cluster,
        &scenario.training,
        SearchOptions {
            allow_uneven_pp: true,
            ..options
        },
    );
    !widened.feasible().is_empty()
        || widened
            .closest_miss()
            .is_some_and(|e| e.memory.total_bytes.0 < need_bytes)
}

/// The terminal's width when stdout is one (comfy-table asks the terminal), so the plan table can
/// fit it; `None` when stdout is a pipe or a file, which get the whole table.
fn terminal_columns() -> Option<usize> {
    comfy_table::Table::new().width().map(usize::from)
}
