//! Review of hybrid Mamba-Transformer stacks over pipeline stages (the seventeenth session's
//! `cost::LayerMix`, `pipeline::ChunkLayout::stage_run`, `plan::hybrid_pipeline_refusal` and
//! recompute modules on hybrid stacks). Each test failed before its fix:
//!
//! 1. `plan --allow-uneven-pp` dropped every hybrid pipeline whose pp does not divide the layers
//!    (Nemotron-H 56B's 118 layers at pp 4 or 8), which Megatron-Core builds with the first and
//!    last stage's layers given: tpsim's own split was refused before the first/last splits were
//!    tried.

mod common;

use common::*;

/// `plan --format json` of Nemotron-H 56B on 64 H100 with uneven pipelines allowed and `extra`.
fn nemotron_h_56b_plan(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "plan",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--global-batch",
        "768",
        "--seq-len",
        "8192",
        "--allow-uneven-pp",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

#[test]
fn uneven_hybrid_pipelines_are_searched_with_their_first_and_last_stages_given() {
    // 118 layers over 4 stages: Megatron-Core builds it with first and last given and 30 layers
    // on each middle stage (select_pipeline_segment), e.g. 30/30/28.
    let v = nemotron_h_56b_plan(&["--pp", "4", "--top", "3"]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "{v}");
    for p in plans {
        assert_eq!(p["pp"], 4, "{p}");
        let stages = &p["stages"];
        assert_eq!(stages["given"], true, "{p}");
        let (first, middle, last) = (
            stages["first"].as_u64().unwrap(),
            stages["middle_max"].as_u64().unwrap(),
            stages["last"].as_u64().unwrap(),
        );
        // Even middle stages, all 118 layers placed.
        assert_eq!(first + 2 * middle + last, 118, "{p}");
        assert!(p["time"]["step_s"].as_f64().unwrap().is_finite(), "{p}");
    }
    // Unpinned, the search now weighs those pipelines too.
    let v = nemotron_h_56b_plan(&["--top", "50"]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(
        plans
            .iter()
            .any(|p| p["pp"].as_u64().is_some_and(|pp| 118 % pp != 0)),
        "{v}"
    );
}
