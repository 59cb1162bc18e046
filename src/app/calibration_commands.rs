//! `tpsim calibrate` and `tpsim validate`: flags → backend and options → `calibrate::run` /
//! `calibrate::validate` → summary, profile file and exit code.

use anyhow::{Context, Result, bail};

use super::{Outcome, resolve_model, resolve_scenario};
use crate::calibrate::profile::Calibration;
use crate::calibrate::run::{CalibrateOptions, calibrate as run_calibration, message_sizes};
use crate::calibrate::summary::{calibration_summary, validation_summary};
use crate::calibrate::validate::{Case, ValidationRow, validate_case};
use crate::calibrate::{BackendChoice, BackendKind, KernelTimer, Reps, open_backend, parse_bytes};
use crate::cli::{BackendArg, CalibrateArgs, ClusterArgs, Format, MeasureArgs, ValidateArgs};
use crate::cluster::GpuProfile;
use crate::model::Model;
use crate::planner::{SearchOptions, search};
use crate::specs;

/// Loads a profile written by `tpsim calibrate`; a datasheet profile is refused so that
/// `--calibration` always means measured numbers.
pub(super) fn load_calibrated(path: &str) -> Result<GpuProfile> {
    let profile = specs::load_gpu(path).with_context(|| format!("--calibration {path}"))?;
    if profile.calibration.is_none() {
        bail!(
            "--calibration {path}: the profile has no `calibration:` section, so it holds datasheet numbers; pass it with --gpu {path}, or write one with `tpsim calibrate`"
        );
    }
    Ok(profile)
}

fn reps(measure: &MeasureArgs) -> Result<Reps> {
    if measure.reps == 0 {
        bail!("--reps 0: at least one timed repetition is needed for a median; e.g. --reps 7");
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

/// Opens the backend and says on stderr which one it is and why.
fn backend(measure: &MeasureArgs, min_ranks: usize) -> Result<Box<dyn KernelTimer>> {
    let choice = match measure.backend {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Cpu => BackendChoice::Cpu,
        BackendArg::Cuda => BackendChoice::Cuda,
    };
    let ranks = measure
        .ranks
        .unwrap_or_else(|| default_ranks().max(min_ranks));
    let (timer, why) = open_backend(choice, ranks)?;
    eprintln!("{why}");
    Ok(timer)
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

fn sizes(kind: BackendKind, args: &CalibrateArgs) -> Result<Sizes> {
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
    if sweep.len() < 2 || sweep.contains(&0) {
        bail!(
            "--sweep {:?}: give at least two positive edge lengths, e.g. --sweep 64,128,256",
            sweep
        );
    }
    let min_message = parse_bytes("--min-message", &args.min_message)?;
    let max_message = match &args.max_message {
        Some(text) => parse_bytes("--max-message", text)?,
        None if gpu => 1 << 30,
        None => 4 << 20,
    };
    if max_message < min_message.saturating_mul(4) {
        bail!(
            "--max-message {max_message} B must be at least 4 x --min-message ({min_message} B) so the alpha-beta fit has 3+ sizes"
        );
    }
    let copy_bytes = match &args.copy_bytes {
        Some(text) => parse_bytes("--copy-bytes", text)?,
        None if gpu => 1 << 30,
        None => 64 << 20,
    };
    Ok(Sizes {
        sweep,
        min_message,
        max_message,
        copy_bytes,
    })
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

#[allow(clippy::too_many_arguments)]
fn options(
    model: &Model,
    micro_batch: u32,
    tp_degrees: Vec<u32>,
    sizes: Sizes,
    reps: Reps,
    base_reference: &str,
    timer: &dyn KernelTimer,
) -> Result<CalibrateOptions> {
    let base = specs::load_gpu(base_reference)?;
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
    let (mut model, _) = resolve_model(&args.model, None, args.seq_len)?;
    if let Some(seq_len) = args.seq_len {
        model.seq_len = seq_len;
    }
    if args.micro_batch == 0 {
        bail!("--micro-batch 0 must be at least 1; e.g. --micro-batch 1");
    }
    let tp = if args.tp.is_empty() {
        default_tp(&model)
    } else {
        args.tp.clone()
    };
    for &t in &tp {
        if t == 0 || model.heads % t != 0 || model.ffn_hidden % t != 0 {
            bail!(
                "--tp {t} must divide the {} heads and the MLP width {} of {}; e.g. --tp 1,2,4",
                model.heads,
                model.ffn_hidden,
                model.name
            );
        }
    }
    let mut timer = backend(&args.measure, 2)?;
    let sizes = sizes(timer.kind(), &args)?;
    let opts = options(
        &model,
        args.micro_batch,
        tp,
        sizes,
        reps,
        &args.gpu,
        timer.as_ref(),
    )?;
    let profile = run_calibration(timer.as_mut(), &opts)?;
    let text = format!(
        "# Written by `tpsim calibrate`; use it with `tpsim plan --calibration {}`.\n# Measured values replace the datasheet ones; see `calibration:` for every measurement and fit.\n{}",
        args.output,
        yaml_serde::to_string(&profile)?
    );
    std::fs::write(&args.output, text)
        .with_context(|| format!("--output {}: cannot write the profile", args.output))?;
    print_calibration(&profile, args.format)?;
    eprintln!("wrote the calibrated profile to {}", args.output);
    Ok(Outcome::Found)
}

pub(super) fn validate(args: ValidateArgs) -> Result<Outcome> {
    let reps = reps(&args.measure)?;
    let cluster_args = ClusterArgs {
        nodes: args.cluster.nodes.or(Some(1)),
        ..args.cluster.clone()
    };
    let scenario = resolve_scenario(&args.model, &cluster_args, &args.training, None)?;
    let model = &scenario.model;
    let cases: Vec<Case> = match args.tp {
        Some(tp) => vec![Case {
            tp,
            sequence_parallel: args.sequence_parallel,
            micro_batch: args.micro_batch.unwrap_or(1),
        }],
        None => {
            if args.top == 0 {
                bail!("--top 0 would validate nothing; e.g. --top 3");
            }
            let result = search(
                model,
                &scenario.cluster,
                &scenario.training,
                SearchOptions {
                    allow_uneven_pp: false,
                    allow_cross_node_tp: false,
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
                if cases.len() == args.top {
                    break;
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
    let max_tp = cases.iter().map(|c| c.tp as usize).max().unwrap_or(1);
    let mut timer = backend(&args.measure, max_tp)?;
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
        let opts = options(
            model,
            1,
            Vec::new(),
            sizes,
            quick,
            "h100-sxm-80g",
            timer.as_ref(),
        )?;
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
        rows.push(validate_case(timer.as_mut(), model, &profile, case, reps)?);
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
