//! The physics audit of three current plans (validation/FIT.md, "Physics audit of three current
//! plans", 2026-12-07, third session): one test per defect it found, each checked against a
//! number worked out by hand from the model's shape and the frameworks' code.

mod common;

use serde_json::Value;

/// DeepSeek-V3 as its report lays it out (arXiv 2412.19437 §3.2: PP 16, EP 64 over 8 nodes,
/// ZeRO-1 data parallelism, FP8, one MTP depth), with Megatron-Core's 1F1B.
const DEEPSEEK_V3_OWN_LAYOUT: &[&str] = &[
    "eval",
    "--model",
    "deepseek-v3",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "256",
    "--tp",
    "1",
    "--pp",
    "16",
    "--ep",
    "64",
    "--micro-batch",
    "1",
    "--global-batch",
    "15360",
    "--precision",
    "fp8",
    "--seq-len",
    "4096",
    "--allow-uneven-pp",
    "--zero",
    "1",
    "--mtp-layers",
    "1",
    "--format",
    "json",
];

fn ledger_row<'a>(plan: &'a Value, group: &str, op: &str) -> &'a Value {
    plan["ledger"]["entries"]
        .as_array()
        .expect("a ledger")
        .iter()
        .find(|e| e["group"] == group && e["op"] == op)
        .unwrap_or_else(|| panic!("no {group} {op} row"))
}

fn tensor_bytes(row: &Value) -> f64 {
    row["tensor_bytes"].as_f64().expect("tensor_bytes")
}

/// With FP8 parameter gather the distributed optimizer all-gathers each group's own parameters at
/// their own width: the routed experts are all layer weights, one byte each (Transformer Engine's
/// FP8 parameters), and the DP×CP group gathers the stage's attention, norms, router and shared
/// experts in one byte and its embedding copy, output layer and MTP projection in two. tpsim
/// blended one width over the whole stage and gave both groups that: the experts' gather 1.47
/// bytes a parameter, the dense one 1.47 instead of 1.74 on DeepSeek-V3's last stage.
#[test]
fn fp8_parameter_gathers_move_each_groups_own_width() {
    let json = common::json(DEEPSEEK_V3_OWN_LAYOUT);
    let plan = &json["plans"][0];
    assert_eq!(
        json["training"]["fp8_param_gather"], true,
        "{}",
        json["training"]
    );
    // fp32 gradients: the reduce-scatter's tensor is 4 bytes per parameter of the group.
    let expert_params = tensor_bytes(ledger_row(plan, "expert_dp", "reduce_scatter")) / 4.0;
    let dense_params = tensor_bytes(ledger_row(plan, "dp", "reduce_scatter")) / 4.0;
    let expert_gather = tensor_bytes(ledger_row(plan, "expert_dp", "all_gather"));
    let dense_gather = tensor_bytes(ledger_row(plan, "dp", "all_gather"));
    assert!(
        (expert_gather / expert_params - 1.0).abs() < 1e-9,
        "expert gather {expert_gather} B for {expert_params} FP8 parameters"
    );
    // One MoE layer's non-expert weights at tp 1, from the shape (multi_latent_attention.py's
    // projections, the two norms, the router, the shared expert's three matrices).
    let h = 7168.0;
    let mla = h * 1536.0
        + 1536.0
        + 1536.0 * 128.0 * 192.0
        + h * 576.0
        + 512.0
        + 512.0 * 128.0 * 256.0
        + 128.0 * 128.0 * h
        + h;
    let moe_rest = h + 256.0 * h + 3.0 * h * 2048.0;
    // The last stage, which holds the most parameters: 2 layers and the MTP depth's layer.
    let fp8_layer_weights = 3.0 * (mla + moe_rest);
    let want = 2.0 * dense_params - fp8_layer_weights;
    assert!(
        (dense_gather / want - 1.0).abs() < 0.01,
        "dense gather {dense_gather} B, by hand {want} B ({dense_params} parameters)"
    );
}

/// Llama 3 70B at 128K tokens (tp 8, cp 4, pp 4, no sequence parallelism): Megatron-Core's
/// Transformer Engine linears all-reduce the column-parallel input gradients (QKV, fc1)
/// asynchronously and run their wgrad GEMMs before waiting (layernorm_linear.py: `allreduce(dgrad,
/// tp_group, async_op=True)`, `wgrad_gemm`, `dgrad_work.wait()`), so those two of each layer's
/// four all-reduces run under compute even without TP comm overlap. tpsim left all four exposed
/// (0.14 s of 13.35 s hidden, the output layer's alone).
#[test]
fn megatron_core_hides_the_input_gradient_all_reduces_under_wgrad() {
    let json = common::json(&[
        "eval",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--cp",
        "4",
        "--pp",
        "4",
        "--seq-len",
        "131072",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--format",
        "json",
    ]);
    let plan = &json["plans"][0];
    let tp = plan["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "tp_comm")
        .expect("a TP term");
    let (total, exposed) = (
        tp["time_s"].as_f64().unwrap(),
        tp["exposed_s"].as_f64().unwrap(),
    );
    let layers_times_microbatches = 20.0 * 64.0;
    let qkv = plan["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["group"] == "tp"
                && e["pass"] == "backward"
                && e["site"]
                    .as_str()
                    .unwrap()
                    .starts_with("attention QKV input gradient")
        })
        .expect("the QKV input gradient's all-reduce");
    // Two per layer and micro-batch (QKV and fc1), each 537 MB: fc1's wgrad (3.9 TFLOP) alone
    // outlasts both, so all of it hides but the 15% its SMs cost; at least half is asked.
    let async_s = 2.0 * layers_times_microbatches * qkv["time_s"].as_f64().unwrap();
    assert!(
        total - exposed >= 0.5 * async_s,
        "TP {exposed:.3} s exposed of {total:.3} s; the async input-gradient all-reduces take {async_s:.3} s"
    );
    // The forward's two all-reduces per layer and the ends' stay exposed: at least half the total.
    assert!(exposed >= 0.45 * total, "{exposed} of {total}");
}
