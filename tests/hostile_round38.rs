//! Hostile input, round 38: a hybrid line's MTP depths after a main pattern ending in a Mamba or
//! attention layer were told to be written as the '/*E' they were; a pattern of '|' cuts alone
//! was told as MTP segments, and an empty '|' segment was told to take the pipeline size that the
//! empty segment then refused; `--emit torchtitan` without `--framework` on a model no recipe
//! describes (a hybrid stack, experts, LayerNorm) was told to add the `--framework torchtitan`
//! under which the recipe refused the model; `--recompute-num-layers`, `--recompute-method` and
//! `--data-parallel-sharding-strategy` beside `--megatron-args` were dropped without a word; a
//! Nemotron-H config's Mamba errors named a model file's keys (`mamba_heads`, `mamba_groups`);
//! a runs file's `plan.gbs: 0` and `hardware.num_gpus: 0` were told without their keys or a fix.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "hostile38";

/// A small hybrid launch line (`PATTERN` and `PP` replaced) on one node.
const HYBRID_LINE: &str = "--hybrid-layer-pattern PATTERN --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 1 --pipeline-model-parallel-size PP";

fn eval_hybrid_line(pattern: &str, pp: &str) -> Run {
    let line = HYBRID_LINE.replace("PATTERN", pattern).replace("PP", pp);
    run(&["eval", "--nodes", "1", "--megatron-args", &line])
}

/// MTP depths price their MLP as the last layer's: after a main pattern ending in attention
/// ('M-M*/*E') or a Mamba layer the refusal said "write the depths as /*E", which the line did.
/// It now names the layer the main pattern ends in and the fix (end it in an MLP, or drop the
/// depths). Behind a trailing '|' cut the last layer is the one before it ('-' in
/// 'M-M*|M-M-|/*E'), whose block '*-' is offered where '*E' was.
#[test]
fn mtp_depths_after_a_mamba_or_attention_layer_name_the_ending() {
    for (pattern, ending) in [
        ("M-M*/*E", "ends in an attention layer (*)"),
        ("M-MM/*E", "ends in a Mamba layer (M)"),
    ] {
        assert_one_line_error(
            &eval_hybrid_line(pattern, "1"),
            &[
                &format!(r#"--hybrid-layer-pattern "{pattern}" (MTP segments "*E")"#),
                ending,
                "end the main pattern in an MLP (- or E), or drop the '/' depths",
            ],
            &["write the depths as", "panicked"],
            pattern,
        );
    }
    assert_one_line_error(
        &eval_hybrid_line("'M-M*|M-M-|/*E'", "2"),
        &["here *-", "write the depths as /*-"],
        &["write the depths as /*E", "panicked"],
        "trailing cut",
    );
    // Depths that match the last layer are still read.
    let r = eval_hybrid_line("M-M-/*-/*-", "1");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("2 MTP layers of an attention and an MLP block (*-)"),
        "{}",
        r.stdout
    );
}

/// A pattern of '|' cuts alone ('|', '|/*E') has no layer: it was told as a segment without
/// layers or as MTP segments to rewrite. It is named as the empty main pattern it is.
#[test]
fn a_pattern_of_pipeline_cuts_alone_is_an_empty_main_pattern() {
    for pattern in ["'|'", "'|/*E'"] {
        assert_one_line_error(
            &eval_hybrid_line(pattern, "2"),
            &[
                "its main pattern (before any '/' MTP depth) is empty",
                "e.g. --hybrid-layer-pattern 'M-M*'",
            ],
            &["MTP segments", "a segment holds no layer", "panicked"],
            pattern,
        );
    }
}

/// An empty '|' segment at pipeline size 1 was told "give --pipeline-model-parallel-size 3" (or
/// 2), which was then refused for the empty segment. The empty segment is said first, at any
/// pipeline size.
#[test]
fn an_empty_segment_is_said_before_the_pipeline_size_it_would_need() {
    for (pattern, lengths) in [("'M-M*||M-M-'", "(4/0/4)"), ("'|M-M*M-M-'", "(0/8)")] {
        for pp in ["1", "2", "3"] {
            assert_one_line_error(
                &eval_hybrid_line(pattern, pp),
                &[lengths, "a segment holds no layer", "drop that '|'"],
                &["give --pipeline-model-parallel-size", "panicked"],
                &format!("{pattern} at pp {pp}"),
            );
        }
    }
}

/// `--emit torchtitan` without `--framework` on a model the recipe cannot describe said "use
/// --framework torchtitan", under which the recipe refused the model (and `eval` on a hybrid
/// stack then said "use --framework megatron-core": a loop). The model's refusal now comes
/// first, from `plan` and `eval` alike, with an emit that carries it. A model the recipe writes
/// is planned as torchtitan runs it, with a note saying so (leftovers round 37).
#[test]
fn emit_torchtitan_on_a_model_no_recipe_describes_names_the_model() {
    for (model, words) in [
        ("nemotron-h-8b", "hybrid Mamba-Transformer models"),
        // An MoE block no torchtitan MoE flavor builds (DeepSeek-V3 and Qwen3 are written since
        // `--emit torchtitan` learned torchtitan's MoE flavors).
        ("mixtral-8x7b", "mixtral-8x7b has no query/key norms"),
        ("gpt3-175b", "gpt3-175b has LayerNorm"),
    ] {
        for command in ["plan", "eval"] {
            let mut args = vec![
                command,
                "--model",
                model,
                "--nodes",
                "4",
                "--global-batch",
                "64",
                "--emit",
                "torchtitan",
            ];
            if command == "eval" {
                args.extend(["--tp", "8"]);
            }
            assert_one_line_error(
                &run(&args),
                &["--emit torchtitan:", words, "--emit megatron"],
                &["use --framework torchtitan", "panicked"],
                &format!("{command} {model}"),
            );
        }
    }
    // Under --framework torchtitan an MoE model named "--ep 1 --etp 1", degrees never given.
    assert_one_line_error(
        &run(&[
            "eval",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "4",
            "--tp",
            "8",
            "--global-batch",
            "64",
            "--framework",
            "torchtitan",
            "--emit",
            "torchtitan",
        ]),
        &["mixtral-8x7b has no query/key norms"],
        &["--ep 1", "--etp 1", "panicked"],
        "mixtral under torchtitan",
    );
    // A model the recipe writes is planned as torchtitan runs it, said in a note, as `--emit
    // deepspeed` takes DeepSpeed (leftovers round 37 item 5: it was refused with "use --framework
    // torchtitan" while `--emit deepspeed` took its framework).
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(r.code, 0, "llama3-8b without --framework: {}", r.stderr);
    assert!(
        r.stderr
            .contains("note: --emit torchtitan plans as --framework torchtitan runs it"),
        "{}",
        r.stderr
    );
}

/// A dense launch line on one node, pipeline size 2.
const DENSE_LINE: &str = "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";

/// `--recompute-num-layers 1` beside a launch line that recomputes nothing evaluated "recompute
/// none", and beside a line's `--recompute-num-layers 2` the line's; `--recompute-method` and
/// `--data-parallel-sharding-strategy` likewise changed nothing. The plan is the line's, as for
/// `--recompute` and `--zero`, which clap refuses beside it: so are these. The line's own
/// count is read.
#[test]
fn recompute_and_sharding_flags_beside_a_launch_line_are_refused() {
    for (flag, value) in [
        ("--recompute-num-layers", "1"),
        ("--recompute-method", "uniform"),
        ("--data-parallel-sharding-strategy", "optim_grads_params"),
    ] {
        assert_one_line_error(
            &run(&[
                "eval",
                "--nodes",
                "1",
                "--megatron-args",
                DENSE_LINE,
                flag,
                value,
            ]),
            &["--megatron-args", "cannot be used with", flag],
            &["panicked"],
            flag,
        );
    }
    let line = format!(
        "{DENSE_LINE} --recompute-granularity full --recompute-method block --recompute-num-layers 2"
    );
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("recompute full 2/4"), "{}", r.stdout);
}

/// A Nemotron-H config whose Mamba heads its groups do not divide said "hybrid mamba_heads 63 is
/// not a multiple of mamba_groups 8", a model file's keys; an out-of-range state size said
/// "mamba_state_dim". They are the config's keys now (`n_groups` or `mamba_n_groups`, whichever
/// it has).
#[test]
fn a_nemotron_h_configs_mamba_errors_name_its_keys() {
    let dir = scratch(SUITE, "nemotron-h-keys");
    let config = nemotron_h_moe_config(r#", "mamba_num_heads": 63"#)
        .replace(r#""mamba_num_heads": 64,"#, "");
    assert_one_line_error(
        &eval_hf(&dir, "heads.json", &config),
        &[r#"key "mamba_num_heads" 63 is not a multiple of "n_groups" 8"#],
        &["mamba_heads", "mamba_groups", "panicked"],
        "heads over groups",
    );
    let config = nemotron_h_moe_config(r#", "mamba_n_groups": 7"#).replace(r#""n_groups": 8,"#, "");
    assert_one_line_error(
        &eval_hf(&dir, "groups.json", &config),
        &[r#"key "mamba_num_heads" 64 is not a multiple of "mamba_n_groups" 7"#],
        &["mamba_heads", "mamba_groups", "panicked"],
        "mamba_n_groups",
    );
    let config = nemotron_h_moe_config(r#", "ssm_state_size": 100000"#);
    assert_one_line_error(
        &eval_hf(&dir, "state.json", &config),
        &[r#"key "ssm_state_size" 100000 is out of range"#],
        &["mamba_state_dim", "panicked"],
        "state size",
    );
}

/// A current-stack runs file with one dense run (`GBS` and `GPUS` replaced).
const RUNS: &str = "schema_version: 1
model_catalog: {}
runs:
- id: run-a
  task: pretrain
  model_key: llama3_8b
  model: {name: Llama 3 8B, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, head_dim: null, ffn_hidden: 14336, vocab: 128256, moe: null, seq_len: 8192}
  hardware: {gpu: H100, num_gpus: GPUS, gpus_per_node: 8}
  plan: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, mbs: 1, gbs: GBS, precision: bf16}
  results: {tokens_per_s_per_gpu: 10000}
";

/// Why `accuracy --runs` predicted no row of this file (the JSON's `note`).
fn runs_note(name: &str, gbs: &str, gpus: &str) -> String {
    let dir = scratch(SUITE, name);
    std::fs::write(
        dir.join("runs.yaml"),
        RUNS.replace("GBS", gbs).replace("GPUS", gpus),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        rows[0]["predicted_tokens_per_s_per_gpu"].is_null(),
        "{rows}"
    );
    rows[0]["note"].as_str().unwrap().to_string()
}

/// A runs file's `plan.gbs: 0` was "global batch 0 is outside 1..=4194304 sequences" and its
/// `hardware.num_gpus: 0` "num_gpus is 0": no key as the file writes it, no fix, where every
/// other row's reason has both.
#[test]
fn a_runs_files_zero_batch_and_gpu_count_are_named_by_key() {
    let note = runs_note("gbs0", "0", "8");
    for words in [
        "plan.gbs 0 is outside 1 to 4194304 sequences",
        "give the published global batch",
    ] {
        assert!(note.contains(words), "{words:?} not in {note}");
    }
    assert!(!note.contains("1..="), "{note}");
    let note = runs_note("gpus0", "128", "0");
    assert!(
        note.starts_with("hardware.num_gpus is 0") && note.contains("give the GPUs the run"),
        "{note}"
    );
    // The published plan itself is still predicted.
    let dir = scratch(SUITE, "fine");
    std::fs::write(
        dir.join("runs.yaml"),
        RUNS.replace("GBS", "128").replace("GPUS", "8"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    let rows: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        rows[0]["predicted_tokens_per_s_per_gpu"].as_f64().unwrap() > 0.0,
        "{rows}"
    );
}
