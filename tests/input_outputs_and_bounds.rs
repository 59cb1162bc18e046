//! Input-handling defects a reviewer reproduced on the built binary, one regression test each:
//! outputs that would replace an input (`--chart`, `--report`), unbounded `--price-per-gpu-hour`
//! and `--tokens`, plan flags dropped beside `--megatron-args`, `--tp-comm-overlap` without
//! sequence parallelism, a sweep point with no valid plan, and the framework's spelling in plan
//! files. Each checks the exit code, the one-line message and, for files, that the input is intact.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn copy_in(dir: &Path, bundled: &str, name: &str) -> String {
    let text = std::fs::read_to_string(Path::new(ROOT).join(bundled)).unwrap();
    std::fs::write(dir.join(name), &text).unwrap();
    text
}

// ---- 1. an output that is an input ---------------------------------------------------------

#[test]
fn a_sweep_chart_never_replaces_the_model_or_hf_config_it_reads() {
    let dir = scratch("review1", "chart");
    let model = copy_in(&dir, "models/llama3-8b.yaml", "mm.yaml");
    let sweep = [
        "sweep",
        "--axis",
        "nodes",
        "--values",
        "1",
        "--global-batch",
        "256",
    ];
    let mut args = sweep.to_vec();
    args.extend(["--model", "mm.yaml", "--chart", "./mm.yaml"]);
    let r = run_in(&dir, &args);
    assert_one_line_error(
        &r,
        &["--chart", "--model", "another path"],
        &[],
        "chart = model",
    );
    assert_eq!(std::fs::read_to_string(dir.join("mm.yaml")).unwrap(), model);

    let hf = copy_in(&dir, "tests/data/bert-base-uncased.config.json", "c.json");
    let mut args = sweep.to_vec();
    args.extend(["--hf-config", "c.json", "--chart", "c.json"]);
    let r = run_in(&dir, &args);
    assert_one_line_error(&r, &["--chart", "--hf-config"], &[], "chart = hf config");
    assert_eq!(std::fs::read_to_string(dir.join("c.json")).unwrap(), hf);

    // On the GPU axis the values are GPU files too.
    let gpu = copy_in(&dir, "clusters/a100-sxm-80g.yaml", "g.yaml");
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--model",
            "mm.yaml",
            "--axis",
            "gpu",
            "--values",
            "h100-sxm-80g,g.yaml",
            "--global-batch",
            "256",
            "--chart",
            "g.yaml",
        ],
    );
    assert_one_line_error(&r, &["--chart", "--values"], &[], "chart = gpu value");
    assert_eq!(std::fs::read_to_string(dir.join("g.yaml")).unwrap(), gpu);
    let _ = std::fs::remove_dir_all(dir);
}

// ---- 2. a report file that is an input -----------------------------------------------------

#[test]
fn a_report_never_replaces_an_input_inside_its_directory() {
    let dir = scratch("review1", "report");
    std::fs::create_dir(dir.join("rep")).unwrap();
    for name in ["index.html", "report.json"] {
        let plan = copy_in(&dir, "plans/seed-512b-32nodes.yaml", &format!("rep/{name}"));
        let input = format!("rep/{name}");
        let r = run_in(&dir, &["eval", "--plan", &input, "--report", "rep"]);
        assert_one_line_error(
            &r,
            &["--report rep", &input, "--plan", "another directory"],
            &[],
            name,
        );
        assert_eq!(std::fs::read_to_string(dir.join(&input)).unwrap(), plan);
        std::fs::remove_file(dir.join(&input)).unwrap();
    }
    // `tpsim report FILE --out DIR` is the same command.
    let plan = copy_in(&dir, "plans/seed-512b-32nodes.yaml", "rep/report.json");
    let r = run_in(&dir, &["report", "rep/report.json", "--out", "rep"]);
    assert_one_line_error(&r, &["--out rep", "rep/report.json"], &[], "report --out");
    assert_eq!(
        std::fs::read_to_string(dir.join("rep/report.json")).unwrap(),
        plan
    );
    std::fs::remove_file(dir.join("rep/report.json")).unwrap();

    let hf = copy_in(
        &dir,
        "tests/data/bert-base-uncased.config.json",
        "rep/memory.svg",
    );
    let r = run_in(
        &dir,
        &[
            "plan",
            "--hf-config",
            "rep/memory.svg",
            "--nodes",
            "1",
            "--global-batch",
            "256",
            "--report",
            "rep",
        ],
    );
    assert_one_line_error(&r, &["rep/memory.svg", "--hf-config"], &[], "plan --report");
    assert_eq!(
        std::fs::read_to_string(dir.join("rep/memory.svg")).unwrap(),
        hf
    );
    // Nothing was written beside it.
    let names: Vec<_> = std::fs::read_dir(dir.join("rep")).unwrap().collect();
    assert_eq!(names.len(), 1);
    let _ = std::fs::remove_dir_all(dir);
}

// ---- 3. price and tokens bounded, cost finite ----------------------------------------------

fn sweep_cost(price: &str, tokens: &str) -> Run {
    run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--global-batch",
        "256",
        "--axis",
        "nodes",
        "--values",
        "1",
        "--tokens",
        tokens,
        "--price-per-gpu-hour",
        price,
        "--format",
        "json",
    ])
}

#[test]
fn price_and_tokens_past_their_bounds_are_refused_and_the_bounds_give_finite_costs() {
    let r = sweep_cost("1e308", "300B");
    assert_one_line_error(
        &r,
        &["--price-per-gpu-hour 1e308", "10000"],
        &[],
        "price 1e308",
    );
    let r = sweep_cost("2.5", "1e40");
    assert_one_line_error(&r, &["--tokens 1e40", "1e16"], &[], "tokens 1e40");
    assert!(
        !r.stderr.contains("--axis"),
        "said once, not per point: {}",
        r.stderr
    );
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "256",
        "--tokens",
        "20000T",
    ]);
    assert_one_line_error(&r, &["--tokens 20000T", "1e16"], &[], "plan tokens");

    let r = sweep_cost("1e4", "1e16");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    let row = &json["rows"][0];
    for key in ["cost_to_train", "time_to_train_s"] {
        let x = row[key].as_f64().unwrap_or_else(|| panic!("{key}: {row}"));
        assert!(x.is_finite() && x > 0.0, "{key} = {x}");
    }
}

// ---- 4. plan flags beside --megatron-args --------------------------------------------------

#[test]
fn cp_ep_and_etp_beside_a_megatron_line_are_refused_not_dropped() {
    for (flag, value) in [
        ("--cp", "2"),
        ("--ep", "2"),
        ("--etp", "2"),
        ("--context-parallel-size", "2"),
        ("--reshard-after-forward", "false"),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "16",
            "--megatron-args",
            "@examples/megatron/llama3-70b.sh",
            flag,
            value,
        ]);
        assert_one_line_error(&r, &["--megatron-args", "cannot be used with"], &[], flag);
    }
}

// ---- 5. --tp-comm-overlap without sequence parallelism -------------------------------------

fn eval_tp8(extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--tp",
        "8",
        "--pp",
        "1",
        "--micro-batch",
        "1",
    ];
    args.extend(extra);
    run(&args)
}

#[test]
fn tp_comm_overlap_without_sequence_parallelism_is_refused_and_never_claimed() {
    let r = eval_tp8(&["--tp-comm-overlap"]);
    assert_one_line_error(
        &r,
        &["--tp-comm-overlap", "--sequence-parallel", "arguments.py"],
        &[],
        "explicit overlap",
    );
    // The framework's default overlap is no request: evaluated, and the header says the truth.
    let r = eval_tp8(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r.stdout.lines().nth(2).unwrap();
    assert!(!header.contains("overlaps TP comm"), "{header}");
    assert!(header.contains("TP comm not overlapped"), "{header}");
    let r = eval_tp8(&["--sequence-parallel", "--tp-comm-overlap"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r.stdout.lines().nth(2).unwrap();
    assert!(header.contains("overlaps TP comm"), "{header}");
}

// ---- 6. a sweep point with no valid plan (a row since review 3) --------------------------

#[test]
fn a_sweep_point_with_no_valid_plan_says_why_as_plan_does() {
    let plan = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--global-batch",
        "256",
        "--nodes",
        "100000",
    ]);
    assert_one_line_error(&plan, &["no valid plan exists"], &[], "plan");
    let sweep = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--global-batch",
        "256",
        "--axis",
        "nodes",
        "--values",
        "1,100000",
        "--format",
        "json",
    ]);
    // The point is a row carrying plan's reason (review 3: it no longer aborts the sweep).
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    let rows: Value = serde_json::from_str(&sweep.stdout).unwrap();
    let reason = plan
        .stderr
        .trim()
        .trim_start_matches("error: no valid plan exists: ");
    // In the sweep's words: the point's nodes came from --values, not --nodes (round 8b).
    assert_eq!(
        rows["rows"][1]["no_valid_plan"],
        reason.replace("change --nodes,", "change --values,")
    );
    assert!(reason.contains("change --nodes,"), "{reason}");
    assert!(rows["rows"][1]["tp"].is_null());
    assert!(rows["rows"][0]["tp"].is_u64());
}

// ---- 7. the framework's spelling in plan files ---------------------------------------------

#[test]
fn plan_files_spell_the_framework_as_the_command_line_and_read_the_old_spelling() {
    let dir = scratch("review1", "framework");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "256",
            "--framework",
            "megatron-lm-2021",
            "--save",
            "p.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    assert!(saved.contains("framework: megatron-lm-2021\n"), "{saved}");
    let old = saved.replace("framework: megatron-lm-2021", "framework: megatron-lm2021");
    std::fs::write(dir.join("old.yaml"), old).unwrap();
    for file in ["p.yaml", "old.yaml"] {
        let r = run_in(&dir, &["eval", "--plan", file]);
        assert_eq!(r.code, 0, "{file}: {}", r.stderr);
        assert!(
            r.stdout.contains("as megatron-lm-2021 runs it"),
            "{file}: {}",
            r.stdout
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
