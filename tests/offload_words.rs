//! Activation offloading's refusals name what the user typed, and the accuracy table says when a
//! recipe offloads (left over from hostile round 27).

mod common;

use common::*;
use serde_json::Value;

const LLAMA_8B: [&str; 8] = [
    "--model",
    "llama3-8b",
    "--nodes",
    "1",
    "--global-batch",
    "64",
    "--cpu-offload-layers",
    "8",
];

fn with(command: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![command];
    args.extend(LLAMA_8B);
    args.extend(extra);
    args
}

#[test]
fn a_recompute_implied_by_its_layer_count_is_named_by_that_flag() {
    let plan = run(&with("plan", &["--recompute-num-layers", "2"]));
    assert_one_line_error(
        &plan,
        &["--recompute-num-layers 2", "--cpu-offload-layers 8"],
        &["--recompute full with"],
        "plan --recompute-num-layers 2 --cpu-offload-layers 8",
    );
    let eval = run(&with(
        "eval",
        &["--tp", "1", "--pp", "1", "--recompute-num-layers", "2"],
    ));
    assert_one_line_error(
        &eval,
        &[
            "--recompute-num-layers 2, which means --recompute full",
            "drop --recompute-num-layers",
        ],
        &["with --recompute full:"],
        "eval --recompute-num-layers 2 --cpu-offload-layers 8",
    );
}

#[test]
fn a_selective_recompute_implied_by_its_modules_is_named_by_that_flag() {
    let eval = run(&with(
        "eval",
        &["--tp", "1", "--pp", "1", "--recompute-modules", "core_attn"],
    ));
    assert_one_line_error(
        &eval,
        &["--recompute-modules core_attn, which means --recompute selective"],
        &["with --recompute selective:"],
        "eval --recompute-modules core_attn --cpu-offload-layers 8",
    );
}

#[test]
fn a_typed_recompute_is_still_named_as_typed() {
    let eval = run(&with(
        "eval",
        &["--tp", "1", "--pp", "1", "--recompute", "full"],
    ));
    assert_one_line_error(
        &eval,
        &[
            "--cpu-offload-layers 8 with --recompute full",
            "give --recompute none",
        ],
        &["--recompute-num-layers"],
        "eval --recompute full --cpu-offload-layers 8",
    );
}

#[test]
fn a_one_layer_model_is_told_it_has_nothing_to_offload() {
    let r = run(&[
        "eval",
        "--layers",
        "1",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--recompute",
        "none",
        "--cpu-offload-layers",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &["--cpu-offload-layers 1", "only layer", "drop it"],
        &["at most 0"],
        "a one-layer model offloading its layer",
    );
}

#[test]
fn the_accuracy_table_says_which_recipes_offload() {
    let rows = json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    let note = |id: &str| -> String {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .and_then(|r| r["note"].as_str())
            .unwrap_or_else(|| panic!("no row {id}"))
            .to_string()
    };
    // Megatron-Bridge 25.11's Llama 3 70B FSDP recipe on GB200 offloads 40 of 80 layers
    // (`recipes::recipe_cpu_offload_layers`); the same model's H100 row offloads none.
    let gb200 = note("mbridge-25.11-pretrain-llama3_70b-gb200-64g-fp8-gbs256");
    assert!(
        gb200.contains("40 of 80 layers offloaded to the CPU"),
        "{gb200}"
    );
    let offloading: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["note"]
                .as_str()
                .is_some_and(|n| n.contains("offloaded to the CPU"))
        })
        .collect();
    assert!(
        offloading.iter().all(|r| r["id"]
            .as_str()
            .is_some_and(|id| id.contains("-gb200-") || id.contains("-gb300-"))),
        "only the Grace-Blackwell Llama recipes offload: {offloading:?}"
    );
}
