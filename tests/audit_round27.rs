//! The physics audit of three more plans (validation/FIT.md, "Physics audit of three more plans",
//! 2026-12-07): one test per defect it found, each checked against a number worked out by hand
//! from the model's shape and the frameworks' code.

mod common;

use serde_json::Value;

/// GPT-OSS 120B on 64 GB200 as Megatron-Bridge's 25.11 recipe runs it (tp 1, pp 1, ep 64,
/// micro-batch 1, 8192 tokens, bf16, no recompute: 25.11 lists `recompute_modules` but never
/// sets selective granularity).
const GPT_OSS_GB200_25_11: &str = "mbridge-25.11-pretrain-gpt_oss_120b-gb200-64g-bf16-gbs1280";

fn planned_run(runs: &str, id: &str) -> Value {
    common::json(&["accuracy", "--runs", runs, "--run", id, "--format", "json"])["planned"].clone()
}

/// Megatron-Core 0.15's GPT-OSS experts clamp the GLU's halves eagerly
/// (`weighted_bias_quick_geglu_impl`: `chunk`, two `clamp`s, `torch.cat`, then
/// `WeightedBiasQuickGeGLUFunction` saves the concatenated copy). `clamp` saves its input, a view
/// of the up projection's output, so each routed copy keeps 2F + 2F bf16 elements where the fused
/// activation keeps 2F. Per token and layer, by hand (h = F = 2880, q = 64 × 64, kv = 8 × 64,
/// top-4, 128 experts):
/// - norms' inputs and outputs 4h × 2 B = 23,040; Q 2·4096, O 2·4096, K and V 4·512 = 18,432;
///   FlashAttention's fp32 log-sum-exp 4 × 64 = 256;
/// - each of the 4 routed copies: FC1 input 2h, the up projection's output 2·2F (clamp's saved
///   input), the clamped copy 2·2F (the activation's), FC2 input 2F = 34,560; router scores fp32
///   4 × 128 = 512;
///
/// 180,480 bytes, against 134,400 without the clamp's copy; plus the last stage's 4sbh (final norm
/// and output-layer input) and the fp32 logits 4sV (Megatron's vocab-parallel loss).
#[test]
fn eager_glu_clamp_keeps_the_up_projection_output() {
    let planned = planned_run("validation/modern_runs.yaml", GPT_OSS_GB200_25_11);
    assert_eq!(
        planned["training"]["eager_glu_clamp"], true,
        "{}",
        planned["training"]
    );
    let plan = &planned["plans"][0];
    assert_eq!(plan["recompute"], "none", "{plan}");
    assert_eq!(plan["micro_batch"], 1, "{plan}");
    let (layers, s, h, vocab) = (36.0, 8192.0, 2880.0, 201_088.0);
    let per_token_layer = 23_040.0 + 18_432.0 + 256.0 + 4.0 * 34_560.0 + 512.0;
    let hand = layers * s * per_token_layer + 4.0 * s * h + 4.0 * s * vocab;
    let tpsim = plan["memory"]["activations_bytes"]
        .as_f64()
        .expect("activations");
    assert!(
        (tpsim / hand - 1.0).abs() < 1e-9,
        "activations {tpsim} B, by hand {hand} B ({:+.1}%)",
        100.0 * (tpsim / hand - 1.0)
    );
}

/// Megatron-Bridge's GPT-OSS 120B MXFP8 configs on GB300 and GB200 from 26.06 build the experts
/// with Transformer Engine's op fuser (`cutedsl_fused_grouped_mlp=True` →
/// `use_transformer_engine_op_fuser = True`, scripts/performance/utils/overrides.py:238 at v0.5.0;
/// `_apply_gpt_oss_120b_full_iter_fp8mx_configs` at v0.6.0), whose `ScaledClampedQGeGLU` clamps
/// inside the fused activation: no eager clamp kernels and no clamp copy. The B300 MXFP8 config is
/// the BF16 one and keeps the eager path.
#[test]
fn te_op_fuser_rows_clamp_inside_the_fused_activation() {
    for id in [
        "mbridge-26.06-pretrain-gpt_oss_120b-gb200-64g-mxfp8-gbs1280",
        "mbridge-26.06.01-pretrain-gpt_oss_120b-gb300-64g-mxfp8-gbs1280",
        "mbridge-26.08-pretrain-gpt_oss_120b-gb200-64g-mxfp8-gbs1280",
    ] {
        let planned = planned_run("validation/mbridge_26_runs.yaml", id);
        let eager = planned["training"]["eager_glu_clamp"]
            .as_bool()
            .unwrap_or(false);
        assert!(!eager, "{id}: {}", planned["training"]);
    }
    let b300 = planned_run(
        "validation/mbridge_26_runs.yaml",
        "mbridge-26.06-pretrain-gpt_oss_120b-b300-64g-mxfp8-gbs1280",
    );
    assert_eq!(
        b300["training"]["eager_glu_clamp"], true,
        "{}",
        b300["training"]
    );
}
