//! The physics audit of three plans (validation/FIT.md, "Physics audit of three plans (audit
//! round 29, 2026-12-07)"): one test per defect it found, each checked against a number worked
//! out by hand from the frameworks' code.

mod common;

/// `tpsim accuracy --run ID` on the current-stack runs file: the run's plan in full.
fn planned(id: &str) -> String {
    let r = common::run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        id,
    ]);
    assert_eq!(r.code, 0, "{id}: {}", r.stderr);
    r.stdout
}

/// The GiB a memory line of `--run`'s report gives (`  gradients  11.9 GiB`).
fn memory_gib(report: &str, what: &str) -> f64 {
    report
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(what)).then(|| words.next().and_then(|v| v.parse().ok()))?
        })
        .unwrap_or_else(|| panic!("no {what} memory line in:\n{report}"))
}

/// The predicted tokens/s per GPU of `--run`'s first line (`tpsim 167, 24.48 s`).
fn predicted_tokens_per_s(report: &str) -> f64 {
    let after = report.split("; tpsim ").nth(1).expect("a tpsim figure");
    after
        .split(',')
        .next()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no predicted tokens/s in: {after}"))
}

/// dgxc-benchmarking v25.04.01 builds every Llama recipe with `pretrain_recipe(performance_mode=
/// True)`, whose `pretrain_performance_optimizations` sets `plugins.grad_reduce_in_fp32 = False`
/// (NVIDIA/NeMo `nemo/collections/llm/recipes/llama31_405b.py:253`, `llama3_70b.py:246`,
/// `llama3_8b.py:240` at d2b2155, the release's NEMO_COMMIT), and `MegatronStrategy` copies the
/// plugin's dtype over the DDP config (`megatron_strategy.py:384`): the bf16 runs reduce and keep
/// bf16 gradients, 2 bytes a parameter like the bf16 weights. Before the fix tpsim kept fp32
/// gradients (23.8 GiB against 11.9 GiB of weights on the 405B's middle stage).
#[test]
fn dgxc_25_04_bf16_llama_runs_keep_bf16_gradients() {
    for id in [
        "dgxc-v25.04.01-llama31_405b-h100-512g-bf16",
        "dgxc-v25.04.01-llama31_70b-h100-64g-bf16",
        "dgxc-v25.04.01-llama31_8b-h100-8g-bf16",
    ] {
        let report = planned(id);
        assert!(report.contains("bf16 gradients"), "{id}:\n{report}");
        let (weights, grads) = (
            memory_gib(&report, "weights"),
            memory_gib(&report, "gradients"),
        );
        assert!(
            (grads - weights).abs() <= 0.1,
            "{id}: bf16 gradients take what the bf16 weights take, {weights} GiB; got {grads} GiB"
        );
    }
}

/// The 405B at 512 and 1024 GPUs runs the same per-GPU plan (tp 8, cp 2, pp 8, vpp 8, 64
/// micro-batches of 1); only dp (4 against 8) and so the ZeRO-1 shard of the optimizer differ
/// (dgxc-benchmarking 85380ff `llama3.1/README.md` config table). With bf16 gradients the 512-GPU
/// plan fits without recompute (11.9 GiB less than fp32 gradients, more than the 4.5 GiB of
/// optimizer shard it adds over 1024 GPUs), so both step the same work: their throughputs per GPU
/// agree as the published ones do (207.1 and 206.5). Before the fix the 512-GPU plan needed full
/// recompute to fit and came out 24% slower (167 against 220).
#[test]
fn dgxc_405b_at_512_gpus_fits_without_recompute_like_1024() {
    let at_512 = planned("dgxc-v25.04.01-llama31_405b-h100-512g-bf16");
    let at_1024 = planned("dgxc-v25.04.01-llama31_405b-h100-1024g-bf16");
    assert!(at_512.contains("recompute none"), "{at_512}");
    let (t512, t1024) = (
        predicted_tokens_per_s(&at_512),
        predicted_tokens_per_s(&at_1024),
    );
    assert!(
        (t512 / t1024 - 1.0).abs() < 0.02,
        "512 GPUs {t512} tokens/s per GPU against 1024 GPUs {t1024}"
    );
}
