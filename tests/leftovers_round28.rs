//! Leftovers of the twenty-eighth round, input checks and output labels only: `validate --tp
//! --micro-batch` holds a given `--global-batch` to eval's rule, the CUDA backend's buffer sizes
//! are checked against the GPU's memory before anything runs, `eval`'s communication header names
//! the stage its PP row is measured on, the two accuracy tables say their errors' signs differ, and
//! `sweep`'s JSON and CSV rows say what each range rests on.

mod common;

use common::*;
use serde_json::Value;
use tpsim::calibrate::GemmShape;
use tpsim::calibrate::device_limits::{cuda_buffer_refusal, cuda_gemm_bytes, cuda_gemm_refusal};

const VALIDATE_LAYER: [&str; 12] = [
    "validate",
    "--backend",
    "cpu",
    "--layers",
    "2",
    "--hidden",
    "256",
    "--heads",
    "8",
    "--seq-len",
    "128",
    "--nodes",
];

fn validate(extra: &[&str]) -> Run {
    let mut args: Vec<&str> = VALIDATE_LAYER.to_vec();
    args.extend_from_slice(&["1", "--reps", "1", "--warmup", "0"]);
    args.extend_from_slice(extra);
    run(&args)
}

/// `validate --tp 8 --micro-batch 3 --global-batch 64` ran its layer without a word, and so did a
/// micro-batch of 128 in a batch of 64: both are refused as `eval` refuses the same split, with
/// eval's words (dp 1, the fewest replicas a plan of the layer has), before anything runs.
#[test]
fn validate_refuses_a_micro_batch_the_global_batch_cannot_hold_as_eval_does() {
    let eval = run(&[
        "eval",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "8",
        "--seq-len",
        "128",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--micro-batch",
        "3",
        "--global-batch",
        "64",
    ]);
    let rule = "--global-batch 64 is not divisible by --dp 1 x --micro-batch 3 = 3; valid micro-batches for this dp: 1, 2, 4, 8, 16, 32, 64";
    assert_one_line_error(&eval, &[rule], &[], "eval's own refusal");
    // validate says eval's rule at dp 1 without naming --dp, a flag it does not take (review 27).
    let r = validate(&["--tp", "8", "--micro-batch", "3", "--global-batch", "64"]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch 64 is not divisible by --micro-batch 3; valid micro-batches: 1, 2, 4, 8, 16, 32, 64",
            "eval refuses the same split at dp 1",
            "drop --global-batch",
        ],
        &["--dp"],
        "validate mb 3",
    );
    let r = validate(&["--tp", "8", "--micro-batch", "128", "--global-batch", "64"]);
    assert_one_line_error(
        &r,
        &["--global-batch 64 is not divisible by --micro-batch 128;"],
        &["GiB", "--dp"],
        "validate mb over the batch",
    );
    // A micro-batch that divides the batch runs, as before.
    let r = validate(&[
        "--tp",
        "2",
        "--ranks",
        "2",
        "--micro-batch",
        "2",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("1 of 1 cases passed"), "{}", r.stdout);
}

/// The CUDA backend had no size limit at all: `--max-message 1PiB` or `--copy-bytes 1PiB` would
/// time every GEMM first and fail at the allocation. Its buffers are now held to the GPU's memory
/// (cuDeviceTotalMem), named in the refusal, before anything is measured.
#[test]
fn cuda_buffers_are_held_to_the_gpus_memory_before_anything_runs() {
    let h100 = 80u64 << 30;
    let refusal = cuda_buffer_refusal("--max-message", "64GiB", 64 << 30, h100)
        .expect("two 64 GiB buffers do not fit 80 GiB");
    for needle in [
        "--max-message 64GiB",
        "128GiB in all",
        "over the GPU's memory of 80GiB",
        "cuDeviceTotalMem",
        "e.g. --max-message 16GiB",
    ] {
        assert!(refusal.contains(needle), "no {needle:?} in: {refusal}");
    }
    assert_eq!(
        cuda_buffer_refusal("--copy-bytes", "1GiB", 1 << 30, h100),
        None
    );
    assert_eq!(
        cuda_buffer_refusal("--copy-bytes", "40GiB", 40 << 30, h100),
        None,
        "exactly half fits"
    );
    assert!(cuda_buffer_refusal("--copy-bytes", "40GiB", (40 << 30) + 1, h100).is_some());
    // The default sweep's largest edge fits; an edge of 131072 (96 GiB of operands) does not.
    let square = |n: usize| GemmShape {
        m: n,
        n,
        k: n,
        batch: 1,
    };
    assert_eq!(cuda_gemm_bytes(square(16384)), 3 * 2 * 16384 * 16384);
    assert_eq!(cuda_gemm_refusal(square(16384), h100), None);
    let refusal = cuda_gemm_refusal(square(131072), h100).expect("96 GiB of operands");
    assert!(refusal.contains("96GiB"), "{refusal}");
    assert!(refusal.contains("--sweep"), "{refusal}");
    // Without a GPU (here) the flag is never reached: the missing driver or GPU is said in one line.
    // On a GPU machine the same line is the memory refusal.
    let r = run(&[
        "calibrate",
        "--backend",
        "cuda",
        "--model",
        "llama3-8b",
        "--max-message",
        "1PiB",
        "--output",
        scratch("leftovers28", "cuda")
            .join("out.yaml")
            .to_str()
            .unwrap(),
    ]);
    let no_gpu = r.stderr.contains("the cuda backend needs")
        || r.stderr
            .contains("the cuda backend found no usable NVIDIA GPU");
    let needles: &[&str] = if no_gpu {
        &["use --backend cpu"]
    } else {
        &["--max-message 1PiB", "cuDeviceTotalMem"]
    };
    assert_one_line_error(&r, needles, &[], "calibrate --backend cuda 1PiB");
}

/// `eval`'s communication header named the GPU of its TP, CP, EP and DP rows but not of PP, which
/// the cost model and the ledger both count on the stage that sets the step.
#[test]
fn the_communication_header_names_the_stage_of_the_pp_row() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--pp",
        "4",
        "--micro-batch",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r
        .stdout
        .lines()
        .find(|l| l.starts_with("communication per GPU per step"))
        .unwrap_or_else(|| panic!("no header in: {}", r.stdout));
    assert!(
        header.contains("(TP, CP, PP, EP: a GPU of the slowest stage"),
        "{header}"
    );
    assert!(
        r.stdout.lines().any(|l| l.trim_start().starts_with("PP ")),
        "no PP row: {}",
        r.stdout
    );
}

/// The SC'21/BLOOM table errs on step time (- = tpsim faster), a runs file's on tokens/s (+ =
/// tpsim faster): each says its sign, and each says the other's is the opposite, as the README does.
#[test]
fn the_accuracy_tables_say_their_signs_are_opposite() {
    let sc21 = run(&["accuracy"]);
    assert_eq!(sc21.code, 0, "{}", sc21.stderr);
    assert!(
        sc21.stdout.contains("step time error % (- = tpsim faster)"),
        "{}",
        sc21.stdout
    );
    assert!(
        sc21.stdout
            .contains("whose error is on tokens/s, so there + = tpsim faster"),
        "{}",
        sc21.stdout
    );
    let moe = run(&["accuracy", "--runs", "validation/mcore_moe_report.yaml"]);
    assert_eq!(moe.code, 0, "{}", moe.stderr);
    assert!(
        moe.stdout
            .contains("tok/s error % (+ = tpsim faster; step-time tables: - = faster)"),
        "{}",
        moe.stdout
    );
    let readme = std::fs::read_to_string("README.md").unwrap();
    assert!(
        readme.contains("The error here is\non step time, so faster is negative; the current-stack tables below compare tokens/s, where faster is positive"),
        "README's accuracy section"
    );
}

fn sweep(format: &str) -> Run {
    run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--axis",
        "gpu",
        "--values",
        "h100-sxm-80g,h800-sxm-80g",
        "--format",
        format,
    ])
}

/// `sweep`'s ranges rest on different runs from point to point (a GPU with too few runs of its own
/// takes the pooled band), which only its text said: its JSON rows carry `plan`'s
/// `time.step_s_range_basis`, and its CSV the same text in a column of that name.
#[test]
fn sweep_json_and_csv_say_what_each_range_rests_on() {
    let r = sweep("json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let mut bases = Vec::new();
    for (row, gpu) in rows.iter().zip(["h100-sxm-80g", "h800-sxm-80g"]) {
        let basis = row["time"]["step_s_range_basis"]
            .as_str()
            .unwrap_or_else(|| panic!("no basis: {row}"))
            .to_string();
        // `plan` on the same point says the same basis for its best plan.
        let plan = json(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--gpu",
            gpu,
            "--format",
            "json",
        ]);
        assert_eq!(
            plan["plans"][0]["time"]["step_s_range_basis"], basis,
            "{gpu}"
        );
        bases.push(basis);
    }
    assert_ne!(
        bases[0], bases[1],
        "the two GPUs' ranges rest on different runs"
    );
    let r = sweep("csv");
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Read as a CSV reader reads it: the basis cell is the JSON's text, its commas quoted
    // (review 27; they were written as semicolons).
    let records = csv_records(&r.stdout);
    let header = &records[0];
    let column = header
        .iter()
        .position(|h| h == "time.step_s_range_basis")
        .unwrap_or_else(|| panic!("no basis column: {header:?}"));
    assert_eq!(records.len(), 1 + bases.len(), "{}", r.stdout);
    for (cells, basis) in records[1..].iter().zip(&bases) {
        assert_eq!(cells.len(), header.len(), "{cells:?}");
        assert_eq!(&cells[column], basis, "{cells:?}");
    }
}
