//! Per-tensor FP8's scaling recipe (`--fp8-scaling`): what it changes in time, how the launch
//! configurations write it and read it back, and what is refused.

mod common;

use common::{assert_one_line_error, json, run};

const EVAL: &[&str] = &[
    "eval",
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "1",
    "--tp",
    "2",
    "--pp",
    "1",
    "--micro-batch",
    "1",
    "--sequence-parallel",
    "--precision",
    "fp8",
    "--recompute",
    "selective",
    "--zero",
    "1",
    "--global-batch",
    "64",
];

fn with(extra: &[&str]) -> Vec<&'static str> {
    let mut args: Vec<&'static str> = EVAL.to_vec();
    for e in extra {
        args.push(Box::leak(e.to_string().into_boxed_str()));
    }
    args
}

/// The Megatron-LM line `--emit megatron` writes for the plan with `extra` flags.
fn emitted_line(extra: &[&str]) -> String {
    let mut args = extra.to_vec();
    args.extend(["--emit", "megatron"]);
    let r = run(&with(&args));
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.contains("--fp8-recipe"))
        .unwrap()
        .to_string()
}

/// `eval --megatron-args LINE` on one H100 node, with `extra` flags.
fn eval_line(line: &str, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--megatron-args",
        line,
    ];
    args.extend(extra);
    run(&args)
}

fn step_s(extra: &[&str]) -> (f64, String) {
    let mut args = with(extra);
    args.extend(["--format", "json"]);
    let v = json(&args);
    (
        v["plans"][0]["time"]["step_s"].as_f64().unwrap(),
        v["training"]["fp8_scaling"].as_str().unwrap().to_string(),
    )
}

#[test]
fn delayed_scaling_casts_inside_the_norm_and_skips_the_amax_pass() {
    // Current scaling (the default) reads every input once more for its amax before the cast;
    // delayed scaling takes the scale from history and lets Transformer Engine's norm write the FP8
    // copy itself. Same plan, same GEMMs: delayed must be faster, bf16 slower than both.
    let (current, current_name) = step_s(&[]);
    let (delayed, delayed_name) = step_s(&["--fp8-scaling", "delayed"]);
    assert_eq!(current_name, "current");
    assert_eq!(delayed_name, "delayed");
    assert!(delayed < current, "delayed {delayed} vs current {current}");
    // A few percent of the step, not a different GEMM rate.
    assert!(current / delayed < 1.10, "{current} vs {delayed}");
    let mut bf16 = with(&[]);
    let at = bf16.iter().position(|a| *a == "fp8").unwrap();
    bf16[at] = "bf16";
    bf16.extend(["--format", "json"]);
    let bf16_s = json(&bf16)["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert!(bf16_s > current, "bf16 {bf16_s} vs fp8 {current}");
}

#[test]
fn the_megatron_line_writes_the_recipe_and_reads_it_back() {
    let scaling_of = |line: &str| {
        let r = eval_line(line, &["--format", "json"]);
        assert_eq!(r.code, 0, "{line}: {}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        v["training"]["fp8_scaling"].as_str().unwrap().to_string()
    };
    for (scaling, recipe) in [("delayed", "delayed"), ("current", "tensorwise")] {
        let line = emitted_line(&["--fp8-scaling", scaling]);
        assert!(
            line.contains(&format!("--fp8-recipe {recipe}")),
            "{scaling}: {line}"
        );
        // The written line, read back, evaluates with the same scaling.
        assert_eq!(scaling_of(&line), scaling, "{line}");
    }
    // Megatron-LM's default recipe is delayed: a line with --fp8-format alone reads so.
    let line = emitted_line(&[]).replace("--fp8-recipe tensorwise", "");
    assert_eq!(scaling_of(&line), "delayed");
}

#[test]
fn a_saved_plan_keeps_its_scaling() {
    let dir = common::scratch("fp8-scaling", "save");
    let path = dir.join("plan.yaml");
    let path = path.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--precision",
        "fp8",
        "--fp8-scaling",
        "delayed",
        "--global-batch",
        "64",
        "--save",
        path,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        std::fs::read_to_string(path)
            .unwrap()
            .contains("fp8_scaling: delayed")
    );
    let v = json(&["eval", "--plan", path, "--format", "json"]);
    assert_eq!(v["training"]["fp8_scaling"], "delayed");
    // The file in bf16 under a framework without that recipe: its recipe is unused, said so, and
    // the plan is evaluated. (A file that says precision: bf16 beside fp8_scaling: delayed, which
    // `plan --save` never writes, is refused: tests/leftovers_round19.rs.)
    let r = run(&[
        "eval",
        "--plan",
        path,
        "--framework",
        "torchtitan",
        "--precision",
        "bf16",
    ]);
    // Evaluated (exit 1 would say the plan does not fit under torchtitan's memory), not refused.
    assert_ne!(r.code, 2, "{}", r.stderr);
    assert!(r.stdout.contains("time per step"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("fp8_scaling: delayed changes nothing under --precision bf16"),
        "{}",
        r.stderr
    );
    // compare does not put an FP8 plan under one recipe against one under the other as if only
    // the plans differed; with --fp8-scaling both run under the one given.
    let current = dir.join("current.yaml");
    let current = current.to_str().unwrap();
    std::fs::write(
        current,
        std::fs::read_to_string(path)
            .unwrap()
            .replace("fp8_scaling: delayed", "fp8_scaling: current"),
    )
    .unwrap();
    let r = run(&["compare", "--plan", path, "--plan", current]);
    assert_one_line_error(
        &r,
        &["FP8 scaling: delayed against current", "--fp8-scaling"],
        &[],
        "compare recipes",
    );
    let r = run(&[
        "compare",
        "--plan",
        path,
        "--plan",
        current,
        "--fp8-scaling",
        "delayed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Naming the file's own framework keeps the file's recipe (it was once dropped for the
    // framework's default).
    let v = json(&[
        "eval",
        "--plan",
        path,
        "--framework",
        "megatron-core",
        "--format",
        "json",
    ]);
    assert_eq!(v["training"]["fp8_scaling"], "delayed");
}

#[test]
fn what_cannot_run_a_recipe_is_refused_and_nemo_plans_as_it_runs() {
    // torchao has no delayed scaling left.
    let r = run(&with(&[
        "--framework",
        "torchtitan",
        "--fp8-scaling",
        "delayed",
    ]));
    assert_one_line_error(
        &r,
        &[
            "--fp8-scaling delayed",
            "torchtitan",
            "--fp8-scaling current",
        ],
        &[],
        "torchtitan delayed",
    );
    // A recipe for a run that is not per-tensor FP8 would change nothing.
    let mut bf16 = with(&["--fp8-scaling", "delayed"]);
    let at = bf16.iter().position(|a| *a == "fp8").unwrap();
    bf16[at] = "bf16";
    assert_one_line_error(
        &run(&bf16),
        &["--fp8-scaling delayed", "bf16", "--precision fp8"],
        &[],
        "bf16 with a scaling",
    );
    // The same for compare and sweep.
    let r = run(&[
        "compare",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--fp8-scaling",
        "delayed",
    ]);
    assert_one_line_error(&r, &["--fp8-scaling delayed", "bf16"], &[], "compare");
    let r = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "64",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--fp8-scaling",
        "delayed",
    ]);
    assert_one_line_error(&r, &["--fp8-scaling delayed", "bf16"], &[], "sweep");
    // Pasted Megatron-LM precision flags cannot bring delayed scaling to torchtitan either.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--pp",
        "1",
        "--sequence-parallel",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--fp8-format",
        "hybrid",
        "--framework",
        "torchtitan",
    ]);
    assert_one_line_error(
        &r,
        &["--fp8-recipe", "torchtitan", "tensorwise"],
        &[],
        "pasted delayed",
    );
    // Megatron-LM's recipe flag beside tpsim's --precision would be silently dropped.
    let r = run(&with(&["--fp8-recipe", "delayed"]));
    assert_one_line_error(
        &r,
        &["--fp8-recipe delayed", "--fp8-scaling"],
        &[],
        "fp8-recipe beside --precision",
    );
    // A launch line and a flag that disagree.
    let r = eval_line(&emitted_line(&[]), &["--fp8-scaling", "delayed"]);
    assert_one_line_error(
        &r,
        &["--fp8-scaling delayed", "tensorwise"],
        &[],
        "line vs flag",
    );
    // NeMo 1.x's FP8 is delayed scaling: --emit nemo plans so, and says it; asked for current
    // scaling it refuses.
    let r = run(&with(&["--emit", "nemo"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("delayed scaling"), "{}", r.stderr);
    let r = run(&with(&["--emit", "nemo", "--fp8-scaling", "current"]));
    assert_one_line_error(
        &r,
        &["current scaling", "--fp8-scaling delayed"],
        &[],
        "nemo current",
    );
}
