//! Command handlers' report half: turns a finished `plan` or `eval` into the report directory
//! (`--report DIR`, `tpsim report FILE --out DIR`). Like `app.rs`, it touches files and uses anyhow.

use anyhow::{Context, Result, anyhow, bail};
use std::path::Path;

use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::cost::ledger::ledger;
use crate::cost::simulated::Simulated;
use crate::model::Model;
use crate::report::{self, Report, ReportInputs};
use crate::training::Training;

/// Fails early, before any work, when `dir` cannot be a directory.
pub fn check_dir(flag: &str, dir: &str) -> Result<()> {
    if dir.is_empty() {
        bail!("{flag} \"\": give a directory to write the report into, e.g. {flag} reports/mine");
    }
    let path = Path::new(dir);
    if path.exists() && !path.is_dir() {
        bail!(
            "{flag} {dir}: a file with that name exists, and the report needs a directory; give another path or remove the file"
        );
    }
    Ok(())
}

/// Writes every file of the report into `dir`, creating it.
pub fn write_dir(flag: &str, dir: &str, files: &[(String, String)]) -> Result<()> {
    check_dir(flag, dir)?;
    std::fs::create_dir_all(dir).with_context(|| {
        format!("{flag} {dir}: cannot create the report directory; choose a writable path")
    })?;
    for (name, text) in files {
        let path = Path::new(dir).join(name);
        std::fs::write(&path, text).with_context(|| {
            format!(
                "{flag} {dir}: cannot write {}; choose a writable directory",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// Everything one report needs from the command.
pub struct Written<'a> {
    pub flag: &'a str,
    pub dir: &'a str,
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub training: &'a Training,
    pub report: &'a Report,
    pub labels: Vec<String>,
    pub evaluated: &'a [Estimate],
    pub chosen: &'a Simulated,
    pub chosen_label: String,
    pub notes: Vec<String>,
}

/// Renders and writes the report; returns how many files were written.
pub fn write_report(w: Written) -> Result<usize> {
    let chosen_plan = w.chosen.estimate.plan;
    let chosen_in_evaluated = w.evaluated.iter().position(|e| e.plan == chosen_plan);
    let chosen_ledger = ledger(w.model, w.cluster, w.training, &chosen_plan);
    let files = report::render_files(&ReportInputs {
        report: w.report,
        cluster: w.cluster,
        labels: w.labels,
        evaluated: w.evaluated,
        chosen_in_evaluated,
        chosen: w.chosen,
        chosen_label: w.chosen_label,
        chosen_ledger: &chosen_ledger,
        notes: w.notes,
    })
    .map_err(|e| anyhow!("{} {}: drawing the figures failed: {e}", w.flag, w.dir))?;
    write_dir(w.flag, w.dir, &files.files)?;
    Ok(files.files.len())
}
