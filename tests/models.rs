//! The model side of tpsim against published numbers: total and active parameter counts of the
//! bundled mixture-of-experts models, the Hugging Face readers for MoE configs, shape flags over a
//! bundled model, and the FLOP accounting of causal attention (hardware FLOP/s can never pass what
//! the time model executes).

use assert_cmd::Command;
use serde_json::Value;
use tpsim::model::Model;

/// Runs `tpsim ARGS` in the crate root; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("tpsim")
        .expect("the tpsim binary is built")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("tpsim runs");
    (
        out.status.code().expect("tpsim exited normally"),
        String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    )
}

fn json_of(args: &[&str]) -> Value {
    let (code, stdout, stderr) = run(args);
    assert!(code == 0 || code == 1, "{args:?}: exit {code}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {stderr}"))
}

/// Asserts exit code 2 and a one-line error on stderr containing every needle.
fn assert_error(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 2, "{args:?}: {stdout} {stderr}");
    assert!(stdout.is_empty(), "{args:?}: {stdout}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
}

fn bundled(name: &str) -> Model {
    tpsim::specs::load_model(name).unwrap()
}

fn hf(file: &str) -> Model {
    let path = format!("{}/models/hf/{file}", env!("CARGO_MANIFEST_DIR"));
    tpsim::hf_config::load(&path, None).unwrap().model
}

/// |ours / published − 1| ≤ tolerance, with the numbers in the message.
fn assert_close(what: &str, ours: f64, published: f64, tolerance: f64) {
    let error = ours / published - 1.0;
    assert!(
        error.abs() <= tolerance,
        "{what}: ours {:.4}B vs published {:.4}B ({:+.2}%, tolerance {:.2}%)",
        ours / 1e9,
        published / 1e9,
        100.0 * error,
        100.0 * tolerance
    );
}

/// Published total and active sizes (sources in each models/*.yaml). The tolerance is the rounding of
/// the published figure (half a unit in its last digit, relative) plus 0.2% for the per-layer vectors
/// tpsim leaves out (GPT-OSS's attention sinks, Grok-1's post-norms); where more is needed the reason
/// is given in the row.
#[test]
fn bundled_moe_models_match_published_total_and_active_sizes() {
    // (model, published total, total tolerance, published active, active tolerance)
    let rows: [(&str, f64, f64, f64, f64); 7] = [
        // DeepSeek-V3: 671B (±0.07% rounding), 37B active (±1.35% rounding). The report does not
        // say whether the 0.93B input embedding counts as active; ours counts it (37.55B), so the
        // active tolerance is the rounding plus the embedding share (2.5%) at most: 2%.
        ("deepseek-v3", 671e9, 0.003, 37e9, 0.02),
        // Kimi K2: the README's "1T" and "32B" are rounded to one and two figures; the config's
        // shapes give 1.026T (as a third-party count of the checkpoint config does). 3% total. Active:
        // 32B ±1.6% rounding plus the 1.17B input embedding ours counts (3.6%): 5%.
        ("kimi-k2", 1000e9, 0.03, 32e9, 0.05),
        // Qwen3 model cards: 30.5B / 3.3B (±1.5% rounding), 235B / 22B (±2.3% rounding).
        ("qwen3-30b-a3b", 30.5e9, 0.003, 3.3e9, 0.017),
        ("qwen3-235b-a22b", 235e9, 0.003, 22e9, 0.025),
        // Mistral: 46.7B / 12.9B; 141B / 39B (±0.35%, ±1.3% rounding).
        ("mixtral-8x7b", 46.7e9, 0.003, 12.9e9, 0.005),
        ("mixtral-8x22b", 141e9, 0.004, 39e9, 0.013),
        // Grok-1: the blog's 314B is rounded from a count xAI never gave (the checkpoint holds
        // 315.7B with the 0.8B tied embedding): 1%. Active: checked as a fraction below.
        ("grok-1", 314e9, 0.01, 314e9, f64::INFINITY),
    ];
    for (name, total, total_tol, active, active_tol) in rows {
        let m = bundled(name);
        assert_close(&format!("{name} total"), m.params(), total, total_tol);
        assert_close(
            &format!("{name} active"),
            m.active_params(),
            active,
            active_tol,
        );
        assert!(m.active_params() < m.params(), "{name}");
    }
    // xAI: "25% of the weights active on a given token" — a rounded fraction (2 of 8 experts is
    // exactly 25% of the expert weights; attention and the embedding are always active).
    let grok = bundled("grok-1");
    let fraction = grok.active_params() / grok.params();
    assert!(
        (0.24..0.28).contains(&fraction),
        "grok-1 active fraction {fraction}"
    );
}

#[test]
fn gpt_oss_counts_match_the_model_card_to_three_digits() {
    // OpenAI's model card, Table 1: 116.83B total / 5.13B active; 20.91B / 3.61B. Its active count
    // leaves out the embedding table (V·h = 0.58B) and keeps the unembedding: ours minus V·h.
    for (name, total, active) in [
        ("gpt-oss-120b", 116.83e9, 5.13e9),
        ("gpt-oss-20b", 20.91e9, 3.61e9),
    ] {
        let m = bundled(name);
        assert_close(&format!("{name} total"), m.params(), total, 0.001);
        let without_embedding = m.active_params() - m.word_embedding_params();
        assert_close(&format!("{name} active"), without_embedding, active, 0.002);
    }
}

#[test]
fn dense_models_have_active_equal_to_total() {
    for name in ["llama3-8b", "gpt3-175b", "llama3-405b"] {
        let m = bundled(name);
        assert_eq!(m.active_params(), m.params(), "{name}");
        assert_eq!(m.moe_layers(), 0);
        assert_eq!(m.dense_layers(), m.layers);
    }
}

#[test]
fn deepseek_v3_layer_accounting_adds_up() {
    let m = bundled("deepseek-v3");
    assert_eq!((m.dense_layers(), m.moe_layers()), (3, 58));
    assert!(!m.is_moe_layer(2) && m.is_moe_layer(3) && m.is_moe_layer(60));
    // One expert: 3 matrices of 7168 x 2048 (no biases).
    assert_eq!(m.expert_params(), 3.0 * 7168.0 * 2048.0);
    assert_eq!(m.routed_tokens_per_token(), 8.0);
    // Per-layer pieces sum to the total.
    let blocks = 3.0 * m.dense_layer_params() + 58.0 * m.moe_layer_params();
    let total = blocks + m.embedding_params() + m.output_params();
    assert!((total / m.params() - 1.0).abs() < 1e-12);
    assert!((f64::from(m.layers) * m.layer_params() / blocks - 1.0).abs() < 1e-12);
    // MLA attention (DeepSeek-V3 config): q_a 7168·1536, q_b 1536·128·192, kv_a 7168·576,
    // kv_b 512·128·256, o 128·128·7168, plus the two latent RMSNorms.
    let mla = 7168.0 * 1536.0
        + 1536.0 * 128.0 * 192.0
        + 7168.0 * 576.0
        + 512.0 * 128.0 * 256.0
        + 128.0 * 128.0 * 7168.0
        + 1536.0
        + 512.0;
    assert_eq!(m.attention_params(), mla);
}

#[test]
fn moe_model_flops_use_active_parameters() {
    // Per token: 3 x (2 FLOPs per active matrix weight + causal QKᵀ/AV + 2·h·V logits). For Mixtral
    // 8x7B the active matrices are the active parameters less the embedding and output tables and the
    // norms (two of h per layer, one final); the causal core is s·heads·2·head_dim per layer.
    let m = bundled("mixtral-8x7b");
    let (s, h, v, layers) = (4096.0, 4096.0, 32000.0, 32.0);
    let matrices = m.active_params() - 2.0 * v * h - h - layers * 2.0 * h;
    let expected = 3.0 * (2.0 * matrices + layers * s * 32.0 * 2.0 * 128.0 + 2.0 * h * v);
    let per_token = m.model_flops_per_token(4096).0;
    assert!(
        (per_token / expected - 1.0).abs() < 1e-9,
        "{per_token} vs {expected}"
    );
    // Counting every expert would be 3.6x larger.
    assert!(per_token < 6.0 * m.params() / 2.5);
}

#[test]
fn causal_attention_is_counted_once_and_hardware_flops_stay_under_the_gemm_roof() {
    // Issue 8: this command printed MFU 87.7% and 986 hardware TFLOP/s on a 989 TFLOP/s H100 while
    // the time model ran the causal half of attention at 80.3% of peak (the GEMM roof). FLOPs that
    // the time model executes at no more than peak x gemm_efficiency cannot be counted faster.
    let json = json_of(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--seq-len",
        "131072",
        "--tp",
        "8",
        "--pp",
        "2",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "--recompute",
        "none",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    let plan = &json["plans"][0];
    let hardware = plan["hardware_tflops_per_gpu"].as_f64().unwrap();
    let model_tflops = plan["model_tflops_per_gpu"].as_f64().unwrap();
    let peak = json["cluster"]["peak_flops"].as_f64().unwrap() / 1e12;
    let roof = peak
        * tpsim::specs::load_gpu("h100-sxm-80g")
            .unwrap()
            .gemm_efficiency;
    assert!(
        hardware < roof,
        "hardware {hardware} TFLOP/s vs GEMM roof {roof}"
    );
    assert!(model_tflops <= hardware, "{model_tflops} vs {hardware}");
    let mfu = plan["mfu"].as_f64().unwrap();
    assert!((mfu - model_tflops / peak).abs() < 1e-9, "{mfu}");
}

#[test]
fn model_flops_per_token_match_megatron_bridge_causal_formula() {
    // validation/modern_runs.md caveat 1: FLOP/token = L·h²·(12 + 12g/a + 18f/h + c·12s/h + 6V/(L·h))
    // with c = 0.5 (causal) for Megatron-Bridge 25.09+; the mbridge-25.11 Llama 3 8B rows at 8K imply
    // 5.147e10 FLOP/token.
    let m = bundled("llama3-8b");
    let (l, h, a, g, f, s, v) = (32.0, 4096.0, 32.0, 8.0, 14336.0, 8192.0, 128256.0);
    let formula =
        l * h * h * (12.0 + 12.0 * g / a + 18.0 * f / h + 0.5 * 12.0 * s / h + 6.0 * v / (l * h));
    let ours = m.model_flops_per_token(8192).0;
    assert!((ours / formula - 1.0).abs() < 1e-12, "{ours} vs {formula}");
    assert!((ours / 5.147e10 - 1.0).abs() < 0.001, "{ours}");
}

#[test]
fn hf_moe_configs_load_and_match_the_bundled_models() {
    for (file, name) in [
        ("deepseek-v3.json", "deepseek-v3"),
        ("qwen3-30b-a3b.json", "qwen3-30b-a3b"),
        ("mixtral-8x7b-v0.1.json", "mixtral-8x7b"),
        ("gpt-oss-20b.json", "gpt-oss-20b"),
    ] {
        let mut from_hf = hf(file);
        let spec = bundled(name);
        // DeepSeek-V3's config.json has one MTP module (`num_nextn_predict_layers: 1`), which the
        // reader keeps as Megatron-Bridge does; the bundled model is the 671B main model.
        let expected_mtp = u32::from(name == "deepseek-v3");
        assert_eq!(from_hf.mtp_layers, expected_mtp, "{file}");
        from_hf.mtp_layers = 0;
        assert_eq!(from_hf.params(), spec.params(), "{file}");
        assert_eq!(from_hf.active_params(), spec.active_params(), "{file}");
        assert_eq!((from_hf.moe, from_hf.mla), (spec.moe, spec.mla), "{file}");
    }
    // Qwen1.5-MoE-A2.7B (qwen2_moe): 14.3B total, 2.7B active (Qwen blog 'Qwen1.5-MoE'); a shared
    // expert of 5632 with its gate, q/k/v biases. The blog's figures are rounded to 0.1B.
    let qwen2_moe = hf("qwen1.5-moe-a2.7b.json");
    assert_close("qwen1.5-moe total", qwen2_moe.params(), 14.3e9, 0.004);
    assert_close("qwen1.5-moe active", qwen2_moe.active_params(), 2.7e9, 0.02);
}

/// GLM-4.5-Air (`glm4_moe`, zai-org/GLM-4.5-Air config.json): "106 billion total parameters and
/// 12 billion active parameters" (Z.ai's GLM-4.5 model cards and announcement), both without the
/// MTP layer the config carries (`num_nextn_predict_layers: 1`, kept as Megatron-Bridge keeps
/// DeepSeek-V3's) and the active count without the embedding and output layers; grouped-query
/// attention with q/k/v biases and 128-wide heads over a hidden of 4,096, one dense layer first.
#[test]
fn glm_4_5_air_config_gives_the_published_sizes() {
    let mut glm = hf("glm-4.5-air.json");
    assert_eq!(glm.mtp_layers, 1);
    assert!(glm.qkv_bias && !glm.linear_bias && !glm.qk_norm);
    assert_eq!((glm.heads, glm.kv_heads, glm.head_dim), (96, 8, 128));
    let moe = glm.moe.expect("an MoE model");
    assert_eq!(
        (moe.experts, moe.router_topk, moe.ffn_hidden),
        (128, 8, 1408)
    );
    assert_eq!(
        (moe.shared_expert_ffn_hidden, moe.first_dense_layers),
        (1408, 1)
    );
    assert_eq!(
        moe.router_groups, 0,
        "n_group 1 is no group-limited routing"
    );
    glm.mtp_layers = 0;
    assert_close("GLM-4.5-Air total", glm.params(), 106e9, 0.01);
    let active = glm.active_params() - glm.embedding_params() - glm.output_params();
    assert_close("GLM-4.5-Air active", active, 12e9, 0.03);
}

#[test]
fn hf_configs_use_each_model_types_defaults_and_biases() {
    let write = |name: &str, text: &str| {
        let dir = std::env::temp_dir().join(format!("tpsim-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    // Mistral-7B without num_key_value_heads: MistralConfig defaults it to 8, so transformers
    // counts 7.24B; reading it as multi-head attention gave 8.84B (issue 13 item 7).
    let mistral = r#"{"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 32000}"#;
    let m = tpsim::hf_config::load(&write("mistral.json", mistral), None)
        .unwrap()
        .model;
    assert_eq!(m.kv_heads, 8);
    assert_close("mistral without kv heads", m.params(), 7.2417e9, 0.001);
    // Llama with attention_bias and mlp_bias: a bias on every linear layer.
    let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256,
        "num_key_value_heads": 8, "attention_bias": true, "mlp_bias": true}"#;
    let biased = tpsim::hf_config::load(&write("llama.json", llama), None)
        .unwrap()
        .model;
    let plain = hf("llama-3-8b.json");
    let per_layer = (4096.0 + 2.0 * 1024.0 + 4096.0) + (2.0 * 14336.0 + 4096.0);
    assert_eq!(biased.params() - plain.params(), 32.0 * per_layer);
    // Qwen2: q/k/v biases, no output bias (Qwen2Attention).
    let qwen2 = hf("qwen2.5-7b.json");
    assert!(qwen2.qkv_bias && !qwen2.linear_bias);
    // Qwen3: per-head q/k RMSNorm (2 x head_dim per layer) and head_dim 128 by default.
    let qwen3 = hf("qwen3-8b.json");
    assert!(qwen3.qk_norm);
    assert_eq!(
        qwen3.attention_params() - qwen3.attention_matrix_params(),
        256.0
    );
    // Falcon-7B: one LayerNorm per layer (the parallel block), 2h parameters.
    let falcon = hf("falcon-7b.json");
    assert!(falcon.shared_layer_norm);
    assert_eq!(falcon.layer_norm_params(), 2.0 * 4544.0);
    // Gemma-7B: 16 heads of 256 = 4096 over hidden 3072, refused before; now counted
    // (Gemma report Table 1: 8.54B incl. embeddings).
    let gemma7 = r#"{"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16,
        "head_dim": 256, "num_key_value_heads": 16, "num_hidden_layers": 28,
        "intermediate_size": 24576, "vocab_size": 256000, "hidden_act": "gelu"}"#;
    let g = tpsim::hf_config::load(&write("gemma7.json", gemma7), None)
        .unwrap()
        .model;
    assert_close("gemma-7b", g.params(), 8.538e9, 0.001);
    // Mixed biases cannot be represented: refused by name.
    let mixed = llama.replace(r#""mlp_bias": true"#, r#""mlp_bias": false"#);
    let err = tpsim::hf_config::load(&write("mixed.json", &mixed), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attention_bias") && err.contains("mlp_bias"),
        "{err}"
    );
}

#[test]
fn tensor_parallelism_beyond_kv_heads_does_not_change_the_count() {
    // Issue 13 item 5: Megatron replicates K/V heads when TP > kv_heads; the model still has
    // kv_heads distinct K/V projections, so the parameter count is that of the model, whatever TP.
    let m = bundled("qwen3-30b-a3b");
    assert_eq!(m.kv_heads, 4);
    let attention = 2048.0 * (4096.0 + 2.0 * 512.0) + 4096.0 * 2048.0 + 2.0 * 128.0;
    assert_eq!(m.attention_params(), attention);
}

#[test]
fn shipped_hf_configs_load_with_a_training_length_not_the_maximum() {
    // Issue 10 item 6: falcon-7b.json has no max_position_embeddings and exited 2; Mistral,
    // Qwen2.5 and Qwen3 trained at their maximum (32768, 32768, 40960).
    for file in [
        "falcon-7b.json",
        "mistral-7b-v0.1.json",
        "qwen2.5-7b.json",
        "qwen3-8b.json",
        "llama-3-70b.json",
        "deepseek-v3.json",
        "qwen3-30b-a3b.json",
    ] {
        let path = format!("models/hf/{file}");
        let json = json_of(&[
            "plan",
            "--hf-config",
            &path,
            "--nodes",
            "2",
            "--top",
            "1",
            "--format",
            "json",
        ]);
        assert_eq!(json["training"]["seq_len"], 4096, "{file}");
        let origin = json["model"]["origin"].as_str().unwrap();
        assert!(
            origin.contains("--seq-len not given: 4096 tokens"),
            "{file}: {origin}"
        );
    }
    // GPT-2's learned position table is shorter than the default: its 1024 rows, said so.
    let json = json_of(&[
        "plan",
        "--hf-config",
        "models/hf/gpt2.json",
        "--nodes",
        "1",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json["training"]["seq_len"], 1024);
    assert!(
        json["model"]["origin"]
            .as_str()
            .unwrap()
            .contains("n_positions")
    );
    // --seq-len wins and no note is printed.
    let json = json_of(&[
        "plan",
        "--hf-config",
        "models/hf/qwen3-8b.json",
        "--nodes",
        "2",
        "--seq-len",
        "8192",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json["training"]["seq_len"], 8192);
    assert!(
        !json["model"]["origin"]
            .as_str()
            .unwrap()
            .contains("not given")
    );
}

#[test]
fn json_reports_total_and_active_parameters() {
    let json = json_of(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--seq-len",
        "4096",
        "--global-batch",
        "8",
        "--format",
        "json",
    ]);
    let m = bundled("mixtral-8x7b");
    assert_eq!(json["model"]["params"].as_f64().unwrap(), m.params());
    assert_eq!(
        json["model"]["active_params"].as_f64().unwrap(),
        m.active_params()
    );
    assert_eq!(json["model"]["moe"]["experts"], 8);
    assert_eq!(json["model"]["moe"]["router_topk"], 2);
    let dense = json_of(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(dense["model"]["active_params"], dense["model"]["params"]);
    assert!(dense["model"].get("moe").is_none());
}

#[test]
fn shape_flags_override_a_bundled_model() {
    // The dgxc Grok-1 weak-scaling series runs 8-layer proxies of the full model.
    let json = json_of(&[
        "eval",
        "--model",
        "grok-1",
        "--layers",
        "8",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    let full = bundled("grok-1");
    let per_layer = full.layer_params();
    let expected = full.params() - 56.0 * per_layer;
    let params = json["model"]["params"].as_f64().unwrap();
    assert!(
        (params / expected - 1.0).abs() < 1e-12,
        "{params} vs {expected}"
    );
    assert_eq!(json["model"]["layers"], 8);
    assert_eq!(json["model"]["head_dim"], 128);
    assert!(
        json["model"]["origin"]
            .as_str()
            .unwrap()
            .contains("with shape flags")
    );
    // MoE and MLA flags on flags-only models.
    let json = json_of(&[
        "eval",
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--num-experts",
        "16",
        "--moe-router-topk",
        "4",
        "--moe-ffn-hidden-size",
        "512",
        "--moe-layer-freq",
        "[0]*1+[1]*3",
        "--kv-lora-rank",
        "256",
        "--q-lora-rank",
        "384",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--format",
        "json",
    ]);
    let moe = &json["model"]["moe"];
    assert_eq!(
        (
            moe["experts"].clone(),
            moe["router_topk"].clone(),
            moe["first_dense_layers"].clone()
        ),
        (16.into(), 4.into(), 1.into())
    );
    assert_eq!(json["model"]["mla"]["kv_lora_rank"], 256);
    assert_eq!(json["model"]["mla"]["q_lora_rank"], 384);
    // --head-dim (alias --kv-channels) sets the head apart from hidden/heads.
    let json = json_of(&[
        "eval",
        "--layers",
        "4",
        "--hidden",
        "2048",
        "--heads",
        "32",
        "--kv-channels",
        "128",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json["model"]["head_dim"], 128);
}

#[test]
fn bad_moe_input_is_a_one_line_error() {
    assert_error(
        &[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--moe-router-topk",
            "9",
            "--nodes",
            "1",
        ],
        &["--moe-router-topk 9", "--num-experts 8"],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--moe-router-topk",
            "2",
            "--nodes",
            "1",
        ],
        &["--moe-router-topk", "without --num-experts"],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--qk-head-dim",
            "64",
            "--nodes",
            "1",
        ],
        &["--qk-head-dim", "--kv-lora-rank"],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--moe-first-k-dense-replace",
            "61",
            "--nodes",
            "1",
        ],
        &["--moe-first-k-dense-replace 61", "no MoE layer"],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--moe-layer-freq",
            "[0]*3+[1]*50",
            "--nodes",
            "1",
        ],
        &["lists 53 layers", "61"],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--moe-layer-freq",
            "[1,1,0]*20",
            "--nodes",
            "1",
        ],
        &[
            "--moe-layer-freq",
            "not an integer nor a list tpsim can represent",
        ],
    );
    assert_error(
        &[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--num-experts",
            "0",
            "--nodes",
            "1",
        ],
        &["--num-experts 0 "],
    );
    // Block-style switches apply to shape-flag models only; over a bundled model they are refused,
    // not dropped.
    assert_error(
        &[
            "plan", "--model", "grok-1", "--layers", "8", "--swiglu", "--nodes", "1",
        ],
        &["--gated-mlp", "grok-1", "drop --gated-mlp"],
    );
}

#[test]
fn moe_spec_files_are_checked_like_flags() {
    let dir = std::env::temp_dir().join(format!("tpsim-moe-yaml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = "name: tiny-moe\nlayers: 4\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 2048\n";
    let write = |name: &str, moe: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{base}{moe}")).unwrap();
        path.to_string_lossy().into_owned()
    };
    let ok = write(
        "ok.yaml",
        "moe:\n  experts: 8\n  router_topk: 2\n  ffn_hidden: 512\n  first_dense_layers: 1\n",
    );
    let m = tpsim::specs::load_model(&ok).unwrap();
    assert_eq!((m.dense_layers(), m.moe_layers()), (1, 3));
    let too_many = write(
        "topk.yaml",
        "moe:\n  experts: 8\n  router_topk: 9\n  ffn_hidden: 512\n",
    );
    assert_error(
        &["plan", "--model", &too_many, "--nodes", "1"],
        &["topk.yaml", "moe.router_topk: 9", "moe.experts: 8"],
    );
    let typo = write(
        "typo.yaml",
        "moe:\n  experts: 8\n  topk: 2\n  ffn_hidden: 512\n",
    );
    assert_error(
        &["plan", "--model", &typo, "--nodes", "1"],
        &["typo.yaml", "topk"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn deepseek_v3_mtp_module_matches_the_published_size_and_megatron_bridge_flops() {
    // DeepSeek-V3 model card: 685B on Hugging Face = 671B main model + 14B MTP module. The HF
    // checkpoint stores the MTP module's own embedding and output head (layer 61 `embed_tokens`,
    // `shared_head.head`, 2·V·h); Megatron shares the model's, so tpsim's MTP count leaves them out.
    let main = bundled("deepseek-v3");
    let mtp = hf("deepseek-v3.json");
    assert_eq!(mtp.mtp_layers, 1);
    let stored_copies = 2.0 * f64::from(mtp.vocab) * f64::from(mtp.hidden);
    assert_close(
        "MTP module as stored",
        mtp.params() - main.params() + stored_copies,
        14e9,
        0.05,
    );
    // Megatron-Bridge 25.11's DeepSeek-V3 rows at 4K tokens imply 249.7 GFLOP/token without MTP
    // (GB200/GB300, "w/o MTP") and 260.4 with it (B200, "w/ MTP"): its flop_utils counts the MTP
    // layer, projection and second output pass as tpsim does.
    let ratio = mtp.model_flops_per_token(4096).0 / main.model_flops_per_token(4096).0;
    assert!((ratio / (260.4 / 249.7) - 1.0).abs() < 0.01, "{ratio}");
}

#[test]
fn mtp_layers_run_on_the_last_stage_and_flags_round_trip() {
    // DeepSeek-V3 on 32 B200 nodes as Megatron-Bridge's recipe splits it (pp 16: 4 layers per
    // stage, 1 on the last, then MTP and the loss): with the MTP layer the last stage does the
    // most work and holds its own embedding copy.
    let base = [
        "eval",
        "--format",
        "json",
        "--model",
        "deepseek-v3",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--pp",
        "16",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--global-batch",
        "2048",
        "--seq-len",
        "4096",
        "--recompute",
        "none",
        "--zero",
        "1",
        "--decoder-first-pipeline-num-layers",
        "4",
        "--decoder-last-pipeline-num-layers",
        "1",
    ];
    let without = json_of(&base);
    let with_args: Vec<&str> = base.iter().copied().chain(["--mtp-layers", "1"]).collect();
    let with = json_of(&with_args);
    let step = |j: &Value| j["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert!(
        step(&with) > step(&without),
        "{} vs {}",
        step(&with),
        step(&without)
    );
    assert_eq!(with["model"]["mtp_layers"], 1);
    assert!(
        with["model"]["params"].as_f64().unwrap() > without["model"]["params"].as_f64().unwrap()
    );
    // `--mtp-num-layers` (Megatron's name) is the same flag, and --emit megatron writes it back.
    let megatron: Vec<&str> = with_args
        .iter()
        .map(|a| {
            if *a == "--mtp-layers" {
                "--mtp-num-layers"
            } else {
                a
            }
        })
        .collect();
    assert_eq!(json_of(&megatron)["plans"][0], with["plans"][0]);
    let (code, emitted, stderr) = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--pp",
        "16",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--global-batch",
        "2048",
        "--seq-len",
        "4096",
        "--decoder-first-pipeline-num-layers",
        "4",
        "--decoder-last-pipeline-num-layers",
        "1",
        "--mtp-layers",
        "1",
        // As Megatron-Bridge's DeepSeek-V3 recipes recompute (`recompute_modules=["mla_up_proj"]`).
        "--recompute-modules",
        "mla_up_proj",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(emitted.contains("--mtp-num-layers 1"), "{emitted}");
    assert_error(
        &[
            "plan",
            "--model",
            "deepseek-v3",
            "--nodes",
            "256",
            "--mtp-layers",
            "17",
        ],
        &["--mtp-layers 17", "16"],
    );
}

#[test]
fn the_split_search_finds_megatron_bridges_deepseek_v3_layout() {
    // Megatron-Bridge's DeepSeek-V3 recipes on B200 run pp 16 with embedding + 4 layers, 14
    // stages of 4 and 1 layer + MTP + loss (`_get_deepseek_v3_pipeline_layout`). tpsim's own
    // split counts units (3, 4, 2); with --allow-uneven-pp the search tries the first/last
    // splits around it and keeps the fastest, which is the recipe's: the output layer runs in
    // bf16 twice (main and MTP) and weighs more than a unit.
    // The recipe's scenario, shared by every command below.
    let scenario = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "b200-sxm-180g",
        "--global-batch",
        "2048",
        "--seq-len",
        "4096",
        "--precision",
        "fp8",
        "--allow-uneven-pp",
    ];
    let with = |head: &[&'static str], tail: &[&'static str]| -> Vec<&'static str> {
        head.iter().chain(&scenario).chain(tail).copied().collect()
    };
    let pinned = [
        "--nodes", "32", "--tp", "1", "--pp", "16", "--vpp", "1", "--ep", "8",
    ];
    let json = json_of(&with(
        &["plan", "--format", "json", "--mtp-layers", "1"],
        &pinned,
    ));
    let stages = &json["plans"][0]["stages"];
    assert_eq!(
        (&stages["first"], &stages["middle_max"], &stages["last"]),
        (&4.into(), &4.into(), &1.into()),
        "{stages}"
    );
    // The table shows the chosen split in a `layers` column.
    let table_args: Vec<&str> = with(&["plan", "--mtp-layers", "1"], &pinned)
        .into_iter()
        .chain(["--top", "1"])
        .collect();
    let (code, table, stderr) = run(&table_args);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.contains("layers") && table.contains("4/4/1"),
        "{table}"
    );
    // `sweep` searches the same space and names the same best plan and step time.
    let plan_args = with(
        &[
            "plan",
            "--format",
            "json",
            "--nodes",
            "32",
            "--mtp-layers",
            "1",
        ],
        &[],
    );
    let sweep_args = with(
        &[
            "sweep",
            "--format",
            "json",
            "--axis",
            "nodes",
            "--values",
            "32",
            "--mtp-layers",
            "1",
        ],
        &[],
    );
    let best = json_of(&plan_args)["plans"][0]["time"]["step_s"].clone();
    let swept = json_of(&sweep_args)["rows"][0]["time"]["step_s"].clone();
    assert_eq!(best, swept);
    // With three MTP layers (more than a stage's share of units) tpsim's own split leaves the
    // last stage one decoder layer.
    let own = json_of(&with(
        &["eval", "--format", "json", "--mtp-layers", "3"],
        &[
            "--nodes",
            "32",
            "--tp",
            "1",
            "--pp",
            "16",
            "--ep",
            "8",
            "--micro-batch",
            "1",
            "--zero",
            "1",
        ],
    ));
    assert_eq!(own["plans"][0]["stages"]["last"], 1);
}

#[test]
fn sliding_window_attention_counts_only_the_pairs_in_the_window() {
    // Full causal attention computes half of the s×s pairs.
    assert_eq!(bundled("llama3-8b").causal_attention_share(8192), 0.5);
    // GPT-OSS: a 128-token window on every other layer (HF config `sliding_window` 128 and
    // `layer_types`; Megatron-Bridge window_size (127, 0), window_attn_skip_freq 2). At 4,096
    // tokens a windowed layer computes 128/4096 − ½(128/4096)² of the pairs.
    let gpt_oss = bundled("gpt-oss-20b");
    let local = 128.0 / 4096.0 - 0.5 * (128.0_f64 / 4096.0).powi(2);
    let share = gpt_oss.causal_attention_share(4096);
    assert!((share - (0.5 + local) / 2.0).abs() < 1e-12, "{share}");
    // The HF reader finds the same window as the bundled file.
    assert_eq!(
        hf("gpt-oss-20b.json").attention_window,
        gpt_oss.attention_window
    );
    // Mistral 7B v0.1: a 4,096-token window in every layer; shorter sequences see no change.
    let mistral = hf("mistral-7b-v0.1.json");
    assert_eq!(mistral.causal_attention_share(4096), 0.5);
    assert_eq!(mistral.causal_attention_share(8192), 0.375);
    // The window shortens the step where attention matters, and pasting the Megatron arguments
    // tpsim writes gives the same step back.
    let base = [
        "eval",
        "--format",
        "json",
        "--model",
        "gpt-oss-20b",
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
        "--seq-len",
        "32768",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
    ];
    let windowed = json_of(&base);
    let full_args: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--attention-window", "0"])
        .collect();
    let full = json_of(&full_args);
    let step = |j: &Value| j["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert!(
        step(&windowed) < 0.8 * step(&full),
        "{} vs {}",
        step(&windowed),
        step(&full)
    );
    assert_eq!(windowed["model"]["attention_window"]["tokens"], 128);
    let (code, emitted, stderr) = run(&[
        "eval",
        "--model",
        "gpt-oss-20b",
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
        "--seq-len",
        "4096",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        emitted.contains("--window-size '(127,0)'")
            && emitted.contains("--window-attn-skip-freq 2"),
        "{emitted}"
    );
    // A config whose full-attention layers do not recur every N layers is refused by name.
    let dir = std::env::temp_dir().join(format!("tpsim-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("odd.json");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/models/hf/gpt-oss-20b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    let mut types = vec![Value::from("sliding_attention"); 24];
    types[1] = "full_attention".into();
    types[2] = "full_attention".into();
    config["layer_types"] = Value::Array(types);
    std::fs::write(&path, config.to_string()).unwrap();
    assert_error(
        &[
            "plan",
            "--hf-config",
            path.to_str().unwrap(),
            "--nodes",
            "1",
        ],
        &["layer_types", "every N-th layer"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sliding_windows_refuse_what_tpsim_does_not_model() {
    // Transformer Engine's point-to-point CP ring refuses sliding windows; tpsim models that
    // ring only, so it refuses the pair instead of pricing a ring that would not run.
    assert_error(
        &[
            "eval",
            "--model",
            "gpt-oss-20b",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--cp",
            "2",
            "--ep",
            "4",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--seq-len",
            "8192",
        ],
        &["--cp 2", "sliding-window", "--attention-window 0"],
    );
    // A window as long as the sequence changes no attention, but Megatron-Core still hands it to
    // every windowed layer and Transformer Engine's context-parallel attention refuses any window
    // it is given (`attn_forward_func_with_cp`), so CP is refused; with no layer windowed
    // (--window-attn-skip-freq 1) CP stays open.
    let with_window = |skip: &'static str| {
        run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--attention-window",
            "8192",
            "--window-attn-skip-freq",
            skip,
            "--nodes",
            "1",
            "--tp",
            "1",
            "--cp",
            "2",
            "--pp",
            "1",
            "--global-batch",
            "8",
            "--seq-len",
            "8192",
            "--recompute",
            "full",
            "--zero",
            "1",
        ])
    };
    let (code, _, stderr) = with_window("0");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--cp 2 with sliding-window attention"),
        "{stderr}"
    );
    let (code, _, stderr) = with_window("1");
    assert!(code == 0 || code == 1, "{stderr}");
    // Megatron's quoted form with a space reads as one value.
    let line = "--num-layers 24 --hidden-size 2880 --num-attention-heads 64 --seq-length 4096 --global-batch-size 64 --micro-batch-size 1 --bf16 --window-size \"(127, 0)\" --window-attn-skip-freq 2";
    let json = json_of(&[
        "eval",
        "--format",
        "json",
        "--nodes",
        "1",
        "--megatron-args",
        line,
    ]);
    assert_eq!(json["model"]["attention_window"]["tokens"], 128);
    assert_eq!(json["model"]["attention_window"]["full_every"], 2);
    // HF layer_types must list every layer with the two known kinds.
    let dir = std::env::temp_dir().join(format!("tpsim-window-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/models/hf/gpt-oss-20b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    for (name, types, needle) in [
        (
            "short",
            serde_json::json!(["sliding_attention", "full_attention"]),
            "lists 2 layers",
        ),
        (
            "odd",
            serde_json::json!(vec!["full"; 24]),
            "\"full_attention\" or \"sliding_attention\"",
        ),
        ("scalar", serde_json::json!("alternate"), "layer_types"),
    ] {
        let mut config = base.clone();
        config["layer_types"] = types;
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, config.to_string()).unwrap();
        assert_error(
            &[
                "plan",
                "--hf-config",
                path.to_str().unwrap(),
                "--nodes",
                "1",
            ],
            &[needle],
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Kimi K2's config.json names its own `model_type` (`kimi_k2`) for DeepSeek-V3's architecture; the
/// keys below are the ones tpsim reads, as public copies of Moonshot's config give them (no
/// multi-token-prediction module, one expert group). Read through `--hf-config`, it must be the
/// bundled model exactly.
#[test]
fn a_kimi_k2_hf_config_reads_as_the_bundled_kimi_k2() {
    let dir = std::env::temp_dir().join(format!("tpsim-kimi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        r#"{"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
            "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
            "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 163840,
            "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384,
            "num_experts_per_tok": 8, "n_shared_experts": 1, "moe_intermediate_size": 2048,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
            "num_nextn_predict_layers": 0, "tie_word_embeddings": false, "hidden_act": "silu",
            "rms_norm_eps": 1e-06}"#,
    )
    .unwrap();
    let from_hf = tpsim::hf_config::load(path.to_str().unwrap(), None)
        .unwrap()
        .model;
    let spec = bundled("kimi-k2");
    assert_eq!(from_hf.mtp_layers, 0);
    assert_eq!(from_hf.params(), spec.params());
    assert_eq!(from_hf.active_params(), spec.active_params());
    assert_eq!(from_hf.mla, spec.mla);
    let (hf_moe, spec_moe) = (from_hf.moe.unwrap(), spec.moe.unwrap());
    assert_eq!(
        (hf_moe.experts, hf_moe.router_topk, hf_moe.ffn_hidden),
        (spec_moe.experts, spec_moe.router_topk, spec_moe.ffn_hidden)
    );
    assert_eq!(
        (hf_moe.shared_expert_ffn_hidden, hf_moe.first_dense_layers),
        (
            spec_moe.shared_expert_ffn_hidden,
            spec_moe.first_dense_layers
        )
    );
}
