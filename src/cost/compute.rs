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
use crate::training::AttentionKernel;
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
        if let Some(measured) = crate::cluster::calibration::calibrated_gemm_time(
            gpu, self.m, self.n, self.k, self.batch,
        ) {
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
/// (×2); GeLU 2sb·ffn in, 2sb·ffn out (gated: 4sb·ffn in). Without dropout the masks and the
/// attention-dropout kernel disappear; FlashAttention keeps the scores on chip, so no s² traffic.
/// Returns (outside the TP region, inside it, the attention-score part) so callers can split by t
/// and drop what is not recomputed.
pub fn layer_elementwise_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    attention: AttentionKernel,
) -> (f64, f64, f64) {
    let (b, s) = (f64::from(micro_batch), f64::from(seq_len));
    let h = f64::from(model.hidden);
    let a = f64::from(model.heads);
    let f = f64::from(model.ffn_hidden);
    let sbh = s * b * h;
    let masks = if model.dropout { 1.0 } else { 0.0 };
    let norms = 2.0 * 4.0 * sbh;
    let residuals = 2.0 * (6.0 + masks) * sbh;
    let activation = ELEMENT_BYTES * s * b * (model.mlp_up_width() + f);
    let scores = match attention {
        AttentionKernel::Flash => 0.0,
        AttentionKernel::Unfused => (4.0 + 5.0 * masks) * a * s * s * b,
    };
    (norms + residuals, activation, scores)
}

/// Forward time of FlashAttention's fused kernel on one TP rank: the QKᵀ and AV FLOPs, halved
/// because causal masking lets the kernel skip the blocks above the diagonal (Dao 2023,
/// FlashAttention-2 §3.1.1), on a roofline whose memory side is only Q, K, V and O — the s×s scores
/// never leave the chip.
pub fn flash_attention_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
) -> f64 {
    let gemms = layer_gemms(model, micro_batch, seq_len, tp);
    let flops = 0.5 * (gemms[1].flops() + gemms[2].flops());
    let (b, s, t) = (f64::from(micro_batch), f64::from(seq_len), f64::from(tp));
    let q_and_o = 2.0 * b * s * f64::from(model.hidden) / t;
    let k_and_v = 2.0 * b * s * model.kv_width() / t;
    let bytes = ELEMENT_BYTES * (q_and_o + k_and_v);
    let gpu = &cluster.gpu;
    (flops / (gpu.peak_flops().0 * gpu.gemm_efficiency)).max(bytes / gpu.achieved_hbm_bandwidth().0)
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
/// backward kernel reads the saved input and the incoming gradient and writes the outgoing one);
/// FlashAttention's backward costs 2.5× its forward (5 matmuls to 2, Dao 2023 FlashAttention-2 §3.1).
/// Full recompute repeats the forward; selective recompute repeats the attention core (QKᵀ, softmax,
/// dropout, AV), Korthikanti et al. 2022 §5 — which FlashAttention already does inside its backward.
#[allow(clippy::too_many_arguments)]
pub fn layer_time(
    model: &Model,
    cluster: &Cluster,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
    attention: AttentionKernel,
) -> LayerTime {
    let gemms = layer_gemms(model, micro_batch, seq_len, tp);
    let attention_core_gemm_time = match attention {
        AttentionKernel::Unfused => gemms[1].time(cluster) + gemms[2].time(cluster),
        AttentionKernel::Flash => flash_attention_time(model, cluster, micro_batch, seq_len, tp),
    };
    let gemm_time: f64 = gemms[0].time(cluster)
        + attention_core_gemm_time
        + gemms[3..].iter().map(|g| g.time(cluster)).sum::<f64>();
    let t = f64::from(tp);
    let (outside, inside, scores) = layer_elementwise_bytes(model, micro_batch, seq_len, attention);
    let bandwidth = cluster.gpu.achieved_hbm_bandwidth().0;
    let outside_split = if sp { t } else { 1.0 };
    let elementwise = (outside / outside_split + (inside + scores) / t) / bandwidth;
    let scores_time = scores / t / bandwidth;
    let gpu = &cluster.gpu;
    let overhead = gpu.layer_overhead_us * 1e-6;
    let forward = (gemm_time + elementwise) / gpu.framework_efficiency + overhead;
    let flash_extra = match attention {
        AttentionKernel::Flash => 0.5 * attention_core_gemm_time / gpu.framework_efficiency,
        AttentionKernel::Unfused => 0.0,
    };
    let recompute_time = match (recompute, attention) {
        (Recompute::None, _) | (Recompute::Selective, AttentionKernel::Flash) => 0.0,
        (Recompute::Selective, AttentionKernel::Unfused) => {
            (attention_core_gemm_time + scores_time) / gpu.framework_efficiency
        }
        (Recompute::Full, _) => forward,
    };
    LayerTime {
        forward,
        backward: 2.0 * forward + flash_extra,
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
    fn flash_backward_adds_half_the_attention_core() {
        // FlashAttention-2 §3.1: backward runs 5 matmuls where forward runs 2, so the attention core's
        // backward is 2.5x its forward; everything else stays at 2x.
        let m = gpt3_175b();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let flash = layer_time(
            &m,
            &cluster,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Flash,
        );
        let core = flash_attention_time(&m, &cluster, 1, 2048, 8);
        let expected = 2.0 * flash.forward + 0.5 * core / cluster.gpu.framework_efficiency;
        assert!((flash.backward / expected - 1.0).abs() < 1e-12);
        assert_eq!(flash.recompute, 0.0);
        let unfused = layer_time(
            &m,
            &cluster,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        );
        assert!(
            unfused.forward > flash.forward,
            "the unfused path pays the s² memory traffic"
        );
    }

    #[test]
    fn long_sequence_flash_attention_is_causal_and_compute_bound() {
        // s = 8192: the fused kernel runs half the QKᵀ/AV FLOPs (causal blocks skipped) at the GEMM roof.
        let mut m = gpt3_175b();
        m.seq_len = 8192;
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let full: f64 = layer_gemms(&m, 1, 8192, 8)[1..3]
            .iter()
            .map(Gemm::flops)
            .sum();
        let roof = cluster.gpu.peak_flops().0 * cluster.gpu.gemm_efficiency;
        let t = flash_attention_time(&m, &cluster, 1, 8192, 8);
        assert!((t / (0.5 * full / roof) - 1.0).abs() < 1e-12, "{t}");
    }

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
