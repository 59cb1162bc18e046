//! Figures reviewed as an ML-infrastructure engineer reads them, round 1: the sweep chart names a
//! named model in its title and its small-valued axes print ticks that read apart; the search
//! figure's legend keys only colours it draws; the folded layout counts the nodes it leaves out
//! correctly; the timeline draws a stage's exposed MoE all-to-alls from that stage's own MoE
//! layers (none on DeepSeek-V3's dense first stage).

use assert_cmd::Command;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn tpsim() -> Command {
    Command::cargo_bin("tpsim").unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tpsim-figures-round1-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Text {
    y: f64,
    anchor: String,
    fill: String,
    text: String,
}

fn texts(svg: &str) -> Vec<Text> {
    let doc = roxmltree::Document::parse(svg).expect("SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| Text {
            y: n.attribute("y").and_then(|v| v.parse().ok()).unwrap_or(0.0),
            anchor: n.attribute("text-anchor").unwrap_or("start").to_string(),
            fill: n.attribute("fill").unwrap_or("").to_string(),
            text: n.text().unwrap_or("").trim().to_string(),
        })
        .collect()
}

/// (fill, y, height) of every `<rect>` and the fill of every `<circle>`.
fn rects(svg: &str) -> Vec<(String, f64, f64)> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect"))
        .map(|n| {
            (
                n.attribute("fill").unwrap_or("").to_string(),
                n.attribute("y").and_then(|v| v.parse().ok()).unwrap_or(0.0),
                n.attribute("height")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0),
            )
        })
        .collect()
}

fn circle_fills(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("circle"))
        .map(|n| n.attribute("fill").unwrap_or("").to_string())
        .collect()
}

fn sweep_chart(args: &[&str], name: &str) -> String {
    let dir = scratch(name);
    let chart = dir.join("chart.svg");
    let out = tpsim()
        .arg("sweep")
        .args(args)
        .args(["--chart", chart.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    read(&chart)
}

fn report(args: &[&str], name: &str) -> PathBuf {
    let dir = scratch(name);
    let out = tpsim()
        .args(args)
        .args(["--report", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The sweep chart's title said "the 8.0B-parameter model" for `--model llama3-8b`: a reader of the
/// chart alone could not tell which model was swept. It names the model now, with its size; a shape
/// derived from `--params` has no name and keeps the size alone.
#[test]
fn sweep_chart_title_names_a_named_model() {
    let svg = sweep_chart(
        &[
            "--model",
            "llama3-8b",
            "--global-batch",
            "64",
            "--axis",
            "nodes",
            "--values",
            "1,2",
        ],
        "named",
    );
    let title = texts(&svg)
        .into_iter()
        .find(|t| t.text.starts_with("Best plan"))
        .expect("a title")
        .text;
    assert!(title.contains("llama3-8b"), "{title}");
    assert!(title.contains("8.0B parameters"), "{title}");

    let svg = sweep_chart(
        &[
            "--params",
            "8B",
            "--global-batch",
            "64",
            "--axis",
            "nodes",
            "--values",
            "1,2",
        ],
        "derived",
    );
    let title = texts(&svg)
        .into_iter()
        .find(|t| t.text.starts_with("Best plan"))
        .expect("a title")
        .text;
    assert!(title.contains("-parameter model"), "{title}");
    assert!(!title.contains("derived-"), "{title}");
}

/// A memory-headroom panel whose values are under half a GiB ticked every 0.05 GiB but printed one
/// decimal: "0.1, 0.1, 0.2, 0.2, 0.2, …", the same number at different heights. Every y axis of the
/// chart now prints distinct ticks.
#[test]
fn sweep_chart_axes_print_distinct_ticks() {
    let svg = sweep_chart(
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--axis",
            "gpu",
            "--values",
            "h100-sxm-80g,a100-sxm-80g",
        ],
        "ticks",
    );
    // A panel's y labels are right-anchored and drawn bottom to top; a new panel starts where y
    // jumps back down the page.
    let mut axes: Vec<Vec<String>> = Vec::new();
    let mut last_y = f64::NEG_INFINITY;
    for t in texts(&svg).into_iter().filter(|t| t.anchor == "end") {
        if t.y > last_y || axes.is_empty() {
            axes.push(Vec::new());
        }
        last_y = t.y;
        axes.last_mut().unwrap().push(t.text);
    }
    assert!(axes.len() >= 3, "{axes:?}");
    for axis in &axes {
        let mut seen = std::collections::HashSet::new();
        for label in axis {
            assert!(seen.insert(label), "tick {label} printed twice on {axis:?}");
        }
    }
}

/// The search figure's legend listed "● TP 1" in TP 1's blue for the seed 512B plan, where no TP-1
/// plan fits (all are drawn grey as infeasible): a key for a colour the figure never draws. Each
/// TP entry now has points of its colour.
#[test]
fn search_legend_keys_only_drawn_tp_colours() {
    let dir = scratch("search");
    let out = tpsim()
        .args([
            "report",
            "plans/seed-512b-32nodes.yaml",
            "--out",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let svg = read(&dir.join("search.svg"));
    let fills = circle_fills(&svg);
    let entries: Vec<Text> = texts(&svg)
        .into_iter()
        .filter(|t| t.text.starts_with("● TP "))
        .collect();
    assert!(!entries.is_empty());
    for entry in entries {
        let drawn = fills.iter().filter(|f| **f == entry.fill).count();
        assert!(
            drawn > 0,
            "legend '{}' ({}) has no point of its colour",
            entry.text,
            entry.fill
        );
    }
}

/// Llama 3 405B on 2,048 nodes (tp 8 × cp 16 × pp 16 × dp 8): replica 0 spans 256 nodes, of which
/// the layout draws 32. Its note said "the other 2016 nodes hold replicas 1..7", counting replica
/// 0's own 224 undrawn nodes as other replicas'. It now says 1,792 nodes hold replicas 1..7, and
/// that replica 0's other 224 hold the rest of its stages.
#[test]
fn folded_layout_counts_the_nodes_it_leaves_out() {
    let dir = report(
        &[
            "eval",
            "--model",
            "llama3-405b",
            "--nodes",
            "2048",
            "--seq-len",
            "131072",
            "--global-batch",
            "128",
            "--tp",
            "8",
            "--cp",
            "16",
            "--pp",
            "16",
            "--vpp",
            "4",
            "--allow-uneven-pp",
            "--micro-batch",
            "1",
            "--sequence-parallel",
            "--recompute",
            "full",
            "--zero",
            "1",
        ],
        "layout",
    );
    let svg = read(&dir.join("layout.svg"));
    let note = texts(&svg)
        .into_iter()
        .find(|t| t.text.contains("nodes drawn"))
        .expect("a folding note")
        .text;
    assert!(
        note.contains("the other 1792 nodes hold replicas 1..7"),
        "{note}"
    );
    assert!(note.contains("its other 224"), "{note}");
    assert!(!note.contains("2016"), "{note}");
}

/// DeepSeek-V3 on 16 stages, its first stage holding two of the three dense layers: the timeline
/// drew the slowest stage's share of exposed MoE all-to-alls (a purple strip over half of each
/// block) on every block, the dense first stage's too. Each stage's strips now come from its own MoE
/// layers: none on stage 0, some on stage 1.
#[test]
fn timeline_draws_no_moe_all_to_alls_on_a_dense_stage() {
    let dir = report(
        &[
            "eval",
            "--model",
            "deepseek-v3",
            "--nodes",
            "128",
            "--tp",
            "2",
            "--pp",
            "16",
            "--ep",
            "32",
            "--allow-uneven-pp",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
        ],
        "timeline",
    );
    let svg = read(&dir.join("timeline.svg"));
    // Stage rows by their labels' heights.
    let rows: HashMap<u32, f64> = texts(&svg)
        .into_iter()
        .filter_map(|t| {
            let stage = t.text.strip_prefix("stage ")?.parse().ok()?;
            Some((stage, t.y))
        })
        .collect();
    assert_eq!(rows.len(), 16, "{rows:?}");
    let stage_of = |y: f64| {
        *rows
            .iter()
            .min_by(|a, b| (a.1 - y).abs().total_cmp(&(b.1 - y).abs()))
            .unwrap()
            .0
    };
    let ep_strips: Vec<u32> = rects(&svg)
        .into_iter()
        .filter(|(fill, _, _)| fill == "#9467BD")
        .map(|(_, y, h)| stage_of(y + h / 2.0))
        .collect();
    assert!(ep_strips.contains(&1), "no EP strip on stage 1");
    assert!(
        !ep_strips.contains(&0),
        "{} EP strips on the dense stage 0",
        ep_strips.iter().filter(|&&s| s == 0).count()
    );
    let legend = texts(&svg)
        .into_iter()
        .find(|t| t.text.starts_with("exposed EP comm"))
        .expect("an EP legend entry")
        .text;
    assert!(
        legend.contains("none on stages of dense layers"),
        "{legend}"
    );
}
