//! The search proposes only the ZeRO stages a framework has a configuration for
//! (`TrainingFramework::runs_zero_stage`): torchtitan replicates or shards with FSDP2.

mod common;
use common::{json, run};

/// The ZeRO stages of every plan `plan` shows for a 7B model on 2 nodes under `framework`.
fn stages_shown(framework: &str) -> Vec<u64> {
    let out = json(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--framework",
        framework,
        "--top",
        "200",
        "--format",
        "json",
    ]);
    out["plans"]
        .as_array()
        .expect("plans")
        .iter()
        .map(|p| p["zero"].as_u64().expect("zero"))
        .collect()
}

#[test]
fn torchtitan_plans_replicate_or_shard_with_fsdp() {
    let titan = stages_shown("torchtitan");
    assert!(!titan.is_empty());
    assert!(titan.iter().all(|z| *z == 0 || *z == 3), "{titan:?}");
    assert!(titan.contains(&3), "{titan:?}");
    // Megatron-Core has a distributed optimizer (ZeRO-1) and Megatron-FSDP's stages: the same
    // search shows them there.
    let core = stages_shown("megatron-core");
    assert!(core.iter().any(|z| *z == 1 || *z == 2), "{core:?}");
}

#[test]
fn eval_prices_a_stage_torchtitan_lacks_and_says_so() {
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--dp",
        "8",
        "--zero",
        "1",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("ZeRO-1 is evaluated as asked, but --framework torchtitan has no such stage"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--zero 3"), "{}", r.stderr);
}

#[test]
fn a_pinned_stage_torchtitan_lacks_is_named_as_the_frameworks() {
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
        "--zero",
        "2",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("--framework torchtitan has no ZeRO-2")
            && r.stderr.contains("--zero 0")
            && r.stderr.contains("--zero 3"),
        "{}",
        r.stderr
    );
}
