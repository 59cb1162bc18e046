//! Mixture-of-experts layers: what one GPU holds, computes and sends for the routed experts.
//!
//! Megatron-Core's parallel folding (Liu et al. 2025, "MoE Parallel Folding", and
//! megatron/core/parallel_state.py `expert_tensor_and_model_parallel` groups): attention and dense
//! layers use TP×CP×DP, the experts use ETP×EP×expert-DP over the same tp·cp·dp GPUs of a pipeline
//! stage (rank order etp-ep-edp). Each GPU holds experts/ep experts, each split over etp.
//!
//! Per MoE layer and micro-batch, the alltoall token dispatcher (Megatron-Core
//! `MoEAlltoAllTokenDispatcher`) sends every routed copy of a token to the GPU holding its expert
//! and brings it back (dispatch and combine), in forward and again for the gradients in backward:
//! bytes per GPU = routed tokens × top-k × hidden × 2 bytes × (ep − 1)/ep. Every pair of the EP
//! group talks, so across nodes the time is set by each GPU's own NIC, not by a ring's bus
//! bandwidth.
//!
//! Experts run as grouped GEMMs at the tokens each one actually gets (tokens × top-k × ep /
//! experts, times the routing imbalance for the busiest GPU): few tokens per expert put the GEMMs on
//! the memory roof (the expert weights are read for a handful of rows).

use super::comm::ACTIVATION_BYTES;
use super::compute::Gemm;
use crate::cluster::{Cluster, LinkSpeed};
use crate::model::Model;
use crate::plan::ParallelPlan;

/// GPUs of one pipeline stage (tp·cp·dp), over which attention and experts are both folded.
pub fn stage_gpus(plan: &ParallelPlan) -> u32 {
    plan.tp * plan.cp * plan.dp
}

/// Expert data-parallel degree: the stage's GPUs over etp·ep.
pub fn expert_dp(plan: &ParallelPlan) -> u32 {
    (stage_gpus(plan) / (plan.etp * plan.ep).max(1)).max(1)
}

/// Tokens of one micro-batch entering one GPU's MoE layer: the rank's s/cp tokens, split over TP
/// (sequence parallelism, or Megatron's TP-sharded dispatch when etp = 1).
pub fn local_tokens(plan: &ParallelPlan, seq_len: u32) -> f64 {
    f64::from(plan.micro_batch) * f64::from(seq_len) / f64::from(plan.cp) / f64::from(plan.tp)
}

/// Parameters of one MoE layer's routed experts one GPU holds (before ZeRO).
pub fn expert_params_per_gpu(model: &Model, plan: &ParallelPlan) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    f64::from(moe.experts) / f64::from(plan.ep) * model.expert_params() / f64::from(plan.etp)
}

/// Share of the transformer layers that are MoE layers.
pub fn moe_layer_share(model: &Model) -> f64 {
    f64::from(model.moe_layers()) / f64::from(model.layers.max(1))
}

/// Forward time of one MoE layer's MLP part on one GPU for one micro-batch: router GEMM,
/// permute/unpermute traffic, the grouped expert GEMMs at their real token counts, and the shared
/// experts.
pub fn moe_mlp_forward_s(
    model: &Model,
    cluster: &Cluster,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let h = f64::from(model.hidden);
    let tokens = local_tokens(plan, seq_len);
    let topk = f64::from(moe.router_topk);
    let experts = f64::from(moe.experts);
    let local_experts = experts / f64::from(plan.ep);
    let etp = f64::from(plan.etp);
    // Tokens one local expert processes: the EP group's routed copies spread over its experts; an
    // expert split over etp GPUs sees the tokens of all etp of them (each computes its 1/etp slice
    // of the expert for every one, as the dense MLP does under TP).
    let per_expert = tokens * topk * f64::from(plan.ep) / experts * imbalance * etp;
    let up = Gemm {
        m: per_expert,
        k: h,
        n: model.expert_up_width() / etp,
        batch: local_experts,
    };
    let down = Gemm {
        m: per_expert,
        k: f64::from(moe.ffn_hidden) / etp,
        n: h,
        batch: local_experts,
    };
    let router = Gemm {
        m: tokens,
        k: h,
        n: experts,
        batch: 1.0,
    };
    let shared = if moe.shared_expert_ffn_hidden > 0 {
        let t = f64::from(plan.tp);
        let gated = if model.gated_mlp { 2.0 } else { 1.0 };
        let width = f64::from(moe.shared_expert_ffn_hidden);
        let rows = tokens * t;
        Gemm {
            m: rows,
            k: h,
            n: gated * width / t,
            batch: 1.0,
        }
        .time(cluster)
            + Gemm {
                m: rows,
                k: width / t,
                n: h,
                batch: 1.0,
            }
            .time(cluster)
    } else {
        0.0
    };
    // Permute and unpermute read and write every routed copy once each way; the activation
    // reads the up projection and writes the expert's inner width.
    let routed = tokens * topk * imbalance * etp;
    let permute_bytes = 4.0 * routed * h * ACTIVATION_BYTES;
    let activation_bytes =
        routed * (model.expert_up_width() + f64::from(moe.ffn_hidden)) / etp * ACTIVATION_BYTES;
    let gpu = &cluster.gpu;
    let memory = (permute_bytes + activation_bytes) / gpu.achieved_hbm_bandwidth().0;
    (up.time(cluster) + down.time(cluster) + router.time(cluster) + shared + memory)
        / gpu.framework_efficiency
}

/// Bytes one GPU sends in one all-to-all (dispatch or combine) of one MoE layer and micro-batch.
pub fn alltoall_bytes(model: &Model, plan: &ParallelPlan, seq_len: u32, imbalance: f64) -> f64 {
    if plan.ep <= 1 || model.moe.is_none() {
        return 0.0;
    }
    let ep = f64::from(plan.ep);
    local_tokens(plan, seq_len)
        * model.routed_tokens_per_token()
        * imbalance
        * f64::from(model.hidden)
        * ACTIVATION_BYTES
        * (ep - 1.0)
        / ep
}

/// Time of one all-to-all: each GPU sends its share to every other member at its own link speed
/// (no ring: the per-GPU bandwidth, not the aggregate of a node's NICs), one latency per peer.
pub fn alltoall_s(bytes: f64, ep: u32, link: LinkSpeed) -> f64 {
    if ep <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    f64::from(ep - 1) * link.latency.0 + bytes / link.bandwidth.0
}

/// Activation bytes one MoE layer's MLP keeps per GPU and micro-batch (instead of the dense MLP's):
/// the permuted input, the expert up projection and the activation output for every routed copy,
/// plus the router's logits and the shared experts' MLP at the dense shape.
pub fn moe_mlp_activation_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let tokens = local_tokens(plan, seq_len);
    let etp = f64::from(plan.etp);
    // An expert split over etp GPUs keeps activations for the tokens of all etp of them.
    let routed = tokens * f64::from(moe.router_topk) * imbalance * etp;
    let h = f64::from(model.hidden);
    let experts = routed
        * (h + (model.expert_up_width() + f64::from(moe.ffn_hidden)) / etp)
        * ACTIVATION_BYTES;
    let router = tokens * f64::from(moe.experts) * 4.0;
    let gated = if model.gated_mlp { 2.0 } else { 1.0 };
    let shared =
        tokens * f64::from(plan.tp) * (gated + 1.0) * f64::from(moe.shared_expert_ffn_hidden)
            / f64::from(plan.tp)
            * ACTIVATION_BYTES;
    experts + router + shared
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanRequest;
    use crate::training::{AttentionKernel, Training, TrainingFramework};

    #[test]
    fn expert_flops_do_not_depend_on_how_the_experts_are_split() {
        // The routed tokens' expert FLOPs per GPU are the same whether the 8 experts are spread
        // over 8 GPUs (ep 8) or each split over them (etp 8): tokens·top-k·expert FLOPs / GPUs.
        // (An etp plan once divided the tokens by etp twice and reported MFU over 100%.)
        let model = crate::specs::load_model("mixtral-8x7b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 2,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            256,
            AttentionKernel::Flash,
        );
        let flops = |ep, etp| {
            let request = PlanRequest {
                tp: 8,
                dp: 2,
                ep,
                etp,
                sequence_parallel: true,
                micro_batch: 1,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let moe = model.moe.unwrap();
            let tokens = local_tokens(&plan, 4096) * f64::from(moe.router_topk) * f64::from(etp);
            let per_expert = tokens * f64::from(ep) / f64::from(moe.experts);
            let local = f64::from(moe.experts) / f64::from(ep);
            // up + down GEMMs of the local experts' slices
            2.0 * per_expert
                * local
                * (model.hidden as f64)
                * (model.expert_up_width() + f64::from(moe.ffn_hidden))
                / f64::from(etp)
        };
        let (a, b) = (flops(8, 1), flops(1, 8));
        assert!((a / b - 1.0).abs() < 1e-12, "{a} vs {b}");
        // And the estimate's MFU stays below 1 for the etp plan.
        let request = PlanRequest {
            tp: 8,
            dp: 2,
            etp: 8,
            sequence_parallel: true,
            micro_batch: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let e = crate::cost::evaluate(&model, &cluster, &training, &plan);
        assert!(
            e.mfu < 1.0 && e.hardware_tflops_per_gpu < 989.5,
            "{} {}",
            e.mfu,
            e.hardware_tflops_per_gpu
        );
    }
}
