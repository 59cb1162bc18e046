//! Leftovers, round 24: messages that named the wrong rule or the wrong flag, and a wording that
//! read as a contradiction. A plan file's `vpp: 99999999999` was told to "give a parallel degree
//! that divides the GPUs" (vpp cuts a stage's layers into chunks; its bound is the layers per
//! stage); `eval --pp 1 --decoder-first-pipeline-num-layers N` was told of
//! `--pipeline-model-parallel-size`, a flag not typed; `"mlp_only_layers": [48, 100]` on a
//! 48-layer config was called an unsupported shape rather than an index out of range; a launch
//! line with `--deepspeed --zero-stage 1` was told `--zero-stage` is Megatron-DeepSpeed's, as if
//! the line had not said `--deepspeed`; `compare`, `sweep` and `accuracy`'s `--format` help did
//! not say what the JSON holds or where its units are. Every error case checks exit 2, one line
//! and the words naming the value, the rule and the fix.

mod common;

use common::*;

const SUITE: &str = "leftovers24";

#[test]
fn a_vpp_past_its_type_names_the_layers_per_stage_rule_and_a_vpp_that_works() {
    let seed = std::fs::read_to_string(format!("{ROOT}/plans/seed-512b-32nodes.yaml")).unwrap();
    assert!(
        seed.contains("  vpp: 1\n"),
        "the seed plan's vpp line moved"
    );
    let path = scratch(SUITE, "vpp").join("plan.yaml");
    std::fs::write(&path, seed.replace("  vpp: 1\n", "  vpp: 99999999999\n")).unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    // 512B derives 112 layers (the model line eval prints for this file), over pp 16: 7 a stage.
    assert_one_line_error(
        &r,
        &[
            "vpp: 99999999999",
            "at most the layers per stage",
            "this file's 112 layers over pp 16 are 7 per stage",
            "give vpp: 7 or fewer",
        ],
        &["divides the GPUs"],
        "vpp past u32",
    );
    // The fix it offers runs.
    std::fs::write(&path, seed.replace("  vpp: 1\n", "  vpp: 7\n")).unwrap();
    let ok = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

#[test]
fn split_flags_with_pp_1_on_the_command_line_name_pp() {
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--pp",
        "1",
        "--decoder-first-pipeline-num-layers",
        "3",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--decoder-first-pipeline-num-layers splits the layers",
            "--pp 1 is a single stage",
            "give --pp 2 or more",
            "drop it",
        ],
        &["pipeline split arguments"],
        "split flags with --pp 1",
    );
}

#[test]
fn mlp_only_layers_past_the_stack_is_out_of_range() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/qwen3-30b-a3b.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(config["num_hidden_layers"], 48);
    config["mlp_only_layers"] = serde_json::json!([48, 100]);
    let path = scratch(SUITE, "mlp-only").join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let r = run(&[
        "eval",
        "--hf-config",
        path.to_str().unwrap(),
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "indices 48, 100 are out of range",
            "the model has 48 layers",
            "numbered 0 to 47",
            "give indices below 48",
        ],
        &["describe the shape with flags"],
        "mlp_only_layers out of range",
    );
}

#[test]
fn a_deepspeed_line_is_told_the_flag_it_lacks_and_why() {
    let line = "--deepspeed --zero-stage 1 --pipeline-model-parallel-size 2 --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --global-batch-size 64 --micro-batch-size 1 --bf16";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_one_line_error(
        &r,
        &[
            "the line has --deepspeed and --zero-stage 1",
            "a --deepspeed line needs --framework deepspeed on the command line, because",
            "add --framework deepspeed",
        ],
        &["Megatron-LM has no such flag"],
        "--deepspeed line without --framework",
    );
    let ok = run(&[
        "eval",
        "--nodes",
        "1",
        "--framework",
        "deepspeed",
        "--megatron-args",
        line,
    ]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

#[test]
fn format_help_says_what_the_json_holds_and_its_units() {
    for (command, words) in [
        ("compare", &["`terms`", "`unit`", "`verdict`"][..]),
        (
            "sweep",
            &["one row per axis point", "`time.step_s`", "seconds"][..],
        ),
        (
            "accuracy",
            &["`error_of`", "`predicted_step_s`", "seconds"][..],
        ),
    ] {
        let r = run(&[command, "--help"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let help = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        let at = help.find("--format").expect("a --format flag");
        let format_help = &help[at..];
        for w in words {
            assert!(
                format_help.contains(w),
                "{command} --help lacks {w}: {format_help}"
            );
        }
    }
}

#[test]
fn the_model_line_says_not_given_of_the_length_only() {
    let r = run(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "8",
    ]);
    // The model line comes first whether or not the plan fits.
    let line = r.stdout.lines().find(|l| l.starts_with("model ")).unwrap();
    assert!(line.contains("--seq-len not given"), "{line}");
    assert!(line.contains("shape used as stated"), "{line}");
    assert!(!line.contains("as given"), "{line}");
}

/// The host memory a plan's offloaded activations take: `compare` shows it as `eval` prints it.
#[test]
fn compare_shows_the_host_memory_eval_prints_for_offloaded_activations() {
    let scenario = [
        "--model",
        "llama3-70b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
        "--cpu-offload-layers",
        "40",
    ];
    let compare = json(&[&["compare", "--format", "json"][..], &scenario[..]].concat());
    let row = compare["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["group"] == "host memory per GPU" && t["name"] == "offloaded")
        .unwrap_or_else(|| panic!("no offloaded row: {}", compare["terms"]));
    assert_eq!(row["unit"], "GiB");
    // Plan A as eval takes it, from the JSON's own fields.
    let a = &compare["a"];
    let field = |k: &str| a[k].to_string();
    let (tp, cp, pp, dp, mb, zero) = (
        field("tp"),
        field("cp"),
        field("pp"),
        field("dp"),
        field("micro_batch"),
        field("zero"),
    );
    let mut args = vec![
        "eval",
        "--tp",
        &tp,
        "--cp",
        &cp,
        "--pp",
        &pp,
        "--dp",
        &dp,
        "--micro-batch",
        &mb,
        "--zero",
        &zero,
        "--recompute",
        "none",
    ];
    if a["sequence_parallel"] == true {
        args.push("--sequence-parallel");
    }
    args.extend(scenario);
    let r = run(&args);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("offloaded "))
        .unwrap_or_else(|| panic!("eval prints no offloaded line: {}{}", r.stdout, r.stderr));
    let eval_gib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(eval_gib > 0.0, "{line}");
    assert_eq!(
        format!("{:.1}", row["a"].as_f64().unwrap()),
        format!("{eval_gib:.1}"),
        "{line}"
    );
    // The table's row, in the same GiB to one decimal.
    let table = run(&[&["compare"][..], &scenario[..]].concat());
    let table_row = table
        .stdout
        .lines()
        .find(|l| l.contains("host memory per GPU") && l.contains("offloaded"))
        .unwrap_or_else(|| panic!("no offloaded row in the table: {}", table.stdout));
    assert!(table_row.contains(&format!("{eval_gib:.1}")), "{table_row}");
}
