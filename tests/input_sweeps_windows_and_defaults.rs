//! Defects of a third review, one regression test each: a sweep point with no valid plan that
//! aborted the whole sweep, a saved plan overwritten by the report written beside it, Hugging Face
//! `null`s and class defaults that differ from transformers', framework emits refused for a window
//! that changes nothing, and negative or NaN numbers misreported by the argument parser. Errors are
//! checked for their exit code and their one line; results for the numbers they carry.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

// ---- 1. a sweep point with no valid plan ----------------------------------------------------

const SWEEP_20_NODES: &[&str] = &[
    "sweep",
    "--params",
    "175B",
    "--axis",
    "nodes",
    "--values",
    "16,20,32",
    "--global-batch",
    "1536",
];

#[test]
fn a_point_without_a_valid_plan_is_a_row_that_says_why() {
    let with = |format: &str| {
        let mut args = SWEEP_20_NODES.to_vec();
        args.extend(["--format", format]);
        run(&args)
    };
    // JSON: the other points keep their plans; the invalid one carries the reason.
    let r = with("json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sweep: Value = serde_json::from_str(&r.stdout).unwrap();
    let rows = sweep["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["tp"], 8);
    assert!(rows[0]["no_valid_plan"].is_null());
    assert!(rows[1]["tp"].is_null());
    let why = rows[1]["no_valid_plan"].as_str().unwrap();
    assert!(why.contains("160 GPUs cannot be split"), "{why}");
    assert!(rows[2]["tp"].is_u64());
    // CSV: the reason in the last column, quoted.
    let r = with("csv");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].ends_with(",cost_to_train,no_valid_plan"),
        "{}",
        lines[0]
    );
    assert!(lines[1].ends_with(",,"), "{}", lines[1]);
    assert!(lines[2].starts_with("nodes,20,160,"), "{}", lines[2]);
    assert!(lines[2].ends_with("or the model\""), "{}", lines[2]);
    // Table: a row, with the reason under it.
    let r = with("table");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("no valid plan (see below)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("--axis nodes at 20: no valid plan exists: 160 GPUs"),
        "{}",
        r.stdout
    );
    // The chart skips the point, and is still written.
    let dir = scratch("review3", "chart");
    let mut args = SWEEP_20_NODES.to_vec();
    args.extend(["--chart", "s.svg"]);
    let r = run_in(&dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(dir.join("s.svg").is_file());
    let _ = std::fs::remove_dir_all(dir);
    // Every point invalid: bad input, as before.
    let r = run(&[
        "sweep",
        "--params",
        "175B",
        "--axis",
        "nodes",
        "--values",
        "20,40",
        "--global-batch",
        "1536",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--axis nodes at 20",
            "no valid plan exists",
            "--global-batch",
        ],
        &[],
        "every point invalid",
    );
}

// ---- 2. a saved plan and the report beside it ---------------------------------------------

#[test]
fn a_saved_plan_the_report_would_overwrite_is_refused() {
    let dir = scratch("review3", "save-report");
    std::fs::create_dir(dir.join("rep3")).unwrap();
    let plan = |save: &str, report: &str| {
        run_in(
            &dir,
            &[
                "plan", "--params", "7B", "--nodes", "1", "--save", save, "--report", report,
            ],
        )
    };
    for (save, report) in [
        ("rep3/report.json", "rep3"),
        ("./rep3/../rep3/index.html", "rep3/"),
    ] {
        // The report writes no YAML, so a plan file named as one of its files is refused for
        // its extension first (`--save out.json` would hold YAML), before the overlap is checked.
        let r = plan(save, report);
        assert_one_line_error(
            &r,
            &[&format!("--save {save}"), "YAML plan file", "name it .yaml"],
            &[],
            save,
        );
    }
    // Refused before any work: nothing was written.
    assert_eq!(std::fs::read_dir(dir.join("rep3")).unwrap().count(), 0);
    // A name the report does not write is fine, beside the report's files.
    let r = plan("rep3/plan.yaml", "rep3");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(dir.join("rep3/plan.yaml")).unwrap();
    assert!(saved.contains("tp:"), "{saved}");
    assert!(dir.join("rep3/report.json").is_file());
    let _ = std::fs::remove_dir_all(dir);
}

// ---- 3. Hugging Face nulls and class defaults, as transformers reads them -------------------

#[test]
fn gpt_oss_null_head_dim_is_hidden_over_heads() {
    let dir = scratch("review3", "oss-head-dim");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("models/hf/gpt-oss-20b.json")).unwrap(),
    )
    .unwrap();
    // GptOssConfig: head_dim None -> hidden_size // num_attention_heads (2880 // 64 = 45).
    config["head_dim"] = Value::Null;
    let model = hf_model(&eval_hf(&dir, "c.json", &config.to_string()));
    assert_eq!(model["head_dim"], 2880 / 64);
    // Absent: the class default, 64.
    config.as_object_mut().unwrap().remove("head_dim");
    assert_eq!(
        hf_model(&eval_hf(&dir, "c.json", &config.to_string()))["head_dim"],
        64
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn qwen_moe_null_key_value_heads_is_refused() {
    let dir = scratch("review3", "qwen-moe-kv");
    // Qwen2MoeConfig / Qwen3MoeConfig have no None -> num_attention_heads rule.
    for (model_type, default) in [("qwen2_moe", "16"), ("qwen3_moe", "4")] {
        let r = eval_hf(
            &dir,
            "c.json",
            &format!(
                r#"{{"model_type": "{model_type}", {HF_SHAPE}, "num_key_value_heads": null}}"#
            ),
        );
        assert_one_line_error(
            &r,
            &[
                "\"num_key_value_heads\"",
                "null",
                default,
                "write the number",
            ],
            &[],
            model_type,
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn qwen3_defaults_are_qwen3configs() {
    let dir = scratch("review3", "qwen3-defaults");
    // Qwen3Config(num_key_value_heads=32, head_dim=128, tie_word_embeddings=False).
    let model = hf_model(&eval_hf(
        &dir,
        "c.json",
        &format!(r#"{{"model_type": "qwen3", {HF_SHAPE}}}"#),
    ));
    assert_eq!(model["kv_heads"], 32);
    assert_eq!(model["head_dim"], 128);
    assert_eq!(model["tied_embeddings"], false);
    let _ = std::fs::remove_dir_all(dir);
}

// ---- 4. a window that changes nothing does not stop --emit nemo / deepspeed ----------------

#[test]
fn a_window_without_effect_does_not_refuse_the_emit() {
    let plan = |emit: &str, seq_len: &str| {
        // As --emit deepspeed plans without --framework (given, so that no note precedes the error).
        let framework = if emit == "deepspeed" {
            "deepspeed"
        } else {
            "megatron-core"
        };
        run(&[
            "plan",
            "--framework",
            framework,
            "--model",
            "llama3-8b",
            "--attention-window",
            "4096",
            "--seq-len",
            seq_len,
            "--nodes",
            "8",
            "--global-batch",
            "256",
            "--emit",
            emit,
        ])
    };
    for emit in ["nemo", "deepspeed"] {
        // 4096 tokens at sequence length 4096: full attention, noted and emitted.
        let r = plan(emit, "4096");
        assert_eq!(r.code, 0, "{emit}: {}", r.stderr);
        assert!(
            r.stderr.contains("the same as full attention"),
            "{}",
            r.stderr
        );
        assert!(!r.stdout.is_empty());
        // A window that matters is still refused, naming it.
        let r = plan(emit, "8192");
        assert_one_line_error(
            &r,
            &[
                "sliding-window attention (--attention-window 4096)",
                "--emit megatron",
            ],
            &[],
            emit,
        );
    }
}

// ---- 5. negative and non-finite numbers reach the range checks ----------------------------

#[test]
fn a_negative_price_or_nan_tokens_names_the_flag_and_the_rule() {
    let sweep = |extra: &[&str]| {
        let mut args = vec![
            "sweep", "--params", "7B", "--axis", "nodes", "--values", "1,2",
        ];
        args.extend(extra);
        run(&args)
    };
    let r = sweep(&["--tokens", "1T", "--price-per-gpu-hour", "-1"]);
    assert_one_line_error(
        &r,
        &[
            "--price-per-gpu-hour -1",
            "positive",
            "--price-per-gpu-hour 2.5",
        ],
        &["unexpected argument"],
        "negative price",
    );
    for tokens in ["nan", "inf", "-inf"] {
        let r = sweep(&["--tokens", tokens]);
        assert_one_line_error(
            &r,
            &[
                &format!("--tokens {tokens} is"),
                "not a finite number",
                "512B",
            ],
            &["suffix", "unexpected argument"],
            tokens,
        );
    }
    let r = run(&["plan", "--params", "7B", "--nodes", "1", "--tokens", "-5"]);
    assert_one_line_error(
        &r,
        &["--tokens -5 must be greater than zero"],
        &["unexpected argument"],
        "negative tokens",
    );
}
