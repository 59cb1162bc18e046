//! Review round 24: one quantity, one number, across every command. For a matrix of plans
//! (dense Llama 3 70B with vpp and the 512B seed; MoE DeepSeek-V3 with ep and an uneven pipeline
//! in fp8; the hybrid Nemotron-H 56B; long context under Megatron-Core and torchtitan; torchtitan's
//! ZBV schedule; FSDP with a pipeline; MXFP8 on B200; Muon) the best plan is saved with
//! `plan --save` and read back by `eval --plan` (text and JSON), `compare --plan` and `report`,
//! and every number two of them show is compared at the printed precision (`cross_check`, the
//! extractor this round was asked to keep in a test).
//!
//! Found consistent (no change): `plan`'s row and JSON, `eval`'s text (memory parts, traffic and
//! seconds per group, exposed terms, step, tokens/s, MFU, bubble, the range) and JSON, `compare`'s
//! rows, the report's JSON and its HTML plan table; each ledger group's step total against
//! `comm.*.wire_bytes` (expert DP inside DP); `sweep`'s row against `plan`'s best; `--emit`'s
//! header. The memory block's `other` and `free` are the printed total less the printed parts
//! (`units::shown_gib_parts`, `shown_gib_left`), by design, so the column adds up.
//!
//! Defect found and fixed, a test:
//! 1. `plan --tokens T --price-per-gpu-hour P --save FILE` wrote the token budget but not the
//!    price, so `eval --plan FILE` and `report FILE` printed the time to train without the cost
//!    `plan` had printed for the same plan (`cost_to_train` null). The file keeps
//!    `price_per_gpu_hour:` now, checked as the flag is.
//! 2. The report's plans table, documented as "every column of `plan`'s terminal table", left out
//!    the `train` column `plan` adds under `--tokens`, so the report of a plan with a token
//!    budget never showed its time to train (its report.json had `time_to_train_s`). The column
//!    shows now, from the same `table::duration`.

mod common;
use common::{assert_one_line_error, json, run, scratch};
use serde_json::Value;
use std::path::Path;

/// The printed number `shown` is `value` at the precision it was printed with (half a unit of
/// its last digit, and a hair for binary fractions).
fn same_at_printed_precision(shown: &str, value: f64) -> bool {
    let shown = shown.trim().replace(',', "");
    let Ok(x) = shown.parse::<f64>() else {
        return false;
    };
    let decimals = shown.split('.').nth(1).map_or(0, str::len) as i32;
    (x - value).abs() <= 0.5 * 10f64.powi(-decimals) * 1.0001 + 1e-9 * value.abs()
}

/// A box-drawn table's header and rows as cells (`│ a ┆ b │`), the first table in `text`.
fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('│')
            .split('┆')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let mut lines = text.lines().filter(|l| l.starts_with('│'));
    let header = lines.next().map(cells).unwrap_or_default();
    (header, lines.map(cells).collect())
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {at}"))
}

/// The numbers a plan row shows, from the estimate's JSON (the one source they are read from).
fn row_quantities(plan: &Value) -> Vec<(&'static str, f64)> {
    let gib = 1024f64.powi(3);
    vec![
        ("step s", num(plan, &["time", "step_s"])),
        ("tokens/s", num(plan, &["tokens_per_s"])),
        ("MFU %", 100.0 * num(plan, &["mfu"])),
        ("bubble %", 100.0 * num(plan, &["bubble_share"])),
        ("TP s", num(plan, &["time", "tp_comm_exposed_s"])),
        ("CP s", num(plan, &["time", "cp_comm_exposed_s"])),
        ("PP s", num(plan, &["time", "pp_comm_exposed_s"])),
        ("EP s", num(plan, &["time", "ep_comm_exposed_s"])),
        ("DP s", num(plan, &["time", "dp_comm_exposed_s"])),
        ("mem GiB", num(plan, &["memory", "total_bytes"]) / gib),
    ]
}

/// Every leaf of `a` that `b` also has is the same (numbers to 1e-9 relative).
fn same_json(a: &Value, b: &Value, path: &str, diffs: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                if let Some(w) = y.get(k) {
                    same_json(v, w, &format!("{path}.{k}"), diffs);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                diffs.push(format!("{path}: {} vs {} items", x.len(), y.len()));
            }
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_json(v, w, &format!("{path}[{i}]"), diffs);
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if (x - y).abs() > 1e-9 * x.abs().max(y.abs()) {
                diffs.push(format!("{path}: {x} vs {y}"));
            }
        }
        _ if a != b => diffs.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// The number after `label` (a line start of `eval`'s text, as `  TP comm `), or None.
fn after<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let at = text.find(label)? + label.len();
    text[at..].split_whitespace().next()
}

/// Saves the best plan of `args`, reads it back through every command and compares each number
/// two of them show. `with_report` also writes the report (a second search: slower).
fn cross_check(name: &str, args: &[&str], with_report: bool) {
    let dir = scratch("review_round24", name);
    let file = dir.join("plan.yaml");
    let file_s = file.to_str().unwrap();
    let mut plan_args = vec!["plan"];
    plan_args.extend_from_slice(args);
    plan_args.extend_from_slice(&["--top", "1", "--save", file_s]);
    let r = run(&plan_args);
    assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    let (header, rows) = table(&r.stdout);
    let row: Vec<(String, String)> = header.into_iter().zip(rows[0].clone()).collect();

    let mut plan_json_args = vec!["plan"];
    plan_json_args.extend_from_slice(args);
    plan_json_args.extend_from_slice(&["--top", "1", "--format", "json"]);
    let from_plan = json(&plan_json_args)["plans"][0].clone();
    let from_eval = json(&["eval", "--plan", file_s, "--format", "json"])["plans"][0].clone();

    // plan JSON = eval --plan JSON, leaf by leaf (the ledger included).
    let mut diffs = Vec::new();
    same_json(&from_plan, &from_eval, "", &mut diffs);
    assert!(
        diffs.is_empty(),
        "{name}: plan vs eval --plan JSON: {diffs:#?}"
    );

    // plan's row = the estimate, each column it shows.
    for (column, value) in row_quantities(&from_eval) {
        if let Some((_, shown)) = row.iter().find(|(h, _)| h == column) {
            let shown = shown.split('/').next().unwrap();
            assert!(
                same_at_printed_precision(shown, value),
                "{name}: plan's {column} {shown} vs the estimate's {value}"
            );
        }
    }

    // eval's text = the estimate.
    let text = run(&["eval", "--plan", file_s]).stdout;
    let gib = 1024f64.powi(3);
    let mut wants: Vec<(String, f64)> = vec![
        (
            "time per step:".into(),
            num(&from_eval, &["time", "step_s"]),
        ),
        ("throughput:".into(), num(&from_eval, &["tokens_per_s"])),
        ("(MFU".into(), 100.0 * num(&from_eval, &["mfu"])),
        (
            "\n  total".into(),
            num(&from_eval, &["memory", "total_bytes"]) / gib,
        ),
    ];
    for part in ["weights", "gradients", "optimizer", "activations"] {
        wants.push((
            format!("\n  {part}"),
            num(&from_eval, &["memory", &format!("{part}_bytes")]) / gib,
        ));
    }
    for group in ["tp", "pp", "dp", "cp", "ep"] {
        let bytes = num(&from_eval, &["comm", group, "wire_bytes"]);
        if bytes > 0.0 {
            wants.push((format!("\n  {}", group.to_uppercase()), bytes / 1e9));
        }
    }
    let labels = [
        ("compute", "compute"),
        ("tp_comm", "TP comm"),
        ("cp_comm", "CP comm"),
        ("pp_comm", "PP comm"),
        ("ep_comm", "EP comm"),
        ("dp_grad_reduce", "DP grad reduce"),
        ("dp_param_gather", "DP param gather"),
        ("bubble", "bubble"),
    ];
    for term in from_eval["terms"].as_array().unwrap() {
        let kind = term["kind"].as_str().unwrap();
        let exposed = term["exposed_s"].as_f64().unwrap();
        if let Some((_, label)) = labels.iter().find(|(k, _)| *k == kind)
            && exposed > 0.0
        {
            wants.push((format!("\n  {label} "), exposed));
        }
    }
    for (label, value) in &wants {
        let shown = after(&text, label)
            .unwrap_or_else(|| panic!("{name}: eval prints no {label:?}:\n{text}"))
            .trim_end_matches([',', ')', '%']);
        assert!(
            same_at_printed_precision(shown, *value),
            "{name}: eval's {label:?} {shown} vs the estimate's {value}"
        );
    }

    // compare's rows = the estimate (plan A), by term and unit.
    let compare = run(&["compare", "--plan", file_s, "--plan", file_s]).stdout;
    let (_, rows) = table(&compare);
    let mut checked = 0;
    for cells in rows.iter().filter(|c| c.len() == 6) {
        let (term, unit, shown) = (cells[1].as_str(), cells[2].as_str(), cells[3].as_str());
        let value = match unit {
            "GiB" if term != "other" => {
                num(&from_eval, &["memory", &format!("{term}_bytes")]) / gib
            }
            "GB" => num(&from_eval, &["comm", &term.to_lowercase(), "wire_bytes"]) / 1e9,
            "tokens/s" => num(&from_eval, &["tokens_per_s"]),
            "%" if term == "MFU" => 100.0 * num(&from_eval, &["mfu"]),
            "s" if term == "step" => num(&from_eval, &["time", "step_s"]),
            "s" => match labels.iter().find(|(_, l)| *l == term) {
                Some((kind, _)) => from_eval["terms"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["kind"] == *kind)
                    .map_or(0.0, |t| t["exposed_s"].as_f64().unwrap()),
                None => continue,
            },
            _ => continue,
        };
        checked += 1;
        assert!(
            same_at_printed_precision(shown, value),
            "{name}: compare's {term} ({unit}) {shown} vs the estimate's {value}"
        );
    }
    assert!(checked >= 10, "{name}: compare showed {checked} known rows");

    // Each ledger group's step total is the estimate's traffic of that group.
    let ledger = &from_eval["ledger"];
    for group in ["tp", "cp", "pp", "ep", "dp"] {
        let total: f64 = ledger["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                let g = e["group"].as_str().unwrap();
                g == group || g.ends_with(&format!("_{group}"))
            })
            .map(|e| e["count"].as_f64().unwrap() * e["wire_bytes"].as_f64().unwrap())
            .sum();
        let want = num(&from_eval, &["comm", group, "wire_bytes"]);
        assert!(
            (total - want).abs() <= 1e-6 * want.max(1.0),
            "{name}: ledger's {group} total {total} vs comm.{group}.wire_bytes {want}"
        );
    }

    if with_report {
        let out = dir.join("report");
        let r = run(&["report", file_s, "--out", out.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        check_report(name, &out, &from_eval);
    }
}

/// The report's JSON holds the evaluated plan first, as `eval` gives it, and its HTML table's
/// "this plan" row shows the same numbers as `plan`'s row.
fn check_report(name: &str, out: &Path, from_eval: &Value) {
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let mut diffs = Vec::new();
    same_json(from_eval, &report["plans"][0], "", &mut diffs);
    assert!(diffs.is_empty(), "{name}: eval vs report.json: {diffs:#?}");
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let cells = |row: &str| -> Vec<String> {
        row.split("<t")
            .skip(1)
            .filter_map(|c| c.split_once('>').map(|(_, rest)| rest))
            .map(|c| c.split("</t").next().unwrap_or(""))
            .map(|c| {
                let mut plain = String::new();
                let mut in_tag = false;
                for ch in c.chars() {
                    match ch {
                        '<' => in_tag = true,
                        '>' => in_tag = false,
                        _ if !in_tag => plain.push(ch),
                        _ => {}
                    }
                }
                plain.trim().to_string()
            })
            .collect()
    };
    let rows: Vec<Vec<String>> = html.split("<tr>").skip(1).map(cells).collect();
    let header = rows
        .iter()
        .find(|r| r.first().is_some_and(|c| c == "plan"))
        .unwrap_or_else(|| panic!("{name}: no plan table in the report"));
    let this = rows
        .iter()
        .find(|r| r.first().is_some_and(|c| c.starts_with("this plan")))
        .unwrap_or_else(|| panic!("{name}: no 'this plan' row in the report"));
    let mut checked = 0;
    for (column, value) in row_quantities(from_eval) {
        if let Some(i) = header.iter().position(|h| h == column) {
            let shown = this[i].split('/').next().unwrap();
            checked += 1;
            assert!(
                same_at_printed_precision(shown, value),
                "{name}: report's {column} {shown} vs the estimate's {value}"
            );
        }
    }
    assert!(checked >= 8, "{name}: report row showed {checked} columns");
}

#[test]
fn dense_llama3_70b_interleaved_agrees_across_commands() {
    cross_check(
        "l70",
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--global-batch",
            "512",
            "--seq-len",
            "8192",
            "--tp",
            "8",
            "--pp",
            "4",
            "--vpp",
            "5",
            "--micro-batch",
            "1",
            "--cp",
            "1",
        ],
        true,
    );
}

#[test]
fn seed_512b_agrees_across_commands() {
    cross_check(
        "512b",
        &[
            "--params",
            "512B",
            "--nodes",
            "32",
            "--tp",
            "8",
            "--pp",
            "16",
            "--vpp",
            "7",
            "--micro-batch",
            "1",
            "--cp",
            "1",
        ],
        false,
    );
}

#[test]
fn deepseek_v3_ep_fp8_uneven_pipeline_agrees_across_commands() {
    cross_check(
        "dsv3",
        &[
            "--model",
            "deepseek-v3",
            "--nodes",
            "32",
            "--global-batch",
            "1024",
            "--tp",
            "2",
            "--pp",
            "8",
            "--allow-uneven-pp",
            "--ep",
            "16",
            "--etp",
            "1",
            "--cp",
            "1",
            "--vpp",
            "1",
            "--micro-batch",
            "1",
            "--precision",
            "fp8",
            "--recompute",
            "full",
        ],
        false,
    );
}

#[test]
fn hybrid_nemotron_h_fp8_agrees_across_commands() {
    cross_check(
        "nemo",
        &[
            "--model",
            "nemotron-h-56b",
            "--nodes",
            "8",
            "--global-batch",
            "256",
            "--tp",
            "8",
            "--pp",
            "2",
            "--vpp",
            "1",
            "--cp",
            "1",
            "--micro-batch",
            "1",
            "--precision",
            "fp8",
        ],
        true,
    );
}

#[test]
fn long_context_megatron_core_and_torchtitan_agree_across_commands() {
    cross_check(
        "mcore_cp8",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--global-batch",
            "64",
            "--seq-len",
            "131072",
            "--tp",
            "2",
            "--cp",
            "8",
            "--pp",
            "2",
            "--vpp",
            "1",
            "--micro-batch",
            "1",
        ],
        false,
    );
    cross_check(
        "tt_cp",
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--framework",
            "torchtitan",
            "--global-batch",
            "64",
            "--seq-len",
            "131072",
            "--tp",
            "8",
            "--cp",
            "8",
            "--pp",
            "1",
            "--vpp",
            "1",
            "--micro-batch",
            "1",
        ],
        false,
    );
}

#[test]
fn zbv_fsdp_with_pipeline_mxfp8_and_muon_agree_across_commands() {
    cross_check(
        "zbv",
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--framework",
            "torchtitan",
            "--global-batch",
            "512",
            "--seq-len",
            "8192",
            "--tp",
            "8",
            "--pp",
            "4",
            "--vpp",
            "2",
            "--cp",
            "1",
            "--micro-batch",
            "1",
            "--zero",
            "3",
            "--pp-schedule",
            "zbv",
        ],
        false,
    );
    cross_check(
        "fsdp_pp",
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--framework",
            "torchtitan",
            "--global-batch",
            "256",
            "--seq-len",
            "8192",
            "--tp",
            "4",
            "--pp",
            "4",
            "--vpp",
            "1",
            "--cp",
            "1",
            "--micro-batch",
            "1",
            "--zero",
            "3",
        ],
        false,
    );
    cross_check(
        "mxfp8",
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--gpu",
            "b200-sxm-180g",
            "--global-batch",
            "512",
            "--seq-len",
            "8192",
            "--tp",
            "4",
            "--pp",
            "2",
            "--vpp",
            "1",
            "--cp",
            "1",
            "--micro-batch",
            "1",
            "--precision",
            "mxfp8",
        ],
        false,
    );
    cross_check(
        "muon",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--seq-len",
            "8192",
            "--tp",
            "2",
            "--pp",
            "1",
            "--vpp",
            "1",
            "--cp",
            "1",
            "--micro-batch",
            "1",
            "--optimizer-states",
            "muon",
        ],
        false,
    );
}

const PRICED: &[&str] = &[
    "--model",
    "llama3-8b",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--seq-len",
    "8192",
    "--tokens",
    "1T",
    "--price-per-gpu-hour",
    "2.5",
];

/// Defect 1: the saved plan kept `tokens:` but not the price, so `eval --plan` and `report`
/// printed no cost for the plan `plan` had costed.
#[test]
fn saved_plan_keeps_the_price_plan_costed_it_at() {
    let dir = scratch("review_round24", "price");
    let file = dir.join("priced.yaml");
    let file_s = file.to_str().unwrap();
    let mut args = vec!["plan"];
    args.extend_from_slice(PRICED);
    args.extend_from_slice(&["--top", "1", "--format", "json"]);
    let planned = json(&args)["plans"][0].clone();
    let mut save = vec!["plan"];
    save.extend_from_slice(PRICED);
    save.extend_from_slice(&["--top", "1", "--save", file_s]);
    let r = run(&save);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cost = planned["cost_to_train"]
        .as_f64()
        .expect("plan prices the plan");

    let evaluated = json(&["eval", "--plan", file_s, "--format", "json"])["plans"][0].clone();
    for key in ["cost_to_train", "cost_to_train_low", "cost_to_train_high"] {
        let got = evaluated[key]
            .as_f64()
            .unwrap_or_else(|| panic!("eval --plan of a saved priced plan gives no {key}"));
        let want = planned[key].as_f64().unwrap();
        assert!(
            (got / want - 1.0).abs() < 1e-12,
            "{key}: eval {got} vs plan {want}"
        );
    }
    let text = run(&["eval", "--plan", file_s]).stdout;
    // $66,104 as the text groups it.
    let digits = format!("{}", cost.round() as u64);
    let mut grouped = String::from("$");
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    assert!(
        text.contains(&format!("cost to train: {grouped}")),
        "eval --plan's text has no {grouped}:\n{text}"
    );

    // A price the flag would refuse is refused from the file too, named by its key.
    let bad = dir.join("bad.yaml");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("price_per_gpu_hour: 2.5"), "{saved}");
    std::fs::write(
        &bad,
        saved.replace("price_per_gpu_hour: 2.5", "price_per_gpu_hour: -1"),
    )
    .unwrap();
    let r = run(&["eval", "--plan", bad.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &[
            "price_per_gpu_hour: -1",
            "positive",
            "--price-per-gpu-hour 2.5",
        ],
        &[],
        "negative price in a plan file",
    );
    // The flag still wins over the file.
    let flagged = json(&[
        "eval",
        "--plan",
        file_s,
        "--price-per-gpu-hour",
        "5",
        "--format",
        "json",
    ])["plans"][0]["cost_to_train"]
        .as_f64()
        .unwrap();
    assert!(
        (flagged / cost - 2.0).abs() < 1e-9,
        "{flagged} vs 2 x {cost}"
    );
}

/// Defect 2: the report's plans table shows the time to train `plan`'s table shows.
#[test]
fn report_table_shows_the_time_to_train_plan_shows() {
    let dir = scratch("review_round24", "train_column");
    let file = dir.join("priced.yaml");
    let file_s = file.to_str().unwrap();
    let mut save = vec!["plan"];
    save.extend_from_slice(PRICED);
    save.extend_from_slice(&["--top", "1", "--save", file_s]);
    let r = run(&save);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (header, rows) = table(&r.stdout);
    let at = header
        .iter()
        .position(|h| h == "train")
        .expect("plan shows train");
    let planned = rows[0][at].clone();
    let days = json(&["eval", "--plan", file_s, "--format", "json"])["plans"][0]["time_to_train_s"]
        .as_f64()
        .unwrap()
        / 86400.0;
    assert!(same_at_printed_precision(
        planned.trim_end_matches(" days"),
        days
    ));

    let out = dir.join("report");
    let r = run(&["report", file_s, "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        html.contains("<th>train</th>"),
        "the report's plans table has no train column"
    );
    let this_row = html
        .split("<tr>")
        .find(|row| row.contains("this plan"))
        .expect("a 'this plan' row");
    assert!(
        this_row.contains(&format!(">{planned}</td>")),
        "the report's row lacks plan's {planned}: {this_row}"
    );
}
