//! How far off a plan's peak memory can be, and whether the plan still fits at that: tpsim's own
//! memory residuals on the published runs that state their peak memory (the `memory` bands of
//! validation/residual_bands.json, `uncertainty::memory_band_for`). A plan whose memory, raised
//! by the 95th percentile of those residuals, passes the GPU's memory is one that may not run as
//! planned; the margin is said with the `--max-memory-gib` that keeps it.

use crate::cost::Estimate;
use crate::training::TrainingFramework;
use crate::uncertainty::{Band, memory_band_for};
use crate::units::GIB;

/// A plan's memory at the high end of tpsim's memory error: the 95th percentile of
/// ln(measured / predicted) peak memory over the band's runs.
pub fn total_bytes_high(estimate: &Estimate, band: &Band) -> f64 {
    estimate.memory.total_bytes.0 * band.log_ratio_q95.exp()
}

/// A plan's memory at the low end of tpsim's memory error (the 5th percentile of the same
/// residuals): with [`total_bytes_high`], the range report's memory.svg draws as a box, as
/// step_time.svg draws the step's 5th–95th percentile.
pub fn total_bytes_low(estimate: &Estimate, band: &Band) -> f64 {
    estimate.memory.total_bytes.0 * band.log_ratio_q05.exp()
}

/// Whether a plan's GPU memory fits its capacity and `device_memory_bytes` at the high end of
/// tpsim's memory error too (only the capacity where no run states its peak memory: there is no
/// margin to keep). Host memory is not looked at.
pub fn gpu_keeps_margin(
    estimate: &Estimate,
    device_memory_bytes: f64,
    framework: TrainingFramework,
) -> bool {
    estimate.memory.fits && past_margin(estimate, device_memory_bytes, framework).is_none()
}

/// Where a plan's memory at the high end of tpsim's memory error passes `device_memory_bytes`:
/// the band it was raised by, whether that band is the framework's own, and the raised bytes.
/// None where it stays below, or where no run states its peak memory.
fn past_margin(
    estimate: &Estimate,
    device_memory_bytes: f64,
    framework: TrainingFramework,
) -> Option<(&'static Band, bool, f64)> {
    past_margin_bytes(
        estimate.memory.total_bytes.0,
        device_memory_bytes,
        framework,
    )
}

/// [`past_margin`] for a plan's peak memory in bytes.
fn past_margin_bytes(
    total_bytes: f64,
    device_memory_bytes: f64,
    framework: TrainingFramework,
) -> Option<(&'static Band, bool, f64)> {
    let (band, own) = memory_band_for(framework)?;
    let high = total_bytes * band.log_ratio_q95.exp();
    (high > device_memory_bytes).then_some((band, own, high))
}

/// The `--max-memory-gib` that keeps the margin on a GPU of `device_memory_bytes`, rounded down
/// to a tenth: a limit that keeps the margin, not one a rounding lets past it.
fn keep_gib(band: &Band, device_memory_bytes: f64) -> f64 {
    (device_memory_bytes * (-band.log_ratio_q95).exp() / GIB * 10.0).floor() / 10.0
}

/// What the band rests on, in words: its runs, and when they are another framework's, that no
/// run of this one states its peak memory.
fn basis_words(band: &Band, own: bool, framework: TrainingFramework) -> String {
    if own {
        format!("{} {}", band.runs, band.basis)
    } else {
        format!(
            "{} {}, none of them {}",
            band.runs,
            band.basis,
            // The name the user gave `--framework` (DeepSpeed's residual band is named
            // "megatron-deepspeed", which no flag spells).
            framework.as_str()
        )
    }
}

/// The line under a plan table or breakdown when `first` (the best plan, `#1` or `this plan`)
/// would not fit in the GPU's `device_memory_bytes` at the high end of tpsim's memory error: what
/// it would need, on which runs, and the `--max-memory-gib` that keeps the margin. None when it
/// fits with the margin, when the plan does not fit at all (said elsewhere), or when no run
/// states its peak memory.
pub fn margin_line(
    estimate: &Estimate,
    device_memory_bytes: f64,
    framework: TrainingFramework,
    first: &str,
) -> Option<String> {
    if !estimate.fits() {
        return None;
    }
    let (band, own, high) = past_margin(estimate, device_memory_bytes, framework)?;
    let keep_gib = keep_gib(band, device_memory_bytes);
    Some(format!(
        "memory range: {first} needs {:.1} of {:.1} GiB; on {}, {}: --max-memory-gib {keep_gib:.1} keeps that margin",
        estimate.memory.total_bytes.0 / GIB,
        device_memory_bytes / GIB,
        basis_words(band, own, framework),
        peaks_words(band, high),
    ))
}

/// One point's memory range, as a sweep's JSON and CSV carry it beside its best plan's memory:
/// the numbers its table's `memory range:` line ([`sweep_margin_line`]) is made of, from the same
/// band and the same rounding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointMargin {
    /// The peak memory at the high end of tpsim's memory error ([`total_bytes_high`]).
    pub total_bytes_high: f64,
    /// Where that passes the GPU's memory: the `--max-memory-gib` that keeps the margin.
    pub max_memory_gib_for_margin: Option<f64>,
}

/// [`PointMargin`] of a plan of `total_bytes` on a GPU of `device_memory_bytes`; None where no run
/// states its peak memory (no band to raise it by).
pub fn point_margin(
    total_bytes: f64,
    device_memory_bytes: f64,
    framework: TrainingFramework,
) -> Option<PointMargin> {
    let (band, _) = memory_band_for(framework)?;
    Some(PointMargin {
        total_bytes_high: total_bytes * band.log_ratio_q95.exp(),
        max_memory_gib_for_margin: past_margin_bytes(total_bytes, device_memory_bytes, framework)
            .map(|(band, _, _)| keep_gib(band, device_memory_bytes)),
    })
}

/// What a plan's `memory.total_bytes_high` rests on, in words (`plan`'s JSON
/// `memory.total_bytes_range_basis`); None where no run states its peak memory.
pub fn range_basis(framework: TrainingFramework) -> Option<String> {
    let (band, own) = memory_band_for(framework)?;
    Some(format!(
        "95th percentile of tpsim's peak-memory error on {}",
        basis_words(band, own, framework)
    ))
}

/// The line under a sweep's table when the best plan at some points would not fit in its GPU at
/// the high end of tpsim's memory error, as `plan`'s [`margin_line`] says it under its table: a
/// sweep picked plans 0.1 to 3 GiB under the capacity (GPT-3 175B on 16 to 128 H100 nodes) and
/// said nothing, while `plan` at the same point says the margin is gone. `points` are each
/// point's label (`nodes 16`), its best plan's peak memory and its GPU's memory, in bytes. None
/// when every point keeps the margin, or when no run states its peak memory.
pub fn sweep_margin_line(
    points: &[(String, f64, f64)],
    framework: TrainingFramework,
) -> Option<String> {
    let mut basis = None;
    let mut short: Vec<String> = Vec::new();
    // Each GPU's limit with the points it holds, in the order first met.
    let mut keeps: Vec<(f64, Vec<&str>)> = Vec::new();
    for (label, total, device) in points {
        let Some((band, own, high)) = past_margin_bytes(*total, *device, framework) else {
            continue;
        };
        basis.get_or_insert((band, own));
        short.push(format!(
            "{label} ({:.1} of {:.1} GiB, {:.1} there)",
            total / GIB,
            device / GIB,
            high / GIB
        ));
        let keep = keep_gib(band, *device);
        match keeps.iter_mut().find(|(k, _)| *k == keep) {
            Some((_, labels)) => labels.push(label),
            None => keeps.push((keep, vec![label])),
        }
    }
    let (band, own) = basis?;
    let fix = match keeps.as_slice() {
        [(keep, _)] => format!("--max-memory-gib {keep:.1} keeps that margin"),
        _ => format!(
            "--max-memory-gib keeps that margin at {} (one sweep per value)",
            keeps
                .iter()
                .map(|(keep, labels)| format!("{keep:.1} for {}", labels.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let short = match short.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => return None,
    };
    Some(format!(
        "memory range: on {}, measured peaks ran up to {:.0}% above tpsim's (95th percentile); at that high end the best plan would not fit at {short}: {fix}",
        basis_words(band, own, framework),
        100.0 * (band.log_ratio_q95.exp() - 1.0),
    ))
}

/// "measured peaks ran up to 13% above tpsim's (95th percentile), 88.4 GiB here": the margin in
/// the words of [`margin_line`], for a plan whose memory at that high end is `high` bytes.
fn peaks_words(band: &Band, high: f64) -> String {
    format!(
        "measured peaks ran up to {:.0}% above tpsim's (95th percentile), {:.1} GiB here",
        100.0 * (band.log_ratio_q95.exp() - 1.0),
        high / GIB,
    )
}

/// For a plan a note names beside the table (`plan`'s offload note): "no memory margin: measured
/// peaks ran up to 13% above tpsim's (95th percentile), 192.7 GiB here", in [`margin_line`]'s
/// words, when it fits but not at the high end of tpsim's memory error; None otherwise.
pub fn no_margin_words(
    estimate: &Estimate,
    device_memory_bytes: f64,
    framework: TrainingFramework,
) -> Option<String> {
    if !estimate.fits() {
        return None;
    }
    let (band, _, high) = past_margin(estimate, device_memory_bytes, framework)?;
    Some(format!("no memory margin: {}", peaks_words(band, high)))
}

/// Writes a plan's memory range into its JSON object beside `memory.total_bytes`:
/// `memory.total_bytes_high` and `memory.total_bytes_range_basis`, where a band exists.
pub fn annotate(value: &mut serde_json::Value, estimate: &Estimate, framework: TrainingFramework) {
    let (Some((band, _)), Some(basis)) = (memory_band_for(framework), range_basis(framework))
    else {
        return;
    };
    if let Some(memory) = value.get_mut("memory").and_then(|m| m.as_object_mut()) {
        memory.insert(
            "total_bytes_high".into(),
            total_bytes_high(estimate, band).into(),
        );
        memory.insert("total_bytes_range_basis".into(), basis.into());
    }
}
