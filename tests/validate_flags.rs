//! `tpsim validate --tp N` runs and predicts one layer in 16-bit GEMMs with the attention scores
//! materialised, whatever the training flags say: a `--precision` or `--attention` given with
//! `--tp` would change nothing measured or predicted, so it is refused (exit 2, one line) instead
//! of dropped without a word. Without `--tp` they choose which plans' splits are validated.

mod common;

use common::*;

const LAYER: [&str; 12] = [
    "validate",
    "--backend",
    "cpu",
    "--layers",
    "2",
    "--hidden",
    "64",
    "--heads",
    "4",
    "--seq-len",
    "32",
    "--reps",
];

fn validate_with(extra: &[&str]) -> Run {
    let mut args = LAYER.to_vec();
    args.extend(["1", "--warmup", "0", "--tp", "2"]);
    args.extend(extra);
    run(&args)
}

#[test]
fn a_low_precision_with_tp_is_refused_by_name() {
    let r = validate_with(&["--precision", "fp8"]);
    assert_one_line_error(
        &r,
        &["--precision fp8 with --tp 2", "bf16", "drop --precision"],
        &["panicked"],
        "validate --tp 2 --precision fp8",
    );
}

#[test]
fn an_attention_kernel_with_tp_is_refused_by_name() {
    let r = validate_with(&["--attention", "flash"]);
    assert_one_line_error(
        &r,
        &[
            "--attention flash with --tp 2",
            "materialises the attention scores",
            "drop --attention",
        ],
        &["panicked"],
        "validate --tp 2 --attention flash",
    );
}

#[test]
fn bf16_with_tp_runs_as_without_it() {
    let r = validate_with(&["--precision", "bf16"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("1 of 1 cases passed"), "{}", r.stdout);
}
