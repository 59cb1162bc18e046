//! End-to-end tests of the `tpsim` binary: exit codes, the JSON/YAML contract, saved plans, and
//! one-line errors for bad input.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Runs `tpsim ARGS` in the crate root; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("tpsim")
        .expect("the tpsim binary is built")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("tpsim runs");
    (
        out.status
            .code()
            .expect("tpsim exited normally, not by a signal"),
        String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    )
}

/// Runs a command that must print JSON; returns (exit code, parsed stdout).
fn run_json(args: &[&str]) -> (i32, Value) {
    let (code, stdout, stderr) = run(args);
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}):\n{stdout}\n{stderr}"));
    (code, json)
}

fn f(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("expected a number, got {v}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned integer, got {v}"))
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

/// A fresh folder under the system temp dir, unique to this process and test.
fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpsim-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Bad input: exit 2 and exactly one stderr line `error: ...` containing every needle, no panic.
fn assert_bad_input(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: exit code; stderr:\n{stderr}");
    assert!(
        stdout.trim().is_empty(),
        "{args:?}: bad input printed a report:\n{stdout}"
    );
    let message = stderr.trim_end();
    assert_eq!(
        message.lines().count(),
        1,
        "{args:?}: stderr is not one line:\n{stderr}"
    );
    assert!(
        message.starts_with("error:"),
        "{args:?}: stderr does not start with 'error:': {message}"
    );
    for bad in ["panicked", "RUST_BACKTRACE"] {
        assert!(!message.contains(bad), "{args:?}: {message}");
    }
    for needle in needles {
        assert!(
            message.contains(needle),
            "{args:?}: stderr lacks {needle:?}: {message}"
        );
    }
}

/// clap usage errors: exit 2, stderr names the flag, no panic (multi-line usage is allowed).
fn assert_usage_error(args: &[&str], flag: &str) {
    let (code, _, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: exit code; stderr:\n{stderr}");
    assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
    assert!(
        stderr.contains(flag),
        "{args:?}: stderr lacks {flag}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

const PLAN_512B: &[&str] = &[
    "plan", "--params", "512B", "--nodes", "32", "--format", "json",
];

fn with_args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

fn check_plan_invariants(p: &Value, gpus: u64) {
    let mem = &p["memory"];
    let total = f(&mem["total_bytes"]);
    assert_eq!(mem["fits"], Value::Bool(true), "{p}");
    assert!(total <= f(&mem["capacity_bytes"]), "{p}");
    let parts: f64 = [
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "other_bytes",
    ]
    .iter()
    .map(|k| f(&mem[*k]))
    .sum();
    assert!(close(parts, total, 1e-6), "memory parts {parts} vs {total}");

    let t = &p["time"];
    let step = f(&t["step_s"]);
    assert!(step > 0.0, "{p}");
    let parts: f64 = [
        "compute_s",
        "tp_comm_exposed_s",
        "pp_comm_exposed_s",
        "dp_comm_exposed_s",
        "bubble_s",
        "optimizer_s",
    ]
    .iter()
    .map(|k| f(&t[*k]))
    .sum();
    assert!(
        close(parts, step, 1e-6),
        "time parts {parts} vs step {step}"
    );

    assert_eq!(u(&p["tp"]) * u(&p["pp"]) * u(&p["dp"]), gpus, "{p}");
    assert_eq!(
        u(&p["micro_batch"]) * u(&p["num_microbatches"]) * u(&p["dp"]),
        u(&p["global_batch"]),
        "{p}"
    );
    for group in ["tp", "pp", "dp"] {
        assert!(f(&p["comm"][group]["wire_bytes"]) >= 0.0, "{p}");
        assert!(f(&p["comm"][group]["time_s"]) >= 0.0, "{p}");
    }
    for key in [
        "vpp",
        "sequence_parallel",
        "recompute",
        "zero",
        "bubble_ratio",
        "bubble_share",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
    ] {
        assert!(!p[key].is_null(), "plan lacks {key}: {p}");
    }
    let mfu = f(&p["mfu"]);
    assert!(mfu > 0.0 && mfu < 1.0, "mfu {mfu}");
    assert!(f(&p["tokens_per_s"]) > 0.0);
}

#[test]
fn plan_512b_on_32_nodes_json_contract() {
    let (code, doc) = run_json(PLAN_512B);
    assert_eq!(code, 0, "{doc}");

    let m = &doc["model"];
    let params = f(&m["params"]);
    assert!(close(params, 512e9, 0.02), "params {params}");
    for key in [
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "ffn_hidden",
        "vocab",
    ] {
        assert!(u(&m[key]) > 0, "model.{key}: {m}");
    }
    assert_eq!(u(&m["seq_len"]), 2048);
    assert!(m["gated_mlp"].is_boolean(), "{m}");

    let c = &doc["cluster"];
    assert_eq!(c["gpu"], "h100-sxm-80g");
    assert_eq!(u(&c["nodes"]), 32);
    assert_eq!(u(&c["gpus_per_node"]), 8);
    assert!(f(&c["gpu_memory_bytes"]) > 70e9);
    assert!(f(&c["peak_flops"]) > 500e12);

    let s = &doc["search"];
    let rejected: u64 = s["infeasible_by_reason"]
        .as_object()
        .expect("infeasible_by_reason is a map")
        .values()
        .map(u)
        .sum();
    assert!(u(&s["feasible"]) >= 10, "{s}");
    assert_eq!(u(&s["feasible"]) + rejected, u(&s["candidates"]), "{s}");
    assert!(f(&s["elapsed_s"]) >= 0.0);

    let plans = doc["plans"].as_array().expect("plans is an array");
    assert_eq!(plans.len(), 10);
    for p in plans {
        check_plan_invariants(p, 256);
    }
    for pair in plans.windows(2) {
        assert!(
            f(&pair[0]["tokens_per_s"]) >= f(&pair[1]["tokens_per_s"]),
            "plans not sorted by tokens_per_s"
        );
    }
    let best = &plans[0];
    assert_eq!(u(&best["tp"]), 8, "TP should stay inside the node: {best}");
    assert_eq!(best["comm"]["tp"]["link"], "nvlink");
    assert_eq!(best["comm"]["pp"]["link"], "network");
}

#[test]
fn thread_count_does_not_change_the_plans() {
    let strip = |mut doc: Value| {
        let search = doc["search"].as_object_mut().expect("search stats");
        search.remove("elapsed_s");
        search.remove("threads");
        doc
    };
    let (c1, one) = run_json(&with_args(PLAN_512B, &["--threads", "1"]));
    let (c2, two) = run_json(&with_args(PLAN_512B, &["--threads", "2"]));
    assert_eq!((c1, c2), (0, 0));
    assert_eq!(one["search"]["threads"], 1);
    assert_eq!(two["search"]["threads"], 2);
    let (one, two) = (strip(one), strip(two));
    assert_eq!(one["plans"].as_array().map(Vec::len), Some(10));
    assert_eq!(one["plans"], two["plans"]);
    assert_eq!(one, two);
}

#[test]
fn yaml_output_matches_json() {
    let (code, json) = run_json(PLAN_512B);
    assert_eq!(code, 0);
    let (code, yaml, stderr) = run(&[
        "plan", "--params", "512B", "--nodes", "32", "--format", "yaml",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let yaml: Value = yaml_serde::from_str(&yaml).expect("--format yaml parses");
    let (j, y) = (&json["plans"][0], &yaml["plans"][0]);
    for key in [
        "tp",
        "pp",
        "dp",
        "vpp",
        "micro_batch",
        "num_microbatches",
        "sequence_parallel",
        "recompute",
        "zero",
    ] {
        assert_eq!(j[key], y[key], "best plan {key} differs");
    }
    assert!(close(
        f(&j["time"]["step_s"]),
        f(&y["time"]["step_s"]),
        1e-12
    ));
    assert!(close(
        f(&j["memory"]["total_bytes"]),
        f(&y["memory"]["total_bytes"]),
        1e-12
    ));
    assert_eq!(
        json["plans"].as_array().map(Vec::len),
        yaml["plans"].as_array().map(Vec::len)
    );
}

#[test]
fn eval_seed_plan_file() {
    let (code, doc) = run_json(&[
        "eval",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{doc}");
    let plans = doc["plans"].as_array().expect("plans");
    assert_eq!(plans.len(), 1);
    let p = &plans[0];
    assert_eq!((u(&p["tp"]), u(&p["pp"]), u(&p["dp"])), (8, 16, 2));
    check_plan_invariants(p, 256);
    assert!(doc.get("search").is_none(), "eval runs no search: {doc}");
}

#[test]
fn eval_that_does_not_fit_exits_1_with_breakdown() {
    let args = [
        "eval",
        "--model",
        "gpt3-175b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
    ];
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.contains("DOES NOT FIT"), "{stdout}");
    for part in ["weights", "optimizer", "activations", "time per step"] {
        assert!(stdout.contains(part), "breakdown lacks {part}:\n{stdout}");
    }

    let (code, doc) = run_json(&with_args(&args, &["--format", "json"]));
    assert_eq!(code, 1);
    let mem = &doc["plans"][0]["memory"];
    assert_eq!(mem["fits"], false);
    assert!(f(&mem["total_bytes"]) > f(&mem["capacity_bytes"]), "{mem}");
}

#[test]
fn plan_where_nothing_fits_reports_closest_miss() {
    let (code, stdout, stderr) = run(&["plan", "--model", "gpt3-175b", "--nodes", "1"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("closest"), "{stderr}");
    assert!(stderr.contains("misses by"), "{stderr}");
    assert!(
        !stderr.contains("error:"),
        "valid input is not an error: {stderr}"
    );
    assert!(stdout.contains("0 feasible"), "{stdout}");

    let (code, doc) = run_json(&[
        "plan",
        "--model",
        "gpt3-175b",
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1);
    assert_eq!(doc["plans"].as_array().map(Vec::len), Some(0));
    assert_eq!(u(&doc["search"]["feasible"]), 0);
}

#[test]
fn saved_plan_evaluates_to_the_same_result() {
    let dir = temp_dir("save");
    let file = dir.join("best.yaml");
    let file = file.to_str().expect("UTF-8 temp path");
    let (code, planned) = run_json(&with_args(PLAN_512B, &["--save", file]));
    assert_eq!(code, 0);
    assert!(std::path::Path::new(file).is_file(), "--save wrote nothing");

    let (code, evaluated) = run_json(&["eval", "--plan", file, "--format", "json"]);
    assert_eq!(code, 0, "{evaluated}");
    let (best, again) = (&planned["plans"][0], &evaluated["plans"][0]);
    for key in [
        "tp",
        "pp",
        "dp",
        "vpp",
        "micro_batch",
        "sequence_parallel",
        "recompute",
        "zero",
    ] {
        assert_eq!(best[key], again[key], "{key} differs after save/eval");
    }
    let (a, b) = (f(&best["time"]["step_s"]), f(&again["time"]["step_s"]));
    assert!(close(a, b, 1e-9), "step_s {a} vs {b}");
    assert_eq!(planned["model"]["params"], evaluated["model"]["params"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn accuracy_within_15_percent_and_fits() {
    let (code, doc) = run_json(&["accuracy", "--format", "json"]);
    assert_eq!(code, 0, "{doc}");
    let rows = doc.as_array().expect("accuracy prints an array of rows");
    assert!(rows.len() >= 11, "only {} rows", rows.len());
    for row in rows {
        let error = f(&row["error"]);
        assert!(error.abs() <= 0.15, "{}: error {error}", row["id"]);
        assert_eq!(row["fits"], true, "{}: predicted not to fit", row["id"]);
        assert!(f(&row["predicted_step_s"]) > 0.0);
    }
}

#[test]
fn bad_counts_and_cluster_sizes() {
    let plan = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["plan"];
        args.extend_from_slice(extra);
        args
    };
    assert_bad_input(
        &plan(&["--params", "abc", "--nodes", "32"]),
        &["--params abc has an unknown suffix"],
    );
    assert_bad_input(&plan(&["--params", "-5B", "--nodes", "32"]), &["-5B"]);
    assert_bad_input(
        &plan(&["--params", "0", "--nodes", "32"]),
        &["--params 0 must be greater than zero"],
    );
    assert_bad_input(&plan(&["--params", "512B", "--nodes", "0"]), &["--nodes 0"]);
    assert_bad_input(
        &plan(&["--params", "512B", "--nodes", "99999999"]),
        &["--nodes 99999999"],
    );
    assert_bad_input(
        &plan(&["--params", "512B", "--nodes", "32", "--global-batch", "0"]),
        &["--global-batch 0"],
    );
}

#[test]
fn bad_plan_degrees() {
    let eval = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec!["eval", "--model", "gpt3-175b"];
        args.extend_from_slice(extra);
        args
    };
    // tp must divide the 96 heads; the message lists the valid degrees that also divide the 128
    // GPUs with pp 1 (3 and 6 divide the heads but not the GPUs: hostile round 54).
    assert_bad_input(
        &eval(&["--nodes", "16", "--tp", "5", "--pp", "1"]),
        &["--tp 5", "96", "valid: 1, 2, 4, 8"],
    );
    assert_bad_input(
        &eval(&["--nodes", "128", "--tp", "8", "--pp", "200"]),
        &["--pp 200", "96 layers"],
    );
    // tp 8 x pp 2 on 128 GPUs leaves dp 8, which does not divide 100 sequences.
    assert_bad_input(
        &eval(&[
            "--nodes",
            "16",
            "--tp",
            "8",
            "--pp",
            "2",
            "--global-batch",
            "100",
        ]),
        &["--global-batch 100", "--dp 8"],
    );
    assert_bad_input(
        &eval(&["--nodes", "16", "--tp", "16", "--pp", "1"]),
        &["--tp 16", "--allow-cross-node-tp"],
    );
    assert_bad_input(
        &eval(&["--nodes", "16", "--tp", "8", "--pp", "16", "--zero", "7"]),
        &["--zero 7"],
    );
    assert_bad_input(
        &[
            "eval",
            "--model",
            "llama3-405b",
            "--nodes",
            "16",
            "--tp",
            "8",
            "--pp",
            "16",
        ],
        &["--pp 16", "126 layers", "--allow-uneven-pp"],
    );
}

#[test]
fn bad_names_and_spec_files() {
    assert_bad_input(
        &["plan", "--model", "nosuch", "--nodes", "4"],
        &["\"nosuch\"", "gpt3-175b"],
    );
    assert_bad_input(
        &[
            "plan", "--params", "512B", "--nodes", "4", "--gpu", "nosuch",
        ],
        &["\"nosuch\"", "h100-sxm-80g"],
    );

    let dir = temp_dir("specs");
    let malformed = dir.join("malformed.yaml");
    // Line 2 is a YAML syntax error: a mapping value inside a plain scalar.
    std::fs::write(&malformed, "name: broken\nlayers: 12: 3\nhidden: 768\n").unwrap();
    let malformed = malformed.to_str().unwrap();
    assert_bad_input(
        &["plan", "--model", malformed, "--nodes", "4"],
        &[malformed, "not allowed"],
    );
    let (_, _, stderr) = run(&["plan", "--model", malformed, "--nodes", "4"]);
    // file:line:column right after the path.
    let location = stderr
        .trim_end()
        .strip_prefix(&format!("error: {malformed}:"))
        .unwrap_or_else(|| panic!("no file: prefix: {stderr}"));
    let mut fields = location.splitn(3, ':');
    let line = fields.next().and_then(|l| l.parse::<u32>().ok());
    let column = fields.next().and_then(|c| c.parse::<u32>().ok());
    assert!(
        line == Some(2) && column.is_some_and(|c| c >= 1),
        "no file:line:column: {stderr}"
    );

    let unknown = dir.join("unknown-key.yaml");
    std::fs::write(
        &unknown,
        "name: typo\nlayers: 12\nhidden: 768\nheads: 12\nvocab: 50257\nseq_len: 1024\nffn_hiden: 3072\n",
    )
    .unwrap();
    let unknown = unknown.to_str().unwrap();
    assert_bad_input(
        &["plan", "--model", unknown, "--nodes", "4"],
        &[unknown, "ffn_hiden", ":7:"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clap_usage_errors_exit_2_and_name_the_flag() {
    // `plan` has no --zero (the search tries every stage).
    assert_usage_error(
        &["plan", "--params", "512B", "--nodes", "32", "--zero", "7"],
        "--zero",
    );
    assert_usage_error(
        &[
            "eval",
            "--model",
            "gpt3-175b",
            "--nodes",
            "16",
            "--tp",
            "8",
            "--recompute",
            "maybe",
        ],
        "--recompute",
    );
    assert_usage_error(&["plan", "--params", "512B", "--nodes", "many"], "--nodes");
}

#[test]
fn uneven_pipeline_for_llama3_405b() {
    let (code, doc) = run_json(&[
        "eval",
        "--model",
        "llama3-405b",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--pp",
        "16",
        "--allow-uneven-pp",
        "--format",
        "json",
    ]);
    assert!(code == 0 || code == 1, "exit {code}: {doc}");
    let p = &doc["plans"][0];
    let stages = &p["stages"];
    assert_eq!(u(&stages["first"]), 7, "{stages}");
    assert_eq!(u(&stages["middle_max"]), 8, "{stages}");
    assert_eq!(u(&stages["last"]), 7, "{stages}");
    assert_eq!(stages["even"], false);
    // The exit code agrees with the memory verdict.
    assert_eq!(code == 0, p["memory"]["fits"] == true, "{}", p["memory"]);
}

#[test]
fn uneven_pipeline_interleaves_when_units_split_evenly() {
    // Llama 3 405B: 126 layers + embedding + loss = 128 units = 16 stages x 8 chunks of 1.
    let base = [
        "eval",
        "--model",
        "llama3-405b",
        "--nodes",
        "1024",
        "--tp",
        "8",
        "--pp",
        "16",
        "--global-batch",
        "2048",
        "--allow-uneven-pp",
        "--format",
        "json",
    ];
    let (code, doc) = run_json(&with_args(&base, &["--vpp", "8"]));
    assert!(code == 0 || code == 1, "exit {code}: {doc}");
    let p = &doc["plans"][0];
    assert_eq!(u(&p["vpp"]), 8);
    let one = run_json(&with_args(&base, &["--vpp", "1"])).1;
    // Interleaving divides the bubble by v: (p-1)/(v·m).
    close(
        f(&p["bubble_ratio"]) * 8.0,
        f(&one["plans"][0]["bubble_ratio"]),
        1e-9,
    );
    assert!(f(&p["bubble_ratio"]) < f(&one["plans"][0]["bubble_ratio"]));
    // 128 units do not split into 16 x 3 chunks.
    assert_bad_input(
        &with_args(&base[..base.len() - 2], &["--vpp", "3"]),
        &["--vpp 3", "pp x vpp"],
    );
}

#[test]
fn saved_plan_keeps_attention_and_gradient_precision() {
    let dir = temp_dir("save_training_keys");
    let file = dir.join("plan.yaml");
    let file = file.to_str().unwrap();
    let scenario = [
        "--model",
        "gpt3-175b",
        "--nodes",
        "16",
        "--attention",
        "unfused",
        "--grad-dtype",
        "fp32",
    ];
    let (code, planned) = run_json(&with_args(
        &with_args(&["plan"], &scenario),
        &["--save", file, "--format", "json"],
    ));
    assert_eq!(code, 0);
    assert_eq!(planned["training"]["attention"], "unfused");
    let (code, evaluated) = run_json(&["eval", "--plan", file, "--format", "json"]);
    assert_eq!(code, 0);
    assert_eq!(evaluated["training"]["attention"], "unfused");
    assert_eq!(evaluated["training"]["grad_dtype"], "fp32");
    assert!(close(
        f(&evaluated["plans"][0]["time"]["step_s"]),
        f(&planned["plans"][0]["time"]["step_s"]),
        1e-9
    ));
    assert!(close(
        f(&evaluated["plans"][0]["memory"]["total_bytes"]),
        f(&planned["plans"][0]["memory"]["total_bytes"]),
        1e-9
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn output_write_failures_are_one_line_errors_and_a_closed_pipe_is_quiet() {
    // A full disk: exit 2 with one line, not a panic.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("Linux /dev/full");
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("tpsim"))
        .args(["eval", "--plan", "plans/seed-512b-32nodes.yaml"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: writing the output"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A reader that goes away (`| head -1`): exit quietly.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tpsim"))
        .args([
            "plan", "--params", "512B", "--nodes", "32", "--top", "10", "--format", "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn unwritable_report_dir_fails_before_any_output() {
    let (code, stdout, stderr) = run(&[
        "plan",
        "--params",
        "70B",
        "--nodes",
        "8",
        "--report",
        "/proc/tpsim-x",
    ]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty(), "printed before failing: {stdout}");
    assert!(
        stderr.starts_with("error: --report /proc/tpsim-x"),
        "{stderr}"
    );
}

#[test]
fn thread_count_and_empty_run_files_are_checked() {
    assert_bad_input(
        &[
            "plan",
            "--params",
            "70B",
            "--nodes",
            "8",
            "--threads",
            "100000",
        ],
        &["--threads 100000", "1024"],
    );
    let dir = temp_dir("empty_runs");
    let file = dir.join("runs.yaml");
    std::fs::write(&file, "[]\n").unwrap();
    assert_bad_input(
        &["accuracy", "--runs", file.to_str().unwrap()],
        &["no runs"],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The plan table on a 100-column terminal (a pseudo-terminal from util-linux `script`): one line
/// per plan, no line wider than the terminal; piped, the same command prints every column.
#[test]
fn the_plan_table_fits_a_narrow_terminal_and_stays_whole_in_a_pipe() {
    let bin = env!("CARGO_BIN_EXE_tpsim");
    let Ok(out) = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("stty cols 100; {bin} plan --params 70B --nodes 8 --top 3"),
            "/dev/null",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    let text = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .replace('\r', "");
    if !text.contains("cluster:") {
        // `script` exists but could not open a pseudo-terminal here (some sandboxes).
        eprintln!("skipped: `script` ran no terminal: {text}");
        return;
    }
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with('╞'))
        .skip(1)
        .take_while(|l| !l.starts_with('└'))
        .collect();
    assert_eq!(
        table.len(),
        3,
        "one line per plan on a 100-column terminal:\n{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.starts_with(['┌', '│', '╞', '└']))
            .all(|l| l.chars().count() <= 100),
        "{text}"
    );
    assert!(text.contains("left out to fit 100 columns: DP s"), "{text}");
    let (code, piped, _) = run(&["plan", "--params", "70B", "--nodes", "8", "--top", "3"]);
    assert_eq!(code, 0);
    assert!(
        piped.contains("┆ DP s │") && !piped.contains("left out"),
        "{piped}"
    );
}

/// The number after the last `--global-batch ` in `text`.
fn suggested_batch(text: &str) -> String {
    let at = text
        .rfind("--global-batch ")
        .unwrap_or_else(|| panic!("no suggestion in: {text}"));
    text[at + "--global-batch ".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

/// Without --global-batch, plan says which batch it used and why; with it, it says nothing.
#[test]
fn the_default_global_batch_is_stated_and_a_batch_too_small_for_the_cluster_is_flagged() {
    let (code, _, stderr) = run(&["plan", "--params", "7B", "--nodes", "2", "--top", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("note: --global-batch not given: 1536 sequences x 2048 tokens"),
        "{stderr}"
    );
    assert!(!stderr.contains("warning: --global-batch"), "{stderr}");
    let (_, _, stderr) = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--top",
        "1",
        "--global-batch",
        "256",
    ]);
    assert!(!stderr.contains("--global-batch not given"), "{stderr}");

    // 512 nodes and 1536 sequences: TP in a node and DP over the nodes gives every replica three
    // micro-batches and no pipeline, so no warning (Llama 3 405B trained 2 sequences per node).
    let (_, _, stderr) = run(&["plan", "--params", "7B", "--nodes", "512", "--top", "1"]);
    assert!(!stderr.contains("warning: --global-batch"), "{stderr}");
    // 1,024 nodes and 512 sequences without context parallelism: every split pipelines more
    // stages than it has micro-batches; the warning's suggestion plans cleanly.
    let small = [
        "plan", "--params", "7B", "--nodes", "1024", "--cp", "1", "--top", "1",
    ];
    let (_, _, stderr) = run(&[&small[..], &["--global-batch", "512"]].concat());
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("warning: --global-batch 512 is small for 1024 nodes"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let batch = suggested_batch(warning);
    let (code, _, stderr) = run(&[&small[..], &["--global-batch", &batch]].concat());
    assert_ne!(code, 2, "{stderr}");
    assert!(!stderr.contains("warning: --global-batch"), "{stderr}");
}

/// When no split divides the batch, the error names a batch that has one.
#[test]
fn no_split_names_a_global_batch_that_has_one() {
    let (code, _, stderr) = run(&["plan", "--params", "1T", "--nodes", "16384"]);
    assert_eq!(code, 2);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: no valid plan exists"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let batch = suggested_batch(error);
    let (code, stdout, stderr) = run(&[
        "plan",
        "--params",
        "1T",
        "--nodes",
        "16384",
        "--top",
        "1",
        "--global-batch",
        &batch,
    ]);
    assert_ne!(code, 2, "{stderr}");
    assert!(
        stdout.contains(&format!("training: {batch} sequences")),
        "{stdout}"
    );
}

/// `eval --plan`: the advice an error gives works, and plan flags override the file as the help
/// says.
#[test]
fn plan_flags_override_a_plan_file_and_the_advice_leads_somewhere() {
    let seed = "plans/seed-512b-32nodes.yaml";
    let (code, _, stderr) = run(&["eval", "--plan", seed, "--nodes", "64"]);
    assert_eq!(code, 2);
    // The dp is the file's, so the advice names its key (`e.g. dp: 4`): the file edited so.
    let at = stderr
        .rfind("e.g. dp: ")
        .unwrap_or_else(|| panic!("{stderr}"));
    let dp: String = stderr[at + 9..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let dir = temp_dir("advice");
    let edited = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(seed))
        .unwrap()
        .replacen("\n  dp: 2\n", &format!("\n  dp: {dp}\n"), 1);
    let plan = dir.join("p.yaml");
    std::fs::write(&plan, edited).unwrap();
    let (code, stdout, stderr) = run(&["eval", "--plan", plan.to_str().unwrap(), "--nodes", "64"]);
    assert_ne!(code, 2, "{stderr}");
    assert!(stdout.contains(&format!(" x dp {dp} ")), "{stdout}");
    // The flag over the file says the same.
    let (code, stdout, stderr) = run(&["eval", "--plan", seed, "--nodes", "64", "--dp", &dp]);
    assert_ne!(code, 2, "{stderr}");
    assert!(stdout.contains(&format!(" x dp {dp} ")), "{stdout}");

    let (code, stdout, stderr) = run(&["eval", "--plan", seed, "--recompute", "full"]);
    assert_ne!(code, 2, "{stderr}");
    let plan_line = stdout.lines().find(|l| l.starts_with("plan:")).unwrap();
    assert!(plan_line.contains("recompute full"), "{plan_line}");

    let (_, help, _) = run(&["eval", "--help"]);
    assert!(help.contains("override its values"), "{help}");
}

/// Help names every bundled GPU, and says --calibration is used instead of --gpu, which is what
/// passing both does (a usage error).
#[test]
fn gpu_and_calibration_help_match_what_the_flags_do() {
    let (_, help, _) = run(&["plan", "--help"]);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for (name, _) in tpsim::specs::BUNDLED_GPUS {
        assert!(help.contains(name), "--gpu help omits {name}");
    }
    assert!(help.contains("used instead of --gpu"), "{help}");
    let (code, _, stderr) = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--gpu",
        "a100-sxm-80g",
        "--calibration",
        "cpu.yaml",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// The rough messages of issue 10 item 9, each as a new user met it.
#[test]
fn messages_read_cleanly() {
    // "1 node", not "1 nodes".
    let (_, stdout, _) = run(&["plan", "--params", "7B", "--nodes", "1", "--top", "1"]);
    assert!(stdout.contains("cluster: 1 node x 8 "), "{stdout}");

    // pp 1: no per-stage split and no PP link to report.
    let (_, stdout, _) = run(&[
        "eval", "--params", "7B", "--nodes", "1", "--tp", "8", "--pp", "1",
    ]);
    assert!(!stdout.contains("layers per stage: first"), "{stdout}");
    assert!(
        stdout.contains("all 32 on one stage") || stdout.contains("on one stage (no pipeline)"),
        "{stdout}"
    );
    let pp_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("PP "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(!pp_line.contains("NVLink"), "{pp_line}");

    // A missing plan file is a path problem; plans have no bundled names.
    let (code, _, stderr) = run(&["eval", "--plan", "plans/no-such-plan.yaml"]);
    assert_eq!(code, 2);
    assert!(!stderr.contains("bundled"), "{stderr}");
    assert!(
        stderr.contains("plans/no-such-plan.yaml: no such file"),
        "{stderr}"
    );

    // A missing config file: the OS error once, not twice.
    let (code, _, stderr) = run(&[
        "plan",
        "--hf-config",
        "models/hf/no-such.json",
        "--nodes",
        "1",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr.matches("no such file").count() + stderr.matches("No such file").count(),
        1,
        "{stderr}"
    );

    // dp 8 does not divide 1001: no "valid ...: none", and the suggested batch works.
    let (code, _, stderr) = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "1001",
    ]);
    assert_eq!(code, 2);
    assert!(!stderr.contains("none"), "{stderr}");
    let batch = suggested_batch(&stderr);
    let (code, _, stderr) = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        &batch,
    ]);
    assert_ne!(code, 2, "{stderr}");

    // JSON: whole bytes for the GPU's memory, no negative zeros.
    let (_, stdout, _) = run(&[
        "plan", "--params", "7B", "--nodes", "1", "--top", "3", "--format", "json",
    ]);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        json["cluster"]["gpu_memory_bytes"].is_u64(),
        "{}",
        json["cluster"]
    );
    assert!(!stdout.contains("-0.0"), "negative zero in the JSON");
}

/// Routing imbalance slows an MoE step (the busiest expert sets the pace); a capacity factor caps
/// it by dropping the tokens over capacity; a capacity below the balanced share is refused.
#[test]
fn moe_imbalance_and_capacity_factor_move_the_step() {
    let step = |extra: &[&str]| -> f64 {
        let mut args = vec![
            "eval",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "2",
            "--seq-len",
            "4096",
            "--global-batch",
            "256",
            "--tp",
            "2",
            "--ep",
            "8",
            "--micro-batch",
            "1",
            "--sequence-parallel",
            "--zero",
            "1",
            "--format",
            "json",
        ];
        args.extend(extra);
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        json["plans"][0]["time"]["step_s"].as_f64().unwrap()
    };
    let balanced = step(&[]);
    let skewed = step(&["--moe-imbalance", "1.5"]);
    let capped = step(&["--moe-imbalance", "1.5", "--moe-capacity-factor", "1.2"]);
    let same_cap = step(&["--moe-imbalance", "1.2"]);
    assert!(
        balanced < capped && capped < skewed,
        "{balanced} {capped} {skewed}"
    );
    assert_eq!(capped, same_cap);
    let (code, _, stderr) = run(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--ep",
        "8",
        "--moe-capacity-factor",
        "0.5",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--moe-capacity-factor 0.5"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Context parallelism's own rules: a cp that with tp and pp does not divide the cluster names all
/// three; a cp that does not split the sequence into 2·cp chunks names the sequence and the valid
/// values; FP4 on a GPU without it names the GPU.
#[test]
fn context_parallel_and_precision_errors_name_the_rule() {
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--tp",
                "2",
                "--cp",
                "3",
            ],
            &["--cp 3", "tp x cp x pp"],
        ),
        (
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--tp",
                "2",
                "--cp",
                "4",
                "--seq-len",
                "8196",
            ],
            &["--cp 4", "8196", "valid"],
        ),
        (
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--precision",
                "nvfp4",
            ],
            &["nvfp4", "h100-sxm-80g"],
        ),
    ];
    for (args, needles) in cases {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{args:?}: {stderr} lacks {needle}");
        }
    }
}

/// A parallelism the plan does not use has no link in the JSON (pp 1 once said its PP traffic
/// ran "on NVLink").
#[test]
fn an_unused_group_has_no_link() {
    let (code, stdout, stderr) = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--format",
        "json",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let comm = &json["plans"][0]["comm"];
    assert!(comm["pp"]["link"].is_null(), "{comm}");
    assert!(comm["cp"]["link"].is_null(), "{comm}");
    assert_eq!(comm["tp"]["link"], "nvlink");
}

/// `plan --reshard-after-forward BOOL` pins FSDP2's resharding like the other pinned settings.
#[test]
fn plan_pins_resharding_after_forward() {
    for (flag, want) in [("false", false), ("true", true)] {
        let (code, doc) = run_json(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--zero",
            "3",
            "--reshard-after-forward",
            flag,
            "--framework",
            "torchtitan",
            "--format",
            "json",
        ]);
        assert_eq!(code, 0);
        let plans = doc["plans"].as_array().unwrap();
        assert!(!plans.is_empty());
        for p in plans {
            assert_eq!(p["zero"], 3);
            assert_eq!(p["reshard_after_forward"], want, "{flag}");
        }
    }
}

/// A pinned --vpp deeper than the search's own range of uneven interleavings is searched when the
/// layers split that way (Qwen3-235B's 94 layers at pp 4 x vpp 12: 96 units of layers, embedding
/// and loss in 48 chunks of 2, as the Megatron-Core MoE report runs it). `plan` said "no valid
/// plan exists" while `eval` took the same plan.
#[test]
fn plan_searches_a_pinned_vpp_past_its_uneven_range() {
    let args = [
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--tp",
        "1",
        "--pp",
        "4",
        "--vpp",
        "12",
        "--ep",
        "32",
        "--micro-batch",
        "1",
        "--global-batch",
        "8192",
        "--allow-uneven-pp",
        "--format",
        "json",
    ];
    let (code, doc) = run_json(&[&["plan"], &args[..]].concat());
    assert_eq!(code, 0, "{doc}");
    let best = &doc["plans"][0];
    assert_eq!(
        (best["pp"].as_u64(), best["vpp"].as_u64()),
        (Some(4), Some(12))
    );
    // The same pins through `eval` evaluate the same layout.
    let (code, evaluated) = run_json(&[&["eval"], &args[..]].concat());
    assert_eq!(code, 0, "{evaluated}");
    assert_eq!(evaluated["plans"][0]["vpp"], 12);
}

/// Resharding after forward is a ZeRO-3 setting: asking for it without ZeRO-3 is an error, not a
/// silently ignored flag.
#[test]
fn resharding_without_zero_3_is_refused() {
    for command in ["eval", "plan"] {
        let mut args = vec![command, "--model", "llama3-8b", "--nodes", "2"];
        if command == "eval" {
            args.extend(["--tp", "1", "--pp", "1"]);
        }
        args.extend(["--zero", "1", "--reshard-after-forward", "false"]);
        assert_bad_input(&args, &["--reshard-after-forward", "--zero 3", "ZeRO-1"]);
    }
}

/// A saved plan keeps the framework (and overlap) it was evaluated with, so `eval --plan` gives
/// the numbers `plan` printed for it: torchtitan's selective recompute stays torchtitan's.
#[test]
fn a_saved_plan_keeps_its_framework() {
    let dir = std::env::temp_dir().join(format!("tpsim-framework-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.yaml");
    let path = path.to_str().unwrap();
    let (code, doc) = run_json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--framework",
        "torchtitan",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--zero",
        "3",
        "--recompute",
        "selective",
        "--save",
        path,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let best = &doc["plans"][0];
    let (code, eval) = run_json(&["eval", "--plan", path, "--format", "json"]);
    assert_eq!(code, 0);
    assert_eq!(eval["training"]["framework"], "torchtitan");
    let evaluated = &eval["plans"][0];
    assert!(best["memory"]["total_bytes"].as_f64().is_some());
    assert_eq!(
        evaluated["memory"]["total_bytes"],
        best["memory"]["total_bytes"]
    );
    assert_eq!(evaluated["time"]["step_s"], best["time"]["step_s"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--torch-compile` says how torchtitan runs its element-wise kernels; under a framework that ships
/// fused kernels it is refused, not ignored. Under torchtitan, eager (its default) is slower than
/// compiled, and the header says which was evaluated.
#[test]
fn torch_compile_is_torchtitans_setting() {
    let base = [
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-96g-500w",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--zero",
        "3",
        "--micro-batch",
        "2",
        "--seq-len",
        "8192",
        "--global-batch",
        "16",
        "--recompute",
        "selective",
    ];
    let mut megatron = base.to_vec();
    megatron.push("--torch-compile");
    assert_bad_input(&megatron, &["--torch-compile", "--framework torchtitan"]);
    let mut not_a_bool = base.to_vec();
    not_a_bool.extend(["--framework", "torchtitan", "--torch-compile=maybe"]);
    assert_bad_input(&not_a_bool, &["--torch-compile", "maybe"]);
    let step = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(["--framework", "torchtitan", "--format", "json"]);
        args.extend(extra);
        let (code, doc) = run_json(&args);
        assert_eq!(code, 0);
        (
            doc["training"]["kernel_fusion"]
                .as_str()
                .unwrap()
                .to_string(),
            doc["plans"][0]["time"]["step_s"].as_f64().unwrap(),
        )
    };
    let (eager_kind, eager_s) = step(&[]);
    let (compiled_kind, compiled_s) = step(&["--torch-compile"]);
    assert_eq!(
        (eager_kind.as_str(), compiled_kind.as_str()),
        ("eager", "fused")
    );
    assert!(
        eager_s > compiled_s,
        "eager {eager_s} s, compiled {compiled_s} s"
    );
}

/// A saved torchtitan plan keeps its compile setting when `--framework torchtitan` is named again,
/// and a plan file cannot put eager kernels under a framework that ships fused ones.
#[test]
fn a_saved_compile_setting_is_kept_and_checked() {
    let dir = std::env::temp_dir().join(format!("tpsim-compile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("compiled.yaml");
    let path = path.to_str().unwrap();
    let (code, _) = run_json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-96g-500w",
        "--framework",
        "torchtitan",
        "--torch-compile",
        "--nodes",
        "1",
        "--global-batch",
        "16",
        "--save",
        path,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let step = |extra: &[&str]| {
        let mut args = vec!["eval", "--plan", path, "--format", "json"];
        args.extend(extra);
        let (code, doc) = run_json(&args);
        assert_eq!(code, 0, "{extra:?}");
        assert_eq!(doc["training"]["kernel_fusion"], "fused", "{extra:?}");
        doc["plans"][0]["time"]["step_s"].as_f64().unwrap()
    };
    assert_eq!(step(&[]), step(&["--framework", "torchtitan"]));
    let text = std::fs::read_to_string(path).unwrap();
    let megatron_eager = dir.join("megatron-eager.yaml");
    std::fs::write(
        &megatron_eager,
        text.replace("framework: torchtitan", "framework: megatron-core")
            .replace("kernel_fusion: fused", "kernel_fusion: eager"),
    )
    .unwrap();
    assert_bad_input(
        &["eval", "--plan", megatron_eager.to_str().unwrap()],
        &["kernel_fusion: eager", "framework: torchtitan"],
    );
    // Two plans run with different kernels are not a comparison of plans.
    let eager = dir.join("eager.yaml");
    std::fs::write(
        &eager,
        text.replace("kernel_fusion: fused", "kernel_fusion: eager"),
    )
    .unwrap();
    assert_bad_input(
        &["compare", "--plan", path, "--plan", eager.to_str().unwrap()],
        &["kernels: compiled against eager", "--torch-compile"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The degrees a one-cell plan label names (`tp4 cp2 pp1 dp8 ep8 etp1 vpp1 ...`), by key.
fn label_degree(label: &str, key: &str) -> Option<u64> {
    label
        .split_whitespace()
        .find_map(|token| token.strip_prefix(key)?.parse().ok())
}

/// The cells of the table line that starts with `first` (comfy-table's `│ a ┆ b ┆ c │`).
fn table_cells(stdout: &str, first: &str) -> Vec<String> {
    let line = stdout
        .lines()
        .find(|l| {
            l.trim_start_matches('│')
                .split('┆')
                .next()
                .is_some_and(|c| c.trim() == first)
        })
        .unwrap_or_else(|| panic!("no table row {first:?}:\n{stdout}"));
    line.trim_matches(|c| c == '│' || c == ' ')
        .split('┆')
        .map(|c| c.trim().to_string())
        .collect()
}

/// `compare` names every degree of both plans (they multiply to the GPU count) and the precision,
/// and its verdict names the CP degree when CP traffic decides: the review found
/// `tp4 pp1 dp8 vpp1 mb1 sp recompute=none zero1` for a cp 2 × ep 8 plan on 64 GPUs.
#[test]
fn compare_labels_carry_cp_ep_etp_and_the_precision() {
    let scenario = [
        "compare",
        "--model",
        "mixtral-8x7b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--precision",
        "fp8",
        // Megatron-Core's default selective recompute (nothing with fused attention), so that the
        // two best plans are the CP pair this test is about.
        "--recompute-modules",
        "core_attn",
    ];
    let (code, json) = run_json(&with_args(&scenario, &["--format", "json"]));
    assert_eq!(code, 0);
    let (code, stdout, stderr) = run(&scenario);
    assert_eq!(code, 0, "{stderr}");
    let cells = table_cells(&stdout, "plan");
    for (label, side) in [(&cells[3], "a"), (&cells[4], "b")] {
        let plan = &json[side];
        for key in ["tp", "cp", "pp", "dp", "ep", "etp"] {
            assert_eq!(
                label_degree(label, key),
                Some(u(&plan[key])),
                "{key} of plan {side}: {label}"
            );
        }
        let product: u64 = ["tp", "cp", "pp", "dp"]
            .iter()
            .map(|k| label_degree(label, k).unwrap())
            .product();
        assert_eq!(product, 64, "{label}");
        assert_eq!(plan["precision"], "fp8");
        assert!(label.ends_with(" fp8"), "{label}");
    }
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("MFU % is model FLOPs over the bf16 peak ("),
        "{stdout}"
    );
    let verdict = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" faster than "))
        .unwrap_or_else(|| panic!("no verdict:\n{stdout}"));
    let (_, after) = verdict
        .split_once("CP comm")
        .unwrap_or_else(|| panic!("the test needs a verdict that weighs CP comm: {verdict}"));
    let cause = after.split(')').next().unwrap();
    assert!(
        cause.contains("cp "),
        "the CP degree is not named: {verdict}"
    );
}

/// `sweep` rows carry cp, ep, etp and the precision in the table, JSON and CSV (JSON names as
/// `plan --format json`), and honour --precision (it was dropped: bf16 plans only).
#[test]
fn sweep_rows_carry_cp_ep_etp_and_the_precision() {
    let scenario = [
        "sweep",
        "--model",
        "mixtral-8x7b",
        "--gpu",
        "h100-sxm-80g",
        "--axis",
        "nodes",
        "--values",
        "4,8",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
    ];
    let (code, json) = run_json(&with_args(&scenario, &["--format", "json"]));
    assert_eq!(code, 0);
    let rows = json["rows"].as_array().unwrap();
    let (code, csv, stderr) = run(&with_args(&scenario, &["--format", "csv"]));
    assert_eq!(code, 0, "{stderr}");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let (code, table, stderr) = run(&scenario);
    assert_eq!(code, 0, "{stderr}");
    for (i, row) in rows.iter().enumerate() {
        let degrees: u64 = ["tp", "cp", "pp", "dp"]
            .iter()
            .map(|k| u(&row[k]))
            .product();
        assert_eq!(degrees, u(&row["gpus"]), "{row}");
        assert_eq!(row["precision"], "fp8", "{row}");
        let cells: Vec<&str> = csv.lines().nth(i + 1).unwrap().split(',').collect();
        for key in ["cp", "ep", "etp", "precision"] {
            let column = header.iter().position(|h| *h == key);
            let column = column.unwrap_or_else(|| panic!("CSV has no {key} column: {header:?}"));
            let want = match &row[key] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            assert_eq!(cells[column], want, "{key} of row {i}");
        }
        let value = row["value"].as_str().unwrap();
        let label = &table_cells(&table, value)[3];
        // A model with experts shows ep and etp; cp shows where a row uses it.
        for key in ["tp", "pp", "dp", "ep", "etp"] {
            assert_eq!(label_degree(label, key), Some(u(&row[key])), "{label}");
        }
        if rows.iter().any(|r| u(&r["cp"]) > 1) {
            assert_eq!(label_degree(label, "cp"), Some(u(&row["cp"])), "{label}");
        }
        assert!(label.ends_with(" fp8"), "{label}");
    }
}

/// The "model: A against B" of two plan files of different models counts each model's
/// parameters as `plan` printed them (was: B's learned positions at A's sequence length).
#[test]
fn compare_of_different_models_prints_each_models_own_parameter_count() {
    let dir = temp_dir("compare-params");
    let mut counts = Vec::new();
    let mut paths = Vec::new();
    for (name, model) in [("a", ["--model", "llama3-70b"]), ("b", ["--params", "70B"])] {
        let path = dir
            .join(format!("{name}.yaml"))
            .to_str()
            .unwrap()
            .to_string();
        let mut args = vec!["plan"];
        args.extend(model);
        args.extend([
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "8",
            "--global-batch",
            "512",
            "--save",
            &path,
        ]);
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 0, "{stderr}");
        // "model NAME (...): 70.6B params, ..."
        let first = stdout.lines().next().unwrap();
        let count = first
            .split_once("): ")
            .and_then(|(_, rest)| rest.split_once(" params"))
            .map(|(count, _)| count.to_string())
            .unwrap_or_else(|| panic!("no parameter count in {first}"));
        counts.push(count);
        paths.push(path);
    }
    let (code, stdout, stderr) = run(&["compare", "--plan", &paths[0], "--plan", &paths[1]]);
    assert_eq!(code, 2, "{stdout}");
    let want = format!("model: {} params", counts[0]);
    assert!(stderr.contains(&want), "{want} not in {stderr}");
    let want = format!("against {} params", counts[1]);
    assert!(stderr.contains(&want), "{want} not in {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A table with a low-precision plan says, under it, that MFU is over the bf16 peak (its number
/// from the cluster), and eval's throughput line says so too; a bf16 table reads as before.
#[test]
fn low_precision_mfu_says_it_is_over_the_bf16_peak() {
    let dir = temp_dir("mfu-note");
    let saved = dir.join("nvfp4.yaml").to_str().unwrap().to_string();
    let scenario = [
        "plan",
        "--model",
        "llama3-405b",
        "--gpu",
        "b200-sxm-180g",
        "--framework",
        "torchtitan",
        "--nodes",
        "16",
        "--global-batch",
        "1024",
    ];
    let (code, json) = run_json(&with_args(
        &scenario,
        &["--precision", "nvfp4", "--format", "json"],
    ));
    assert_eq!(code, 0);
    let peak = f(&json["cluster"]["peak_flops"]) / 1e12;
    let (code, stdout, stderr) = run(&with_args(
        &scenario,
        &["--precision", "nvfp4", "--save", &saved],
    ));
    assert_eq!(code, 0, "{stderr}");
    let want = format!("MFU % is model FLOPs over the bf16 peak ({peak:.0} TFLOP/s per GPU)");
    let note = stdout
        .lines()
        .find(|l| l.starts_with(&want))
        .unwrap_or_else(|| panic!("no {want:?} line:\n{stdout}"));
    assert!(note.contains("nvfp4"), "{note}");
    let (code, stdout, _) = run(&scenario);
    assert_eq!(code, 0);
    assert!(!stdout.contains("bf16 peak"), "{stdout}");
    let (code, stdout, stderr) = run(&["eval", "--plan", &saved]);
    assert!(code == 0 || code == 1, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("throughput:"))
        .unwrap();
    assert!(line.contains("% of the bf16 peak"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// "why the best plan" names the recompute as the table's column does ("full 1/7" for block
/// recompute of some layers, not "full").
#[test]
fn why_the_best_plan_names_recompute_as_the_table() {
    let (code, stdout, stderr) = run(&[
        "plan",
        "--model",
        "llama3-405b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "32",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "512",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let header = table_cells(&stdout, "#");
    let column = header.iter().position(|h| h == "recomp").unwrap();
    let shown = table_cells(&stdout, "1")[column].clone();
    assert!(
        shown.starts_with("full ") && shown.contains('/'),
        "the test needs a best plan with block recompute of some layers: {shown}"
    );
    let why = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("memory:"))
        .unwrap();
    let said = why
        .split_once("; recompute ")
        .and_then(|(_, rest)| rest.split_once(", micro-batch"))
        .map(|(r, _)| r)
        .unwrap_or_else(|| panic!("{why}"));
    assert_eq!(said, shown, "{why}");
}

/// The model line of an MoE model says what routes where and how many parameters a token uses,
/// beside the total (issue 9 item 1: total and active parameters printed).
#[test]
fn moe_model_line_names_experts_and_active_parameters() {
    let (code, stdout, stderr) = run(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "64",
    ]);
    assert_ne!(code, 2, "{stderr}");
    let line = stdout.lines().next().unwrap();
    assert!(
        line.contains("46.7B params") && line.contains("8 experts (top-2, ffn 14336)"),
        "{line}"
    );
    assert!(line.contains("12.9B active"), "{line}");
}

/// `--etp` (Megatron's `--expert-tensor-parallel-size`) defaults to the tensor-parallel size as in
/// Megatron-Core, so the same arguments typed as flags and pasted as a launch line give the same
/// plan (a review found etp 1 from flags and etp 2 from the line).
#[test]
fn expert_tensor_parallelism_defaults_to_tp_as_in_megatron() {
    let flags = [
        "--tensor-model-parallel-size",
        "2",
        "--pipeline-model-parallel-size",
        "1",
        "--expert-model-parallel-size",
        "8",
        "--micro-batch-size",
        "1",
        "--global-batch-size",
        "256",
        "--seq-length",
        "4096",
    ];
    let mut args = vec!["eval", "--model", "mixtral-8x7b", "--nodes", "4"];
    args.extend(flags);
    let (code, stdout, stderr) = run(&args);
    assert_ne!(code, 2, "{stderr}");
    let plan_line = stdout.lines().find(|l| l.starts_with("plan:")).unwrap();
    assert!(plan_line.contains("ep 8 x etp 2"), "{plan_line}");
}

/// A flag another command takes, given to one that does not (`report FILE --format json`), is
/// named as the other commands' flag, not matched to a look-alike of this command's
/// (`--normalization`); a misspelling of this command's own flag keeps clap's suggestion.
#[test]
fn a_flag_of_another_command_is_named_as_theirs() {
    assert_bad_input(
        &[
            "report",
            "plans/seed-512b-32nodes.yaml",
            "--out",
            "target/unused-report",
            "--format",
            "json",
        ],
        &[
            "report takes no --format",
            "tpsim plan",
            "tpsim report --help",
        ],
    );
    assert_bad_input(
        &[
            "sweep", "--params", "7B", "--nodes", "1", "--axis", "nodes", "--values", "1,2",
            "--save", "x.yaml",
        ],
        &["sweep takes no --save", "tpsim plan"],
    );
    let (code, _, stderr) = run(&["plan", "--params", "7B", "--nodes", "1", "--formt", "json"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("'--format'"), "{stderr}");
}

/// A count with no GPT-style shape is quoted as counts are (7, 300M), not in Rust's exponent form
/// (`7.000e0`).
#[test]
fn a_count_without_a_shape_is_quoted_as_typed() {
    for (params, words) in [
        ("7", "shape of 7 parameters"),
        ("300M", "shape of 300M parameters"),
    ] {
        assert_bad_input(&["plan", "--params", params, "--nodes", "1"], &[words]);
    }
}

/// A plan file's degrees against a cluster the user's --nodes resized: the message says the
/// cluster came from --nodes over the file's nodes: and offers dropping the flag.
#[test]
fn a_cluster_resized_by_a_flag_is_named_with_it() {
    for command in [
        vec![
            "eval",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--nodes",
            "1",
        ],
        vec![
            "report",
            "plans/seed-512b-32nodes.yaml",
            "--out",
            "target/unused-report-nodes",
            "--nodes",
            "1",
        ],
    ] {
        assert_bad_input(
            &command,
            &[
                "but the cluster has 8 (set by --nodes over the file's nodes: 32)",
                "or drop --nodes to plan on the file's cluster",
            ],
        );
    }
}

/// `compare` of two plan files on a cluster --nodes resized says so too, and a plan file whose
/// lines end in a lone CR (old Mac line ends) is read, not called empty.
#[test]
fn compare_names_a_resized_cluster_and_cr_files_are_read() {
    assert_bad_input(
        &[
            "compare",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--nodes",
            "1",
        ],
        &[
            "(set by --nodes over the file's nodes: 32)",
            "or drop --nodes",
        ],
    );
    let dir = temp_dir("cr-plan");
    let text = std::fs::read_to_string("plans/seed-512b-32nodes.yaml").unwrap();
    let cr = dir.join("cr.yaml");
    std::fs::write(&cr, text.replace('\n', "\r")).unwrap();
    let (code, _, stderr) = run(&["eval", "--plan", cr.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
}

/// A Megatron-style alias of a plan degree given to a command that takes none is named as the
/// degree it is, not matched to a look-alike (`--micro-batch-size` was offered
/// `--local-batch-size`).
#[test]
fn an_alias_of_a_degree_is_named_as_the_degree() {
    assert_bad_input(
        &[
            "report",
            "plans/seed-512b-32nodes.yaml",
            "--out",
            "target/unused-report-alias",
            "--micro-batch-size",
            "2",
        ],
        &[
            "report takes no --micro-batch-size (--micro-batch)",
            "micro_batch: line",
        ],
    );
    assert_bad_input(
        &[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "nodes",
            "--values",
            "1,2",
            "--tensor-model-parallel-size=8",
        ],
        &[
            "takes no --tensor-model-parallel-size (--tp)",
            "tpsim plan ... --tp N",
        ],
    );
}
