//! Hostile input, round 5: defects an adversarial audit of the built binary found (sizes with a
//! space inside read as one value, values in errors whose ends were not visible, quoted numbers in
//! YAML said in serde's words with no fix, a plan saved where the report needed its directory),
//! one regression test each. Every error case checks exit 2, one line (so no panic or backtrace)
//! and the words that name the value, the rule and the fix.

mod common;

use common::*;
use std::path::Path;

const ONE_NODE: &[&str] = &["--nodes", "1", "--global-batch", "64", "--top", "1"];

fn plan_with(extra: &[&str]) -> Run {
    let mut args = vec!["plan"];
    args.extend_from_slice(ONE_NODE);
    args.extend_from_slice(extra);
    run(&args)
}

/// `--run "x y"` was quoted back as `--run x y: no run ...`, which reads as the id `x` and a
/// stray `y`; an empty value was handled in one message only. A value that is empty or holds a
/// space is now put in double quotes in every message that quotes it.
#[test]
fn values_with_spaces_are_quoted_in_errors_so_their_ends_show() {
    let r = run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        "x y",
    ]);
    assert_one_line_error(
        &r,
        &["--run \"x y\": no run of", "give one of its ids"],
        &["--run x y"],
        "--run \"x y\"",
    );
    let r = run(&["accuracy", "--run", "x y"]);
    assert_one_line_error(
        &r,
        &["--run \"x y\":", "published-runs file"],
        &["--run x y"],
        "--run \"x y\" on the bundled runs",
    );
    let r = run(&["plan", "--nodes", "1", "--model", "my model.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "--model \"my model.yaml\": cannot read it",
            "check the path",
        ],
        &[],
        "--model \"my model.yaml\"",
    );
    // A plain name or path is shown as typed, and an unknown name is quoted once.
    let r = run(&["plan", "--nodes", "1", "--model", "no-such-model"]);
    assert_one_line_error(
        &r,
        &["unknown model \"no-such-model\"; known:"],
        &["\\\""],
        "--model no-such-model",
    );
    let r = run(&["plan", "--nodes", "1", "--model", "a b"]);
    assert_one_line_error(
        &r,
        &["unknown model \"a b\";"],
        &["\\\""],
        "--model \"a b\"",
    );
}
