//! Measuring the machine: the `KernelTimer` seam between the calibration and validation logic and
//! the two backends that time real kernels — `cpu` (rayon threads as ranks, shared-memory rings,
//! GEMMs through the `gemm` crate; what CI runs) and `cuda` (cuBLAS and NCCL through cudarc, loaded
//! at run time so that building needs no CUDA).
//!
//! Flow: `app.rs` picks a backend (`open_backend`), `run::calibrate` times GEMMs, a copy and
//! collectives and fits them (`fit`), `profile` stores the result as a hardware profile, and
//! `validate` runs one tensor-parallel layer and compares it with the cost model.

pub mod cpu;
pub mod cuda;
pub mod device_limits;
pub mod fit;
pub mod layer;
pub mod ring;
pub mod run;
pub mod summary;
pub mod validate;

use crate::cost::comm::Collective;
use crate::input_file::quote;

/// Why a calibration or validation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error(
        "the cuda backend needs {library} ({file}), which could not be loaded; install it or add its folder to LD_LIBRARY_PATH (`scripts/with-cuda-libs tpsim ...` finds the CUDA, cuBLAS and NCCL of a usual install or a PyTorch virtualenv), or use --backend cpu"
    )]
    MissingLibrary {
        library: &'static str,
        file: &'static str,
    },
    #[error(
        "the cuda backend found no usable NVIDIA GPU: {0}; use --backend cpu to run the CPU twin"
    )]
    NoGpu(String),
    #[error("CUDA error while {what}: {detail}")]
    Cuda { what: String, detail: String },
    #[error("{0}")]
    Input(String),
    #[error("fitting {what}: {source}")]
    Fit { what: String, source: fit::FitError },
}

/// Which backend measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Cpu,
    Cuda,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// Most timed repetitions of one measurement (`--reps`): a median of 1,000 is already exact to the
/// timer's resolution, and every sample is kept in memory.
pub const MAX_REPS: u32 = 1000;
/// Most untimed warm-up runs before one measurement (`--warmup`).
pub const MAX_WARMUP: u32 = 1000;

/// Warm-up runs (not timed) and timed repetitions of every measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reps {
    pub warmup: u32,
    pub timed: u32,
}

/// The spread of one measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub reps: u32,
}

impl Timing {
    pub fn from_samples(samples: &[f64]) -> Timing {
        Timing {
            median_s: fit::median(samples),
            min_s: samples.iter().copied().fold(f64::INFINITY, f64::min),
            max_s: samples.iter().copied().fold(0.0, f64::max),
            reps: samples.len() as u32,
        }
    }
}

/// A GEMM (m × k)·(k × n), `batch` independent times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
}

impl GemmShape {
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }
    /// Operand and result elements, each touched once.
    pub fn elements(&self) -> f64 {
        (self.m * self.k + self.k * self.n + self.m * self.n) as f64 * self.batch as f64
    }
}

/// One transformer layer to run with its TP split (see `layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerSpec {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn_hidden: usize,
    pub gated_mlp: bool,
    pub seq_len: usize,
    pub micro_batch: usize,
    pub tp: usize,
    pub sequence_parallel: bool,
}

/// What one run of a TP layer measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRun {
    /// Ranks actually run (fewer than tp when the machine has fewer devices).
    pub ranks_run: usize,
    /// Forward + backward of the layer, slowest rank.
    pub layer: Timing,
    /// Time inside TP collectives: on the CPU the rank that waited least (the transfer itself,
    /// not the waiting for slower ranks); on GPUs the slowest rank's event interval.
    pub comm: Timing,
    /// Bytes each rank put on the wire in one forward + backward (all ranks send the same).
    pub wire_bytes_per_rank: u64,
    /// Largest relative error (max |sharded − unsharded| / max |unsharded|) over output and
    /// gradients, and the tolerance it is held to; `None` when not checked.
    pub max_relative_error: Option<f64>,
    pub tolerance: f64,
    /// Per-tensor errors, for the report.
    pub errors: Vec<(String, f64)>,
    /// What was extrapolated rather than run.
    pub notes: Vec<String>,
}

/// Times real kernels on one machine: GEMMs, a device copy, collectives among its devices, and one
/// tensor-parallel layer.
pub trait KernelTimer {
    fn kind(&self) -> BackendKind;
    /// The device, in words (GPU name, or the CPU).
    fn device_name(&self) -> String;
    /// GPUs, or CPU ranks.
    fn devices(&self) -> usize;
    /// Element type of the GEMMs (bf16 on GPUs, f32 on the CPU).
    fn gemm_dtype(&self) -> &'static str;
    fn gemm_element_bytes(&self) -> f64;
    /// Memory of one device in GiB (the GPU's, or the CPU's RAM shared among the ranks).
    fn device_memory_gib(&self) -> Option<f64> {
        None
    }
    fn time_gemm(&mut self, shape: GemmShape, reps: Reps) -> Result<Timing, CalibrationError>;
    fn time_copy(&mut self, bytes: u64, reps: Reps) -> Result<Timing, CalibrationError>;
    /// One collective over the first `ranks` devices on a tensor of `bytes` (the full tensor).
    fn time_collective(
        &mut self,
        collective: Collective,
        ranks: usize,
        bytes: u64,
        reps: Reps,
    ) -> Result<Timing, CalibrationError>;
    fn run_layer(&mut self, spec: &LayerSpec, reps: Reps) -> Result<LayerRun, CalibrationError>;
    /// Refuses, before anything is measured, a GEMM this backend cannot time.
    fn check_gemm(&self, _shape: GemmShape) -> Result<(), CalibrationError> {
        Ok(())
    }
    /// Refuses, before anything is measured, a layer this backend cannot run.
    fn check_layer(&self, _spec: &LayerSpec) -> Result<(), CalibrationError> {
        Ok(())
    }
}

/// `--backend auto|cpu|cuda` resolved.
pub enum BackendChoice {
    Auto,
    Cpu,
    Cuda,
}

/// Opens the backend: `cuda` probes the libraries and GPUs first and fails with a clear error;
/// `auto` takes cuda when a GPU is usable, else the CPU, and says why on `why`.
pub fn open_backend(
    choice: BackendChoice,
    cpu_ranks: usize,
) -> Result<(Box<dyn KernelTimer>, String), CalibrationError> {
    match choice {
        BackendChoice::Cpu => Ok((
            Box::new(cpu::CpuTimer::new(cpu_ranks)?),
            "backend: cpu (--backend cpu)".to_string(),
        )),
        BackendChoice::Cuda => {
            let timer = cuda::CudaTimer::open()?;
            let why = format!("backend: cuda (--backend cuda), {}", timer.device_name());
            Ok((Box::new(timer), why))
        }
        BackendChoice::Auto => match cuda::CudaTimer::open() {
            Ok(timer) => {
                let why = format!(
                    "backend: cuda (auto: {} GPU(s) usable: {})",
                    timer.devices(),
                    timer.device_name()
                );
                Ok((Box::new(timer), why))
            }
            Err(err) => Ok((
                Box::new(cpu::CpuTimer::new(cpu_ranks)?),
                format!("backend: cpu (auto: cuda not usable: {err})"),
            )),
        },
    }
}

/// Parses a byte size as users type it: `65536`, `8KiB`, `4MiB`, `1GiB`, `1TiB`, `1GB`, up to
/// `EiB`/`EB` (a size in PiB is a size, too large for a backend's limit, not "not a byte size"). Text
/// that is no byte size says so; a size of 0 bytes (or less) says that it must be more; no part
/// of a byte is dropped (`1000.5` or `1.0001KiB`, 1024.1 bytes, are not rounded down), nor is a
/// count past 2^64 clamped. `text` is shown as [`quote`] shows user input.
pub fn parse_bytes(flag: &str, text: &str) -> Result<u64, CalibrationError> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "PiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "EiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "PB" => 1e15,
        "EB" => 1e18,
        _ => f64::NAN,
    };
    let shown = quote(text);
    let bytes = match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && multiplier.is_finite() => v * multiplier,
        _ => {
            return Err(CalibrationError::Input(format!(
                "{flag} {shown}: not a byte size; write e.g. 8KiB, 4MiB, 1GiB or 65536"
            )));
        }
    };
    if bytes < 1.0 {
        return Err(CalibrationError::Input(format!(
            "{flag} {shown}: must be at least 1 byte; e.g. {flag} 8KiB"
        )));
    }
    // 2^64: the first count a u64 does not hold (`as u64` would clamp it to 2^64 - 1).
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(CalibrationError::Input(format!(
            "{flag} {shown}: is more bytes than a 64-bit count holds; give a message size such as {flag} 1GiB"
        )));
    }
    // Whole within what reading the number and scaling it can be off by (a few units in the last
    // place): `1.005KB` is 1005 bytes, though 1.005 x 1000 is 1004.9999999999999 in binary.
    let whole = bytes.round();
    if (bytes - whole).abs() > whole * 4.0 * f64::EPSILON {
        return Err(CalibrationError::Input(format!(
            "{flag} {shown}: is not a whole number of bytes ({}); give whole bytes or a binary unit, e.g. {flag} 8KiB",
            crate::units::show_number(bytes)
        )));
    }
    Ok(whole as u64)
}

/// A byte count in the largest binary unit that holds it exactly (`4MiB`, `1GiB`, `65536B`).
pub fn format_bytes(bytes: u64) -> String {
    for (unit, size) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_with_their_units_and_reject_the_rest() {
        assert_eq!(parse_bytes("--x", "65536").unwrap(), 65536);
        assert_eq!(parse_bytes("--x", "8KiB").unwrap(), 8192);
        assert_eq!(parse_bytes("--x", "4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_bytes("--x", "1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("--x", "2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_bytes("--x", "1TiB").unwrap(), 1 << 40);
        assert_eq!(parse_bytes("--x", "1PiB").unwrap(), 1 << 50);
        assert_eq!(
            parse_bytes("--x", "2EB").unwrap(),
            2_000_000_000_000_000_000
        );
        for bad in ["", "8kb", "lots", "1ZiB"] {
            let err = parse_bytes("--max-message", bad).unwrap_err().to_string();
            assert!(err.contains("not a byte size"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_byte_size_is_whole_after_its_unit() {
        // 1.005 x 1000 is 1004.9999999999999 in binary floating point: still 1005 bytes.
        assert_eq!(parse_bytes("--x", "1.005KB").unwrap(), 1005);
        assert_eq!(parse_bytes("--x", "1.5KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("--x", "0.1MB").unwrap(), 100_000);
        for bad in ["1000.5", "1.0001KiB", "1.2345KB", "1.0000001GiB"] {
            let err = parse_bytes("--x", bad).unwrap_err().to_string();
            assert!(err.contains("not a whole number of bytes"), "{bad}: {err}");
        }
        let err = parse_bytes("--x", "16777216TiB").unwrap_err().to_string();
        assert!(err.contains("64-bit"), "{err}");
        let err = parse_bytes("--x", "").unwrap_err().to_string();
        assert!(err.starts_with("--x \"\": not a byte size"), "{err}");
    }

    #[test]
    fn zero_and_negative_byte_sizes_say_they_must_be_positive() {
        for bad in ["0", "0KiB", "-1KiB", "0.2"] {
            let err = parse_bytes("--max-message", bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("--max-message {bad}: must be at least 1 byte")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn byte_counts_format_in_the_largest_exact_unit() {
        assert_eq!(format_bytes(1 << 30), "1GiB");
        assert_eq!(format_bytes(4 << 20), "4MiB");
        assert_eq!(format_bytes(3 << 29), "1536MiB");
        assert_eq!(format_bytes(1000), "1000B");
    }
}
