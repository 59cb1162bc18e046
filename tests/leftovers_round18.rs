//! Leftovers of the eighteenth session's hostile round (reported, in files the round did not
//! edit): refusals that named no flag the user typed or values the user never gave, fixes left
//! out, a uneven split described as another, a help example that did not run, and a sweep's CSV
//! and JSON carrying different settings.

mod common;

use common::*;

/// The Megatron-LM line `--emit megatron` writes for Nemotron 3 Nano on two nodes at ep 8.
fn nano_line() -> String {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--ep",
        "8",
        "--emit",
        "megatron",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(line.contains("--mamba-num-heads 64"), "{line}");
    line
}

fn eval_line(line: &str) -> Run {
    run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--megatron-args",
        line,
    ])
}

#[test]
fn a_window_on_a_hybrid_stack_is_named_as_given() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--attention-window",
        "128",
        "--ep",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "hybrid Mamba-Transformer stack with a sliding attention window",
            "--attention-window 128",
            "drop --attention-window",
        ],
        &["drop it"],
        "--attention-window on a hybrid stack",
    );
    // A model file names its key.
    let dir = scratch("leftovers18", "window-file");
    let file = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml")).unwrap();
    std::fs::write(
        dir.join("windowed.yaml"),
        format!("{file}attention_window:\n  tokens: 128\n"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "windowed.yaml",
            "--nodes",
            "1",
            "--gpu",
            "h100-sxm-80g",
        ],
    );
    assert_one_line_error(
        &r,
        &["attention_window.tokens: 128", "drop attention_window"],
        &["--attention-window"],
        "a model file's window on a hybrid stack",
    );
    // A launch line names its --window-size.
    let line = nano_line().replace(
        "--hidden-size 2688",
        "--hidden-size 2688 --window-size \"(127,0)\"",
    );
    assert_one_line_error(
        &eval_line(&line),
        &["--window-size \"(127,0)\"", "drop --window-size"],
        &["--attention-window"],
        "--window-size on a hybrid launch line",
    );
}
