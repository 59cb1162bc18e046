//! Review round 30: the second half of this session's change (leftovers 37, physics 31).
//! 1. `plan --emit torchtitan --moe-capacity-factor 1.0` on an MoE model (torchtitan taken from
//!    the emit) searched, then said "none of the 20729 plans that fit can run in torchtitan"
//!    under the emit's note, exit 1: the capacity factor is refused whatever the plan (torchtitan's
//!    dispatchers are dropless), so it is an input error now, one line and exit 2 before the
//!    search (`torchtitan_moe::capacity_factor_unsupported`, which the plan check shares), with
//!    both fixes (drop the flag, or `--emit megatron`), each of which runs.

mod common;

use common::*;

#[test]
fn emit_torchtitan_refuses_a_capacity_factor_before_the_search() {
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "torchtitan",
        "--moe-capacity-factor",
        "1.0",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--emit torchtitan",
            "--moe-capacity-factor",
            "dropless",
            "drop --moe-capacity-factor",
            "--emit megatron",
        ],
        &["plans that fit", "note:"],
        "--emit torchtitan with a capacity factor",
    );
    // Both fixes run: the flag dropped, and the emit Megatron-Core runs.
    let dropped = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(dropped.code, 0, "{}", dropped.stderr);
    let megatron = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "megatron",
        "--moe-capacity-factor",
        "1.0",
    ]);
    assert_eq!(megatron.code, 0, "{}", megatron.stderr);
    assert!(
        megatron.stdout.contains("--moe-expert-capacity-factor"),
        "{}",
        megatron.stdout
    );
}
