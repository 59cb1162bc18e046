//! The figures say no more than they know and stay readable: a sweep over GPUs whose points differ
//! in GPU count says so (stderr note, per-point counts in the chart, no single count in its title)
//! and keeps its title and labels inside the figure; the search figure labels the memory axis where
//! the feasible plans are and squeezes plans far past the capacity; the timeline keeps its last
//! time label inside the figure; the layout's EP outline is keyed as what it outlines; the bar
//! figures' labels never overprint one another, however long; the timeline shows exposed MoE token
//! traffic and CP exchange as it shows TP's; a sweep over GPU models draws no line between them.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn tpsim() -> Command {
    Command::cargo_bin("tpsim").unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tpsim-figures-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `<text>` of an SVG with its x, anchor and content, after checking that it parses.
struct Label {
    x: f64,
    anchor: String,
    text: String,
}

fn labels(svg: &str) -> Vec<Label> {
    let doc = roxmltree::Document::parse(svg).expect("SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| Label {
            x: n.attribute("x").and_then(|x| x.parse().ok()).unwrap_or(0.0),
            anchor: n.attribute("text-anchor").unwrap_or("start").to_string(),
            text: n.text().unwrap_or("").trim().to_string(),
        })
        .collect()
}

fn svg_width(svg: &str) -> f64 {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.root_element()
        .attribute("width")
        .and_then(|w| w.parse().ok())
        .unwrap()
}

/// The right end of a label, at a generous 7 pixels a character (the figures' 12-pixel text).
fn right_end(label: &Label) -> f64 {
    let w = 7.0 * label.text.chars().count() as f64;
    match label.anchor.as_str() {
        "middle" => label.x + w / 2.0,
        "end" => label.x,
        _ => label.x + w,
    }
}

fn sweep_gpus(values: &str, name: &str) -> (String, String) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("gpus.svg");
    let out = tpsim()
        .args([
            "sweep",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--global-batch",
            "64",
            "--axis",
            "gpu",
            "--values",
            values,
            "--chart",
        ])
        .arg(&chart)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = read(&chart);
    let _ = std::fs::remove_dir_all(&dir);
    (String::from_utf8_lossy(&out.stderr).into_owned(), svg)
}

#[test]
fn a_gpu_sweep_over_unequal_gpu_counts_says_so_and_names_each_count() {
    // h100 profiles hold 8 GPUs a node, gb200 4: --nodes 2 is 16 GPUs against 8.
    let (stderr, svg) = sweep_gpus("h100-sxm-80g,b200-sxm-180g,gb200-nvl72", "unequal");
    let note = stderr
        .lines()
        .find(|l| l.starts_with("note: the points run on different GPU counts"))
        .unwrap_or_else(|| panic!("no note in {stderr}"));
    assert!(
        note.contains("16 GPUs for h100-sxm-80g, b200-sxm-180g; 8 GPUs for gb200-nvl72"),
        "{note}"
    );
    assert!(
        note.contains("--gpus-per-node 4 --nodes 4 (16 GPUs each)"),
        "{note}"
    );
    let labels = labels(&svg);
    let texts: Vec<&str> = labels.iter().map(|l| l.text.as_str()).collect();
    // The title claims no one count; each point's count is under its name, in every panel.
    let title = texts.iter().find(|t| t.starts_with("Best plan")).unwrap();
    assert!(
        !title.contains("on 16 GPUs") && !title.contains("on 8 GPUs"),
        "{title}"
    );
    assert!(title.contains("on 8 to 16 GPUs"), "{title}");
    assert_eq!(texts.iter().filter(|t| **t == "16 GPUs").count(), 2 * 3);
    assert_eq!(texts.iter().filter(|t| **t == "8 GPUs").count(), 3);
    let width = svg_width(&svg);
    for label in &labels {
        assert!(
            right_end(label) <= width,
            "{} runs off the figure",
            label.text
        );
    }
}

#[test]
fn a_gpu_sweep_over_equal_counts_names_the_count_once_and_wraps_long_names() {
    let values = "a100-sxm-80g,h100-sxm-80g,h200-sxm-141g,h800-sxm-80g,b200-sxm-180g,b300-sxm-288g";
    let (stderr, svg) = sweep_gpus(values, "equal");
    assert!(!stderr.contains("different GPU counts"), "{stderr}");
    let labels = labels(&svg);
    let title = labels
        .iter()
        .find(|l| l.text.starts_with("Best plan"))
        .unwrap();
    assert!(title.text.contains("on 16 GPUs, by GPU"), "{}", title.text);
    assert!(!labels.iter().any(|l| l.text == "16 GPUs"));
    // Six names in a half-width panel (about 75 pixels apart): each wraps after a '-' rather than
    // overprinting its neighbour, in each of the three panels.
    let count = |text: &str| labels.iter().filter(|l| l.text == text).count();
    for name in values.split(',') {
        assert_eq!(count(name), 0, "{name} unwrapped");
    }
    assert_eq!(count("h200-sxm-"), 3);
    assert_eq!(count("141g"), 3);
    let width = svg_width(&svg);
    for label in &labels {
        assert!(
            right_end(label) <= width,
            "{} runs off the figure",
            label.text
        );
    }
}

fn eval_report(name: &str, args: &[&str]) -> PathBuf {
    let dir = scratch(name);
    let out = tpsim()
        .arg("eval")
        .args(args)
        .arg("--report")
        .arg(&dir)
        .output()
        .unwrap();
    // 1: the plan does not fit (the 512B plan needs 132 GiB); its report is written all the same.
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && dir.join("index.html").is_file(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The memory axis's tick labels that are plain numbers.
fn memory_ticks(svg: &str) -> Vec<f64> {
    labels(svg)
        .iter()
        .filter(|l| l.anchor == "middle")
        .filter_map(|l| l.text.parse::<f64>().ok())
        .collect()
}

#[test]
fn the_search_figure_labels_the_feasible_region_and_squeezes_the_rest() {
    // 512B on 32 nodes of H100: feasible plans need 40 to 80 GiB, infeasible ones up to ~10 TiB.
    let dir = eval_report(
        "search-512b",
        &[
            "--params",
            "512B",
            "--nodes",
            "32",
            "--tp",
            "8",
            "--pp",
            "16",
            "--global-batch",
            "1536",
        ],
    );
    let svg = read(&dir.join("search.svg"));
    let ticks = memory_ticks(&svg);
    let inside = ticks.iter().filter(|t| (40.0..=80.0).contains(*t)).count();
    assert!(inside >= 3, "ticks {ticks:?}");
    // Beyond 4x the 79.7 GiB capacity (rounded up: 320 GiB) the plans are squeezed into a band.
    let texts: Vec<String> = labels(&svg).into_iter().map(|l| l.text).collect();
    assert!(texts.iter().any(|t| t == "> 320"), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("from 320 GiB to ") && t.ends_with(" TiB")),
        "{texts:?}"
    );
    assert!(ticks.iter().all(|t| *t <= 320.0), "ticks {ticks:?}");
    let _ = std::fs::remove_dir_all(&dir);

    // One B200: every feasible plan is under 179 GiB, where the axis used to have no label.
    let dir = eval_report(
        "search-b200",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--gpu",
            "b200-sxm-180g",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--recompute",
            "full",
        ],
    );
    let svg = read(&dir.join("search.svg"));
    let ticks = memory_ticks(&svg);
    assert!(ticks.iter().any(|t| *t < 179.0), "ticks {ticks:?}");
    let width = svg_width(&svg);
    for label in labels(&svg) {
        assert!(
            right_end(&label) <= width,
            "{} runs off the figure",
            label.text
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_single_stage_timeline_keeps_its_labels_inside_and_has_one_row() {
    let dir = eval_report(
        "gantt-p1",
        &[
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
        ],
    );
    let svg = read(&dir.join("timeline.svg"));
    let width = svg_width(&svg);
    let labels = labels(&svg);
    for label in &labels {
        assert!(
            right_end(label) <= width,
            "{} runs off the figure",
            label.text
        );
    }
    // One stage, one row label, which names the row as every GPU (not a pipeline stage); the
    // legend keys only what is drawn.
    assert_eq!(
        labels
            .iter()
            .filter(|l| l.text.starts_with("stage ") || l.text == "every GPU")
            .count(),
        1
    );
    assert!(labels.iter().any(|l| l.text == "every GPU"));
    assert!(labels.iter().any(|l| l.text == "forward"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_layout_keys_the_ep_outline_as_the_block_it_outlines() {
    // qwen3-30b-a3b, tp 2 x ep 8 (etp 2) on 2 nodes: one block of 2 interleaved EP groups spans
    // both nodes, so each node's outline has an arrowhead towards the other. (GPT-OSS's biased
    // experts run with etp 1 alone in Megatron-Core.)
    let dir = eval_report(
        "layout-ep",
        &[
            "--model",
            "qwen3-30b-a3b",
            "--nodes",
            "2",
            "--tp",
            "2",
            "--ep",
            "8",
            "--global-batch",
            "256",
            "--seq-len",
            "4096",
        ],
    );
    let svg = read(&dir.join("layout.svg"));
    let texts: Vec<String> = labels(&svg).into_iter().map(|l| l.text).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("EP groups (8 GPUs at stride 2")
                && t.ends_with("red outline: the 16 GPUs of 2 interleaved EP groups")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("an outline with an arrowhead"))
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let arrows = doc
        .descendants()
        .filter(|n| n.has_tag_name("polygon") && n.attribute("fill") == Some("#C02020"))
        .count();
    assert_eq!(arrows, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `<text>`'s estimated box (left, top, right, bottom) in pixels: its width at 0.6 em a character
/// (DejaVu Sans, the `sans-serif` these figures render in, averages about 0.5 em on these labels),
/// its height one em, placed by its anchor and its `dy` (plotters' VPos: 0.76em top, 0.5ex centre,
/// -0.5ex bottom).
struct TextBox {
    text: String,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

fn text_boxes(svg: &str) -> Vec<TextBox> {
    let doc = roxmltree::Document::parse(svg).expect("SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("transform").is_none())
        .map(|n| {
            let num = |name: &str| n.attribute(name).and_then(|v| v.parse::<f64>().ok());
            let (x, y) = (num("x").unwrap_or(0.0), num("y").unwrap_or(0.0));
            let em = num("font-size").unwrap_or(12.0);
            let text = n.text().unwrap_or("").trim().to_string();
            let w = 0.6 * em * text.chars().count() as f64;
            let left = match n.attribute("text-anchor").unwrap_or("start") {
                "middle" => x - w / 2.0,
                "end" => x - w,
                _ => x,
            };
            let top = match n.attribute("dy").unwrap_or("") {
                "0.76em" => y,
                "0.5ex" => y - em / 2.0,
                "-0.5ex" => y - em,
                _ => y - 0.8 * em,
            };
            TextBox {
                text,
                left,
                top,
                right: left + w,
                bottom: top + em,
            }
        })
        .filter(|b| !b.text.is_empty())
        .collect()
}

/// Pairs of texts of `svg` whose boxes overlap.
fn overprinted(svg: &str) -> Vec<(String, String)> {
    let boxes = text_boxes(svg);
    let mut out = Vec::new();
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            if a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom {
                out.push((a.text.clone(), b.text.clone()));
            }
        }
    }
    out
}

#[test]
fn bar_labels_of_plans_with_cp_and_ep_degrees_do_not_overprint() {
    // The review's case: a Mixtral plan with cp and ep degrees, whose first label reads
    // "this plan (search #1) t2·c2·p4·d2·e8" beside "#2 t1·c4·p4·d2·e8".
    let dir = scratch("labels-mixtral");
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("mx.yaml");
    tpsim()
        .args([
            "plan",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "4",
            "--ep",
            "8",
        ])
        .arg("--save")
        .arg(&plan)
        .assert()
        .success();
    let out = dir.join("report");
    tpsim()
        .arg("report")
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    for figure in ["step_time.svg", "memory.svg"] {
        let svg = read(&out.join(figure));
        // The long label is there, split before its degrees, and each plan's degrees are shown.
        let texts: Vec<String> = labels(&svg).into_iter().map(|l| l.text).collect();
        assert!(
            texts.iter().any(|t| t.starts_with("this plan (search #")),
            "{figure}: {texts:?}"
        );
        assert!(
            texts.iter().filter(|t| t.contains("·e8")).count() >= 2,
            "{figure}: {texts:?}"
        );
        let clashes = overprinted(&svg);
        assert!(clashes.is_empty(), "{figure}: overprinted {clashes:?}");
        let width = svg_width(&svg);
        for b in text_boxes(&svg) {
            assert!(b.right <= width, "{figure}: {} runs off the figure", b.text);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The exposed time of a term in the evaluated plan of a report (`report.json`, first plan).
fn exposed_s(dir: &Path, field: &str) -> f64 {
    let json: serde_json::Value = serde_json::from_str(&read(&dir.join("report.json"))).unwrap();
    json["plans"][0]["time"][field].as_f64().unwrap()
}

/// The `<rect>`s of `svg` filled with `colour` ("#9467BD").
fn rects_filled(svg: &str, colour: &str) -> Vec<f64> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(colour))
        .map(|n| n.attribute("width").unwrap().parse().unwrap())
        .collect()
}

#[test]
fn the_timeline_shows_exposed_ep_and_cp_communication_like_tp() {
    // gpt-oss-20b, tp 2 x pp 2 x ep 4 (etp 1, as Megatron-Core runs its biased experts), 4
    // micro-batches: a third of the step is MoE token traffic.
    let dir = eval_report(
        "gantt-ep",
        &[
            "--model",
            "gpt-oss-20b",
            "--nodes",
            "2",
            "--tp",
            "2",
            "--pp",
            "2",
            "--ep",
            "4",
            "--etp",
            "1",
            "--global-batch",
            "16",
            "--seq-len",
            "4096",
        ],
    );
    assert!(exposed_s(&dir, "ep_comm_exposed_s") > 0.0);
    let svg = read(&dir.join("timeline.svg"));
    let texts: Vec<String> = labels(&svg).into_iter().map(|l| l.text).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("exposed EP comm, the MoE all-to-alls (strip after the TP one")),
        "{texts:?}"
    );
    // One strip per block: 2 stages x 4 micro-batches x (forward, backward), each visible.
    let strips = rects_filled(&svg, "#9467BD");
    assert_eq!(strips.len(), 16, "{strips:?}");
    assert!(strips.iter().all(|w| *w >= 1.0), "{strips:?}");
    let _ = std::fs::remove_dir_all(&dir);

    // llama3-8b, cp 4 at 32k tokens: the ring exchange has its own strip and legend entry.
    let dir = eval_report(
        "gantt-cp",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--tp",
            "2",
            "--cp",
            "4",
            "--pp",
            "2",
            "--seq-len",
            "32768",
            "--global-batch",
            "64",
        ],
    );
    assert!(exposed_s(&dir, "cp_comm_exposed_s") > 0.0);
    let svg = read(&dir.join("timeline.svg"));
    let texts: Vec<String> = labels(&svg).into_iter().map(|l| l.text).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("exposed CP comm, the K/V exchange (strip after the TP one")),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.starts_with("exposed MoE")));
    assert!(!rects_filled(&svg, "#8C564B").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

fn sweep_chart(axis: &str, values: &str, name: &str) -> String {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("sweep.svg");
    let mut cmd = tpsim();
    cmd.args(["sweep", "--model", "llama3-8b"]);
    if axis != "nodes" {
        cmd.args(["--nodes", "2"]);
    }
    cmd.args(["--global-batch", "64", "--axis", axis, "--values", values])
        .arg("--chart")
        .arg(&chart)
        .assert()
        .success();
    let svg = read(&chart);
    let _ = std::fs::remove_dir_all(&dir);
    svg
}

/// How many of the chart's point markers (circles) the most-connected polyline or path passes
/// through: 0 or 1 when the points stand alone, the panel's point count when a line joins them.
fn markers_joined(svg: &str) -> usize {
    let doc = roxmltree::Document::parse(svg).unwrap();
    let centres: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .map(|n| {
            let num = |a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
            (num("cx"), num("cy"))
        })
        .collect();
    assert!(!centres.is_empty(), "no markers");
    doc.descendants()
        .filter_map(|n| {
            if n.has_tag_name("polyline") {
                n.attribute("points").map(str::to_string)
            } else if n.has_tag_name("path") {
                n.attribute("d").map(|d| d.replace(['M', 'L'], " "))
            } else {
                None
            }
        })
        .map(|points| {
            let vertices: Vec<(f64, f64)> = points
                .split_whitespace()
                .filter_map(|p| {
                    let (x, y) = p.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect();
            centres
                .iter()
                .filter(|c| {
                    vertices
                        .iter()
                        .any(|v| (v.0 - c.0).abs() <= 1.0 && (v.1 - c.1).abs() <= 1.0)
                })
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_gpu_sweep_draws_unjoined_markers_and_a_numeric_sweep_keeps_its_line() {
    let gpus = sweep_chart(
        "gpu",
        "a100-sxm-80g,h100-sxm-80g,h200-sxm-141g,b200-sxm-180g",
        "categorical",
    );
    assert!(markers_joined(&gpus) <= 1, "a line joins the GPU models");
    let nodes = sweep_chart("nodes", "1,2,4", "numeric");
    assert_eq!(markers_joined(&nodes), 3, "the nodes sweep lost its line");
}
