//! Physics round 32: where low-precision MoE plans pad each expert's rows to the GEMM alignment
//! (validation/FIT.md, "physics round 32"). Megatron-Core's default pads each local expert's
//! received rows inside `TEGroupedMLP` after the dispatch (Transformer Engine's `Fp8Padding`), off
//! the wire; `--moe-router-padding-for-fp8` pads every expert's column of the sending rank's
//! routing map before the all-to-all (`pad_routing_map`), so the padding rows travel it.

mod common;

use common::{json, run};
use serde_json::Value;

/// Qwen3-30B-A3B (128 experts, top-8) in FP8 on two H100 nodes, EP 8 across them: 4,096 tokens a
/// micro-batch and GPU, 32,768 routed copies, 16 local experts.
const QWEN3_FP8_EVAL: &[&str] = &[
    "eval",
    "--model",
    "qwen3-30b-a3b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--tp",
    "1",
    "--pp",
    "1",
    "--ep",
    "8",
    "--recompute",
    "full",
    "--zero",
    "1",
    "--precision",
    "fp8",
];

fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = base.to_vec();
    args.extend(extra);
    args
}

fn estimate(extra: &[&str]) -> Value {
    json(&with(&with(QWEN3_FP8_EVAL, extra), &["--format", "json"]))
}

fn number(value: &Value, what: &str) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {value}"))
}

/// Without the flag (Megatron-Core's default) the all-to-all carries the real copies only; with
/// it every sending rank's map gains (16 − 1)/2 = 7.5 rows for each of the 128 experts, on
/// 32,768 real copies: the EP wire bytes grow by exactly 1 + 128 × 7.5 / 32,768. The plan says
/// which padding it was evaluated with.
#[test]
fn router_padding_puts_the_padding_rows_on_the_wire_and_only_then() {
    let local = estimate(&[]);
    let router = estimate(&["--moe-router-padding-for-fp8"]);
    assert_eq!(local["training"]["moe_dispatch"]["router_padding"], false);
    assert_eq!(router["training"]["moe_dispatch"]["router_padding"], true);
    let wire = |v: &Value| number(&v["plans"][0]["comm"]["ep"]["wire_bytes"], "ep wire bytes");
    let ratio = wire(&router) / wire(&local);
    let by_hand = 1.0 + 128.0 * 7.5 / 32768.0;
    assert!(
        (ratio - by_hand).abs() < 1e-9,
        "router padding multiplies the EP bytes by {ratio}, by hand {by_hand}"
    );
    // Its alias reads the same.
    let alias = estimate(&["--moe-router-padding-for-quantization"]);
    assert_eq!(wire(&alias), wire(&router));
}

/// Without router padding `TEGroupedMLP` copies the received rows into the padded buffer and the
/// output back (`Fp8Padding`/`Fp8Unpadding`), forward and backward; with it those copies go. On
/// one node (EP 8 over NVLink) the plan without the flag computes longer.
#[test]
fn explicit_expert_padding_costs_copies_router_padding_saves() {
    let one_gpu = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--ep",
            "8",
            "--recompute",
            "full",
            "--precision",
            "fp8",
            "--format",
            "json",
        ];
        args.extend(extra);
        let v = json(&args);
        let terms = v["plans"][0]["terms"].as_array().unwrap().clone();
        let compute = terms
            .iter()
            .find(|t| t["kind"] == "compute")
            .expect("a compute term");
        number(&compute["time_s"], "compute time")
    };
    let local = one_gpu(&[]);
    let router = one_gpu(&["--moe-router-padding-for-fp8"]);
    assert!(
        local > router,
        "explicit padding copies should cost time: {local} s without router padding, {router} s with"
    );
}

/// `--emit megatron` writes `--moe-router-padding-for-fp8` exactly when the plan was evaluated
/// with it, so the launch line runs what tpsim costed, and the line read back with
/// `--megatron-args` is evaluated with the same padding site and EP bytes.
#[test]
fn emitted_launch_line_pads_where_the_plan_did() {
    let line = |extra: &[&str]| {
        let r = run(&with(&with(QWEN3_FP8_EVAL, extra), &["--emit", "megatron"]));
        assert_eq!(r.code, 0, "emit failed: {}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.starts_with("--num-layers"))
            .expect("a Megatron-LM argument line")
            .to_string()
    };
    for (extra, padded) in [
        (&[][..], false),
        (&["--moe-router-padding-for-fp8"][..], true),
    ] {
        let launch = line(extra);
        assert_eq!(
            launch.contains("--moe-router-padding-for-fp8"),
            padded,
            "{launch}"
        );
        let read_back = json(&[
            "eval",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "2",
            "--megatron-args",
            &launch,
            "--format",
            "json",
        ]);
        assert_eq!(
            read_back["training"]["moe_dispatch"]["router_padding"],
            padded
        );
        assert_eq!(
            read_back["plans"][0]["comm"]["ep"]["wire_bytes"],
            estimate(extra)["plans"][0]["comm"]["ep"]["wire_bytes"]
        );
    }
}

/// The recipe reader sets the padding site from each release's configs: Megatron-Bridge 25.11
/// never sets `moe_router_padding_for_fp8`; 26.06 (v0.5.0) sets it for Nemotron 3 Super in NVFP4
/// (`nemotron_3_llm_pretrain.py:55-56`); the Megatron-Core MoE report's runs pass
/// `--moe-router-padding-for-quantization` in MXFP8.
#[test]
fn recipe_reader_sets_the_padding_site_per_release() {
    let padding = |file: &str, id: &str| {
        json(&["accuracy", "--runs", file, "--run", id, "--format", "json"])["planned"]["training"]
            ["moe_dispatch"]["router_padding"]
            .clone()
    };
    assert_eq!(
        padding(
            "validation/modern_runs.yaml",
            "mbridge-25.11-pretrain-qwen3_235b_a22b-h100-256g-fp8-gbs2048"
        ),
        false
    );
    assert_eq!(
        padding(
            "validation/mbridge_26_runs.yaml",
            "mbridge-26.06-pretrain-nemotron3_super-gb300-64g-nvfp4-gbs512"
        ),
        true
    );
    assert_eq!(
        padding(
            "validation/mbridge_26_runs.yaml",
            "mbridge-26.06-pretrain-qwen3_235b_a22b-gb200-256g-mxfp8-gbs8192"
        ),
        false
    );
    assert_eq!(
        padding(
            "validation/mcore_moe_report.yaml",
            "mcore-moe-report-deepseek_v3-gb200-256g-mxfp8"
        ),
        true
    );
}
