//! Hostile input, round 32: a token budget said back as given (not rounded to whole millions) and
//! a small step's tokens not said as "0.0M"; `compare` and `sweep` refuse a search with no valid
//! plan as `plan` does, not as "nothing fits"; a runs file's peak stated in GB is compared; sizes
//! that derive one shape are one point of `sweep --axis params`. Every error case checks exit 2,
//! one line on stderr and the words that name the value, the rule and the fix.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "hostile32";

/// `--tokens 1.5M` was said back as "2M tokens" (whole millions) in eval's time to train, plan's
/// train line, sweep's and --emit's notes, and 8 sequences of 2048 tokens as "steps of 0.0M
/// tokens": a budget the user gave changed by a third, a step of 16384 tokens said as none.
#[test]
fn a_token_budget_is_said_as_given_and_a_small_step_not_as_zero() {
    let eval = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "8",
        "--tokens",
        "1.5M",
    ]);
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    let line = eval
        .stdout
        .lines()
        .find(|l| l.starts_with("time to train:"))
        .unwrap_or_else(|| panic!("{}", eval.stdout));
    assert!(
        line.contains("(1.5M tokens in 92 steps of 16.4K tokens at "),
        "{line}"
    );
    // One step: the budget is no more than a step's tokens, said in thousands.
    let one = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "8",
        "--tokens",
        "1000",
    ]);
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert!(
        one.stdout
            .contains("one step: the token budget is no more than a step's 16.4K tokens"),
        "{}",
        one.stdout
    );
    let plan = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--top",
        "1",
        "--tokens",
        "1.5M",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout
            .contains("train: 1.5M tokens in 92 steps of 16.4K tokens, at each plan's step time"),
        "{}",
        plan.stdout
    );
    let emit = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--tokens",
        "1.5M",
        "--emit",
        "megatron",
    ]);
    assert_eq!(emit.code, 0, "{}", emit.stderr);
    assert!(
        emit.stderr.contains("note: --tokens 1.5M: ") && emit.stderr.contains("16.4K tokens)"),
        "{}",
        emit.stderr
    );
    let sweep = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--axis",
        "global-batch",
        "--values",
        "1,2",
        "--tokens",
        "1.25B",
    ]);
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    assert!(
        sweep.stdout.contains(
            "train: 1.25B tokens in whole steps of each point's global batch x sequence length: 610352 steps of 2.0K tokens at 1, 305176 steps of 4.1K tokens at 2"
        ),
        "{}",
        sweep.stdout
    );
    for out in [&eval.stdout, &one.stdout, &plan.stdout, &sweep.stdout] {
        assert!(!out.contains("0.0M"), "{out}");
        assert!(!out.contains(" 2M tokens"), "{out}");
    }
    assert!(!emit.stderr.contains("0.0M"), "{}", emit.stderr);
}

/// `compare` searching a cluster no plan splits (7 GPUs for 32 heads and 34 layers, a batch of
/// 64) said "nothing fits, so there is nothing to compare; `tpsim plan` shows the closest miss"
/// (exit 1), where `plan` shows no miss but refuses the input (exit 2); the same for a torchtitan
/// local batch no plan admits.
#[test]
fn compare_refuses_a_search_with_no_valid_plan_as_plan_does() {
    let r = run(&[
        "compare",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--gpus-per-node",
        "7",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "no valid plan exists",
            "7 GPUs cannot be split",
            "dp dividing --global-batch 64",
            "e.g. --global-batch 70",
        ],
        &["nothing fits", "closest miss"],
        "compare on 7 GPUs",
    );
    let r = run(&[
        "compare",
        "--framework",
        "torchtitan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--local-batch",
        "3",
    ]);
    assert_one_line_error(
        &r,
        &[
            "no valid plan exists",
            "--local-batch 3 admits none of the plans",
            "or drop --local-batch",
        ],
        &["nothing fits"],
        "compare --local-batch 3",
    );
}

/// `sweep --local-batch 3` where no split admits it printed "nothing fits (753 candidates)" rows
/// and exit 1 ("nothing fits at any point"): no plan was priced, so nothing could miss memory.
/// Where every point is so it is refused as `plan` refuses it; where one is, its row says why.
#[test]
fn a_sweep_whose_local_batch_no_plan_admits_says_no_valid_plan() {
    let base = [
        "sweep",
        "--framework",
        "torchtitan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--local-batch",
        "3",
        "--axis",
        "global-batch",
        "--values",
    ];
    let r = run(&[&base[..], &["64,128"]].concat());
    assert_one_line_error(
        &r,
        &[
            "--axis global-batch at 64: no valid plan exists",
            "--local-batch 3 admits none of the plans",
            "or drop --local-batch",
        ],
        &["nothing fits"],
        "every point",
    );
    // 96 sequences over 8 ranks is 12 each, which a local batch of 3 divides.
    let r = run(&[&base[..], &["64,96", "--format", "json"]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert!(
        rows[0]["no_valid_plan"]
            .as_str()
            .is_some_and(|why| why.contains("--local-batch 3 admits none")),
        "{}",
        r.stdout
    );
    assert!(rows[1]["no_valid_plan"].is_null(), "{}", r.stdout);
    assert!(rows[1]["tp"].is_number(), "{}", r.stdout);
}

/// A current-stack runs file row, with `PEAK` for its peak-memory keys.
const RUNS: &str = "schema_version: 1
model_catalog: {}
runs:
- id: mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128
  task: pretrain
  model: {name: Llama 3 8B, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256, seq_len: 8192}
  hardware: {gpu: GB300, num_gpus: 8, gpus_per_node: 4}
  plan: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, mbs: 2, gbs: 128, precision: fp8, precision_raw: FP8-CS}
  results: {tokens_per_s_per_gpu: 37556, PEAK}
";

/// A run's `results.peak_memory_gb` (the unit the runs file's conventions name) was read and
/// dropped: a run stating its peak in GB only was compared on speed alone, with no word. It is
/// compared now, and a GB and a GiB value of one peak that disagree are refused.
#[test]
fn a_runs_files_peak_in_gb_is_compared_and_checked_against_its_gib() {
    let dir = scratch(SUITE, "peak-gb");
    std::fs::write(
        dir.join("gb.yaml"),
        RUNS.replace("PEAK", "peak_memory_gb: 70"),
    )
    .unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "gb.yaml", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    let text = json.to_string();
    assert!(
        text.contains("\"published_peak_memory_bytes\":70000000000.0"),
        "{text}"
    );
    let table = run_in(&dir, &["accuracy", "--runs", "gb.yaml"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("65.2 / "), "{}", table.stdout);
    assert!(
        table.stdout.contains("peak memory: 1 runs state it"),
        "{}",
        table.stdout
    );
    // Both units, agreeing: one peak (88.5 GB is 82.4 GiB, as the bundled file writes them).
    std::fs::write(
        dir.join("both.yaml"),
        RUNS.replace("PEAK", "peak_memory_gb: 88.5, peak_memory_gib: 82.4"),
    )
    .unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "both.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("82.4 / "), "{}", r.stdout);
    // Both units, disagreeing: which the source meant is unclear.
    std::fs::write(
        dir.join("clash.yaml"),
        RUNS.replace("PEAK", "peak_memory_gb: 80, peak_memory_gib: 65"),
    )
    .unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "clash.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "results.peak_memory_gb: 80 and results.peak_memory_gib: 65 disagree",
            "80 GB is 74.5 GiB",
            "correct the one that is wrong",
        ],
        &[],
        "GB and GiB disagree",
    );
    // A GB value out of range is refused in its own key, as the GiB one is.
    std::fs::write(
        dir.join("zero.yaml"),
        RUNS.replace("PEAK", "peak_memory_gb: 0"),
    )
    .unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "zero.yaml"]);
    assert_one_line_error(
        &r,
        &["results.peak_memory_gb: 0 is outside", "GB"],
        &[],
        "peak_memory_gb 0",
    );
}

/// `sweep --axis params --values 70B,71B,72B` derives the same 71.0B shape at each point and
/// printed three identical rows, as if the size changed nothing; the gpu axis already refuses
/// two profiles of one GPU as one point.
#[test]
fn sizes_that_derive_one_shape_are_one_sweep_point() {
    let r = run(&[
        "sweep",
        "--axis",
        "params",
        "--values",
        "70B,71B,72B",
        "--nodes",
        "2",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--values 70B and 71B derive one GPT-style shape",
            "71.0B params",
            "would print two identical rows",
            "give sizes further apart",
        ],
        &[],
        "70B,71B,72B",
    );
    // Sizes whose shapes differ are still swept.
    let r = run(&[
        "sweep",
        "--axis",
        "params",
        "--values",
        "7B,13B",
        "--nodes",
        "2",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A file of one of tpsim's inputs given where another is read (a Hugging Face config.json to
/// --model, a GPU profile to --model, a model file to --gpu or --plan, a plan file to --model)
/// was refused at its first key with the 28 keys the reader takes, and no word of the mix-up: a
/// config.json given to --model was told "unknown field `architectures`, expected one of `name`,
/// ...". The error names what the file is and the flag that reads it.
#[test]
fn a_file_given_to_the_wrong_flag_is_named_with_the_flag_that_reads_it() {
    for (args, what, fix) in [
        (
            &[
                "plan",
                "--model",
                "models/hf/llama-3-70b.json",
                "--nodes",
                "8",
            ][..],
            "the file is a Hugging Face config.json, not a model file",
            "give it with --hf-config",
        ),
        (
            &[
                "plan",
                "--model",
                "clusters/h100-sxm-80g.yaml",
                "--nodes",
                "1",
            ][..],
            "the file is a GPU profile, not a model file",
            "give it with --gpu",
        ),
        (
            &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--gpu",
                "models/llama3-8b.yaml",
            ][..],
            "the file is a model file, not a GPU profile",
            "give it with --model",
        ),
        (
            &["eval", "--plan", "models/llama3-8b.yaml"][..],
            "the file is a model file, not a plan file",
            "give it with --model",
        ),
        (
            &[
                "plan",
                "--model",
                "plans/seed-512b-32nodes.yaml",
                "--nodes",
                "1",
            ][..],
            "the file is a plan file, not a model file",
            "give it with eval --plan",
        ),
    ] {
        let r = run(args);
        assert_one_line_error(
            &r,
            &["unknown field", what, fix],
            &["expected one of"],
            &args.join(" "),
        );
    }
    // A misspelt key of the right kind of file still lists the keys it takes.
    let dir = scratch(SUITE, "typo-key");
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    std::fs::write(
        dir.join("g.yaml"),
        gpu.replace("hbm_capacity_gib:", "hbm_capacix_gib:"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["plan", "--params", "7B", "--nodes", "1", "--gpu", "g.yaml"],
    );
    assert_one_line_error(
        &r,
        &[
            "unknown field `hbm_capacix_gib`, expected one of",
            "`hbm_capacity_gib`",
        ],
        &["give it with"],
        "misspelt key",
    );
}
