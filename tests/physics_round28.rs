//! Physics round 28: the small defects the audit of three more plans noted and left
//! (validation/FIT.md, "Physics audit of three more plans", "Noted, not changed"). One test per
//! item, each against a number worked out by hand from the frameworks' code.

mod common;

use serde_json::Value;

/// Llama 3.1 405B under torchtitan on 512 H100 (FSDP 8 × TP 8 × PP 8, 1F1B, 8 micro-batches).
const TORCHTITAN_405B: &str = "torchtitan-202412-llama31_405b-h100-512g-tp8-pp8-fsdp8-cp1-32k";
/// Qwen3-235B-A22B on 256 H100, Megatron-Bridge 25.11 (tp 2, pp 8 × vpp 4, ep 32, FP8).
const QWEN3_235B_H100: &str = "mbridge-25.11-pretrain-qwen3_235b_a22b-h100-256g-fp8-gbs2048";

fn planned_plan(id: &str) -> Value {
    common::json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        id,
        "--format",
        "json",
    ])["planned"]["plans"][0]
        .clone()
}

fn number(value: &Value, what: &str) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {value}"))
}

/// FSDP2's `foreach_reduce` copies a unit's unsharded gradients into the reduce-scatter input and
/// frees them (`unsharded_grads.clear()`) before the sharded gradient exists, and torchtitan's
/// `zero_grad` sets the sharded ones to None each step: at the schedule's peak (one schedule run,
/// one chunk per stage) only the unsharded fp32 accumulations live, 4 B a parameter of the stage,
/// not those plus the 4/8 B shards (28.08 GB on the last stage before the fix).
#[test]
fn fsdp2_gradients_peak_at_the_unsharded_accumulations_only() {
    let plan = planned_plan(TORCHTITAN_405B);
    assert_eq!(plan["schedule_runs"], 1, "{plan}");
    assert_eq!(plan["vpp"], 1, "{plan}");
    assert_eq!(plan["zero"], 3, "{plan}");
    let memory = &plan["memory"];
    let params = number(&memory["params_per_gpu_before_zero"], "params");
    let gradients = number(&memory["gradients_bytes"], "gradients");
    let hand = 4.0 * params;
    assert!(
        (gradients / hand - 1.0).abs() < 1e-9,
        "gradients {gradients} B, by hand 4 B × {params} = {hand} B ({:+.2}%)",
        100.0 * (gradients / hand - 1.0)
    );
}

/// Megatron-Core's `send_forward` sends only `if not is_last_stage` and `send_backward` only
/// `if not is_first_stage` (p2p_communication.py:494, :516): Qwen3-235B's stages of 11 layers
/// (the first and the last; the middle ones hold 12) send 2 · 4 − 1 = 7 messages per micro-batch
/// of s/t × h bf16 = 2048 × 4096 × 2 B, not 8.
#[test]
fn the_model_ends_chunks_send_one_way_only() {
    let plan = planned_plan(QWEN3_235B_H100);
    assert_eq!(plan["pp"], 8, "{plan}");
    assert_eq!(plan["vpp"], 4, "{plan}");
    assert_eq!(plan["stages"]["middle_max"], 12, "{plan}");
    assert_eq!(plan["slowest_stage_layers"], 11, "{}", plan["stages"]);
    let m = number(&plan["num_microbatches"], "micro-batches");
    let message = 2048.0 * 4096.0 * 2.0;
    let hand = 7.0 * m * message;
    let wire = number(&plan["comm"]["pp"]["wire_bytes"], "PP bytes");
    assert!(
        (wire / hand - 1.0).abs() < 1e-9,
        "PP wire {wire} B, by hand 7 × {m} × {message} = {hand} B ({:.3} messages per micro-batch)",
        wire / m / message
    );
}

/// Megatron-Core's all-to-all dispatcher pads the rank's own routing map before "Permutation 1"
/// (token_dispatcher.py:649-677, `num_out_tokens` from the padded map, :545-551), so the own
/// copies carry the FP8 padding as the received ones do. Qwen3-235B at tp 2 (SP), ep 32, FP8:
/// 2048 tokens × top-8 = 16,384 copies, 128 experts × 7.5 padding rows = 960 more; Permutation 1
/// 2 × (2048 + 17,344) rows, Permutation 2 (4 local experts) 4 × 17,344 rows, of 4096 × 2 B.
#[test]
fn fp8_routing_map_padding_pads_the_own_copies_too() {
    use tpsim::cluster::Cluster;
    use tpsim::plan::{ParallelPlan, PlanRequest, Precision};
    use tpsim::training::{AttentionKernel, MoeDispatcher, Training, TrainingFramework};
    let model = tpsim::specs::load_model("qwen3-235b-a22b").unwrap();
    let cluster = Cluster {
        gpu: tpsim::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 32,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        TrainingFramework::MegatronCore,
        4096,
        2048,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 2,
        dp: 128,
        ep: 32,
        etp: 1,
        sequence_parallel: true,
        micro_batch: 1,
        zero: 1,
        precision: Precision::Fp8,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    // With `--moe-router-padding-for-fp8`, the padding this test checks (physics round 32).
    let router_padded = tpsim::training::MoeDispatch {
        dispatcher: MoeDispatcher::Alltoall,
        router_padding: true,
        ..Default::default()
    };
    let pad = tpsim::cost::moe::padded_copies_factor(&model, &plan, 4096, router_padded);
    let copies = 2048.0 * 8.0;
    assert!(
        (pad - (copies + 960.0) / copies).abs() < 1e-12,
        "padding factor {pad}"
    );
    let bytes =
        tpsim::cost::moe::permutation_bytes(&model, &plan, 4096, pad, MoeDispatcher::Alltoall);
    let row = 4096.0 * 2.0;
    let padded = copies + 960.0;
    let hand = (2.0 * (2048.0 + padded) + 4.0 * padded) * row;
    assert!(
        (bytes / hand - 1.0).abs() < 1e-12,
        "permutation {bytes} B, by hand {hand} B ({:+.2}%)",
        100.0 * (bytes / hand - 1.0)
    );
}
