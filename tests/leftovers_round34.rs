//! Leftovers of round 34, what a new user noted:
//! - "why the best plan"'s PP line said "PP 8: stages on different nodes, over the network" for a
//!   plan whose stages sit two to a node (`plan --params 70B --nodes 4 --framework deepspeed`: tp 2,
//!   dp 2, pp 8 on 4 nodes of 8 GPUs). It now says how the stages sit, for every placement: how
//!   many share a node and how many of the pp − 1 boundaries are inside one (NVLink) or across
//!   nodes (the network).
//! - The same plan's DP line read "0.0% of the step exposed (nothing hides it)": a share above zero
//!   that rounds to 0.0% is "under 0.1%".
//! - `tpsim report` with model flags and no plan file said clap's "<PLAN_FILE> required" while its
//!   usage showed `[PLAN_FILE]`: one line names what is missing and the fix, and the usage shows
//!   the plan file as required.

mod common;

use common::*;
use serde_json::Value;

const SEVENTY_B: &[&str] = &[
    "--params",
    "70B",
    "--nodes",
    "4",
    "--framework",
    "deepspeed",
];

fn with(head: &[&str], tail: &[&str]) -> Vec<String> {
    head.iter().chain(tail).map(|s| s.to_string()).collect()
}

fn run_s(args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

fn json_s(args: &[String]) -> Value {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json(&args)
}

/// The "why the best plan" line starting with `start`.
fn why_line(stdout: &str, start: &str) -> String {
    stdout
        .split("why the best plan:")
        .nth(1)
        .unwrap_or_else(|| panic!("no why the best plan in {stdout}"))
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no {start:?} line in {stdout}"))
        .to_string()
}

fn degree(plan: &Value, key: &str) -> u64 {
    plan[key].as_u64().unwrap_or(1)
}

/// Stages of tp·cp·dp ranks laid over 8-GPU nodes in Megatron's order: stage i holds ranks
/// i·s .. (i+1)·s, so the boundary after stage i is inside a node when both sides share one.
fn boundaries_inside(stride: u64, pp: u64) -> u64 {
    (0..pp - 1)
        .filter(|i| (i * stride) / 8 == ((i + 1) * stride) / 8 && stride < 8)
        .count() as u64
}

#[test]
fn pp_line_says_how_the_stages_sit() {
    let args = with(&["plan"], SEVENTY_B);
    let r = run_s(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let planned = json_s(&with(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &["--format", "json"],
    ));
    let best = &planned["plans"][0];
    let (tp, cp, dp, pp) = (
        degree(best, "tp"),
        degree(best, "cp"),
        degree(best, "dp"),
        degree(best, "pp"),
    );
    let stride = tp * cp * dp;
    // The case the user met: stages two to a node.
    assert_eq!((stride, pp), (4, 8), "the best plan changed: {best}");
    let line = why_line(&r.stdout, &format!("PP {pp}: "));
    assert!(!line.contains("stages on different nodes"), "{line}");
    let inside = boundaries_inside(stride, pp);
    let across = pp - 1 - inside;
    for want in [
        format!("PP {pp}: {} stages per node: ", 8 / stride),
        format!(
            "{inside} of the {} boundaries inside a node, on NVLink",
            pp - 1
        ),
        format!("; {across} across nodes, on the network"),
    ] {
        assert!(line.contains(&want), "no {want:?} in {line}");
    }
}

#[test]
fn pp_line_with_one_stage_per_node_and_all_in_one_node() {
    // tp 8: one stage per node, every boundary across nodes.
    let r = run_s(&with(
        &[
            "plan", "--params", "70B", "--nodes", "4", "--tp", "8", "--pp", "4",
        ],
        &["--top", "1"],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = why_line(&r.stdout, "PP 4: ");
    assert!(
        line.contains("PP 4: one stage per node: all 3 boundaries across nodes, on the network"),
        "{line}"
    );
    // tp 2, pp 4 on one node: every boundary inside it.
    let r = run_s(&with(
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--pp",
            "4",
        ],
        &["--top", "1"],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = why_line(&r.stdout, "PP 4: ");
    assert!(
        line.contains("PP 4: all 4 stages in one node, all 3 boundaries on NVLink"),
        "{line}"
    );
}

#[test]
fn dp_share_under_a_tenth_of_a_percent_is_not_printed_as_zero() {
    let args = with(&["plan"], SEVENTY_B);
    let r = run_s(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let planned = json_s(&with(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &["--format", "json"],
    ));
    let time = &planned["plans"][0]["time"];
    let share = 100.0
        * time["dp_comm_exposed_s"]
            .as_f64()
            .expect("dp_comm_exposed_s")
        / time["step_s"].as_f64().expect("step_s");
    // The case the user met: exposed, but less than 0.05% of the step.
    assert!(share > 0.0 && share < 0.05, "share {share}% changed");
    let line = why_line(&r.stdout, "DP ");
    assert!(!line.contains("0.0% of the step"), "{line}");
    assert!(line.contains("under 0.1% of the step exposed"), "{line}");
}

#[test]
fn report_without_a_plan_file_says_what_is_missing_and_the_fix() {
    let dir = scratch("leftovers34", "report");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let r = run(&["report", "--params", "70B", "--nodes", "4", "--out", out]);
    assert_one_line_error(
        &r,
        &[
            "no plan file given",
            "tpsim report PLAN_FILE --out DIR",
            "--save PLAN_FILE",
            "tpsim plan ... --report DIR",
        ],
        &["required arguments", "--out DIR given"],
        "report without a plan file",
    );
    assert!(!dir.join("out").exists(), "nothing written");
    let r = run(&["report", "--params", "70B", "--nodes", "4"]);
    assert_one_line_error(
        &r,
        &[
            "no plan file and no --out DIR given",
            "tpsim plan ... --report DIR",
        ],
        &["required arguments"],
        "report without a plan file or --out",
    );
    let r = run(&["report", "plans/seed-512b-32nodes.yaml"]);
    assert_one_line_error(
        &r,
        &["no --out DIR given", "tpsim report PLAN_FILE --out DIR"],
        &["required arguments", "no plan file"],
        "report without --out",
    );
    // The usage says both are required, as the message does.
    let help = run(&["report", "--help"]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    let usage = help
        .stdout
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .expect("a usage line");
    assert!(usage.contains("<PLAN_FILE> --out <DIR>"), "{usage}");
    assert!(!usage.contains("[PLAN_FILE]"), "{usage}");
}
