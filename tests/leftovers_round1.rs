//! Leftovers of the earlier review rounds, round 1: errors whose fix named nothing (a Hugging Face
//! config's key-value heads), a key the input cannot take (`model.head_dim` in a runs file) or a
//! flag beside a plan file (`--sequence-parallel false`); `eval` naming the DP link otherwise than
//! `plan` for the same plan; and a Megatron-LM line for Falcon-7B that prices another model
//! without a word.

mod common;

use common::*;

/// `--hf-config` with `"num_key_value_heads": 3` over 8 attention heads gave the rule and no fix;
/// it now offers a divisor of the heads, in the config's key.
#[test]
fn hf_config_kv_heads_that_do_not_divide_the_heads_get_a_divisor() {
    let dir = scratch("leftovers1", "kv3");
    let config = r#"{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 4096,
        "num_attention_heads": 8, "num_key_value_heads": 3, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192}"#;
    std::fs::write(dir.join("config.json"), config).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "config.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "\"num_key_value_heads\" 3",
            "\"num_attention_heads\" 8",
            "give a divisor of 8, e.g. \"num_key_value_heads\": 2",
        ],
        &["--kv-heads"],
        "kv heads 3 of 8",
    );
}

/// A config whose hidden size the heads do not divide names a head count that does.
#[test]
fn hf_config_hidden_not_divisible_by_heads_gets_a_head_count() {
    let dir = scratch("leftovers1", "hidden");
    let config = r#"{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 4100,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192}"#;
    std::fs::write(dir.join("config.json"), config).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "config.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
        ],
    );
    assert_one_line_error(
        &r,
        &["\"hidden_size\" 4100", "e.g. \"num_attention_heads\": 25"],
        &["--heads", "--head-dim"],
        "hidden 4100 over 32 heads",
    );
}
