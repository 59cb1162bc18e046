//! `sweep --axis cpu-offload-layers`: the best plan at each count of layers offloaded to host
//! memory, 0 (none, every plan searched) among them, each point as `plan --cpu-offload-layers N`
//! finds it.

mod common;

use common::*;
use serde_json::Value;

const LLAMA_70B_GB200: [&str; 12] = [
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
    "--seq-len",
    "8192",
];

fn sweep_json(values: &str) -> Value {
    let mut args = vec!["sweep", "--axis", "cpu-offload-layers", "--values", values];
    args.extend(LLAMA_70B_GB200);
    args.extend(["--format", "json"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn plan_best(offload: &str) -> Value {
    let mut args = vec!["plan"];
    args.extend(LLAMA_70B_GB200);
    args.extend(["--cpu-offload-layers", offload, "--format", "json"]);
    json(&args)["plans"][0].clone()
}

#[test]
fn each_point_is_the_plan_that_count_finds() {
    let sweep = sweep_json("0,20,40");
    let rows = sweep["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (row, count) in rows.iter().zip(["0", "20", "40"]) {
        assert_eq!(row["value"], count, "{row}");
        let best = plan_best(count);
        let step = row["time"]["step_s"].as_f64().unwrap();
        let planned = best["time"]["step_s"].as_f64().unwrap();
        assert!(
            (step - planned).abs() <= 1e-9 * planned,
            "offload {count}: sweep {step} s, plan {planned} s"
        );
        if count != "0" {
            // Offloading allows only pp 1 and no recompute (Megatron-Core's rules).
            assert_eq!(row["pp"], 1, "{row}");
            assert_eq!(row["recompute"], "none", "{row}");
            assert_eq!(
                row["cpu_offload_layers"],
                count.parse::<u32>().unwrap(),
                "{row}"
            );
        }
    }
}

#[test]
fn a_count_the_model_cannot_take_is_that_points_error() {
    let mut args = vec!["sweep", "--axis", "cpu-offload-layers", "--values", "0,80"];
    args.extend(LLAMA_70B_GB200);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &["80", "at most 79"],
        &["panicked"],
        "offloading all 80 layers",
    );
    let mut args = vec!["sweep", "--axis", "cpu-offload-layers", "--values", "0,-1"];
    args.extend(LLAMA_70B_GB200);
    let r = run(&args);
    assert_one_line_error(&r, &["-1", "0 or more"], &["panicked"], "a negative count");
}

#[test]
fn the_axis_and_the_flag_are_not_given_together() {
    let mut args = vec!["sweep", "--axis", "cpu-offload-layers", "--values", "0,20"];
    args.extend(LLAMA_70B_GB200);
    args.extend(["--cpu-offload-layers", "10"]);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &["--cpu-offload-layers 10", "--axis cpu-offload-layers"],
        &["panicked"],
        "the flag beside its axis",
    );
}

#[test]
fn a_range_every_point_has_on_one_side_is_said_once() {
    let values = "0,20,40";
    let sweep = sweep_json(values);
    let rows = sweep["rows"].as_array().unwrap();
    let all_above = rows
        .iter()
        .all(|r| r["time"]["step_s"].as_f64().unwrap() < r["time"]["step_s_low"].as_f64().unwrap());
    let mut args = vec!["sweep", "--axis", "cpu-offload-layers", "--values", values];
    args.extend(LLAMA_70B_GB200);
    let table = run(&args).stdout;
    let per_point = table
        .lines()
        .filter(|l| l.starts_with("--axis cpu-offload-layers at "))
        .count();
    let once = table
        .lines()
        .filter(|l| l.starts_with("range s: every point's range lies above"))
        .count();
    if all_above {
        assert_eq!((once, per_point), (1, 0), "{table}");
    } else {
        assert_eq!(once, 0, "{table}");
    }
}
