//! A pasted Megatron-LM line with an abbreviated flag is refused, as Megatron-LM's parser
//! (`allow_abbrev=False` in megatron/training/arguments.py) refuses it, instead of being skipped
//! and evaluated at the flag's default; Megatron-LM's own flags that begin other flags are read
//! as themselves.

mod common;

use common::*;

const LINE: &str = "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 64 --bf16";

fn eval_with(extra: &str) -> Run {
    let line = format!("{LINE} {extra}");
    run(&["eval", "--nodes", "1", "--megatron-args", &line])
}

#[test]
fn an_abbreviated_flag_is_refused_with_its_whole_name() {
    assert_one_line_error(
        &eval_with("--tensor-model-parallel 2"),
        &[
            "\"--tensor-model-parallel\"",
            "allow_abbrev=False",
            "--tensor-model-parallel-size",
        ],
        &["panicked"],
        "--tensor-model-parallel 2",
    );
    // A start that several flags share names them all.
    assert_one_line_error(
        &eval_with("--seq 1024"),
        &["--seq-length", "--sequence-parallel"],
        &["panicked"],
        "--seq 1024",
    );
}

#[test]
fn megatron_flags_that_begin_others_are_not_abbreviations() {
    // `--optimizer` is a Megatron-LM argument of its own, not the start of
    // `--optimizer-cpu-offload`. (`--fp8-param` is none at d98e8a64: arguments.py leaves the
    // TransformerConfig field out of its ArgumentGroupFactory, so Megatron-LM refuses it.)
    let r = eval_with("--optimizer adam");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stderr.contains("allow_abbrev"), "{}", r.stderr);
    // The whole names still read as before.
    let r = eval_with("--tensor-model-parallel-size 2");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("tp 2"), "{}", r.stdout);
}
