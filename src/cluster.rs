//! The hardware: one GPU profile (datasheet or calibrated) and how many nodes of it.
//!
//! Profiles live in `clusters/*.yaml`. Every key carries its unit; bandwidths are per GPU and per
//! direction, which is what one rank of a ring sends at (nccl-tests `doc/PERFORMANCE.md`).

use serde::{Deserialize, Serialize};

use crate::plan::Precision;
use crate::units::{Bytes, BytesPerSec, FlopsPerSec, GB, GIB, Seconds};

/// The measured tables and fits of a calibrated profile, and how GEMM times are read from them.
pub mod calibration;

/// Most GPUs in one node we accept: an NVL72 rack (72 GPUs in one NVLink domain) is the largest.
pub const MAX_GPUS_PER_NODE: u32 = 72;
/// The most GPUs one NVLink domain holds: NVLink Switches joined across racks connect up to 576
/// Blackwell GPUs in one domain (NVIDIA's NVLink Switch System, as its GB200 NVL72 material states;
/// e.g. slicast.com/article/1pl8afm: "allows for scaling up to 576 GPUs"). A profile's
/// `nvlink_domain_gpus` past it was accepted and printed as "NVLink in 64-GPU segments of
/// 4294967292-GPU racks".
pub const MAX_NVLINK_DOMAIN_GPUS: u32 = 576;

/// The accepted range of one numeric key of an input file, with the rule that sets it. Every range
/// is finite and every lower bound of a divisor positive, so that accepted input can only give
/// finite, non-negative times and sizes: the extreme ratio (10^30 FLOPs over 10^-6 TFLOP/s at
/// 10^-3 × 10^-3 efficiency) is about 10^30 s, far inside f64.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub key: &'static str,
    pub min: f64,
    pub max: f64,
    pub unit: &'static str,
    pub rule: &'static str,
}

/// A number as a message shows it: plain when ordinary, in exponent form when tiny or huge (so
/// that 5e-324 is not 324 digits).
pub fn show_number(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 || (1e-4..1e9).contains(&magnitude) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

impl Range {
    pub const fn new(
        key: &'static str,
        min: f64,
        max: f64,
        unit: &'static str,
        rule: &'static str,
    ) -> Range {
        Range {
            key,
            min,
            max,
            unit,
            rule,
        }
    }

    pub fn contains(&self, value: f64) -> bool {
        value.is_finite() && value >= self.min && value <= self.max
    }

    /// `Err` names the key, the value, the range and its rule.
    pub fn check(&self, value: f64) -> Result<(), String> {
        if self.contains(value) {
            return Ok(());
        }
        Err(format!(
            "{}: {} is outside {} to {}{} ({}); give a value in that range",
            self.key,
            show_number(value),
            show_number(self.min),
            show_number(self.max),
            if self.unit.is_empty() {
                String::new()
            } else {
                format!(" {}", self.unit)
            },
            self.rule
        ))
    }
}

/// Peak compute: from 1 MFLOP/s (a CPU twin measuring itself) to 100,000 TFLOP/s (about 44× a B200's
/// dense bf16 2,250 TFLOP/s, NVIDIA B200 datasheet).
pub const PEAK_TFLOPS: Range = Range::new(
    "peak_bf16_tflops",
    1e-6,
    1e5,
    "TFLOP/s",
    "rule: positive, at most about 44x a B200",
);
/// Device memory: from 1 GiB to 100 TiB (a B200 has 180 GiB). Below 1 GiB no model tpsim plans
/// fits (a 1B model's bf16 weights alone are 1.9 GiB), and memory is said in GiB to one decimal
/// everywhere: 1 MiB accepted would print as "needs 10.2 GiB of 0.0 GiB".
pub const HBM_CAPACITY_GIB: Range = Range::new(
    "hbm_capacity_gib",
    1.0,
    102_400.0,
    "GiB",
    "rule: 1 GiB to 100 TiB per device, as nvidia-smi's MiB / 1024",
);
/// A low-precision tensor-core peak (`peak_fp8_tflops`, `peak_fp4_tflops`): the bf16 peak's floor,
/// and at most 100,000 TFLOP/s (about 7x a B300's dense FP4, 14,000 TFLOP/s, clusters/b300-sxm-288g.yaml).
pub const fn low_precision_peak_range(key: &'static str) -> Range {
    Range::new(
        key,
        1e-6,
        1e5,
        "TFLOP/s",
        "rule: positive, at most about 7x a B300's dense FP4",
    )
}
/// Host (CPU) memory per GPU: 1 GiB to 100 TiB, as the device's own.
pub const HOST_MEMORY_GIB_PER_GPU: Range = Range::new(
    "host_memory_gib_per_gpu",
    1.0,
    102_400.0,
    "GiB",
    "rule: 1 GiB to 100 TiB per GPU, the node's system memory over its GPUs",
);
/// Any bandwidth: 1 MB/s to 1 PB/s (a B200's HBM3e is 8,000 GB/s).
pub const fn bandwidth_range(key: &'static str) -> Range {
    Range::new(key, 1e-3, 1e6, "GB/s", "rule: 1 MB/s to 1 PB/s per GPU")
}
/// Any latency or fixed overhead: zero to one second.
pub const fn latency_range(key: &'static str) -> Range {
    Range::new(
        key,
        0.0,
        1e6,
        "us",
        "rule: zero or positive, at most one second",
    )
}
/// An efficiency (achieved / peak): from 0.1% to 100%.
pub const fn efficiency_range(key: &'static str) -> Range {
    Range::new(
        key,
        1e-3,
        1.0,
        "",
        "rule: a fraction of the peak, 0.001 to 1",
    )
}
/// The per-GPU network bandwidth `sweep --axis network-bandwidth` sets.
pub const NETWORK_GB_PER_S: Range = bandwidth_range("network_gb_per_s");

/// A GPU and node profile (`clusters/*.yaml`). Efficiencies turn datasheet peaks into what real
/// kernels reach; `tpsim calibrate` replaces them with measured values.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuProfile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Dense (no sparsity) bf16 tensor-core peak.
    pub peak_bf16_tflops: f64,
    /// Usable device memory, as `nvidia-smi` reports it.
    pub hbm_capacity_gib: f64,
    /// The most memory a plan may use per GPU when the user holds plans below the device's
    /// (`--max-memory-gib`): a setting of the run, never a key of a profile file.
    #[serde(skip)]
    pub memory_limit_gib: Option<f64>,
    pub hbm_bandwidth_gb_per_s: f64,
    /// NVLink bandwidth per GPU per direction (half the bidirectional datasheet figure).
    pub nvlink_gb_per_s: f64,
    pub nvlink_latency_us: f64,
    /// Inter-node bandwidth per GPU per direction: the node's NIC bandwidth / GPUs per node.
    pub network_gb_per_s: f64,
    pub network_latency_us: f64,
    pub gpus_per_node: u32,
    /// Best large-GEMM throughput / peak (the "maximum achievable matmul FLOPS").
    pub gemm_efficiency: f64,
    /// Achieved / peak HBM bandwidth for streaming kernels.
    pub hbm_efficiency: f64,
    /// NCCL bus bandwidth / link bandwidth inside a node.
    pub nvlink_efficiency: f64,
    /// NCCL bus bandwidth / link bandwidth across nodes.
    pub network_efficiency: f64,
    /// Achieved / microbenchmark throughput of a training framework's kernels (GEMMs and element-wise
    /// kernels together), see `validation/FIT.md`. Default: [`DEFAULT_FRAMEWORK_EFFICIENCY`].
    #[serde(default = "default_framework_efficiency")]
    pub framework_efficiency: f64,
    /// Fixed time per transformer-layer forward for kernel launches and framework dispatch, in µs
    /// (backward counts twice). Default: [`DEFAULT_LAYER_OVERHEAD_US`].
    #[serde(default = "default_layer_overhead_us")]
    pub layer_overhead_us: f64,
    /// Dense FP8 tensor-core peak (absent: the GPU has no FP8 tensor cores, e.g. A100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fp8_tflops: Option<f64>,
    /// Dense FP4 tensor-core peak (Blackwell; absent elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fp4_tflops: Option<f64>,
    /// Best large-GEMM FP8 throughput / FP8 peak (absent: `gemm_efficiency` is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_gemm_efficiency: Option<f64>,
    /// Share of its burst matmul rate (MAMF, the boost clock: what `gemm_efficiency` and the
    /// attention efficiencies were measured at) the GPU holds under sustained full load at its power
    /// cap (MSMF, the saturated clock), as stas00's `mamf-finder.py` measures both on one node
    /// with every GPU busy. Tensor-core kernels run at the sustained clock in training; the
    /// memory-bound ones do not depend on it. Absent: the reference share
    /// ([`REFERENCE_SUSTAINED_MATMUL_FRACTION`]), no correction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_matmul_fraction: Option<f64>,
    /// Whether the tensor cores run the OCP microscaling formats (MXFP8, NVFP4): Blackwell and later.
    #[serde(default)]
    pub microscaling: bool,
    /// Share of the bf16 peak a current fused attention kernel reaches on this GPU at head width
    /// 128: cuDNN fused attention / FlashAttention-3 on Hopper, what Transformer Engine runs
    /// (absent: `gemm_efficiency`). Other widths scale it, the `gemm_efficiency` fallback too
    /// (`TrainingFramework::attention_head_width_factor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_attention_efficiency: Option<f64>,
    /// Share of the bf16 peak FlashAttention-2 reaches on this GPU at head width 128, what PyTorch
    /// SDPA's flash backend runs (absent: `gemm_efficiency`; FA2 was written for Ampere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fa2_attention_efficiency: Option<f64>,
    /// The GPU's link to host memory, per GPU per direction, at its line rate: PCIe (Gen4 x16 32
    /// GB/s, Gen5 x16 64 GB/s) on HGX/DGX nodes, NVLink-C2C to the Grace CPU on GB200/GB300 (its
    /// 900 GB/s bidirectional shared by the superchip's two GPUs: 225). What activation offloading
    /// to the CPU (`--cpu-offload-layers`) copies over; copies reach [`HOST_COPY_EFFICIENCY`] of
    /// it. Absent: the profile cannot price offloading, which is then refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_gb_per_s: Option<f64>,
    /// Host (CPU) memory per GPU: the node's system memory over its GPUs (DGX H100: 2 TiB over
    /// 8 = 256; a GB200 superchip's Grace: 480 GiB of LPDDR5X over its 2 GPUs = 240). What
    /// activation offloading to the CPU (`--cpu-offload-layers`) must fit its copies into, an
    /// upper bound: the operating system, data loaders and the framework's own pinned buffers
    /// share it. Absent: offloading is refused, as without `host_link_gb_per_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory_gib_per_gpu: Option<f64>,
    /// GPUs that share one NVLink domain (NVSwitch fabric): 8 in an HGX/DGX node, 72 in a GB200/GB300
    /// NVL72 rack whose compute trays hold 4 GPUs each. Absent: `gpus_per_node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_domain_gpus: Option<u32>,
    /// Where each number comes from (free text, one line per number).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Measurements and fits from `tpsim calibrate` (absent in datasheet profiles); the cost model
    /// then times GEMMs from them (`calibration::calibrated_gemm_time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<calibration::Calibration>,
}

/// The sustained share of the burst matmul rate that [`DEFAULT_FRAMEWORK_EFFICIENCY`] already holds.
/// That efficiency was fitted on A100 runs timed against the A100's burst (MAMF) rate, so it took
/// in the A100's own loss to its sustained clock. The A100's MSMF is not published; it is taken
/// as H200's, measured on a busy 8-GPU node: 755.5 of 852.1 TFLOP/s bf16 = 0.887 (stas00/
/// ml-engineering `compute/accelerator/benchmarks/README.md`, "What was measured: alone vs all-8
/// concurrent", all 8 GPUs x 5 rounds; a version after 744d01e). Supporting the A100 side: Horace
/// He measured random-input matmuls on an A100 at 257 TFLOP/s against 295 with zero inputs, the gap
/// being the power limit pulling the clock down ("Strangely, Matrix Multiplications on GPUs Run
/// Faster When Given 'Predictable' Data", thonking.ai, 2024): 0.87 of the unthrottled rate.
pub const REFERENCE_SUSTAINED_MATMUL_FRACTION: f64 = 0.887;

/// Share of the host link's line rate a pinned-memory copy-engine copy reaches: NVIDIA's
/// NVbandwidth example measures `host_to_device_memcpy_ce` at 55.63 GB/s on a PCIe Gen5 x16 GPU
/// (64 GB/s per direction): 0.87 ("NVbandwidth: Your Essential Tool for Measuring GPU Interconnect
/// and Memory Performance", NVIDIA technical blog, 2025). Taken for NVLink-C2C too, where no
/// measurement was found.
pub const HOST_COPY_EFFICIENCY: f64 = 55.63 / 64.0;

/// Fitted once to vTrain's measured Megatron-DeepSpeed A100 iteration times (not to the published
/// runs tpsim is validated on); see `validation/FIT.md` and the test that re-derives it.
pub const DEFAULT_FRAMEWORK_EFFICIENCY: f64 = 0.90;
/// Fitted together with [`DEFAULT_FRAMEWORK_EFFICIENCY`]; see `validation/FIT.md`.
pub const DEFAULT_LAYER_OVERHEAD_US: f64 = 600.0;

fn default_framework_efficiency() -> f64 {
    DEFAULT_FRAMEWORK_EFFICIENCY
}
fn default_layer_overhead_us() -> f64 {
    DEFAULT_LAYER_OVERHEAD_US
}

impl GpuProfile {
    pub fn peak_flops(&self) -> FlopsPerSec {
        FlopsPerSec(self.peak_bf16_tflops * 1e12)
    }
    /// How much slower this GPU's tensor-core kernels run in training than its burst-rate
    /// efficiencies say, beyond what the fitted framework efficiency already holds: its sustained
    /// share over the reference share (1 for a profile without one, and for Hopper).
    pub fn sustained_clock_factor(&self) -> f64 {
        self.sustained_matmul_fraction
            .map_or(1.0, |share| share / REFERENCE_SUSTAINED_MATMUL_FRACTION)
    }
    /// Compute roof of a tensor-core kernel that reaches `efficiency` of the bf16 peak at the burst
    /// clock, at the sustained clock.
    pub fn sustained_matmul_flops(&self, efficiency: f64) -> FlopsPerSec {
        FlopsPerSec(self.peak_flops().0 * self.sustained_share(efficiency))
    }
    /// A burst-clock `efficiency` (share of a format's peak) at the sustained clock; a share above
    /// the reference cannot take it past the peak.
    fn sustained_share(&self, efficiency: f64) -> f64 {
        (efficiency * self.sustained_clock_factor()).min(1.0)
    }
    /// Whether GEMMs can run at `precision` on this GPU, and why not.
    pub fn supports(&self, precision: Precision) -> Result<(), &'static str> {
        match precision {
            Precision::Bf16 => Ok(()),
            Precision::Fp8 if self.peak_fp8_tflops.is_none() => {
                Err("its profile gives no peak_fp8_tflops")
            }
            Precision::Fp8 => Ok(()),
            Precision::Mxfp8 | Precision::Nvfp4 if !self.microscaling => {
                Err("microscaling formats need Blackwell tensor cores")
            }
            Precision::Nvfp4 if self.peak_fp4_tflops.is_none() => {
                Err("its profile gives no peak_fp4_tflops")
            }
            Precision::Mxfp8 if self.peak_fp8_tflops.is_none() => {
                Err("its profile gives no peak_fp8_tflops")
            }
            Precision::Mxfp8 | Precision::Nvfp4 => Ok(()),
        }
    }
    /// Achievable throughput of a large linear-layer GEMM at `precision`: that format's dense peak
    /// times its measured large-GEMM efficiency (MAMF), at the sustained clock
    /// ([`GpuProfile::sustained_clock_factor`], the bf16 measurement taken for every format).
    /// Unsupported formats fall back to bf16; `ParallelPlan::build` refuses them before this is
    /// reached.
    pub fn linear_gemm_flops(&self, precision: Precision) -> FlopsPerSec {
        let bf16 = self.peak_bf16_tflops * self.sustained_share(self.gemm_efficiency);
        let fp8_efficiency =
            self.sustained_share(self.fp8_gemm_efficiency.unwrap_or(self.gemm_efficiency));
        let tflops = match precision {
            Precision::Bf16 => bf16,
            Precision::Fp8 | Precision::Mxfp8 => self
                .peak_fp8_tflops
                .map_or(bf16, |peak| peak * fp8_efficiency),
            // Assumption: NVFP4 GEMMs reach the FP8 efficiency of the FP4 peak (2x the FP8 peak on
            // B200/GB200, 3x on B300/GB300); no FP4 MAMF or MSMF is published yet.
            Precision::Nvfp4 => self
                .peak_fp4_tflops
                .map_or(bf16, |peak| peak * fp8_efficiency),
        };
        FlopsPerSec(tflops * 1e12)
    }
    /// GPUs in one NVLink domain.
    pub fn nvlink_domain(&self) -> u32 {
        self.nvlink_domain_gpus.unwrap_or(self.gpus_per_node)
    }
    /// The memory a plan may use per GPU, in whole bytes: the device's HBM, or less where the
    /// user holds plans below it (`memory_limit_gib`). A profile's GiB with decimals (277.55 on
    /// GB300) need not be an integer number of bytes; every output prints this one number.
    pub fn memory_capacity(&self) -> Bytes {
        let gib = match self.memory_limit_gib {
            Some(limit) => limit.min(self.hbm_capacity_gib),
            None => self.hbm_capacity_gib,
        };
        Bytes((gib * GIB).round())
    }
    /// The device's HBM in whole bytes, whatever limit the run sets (`memory_capacity`).
    pub fn device_memory(&self) -> Bytes {
        Bytes((self.hbm_capacity_gib * GIB).round())
    }
    /// What a copy between GPU and pinned host memory achieves in one direction, if the profile
    /// gives its host link.
    pub fn achieved_host_link_bandwidth(&self) -> Option<BytesPerSec> {
        self.host_link_gb_per_s
            .map(|gb| BytesPerSec(gb * GB * HOST_COPY_EFFICIENCY))
    }
    /// The host memory one GPU may offload into, in whole bytes, if the profile gives it.
    pub fn host_memory_capacity(&self) -> Option<Bytes> {
        self.host_memory_gib_per_gpu
            .map(|gib| Bytes((gib * GIB).round()))
    }
    /// HBM bandwidth a streaming kernel achieves.
    pub fn achieved_hbm_bandwidth(&self) -> BytesPerSec {
        BytesPerSec(self.hbm_bandwidth_gb_per_s * GB * self.hbm_efficiency)
    }
    /// Every numeric key in its [`Range`], and the calibration section (if any) checked too.
    /// The keys whose values differ from `other`'s ("peak_bf16_tflops 2500.0 against 989.0"), the
    /// headline numbers first; the description and sources, words only, are left out. A file naming itself
    /// after a bundled GPU (`h100-sxm-80g` with GB200 numbers) is told apart from that GPU by it:
    /// the cluster line names the file (`report::ClusterSummary::gpu_file`).
    pub fn differences_from(&self, other: &GpuProfile) -> Vec<String> {
        let (Ok(serde_json::Value::Object(mine)), Ok(serde_json::Value::Object(theirs))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return Vec::new();
        };
        let headline = ["peak_bf16_tflops", "hbm_capacity_gib", "gpus_per_node"];
        let mut keys: Vec<&String> = mine.keys().collect();
        keys.sort_by_key(|key| {
            headline
                .iter()
                .position(|h| h == key)
                .unwrap_or(headline.len())
        });
        keys.into_iter()
            .filter(|key| !matches!(key.as_str(), "description" | "sources"))
            .filter_map(|key| {
                let (value, theirs) = (
                    mine.get(key)?,
                    theirs.get(key.as_str()).unwrap_or(&serde_json::Value::Null),
                );
                (value != theirs).then(|| format!("{key} {value} against {theirs}"))
            })
            .collect()
    }

    pub fn check(&self) -> Result<(), String> {
        crate::input_file::check_spec_name("name", &self.name, "my-gpu")?;
        let checks = [
            (PEAK_TFLOPS, self.peak_bf16_tflops),
            (HBM_CAPACITY_GIB, self.hbm_capacity_gib),
            (
                bandwidth_range("hbm_bandwidth_gb_per_s"),
                self.hbm_bandwidth_gb_per_s,
            ),
            (bandwidth_range("nvlink_gb_per_s"), self.nvlink_gb_per_s),
            (NETWORK_GB_PER_S, self.network_gb_per_s),
            (efficiency_range("gemm_efficiency"), self.gemm_efficiency),
            (efficiency_range("hbm_efficiency"), self.hbm_efficiency),
            (
                efficiency_range("nvlink_efficiency"),
                self.nvlink_efficiency,
            ),
            (
                efficiency_range("network_efficiency"),
                self.network_efficiency,
            ),
            (
                efficiency_range("framework_efficiency"),
                self.framework_efficiency,
            ),
            (latency_range("nvlink_latency_us"), self.nvlink_latency_us),
            (latency_range("network_latency_us"), self.network_latency_us),
            (latency_range("layer_overhead_us"), self.layer_overhead_us),
        ];
        for (range, value) in checks {
            range.check(value)?;
        }
        if !(1..=MAX_GPUS_PER_NODE).contains(&self.gpus_per_node) {
            return Err(format!(
                "gpus_per_node: {} is outside 1 to {MAX_GPUS_PER_NODE} (rule: at least one GPU, at most an NVL72 rack); give the GPUs per node, e.g. 8",
                self.gpus_per_node
            ));
        }
        if let Some(calibration) = &self.calibration {
            calibration
                .check()
                .map_err(|m| format!("calibration: {m}"))?;
            calibration
                .check_below_peak(self.peak_bf16_tflops)
                .map_err(|m| format!("calibration: {m}"))?;
            calibration.check_links(self)?;
        }
        if let Some(host) = self.host_link_gb_per_s {
            bandwidth_range("host_link_gb_per_s").check(host)?;
        }
        if let Some(host) = self.host_memory_gib_per_gpu {
            HOST_MEMORY_GIB_PER_GPU.check(host)?;
        }
        for (key, value) in [
            ("peak_fp8_tflops", self.peak_fp8_tflops),
            ("peak_fp4_tflops", self.peak_fp4_tflops),
        ] {
            if let Some(value) = value {
                if !(value.is_finite() && value > 0.0) {
                    return Err(format!(
                        "{key}: {} must be a positive number",
                        crate::units::show_number(value)
                    ));
                }
                low_precision_peak_range(key).check(value)?;
            }
        }
        // The bf16 peak is the floor (the range's doc): on every GPU with FP8 or FP4 tensor
        // cores the narrower format runs at least as fast as the wider one (H100 SXM 1978.9
        // FP8 over 989.4 bf16; B200 9000 FP4 over 4500 FP8; clusters/*.yaml with their
        // datasheet sources). A lower one is a typo or a swapped line, and `--precision fp8`
        // would price FP8 GEMMs slower than bf16 without a word.
        let mut floor = ("peak_bf16_tflops", self.peak_bf16_tflops);
        for (key, value) in [
            ("peak_fp8_tflops", self.peak_fp8_tflops),
            ("peak_fp4_tflops", self.peak_fp4_tflops),
        ] {
            let Some(value) = value else { continue };
            if value < floor.1 {
                return Err(format!(
                    "{key}: {} is below {}: {} (rule: a narrower tensor-core format runs at least as fast as a wider one, e.g. H100 SXM FP8 1978.9 over bf16 989.4); give the dense {key} of the datasheet, or delete the line if the GPU has no such tensor cores",
                    crate::units::show_number(value),
                    floor.0,
                    crate::units::show_number(floor.1)
                ));
            }
            floor = (key, value);
        }
        for (key, value) in [
            ("fp8_gemm_efficiency", self.fp8_gemm_efficiency),
            (
                "fused_attention_efficiency",
                self.fused_attention_efficiency,
            ),
            ("fa2_attention_efficiency", self.fa2_attention_efficiency),
            ("sustained_matmul_fraction", self.sustained_matmul_fraction),
        ] {
            if let Some(value) = value
                && !(value > 0.0 && value <= 1.0)
            {
                return Err(format!(
                    "{key}: {} must be a fraction in (0, 1] (a share of a peak rate); give the measured share, e.g. 0.75, or delete the line to use the profile's default",
                    crate::units::show_number(value)
                ));
            }
            // The required efficiencies' floor too: a share of 1e-300 priced 300-digit steps.
            if let Some(value) = value {
                efficiency_range(key).check(value)?;
            }
        }
        // NVFP4 runs only on microscaling tensor cores (`supports`): an FP4 peak on a profile
        // without them would never be read, and `--precision nvfp4` would blame the hardware.
        if let Some(fp4) = self.peak_fp4_tflops
            && !self.microscaling
        {
            return Err(format!(
                "peak_fp4_tflops: {} is given, but microscaling is false (or absent), so the profile's tensor cores run no NVFP4 and the peak would never be used; add microscaling: true (data-centre Blackwell), or delete the peak_fp4_tflops line",
                crate::units::show_number(fp4)
            ));
        }
        if let Some(domain) = self.nvlink_domain_gpus
            && domain > MAX_NVLINK_DOMAIN_GPUS
        {
            return Err(format!(
                "nvlink_domain_gpus: {domain} is more than {MAX_NVLINK_DOMAIN_GPUS} (rule: NVIDIA's NVLink Switch System joins at most {MAX_NVLINK_DOMAIN_GPUS} GPUs in one NVLink domain); give the GPUs that share NVLink, e.g. nvlink_domain_gpus: 72 for an NVL72 rack, or delete the line for one node"
            ));
        }
        if let Some(domain) = self.nvlink_domain_gpus
            && (domain == 0 || !domain.is_multiple_of(self.gpus_per_node))
        {
            return Err(format!(
                "nvlink_domain_gpus: {domain} must be a positive multiple of gpus_per_node ({0}) (an NVLink domain spans whole nodes); give e.g. nvlink_domain_gpus: {0}, or delete the line for one node",
                self.gpus_per_node
            ));
        }
        Ok(())
    }
}

/// Which physical link a communication group runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// NVLink/NVSwitch inside a node.
    Nvlink,
    /// The per-GPU share of the node's network (InfiniBand, RoCE, Omni-Path).
    Network,
}

/// A bandwidth and a per-step latency: the α-β model of one link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpeed {
    pub bandwidth: BytesPerSec,
    pub latency: Seconds,
}

/// The cluster a plan runs on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    pub gpu: GpuProfile,
    pub nodes: u32,
    pub gpus_per_node: u32,
}

impl Cluster {
    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// GPUs that reach each other over NVLink: the profile's NVLink domain (72 on NVL72 racks),
    /// else one node.
    pub fn nvlink_domain(&self) -> u32 {
        let domain = self.gpu.nvlink_domain_gpus.unwrap_or(self.gpus_per_node);
        // Jobs of 128 GPUs and more on multi-node NVLink domains are allocated in segments of 16
        // trays inside one rack (NVIDIA technical blog, "Unlock exascale performance on NVIDIA
        // GB200 NVL72 with Slurm topology-aware job scheduling", 2026: "segment size 16 for large
        // jobs (128+ GPUs)"), so consecutive ranks share NVLink in
        // blocks of 16 trays, not of the whole rack. A tray is the profile's node
        // (`GpuProfile::gpus_per_node`, 4 on GB200); a `--gpus-per-node` of several trays keeps the
        // same segment, in whole nodes.
        if domain > self.gpus_per_node && self.total_gpus() >= 128 {
            let segment = 16 * self.gpu.gpus_per_node;
            let whole_nodes = (segment / self.gpus_per_node).max(1) * self.gpus_per_node;
            domain.min(whole_nodes)
        } else {
            domain
        }
    }

    /// Bus bandwidth of a group that crosses nodes with `members_per_node` of its ranks on each node:
    /// NCCL runs one ring per NIC, so k members bring k NICs, up to what NVLink can feed (the
    /// nccl-tests figure behind `network_efficiency` — 192 GB/s on 8×200 Gb/s DGX A100 — is exactly
    /// that 8-NIC aggregate). Inside a node it is the NVLink speed.
    pub fn group_speed(&self, link: Link, members_per_node: u32) -> LinkSpeed {
        let nvlink = self.link_speed(Link::Nvlink);
        match link {
            Link::Nvlink => nvlink,
            Link::Network => {
                let one = self.link_speed(Link::Network);
                let aggregate = one.bandwidth.0 * f64::from(members_per_node.max(1));
                LinkSpeed {
                    bandwidth: BytesPerSec(aggregate.min(nvlink.bandwidth.0)),
                    latency: one.latency,
                }
            }
        }
    }

    /// Achieved collective bandwidth and latency of a link (bus bandwidth in nccl-tests' terms).
    pub fn link_speed(&self, link: Link) -> LinkSpeed {
        let gpu = &self.gpu;
        match link {
            Link::Nvlink => LinkSpeed {
                bandwidth: BytesPerSec(gpu.nvlink_gb_per_s * GB * gpu.nvlink_efficiency),
                latency: Seconds(gpu.nvlink_latency_us * 1e-6),
            },
            Link::Network => LinkSpeed {
                bandwidth: BytesPerSec(gpu.network_gb_per_s * GB * gpu.network_efficiency),
                latency: Seconds(gpu.network_latency_us * 1e-6),
            },
        }
    }
}
