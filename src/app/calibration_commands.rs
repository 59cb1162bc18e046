//! `tpsim calibrate` and `tpsim validate`: flags → backend and options → `calibrate::run` /
//! `calibrate::validate` → summary, profile file and exit code.

use anyhow::{Context, Result, bail};

use super::{Outcome, check_seq_len, resolve_model, resolve_scenario};
use crate::calibrate::cpu::{MAX_CPU_BYTES, MAX_CPU_GEMM_FLOPS};
use crate::calibrate::run::{
    CalibrateOptions, calibrate as run_calibration, check_runnable, message_sizes,
};
use crate::calibrate::summary::{calibration_summary, validation_summary};
use crate::calibrate::validate::{Case, ValidationRow, layer_spec, validate_case};
use crate::calibrate::{
    BackendChoice, BackendKind, KernelTimer, MAX_REPS, MAX_WARMUP, Reps, format_bytes,
    open_backend, parse_bytes,
};
use crate::cli::{BackendArg, CalibrateArgs, ClusterArgs, Format, MeasureArgs, ValidateArgs};
use crate::cluster::GpuProfile;
use crate::cluster::calibration::Calibration;
use crate::input_file::quote;
use crate::model::Model;
use crate::output_file;
use crate::planner::{SearchOptions, search};
use crate::specs;

/// Loads a profile written by `tpsim calibrate`; a datasheet profile is refused so that
/// `--calibration` always means measured numbers.
pub(super) fn load_calibrated(path: &str) -> Result<GpuProfile> {
    // A bundled name is a datasheet profile, never a calibrated one: said in the words below;
    // anything else is a file (an unknown name is not offered the bundled GPUs, none of which is
    // calibrated).
    let is_file_here = std::fs::metadata(path).is_ok_and(|m| !m.is_dir());
    let profile = if !is_file_here && specs::BUNDLED_GPUS.iter().any(|(name, _)| *name == path) {
        specs::load_gpu_as("--calibration", path)?
    } else {
        specs::load_gpu_file_as("--calibration", path)?
    };
    if profile.calibration.is_none() {
        bail!(
            "--calibration {path}: the profile has no `calibration:` section, so it holds datasheet numbers; pass it with --gpu {path}, or write one with `tpsim calibrate`"
        );
    }
    // tpsim calibrate no longer keeps the datasheet's low-precision peaks (it measures bf16
    // only); a CPU twin written before that carries an H100's FP8 peak beside its measured CPU
    // one, which would time FP8 GEMMs thousands of times faster than anything it measured.
    if let Some(calibration) = &profile.calibration
        && calibration.backend == "cpu"
        && let Some((key, value)) = [
            ("peak_fp8_tflops", profile.peak_fp8_tflops),
            ("peak_fp4_tflops", profile.peak_fp4_tflops),
        ]
        .into_iter()
        .find_map(|(key, value)| value.map(|v| (key, v)))
    {
        bail!(
            "--calibration {}: this CPU-twin profile gives {key} {value}, a GPU datasheet peak that was never measured (its measured peak_bf16_tflops is {}); delete its peak_fp8_tflops, peak_fp4_tflops and fp8_gemm_efficiency lines, or write it again with tpsim calibrate",
            crate::input_file::quote(path),
            crate::cluster::show_number(profile.peak_bf16_tflops)
        );
    }
    Ok(profile)
}

fn reps(measure: &MeasureArgs) -> Result<Reps> {
    if measure.reps == 0 {
        bail!("--reps 0: at least one timed repetition is needed for a median; e.g. --reps 7");
    }
    if measure.reps > MAX_REPS {
        bail!(
            "--reps {} is more than {MAX_REPS}, the most timed repetitions of one measurement (a median of {MAX_REPS} is exact to the timer's resolution); e.g. --reps 7",
            measure.reps
        );
    }
    if measure.warmup > MAX_WARMUP {
        bail!(
            "--warmup {} is more than {MAX_WARMUP}, the most untimed runs before one measurement; e.g. --warmup 2",
            measure.warmup
        );
    }
    Ok(Reps {
        warmup: measure.warmup,
        timed: measure.reps,
    })
}

fn default_ranks() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8)
}

/// Opens the backend; the second value says which one it is and why (printed once every input
/// has been checked, so that bad input gets one line on stderr).
fn backend(measure: &MeasureArgs, min_ranks: usize) -> Result<(Box<dyn KernelTimer>, String)> {
    let choice = match measure.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Cpu => BackendChoice::Cpu,
        BackendArg::Cuda => BackendChoice::Cuda,
    };
    let ranks = measure
        .ranks
        .unwrap_or_else(|| default_ranks().max(min_ranks));
    Ok(open_backend(choice, ranks)?)
}

/// Refuses an `--output` the profile could not be written to, before anything is measured: a
/// directory, a missing folder, a read-only place, or one of the command's inputs (`--gpu g.yaml
/// --output g.yaml` would replace the base profile). Leaves no file behind.
fn check_output(args: &CalibrateArgs) -> Result<()> {
    let path = &args.output;
    let mut inputs: Vec<(&str, &str)> = Vec::new();
    inputs.extend(args.gpu.as_deref().map(|g| ("--gpu", g)));
    inputs.extend(args.model.model.as_deref().map(|m| ("--model", m)));
    inputs.extend(args.model.hf_config.as_deref().map(|m| ("--hf-config", m)));
    // An input named as the output is said as such, before the file there is checked.
    output_file::refuse_input_overlap("--output", path, &inputs)?;
    output_file::check_file(
        "--output",
        path,
        "calibrated.yaml",
        output_file::OutputKind::Profile,
    )?;
    Ok(())
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The first value a list gives more than once.
fn listed_twice<T: PartialEq + Copy>(list: &[T]) -> Option<T> {
    list.iter()
        .enumerate()
        .find(|(i, v)| list[..*i].contains(v))
        .map(|(_, v)| *v)
}

fn default_tp(model: &Model) -> Vec<u32> {
    [1, 2, 4, 8]
        .into_iter()
        .filter(|t| {
            model.heads.is_multiple_of(*t)
                && model.kv_heads.is_multiple_of(*t)
                && model.ffn_hidden.is_multiple_of(*t)
        })
        .collect()
}

struct Sizes {
    sweep: Vec<usize>,
    min_message: u64,
    max_message: u64,
    copy_bytes: u64,
}

/// `device_memory_gib`: the memory of one GPU on the CUDA backend, which bounds its buffers.
fn sizes(kind: BackendKind, device_memory_gib: Option<f64>, args: &CalibrateArgs) -> Result<Sizes> {
    let gpu = kind == BackendKind::Cuda;
    let sweep = if args.sweep.is_empty() {
        if gpu {
            vec![256, 1024, 4096, 8192, 16384]
        } else {
            vec![32, 64, 128, 256]
        }
    } else {
        args.sweep.clone()
    };
    let sweep_text = sweep
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    if sweep.contains(&0) {
        bail!("--sweep {sweep_text}: edge lengths must be at least 1; e.g. --sweep 64,128,256");
    }
    let mut distinct = sweep.clone();
    distinct.sort_unstable();
    distinct.dedup();
    // An edge listed twice would be timed twice and weigh double in the curve fit.
    if distinct.len() >= 2
        && let Some(twice) = listed_twice(&sweep)
    {
        bail!(
            "--sweep {sweep_text} lists {twice} twice; give each edge length once, e.g. --sweep 64,128,256"
        );
    }
    if distinct.len() < 2 {
        bail!(
            "--sweep {sweep_text}: the GEMM curve fit needs at least two different edge lengths; e.g. --sweep 64,128,256"
        );
    }
    if !gpu {
        let largest = distinct[distinct.len() - 1];
        let flops = 2.0 * (largest as f64).powi(3);
        if flops > MAX_CPU_GEMM_FLOPS {
            bail!(
                "--sweep {sweep_text}: edge {largest} makes a {:.0} GFLOP GEMM, over the CPU backend's limit of {:.0} GFLOP per GEMM (edges up to {}); e.g. --sweep 32,64,128,256",
                flops / 1e9,
                MAX_CPU_GEMM_FLOPS / 1e9,
                (MAX_CPU_GEMM_FLOPS / 2.0).cbrt().floor()
            );
        }
    }
    let default = |cuda: u64, cpu: u64| {
        let bytes = if gpu { cuda } else { cpu };
        (
            bytes,
            format!("{} (the {} default)", format_bytes(bytes), kind.as_str()),
        )
    };
    let min_message = byte_size("--min-message", &args.min_message)?;
    let (max_message, max_text) = match &args.max_message {
        Some(text) => (byte_size("--max-message", text)?, quote(text)),
        None => default(1 << 30, 4 << 20),
    };
    let (copy_bytes, copy_text) = match &args.copy_bytes {
        Some(text) => (byte_size("--copy-bytes", text)?, quote(text)),
        None => default(1 << 30, 64 << 20),
    };
    if !gpu {
        for (flag, text, bytes, example) in [
            (
                "--min-message",
                &quote(&args.min_message),
                min_message,
                "8KiB",
            ),
            ("--max-message", &max_text, max_message, "4MiB"),
            ("--copy-bytes", &copy_text, copy_bytes, "64MiB"),
        ] {
            if bytes > MAX_CPU_BYTES {
                bail!(
                    "{flag} {text} is over the CPU backend's limit of {}; e.g. {flag} {example}",
                    format_bytes(MAX_CPU_BYTES)
                );
            }
        }
    }
    // On a GPU the copy and the largest message are bounded by its memory, checked here so that
    // no GEMM is timed before a size the GPU cannot hold is refused.
    if gpu && let Some(gib) = device_memory_gib {
        let memory_bytes = (gib * crate::units::GIB) as u64;
        for (flag, text, bytes) in [
            ("--max-message", &max_text, max_message),
            ("--copy-bytes", &copy_text, copy_bytes),
        ] {
            if let Some(refusal) = crate::calibrate::device_limits::cuda_buffer_refusal(
                flag,
                text,
                bytes,
                memory_bytes,
            ) {
                bail!("{refusal}");
            }
        }
    }
    // On the CPU backend the largest message is capped, so a smallest one past a quarter of the
    // cap leaves no --max-message to offer: it was told "e.g. --max-message 4GiB", which the cap
    // above refuses in turn.
    if !gpu && max_message < min_message.saturating_mul(4) && min_message > MAX_CPU_BYTES / 4 {
        bail!(
            "--min-message {} leaves no room for the alpha-beta fit's 3+ sizes under the CPU backend's limit of {} per message (rule: --max-message at least 4 x --min-message); give at most --min-message {}, e.g. --min-message 8KiB",
            quote(&args.min_message),
            format_bytes(MAX_CPU_BYTES),
            format_bytes(MAX_CPU_BYTES / 4)
        );
    }
    if max_message < min_message.saturating_mul(4) {
        bail!(
            "--max-message {max_text} must be at least 4 x --min-message {} so the alpha-beta fit has 3+ sizes; e.g. --max-message {}",
            quote(&args.min_message),
            format_bytes(min_message.saturating_mul(4))
        );
    }
    Ok(Sizes {
        sweep,
        min_message,
        max_message,
        copy_bytes,
    })
}

/// A byte-size flag read as [`parse_bytes`] reads it (whole bytes, shown back as typed), with the
/// rule every size tpsim reads keeps: one word (`8 KiB` could be two values; spaces around it are
/// trimmed).
fn byte_size(flag: &str, text: &str) -> Result<u64> {
    crate::units::one_word(text)
        .map_err(|rule| anyhow::anyhow!("{flag} {}: {rule} (e.g. 8KiB, not 8 KiB)", quote(text)))?;
    Ok(parse_bytes(flag, text)?)
}

fn print_calibration(profile: &GpuProfile, format: Format) -> Result<()> {
    let calibration: &Calibration = profile
        .calibration
        .as_ref()
        .context("the calibration produced no measurements")?;
    match format {
        Format::Table => print!("{}", calibration_summary(profile, calibration)),
        Format::Json => println!("{}", serde_json::to_string_pretty(profile)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(profile)?),
    }
    Ok(())
}

/// The datasheet profile under a calibration when `--gpu` names none.
const DEFAULT_BASE_GPU: &str = "h100-sxm-80g";

#[allow(clippy::too_many_arguments)]
fn options(
    model: &Model,
    micro_batch: u32,
    tp_degrees: Vec<u32>,
    sizes: Sizes,
    reps: Reps,
    base_reference: Option<&str>,
    timer: &dyn KernelTimer,
) -> Result<CalibrateOptions> {
    // The default base is tpsim's own profile, never a file here that shares its name.
    let (base, base_reference) = match base_reference {
        Some(reference) => (specs::load_gpu(reference)?, reference),
        None => (specs::load_bundled_gpu(DEFAULT_BASE_GPU)?, DEFAULT_BASE_GPU),
    };
    Ok(CalibrateOptions {
        model: model.clone(),
        micro_batch,
        tp_degrees,
        sweep: sizes.sweep,
        messages: message_sizes(sizes.min_message, sizes.max_message),
        copy_bytes: sizes.copy_bytes,
        reps,
        base,
        base_reference: base_reference.to_string(),
        unix_time_s: unix_time(),
        device_memory_gib: timer.device_memory_gib(),
    })
}

pub(super) fn calibrate(args: CalibrateArgs) -> Result<Outcome> {
    let reps = reps(&args.measure)?;
    if let Some(seq_len) = args.seq_len {
        check_seq_len(seq_len)?;
    }
    let (mut model, _) = resolve_model(&args.model, None, args.seq_len.map(|s| (s, "--seq-len")))?;
    if let Some(seq_len) = args.seq_len {
        model.seq_len = seq_len;
        model.check()?;
    }
    if args.micro_batch == 0 {
        bail!("--micro-batch 0 must be at least 1; e.g. --micro-batch 1");
    }
    let tp = if args.tp.is_empty() {
        default_tp(&model)
    } else {
        args.tp.clone()
    };
    // The degrees that split this model's heads and MLP, for the fixes below: "--tp 1,2,4" is no
    // fix for a model of 3 heads.
    let valid: Vec<String> = crate::plan::divisors(model.heads)
        .into_iter()
        .filter(|d| model.ffn_hidden.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    let example = valid.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    // A degree listed twice would be measured twice and written twice into the profile.
    if let Some(twice) = listed_twice(&tp) {
        let given = tp.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        bail!("--tp {given} lists {twice} twice; give each TP degree once, e.g. --tp {example}");
    }
    for &t in &tp {
        if t == 0 {
            bail!("--tp 0 must be at least 1 (one GPU holds the whole layer); e.g. --tp {example}");
        }
        if model.heads % t != 0 || model.ffn_hidden % t != 0 {
            bail!(
                "--tp {t} must divide the {} and the MLP width {} of {}; valid: {} (e.g. --tp {example})",
                crate::report::counted(model.heads, "head"),
                model.ffn_hidden,
                model.name,
                valid.join(", ")
            );
        }
    }
    // The size flags' own rules (a zero, an order, the CPU's caps) need no device: checked at the
    // backend asked for before it is opened, so `--backend cuda --min-message 10MB --max-message
    // 1MB` on a machine without a driver is told both at once rather than the driver first and,
    // once installed, the sizes. The GPU's memory bound waits for the device below.
    let asked = match args.measure.backend {
        BackendArg::Cpu => Some(BackendKind::Cpu),
        BackendArg::Cuda => Some(BackendKind::Cuda),
        BackendArg::Auto => None,
    };
    if let Some(kind) = asked {
        sizes(kind, None, &args)?;
    }
    let (mut timer, why) = backend(&args.measure, 2)?;
    let sizes = sizes(timer.kind(), timer.device_memory_gib(), &args)?;
    check_output(&args)?;
    let opts = options(
        &model,
        args.micro_batch,
        tp,
        sizes,
        reps,
        args.gpu.as_deref(),
        timer.as_ref(),
    )?;
    // The shard shapes are the model's tokens per micro-batch: name the flags that set them.
    check_runnable(timer.as_ref(), &opts).with_context(|| {
        format!(
            "the shard GEMMs of {} at --seq-len {} x --micro-batch {} tokens",
            model.name, model.seq_len, args.micro_batch
        )
    })?;
    eprintln!("{why}");
    let profile = run_calibration(timer.as_mut(), &opts)?;
    let text = format!(
        "# Written by `tpsim calibrate`; use it with `tpsim plan --calibration {}`.\n# Measured values replace the datasheet ones; see `calibration:` for every measurement and fit.\n{}",
        // Quoted, so a path with a line break or a quote stays inside the comment line.
        crate::input_file::quote(&args.output),
        yaml_serde::to_string(&profile)?
    );
    let replacing = crate::output_file::replacing_words(
        std::path::Path::new(&args.output),
        "calibrated profile",
    );
    output_file::write_file(
        "--output",
        &args.output,
        text.as_bytes(),
        output_file::OutputKind::Profile,
    )?;
    print_calibration(&profile, args.format)?;
    eprintln!("wrote the calibrated profile to {}{replacing}", args.output);
    Ok(Outcome::Found)
}

/// Largest micro-batch `validate` runs on the CPU backend for a plan it picked itself: the CPU
/// layer's time grows linearly with the micro-batch, and a few sequences exercise the same split.
const CPU_VALIDATE_MICRO_BATCH: u32 = 4;

/// The case with its micro-batch capped at `CPU_VALIDATE_MICRO_BATCH` (the largest size at most
/// the cap whose tokens a sequence-parallel split still divides).
fn cap_for_cpu(model: &Model, case: Case) -> Case {
    if case.micro_batch <= CPU_VALIDATE_MICRO_BATCH {
        return case;
    }
    let divides = |mb: u32| {
        !case.sequence_parallel
            || (u64::from(model.seq_len) * u64::from(mb)).is_multiple_of(u64::from(case.tp.max(1)))
    };
    let micro_batch = (1..=CPU_VALIDATE_MICRO_BATCH)
        .rev()
        .find(|&mb| divides(mb))
        .unwrap_or(case.micro_batch);
    Case {
        micro_batch,
        ..case
    }
}

pub(super) fn validate(args: ValidateArgs) -> Result<Outcome> {
    let reps = reps(&args.measure)?;
    if args.tp == Some(0) {
        bail!("--tp 0 must be at least 1 (one GPU holds the whole layer); e.g. --tp 2");
    }
    if args.micro_batch == Some(0) {
        bail!("--micro-batch 0 must be at least 1; e.g. --micro-batch 1");
    }
    if args.sequence_parallel == Some(true) && args.tp == Some(1) {
        bail!(
            "--sequence-parallel needs --tp 2 or more: at --tp 1 there are no TP collectives to split; drop --sequence-parallel or use e.g. --tp 2"
        );
    }
    // --micro-batch and --sequence-parallel describe the one layer --tp runs; without --tp the
    // best plans' own splits are validated, so either was dropped without a word (beside --top,
    // which let them past clap's `requires = "tp"`).
    let layer_flags: Vec<String> = [
        args.micro_batch.map(|m| format!("--micro-batch {m}")),
        args.sequence_parallel.map(|on| {
            if on {
                "--sequence-parallel".to_string()
            } else {
                "--sequence-parallel false".to_string()
            }
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if args.tp.is_none() && !layer_flags.is_empty() {
        let given = layer_flags.join(" ");
        // The example must run: with --global-batch given, a micro-batch that does not split it
        // is refused next (the batch rule below), so the example takes the largest that does.
        let example = match (args.micro_batch, args.training.global_batch) {
            (Some(micro_batch), Some(global_batch))
                if crate::plan::check_batch_split(global_batch, 1, micro_batch).is_err() =>
            {
                let fits = (1..=micro_batch.min(global_batch))
                    .rev()
                    .find(|&mb| global_batch.is_multiple_of(mb))
                    .unwrap_or(1);
                format!(
                    "{}; --micro-batch {micro_batch} does not split --global-batch {global_batch}",
                    given.replace(
                        &format!("--micro-batch {micro_batch}"),
                        &format!("--micro-batch {fits}")
                    )
                )
            }
            _ => given.clone(),
        };
        let top = args
            .top
            .map(|n| format!("drop --top {n} and "))
            .unwrap_or_default();
        let (it, describes) = if layer_flags.len() > 1 {
            ("they", "describe")
        } else {
            ("it", "describes")
        };
        bail!(
            "{given} without --tp: {it} {describes} the one layer --tp runs, and without --tp validate runs the best plans' own splits (their micro-batches and sequence parallelism), so {it} would change nothing; {top}add --tp N (e.g. --tp 2 {example}), or drop {given}"
        );
    }
    let top = args.top.unwrap_or(3);
    if args.tp.is_none() && top == 0 {
        bail!("--top 0 would validate nothing; e.g. --top 3");
    }
    // With --tp the case is the layer as given, run and predicted in 16-bit GEMMs with the
    // attention scores materialised (`calibrate::validate`); the kernel choices of a training
    // would change neither side, so they are refused rather than dropped without a word.
    if let Some(tp) = args.tp {
        use clap::ValueEnum;
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map(|v| v.get_name().to_string()).unwrap_or_default()
        };
        if let Some(precision) = args
            .training
            .precision
            .filter(|p| *p != crate::cli::PrecisionArg::Bf16)
        {
            bail!(
                "--precision {} with --tp {tp}: validate runs its one layer's GEMMs in the backend's own precision (bf16 on CUDA, f32 on the CPU) and predicts them in bf16, so the flag would change nothing measured or predicted; drop --precision (without --tp it only chooses which plans' splits are validated)",
                name(precision.to_possible_value())
            );
        }
        if let Some(attention) = args.training.attention {
            bail!(
                "--attention {} with --tp {tp}: validate's layer materialises the attention scores (no fused kernel) and is predicted so, whatever the flag says; drop --attention (without --tp it only chooses which plans' splits are validated)",
                name(attention.to_possible_value())
            );
        }
    }
    let cluster_args = ClusterArgs {
        nodes: args.cluster.nodes.or(Some(1)),
        ..args.cluster.clone()
    };
    let scenario = resolve_scenario(&args.model, &cluster_args, &args.training, None)?;
    let model = &scenario.model;
    // A --global-batch given beside --tp --micro-batch is held to eval's rule, at the fewest
    // replicas a plan of this layer has (dp 1): accepting a micro-batch no plan could run, or one
    // larger than the whole batch, would validate a layer of no training.
    if let (Some(tp), Some(micro_batch), Some(global_batch)) =
        (args.tp, args.micro_batch, args.training.global_batch)
        && let Err(refused) = crate::plan::check_batch_split(global_batch, 1, micro_batch)
    {
        // Said without eval's `--dp 1 x`: validate takes no --dp (a plan of this layer has at
        // least one data-parallel replica, and at one the rule is eval's, `check_batch_split`).
        let rule = match refused {
            crate::plan::PlanError::BatchSplit { valid, .. } => format!(
                "--global-batch {global_batch} is not divisible by --micro-batch {micro_batch}; valid micro-batches: {valid}"
            ),
            other => other.to_string(),
        };
        bail!(
            "{rule} (validate --tp {tp} runs one layer of a plan with at least one data-parallel replica, and eval refuses the same split at dp 1); give one of those --micro-batch values, or drop --global-batch, which validate --tp uses for nothing else"
        );
    }
    // --tp runs the case as given; otherwise every distinct split of the feasible plans, best first.
    let candidates: Vec<Case> = match args.tp {
        Some(tp) => vec![Case {
            tp,
            sequence_parallel: args.sequence_parallel == Some(true),
            micro_batch: args.micro_batch.unwrap_or(1),
        }],
        None => {
            let result = search(
                model,
                &scenario.cluster,
                &scenario.training,
                SearchOptions {
                    allow_uneven_pp: false,
                    allow_cross_node_tp: false,
                    ..SearchOptions::default()
                },
            );
            let mut cases: Vec<Case> = Vec::new();
            for estimate in result.feasible() {
                let case = Case {
                    tp: estimate.plan.tp,
                    sequence_parallel: estimate.plan.sequence_parallel,
                    micro_batch: estimate.plan.micro_batch,
                };
                if !cases.contains(&case) {
                    cases.push(case);
                }
            }
            if cases.is_empty() {
                bail!(
                    "no plan fits {} on this cluster, so there is no TP split to validate; pass --tp N, or add --nodes",
                    model.name
                );
            }
            cases
        }
    };
    let top = if args.tp.is_some() { 1 } else { top };
    for case in candidates.iter().take(top) {
        layer_spec(model, *case)?;
    }
    let max_tp = candidates
        .iter()
        .take(top)
        .map(|c| c.tp as usize)
        .max()
        .unwrap_or(1);
    let (mut timer, why) = backend(&args.measure, max_tp)?;
    // A plan's micro-batch (often hundreds of sequences) would keep the CPU busy for minutes;
    // the CPU validates a few sequences of its split instead and says so. --micro-batch is run
    // as given.
    let mut cases: Vec<Case> = Vec::new();
    let mut capped: Vec<(Case, u32)> = Vec::new(); // (case run, the plan's micro-batch)
    for &case in &candidates {
        let run = if args.tp.is_none() && timer.kind() == BackendKind::Cpu {
            cap_for_cpu(model, case)
        } else {
            case
        };
        if cases.contains(&run) {
            continue;
        }
        if run != case {
            capped.push((run, case.micro_batch));
        }
        cases.push(run);
        if cases.len() == top {
            break;
        }
    }
    // A layer runs one rank per TP shard: fewer --ranks than its TP degree cannot run it, and
    // running it on more ranks than were asked for would override the flag without a word.
    if let Some(ranks) = args.measure.ranks
        && let Some(case) = cases.iter().find(|c| c.tp as usize > ranks)
    {
        match args.tp {
            Some(tp) => bail!(
                "--ranks {ranks} is fewer than --tp {tp}: validate runs a TP layer on one rank per shard, so --tp {tp} needs {tp} ranks; give --ranks {tp}, or drop --ranks"
            ),
            None => bail!(
                "--ranks {ranks} is fewer than tp {}, the split of a plan the search picked to validate: validate runs a TP layer on one rank per shard; give --ranks {}, pass a --tp of at most {ranks} to validate a smaller split, or drop --ranks",
                case.tp,
                case.tp
            ),
        }
    }
    for case in &cases {
        timer.check_layer(&layer_spec(model, *case)?)?;
    }
    eprintln!("{why}");
    for &(case, plan_micro_batch) in &capped {
        eprintln!(
            "tp {} sp {}: validating micro-batch {} instead of the plan's {plan_micro_batch}, since the CPU backend's layer time grows linearly with it; to run the plan's size, pass --tp {}{} --micro-batch {plan_micro_batch}",
            case.tp,
            case.sequence_parallel,
            case.micro_batch,
            case.tp,
            if case.sequence_parallel {
                " --sequence-parallel"
            } else {
                ""
            }
        );
    }
    // Predict with the calibrated profile; without one, the CPU measures itself first (a quick
    // calibration), and a GPU uses the datasheet profile of --gpu.
    let profile = if args.cluster.calibration.is_some() {
        scenario.cluster.gpu.clone()
    } else if timer.kind() == BackendKind::Cpu {
        eprintln!("no --calibration given: calibrating the CPU backend first (quick)");
        let sizes = Sizes {
            sweep: vec![32, 64, 128],
            min_message: 8 << 10,
            max_message: 256 << 10,
            copy_bytes: 16 << 20,
        };
        let quick = Reps {
            warmup: 1,
            timed: 3,
        };
        let opts = options(model, 1, Vec::new(), sizes, quick, None, timer.as_ref())?;
        run_calibration(timer.as_mut(), &opts)?
    } else {
        eprintln!(
            "no --calibration given: predicting with the datasheet profile {}",
            scenario.gpu_reference
        );
        scenario.cluster.gpu.clone()
    };
    let mut rows: Vec<ValidationRow> = Vec::new();
    for case in cases {
        eprintln!(
            "validating tp {} sp {} micro-batch {}",
            case.tp, case.sequence_parallel, case.micro_batch
        );
        let mut row = validate_case(timer.as_mut(), model, &profile, case, reps)?;
        if let Some((_, plan_micro_batch)) = capped.iter().find(|(c, _)| *c == case) {
            row.notes.push(format!(
                "micro-batch {} of the plan's {plan_micro_batch}: the CPU backend caps a plan's micro-batch at {CPU_VALIDATE_MICRO_BATCH} (its layer time grows linearly with it); --tp {} --micro-batch {plan_micro_batch} runs the plan's size",
                case.micro_batch, case.tp
            ));
        }
        rows.push(row);
    }
    match args.format {
        Format::Table => print!("{}", validation_summary(&rows)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(&rows)?),
    }
    if let Some(bad) = rows.iter().find(|r| !r.passed()) {
        bail!(
            "validation failed for tp {} (sp {}): numerics {} (tolerance {:.0e}), wire bytes {} vs model {}",
            bad.tp,
            bad.sequence_parallel,
            bad.max_relative_error
                .map_or("not checked".into(), |e| format!("{e:.2e}")),
            bad.tolerance,
            bad.wire_bytes_per_rank,
            bad.model_wire_bytes_per_rank
        );
    }
    Ok(Outcome::Found)
}
