//! Review of LatentMoE (Megatron-Core `--moe-latent-size`): each test pins a defect found in the
//! first version, and fails without its fix.

mod common;

use common::*;

/// The bundled Super's model file with its `latent_size` value replaced by `value`, under `dir`.
fn super_with_latent(dir: &std::path::Path, value: &str) -> String {
    let text =
        std::fs::read_to_string(format!("{ROOT}/models/nemotron-3-super-120b-a12b.yaml")).unwrap();
    let start = text.find("  latent_size:").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let text = format!("{}  latent_size: {value}{}", &text[..start], &text[end..])
        .replace("name: nemotron-3-super-120b-a12b", "name: super-edit");
    let path = dir.join("super-edit.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_model_file_latent_width_is_refused_in_the_files_words() {
    // `latent_size` is a model-file key: its refusals name the key (not the Megatron flag), and
    // never suggest 0, which the model check refuses in turn.
    let dir = scratch("latent-moe-review", "file-words");
    for (value, want, what) in [
        ("0", "moe.latent_size: 0 must be at least 1", "zero"),
        (
            "-1",
            "latent_size must be a positive whole number (1 or more)",
            "negative",
        ),
        (
            "abc",
            "latent_size takes a whole number of 1 or more",
            "text",
        ),
    ] {
        let path = super_with_latent(&dir, value);
        let r = run(&["eval", "--model", &path, "--nodes", "8", "--tp", "1"]);
        assert_one_line_error(
            &r,
            &[want],
            &["--moe-latent-size", "latent_size: 0)", "0 or more"],
            what,
        );
    }
}

#[test]
fn an_oversized_hf_latent_width_is_blamed_on_its_own_key() {
    // A nemotron_h config's `moe_latent_size` past tpsim's width bound was reported as
    // "max_position_embeddings" (the fallback of the flag-to-key map).
    let dir = scratch("latent-moe-review", "hf-large");
    let config = r#"{
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "vocab_size": 131072,
  "hidden_size": 2688,
  "intermediate_size": 1856,
  "num_hidden_layers": 4,
  "hybrid_override_pattern": "ME*E",
  "num_attention_heads": 32,
  "head_dim": 128,
  "num_key_value_heads": 2,
  "mamba_num_heads": 64,
  "n_groups": 8,
  "mamba_head_dim": 64,
  "n_routed_experts": 128,
  "n_shared_experts": 1,
  "moe_intermediate_size": 1856,
  "moe_shared_expert_intermediate_size": 3712,
  "num_experts_per_tok": 6,
  "max_position_embeddings": 8192,
  "moe_latent_size": 99999999
}"#;
    let r = eval_hf(&dir, "config.json", config);
    assert_one_line_error(
        &r,
        &["\"moe_latent_size\" is 99999999"],
        &["max_position_embeddings", "panicked"],
        "oversized latent",
    );
}

#[test]
fn latent_experts_are_refused_under_frameworks_without_them() {
    // Megatron-Core's MoELayer has the h -> latent and latent -> h projections; DeepSpeed-MoE and
    // torchtitan's MoE do not, so a LatentMoE model under them was priced as a layer they cannot
    // build. Qwen3-30B-A3B's transformer shape with a latent width (a hybrid is refused anyway).
    let dir = scratch("latent-moe-review", "framework");
    let text = std::fs::read_to_string(format!("{ROOT}/models/qwen3-30b-a3b.yaml"))
        .unwrap()
        .replace("name: qwen3-30b-a3b", "name: qwen3-latent")
        .replace("\nmoe:\n", "\nmoe:\n  latent_size: 1024\n");
    let path = dir.join("qwen3-latent.yaml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    for (framework, zero) in [("deepspeed", "1"), ("torchtitan", "3")] {
        let r = run(&[
            "eval",
            "--model",
            path,
            "--nodes",
            "2",
            "--framework",
            framework,
            "--tp",
            "1",
            "--ep",
            "8",
            "--zero",
            zero,
            "--global-batch",
            "256",
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("--framework {framework}"),
                "latent width of 1024",
                "--framework megatron-core",
            ],
            &["panicked"],
            framework,
        );
    }
    // Megatron-Core still prices it.
    let r = run(&[
        "eval",
        "--model",
        path,
        "--nodes",
        "2",
        "--tp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "256",
        "--format",
        "json",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stderr.contains("error:"), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["model"]["moe"]["latent_size"], 1024);
}
