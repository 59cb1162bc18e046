//! `tpsim calibrate`: what is measured, in which order, and how the measurements become a
//! calibrated hardware profile.
//!
//! 1. GEMMs at the exact shard shapes of the model for every TP degree: QKV, output projection,
//!    MLP up and MLP down (`cost::compute::layer_gemms`), forward and both backward GEMMs
//!    (input gradient (m×n)·(n×k), weight gradient (k×m)·(m×n); Narayanan et al. 2021 §3.1).
//! 2. A size sweep, fitted to t = latency + flops/throughput + bytes/bandwidth (`fit::gemm_curve`).
//! 3. Device memory bandwidth: a large copy, 2 × bytes / time (CUDA samples' `bandwidthTest`).
//! 4. All-reduce, all-gather, reduce-scatter at every group size from 2 to the device count and
//!    send/recv between two devices, message sizes doubling; α-β fit per collective and group size
//!    on wire bytes, so 1/β is nccl-tests' bus bandwidth (`doc/PERFORMANCE.md`).
//!
//! Every measurement: warm-ups, timed repetitions, the median kept with min and max.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::fit;
use super::{CalibrationError, GemmShape, KernelTimer, Reps, Timing};
use crate::cluster::GpuProfile;
use crate::cluster::calibration::{
    Calibration, CollectiveFit, CollectivePoint, CopyMeasurement, Estimated, GemmFit,
    GemmMeasurement,
};
use crate::cost::comm::Collective;
use crate::cost::compute::layer_gemms;
use crate::model::Model;

/// What to measure.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    pub model: Model,
    pub micro_batch: u32,
    pub tp_degrees: Vec<u32>,
    /// Edge lengths of the sweep; shapes (m, n, k = n) for every pair.
    pub sweep: Vec<usize>,
    /// Message sizes (bytes of the full tensor).
    pub messages: Vec<u64>,
    pub copy_bytes: u64,
    pub reps: Reps,
    /// The datasheet profile whose unmeasured numbers (network, framework constants, and on GPUs
    /// the peak) are kept.
    pub base: GpuProfile,
    pub base_reference: String,
    pub unix_time_s: u64,
    /// Memory of one device (GPU memory, or the CPU's share per rank), in GiB, when known.
    pub device_memory_gib: Option<f64>,
}

/// Message sizes from `min` to `max` bytes, doubling.
pub fn message_sizes(min: u64, max: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut s = min.max(2);
    while s <= max {
        sizes.push(s);
        s = s.saturating_mul(2);
    }
    sizes
}

fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} calibrating [{bar:30}] {pos}/{len} {msg} ({elapsed})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn measurement(label: String, shape: GemmShape, timing: Timing) -> GemmMeasurement {
    let tflops = shape.flops() / timing.median_s / 1e12;
    GemmMeasurement {
        label,
        m: shape.m as u64,
        n: shape.n as u64,
        k: shape.k as u64,
        batch: shape.batch as u64,
        median_us: timing.median_s * 1e6,
        min_us: timing.min_s * 1e6,
        max_us: timing.max_s * 1e6,
        reps: timing.reps,
        tflops,
        efficiency: 0.0,
    }
}

/// The GEMMs of the four TP-split matrices of one layer at degree `tp`: (name, pass, shape).
pub fn shard_gemms(model: &Model, micro_batch: u32, tp: u32) -> Vec<(String, GemmShape)> {
    let gemms = layer_gemms(model, micro_batch, model.seq_len, tp);
    let names = [(0, "qkv"), (3, "proj"), (4, "mlp_up"), (5, "mlp_down")];
    let mut out = Vec::new();
    for (index, name) in names {
        let g = gemms[index];
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let fwd = GemmShape { m, n, k, batch: 1 };
        let dgrad = GemmShape {
            m,
            n: k,
            k: n,
            batch: 1,
        };
        let wgrad = GemmShape {
            m: k,
            n,
            k: m,
            batch: 1,
        };
        out.push((format!("tp{tp} {name} fwd"), fwd));
        out.push((format!("tp{tp} {name} dgrad"), dgrad));
        out.push((format!("tp{tp} {name} wgrad"), wgrad));
    }
    out
}

fn estimated(e: Estimated, f: impl Fn(f64) -> f64) -> Estimated {
    let (a, b) = (f(e.ci95_low), f(e.ci95_high));
    Estimated {
        value: f(e.value),
        ci95_low: a.min(b),
        ci95_high: a.max(b),
    }
}

/// A time per unit (latency, seconds per byte) as the rate or time it stands for, through `f`,
/// with the physics the fit does not know: neither can be negative. A time fitted below zero is
/// zero, and an interval reaching below zero keeps zero as its low end; a rate from a reciprocal whose interval reaches zero has
/// no upper end (`UNBOUNDED`), not a negative one; and where the time itself fitted to zero or
/// below (the times did not grow with the size: noise), the rate is unbounded too, not negative.
fn estimated_nonnegative(e: Estimated, f: impl Fn(f64) -> f64, reciprocal: bool) -> Estimated {
    if reciprocal && e.ci95_low <= 0.0 {
        return Estimated {
            value: if e.value > 0.0 { f(e.value) } else { UNBOUNDED },
            ci95_low: if e.ci95_high > 0.0 {
                f(e.ci95_high)
            } else {
                0.0
            },
            ci95_high: UNBOUNDED,
        };
    }
    let fitted = estimated(e, f);
    Estimated {
        value: fitted.value.max(0.0),
        ci95_low: fitted.ci95_low.max(0.0),
        ci95_high: fitted.ci95_high.max(0.0),
    }
}

/// The upper end of an interval with none: finite, so calibration files stay readable, and printed
/// as "unbounded" (`calibrate::summary`).
pub const UNBOUNDED: f64 = f64::MAX;

/// The GEMMs a calibration times: the model's shard shapes at each TP degree (labelled), and the
/// square-ish size sweep.
fn gemms_to_time(opts: &CalibrateOptions) -> (Vec<(String, GemmShape)>, Vec<GemmShape>) {
    let shapes = opts
        .tp_degrees
        .iter()
        .flat_map(|&t| shard_gemms(&opts.model, opts.micro_batch, t))
        .collect();
    let sweep = opts
        .sweep
        .iter()
        .flat_map(|&m| {
            opts.sweep.iter().map(move |&n| GemmShape {
                m,
                n,
                k: n,
                batch: 1,
            })
        })
        .collect();
    (shapes, sweep)
}

/// Refuses a GEMM this backend cannot run, before anything is measured or said (the command
/// calls it before it names the backend, so such input gets its one-line error alone).
pub fn check_runnable(
    timer: &dyn KernelTimer,
    opts: &CalibrateOptions,
) -> Result<(), CalibrationError> {
    let (shapes, sweep) = gemms_to_time(opts);
    for shape in shapes.iter().map(|(_, shape)| shape).chain(&sweep) {
        timer.check_gemm(*shape)?;
    }
    Ok(())
}

/// Runs the whole calibration and returns the calibrated profile.
pub fn calibrate(
    timer: &mut dyn KernelTimer,
    opts: &CalibrateOptions,
) -> Result<GpuProfile, CalibrationError> {
    let devices = timer.devices();
    let (shapes, sweep) = gemms_to_time(opts);
    let mut collective_runs: Vec<(Collective, usize)> = Vec::new();
    for ranks in 2..=devices {
        for c in [
            Collective::AllReduce,
            Collective::AllGather,
            Collective::ReduceScatter,
        ] {
            collective_runs.push((c, ranks));
        }
    }
    if devices >= 2 {
        collective_runs.push((Collective::SendRecv, 2));
    }
    // Refuse what this backend cannot run before measuring anything.
    check_runnable(timer, opts)?;
    let total = shapes.len() + sweep.len() + 1 + collective_runs.len() * opts.messages.len();
    let bar = progress(total as u64);

    let mut gemm_shapes = Vec::new();
    for (label, shape) in &shapes {
        bar.set_message(label.clone());
        let timing = timer.time_gemm(*shape, opts.reps)?;
        gemm_shapes.push(measurement(label.clone(), *shape, timing));
        bar.inc(1);
    }
    let mut gemm_sweep = Vec::new();
    for shape in &sweep {
        bar.set_message(format!("sweep {}x{}x{}", shape.m, shape.n, shape.k));
        let timing = timer.time_gemm(*shape, opts.reps)?;
        gemm_sweep.push(measurement("sweep".into(), *shape, timing));
        bar.inc(1);
    }
    bar.set_message("copy");
    let copy = timer.time_copy(opts.copy_bytes, opts.reps)?;
    bar.inc(1);
    let copy = CopyMeasurement {
        bytes: opts.copy_bytes,
        median_us: copy.median_s * 1e6,
        min_us: copy.min_s * 1e6,
        max_us: copy.max_s * 1e6,
        gb_per_s: 2.0 * opts.copy_bytes as f64 / copy.median_s / 1e9,
    };

    let mut collectives = Vec::new();
    for &(collective, ranks) in &collective_runs {
        let mut timings = Vec::new();
        for &bytes in &opts.messages {
            bar.set_message(format!("{collective:?} x{ranks} {bytes} B"));
            timings.push((
                bytes,
                timer.time_collective(collective, ranks, bytes, opts.reps)?,
            ));
            bar.inc(1);
        }
        collectives.push(fit_collective(collective, ranks as u32, &timings)?);
    }
    bar.finish_and_clear();

    // Fit the efficiency curve on the sweep.
    let element_bytes = timer.gemm_element_bytes();
    let flops: Vec<f64> = sweep.iter().map(GemmShape::flops).collect();
    let bytes: Vec<f64> = sweep.iter().map(|s| s.elements() * element_bytes).collect();
    let times: Vec<f64> = gemm_sweep.iter().map(|g| g.median_us * 1e-6).collect();
    let (curve, kept_bytes) =
        fit::gemm_curve(&flops, &bytes, &times).map_err(|source| CalibrationError::Fit {
            what: "the GEMM sweep".into(),
            source,
        })?;
    let c = &curve.coefficients;
    // Seconds per FLOP must be positive: a sweep whose larger GEMMs did not take longer measured
    // noise, and its fitted throughput would be negative or infinite.
    if c[1].value.is_nan() || c[1].value <= 0.0 {
        return Err(CalibrationError::Input(format!(
            "the GEMM sweep's times do not grow with its FLOPs (--sweep {}: the fitted time per FLOP is {:e} s), so they measured noise, not the device; give larger or more --sweep edges (e.g. --sweep 256,512,1024) or more --reps",
            sweep
                .iter()
                .map(|s| format!("{}", s.m))
                .collect::<Vec<_>>()
                .join(","),
            c[1].value
        )));
    }
    // A least-squares intercept can come out below zero on a noisy sweep; a fixed cost per GEMM
    // cannot, and a negative one would make small GEMMs take negative time. Clamp it at zero.
    let latency_clamped = c[0].value < 0.0;
    let gemm_fit = GemmFit {
        latency_us: estimated(c[0], |v| (v * 1e6).max(0.0)),
        throughput_tflops: estimated_nonnegative(c[1], |v| 1.0 / v / 1e12, true),
        bandwidth_gb_per_s: kept_bytes.then(|| estimated(c[2], |v| 1.0 / v / 1e9)),
        r_squared: curve.r_squared,
        relative_residuals: curve.relative_residuals.clone(),
        element_bytes,
    };

    let best_tflops = gemm_shapes
        .iter()
        .chain(&gemm_sweep)
        .map(|g| g.tflops)
        .fold(0.0, f64::max);
    let is_gpu = timer.kind() == super::BackendKind::Cuda;
    let peak = if is_gpu {
        opts.base.peak_bf16_tflops
    } else {
        best_tflops
    };
    if best_tflops > peak {
        return Err(CalibrationError::Input(format!(
            "--gpu {}: the best GEMM measured, {best_tflops:.1} TFLOP/s, is above its datasheet peak_bf16_tflops {peak}, so it is not the GPU measured ({}); give the --gpu profile of this GPU",
            opts.base_reference,
            timer.device_name()
        )));
    }
    for g in gemm_shapes.iter_mut().chain(gemm_sweep.iter_mut()) {
        g.efficiency = g.tflops / peak;
    }

    let mut notes = Vec::new();
    if latency_clamped {
        notes.push(format!(
            "the GEMM curve's fitted latency was negative ({:.2} us) and is kept as 0: a fixed cost per GEMM cannot be negative",
            c[0].value * 1e6
        ));
    }
    let mut profile = opts.base.clone();
    let device = timer.device_name();
    profile.name = format!("calibrated-{}", timer.kind().as_str());
    profile.description = Some(format!(
        "Measured by `tpsim calibrate --backend {}` on {device}; unmeasured numbers from {}",
        timer.kind().as_str(),
        opts.base_reference
    ));
    profile.peak_bf16_tflops = peak;
    profile.gemm_efficiency = (best_tflops / peak).min(1.0);
    // A GPU's short calibration runs are burst-clock rates, as the datasheet profile's MAMF is, so
    // its sustained share still applies; a CPU has no boost clock to fall from.
    if !is_gpu {
        profile.sustained_matmul_fraction = None;
    }
    // Only bf16 GEMMs (f32 on the CPU twin) are measured. A datasheet FP8 or FP4 peak kept beside
    // them would time low-precision GEMMs on the datasheet while every bf16 GEMM is measured, on
    // the CPU twin at 20,000x its measured speed (MFU over 200%). Without them, `--precision
    // fp8|mxfp8|nvfp4` on this profile is refused, naming bf16.
    let unmeasured: Vec<String> = [
        ("peak_fp8_tflops", profile.peak_fp8_tflops.take()),
        ("peak_fp4_tflops", profile.peak_fp4_tflops.take()),
        ("fp8_gemm_efficiency", profile.fp8_gemm_efficiency.take()),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|v| format!("{key} {v}")))
    .collect();
    profile.hbm_bandwidth_gb_per_s = copy.gb_per_s;
    profile.hbm_efficiency = 1.0;
    profile.gpus_per_node = devices as u32;
    if let Some(gib) = opts.device_memory_gib {
        profile.hbm_capacity_gib = gib;
    }
    let mut sources = vec![
        format!(
            "peak_bf16_tflops: {}",
            if is_gpu {
                format!("datasheet, from {}", opts.base_reference)
            } else {
                "the best f32 GEMM measured on one CPU rank (the CPU twin has no datasheet peak)"
                    .into()
            }
        ),
        "gemm_efficiency: best measured GEMM / peak; shard shapes and the fitted curve in calibration:".into(),
        "hbm_bandwidth_gb_per_s: measured copy, 2 x bytes / time (hbm_efficiency 1.0)".into(),
    ];
    // The intra-node link: the all-reduce fit at the largest group size.
    match crate::cluster::calibration::link_all_reduce(&collectives) {
        Some((_, fit)) => {
            profile.nvlink_gb_per_s = fit.bus_gb_per_s.value;
            profile.nvlink_efficiency = 1.0;
            profile.nvlink_latency_us =
                (fit.alpha_us.value / Collective::AllReduce.ring_steps(fit.ranks)).max(0.0);
            sources.push(format!(
                "nvlink_gb_per_s, nvlink_latency_us: all-reduce among {} devices, bus bandwidth 1/beta and alpha / 2(n-1) ring steps (nvlink_efficiency 1.0)",
                fit.ranks
            ));
        }
        None => {
            let note = format!(
                "{devices} device(s): collectives could not be measured (or fitted); nvlink numbers kept from {}",
                opts.base_reference
            );
            sources.push(note.clone());
            notes.push(note);
        }
    }
    notes.push(format!(
        "network_* (inter-node) not measured on one node: kept from {}",
        opts.base_reference
    ));
    notes.push(format!(
        "framework_efficiency {} and layer_overhead_us {} kept (fitted on vTrain, validation/FIT.md); they describe a training framework, not kernels",
        profile.framework_efficiency, profile.layer_overhead_us
    ));
    if !unmeasured.is_empty() {
        notes.push(format!(
            "{} of {} not kept: only {} GEMMs were measured, so this profile evaluates --precision bf16 only; evaluate low precision with the datasheet profile (--gpu {})",
            unmeasured.join(", "),
            opts.base_reference,
            timer.gemm_dtype(),
            opts.base_reference
        ));
    }
    if !is_gpu {
        notes.push(
            "CPU twin: GEMMs in f32 on one thread per rank, collectives through shared memory; these numbers describe this CPU, not a GPU".into(),
        );
    }
    // What activation offloading (`--cpu-offload-layers`) copies over and fills is not measured:
    // the link to host memory and the host memory itself. A GPU keeps its datasheet's, said as the
    // network's is; a CPU twin's memory is its host memory, so it has none to copy to and
    // offloading on it is refused.
    for (key, what, value) in [
        (
            "host_link_gb_per_s",
            "GPU to host memory, what --cpu-offload-layers copies over",
            &mut profile.host_link_gb_per_s,
        ),
        (
            "host_memory_gib_per_gpu",
            "what --cpu-offload-layers fills",
            &mut profile.host_memory_gib_per_gpu,
        ),
    ] {
        if let Some(host) = *value {
            if is_gpu {
                notes.push(format!(
                    "{key} {} ({what}) not measured: kept from {}",
                    crate::cluster::show_number(host),
                    opts.base_reference
                ));
            } else {
                *value = None;
            }
        }
    }
    profile.sources = sources;
    profile.calibration = Some(Calibration {
        backend: timer.kind().as_str().into(),
        device,
        gemm_dtype: timer.gemm_dtype().into(),
        devices: devices as u32,
        unix_time_s: opts.unix_time_s,
        gemm_shapes,
        gemm_sweep,
        gemm_fit,
        copy,
        collectives,
        notes,
    });
    // `validate`'s quick calibration (no TP degrees) measures no shard shapes: it times whole
    // layers, and its profile is never written, so only its numbers are checked.
    let checked = if opts.tp_degrees.is_empty() {
        let calibration = profile.calibration.take();
        let checked = profile.check().and_then(|()| {
            calibration
                .as_ref()
                .map_or(Ok(()), |c| c.check_measurements())
                .map_err(|m| format!("calibration: {m}"))
        });
        profile.calibration = calibration;
        checked
    } else {
        profile.check()
    };
    checked.map_err(|m| {
        CalibrationError::Input(format!("the calibrated profile is not valid: {m}"))
    })?;
    Ok(profile)
}

/// α-β fit of one collective at one group size on its wire bytes (nccl-tests bus bandwidth).
pub fn fit_collective(
    collective: Collective,
    ranks: u32,
    timings: &[(u64, Timing)],
) -> Result<CollectiveFit, CalibrationError> {
    let factor = collective.wire_factor(ranks);
    let wire: Vec<f64> = timings.iter().map(|(b, _)| *b as f64 * factor).collect();
    let times: Vec<f64> = timings.iter().map(|(_, t)| t.median_s).collect();
    let fit = fit::alpha_beta(&wire, &times).map_err(|source| CalibrationError::Fit {
        what: format!("{collective:?} among {ranks}"),
        source,
    })?;
    let points = timings
        .iter()
        .zip(&fit.relative_residuals)
        .map(|((bytes, t), r)| {
            let algbw = *bytes as f64 / t.median_s / 1e9;
            CollectivePoint {
                bytes: *bytes,
                median_us: t.median_s * 1e6,
                min_us: t.min_s * 1e6,
                max_us: t.max_s * 1e6,
                algbw_gb_per_s: algbw,
                busbw_gb_per_s: algbw * factor,
                relative_residual: *r,
            }
        })
        .collect();
    Ok(CollectiveFit {
        collective,
        ranks,
        alpha_us: estimated_nonnegative(fit.coefficients[0], |v| v * 1e6, false),
        bus_gb_per_s: estimated_nonnegative(fit.coefficients[1], |v| 1.0 / v / 1e9, true),
        r_squared: fit.r_squared,
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_fit_recovers_alpha_and_bus_bandwidth_from_noisy_times() {
        // All-reduce among 8 at 20 µs + wire bytes / 200 GB/s, ±3% noise.
        let (alpha, bus) = (20e-6, 200e9);
        let factor = Collective::AllReduce.wire_factor(8);
        let timings: Vec<(u64, Timing)> = message_sizes(8 << 10, 1 << 30)
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| {
                let noise = 1.0 + 0.03 * if i % 2 == 0 { 1.0 } else { -1.0 };
                let t = (alpha + bytes as f64 * factor / bus) * noise;
                (bytes, Timing::from_samples(&[t]))
            })
            .collect();
        let fit = fit_collective(Collective::AllReduce, 8, &timings).unwrap();
        assert_eq!(fit.points.len(), 18);
        assert!(
            (fit.alpha_us.value / 20.0 - 1.0).abs() < 0.1,
            "{:?}",
            fit.alpha_us
        );
        assert!((fit.bus_gb_per_s.value / 200.0 - 1.0).abs() < 0.05);
        assert!(fit.bus_gb_per_s.ci95_low < 200.0 && 200.0 < fit.bus_gb_per_s.ci95_high);
        let last = fit.points.last().unwrap();
        assert!((last.busbw_gb_per_s / last.algbw_gb_per_s - factor).abs() < 1e-12);
    }

    /// Hostile round 30: a rate from a reciprocal never comes out negative nor outside its own
    /// interval. A noisy CPU sweep's time per FLOP whose interval reached below zero gave
    /// "throughput TFLOP/s 0.080 [-0.466, 0.037]", and a send/recv whose times fell with the size
    /// "bus GB/s -1.942 [0.190, unbounded]".
    #[test]
    fn a_reciprocal_rate_is_never_negative_nor_outside_its_interval() {
        let per_flop = Estimated {
            value: 1.25e-11,
            ci95_low: -2e-12,
            ci95_high: 2.7e-11,
        };
        let t = estimated_nonnegative(per_flop, |v| 1.0 / v / 1e12, true);
        assert!(t.ci95_low > 0.0 && t.ci95_low <= t.value && t.value <= t.ci95_high);
        assert_eq!(t.ci95_high, UNBOUNDED);

        let timings: Vec<(u64, Timing)> = message_sizes(8 << 10, 64 << 10)
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| (bytes, Timing::from_samples(&[40e-6 - i as f64 * 1e-6])))
            .collect();
        let fit = fit_collective(Collective::SendRecv, 2, &timings).unwrap();
        let bus = fit.bus_gb_per_s;
        assert_eq!(bus.value, UNBOUNDED, "{bus:?}");
        assert!(bus.ci95_low >= 0.0 && bus.ci95_high == UNBOUNDED, "{bus:?}");
    }

    #[test]
    fn shard_gemms_have_the_backward_shapes_of_each_forward_gemm() {
        let model = crate::model::tests::gpt3_175b();
        let gemms = shard_gemms(&model, 1, 8);
        assert_eq!(gemms.len(), 12);
        let (fwd, dgrad, wgrad) = (gemms[0].1, gemms[1].1, gemms[2].1);
        assert_eq!(gemms[0].0, "tp8 qkv fwd");
        assert_eq!((fwd.m, fwd.k, fwd.n), (2048, 12288, 3 * 12288 / 8));
        // Input gradient (m×n)·(n×k) and weight gradient (k×m)·(m×n): same FLOPs as forward.
        assert_eq!((dgrad.m, dgrad.n, dgrad.k), (fwd.m, fwd.k, fwd.n));
        assert_eq!((wgrad.m, wgrad.n, wgrad.k), (fwd.k, fwd.n, fwd.m));
        assert_eq!(fwd.flops(), dgrad.flops());
        assert_eq!(fwd.flops(), wgrad.flops());
    }
}
