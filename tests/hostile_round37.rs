//! Hostile input, round 37: a report's timeline whose step is almost all tail (a ZeRO-3 gradient
//! reduction hundreds of times the blocks) drew its sub-pixel blocks as rectangles of width -1.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile37";

/// Every `<rect>`'s width and height in an SVG.
fn rect_sizes(svg: &str) -> Vec<(f64, f64)> {
    let attr = |el: &str, name: &str| -> f64 {
        el.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .map_or(0.0, |v| v.parse().unwrap())
    };
    svg.split("<rect")
        .skip(1)
        .map(|el| el.split('>').next().unwrap())
        .map(|el| (attr(el, "width"), attr(el, "height")))
        .collect()
}

/// Kimi K2 on two nodes under ZeRO-3: the gradient reduction after the last backward is some 500 s
/// of a 540 s step, so its few micro-batch blocks are under a pixel each on the step's axis (and
/// too few to fold). Each kept a pixel's gap at its right end, which made a block of no pixels a
/// rectangle of width -1 (no SVG). A block under two pixels now drops the gap.
#[test]
fn a_timeline_of_sub_pixel_blocks_draws_no_negative_width() {
    let dir = scratch(SUITE, "sub-pixel-blocks");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "kimi-k2",
            "--nodes",
            "2",
            "--tp",
            "8",
            "--global-batch",
            "96",
            "--zero",
            "3",
            "--report",
            "report",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("report/timeline.svg")).unwrap();
    let sizes = rect_sizes(&svg);
    assert!(
        sizes.iter().all(|&(w, h)| w >= 0.0 && h >= 0.0),
        "timeline.svg: a rectangle of negative size: {sizes:?}"
    );
    // The forward and backward blocks are still drawn.
    let blocks = svg
        .split("<rect")
        .skip(1)
        .filter(|el| el.contains(r##"fill="#1F77B4""##) || el.contains(r##"fill="#31A354""##))
        .count();
    assert!(blocks >= 2, "no block drawn:\n{svg}");
}
