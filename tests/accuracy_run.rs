//! `tpsim accuracy --runs FILE --run ID`: one published run as tpsim plans it, with the numbers
//! the whole table gives for it.

mod common;

use common::{assert_one_line_error, json, run};

const RUNS: &str = "validation/modern_runs.yaml";
const DSV3_B200: &str = "mbridge-25.11-pretrain-deepseek_v3-b200-256g-mxfp8-gbs2048";

#[test]
fn one_run_prints_what_the_table_says_of_it_and_its_breakdown() {
    let all = json(&["accuracy", "--runs", RUNS, "--format", "json"]);
    let row = all
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == DSV3_B200)
        .unwrap()
        .clone();
    let one = json(&[
        "accuracy", "--runs", RUNS, "--run", DSV3_B200, "--format", "json",
    ]);
    assert_eq!(one["run"], row);
    // The breakdown is the plan the row was predicted with: the same tokens/s per GPU.
    let plan = &one["planned"]["plans"][0];
    let gpus = 256.0;
    let predicted = plan["tokens_per_s"].as_f64().unwrap() / gpus;
    let in_table = row["predicted_tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!(
        (predicted / in_table - 1.0).abs() < 1e-12,
        "{predicted} vs {in_table}"
    );
    assert_eq!(plan["pp"], 16);
    assert_eq!(plan["ep"], 8);
    assert_eq!(
        one["planned"]["training"]["recompute_modules"],
        serde_json::json!(["mla_up_proj"])
    );

    let r = run(&["accuracy", "--runs", RUNS, "--run", DSV3_B200]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    let published = row["published_tokens_per_s_per_gpu"].as_f64().unwrap();
    // 2048 sequences of 4096 tokens over 256 GPUs at the published rate.
    let published_step = 2048.0 * 4096.0 / gpus / published;
    assert!(
        first.contains(&format!(
            "published {published:.0} tokens/s per GPU, {published_step:.2} s per step"
        )) && first.contains(&format!("tpsim {in_table:.0}"))
            && first.contains("Megatron-Bridge performance summary"),
        "{first}"
    );
    for part in [
        "memory per GPU",
        "communication per GPU per step",
        "time per step",
    ] {
        assert!(r.stdout.contains(part), "{part}: {}", r.stdout);
    }
}

#[test]
fn runs_it_cannot_find_or_predict_say_why() {
    let r = run(&["accuracy", "--runs", RUNS, "--run", "deepseek_v3-b200"]);
    assert_one_line_error(
        &r,
        &["--run deepseek_v3-b200", DSV3_B200],
        &[],
        "unknown id",
    );
    let r = run(&["accuracy", "--run", DSV3_B200]);
    assert_one_line_error(
        &r,
        &["published-runs file", "modern_runs.yaml"],
        &[],
        "old format",
    );
    // A run the table shows as not predicted: its reason, exit 1, nothing on stdout.
    let r = run(&[
        "accuracy",
        "--runs",
        RUNS,
        "--run",
        "automodel-nemotron3_super-h100-64g-bf16",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains(
            "not predicted: the published plan is not a valid plan for tpsim: --framework torchtitan with the hybrid"
        ),
        "{}",
        r.stderr
    );
    // In JSON, the table's row (whose note says why) and no plan.
    let r = run(&[
        "accuracy",
        "--runs",
        RUNS,
        "--run",
        "automodel-nemotron3_super-h100-64g-bf16",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(v["planned"].is_null());
    assert!(
        v["run"]["note"]
            .as_str()
            .unwrap()
            .starts_with("the published plan is not a valid plan for tpsim"),
        "{}",
        v["run"]
    );
    // Nothing given suggests nothing.
    let r = run(&["accuracy", "--runs", RUNS, "--run", ""]);
    assert_one_line_error(&r, &["--run \"\"", "first column"], &["e.g."], "empty id");
}
