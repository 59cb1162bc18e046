//! One run's prediction (`predict` → `ModernPrediction`): tokens/s per GPU against the
//! published, or why tpsim leaves the run out (`excluded`).

use serde::Serialize;

use super::{ModernRun, RUN_GPUS, bundled_hybrid, hardware_profile, plan_run};
use crate::specs;

/// One run's prediction, or why tpsim cannot express it.
#[derive(Debug, Clone, Serialize)]
pub struct ModernPrediction {
    pub id: String,
    /// The source family: dgxc, nemo, mbridge, torchtitan, automodel.
    pub source: String,
    pub gpu: String,
    /// The bundled profile the run is planned on (`hardware_profile`), if any.
    pub gpu_profile: Option<String>,
    pub moe: bool,
    /// The source's tokens/s per GPU (`results.tokens_per_s_per_gpu`); None where it states none
    /// (NeMo's long-context table gives step times only), which the table writes "-" and the
    /// JSON null: read as 0, 17 rows of validation/modern_runs.yaml said "published 0".
    pub published_tokens_per_s_per_gpu: Option<f64>,
    pub predicted_tokens_per_s_per_gpu: Option<f64>,
    /// The quantity `error` compares: "tokens_per_s_per_gpu", so a positive error is a prediction
    /// faster than published (the SC'21/BLOOM file's rows compare step times, `ERROR_OF_STEP_S`,
    /// where a negative one is).
    pub error_of: &'static str,
    /// predicted / published − 1.
    pub error: Option<f64>,
    /// The chosen plan's settings the source left open, or why nothing was predicted.
    pub note: String,
    /// Peak memory per GPU the source reports, in bytes (the runs file's `peak_memory_gib` ×
    /// 2^30), where it does; in bytes as `plan`'s JSON says memory (`memory.total_bytes`).
    pub published_peak_memory_bytes: Option<f64>,
    /// tpsim's memory on the most loaded GPU of the predicted plan: `plan`'s
    /// `memory.total_bytes` for it.
    pub predicted_memory_bytes: Option<f64>,
    /// predicted / published − 1 for the memory, where both exist.
    pub memory_error: Option<f64>,
}

/// Why a run is left out, or None when tpsim can express it.
pub fn excluded(run: &ModernRun) -> Option<String> {
    if run.task != "pretrain" {
        return Some(format!("{} run (packed sequences, other FLOPs)", run.task));
    }
    if run.id.contains("maxtext") {
        return Some("MaxText (JAX), not a framework tpsim models".into());
    }
    if let Some(flag) = flagged(run) {
        return Some(format!("flagged {flag} in the source"));
    }
    if hardware_profile(&run.hardware).is_none() {
        // The names `gpu_profile` knows, and the one meant where the name is one in other case
        // or a profile's (`gpu: gb200`, `gpu: h100-sxm-80g`).
        let upper = run.hardware.gpu.to_ascii_uppercase();
        let known: Vec<&str> = RUN_GPUS.iter().map(|(gpu, _)| *gpu).collect();
        let hint = known
            .iter()
            .rev()
            .find(|name| upper.starts_with(**name))
            .map_or(String::new(), |name| format!("; write gpu: {name}"));
        return Some(format!(
            "GPU {} has no profile (hardware.gpu names one of {}, as written){hint}",
            run.hardware.gpu,
            known.join(", ")
        ));
    }
    if run.results.tokens_per_s_per_gpu.is_none() {
        return Some("no tokens/s published".into());
    }
    let m = &run.model;
    let p = &run.plan;
    let bundled_hybrid = run.model_key.as_deref().and_then(bundled_hybrid).is_some();
    if !bundled_hybrid
        && (m.layers.is_none() || m.hidden.is_none() || m.heads.is_none() || m.seq_len.is_none())
    {
        return Some("model shape not stated".into());
    }
    if p.tp.is_none() || p.pp.is_none() || p.dp.is_none() || p.gbs.is_none() {
        return Some("plan not stated".into());
    }
    if p.precision_raw
        .as_deref()
        .is_some_and(|raw| raw.contains("rowwise"))
    {
        // torchao's row-wise scaled float8 (one scale per row of each operand, its own GEMM
        // kernel): not the per-tensor scaling tpsim's fp8 models; in this very source it runs
        // slower than bf16 (asyncTP_llama3_h100_2025-06_torchtitan.md).
        return Some("float8 with row-wise scaling: tpsim's fp8 is per-tensor scaling".into());
    }
    None
}

/// The flag that says the source's numbers for the run disagree, if it has one.
pub(super) fn flagged(run: &ModernRun) -> Option<&String> {
    run.flags
        .iter()
        .find(|f| f.contains("source_inconsistency") || f.contains("SUSPECT"))
}

/// Whether the run trains a mixture-of-experts model: its stated `model.moe`, or the experts of the
/// bundled hybrid model it is priced as (whose shape the runs file does not state).
fn trains_experts(run: &ModernRun) -> bool {
    run.model.moe.as_ref().is_some_and(|v| !v.is_null())
        || run
            .model_key
            .as_deref()
            .and_then(bundled_hybrid)
            .and_then(|name| specs::load_bundled_model(name).ok())
            .is_some_and(|model| model.moe.is_some())
}

/// Predicts one run with its published plan pinned.
pub fn predict(run: &ModernRun) -> ModernPrediction {
    let published = run.results.tokens_per_s_per_gpu;
    let source = run.id.split('-').next().unwrap_or("").to_string();
    let mut out = ModernPrediction {
        id: run.id.clone(),
        source,
        gpu: run.hardware.gpu.clone(),
        gpu_profile: hardware_profile(&run.hardware).map(str::to_string),
        moe: trains_experts(run),
        published_tokens_per_s_per_gpu: published,
        predicted_tokens_per_s_per_gpu: None,
        error_of: "tokens_per_s_per_gpu",
        error: None,
        note: String::new(),
        published_peak_memory_bytes: run
            .results
            .peak_memory_gib
            .map(|gib| gib * crate::units::GIB)
            .or(run.results.peak_memory_gb.map(|gb| gb * 1e9)),
        predicted_memory_bytes: None,
        memory_error: None,
    };
    match predict_tokens(run) {
        Ok((tokens, memory_bytes, note)) => {
            out.predicted_tokens_per_s_per_gpu = Some(tokens);
            // `excluded` leaves out a run without a published rate, so every predicted one has it.
            out.error = published.map(|published| tokens / published - 1.0);
            out.predicted_memory_bytes = Some(memory_bytes);
            out.memory_error = out
                .published_peak_memory_bytes
                .filter(|m| *m > 0.0)
                .map(|m| memory_bytes / m - 1.0);
            out.note = note;
        }
        Err(why) => out.note = why,
    }
    out
}

fn predict_tokens(run: &ModernRun) -> Result<(f64, f64, String), String> {
    let planned = plan_run(run)?;
    Ok((
        planned.estimate.tokens_per_s / f64::from(planned.cluster.total_gpus()),
        planned.estimate.memory.total_bytes.0,
        planned.note,
    ))
}
