//! One transformer layer with Megatron-LM's tensor-parallel split, run for real on CPU ranks:
//! column-parallel QKV and first MLP GEMM, row-parallel output projection and second MLP GEMM, an
//! all-reduce after each row-parallel GEMM in forward and after each column-parallel input gradient
//! in backward (Shoeybi et al. 2019 §3, Fig. 3–4: the f and g operators); with sequence parallelism
//! each all-reduce becomes an all-gather before the column-parallel GEMM and a reduce-scatter after
//! the row-parallel one (Korthikanti et al. 2022 §4.2.2, Fig. 5).
//!
//! The layer is y = x + Attention(x), z = y + MLP(y) with causal softmax attention (grouped-query
//! when kv_heads < heads) and a GeLU (tanh form) or SwiGLU MLP. Layer norms, biases and dropout are
//! left out: they are replicated element-wise work that does not change the TP split. Rows are
//! ordered [sequence, batch] as in Megatron, so a sequence-parallel chunk is a block of rows.
//! GEMMs go through the `gemm` crate (`Parallelism::None`: one rank, one thread).

use std::time::Instant;

use super::LayerSpec;
use super::ring::{Real, Ring, chunk};

/// A strided matrix view: element (i, j) is `data[off + i·rs + j·cs]`.
#[derive(Clone, Copy)]
pub struct Mat<'a, T> {
    pub data: &'a [T],
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A row-major `rows × cols` matrix.
    pub fn new(data: &'a [T], rows: usize, cols: usize) -> Self {
        Mat {
            data,
            off: 0,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }
    /// A block of rows `rows` apart by `rs`, starting at `off`.
    pub fn block(data: &'a [T], off: usize, rows: usize, cols: usize, rs: usize) -> Self {
        Mat {
            data,
            off,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }
    pub fn t(self) -> Self {
        Mat {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
    fn last(&self) -> usize {
        self.off + (self.rows.max(1) - 1) * self.rs + (self.cols.max(1) - 1) * self.cs
    }
}

/// out[off + i·out_rs + j] (+)= (a · b)[i, j].
pub fn matmul<T: Real>(
    out: &mut [T],
    off: usize,
    out_rs: usize,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    accumulate: bool,
) {
    assert_eq!(a.cols, b.rows, "inner dimensions");
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 {
        return;
    }
    assert!(a.last() < a.data.len() && b.last() < b.data.len());
    assert!(off + (m - 1) * out_rs + n - 1 < out.len());
    // SAFETY: the asserts above keep every index the kernel touches inside the three slices, and
    // `out` is borrowed mutably so it cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr().add(off),
            1,
            out_rs as isize,
            accumulate,
            a.data.as_ptr().add(a.off),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.off),
            b.cs as isize,
            b.rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Full (unsharded) weights of the layer, row-major, in f64.
pub struct Weights {
    pub qkv: Vec<f64>,
    pub out: Vec<f64>,
    pub up: Vec<f64>,
    pub down: Vec<f64>,
}

/// A deterministic value in [−1, 1) from (stream, index): splitmix64.
pub(crate) fn hash_uniform(stream: u64, i: usize) -> f64 {
    let mut z = stream
        .wrapping_mul(0xD1B5_4A32_D192_ED03)
        .wrapping_add((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn random(stream: u64, len: usize, scale: f64) -> Vec<f64> {
    (0..len).map(|i| scale * hash_uniform(stream, i)).collect()
}

/// Widths of the layer.
struct Dims {
    tokens: usize,
    h: usize,
    d: usize,
    a: usize,
    kv: usize,
    f: usize,
    up: usize,
}

fn dims(spec: &LayerSpec) -> Dims {
    let d = spec.hidden / spec.heads;
    Dims {
        tokens: spec.seq_len * spec.micro_batch,
        h: spec.hidden,
        d,
        a: spec.heads,
        kv: spec.kv_heads,
        f: spec.ffn_hidden,
        up: if spec.gated_mlp {
            2 * spec.ffn_hidden
        } else {
            spec.ffn_hidden
        },
    }
}

impl Weights {
    /// Uniform weights scaled by 1/√fan_in, so activations stay of order one.
    pub fn new(spec: &LayerSpec) -> Weights {
        let m = dims(spec);
        let qkv_width = (m.a + 2 * m.kv) * m.d;
        let s = |fan_in: usize| (3.0 / fan_in as f64).sqrt();
        Weights {
            qkv: random(1, m.h * qkv_width, s(m.h)),
            out: random(2, m.a * m.d * m.h, s(m.a * m.d)),
            up: random(3, m.h * m.up, s(m.h)),
            down: random(4, m.f * m.h, s(m.f)),
        }
    }
}

/// The input and the incoming gradient of the layer (full, [s, b] rows × h).
pub fn inputs(spec: &LayerSpec) -> (Vec<f64>, Vec<f64>) {
    let m = dims(spec);
    (
        random(5, m.tokens * m.h, 1.0),
        random(6, m.tokens * m.h, 1.0),
    )
}

/// Which columns (or rows) of a full weight rank `r` of `t` holds, in shard order.
pub struct ShardMap {
    pub qkv_cols: Vec<usize>,
    pub attn_rows: Vec<usize>,
    pub up_cols: Vec<usize>,
    pub ffn_rows: Vec<usize>,
}

pub fn shard_map(spec: &LayerSpec, r: usize) -> ShardMap {
    let m = dims(spec);
    let t = spec.tp;
    let (qa, kva, fr) = (m.a / t, m.kv / t, m.f / t);
    let q: Vec<usize> = (r * qa * m.d..(r + 1) * qa * m.d).collect();
    let k = (r * kva * m.d..(r + 1) * kva * m.d).map(|c| m.a * m.d + c);
    let v = (r * kva * m.d..(r + 1) * kva * m.d).map(|c| (m.a + m.kv) * m.d + c);
    let ffn: Vec<usize> = (r * fr..(r + 1) * fr).collect();
    let up_cols = if spec.gated_mlp {
        ffn.iter()
            .copied()
            .chain(ffn.iter().map(|c| m.f + c))
            .collect()
    } else {
        ffn.clone()
    };
    ShardMap {
        qkv_cols: q.iter().copied().chain(k).chain(v).collect(),
        attn_rows: q,
        up_cols,
        ffn_rows: ffn,
    }
}

fn take_cols<T: Real>(full: &[f64], cols: usize, keep: &[usize]) -> Vec<T> {
    let rows = full.len() / cols;
    let mut out = Vec::with_capacity(rows * keep.len());
    for i in 0..rows {
        out.extend(keep.iter().map(|&c| T::from_f64(full[i * cols + c])));
    }
    out
}

fn take_rows<T: Real>(full: &[f64], cols: usize, keep: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(keep.len() * cols);
    for &r in keep {
        out.extend(
            full[r * cols..(r + 1) * cols]
                .iter()
                .map(|v| T::from_f64(*v)),
        );
    }
    out
}

/// What one rank computed: its part of the output and input gradient (all rows, or its
/// sequence-parallel chunk) and its weight-gradient shards, plus its timings.
pub struct RankResult<T> {
    pub z: Vec<T>,
    pub dx: Vec<T>,
    pub d_qkv: Vec<T>,
    pub d_out: Vec<T>,
    pub d_up: Vec<T>,
    pub d_down: Vec<T>,
    pub layer_s: f64,
    pub comm_s: f64,
}

fn gelu<T: Real>(x: T) -> (T, T) {
    // GeLU, tanh form (Hendrycks & Gimpel 2016 eq. 2), and its derivative.
    let c = T::from_f64((2.0 / std::f64::consts::PI).sqrt());
    let a = T::from_f64(0.044715);
    let half = T::from_f64(0.5);
    let inner = c * (x + a * x * x * x);
    let th = T::ONE - T::from_f64(2.0) / ((inner + inner).exp() + T::ONE);
    let value = half * x * (T::ONE + th);
    let d_inner = c * (T::ONE + T::from_f64(3.0) * a * x * x);
    let grad = half * (T::ONE + th) + half * x * (T::ONE - th * th) * d_inner;
    (value, grad)
}

/// σ(x); SwiGLU's gate is silu(g) = g·σ(g) (Shazeer 2020), with d silu/dg = σ(g)(1 + g(1 − σ(g))).
fn sigmoid<T: Real>(x: T) -> T {
    T::ONE / (T::ONE + (T::ZERO - x).exp())
}

/// Forward and backward of the layer on rank `rank` of `ring` (t = ring size), timing the whole and
/// the time inside collectives.
pub fn run_rank<T: Real>(
    spec: &LayerSpec,
    weights: &Weights,
    x_full: &[f64],
    dz_full: &[f64],
    ring: &Ring,
    rank: usize,
) -> RankResult<T> {
    let m = dims(spec);
    let t = spec.tp;
    let map = shard_map(spec, rank);
    let (qa, kva, fr) = (m.a / t, m.kv / t, m.f / t);
    let wq = (qa + 2 * kva) * m.d;
    let ur = m.up / t;
    let qkv_w: Vec<T> = take_cols(&weights.qkv, (m.a + 2 * m.kv) * m.d, &map.qkv_cols);
    let out_w: Vec<T> = take_rows(&weights.out, m.h, &map.attn_rows);
    let up_w: Vec<T> = take_cols(&weights.up, m.up, &map.up_cols);
    let down_w: Vec<T> = take_rows(&weights.down, m.h, &map.ffn_rows);
    let (tok, h, d, b, s) = (m.tokens, m.h, m.d, spec.micro_batch, spec.seq_len);
    let sp = spec.sequence_parallel;
    let local = chunk(tok * h, t, rank);
    let to_t = |v: &[f64]| -> Vec<T> { v.iter().map(|x| T::from_f64(*x)).collect() };
    let x_part: Vec<T> = to_t(if sp { &x_full[local.clone()] } else { x_full });
    let dz_part: Vec<T> = to_t(if sp { &dz_full[local.clone()] } else { dz_full });

    let mut comm_s = 0.0;
    ring.barrier();
    let start = Instant::now();
    let mut timed = |f: &mut dyn FnMut()| {
        let c = Instant::now();
        f();
        comm_s += c.elapsed().as_secs_f64();
    };
    // g in forward: all-gather the sequence chunks (SP) — or nothing, x is replicated.
    let gather = |timed: &mut dyn FnMut(&mut dyn FnMut()), part: &[T]| -> Vec<T> {
        if !sp {
            return part.to_vec();
        }
        let mut full = vec![T::ZERO; tok * h];
        timed(&mut || ring.all_gather(rank, part, &mut full));
        full
    };
    // Reduce the partial sums of a row-parallel GEMM: all-reduce, or reduce-scatter (SP).
    let reduce = |timed: &mut dyn FnMut(&mut dyn FnMut()), mut partial: Vec<T>| -> Vec<T> {
        if sp {
            let mut part = vec![T::ZERO; local.len()];
            timed(&mut || ring.reduce_scatter(rank, &mut partial, &mut part));
            part
        } else {
            timed(&mut || ring.all_reduce(rank, &mut partial));
            partial
        }
    };
    let add = |a: &[T], b: &[T]| -> Vec<T> { a.iter().zip(b).map(|(x, y)| *x + *y).collect() };
    let scale = T::from_f64(1.0 / (d as f64).sqrt());
    let group = qa / kva;

    // ---- forward: attention block
    let xf = gather(&mut timed, &x_part);
    let mut qkv = vec![T::ZERO; tok * wq];
    matmul(
        &mut qkv,
        0,
        wq,
        Mat::new(&xf, tok, h),
        Mat::new(&qkv_w, h, wq),
        false,
    );
    let mut probs = vec![T::ZERO; b * qa * s * s];
    let mut ctx = vec![T::ZERO; tok * qa * d];
    for bi in 0..b {
        for j in 0..qa {
            let g = j / group;
            let q = Mat::block(&qkv, bi * wq + j * d, s, d, b * wq);
            let k = Mat::block(&qkv, bi * wq + (qa + g) * d, s, d, b * wq);
            let v = Mat::block(&qkv, bi * wq + (qa + kva + g) * d, s, d, b * wq);
            let p = &mut probs[(bi * qa + j) * s * s..(bi * qa + j + 1) * s * s];
            matmul(p, 0, s, q, k.t(), false);
            for i in 0..s {
                let row = &mut p[i * s..(i + 1) * s];
                let mut max = row[0] * scale;
                for x in row.iter().take(i + 1) {
                    if *x * scale > max {
                        max = *x * scale;
                    }
                }
                let mut sum = T::ZERO;
                for (c, x) in row.iter_mut().enumerate() {
                    *x = if c <= i {
                        (*x * scale - max).exp()
                    } else {
                        T::ZERO
                    };
                    sum += *x;
                }
                for x in row.iter_mut() {
                    *x = *x / sum;
                }
            }
            let p = Mat::new(
                &probs[(bi * qa + j) * s * s..(bi * qa + j + 1) * s * s],
                s,
                s,
            );
            matmul(&mut ctx, bi * qa * d + j * d, b * qa * d, p, v, false);
        }
    }
    let mut o = vec![T::ZERO; tok * h];
    matmul(
        &mut o,
        0,
        h,
        Mat::new(&ctx, tok, qa * d),
        Mat::new(&out_w, qa * d, h),
        false,
    );
    let o = reduce(&mut timed, o);
    let y_part = add(&x_part, &o);
    // ---- forward: MLP block
    let yf = gather(&mut timed, &y_part);
    let mut u = vec![T::ZERO; tok * ur];
    matmul(
        &mut u,
        0,
        ur,
        Mat::new(&yf, tok, h),
        Mat::new(&up_w, h, ur),
        false,
    );
    let mut act = vec![T::ZERO; tok * fr];
    for i in 0..tok {
        for c in 0..fr {
            act[i * fr + c] = if spec.gated_mlp {
                let (gate, upv) = (u[i * ur + c], u[i * ur + fr + c]);
                gate * sigmoid(gate) * upv
            } else {
                gelu(u[i * ur + c]).0
            };
        }
    }
    let mut mlp = vec![T::ZERO; tok * h];
    matmul(
        &mut mlp,
        0,
        h,
        Mat::new(&act, tok, fr),
        Mat::new(&down_w, fr, h),
        false,
    );
    let mlp = reduce(&mut timed, mlp);
    let z = add(&y_part, &mlp);

    // ---- backward: MLP block
    let dzf = gather(&mut timed, &dz_part);
    let mut d_act = vec![T::ZERO; tok * fr];
    matmul(
        &mut d_act,
        0,
        fr,
        Mat::new(&dzf, tok, h),
        Mat::new(&down_w, fr, h).t(),
        false,
    );
    let mut d_down = vec![T::ZERO; fr * h];
    matmul(
        &mut d_down,
        0,
        h,
        Mat::new(&act, tok, fr).t(),
        Mat::new(&dzf, tok, h),
        false,
    );
    let mut d_u = vec![T::ZERO; tok * ur];
    for i in 0..tok {
        for c in 0..fr {
            let da = d_act[i * fr + c];
            if spec.gated_mlp {
                let (gate, upv) = (u[i * ur + c], u[i * ur + fr + c]);
                let sg = sigmoid(gate);
                d_u[i * ur + fr + c] = da * gate * sg;
                d_u[i * ur + c] = da * upv * sg * (T::ONE + gate * (T::ONE - sg));
            } else {
                d_u[i * ur + c] = da * gelu(u[i * ur + c]).1;
            }
        }
    }
    // Megatron keeps the sequence shard of a column-parallel GEMM's input and gathers it again
    // for the weight gradient (`cost::unit_costs`, `regathers`).
    let yf = if sp { gather(&mut timed, &y_part) } else { yf };
    let mut d_up = vec![T::ZERO; h * ur];
    matmul(
        &mut d_up,
        0,
        ur,
        Mat::new(&yf, tok, h).t(),
        Mat::new(&d_u, tok, ur),
        false,
    );
    let mut dy_partial = vec![T::ZERO; tok * h];
    matmul(
        &mut dy_partial,
        0,
        h,
        Mat::new(&d_u, tok, ur),
        Mat::new(&up_w, h, ur).t(),
        false,
    );
    let dy_reduced = reduce(&mut timed, dy_partial);
    let dy_part = add(&dz_part, &dy_reduced);
    // ---- backward: attention block
    let dyf = gather(&mut timed, &dy_part);
    let mut d_ctx = vec![T::ZERO; tok * qa * d];
    matmul(
        &mut d_ctx,
        0,
        qa * d,
        Mat::new(&dyf, tok, h),
        Mat::new(&out_w, qa * d, h).t(),
        false,
    );
    let mut d_out = vec![T::ZERO; qa * d * h];
    matmul(
        &mut d_out,
        0,
        h,
        Mat::new(&ctx, tok, qa * d).t(),
        Mat::new(&dyf, tok, h),
        false,
    );
    let mut d_qkv_act = vec![T::ZERO; tok * wq];
    let mut d_p = vec![T::ZERO; s * s];
    for bi in 0..b {
        for j in 0..qa {
            let g = j / group;
            let p_range = (bi * qa + j) * s * s..(bi * qa + j + 1) * s * s;
            let d_o = Mat::block(&d_ctx, bi * qa * d + j * d, s, d, b * qa * d);
            let v = Mat::block(&qkv, bi * wq + (qa + kva + g) * d, s, d, b * wq);
            // dV += Pᵀ·dO (query heads of a group share their K and V).
            matmul(
                &mut d_qkv_act,
                bi * wq + (qa + kva + g) * d,
                b * wq,
                Mat::new(&probs[p_range.clone()], s, s).t(),
                d_o,
                true,
            );
            // dP = dO·Vᵀ; dS = P ∘ (dP − rowsum(dP ∘ P)) · scale, from the softmax Jacobian
            // ∂pᵢ/∂sⱼ = pᵢ(δᵢⱼ − pⱼ).
            matmul(&mut d_p, 0, s, d_o, v.t(), false);
            let p = &probs[p_range];
            for i in 0..s {
                let mut dot = T::ZERO;
                for c in 0..s {
                    dot += d_p[i * s + c] * p[i * s + c];
                }
                for c in 0..s {
                    d_p[i * s + c] = p[i * s + c] * (d_p[i * s + c] - dot) * scale;
                }
            }
            let q = Mat::block(&qkv, bi * wq + j * d, s, d, b * wq);
            let k = Mat::block(&qkv, bi * wq + (qa + g) * d, s, d, b * wq);
            matmul(
                &mut d_qkv_act,
                bi * wq + j * d,
                b * wq,
                Mat::new(&d_p, s, s),
                k,
                false,
            );
            matmul(
                &mut d_qkv_act,
                bi * wq + (qa + g) * d,
                b * wq,
                Mat::new(&d_p, s, s).t(),
                q,
                true,
            );
        }
    }
    let xf = if sp { gather(&mut timed, &x_part) } else { xf };
    let mut d_qkv = vec![T::ZERO; h * wq];
    matmul(
        &mut d_qkv,
        0,
        wq,
        Mat::new(&xf, tok, h).t(),
        Mat::new(&d_qkv_act, tok, wq),
        false,
    );
    let mut dx_partial = vec![T::ZERO; tok * h];
    matmul(
        &mut dx_partial,
        0,
        h,
        Mat::new(&d_qkv_act, tok, wq),
        Mat::new(&qkv_w, h, wq).t(),
        false,
    );
    let dx_reduced = reduce(&mut timed, dx_partial);
    let dx = add(&dy_part, &dx_reduced);
    let layer_s = start.elapsed().as_secs_f64();
    RankResult {
        z,
        dx,
        d_qkv,
        d_out,
        d_up,
        d_down,
        layer_s,
        comm_s,
    }
}

/// Puts a rank's column shard back into a full row-major matrix of `cols` columns.
pub fn place_cols<T: Real>(full: &mut [f64], cols: usize, shard: &[T], keep: &[usize]) {
    let w = keep.len();
    for i in 0..shard.len() / w {
        for (j, &c) in keep.iter().enumerate() {
            full[i * cols + c] = shard[i * w + j].to_f64();
        }
    }
}

/// Puts a rank's row shard back into a full row-major matrix of `cols` columns.
pub fn place_rows<T: Real>(full: &mut [f64], cols: usize, shard: &[T], keep: &[usize]) {
    for (j, &r) in keep.iter().enumerate() {
        for c in 0..cols {
            full[r * cols + c] = shard[j * cols + c].to_f64();
        }
    }
}

/// max |got − want| / max |want|.
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let diff = got
        .iter()
        .zip(want)
        .fold(0.0_f64, |m, (g, w)| m.max((g - w).abs()));
    if scale > 0.0 { diff / scale } else { diff }
}
