//! Compute time of one transformer layer (and the output layer) for one micro-batch on one GPU.
//!
//! Two parts: the GEMMs of Megatron's column/row split at their shard shapes, timed with a roofline
//! (Williams et al. 2009) whose compute roof is the profile's achievable GEMM throughput; and the
//! memory-bound element-wise kernels (norms, softmax, dropout, activation, residual), timed by the HBM
//! bytes they read and write. Backward GEMMs are two per forward GEMM (input and weight gradients,
//! same FLOPs), so backward is twice the forward (Narayanan et al. 2021 §3.1).

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::Recompute;
use crate::units::Seconds;

/// Bytes per element of GEMM operands and activations (bf16).
const ELEMENT_BYTES: f64 = 2.0;
/// Bytes per element of the fp32 logits the loss reads (Megatron upcasts for cross-entropy).
const LOGIT_BYTES: f64 = 4.0;

/// One GEMM of shape (m × k) · (k × n), repeated `batch` times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub batch: f64,
}

impl Gemm {
    pub fn flops(&self) -> f64 {
        2.0 * self.m * self.n * self.k * self.batch
    }
    /// Operand and result traffic, each read or written once.
    pub fn bytes(&self) -> f64 {
        ELEMENT_BYTES * (self.m * self.k + self.k * self.n + self.m * self.n) * self.batch
    }
    /// Roofline time: the larger of compute at the achievable GEMM throughput and memory traffic at
    /// the achieved HBM bandwidth. Small or skinny shards (high TP, small micro-batch) fall onto the
    /// memory roof; this is the default efficiency curve that calibration replaces: a calibrated
    /// profile gives the measured time of the exact shard shape, or its fitted curve.
    pub fn time(&self, cluster: &Cluster) -> f64 {
        let gpu = &cluster.gpu;
        if let Some(measured) =
            crate::calibrate::profile::calibrated_gemm_time(gpu, self.m, self.n, self.k, self.batch)
        {
            return measured;
        }
        let compute = self.flops() / (gpu.peak_flops().0 * gpu.gemm_efficiency);
        let memory = self.bytes() / cluster.gpu.achieved_hbm_bandwidth().0;
        compute.max(memory)
    }
}

/// The forward GEMMs of one layer on one TP rank, in order: QKV (column-parallel), QKᵀ and AV
/// (per head, heads split over t), output projection (row-parallel), MLP up (column-parallel),
/// MLP down (row-parallel) — the seeds' column-then-row split.
pub fn layer_gemms(model: &Model, micro_batch: u32, seq_len: u32, tp: u32) -> [Gemm; 6] {
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let h = f64::from(model.hidden);
    let d = f64::from(model.head_dim());
    let tokens = b * s;
    let heads_per_rank = f64::from(model.heads) / t;
    let attention_width = heads_per_rank * d;
    [
        Gemm {
            m: tokens,
            k: h,
            n: (h + 2.0 * model.kv_width()) / t,
            batch: 1.0,
        },
        Gemm {
            m: s,
            k: d,
            n: s,
            batch: b * heads_per_rank,
        },
        Gemm {
            m: s,
            k: s,
            n: d,
            batch: b * heads_per_rank,
        },
        Gemm {
            m: tokens,
            k: attention_width,
            n: h,
            batch: 1.0,
        },
        Gemm {
            m: tokens,
            k: h,
            n: model.mlp_up_width() / t,
            batch: 1.0,
        },
        Gemm {
            m: tokens,
            k: f64::from(model.ffn_hidden) / t,
            n: h,
            batch: 1.0,
        },
    ]
}

/// HBM bytes of the element-wise kernels of one layer's forward, per TP rank. Each kernel reads its
/// inputs and writes its outputs once (fused as Megatron fuses them), over the tensors Korthikanti
/// et al. 2022 Table 2 lists:
/// layernorm 2sbh in + 2sbh out (×2 norms); fused scale-mask-softmax 2as²b in + 2as²b out; attention
/// dropout 2as²b in + 2as²b out + as²b mask; bias-dropout-add 2sbh + 2sbh in, 2sbh out, sbh mask
/// (×2); GeLU 2sb·ffn in, 2sb·ffn out (gated: 4sb·ffn in). Returns (outside the TP region,
/// inside it, the attention-score part) so callers can split by t and drop what is not recomputed.
pub fn layer_elementwise_bytes(model: &Model, micro_batch: u32, seq_len: u32) -> (f64, f64, f64) {
    let (b, s) = (f64::from(micro_batch), f64::from(seq_len));
    let h = f64::from(model.hidden);
    let a = f64::from(model.heads);
    let f = f64::from(model.ffn_hidden);
    let sbh = s * b * h;
    let norms = 2.0 * 4.0 * sbh;
    let residuals = 2.0 * 7.0 * sbh;
    let activation = ELEMENT_BYTES * s * b * (model.mlp_up_width() + f);
    let scores = (4.0 + 5.0) * a * s * s * b;
    (norms + residuals, activation, scores)
}

/// Forward, backward and recompute time of one layer for one micro-batch (no communication).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerTime {
    pub forward: f64,
    pub backward: f64,
    pub recompute: f64,
}

impl LayerTime {
    pub fn total(&self) -> f64 {
        self.forward + self.backward + self.recompute
    }
}

/// Times one layer. Backward costs twice the forward in GEMMs and in element-wise traffic (each
/// backward kernel reads the saved input and the incoming gradient and writes the outgoing one).
/// Full recompute repeats the forward; selective recompute repeats the attention core (QKᵀ, softmax,
/// dropout, AV), Korthikanti et al. 2022 §5.
pub fn layer_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
) -> LayerTime {
    let gemms = layer_gemms(model, micro_batch, seq_len, tp);
    let gemm_time: f64 = gemms.iter().map(|g| g.time(cluster)).sum();
    let attention_core_gemm_time = gemms[1].time(cluster) + gemms[2].time(cluster);
    let t = f64::from(tp);
    let (outside, inside, scores) = layer_elementwise_bytes(model, micro_batch, seq_len);
    let bandwidth = cluster.gpu.achieved_hbm_bandwidth().0;
    let outside_split = if sp { t } else { 1.0 };
    let elementwise = (outside / outside_split + (inside + scores) / t) / bandwidth;
    let scores_time = scores / t / bandwidth;
    let gpu = &cluster.gpu;
    let overhead = gpu.layer_overhead_us * 1e-6;
    let forward = (gemm_time + elementwise) / gpu.framework_efficiency + overhead;
    let recompute_time = match recompute {
        Recompute::None => 0.0,
        Recompute::Selective => (attention_core_gemm_time + scores_time) / gpu.framework_efficiency,
        Recompute::Full => forward,
    };
    LayerTime {
        forward,
        backward: 2.0 * forward,
        recompute: recompute_time,
    }
}

/// Forward and backward time of the output layer (logits GEMM, vocabulary split over t) plus the
/// fp32 cross-entropy: the loss reads and writes the b·s·V/t logits about three times (upcast,
/// softmax, gradient). Never recomputed.
pub fn output_layer_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
) -> LayerTime {
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let gemm = Gemm {
        m: b * s,
        k: f64::from(model.hidden),
        n: f64::from(model.vocab) / t,
        batch: 1.0,
    };
    let loss_bytes = 3.0 * LOGIT_BYTES * b * s * f64::from(model.vocab) / t;
    let forward = (gemm.time(cluster) + loss_bytes / cluster.gpu.achieved_hbm_bandwidth().0)
        / cluster.gpu.framework_efficiency;
    LayerTime {
        forward,
        backward: 2.0 * forward,
        recompute: 0.0,
    }
}

/// Adam step time on the parameters this GPU updates: memory-bound, reading fp32 master weights,
/// momentum, variance and the gradient and writing the first three plus the bf16 weights
/// (4·3 + grad bytes in, 4·3 + 2 out per parameter).
pub fn optimizer_time(cluster: &Cluster, params_updated: f64, grad_bytes: f64) -> Seconds {
    let bytes_per_param = 12.0 + grad_bytes + 12.0 + 2.0;
    Seconds(params_updated * bytes_per_param / cluster.gpu.achieved_hbm_bandwidth().0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::gpt3_175b;

    #[test]
    fn layer_gemm_flops_sum_to_megatron_layer_flops() {
        // 24bsh² + 4bs²h per layer forward (Narayanan et al. 2021 §3), split over t ranks.
        let m = gpt3_175b();
        for tp in [1, 2, 8] {
            let per_rank: f64 = layer_gemms(&m, 2, 2048, tp).iter().map(Gemm::flops).sum();
            let whole = m.layer_forward_flops(2, 2048).0;
            assert!((per_rank * f64::from(tp) / whole - 1.0).abs() < 1e-12);
        }
    }
}
