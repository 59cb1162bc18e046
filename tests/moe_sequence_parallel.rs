//! Megatron-Core trains MoE layers under tensor parallelism only with sequence parallelism
//! (megatron/core/transformer/moe/moe_layer.py `MoELayer.forward` raises otherwise): `plan` no
//! longer proposes such plans, `eval` takes sequence parallelism on when it was not given and says
//! so, and an explicit `--sequence-parallel false` is refused in one line.

mod common;

use common::*;

const BASE: [&str; 8] = [
    "--model",
    "qwen3-30b-a3b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "2",
    "--global-batch",
    "256",
];

#[test]
fn plan_proposes_no_moe_plan_megatron_core_refuses() {
    let mut args = vec!["plan"];
    args.extend(BASE);
    args.extend(["--top", "60", "--format", "json"]);
    let v = json(&args);
    let plans = v["plans"].as_array().unwrap();
    assert!(plans.iter().any(|p| p["tp"].as_u64().unwrap() > 1));
    for p in plans {
        assert!(
            p["tp"] == 1 || p["sequence_parallel"] == true,
            "tp {} without sequence parallelism: {p}",
            p["tp"]
        );
    }
}

#[test]
fn eval_takes_sequence_parallelism_on_for_moe_under_tp_and_says_so() {
    let mut args = vec!["eval"];
    args.extend(BASE);
    args.extend(["--tp", "2", "--ep", "8", "--zero", "1", "--format", "json"]);
    let r = run(&args);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["plans"][0]["sequence_parallel"], true);
    assert!(
        r.stderr
            .contains("Megatron-Core trains MoE layers under TP only with it"),
        "{}",
        r.stderr
    );
    // A dense model keeps Megatron-LM's default, off.
    let dense = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&dense.stdout).unwrap();
    assert_eq!(v["plans"][0]["sequence_parallel"], false);
}

#[test]
fn an_explicit_moe_plan_without_sequence_parallelism_is_refused() {
    let mut args = vec!["eval"];
    args.extend(BASE);
    args.extend(["--tp", "2", "--ep", "8", "--sequence-parallel", "false"]);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &[
            "--tp 2 without --sequence-parallel",
            "moe_layer.py",
            "add --sequence-parallel",
        ],
        &["panicked"],
        "moe tp without sp",
    );
}
