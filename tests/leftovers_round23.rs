//! Leftovers of the twenty-third round: a dense Llama's JSON claiming torchtitan's GPT-OSS expert
//! path, a Megatron-DeepSpeed line priced at a ZeRO stage it never states, a config.json's `NaN`
//! refused without its key, and the timeline's TP strip drawn at one share for every block.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "leftovers23";

/// `--framework torchtitan` set `torchtitan_gpt_oss_experts` for every model, so a dense Llama's
/// JSON said it ran GPT-OSS's experts. It is set now only for a model that has them (MoE with a
/// clamped GLU), where it prices their eager kernels.
#[test]
fn only_a_gpt_oss_model_claims_torchtitans_gpt_oss_experts() {
    let training = |model: &str, extra: &[&str]| -> Value {
        let mut args = vec![
            "eval",
            "--model",
            model,
            "--framework",
            "torchtitan",
            "--nodes",
            "1",
            "--zero",
            "3",
            "--format",
            "json",
        ];
        args.extend(extra);
        json(&args)["training"].clone()
    };
    let dense = training("llama3-8b", &["--tp", "1", "--dp", "8"]);
    assert!(dense.is_object(), "{dense}");
    assert_eq!(
        dense.get("torchtitan_gpt_oss_experts"),
        None,
        "a dense Llama: {dense}"
    );
    // Mixtral's experts are MoE without GPT-OSS's clamped, biased GLU.
    let mixtral = training("mixtral-8x7b", &["--ep", "8"]);
    assert_eq!(mixtral.get("torchtitan_gpt_oss_experts"), None, "{mixtral}");
    let gpt_oss = training("gpt-oss-120b", &["--ep", "8"]);
    assert_eq!(
        gpt_oss["torchtitan_gpt_oss_experts"].as_bool(),
        Some(true),
        "{gpt_oss}"
    );
}

/// Megatron-DeepSpeed runs the ZeRO stage of its DeepSpeed config (`--deepspeed_config`), which
/// tpsim cannot read; a `--deepspeed` line without `--zero-stage` was priced at ZeRO-0 from
/// Megatron's own switches while a note called `--deepspeed` harmless.
#[test]
fn a_deepspeed_line_without_its_zero_stage_is_refused_naming_the_stage() {
    let line = "--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 --global-batch-size 64 --deepspeed --tensor-model-parallel-size 1";
    assert_one_line_error(
        &run(&["eval", "--megatron-args", line, "--nodes", "1"]),
        &[
            "--deepspeed runs Megatron-DeepSpeed",
            "zero_optimization.stage",
            "no --zero-stage",
            "ZeRO-0",
            "add the config's stage to the line as --zero-stage N",
            "--framework deepspeed",
        ],
        &[],
        "--deepspeed without --zero-stage",
    );
    // With the stage given it is priced at that stage.
    let v = json(&[
        "eval",
        "--framework",
        "deepspeed",
        "--megatron-args",
        &format!("{line} --zero-stage 1"),
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(v["plans"][0]["zero"].as_u64(), Some(1), "{}", v["plans"][0]);
}

/// Python's json.dump writes `NaN`, `Infinity` and `-Infinity` for non-finite floats; the config
/// was refused as "not valid JSON" with serde_json's position only. The key is named now, with the
/// rule and the fix, in a nested object and in an array too.
#[test]
fn a_non_finite_number_in_a_config_names_its_key() {
    let dir = scratch(SUITE, "non-finite");
    for literal in ["NaN", "Infinity", "-Infinity"] {
        let config = format!(
            "{{\"model_type\": \"llama\", {HF_SHAPE},\n  \"rope_scaling\": {{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": {literal}}}}}"
        );
        assert_one_line_error(
            &eval_hf(&dir, "config.json", &config),
            &[
                &format!("key \"rope_scaling.low_freq_factor\" is {literal},"),
                "not a finite number",
                "line 2",
                "write the model's finite value there",
            ],
            &["not valid JSON"],
            literal,
        );
    }
    let config = format!(
        "{{\"model_type\": \"llama\", \"note\": \"a: [\", {HF_SHAPE}, \"layer_scales\": [1.0, NaN]}}"
    );
    assert_one_line_error(
        &eval_hf(&dir, "config.json", &config),
        &["key \"layer_scales[1]\" is NaN,"],
        &[],
        "in an array",
    );
}

/// The numbers of an SVG `<rect>`: (x, y, width, fill).
fn rects(svg: &str) -> Vec<(f64, f64, f64, String)> {
    svg.split("<rect ")
        .skip(1)
        .map(|r| format!(" {r}"))
        .filter_map(|r| {
            let attr = |name: &str| {
                let start = r.find(&format!(" {name}=\""))? + name.len() + 3;
                let end = start + r[start..].find('"')?;
                Some(r[start..end].to_string())
            };
            let num = |name: &str| attr(name)?.parse::<f64>().ok();
            Some((num("x")?, num("y")?, num("width")?, attr("fill")?))
        })
        .collect()
}

/// The timeline drew one TP share (the slowest stage's TP time over its busy time) on every
/// block, so a block holding the output layer, longer for its GEMM, got a longer TP strip than a
/// block of as many layers without it. Each block's strip is its own chunk's TP time now: with
/// two layers in every chunk (8 layers, pp 2 x vpp 2), the forward strips of the last stage's
/// chunks are equally long though its last chunk's blocks are far longer.
#[test]
fn the_timeline_tp_strip_is_each_blocks_own() {
    let dir = scratch(SUITE, "timeline");
    let out = dir.join("report");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--layers",
        "8",
        "--nodes",
        "1",
        "--tp",
        "4",
        "--pp",
        "2",
        "--vpp",
        "2",
        "--global-batch",
        "2",
        "--report",
        out.to_str().unwrap(),
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    let all = rects(&svg);
    // The forward blocks' colours, chunk 0 and chunk 1 (`svg_gantt::FWD`).
    let forward = ["#1F77B4", "#6BAED6"];
    let last_row = all
        .iter()
        .filter(|r| forward.contains(&r.3.as_str()))
        .map(|r| r.1)
        .fold(f64::MIN, f64::max);
    // Each forward block of the last stage with the TP strip that starts where it starts.
    let pairs: Vec<(f64, f64, &str)> = all
        .iter()
        .filter(|b| b.1 == last_row && forward.contains(&b.3.as_str()))
        .filter_map(|b| {
            let strip = all
                .iter()
                .find(|s| s.3 == "#333333" && s.0 == b.0 && s.1 > b.1)?;
            Some((b.2, strip.2, b.3.as_str()))
        })
        .collect();
    let widest = |chunk: &str, of: fn(&(f64, f64, &str)) -> f64| {
        pairs
            .iter()
            .filter(|p| p.2 == chunk)
            .map(of)
            .fold(f64::MIN, f64::max)
    };
    let (block0, strip0) = (widest(forward[0], |p| p.0), widest(forward[0], |p| p.1));
    let (block1, strip1) = (widest(forward[1], |p| p.0), widest(forward[1], |p| p.1));
    assert!(strip0 > 0.0 && strip1 > 0.0, "no strips: {pairs:?}");
    // The output layer's GEMM makes the last chunk's forward far longer ...
    assert!(block1 > 1.5 * block0, "{pairs:?}");
    // ... but not its TP time: two layers' collectives each (a pixel of rounding).
    assert!((strip1 - strip0).abs() <= 1.0, "{pairs:?}");
    assert!(
        svg.contains("up to "),
        "the legend's share is a block's largest"
    );
}
