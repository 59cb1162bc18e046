//! Review of the layers kept in bf16 under low-precision training (`tests/bf16_layers.rs`):
//! defects found after the change, each failing before its fix.

mod common;

use common::*;
use serde_json::Value;

fn compute_s(v: &Value) -> f64 {
    v["plans"][0]["time"]["compute_s"].as_f64().unwrap()
}

/// `eval --format json` of `model` with `mtp` MTP depths at [`SUPER_GB300_PLAN`] in `precision`.
fn at(model: &str, mtp: &str, precision: &str, extra: &[&str]) -> Value {
    let mut args = vec!["eval", "--model", model, "--mtp-layers", mtp];
    args.extend(
        SUPER_GB300_PLAN
            .iter()
            .map(|a| if *a == "mxfp8" { precision } else { a }),
    );
    args.extend(extra);
    args.extend(["--format", "json"]);
    json(&args)
}

#[test]
fn a_hybrid_stacks_mtp_block_runs_at_nvfp4() {
    // Megatron-Core builds a hybrid stack's MTP block as a HybridStack of its own
    // (multi_token_prediction.py, pp_layer_offset=0), whose forward gives its layers
    // get_fp4_context(config, 0) and (config, 1): NVFP4, unless the first layers kept in bf16
    // cover them. A transformer's MTP layer has no FP4 context (bf16).
    let model = "nemotron-3-super-120b-a12b";
    let mtp_cost = |precision: &str, extra: &[&str]| {
        compute_s(&at(model, "2", precision, extra)) - compute_s(&at(model, "0", precision, extra))
    };
    let (bf16, nvfp4) = (mtp_cost("bf16", &[]), mtp_cost("nvfp4", &[]));
    assert!(
        nvfp4 < 0.97 * bf16,
        "MTP at nvfp4 {nvfp4} against bf16 {bf16}"
    );
    // The recipe's last 14 layers do not reach the block's layers 0 and 1.
    let end_14 = [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "0",
        "--num-layers-at-end-in-bf16",
        "14",
    ];
    let recipe = mtp_cost("nvfp4", &end_14);
    assert!((recipe / nvfp4 - 1.0).abs() < 0.01, "{recipe} vs {nvfp4}");
    // The first two layers kept in bf16 keep the block's too.
    let start_2 = [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "2",
        "--num-layers-at-end-in-bf16",
        "0",
    ];
    let kept = mtp_cost("nvfp4", &start_2);
    assert!(
        (kept / bf16 - 1.0).abs() < 1e-6,
        "kept {kept} against bf16 {bf16}"
    );
    // And the training line says the MTP layers are in bf16 only then.
    let text = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", model, "--mtp-layers", "2"];
        args.extend(
            SUPER_GB300_PLAN
                .iter()
                .map(|a| if *a == "mxfp8" { "nvfp4" } else { a }),
        );
        args.extend(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    assert!(!text(&[]).contains("the MTP block"), "{}", text(&[]));
    assert!(
        text(&start_2).contains("and the MTP block, whose own layers the counts cover"),
        "{}",
        text(&start_2)
    );
    // DeepSeek-V3's MTP layer (a transformer's) stays in bf16 under NVFP4.
    let dsv3 = |mtp: &str, precision: &str| {
        let v = json(&[
            "eval",
            "--model",
            "deepseek-v3",
            "--mtp-layers",
            mtp,
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "32",
            "--global-batch",
            "1024",
            "--seq-len",
            "4096",
            "--tp",
            "1",
            "--ep",
            "16",
            "--pp",
            "1",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
            "--precision",
            precision,
            "--format",
            "json",
        ]);
        compute_s(&v)
    };
    let (b, n) = (
        dsv3("1", "bf16") - dsv3("0", "bf16"),
        dsv3("1", "nvfp4") - dsv3("0", "nvfp4"),
    );
    assert!(
        n > 0.95 * b,
        "DeepSeek-V3 MTP at nvfp4 {n} against bf16 {b}"
    );
}

#[test]
fn a_saved_plans_bf16_layers_under_another_framework_are_refused() {
    // `--framework torchtitan` over a Megatron-Core file that keeps layers in bf16 priced them
    // (and said "the first 1 and last 4 layers in bf16 by --first-last-layers-bf16" as torchtitan
    // runs it), which the flag itself refuses.
    let dir = scratch("bf16-layers-review", "framework");
    let file = dir.join("plan.yaml");
    let file = file.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
        "--pp",
        "4",
        "--tp",
        "2",
        "--first-last-layers-bf16",
        "--num-layers-at-end-in-bf16",
        "4",
        "--save",
        file,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_one_line_error(
        &run(&["eval", "--plan", file, "--framework", "torchtitan"]),
        &["bf16_layers", "--framework torchtitan", "megatron-core"],
        &[],
        "a saved plan's bf16 layers under torchtitan",
    );
    // As saved, and as a bf16 run (which never uses them), it evaluates.
    assert_eq!(run(&["eval", "--plan", file]).code, 0);
    let bf16 = run(&["eval", "--plan", file, "--precision", "bf16"]);
    assert!(bf16.code == 0 || bf16.code == 1, "{}", bf16.stderr);
}
