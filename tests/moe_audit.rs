//! The MoE layer audit of 2026-12-06 (validation/FIT.md, thirteenth session): the router's score
//! kernels Megatron-Core runs beside its gating GEMM (`cost::moe_router`).

use tpsim::cluster::Cluster;
use tpsim::cost::moe_router::{BACKWARD_BYTES_PER_SCORE, FORWARD_BYTES_PER_SCORE, RouterKernels};
use tpsim::plan::{ParallelPlan, PlanRequest};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};

fn gb200_two_trays() -> Cluster {
    Cluster {
        gpu: tpsim::specs::load_gpu("gb200-nvl72").unwrap(),
        nodes: 2,
        gpus_per_node: 4,
    }
}

fn training(framework: TrainingFramework) -> Training {
    Training::with_framework(framework, 4096, 512, AttentionKernel::Flash)
}

/// The byte counts are the kernels' tensors as Transformer Engine v2.8 allocates them (fp32
/// scores, a boolean routing map): 33 forward, 43 backward per (token, expert).
#[test]
fn router_kernels_move_the_tensors_transformer_engine_allocates() {
    assert_eq!(FORWARD_BYTES_PER_SCORE, 33.0);
    assert_eq!(BACKWARD_BYTES_PER_SCORE, 43.0);
}

/// Qwen3-30B-A3B at micro-batch 4 on 8 GB200 (ep 8): 16,384 tokens × 128 experts, 76 bytes each
/// at 8 TB/s × 0.9 × 0.9 — about 24 µs per MoE layer and micro-batch, forward and backward.
#[test]
fn qwen3_router_kernels_are_microseconds_per_layer() {
    let model = tpsim::specs::load_model("qwen3-30b-a3b").unwrap();
    let cluster = gb200_two_trays();
    let training = training(TrainingFramework::MegatronCore);
    let request = PlanRequest {
        dp: 8,
        ep: 8,
        micro_batch: 4,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let t = RouterKernels::of(&model, &training).time(&model, &cluster, &plan, 4096);
    let scores = 4.0 * 4096.0 * 128.0;
    let rate = 8000e9 * 0.9 * 0.9;
    assert!((t.forward_s - scores * 33.0 / rate).abs() < 1e-12, "{t:?}");
    assert!((t.backward_s - scores * 43.0 / rate).abs() < 1e-12, "{t:?}");
    let total_us = (t.forward_s + t.backward_s) * 1e6;
    assert!((20.0..30.0).contains(&total_us), "{total_us} µs");
}

/// Only Megatron-Core's fused router is counted; a dense model has none.
#[test]
fn other_frameworks_and_dense_models_count_no_router_kernels() {
    let qwen3 = tpsim::specs::load_model("qwen3-30b-a3b").unwrap();
    let titan = training(TrainingFramework::Torchtitan);
    assert_eq!(RouterKernels::of(&qwen3, &titan), RouterKernels::default());
    let dense = tpsim::specs::load_model("llama3-8b").unwrap();
    let mcore = training(TrainingFramework::MegatronCore);
    assert_eq!(RouterKernels::of(&dense, &mcore), RouterKernels::default());
}
