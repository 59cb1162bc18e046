//! Leftovers, round 38: the report timeline drew the tied word embedding's gradient all-reduce on
//! every pipeline stage, and ended a V schedule's axis short of the step eval prints; and the
//! input refusals named below.

mod common;

use common::*;

const SUITE: &str = "leftovers38";

/// Every `<rect>` of an SVG as (x, width, y, fill).
fn rects(svg: &str) -> Vec<(f64, f64, f64, String)> {
    let attr = |el: &str, name: &str| -> String {
        el.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .unwrap_or("")
            .to_string()
    };
    let num = |el: &str, name: &str| attr(el, name).parse::<f64>().unwrap_or(0.0);
    svg.split("<rect")
        .skip(1)
        .map(|el| el.split('>').next().unwrap())
        .map(|el| {
            (
                num(el, "x"),
                num(el, "width"),
                num(el, "y"),
                attr(el, "fill"),
            )
        })
        .collect()
}

/// The time-axis tick labels, in document order, as (x pixel, seconds): the centred texts
/// under the axis that read as a number.
fn x_ticks(svg: &str) -> Vec<(f64, f64)> {
    svg.split("<text")
        .skip(1)
        .filter(|el| el.contains(r#"text-anchor="middle""#) && !el.contains("rotate"))
        .filter_map(|el| {
            let x: f64 = el.split(" x=\"").nth(1)?.split('"').next()?.parse().ok()?;
            let text = el.split('>').nth(1)?.split('<').next()?.trim();
            Some((x, text.parse().ok()?))
        })
        .collect()
}

/// The seed plan (a tied 512B model at pp 16): the embedding's gradient is all-reduced over the
/// embedding group, the first and the last stage only (Megatron-Core `finalize_model_grads.py`
/// `_allreduce_word_embedding_grads`). The timeline drew its band on all 16 stages. Fails on main
/// (16 bands).
#[test]
fn the_embedding_all_reduce_is_drawn_on_the_first_and_last_stage_only() {
    let dir = scratch(SUITE, "embedding-band");
    let r = run_in(
        &dir,
        &[
            "report",
            &format!("{ROOT}/plans/seed-512b-32nodes.yaml"),
            "--out",
            "r",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("r/timeline.svg")).unwrap();
    let all = rects(&svg);
    // The PP term's colour (`svg::term_colour(TermKind::PpComm)`).
    let bands: Vec<f64> = all
        .iter()
        .filter(|r| r.3 == "#76B7B2")
        .map(|r| r.2)
        .collect();
    assert_eq!(bands.len(), 2, "embedding bands at y {bands:?}");
    // The first and the last stage are the bottom and the top rows of the end panel: the
    // optimizer's band (every stage's) is drawn on 16 rows, the embedding's on its first and last.
    let mut optimizer_rows: Vec<f64> = all
        .iter()
        .filter(|r| r.3 == "#FFBF00")
        .map(|r| r.2)
        .collect();
    optimizer_rows.sort_by(f64::total_cmp);
    assert_eq!(optimizer_rows.len(), 16, "{optimizer_rows:?}");
    let (top, bottom) = (optimizer_rows[0], optimizer_rows[15]);
    assert!(
        bands.contains(&top) && bands.contains(&bottom),
        "bands at {bands:?}, stage rows {top}..{bottom}"
    );
    assert!(svg.contains("word embedding gradient all-reduce (first and last stage)"));
}

/// A ZB-V plan whose simulated blocks end before the slowest stage's work as the closed form adds
/// it up (PP p2p across nodes): eval clamps the bubble at 0 and prints 9.605 s, the timeline's
/// axis ended at 9.594 s. It now ends at the printed step, the gap named in the legend. Fails on
/// main (the axis end read from the ticks is 0.011 s short).
#[test]
fn a_v_schedules_timeline_ends_at_the_step_eval_prints() {
    let dir = scratch(SUITE, "v-axis");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--framework",
            "torchtitan",
            "--pp",
            "4",
            "--tp",
            "4",
            "--zero",
            "1",
            "--vpp",
            "2",
            "--pp-schedule",
            "zbv",
            "--global-batch",
            "64",
            "--recompute",
            "full",
            "--report",
            "r",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let step_s: f64 = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("time per step: "))
        .and_then(|l| l.split(' ').next())
        .expect("a step line")
        .parse()
        .unwrap();
    // The case is one whose bubble is clamped at 0: no bubble term in the breakdown.
    assert!(!r.stdout.contains("\n  bubble  "), "{}", r.stdout);
    let svg = std::fs::read_to_string(dir.join("r/timeline.svg")).unwrap();
    // The end panel's last two ticks give its scale; its right edge is the last tail band's end
    // (the background rectangle, the figure's width, excluded; a band keeps a pixel's gap).
    let ticks = x_ticks(&svg);
    let [.., (x0, t0), (x1, t1)] = ticks[..] else {
        panic!("ticks {ticks:?}")
    };
    let s_per_px = (t1 - t0) / (x1 - x0);
    let edge_px = rects(&svg)
        .iter()
        .filter(|r| r.1 < 1000.0)
        .map(|r| r.0 + r.1 + 1.0)
        .fold(0.0, f64::max);
    let axis_end_s = t1 + (edge_px - x1) * s_per_px;
    assert!(
        (axis_end_s - step_s).abs() <= 3.0 * s_per_px,
        "axis ends at {axis_end_s:.4} s, eval prints {step_s} s (a pixel {s_per_px:.5} s)"
    );
    assert!(svg.contains("blank before the tail: 0.011 s"), "{svg}");
}

/// A model file's count written as a whole float past the bound `Model::check` holds it to
/// (`heads: 1e6`, `layers: 1e6`, `hidden: 1e7`, `seq_len: 1e8`) was told to be written without
/// the exponent (`heads: 1000000`), which the check then refused: two refusals for one value.
/// The bound is now said at once. Fails on main (the first message offered `heads: 1000000`).
#[test]
fn a_whole_float_past_a_bound_is_told_the_bound_at_once() {
    let dir = scratch(SUITE, "float-count");
    let base = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    for (key, written, value, bound) in [
        ("heads", "1e6", "1000000", "65536"),
        ("layers", "1e6", "1000000", "10000"),
        ("hidden", "1e7", "10000000", "1048576"),
        ("seq_len", "1e8", "100000000", "16777216"),
    ] {
        let text: String = base
            .lines()
            .filter(|l| !l.starts_with(&format!("{key}:")))
            .chain([format!("{key}: {written}").as_str()])
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("m.yaml"), text).unwrap();
        let r = run_in(&dir, &["eval", "--model", "m.yaml", "--nodes", "1"]);
        assert_one_line_error(
            &r,
            &[
                &format!("{key}: {value} is larger than {bound}"),
                &format!("give at most {bound}"),
            ],
            &["without a decimal point", "floating point"],
            key,
        );
    }
}

/// `compare` of a Megatron-Core plan and a torchtitan one listed every default the frameworks
/// differ in, a 720-character line. It now names the framework, the count of the rest and the
/// flag. Fails on main (the line was over 700 characters and named no framework fix).
#[test]
fn compare_across_frameworks_is_one_short_line() {
    let dir = scratch(SUITE, "compare-frameworks");
    for (name, framework) in [("a.yaml", "megatron-core"), ("b.yaml", "torchtitan")] {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--framework",
                framework,
                "--save",
                name,
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let r = run_in(&dir, &["compare", "--plan", "a.yaml", "--plan", "b.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "--plan a.yaml and --plan b.yaml were planned under different frameworks (megatron-core against torchtitan)",
            "add --framework megatron-core",
        ],
        &["context-parallel exchange"],
        "compare across frameworks",
    );
    assert!(r.stderr.trim().len() <= 240, "{}", r.stderr);
}
