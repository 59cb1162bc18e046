//! The parameter and gradient passes outside the GEMMs: FP8 parameter gathers, Megatron-FSDP's
//! gradient copies, pipelined FSDP's accumulation.

use crate::cluster::Cluster;
use crate::cost::comm;
use crate::cost::unit_costs::unit_costs;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, Training, TrainingFramework};

/// How much a Llama 3 8B layer's backward (tp 2 on one H100 node, 8K tokens, nothing
/// recomputed) grows from ZeRO-1 to ZeRO-3 under `framework` at `pp` × `dp` and `micro_batch`,
/// against `bytes_per_param` moved over the layer's TP-split parameters; with the micro-batches
/// each pipeline schedule runs.
fn zero3_backward_growth(
    framework: TrainingFramework,
    pp: u32,
    dp: u32,
    micro_batch: u32,
    bytes_per_param: f64,
) -> (f64, f64, u32) {
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(framework, 8192, 32, AttentionKernel::Flash);
    let backward_at = |zero: u8| {
        let request = crate::plan::PlanRequest {
            tp: 2,
            pp,
            dp,
            micro_batch,
            zero,
            recompute: Recompute::None,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let backward = unit_costs(&model, &cluster, &training, &plan)
            .layer
            .backward;
        (backward, plan.microbatches_per_schedule())
    };
    let expected = model.layer_params() / 2.0 * bytes_per_param
        / cluster.gpu.achieved_hbm_bandwidth().0
        / cluster.gpu.framework_efficiency;
    let ((sharded, micro_batches), (replicated, _)) = (backward_at(3), backward_at(1));
    (sharded - replicated, expected, micro_batches)
}

#[test]
fn fp8_parameter_gather_leaves_the_output_layers_copies_in_bf16() {
    // torchtitan ZeRO-3 in FP8 on tp 2 x dp 4: with the FP8 parameter gather the layers'
    // copy-outs move one byte a parameter, but the embedding and output layer are gathered in
    // bf16 either way (`comm::gather_bytes_per_param`), so their copies do not shrink.
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let request = crate::plan::PlanRequest {
        tp: 2,
        dp: 4,
        zero: 3,
        precision: crate::plan::Precision::Fp8,
        ..crate::plan::PlanRequest::default()
    };
    let costs = |fp8_param_gather: bool| {
        let mut training = Training::with_framework(
            TrainingFramework::Torchtitan,
            8192,
            32,
            AttentionKernel::Flash,
        );
        training.fp8_param_gather = fp8_param_gather;
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        assert!(comm::fp8_parameter_gather(&training, &plan) == fp8_param_gather);
        unit_costs(&model, &cluster, &training, &plan)
    };
    let (bf16, fp8) = (costs(false), costs(true));
    assert!(fp8.layer.forward < bf16.layer.forward);
    assert_eq!(fp8.output.forward, bf16.output.forward);
    assert_eq!(fp8.output.backward, bf16.output.backward);
}

#[test]
fn megatron_fsdp_copies_each_gradient_into_its_bucket_outside_the_gemms() {
    // tp 2 × dp 4 under Megatron-Core (the fused weight-gradient GEMMs stay compute-bound at
    // 8K tokens, so ZeRO-1 pays nothing beyond them). Megatron-FSDP runs unfused: each bf16
    // gradient is copied into its fp32 bucket, 6 bytes per parameter.
    let (extra, expected, _) = zero3_backward_growth(TrainingFramework::MegatronCore, 1, 4, 1, 6.0);
    assert!(
        (extra - expected).abs() < 1e-9 * expected,
        "{extra} vs {expected}"
    );
}

#[test]
fn pipelined_fsdp_pays_an_accumulation_pass_over_the_stage_per_micro_batch() {
    // tp 2 × pp 2 × FSDP 2 (ZeRO-3) under torchtitan, 32 sequences of 2: 8 micro-batches in
    // one schedule, whose unsharded fp32 accumulators take every micro-batch's bf16 gradient
    // (6 bytes for the first, 10 for each later one), and whose one reduce-scatter copies the
    // accumulated fp32 gradients into its input (4 + 4 bytes over the 8 micro-batches). ZeRO-1
    // accumulates nothing unsharded across the schedule; the rest of the layer is the same.
    let (extra, expected, micro_batches) = zero3_backward_growth(
        TrainingFramework::Torchtitan,
        2,
        2,
        2,
        (6.0 + 7.0 * 10.0) / 8.0 + (4.0 + 4.0) / 8.0,
    );
    assert_eq!(micro_batches, 8);
    assert!(
        (extra - expected).abs() < 1e-9 * expected,
        "{extra} vs {expected}"
    );
}
