//! Fixes from the eleventh session's review rounds that are not a round's own file: Megatron-LM
//! keeps ZeRO-3's gathered parameters only through torch FSDP2, which keeps one copy of the
//! sharded states, so the search stops offering "keep" with copies there (torchtitan's HSDP
//! keeps them with any number).

mod common;

use common::*;

fn plans(framework: &str) -> Vec<serde_json::Value> {
    let v = json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--zero",
        "3",
        "--framework",
        framework,
        "--top",
        "200",
        "--format",
        "json",
    ]);
    v["plans"].as_array().unwrap().clone()
}

fn kept_with_copies(p: &serde_json::Value) -> bool {
    p["reshard_after_forward"] == false && p["dp_replicas"].as_u64().unwrap_or(1) > 1
}

#[test]
fn megatron_core_never_offers_kept_parameters_with_copies() {
    let core = plans("megatron-core");
    assert!(!core.is_empty());
    assert!(!core.iter().any(kept_with_copies), "{core:?}");
    // Kept parameters with one copy, and copies with resharding, are both still offered.
    assert!(core.iter().any(|p| p["reshard_after_forward"] == false));
    assert!(
        core.iter()
            .any(|p| p["dp_replicas"].as_u64().unwrap_or(1) > 1)
    );
    // torchtitan's HSDP keeps them with copies.
    let titan = plans("torchtitan");
    assert!(titan.iter().any(kept_with_copies));
}

#[test]
fn pinning_both_names_the_rule() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--zero",
        "3",
        "--dp-replicas",
        "2",
        "--reshard-after-forward",
        "false",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--reshard-after-forward false",
            "one copy of the sharded states",
        ],
        &["each admit valid plans but not together"],
        "keep with two copies under megatron-core",
    );
}
