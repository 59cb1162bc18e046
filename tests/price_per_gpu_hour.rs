//! `--price-per-gpu-hour` on `plan`, `eval` and `compare` as on `sweep`: the cost to train
//! `--tokens` is the time to train x the GPUs x the price (`cost::cost_to_train`), one number for
//! every command that prints it.

mod common;

use common::{assert_one_line_error, json, run, scratch};

const LLAMA_70B: [&str; 12] = [
    "--model",
    "llama3-70b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "16",
    "--global-batch",
    "512",
    "--tokens",
    "15T",
    "--price-per-gpu-hour",
    "2.49",
];

fn with(command: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![command.to_string()];
    args.extend(LLAMA_70B.iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn eval_prints_the_cost_it_puts_in_the_json() {
    let plan = [
        "--tp",
        "8",
        "--pp",
        "4",
        "--zero",
        "1",
        "--sequence-parallel",
    ];
    let text = run(&strs(&with("eval", &plan)));
    assert_eq!(text.code, 0, "{}", text.stderr);
    let v = json(&strs(&with(
        "eval",
        &[&plan[..], &["--format", "json"]].concat(),
    )));
    let p = &v["plans"][0];
    let seconds = p["time_to_train_s"].as_f64().unwrap();
    let cost = p["cost_to_train"].as_f64().unwrap();
    // 128 GPUs rented for the time to train at $2.49 each per hour.
    assert!(
        (cost / (seconds / 3600.0 * 128.0 * 2.49) - 1.0).abs() < 1e-12,
        "{p}"
    );
    let line = text
        .stdout
        .lines()
        .find(|l| l.starts_with("cost to train: $"))
        .unwrap_or_else(|| panic!("no cost line in {}", text.stdout));
    let dollars: f64 = line["cost to train: $".len()..]
        .split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert_eq!(dollars, cost.round(), "{line}");
    assert!(
        line.contains("128 GPUs for") && line.contains("at $2.49 per GPU-hour"),
        "{line}"
    );
}

#[test]
fn plan_and_sweep_give_the_same_cost_for_the_same_best_plan() {
    let v = json(&strs(&with("plan", &["--format", "json"])));
    let best = &v["plans"][0];
    let plan_cost = best["cost_to_train"].as_f64().unwrap();
    let text = run(&strs(&with("plan", &[])));
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("train:") && l.contains("cost $") && l.contains("per GPU-hour")),
        "{}",
        text.stdout
    );
    let mut sweep = vec![
        "sweep",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80g",
        "--axis",
        "nodes",
        "--values",
        "16",
        "--global-batch",
        "512",
        "--tokens",
        "15T",
        "--price-per-gpu-hour",
        "2.49",
    ];
    sweep.extend(["--format", "json"]);
    let s = json(&sweep);
    let row = &s["rows"][0];
    assert_eq!(row["tp"], best["tp"], "{row}");
    assert_eq!(row["pp"], best["pp"], "{row}");
    let sweep_cost = row["cost_to_train"].as_f64().unwrap();
    assert!(
        (sweep_cost / plan_cost - 1.0).abs() < 1e-12,
        "{sweep_cost} vs {plan_cost}"
    );
}

#[test]
fn compare_sets_the_two_costs_side_by_side() {
    let r = run(&strs(&with("compare", &[])));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains("cost to train") && l.contains('$')),
        "{}",
        r.stdout
    );
}

#[test]
fn a_saved_plans_token_budget_is_priced() {
    let dir = scratch("price", "saved");
    let file = dir.join("plan.yaml");
    let file = file.to_str().unwrap();
    let saved = run(&strs(&with("plan", &["--save", file])));
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let v = json(&[
        "eval",
        "--plan",
        file,
        "--price-per-gpu-hour",
        "3",
        "--format",
        "json",
    ]);
    let p = &v["plans"][0];
    let seconds = p["time_to_train_s"].as_f64().unwrap();
    let cost = p["cost_to_train"].as_f64().unwrap();
    assert!(
        (cost / (seconds / 3600.0 * 128.0 * 3.0) - 1.0).abs() < 1e-12,
        "{p}"
    );
}

#[test]
fn a_price_without_tokens_or_out_of_range_is_refused_in_one_line() {
    let base = [
        "--model",
        "llama3-70b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
    ];
    for command in ["plan", "eval"] {
        let mut args = vec![command];
        args.extend_from_slice(&base);
        if command == "eval" {
            args.extend(["--tp", "8"]);
        }
        let mut no_tokens = args.clone();
        no_tokens.extend(["--price-per-gpu-hour", "2.5"]);
        assert_one_line_error(
            &run(&no_tokens),
            &["--price-per-gpu-hour needs --tokens", "--tokens 300B"],
            &["panicked"],
            command,
        );
        for (price, needle) in [
            ("-2", "must be a positive amount"),
            ("0", "must be a positive amount"),
            ("20000", "is more than"),
            ("0.0001", "is less than"),
        ] {
            let mut bad = args.clone();
            bad.extend(["--tokens", "1T", "--price-per-gpu-hour", price]);
            assert_one_line_error(
                &run(&bad),
                &[
                    &format!("--price-per-gpu-hour {price}"),
                    needle,
                    "e.g. --price-per-gpu-hour 2.5",
                ],
                &["panicked"],
                &format!("{command} {price}"),
            );
        }
    }
}

#[test]
fn without_a_price_nothing_is_priced() {
    let v = json(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--tokens",
        "1T",
        "--format",
        "json",
    ]);
    assert!(
        v["plans"][0]["cost_to_train"].is_null(),
        "{}",
        v["plans"][0]
    );
}
