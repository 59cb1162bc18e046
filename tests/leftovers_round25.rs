//! Leftovers of the twenty-fifth round: Muon on a launch line priced under DeepSpeed or the 2021
//! Megatron-LM refused in the line's words, a config.json's `NaN` in a list named by its element,
//! counts of one said in the singular, and the two JSON stage flags told apart in the README.

mod common;

use common::*;

const SUITE: &str = "leftovers25";

const LINE: &str = "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 1 --bf16";

/// `--optimizer muon` on a launch line with `--framework deepspeed` (or megatron-lm-2021) beside
/// it was refused as "--optimizer-states muon is not how --framework deepspeed stores its
/// optimizer", a tpsim flag the user never typed. The line's own flag is named now, with the rule
/// (Muon is priced for Megatron-Core only) and the fixes.
#[test]
fn muon_on_a_launch_line_under_deepspeed_names_the_lines_optimizer() {
    for (optimizer, framework) in [
        ("muon", "deepspeed"),
        ("dist_muon", "deepspeed"),
        ("muon", "megatron-lm-2021"),
    ] {
        let line = format!("{LINE} --optimizer {optimizer}");
        assert_one_line_error(
            &run(&[
                "eval",
                "--framework",
                framework,
                "--megatron-args",
                &line,
                "--nodes",
                "1",
            ]),
            &[
                &format!("the line's --optimizer {optimizer} under --framework {framework}"),
                "Muon for Megatron-Core only",
                &format!("drop --framework {framework}"),
                "--optimizer adam on the line",
            ],
            &["--optimizer-states"],
            &format!("--optimizer {optimizer} under --framework {framework}"),
        );
    }
    // The same line without --framework is Megatron-Core's, and priced.
    let v = json(&[
        "eval",
        "--megatron-args",
        &format!("{LINE} --optimizer muon"),
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(
        v["training"]["optimizer_states"].as_str(),
        Some("muon"),
        "{}",
        v["training"]
    );
}

/// A non-finite number inside a list was refused naming the list's key only; the element is
/// named now as Python indexes it, in a list of lists and in an object inside a list too.
#[test]
fn a_non_finite_number_in_a_list_names_its_element() {
    let dir = scratch(SUITE, "non-finite-list");
    for (extra, element) in [
        ("\"mlp_only_layers\": [1, NaN]", "mlp_only_layers[1]"),
        (
            "\"pairs\": [[0, 1], [2, \"a,b\", -Infinity]]",
            "pairs[1][2]",
        ),
        ("\"groups\": [{\"a\": 1}, {\"b\": Infinity}]", "groups[1].b"),
    ] {
        let config = format!("{{\"model_type\": \"llama\", {HF_SHAPE}, {extra}}}");
        assert_one_line_error(
            &eval_hf(&dir, "config.json", &config),
            &[&format!("key \"{element}\" is "), "not a finite number"],
            &[],
            extra,
        );
    }
}

/// `--tokens 1` printed "train: 1 tokens in 1 step of ..." under `plan` and `sweep`, and a
/// two-layer model on two stages "first stage 1 layers, last stage 1 layers": one is singular now.
#[test]
fn counts_of_one_read_in_the_singular() {
    let plan = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--global-batch",
        "1",
        "--seq-len",
        "1024",
        "--tokens",
        "1",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout.contains("train: 1 token in 1 step of "),
        "{}",
        plan.stdout
    );
    let sweep = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--seq-len",
        "1024",
        "--axis",
        "global-batch",
        "--values",
        "8,16",
        "--tokens",
        "1",
    ]);
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    assert!(
        sweep.stdout.contains("train: 1 token in "),
        "{}",
        sweep.stdout
    );
    let eval = run(&[
        "eval",
        "--layers",
        "2",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--global-batch",
        "1",
        "--seq-len",
        "1024",
        "--pp",
        "2",
    ]);
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    assert!(
        eval.stdout
            .contains("(first stage 1 layer, last stage 1 layer plus the output layer)"),
        "{}",
        eval.stdout
    );
    for r in [&plan, &sweep, &eval] {
        assert!(
            !r.stdout.contains(" 1 tokens") && !r.stdout.contains(" 1 layers"),
            "{}",
            r.stdout
        );
    }
}

/// `stages.even` (the layer split) and `schedule.equal_stages` (the stages' time per micro-batch)
/// are two quantities that disagree on an even split, whose last stage adds the output layer; the
/// README's JSON section did not name either. It names both now, and says how they differ.
#[test]
fn the_two_stage_flags_are_told_apart_in_the_readme() {
    let v = json(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "2",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    let plan = &v["plans"][0];
    assert_eq!(plan["stages"]["even"].as_bool(), Some(true), "{plan}");
    assert_eq!(
        plan["schedule"]["equal_stages"].as_bool(),
        Some(false),
        "{plan}"
    );
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let row = |key: &str| {
        readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}` |")))
            .unwrap_or_else(|| panic!("the README's JSON table has no row for {key}"))
            .to_string()
    };
    assert!(
        row("stages.even").contains("layer"),
        "{}",
        row("stages.even")
    );
    let equal = row("schedule.equal_stages");
    assert!(
        equal.contains("time per micro-batch") && equal.contains("`stages.even`"),
        "{equal}"
    );
}
