//! The tensor-parallel layer on GPUs: its GEMMs in Megatron's order with the TP collectives between
//! them, forward and backward, timed with CUDA events; and a numerics check of the row-parallel
//! split. NEVER RUN ON A GPU (see `cuda.rs`).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use cudarc::nccl::ReduceOp;
use half::bf16;

use super::{
    BF16_TOLERANCE, CudaTimer, cuda_err, elapsed_s, gemm_rm, host_data, nccl_err, timed_event,
};
use crate::calibrate::{CalibrationError, LayerRun, LayerSpec, Reps, Timing};
use crate::cost::comm::Collective;

/// The layer's GEMMs and TP collectives on up to t GPUs, in Megatron's order, forward and backward.
/// Element-wise kernels (softmax, activation) are not run: no kernel compiler is built in, so the
/// measured time is GEMMs + collectives, and the report says so.
pub(super) fn run_layer_schedule(
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
    // `gather_only`: the sequence-parallel backward's all-gather of a column-parallel GEMM's input
    // again, for its weight gradient (Megatron keeps the shard; `cost::unit_costs`, `regathers`).
    let reduce = |timer: &CudaTimer,
                  bufs: &mut Vec<Bufs>,
                  which: fn(&mut Bufs) -> (&mut CudaSlice<bf16>, &mut CudaSlice<bf16>),
                  gather_only: bool|
     -> Result<f64, CalibrationError> {
        if ranks < 2 || (gather_only && !sp) {
            return Ok(0.0);
        }
        let comms = &timer.comms[&ranks];
        let starts = streams
            .iter()
            .map(timed_event)
            .collect::<Result<Vec<_>, _>>()?;
        let phases: &[bool] = if gather_only {
            &[false]
        } else if sp {
            &[true, false]
        } else {
            &[false]
        };
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
    for rep in 0..reps.warmup.saturating_add(reps.timed.max(1)) {
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
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.o, &mut bf.part), false)?;
        gemms(timer, &mut bufs, false, 1)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.mlp, &mut bf.part), false)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.o, &mut bf.part), true)?;
        gemms(timer, &mut bufs, true, 1)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.o, &mut bf.part), false)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.x, &mut bf.part), true)?;
        gemms(timer, &mut bufs, true, 0)?;
        comm += reduce(timer, &mut bufs, |bf| (&mut bf.x, &mut bf.part), false)?;
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
    // Four all-reduce equivalents, and under sequence parallelism the backward's two all-gathers
    // of the column-parallel inputs (the `gather_only` calls above).
    let bytes_per_rank = if ranks >= 2 {
        crate::calibrate::validate::layer_wire_bytes((tok * h * 2) as f64, ranks as u32, sp) as u64
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

/// The row-parallel check's largest relative error (none with one rank) and the named
/// per-check errors it reports.
type RowParallelCheck = (Option<f64>, Vec<(String, f64)>);

/// Numerics of the row-parallel split: Σ_r A_r·W_r all-reduced over the ranks equals A·W, checked
/// on the first rows against an f64 host reference (columns of A and rows of W split over ranks,
/// as the MLP-down GEMM splits them).
fn check_row_parallel(
    timer: &mut CudaTimer,
    spec: &LayerSpec,
    ranks: usize,
) -> Result<RowParallelCheck, CalibrationError> {
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
    let err = crate::calibrate::layer::relative_error(&got, &want);
    Ok((
        Some(err),
        vec![("row-parallel GEMM + all-reduce".into(), err)],
    ))
}
