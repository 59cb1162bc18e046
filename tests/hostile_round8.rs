//! Hostile input, round 8: defects an adversarial audit of the built binary found in negative
//! counts in spec files, the fixes plan-file errors offer, and the other inputs below, one
//! regression test each. Every error case checks exit 2, one line (so no panic or backtrace) and
//! the words that name the value, the rule and the fix.

mod common;

use common::*;

/// The bundled 512B plan with its first line matching `from` (a whole line) replaced by `to`.
fn plan_with(from: &str, to: &str) -> String {
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let at = plan
        .find(&format!("\n{from}\n"))
        .unwrap_or_else(|| panic!("the plan has the line {from:?}"))
        + 1;
    format!("{}{to}{}", &plan[..at], &plan[at + from.len()..])
}

/// `tp: -1` in a plan file was refused as "invalid type: integer `-1`, expected a whole number
/// from 0 to 4294967295": the machine type's range, which even offers 0, not tp's rule. A
/// negative count in any spec file (plan, model, GPU profile) now names the key's rule and a fix.
#[test]
fn a_negative_count_in_a_spec_file_names_the_keys_rule() {
    let dir = scratch("round8", "negative-count");
    for (from, to, words) in [
        (
            "  tp: 8",
            "  tp: -1",
            "plan.tp: -1 is negative; tp must be a positive whole number (1 or more), e.g. tp: 1",
        ),
        (
            "  micro_batch: 1",
            "  micro_batch: -2",
            "plan.micro_batch: -2 is negative; micro_batch must be a positive whole number",
        ),
        (
            "nodes: 32",
            "nodes: -32",
            "nodes: -32 is negative; nodes must be a positive whole number (1 or more), e.g. nodes: 1",
        ),
        (
            "  layers: 112",
            "  layers: -1",
            "model.layers: -1 is negative; layers must be a positive whole number",
        ),
        (
            "  zero: 1",
            "  zero: -1",
            "plan.zero: -1 is negative; zero is a ZeRO stage: use 0, 1, 2 or 3",
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(
            &r,
            &["p.yaml:", words],
            &["4294967295", "from 0 to 255", "invalid type"],
            to,
        );
    }
    // A GPU profile's and a model file's counts say the same.
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    std::fs::write(
        dir.join("g.yaml"),
        gpu.replacen("\ngpus_per_node: 8", "\ngpus_per_node: -8", 1),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--params", "7B", "--nodes", "1", "--gpu", "g.yaml", "--tp", "1", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "g.yaml:",
            "gpus_per_node: -8 is negative; gpus_per_node must be a positive whole number",
        ],
        &["4294967295"],
        "gpus_per_node: -8",
    );
}

/// A plan-file error offered flags as its fix (`e.g. --global-batch 10`, `no --dp works ...;
/// change --tp, --cp or --pp`) where the value to change is a line of the file. The fix now names
/// the file's keys; a flag the user typed over the file keeps its flag.
#[test]
fn a_plan_file_errors_fix_names_the_files_keys() {
    let dir = scratch("round8", "fix-keys");
    for (from, to, words, absent) in [
        (
            "global_batch: 1536",
            "global_batch: 9",
            &[
                "global_batch: 9 is not divisible by dp: 2",
                "(e.g. global_batch: 10)",
            ][..],
            &["--global-batch"][..],
        ),
        (
            "  tp: 8",
            "  tp: 16",
            &["tp: 16 x cp: 1 x pp: 16 x dp: 2 = 512 GPUs", "(e.g. dp: 1)"][..],
            &["--dp"][..],
        ),
        (
            "nodes: 32",
            "nodes: 9",
            &["no dp works", "change tp, cp or pp"][..],
            &["--dp", "--tp"][..],
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), plan_with(from, to)).unwrap();
        for command in [
            &["eval", "--plan", "p.yaml"][..],
            &["report", "p.yaml", "--out", "r"],
        ] {
            let r = run_in(&dir, command);
            assert_one_line_error(&r, words, absent, &format!("{to}: {command:?}"));
        }
    }
    // `--dp 2` typed over the file is the user's flag: the fix may name it.
    std::fs::write(
        dir.join("p.yaml"),
        plan_with("global_batch: 1536", "global_batch: 9"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--global-batch", "9"]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch 9 is not divisible",
            "e.g. --global-batch 10",
        ],
        &["global_batch: 10"],
        "--global-batch over the file",
    );
}
