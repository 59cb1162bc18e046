//! Hostile input and new-user reading, round 17: what round 16 left, and what probing every
//! command again found. Every error case checks exit 2, one line on stderr (no note before it, no
//! panic, no backtrace) and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// A 7B model on one node, with the plan flags `extra` after it.
fn eval_7b(extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ];
    args.extend(extra);
    run(&args)
}

/// `eval --recompute-method uniform --recompute-num-layers 1` without `--recompute` said only
/// "note: --recompute-method uniform is ignored" and evaluated "recompute none": the typed count
/// vanished, where `--help` says `--recompute-num-layers` implies full recompute, and
/// `--recompute-method block --recompute-num-layers 2` is refused. Both methods now refuse a count
/// without full recompute, naming both flags; the fix drops both (dropping the count alone left a
/// method refused the same way), and `--help` says a method makes the count imply nothing.
#[test]
fn a_recompute_count_beside_a_method_is_never_dropped() {
    let r = eval_7b(&[
        "--tp",
        "8",
        "--recompute-method",
        "uniform",
        "--recompute-num-layers",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--recompute-method uniform --recompute-num-layers 1",
            "recompute is none",
            "add --recompute full",
            "drop --recompute-num-layers and --recompute-method",
        ],
        &["note:"],
        "eval --recompute-method uniform --recompute-num-layers 1",
    );
    // Selective is no home for a count either.
    let r = eval_7b(&[
        "--tp",
        "8",
        "--recompute-method",
        "uniform",
        "--recompute-num-layers",
        "1",
        "--recompute",
        "selective",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // The block method's fix drops both flags too.
    let r = eval_7b(&[
        "--tp",
        "8",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--recompute-method block --recompute-num-layers 2",
            "drop --recompute-num-layers and --recompute-method",
        ],
        &[],
        "eval --recompute-method block --recompute-num-layers 2",
    );
    // With --recompute full the pair is evaluated as full recompute.
    let r = eval_7b(&[
        "--tp",
        "8",
        "--recompute-method",
        "uniform",
        "--recompute-num-layers",
        "1",
        "--recompute",
        "full",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("recompute full"), "{}", r.stdout);
    // The count alone still implies full recompute, as --help says; and --help says when not.
    let r = eval_7b(&["--tp", "8", "--recompute-num-layers", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("recompute full 2/34"), "{}", r.stdout);
    let help = run(&["eval", "--help"]).stdout.replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("implies --recompute full. With Megatron-LM's --recompute-method"),
        "{help}"
    );
    assert!(
        help.contains("it implies nothing, as in Megatron-LM: give --recompute full too"),
        "{help}"
    );
}

/// A plan file's `fp8_param_gather: true` on a bf16 plan was read and ignored, where the pasted
/// `--fp8-param-gather` without `--fp8-format` is refused; and `--fp8-param-gather` beside
/// `--precision` was dropped without a word (under torchtitan the JSON said
/// `"fp8_param_gather": false`). Both are now refused, in the words of where they came from;
/// the file's key on an FP8 plan still works.
#[test]
fn an_fp8_param_gather_with_nothing_to_gather_is_refused() {
    let dir = scratch("hostile17", "fp8-param-gather");
    let bundled = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    std::fs::write(
        dir.join("bf16.yaml"),
        format!("{bundled}fp8_param_gather: true\n"),
    )
    .unwrap();
    let fp8 = bundled.replace("  precision: bf16\n", "  precision: fp8\n");
    assert_ne!(fp8, bundled);
    std::fs::write(
        dir.join("fp8.yaml"),
        format!("{fp8}fp8_param_gather: true\n"),
    )
    .unwrap();

    let r = run_in(&dir, &["eval", "--plan", "bf16.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "fp8_param_gather: true in bf16.yaml",
            "the file's precision is bf16",
            "set precision: fp8",
            "delete the fp8_param_gather line",
        ],
        &[],
        "eval --plan bf16.yaml",
    );
    // compare reads plan files the same way.
    let r = run_in(
        &dir,
        &["compare", "--plan", "bf16.yaml", "--plan", "fp8.yaml"],
    );
    assert_one_line_error(
        &r,
        &["fp8_param_gather: true in bf16.yaml", "precision is bf16"],
        &[],
        "compare --plan bf16.yaml",
    );
    // --precision bf16 over an FP8 file leaves the gather nothing to gather.
    let r = run_in(&dir, &["eval", "--plan", "fp8.yaml", "--precision", "bf16"]);
    assert_one_line_error(
        &r,
        &[
            "fp8_param_gather: true in fp8.yaml",
            "--precision bf16",
            "delete the file's fp8_param_gather line",
        ],
        &[],
        "eval --plan fp8.yaml --precision bf16",
    );
    // On FP8, or with --precision fp8 over the bf16 file, the key applies.
    for args in [
        vec!["eval", "--plan", "fp8.yaml"],
        vec!["eval", "--plan", "bf16.yaml", "--precision", "fp8"],
    ] {
        let r = run_in(&dir, &args);
        assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
    }
    // The Megatron-LM flag beside --precision.
    for precision in ["bf16", "fp8"] {
        let r = eval_7b(&[
            "--tp",
            "8",
            "--precision",
            precision,
            "--fp8-param-gather",
            "--framework",
            "torchtitan",
        ]);
        assert_one_line_error(
            &r,
            &[
                "--fp8-param-gather is Megatron-LM's",
                "beside --precision",
                "drop --fp8-param-gather",
            ],
            &[],
            "eval --precision --fp8-param-gather",
        );
    }
}

/// Headers said "1 heads", "1 KV heads" and "1 x 1 micro-batches = 1 sequences"; `compare`'s
/// scenario difference said "1 heads" too.
#[test]
fn one_of_a_thing_is_said_in_the_singular() {
    let r = run(&[
        "eval",
        "--layers",
        "2",
        "--hidden",
        "64",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("2 heads, 1 KV head, ffn"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("micro-batch 1 x 1 micro-batch = 1 sequence, sequence parallel"),
        "{}",
        r.stdout
    );
    let r = run(&[
        "eval",
        "--layers",
        "2",
        "--hidden",
        "64",
        "--heads",
        "1",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "2",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("hidden 64, 1 head, ffn"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("micro-batch 1 x 2 micro-batches = 2 sequences"),
        "{}",
        r.stdout
    );
}

/// `eval` with no plan said "pass --plan FILE, or --tp and --pp", though `--tp` alone (or `--pp`,
/// or `--dp`) is a plan, as `--help` says.
#[test]
fn no_plan_names_every_degree_that_makes_one() {
    let r = eval_7b(&[]);
    assert_one_line_error(
        &r,
        &[
            "no plan given",
            "at least one of --tp, --pp, --dp, --cp and --ep",
        ],
        &["--tp and --pp ("],
        "eval without a plan",
    );
    // What it says works, works.
    let r = eval_7b(&["--tp", "8"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // --cp alone is a plan too (it was answered "no plan given" and dropped).
    let r = eval_7b(&["--cp", "2"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("x cp 2 x"), "{}", r.stdout);
}

/// `sweep --axis global-batch --values 64,128` without `--nodes` said "--axis global-batch at 64:
/// --nodes is required", as if the first point were at fault; so were a missing model and an
/// unknown GPU. An input no point changes is now checked before the points and its error said
/// without one; an error of the point itself keeps it.
#[test]
fn a_sweep_error_names_a_point_only_when_the_point_is_at_fault() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--params",
                "7B",
                "--axis",
                "global-batch",
                "--values",
                "64,128",
            ],
            "--nodes is required",
        ),
        (
            &[
                "--params",
                "7B",
                "--axis",
                "gpu",
                "--values",
                "h100-sxm-80g,a100-sxm-80g",
            ],
            "--nodes is required",
        ),
        (&["--axis", "nodes", "--values", "1,2"], "no model given"),
        (
            &[
                "--params", "7B", "--axis", "nodes", "--values", "1,2", "--gpu", "nosuch",
            ],
            "unknown GPU \"nosuch\"",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["sweep"];
        args.extend(extra);
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[needle],
            &["--axis", "at 64:", "at h100-sxm-80g:", "at 1:"],
            &format!("{args:?}"),
        );
    }
    // A point at fault is still named.
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--axis",
        "gpu",
        "--values",
        "h100-sxm-80g,nosuch",
    ]);
    assert_one_line_error(
        &r,
        &["--axis gpu at nosuch", "unknown GPU"],
        &[],
        "sweep --axis gpu --values h100-sxm-80g,nosuch",
    );
}

/// `calibrate --heads 3 --tp 2` was refused with "e.g. --tp 1,2,4": a fix that lists 2 and 4,
/// neither of which divides 3 heads (so did `--tp 0` and `--tp 3,3`). The fixes now list the
/// degrees that split the model's heads and MLP.
#[test]
fn calibrates_tp_fixes_are_degrees_the_model_takes() {
    let dir = scratch("hostile17", "calibrate-tp-example");
    let base = [
        "calibrate",
        "--backend",
        "cpu",
        "--layers",
        "2",
        "--hidden",
        "96",
        "--heads",
        "3",
        "--output",
        "cal.yaml",
        "--tp",
    ];
    for (tp, needles) in [
        (
            "2",
            &[
                "--tp 2 must divide the 3 heads",
                "valid: 1, 3",
                "e.g. --tp 1,3",
            ][..],
        ),
        ("0", &["--tp 0 must be at least 1", "e.g. --tp 1,3"][..]),
        ("3,3", &["--tp 3,3 lists 3 twice", "e.g. --tp 1,3"][..]),
    ] {
        let mut args = base.to_vec();
        args.push(tp);
        let r = run_in(&dir, &args);
        assert_one_line_error(&r, needles, &["1,2,4"], &format!("calibrate --tp {tp}"));
    }
    assert!(!dir.join("cal.yaml").exists());
}

/// A pasted launch line that is refused printed the reader's notes before its error ("note: ...
/// neither --bf16 nor --fp16 ..." above "error: --global-batch-size 8 is not divisible ..."),
/// where every other refused input gets its one-line error alone. The notes are now held until
/// the line is known to be valid; a launcher value the reader could not take (`--nnodes
/// $NNODES`) is still said at once, since it explains the error that follows.
#[test]
fn a_refused_launch_line_gets_its_error_without_the_readers_notes() {
    let line = "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 32 --global-batch-size 8 --tensor-model-parallel-size 2 --num-layers 4";
    let refused = format!("{line} --micro-batch-size 3");
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &refused]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch-size 8 is not divisible",
            "valid micro-batches",
        ],
        &["note"],
        "a refused launch line",
    );
    // Accepted, the same notes are said.
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("neither --bf16 nor --fp16"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("given twice"), "{}", r.stderr);
    let r = run(&[
        "eval",
        "--megatron-args",
        "torchrun --nnodes $NNODES pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --bf16",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("--nnodes $NNODES") && r.stderr.contains("--nodes is required"),
        "{}",
        r.stderr
    );
}

/// `validate --tp 2` on a 3-head model said "choose a common divisor" without naming one, where
/// `calibrate` lists the degrees the model takes.
#[test]
fn validate_names_the_tensor_parallel_degrees_the_model_takes() {
    let r = run(&[
        "validate", "--layers", "2", "--hidden", "192", "--heads", "3", "--tp", "2",
    ]);
    assert_one_line_error(
        &r,
        &["--tp 2", "3 attention heads", "valid: 1, 3"],
        &[],
        "validate --tp 2",
    );
}

/// plan's "no valid plan" line said "tp dividing the 1 heads" for a one-head model.
#[test]
fn no_valid_plan_counts_one_head_in_the_singular() {
    let r = run(&[
        "plan",
        "--layers",
        "3",
        "--hidden",
        "64",
        "--heads",
        "1",
        "--nodes",
        "3",
        "--global-batch",
        "7",
    ]);
    assert_one_line_error(
        &r,
        &["tp dividing the 1 head and a node", "the 3 layers"],
        &["1 heads"],
        "one head",
    );
}
