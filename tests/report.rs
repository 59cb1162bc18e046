//! `--report DIR` and `tpsim report`: every SVG parses as XML and shows what the issue asks for
//! (plan labels, axis titles, one bar per plan, one point per evaluated plan, one cell per GPU,
//! one Gantt block per micro-batch per stage per direction); the JSON carries each plan's ledger;
//! bad paths exit 2 with a one-line error.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn tpsim() -> Command {
    Command::cargo_bin("tpsim").unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpsim-report-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every `<text>` of an SVG, after checking that it parses.
fn texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).expect("SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect()
}

fn count_rects_with_fill(svg: &str, fill: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(fill))
        .count()
}

fn count_tag(svg: &str, tag: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants().filter(|n| n.has_tag_name(tag)).count()
}

fn json_of(args: &[&str]) -> Value {
    let out = tpsim()
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const SMALL: &[&str] = &[
    "plan",
    "--params",
    "7B",
    "--nodes",
    "2",
    "--global-batch",
    "32",
    "--top",
    "5",
];

#[test]
fn plan_report_figures_show_what_they_must() {
    let dir = scratch("plan");
    let out = tpsim()
        .args(SMALL)
        .arg("--report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = json_of(SMALL);
    let plans = json["plans"].as_array().unwrap();
    let n = plans.len();
    assert_eq!(n, 5);

    // 1. Memory: a label per plan, axis titles, one weights segment per plan, the capacity line.
    let memory = read(&dir, "memory.svg");
    let t = texts(&memory);
    for rank in 1..=n {
        assert!(
            t.iter().any(|s| s.starts_with(&format!("#{rank} t"))),
            "no label #{rank}: {t:?}"
        );
    }
    assert!(t.iter().any(|s| s == "memory per GPU (GiB)"));
    assert!(
        t.iter().any(|s| s
            == "plan (rank and degrees t·c·p·d·e·et; under it vpp, micro-batch, sp when on, ZeRO, recompute)")
    );
    assert!(t.iter().any(|s| s.contains("GPU capacity")));
    // Weights in MEMORY_PARTS' cyan since review round 28 (no step term shares it).
    assert_eq!(
        count_rects_with_fill(&memory, "#17BECF"),
        n,
        "one weights bar per plan"
    );

    // 2. Step time: one compute bar and one MFU label per plan.
    let step = read(&dir, "step_time.svg");
    let t = texts(&step);
    assert!(t.iter().any(|s| s == "time per step (s)"));
    assert_eq!(t.iter().filter(|s| s.starts_with("MFU ")).count(), n);
    assert_eq!(
        count_rects_with_fill(&step, "#4E79A7"),
        n,
        "one compute bar per plan"
    );
    let mfu0 = plans[0]["mfu"].as_f64().unwrap() * 100.0;
    assert!(t.contains(&format!("MFU {mfu0:.1}%")), "{t:?}");

    // 3. Search: one point per evaluated plan (no thinning below 5000).
    let search = read(&dir, "search.svg");
    let t = texts(&search);
    let stats = &json["search"];
    let invalid = stats["infeasible_by_reason"]["invalid_plan"]
        .as_u64()
        .unwrap_or(0);
    let evaluated = (stats["candidates"].as_u64().unwrap() - invalid) as usize;
    assert!(evaluated < tpsim::report::SCATTER_MAX_POINTS);
    assert_eq!(count_tag(&search, "circle"), evaluated);
    assert!(
        t.contains(&format!("all {evaluated} evaluated plans drawn")),
        "{t:?}"
    );
    assert!(t.iter().any(|s| s == "throughput (tokens/s)"));
    assert!(t.iter().any(|s| s.starts_with("memory per GPU (GiB")));
    assert!(t.iter().any(|s| s == "— Pareto frontier"));

    // 4. Layout: one labelled cell per GPU, each (dp, pp, tp) once.
    let layout = read(&dir, "layout.svg");
    let mut cells: Vec<String> = texts(&layout)
        .into_iter()
        .filter(|s| s.starts_with('(') && s.ends_with(')') && s.matches(',').count() == 2)
        .collect();
    assert_eq!(cells.len(), 16);
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), 16);

    // 5. Timeline: one block per micro-batch per chunk per stage per direction.
    let best = &plans[0];
    let (p, v, m) = (
        best["pp"].as_u64().unwrap() as usize,
        best["vpp"].as_u64().unwrap() as usize,
        best["num_microbatches"].as_u64().unwrap() as usize,
    );
    assert!(2 * p * v * m <= tpsim::report::GANTT_MAX_BLOCKS);
    let gantt = read(&dir, "timeline.svg");
    let fill = |d, c| {
        let col = tpsim::report::block_colour(d, c);
        format!("#{:02X}{:02X}{:02X}", col.0, col.1, col.2)
    };
    use tpsim::cost::schedule::Direction::{Backward, Forward};
    for d in [Forward, Backward] {
        let blocks: usize = (0..v as u32)
            .map(|c| count_rects_with_fill(&gantt, &fill(d, c)))
            .sum();
        assert_eq!(blocks, p * v * m, "{d:?} blocks");
    }
    assert!(texts(&gantt).iter().any(|s| s == "time in the step (s)"));

    // The page: every figure linked relatively, nothing fetched from the network.
    let html = read(&dir, "index.html");
    for name in ["memory", "step_time", "search", "layout", "timeline"] {
        assert!(html.contains(&format!("<img src=\"{name}.svg\"")), "{name}");
    }
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"));
    assert!(html.contains("Communication ledger"));
    assert!(html.contains("search:"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_command_draws_the_seed_plan() {
    let dir = scratch("seed");
    let out = tpsim()
        .args(["report", "plans/seed-512b-32nodes.yaml", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "index.html",
        "memory.svg",
        "step_time.svg",
        "search.svg",
        "layout.svg",
        "timeline.svg",
        "report.json",
    ] {
        assert!(dir.join(name).is_file(), "{name}");
    }
    for name in [
        "memory.svg",
        "step_time.svg",
        "search.svg",
        "layout.svg",
        "timeline.svg",
    ] {
        texts(&read(&dir, name));
    }
    // 32 nodes of 8: every GPU drawn; the first bar is the evaluated plan.
    let cells = texts(&read(&dir, "layout.svg"))
        .into_iter()
        .filter(|s| s.starts_with('(') && s.ends_with(')'))
        .count();
    assert_eq!(cells, 256);
    let memory_texts = texts(&read(&dir, "memory.svg"));
    // The seed plan's selective recompute is Megatron-Core's, which runs the fused attention
    // forward again: a plan of its own, outside the search (which never proposes it), so it has
    // no search number; the other bars carry theirs from the search's folded list, as `plan`
    // numbers its rows: the first four, distinct.
    assert!(
        memory_texts.iter().any(|s| s == "this plan t8·p16·d2"),
        "{memory_texts:?}"
    );
    let mut places: Vec<usize> = memory_texts
        .iter()
        .filter_map(|s| s.strip_prefix('#'))
        .filter_map(|s| s.split(' ').next()?.parse().ok())
        .collect();
    places.sort_unstable();
    assert_eq!(places, vec![1, 2, 3, 4], "{memory_texts:?}");
    // 768 micro-batches x 16 stages: the timeline folds its steady middle and says so.
    assert!(
        texts(&read(&dir, "timeline.svg"))
            .iter()
            .any(|s| s.contains("is folded"))
    );
    // The seed plan (selective recompute) is outside the search space, and still marked.
    assert!(
        texts(&read(&dir, "search.svg"))
            .iter()
            .any(|s| s == "✕ the evaluated plan"),
        "the search figure marks the evaluated plan"
    );
    // The Inputs block wraps its long model line instead of clipping it.
    assert!(read(&dir, "index.html").contains("white-space:pre-wrap"));
    // Plans that share tp·pp·dp tell apart under their bars.
    assert!(
        texts(&read(&dir, "memory.svg"))
            .iter()
            .any(|s| s == "recompute selective")
    );
    // Thinned scatter says how many it drew.
    assert!(
        texts(&read(&dir, "search.svg"))
            .iter()
            .any(|s| s.contains("evaluated plans drawn"))
    );
    let json: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    assert!(
        json["plans"][0]["ledger"]["entries"]
            .as_array()
            .unwrap()
            .len()
            >= 8
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eval_json_carries_ledger_and_schedule() {
    let json = json_of(&["eval", "--plan", "plans/seed-512b-32nodes.yaml"]);
    let plan = &json["plans"][0];
    for (group, key) in [
        ("tp", "tp_wire_bytes"),
        ("pp", "pp_wire_bytes"),
        ("dp", "dp_wire_bytes"),
    ] {
        let want = plan["comm"][group]["wire_bytes"].as_f64().unwrap();
        let got = plan["ledger"][key].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-9 * want.max(1.0),
            "{group}: {got} vs {want}"
        );
    }
    let entries = plan["ledger"]["entries"].as_array().unwrap();
    // Sequence parallelism: all-gathers and reduce-scatters, no TP all-reduce but the
    // vocabulary-parallel loss's three fp32 values per token (`embedding_output_tp`).
    assert!(
        entries
            .iter()
            .any(|e| e["op"] == "all_gather" && e["group"] == "tp")
    );
    assert!(!entries.iter().any(|e| e["op"] == "all_reduce"
        && e["group"] == "tp"
        && !e["site"].as_str().unwrap().contains("cross-entropy")));
    assert!(
        entries
            .iter()
            .any(|e| e["op"] == "send_recv" && e["pass"] == "backward")
    );
    let schedule = &plan["schedule"];
    let simulated = schedule["simulated_step_s"].as_f64().unwrap();
    assert!((simulated - plan["time"]["step_s"].as_f64().unwrap()).abs() < 1e-9 * simulated);
    assert!(schedule["closed_form_step_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn eval_says_which_step_time_it_uses() {
    let out = tpsim()
        .args(["eval", "--plan", "plans/seed-512b-32nodes.yaml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("pipeline schedule:"))
        .expect("eval names the schedule it used");
    assert!(line.contains("simulated 1F1B step"), "{line}");
    assert!(line.contains("closed form"), "{line}");
}

fn one_line_error(out: &std::process::Output, must_contain: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    for s in must_contain {
        assert!(lines[0].contains(s), "{s:?} not in {stderr}");
    }
}

#[test]
fn bad_report_paths_exit_2_with_one_line() {
    let base = scratch("bad");
    std::fs::create_dir_all(&base).unwrap();
    let file = base.join("taken");
    std::fs::write(&file, "not a directory").unwrap();
    let file_s = file.to_str().unwrap();

    // An existing file where the directory should be.
    let out = tpsim()
        .args(SMALL)
        .args(["--report", file_s])
        .output()
        .unwrap();
    one_line_error(&out, &["--report", file_s, "directory"]);
    assert!(out.stdout.is_empty(), "fails before printing plans");

    // A file in the middle of the path.
    let below = format!("{file_s}/sub");
    let out = tpsim()
        .args(["report", "plans/seed-512b-32nodes.yaml", "--out", &below])
        .output()
        .unwrap();
    one_line_error(&out, &["--out", &below, "cannot create"]);

    // A place nobody can write, even root.
    let out = tpsim()
        .args([
            "eval",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--report",
            "/proc/tpsim-report",
        ])
        .output()
        .unwrap();
    one_line_error(&out, &["--report /proc/tpsim-report", "writable"]);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn plan_refines_the_shown_plans_and_says_when_the_order_changes() {
    // With uneven splits allowed, the simulated schedule reorders the 512B top ten (2021
    // Megatron-LM: synchronous pipeline sends, so unequal stages show in the schedule; at 640
    // sequences per step, where its search, without sequence parallelism, still reorders; the
    // closed form and the simulation agree on the slowest stage's busy time since 2026-12-03, so
    // the reordering comes from the fill and drain of unequal stages alone). 640 sequences since
    // 2026-12-05, when the in-flight micro-batches of interleaved middle stages were counted as
    // Megatron's warm-up does and 768 stopped reordering).
    let args = [
        "plan",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--global-batch",
        "640",
        "--allow-uneven-pp",
        "--framework",
        "megatron-lm-2021",
    ];
    let out = tpsim().args(args).output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("simulated 1F1B schedule"), "{stdout}");
    assert!(stdout.contains("changed the order"), "{stdout}");
    let json = json_of(&args);
    let plans = json["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 10);
    // Shown in simulated order, each with its ledger and schedule.
    for w in plans.windows(2) {
        assert!(w[0]["tokens_per_s"].as_f64() >= w[1]["tokens_per_s"].as_f64());
    }
    for p in plans {
        let tp = p["comm"]["tp"]["wire_bytes"].as_f64().unwrap();
        assert!((p["ledger"]["tp_wire_bytes"].as_f64().unwrap() - tp).abs() <= 1e-9 * tp);
        assert!(p["schedule"]["simulated_step_s"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn interleaved_timeline_has_one_block_per_chunk_microbatch_stage_direction() {
    let dir = scratch("interleaved");
    let out = tpsim()
        .args([
            "eval",
            "--model",
            "gpt3-175b",
            "--nodes",
            "4",
            "--tp",
            "4",
            "--pp",
            "4",
            "--vpp",
            "3",
            "--dp",
            "2",
            "--global-batch",
            "16",
            "--recompute",
            "full",
            "--report",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    // 175B on 32 GPUs does not fit: exit 1, and the report is still written (it shows why).
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (p, v, m) = (4, 3, 8);
    let gantt = read(&dir, "timeline.svg");
    use tpsim::cost::schedule::Direction::{Backward, Forward};
    for d in [Forward, Backward] {
        for c in 0..v {
            let col = tpsim::report::block_colour(d, c);
            let fill = format!("#{:02X}{:02X}{:02X}", col.0, col.1, col.2);
            assert_eq!(
                count_rects_with_fill(&gantt, &fill),
                (p * m) as usize,
                "{d:?} chunk {c}"
            );
        }
    }
    let t = texts(&gantt);
    assert!(t.iter().any(|s| s.contains("interleaved 1F1B")), "{t:?}");
    for stage in 0..p {
        assert!(t.contains(&format!("stage {stage}")), "{t:?}");
    }
    // 4 nodes of 8 GPUs, every one drawn.
    let cells = texts(&read(&dir, "layout.svg"))
        .into_iter()
        .filter(|s| s.starts_with('(') && s.ends_with(')'))
        .count();
    assert_eq!(cells, 32);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report of a plan that does not fit says so on the page's first line and on every figure.
#[test]
fn a_report_of_a_plan_that_does_not_fit_says_so_first_and_on_every_figure() {
    let dir = scratch("oom");
    let out = tpsim()
        .args([
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--tp",
            "1",
            "--pp",
            "1",
            "--report",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let html = read(&dir, "index.html");
    let h1 = html
        .lines()
        .find(|l| l.starts_with("<h1>"))
        .expect("the page has a heading");
    assert!(h1.contains("the evaluated plan does not fit (OOM)"), "{h1}");
    assert!(
        html.contains("this plan t1·p1·d128 (does not fit)"),
        "no unfit label"
    );
    for name in [
        "memory.svg",
        "step_time.svg",
        "search.svg",
        "layout.svg",
        "timeline.svg",
    ] {
        let t = texts(&read(&dir, name));
        assert!(
            t.iter()
                .any(|s| s.starts_with("the evaluated plan does not fit (OOM): it needs")),
            "{name}: {t:?}"
        );
    }
    assert!(
        texts(&read(&dir, "memory.svg"))
            .iter()
            .any(|s| s == "does not fit")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sweep chart places numeric points at their values on a log axis (1, 2, 8: the gap from 2 to
/// 8 is twice the gap from 1 to 2) and its title names the model.
#[test]
fn sweep_chart_has_a_log_axis_and_names_the_model() {
    let dir = scratch("sweep");
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("sweep.svg");
    let out = tpsim()
        .args([
            "sweep", "--params", "7B", "--axis", "nodes", "--values", "1,2,8", "--chart",
        ])
        .arg(&chart)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<(String, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            (
                n.text().unwrap_or("").trim().to_string(),
                n.attribute("x")
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(f64::NAN),
            )
        })
        .collect();
    assert!(
        texts
            .iter()
            .any(|(t, _)| t.contains("7.1B-parameter model")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|(t, _)| t == "nodes (log scale)"));
    // The first panel's labels under its points.
    let x_of = |label: &str| {
        texts
            .iter()
            .find(|(t, _)| t == label)
            .unwrap_or_else(|| panic!("no label {label}: {texts:?}"))
            .1
    };
    let (x1, x2, x8) = (x_of("1"), x_of("2"), x_of("8"));
    assert!(
        ((x8 - x2) - 2.0 * (x2 - x1)).abs() < 2.0,
        "1, 2, 8 at {x1}, {x2}, {x8}: not a log axis"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a pipeline (pp 1) the timeline still draws its one stage: a forward and a backward block
/// per micro-batch.
#[test]
fn a_single_stage_timeline_draws_its_blocks() {
    let dir = scratch("pp1");
    let out = tpsim()
        .args([
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--pp",
            "1",
            "--global-batch",
            "16",
            "--report",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gantt = read(&dir, "timeline.svg");
    use tpsim::cost::schedule::Direction::{Backward, Forward};
    for d in [Forward, Backward] {
        let col = tpsim::report::block_colour(d, 0);
        let fill = format!("#{:02X}{:02X}{:02X}", col.0, col.1, col.2);
        assert_eq!(count_rects_with_fill(&gantt, &fill), 16, "{d:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn rects_with_stroke(svg: &str, stroke: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some(stroke))
        .count()
}

/// Runs `eval ARGS --report DIR` and returns the page, the layout figure and the JSON.
fn eval_report(name: &str, args: &[&str]) -> (String, String, Value) {
    let dir = scratch(name);
    let out = tpsim()
        .args(["eval"])
        .args(args)
        .arg("--report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = (
        read(&dir, "index.html"),
        read(&dir, "layout.svg"),
        serde_json::from_str(&read(&dir, "report.json")).unwrap(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    got
}

/// Issue 8 item 0 and issue 9 item 6: the ledger lists the CP ring and the EP all-to-alls with
/// their step totals equal to the estimate's, and the layout figure draws the CP and EP groups.
#[test]
fn cp_and_ep_plans_show_their_groups_in_ledger_and_layout() {
    // Context parallelism: llama3-8b at 128K tokens, tp 8 x cp 2 x pp 2 on 32 GPUs.
    let (html, layout, json) = eval_report(
        "cp",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--seq-len",
            "131072",
            "--tp",
            "8",
            "--cp",
            "2",
            "--pp",
            "2",
            "--micro-batch",
            "1",
            "--sequence-parallel",
            "--global-batch",
            "64",
        ],
    );
    for row in [
        "<tr><td>CP</td><td>send/recv</td><td>forward</td><td>attention: this rank's K/V chunk to the next CP rank",
        "<tr><td>CP</td><td>send/recv</td><td>backward</td><td>attention backward: accumulated dK/dV to the next CP rank",
        "CP total sent per GPU per step",
    ] {
        assert!(html.contains(row), "ledger lacks {row}");
    }
    let plan = &json["plans"][0];
    let (got, want) = (
        plan["ledger"]["cp_wire_bytes"].as_f64().unwrap(),
        plan["comm"]["cp"]["wire_bytes"].as_f64().unwrap(),
    );
    assert!(
        want > 0.0 && (got - want).abs() <= 1e-9 * want,
        "{got} vs {want}"
    );
    let words = texts(&layout);
    assert!(
        words
            .iter()
            .any(|s| s.starts_with("CP groups: rings of 2 GPUs at stride 8")),
        "{words:?}"
    );
    // One (dp, c, pp, tp) label per GPU; the 16 GPUs of each block of CP rings span two nodes,
    // outlined on each: 4 outlines.
    let cells = words
        .iter()
        .filter(|s| s.starts_with('(') && s.matches(',').count() == 3)
        .count();
    assert_eq!(cells, 32);
    assert_eq!(rects_with_stroke(&layout, "#1F5FBF"), 4);

    // Expert parallelism: Mixtral 8x7B with ep 8 over tp 2 x dp 16 per stage.
    let (html, layout, json) = eval_report(
        "ep",
        &[
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "8",
            "--tp",
            "2",
            "--pp",
            "2",
            "--ep",
            "8",
            "--etp",
            "1",
            "--micro-batch",
            "1",
            "--global-batch",
            "256",
            "--seq-len",
            "4096",
            "--recompute",
            "full",
            "--zero",
            "1",
        ],
    );
    let a2a = html.matches("<tr><td>EP</td><td>all-to-all</td>").count();
    // Dispatch and combine in forward, backward and the recompute forward.
    assert_eq!(a2a, 6, "EP all-to-all rows");
    assert!(html.contains("MoE dispatch: routed token copies to their experts"));
    assert!(html.contains("<tr><td>expert DP</td><td>reduce-scatter</td><td>backward</td>"));
    assert!(html.contains("EP total sent per GPU per step"));
    let plan = &json["plans"][0];
    for (group, key) in [("ep", "ep_wire_bytes"), ("dp", "dp_wire_bytes")] {
        let want = plan["comm"][group]["wire_bytes"].as_f64().unwrap();
        let got = plan["ledger"][key].as_f64().unwrap();
        assert!(
            want > 0.0 && (got - want).abs() <= 1e-9 * want,
            "{group}: {got} vs {want}"
        );
    }
    let words = texts(&layout);
    assert!(
        words
            .iter()
            .any(|s| s.starts_with("EP groups (8 GPUs at stride 1")),
        "{words:?}"
    );
    assert!(words.iter().any(|s| s.starts_with("expert DP: 4 replicas")));
    // 64 GPUs in 8 EP groups of 8 consecutive ranks, one node each; every cell names its EP rank.
    assert_eq!(rects_with_stroke(&layout, "#C02020"), 8);
    assert_eq!(words.iter().filter(|s| s.ends_with("·e7")).count(), 8);
}

/// The step-time chart draws each plan's error range (issue 11 item 3) as a hollow bar, from the
/// same band the JSON's `time.step_s_low/high` come from.
#[test]
fn step_chart_draws_each_plans_error_range() {
    let dir = scratch("ranges");
    let out = tpsim()
        .args(["report", "plans/seed-512b-32nodes.yaml", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = read(&dir, "step_time.svg");
    let report: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    let plans = report["plans"].as_array().unwrap();
    let bars = svg
        .lines()
        .flat_map(|l| l.split("<rect").skip(1))
        .filter(|r| r.contains("fill=\"none\"") && r.contains("stroke=\"#000000\""))
        .count();
    assert_eq!(bars, plans.len(), "one range bar per plan");
    for p in plans {
        let t = &p["time"];
        assert!(t["step_s_low"].as_f64() < t["step_s"].as_f64());
        assert!(t["step_s_high"].as_f64() > t["step_s"].as_f64());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a pipeline the layout figure does not describe pipeline sends.
#[test]
fn a_plan_without_pipeline_says_so_in_the_layout() {
    let dir = scratch("pp1");
    tpsim()
        .args([
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--report",
            dir.to_str().unwrap(),
        ])
        .assert()
        .success();
    let texts = texts(&read(&dir, "layout.svg"));
    assert!(texts.iter().any(|t| t.starts_with("PP: none")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("sends activations")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The page's Plans table names every degree a plan uses, in the row label (`t2·c2·p4·d2·e4`) and
/// in columns shown by `plan`'s rule, and the precision in its column, so each row multiplies to
/// the GPU count (was `t2·p4·d2` with no cp, ep or precision anywhere in the table); under it,
/// the line that says MFU is over the bf16 peak.
#[test]
fn the_plans_table_names_cp_ep_and_precision() {
    let (html, _, json) = eval_report(
        "labels",
        &[
            "--model",
            "mixtral-8x7b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "4",
            "--global-batch",
            "64",
            "--tp",
            "2",
            "--cp",
            "2",
            "--pp",
            "4",
            "--ep",
            "4",
            "--precision",
            "fp8",
            "--recompute",
            "full",
            "--zero",
            "1",
            "--sequence-parallel",
        ],
    );
    let gpus = json["cluster"]["total_gpus"].as_u64().unwrap();
    let section = html
        .split_once("<h2>Plans</h2>")
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .expect("a Plans table");
    let cells = |row: &str, tag: &str| -> Vec<String> {
        row.split(&format!("<{tag}"))
            .skip(1)
            // `<th` also opens `<thead>`: a cell's tag ends there or has attributes.
            .filter(|c| c.starts_with('>') || c.starts_with(' '))
            .map(|c| {
                let c = &c[c.find('>').unwrap() + 1..];
                c[..c.find(&format!("</{tag}>")).unwrap()].to_string()
            })
            .collect()
    };
    let header = cells(section.split("</thead>").next().unwrap(), "th");
    for column in ["cp", "ep", "prec", "CP s", "EP s"] {
        assert!(
            header.iter().any(|h| h == column),
            "no {column}: {header:?}"
        );
    }
    let at = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<Vec<String>> = section
        .split("</thead>")
        .nth(1)
        .unwrap()
        .split("<tr>")
        .skip(1)
        .map(|row| cells(row, "td"))
        .collect();
    assert!(rows.len() >= 2, "{section}");
    for row in &rows {
        let degree = |name: &str| row[at(name)].parse::<u64>().unwrap();
        let product: u64 = ["tp", "cp", "pp", "dp"].iter().map(|k| degree(k)).product();
        assert_eq!(product, gpus, "{row:?}");
        let label = &row[0];
        let mut want = format!("t{}", degree("tp"));
        if degree("cp") > 1 {
            want += &format!("·c{}", degree("cp"));
        }
        want += &format!("·p{}·d{}", degree("pp"), degree("dp"));
        if degree("ep") > 1 {
            want += &format!("·e{}", degree("ep"));
        }
        assert!(label.contains(&want), "{label} lacks {want}");
    }
    assert_eq!(rows[0][at("prec")], "fp8");
    assert!(
        rows[0][0].starts_with("this plan") && rows[0][0].contains(" t2·c2·p4·d2·e4"),
        "{:?}",
        rows[0]
    );
    let peak = json["cluster"]["peak_flops"].as_f64().unwrap() / 1e12;
    let note = format!("MFU % is model FLOPs over the bf16 peak ({peak:.0} TFLOP/s per GPU)");
    assert!(html.contains(&note), "no {note:?}");
}

/// Without tensor parallelism the layout figure does not describe TP groups of one GPU.
#[test]
fn a_plan_without_tensor_parallelism_says_so_in_the_layout() {
    let dir = scratch("tp1");
    tpsim()
        .args([
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--report",
            dir.to_str().unwrap(),
        ])
        .assert()
        .success();
    let texts = texts(&read(&dir, "layout.svg"));
    assert!(texts.iter().any(|t| t.starts_with("TP: none")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.starts_with("TP groups (1 GPUs")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `report --plan FILE`, the way `eval --plan FILE` takes it, writes the same report as the
/// positional file (clap's own advice for it, "use '-- --plan'", was wrong); both at once is
/// refused in one line.
#[test]
fn report_takes_the_plan_as_eval_does() {
    let positional = scratch("positional");
    let flag = scratch("flag");
    for (args, dir) in [
        (
            vec!["report", "plans/seed-512b-32nodes.yaml", "--out"],
            &positional,
        ),
        (
            vec!["report", "--plan", "plans/seed-512b-32nodes.yaml", "--out"],
            &flag,
        ),
    ] {
        let out = tpsim().args(&args).arg(dir).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(read(&positional, "memory.svg"), read(&flag, "memory.svg"));
    let out = tpsim()
        .args([
            "report",
            "plans/seed-512b-32nodes.yaml",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--out",
        ])
        .arg(&flag)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1
    );
    let _ = std::fs::remove_dir_all(&positional);
    let _ = std::fs::remove_dir_all(&flag);
}
