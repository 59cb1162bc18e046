//! Leftovers, round 36 (the lead's, from the leads list of the twenty-sixth session):
//! - a Hugging Face config of a `model_type` tpsim does not read whose counts are per-layer lists
//!   (tencent's Hunyuan-A13B, `hunyuan_v1_moe`: `moe_topk`, `moe_intermediate_size` and
//!   `num_shared_expert` as one value per layer, HunYuanMoEV1Config "List form enables layer-wise
//!   customization") was offered shape flags without its top-k, expert width or shared expert, so
//!   the offered flags priced a top-2 model with no shared expert (6.0B active against the card's
//!   13B). A list of one value is now read as that value; experts are `intermediate_size` wide where
//!   no `moe_intermediate_size` is given (Mixtral's convention, which `HunYuanMoEV1Experts` reuses);
//!   a list whose values differ is said, since one flag holds one value.
//!   The config under tests/data/leftovers36/ is typed after the Hub's
//!   tencent/Hunyuan-A13B-Instruct config.json as transformers' HunYuanMoEV1Config and its
//!   modeling file read it, not fetched from the Hub, so a key may differ from the file there.

mod common;

use common::*;

const DATA: &str = "tests/data/leftovers36";

/// The flags after "this config's values: " in a refusal, up to ", then" and any note in brackets.
fn offered_flags(message: &str) -> Vec<String> {
    message
        .split("this config's values: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no flags with the config's values in: {message}"))
        .split(", then")
        .next()
        .unwrap()
        .split(" (")
        .next()
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn per_layer_counts_of_an_unread_config_are_offered_as_flags() {
    let r = run(&[
        "plan",
        "--hf-config",
        &format!("{DATA}/hunyuan_a13b.json"),
        "--nodes",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "model_type \"hunyuan_v1_moe\" is not one tpsim reads",
            "--num-experts 64 --moe-router-topk 8 --moe-ffn-hidden-size 3072 --moe-shared-expert-intermediate-size 3072",
        ],
        &["runs from"],
        "hunyuan",
    );
    let flags = offered_flags(&r.stderr);
    let mut args: Vec<&str> = vec![
        "plan",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--top",
        "1",
        "--format",
        "json",
    ];
    args.extend(flags.iter().map(String::as_str));
    let v = json(&args);
    let total = v["model"]["params"].as_f64().unwrap();
    let active = v["model"]["active_params"].as_f64().unwrap();
    // The model card: 80B total, 13B active.
    assert!((total / 80e9 - 1.0).abs() < 0.02, "total {total:.4e}");
    assert!((active / 13e9 - 1.0).abs() < 0.03, "active {active:.4e}");
}

#[test]
fn a_per_layer_count_that_differs_is_said_not_dropped_silently() {
    let r = run(&[
        "plan",
        "--hf-config",
        &format!("{DATA}/hunyuan_topk_differs.json"),
        "--nodes",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "its per-layer moe_topk runs from 4 to 8: one flag holds one value, so give the one to price",
            "--num-experts 64",
        ],
        &["--moe-router-topk", "eos_token_id"],
        "hunyuan topk differs",
    );
}
