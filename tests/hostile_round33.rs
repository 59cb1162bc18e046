//! Hostile input, round 33: a current-stack runs file's numbers that tpsim does not compare
//! (`plan.zero`, `results.mfu`, `results.step_time_s`, `results.model_tflops_per_gpu`) and a
//! Megatron row's `plan.ga` that contradicts its batch, all passed without a word; `--tokens 1.5`
//! read as one and a half tokens; `--megatron-args @` with no file after the @;
//! `--num-layers-per-virtual-pipeline-stage 0` said not to divide the layers; a module named
//! twice in `--recompute-modules`. Every error case checks exit 2, one line on stderr and the
//! words that name the value, the rule and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile33";

/// A current-stack runs file row (Megatron-Bridge, 8 GPUs, gbs 128 = dp 8 x mbs 2 x 8), with
/// `PLAN` for more plan keys and `RESULTS` for more results keys.
const RUNS: &str = "schema_version: 1
model_catalog: {}
runs:
- id: mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128
  task: pretrain
  model: {name: Llama 3 8B, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256, seq_len: 8192}
  hardware: {gpu: GB300, num_gpus: 8, gpus_per_node: 4}
  plan: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, mbs: 2, gbs: 128, PLAN precision: fp8, precision_raw: FP8-CS}
  results: {tokens_per_s_per_gpu: 37556RESULTS}
  FLAGS
";

fn runs_with(dir: &std::path::Path, name: &str, plan: &str, results: &str, flags: &str) -> Run {
    std::fs::write(
        dir.join(name),
        RUNS.replace("PLAN", plan)
            .replace("RESULTS", results)
            .replace("FLAGS", flags),
    )
    .unwrap();
    run_in(dir, &["accuracy", "--runs", name])
}

/// `plan.zero` and the results tpsim does not compare were read as any value and dropped:
/// `zero: 7`, `mfu: 1.5` or `.nan`, `step_time_s: 0` or `.inf` and `model_tflops_per_gpu: -5`
/// passed without a word. Each is refused in its key; a stage 0 to 3, the source's words and
/// values in range are read as before.
#[test]
fn a_runs_files_unread_numbers_are_checked_against_what_can_be_true() {
    let dir = scratch(SUITE, "unread-numbers");
    for (plan, results, needles) in [
        (
            "zero: 7,",
            "",
            &[
                "plan.zero: 7 is not a ZeRO stage",
                "0 to 3",
                "zero: 1, or null",
            ][..],
        ),
        (
            "zero: 1.5,",
            "",
            &["plan.zero: 1.5 is not a ZeRO stage", "whole number"][..],
        ),
        (
            "",
            ", mfu: 1.5",
            &["results.mfu: 1.5 is outside 0.001 to 1", "0.45 for 45%"][..],
        ),
        ("", ", mfu: .nan", &["results.mfu: NaN is outside"][..]),
        (
            "",
            ", step_time_s: 0",
            &["results.step_time_s: 0 is outside", "positive time"][..],
        ),
        (
            "",
            ", step_time_s: .inf",
            &["results.step_time_s: inf is outside"][..],
        ),
        (
            "",
            ", model_tflops_per_gpu: -5",
            &[
                "results.model_tflops_per_gpu: -5 is outside",
                "TFLOP/s",
                "give a value in that range",
            ][..],
        ),
    ] {
        let r = runs_with(&dir, "bad.yaml", plan, results, "");
        let mut want = vec!["bad.yaml: run mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128: "];
        want.extend(needles);
        assert_one_line_error(&r, &want, &[], &format!("{plan}{results}"));
    }
    for (plan, results) in [
        (
            "zero: 1,",
            ", mfu: 0.45, step_time_s: 2.5, model_tflops_per_gpu: 1200",
        ),
        (
            "zero: FSDP2 (fully_shard),",
            ", mfu: null, step_time_s: null",
        ),
    ] {
        let r = runs_with(&dir, "good.yaml", plan, results, "");
        assert_eq!(r.code, 0, "{plan}{results}: {}", r.stderr);
    }
}

/// A Megatron-Core row's `plan.ga` that contradicts gbs / (dp x mbs) was ignored without a word
/// (Megatron derives it). It is refused, naming the derived value; a row the source flags as
/// inconsistent is left out as before, and the bundled runs files still read.
#[test]
fn a_megatron_rows_accumulation_must_match_its_batch() {
    let dir = scratch(SUITE, "ga");
    let r = runs_with(&dir, "ga.yaml", "ga: 16,", "", "");
    assert_one_line_error(
        &r,
        &[
            "plan.ga: 16 contradicts plan.gbs: 128 / (plan.dp: 8 x plan.mbs: 2) = 8",
            "Megatron-Core runs gbs / (dp x mbs) micro-batches",
            "e.g. ga: 8",
        ],
        &[],
        "ga 16",
    );
    let r = runs_with(&dir, "ga.yaml", "ga: 8,", "", "");
    assert_eq!(r.code, 0, "ga 8: {}", r.stderr);
    let r = runs_with(
        &dir,
        "ga.yaml",
        "ga: 16,",
        "",
        "flags: [source_inconsistency]",
    );
    assert_eq!(r.code, 0, "flagged: {}", r.stderr);
    assert!(
        r.stdout.contains("flagged source_inconsistency"),
        "{}",
        r.stdout
    );
    for file in [
        "validation/modern_runs.yaml",
        "validation/mbridge_26_runs.yaml",
        "validation/mcore_moe_report.yaml",
    ] {
        let r = run(&["accuracy", "--runs", file]);
        assert_eq!(r.code, 0, "{file}: {}", r.stderr);
    }
}

fn eval_tokens(tokens: &str) -> Run {
    run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--tokens",
        tokens,
    ])
}

/// `--tokens 1.5` (1.5T without its suffix) was read as one and a half tokens and trained "in
/// one step". A fraction of a token is refused, naming the suffix it likely lacks; a suffix's
/// binary rounding (1.1T) is not a fraction.
#[test]
fn a_token_count_is_whole_tokens() {
    assert_one_line_error(
        &eval_tokens("1.5"),
        &[
            "--tokens 1.5 is not a whole number of tokens",
            "--tokens 1.5T",
            "e.g. --tokens 300B",
        ],
        &[],
        "--tokens 1.5",
    );
    assert_one_line_error(
        &eval_tokens("0.5"),
        &["--tokens 0.5 is less than one token", "--tokens 0.5T"],
        &[],
        "--tokens 0.5",
    );
    assert_one_line_error(
        &eval_tokens("1.0000000005B"),
        &["is not a whole number of tokens", "e.g. --tokens 300B"],
        &["1.0000000005BT"],
        "--tokens 1.0000000005B",
    );
    let r = eval_tokens("1.1T");
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `--megatron-args @` said `@"": cannot read it: No such file or directory`, naming no file;
/// an empty path to any file flag said the same.
#[test]
fn an_at_sign_alone_names_no_file() {
    for value in ["@", "@ "] {
        let r = run(&["eval", "--nodes", "1", "--megatron-args", value]);
        assert_one_line_error(
            &r,
            &["names no file after the @", "--megatron-args @examples/"],
            &["No such file"],
            value,
        );
    }
    let r = run(&["accuracy", "--runs", ""]);
    assert_one_line_error(
        &r,
        &["--runs \"\": names no file", "give the path"],
        &["No such file"],
        "--runs \"\"",
    );
}

/// `--num-layers-per-virtual-pipeline-stage 0` said "0 does not divide the 16 layers of each of
/// the 2 stages", as if another count could; `--megatron-args` already said it must be at least 1.
#[test]
fn zero_layers_per_virtual_stage_is_below_one() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--pp",
        "2",
        "--num-layers-per-virtual-pipeline-stage",
        "0",
    ]);
    assert_one_line_error(
        &r,
        &[
            "'0' for '--num-layers-per-virtual-pipeline-stage <N>': must be at least 1",
            "at least one layer",
            "e.g. --num-layers-per-virtual-pipeline-stage 4",
        ],
        &["does not divide"],
        "flag",
    );
    let line = "--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0 --micro-batch-size 1 --global-batch-size 8";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_one_line_error(&r, &["at least 1"], &["does not divide"], "launch line");
}

/// `--recompute-modules core_attn,core_attn` was merged into one module without a word (most
/// likely another module was meant there); so was the repeat in a pasted launch line.
#[test]
fn a_recompute_module_is_named_once() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--recompute-modules",
        "core_attn,core_attn",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--recompute-modules core_attn,core_attn: 'core_attn' is named twice",
            "listed once",
            "drop the repeat",
        ],
        &[],
        "flag",
    );
    let line = "--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 --recompute-granularity selective --recompute-modules core_attn layernorm core_attn";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_one_line_error(&r, &["'core_attn' is named twice"], &[], "launch line");
}
