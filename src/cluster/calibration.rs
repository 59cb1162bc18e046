//! What a calibration keeps: the measurements, their spread and the fitted parameters, stored in the
//! hardware profile's optional `calibration:` section, and how the cost model reads them back.
//! They are hardware data, so they live beside the profile; `calibrate` (which measures them)
//! depends on this module, never the reverse.
//!
//! A calibrated profile is an ordinary `clusters/*.yaml` profile whose datasheet numbers were
//! replaced by measured ones (`peak_bf16_tflops`, `gemm_efficiency`, `hbm_bandwidth_gb_per_s`,
//! `nvlink_*`), plus this section. `plan --calibration FILE` and `eval --calibration FILE` load it;
//! the GEMM roofline of `cost::compute` then uses the measured shard times and the fitted
//! efficiency curve instead of one datasheet efficiency.

use serde::{Deserialize, Serialize};

use crate::cluster::{GpuProfile, Range, bandwidth_range, show_number};

/// Most elements along one GEMM edge or batch: 2^24 (16M) is past any model's widest matrix
/// (the vocabulary, 256K) by 64×, and keeps m·n·k·batch far inside f64.
const MAX_GEMM_EDGE: u64 = 1 << 24;
/// A measured time: positive (a kernel takes time) and at most 10^12 µs (11.6 days).
const fn time_us(key: &'static str) -> Range {
    Range::new(
        key,
        1e-6,
        1e12,
        "us",
        "rule: a measured time is positive, at most 10^12 us",
    )
}
/// A fitted fixed cost: zero to one second.
const LATENCY_US: Range = Range::new(
    "latency_us",
    0.0,
    1e6,
    "us",
    "rule: a fixed cost per call is zero or positive, at most one second",
);
/// A fitted throughput: 1 MFLOP/s to 100,000 TFLOP/s (as `peak_bf16_tflops`).
const THROUGHPUT_TFLOPS: Range = Range::new(
    "throughput_tflops",
    1e-6,
    1e5,
    "TFLOP/s",
    "rule: positive, at most about 44x a B200",
);
/// Bytes per element: 1 (fp8) to 8 (f64).
const ELEMENT_BYTES: Range = Range::new("element_bytes", 1.0, 8.0, "bytes", "rule: fp8 to f64");
/// A measured GEMM's achieved / peak throughput: a share of the peak, so 0 to 1.
const GEMM_EFFICIENCY: Range = Range::new(
    "efficiency",
    0.0,
    1.0,
    "",
    "rule: achieved TFLOP/s over the profile's peak_bf16_tflops, at most 1",
);
/// The backends `tpsim calibrate` measures with (`calibrate::BackendKind`).
pub const BACKENDS: [&str; 2] = ["cpu", "cuda"];
/// A derived figure (achieved TFLOP/s, GB/s): finite and not negative.
const fn derived(key: &'static str) -> Range {
    Range::new(key, 0.0, 1e12, "", "rule: finite, zero or positive")
}
/// A collective's fitted bus bandwidth: positive (no link moves data at 0 GB/s, and the cost of a
/// byte would be infinite); `f64::MAX` (printed "unbounded") where the fitted time per byte was
/// zero or below, the times not growing with the message size.
const BUS_GB_PER_S: Range = Range::new(
    "bus_gb_per_s",
    1e-9,
    f64::MAX,
    "GB/s",
    "rule: a bandwidth is positive; tpsim calibrate writes 1.7976931348623157e308 where it is unbounded",
);
/// A collective's fitted fixed cost per call (α): zero to one second, as a GEMM's latency
/// (`tpsim calibrate` clamps a fit below zero to zero).
const ALPHA_US: Range = Range::new(
    "alpha_us",
    0.0,
    1e6,
    "us",
    "rule: a fixed cost per call is zero or positive, at most one second",
);
/// A least-squares fit's R² (with an intercept, as every fit tpsim calibrate makes has): the
/// share of the measured variance it explains, 0 to 1.
const R_SQUARED: Range = Range::new(
    "r_squared",
    0.0,
    1.0,
    "",
    "rule: the share of the measured variance the fit explains, 0 to 1",
);
/// A fit statistic or residual: finite.
const fn statistic(key: &'static str) -> Range {
    Range::new(key, -1e12, 1e12, "", "rule: a finite number")
}
/// The GEMM element type each backend of `tpsim calibrate` measures, with its bytes
/// (`calibrate::KernelTimer::gemm_dtype`, `gemm_element_bytes`).
const GEMM_DTYPES: [(&str, &str, f64); 2] = [("cpu", "f32", 4.0), ("cuda", "bf16", 2.0)];

fn in_entry(what: &str, index: usize, result: Result<(), String>) -> Result<(), String> {
    result.map_err(|m| format!("{what}[{index}].{m}"))
}

fn check_edges(what: &str, edges: [(&str, u64); 4]) -> Result<(), String> {
    for (key, value) in edges {
        if !(1..=MAX_GEMM_EDGE).contains(&value) {
            return Err(format!(
                "{key}: {value} is outside 1 to {MAX_GEMM_EDGE} (rule: a {what} dimension is at least 1, at most 2^24); give the measured shape"
            ));
        }
    }
    Ok(())
}

/// min ≤ median ≤ max, each a positive time.
fn check_spread(median_us: f64, min_us: f64, max_us: f64) -> Result<(), String> {
    time_us("median_us").check(median_us)?;
    time_us("min_us").check(min_us)?;
    time_us("max_us").check(max_us)?;
    if !(min_us <= median_us && median_us <= max_us) {
        return Err(format!(
            "min_us {}, median_us {}, max_us {}: the median must lie between the minimum and the maximum; give the measured spread",
            show_number(min_us),
            show_number(median_us),
            show_number(max_us)
        ));
    }
    Ok(())
}

fn check_estimated(key: &'static str, e: &Estimated, range: Range) -> Result<(), String> {
    // "alpha_us.value: -3 is outside ...", the range's own key said once.
    range.check(e.value).map_err(|m| {
        let rule = m.strip_prefix(&format!("{}: ", range.key)).unwrap_or(&m);
        format!("{key}.value: {rule}")
    })?;
    for (bound, value) in [("ci95_low", e.ci95_low), ("ci95_high", e.ci95_high)] {
        if !value.is_finite() {
            return Err(format!(
                "{key}.{bound}: {} is not a finite number (rule: a confidence bound is finite); give the fitted interval",
                show_number(value)
            ));
        }
    }
    Ok(())
}

impl Calibration {
    /// A calibration section as a profile file holds it: [`Calibration::check_measurements`],
    /// a backend `tpsim calibrate` has, and GEMMs measured at the model's shard shapes (what
    /// makes the profile calibrated for that model; without them every GEMM falls back to the
    /// fitted curve). A profile `tpsim calibrate` writes always passes (it is checked before it
    /// is written).
    pub fn check(&self) -> Result<(), String> {
        if !BACKENDS.contains(&self.backend.as_str()) {
            return Err(format!(
                "backend: {} is not a calibration backend (rule: {}, the backends tpsim calibrate measures with); give the backend that measured the profile, or write it again with tpsim calibrate",
                crate::input_file::quote(&self.backend),
                BACKENDS.join(" or ")
            ));
        }
        if self.gemm_shapes.is_empty() {
            return Err(
                "gemm_shapes: is empty (rule: a calibrated profile holds the GEMMs measured at the model's shard shapes); write the profile again with tpsim calibrate, or give the datasheet profile with --gpu"
                    .into(),
            );
        }
        self.check_measurements()
    }

    /// No GEMM measured faster than the profile's peak: `tpsim calibrate` sets the peak to the
    /// datasheet's (refusing a GEMM above it) or, on the CPU twin, to the best GEMM measured, so a
    /// GEMM above it means the peak was edited apart from the measurements, and every MFU and
    /// "of peak" share read off it would be past 100%. Each GEMM's `tflops` and `efficiency`
    /// are also the rates calibrate derived from its median and that peak.
    pub fn check_below_peak(&self, peak_tflops: f64) -> Result<(), String> {
        for (what, list) in [
            ("gemm_shapes", &self.gemm_shapes),
            ("gemm_sweep", &self.gemm_sweep),
        ] {
            for (i, g) in list.iter().enumerate() {
                // A relative 1e-9 for the decimal round trip of the written numbers.
                if g.tflops > peak_tflops * (1.0 + 1e-9) {
                    return Err(format!(
                        "{what}[{i}].tflops: {} is above the profile's peak_bf16_tflops {} (rule: a GEMM measured on the device is at most its peak; tpsim calibrate writes them so); restore peak_bf16_tflops, or write the profile again with tpsim calibrate",
                        show_number(g.tflops),
                        show_number(peak_tflops)
                    ));
                }
                // `tpsim calibrate` writes tflops = flops / median and efficiency = tflops / peak
                // (calibrate/run.rs): a hand-edited median, tflops or peak that breaks either
                // leaves two numbers for one rate, and the fit and the summaries would read
                // different ones. Within 1% (`close`): a value rounded by hand is the same rate.
                let rate = g.flops() / (g.median_us * 1e-6) / 1e12;
                if !close(g.tflops, rate) {
                    // The efficiency still agrees with one of the two: that one is the measured.
                    let fix = if close(g.efficiency, g.tflops / peak_tflops) {
                        format!(
                            "restore the measured median_us (flops / tflops gives {} us) and its min_us and max_us",
                            show_number(g.flops() / (g.tflops * 1e12) * 1e6)
                        )
                    } else {
                        format!("write tflops: {} there", show_number(rate))
                    };
                    return Err(format!(
                        "{what}[{i}].tflops: {} is not the GEMM's flops over its median_us {} ({} TFLOP/s) (rule: tpsim calibrate writes tflops = 2·m·n·k·batch / median); {fix}, or write the profile again with tpsim calibrate",
                        show_number(g.tflops),
                        show_number(g.median_us),
                        show_number(rate)
                    ));
                }
                if !close(g.efficiency, g.tflops / peak_tflops) {
                    return Err(self.efficiency_apart(what, i, g, peak_tflops));
                }
            }
        }
        Ok(())
    }

    /// The profile's memory and intra-node link, which the cost model reads, against the
    /// measurements they were written from: `tpsim calibrate` (calibrate/run.rs) writes
    /// `hbm_bandwidth_gb_per_s` as `copy.gb_per_s` at `hbm_efficiency` 1.0, and
    /// `nvlink_gb_per_s` as the bus bandwidth of the all-reduce fit among the most ranks (an
    /// unbounded or zero fit writes none) at `nvlink_efficiency` 1.0. One edited apart from the
    /// other leaves two rates for one link, as [`Calibration::check_below_peak`] refuses for
    /// the GEMMs; within 1% (`close`) a value rounded by hand is the same rate.
    pub fn check_links(&self, profile: &GpuProfile) -> Result<(), String> {
        let links = [
            (
                "hbm_bandwidth_gb_per_s",
                "hbm_efficiency",
                profile.hbm_bandwidth_gb_per_s,
                profile.hbm_efficiency,
                Some((self.copy.gb_per_s, "copy.gb_per_s".to_string())),
            ),
            (
                "nvlink_gb_per_s",
                "nvlink_efficiency",
                profile.nvlink_gb_per_s,
                profile.nvlink_efficiency,
                link_all_reduce(&self.collectives).map(|(i, c)| {
                    (
                        c.bus_gb_per_s.value,
                        format!(
                            "collectives[{i}].bus_gb_per_s.value, the all-reduce among {} ranks,",
                            c.ranks
                        ),
                    )
                }),
            ),
        ];
        for (key, efficiency_key, rate, efficiency, measured) in links {
            let Some((measured, at)) = measured else {
                continue;
            };
            if !close(rate * efficiency, measured) {
                return Err(format!(
                    "{key}: {} x {efficiency_key}: {} = {} GB/s, but calibration: {at} measured {} GB/s (rule: tpsim calibrate writes the measured rate at {efficiency_key} 1, and the cost model reads {key}, so an edit leaves two rates for one measurement); restore {key}: {} with {efficiency_key}: 1, or write the profile again with tpsim calibrate",
                    show_number(rate),
                    show_number(efficiency),
                    show_number(rate * efficiency),
                    show_number(measured),
                    show_number(measured)
                ));
            }
        }
        Ok(())
    }

    /// The refusal of a GEMM whose `efficiency` is not its `tflops` over the profile's peak.
    /// Where every GEMM's efficiency gives one and the same other peak, the peak was edited and
    /// the fix restores it; otherwise this GEMM's efficiency was, and the fix rewrites it (the
    /// other fix would break the GEMMs that agree).
    fn efficiency_apart(
        &self,
        what: &str,
        i: usize,
        g: &GemmMeasurement,
        peak_tflops: f64,
    ) -> String {
        let implied = g.tflops / g.efficiency;
        let one_peak = self
            .gemm_shapes
            .iter()
            .chain(&self.gemm_sweep)
            .all(|m| close(m.tflops / m.efficiency, implied));
        let (edited, fix) = if one_peak {
            (
                "the peak was edited apart from the measurements",
                // To 12 digits: a datasheet peak (989.4) back from its quotients, not 989.4000000000001.
                format!(
                    "restore peak_bf16_tflops: {}",
                    show_number(format!("{implied:.11e}").parse().unwrap_or(implied))
                ),
            )
        } else {
            (
                "this GEMM's efficiency was edited",
                format!(
                    "write efficiency: {} there",
                    show_number(g.tflops / peak_tflops)
                ),
            )
        };
        format!(
            "{what}[{i}].efficiency: {} is not its tflops {} over the profile's peak_bf16_tflops {} (rule: tpsim calibrate writes efficiency = tflops / peak, so {edited}); {fix}, or write the profile again with tpsim calibrate",
            show_number(g.efficiency),
            show_number(g.tflops),
            show_number(peak_tflops),
        )
    }

    /// Every number the cost model or a summary reads, in its range. `validate`'s quick
    /// calibration, which times whole layers instead of shard shapes and is never written, is
    /// checked with this alone.
    pub fn check_measurements(&self) -> Result<(), String> {
        if self.devices == 0 {
            return Err(
                "devices: 0 must be at least 1 (rule: something was measured); give the device count"
                    .into(),
            );
        }
        // The element type the backend measures, and its bytes, which the fitted curve's
        // bandwidth term prices GEMMs with.
        if let Some((backend, dtype, bytes)) = GEMM_DTYPES
            .into_iter()
            .find(|(backend, _, _)| *backend == self.backend)
        {
            if self.gemm_dtype != dtype {
                return Err(format!(
                    "gemm_dtype: {} is not what backend {backend} measures (rule: tpsim calibrate times {} GEMMs on the {backend} backend); write gemm_dtype: {dtype}, or write the profile again with tpsim calibrate",
                    crate::input_file::quote(&self.gemm_dtype),
                    dtype
                ));
            }
            if self.gemm_fit.element_bytes != bytes {
                return Err(format!(
                    "gemm_fit.element_bytes: {} is not the {bytes} bytes of one {dtype} element (rule: the sweep was measured in gemm_dtype: {dtype}); write element_bytes: {bytes}, or write the profile again with tpsim calibrate",
                    show_number(self.gemm_fit.element_bytes)
                ));
            }
        }
        for (what, list) in [
            ("gemm_shapes", &self.gemm_shapes),
            ("gemm_sweep", &self.gemm_sweep),
        ] {
            for (i, g) in list.iter().enumerate() {
                in_entry(what, i, g.check())?;
            }
        }
        self.gemm_fit.check().map_err(|m| format!("gemm_fit.{m}"))?;
        self.copy.check().map_err(|m| format!("copy.{m}"))?;
        for (i, c) in self.collectives.iter().enumerate() {
            in_entry("collectives", i, c.check())?;
            // tpsim calibrate measures each collective among 2 to `devices` of its devices.
            if c.ranks > self.devices {
                return Err(format!(
                    "collectives[{i}].ranks: {} is more than devices: {}, the devices the calibration measured (rule: tpsim calibrate measures a collective among 2 to all of them); give ranks of 2 to {}, or write the profile again with tpsim calibrate",
                    c.ranks, self.devices, self.devices
                ));
            }
        }
        Ok(())
    }
}

/// Equal within 1%: a number `tpsim calibrate` derived and wrote, read back or rounded by hand
/// (calibrate writes every digit, so its own files agree to ~1e-15); an edit that makes two rates
/// for one GEMM moves it by far more.
fn close(written: f64, derived: f64) -> bool {
    (written - derived).abs() <= 0.01 * derived.abs()
}

impl GemmMeasurement {
    fn check(&self) -> Result<(), String> {
        check_edges(
            "GEMM",
            [
                ("m", self.m),
                ("n", self.n),
                ("k", self.k),
                ("batch", self.batch),
            ],
        )?;
        check_spread(self.median_us, self.min_us, self.max_us)?;
        if self.reps == 0 {
            return Err("reps: 0 must be at least 1 (rule: a median needs a sample)".into());
        }
        derived("tflops").check(self.tflops)?;
        GEMM_EFFICIENCY.check(self.efficiency)
    }
}

impl GemmFit {
    fn check(&self) -> Result<(), String> {
        check_estimated("latency_us", &self.latency_us, LATENCY_US)?;
        check_estimated(
            "throughput_tflops",
            &self.throughput_tflops,
            THROUGHPUT_TFLOPS,
        )?;
        if let Some(b) = &self.bandwidth_gb_per_s {
            check_estimated(
                "bandwidth_gb_per_s",
                b,
                bandwidth_range("bandwidth_gb_per_s"),
            )?;
        }
        R_SQUARED.check(self.r_squared)?;
        for (i, r) in self.relative_residuals.iter().enumerate() {
            in_entry("relative_residuals", i, statistic("value").check(*r))?;
        }
        ELEMENT_BYTES.check(self.element_bytes)
    }
}

impl CopyMeasurement {
    fn check(&self) -> Result<(), String> {
        if self.bytes == 0 {
            return Err("bytes: 0 must be at least 1 (rule: a copy moves data)".into());
        }
        check_spread(self.median_us, self.min_us, self.max_us)?;
        derived("gb_per_s").check(self.gb_per_s)
    }
}

impl CollectiveFit {
    fn check(&self) -> Result<(), String> {
        if self.ranks < 2 {
            return Err(format!(
                "ranks: {} must be at least 2 (rule: a collective has two or more members)",
                self.ranks
            ));
        }
        check_estimated("alpha_us", &self.alpha_us, ALPHA_US)?;
        check_estimated("bus_gb_per_s", &self.bus_gb_per_s, BUS_GB_PER_S)?;
        R_SQUARED.check(self.r_squared)?;
        for (i, p) in self.points.iter().enumerate() {
            let point = || -> Result<(), String> {
                if p.bytes == 0 {
                    return Err(
                        "bytes: 0 must be at least 1 (rule: a collective moves data)".into(),
                    );
                }
                check_spread(p.median_us, p.min_us, p.max_us)?;
                derived("algbw_gb_per_s").check(p.algbw_gb_per_s)?;
                derived("busbw_gb_per_s").check(p.busbw_gb_per_s)?;
                statistic("relative_residual").check(p.relative_residual)
            };
            in_entry("points", i, point())?;
        }
        Ok(())
    }
}

/// The `calibration:` section of a calibrated profile.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// `cpu` or `cuda`.
    pub backend: String,
    /// What was measured (GPU name, or the CPU and its thread count).
    pub device: String,
    /// Element type of the GEMMs measured (bf16 on GPUs; f32 on the CPU twin).
    pub gemm_dtype: String,
    /// Devices (GPUs, or CPU ranks) the collectives were measured among.
    pub devices: u32,
    /// Unix time of the run, in seconds.
    pub unix_time_s: u64,
    /// GEMMs at the exact shard shapes of `model`, per TP degree, forward and both backward GEMMs.
    #[serde(default)]
    pub gemm_shapes: Vec<GemmMeasurement>,
    /// The size sweep the efficiency curve is fitted on.
    #[serde(default)]
    pub gemm_sweep: Vec<GemmMeasurement>,
    pub gemm_fit: GemmFit,
    pub copy: CopyMeasurement,
    /// One α-β fit per collective and group size; empty when only one device was available.
    #[serde(default)]
    pub collectives: Vec<CollectiveFit>,
    /// Plain-language notes: what could not be measured and which datasheet values were kept.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One timed GEMM (m × k)·(k × n), `batch` times.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GemmMeasurement {
    /// e.g. `tp2 qkv fwd`, `tp2 mlp_down dgrad`, `sweep`.
    pub label: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub reps: u32,
    pub tflops: f64,
    /// Achieved / the profile's `peak_bf16_tflops`.
    pub efficiency: f64,
}

impl GemmMeasurement {
    /// In f64: the product of four u64 edges can overflow u64.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }
}

/// A value with its 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Estimated {
    pub value: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
}

/// The GEMM time model fitted on the sweep: t = latency + flops / throughput + bytes / bandwidth,
/// a roofline (Williams et al. 2009) made additive so that it is linear in its three parameters and
/// can be fitted by least squares; the efficiency curve is flops / (peak · t).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GemmFit {
    pub latency_us: Estimated,
    pub throughput_tflops: Estimated,
    /// `None` when the bandwidth term fitted to zero or below and was dropped.
    #[serde(default)]
    pub bandwidth_gb_per_s: Option<Estimated>,
    pub r_squared: f64,
    /// (measured − fitted) / fitted, per sweep point, in the sweep's order.
    #[serde(default)]
    pub relative_residuals: Vec<f64>,
    /// Bytes per element of the operands the fit was measured with.
    pub element_bytes: f64,
}

impl GemmFit {
    /// Fitted time of a GEMM of `flops` that moves `elements` operand and result elements.
    pub fn time_s(&self, flops: f64, elements: f64) -> f64 {
        let bandwidth = self
            .bandwidth_gb_per_s
            .map_or(0.0, |b| elements * self.element_bytes / (b.value * 1e9));
        self.latency_us.value * 1e-6 + flops / (self.throughput_tflops.value * 1e12) + bandwidth
    }
}

/// Device memory bandwidth: a large device-to-device copy.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CopyMeasurement {
    pub bytes: u64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// 2 × bytes / time: the copy reads and writes every byte (CUDA samples' `bandwidthTest`).
    pub gb_per_s: f64,
}

/// The all-reduce fit `tpsim calibrate` writes the intra-node link (`nvlink_gb_per_s`) from, with
/// its index: the one among the most ranks whose bus bandwidth fitted to a finite, positive rate
/// (an unbounded or zero fit writes none). One rule for the writer (calibrate/run.rs) and
/// [`Calibration::check_links`], which reads the profile back.
pub fn link_all_reduce(collectives: &[CollectiveFit]) -> Option<(usize, &CollectiveFit)> {
    collectives
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.collective == crate::cost::comm::Collective::AllReduce
                && c.bus_gb_per_s.value > 0.0
                && c.bus_gb_per_s.value < crate::calibrate::run::UNBOUNDED
        })
        .max_by_key(|(_, c)| c.ranks)
}

/// One collective at one group size: its measured points and its α-β fit.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveFit {
    pub collective: crate::cost::comm::Collective,
    pub ranks: u32,
    /// Fixed cost per call (α), in µs.
    pub alpha_us: Estimated,
    /// Bus bandwidth 1/β' where t = α + β'·(wire factor · bytes), in GB/s (nccl-tests'
    /// `doc/PERFORMANCE.md` definition, so it compares across group sizes).
    pub bus_gb_per_s: Estimated,
    pub r_squared: f64,
    pub points: Vec<CollectivePoint>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectivePoint {
    /// Size of the full tensor (nccl-tests' "size").
    pub bytes: u64,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// bytes / time.
    pub algbw_gb_per_s: f64,
    /// algbw × wire factor (nccl-tests `doc/PERFORMANCE.md`).
    pub busbw_gb_per_s: f64,
    /// (measured − fitted) / fitted.
    pub relative_residual: f64,
}

/// Time of the GEMM (m × k)·(k × n) × batch from a calibrated profile: the measured median when
/// that exact shape was measured (forward GEMMs at the model's shard shapes), otherwise the fitted
/// curve. `None` for a datasheet profile.
pub fn calibrated_gemm_time(
    profile: &GpuProfile,
    m: f64,
    n: f64,
    k: f64,
    batch: f64,
) -> Option<f64> {
    let calibration = profile.calibration.as_ref()?;
    let exact = calibration.gemm_shapes.iter().find(|g| {
        g.label.ends_with(" fwd")
            && g.m as f64 == m
            && g.n as f64 == n
            && g.k as f64 == k
            && g.batch as f64 == batch
    });
    if let Some(g) = exact {
        return Some(g.median_us * 1e-6);
    }
    let flops = 2.0 * m * n * k * batch;
    let elements = (m * k + k * n + m * n) * batch;
    Some(calibration.gemm_fit.time_s(flops, elements))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimated(value: f64) -> Estimated {
        Estimated {
            value,
            ci95_low: value,
            ci95_high: value,
        }
    }

    #[test]
    fn measured_shard_shapes_win_and_the_curve_covers_the_rest() {
        let mut profile: GpuProfile =
            yaml_serde::from_str(crate::specs::BUNDLED_GPUS[0].1).unwrap();
        assert_eq!(calibrated_gemm_time(&profile, 8.0, 8.0, 8.0, 1.0), None);
        let measured = |label: &str, median_us: f64| GemmMeasurement {
            label: label.into(),
            m: 1024,
            n: 2048,
            k: 512,
            batch: 1,
            median_us,
            min_us: median_us,
            max_us: median_us,
            reps: 1,
            tflops: 0.0,
            efficiency: 0.0,
        };
        profile.calibration = Some(Calibration {
            backend: "cpu".into(),
            device: "test".into(),
            gemm_dtype: "f32".into(),
            devices: 1,
            unix_time_s: 0,
            gemm_shapes: vec![measured("tp1 x dgrad", 99.0), measured("tp1 x fwd", 123.0)],
            gemm_sweep: Vec::new(),
            gemm_fit: GemmFit {
                latency_us: estimated(10.0),
                throughput_tflops: estimated(100.0),
                bandwidth_gb_per_s: Some(estimated(1000.0)),
                r_squared: 1.0,
                relative_residuals: Vec::new(),
                element_bytes: 2.0,
            },
            copy: CopyMeasurement {
                bytes: 1,
                median_us: 1.0,
                min_us: 1.0,
                max_us: 1.0,
                gb_per_s: 1.0,
            },
            collectives: Vec::new(),
            notes: Vec::new(),
        });
        let exact = calibrated_gemm_time(&profile, 1024.0, 2048.0, 512.0, 1.0).unwrap();
        assert!((exact - 123e-6).abs() < 1e-15);
        // Not measured: 10 µs + 2·1024³ / 100 TFLOP/s + 3·1024²·2 B / 1000 GB/s.
        let n = 1024.0;
        let curve = calibrated_gemm_time(&profile, n, n, n, 1.0).unwrap();
        let want = 10e-6 + 2.0 * n * n * n / 100e12 + 3.0 * n * n * 2.0 / 1000e9;
        assert!((curve - want).abs() < 1e-15);
    }
}
