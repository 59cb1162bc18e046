//! The MoE router's element-wise kernels: what Megatron-Core runs on the [tokens × experts] score
//! tensors around the gating GEMM, beyond the GEMM itself (`moe::moe_mlp_time` times that).
//!
//! Read from Megatron-Core core_v0.14.0 (the 25.09/25.11 NeMo containers' release line),
//! megatron/core/transformer/moe/router.py `TopKRouter.gating`/`routing` and moe_utils.py, with
//! `moe_router_fusion` on (Megatron-Bridge's performance configs, e.g.
//! scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml at 9a5e798), and from
//! Transformer Engine v2.8 transformer_engine/pytorch/csrc/extensions/router.cpp, whose fused
//! kernels allocate their outputs at the logits' dtype. NVIDIA's MoE recipes keep that dtype fp32
//! (`moe_router_dtype = "fp32"`: Megatron-Bridge v0.2.0 models/qwen/qwen_provider.py line 452,
//! models/deepseek/deepseek_provider.py line 79), and all of them train with a load-balancing loss
//! (aux_loss or seq_aux_loss), so its score kernels are counted too.
//!
//! Per (token, expert) element, in bytes (fp32 scores: 4, the boolean routing map: 1):
//!
//! Forward, 33:
//! - the gating GEMM writes fp32 logits (`router_gating_linear` with `router_dtype` fp32): 2 more
//!   than the bf16 output the GEMM's roofline counts;
//! - `fused_topk_with_score_function` (router.cpp lines 41–47) reads the logits and writes the
//!   probs, the routing map and the softmax/sigmoid output it keeps for the backward: 4 + 4 + 1 + 4;
//! - `fused_compute_score_for_moe_aux_loss` (lines 107–112) does the same for the aux-loss scores:
//!   4 + 4 + 1 + 4;
//! - `routing_map.sum(dim=0)` for the tokens per expert: 1;
//! - `fused_moe_aux_loss` reads the scores: 4.
//!
//! Backward, 43:
//! - `fused_moe_aux_loss_bwd` (line 174) writes the scores' gradient: 4;
//! - `fused_score_for_moe_aux_loss_bwd` (line 132) reads the kept output and the gradient, writes
//!   the logits' gradient: 4 + 4 + 4;
//! - `fused_topk_with_score_function_bwd` (line 77) reads the routing map, the kept output and the
//!   probs' gradient, writes the logits' gradient: 1 + 4 + 4 + 4;
//! - autograd sums the two logits' gradients: 4 + 4 + 4;
//! - the gating GEMM's backward reads the fp32 gradient: 2 more than a bf16 one.
//!
//! For Qwen3-30B-A3B (128 experts) that is 9.7 KB per token and MoE layer, forward and backward
//! together, against about 200 KB of token permutations (`moe::permutation_bytes`): a fraction of
//! a percent of the layer. Other frameworks' routers (eager PyTorch) are not modelled.

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::{Training, TrainingFramework};

/// HBM bytes per (token, expert) element of Megatron-Core's fused router kernels, forward.
pub const FORWARD_BYTES_PER_SCORE: f64 = 2.0 + 13.0 + 13.0 + 1.0 + 4.0;
/// The same for the backward.
pub const BACKWARD_BYTES_PER_SCORE: f64 = 4.0 + 12.0 + 13.0 + 12.0 + 2.0;

/// The router's element-wise kernels one framework runs, per (token, expert) element.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RouterKernels {
    pub forward_bytes_per_score: f64,
    pub backward_bytes_per_score: f64,
}

/// Time of the router's element-wise kernels on one GPU for one micro-batch of one MoE layer.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RouterTime {
    pub forward_s: f64,
    pub backward_s: f64,
}

impl RouterKernels {
    /// What `training`'s framework runs for `model`'s router: Megatron-Core's fused kernels above;
    /// nothing counted for a dense model or another framework.
    pub fn of(model: &Model, training: &Training) -> RouterKernels {
        if model.moe.is_none() || training.framework != TrainingFramework::MegatronCore {
            return RouterKernels::default();
        }
        RouterKernels {
            forward_bytes_per_score: FORWARD_BYTES_PER_SCORE,
            backward_bytes_per_score: BACKWARD_BYTES_PER_SCORE,
        }
    }

    /// Their time for one micro-batch: the rank's tokens (`moe::local_tokens`) times the experts
    /// scored per token, at the achieved HBM bandwidth and the framework efficiency, as every
    /// element-wise kernel.
    pub fn time(
        self,
        model: &Model,
        cluster: &Cluster,
        plan: &ParallelPlan,
        seq_len: u32,
    ) -> RouterTime {
        let Some(moe) = model.moe else {
            return RouterTime::default();
        };
        let scores = super::moe::local_tokens(plan, seq_len) * f64::from(moe.experts);
        let gpu = &cluster.gpu;
        let rate = gpu.achieved_hbm_bandwidth().0 * gpu.framework_efficiency;
        RouterTime {
            forward_s: scores * self.forward_bytes_per_score / rate,
            backward_s: scores * self.backward_bytes_per_score / rate,
        }
    }
}
