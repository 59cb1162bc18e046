//! `tpsim accuracy`: tpsim's predictions against published training runs.

use crate::input_file;
use anyhow::{Result, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Outcome;
use crate::cli::{AccuracyArgs, Format};
use crate::units::{GIB, format_count, show_step_s};
use crate::validation;

pub(super) fn accuracy(args: AccuracyArgs) -> Result<Outcome> {
    let (text, origin) = match &args.runs {
        Some(path) => (
            input_file::read_yaml("--runs", path)?,
            input_file::quote(path),
        ),
        None => (
            validation::BUNDLED_PUBLISHED_RUNS.to_string(),
            "bundled validation/published_runs.yaml".to_string(),
        ),
    };
    // The current-stack format (`validation/modern_runs.yaml`: schema_version, model_catalog,
    // runs with results in tokens/s per GPU) is compared in tokens/s per GPU.
    let top_level = |key: &str| text.lines().any(|line| line.starts_with(key));
    if top_level("model_catalog:") && top_level("schema_version:") {
        if let Some(id) = &args.run {
            return modern_run(&text, &origin, id, args.format);
        }
        return modern_accuracy(&text, &origin, args.format);
    }
    let (rows, skipped) = validation::accuracy_with_skips(&text, &origin)?;
    // A run given twice would count twice in the summary. The file parsed above, so its runs
    // each have an id.
    let ids: Vec<RunId> = yaml_serde::from_str(&text).unwrap_or_default();
    crate::modern_runs::check_unique_ids(&text, &origin, ids.iter().map(|r| r.id.as_str()))?;
    if let Some(id) = &args.run {
        // An id this file does not hold is not one of its runs at all: most likely a current-stack
        // run given without its file, for which the SC'21 example below would be beside the point.
        if !ids.iter().any(|r| same_id(id, &r.id)) {
            bail!(
                "--run {}: {origin} is a published-runs file (step times) with no run of that id, and --run reads a current-stack runs file (tokens/s); give the file that holds it: {}",
                input_file::quote(id),
                runs_file_holding(id)
            );
        }
        bail!(
            "--run {}: {origin} is a published-runs file (step times), whose table gives each run's plan, step time and memory but not the breakdown --run prints (--run reads current-stack runs files such as validation/modern_runs.yaml); for one run's breakdown give `tpsim eval` its shape and plan from the file with --framework megatron-lm-2021 --attention unfused, as the table evaluates it, e.g. for megatron-sc21-t1-1.7b: {SC21_1_7B_EVAL}",
            input_file::quote(id)
        );
    }
    if rows.is_empty() {
        let why = match skipped.as_slice() {
            [] => String::new(),
            [one] => format!(": {one}"),
            [first, rest @ ..] => format!(": {first} (and {} more runs skipped)", rest.len()),
        };
        bail!(
            "{origin}: no runs tpsim can evaluate{why}; each needs completeness: full_plan, an A100 profile and a published step time; give a file with such runs"
        );
    }
    for why in &skipped {
        eprintln!("note: {origin}: skipped {why}");
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(&rows)?),
        Format::Table => {
            let mut table = Table::new();
            table.load_style(UTF8_FULL_CONDENSED);
            table.set_header(vec![
                "run",
                "GPUs",
                "profile",
                "plan",
                "published s",
                "predicted s",
                "step time error % (- = tpsim faster)",
                "fits",
                "mem GiB",
            ]);
            for row in &rows {
                table.add_row(vec![
                    row.id.clone(),
                    row.gpus.to_string(),
                    row.gpu_profile.clone(),
                    row.plan.clone(),
                    show_step_s(row.published_step_s),
                    show_step_s(row.predicted_step_s),
                    format!("{:+.1}", row.error * 100.0),
                    if row.fits { "yes" } else { "NO" }.to_string(),
                    format!("{:.1}", row.predicted_memory_bytes / GIB),
                ]);
            }
            println!("{table}");
            let abs: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
            let mean = abs.iter().sum::<f64>() / abs.len().max(1) as f64;
            let worst = abs.iter().copied().fold(0.0, f64::max);
            let faster = rows.iter().filter(|r| r.error < 0.0).count();
            println!(
                "{} {}: mean |error| {:.1}%, worst {:.1}% (step time); tpsim predicts {faster} of them faster than published. Current stacks (H100 to GB300, dense and MoE): tpsim accuracy --runs validation/modern_runs.yaml, whose error is on tokens/s, so there + = tpsim faster",
                rows.len(),
                if rows.len() == 1 { "run" } else { "runs" },
                mean * 100.0,
                worst * 100.0
            );
            let _ = format_count;
        }
    }
    Ok(Outcome::Found)
}

/// `tpsim eval` of the first SC'21 run as `accuracy` evaluates it (validation/published_runs.yaml's
/// megatron-sc21-t1-1.7b: 24 layers, hidden 2304, 24 heads, 2048 tokens, 32 A100s, tp 1, pp 1,
/// micro-batch 16 of a 512 batch, full recompute; `validation::accuracy_with_skips` runs it under
/// Megatron-LM 2021 with unfused attention): the example `--run` gives for a published-runs file,
/// where a researcher was told the table "already shows every run in full" and has no breakdown.
const SC21_1_7B_EVAL: &str = "tpsim eval --framework megatron-lm-2021 --attention unfused --gpu a100-sxm-80g --nodes 4 --layers 24 --hidden 2304 --heads 24 --seq-len 2048 --global-batch 512 --tp 1 --pp 1 --micro-batch 16 --recompute full";

/// The current-stack runs files this repository ships, which `--run` reads with `--runs`.
const CURRENT_STACK_RUNS_FILES: [&str; 2] = [
    "validation/modern_runs.yaml",
    "validation/mbridge_26_runs.yaml",
];

/// The `tpsim accuracy --runs FILE --run ID` that finds `id`: the shipped current-stack runs file
/// (read from the working directory, as `--runs` would) that holds it, with the id as that file
/// writes it, or a placeholder for the file when none here does.
fn runs_file_holding(id: &str) -> String {
    if let Some((file, id)) = shipped_runs_file_with(id) {
        return format!(
            "tpsim accuracy --runs {file} --run {}",
            input_file::quote(&id)
        );
    }
    format!(
        "tpsim accuracy --runs FILE --run {} (this repository's are {})",
        input_file::quote(id),
        CURRENT_STACK_RUNS_FILES.join(" and ")
    )
}

/// Whether `given` names the run `id`, as `--run`'s suggestions read it: in any case and without
/// surrounding white space (an exact match is looked up first).
fn same_id(given: &str, id: &str) -> bool {
    given.trim().to_lowercase() == id.to_lowercase()
}

/// The ids of a current-stack runs file's runs (the rest of each run is `modern_runs`').
#[derive(serde::Deserialize)]
struct RunIds {
    runs: Vec<RunId>,
}

/// The shipped current-stack runs file (read from the working directory, as `--runs` would) with
/// a run that `id` names ([`same_id`]), and that run's id as the file writes it. Read by the YAML
/// parser, so a quoted id is found as `--runs` finds it.
fn shipped_runs_file_with(id: &str) -> Option<(&'static str, String)> {
    CURRENT_STACK_RUNS_FILES.into_iter().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        let runs: RunIds = yaml_serde::from_str(&text).ok()?;
        let run = runs.runs.into_iter().find(|r| same_id(id, &r.id))?;
        Some((file, run.id))
    })
}

/// The id of a run in a published-runs file (the rest of the run is `validation::accuracy`'s).
#[derive(serde::Deserialize)]
struct RunId {
    id: String,
}

/// `tpsim accuracy --runs modern_runs.yaml --run ID`: one run as tpsim plans it, in full, beside
/// what the source published.
fn modern_run(text: &str, origin: &str, id: &str, format: Format) -> Result<Outcome> {
    use crate::modern_runs::{parse_runs_file, plan_run, predict};
    use crate::report::{ClusterSummary, ModelSummary, Report};
    let file = parse_runs_file(text, origin)?;
    let Some(run) = file.runs.iter().find(|r| r.id == id) else {
        // Ids that contain what was given (three characters at least, so that "" or "-" suggest
        // nothing), or that it contains, in any case and without surrounding white space: ids
        // are matched exactly, so `MBRIDGE-...` or a pasted trailing space finds nothing.
        let wanted = id.trim().to_lowercase();
        let close: Vec<&str> = file
            .runs
            .iter()
            .map(|r| r.id.as_str())
            .filter(|other| {
                let other = other.to_lowercase();
                (wanted.chars().count() >= 3 && other.contains(&wanted))
                    || (!other.is_empty() && wanted.contains(&other))
            })
            .take(3)
            .collect();
        bail!(
            "--run {}: no run of {origin} has that id; give one of its ids{}",
            input_file::quote(id),
            if close.is_empty() {
                match shipped_runs_file_with(id) {
                    Some((file, id)) if !origin.contains(file) => format!(
                        ", or give the file that holds it: tpsim accuracy --runs {file} --run {}",
                        input_file::quote(&id)
                    ),
                    _ => " (the first column of `tpsim accuracy --runs FILE`)".to_string(),
                }
            } else {
                format!(", e.g. {}", close.join(", "))
            }
        );
    };
    let prediction = predict(run);
    let planned = match plan_run(run) {
        Ok(planned) => planned,
        Err(why) => {
            // The table's row, whose note says why, for the machine-readable formats.
            print_run(format, &prediction, serde_json::Value::Null)?;
            eprintln!(
                "run {id}: not predicted: {why} (tpsim accuracy --runs FILE lists which runs it predicts)"
            );
            return Ok(Outcome::NothingFits);
        }
    };
    let report = Report {
        model: ModelSummary::new(&planned.model, "the run's model"),
        cluster: ClusterSummary::new(&planned.cluster),
        training: planned.training,
        search: None,
        plans: vec![planned.estimate],
        details: Vec::new(),
    };
    // `plan_run` leaves out a run without a published rate, so this is never taken.
    let Some(published) = prediction.published_tokens_per_s_per_gpu else {
        bail!("run {id}: no tokens/s published, so there is nothing to compare with");
    };
    let predicted = planned.estimate.tokens_per_s / f64::from(planned.cluster.total_gpus());
    match format {
        Format::Json | Format::Yaml => {
            let body: serde_json::Value = serde_json::from_str(&crate::report::to_json(&report))?;
            print_run(format, &prediction, body)?;
        }
        Format::Table => {
            let tokens_per_step =
                f64::from(planned.training.global_batch) * f64::from(planned.training.seq_len);
            let gpus = f64::from(planned.cluster.total_gpus());
            println!(
                "run {id}: published {published:.0} tokens/s per GPU, {} s per step ({}); tpsim {predicted:.0}, {} s ({:+.1}%), its published plan pinned, the rest searched: {}",
                show_step_s(tokens_per_step / gpus / published),
                run.source.describe(),
                show_step_s(planned.estimate.time.step_s.0),
                100.0 * (predicted / published - 1.0),
                planned.note
            );
            if let (Some(stated), Some(error)) = (
                prediction.published_peak_memory_bytes,
                prediction.memory_error,
            ) {
                println!(
                    "peak memory: published {:.1} GiB, tpsim {:.1} GiB ({:+.1}%)",
                    stated / GIB,
                    planned.estimate.memory.total_bytes.0 / crate::units::GIB,
                    100.0 * error
                );
            }
            println!(
                "{}\n\n{}",
                crate::report::scenario_line(&report),
                crate::report::breakdown(
                    &report.plans[0],
                    &planned.model,
                    &planned.cluster,
                    &report.training,
                )
            );
        }
    }
    Ok(Outcome::Found)
}

/// `--run`'s machine-readable answer: the table's row and the planned report (null where the run
/// is not predicted); nothing in the table format, which prints its own lines.
fn print_run(
    format: Format,
    prediction: &crate::modern_runs::ModernPrediction,
    planned: serde_json::Value,
) -> Result<()> {
    let out = serde_json::json!({ "run": prediction, "planned": planned });
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&out)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(&out)?),
        Format::Table => {}
    }
    Ok(())
}

/// `tpsim accuracy --runs modern_runs.yaml`: every run tpsim can express, its published plan
/// pinned, predicted against the published tokens/s per GPU.
fn modern_accuracy(text: &str, origin: &str, format: Format) -> Result<Outcome> {
    use crate::modern_runs::{
        DENSE_TARGET, MOE_TARGET, framework_family, memory_summary, parse_runs_file, predict,
        summary,
    };
    let file = parse_runs_file(text, origin)?;
    let rows: Vec<_> = file.runs.iter().map(predict).collect();
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(&rows)?),
        Format::Table => {
            let mut table = Table::new();
            table.load_style(UTF8_FULL_CONDENSED);
            table.set_header(vec![
                "run",
                "GPU",
                "published tok/s/GPU",
                "predicted",
                "tok/s error % (+ = tpsim faster; step-time tables: - = faster)",
                "peak memory GiB (published / predicted)",
                "searched settings / why not predicted",
            ]);
            for r in &rows {
                table.add_row(vec![
                    r.id.clone(),
                    r.gpu.clone(),
                    r.published_tokens_per_s_per_gpu
                        .map(|t| format!("{t:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    r.predicted_tokens_per_s_per_gpu
                        .map(|t| format!("{t:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    r.error
                        .map(|e| format!("{:+.1}", 100.0 * e))
                        .unwrap_or_else(|| "-".into()),
                    match (r.published_peak_memory_bytes, r.predicted_memory_bytes) {
                        (Some(published), Some(predicted)) => {
                            format!("{:.1} / {:.1}", published / GIB, predicted / GIB)
                        }
                        (Some(published), None) => format!("{:.1} / -", published / GIB),
                        _ => String::new(),
                    },
                    r.note.clone(),
                ]);
            }
            println!("{table}");
            for (name, moe, target) in [("dense", false, DENSE_TARGET), ("MoE", true, MOE_TARGET)] {
                let bound = target.none_past;
                let set: Vec<_> = rows.iter().filter(|r| r.moe == moe).collect();
                if let Some((n, median, max, past)) = summary(&set, bound) {
                    let met = |yes: bool| if yes { "met" } else { "not met" };
                    println!(
                        "{name}: {n} runs predicted, median |error| {:.1}%, max {:.1}%, {past} past {:.0}%; {}'s targets: median |error| at most {:.0}% {}, none past {:.0}% {}",
                        100.0 * median,
                        100.0 * max,
                        100.0 * bound,
                        target.issue,
                        100.0 * target.median,
                        met(target.median_met(median)),
                        100.0 * bound,
                        met(target.none_past_met(past)),
                    );
                }
                // The dense runs by framework family, where they come from more than one: the
                // README's headline quotes the Megatron-Core family's line.
                let mut families: Vec<&str> = Vec::new();
                for r in &set {
                    let family = framework_family(&r.source);
                    if r.error.is_some() && !families.contains(&family) {
                        families.push(family);
                    }
                }
                if !moe && families.len() > 1 {
                    let parts: Vec<String> = families
                        .iter()
                        .filter_map(|family| {
                            let members: Vec<_> = set
                                .iter()
                                .copied()
                                .filter(|r| framework_family(&r.source) == *family)
                                .collect();
                            summary(&members, bound).map(|(n, median, _, past)| {
                                format!(
                                    "{family} {n} {}, median |error| {:.1}%, {past} past {:.0}%",
                                    if n == 1 { "run" } else { "runs" },
                                    100.0 * median,
                                    100.0 * bound
                                )
                            })
                        })
                        .collect();
                    println!("{name} by framework: {}", parts.join("; "));
                }
            }
            let all: Vec<_> = rows.iter().collect();
            if let Some((n, median, max, past)) = memory_summary(&all, 0.10) {
                println!(
                    "peak memory: {n} runs state it, median |error| {:.1}%, max {:.1}%, {past} past 10%",
                    100.0 * median,
                    100.0 * max
                );
            }
            let order = crate::modern_runs::pair_order(&file.runs, &rows);
            let predicted = rows.iter().filter(|r| r.error.is_some()).count();
            if order.pairs() == 0 && predicted > 1 {
                // Said, not left out: a file whose runs name no source could not tell why the
                // line it expects is missing.
                let unnamed = file
                    .runs
                    .iter()
                    .filter(|r| r.source.reference.is_none() || r.model_key.is_none())
                    .count();
                println!(
                    "order: no pair of runs to order (a pair is two predicted runs of one model_key on the same GPUs and GPU count, sequence length and global batch, from one source ref, path and commit_or_version, published more than {:.0}% apart){}",
                    100.0 * crate::modern_runs::PUBLISHED_GAP,
                    match unnamed {
                        0 => String::new(),
                        n => format!(
                            "; {n} of the {} runs {} no source.ref or model_key, so {} with none",
                            rows.len(),
                            if n == 1 { "has" } else { "have" },
                            if n == 1 { "it pairs" } else { "they pair" }
                        ),
                    }
                );
            } else if order.pairs() > 0 {
                println!(
                    "order: {} {} of runs (one model on the same GPUs in one published table) published more than {:.0}% apart; tpsim puts the faster first in {}: {} of {} at one precision (plan or settings differ), {} of {} across precisions",
                    order.pairs(),
                    if order.pairs() == 1 { "pair" } else { "pairs" },
                    100.0 * crate::modern_runs::PUBLISHED_GAP,
                    order.ordered(),
                    order.same_precision_ordered,
                    order.same_precision_pairs,
                    order.precision_ordered,
                    order.precision_pairs
                );
            }
            println!(
                "{} of {} runs not predicted (see the last column)",
                rows.iter().filter(|r| r.error.is_none()).count(),
                rows.len()
            );
        }
    }
    Ok(Outcome::Found)
}
