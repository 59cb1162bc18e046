//! Review round 22: one quantity, one number, across every command. The review read every
//! number `eval` (text and JSON), `compare`, `plan` (table, "why" lines), `sweep`, `report`
//! (tables, JSON, figures) and `--emit` headers print for seven plans (Llama 3 70B tp/pp/vpp on
//! H100; DeepSeek-V3 with EP, MTP and an uneven pipeline in FP8 on GB200; Llama 3 8B at 128K
//! with cp 4 under torchtitan; Nemotron-H 56B with --allow-uneven-pp; a torchtitan ZeRO-3 plan
//! with pp; an FP8 plan with offloaded activations).
//!
//! Defects found and fixed (both in `compare`'s verdict, `src/compare.rs`):
//! 1. Two MoE plans of the same degrees in fp8 at micro-batch 2 and 1: the verdict gave the EP
//!    difference as "one latency per peer each" while the traffic rows two lines above read
//!    1438.97 against 1479.93 GB (the all-to-all dispatcher pads every expert's rows to the FP8
//!    alignment in each micro-batch, so smaller micro-batches send more rows: a third of the EP
//!    time between them). The cause now carries the bytes, at the traffic rows' precision.
//! 2. Two pipelines of the same tp and recompute whose layer splits differ (Nemotron-H 56B,
//!    30/30/28 against 29/30/29 with vpp 6): "TP comm 0.1 points more" with no cause, though the
//!    TP traffic (1449.55 against 1401.23 GB) is the slowest stage's layers'. It now names the
//!    split, as the compute term does.
//!
//! The other two tests guard what the review checked by hand and found to agree, so that a
//! later change that splits one of them fails here.

mod common;
use common::{json, run_in, scratch};
use serde_json::Value;

/// Every leaf of a JSON value with its path.
fn leaves(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                leaves(x, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                leaves(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => out.push((path.to_string(), v.clone())),
    }
}

fn f(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"))
}

/// The plan's parts add up: memory parts to the memory total, the terms' exposed times to the
/// step, the ledger's entries (count × bytes, count × time) to each group's totals in `comm` and
/// in the ledger's own `*_wire_bytes`.
fn assert_parts_add_up(p: &Value, what: &str) {
    let m = &p["memory"];
    let parts: f64 = [
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "other_bytes",
    ]
    .iter()
    .map(|k| f(&m[*k], k))
    .sum();
    let total = f(&m["total_bytes"], "total_bytes");
    assert!(
        (parts - total).abs() <= 1e-9 * total,
        "{what}: memory parts {parts} against total {total}"
    );
    let step = f(&p["time"]["step_s"], "step_s");
    let exposed: f64 = p["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| f(&t["exposed_s"], "exposed_s"))
        .sum();
    assert!(
        (exposed - step).abs() <= 1e-9 * step,
        "{what}: terms' exposed times {exposed} against step {step}"
    );
    for group in ["tp", "cp", "ep", "pp", "dp"] {
        let (mut bytes, mut time) = (0.0, 0.0);
        for e in p["ledger"]["entries"].as_array().unwrap() {
            if e["group"] == group {
                let count = f(&e["count"], "count");
                bytes += count * f(&e["wire_bytes"], "wire_bytes");
                time += count * f(&e["time_s"], "time_s");
            }
        }
        let comm_bytes = f(&p["comm"][group]["wire_bytes"], "comm wire_bytes");
        let comm_time = f(&p["comm"][group]["time_s"], "comm time_s");
        let ledger_bytes = f(
            &p["ledger"][format!("{group}_wire_bytes")],
            "ledger wire_bytes",
        );
        let tol = |x: f64| 1e-9 * x.abs().max(1.0);
        assert!(
            (bytes - comm_bytes).abs() <= tol(comm_bytes),
            "{what}: {group} ledger {bytes} B against comm {comm_bytes} B"
        );
        assert!(
            (ledger_bytes - comm_bytes).abs() <= tol(comm_bytes),
            "{what}: {group} ledger total {ledger_bytes} B against comm {comm_bytes} B"
        );
        assert!(
            (time - comm_time).abs() <= 1e-9 * comm_time.max(1.0),
            "{what}: {group} ledger {time} s against comm {comm_time} s"
        );
    }
}

/// `plan --save` with pins, then `eval --plan`, `plan --format json` with the same pins and
/// `report`'s report.json: the same plan, the same numbers, leaf for leaf.
#[test]
fn eval_plan_and_report_json_give_one_plan_the_same_numbers() {
    let dir = scratch("review22", "one-plan");
    let scenarios: [(&str, &[&str]); 3] = [
        (
            "llama3-70b tp/pp/vpp",
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
            ],
        ),
        (
            "llama3-8b 128K cp 4 torchtitan",
            &[
                "--model",
                "llama3-8b",
                "--nodes",
                "4",
                "--global-batch",
                "16",
                "--seq-len",
                "131072",
                "--framework",
                "torchtitan",
                "--cp",
                "4",
            ],
        ),
        (
            "nemotron-h-56b uneven pp",
            &[
                "--model",
                "nemotron-h-56b",
                "--nodes",
                "16",
                "--global-batch",
                "768",
                "--seq-len",
                "8192",
                "--pp",
                "4",
                "--allow-uneven-pp",
            ],
        ),
    ];
    for (i, (what, pins)) in scenarios.iter().enumerate() {
        let file = format!("p{i}.yaml");
        let out = format!("rep{i}");
        let mut plan_args = vec!["plan"];
        plan_args.extend_from_slice(pins);
        let mut save = plan_args.clone();
        save.extend_from_slice(&["--save", &file]);
        let r = run_in(&dir, &save);
        assert_eq!(r.code, 0, "{what}: {}", r.stderr);
        let file_path = dir.join(&file);
        let file_path = file_path.to_str().unwrap();
        let eval = json(&["eval", "--plan", file_path, "--format", "json"]);
        let mut plan_json = plan_args.clone();
        plan_json.extend_from_slice(&["--top", "1", "--format", "json"]);
        let r = run_in(&dir, &plan_json);
        assert_eq!(r.code, 0, "{what}: {}", r.stderr);
        let planned: Value = serde_json::from_str(&r.stdout).unwrap();
        let r = run_in(&dir, &["report", &file, "--out", &out]);
        assert_eq!(r.code, 0, "{what}: {}", r.stderr);
        let reported: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(&out).join("report.json")).unwrap(),
        )
        .unwrap();
        let mut a = Vec::new();
        leaves(&eval["plans"][0], "", &mut a);
        assert!(a.len() > 100, "{what}: eval's plan has {} leaves", a.len());
        for (other, name) in [(&planned, "plan --format json"), (&reported, "report.json")] {
            let mut b = Vec::new();
            leaves(&other["plans"][0], "", &mut b);
            assert_eq!(a, b, "{what}: eval's plan against {name}'s first plan");
        }
        assert_parts_add_up(&eval["plans"][0], what);
    }
}

/// The table `plan` prints and the breakdown `eval` prints for the same saved plan: step time,
/// tokens/s, MFU, bubble share and memory read the same at the table's precision.
#[test]
fn plan_table_row_reads_evals_numbers() {
    let dir = scratch("review22", "table-row");
    let pins = [
        "plan",
        "--model",
        "deepseek-v3",
        "--mtp-layers",
        "1",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
        "--precision",
        "fp8",
        "--tp",
        "1",
        "--pp",
        "8",
        "--ep",
        "32",
        "--micro-batch",
        "2",
        "--allow-uneven-pp",
    ];
    let mut save = pins.to_vec();
    save.extend_from_slice(&["--save", "ds.yaml", "--top", "1"]);
    let r = run_in(&dir, &save);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row: Vec<String> = r
        .stdout
        .lines()
        .find(|l| l.starts_with("│ 1 "))
        .unwrap_or_else(|| panic!("no row 1 in:\n{}", r.stdout))
        .split('┆')
        .map(|c| {
            c.trim_matches(|ch: char| ch == '│' || ch.is_whitespace())
                .to_string()
        })
        .collect();
    let header: Vec<String> = r
        .stdout
        .lines()
        .find(|l| l.starts_with("│ # "))
        .unwrap()
        .split('┆')
        .map(|c| {
            c.trim_matches(|ch: char| ch == '│' || ch.is_whitespace())
                .to_string()
        })
        .collect();
    let cell = |name: &str| {
        let i = header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no {name} column: {header:?}"));
        row[i].clone()
    };
    let path = dir.join("ds.yaml");
    let e = json(&["eval", "--plan", path.to_str().unwrap(), "--format", "json"]);
    let p = &e["plans"][0];
    assert_eq!(
        cell("step s"),
        format!("{:.2}", f(&p["time"]["step_s"], "step"))
    );
    assert_eq!(
        cell("tokens/s"),
        format!("{:.0}", f(&p["tokens_per_s"], "tokens"))
    );
    assert_eq!(cell("MFU %"), format!("{:.1}", 100.0 * f(&p["mfu"], "mfu")));
    assert_eq!(
        cell("bubble %"),
        format!("{:.1}", 100.0 * f(&p["bubble_share"], "bubble"))
    );
    assert_eq!(
        cell("EP s"),
        format!("{:.2}", f(&p["time"]["ep_comm_exposed_s"], "ep"))
    );
    let gib = f(&p["memory"]["total_bytes"], "total") / (1u64 << 30) as f64;
    assert!(
        cell("mem GiB").starts_with(&format!("{gib:.1}/")),
        "{} against {gib:.1}",
        cell("mem GiB")
    );
    assert_parts_add_up(p, "deepseek-v3 ep 32 mtp");
}

/// The verdict's terms, each with its cause in parentheses (the text after "step): ").
fn verdict_terms(verdict: &str) -> Vec<String> {
    let body = verdict
        .split_once("step): ")
        .unwrap_or_else(|| panic!("no terms in {verdict}"))
        .1;
    body.split("), ").map(str::to_string).collect()
}

/// Defect 1: the same degrees in fp8, micro-batch 2 against 1. The EP cause says the bytes the
/// traffic rows print, and why they differ.
#[test]
fn compare_ep_cause_says_the_padded_bytes_its_traffic_rows_print() {
    let dir = scratch("review22", "ep-padding");
    let scenario = [
        "plan",
        "--model",
        "deepseek-v3",
        "--mtp-layers",
        "1",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
        "--precision",
        "fp8",
        "--tp",
        "1",
        "--pp",
        "8",
        "--ep",
        "32",
        "--allow-uneven-pp",
        "--recompute",
        "selective",
        "--vpp",
        "1",
    ];
    for (mb, file) in [("2", "a.yaml"), ("1", "b.yaml")] {
        let mut args = scenario.to_vec();
        args.extend_from_slice(&["--micro-batch", mb, "--save", file]);
        let r = run_in(&dir, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        // The padding rides the all-to-all only under Megatron-Core's router padding
        // (`--moe-router-padding-for-fp8`, physics round 32), which the plan file states.
        let path = dir.join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("moe_dispatch:\n  router_padding: true\n");
        std::fs::write(&path, text).unwrap();
    }
    let r = run_in(
        &dir,
        &[
            "compare", "--plan", "a.yaml", "--plan", "b.yaml", "--format", "json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    let term = |name: &str| {
        c["terms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} term: {}", c["terms"]))
            .clone()
    };
    let ep = term("EP");
    assert_eq!(ep["unit"], "GB");
    let (a_gb, b_gb) = (f(&ep["a"], "EP a"), f(&ep["b"], "EP b"));
    assert!(
        format!("{a_gb:.2}") != format!("{b_gb:.2}"),
        "the scenario must move different EP bytes: {a_gb} against {b_gb}"
    );
    let step = term("step");
    let a_fast = f(&step["a"], "step a") < f(&step["b"], "step b");
    let (fast_gb, slow_gb) = if a_fast { (a_gb, b_gb) } else { (b_gb, a_gb) };
    let verdict = c["verdict"].as_str().unwrap();
    let ep_term = verdict_terms(verdict)
        .into_iter()
        .find(|t| t.starts_with("EP comm"))
        .unwrap_or_else(|| panic!("no EP term in {verdict}"));
    let bytes = format!("{fast_gb:.2} against {slow_gb:.2} GB sent");
    assert!(ep_term.contains(&bytes), "no {bytes:?} in {ep_term:?}");
    assert!(
        ep_term.contains("pads every expert's rows to the fp8 alignment"),
        "{ep_term}"
    );
    assert!(ep_term.contains("one latency per peer each"), "{ep_term}");
}

/// Defect 2: the same tp and recompute, different layer splits. Every term of the verdict has
/// its cause, and TP's names the split.
#[test]
fn compare_tp_term_names_the_layer_split_that_moves_it() {
    let dir = scratch("review22", "tp-split");
    let scenario = [
        "plan",
        "--model",
        "nemotron-h-56b",
        "--nodes",
        "16",
        "--global-batch",
        "768",
        "--seq-len",
        "8192",
        "--tp",
        "4",
        "--pp",
        "4",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
        "--allow-uneven-pp",
    ];
    for (vpp, file) in [("1", "a.yaml"), ("6", "b.yaml")] {
        let mut args = scenario.to_vec();
        args.extend_from_slice(&["--vpp", vpp, "--save", file]);
        let r = run_in(&dir, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let r = run_in(
        &dir,
        &[
            "compare", "--plan", "a.yaml", "--plan", "b.yaml", "--format", "json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    let verdict = c["verdict"].as_str().unwrap();
    let terms = verdict_terms(verdict);
    let tp = terms
        .iter()
        .find(|t| t.starts_with("TP comm"))
        .unwrap_or_else(|| panic!("no TP term in {verdict}"));
    let split = |p: &Value| {
        format!(
            "{}/{}/{}",
            p["stages"]["first"], p["stages"]["middle_max"], p["stages"]["last"]
        )
    };
    let (a, b) = (split(&c["a"]), split(&c["b"]));
    assert_ne!(a, b, "the scenario must split the layers differently");
    assert!(
        tp.contains(&format!(
            "(layers per stage (first/middle/last) {a} against {b}"
        )) || tp.contains(&format!(
            "(layers per stage (first/middle/last) {b} against {a}"
        )),
        "{tp:?} in {verdict}"
    );
    for t in &terms {
        assert!(
            t.contains('('),
            "a term without its cause: {t:?} in {verdict}"
        );
    }
}

/// The JSON's schedule name said "1f1b" for a plan without a pipeline while `eval`'s text said
/// "pipeline schedule: none": it is null there now, and the schedule's name with a pipeline.
#[test]
fn a_plan_without_a_pipeline_has_no_schedule_in_the_json() {
    let schedule = |pp: &str| {
        let out = common::json(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "4",
            "--pp",
            pp,
            "--format",
            "json",
        ]);
        out["plans"][0]["schedule"]["schedule"].clone()
    };
    assert!(schedule("1").is_null(), "{}", schedule("1"));
    assert_eq!(schedule("2"), "1f1b");
}
