//! Hybrid Mamba-Transformer stacks (Nemotron-H, Nemotron 3 Nano): the bundled models' parameter
//! counts against the published sizes, the average layer's blocks in memory and time, and the
//! plans and inputs tpsim refuses for them in one line.

mod common;

use common::*;

fn model_json(model: &str) -> serde_json::Value {
    json(&[
        "eval",
        "--model",
        model,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--format",
        "json",
    ])
}

#[test]
fn bundled_hybrid_models_count_their_published_parameters() {
    // (model, published total, published active, tolerance): Nemotron-H's sizes are its names
    // (8B, 56B: arXiv:2504.03624), the Nano's the model card's 31.6B total and 3.6B active with
    // embeddings.
    let cases = [
        ("nemotron-h-8b", 8.0, None, 0.02),
        ("nemotron-h-56b", 56.0, None, 0.01),
        ("nemotron-3-nano-30b-a3b", 31.6, Some(3.6), 0.01),
    ];
    for (model, total_b, active_b, tolerance) in cases {
        let v = model_json(model);
        let params = v["model"]["params"].as_f64().unwrap() / 1e9;
        assert!(
            (params / total_b - 1.0).abs() <= tolerance,
            "{model}: {params:.2}B against the published {total_b}B"
        );
        if let Some(active_b) = active_b {
            let active = v["model"]["active_params"].as_f64().unwrap() / 1e9;
            assert!(
                (active / active_b - 1.0).abs() <= tolerance,
                "{model}: {active:.2}B active against the published {active_b}B"
            );
        }
    }
}

#[test]
fn a_full_recompute_keeps_one_input_per_hybrid_layer() {
    // Each block is a layer of Megatron-Core's stack with its own checkpoint: full recompute keeps
    // 2·s·b·h per layer (52 layers x 8192 tokens x 4096 x 2 bytes = 3.25 GiB at micro-batch 1),
    // beside what every plan keeps whatever it recomputes (the layer being recomputed, the loss's
    // fp32 logits), far below what the blocks keep without it.
    let activations = |recompute: &str| {
        let v = json(&[
            "eval",
            "--model",
            "nemotron-h-8b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--zero",
            "1",
            "--recompute",
            recompute,
            "--format",
            "json",
        ]);
        v["plans"][0]["memory"]["activations_bytes"]
            .as_f64()
            .unwrap()
    };
    let full = activations("full");
    let none = activations("none");
    let one_input_per_layer = 52.0 * 8192.0 * 4096.0 * 2.0;
    assert!(
        full >= one_input_per_layer,
        "full recompute keeps {full} bytes, one input per layer is {one_input_per_layer}"
    );
    assert!(none > 4.0 * full, "no recompute keeps {none}, full {full}");
}

#[test]
fn plans_a_hybrid_stack_cannot_take_are_refused_in_one_line() {
    let base = ["eval", "--model", "nemotron-h-8b", "--global-batch", "256"];
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--nodes", "2", "--tp", "2", "--cpu-offload-layers", "4"],
            &[
                "--cpu-offload-layers 4 with the hybrid",
                "get_cpu_offload_context",
                "drop --cpu-offload-layers",
            ],
        ),
        // Context parallelism is priced (tests/hybrid_context_parallel.rs); what
        // MambaContextParallel asserts is refused.
        (
            &[
                "--nodes",
                "32",
                "--tp",
                "8",
                "--cp",
                "32",
                "--seq-len",
                "65536",
            ],
            &[
                "--cp 32 with the hybrid",
                "nheads must be evenly divisible by tp_size * cp_size",
                "valid cp at tp 8: 1, 2, 4, 8, 16",
            ],
        ),
        (
            &["--nodes", "2", "--tp", "1", "--framework", "torchtitan"],
            &["--framework torchtitan", "use --framework megatron-core"],
        ),
        (
            &[
                "--gpu",
                "gb200-nvl72",
                "--nodes",
                "4",
                "--gpus-per-node",
                "4",
                "--tp",
                "16",
            ],
            &[
                "--tp 16 does not divide the 8 Mamba groups",
                "valid: 1, 2, 4, 8",
            ],
        ),
    ];
    for (extra, needles) in cases {
        let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        assert_one_line_error(&run(&args), needles, &["panicked"], &format!("{extra:?}"));
    }
}

#[test]
fn a_hybrid_search_proposes_only_plans_it_prices() {
    let v = json(&[
        "plan",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--format",
        "json",
    ]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "no plan for Nemotron-H 56B on 64 H100s");
    for p in plans {
        // Without --allow-uneven-pp the stages split the 118 layers evenly; virtual stages are
        // the pattern's '|' segments (Megatron-Core 0.17 on), each model chunk a layer or more.
        let pp = p["pp"].as_u64().unwrap();
        assert_eq!(118 % pp, 0, "pp {pp} must divide the 118 layers: {p}");
        let vpp = p["vpp"].as_u64().unwrap();
        assert!(pp * vpp <= 118, "{p}");
        assert_eq!(p["cp"], 1, "{p}");
        let tp = p["tp"].as_u64().unwrap();
        assert_eq!(8 % tp, 0, "tp {tp} must divide the 8 Mamba groups");
    }
}

#[test]
fn hybrid_patterns_tpsim_does_not_price_are_refused_by_symbol() {
    let dir = scratch("hybrid", "patterns");
    let file = |pattern: &str, layers: u32| {
        format!(
            "name: tiny-hybrid\nlayers: {layers}\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 2048\nposition_embedding_type: none\nnorm: rmsnorm\nlinear_bias: false\nhybrid:\n  pattern: \"{pattern}\"\n  mamba_heads: 32\n  mamba_head_dim: 64\n  mamba_state_dim: 128\n  mamba_groups: 8\n"
        )
    };
    let cases: [(&str, u32, &[&str]); 4] = [
        (
            "M*G-",
            4,
            &[
                "symbol 'G'",
                "gated DeltaNet",
                "M Mamba-2, * attention, - MLP, E MoE",
            ],
        ),
        (
            "M*M-",
            5,
            &["4 symbols but the model has 5 layers", "layers: 4"],
        ),
        (
            "M*E-",
            4,
            &[
                "1 MoE layers (E) but the model has no experts",
                "give the moe settings",
            ],
        ),
        ("M*|M-", 4, &["symbol '|'", "pipeline-stage boundary"]),
    ];
    for (pattern, layers, needles) in cases {
        let path = dir.join(format!("m{layers}{}.yaml", pattern.len()));
        std::fs::write(&path, file(pattern, layers)).unwrap();
        let r = run(&[
            "eval",
            "--model",
            path.to_str().unwrap(),
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
        ]);
        assert_one_line_error(&r, needles, &["panicked"], pattern);
    }
    // A pattern tpsim prices evaluates.
    let path = dir.join("ok.yaml");
    std::fs::write(&path, file("M*M-", 4)).unwrap();
    let r = run(&[
        "eval",
        "--model",
        path.to_str().unwrap(),
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn only_megatron_lm_and_megatron_bridge_have_a_launch_config_for_a_hybrid_stack() {
    // Megatron-LM's pretrain_hybrid.py line carries the pattern and the mixer's shape
    // (tests/hybrid_emit.rs reads it back), Megatron-Bridge's HybridModelProvider fields likewise
    // (tests/hybrid_pipeline_segments.rs); NeMo 1.x and DeepSpeed are refused.
    for target in ["nemo", "deepspeed"] {
        let r = run(&[
            "plan",
            "--model",
            "nemotron-h-8b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "2",
            "--emit",
            target,
        ]);
        assert_one_line_error(
            &r,
            &[
                "hybrid Mamba-Transformer models",
                "use --emit megatron",
                "--emit megatron-bridge",
            ],
            &["panicked"],
            target,
        );
    }
}

/// A Nemotron 3 Nano `config.json` in `NemotronHConfig`'s keys (NVIDIA's remote-code
/// `configuration_nemotron_h.py`, whose attributes a saved config holds: `n_groups`,
/// `conv_kernel`), with the values of Megatron-Bridge's recipe (`recipes/nemotronh/h100/
/// nemotron_3_nano.py`): not the Hub's file, which is not in this repository.
const NANO_CONFIG: &str = r#"{
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "vocab_size": 131072,
  "tie_word_embeddings": false,
  "hidden_size": 2688,
  "intermediate_size": 1856,
  "num_hidden_layers": 52,
  "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
  "num_attention_heads": 32,
  "head_dim": 128,
  "num_key_value_heads": 2,
  "mlp_hidden_act": "relu2",
  "attention_bias": false,
  "mlp_bias": false,
  "use_bias": false,
  "max_position_embeddings": 262144,
  "attention_dropout": 0.0,
  "hidden_dropout": 0.0,
  "ssm_state_size": 128,
  "mamba_num_heads": 64,
  "n_groups": 8,
  "mamba_head_dim": 64,
  "conv_kernel": 4,
  "mamba_proj_bias": false,
  "n_routed_experts": 128,
  "n_shared_experts": 1,
  "moe_intermediate_size": 1856,
  "moe_shared_expert_intermediate_size": 3712,
  "num_experts_per_tok": 6,
  "n_group": 1,
  "topk_group": 1
}"#;

#[test]
fn a_nemotron_h_config_reads_as_the_bundled_model() {
    let dir = scratch("hybrid", "hf");
    let path = dir.join("config.json");
    std::fs::write(&path, NANO_CONFIG).unwrap();
    let from_config = json(&[
        "eval",
        "--hf-config",
        path.to_str().unwrap(),
        "--seq-len",
        "8192",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    let bundled = json(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    for key in ["params", "active_params"] {
        assert_eq!(from_config["model"][key], bundled["model"][key], "{key}");
    }
    assert_eq!(
        from_config["plans"][0]["time"]["step_s"],
        bundled["plans"][0]["time"]["step_s"]
    );
    // A pattern of another length than the layers is refused in the config's words.
    let bad = NANO_CONFIG.replace("\"num_hidden_layers\": 52", "\"num_hidden_layers\": 50");
    std::fs::write(&path, bad).unwrap();
    let r = run(&[
        "eval",
        "--hf-config",
        path.to_str().unwrap(),
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &["52 symbols but the model has 50 layers"],
        &["panicked"],
        "length",
    );
    // Multi-token prediction without the block Megatron-Bridge builds it from
    // (`mtp_hybrid_override_pattern`) is refused, not dropped or guessed.
    let mtp = NANO_CONFIG.replace(
        "\"topk_group\": 1",
        "\"topk_group\": 1, \"num_nextn_predict_layers\": 1",
    );
    std::fs::write(&path, mtp).unwrap();
    let r = run(&[
        "eval",
        "--hf-config",
        path.to_str().unwrap(),
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "\"num_nextn_predict_layers\" is 1",
            "\"mtp_hybrid_override_pattern\" absent",
            "MTP depth",
        ],
        &["panicked"],
        "mtp",
    );
}

#[test]
fn a_megatron_hybrid_launch_line_prices_as_the_bundled_model() {
    // pretrain_mamba.py's flags for Nemotron-H 8B (NemotronHConfig8B's shape): the pattern gives
    // the layers, the Mamba-2 mixer takes Megatron-Core's defaults where the line is silent.
    let line = "--hybrid-layer-pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- --hidden-size 4096 --ffn-hidden-size 21504 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 --mamba-state-dim 128 --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type none --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --squared-relu --vocab-size 131072 --hidden-dropout 0.0 --attention-dropout 0.0 --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 256 --use-distributed-optimizer --bf16 --is-hybrid-model --tp-comm-overlap --overlap-grad-reduce --overlap-param-gather";
    let from_line = json(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        line,
        "--format",
        "json",
    ]);
    let bundled = json(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--sequence-parallel",
        "--micro-batch",
        "2",
        "--global-batch",
        "256",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(from_line["model"]["params"], bundled["model"]["params"]);
    assert_eq!(from_line["model"]["hybrid"], bundled["model"]["hybrid"]);
    assert_eq!(
        from_line["plans"][0]["time"]["step_s"],
        bundled["plans"][0]["time"]["step_s"]
    );
    assert_eq!(
        from_line["plans"][0]["memory"]["total_bytes"],
        bundled["plans"][0]["memory"]["total_bytes"]
    );
}
