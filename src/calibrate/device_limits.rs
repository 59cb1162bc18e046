//! What the CUDA backend's buffers ask of one GPU's memory, checked before anything is measured
//! (the CPU backend has its own cap, `cpu::MAX_CPU_BYTES`). The limit is the memory of GPU 0 as
//! the driver reports it (`cuDeviceTotalMem`, through cudarc's `CudaContext::total_mem`, read when
//! `cuda::CudaTimer::open` probes the GPUs), and each refusal names it.
//!
//! Buffers, as `cuda.rs` allocates them: the device copy holds a source and a destination of
//! `--copy-bytes` each (`time_copy`); an all-reduce holds a send and a receive buffer of the whole
//! message on every rank (`time_collective`), so `--max-message` needs twice its size; a GEMM holds
//! its two operands, each of max(m·k, k·n)·batch elements (`time_gemm` reuses one pair sized for
//! both), and its m·n·batch result, all bf16 (2 bytes).

use super::{GemmShape, format_bytes};

/// Bytes of one bf16 element, the CUDA backend's GEMM and message type.
const BF16_BYTES: u64 = 2;

/// The refusal of a copy or message size whose two buffers (source and destination, or send and
/// receive) do not fit the GPU's memory; `None` when they fit. `shown` is the size as the user
/// wrote it (or the default, in words). The example is the largest power of two within a quarter
/// of the memory, which leaves room for the CUDA context, cuBLAS and NCCL.
pub fn cuda_buffer_refusal(
    flag: &str,
    shown: &str,
    bytes: u64,
    memory_bytes: u64,
) -> Option<String> {
    let need = bytes.saturating_mul(2);
    (need > memory_bytes).then(|| {
        let example = 1u64 << (memory_bytes / 4).max(1).ilog2();
        format!(
            "{flag} {shown} needs two buffers of that size on one GPU (source and destination, or send and receive), {} in all, over the GPU's memory of {} (cuDeviceTotalMem of GPU 0); give at most half of it, e.g. {flag} {}",
            format_bytes(need),
            format_bytes(memory_bytes),
            format_bytes(example)
        )
    })
}

/// Bytes a GEMM's bf16 operands and result take on the GPU, as `cuda.rs` `time_gemm` allocates them.
pub fn cuda_gemm_bytes(shape: GemmShape) -> u64 {
    let (m, n, k, batch) = (
        shape.m as u64,
        shape.n as u64,
        shape.k as u64,
        shape.batch as u64,
    );
    let operand = m
        .saturating_mul(k)
        .max(k.saturating_mul(n))
        .saturating_mul(batch);
    let result = m.saturating_mul(n).saturating_mul(batch);
    operand
        .saturating_mul(2)
        .saturating_add(result)
        .saturating_mul(BF16_BYTES)
}

/// The refusal of a GEMM whose operands and result do not fit the GPU's memory; `None` when they fit.
pub fn cuda_gemm_refusal(shape: GemmShape, memory_bytes: u64) -> Option<String> {
    let need = cuda_gemm_bytes(shape);
    (need > memory_bytes).then(|| {
        format!(
            "GEMM {}x{}x{} (x{}) needs {} of bf16 operands and result on one GPU, over the GPU's memory of {} (cuDeviceTotalMem of GPU 0); use smaller --sweep edges, or a shorter --seq-len or --micro-batch for the model's shards",
            shape.m,
            shape.n,
            shape.k,
            shape.batch,
            format_bytes(need),
            format_bytes(memory_bytes)
        )
    })
}
