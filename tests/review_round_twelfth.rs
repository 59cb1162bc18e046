//! Fixes from the twelfth session's own review: the layout figure's legend at dp 1.

mod common;

use common::*;

/// The layout figure said "DP: replicas (same pp, tp; stride 8) reduce gradients over NVLink"
/// for a plan with one data-parallel replica, where nothing reduces gradients.
#[test]
fn layout_legend_names_no_gradient_reduction_at_dp_1() {
    let dir = scratch("review_round_twelfth", "dp1");
    let out = dir.to_str().unwrap();
    let r = run(&[
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
        "8",
        "--report",
        out,
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(
        svg.contains("DP: none (dp 1: one replica, no gradient reduction)"),
        "{svg}"
    );
    assert!(!svg.contains("replicas (same pp"), "{svg}");
    // With replicas the line counts them.
    let dir = scratch("review_round_twelfth", "dp8");
    let out = dir.to_str().unwrap();
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "8",
        "--zero",
        "3",
        "--report",
        out,
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(svg.contains("DP: 8 replicas (same pp, tp"), "{svg}");
}
