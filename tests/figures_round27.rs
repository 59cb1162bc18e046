//! Figures reviewed as an ML-infrastructure engineer reads them, round 27: every figure of four
//! plans (DeepSeek-V3 on 256 H100 nodes, Llama 3 70B at 128K tokens on 32 nodes, torchtitan
//! DualPipeV, Llama 3 8B on one A100 node) rendered to PNG and looked at. Each test says what
//! its figure showed and what it shows now; the numbers checked come from report.json.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tpsim-figures-round27-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `tpsim args --report DIR`; returns DIR and report.json's best plan.
fn report(args: &[&str], name: &str) -> (PathBuf, serde_json::Value) {
    let dir = scratch(name);
    let out = Command::cargo_bin("tpsim")
        .unwrap()
        .args(args)
        .args(["--report", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&read(&dir.join("report.json"))).unwrap();
    let best = json["plans"][0].clone();
    (dir, best)
}

fn int(plan: &serde_json::Value, key: &str) -> u64 {
    plan[key]
        .as_u64()
        .unwrap_or_else(|| panic!("report.json plan has no integer {key}: {plan}"))
}

/// Every `<text>` of an SVG, as (x, y, text).
fn texts(svg: &str) -> Vec<(f64, f64, String)> {
    let doc = roxmltree::Document::parse(svg).expect("SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            let num = |a: &str| n.attribute(a).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            (
                num("x"),
                num("y"),
                n.text().unwrap_or("").trim().to_string(),
            )
        })
        .collect()
}

fn view_box(svg: &str) -> (f64, f64) {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let vb: Vec<f64> = doc
        .root_element()
        .attribute("viewBox")
        .expect("viewBox")
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    (vb[2], vb[3])
}

/// DeepSeek-V3 on 256 H100 nodes: the best plan (tp 8, ep 64, etp 1) folds one EP group of 64
/// GPUs over 8 nodes (data-parallel replicas 0..7), but the layout drew only replica 0's node:
/// eight cells x0·e0..x0·e7 inside a red outline whose arrowhead pointed at a node not drawn,
/// so the figure showed an eighth of the EP group the plan has. The fold now draws every node of
/// each stage's first EP block: every EP rank 0..ep-1 of expert-DP replica 0 has its cell, inside
/// the canvas, and the fold note names the replicas drawn.
#[test]
fn layout_draws_the_whole_ep_group_when_it_runs_over_several_replicas() {
    let (dir, best) = report(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "256",
        ],
        "dsv3",
    );
    let (tp, cp, ep, etp) = (
        int(&best, "tp"),
        int(&best, "cp"),
        int(&best, "ep"),
        int(&best, "etp"),
    );
    assert!(
        etp * ep > tp * cp,
        "precondition: the best plan's EP block (etp {etp} x ep {ep}) must run past one replica's \
         tp {tp} x cp {cp} ranks for this test to check anything"
    );
    let svg = read(&dir.join("layout.svg"));
    let (w, h) = view_box(&svg);
    let texts = texts(&svg);
    for e in 0..ep {
        let label = format!("x0·e{e}");
        let (x, y, _) = texts
            .iter()
            .find(|(_, _, t)| *t == label)
            .unwrap_or_else(|| {
                panic!("layout.svg has no cell {label}: EP group 0 (ep {ep}) is not drawn whole")
            });
        assert!(
            (0.0..w).contains(x) && (0.0..h).contains(y),
            "{label} at ({x}, {y}) lies outside the {w}x{h} viewBox"
        );
    }
    let replicas = etp * ep / (tp * cp);
    assert!(
        svg.contains(&format!("data-parallel replicas 0..{}", replicas - 1)),
        "the fold note should name the {replicas} replicas the EP group covers"
    );
}

/// The same plan runs one micro-batch per step (1536 sequences over dp 256 at micro-batch 6: the
/// timeline's title says m = 1), yet index.html's caption for the timeline said "every GPU runs
/// the micro-batches one after the other". The caption now says one micro-batch when m = 1, and
/// gives the count the title gives when there are more (Llama 3 8B on one A100 node: m = 384).
#[test]
fn timeline_caption_counts_the_micro_batches_the_title_shows() {
    let (dir, best) = report(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "256",
        ],
        "dsv3-caption",
    );
    assert_eq!(int(&best, "pp"), 1, "precondition: no pipeline");
    assert_eq!(int(&best, "num_microbatches"), 1, "precondition: m = 1");
    let html = read(&dir.join("index.html"));
    let timeline = read(&dir.join("timeline.svg"));
    assert!(timeline.contains("m = 1)"), "timeline title says m = 1");
    assert!(
        !html.contains("runs the micro-batches one after the other"),
        "caption speaks of micro-batches in turn for a step of one micro-batch"
    );
    assert!(
        html.contains("no pipeline and one micro-batch"),
        "caption should say the step runs one micro-batch"
    );

    let (dir, best) = report(
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--gpu",
            "a100-sxm-40g",
        ],
        "llama8b",
    );
    assert_eq!(int(&best, "pp"), 1, "precondition: no pipeline");
    let m = int(&best, "num_microbatches");
    assert!(m > 1, "precondition: several micro-batches");
    let html = read(&dir.join("index.html"));
    let timeline = read(&dir.join("timeline.svg"));
    assert!(
        timeline.contains(&format!("m = {m})")),
        "timeline title says m = {m}"
    );
    assert!(
        html.contains(&format!("runs its {m} micro-batches one after the other")),
        "caption should give the {m} micro-batches report.json and the title give"
    );
}

/// DeepSeek-V3 with pp 16 and ep 64 on 256 nodes: each stage's first EP group covers 64
/// replicas over 8 nodes, 128 nodes in all, of which the figure draws 32. The fold note read
/// "those holding data-parallel replicas 0..63 (its first 32 of 128; its other 96 hold the rest
/// of its stages)": "its" for 64 replicas. The note now says "their" where the drawn nodes hold
/// several replicas, and still counts the drawn nodes against those holding the replicas.
#[test]
fn fold_note_speaks_of_several_replicas_in_the_plural() {
    let dir = scratch("pp16-ep64");
    let out = Command::cargo_bin("tpsim")
        .unwrap()
        .args([
            "eval",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "256",
            "--tp",
            "1",
            "--pp",
            "16",
            "--allow-uneven-pp",
            "--ep",
            "64",
            "--etp",
            "1",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
            "--zero",
            "1",
            "--report",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = read(&dir.join("layout.svg"));
    let note = texts(&svg)
        .into_iter()
        .map(|(_, _, t)| t)
        .find(|t| t.contains("nodes drawn"))
        .expect("a fold note");
    assert!(
        note.starts_with("32 of 256 nodes drawn: those holding data-parallel replicas 0..63"),
        "{note}"
    );
    assert!(!note.contains("(its first"), "{note}");
    assert!(
        note.contains("(the first 32 of 128; their other 96 hold the rest of their stages)"),
        "{note}"
    );
}
