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
        run_layer_schedule(self, spec, reps)
    }
}

/// The layer's GEMMs and TP collectives on up to t GPUs, in Megatron's order, forward and backward.
/// Element-wise kernels (softmax, activation) are not run: no kernel compiler is built in, so the
/// measured time is GEMMs + collectives, and the report says so.
fn run_layer_schedule(
    timer: &mut CudaTimer,
    spec: &LayerSpec,
    reps: Reps,
) -> Result<LayerRun, CalibrationError> {
    let t = spec.tp;
    let ranks = t.min(timer.devices.len());
    let d = spec.hidden / spec.heads;
    let (qa, kva) = (spec.heads / t, spec.kv_heads / t);
    let tok = spec.seq_len * spec.micro_batch;
    let (h, s, b) = (spec.hidden, spec.seq_len, spec.micro_batch);
    let wq = (qa + 2 * kva) * d;
    let fr = spec.ffn_hidden / t;
    let ur = if spec.gated_mlp { 2 * fr } else { fr };
    let mut notes = vec![
        "GPU layer: GEMMs and collectives only (softmax and activation kernels are not run)"
            .to_string(),
    ];
    if ranks < t {
        notes.push(format!(
            "only {} GPU(s) for tp {t}: ran the shards of {ranks} rank(s); collectives {}",
            timer.devices.len(),
            if ranks >= 2 {
                format!("among {ranks} GPUs, scaled to {t} by the wire factor 2(t-1)/t")
            } else {
                "not measured (one GPU)".into()
            }
        ));
    }
    struct Bufs {
        x: CudaSlice<bf16>,
        wqkv: CudaSlice<bf16>,
        qkv: CudaSlice<bf16>,
        scores: CudaSlice<bf16>,
        ctx: CudaSlice<bf16>,
        wo: CudaSlice<bf16>,
        o: CudaSlice<bf16>,
        wup: CudaSlice<bf16>,
        u: CudaSlice<bf16>,
        act: CudaSlice<bf16>,
        wdown: CudaSlice<bf16>,
        mlp: CudaSlice<bf16>,
        part: CudaSlice<bf16>,
        gw: CudaSlice<bf16>,
    }
    let mut bufs = Vec::new();
    for r in 0..ranks {
        let biggest_weight = (h * wq).max(qa * d * h).max(h * ur).max(fr * h);
        bufs.push(Bufs {
            x: timer.upload(r, &host_data(21, tok * h, 1.0))?,
            wqkv: timer.upload(r, &host_data(22 + r as u64 * 10, h * wq, 0.02))?,
            qkv: timer.alloc(r, tok * wq)?,
            scores: timer.alloc(r, b * qa * s * s)?,
            ctx: timer.alloc(r, tok * qa * d)?,
            wo: timer.upload(r, &host_data(23 + r as u64 * 10, qa * d * h, 0.02))?,
            o: timer.alloc(r, tok * h)?,
            wup: timer.upload(r, &host_data(24 + r as u64 * 10, h * ur, 0.02))?,
            u: timer.alloc(r, tok * ur)?,
            act: timer.upload(r, &host_data(25 + r as u64 * 10, tok * fr, 1.0))?,
            wdown: timer.upload(r, &host_data(26 + r as u64 * 10, fr * h, 0.02))?,
            mlp: timer.alloc(r, tok * h)?,
            part: timer.alloc(r, tok * h / ranks.max(1) + 1)?,
            gw: timer.alloc(r, biggest_weight)?,
        });
    }
    let streams: Vec<Arc<CudaStream>> = timer.devices[..ranks]
        .iter()
        .map(|dv| dv.stream.clone())
        .collect();
    if ranks >= 2 {
        timer.comms(ranks)?;
    }
    let sp = spec.sequence_parallel;
    // One TP reduction of the b·s·h activation held in `which` of every rank: all-reduce, or
    // reduce-scatter + all-gather with SP (same bytes, Korthikanti et al. 2022 §4.2.2).
    let reduce = |timer: &CudaTimer,
                  bufs: &mut Vec<Bufs>,
                  which: fn(&mut Bufs) -> (&mut CudaSlice<bf16>, &mut CudaSlice<bf16>)|
     -> Result<f64, CalibrationError> {
        if ranks < 2 {
            return Ok(0.0);
        }
        let comms = &timer.comms[&ranks];
        let starts = streams
            .iter()
            .map(timed_event)
            .collect::<Result<Vec<_>, _>>()?;
        let phases: &[bool] = if sp { &[true, false] } else { &[false] };
        for &scatter in phases {
            cudarc::nccl::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
            let mut result = Ok(());
            for (r, comm) in comms.iter().enumerate() {
                let (full, part) = which(&mut bufs[r]);
                let call = if !sp {
                    comm.all_reduce_in_place(full, &ReduceOp::Sum).map(|_| ())
                } else if scatter {
                    let mut view = part.slice_mut(0..full.len() / ranks);
                    comm.reduce_scatter(full, &mut view, &ReduceOp::Sum)
                        .map(|_| ())
                } else {
                    let view = part.slice(0..full.len() / ranks);
                    comm.all_gather(&view, full).map(|_| ())
                };
                if let Err(e) = call {
                    result = Err(nccl_err("a TP collective", e));
                }
            }
            cudarc::nccl::group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
            result?;
        }
        let ends = streams
            .iter()
            .map(timed_event)
            .collect::<Result<Vec<_>, _>>()?;
        let mut slowest: f64 = 0.0;
        for (st, en) in starts.iter().zip(&ends) {
            slowest = slowest.max(elapsed_s(st, en)?);
        }
        Ok(slowest)
    };
    let mut layer_samples = Vec::new();
    let mut comm_samples = Vec::new();
    for rep in 0..reps.warmup + reps.timed.max(1) {
        let starts = streams
            .iter()
            .map(timed_event)
            .collect::<Result<Vec<_>, _>>()?;
        let mut comm = 0.0;
        let gemms = |timer: &CudaTimer, bufs: &mut Vec<Bufs>, backward: bool, part: usize| {
            for (r, bf) in bufs.iter_mut().enumerate() {
                let blas = &timer.devices[r].blas;
                let Bufs {
                    x,
                    wqkv,
                    qkv,
                    scores,
                    ctx,
                    wo,
                    o,
                    wup,
                    u,
                    act,
                    wdown,
                    mlp,
                    gw,
                    ..
                } = bf;
                let bh = b * qa;
                match (part, backward) {
                    (0, false) => {
                        gemm_rm(blas, x, wqkv, qkv, (tok, wq, h), (false, false), 1)?;
                        gemm_rm(blas, qkv, qkv, scores, (s, s, d), (false, true), bh)?;
                        gemm_rm(blas, scores, qkv, ctx, (s, d, s), (false, false), bh)?;
                        gemm_rm(blas, ctx, wo, o, (tok, h, qa * d), (false, false), 1)?;
                    }
                    (1, false) => {
                        gemm_rm(blas, o, wup, u, (tok, ur, h), (false, false), 1)?;
                        gemm_rm(blas, act, wdown, mlp, (tok, h, fr), (false, false), 1)?;
                    }
                    (1, true) => {
                        gemm_rm(blas, mlp, wdown, act, (tok, fr, h), (false, true), 1)?;
                        gemm_rm(blas, act, mlp, gw, (fr, h, tok), (true, false), 1)?;
                        gemm_rm(blas, o, u, gw, (h, ur, tok), (true, false), 1)?;
                        gemm_rm(blas, u, wup, o, (tok, h, ur), (false, true), 1)?;
                    }
                    _ => {
                        gemm_rm(blas, o, wo, ctx, (tok, qa * d, h), (false, true), 1)?;
                        gemm_rm(blas, ctx, o, gw, (qa * d, h, tok), (true, false), 1)?;
                        gemm_rm(blas, scores, ctx, qkv, (s, d, s), (true, false), bh)?;
                        gemm_rm(blas, ctx, qkv, scores, (s, s, d), (false, true), bh)?;
                        gemm_rm(blas, scores, qkv, ctx, (s, d, s), (false, false), bh)?;
                        gemm_rm(blas, scores, qkv, ctx, (s, d, s), (true, false), bh)?;
                        gemm_rm(blas, x, qkv, gw, (h, wq, tok), (true, false), 1)?;
                        gemm_rm(blas, qkv, wqkv, x, (tok, h, wq), (false, true), 1)?;
                    }
                }
            }
            Ok::<(), CalibrationError>(())
        };
        gemms(timer, &mut bufs, false, 0)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.o, &mut bf.part))?;
        gemms(timer, &mut bufs, false, 1)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.mlp, &mut bf.part))?;
        gemms(timer, &mut bufs, true, 1)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.o, &mut bf.part))?;
        gemms(timer, &mut bufs, true, 0)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.x, &mut bf.part))?;
        let ends = streams
            .iter()
            .map(timed_event)
            .collect::<Result<Vec<_>, _>>()?;
        let mut slowest: f64 = 0.0;
        for (st, en) in starts.iter().zip(&ends) {
            slowest = slowest.max(elapsed_s(st, en)?);
        }
        if rep >= reps.warmup {
            let scale = if ranks >= 2 && ranks < t {
                Collective::AllReduce.wire_factor(t as u32)
                    / Collective::AllReduce.wire_factor(ranks as u32)
            } else {
                1.0
            };
            layer_samples.push(slowest + comm * (scale - 1.0));
            comm_samples.push(comm * scale);
        }
    }
    let bytes_per_rank = if ranks >= 2 {
        (4.0 * Collective::AllReduce.wire_factor(ranks as u32) * (tok * h * 2) as f64) as u64
    } else {
        0
    };
    let (max_err, errors) = check_row_parallel(timer, spec, ranks)?;
    notes.push(
        "wire bytes per rank are NCCL's ring volume for these calls (NCCL does not report bytes sent)".into(),
    );
    Ok(LayerRun {
        ranks_run: ranks,
        layer: Timing::from_samples(&layer_samples),
        comm: Timing::from_samples(&comm_samples),
        wire_bytes_per_rank: bytes_per_rank,
        max_relative_error: max_err,
        tolerance: BF16_TOLERANCE,
        errors,
        notes,
    })
}

/// Numerics of the row-parallel split: Σ_r A_r·W_r all-reduced over the ranks equals A·W, checked
/// on the first rows against an f64 host reference (columns of A and rows of W split over ranks,
/// as the MLP-down GEMM splits them).
fn check_row_parallel(
    timer: &mut CudaTimer,
    spec: &LayerSpec,
    ranks: usize,
) -> Result<(Option<f64>, Vec<(String, f64)>), CalibrationError> {
    if ranks < 2 {
        return Ok((None, Vec::new()));
    }
    let rows = 8.min(spec.seq_len);
    let (f, h) = (spec.ffn_hidden - spec.ffn_hidden % ranks, spec.hidden);
    let fr = f / ranks;
    let a_full = host_data(31, rows * f, 1.0);
    let w_full = host_data(32, f * h, 0.02);
    let mut outs = Vec::new();
    for r in 0..ranks {
        let a: Vec<bf16> = (0..rows)
            .flat_map(|i| a_full[i * f + r * fr..i * f + (r + 1) * fr].iter().copied())
            .collect();
        let w = &w_full[r * fr * h..(r + 1) * fr * h];
        let a = timer.upload(r, &a)?;
        let w = timer.upload(r, w)?;
        let mut c = timer.alloc(r, rows * h)?;
        gemm_rm(
            &timer.devices[r].blas,
            &a,
            &w,
            &mut c,
            (rows, h, fr),
            (false, false),
            1,
        )?;
        outs.push(c);
    }
    let comms = &timer.comms(ranks)?;
    cudarc::nccl::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
    for (r, comm) in comms.iter().enumerate() {
        comm.all_reduce_in_place(&mut outs[r], &ReduceOp::Sum)
            .map_err(|e| nccl_err("all-reduce (numerics check)", e))?;
    }
    cudarc::nccl::group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
    let got = timer.devices[0]
        .stream
        .clone_dtoh(&outs[0])
        .map_err(|e| cuda_err("copying the result back", e))?;
    let mut want = vec![0.0f64; rows * h];
    for i in 0..rows {
        for kk in 0..f {
            let a = a_full[i * f + kk].to_f64();
            for j in 0..h {
                want[i * h + j] += a * w_full[kk * h + j].to_f64();
            }
        }
    }
    let got: Vec<f64> = got.iter().map(|v| v.to_f64()).collect();
    let err = super::layer::relative_error(&got, &want);
    Ok((
        Some(err),
        vec![("row-parallel GEMM + all-reduce".into(), err)],
    ))
}
