//! What a calibration keeps: the measurements, their spread and the fitted parameters, stored in the
//! hardware profile's optional `calibration:` section, and how the cost model reads them back.
//!
//! A calibrated profile is an ordinary `clusters/*.yaml` profile whose datasheet numbers were
//! replaced by measured ones (`peak_bf16_tflops`, `gemm_efficiency`, `hbm_bandwidth_gb_per_s`,
//! `nvlink_*`), plus this section. `plan --calibration FILE` and `eval --calibration FILE` load it;
//! the GEMM roofline of `cost::compute` then uses the measured shard times and the fitted
//! efficiency curve instead of one datasheet efficiency.

use serde::{Deserialize, Serialize};

use crate::cluster::GpuProfile;

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
    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k * self.batch) as f64
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
