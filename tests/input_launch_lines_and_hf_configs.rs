//! Input-handling defects of a second review, one regression test each: the MoE capacity factor
//! lost in emitted configurations and refused in launch lines, Hugging Face `null`s and absent keys
//! read with the wrong default, bad words in `--megatron-args` skipped or misread, messages that
//! gave the wrong hint, and sliding windows that change nothing shown without a note. Errors are
//! checked for their exit code and their one line; results for the numbers they carry.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

// ---- 1. the MoE capacity factor -------------------------------------------------------------

const MIXTRAL_PLAN: &[&str] = &[
    "--model",
    "mixtral-8x7b",
    "--nodes",
    "4",
    "--seq-len",
    "4096",
    "--global-batch",
    "256",
];

#[test]
fn the_capacity_factor_is_written_by_both_megatron_emitters() {
    let mut args = vec!["plan"];
    args.extend(MIXTRAL_PLAN);
    args.extend(["--moe-capacity-factor", "1.25", "--emit", "megatron"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("--moe-expert-capacity-factor 1.25 "),
        "{}",
        r.stdout
    );
    // Megatron-LM's defaults for the companions are what tpsim models: not written.
    assert!(!r.stdout.contains("--moe-pad-expert-input-to-capacity"));

    *args.last_mut().unwrap() = "megatron-bridge";
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("model.moe_expert_capacity_factor=1.25"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("model.moe_pad_expert_input_to_capacity=false")
    );

    // Without the flag: dropless, as before.
    let mut args = vec!["plan"];
    args.extend(MIXTRAL_PLAN);
    args.extend(["--emit", "megatron"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("capacity-factor"), "{}", r.stdout);
}

/// `--emit megatron` read back with `--megatron-args` (and pasted on `eval`) gives the same step:
/// the factor caps the imbalance the same way on both sides.
#[test]
fn the_capacity_factor_round_trips_through_megatron_arguments() {
    // No TP overlap: Megatron-LM runs it only with sequence parallelism, which this plan lacks.
    let plan_flags = [
        "--tp",
        "2",
        "--pp",
        "2",
        "--ep",
        "8",
        "--etp",
        "1",
        "--zero",
        "1",
        "--tp-comm-overlap",
        "false",
    ];
    let routing = ["--moe-imbalance", "2"];
    let mut original_args = vec!["eval", "--format", "json"];
    original_args.extend(MIXTRAL_PLAN);
    original_args.extend(plan_flags);
    original_args.extend(routing);
    original_args.extend(["--moe-capacity-factor", "1.25"]);
    let original = json(&original_args);
    assert_eq!(original["training"]["moe_imbalance"], 1.25);
    assert_eq!(original["training"]["moe_capacity_factor"], 1.25);

    let mut emit_args: Vec<&str> = original_args
        .iter()
        .filter(|a| !["--format", "json"].contains(a))
        .copied()
        .collect();
    emit_args.extend(["--emit", "megatron"]);
    let emitted = run(&emit_args);
    assert!(emitted.code == 0 || emitted.code == 1, "{}", emitted.stderr);
    let line = emitted.stdout.trim().to_string();
    assert!(line.contains("--moe-expert-capacity-factor 1.25"), "{line}");

    let mut via_args = vec!["eval", "--format", "json", "--nodes", "4"];
    via_args.extend(routing);
    via_args.extend(["--megatron-args", line.as_str()]);
    let mut pasted = vec!["eval", "--format", "json", "--nodes", "4"];
    pasted.extend(routing);
    pasted.extend(line.split_whitespace());
    for back_args in [via_args, pasted] {
        let back = json(&back_args);
        let (a, b) = (&original["plans"][0], &back["plans"][0]);
        for key in ["tp", "pp", "dp", "ep", "etp", "memory"] {
            assert_eq!(b[key], a[key], "{key} after the round trip of {line}");
        }
        assert_eq!(b["time"]["step_s"], a["time"]["step_s"], "{line}");
        assert_eq!(back["training"], original["training"], "{line}");
    }
}

#[test]
fn a_saved_plan_keeps_the_capacity_factor() {
    let dir = scratch("review2", "save");
    let mut args = vec!["plan"];
    args.extend(MIXTRAL_PLAN);
    args.extend(["--moe-capacity-factor", "1.5", "--save", "p.yaml"]);
    let r = run_in(&dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    assert!(text.contains("moe_capacity_factor: 1.5"), "{text}");
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--emit", "megatron"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("--moe-expert-capacity-factor 1.5 "),
        "{}",
        r.stdout
    );
    // A plan file written before the field reads as dropless.
    let old: String = text
        .lines()
        .filter(|l| !l.starts_with("moe_capacity_factor"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("old.yaml"), old).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "old.yaml", "--emit", "megatron"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stdout.contains("capacity-factor"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

const MOE_LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --global-batch-size 256 --tensor-model-parallel-size 1 --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --bf16 --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall";

fn eval_moe_line(extra: &str, flags: &[&str]) -> Run {
    let line = format!("{MOE_LINE} {extra}");
    let mut args = vec!["eval", "--nodes", "8", "--format", "json"];
    args.extend(flags);
    args.extend(["--megatron-args", line.as_str()]);
    run(&args)
}

#[test]
fn launch_lines_with_a_capacity_factor_are_read_as_the_cli_reads_it() {
    // Accepted (drop policy too: it picks the dropped tokens, not how many), and applied.
    let r = eval_moe_line(
        "--moe-expert-capacity-factor 1.25 --moe-token-drop-policy position",
        &["--moe-imbalance", "3"],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let back: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(back["training"]["moe_imbalance"], 1.25, "{}", r.stderr);
    assert_eq!(back["training"]["moe_capacity_factor"], 1.25);

    for (extra, needles) in [
        (
            "--moe-expert-capacity-factor abc",
            &["--moe-expert-capacity-factor", "\"abc\"", "not a number"][..],
        ),
        (
            "--moe-expert-capacity-factor nan",
            &["--moe-expert-capacity-factor", "not a number"][..],
        ),
        (
            "--moe-expert-capacity-factor 0.5",
            &["--moe-expert-capacity-factor 0.5", "between 1 and 64"][..],
        ),
        (
            "--moe-expert-capacity-factor 1.25 --moe-router-load-balancing-type sinkhorn",
            &["sinkhorn", "aux_loss"][..],
        ),
        // Current Megatron-LM takes one type per layer group (nargs='+') and checks each.
        (
            "--moe-expert-capacity-factor 1.25 --moe-router-load-balancing-type seq_aux_loss sinkhorn",
            &["sinkhorn", "aux_loss"][..],
        ),
        (
            "--moe-expert-capacity-factor 1.25 --moe-token-drop-policy random",
            &["--moe-token-drop-policy", "probs, position"][..],
        ),
        (
            "--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity",
            &["--moe-pad-expert-input-to-capacity", "not modelled"][..],
        ),
    ] {
        let r = eval_moe_line(extra, &[]);
        assert_one_line_error(&r, needles, &["dropless routing (every token"], extra);
    }
    // A negative factor is Megatron-Core's none (transformer_config.py): dropless, as without it.
    let r = eval_moe_line("--moe-expert-capacity-factor -1", &[]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let back: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(back["training"]["moe_imbalance"], 1.0, "{}", r.stderr);
    assert!(back["training"]["moe_capacity_factor"].is_null());
    // A different factor beside the line would win silently.
    let r = eval_moe_line(
        "--moe-expert-capacity-factor 1.25",
        &["--moe-capacity-factor", "2"],
    );
    assert_one_line_error(
        &r,
        &[
            "--moe-capacity-factor 2",
            "--moe-expert-capacity-factor 1.25",
        ],
        &[],
        "contradiction",
    );
    // A dense line with a factor.
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --global-batch-size 64 --bf16 --moe-expert-capacity-factor 1.25",
    ]);
    assert_one_line_error(
        &r,
        &["--moe-expert-capacity-factor without --num-experts"],
        &[],
        "dense",
    );
}

// ---- 2. Hugging Face defaults -----------------------------------------------------------------

#[test]
fn null_key_value_heads_mean_the_attention_heads_as_in_transformers() {
    let dir = scratch("review2", "kv");
    for model_type in ["mistral", "llama", "mixtral", "qwen2", "qwen3"] {
        let r = eval_hf(
            &dir,
            "c.json",
            &format!(
                r#"{{"model_type": "{model_type}", {HF_SHAPE}, "num_key_value_heads": null, "head_dim": 128}}"#
            ),
        );
        assert_eq!(hf_model(&r)["kv_heads"], 32, "{model_type}: {}", r.stderr);
    }
    // Absent: the class default (MistralConfig num_key_value_heads=8).
    let r = eval_hf(
        &dir,
        "c.json",
        &format!(r#"{{"model_type": "mistral", {HF_SHAPE}}}"#),
    );
    assert_eq!(hf_model(&r)["kv_heads"], 8);
    // GemmaConfig has no rule for None: refused, not guessed.
    let r = eval_hf(
        &dir,
        "g.json",
        &format!(r#"{{"model_type": "gemma", {HF_SHAPE}, "num_key_value_heads": null}}"#),
    );
    assert_one_line_error(&r, &["\"num_key_value_heads\"", "null"], &[], "gemma");
    // Neither has MixtralConfig for its experts.
    let r = eval_hf(
        &dir,
        "x.json",
        &format!(r#"{{"model_type": "mixtral", {HF_SHAPE}, "num_local_experts": null}}"#),
    );
    assert_one_line_error(&r, &["\"num_local_experts\"", "null", "8"], &[], "mixtral");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn absent_sliding_windows_take_the_transformers_class_default() {
    let dir = scratch("review2", "window");
    // GptOssConfig sliding_window=128 on every other layer, also without the key.
    let bundled: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("models/hf/gpt-oss-20b.json")).unwrap(),
    )
    .unwrap();
    let mut config = bundled.as_object().unwrap().clone();
    config.remove("sliding_window");
    let layers = config["num_hidden_layers"].as_u64().unwrap();
    let types: Vec<Value> = (0..layers)
        .map(|i| {
            Value::from(if i % 2 == 0 {
                "sliding_attention"
            } else {
                "full_attention"
            })
        })
        .collect();
    config.insert("layer_types".into(), Value::Array(types));
    let r = eval_hf(&dir, "oss.json", &Value::Object(config.clone()).to_string());
    let window = &hf_model(&r)["attention_window"];
    assert_eq!(window["tokens"], 128, "{}", r.stderr);
    assert_eq!(window["full_every"], 2);
    // null is no window, as the class reads None.
    config.insert("sliding_window".into(), Value::Null);
    let r = eval_hf(&dir, "oss.json", &Value::Object(config).to_string());
    assert!(hf_model(&r)["attention_window"].is_null());
    // MistralConfig sliding_window=4096; MixtralConfig None.
    let r = eval_hf(
        &dir,
        "m.json",
        &format!(r#"{{"model_type": "mistral", {HF_SHAPE}}}"#),
    );
    assert_eq!(hf_model(&r)["attention_window"]["tokens"], 4096);
    let r = eval_hf(
        &dir,
        "m.json",
        &format!(r#"{{"model_type": "mixtral", {HF_SHAPE}}}"#),
    );
    assert!(hf_model(&r)["attention_window"].is_null());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_huge_hf_width_is_called_too_large() {
    let dir = scratch("review2", "huge");
    let r = eval_hf(
        &dir,
        "c.json",
        r#"{"model_type": "llama", "hidden_size": 1099511627776, "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 32000}"#,
    );
    assert_one_line_error(
        &r,
        &[
            "\"hidden_size\"",
            "1099511627776",
            "too large",
            "4294967295",
        ],
        &["not a positive integer"],
        "huge",
    );
    let _ = std::fs::remove_dir_all(dir);
}

// ---- 3 and 4. words of a launch line ---------------------------------------------------------

const DENSE_LINE: &str = "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --global-batch-size 64 --bf16";

fn eval_dense_line(extra: &str) -> Run {
    let line = format!("{DENSE_LINE} {extra}");
    run(&["eval", "--nodes", "1", "--megatron-args", line.as_str()])
}

#[test]
fn dropout_values_that_are_not_probabilities_are_refused() {
    for value in ["abc", "nan", "inf", "1.5", "-0.1"] {
        let r = eval_dense_line(&format!("--hidden-dropout {value}"));
        assert_one_line_error(
            &r,
            &["--hidden-dropout", value, "between 0 and 1"],
            &[],
            value,
        );
    }
    let r = eval_dense_line("--attention-dropout x");
    assert_one_line_error(&r, &["--attention-dropout", "\"x\""], &[], "attention");
    // Real values still read: 0 turns dropout off.
    let r = eval_dense_line("--hidden-dropout 0 --attention-dropout 0.0");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.lines().next().unwrap().contains("no dropout"),
        "{}",
        r.stdout
    );
}

#[test]
fn stray_words_that_look_like_flags_are_refused() {
    for (extra, token) in [
        ("\u{2500}num-layers 3", "\u{2500}num-layers"),
        (
            "\u{2014}tensor-model-parallel-size 2",
            "\u{2014}tensor-model-parallel-size",
        ),
        ("--lr \u{2013}num-layers 3", "\u{2013}num-layers"),
        ("-num-layers 3", "-num-layers"),
        ("tensor-model-parallel-size 2", "tensor-model-parallel-size"),
    ] {
        let r = eval_dense_line(extra);
        assert_one_line_error(&r, &[token, "write --"], &[], extra);
    }
    // A number after a flag that has its value is no flag's value.
    let r = eval_dense_line("--micro-batch-size 1 2");
    assert_one_line_error(&r, &["\"2\"", "--micro-batch-size 1"], &[], "left over");
    // The words of a launch script around the arguments are still skipped.
    let r = run(&[
        "eval",
        "--nodes",
        "16",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn count_messages_give_the_hint_that_fits() {
    let r = eval_dense_line("--pipeline-model-parallel-layout");
    assert_one_line_error(
        &r,
        &["--pipeline-model-parallel-layout 'Et*4|t*4|t*1L'"],
        &["layout 8"],
        "layout",
    );
    for (value, needle) in [
        ("-2", "negative"),
        ("0", "at least 1"),
        ("1.5", "whole number"),
    ] {
        let r = eval_dense_line(&format!("--tensor-model-parallel-size {value}"));
        assert_one_line_error(&r, &[needle], &["shell variables"], value);
    }
    let r = eval_dense_line("--tensor-model-parallel-size $TP");
    assert_one_line_error(&r, &["\"$TP\"", "expand shell variables"], &[], "$TP");

    let r =
        eval_dense_line("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 0");
    assert_one_line_error(
        &r,
        &[
            "--decoder-first-pipeline-num-layers",
            "not allowed",
            "at least 1",
        ],
        &["shell variables", "rest"],
        "first 0 in a line",
    );
    // Pasted on eval, likewise.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "2",
        "--global-batch",
        "64",
        "--decoder-first-pipeline-num-layers",
        "0",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--decoder-first-pipeline-num-layers 0",
            "not allowed",
            "at least 1",
        ],
        &["rest"],
        "first 0 pasted",
    );
}

#[test]
fn emitting_nemo_for_an_moe_model_is_an_input_error() {
    let mut args = vec!["plan"];
    args.extend(MIXTRAL_PLAN);
    args.extend(["--emit", "nemo"]);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &["--emit nemo", "mixture-of-experts", "--emit megatron"],
        &[],
        "nemo",
    );
    assert!(r.stdout.is_empty());
}

// ---- 5. windows that change nothing ------------------------------------------------------------

#[test]
fn windows_that_equal_full_attention_get_a_note() {
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--top",
        "1",
    ];
    let mut args = base.to_vec();
    args.extend(["--attention-window", "4096"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.lines().any(|l| l.starts_with("note: ")
            && l.contains("4096 tokens")
            && l.contains("same as full attention")),
        "{}",
        r.stderr
    );
    let mut args = base.to_vec();
    args.extend(["--attention-window", "128", "--window-attn-skip-freq", "1"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("note: ") && l.contains("no layer is windowed")),
        "{}",
        r.stderr
    );
    // A window that matters gets none.
    let mut args = base.to_vec();
    args.extend(["--attention-window", "128", "--window-attn-skip-freq", "2"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("full attention"), "{}", r.stderr);
}

/// A known flag written with one dash after an unknown flag is not that flag's value, and three
/// dashes are not two: both are refused naming the word (Megatron-LM's argparse refuses them).
#[test]
fn misspelt_dashes_anywhere_in_a_line_are_refused() {
    let line = "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16";
    for (extra, needle) in [
        (
            "--no-load-rng -sequence-parallel",
            "\"-sequence-parallel\" has one dash",
        ),
        (
            "---hidden-dropout 0",
            "\"---hidden-dropout\" has three dashes",
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{line} {extra}"),
        ]);
        assert_one_line_error(&r, &[needle], &[], extra);
    }
}

/// `--pipeline-model-parallel-layout` pasted on `eval` sets the virtual stages from its chunks,
/// as Megatron-LM derives them, and is refused where it contradicts `--vpp` or the MTP layers.
#[test]
fn a_pasted_layout_sets_the_virtual_stages_and_is_checked() {
    let base = [
        "eval",
        "--model",
        "llama3-8b",
        "--layers",
        "30",
        "--mtp-layers",
        "1",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--pipeline-model-parallel-layout",
        "Et|(tt|)*14tmL",
    ];
    let read = json(&[&base[..], &["--format", "json"]].concat());
    assert_eq!(read["plans"][0]["vpp"], 4);
    assert_eq!(read["plans"][0]["stages"]["first"], 7);
    let r = run(&[&base[..], &["--vpp", "2"]].concat());
    assert_one_line_error(&r, &["--vpp 2", "4 virtual stages"], &[], "vpp");
    let no_mtp: Vec<&str> = base
        .iter()
        .copied()
        .filter(|a| *a != "--mtp-layers" && *a != "1")
        .collect();
    let r = run(&no_mtp);
    assert_one_line_error(&r, &["--pipeline-model-parallel-layout", "MTP"], &[], "mtp");
}

/// What a third review found in the shell-like reading of launch lines: a quoted `--flag="a b"`
/// keeps its value whole (only an item quoted whole splits), a known flag's bare name can be an
/// unknown flag's value, nargs='+' load-balancing types stop at a dash and the last occurrence
/// wins, and a negative capacity factor still meets the load-balancing rule.
#[test]
fn launch_line_words_keep_their_values_and_flags_apart() {
    let base = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16";
    let moe = format!(
        "{base} --sequence-parallel --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall --disable-bias-linear"
    );
    let step = |line: &str| {
        json(&[
            "eval",
            "--nodes",
            "2",
            "--megatron-args",
            line,
            "--format",
            "json",
        ])["plans"][0]["time"]["step_s"]
            .as_f64()
            .unwrap()
    };
    let plain = step(base);
    // Free text in a quoted value sets nothing; a bare flag name is a value.
    assert_eq!(
        step(&format!(
            "{base} --wandb-exp-name=\"ablation --tensor-model-parallel-size 4\""
        )),
        plain
    );
    assert_eq!(
        step(&format!("{base} --wandb-exp-name sequence-parallel")),
        plain
    );
    // A quoted window value stays one value.
    assert!(step(&format!("{base} --window-size=\"(127, 0)\"")) < plain);
    for (extra, needles) in [
        (
            "--moe-router-load-balancing-type aux_loss -tensor-model-parallel-size 4",
            &["\"-tensor-model-parallel-size\" has one dash"][..],
        ),
        (
            "--moe-router-load-balancing-type",
            &["--moe-router-load-balancing-type needs a value"][..],
        ),
        (
            "--moe-expert-capacity-factor -1 --moe-router-load-balancing-type sinkhorn",
            &["sinkhorn", "aux_loss"][..],
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "2",
            "--megatron-args",
            &format!("{moe} {extra}"),
        ]);
        assert_one_line_error(&r, needles, &[], extra);
    }
    let moe_step = step(&moe);
    // argparse keeps the last occurrence of the flag: the same as aux_loss alone.
    assert_eq!(
        step(&format!(
            "{moe} --moe-expert-capacity-factor 1.5 --moe-router-load-balancing-type sinkhorn --moe-router-load-balancing-type aux_loss"
        )),
        step(&format!(
            "{moe} --moe-expert-capacity-factor 1.5 --moe-router-load-balancing-type aux_loss"
        ))
    );
    assert_eq!(
        step(&format!("{moe} --moe-expert-capacity-factor -inf")),
        moe_step
    );
}

/// Backslash escapes are the shell's (`"a \" b"` is one value, `'it'\''s'` one word), and a quote
/// left open at the end of a line, which bash refuses, is refused instead of swallowing the flags
/// after it; a quote inside a comment is part of the comment.
#[test]
fn shell_escapes_and_open_quotes_are_read_as_bash_reads_them() {
    let base = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16";
    let tp = |extra: &str| {
        json(&[
            "eval",
            "--nodes",
            "2",
            "--megatron-args",
            &format!("{base} {extra}"),
            "--format",
            "json",
        ])["plans"][0]["tp"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        tp(r#"--wandb-exp-name "a \" b" --tensor-model-parallel-size 4"#),
        4
    );
    assert_eq!(
        tp(r#"--wandb-exp-name 'it'\''s' --tensor-model-parallel-size 4"#),
        4
    );
    assert_eq!(tp("--lr 0.1 # it's a comment"), 2);
    let r = run(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        &format!("{base} --exp-name don't --tensor-model-parallel-size 4"),
    ]);
    assert_one_line_error(&r, &["leaves a quote open"], &[], "open quote");
}
