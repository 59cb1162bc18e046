//! `tpsim accuracy`: tpsim's predictions against published training runs.

use anyhow::{Context, Result, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::Outcome;
use crate::cli::{AccuracyArgs, Format};
use crate::units::format_count;
use crate::validation;

pub(super) fn accuracy(args: AccuracyArgs) -> Result<Outcome> {
    let (text, origin) = match &args.runs {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| {
                format!("--runs {path}: cannot read the published runs; check the path")
            })?,
            path.clone(),
        ),
        None => (
            validation::BUNDLED_PUBLISHED_RUNS.to_string(),
            "bundled validation/published_runs.yaml".to_string(),
        ),
    };
    let rows = validation::accuracy(&text, &origin)?;
    if rows.is_empty() {
        bail!(
            "{origin}: no runs tpsim can evaluate (each needs completeness: full_plan, an A100 profile and a published step time); give a file with such runs"
        );
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
                "error %",
                "fits",
                "mem GiB",
            ]);
            for row in &rows {
                table.add_row(vec![
                    row.id.clone(),
                    row.gpus.to_string(),
                    row.gpu_profile.clone(),
                    row.plan.clone(),
                    format!("{:.2}", row.published_step_s),
                    format!("{:.2}", row.predicted_step_s),
                    format!("{:+.1}", row.error * 100.0),
                    if row.fits { "yes" } else { "NO" }.to_string(),
                    format!("{:.1}", row.predicted_memory_gib),
                ]);
            }
            println!("{table}");
            let abs: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
            let mean = abs.iter().sum::<f64>() / abs.len().max(1) as f64;
            let worst = abs.iter().copied().fold(0.0, f64::max);
            println!(
                "{} runs: mean |error| {:.1}%, worst {:.1}%",
                rows.len(),
                mean * 100.0,
                worst * 100.0
            );
            let _ = format_count;
        }
    }
    Ok(Outcome::Found)
}
