//! Accuracy on current stacks: every run of `validation/modern_runs.yaml` tpsim can express, with
//! its published plan pinned and the unstated settings searched, against the published tokens/s
//! per GPU (issue 8 item 9 for dense runs, issue 9 item 7 for MoE runs). The bounds are the
//! issue's targets where tpsim meets them; where it does not yet (the largest errors, listed in
//! validation/FIT.md with their suspected mechanisms), the bound is today's value, so any growth
//! fails CI. Set TPSIM_MODERN_PRINT=1 to print every run.

use tpsim::modern_runs::{
    DENSE_TARGET, MOE_TARGET, ModernPrediction, ModernRun, ModernRunsFile, memory_summary,
    pair_order, predict, summary,
};

fn predictions() -> Vec<ModernPrediction> {
    runs_and_predictions().1
}

fn runs_and_predictions() -> (Vec<ModernRun>, Vec<ModernPrediction>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/validation/modern_runs.yaml"
    ))
    .unwrap();
    let file: ModernRunsFile = yaml_serde::from_str(&text).unwrap();
    assert_eq!(file.schema_version, 1);
    let out: Vec<ModernPrediction> = file.runs.iter().map(predict).collect();
    if std::env::var_os("TPSIM_MODERN_PRINT").is_some() {
        for p in &out {
            match p.error {
                Some(e) => eprintln!(
                    "{:72} pub {:>8.0} got {:>8.0} {:+6.1}%  {}",
                    p.id,
                    p.published_tokens_per_s_per_gpu.unwrap_or(0.0),
                    p.predicted_tokens_per_s_per_gpu.unwrap_or(0.0),
                    100.0 * e,
                    p.note
                ),
                None => eprintln!("{:72} -- {}", p.id, p.note),
            }
        }
    }
    (file.runs, out)
}

fn report(name: &str, set: &[&ModernPrediction], bound: f64) -> (usize, f64, f64, usize) {
    let s = summary(set, bound).unwrap_or((0, 0.0, 0.0, 0));
    eprintln!(
        "{name}: {} runs, median |error| {:.1}%, max {:.1}%, {} past {:.0}%",
        s.0,
        100.0 * s.1,
        100.0 * s.2,
        s.3,
        100.0 * bound
    );
    s
}

#[test]
fn current_stack_runs_within_the_bounds() {
    let (runs, all) = runs_and_predictions();
    let dense: Vec<&ModernPrediction> = all.iter().filter(|p| !p.moe).collect();
    let megatron: Vec<&ModernPrediction> = dense
        .iter()
        .copied()
        .filter(|p| !matches!(p.source.as_str(), "torchtitan" | "automodel"))
        .collect();
    let moe: Vec<&ModernPrediction> = all.iter().filter(|p| p.moe).collect();
    let d = report("dense, all sources", &dense, DENSE_TARGET.none_past);
    let m = report(
        "dense, Megatron-Core family",
        &megatron,
        DENSE_TARGET.none_past,
    );
    let e = report("MoE", &moe, MOE_TARGET.none_past);
    eprintln!(
        "not predicted: {}",
        all.iter().filter(|p| p.error.is_none()).count()
    );
    // Dense: the median target holds.
    assert!(d.0 >= 150, "only {} dense runs predicted", d.0);
    assert!(
        DENSE_TARGET.median_met(d.1),
        "dense median |error| {:.3}",
        d.1
    );
    assert!(m.1 <= 0.08, "Megatron-family median |error| {:.3}", m.1);
    // Not yet met: none past 25%. Today's counts are the bound (FIT.md lists them).
    assert!(
        m.3 <= DENSE_MEGATRON_PAST_25,
        "{} Megatron-family runs past 25%",
        m.3
    );
    assert!(d.3 <= DENSE_ALL_PAST_25, "{} dense runs past 25%", d.3);
    // MoE.
    assert!(e.0 >= MOE_MIN_PREDICTED, "only {} MoE runs predicted", e.0);
    assert!(e.1 <= MOE_MEDIAN_BOUND, "MoE median |error| {:.3}", e.1);
    assert!(e.3 <= MOE_PAST_30, "{} MoE runs past 30%", e.3);
    // torchtitan's peak memory where stated (issue 8 item 9 asks within 10%; not met yet).
    let (n, median, _, past) = memory_summary(&all.iter().collect::<Vec<_>>(), 0.10).unwrap();
    eprintln!(
        "peak memory: {n} runs, median |error| {:.1}%, {past} past 10%",
        100.0 * median
    );
    assert!(
        n >= MEMORY_MIN_COMPARED,
        "only {n} runs compare peak memory"
    );
    assert!(
        median <= MEMORY_MEDIAN_BOUND,
        "memory median |error| {median:.3}"
    );
    assert!(past <= MEMORY_PAST_10, "{past} runs' memory past 10%");

    // The order of published variants (issue 11 asked of the current stacks): pairs of runs of
    // one model on the same GPUs in one published table, more than 2% apart. Today's counts
    // (2026-12-06): 9 of 9 at one precision (plan or settings differ: torch.compile, async TP,
    // interleaving), 92 of 98 across precisions (the misses: FP8 current scaling against MXFP8 on
    // Blackwell, where tpsim puts them level and the sources 2-6% apart, see validation/FIT.md
    // "MXFP8 against FP8 current scaling"). Any pair that turns fails.
    let order = pair_order(&runs, &all);
    eprintln!("pair order: {order:?}");
    assert!(
        order.same_precision_pairs >= 9 && order.same_precision_ordered >= 9,
        "{order:?}"
    );
    assert!(
        order.precision_pairs >= 98 && order.precision_ordered >= 92,
        "{order:?}"
    );
}

/// What the source states is what tpsim runs: torchtitan's async-TP rows overlap TP
/// communication and come out faster than their vanilla-TP twins, and row-wise float8 (a
/// scaling tpsim does not model) is left out with the reason.
#[test]
fn stated_torchtitan_settings_are_honoured() {
    let all = predictions();
    let by_id = |id: &str| all.iter().find(|p| p.id == id).unwrap();
    let vanilla = by_id("torchtitan-202506-llama3_8b-h100-64g-fsdp8-tp8-bf16-vanillatp");
    let async_tp = by_id("torchtitan-202506-llama3_8b-h100-64g-fsdp8-tp8-bf16-asynctp");
    let (v, a) = (
        vanilla.predicted_tokens_per_s_per_gpu.unwrap(),
        async_tp.predicted_tokens_per_s_per_gpu.unwrap(),
    );
    assert!(a > v, "async TP {a} vs vanilla {v}");
    assert!(
        vanilla.note.contains("recompute selective"),
        "{}",
        vanilla.note
    );
    let rowwise = by_id("torchtitan-202506-llama3_8b-h100-64g-fsdp8-tp8-float8-rowwise-asynctp");
    assert!(rowwise.error.is_none());
    assert!(rowwise.note.contains("row-wise"), "{}", rowwise.note);
}

/// torchtitan's pipeline rows state the schedule and the local batch only; they are planned with
/// torchtitan's defaults: as many micro-batches as stages, two stages per rank when interleaved.
#[test]
fn torchtitan_pipeline_rows_use_torchtitans_schedule_defaults() {
    let all = predictions();
    let by_id = |id: &str| all.iter().find(|p| p.id == id).unwrap();
    // Table 5: local batch 32 on pp 8.
    let one_f_one_b = by_id("torchtitan-202412-llama31_405b-h100-512g-fsdp8-tp8-pp8-1f1b");
    assert!(
        one_f_one_b.note.contains("micro-batch 4 x 8") && !one_f_one_b.note.contains("vpp"),
        "{}",
        one_f_one_b.note
    );
    let interleaved = by_id("torchtitan-202412-llama31_405b-h100-512g-fsdp8-tp8-pp8-i1f1b");
    assert!(
        interleaved.note.contains("micro-batch 4 x 8, vpp 2"),
        "{}",
        interleaved.note
    );
    // torchtitan's full AC covers every block.
    assert!(
        one_f_one_b.note.starts_with("recompute full,"),
        "{}",
        one_f_one_b.note
    );
}

// Today's values (2026-12-02). None is the target: it asks for a MoE median of 15% (met at
// 12.1% until DeepEP's one-copy-per-node forwarding was modelled, which took the two DeepSeek-V3 H100
// rows from -0.4% to +17.6% and the median to 16.7%; DeepSeek-V3's group-limited routing, with each
// chosen group reached as Megatron-Core's group scoring makes it, leaves them at +28.1%; the chunk
// layout with the loss alone in the last chunk then brought in three DeepSeek-V3 rows, 15.2% over
// 40 runs, one of them, AutoModel's on 1,024 H100s, +35%; bundling Kimi K2 brought in AutoModel's
// Kimi K2 row at +47%, now +35% with its two pipeline schedules per step; 16.7% over 41 runs), none
// past 25% (dense; 6 since torchtitan's recomputed forward keeps its TP collectives unfused, 4 since
// torchtitan's CP runs as PyTorch's context_parallel does) and none past 30% (MoE). The low-precision
// casts written as the copies TE keeps (MXFP8's two block-scaled copies) took the MoE median to 15.5%,
// Qwen3's QK-norm kernels (not counted before) to 14.96%, inside issue 9's 15%; Megatron-Core's MoE
// layers then lost the MLP-side TP gather/scatter pair they do not run (no shared experts: the
// dispatcher takes the sequence shard; moe/token_dispatcher.py), which took 10 rows 0.2-0.7 points
// faster and the median to 15.24%. On 2026-12-03 an audit against Megatron-Core's code found the
// token permutations counted about twice (the permute reads each token once and writes its copies;
// the backward moves the same bytes, not twice) and the FP8/MXFP8 router padding not counted: both
// fixed, as the code runs, which took the median to 16.1% and one more row past 30% (the Qwen3-30B
// rows, whose permutations are as large as their expert GEMMs, moved 5-23 points faster). The
// bounds hold that, not the 15%/none past 30%, which are unmet: the double count had been
// hiding what those rows still lack (FIT.md). The other bounds stop the errors from growing; see
// validation/FIT.md for which runs miss and why. On 2026-12-03 (third session) the low-precision
// casts and sequence-parallel gathers were made what Transformer Engine and torchao run (per-tensor
// FP8's scaling recipe, the cast inside the norm, the shard cast and quantized all-gathers): dense
// median 6.5% -> 5.9%, Megatron family 6.3% -> 5.5%, MoE 16.1% -> 15.7%; but two NeMo GB200 Llama
// 3.1 405B FP8 rows, already 22-23% fast with the Blackwell dense bias FIT.md describes, crossed 25%
// (delayed scaling's cast inside the norm), hence 6 and 3 below (were 4 and 1). On 2026-12-03
// (fourth session) the transposed FP8 copies of sequence-gathered tensors (the re-gathered inputs
// and the gathered output gradients) were charged once, in the backward where Transformer Engine
// and torchao make them, and torchtitan's collective copies sized to the FP8 all-gathers: dense
// median 5.9% -> 6.5% (the Megatron family 5.5% -> 5.5%), the float8/bf16 speedups of
// torchtitan's paired rows closer to the published ones (FIT.md). On 2026-12-05 AutoModel's
// GPT-OSS-120B row, whose config runs HybridEP, was planned with DeepEP's traffic as the Megatron-Core
// MoE report's HybridEP runs are (it had kept the all-to-all, which sends 2-4 times as much): -5.6%
// -> +43.9%, beside the other GPT-OSS rows (+49...+61%, a gap FIT.md describes). Crossing from
// below the median to above it, it moved the median of this sparse distribution from 15.7% to the
// next value, 22.3%, and one more row past 30%. The same day the fused attention kernels' rate
// was made to follow the head width (FlashAttention-3's paper charts cuDNN at 0.68 of its
// head-dim-128 rate at 64 and 0.83 at 256): 37 of the 43 rows it moved came closer (GPT-OSS's
// 64-wide heads 1-6 points, DeepSeek-V3's 192-wide MLA 1-3; six Nemotron-4 H100 rows already slow
// 0.1-0.3 points further), MoE median 22.3% -> 20.8%, 13 past 30%. Later that day tensor-core
// kernels were put at each GPU's sustained clock: the measured MSMF/MAMF of a busy 8-GPU node,
// B200 0.823 against H200 0.887, the reference the fitted framework efficiency already holds, so
// Blackwell GEMMs and fused attention run 7.2% slower and Hopper and A100 do not move (GB200,
// GB300 and B300 take B200's share, an assumption FIT.md states). 66 rows moved, 54 closer (the
// GB300 rows and a few GB200 rows, already slow, 2-6 points further): dense 6 -> 4 past 25%, the
// Megatron family 3 -> 1, MoE median 20.8% -> 16.0%, 13 -> 12 past 30%.
// 2026-12-05, fourth session: Megatron-Core's eager expert epilogues (the biased experts' output
// bias, the clamped GLU's clamp in 25.11) took GPT-OSS-120B on 64 GB200/GB300 from +37/+39% to
// +28%: 12 -> 10 past 30%.
// 2026-12-05, seventh session: the fused rotary-embedding kernels (Q and K read and written; MLA's
// in-place query rotation and K/V split) counted for every RoPE model: MoE median 16.0% -> 13.3%
// (the DeepSeek-V3 rows 2-3 points slower, the one at the median among them), 10 -> 9 past 30%
// (Kimi K2 +31.0 -> +29.4%). The median bound was then issue 9's 15% (until 2026-12-06, below); the
// count past 30% is not met.
const DENSE_MEGATRON_PAST_25: usize = 1;
const DENSE_ALL_PAST_25: usize = 4;
// 2026-12-06: the Megatron-Bridge 25.11 rows whose v0.2.0 configs run the flex dispatcher with
// HybridEP (DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B on GB200 and GB300,
// `modern_runs::recipes::bridge_flex_dispatcher`) are planned with DeepEP's traffic, as the
// documented HybridEP rule plans AutoModel's and the MoE report's runs; they had kept the
// all-to-all. A sourced setting, not a fit: seven rows move 3-15 points faster (Qwen3-30B-A3B GB200
// +22.4% -> +37.6%, past 30%; DeepSeek-V3 GB300/GB200 MXFP8 +2.4/+0.8% -> +12.6/+11.2%), which
// takes the MoE median from 13.3% to 18.1% and the count past 30% from 9 to 10. The bounds are
// the new values (median rounded up by about one point); issue 9's 15% is no longer met.
// 2026-12-07: the interleaved schedule's simulation runs every model chunk at its own layers, the
// output layer and the MTP layers in the last stage's last chunk only and the dense first layers in
// the first (Megatron-Core's `get_model` gives `post_process` to that chunk alone; they had been
// spread evenly over a stage's chunks). The warm-up no longer passes through a heavier last stage
// at every chunk, so the 111 interleaved rows of the two runs files run 0.01-2.6 points faster;
// AutoModel's Kimi K2 row (a 163,840-token output layer, vpp 4 on 256 H100s), the most affected,
// goes +29.4% -> +32.0%: 10 -> 11 past 30%. A sourced mechanism, not a fit (FIT.md).
const MOE_MIN_PREDICTED: usize = 41;
const MOE_MEDIAN_BOUND: f64 = 0.19;
const MOE_PAST_30: usize = 11;
// torchtitan peak memory (20 runs state it): today's values, not the 10%.
const MEMORY_MIN_COMPARED: usize = 20;
const MEMORY_MEDIAN_BOUND: f64 = 0.05;
// 4 until 2026-12-03 (fourth session): loss_parallel's eager backward holds 16 bytes per logit,
// not 12, which took the two Llama 3.1 70B TP 8 rows from -18%/-13% to -7%/-1% (FIT.md).
const MEMORY_PAST_10: usize = 2;

/// `tpsim accuracy --runs` reads this format too and reports the same predictions.
#[test]
fn accuracy_command_reads_the_current_stack_format() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .args([
            "accuracy",
            "--runs",
            concat!(env!("CARGO_MANIFEST_DIR"), "/validation/modern_runs.yaml"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 329);
    let library = predictions();
    for (row, lib) in rows.iter().zip(&library) {
        assert_eq!(row["id"], lib.id.as_str());
        match (
            row["predicted_tokens_per_s_per_gpu"].as_f64(),
            lib.predicted_tokens_per_s_per_gpu,
        ) {
            (Some(a), Some(b)) => assert!((a / b - 1.0).abs() < 1e-9, "{}: {a} vs {b}", lib.id),
            (a, b) => assert_eq!(a, b, "{}", lib.id),
        }
    }
}
