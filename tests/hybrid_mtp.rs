//! Multi-token prediction on hybrid stacks: Megatron-Bridge trains Nemotron 3 Super and Ultra
//! with one MTP block, an attention block and an MoE block (`mtp_hybrid_override_pattern` "*E"),
//! run at depth 2 with one set of weights (`mtp_use_repeated_layer`). Each depth costs its
//! compute, the weights are held once, and what tpsim cannot build is refused in one line.

mod common;

use common::*;
use serde_json::Value;

/// `eval --format json` of the bundled Nemotron 3 Super with `depths` MTP depths at
/// Megatron-Bridge's GB300 plan.
fn super_with_mtp(depths: &str) -> Value {
    super_gb300_eval("nemotron-3-super-120b-a12b", &["--mtp-layers", depths])
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn shared_mtp_depths_cost_compute_each_and_weights_once() {
    let [none, one, two] = ["0", "1", "2"].map(super_with_mtp);
    let params = |v: &Value| number(&v["model"]["params"]);
    // One block's weights: an attention and an MoE block with their two norms, the 2h -> h
    // projection and its three norms (Model::mtp_params), for one depth or two.
    assert!(params(&one) > params(&none));
    assert_eq!(params(&one), params(&two));
    let block = params(&one) - params(&none);
    let (h, experts, ffn, latent) = (4096.0, 512.0, 2688.0, 1024.0);
    let expert_weights = experts * 2.0 * latent * ffn;
    assert!(
        block > expert_weights + 2.0 * h * h && block < 1.05 * (expert_weights + 2.0 * h * h) + 1e8,
        "{block}"
    );
    // Memory holds the block once as well; time pays every depth.
    let weights = |v: &Value| number(&v["plans"][0]["memory"]["weights_bytes"]);
    assert_eq!(weights(&one), weights(&two));
    let step = |v: &Value| number(&v["plans"][0]["time"]["step_s"]);
    let (d1, d2) = (step(&one) - step(&none), step(&two) - step(&one));
    assert!(d1 > 0.0 && (d2 / d1 - 1.0).abs() < 0.05, "{d1} {d2}");
    // Model FLOPs count each depth: an attention + MoE layer, the projection and the logits.
    let flops = |v: &Value| {
        number(&v["plans"][0]["model_tflops_per_gpu"]) / number(&v["plans"][0]["tokens_per_s"])
    };
    let per_depth = flops(&one) - flops(&none);
    assert!(per_depth > 0.0);
    assert!(((flops(&two) - flops(&one)) / per_depth - 1.0).abs() < 1e-2);
}

#[test]
fn the_model_line_says_what_an_mtp_depth_is() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--mtp-layers",
        "2",
        "--gpu",
        "gb300-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--tp",
        "1",
        "--ep",
        "64",
        "--etp",
        "1",
        "--global-batch",
        "512",
        "--zero",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "2 MTP layers of an attention and an MoE block (*E), one set of weights for all"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn mtp_blocks_tpsim_cannot_build_are_refused() {
    // A stack ending in a Mamba layer: its MTP block would not be an attention + MLP pair.
    let dir = scratch("hybrid-mtp", "refused");
    let text = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml")).unwrap();
    let path = dir.join("ends-in-mamba.yaml");
    let start = text.find("pattern: \"").unwrap() + "pattern: \"".len();
    let end = start + text[start..].find('"').unwrap();
    let pattern = format!("{}M", &text[start..end - 1]);
    std::fs::write(
        &path,
        format!("{}{pattern}{}", &text[..start], &text[end..]),
    )
    .unwrap();
    let r = run(&[
        "eval",
        "--model",
        path.to_str().unwrap(),
        "--mtp-layers",
        "1",
        "--nodes",
        "1",
        "--tp",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &["ends in a Mamba or attention layer", "--mtp-layers"],
        &["panicked"],
        "pattern ending in M",
    );
    // A Megatron-LM line gives a hybrid stack's MTP in its pattern's '/' segments, which tpsim
    // does not read: --mtp-num-layers there is refused, naming --mtp-layers.
    let line = "--hybrid-layer-pattern M-M*-M- --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --mtp-num-layers 1";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_one_line_error(
        &r,
        &["--mtp-num-layers 1 on a hybrid stack", "--mtp-layers"],
        &["panicked"],
        "megatron line",
    );
}

#[test]
fn a_nemotron_h_config_reads_its_mtp_block() {
    let dir = scratch("hybrid-mtp", "hf");
    let config = nemotron_h_moe_config;
    let plain = hf_model(&eval_hf(&dir, "config.json", &config("")));
    let with = hf_model(&eval_hf(
        &dir,
        "config.json",
        &config(r#", "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E""#),
    ));
    assert_eq!(with["mtp_layers"], 1);
    assert!(number(&with["params"]) > number(&plain["params"]));
    let r = eval_hf(
        &dir,
        "config.json",
        &config(r#", "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*M""#),
    );
    assert_one_line_error(
        &r,
        &[
            "\"mtp_hybrid_override_pattern\" \"*M\"",
            "num_nextn_predict_layers to 0",
        ],
        &["panicked"],
        "*M block",
    );
}
