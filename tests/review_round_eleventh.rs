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

/// Megatron-Core splits the dp-cp group into its copies (parallel_state.py asserts only that
/// `num_distributed_optimizer_instances` divides dp x cp), so copies may split a CP group: dp 1,
/// cp 4 in two copies of two ranks. torchtitan's HSDP replicates over a factor of dp alone.
#[test]
fn megatron_core_copies_divide_dp_times_cp() {
    let args = |framework: &str, zero: &'static str, replicas: &'static str| {
        vec![
            "eval".to_string(),
            "--model".into(),
            "llama3-8b".into(),
            "--nodes".into(),
            "1".into(),
            "--tp".into(),
            "2".into(),
            "--cp".into(),
            "4".into(),
            "--global-batch".into(),
            "8".into(),
            "--seq-len".into(),
            "32768".into(),
            "--sequence-parallel".into(),
            "--zero".into(),
            zero.into(),
            "--dp-replicas".into(),
            replicas.into(),
            "--framework".into(),
            framework.into(),
        ]
    };
    let run_with = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&refs)
    };
    let core = run_with(args("megatron-core", "1", "2"));
    assert_eq!(core.code, 0, "{}", core.stderr);
    assert!(
        core.stdout
            .contains("ZeRO-1 (2 copies of the sharded states, each over 2 ranks)"),
        "{}",
        core.stdout
    );
    assert_one_line_error(
        &run_with(args("megatron-core", "1", "3")),
        &["--dp 1 x --cp 4 = 4 data-parallel ranks", "valid: 1, 2"],
        &["1, 2, 4"],
        "three copies of four ranks",
    );
    assert_one_line_error(
        &run_with(args("torchtitan", "3", "2")),
        &[
            "--dp-replicas 2",
            "the --dp 1 data-parallel ranks",
            "valid: 1",
        ],
        &[],
        "torchtitan's HSDP over dp 1",
    );
}

/// The layout figure named no copies of the sharded states: its DP line read as one group
/// reducing over NVLink, with the copies' all-reduce across nodes left out.
#[test]
fn the_layout_figure_draws_the_copies() {
    let dir = scratch("review_round_eleventh", "layout");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
        "--zero",
        "1",
        "--dp-replicas",
        "4",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(svg.contains("DP: the 4 replicas of one copy"), "{svg}");
    assert!(
        svg.contains("copies of the sharded states: 4 copies, each sharded over the 4 consecutive DP ranks above")
            && svg.contains("(stride 8) over the network"),
        "{svg}"
    );
}
