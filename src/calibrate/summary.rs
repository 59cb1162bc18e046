//! Tables for `calibrate` and `validate` (the `--format table` output); JSON and YAML serialise
//! the same values with serde.

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::validate::ValidationRow;
use crate::cluster::GpuProfile;
use crate::cluster::calibration::Calibration;
use crate::units::show_measured;

fn table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(header);
    t
}

/// Three decimals, or three significant digits where three decimals would print 0.
fn fine(value: f64) -> String {
    show_measured(value, 3)
}

fn ci(value: f64, low: f64, high: f64) -> String {
    if value >= super::run::UNBOUNDED {
        format!("unbounded [{}, unbounded]", fine(low))
    } else if high >= super::run::UNBOUNDED {
        format!("{} [{}, unbounded]", fine(value), fine(low))
    } else {
        format!("{} [{}, {}]", fine(value), fine(low), fine(high))
    }
}

/// What `tpsim calibrate` prints: GEMMs at shard shapes, the fitted curve, the copy, the
/// collectives with their α-β fits, and the notes.
pub fn calibration_summary(profile: &GpuProfile, calibration: &Calibration) -> String {
    let mut out = format!(
        "calibrated on {} ({} backend, GEMMs in {}); peak {} TFLOP/s{}\n\n",
        calibration.device,
        calibration.backend,
        calibration.gemm_dtype,
        fine(profile.peak_bf16_tflops),
        if calibration.backend == "cpu" {
            " (best measured: the CPU has no datasheet peak)"
        } else {
            " (datasheet)"
        }
    );
    let mut gemms = table(vec![
        "GEMM",
        "m x n x k",
        "median us",
        "min-max us",
        "TFLOP/s",
        "of peak %",
    ]);
    for g in &calibration.gemm_shapes {
        gemms.add_row(vec![
            g.label.clone(),
            format!("{} x {} x {}", g.m, g.n, g.k),
            format!("{:.1}", g.median_us),
            format!("{:.1}-{:.1}", g.min_us, g.max_us),
            fine(g.tflops),
            show_measured(g.efficiency * 100.0, 1),
        ]);
    }
    out.push_str(&format!("{gemms}\n"));
    let f = &calibration.gemm_fit;
    out.push_str(&format!(
        "GEMM curve (t = latency + flops/throughput + bytes/bandwidth, {} sweep points, R² {:.4}): latency us {}, throughput TFLOP/s {}, bandwidth GB/s {}\n",
        calibration.gemm_sweep.len(),
        f.r_squared,
        ci(f.latency_us.value, f.latency_us.ci95_low, f.latency_us.ci95_high),
        ci(
            f.throughput_tflops.value,
            f.throughput_tflops.ci95_low,
            f.throughput_tflops.ci95_high
        ),
        f.bandwidth_gb_per_s
            .map_or("dropped (fitted <= 0)".to_string(), |b| ci(b.value, b.ci95_low, b.ci95_high)),
    ));
    let c = &calibration.copy;
    out.push_str(&format!(
        "copy: {} MiB in {:.1} us (min {:.1}, max {:.1}): {} GB/s (2 x bytes / time)\n\n",
        c.bytes >> 20,
        c.median_us,
        c.min_us,
        c.max_us,
        show_measured(c.gb_per_s, 1)
    ));
    if calibration.collectives.is_empty() {
        out.push_str("collectives: not measured (one device)\n");
    } else {
        let mut coll = table(vec![
            "collective",
            "ranks",
            "alpha us [95% CI]",
            "bus GB/s [95% CI]",
            "R²",
            "busbw at largest GB/s",
            "worst residual %",
        ]);
        for fit in &calibration.collectives {
            let last = fit.points.last();
            let worst = fit
                .points
                .iter()
                .map(|p| p.relative_residual.abs())
                .fold(0.0, f64::max);
            coll.add_row(vec![
                format!("{:?}", fit.collective),
                fit.ranks.to_string(),
                ci(
                    fit.alpha_us.value,
                    fit.alpha_us.ci95_low,
                    fit.alpha_us.ci95_high,
                ),
                ci(
                    fit.bus_gb_per_s.value,
                    fit.bus_gb_per_s.ci95_low,
                    fit.bus_gb_per_s.ci95_high,
                ),
                format!("{:.4}", fit.r_squared),
                last.map_or("-".into(), |p| show_measured(p.busbw_gb_per_s, 2)),
                format!("{:.1}", worst * 100.0),
            ]);
        }
        out.push_str(&format!("{coll}\n"));
    }
    out.push_str(&format!(
        "profile: hbm {} GB/s, intra-node link {} GB/s bus bandwidth, latency {:.2} us per ring step, gemm_efficiency {}\n",
        show_measured(profile.hbm_bandwidth_gb_per_s, 1),
        show_measured(profile.nvlink_gb_per_s * profile.nvlink_efficiency, 2),
        profile.nvlink_latency_us,
        fine(profile.gemm_efficiency)
    ));
    for note in &calibration.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// What `tpsim validate` prints: one row per case, then the per-tensor errors and notes.
pub fn validation_summary(rows: &[ValidationRow]) -> String {
    let mut t = table(vec![
        "tp",
        "sp",
        "mb",
        "ranks",
        "layer ms pred",
        "layer ms meas",
        "err %",
        "comm ms pred",
        "comm ms meas",
        "err %",
        "wire B/rank",
        "model B/rank",
        "numerics",
    ]);
    for r in rows {
        t.add_row(vec![
            r.tp.to_string(),
            if r.sequence_parallel { "yes" } else { "no" }.into(),
            r.micro_batch.to_string(),
            r.ranks_run.to_string(),
            format!("{:.3}", r.predicted_layer_ms),
            format!("{:.3}", r.measured_layer_ms),
            r.layer_error
                .map_or_else(|| "-".into(), |e| format!("{:+.1}", e * 100.0)),
            format!("{:.3}", r.predicted_comm_ms),
            format!("{:.3}", r.measured_comm_ms),
            r.comm_error
                .map_or_else(|| "-".into(), |e| format!("{:+.1}", e * 100.0)),
            r.wire_bytes_per_rank.to_string(),
            format!(
                "{}{}",
                r.model_wire_bytes_per_rank,
                if r.ranks_run != r.tp {
                    " (not compared: fewer ranks than tp)"
                } else if r.bytes_match {
                    " (=)"
                } else {
                    " (DIFFERS)"
                }
            ),
            match (r.max_relative_error, r.numerics_ok) {
                (Some(e), Some(true)) => format!("ok {e:.1e} <= {:.0e}", r.tolerance),
                (Some(e), _) => format!("FAIL {e:.1e} > {:.0e}", r.tolerance),
                (None, _) => "not checked".into(),
            },
        ]);
    }
    let mut out = format!("{t}\n");
    for r in rows {
        let errs: Vec<String> = r
            .tensor_errors
            .iter()
            .map(|(name, e)| format!("{name} {e:.1e}"))
            .collect();
        if !errs.is_empty() {
            out.push_str(&format!(
                "tp {} sp {}: max |sharded - unsharded| / max |unsharded|: {}\n",
                r.tp,
                r.sequence_parallel,
                errs.join(", ")
            ));
        }
        for note in &r.notes {
            out.push_str(&format!("tp {}: {note}\n", r.tp));
        }
    }
    let passed = rows.iter().filter(|r| r.passed()).count();
    out.push_str(&format!(
        "{passed} of {} cases passed (numerics within tolerance and wire bytes equal to the model's)\n",
        rows.len()
    ));
    // The times are compared, not judged: the verdict above is about what the layer computes and
    // sends. Within 25% (the current-stack accuracy bound of tests/modern_accuracy.rs) is counted so
    // a large miss is not read as validated.
    let close = |e: f64| e.is_finite() && e.abs() <= TIMING_BOUND;
    let layer_close = rows
        .iter()
        .filter(|r| r.layer_error.is_some_and(close))
        .count();
    let comm: Vec<f64> = rows.iter().filter_map(|r| r.comm_error).collect();
    out.push_str(&format!(
        "timing (compared, not part of the verdict): layer time within {:.0}% of the prediction in {layer_close} of {} cases, communication in {} of {}{}\n",
        100.0 * TIMING_BOUND,
        rows.len(),
        comm.iter().filter(|e| close(**e)).count(),
        comm.len(),
        if layer_close < rows.len() {
            "; a miss means the profile behind the prediction does not describe the machine measured (calibrate it: tpsim calibrate), or that the timings are noisy (rerun with more --reps; on the CPU backend, with no more ranks than cores, which the header line counts)"
        } else {
            ""
        }
    ));
    out
}

/// How close a measured time must be to the prediction to count as agreeing in the timing line.
const TIMING_BOUND: f64 = 0.25;
