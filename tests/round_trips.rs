//! Round-trip fidelity over a matrix of bundled models, frameworks, precisions and clusters: a plan
//! saved with `plan --save` and evaluated with `eval --plan`, the same plan emitted with
//! `--emit megatron` and read back with `eval --megatron-args`, and the report written from the
//! saved plan all give the numbers `plan --format json` printed. What a launch line cannot carry
//! must be said in the emitter's notes; everything else must come back unchanged.

mod common;

use common::{json, run, scratch};
use serde_json::Value;

/// One row of the matrix: model, nodes, GPU, global batch, framework, precision.
struct Case {
    model: &'static str,
    nodes: u32,
    gpu: &'static str,
    global_batch: u32,
    framework: &'static str,
    precision: &'static str,
}

const fn case(
    model: &'static str,
    nodes: u32,
    gpu: &'static str,
    global_batch: u32,
    framework: &'static str,
    precision: &'static str,
) -> Case {
    Case {
        model,
        nodes,
        gpu,
        global_batch,
        framework,
        precision,
    }
}

const H100: &str = "h100-sxm-80g";
const B200: &str = "b200-sxm-180g";

/// Dense and MoE models under every framework, bf16, fp8 and mxfp8, on 1 to 32 nodes. The
/// megatron-core rows also take the launch-line round trip; they include a ZeRO-0 plan
/// (gpt3-175b: no parameter all-gather to overlap), tp 1 plans (qwen3, gpt-oss: no TP overlap)
/// and MLA models whose head width is not hidden / heads (deepseek-v3).
const MATRIX: &[Case] = &[
    case("gpt3-175b", 8, H100, 128, "megatron-core", "bf16"),
    case("llama3-8b", 1, H100, 64, "megatron-core", "bf16"),
    case("llama3-8b", 1, H100, 64, "torchtitan", "bf16"),
    case("llama3-8b", 1, H100, 64, "deepspeed", "fp8"),
    case("llama3-8b", 1, H100, 64, "megatron-lm-2021", "bf16"),
    case("llama3-70b", 4, H100, 128, "megatron-core", "fp8"),
    case("llama3-70b", 4, H100, 128, "torchtitan", "fp8"),
    case("bloom-176b", 8, H100, 128, "megatron-core", "bf16"),
    case("mt-nlg-530b", 32, H100, 256, "megatron-lm-2021", "bf16"),
    case("deepseek-v3", 32, H100, 256, "megatron-core", "fp8"),
    case("qwen3-30b-a3b", 2, H100, 64, "megatron-core", "bf16"),
    case("qwen3-30b-a3b", 2, H100, 64, "torchtitan", "bf16"),
    case("mixtral-8x7b", 2, H100, 64, "megatron-core", "fp8"),
    case("mixtral-8x22b", 8, H100, 128, "deepspeed", "bf16"),
    case("gpt-oss-20b", 1, B200, 64, "megatron-core", "mxfp8"),
    case("grok-1", 16, H100, 128, "megatron-core", "bf16"),
];

impl Case {
    fn name(&self) -> String {
        format!(
            "{} on {} x {} ({}, {})",
            self.model, self.nodes, self.gpu, self.framework, self.precision
        )
    }

    fn args(&self) -> Vec<String> {
        [
            "--model",
            self.model,
            "--nodes",
            &self.nodes.to_string(),
            "--gpu",
            self.gpu,
            "--global-batch",
            &self.global_batch.to_string(),
            "--framework",
            self.framework,
            "--precision",
            self.precision,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Every difference between two JSON values, as `path: left != right`, skipping keys in `skip`.
fn differences(left: &Value, right: &Value, path: &str, skip: &[&str], out: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                if skip.contains(&key.as_str()) {
                    continue;
                }
                let at = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differences(x, y, &at, skip, out),
                    (x, y) => out.push(format!("{at}: {x:?} != {y:?}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{path}[{i}]"), skip, out);
            }
        }
        (a, b) if a != b => {
            let short = |v: &Value| v.to_string().chars().take(120).collect::<String>();
            out.push(format!("{path}: {} != {}", short(a), short(b)));
        }
        _ => {}
    }
}

fn assert_same(left: &Value, right: &Value, path: &str, skip: &[&str], what: &str) {
    let mut out = Vec::new();
    differences(left, right, path, skip, &mut out);
    assert!(out.is_empty(), "{what}:\n{}", out.join("\n"));
}

/// Selective recompute's modules belong to a plan that recomputes selectively: `plan`'s training
/// block keeps the searched ones, `eval` of one plan names them only when that plan uses them.
fn assert_modules_follow_the_plan(planned: &Value, evaluated: &Value, what: &str) {
    let selective = evaluated["plans"][0]["recompute"] == "selective";
    let modules = &evaluated["training"]["recompute_modules"];
    if selective {
        assert_eq!(
            modules, &planned["training"]["recompute_modules"],
            "{what}: recompute_modules"
        );
    } else {
        assert!(modules.is_null(), "{what}: modules on a non-selective plan");
    }
}

/// The header (what the plan is) and the keys that describe the file or the search, not the plan.
const NOT_THE_PLAN: &[&str] = &["search", "origin", "recompute_modules"];

#[test]
fn saved_plans_evaluate_and_report_to_the_numbers_plan_printed() {
    let dir = scratch("round_trips", "saved");
    for case in MATRIX {
        let what = case.name();
        let file = dir.join(format!(
            "{}-{}-{}.yaml",
            case.model, case.framework, case.precision
        ));
        let file = file.to_str().unwrap();
        let mut args = vec!["plan".to_string()];
        args.extend(case.args());
        args.extend(["--top", "1", "--format", "json", "--save", file].map(String::from));
        let planned = json(&strs(&args));
        assert!(
            planned["plans"][0]["memory"]["fits"] == true,
            "{what}: nothing fits"
        );

        // (a) eval of the saved file: the same plan, time, memory, model, cluster and training.
        let evaluated = json(&["eval", "--plan", file, "--format", "json"]);
        assert_same(
            &planned,
            &evaluated,
            "",
            NOT_THE_PLAN,
            &format!("{what}: eval --plan"),
        );
        assert_modules_follow_the_plan(&planned, &evaluated, &what);

        // (c) the report of the saved file: its report.json is eval's, and its HTML row for the
        // plan shows the same memory, step time and tokens per second.
        let out = dir.join(format!("report-{}-{}", case.model, case.framework));
        let r = run(&["report", file, "--out", out.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{what}: report: {}", r.stderr);
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        // report.json lists the plan, then its search's runners-up.
        let report_what = format!("{what}: report.json");
        assert_same(
            &evaluated["plans"][0],
            &report["plans"][0],
            "plans[0]",
            &[],
            &report_what,
        );
        let mut skip = NOT_THE_PLAN.to_vec();
        skip.push("plans");
        assert_same(&evaluated, &report, "", &skip, &report_what);
        let html = std::fs::read_to_string(out.join("index.html")).unwrap();
        let text = html_text(&html);
        let plan = &evaluated["plans"][0];
        let gib = |v: &Value| v.as_f64().unwrap() / f64::from(1u32 << 30);
        let row = "this plan (search #1)";
        let numbers = format!(
            "{:.1}/{:.1} {:.2} {:.0}",
            gib(&plan["memory"]["total_bytes"]),
            gib(&plan["memory"]["capacity_bytes"]),
            plan["time"]["step_s"].as_f64().unwrap(),
            plan["tokens_per_s"].as_f64().unwrap()
        );
        let at = text
            .find(row)
            .unwrap_or_else(|| panic!("{what}: no {row:?} row in the report"));
        let line: String = text[at..].chars().take(200).collect();
        assert!(
            line.contains(&numbers),
            "{what}: want {numbers:?} in {line:?}"
        );
    }
}

/// The visible text of an HTML page, whitespace collapsed.
fn html_text(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The overlap flags a Megatron-LM line leaves off, by the key of `training.overlap`, as the
/// emitter's notes name them.
fn overlaps_said_left_off(notes: &str) -> Vec<&'static str> {
    let Some(note) = notes.lines().find(|l| l.contains("leaves off")) else {
        return Vec::new();
    };
    [
        ("--tp-comm-overlap", "tp_comm"),
        ("--overlap-param-gather", "param_gather"),
        ("--overlap-moe-expert-parallel-comm", "moe_a2a"),
    ]
    .into_iter()
    .filter(|(flag, _)| note.contains(flag))
    .map(|(_, key)| key)
    .collect()
}

#[test]
fn emitted_megatron_lines_read_back_to_the_same_model_plan_and_time() {
    for case in MATRIX.iter().filter(|c| c.framework == "megatron-core") {
        let what = case.name();
        let mut args = vec!["plan".to_string()];
        args.extend(case.args());
        let mut planned_args = args.clone();
        planned_args.extend(["--top", "1", "--format", "json"].map(String::from));
        let planned = json(&strs(&planned_args));
        args.extend(["--emit", "megatron"].map(String::from));
        let emitted = run(&strs(&args));
        assert_eq!(emitted.code, 0, "{what}: {}", emitted.stderr);
        let line = emitted.stdout.trim();
        let nodes = case.nodes.to_string();
        let back = json(&[
            "eval",
            "--megatron-args",
            line,
            "--nodes",
            &nodes,
            "--gpu",
            case.gpu,
            "--format",
            "json",
        ]);
        let what = format!("{what}: eval --megatron-args \"{line}\"");
        // The plan: degrees, recompute, ZeRO, precision, applied overlap, time and memory.
        assert_same(
            &planned["plans"][0],
            &back["plans"][0],
            "plans[0]",
            &[],
            &what,
        );
        // The model (the line names it by its shape, not its name) and the cluster.
        assert_same(
            &planned["model"],
            &back["model"],
            "model",
            &[
                "name",
                "description",
                "source",
                "published_params_b",
                "origin",
            ],
            &what,
        );
        assert_same(&planned["cluster"], &back["cluster"], "cluster", &[], &what);
        // The training settings, but for an overlap the line leaves off and says so.
        let left_off = overlaps_said_left_off(&emitted.stderr);
        let mut skip = vec!["recompute_modules"];
        skip.extend(&left_off);
        assert_same(
            &planned["training"],
            &back["training"],
            "training",
            &skip,
            &what,
        );
        for key in left_off {
            assert_eq!(back["training"]["overlap"][key], false, "{what}: {key}");
            assert_eq!(
                back["plans"][0]["overlap_applied"][key], false,
                "{what}: {key}"
            );
        }
        assert_modules_follow_the_plan(&planned, &back, &what);
    }
}

#[test]
fn megatron_lines_leave_off_no_requested_overlap_unsaid() {
    // gpt3-175b's best plan here is ZeRO-0 and qwen3-30b-a3b's is tp 1: each asks (by the
    // framework's default) for an overlap its line cannot write, and the notes say which.
    for (case, flag) in [
        (&MATRIX[0], "--overlap-param-gather"),
        (&MATRIX[10], "--tp-comm-overlap"),
    ] {
        let mut args = vec!["plan".to_string()];
        args.extend(case.args());
        args.extend(["--emit", "megatron"].map(String::from));
        let emitted = run(&strs(&args));
        assert_eq!(emitted.code, 0, "{}", emitted.stderr);
        assert!(!emitted.stdout.contains(flag), "{}", emitted.stdout);
        assert!(
            emitted
                .stderr
                .lines()
                .any(|l| l.starts_with("note: ") && l.contains("leaves off") && l.contains(flag)),
            "{}: no note for {flag}:\n{}",
            case.name(),
            emitted.stderr
        );
    }
}
