//! A published run that is in no validation file: Meta's Llama 3 405B pre-training on 8,192 and
//! 16,384 H100s (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 4: TP 8, CP 1, PP 16,
//! DP 64 / 128, 8,192-token sequences, 16M tokens per batch, 430 / 400 TFLOP/s per GPU, BF16 MFU
//! 43% / 41%). Issue 8 opened on these two rows (tpsim had called the first one not fitting and
//! 20% slow, the second 34% slow), so this is a regression test on them, not a blind one: nothing
//! was fitted to them, but they have been looked at. `plan` with the published degrees pinned leaves the rest —
//! interleaving, micro-batch, recompute, ZeRO stage — to the search, as a user who knows only the
//! paper would; its best plan's model TFLOP/s per GPU is compared with the table's.
//!
//! The table does not say how Meta counts FLOPs. tpsim counts 6 per parameter per token plus the
//! causal attention once; at 8,192 tokens counting the attention non-causally would add about 4%
//! to the 405B model's FLOPs per token, which is the uncertainty of this comparison. The
//! long-context row of the same table (CP 16 at 131,072 tokens, 380 TFLOP/s) is left out: there the
//! attention is 40% of the FLOPs and the convention would decide the comparison.

mod common;

/// |predicted / published − 1| allowed: the FLOP-convention uncertainty above and a margin.
const BOUND: f64 = 0.06;

fn best_plan_model_tflops(nodes: &str, dp: &str) -> f64 {
    let out = common::json(&[
        "plan",
        "--model",
        "llama3-405b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        nodes,
        "--seq-len",
        "8192",
        "--global-batch",
        "2048",
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        dp,
        "--allow-uneven-pp",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let best = &out["plans"][0];
    assert_eq!(best["tp"], 8, "{best}");
    assert_eq!(best["pp"], 16, "{best}");
    assert_eq!(best["dp"].to_string(), dp, "{best}");
    assert_eq!(
        best["precision"], "bf16",
        "the paper's runs are BF16: {best}"
    );
    best["model_tflops_per_gpu"]
        .as_f64()
        .unwrap_or_else(|| panic!("no model_tflops_per_gpu in {best}"))
}

#[test]
fn llama3_405b_table_4_rows_are_predicted_within_the_flop_convention() {
    // (nodes, dp, published TFLOP/s per GPU)
    for (nodes, dp, published) in [("1024", "64", 430.0), ("2048", "128", 400.0)] {
        let predicted = best_plan_model_tflops(nodes, dp);
        let error = predicted / published - 1.0;
        eprintln!(
            "{nodes} nodes, dp {dp}: {predicted:.1} TFLOP/s per GPU against {published} ({:+.1}%)",
            100.0 * error
        );
        assert!(
            error.abs() <= BOUND,
            "{nodes} nodes: {predicted:.1} TFLOP/s against the published {published} ({:+.1}%)",
            100.0 * error
        );
    }
}
