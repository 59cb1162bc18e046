//! `plan --emit deepspeed` with a low precision: every plan of the search carries the precision
//! given, and a DeepSpeed config has no FP8/FP4 key, so it is an input error (exit 2, one line),
//! as `eval --emit deepspeed` says it, not a search where "none of the plans can run" (exit 1).

mod common;

use common::*;

#[test]
fn plan_emit_deepspeed_refuses_a_low_precision_as_eval_does() {
    let base = [
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--emit",
        "deepspeed",
        "--precision",
        "fp8",
    ];
    let mut plan = vec!["plan"];
    plan.extend(base);
    assert_one_line_error(
        &run(&plan),
        &[
            "--emit deepspeed with --precision fp8",
            "use --precision bf16",
        ],
        &["none of the"],
        "plan --emit deepspeed --precision fp8",
    );
    let mut eval = vec!["eval", "--tp", "8"];
    eval.extend(base);
    assert_one_line_error(
        &run(&eval),
        &[
            "--emit deepspeed",
            "--precision fp8",
            "use --precision bf16",
        ],
        &[],
        "eval --emit deepspeed --precision fp8",
    );
}
