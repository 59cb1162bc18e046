//! Leftovers of the sixteenth session's reviews: an oversized shared-expert width in a Hugging
//! Face config was blamed on `max_position_embeddings` (the fallback of the flag-to-key map).

mod common;

use common::*;

#[test]
fn an_oversized_shared_expert_width_is_blamed_on_its_own_key() {
    let dir = scratch("leftovers16", "shared");
    let qwen = std::fs::read_to_string(format!("{ROOT}/models/hf/qwen1.5-moe-a2.7b.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&qwen).unwrap();
    config["shared_expert_intermediate_size"] = serde_json::json!(99_999_999u64);
    let r = eval_hf(&dir, "config.json", &config.to_string());
    assert_one_line_error(
        &r,
        &["\"shared_expert_intermediate_size\" is 99999999"],
        &["max_position_embeddings", "panicked"],
        "qwen2-moe shared width",
    );
    let nemotron = nemotron_h_moe_config("").replace(
        "\"moe_shared_expert_intermediate_size\": 3712",
        "\"moe_shared_expert_intermediate_size\": 99999999",
    );
    let r = eval_hf(&dir, "config.json", &nemotron);
    assert_one_line_error(
        &r,
        &["\"moe_shared_expert_intermediate_size\""],
        &["max_position_embeddings", "panicked"],
        "nemotron-h shared width",
    );
}
