//! `tpsim compare`: two plans side by side, the two best layouts of a search or two plan files of
//! one scenario, each with the simulated schedule's step time.

use anyhow::{Result, bail};

use super::scenario::{Scenario, precision_of_args, precision_over_file, resolve_scenario};
use super::{Outcome, plan_error_words};
use crate::cli::{CompareArgs, CompareFormat};
use crate::compare;
use crate::cost::simulated::simulate_plan;
use crate::cost::{Estimate, evaluate};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::planner::{SearchOptions, search};
use crate::specs;
use crate::units::format_count;

/// Layout of a plan, ignoring the ZeRO stage (plans that differ only there are near-twins).
pub(super) fn layout(e: &Estimate) -> (u32, u32, u32, u32, u32, bool, Recompute) {
    let p = &e.plan;
    (
        p.tp,
        p.pp,
        p.dp,
        p.vpp,
        p.micro_batch,
        p.sequence_parallel,
        p.recompute,
    )
}

/// What differs between the scenarios of two plan files (model, GPU, cluster, sequence, batch):
/// a comparison of step times is only about the plans when none of these differ.
pub(super) fn scenario_differences(a: &Scenario, b: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    let shape = |m: &Model| {
        format!(
            "{} params, {}, hidden {}, {} ({} kv), ffn {}, vocab {}",
            format_count(m.params()),
            crate::report::counted(m.layers, "layer"),
            m.hidden,
            crate::report::counted(m.heads, "head"),
            m.kv_heads,
            m.ffn_hidden,
            m.vocab
        )
    };
    let (mut ma, mut mb) = (a.model.clone(), b.model.clone());
    ma.name.clear();
    mb.name.clear();
    // The sequence length is reported on its own below, so it does not make the models differ;
    // each model is still described as it is, at its own sequence length (learned positions are
    // s·h parameters), so its count reads as `plan` and `eval` print it.
    mb.seq_len = ma.seq_len;
    // The rotary base prices nothing (the emitted configs carry it), so plans of a model at two
    // bases compare as the same model.
    mb.rotary_base = ma.rotary_base;
    if ma != mb {
        let (sa, sb) = (shape(&a.model), shape(&b.model));
        out.push(if shape(&ma) == shape(&mb) && ma.attention_window != mb.attention_window {
            let window = |m: &crate::model::Model| match m.attention_window {
                Some(w) => format!("a {}-token window (every {} layer full)", w.tokens, w.full_every),
                None => "full attention".to_string(),
            };
            format!(
                "model: {sa}, but {} against {} (--attention-window, --window-attn-skip-freq)",
                window(&a.model),
                window(&b.model)
            )
        } else if shape(&ma) == shape(&mb) && ma.mtp_layers != mb.mtp_layers {
            format!(
                "model: {sa}, but {} against {} MTP layers (--mtp-layers)",
                a.model.mtp_layers, b.model.mtp_layers
            )
        } else if shape(&ma) == shape(&mb)
            && let (Some(ea), Some(eb)) = (a.model.moe, b.model.moe)
            && ea.router_topk != eb.router_topk
        {
            format!(
                "model: {sa}, but top-{} against top-{} routing (--moe-router-topk)",
                ea.router_topk, eb.router_topk
            )
        } else if shape(&ma) == shape(&mb)
            && let (Some(ea), Some(eb)) = (a.model.moe, b.model.moe)
            && (ea.router_groups, ea.router_group_topk) != (eb.router_groups, eb.router_group_topk)
        {
            let groups = |m: crate::model::Moe| match m.router_groups {
                0 => "no group limit".to_string(),
                g => format!("{} of {g} groups", m.router_group_topk),
            };
            format!(
                "model: {sa}, but routing from {} against {} (--moe-router-num-groups, --moe-router-group-topk)",
                groups(ea),
                groups(eb)
            )
        } else if shape(&ma) == shape(&mb)
            && ma.position_embedding == mb.position_embedding
            && ma.rotary_percent != mb.rotary_percent
        {
            let positions = |m: &Model| {
                let words = m.position_embedding.describe_with(m.rotary_percent);
                if m.rotary_percent.is_none() {
                    format!("{words} on the whole head")
                } else {
                    words
                }
            };
            format!(
                "model: {sa}, but {} against {} (the plan files' model.rotary_percent)",
                positions(&a.model),
                positions(&b.model)
            )
        } else if shape(&ma) == shape(&mb) && ma.position_embedding != mb.position_embedding {
            format!(
                "model: {sa}, but {} against {} (the plan files' model.position_embedding_type)",
                a.model.position_embedding.describe(),
                b.model.position_embedding.describe()
            )
        } else if shape(&ma) == shape(&mb) {
            format!("model: {sa}, but a different block style (norm, biases, gating, positions, embeddings or dropout)")
        } else {
            format!("model: {sa} against {sb}")
        });
    }
    // `--max-memory-gib` (a plan file's `max_memory_gib`) rides on the GPU profile; it is said
    // on its own line, so that two files on one GPU are not told apart by its name alone.
    let unlimited = |gpu: &crate::cluster::GpuProfile| crate::cluster::GpuProfile {
        memory_limit_gib: None,
        ..gpu.clone()
    };
    if unlimited(&a.cluster.gpu) != unlimited(&b.cluster.gpu) {
        out.push(format!(
            "GPU: {} against {} (--gpu)",
            a.gpu_reference, b.gpu_reference
        ));
    }
    let (la, lb) = (
        a.cluster.gpu.memory_limit_gib,
        b.cluster.gpu.memory_limit_gib,
    );
    if la != lb {
        let limit =
            |l: Option<f64>| l.map_or("the GPU's whole memory".to_string(), |l| format!("{l} GiB"));
        out.push(format!(
            "memory per GPU held below: {} against {} (--max-memory-gib)",
            limit(la),
            limit(lb)
        ));
    }
    let mut number = |what: &str, flag: &str, x: u32, y: u32| {
        if x != y {
            out.push(format!("{what}: {x} against {y} ({flag})"));
        }
    };
    number("nodes", "--nodes", a.cluster.nodes, b.cluster.nodes);
    number(
        "GPUs per node",
        "--gpus-per-node",
        a.cluster.gpus_per_node,
        b.cluster.gpus_per_node,
    );
    number(
        "sequence length",
        "--seq-len",
        a.training.seq_len,
        b.training.seq_len,
    );
    number(
        "global batch",
        "--global-batch",
        a.training.global_batch,
        b.training.global_batch,
    );
    // How the step is run changes every term, so a comparison across frameworks, kernel builds or
    // overlap settings would credit the plans with what the software did.
    let (ta, tb) = (&a.training, &b.training);
    let mut setting = |what: &str, x: String, y: String, flag: &str| {
        if x != y {
            out.push(format!("{what}: {x} against {y} ({flag})"));
        }
    };
    setting(
        "framework",
        ta.framework.as_str().into(),
        tb.framework.as_str().into(),
        "--framework",
    );
    let kernels = |k: crate::training::KernelFusion| match k {
        crate::training::KernelFusion::Fused => "compiled".to_string(),
        crate::training::KernelFusion::Eager => "eager".to_string(),
    };
    if ta.framework == tb.framework {
        setting(
            "kernels",
            kernels(ta.kernel_fusion),
            kernels(tb.kernel_fusion),
            "--torch-compile",
        );
    }
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let (oa, ob) = (&ta.overlap, &tb.overlap);
    setting(
        "TP comm overlap",
        on(oa.tp_comm),
        on(ob.tp_comm),
        "--tp-comm-overlap",
    );
    setting(
        "gradient-reduce overlap",
        on(oa.grad_reduce),
        on(ob.grad_reduce),
        "--overlap-grad-reduce",
    );
    setting(
        "parameter-gather overlap",
        on(oa.param_gather),
        on(ob.param_gather),
        "--overlap-param-gather",
    );
    setting("p2p overlap", on(oa.p2p), on(ob.p2p), "--overlap-p2p-comm");
    setting(
        "MoE all-to-all overlap",
        on(oa.moe_a2a),
        on(ob.moe_a2a),
        "--overlap-moe-expert-parallel-comm",
    );
    setting(
        "gradient dtype",
        ta.grad_dtype.as_str().to_string(),
        tb.grad_dtype.as_str().to_string(),
        "--grad-dtype",
    );
    setting(
        "optimizer states",
        ta.optimizer_states.as_str().to_string(),
        tb.optimizer_states.as_str().to_string(),
        "--optimizer-states",
    );
    setting(
        "attention",
        ta.attention.as_str().to_string(),
        tb.attention.as_str().to_string(),
        "--attention",
    );
    setting(
        "MoE routing imbalance",
        ta.moe_imbalance.to_string(),
        tb.moe_imbalance.to_string(),
        "--moe-imbalance",
    );
    setting(
        "MoE dispatcher",
        ta.moe_dispatch.dispatcher.as_str().to_string(),
        tb.moe_dispatch.dispatcher.as_str().to_string(),
        "--moe-dispatcher",
    );
    setting(
        "MoE routing",
        ta.moe_dispatch.routing.as_str().to_string(),
        tb.moe_dispatch.routing.as_str().to_string(),
        "--moe-routing",
    );
    setting(
        "gradient-accumulation fusion",
        on(ta.gradient_accumulation_fusion),
        on(tb.gradient_accumulation_fusion),
        "--no-gradient-accumulation-fusion / the plan files' gradient_accumulation_fusion",
    );
    setting(
        "RoPE fusion",
        on(ta.rope_fusion),
        on(tb.rope_fusion),
        "--no-rope-fusion / the plan files' rope_fusion",
    );
    let local = |l: Option<u32>| l.map_or("the whole step".to_string(), |l| l.to_string());
    setting(
        "local batch per pipeline schedule",
        local(ta.local_batch),
        local(tb.local_batch),
        "--local-batch",
    );
    setting(
        "context-parallel exchange",
        ta.cp_exchange.as_str().to_string(),
        tb.cp_exchange.as_str().to_string(),
        "--cp-exchange",
    );
    setting(
        "selective recompute",
        ta.selective_recompute().describe(),
        tb.selective_recompute().describe(),
        "--recompute-modules",
    );
    // The time and cost to train rows price the plans on the files' token budgets and prices
    // (`tokens:`, `price_per_gpu_hour:`): two budgets made the rows differ by the budgets while
    // the note said every difference was zero, and a budget in one file only dropped the rows.
    setting(
        "token budget",
        ta.tokens
            .map_or("none".to_string(), crate::units::format_token_count),
        tb.tokens
            .map_or("none".to_string(), crate::units::format_token_count),
        "--tokens",
    );
    setting(
        "price per GPU-hour",
        ta.price_per_gpu_hour
            .map_or("none".to_string(), |p| format!("${p}")),
        tb.price_per_gpu_hour
            .map_or("none".to_string(), |p| format!("${p}")),
        "--price-per-gpu-hour",
    );
    out
}

/// A plan's estimate refined by the schedule simulation, as `plan` and `eval` show it.
fn with_schedule(
    scenario: &Scenario,
    closed: &Estimate,
) -> (Estimate, Option<crate::cost::simulated::ScheduleSummary>) {
    match simulate_plan(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        &closed.plan,
    ) {
        Ok(sim) => (sim.estimate, Some(sim.summary)),
        Err(_) => (*closed, None),
    }
}

pub(super) fn compare_command(args: CompareArgs) -> Result<Outcome> {
    // The model has experts: the plan labels then show ep and etp even at 1 (`sweep::LabelDims`);
    // the GPU's bf16 peak, which MFU is over (`report::mfu_note`).
    let mut cp_note = None;
    let (a, b, a_from, b_from, experts, peak_flops, offload_layers, band_of) = match args.plan.len()
    {
        0 => {
            let scenario = resolve_scenario(&args.model, &args.cluster, &args.training, None)?;
            // What `plan` refuses or notes before the same search.
            super::plan_command::check_search_input(
                &args.training,
                &scenario.model,
                &scenario.cluster,
                scenario.training.framework,
            )?;
            super::scenario::note_window_without_effect(&scenario, &args.model);
            super::scenario::note_routing_without_effect(&scenario.training);
            let options = SearchOptions {
                allow_uneven_pp: args.allow_uneven_pp,
                allow_cross_node_tp: args.allow_cross_node_tp,
                // As `plan` searches: every plan at the --precision given (was dropped).
                precision: precision_of_args(&args.training),
                ..SearchOptions::default()
            };
            let result = search(
                &scenario.model,
                &scenario.cluster,
                &scenario.training,
                options,
            );
            // No valid split at all is bad input, refused as `plan` refuses it (exit 2): it was
            // "nothing fits ... `tpsim plan` shows the closest miss" (exit 1), where `plan` shows
            // no miss but this error.
            if result.ranked.is_empty() {
                bail!(
                    "no valid plan exists: {}",
                    super::plan_command::why_no_valid_plan(
                        &scenario.model,
                        &scenario.cluster,
                        &scenario.training,
                        options
                    )
                );
            }
            if args.training.global_batch.is_none() {
                eprintln!(
                    "{}",
                    super::scenario::default_batch_note(
                        &scenario.training,
                        None,
                        scenario.seq_len_source
                    )
                );
            }
            let feasible = result.feasible();
            let Some(best) = feasible.first() else {
                eprintln!(
                    "nothing fits, so there is nothing to compare; `tpsim plan` shows the closest miss"
                );
                return Ok(Outcome::NothingFits);
            };
            let Some((rank, runner_up)) = feasible
                .iter()
                .enumerate()
                .find(|(_, e)| layout(e) != layout(best))
            else {
                eprintln!("only one plan layout fits; nothing to compare it with");
                return Ok(Outcome::NothingFits);
            };
            cp_note = super::cp_exchange_note::unused_by_search(
                &args.training,
                result.ranked.iter().any(|e| e.plan.cp > 1),
                "the search",
                scenario.training.seq_len,
            );
            let (a, sa) = with_schedule(&scenario, best);
            let (b, sb) = with_schedule(&scenario, runner_up);
            (
                (a, sa),
                (b, sb),
                "search #1".to_string(),
                format!("search #{}", rank + 1),
                scenario.model.moe.is_some(),
                scenario.cluster.gpu.peak_flops().0,
                [scenario.training.cpu_offload_layers; 2],
                (
                    scenario.cluster.gpu.name.clone(),
                    scenario.training.framework,
                ),
            )
        }
        2 => {
            let mut loaded = Vec::new();
            // An error about a file's value names its key and the file (`tp: 3 in a.yaml`).
            let given = plan_error_words::scenario_flags_given(&args.cluster, &args.training);
            for path in &args.plan {
                let file = specs::load_plan(path)?;
                super::scenario::check_file_param_gather(
                    &file,
                    path,
                    &args.training,
                    precision_over_file(&args.training, Some(&file)),
                )?;
                if args.training.recompute_modules.is_none() {
                    super::scenario::check_file_modules_apply(
                        &file,
                        path,
                        file.plan.recompute,
                        None,
                    )?;
                }
                let scenario = resolve_scenario(
                    &args.model,
                    &args.cluster,
                    &args.training,
                    Some((&file, path)),
                )
                .map_err(|err| {
                    let err = plan_error_words::with_file_words(err, path, &given, &args.cluster);
                    anyhow::anyhow!(plan_error_words::fix_in_file_keys(
                        &format!("{err:#}"),
                        &given,
                    ))
                })?;
                loaded.push((file, scenario));
            }
            // Step times of different models, clusters or batches say nothing about the plans.
            let mut differences = scenario_differences(&loaded[0].1, &loaded[1].1);
            // Per-tensor FP8's recipe changes the casts' traffic: two FP8 plans under different
            // recipes are not compared on their plans alone.
            let fp8 = |file: &specs::PlanFile| {
                precision_over_file(&args.training, Some(file)) == crate::plan::Precision::Fp8
            };
            let (ta, tb) = (&loaded[0].1.training, &loaded[1].1.training);
            if fp8(&loaded[0].0) && fp8(&loaded[1].0) && ta.fp8_scaling != tb.fp8_scaling {
                differences.push(format!(
                    "FP8 scaling: {} against {} (--fp8-scaling)",
                    ta.fp8_scaling.as_str(),
                    tb.fp8_scaling.as_str()
                ));
            }
            // FP8 parameter gather moves low-precision weights only: two bf16 plans gather bf16
            // whatever the setting (its default follows the framework, so a DeepSpeed file and a
            // Megatron-Core one were told apart by a setting neither plan uses).
            let low_precision = |file: &specs::PlanFile| {
                precision_over_file(&args.training, Some(file)) != crate::plan::Precision::Bf16
            };
            if (low_precision(&loaded[0].0) || low_precision(&loaded[1].0))
                && ta.fp8_param_gather != tb.fp8_param_gather
            {
                let on = |b: bool| if b { "on" } else { "off" };
                differences.push(format!(
                    "FP8 parameter gather: {} against {} (the plan files' fp8_param_gather)",
                    on(ta.fp8_param_gather),
                    on(tb.fp8_param_gather)
                ));
            }
            if !differences.is_empty() {
                // Two GPUs are weighed by giving each its own best plan of the one job, which
                // `sweep --axis gpu` does (a buyer comparing an H100 plan with a GB200 one was
                // told only to evaluate both plans on one GPU, where the other's plan is not its
                // best or does not fit).
                let (ga, gb) = (&loaded[0].1.gpu_reference, &loaded[1].1.gpu_reference);
                let other_gpus = if !differences.iter().any(|d| d.starts_with("GPU: ")) {
                    String::new()
                } else {
                    format!(
                        "; to weigh the GPUs against each other, `tpsim sweep --axis gpu --values {ga},{gb}` with the model, --nodes and --gpus-per-node gives each its own best plan of the same job"
                    )
                };
                // Two frameworks differ in most defaults (overlaps, optimizer states, CP exchange,
                // recompute): their list ran past 700 characters. The framework is the cause, and
                // its flag the fix; what still differs under it is named on the next try.
                if let Some(frameworks) = differences.iter().find_map(|d| {
                    d.strip_prefix("framework: ")
                        .map(|f| f.trim_end_matches(" (--framework)"))
                }) {
                    let first = frameworks.split(" against ").next().unwrap_or(frameworks);
                    bail!(
                        "--plan {} and --plan {} were planned under different frameworks ({frameworks}){}; compare plans of one framework, or add --framework {first} to run both under it",
                        args.plan[0],
                        args.plan[1],
                        match differences.len() - 1 {
                            0 => String::new(),
                            n => format!(", and {n} defaults that follow"),
                        }
                    );
                }
                bail!(
                    "--plan {} and --plan {} describe different scenarios ({}); compare only plans of one scenario, or give the value as a flag (it overrides both files) to evaluate both plans on it{other_gpus}",
                    args.plan[0],
                    args.plan[1],
                    differences.join("; ")
                );
            }
            let mut estimates = Vec::new();
            let mut plans = Vec::new();
            for ((file, scenario), path) in loaded.iter().zip(&args.plan) {
                // A flag overrides both files, as the scenario's flags do (and as `eval --plan`
                // takes --precision over the file's).
                let request = crate::plan::PlanRequest {
                    precision: precision_over_file(&args.training, Some(file)),
                    etp: file.etp_for(
                        scenario.training.framework,
                        file.plan.tp,
                        file.plan.ep,
                        scenario.model.moe.is_some(),
                    ),
                    sequence_parallel: file.sequence_parallel_for(
                        &scenario.model,
                        &scenario.training,
                        file.plan.tp,
                        file.plan.cp,
                    ),
                    ..file.plan
                };
                super::scenario::check_fp8_scaling_applies(&args.training, request.precision)
                    .map_err(|err| anyhow::anyhow!("--plan {path}: {err:#}"))?;
                let plan = ParallelPlan::build(
                    &request,
                    &scenario.model,
                    &scenario.cluster,
                    &scenario.training,
                )
                .map_err(|err| {
                    let message = err.to_string();
                    match plan_error_words::in_file_words(&message, path, file, &given) {
                        worded if worded != message => {
                            anyhow::anyhow!(plan_error_words::cluster_size_overridden(
                                &plan_error_words::fix_in_file_keys(&worded, &given),
                                file,
                                &given,
                                super::scenario::file_gpus_per_node(&args.cluster, file, path),
                            ))
                        }
                        _ => anyhow::anyhow!(
                            "--plan {path}: {}",
                            plan_error_words::fix_in_file_keys(&message, &given)
                        ),
                    }
                })?;
                let closed = evaluate(
                    &scenario.model,
                    &scenario.cluster,
                    &scenario.training,
                    &plan,
                );
                estimates.push(with_schedule(scenario, &closed));
                plans.push(plan);
            }
            // Said once both plans are known to be valid, as `eval` says it.
            for (at, ((file, scenario), path)) in loaded.iter().zip(&args.plan).enumerate() {
                // One file given twice is said once.
                if args.plan[..at].contains(path) {
                    continue;
                }
                // A file without sequence_parallel:, zero:, etp: (or recompute:, where the plan
                // does not fit) ran eval's defaults, said as `eval --plan` says it. compare takes
                // no plan flags; --recompute-modules is the one that sets the recompute.
                let typed = crate::specs::PlanKeysGiven {
                    recompute: args.training.recompute_modules.is_some(),
                    ..crate::specs::PlanKeysGiven::NONE
                };
                if let Some(note) = super::eval_command::plan_defaults_note(
                    "compare",
                    typed,
                    Some((file, path)),
                    &plans[at],
                    &scenario.model,
                    scenario.training.framework,
                    estimates[at].0.fits(),
                ) {
                    eprintln!("{note}");
                }
                if let Some(note) = &scenario.gpu_note {
                    eprintln!("{note} (--plan {path})");
                }
                // A file without global_batch is evaluated on the default, said as `eval` says it.
                if args.training.global_batch.is_none() && file.global_batch.is_none() {
                    eprintln!(
                        "{}",
                        super::scenario::default_batch_note(
                            &scenario.training,
                            Some(path),
                            scenario.seq_len_source
                        )
                    );
                }
            }
            (
                estimates[0],
                estimates[1],
                args.plan[0].clone(),
                args.plan[1].clone(),
                // One model: `scenario_differences` refused two.
                loaded[0].1.model.moe.is_some(),
                loaded[0].1.cluster.gpu.peak_flops().0,
                // Each file's own offload (a training setting the files may differ in, as in
                // their pipeline schedules): each plan was evaluated with it.
                [
                    loaded[0].1.training.cpu_offload_layers,
                    loaded[1].1.training.cpu_offload_layers,
                ],
                // One GPU profile and framework: `scenario_differences` refused two.
                (
                    loaded[0].1.cluster.gpu.name.clone(),
                    loaded[0].1.training.framework,
                ),
            )
        }
        // The plans given, named: a second one asked for beside the one given, two kept of more.
        1 => bail!(
            "--plan given once; compare takes two saved plans: add a second beside --plan {}, e.g. --plan {} --plan OTHER.yaml (save one with tpsim plan ... --save OTHER.yaml; plans/seed-512b-32nodes.yaml and plans/best-512b-32nodes.yaml are bundled), or drop --plan to compare the two best plans of a search",
            crate::input_file::quote(&args.plan[0]),
            crate::input_file::quote(&args.plan[0])
        ),
        n => bail!(
            "--plan given {n} times; compare takes two saved plans: keep two of {}, e.g. --plan {} --plan {}, or drop --plan to compare the two best plans of a search",
            args.plan
                .iter()
                .map(|p| crate::input_file::quote(p))
                .collect::<Vec<_>>()
                .join(", "),
            crate::input_file::quote(&args.plan[0]),
            crate::input_file::quote(&args.plan[1])
        ),
    };
    // The same step time plan, eval and sweep print: the simulated schedule where it applies.
    let ((a, a_schedule), (b, b_schedule)) = (a, b);
    // Both plans are valid: what reading them had to say is said now.
    super::held_notes::print_held();
    // `--cp-exchange` where neither plan (nor, for a search, any plan it priced) splits a
    // sequence, as `eval` and `plan` say it.
    if !args.plan.is_empty() && a.plan.cp == 1 && b.plan.cp == 1 {
        cp_note = super::cp_exchange_note::unused_with_cp_1(
            &args.training,
            1,
            "both plans have cp 1",
            "compare a plan with cp 2 or more to use it",
        );
    }
    if let Some(note) = cp_note {
        eprintln!("{note}");
    }
    // Two files of one plan under different pipeline schedules (`pp_schedule`, a training
    // setting, not a plan field) are different plans: their bubbles and memory differ.
    let same_schedule = a_schedule.map(|s| s.pipeline_schedule())
        == b_schedule.map(|s| s.pipeline_schedule())
        || a.plan.pp == 1;
    if a.plan == b.plan && same_schedule && offload_layers[0] == offload_layers[1] {
        eprintln!(
            "note: plan A and plan B are the same plan ({a_from} and {b_from}), so every difference below is zero"
        );
    }
    // Neither file's plan fits: exit 1, as `eval` and `report` of one plan that does not fit
    // (and `compare` of a search where nothing fits) exit; the table still sets them side by side.
    let neither_fits = !a.fits() && !b.fits();
    let mut comparison = compare::compare(&a, &b, "plan A", "plan B");
    comparison.a_schedule = a_schedule;
    comparison.b_schedule = b_schedule;
    comparison.experts = experts;
    comparison.offload_layers = offload_layers;
    // Each plan's range on the band `eval --plan` prices it with, and whether the gap is inside it.
    let comparison = comparison.with_ranges(
        &band_of.0,
        band_of.1,
        crate::uncertainty::ModelKind::of(experts),
    );
    match args.format {
        CompareFormat::Json => println!("{}", serde_json::to_string_pretty(&comparison)?),
        CompareFormat::Table => {
            println!("plan A: {a_from}\nplan B: {b_from}\n");
            print!("{}", compare::table(&comparison));
            if let Some(note) = crate::report::mfu_note(&[a, b], peak_flops) {
                println!("{note}");
            }
        }
    }
    if neither_fits {
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}
