//! The physics audit of three far-off plans (validation/FIT.md, "Physics audit of three far-off
//! plans", audit round 28): one test per defect it found, each checked against a number worked
//! out by hand from the model's shape and the frameworks' code.

mod common;

use serde_json::Value;

/// Qwen3-30B-A3B on four GB200 trays with ZeRO-1 (expert-DP 2 beside ep 8), at `precision`.
fn qwen3_30b_on_four_trays(precision: &str) -> Value {
    common::json(&[
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "4",
        "--gpus-per-node",
        "4",
        "--ep",
        "8",
        "--micro-batch",
        "4",
        "--global-batch",
        "512",
        "--precision",
        precision,
        "--zero",
        "1",
        "--format",
        "json",
    ])
}

fn ledger_tensor_bytes(plan: &Value, group: &str, op: &str) -> f64 {
    plan["ledger"]["entries"]
        .as_array()
        .expect("a ledger")
        .iter()
        .find(|e| e["group"] == group && e["op"] == op)
        .unwrap_or_else(|| panic!("no {group} {op} row"))["tensor_bytes"]
        .as_f64()
        .expect("tensor_bytes")
}

/// Bytes each group's parameter all-gather carries per parameter: (DP×CP, expert-DP). The
/// reduce-scatter's tensor is the same parameters' fp32 gradients (4 bytes each).
fn gather_bytes_per_param(json: &Value) -> (f64, f64) {
    assert_eq!(
        json["training"]["grad_dtype"], "fp32",
        "{}",
        json["training"]
    );
    let plan = &json["plans"][0];
    let per_param = |group: &str| {
        ledger_tensor_bytes(plan, group, "all_gather")
            / (ledger_tensor_bytes(plan, group, "reduce_scatter") / 4.0)
    };
    (per_param("dp"), per_param("expert_dp"))
}

/// Megatron-Core gathers MXFP8 parameters in bf16: under the distributed optimizer
/// `_ParamAndGradBuffer` backs MXFP8 parameters' `param_data` with the gradient buffer ("For FP32
/// weight grads, only half of the buffer is used to store params in bf16",
/// param_and_grad_buffer.py at d98e8a64 and core_r0.14.0), all-gathers the bf16 values into it
/// and casts them into the MXFP8 storage after (`_post_param_sync`). Per-tensor FP8 gathers its
/// uint8 storage. tpsim gathered MXFP8's layer weights at one byte, as FP8's: 1.40 bytes a
/// parameter for the DP group and 1.0 for the experts here, where the code moves 2.
#[test]
fn mxfp8_parameters_are_gathered_in_bf16() {
    let mxfp8 = qwen3_30b_on_four_trays("mxfp8");
    assert_eq!(
        mxfp8["training"]["fp8_param_gather"], true,
        "{}",
        mxfp8["training"]
    );
    let (dense, expert) = gather_bytes_per_param(&mxfp8);
    assert!(
        (dense - 2.0).abs() < 1e-9 && (expert - 2.0).abs() < 1e-9,
        "MXFP8 gathers {dense} / {expert} bytes a parameter (DP / expert-DP), the code 2 / 2"
    );
    // Per-tensor FP8 still gathers its layer weights in one byte: every routed expert parameter,
    // and all but the embedding and output layer (bf16) of the DP group's.
    let (dense, expert) = gather_bytes_per_param(&qwen3_30b_on_four_trays("fp8"));
    assert!(
        (expert - 1.0).abs() < 1e-9 && dense > 1.0 && dense < 2.0,
        "FP8 gathers {dense} / {expert} bytes a parameter (DP / expert-DP)"
    );
}
