//! `--max-memory-gib`, and the margin tpsim's memory error asks for: holding every plan below a
//! memory per GPU the user chooses (room for what runs beside training, or for tpsim's own memory
//! error). Plans are checked and printed against it, a saved plan keeps it, a value that is no
//! memory size is refused, and a plan that would not fit at the high end of tpsim's measured
//! memory error says so with the limit that keeps the margin.

mod common;

use common::{assert_one_line_error, json, run, scratch};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const SCENARIO: [&str; 8] = [
    "--model",
    "llama3-8b",
    "--nodes",
    "1",
    "--global-batch",
    "64",
    "--format",
    "json",
];

fn plan_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan"];
    args.extend(SCENARIO);
    args.extend(extra);
    json(&args)
}

#[test]
fn every_plan_stays_below_the_limit_and_is_checked_against_it() {
    let free = plan_json(&[]);
    let best_free = free["plans"][0]["memory"]["total_bytes"].as_f64().unwrap();
    // A limit below what the unconstrained best plan uses, so the flag has to change the answer.
    let limit_gib = (best_free / GIB - 5.0).floor();
    let held = plan_json(&["--max-memory-gib", &limit_gib.to_string()]);
    let plans = held["plans"].as_array().unwrap();
    assert!(!plans.is_empty(), "plans fit below {limit_gib} GiB");
    for p in plans {
        let memory = &p["memory"];
        assert!(
            memory["total_bytes"].as_f64().unwrap() <= limit_gib * GIB,
            "{memory}"
        );
        assert_eq!(memory["capacity_bytes"].as_f64().unwrap(), limit_gib * GIB);
    }
    assert!(
        plans[0]["time"]["step_s"].as_f64().unwrap()
            >= free["plans"][0]["time"]["step_s"].as_f64().unwrap(),
        "a limit cannot make the best plan faster"
    );
    // The cluster keeps the device's memory and says what the plans were held to.
    let cluster = &held["cluster"];
    assert_eq!(
        cluster["gpu_memory_bytes"],
        free["cluster"]["gpu_memory_bytes"]
    );
    assert_eq!(
        cluster["max_memory_bytes"].as_f64().unwrap(),
        limit_gib * GIB
    );
    assert!(free["cluster"].get("max_memory_bytes").is_none());
}

#[test]
fn the_table_names_the_limit_and_a_saved_plan_keeps_it() {
    let dir = scratch("memory-limit", "save");
    let saved = dir.join("plan.yaml");
    let saved = saved.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--max-memory-gib",
        "50",
        "--save",
        saved,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("79.7 GiB, plans held below 50.0 GiB by --max-memory-gib"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("/50.0 ┆"),
        "the mem GiB column: {}",
        r.stdout
    );
    let text = std::fs::read_to_string(saved).unwrap();
    assert!(text.contains("max_memory_gib: 50"), "{text}");
    let evaluated = json(&["eval", "--plan", saved, "--format", "json"]);
    assert_eq!(
        evaluated["plans"][0]["memory"]["capacity_bytes"]
            .as_f64()
            .unwrap(),
        50.0 * GIB
    );
    // The flag overrides the file's key, as for every scenario key.
    let tighter = json(&[
        "eval",
        "--plan",
        saved,
        "--max-memory-gib",
        "30",
        "--format",
        "json",
    ]);
    assert_eq!(
        tighter["plans"][0]["memory"]["capacity_bytes"]
            .as_f64()
            .unwrap(),
        30.0 * GIB
    );
}

#[test]
fn nothing_below_the_limit_says_to_raise_it() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "1",
        "--max-memory-gib",
        "20",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("raise --max-memory-gib (the GPU has 79.7 GiB)"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_limit_above_the_gpu_changes_nothing_and_says_so() {
    let free = plan_json(&[]);
    let mut args = vec!["plan"];
    args.extend(SCENARIO);
    args.extend(["--max-memory-gib", "100"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("note: --max-memory-gib 100 is not below the 79.7 GiB of h100-sxm-80g"),
        "{}",
        r.stderr
    );
    let held: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        held["plans"][0]["memory"]["capacity_bytes"],
        free["plans"][0]["memory"]["capacity_bytes"]
    );
}

#[test]
fn a_limit_that_is_no_memory_size_is_refused() {
    for value in ["0", "-4"] {
        let r = run(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--max-memory-gib",
            value,
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("--max-memory-gib {value}"),
                "is not a memory size",
                "e.g. --max-memory-gib 71",
            ],
            &[],
            value,
        );
    }
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--max-memory-gib",
        "nan",
    ]);
    assert_one_line_error(&r, &["--max-memory-gib", "finite"], &[], "nan");
    // In a plan file: the key, non-finite.
    let dir = scratch("memory-limit", "file");
    let file = dir.join("plan.yaml");
    std::fs::write(
        &file,
        "model: llama3-8b\nnodes: 1\nglobal_batch: 64\nmax_memory_gib: .inf\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n",
    )
    .unwrap();
    let r = run(&["eval", "--plan", file.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &["max_memory_gib: inf", "is not a memory size"],
        &[],
        "file .inf",
    );
}

/// The 95th percentile of ln(measured / predicted) peak memory over the torchtitan runs that
/// state their peak (validation/residual_bands.json, generated by scripts/vtrain_residuals.py).
fn torchtitan_memory_q95() -> f64 {
    let text = std::fs::read_to_string(format!("{}/validation/residual_bands.json", common::ROOT))
        .unwrap();
    let bands: serde_json::Value = serde_json::from_str(&text).unwrap();
    let band = bands["memory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["framework"] == "torchtitan")
        .expect("a torchtitan memory band");
    band["log_ratio_q95"].as_f64().unwrap()
}

#[test]
fn a_plan_that_would_not_fit_at_tpsims_memory_error_says_so_and_the_limit_it_names_keeps_the_margin()
 {
    let scenario = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
    ];
    let r = run(&scenario);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("memory range: #1 needs "))
        .unwrap_or_else(|| panic!("no memory line: {}", r.stdout));
    assert!(
        line.contains("of 79.7 GiB; on 20 published torchtitan runs, measured peaks ran up to"),
        "{line}"
    );
    let keep = line
        .split("--max-memory-gib ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a limit to keep the margin");
    let kept: f64 = keep.parse().unwrap();
    let q95 = torchtitan_memory_q95();
    assert!(
        (kept - (79.7 * (-q95).exp())).abs() < 0.2,
        "{kept} against {q95}"
    );
    // Planned under that limit, the best plan fits even at the high end: no line.
    let mut held = scenario.to_vec();
    held.extend(["--max-memory-gib", keep]);
    let r = run(&held);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("memory range: ")),
        "{}",
        r.stdout
    );
    // The JSON carries the high end: the estimate raised by that percentile.
    let mut as_json = scenario.to_vec();
    as_json.extend(["--format", "json"]);
    let plans = json(&as_json);
    let memory = &plans["plans"][0]["memory"];
    let ratio =
        memory["total_bytes_high"].as_f64().unwrap() / memory["total_bytes"].as_f64().unwrap();
    assert!((ratio - q95.exp()).abs() < 1e-9, "{ratio}");
    assert!(
        memory["total_bytes_range_basis"]
            .as_str()
            .unwrap()
            .contains("published torchtitan runs"),
        "{memory}"
    );
}

#[test]
fn a_framework_with_no_published_peak_says_whose_runs_the_margin_comes_from() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--seq-len",
        "131072",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("memory range: #1 needs "))
        .unwrap_or_else(|| panic!("no memory line: {}", r.stdout));
    assert!(
        line.contains(
            "on 20 published runs that state their peak (torchtitan), none of them megatron-core"
        ),
        "{line}"
    );
}
