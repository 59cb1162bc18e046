//! torchtitan turns FSDP2 on over the dp-shard x cp mesh whenever cp > 1
//! (torchtitan/distributed/parallel_dims.py: `fsdp_enabled` is `dp_shard_enabled or cp_enabled`):
//! a plan with cp > 1 and replicated states (ZeRO-0) is not one it runs, and tpsim priced it with
//! every weight, gradient and optimizer state on each cp rank (a new user's report, round 13).

mod common;

use common::*;

const BASE: [&str; 16] = [
    "eval",
    "--model",
    "llama3-8b",
    "--nodes",
    "2",
    "--framework",
    "torchtitan",
    "--cp",
    "8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--seq-len",
    "262144",
    "--recompute",
];

fn eval(extra: &[&str]) -> Run {
    let args: Vec<&str> = BASE
        .iter()
        .copied()
        .chain(["full", "--global-batch", "2"])
        .chain(extra.iter().copied())
        .collect();
    run(&args)
}

#[test]
fn replicated_states_beside_cp_are_refused_with_the_layout_torchtitan_runs() {
    assert_one_line_error(
        &eval(&["--zero", "0"]),
        &[
            "--zero 0 with --cp 8 under --framework torchtitan",
            "fsdp_enabled",
            "--zero 3 --dp-replicas 2",
        ],
        &["panicked"],
        "zero 0",
    );
    // eval's own default is said to be eval's, not the user's.
    assert_one_line_error(
        &eval(&[]),
        &[
            "--zero was not given, so eval takes ZeRO-0",
            "--zero 3 --dp-replicas 2",
        ],
        &["panicked"],
        "no --zero",
    );
    // The layout torchtitan runs is priced (it misses the 80 GB by a few GiB: exit 1, not 2).
    let r = eval(&["--zero", "3", "--dp-replicas", "2"]);
    assert_ne!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.contains("time per step"), "{}", r.stdout);
}

#[test]
fn the_search_proposes_no_replicated_states_beside_cp() {
    let v = json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--framework",
        "torchtitan",
        "--seq-len",
        "131072",
        "--global-batch",
        "16",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(
        plans.iter().any(|p| p["cp"].as_u64().unwrap() > 1),
        "no cp plan to check"
    );
    for p in plans {
        if p["cp"].as_u64().unwrap() > 1 {
            assert_eq!(p["zero"], 3, "{p}");
        }
    }
}
