//! The ecosystem commands and helpers: Megatron-LM launch lines in, `--emit` configs out,
//! `tpsim sweep`, `tpsim compare` and `tpsim completions`.

use super::scenario::{framework_of_args, precision_of_args};
use super::*;
use crate::plan::Precision;
use crate::training::{Overlap, Training};

/// Megatron-LM's `--normalization` (default LayerNorm).
pub(super) fn megatron_norm(value: Option<&str>) -> Result<Norm> {
    match value {
        None | Some("LayerNorm") => Ok(Norm::Layernorm),
        Some("RMSNorm") => Ok(Norm::Rmsnorm),
        Some(other) => bail!(
            "--normalization {other} is not a Megatron-LM normalization; use LayerNorm or RMSNorm"
        ),
    }
}

/// Megatron-LM's `--position-embedding-type` (default learned_absolute).
pub(super) fn megatron_learned_positions(value: Option<&str>) -> Result<bool> {
    match value {
        None | Some("learned_absolute") => Ok(true),
        Some("rope") | Some("none") => Ok(false),
        Some(other) => bail!(
            "--position-embedding-type {other} is not one tpsim models; use learned_absolute, rope or none"
        ),
    }
}

pub(super) fn framework_of(target: EmitTarget) -> Framework {
    match target {
        EmitTarget::Megatron => Framework::Megatron,
        EmitTarget::MegatronBridge => Framework::MegatronBridge,
        EmitTarget::Nemo => Framework::Nemo,
        EmitTarget::Deepspeed => Framework::DeepSpeed,
    }
}

pub(super) fn target_name(target: EmitTarget) -> &'static str {
    match target {
        EmitTarget::Megatron => "megatron",
        EmitTarget::MegatronBridge => "megatron-bridge",
        EmitTarget::Nemo => "nemo",
        EmitTarget::Deepspeed => "deepspeed",
    }
}

/// The launch configuration text (stdout), plus what it cannot carry (stderr).
pub(super) fn emitted(framework: Framework, s: &Scenario, e: &Estimate) -> String {
    let plan = &e.plan;
    // The plan's time and memory are those of the framework tpsim evaluated (issue 8 item 4); the
    // configuration writes its overlap, precision and gradient settings explicitly.
    eprintln!(
        "note: evaluated as --framework {} runs it; the {} configuration below sets the same precision, gradient dtype and communication overlap",
        s.training.framework.as_str(),
        framework.name()
    );
    match framework {
        Framework::Megatron => format!("{}\n", emit::megatron_args(&s.model, &s.training, plan)),
        Framework::MegatronBridge => {
            eprintln!(
                "note: Megatron-Bridge overrides for scripts/training/run_recipe.py on a recipe of this model; run on {} nodes x {} GPUs (dp = {})",
                s.cluster.nodes, s.cluster.gpus_per_node, plan.dp
            );
            format!("{}\n", emit::bridge_overrides(&s.model, &s.training, plan))
        }
        Framework::Nemo => emit::nemo_yaml(&s.model, &s.cluster, &s.training, plan),
        Framework::DeepSpeed => {
            eprintln!(
                "note: DeepSpeed derives dp = {} GPUs / (tp x pp); give Megatron-DeepSpeed {}",
                s.cluster.total_gpus(),
                emit::megatron_deepspeed_args(plan)
            );
            format!("{}\n", emit::deepspeed_json(&s.training, plan))
        }
    }
}

/// `plan --emit`: the fastest feasible plan the framework can run.
pub(super) fn emit_best(
    target: EmitTarget,
    s: &Scenario,
    feasible: &[Estimate],
) -> Result<Outcome> {
    let framework = framework_of(target);
    if feasible.is_empty() {
        eprintln!(
            "nothing fits, so there is nothing to emit; run without --emit to see the closest miss"
        );
        return Ok(Outcome::NothingFits);
    }
    let Some((rank, chosen)) = feasible.iter().enumerate().find(|(_, e)| {
        framework
            .unsupported(&s.model, &s.training, &e.plan)
            .is_none()
    }) else {
        let reason = framework
            .unsupported(&s.model, &s.training, &feasible[0].plan)
            .unwrap_or_default();
        eprintln!(
            "none of the {} plans that fit can run in {}: {reason}",
            feasible.len(),
            framework.name()
        );
        return Ok(Outcome::NothingFits);
    };
    // Report the simulated schedule's step time, as `plan` and `eval` do for shown plans.
    let simulated = |e: &Estimate| {
        simulate_plan(&s.model, &s.cluster, &s.training, &e.plan)
            .map(|sim| sim.estimate)
            .unwrap_or(*e)
    };
    let chosen = &simulated(chosen);
    if rank > 0 {
        eprintln!(
            "note: the fastest plan ({:.2} s per step) cannot run in {} ({}); emitting plan #{} ({:.2} s per step), the fastest that can",
            simulated(&feasible[0]).time.step_s.0,
            framework.name(),
            framework
                .unsupported(&s.model, &s.training, &feasible[0].plan)
                .unwrap_or_default(),
            rank + 1,
            chosen.time.step_s.0
        );
    }
    let p = &chosen.plan;
    eprintln!(
        "{} configuration for tp {} x cp {} x pp {} x dp {} (vpp {}, micro-batch {}, recompute {}{}, ZeRO-{}, {}): {:.2} s per step, {:.0} tokens/s, {:.1} of {:.1} GiB",
        framework.name(),
        p.tp,
        p.cp,
        p.pp,
        p.dp,
        p.vpp,
        p.micro_batch,
        p.recompute.as_str(),
        if p.recompute_num_layers > 0 {
            format!(" of {} layers per chunk", p.recompute_num_layers)
        } else {
            String::new()
        },
        p.zero,
        p.precision.as_str(),
        chosen.time.step_s.0,
        chosen.tokens_per_s,
        chosen.memory.total_bytes.0 / GIB,
        chosen.memory.capacity_bytes.0 / GIB
    );
    print!("{}", emitted(framework, s, chosen));
    Ok(Outcome::Found)
}

pub(super) fn sweep_axis(axis: SweepAxis) -> sweep::Axis {
    match axis {
        SweepAxis::Nodes => sweep::Axis::Nodes,
        SweepAxis::Params => sweep::Axis::Params,
        SweepAxis::Gpu => sweep::Axis::Gpu,
        SweepAxis::NetworkBandwidth => sweep::Axis::NetworkBandwidth,
        SweepAxis::SeqLen => sweep::Axis::SeqLen,
        SweepAxis::GlobalBatch => sweep::Axis::GlobalBatch,
    }
}

pub(super) fn sweep_u32(axis: sweep::Axis, value: &str, example: &str) -> Result<u32> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!(
            "--values {value:?} is not a positive whole number, which --axis {} needs; e.g. --values {example}",
            axis.name()
        ),
    }
}

pub(super) fn sweep_command(args: SweepArgs) -> Result<Outcome> {
    let axis = sweep_axis(args.axis);
    if let Some(price) = args.price_per_gpu_hour {
        if !(price.is_finite() && price > 0.0) {
            bail!(
                "--price-per-gpu-hour {price} must be a positive amount per GPU-hour, e.g. --price-per-gpu-hour 2.5"
            );
        }
        if args.training.tokens.is_none() {
            bail!(
                "--price-per-gpu-hour needs --tokens: the cost is the time to train that many tokens (e.g. --tokens 300B)"
            );
        }
    }
    if axis == sweep::Axis::Params
        && (args.model.model.is_some()
            || args.model.layers.is_some()
            || args.model.hf_config.is_some()
            || args.model.params.is_some())
    {
        bail!(
            "--axis params derives a GPT-style model at each point; drop --params/--model/--layers/--hf-config"
        );
    }
    // A fixed flag for the quantity the axis varies would be silently replaced at every point.
    let fixed = match axis {
        sweep::Axis::Nodes => args.cluster.nodes.map(|n| format!("--nodes {n}")),
        sweep::Axis::SeqLen => args.training.seq_len.map(|n| format!("--seq-len {n}")),
        sweep::Axis::GlobalBatch => args
            .training
            .global_batch
            .map(|n| format!("--global-batch {n}")),
        sweep::Axis::Gpu => args
            .cluster
            .gpu
            .as_ref()
            .map(|g| format!("--gpu {g}"))
            .or_else(|| {
                args.cluster
                    .calibration
                    .as_ref()
                    .map(|c| format!("--calibration {c}"))
            }),
        sweep::Axis::Params | sweep::Axis::NetworkBandwidth => None,
    };
    if let Some(flag) = fixed {
        bail!(
            "{flag} conflicts with --axis {}, which sets that value at each point of --values {}; drop {flag}",
            axis.name(),
            args.values.join(",")
        );
    }
    if let Some(path) = &args.chart {
        output_file::check_file("--chart", path, "sweep.svg")?;
        let parent = std::path::Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent
            && !dir.is_dir()
        {
            bail!(
                "--chart {path}: the folder {} does not exist; create it or write the chart elsewhere",
                dir.display()
            );
        }
    }
    let mut points = Vec::with_capacity(args.values.len());
    for raw in &args.values {
        let value = raw.trim();
        if value.is_empty() {
            bail!(
                "--values {:?} has an empty item; give comma-separated points, e.g. --values 16,32,64",
                args.values.join(",")
            );
        }
        let (mut model, mut cluster, mut training) = (
            args.model.clone(),
            args.cluster.clone(),
            args.training.clone(),
        );
        match axis {
            sweep::Axis::Nodes => cluster.nodes = Some(sweep_u32(axis, value, "16,32,64")?),
            sweep::Axis::Params => model.params = Some(value.to_string()),
            sweep::Axis::Gpu => cluster.gpu = Some(value.to_string()),
            sweep::Axis::SeqLen => training.seq_len = Some(sweep_u32(axis, value, "2048,4096")?),
            sweep::Axis::GlobalBatch => {
                training.global_batch = Some(sweep_u32(axis, value, "512,1024,2048")?)
            }
            sweep::Axis::NetworkBandwidth => {}
        }
        let mut scenario = resolve_scenario(&model, &cluster, &training, None)
            .with_context(|| format!("--axis {} at {value}", axis.name()))?;
        if axis == sweep::Axis::NetworkBandwidth {
            match value.parse::<f64>() {
                Ok(gb) if crate::cluster::NETWORK_GB_PER_S.contains(gb) => {
                    scenario.cluster.gpu.network_gb_per_s = gb
                }
                Ok(gb) => bail!(
                    "--values {} for --axis network-bandwidth: {}",
                    input_file::quote(value),
                    crate::cluster::NETWORK_GB_PER_S
                        .check(gb)
                        .err()
                        .unwrap_or_default()
                ),
                Err(_) => bail!(
                    "--values {value:?} is not a positive bandwidth in GB/s per GPU, which --axis network-bandwidth needs; e.g. --values 12.5,25,50 (a 400 Gb/s NIC per GPU is 50)"
                ),
            }
        }
        points.push(sweep::Point {
            value: value.to_string(),
            model: scenario.model,
            cluster: scenario.cluster,
            training: scenario.training,
        });
    }
    let options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
        ..SearchOptions::default()
    };
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(points.len() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("sweep {bar:30} {pos}/{len} points {elapsed}")
    {
        bar.set_style(style);
    }
    let started = std::time::Instant::now();
    let tick = || bar.inc(1);
    let result = match args.threads {
        Some(0) => bail!("--threads 0: give at least one thread, or omit it to use every core"),
        Some(n) if n > MAX_THREADS => bail!(
            "--threads {n} is more than {MAX_THREADS}; the search is CPU-bound, so more threads than cores only add overhead (omit it to use every core)"
        ),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .context("starting the worker threads")?
            .install(|| sweep::run(axis, &points, options, args.price_per_gpu_hour, &tick)),
        None => sweep::run(axis, &points, options, args.price_per_gpu_hour, &tick),
    };
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(path) = &args.chart {
        // Drawn into a temporary file, then written atomically (`output_file`).
        let scratch = std::env::temp_dir().join(format!(
            "tpsim-chart-{}-{}.svg",
            std::process::id(),
            elapsed.to_bits()
        ));
        // Reserved with O_EXCL, so the chart never overwrites a file tpsim did not create.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&scratch)
            .with_context(|| {
                format!(
                    "--chart: cannot create a scratch file in {}",
                    std::env::temp_dir().display()
                )
            })?;
        let drawn = chart_sweep::draw(&result, &scratch.to_string_lossy())
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(std::fs::read(&scratch)?));
        let _ = std::fs::remove_file(&scratch);
        output_file::write_file(
            "--chart",
            path,
            &drawn.with_context(|| format!("--chart {}", input_file::quote(path)))?,
        )?;
        eprintln!("wrote the sweep chart to {path}");
    }
    match args.format {
        SweepFormat::Json => println!("{}", serde_json::to_string_pretty(&result)?),
        SweepFormat::Csv => print!("{}", sweep::to_csv(&result)),
        SweepFormat::Table => {
            let candidates: u64 = result.rows.iter().map(|r| r.candidates).sum();
            println!(
                "sweep over {}: best plan at each of {} points ({} plans evaluated in {:.2} s)",
                axis.title(),
                result.rows.len(),
                candidates,
                elapsed
            );
            print!("{}", sweep::table(&result));
        }
    }
    if result.rows.iter().all(|r| r.tp.is_none()) {
        eprintln!("nothing fits at any point");
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}

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
            "{} params, {} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {}",
            format_count(m.params()),
            m.layers,
            m.hidden,
            m.heads,
            m.kv_heads,
            m.ffn_hidden,
            m.vocab
        )
    };
    let (mut ma, mut mb) = (a.model.clone(), b.model.clone());
    ma.name.clear();
    mb.name.clear();
    // The sequence length is reported on its own below.
    mb.seq_len = ma.seq_len;
    if ma != mb {
        let (sa, sb) = (shape(&ma), shape(&mb));
        out.push(if sa == sb {
            format!("model: {sa}, but a different block style (norm, biases, gating, positions, embeddings or dropout)")
        } else {
            format!("model: {sa} against {sb}")
        });
    }
    if a.cluster.gpu != b.cluster.gpu {
        out.push(format!(
            "GPU: {} against {} (--gpu)",
            a.gpu_reference, b.gpu_reference
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
    let (a, b, a_from, b_from) = match args.plan.len() {
        0 => {
            let scenario = resolve_scenario(&args.model, &args.cluster, &args.training, None)?;
            let result = search(
                &scenario.model,
                &scenario.cluster,
                &scenario.training,
                SearchOptions {
                    allow_uneven_pp: args.allow_uneven_pp,
                    allow_cross_node_tp: args.allow_cross_node_tp,
                    ..SearchOptions::default()
                },
            );
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
            let (a, sa) = with_schedule(&scenario, best);
            let (b, sb) = with_schedule(&scenario, runner_up);
            (
                (a, sa),
                (b, sb),
                "search #1".to_string(),
                format!("search #{}", rank + 1),
            )
        }
        2 => {
            let mut loaded = Vec::new();
            for path in &args.plan {
                let file = specs::load_plan(path)?;
                let scenario = resolve_scenario(
                    &args.model,
                    &args.cluster,
                    &args.training,
                    Some((&file, path)),
                )?;
                loaded.push((file, scenario));
            }
            // Step times of different models, clusters or batches say nothing about the plans.
            let differences = scenario_differences(&loaded[0].1, &loaded[1].1);
            if !differences.is_empty() {
                bail!(
                    "--plan {} and --plan {} describe different scenarios ({}); compare only plans of one scenario, or give the value as a flag (it overrides both files) to evaluate both plans on it",
                    args.plan[0],
                    args.plan[1],
                    differences.join("; ")
                );
            }
            let mut estimates = Vec::new();
            for ((file, scenario), path) in loaded.iter().zip(&args.plan) {
                let plan = ParallelPlan::build(
                    &file.plan,
                    &scenario.model,
                    &scenario.cluster,
                    &scenario.training,
                )
                .with_context(|| format!("--plan {path}"))?;
                let closed = evaluate(
                    &scenario.model,
                    &scenario.cluster,
                    &scenario.training,
                    &plan,
                );
                estimates.push(with_schedule(scenario, &closed));
            }
            (
                estimates[0],
                estimates[1],
                args.plan[0].clone(),
                args.plan[1].clone(),
            )
        }
        n => bail!(
            "--plan given {n} time(s); compare takes two (--plan a.yaml --plan b.yaml), or none for the two best plans of a search"
        ),
    };
    // The same step time plan, eval and sweep print: the simulated schedule where it applies.
    let ((a, a_schedule), (b, b_schedule)) = (a, b);
    let mut comparison = compare::compare(&a, &b, "plan A", "plan B");
    comparison.a_schedule = a_schedule;
    comparison.b_schedule = b_schedule;
    match args.format {
        CompareFormat::Json => println!("{}", serde_json::to_string_pretty(&comparison)?),
        CompareFormat::Table => {
            println!("plan A: {a_from}\nplan B: {b_from}\n");
            print!("{}", compare::table(&comparison));
        }
    }
    Ok(Outcome::Found)
}

pub(super) fn completions(args: CompletionsArgs) -> Result<Outcome> {
    use clap::CommandFactory;
    use std::io::Write;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "tpsim", &mut script);
    // `tpsim completions bash | head` closes the pipe early: that is not an error.
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow!("writing the completion script: {e}"))
        }
        _ => Ok(Outcome::Found),
    }
}

/// `--megatron-args "LINE"` or `--megatron-args @launch.sh`: a whole Megatron-LM launch line,
/// including arguments tpsim does not model (listed on stderr).
pub(super) fn read_megatron_launch(text: &str) -> Result<emit::MegatronLaunch> {
    let line = match text.strip_prefix('@') {
        Some(path) => input_file::read_text("--megatron-args @", path)?,
        None => text.to_string(),
    };
    let launch = emit::read_megatron_args(&line).context("--megatron-args")?;
    let flags: Vec<&str> = launch
        .ignored
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("--"))
        .collect();
    if !flags.is_empty() {
        eprintln!(
            "note: --megatron-args: {} argument(s) do not change memory or time in tpsim's model and were skipped: {}",
            flags.len(),
            flags.join(" ")
        );
    }
    for note in &launch.notes {
        eprintln!("note: --megatron-args: {note}");
    }
    Ok(launch)
}

/// `--attention-backend` (Megatron-Core) on tpsim's own command line, as `--attention`.
pub(super) fn attention_arg_of_backend(value: &str) -> Result<AttentionArg> {
    match emit::attention_backend(value) {
        Some(AttentionKernel::Flash) => Ok(AttentionArg::Flash),
        Some(AttentionKernel::Unfused) => Ok(AttentionArg::Unfused),
        None => bail!(
            "--attention-backend {value} is not a Megatron-Core attention backend; use flash, fused, auto, unfused or local"
        ),
    }
}

/// A training flag given next to `--megatron-args` must not contradict the launch line: the flag
/// would silently win over what the line says.
pub(super) fn check_megatron_training(
    launch: &emit::MegatronLaunch,
    training: &TrainingArgs,
) -> Result<()> {
    if let (Some(kernel), Some(flag)) = (launch.attention, training.attention) {
        let given = match flag {
            AttentionArg::Flash => AttentionKernel::Flash,
            AttentionArg::Unfused => AttentionKernel::Unfused,
        };
        if given != kernel {
            bail!(
                "--attention {} contradicts the --megatron-args launch line, whose attention backend is {}; drop --attention or change the line",
                if given == AttentionKernel::Flash {
                    "flash"
                } else {
                    "unfused"
                },
                if kernel == AttentionKernel::Flash {
                    "flash"
                } else {
                    "unfused"
                }
            );
        }
    }
    let flag = match training.grad_dtype {
        Some(GradDtypeArg::Bf16) => Some(GradDtype::Bf16),
        Some(GradDtypeArg::Fp32) => Some(GradDtype::Fp32),
        None => None,
    };
    if let Some(flag) = flag
        && flag != launch.grad_dtype
    {
        bail!(
            "--grad-dtype {} contradicts the --megatron-args launch line, whose gradients are {} (Megatron-LM with --bf16 reduces in fp32 unless --grad-reduce-in-bf16 is given); drop --grad-dtype or change the line",
            grad_name(flag),
            grad_name(launch.grad_dtype)
        );
    }
    check_megatron_precision_and_overlap(
        launch.precision,
        launch.overlap,
        training,
        "the --megatron-args launch line",
    )
}

/// The precision and overlap a launch line says, against tpsim's own flags and the framework
/// tpsim models: a contradiction is refused, never silently resolved.
fn check_megatron_precision_and_overlap(
    precision: emit::MegatronPrecision,
    overlap: Overlap,
    training: &TrainingArgs,
    source: &str,
) -> Result<()> {
    let framework = framework_of_args(training);
    if training.precision.is_some() {
        let given = precision_of_args(training);
        if given != precision.precision {
            bail!(
                "--precision {} contradicts {source}, whose precision is {} (--fp8-format/--fp8-recipe, --fp4-format); drop --precision or change the line",
                given.as_str(),
                precision.precision.as_str()
            );
        }
    }
    if precision.precision != Precision::Bf16
        && precision.param_gather != framework.fp8_param_gather()
    {
        let gather_flag = if precision.precision == Precision::Nvfp4 {
            "--fp4-param-gather"
        } else {
            "--fp8-param-gather"
        };
        if precision.param_gather {
            bail!(
                "{gather_flag} in {source} keeps the {} weights as the parameters, which tpsim models for --framework megatron-core only (it is --framework {}); pass --framework megatron-core or drop {gather_flag}",
                precision.precision.as_str(),
                framework.as_str()
            );
        }
        bail!(
            "{source} trains in {} without {gather_flag}, but tpsim models --framework {} with the low-precision parameter all-gather (NVIDIA's recipes set it); add {gather_flag} to the line, or pass another --framework",
            precision.precision.as_str(),
            framework.as_str()
        );
    }
    for (flag, given, line) in [
        (
            "--tp-comm-overlap",
            training.tp_comm_overlap,
            overlap.tp_comm,
        ),
        (
            "--overlap-grad-reduce",
            training.overlap_grad_reduce,
            overlap.grad_reduce,
        ),
        (
            "--overlap-param-gather",
            training.overlap_param_gather,
            overlap.param_gather,
        ),
        ("--overlap-p2p-comm", training.overlap_p2p_comm, overlap.p2p),
    ] {
        if let Some(given) = given
            && given != line
        {
            bail!(
                "{flag} {given} contradicts {source}, which {} it (Megatron-LM overlaps only what its arguments turn on, and p2p unless --no-overlap-p2p-communication); drop {flag} or change the line",
                if line { "turns on" } else { "leaves off" }
            );
        }
    }
    Ok(())
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn grad_name(dtype: GradDtype) -> &'static str {
    match dtype {
        GradDtype::Bf16 => "bf16",
        GradDtype::Fp32 => "fp32",
    }
}

/// The scenario a Megatron launch line describes, as a plan file (the plan itself is rebuilt once
/// the cluster, hence dp, is known). torchrun's `--nnodes`/`--nproc_per_node` give the cluster
/// unless `--nodes`/`--gpus-per-node` are given.
pub(super) fn megatron_plan_file(launch: &emit::MegatronLaunch) -> Result<PlanFile> {
    let model = launch.model(DEFAULT_VOCAB).context("--megatron-args")?;
    Ok(PlanFile {
        model: Some(ModelRef::Inline(model_file_of(&model))),
        params: None,
        gpu: None,
        nodes: launch.nodes,
        gpus_per_node: launch.gpus_per_node,
        seq_len: Some(launch.seq_len),
        global_batch: launch.global_batch,
        grad_dtype: Some(launch.grad_dtype),
        attention: launch.attention,
        plan: PlanRequest {
            tp: launch.tp,
            pp: launch.pp,
            dp: 1,
            vpp: 1,
            micro_batch: launch.micro_batch,
            sequence_parallel: launch.sequence_parallel,
            recompute: launch.recompute,
            zero: launch.zero,
            allow_uneven_pp: launch.split.any(),
            allow_cross_node_tp: false,
            cp: launch.cp,
            ep: launch.experts.ep,
            etp: launch.experts.etp,
            precision: launch.precision.precision,
            ..PlanRequest::default()
        },
    })
}

/// What the launch line decides once the cluster is known: Megatron's default global batch
/// (micro-batch x dp) when the line has none, and notes where a flag overrides the torchrun line.
pub(super) fn apply_megatron_launch(
    launch: &emit::MegatronLaunch,
    cluster_args: &ClusterArgs,
    training_args: &TrainingArgs,
    scenario: &mut Scenario,
) {
    for (flag, given, script, what) in [
        ("--nodes", cluster_args.nodes, launch.nodes, "--nnodes"),
        (
            "--gpus-per-node",
            cluster_args.gpus_per_node,
            launch.gpus_per_node,
            "--nproc_per_node",
        ),
    ] {
        if let (Some(given), Some(script)) = (given, script)
            && given != script
        {
            eprintln!(
                "note: --megatron-args: {flag} {given} overrides the launch line's torchrun {what} {script}"
            );
        }
    }
    // Megatron-LM overlaps what the line says (its defaults: p2p only), whatever the framework's
    // defaults are; check_megatron_training refused tpsim flags that say otherwise.
    let defaults = scenario.training.framework.default_overlap();
    if launch.overlap != scenario.training.overlap && scenario.training.overlap == defaults {
        eprintln!(
            "note: --megatron-args: the line's overlap switches are used (tp comm {}, grad reduce {}, param gather {}, p2p {}), not --framework {}'s defaults; Megatron-LM overlaps only what --tp-comm-overlap, --overlap-grad-reduce and --overlap-param-gather turn on",
            on_off(launch.overlap.tp_comm),
            on_off(launch.overlap.grad_reduce),
            on_off(launch.overlap.param_gather),
            on_off(launch.overlap.p2p),
            scenario.training.framework.as_str()
        );
    }
    scenario.training.overlap = launch.overlap;
    if launch.global_batch.is_none()
        && training_args.global_batch.is_none()
        && let Some(batch) = launch.global_batch_on(scenario.cluster.total_gpus())
        && batch > 0
    {
        eprintln!(
            "note: --megatron-args: no --global-batch-size, so Megatron-LM's default applies: micro-batch {} x dp {} = {batch} sequences per step",
            launch.micro_batch,
            batch / launch.micro_batch
        );
        scenario.training.global_batch = batch;
    }
}

/// The plan a Megatron launch line runs on the scenario's cluster, checked against what
/// Megatron-LM would do with the same line.
pub(super) fn megatron_request(
    launch: &emit::MegatronLaunch,
    scenario: &Scenario,
) -> Result<PlanRequest> {
    let request = launch
        .request(
            scenario.cluster.total_gpus(),
            scenario.training.global_batch,
        )
        .map_err(|message| anyhow!("--megatron-args: {message}"))?;
    // The split and recompute checks need the built plan; a plan that does not build is reported
    // by the caller with tpsim's own message.
    if let Ok(plan) = ParallelPlan::build(
        &request,
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
    ) {
        launch
            .check_plan(&plan)
            .map_err(|message| anyhow!("--megatron-args: {message}"))?;
        return Ok(PlanRequest {
            recompute_num_layers: emit::block_recompute_layers(request.recompute_num_layers, &plan),
            ..request
        });
    }
    Ok(request)
}

/// Megatron-LM's MoE and MLA switches pasted on `eval` (what `--emit megatron` writes): they must
/// describe the model and plan tpsim evaluates, never be dropped silently.
fn check_pasted_experts(args: &EvalArgs, model: &Model, plan: &ParallelPlan) -> Result<()> {
    if args.multi_latent_attention && model.mla.is_none() {
        bail!(
            "--multi-latent-attention without --kv-lora-rank: tpsim needs the latent width; add --kv-lora-rank N (DeepSeek-V3: 512)"
        );
    }
    let dispatcher = args.moe_token_dispatcher_type.as_deref();
    if model.moe.is_none() && (args.moe_grouped_gemm || dispatcher.is_some()) {
        bail!(
            "--moe-grouped-gemm / --moe-token-dispatcher-type on a dense model: add --num-experts N, or drop them"
        );
    }
    match dispatcher {
        None | Some("alltoall") => Ok(()),
        Some(v) if !["allgather", "flex"].contains(&v) => bail!(
            "--moe-token-dispatcher-type {v} is not a Megatron-LM dispatcher; use alltoall (or allgather, flex)"
        ),
        Some(_) if plan.ep == 1 => Ok(()),
        Some(v) => bail!(
            "--moe-token-dispatcher-type {v}: tpsim models the all-to-all token dispatch over the expert-parallel group; use --moe-token-dispatcher-type alltoall"
        ),
    }
}

/// Megatron-LM's pipeline-split arguments pasted on `eval`.
pub(super) fn pasted_split(args: &EvalArgs) -> emit::SplitArgs {
    emit::SplitArgs {
        embedding_counted: args.account_for_embedding_in_pipeline_split,
        loss_counted: args.account_for_loss_in_pipeline_split,
        first: args.decoder_first_pipeline_num_layers,
        last: args.decoder_last_pipeline_num_layers,
        layout: None,
    }
}

/// The ZeRO stage of Megatron-LM's data-parallel arguments pasted on `eval`.
pub(super) fn pasted_zero(args: &EvalArgs, pp: u32) -> Result<u8> {
    Ok(emit::megatron_zero(
        args.use_distributed_optimizer,
        args.use_megatron_fsdp,
        args.use_torch_fsdp2,
        args.data_parallel_sharding_strategy.as_deref(),
        pp,
    )?)
}

/// Megatron-LM's precision arguments pasted on `eval` (`--fp8-format`, `--fp8-recipe`,
/// `--fp8-param-gather`, `--fp4-*`), read like the `--megatron-args` reader reads them and checked
/// against the framework tpsim models; `None` when none was given.
pub(super) fn pasted_precision(
    args: &EvalArgs,
    zero: u8,
    training: &Training,
) -> Result<Option<Precision>> {
    if args.fp8_format.is_none()
        && args.fp8_recipe.is_none()
        && args.fp4_format.is_none()
        && args.fp4_recipe.is_none()
        && !args.fp8_param_gather
        && !args.fp4_param_gather
    {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let precision = emit::megatron_precision(
        emit::PrecisionArgs {
            fp8_format: args.fp8_format.as_deref(),
            fp8_recipe: args.fp8_recipe.as_deref(),
            fp4_format: args.fp4_format.as_deref(),
            fp4_recipe: args.fp4_recipe.as_deref(),
            fp8_param_gather: args.fp8_param_gather,
            fp4_param_gather: args.fp4_param_gather,
        },
        zero,
        &mut notes,
    )?;
    for note in notes {
        eprintln!("note: {note}");
    }
    check_megatron_precision_and_overlap(
        precision,
        training.overlap,
        &args.training,
        "the pasted Megatron-LM arguments",
    )?;
    Ok(Some(precision.precision))
}

/// Megatron-LM's split and recompute arguments pasted on `eval`, checked on the built plan the
/// way the `--megatron-args` reader checks them: what tpsim cannot model is refused, not ignored.
pub(super) fn check_pasted_megatron(
    args: &EvalArgs,
    model: &Model,
    plan: &ParallelPlan,
) -> Result<()> {
    check_pasted_experts(args, model, plan)?;
    let split = pasted_split(args);
    if split.any() {
        emit::check_split(&split, model.layers, plan).map_err(|message| anyhow!(message))?;
    }
    let method = args.recompute_method.as_deref();
    let Some(method) = method else {
        if args.recompute_num_layers.is_some() && plan.recompute == Recompute::Full {
            bail!(
                "--recompute-num-layers needs --recompute-method uniform or block (Megatron-Core refuses it alone)"
            );
        }
        return Ok(());
    };
    let layers = args.recompute_num_layers.unwrap_or(1);
    let full = match method {
        "uniform" => emit::FullRecompute::Uniform(layers),
        "block" => emit::FullRecompute::Block(layers),
        other => bail!(
            "--recompute-method {other} is not a Megatron-LM recompute method; use uniform or block"
        ),
    };
    match plan.recompute {
        Recompute::Full => {}
        // arguments.py: "recompute method is not yet supported for selective recomputing
        // granularity".
        Recompute::Selective => bail!(
            "--recompute-method {method} with selective recompute: Megatron-LM refuses a recompute method for selective granularity; drop --recompute-method"
        ),
        // Megatron-Core reads the method only under full granularity, as the reader does.
        Recompute::None => {
            eprintln!(
                "note: --recompute-method {method} is ignored without --recompute-granularity full (Megatron-Core recomputes nothing then)"
            );
            return Ok(());
        }
    }
    emit::check_full_recompute(full, plan).map_err(|message| anyhow!(message))
}
