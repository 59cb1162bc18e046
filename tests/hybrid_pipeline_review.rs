//! Review of hybrid Mamba-Transformer stacks over pipeline stages (the seventeenth session's
//! `cost::LayerMix`, `pipeline::ChunkLayout::stage_run`, `plan::hybrid_pipeline_refusal` and
//! recompute modules on hybrid stacks). Each test failed before its fix:
//!
//! 1. `plan --allow-uneven-pp` dropped every hybrid pipeline whose pp does not divide the layers
//!    (Nemotron-H 56B's 118 layers at pp 4 or 8), which Megatron-Core builds with the first and
//!    last stage's layers given: tpsim's own split was refused before the first/last splits were
//!    tried.
//! 2. `eval` called the slowest hybrid stage's Mamba, attention and MoE blocks "transformer
//!    layers" and neither the text nor `--format json` said which blocks that stage held (its
//!    slice of the pattern is what set its time): the text names them and the JSON carries them
//!    as `slowest_stage_blocks`.

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
fn uneven_hybrid_pipelines_are_searched_with_equal_middle_stages() {
    // 118 layers over 4 stages: cut by the pattern's '|' segments (Megatron-Core 0.17 on), tpsim's
    // own split (29/30/30/29) or a first/last split with 30 layers on each middle stage
    // (select_pipeline_segment), e.g. 30/30/28.
    let v = nemotron_h_56b_plan(&["--pp", "4", "--top", "3"]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "{v}");
    for p in plans {
        assert_eq!(p["pp"], 4, "{p}");
        let stages = &p["stages"];
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

/// `eval` of Nemotron 3 Super with its two MTP depths on 64 H100 at tp 1, etp 1, micro-batch 1,
/// ZeRO-1 and NVIDIA's H100 recompute modules, with `extra`.
fn super_eval(extra: &[&str]) -> Run {
    let mut args = vec!["eval"];
    args.extend_from_slice(&SUPER_H100_RUN);
    args.extend_from_slice(&[
        "--mtp-layers",
        "2",
        "--micro-batch",
        "1",
        "--recompute",
        "selective",
        "--recompute-modules",
        "layernorm,moe_act,moe,core_attn",
        "--zero",
        "1",
    ]);
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn the_slowest_hybrid_stage_is_named_by_its_blocks_in_text_and_json() {
    // NVIDIA's long-context layout: 4 layers on the last stage, the pattern's last four
    // ("MEME": 2 Mamba, 2 MoE), then the two MTP depths and three output-layer passes, which make
    // it the slowest. The text called those blocks "4 transformer layers"; the JSON did not say
    // which blocks the stage held at all.
    let extra = [
        "--pp",
        "8",
        "--decoder-last-pipeline-num-layers",
        "4",
        "--ep",
        "8",
    ];
    let r = super_eval(&extra);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "whose 4 layers of the hybrid pattern (2 Mamba, 2 MoE) and 2 MTP layers set the step"
        ),
        "{}",
        r.stdout
    );
    let mut with_json = extra.to_vec();
    with_json.extend_from_slice(&["--format", "json"]);
    let r = super_eval(&with_json);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let plan = &v["plans"][0];
    let blocks = &plan["slowest_stage_blocks"];
    assert_eq!(blocks["counts"]["mamba"], 2, "{plan}");
    assert_eq!(blocks["counts"]["moe"], 2, "{plan}");
    assert_eq!(blocks["counts"]["attention"], 0, "{plan}");
    assert_eq!(blocks["mtp_depths"], 2, "{plan}");
    assert_eq!(plan["slowest_stage_layers"], 6, "{plan}");
    // A transformer's estimate carries no such key.
    let v = json(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "4",
        "--pp",
        "2",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    assert!(v["plans"][0].get("slowest_stage_blocks").is_none(), "{v}");
}
