//! The CPU twin of the GPU backend: one rayon thread per rank stands for one GPU, collectives are
//! the shared-memory rings of `ring`, GEMMs go through the `gemm` crate in f32 on one thread each.
//! It runs the same calibration and validation code paths as the cuda backend, so CI exercises
//! them end to end; its numbers describe this CPU, not a GPU.

use std::sync::Mutex;
use std::time::Instant;

use super::layer::{self, Mat, Weights};
use super::ring::{Ring, chunk};
use super::{
    BackendKind, CalibrationError, GemmShape, KernelTimer, LayerRun, LayerSpec, Reps, Timing,
};
use crate::cost::comm::Collective;

/// Largest GEMM the CPU backend times: beyond this one measurement takes seconds.
pub const MAX_CPU_GEMM_FLOPS: f64 = 2e10;
/// Largest tensor a CPU collective or layer moves.
pub const MAX_CPU_BYTES: u64 = 1 << 30;

/// Most memory one CPU layer run may allocate (every rank's f32 copy plus the f64 reference
/// layer the numerics are checked against). Attention probabilities grow with seq_len², so a long
/// sequence asks for far more than the tokens × hidden size suggests.
pub const MAX_CPU_LAYER_BYTES: f64 = 2.0 * (1u64 << 30) as f64;

/// Upper estimate of the bytes a CPU layer run allocates, from `layer::run_rank` and
/// `check_numerics`: the f64 weights, inputs and assembled gradients; per rank (f32) the weight
/// shards and their gradients, about a dozen tokens × hidden activations, the QKV/MLP activations
/// and the attention probabilities (micro_batch × local heads × seq_len²); and the same again in
/// f64 for the unsharded reference run.
pub fn layer_memory_bytes(spec: &LayerSpec) -> f64 {
    let f = |v: usize| v as f64;
    let (h, t) = (f(spec.hidden), f(spec.tp.max(1)));
    let d = h / f(spec.heads.max(1));
    let qkv_width = (f(spec.heads) + 2.0 * f(spec.kv_heads)) * d;
    let up = f(spec.ffn_hidden) * if spec.gated_mlp { 2.0 } else { 1.0 };
    let weights = h * qkv_width + h * h + h * up + f(spec.ffn_hidden) * h;
    let tokens = f(spec.seq_len) * f(spec.micro_batch);
    let wide = 2.0 * qkv_width + 4.0 * up + 2.0 * f(spec.ffn_hidden);
    let seq = f(spec.seq_len);
    let attention = f(spec.micro_batch) * f(spec.heads) * seq * seq;
    // f64: weights, x and dz, the four assembled weight gradients.
    let shared = 8.0 * (2.0 * weights + 2.0 * tokens * h);
    // f32 ranks: shards + gradients, replicated activations per rank, sharded wide ones, attention
    // probabilities (all heads over the ranks) and one seq² gradient buffer per rank.
    let ranks =
        4.0 * (2.0 * weights + t * 12.0 * tokens * h + tokens * wide + attention + t * seq * seq);
    // The f64 reference run (tp = 1).
    let reference =
        8.0 * (2.0 * weights + 12.0 * tokens * h + tokens * wide + attention + seq * seq);
    shared + ranks + reference
}

/// Relative tolerance of the sharded layer against the unsharded one: data crosses the ring as
/// bf16 (8 significand bits, unit roundoff 2⁻⁸ ≈ 0.4%), a few roundings deep.
pub const BF16_WIRE_TOLERANCE: f64 = 3e-2;

pub struct CpuTimer {
    ranks: usize,
}

impl CpuTimer {
    pub fn new(ranks: usize) -> Result<CpuTimer, CalibrationError> {
        if !(1..=64).contains(&ranks) {
            return Err(CalibrationError::Input(format!(
                "--ranks {ranks}: the CPU backend runs 1 to 64 ranks (threads); e.g. --ranks 4"
            )));
        }
        Ok(CpuTimer { ranks })
    }

    fn pool(&self, ranks: usize) -> Result<rayon::ThreadPool, CalibrationError> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(ranks)
            .build()
            .map_err(|e| CalibrationError::Input(format!("starting {ranks} rank threads: {e}")))
    }
}

fn pattern(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i % 251) as f32 - 125.0) / 125.0)
        .collect()
}

impl KernelTimer for CpuTimer {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn device_name(&self) -> String {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!(
            "CPU twin: {} rank threads on {cores} core(s) ({})",
            self.ranks,
            std::env::consts::ARCH
        )
    }

    fn devices(&self) -> usize {
        self.ranks
    }

    fn gemm_dtype(&self) -> &'static str {
        "f32"
    }

    fn gemm_element_bytes(&self) -> f64 {
        4.0
    }

    fn device_memory_gib(&self) -> Option<f64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib: f64 = text
            .lines()
            .find(|l| l.starts_with("MemTotal:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib * 1024.0 / crate::units::GIB / self.ranks as f64)
    }

    fn check_gemm(&self, shape: GemmShape) -> Result<(), CalibrationError> {
        if shape.flops() > MAX_CPU_GEMM_FLOPS {
            return Err(CalibrationError::Input(format!(
                "GEMM {}x{}x{} (x{}) is {:.0} GFLOP, too large for the CPU backend (limit {:.0} GFLOP per GEMM); use a small model, e.g. --layers 2 --hidden 256 --heads 8 --seq-len 128",
                shape.m,
                shape.n,
                shape.k,
                shape.batch,
                shape.flops() / 1e9,
                MAX_CPU_GEMM_FLOPS / 1e9
            )));
        }
        Ok(())
    }

    fn time_gemm(&mut self, shape: GemmShape, reps: Reps) -> Result<Timing, CalibrationError> {
        self.check_gemm(shape)?;
        let (m, n, k) = (shape.m, shape.n, shape.k);
        let a = pattern(m * k * shape.batch);
        let b = pattern(k * n * shape.batch);
        let mut c = vec![0.0f32; m * n * shape.batch];
        let mut run = || {
            for i in 0..shape.batch {
                layer::matmul(
                    &mut c,
                    i * m * n,
                    n,
                    Mat::block(&a, i * m * k, m, k, k),
                    Mat::block(&b, i * k * n, k, n, n),
                    false,
                );
            }
        };
        for _ in 0..reps.warmup {
            run();
        }
        let samples: Vec<f64> = (0..reps.timed)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed().as_secs_f64()
            })
            .collect();
        std::hint::black_box(&c);
        Ok(Timing::from_samples(&samples))
    }

    fn time_copy(&mut self, bytes: u64, reps: Reps) -> Result<Timing, CalibrationError> {
        let bytes = bytes.min(MAX_CPU_BYTES);
        let src = vec![1u8; bytes as usize];
        let mut dst = vec![0u8; bytes as usize];
        for _ in 0..reps.warmup {
            dst.copy_from_slice(&src);
        }
        let samples: Vec<f64> = (0..reps.timed)
            .map(|_| {
                let t = Instant::now();
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&dst);
                t.elapsed().as_secs_f64()
            })
            .collect();
        Ok(Timing::from_samples(&samples))
    }

    fn time_collective(
        &mut self,
        collective: Collective,
        ranks: usize,
        bytes: u64,
        reps: Reps,
    ) -> Result<Timing, CalibrationError> {
        if ranks < 2 || ranks > self.ranks {
            return Err(CalibrationError::Input(format!(
                "a collective among {ranks} ranks needs 2..={} ranks",
                self.ranks
            )));
        }
        if bytes > MAX_CPU_BYTES {
            return Err(CalibrationError::Input(format!(
                "--max-message {bytes} B is over the CPU backend's 1 GiB limit"
            )));
        }
        // The ring moves bf16: bytes / 2 elements, computed in f32.
        let len = (bytes / 2) as usize;
        let ring = Ring::new(ranks);
        let rank0: Mutex<Vec<f64>> = Mutex::new(Vec::new());
        self.pool(ranks)?.broadcast(|ctx| {
            let rank = ctx.index();
            let mut buf = pattern(len);
            let part_len = chunk(len, ranks, rank).len();
            let mut part = vec![0.0f32; part_len];
            let once = |buf: &mut Vec<f32>, part: &mut Vec<f32>| match collective {
                Collective::AllReduce => ring.all_reduce(rank, buf),
                Collective::AllGather => ring.all_gather(rank, &part.clone(), buf),
                Collective::ReduceScatter => ring.reduce_scatter(rank, buf, part),
                Collective::SendRecv => ring.send_recv(rank, buf),
            };
            for _ in 0..reps.warmup {
                once(&mut buf, &mut part);
            }
            let mut samples = Vec::with_capacity(reps.timed as usize);
            for _ in 0..reps.timed {
                ring.barrier();
                let t = Instant::now();
                once(&mut buf, &mut part);
                ring.barrier();
                samples.push(t.elapsed().as_secs_f64());
            }
            if rank == 0 {
                *rank0.lock().unwrap_or_else(|p| p.into_inner()) = samples;
            }
        });
        let samples = rank0.into_inner().unwrap_or_else(|p| p.into_inner());
        Ok(Timing::from_samples(&samples))
    }

    fn check_layer(&self, spec: &LayerSpec) -> Result<(), CalibrationError> {
        let t = spec.tp;
        if t == 0
            || !spec.heads.is_multiple_of(t)
            || !spec.kv_heads.is_multiple_of(t)
            || !spec.ffn_hidden.is_multiple_of(t)
            || !spec.hidden.is_multiple_of(spec.heads)
        {
            return Err(CalibrationError::Input(format!(
                "tp {t} must divide the heads ({}), KV heads ({}) and MLP width ({}), and the heads the hidden size ({})",
                spec.heads, spec.kv_heads, spec.ffn_hidden, spec.hidden
            )));
        }
        if spec.micro_batch == 0 || spec.seq_len == 0 {
            return Err(CalibrationError::Input(format!(
                "a layer of {} sequences x {} tokens has no rows to run; use at least 1 of each",
                spec.micro_batch, spec.seq_len
            )));
        }
        let needed = layer_memory_bytes(spec);
        if needed > MAX_CPU_LAYER_BYTES {
            let gib = crate::units::GIB;
            // The weights and their gradients alone (one token) may be over the cap: no shorter
            // sequence helps then, only a narrower model.
            let weights_alone = layer_memory_bytes(&LayerSpec {
                micro_batch: 1,
                seq_len: 1,
                ..*spec
            });
            let fix = if weights_alone > MAX_CPU_LAYER_BYTES {
                format!(
                    "its weights and their gradients alone need {:.1} GiB, whatever the sequence; use a narrower model, e.g. --layers 2 --hidden 256 --heads 8 --seq-len 128",
                    weights_alone / gib
                )
            } else {
                "attention grows with seq_len^2; use a shorter --seq-len or --micro-batch, e.g. --seq-len 128".to_string()
            };
            return Err(CalibrationError::Input(format!(
                "a layer of {} sequences x {} tokens (hidden {}, {} heads) needs about {:.1} GiB on the CPU backend, over its cap of {:.0} GiB: {fix}",
                spec.micro_batch,
                spec.seq_len,
                spec.hidden,
                spec.heads,
                needed / gib,
                MAX_CPU_LAYER_BYTES / gib
            )));
        }
        let tokens = spec.seq_len.saturating_mul(spec.micro_batch);
        let bytes = tokens.saturating_mul(spec.hidden).saturating_mul(2) as u64;
        let flops = 2.0
            * tokens as f64
            * spec.hidden as f64
            * (4.0 * spec.hidden as f64 + 3.0 * spec.ffn_hidden as f64);
        if bytes > MAX_CPU_BYTES || flops > 50.0 * MAX_CPU_GEMM_FLOPS {
            return Err(CalibrationError::Input(format!(
                "a layer of {tokens} tokens x hidden {} is too large for the CPU backend; use a small model, e.g. --layers 2 --hidden 256 --heads 8 --seq-len 128",
                spec.hidden
            )));
        }
        Ok(())
    }

    fn run_layer(&mut self, spec: &LayerSpec, reps: Reps) -> Result<LayerRun, CalibrationError> {
        self.check_layer(spec)?;
        let t = spec.tp;
        let weights = Weights::new(spec);
        let (x, dz) = layer::inputs(spec);
        let ring = Ring::new(t);
        type Out = (layer::RankResult<f32>, u64);
        let results: Vec<Mutex<Option<Out>>> = (0..t).map(|_| Mutex::new(None)).collect();
        let mut layer_samples = Vec::new();
        let mut comm_samples = Vec::new();
        let pool = self.pool(t)?;
        for rep in 0..reps.warmup.saturating_add(reps.timed.max(1)) {
            ring.reset_counts();
            pool.broadcast(|ctx| {
                let rank = ctx.index();
                let out = layer::run_rank::<f32>(spec, &weights, &x, &dz, &ring, rank);
                let sent = ring.sent_bytes(rank);
                *results[rank].lock().unwrap_or_else(|p| p.into_inner()) = Some((out, sent));
            });
            if rep >= reps.warmup {
                let outs: Vec<_> = results
                    .iter()
                    .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()))
                    .collect();
                let slowest = |f: fn(&layer::RankResult<f32>) -> f64| {
                    outs.iter()
                        .filter_map(|o| o.as_ref().map(|(r, _)| f(r)))
                        .fold(0.0, f64::max)
                };
                layer_samples.push(slowest(|r| r.layer_s));
                // Inside a collective a rank also waits for the others to arrive; the rank that
                // waits least (the last to arrive) shows the transfer itself.
                let least_waiting = outs
                    .iter()
                    .filter_map(|o| o.as_ref().map(|(r, _)| r.comm_s))
                    .fold(f64::INFINITY, f64::min);
                comm_samples.push(least_waiting);
            }
        }
        let outs: Vec<Out> = results
            .into_iter()
            .filter_map(|r| r.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let sent: Vec<u64> = outs.iter().map(|(_, s)| *s).collect();
        if sent.iter().any(|s| *s != sent[0]) {
            return Err(CalibrationError::Input(format!(
                "ranks sent different byte counts {sent:?}; the ring is unbalanced"
            )));
        }
        let errors = check_numerics(spec, &weights, &x, &dz, &outs);
        let max = errors.iter().map(|(_, e)| *e).fold(0.0, f64::max);
        Ok(LayerRun {
            ranks_run: t,
            layer: Timing::from_samples(&layer_samples),
            comm: Timing::from_samples(&comm_samples),
            wire_bytes_per_rank: sent[0],
            max_relative_error: Some(max),
            tolerance: BF16_WIRE_TOLERANCE,
            errors,
            notes: Vec::new(),
        })
    }
}

/// Assembles the sharded results into full tensors and compares them with the unsharded layer
/// (tp = 1) computed in f64.
fn check_numerics(
    spec: &LayerSpec,
    weights: &Weights,
    x: &[f64],
    dz: &[f64],
    outs: &[(layer::RankResult<f32>, u64)],
) -> Vec<(String, f64)> {
    let t = spec.tp;
    let whole = LayerSpec {
        tp: 1,
        sequence_parallel: false,
        ..*spec
    };
    let reference = layer::run_rank::<f64>(&whole, weights, x, dz, &Ring::new(1), 0);
    let activations = |pick: fn(&layer::RankResult<f32>) -> &Vec<f32>| -> Vec<f64> {
        if spec.sequence_parallel {
            outs.iter()
                .flat_map(|(r, _)| pick(r).iter().map(|v| f64::from(*v)))
                .collect()
        } else {
            pick(&outs[0].0).iter().map(|v| f64::from(*v)).collect()
        }
    };
    let d = spec.hidden / spec.heads;
    let qkv_cols = (spec.heads + 2 * spec.kv_heads) * d;
    let up_cols = if spec.gated_mlp { 2 } else { 1 } * spec.ffn_hidden;
    let h = spec.hidden;
    let mut d_qkv = vec![0.0; reference.d_qkv.len()];
    let mut d_out = vec![0.0; reference.d_out.len()];
    let mut d_up = vec![0.0; reference.d_up.len()];
    let mut d_down = vec![0.0; reference.d_down.len()];
    for (rank, (r, _)) in outs.iter().enumerate().take(t) {
        let map = layer::shard_map(spec, rank);
        layer::place_cols(&mut d_qkv, qkv_cols, &r.d_qkv, &map.qkv_cols);
        layer::place_rows(&mut d_out, h, &r.d_out, &map.attn_rows);
        layer::place_cols(&mut d_up, up_cols, &r.d_up, &map.up_cols);
        layer::place_rows(&mut d_down, h, &r.d_down, &map.ffn_rows);
    }
    vec![
        (
            "output".into(),
            layer::relative_error(&activations(|r| &r.z), &reference.z),
        ),
        (
            "input grad".into(),
            layer::relative_error(&activations(|r| &r.dx), &reference.dx),
        ),
        (
            "QKV weight grad".into(),
            layer::relative_error(&d_qkv, &reference.d_qkv),
        ),
        (
            "proj weight grad".into(),
            layer::relative_error(&d_out, &reference.d_out),
        ),
        (
            "MLP up weight grad".into(),
            layer::relative_error(&d_up, &reference.d_up),
        ),
        (
            "MLP down weight grad".into(),
            layer::relative_error(&d_down, &reference.d_down),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tp: usize, sequence_parallel: bool) -> LayerSpec {
        LayerSpec {
            hidden: 64,
            heads: 4,
            kv_heads: tp.max(2),
            ffn_hidden: 128,
            gated_mlp: false,
            seq_len: 16,
            micro_batch: 2,
            tp,
            sequence_parallel,
        }
    }

    /// One rank's layer result and the bytes it sent on the ring.
    type RankOutput = (layer::RankResult<f32>, u64);

    fn run_ranks(spec: &LayerSpec) -> Vec<RankOutput> {
        let weights = Weights::new(spec);
        let (x, dz) = layer::inputs(spec);
        let ring = Ring::new(spec.tp);
        let outs: Vec<Mutex<Option<RankOutput>>> = (0..spec.tp).map(|_| Mutex::new(None)).collect();
        rayon::ThreadPoolBuilder::new()
            .num_threads(spec.tp)
            .build()
            .unwrap()
            .broadcast(|ctx| {
                let r = ctx.index();
                let out = layer::run_rank::<f32>(spec, &weights, &x, &dz, &ring, r);
                *outs[r].lock().unwrap() = Some((out, ring.sent_bytes(r)));
            });
        outs.into_iter()
            .map(|o| o.into_inner().unwrap().unwrap())
            .collect()
    }

    #[test]
    fn numerics_check_passes_the_right_split_and_catches_a_wrong_one() {
        for sp in [false, true] {
            let s = spec(2, sp);
            let weights = Weights::new(&s);
            let (x, dz) = layer::inputs(&s);
            let mut outs = run_ranks(&s);
            let good = check_numerics(&s, &weights, &x, &dz, &outs);
            assert!(
                good.iter().all(|(_, e)| *e < BF16_WIRE_TOLERANCE),
                "{good:?}"
            );
            // Swap the ranks' results: the weight-gradient shards land in the wrong places.
            outs.swap(0, 1);
            let bad = check_numerics(&s, &weights, &x, &dz, &outs);
            let worst = bad.iter().map(|(_, e)| *e).fold(0.0, f64::max);
            assert!(worst > 10.0 * BF16_WIRE_TOLERANCE, "{bad:?}");
        }
    }

    #[test]
    fn every_rank_sends_the_cost_models_tp_bytes() {
        for sp in [false, true] {
            let s = spec(4, sp);
            let outs = run_ranks(&s);
            // 4 all-reduce equivalents of b·s·h bf16 values, 2(t−1)/t of each on the wire; with
            // sequence parallelism the backward's two all-gathers of the column-parallel inputs
            // again, (t−1)/t each.
            let all_gathers = if sp { 2.0 } else { 0.0 };
            let per_tensor = 3.0 / 4.0 * (2 * 16 * 64 * 2) as f64;
            let want = ((4.0 * 2.0 + all_gathers) * per_tensor) as u64;
            assert!(outs.iter().all(|(_, sent)| *sent == want), "sp {sp}");
        }
    }
}
