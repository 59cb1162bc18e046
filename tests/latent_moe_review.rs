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
    let config =
        &nemotron_h_moe_config(r#", "max_position_embeddings": 8192, "moe_latent_size": 99999999"#);
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

/// Activation bytes one MoE layer's MLP keeps on one GPU per micro-batch for the bundled Super
/// at Megatron-Bridge's GB300 plan (tp 1, ep 64, 64 GPUs) under `precision`, with the balanced
/// load (imbalance 1), and the rank's tokens.
fn super_moe_mlp_activations(precision: tpsim::plan::Precision) -> (f64, f64) {
    use tpsim::cluster::Cluster;
    use tpsim::plan::{ParallelPlan, PlanRequest};
    use tpsim::training::{AttentionKernel, Training, TrainingFramework};
    let model = tpsim::specs::load_model("nemotron-3-super-120b-a12b").unwrap();
    let cluster = Cluster {
        gpu: tpsim::specs::load_gpu("gb300-nvl72").unwrap(),
        nodes: 16,
        gpus_per_node: 4,
    };
    let training = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        512,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 1,
        dp: 64,
        ep: 64,
        etp: 1,
        micro_batch: 1,
        zero: 1,
        precision,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let bytes = tpsim::cost::moe::moe_mlp_activation_bytes(&model, &plan, 8192, 1.0);
    (bytes, tpsim::cost::moe::local_tokens(&plan, 8192))
}

#[test]
fn low_precision_latent_projections_keep_their_quantized_inputs() {
    // Each latent projection is a `TELinear` that, under FP8/MXFP8, saves its own quantized input
    // (Transformer Engine `_Linear.forward`; Megatron-Core sets `save_original_input` only on the
    // shared experts' fc1): the h -> latent one a byte per element of h beside the router's bf16
    // copy of the normed input, the latent -> h one a byte per latent element, not two. In bf16
    // the first reads the router's tensor and the second keeps two bytes per latent element. The
    // rest of the MoE MLP's count (`moe_mlp_activation_bytes`) does not depend on the precision:
    // its low-precision expert inputs are taken off beside it (`expert_gemm_input_elements`).
    use tpsim::plan::Precision;
    let (bf16, tokens) = super_moe_mlp_activations(Precision::Bf16);
    let (h, latent) = (4096.0, 1024.0);
    for precision in [Precision::Fp8, Precision::Mxfp8] {
        let (low, _) = super_moe_mlp_activations(precision);
        let want = tokens * ((h + latent) - 2.0 * latent);
        assert!(
            (low - bf16 - want).abs() < 1e-6 * bf16,
            "{precision:?}: {low} - {bf16} = {} bytes, want {want}",
            low - bf16
        );
    }
}
