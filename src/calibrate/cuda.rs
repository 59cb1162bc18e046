//! The GPU backend: cuBLAS GEMMs in bf16, NCCL collectives, CUDA-event timing, through cudarc with
//! run-time loading (`dynamic-loading`), so building tpsim needs no CUDA and a machine without it
//! gets a clear error instead of cudarc's panic.
//!
//! NEVER RUN ON A GPU: this file was written and compiled without access to one; treat its numbers
//! as unverified until `scripts/gpu-check.sh` has run on a GPU machine.
//!
//! Single node: one process drives every GPU, one NCCL communicator per device from
//! `ncclCommInitAll` (`Comm::from_devices`), collectives issued inside `ncclGroupStart/End` so one
//! thread can launch all ranks (NCCL user guide, "Group Calls"). Timing: CUDA events with timing
//! enabled recorded on each device's stream before and after; the slowest rank counts.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudarc::nccl::{Comm, ReduceOp};
use half::bf16;

mod layer;

use super::layer::hash_uniform;
use super::{
    BackendKind, CalibrationError, GemmShape, KernelTimer, LayerRun, LayerSpec, Reps, Timing,
};
use crate::cost::comm::Collective;

/// Relative tolerance of a bf16 GEMM with f32 accumulation against an f64 reference.
const BF16_TOLERANCE: f64 = 3e-2;

fn cuda_err(what: &str, detail: impl std::fmt::Display) -> CalibrationError {
    CalibrationError::Cuda {
        what: what.to_string(),
        detail: detail.to_string(),
    }
}

fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> CalibrationError {
    CalibrationError::Cuda {
        what: what.to_string(),
        detail: format!("NCCL {:?}", e.0),
    }
}

/// Checks that every library the backend calls can be loaded, before cudarc gets a chance to
/// panic on a missing one. NCCL is only needed with two or more GPUs.
pub fn probe_libraries() -> Result<(), CalibrationError> {
    // SAFETY: these only try `dlopen` on the candidate names and drop the handle.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    if !driver {
        return Err(CalibrationError::MissingLibrary {
            library: "the CUDA driver",
            file: "libcuda.so",
        });
    }
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(CalibrationError::MissingLibrary {
            library: "cuBLAS",
            file: "libcublas.so",
        });
    }
    if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        return Err(CalibrationError::MissingLibrary {
            library: "cuBLASLt",
            file: "libcublasLt.so",
        });
    }
    Ok(())
}

fn nccl_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an older library) into an error.
fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, CalibrationError>,
) -> Result<T, CalibrationError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "cudarc panicked".into());
            Err(cuda_err(what, detail))
        }
    }
}

struct Device {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
}

pub struct CudaTimer {
    devices: Vec<Device>,
    name: String,
    memory_bytes: usize,
    comms: HashMap<usize, Vec<Comm>>,
    /// GEMM operands on GPU 0, kept between measurements.
    operands: Option<(CudaSlice<bf16>, CudaSlice<bf16>)>,
}

fn timed_event(stream: &Arc<CudaStream>) -> Result<cudarc::driver::CudaEvent, CalibrationError> {
    stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("recording a CUDA event", e))
}

fn elapsed_s(
    start: &cudarc::driver::CudaEvent,
    end: &cudarc::driver::CudaEvent,
) -> Result<f64, CalibrationError> {
    start
        .elapsed_ms(end)
        .map(|ms| f64::from(ms) * 1e-3)
        .map_err(|e| cuda_err("reading CUDA event times", e))
}

/// Pseudo-random bf16 data in [−scale, scale).
fn host_data(stream: u64, len: usize, scale: f64) -> Vec<bf16> {
    (0..len)
        .map(|i| bf16::from_f64(scale * hash_uniform(stream, i)))
        .collect()
}

impl CudaTimer {
    /// Probes the libraries and opens every GPU.
    pub fn open() -> Result<CudaTimer, CalibrationError> {
        probe_libraries()?;
        guarded("opening the GPUs", || {
            let count = CudaContext::device_count()
                .map_err(|e| CalibrationError::NoGpu(format!("cuDeviceGetCount failed: {e}")))?;
            if count < 1 {
                return Err(CalibrationError::NoGpu("the driver sees 0 devices".into()));
            }
            let mut devices = Vec::new();
            let mut name = String::new();
            let mut memory_bytes = 0;
            for ordinal in 0..count as usize {
                let ctx = CudaContext::new(ordinal)
                    .map_err(|e| CalibrationError::NoGpu(format!("GPU {ordinal}: {e}")))?;
                if ordinal == 0 {
                    name = ctx
                        .name()
                        .map_err(|e| cuda_err("reading the GPU name", e))?;
                    memory_bytes = ctx
                        .total_mem()
                        .map_err(|e| cuda_err("reading GPU memory", e))?;
                }
                let stream = ctx
                    .new_stream()
                    .map_err(|e| cuda_err("creating a stream", e))?;
                let blas = CudaBlas::new(stream.clone())
                    .map_err(|e| cuda_err("creating a cuBLAS handle", e))?;
                devices.push(Device { stream, blas });
            }
            Ok(CudaTimer {
                devices,
                name,
                memory_bytes,
                comms: HashMap::new(),
                operands: None,
            })
        })
    }

    fn alloc(&self, device: usize, len: usize) -> Result<CudaSlice<bf16>, CalibrationError> {
        self.devices[device]
            .stream
            .alloc_zeros::<bf16>(len.max(1))
            .map_err(|e| {
                cuda_err(
                    &format!("allocating {} MiB on GPU {device}", (len * 2) >> 20),
                    e,
                )
            })
    }

    fn upload(&self, device: usize, data: &[bf16]) -> Result<CudaSlice<bf16>, CalibrationError> {
        self.devices[device]
            .stream
            .clone_htod(data)
            .map_err(|e| cuda_err("copying to the GPU", e))
    }

    fn comms(&mut self, ranks: usize) -> Result<&Vec<Comm>, CalibrationError> {
        if !nccl_present() {
            return Err(CalibrationError::MissingLibrary {
                library: "NCCL",
                file: "libnccl.so (Python wheels ship only libnccl.so.2)",
            });
        }
        if !self.comms.contains_key(&ranks) {
            let streams: Vec<Arc<CudaStream>> = self.devices[..ranks]
                .iter()
                .map(|d| d.stream.clone())
                .collect();
            let comms = guarded("initialising NCCL", || {
                Comm::from_devices(streams).map_err(|e| nccl_err("ncclCommInitAll", e))
            })?;
            self.comms.insert(ranks, comms);
        }
        Ok(&self.comms[&ranks])
    }
}

/// Row-major C (m×n) = op(A)·op(B) through column-major cuBLAS: Cᵀ = op(B)ᵀ·op(A)ᵀ. `ta`/`tb`:
/// A is stored k×m (B stored n×k) and used transposed. `batch` > 1 runs contiguous strided blocks.
#[allow(clippy::too_many_arguments)]
fn gemm_rm(
    blas: &CudaBlas,
    a: &CudaSlice<bf16>,
    b: &CudaSlice<bf16>,
    c: &mut CudaSlice<bf16>,
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    batch: usize,
) -> Result<(), CalibrationError> {
    let op = |t: bool| {
        if t {
            cublasOperation_t::CUBLAS_OP_T
        } else {
            cublasOperation_t::CUBLAS_OP_N
        }
    };
    let cfg = GemmConfig {
        transa: op(tb),
        transb: op(ta),
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha: bf16::ONE,
        lda: if tb { k } else { n } as i32,
        ldb: if ta { m } else { k } as i32,
        beta: bf16::ZERO,
        ldc: n as i32,
    };
    if a.len() < m * k * batch || b.len() < k * n * batch || c.len() < m * n * batch {
        return Err(cuda_err(
            "checking GEMM buffers",
            "a buffer is smaller than its shape",
        ));
    }
    // SAFETY: the lengths were checked against the shapes just above.
    let result = unsafe {
        if batch == 1 {
            blas.gemm(cfg, b, a, c)
        } else {
            blas.gemm_strided_batched(
                StridedBatchedConfig {
                    gemm: cfg,
                    batch_size: batch as i32,
                    stride_a: (k * n) as i64,
                    stride_b: (m * k) as i64,
                    stride_c: (m * n) as i64,
                },
                b,
                a,
                c,
            )
        }
    };
    result.map_err(|e| cuda_err(&format!("cuBLAS GEMM {m}x{n}x{k} (x{batch})"), e))
}

impl KernelTimer for CudaTimer {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn device_name(&self) -> String {
        format!("{} x {}", self.devices.len(), self.name)
    }

    fn devices(&self) -> usize {
        self.devices.len()
    }

    fn gemm_dtype(&self) -> &'static str {
        "bf16"
    }

    fn gemm_element_bytes(&self) -> f64 {
        2.0
    }

    fn device_memory_gib(&self) -> Option<f64> {
        Some(self.memory_bytes as f64 / crate::units::GIB)
    }

    fn check_gemm(&self, shape: GemmShape) -> Result<(), CalibrationError> {
        match super::device_limits::cuda_gemm_refusal(shape, self.memory_bytes as u64) {
            Some(refusal) => Err(CalibrationError::Input(refusal)),
            None => Ok(()),
        }
    }

    fn time_gemm(&mut self, shape: GemmShape, reps: Reps) -> Result<Timing, CalibrationError> {
        let (m, n, k, batch) = (shape.m, shape.n, shape.k, shape.batch);
        // Operands are generated once at the largest size seen and reused (a GEMM reads only
        // its leading m·k and k·n elements), so a sweep does not regenerate gigabytes per shape.
        let need = (m * k * batch).max(k * n * batch);
        if self.operands.as_ref().is_none_or(|(a, _)| a.len() < need) {
            self.operands = None;
            let a = self.upload(0, &host_data(11, need, 1.0))?;
            let b = self.upload(0, &host_data(12, need, 1.0))?;
            self.operands = Some((a, b));
        }
        let mut c = self.alloc(0, m * n * batch)?;
        let (a, b) = self
            .operands
            .as_ref()
            .ok_or_else(|| cuda_err("preparing GEMM operands", "none allocated"))?;
        let dev = &self.devices[0];
        for _ in 0..reps.warmup {
            gemm_rm(&dev.blas, a, b, &mut c, (m, n, k), (false, false), batch)?;
        }
        let mut samples = Vec::new();
        for _ in 0..reps.timed {
            let start = timed_event(&dev.stream)?;
            gemm_rm(&dev.blas, a, b, &mut c, (m, n, k), (false, false), batch)?;
            let end = timed_event(&dev.stream)?;
            samples.push(elapsed_s(&start, &end)?);
        }
        Ok(Timing::from_samples(&samples))
    }

    fn time_copy(&mut self, bytes: u64, reps: Reps) -> Result<Timing, CalibrationError> {
        let len = (bytes / 2) as usize;
        let src = self.alloc(0, len)?;
        let mut dst = self.alloc(0, len)?;
        let stream = self.devices[0].stream.clone();
        let copy = |dst: &mut CudaSlice<bf16>| {
            stream
                .memcpy_dtod(&src, dst)
                .map_err(|e| cuda_err("device-to-device copy", e))
        };
        for _ in 0..reps.warmup {
            copy(&mut dst)?;
        }
        let mut samples = Vec::new();
        for _ in 0..reps.timed {
            let start = timed_event(&stream)?;
            copy(&mut dst)?;
            let end = timed_event(&stream)?;
            samples.push(elapsed_s(&start, &end)?);
        }
        Ok(Timing::from_samples(&samples))
    }

    fn time_collective(
        &mut self,
        collective: Collective,
        ranks: usize,
        bytes: u64,
        reps: Reps,
    ) -> Result<Timing, CalibrationError> {
        if ranks < 2 || ranks > self.devices.len() {
            return Err(CalibrationError::Input(format!(
                "a collective among {ranks} GPUs needs 2..={} GPUs",
                self.devices.len()
            )));
        }
        let count = ((bytes / 2) as usize / ranks).max(1) * ranks;
        let part = count / ranks;
        let (send_len, recv_len) = match collective {
            Collective::AllReduce | Collective::SendRecv => (count, count),
            Collective::AllGather => (part, count),
            Collective::ReduceScatter => (count, part),
        };
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for r in 0..ranks {
            sends.push(self.alloc(r, send_len)?);
            recvs.push(self.alloc(r, recv_len)?);
        }
        let streams: Vec<Arc<CudaStream>> = self.devices[..ranks]
            .iter()
            .map(|d| d.stream.clone())
            .collect();
        let comms = self.comms(ranks)?;
        let mut once = || -> Result<(), CalibrationError> {
            cudarc::nccl::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
            let mut result = Ok(());
            for (r, comm) in comms.iter().enumerate() {
                let call = match collective {
                    Collective::AllReduce => comm
                        .all_reduce(&sends[r], &mut recvs[r], &ReduceOp::Sum)
                        .map(|_| ()),
                    Collective::AllGather => comm.all_gather(&sends[r], &mut recvs[r]).map(|_| ()),
                    Collective::ReduceScatter => comm
                        .reduce_scatter(&sends[r], &mut recvs[r], &ReduceOp::Sum)
                        .map(|_| ()),
                    Collective::SendRecv => match r {
                        0 => comm.send(&sends[0], 1),
                        1 => comm.recv(&mut recvs[1], 0).map(|_| ()),
                        _ => Ok(()),
                    },
                };
                if let Err(e) = call {
                    result = Err(nccl_err(&format!("{collective:?} on rank {r}"), e));
                }
            }
            cudarc::nccl::group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
            result
        };
        for _ in 0..reps.warmup {
            once()?;
        }
        let mut samples = Vec::new();
        for _ in 0..reps.timed {
            let starts = streams
                .iter()
                .map(timed_event)
                .collect::<Result<Vec<_>, _>>()?;
            once()?;
            let ends = streams
                .iter()
                .map(timed_event)
                .collect::<Result<Vec<_>, _>>()?;
            let mut slowest: f64 = 0.0;
            for (s, e) in starts.iter().zip(&ends) {
                slowest = slowest.max(elapsed_s(s, e)?);
            }
            samples.push(slowest);
        }
        Ok(Timing::from_samples(&samples))
    }

    fn run_layer(&mut self, spec: &LayerSpec, reps: Reps) -> Result<LayerRun, CalibrationError> {
        layer::run_layer_schedule(self, spec, reps)
    }
}
