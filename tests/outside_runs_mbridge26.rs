//! Out-of-sample accuracy: Megatron-Bridge's performance tables of NeMo containers 26.02 to 26.08
//! (`validation/mbridge_26_runs.yaml`, transcribed by `scripts/transcribe_mbridge_tables.py`; see
//! `validation/mbridge_26_runs.md`), which no tpsim setting was fitted to. Each row is planned as
//! `tests/modern_accuracy.rs` plans the 25.09/25.11 rows: its published plan pinned, the unstated
//! settings searched, the recipe rules of `modern_runs::recipes` applied (each 26.x row takes the
//! settings its release's configs state and tpsim expresses, keyed by the container in its id:
//! `recipes::Bridge26`).
//!
//! Nothing was fitted to these rows: the bounds below record the out-of-sample error measured on
//! 2026-12-06 (rounded up by about one point, one row for the counts), so that a later change to
//! the cost model that makes these predictions worse fails here. They are not targets. Set
//! TPSIM_MODERN_PRINT=1 to print every run.

mod common;

use tpsim::modern_runs::{ModernPrediction, ModernRunsFile, predict, summary};

const RUNS: &str = "validation/mbridge_26_runs.yaml";

// Measured 2026-12-06 with the 26.x recipe rules (recompute modules, MoE all-to-all overlap, the
// flex dispatcher's HybridEP/DeepEP as DeepEP, TP and parameter-gather overlap, low-precision
// parameter gather, by release; validation/mbridge_26_runs.md): dense 61 rows predicted, median
// |error| 6.35%, 1 past 25% (6.2% with the Llama 3 70B FSDP recipes' CPU offloading); MoE 107 rows, median |error| 19.85%, 26 past 30%. Before those rules
// (the recipes' bf16 gradient reduction only): dense 8.61%, 1; MoE 22.36%, 35. 60 of 228 rows not
// predicted (Nemotron 3 / 3.5 and DeepSeek-V4 Flash have no shape in the catalog; the five SFT
// rows are SFT).
const DENSE_MIN_PREDICTED: usize = 61;
const DENSE_MEDIAN_BOUND: f64 = 0.072;
const DENSE_PAST_25: usize = 2;
const MOE_MIN_PREDICTED: usize = 107;
// 2026-12-07 (physics round 28): the model's end chunks no longer pay a send they never make
// (Megatron-Core `send_forward` skips the last stage, `send_backward` the first), which makes the
// DeepSeek-V3 B200/B300 MXFP8 rows 0.6–2.4 points faster, already too fast; one, 26.02.01 on 256
// B300 (+20.48 → +21.60%), crosses the median, 20.88 → 21.44% (validation/FIT.md, the audit-27
// section's addendum). Raised from 0.209 with it.
const MOE_MEDIAN_BOUND: f64 = 0.215;
const MOE_PAST_30: usize = 27;
const ROWS: usize = 228;
// Nemotron 3 Nano (hybrid Mamba-Transformer MoE, models/nemotron-3-nano-30b-a3b.yaml), priced since
// 2026-12-06 (fifteenth session; validation/FIT.md "Hybrid Mamba-Transformer stacks"): 20 rows.
// The seventeenth session planned them with their recipes' recompute modules (the four H100 rows
// +19...+24% -> -1...+3%) and then with their recipes' HybridEP dispatcher (as DeepEP: a token
// sent once per GPU it reaches), which every Nemotron 3 config names: median |error| 29.6%, max
// 38.2%, 9 past 30%, all too fast (+7...+38%), the fine-grained MoE bias of the rows above made
// plain by the dispatcher's smaller traffic (validation/FIT.md "The recipes' HybridEP on the
// Nemotron rows"). Kept apart so that the MoE bounds above still hold the rows they were measured
// on. Physics round 32 (validation/FIT.md, 2026-12-07): their recipes leave
// `moe_router_padding_for_fp8` off, so Megatron-Core's `TEGroupedMLP` pads each local expert's
// rows with two copies each way (`ExpertEpilogue::explicit_quantization_padding`); the low-precision
// rows lose 4-6 points, median 24.7%, 2 past 30% (from 9).
const HYBRID_MIN_PREDICTED: usize = 20;
const HYBRID_MEDIAN_BOUND: f64 = 0.30;
const HYBRID_PAST_30: usize = 2;
// Nemotron 3 Super and Ultra (hybrid Mamba-Transformer LatentMoE stacks with the recipes' two MTP
// depths of one shared attention + MoE block; validation/FIT.md "LatentMoE"), priced since
// 2026-12-06 (sixteenth session): 32 rows; since the seventeenth session with the recipes'
// recompute modules and HybridEP dispatcher: median |error| 32.9%, max 90.3%, 19 past 30%, too
// fast on every GPU (B200 +14...+17%, which read -31...-34% with the all-to-all dispatcher the
// recipe does not run; B300 +50...+90%). Since the eighteenth session the NVFP4 rows keep what the
// recipe keeps in bf16 (its last 14 layers, `nemotron_3_super_bf16_with_nvfp4_mixed`, and the MTP
// depths, by `te_quant.cfg`'s `mtp_bf16` matcher): median 28.1%, max 78.5%, 14 past 30%; with that
// file's module precisions too (attention linears and latent projections bf16, Mamba out_proj
// MXFP8): median 26.0%, max 72.8%, 13 past 30%. Kept apart so that the bounds above still hold
// the rows they were measured on.
const LATENT_MIN_PREDICTED: usize = 32;
const LATENT_MEDIAN_BOUND: f64 = 0.265;
const LATENT_PAST_30: usize = 13;

fn predictions() -> Vec<ModernPrediction> {
    let text = std::fs::read_to_string(format!("{}/{RUNS}", common::ROOT)).unwrap();
    let file: ModernRunsFile = tpsim::modern_runs::parse_runs_file(&text, RUNS).unwrap();
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
    out
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
fn megatron_bridge_26_runs_stay_within_the_measured_out_of_sample_error() {
    let all = predictions();
    assert_eq!(all.len(), ROWS);
    let hybrid = |p: &&ModernPrediction| p.id.contains("nemotron3_nano");
    let latent = |p: &&ModernPrediction| {
        p.id.contains("nemotron3_super") || p.id.contains("nemotron3_ultra")
    };
    let apart = |p: &&ModernPrediction| hybrid(p) || latent(p);
    let dense: Vec<&ModernPrediction> = all.iter().filter(|p| !p.moe && !apart(p)).collect();
    let moe: Vec<&ModernPrediction> = all.iter().filter(|p| p.moe && !apart(p)).collect();
    let hybrids: Vec<&ModernPrediction> = all.iter().filter(hybrid).collect();
    let latents: Vec<&ModernPrediction> = all.iter().filter(latent).collect();
    let d = report("dense", &dense, 0.25);
    let m = report("MoE", &moe, 0.30);
    let h = report("hybrid", &hybrids, 0.30);
    let l = report("LatentMoE", &latents, 0.30);
    assert!(
        l.0 >= LATENT_MIN_PREDICTED,
        "only {} LatentMoE runs predicted",
        l.0
    );
    assert!(
        l.1 <= LATENT_MEDIAN_BOUND,
        "LatentMoE median |error| {:.3}",
        l.1
    );
    assert!(l.3 <= LATENT_PAST_30, "{} LatentMoE runs past 30%", l.3);
    assert!(
        h.0 >= HYBRID_MIN_PREDICTED,
        "only {} hybrid runs predicted",
        h.0
    );
    assert!(
        h.1 <= HYBRID_MEDIAN_BOUND,
        "hybrid median |error| {:.3}",
        h.1
    );
    assert_eq!(h.3, HYBRID_PAST_30, "hybrid runs past 30%");
    // Fewer rows predicted would hide errors: a row that stops being predicted fails here.
    assert!(
        d.0 >= DENSE_MIN_PREDICTED,
        "only {} dense runs predicted",
        d.0
    );
    assert!(m.0 >= MOE_MIN_PREDICTED, "only {} MoE runs predicted", m.0);
    assert!(d.1 <= DENSE_MEDIAN_BOUND, "dense median |error| {:.3}", d.1);
    assert!(d.3 <= DENSE_PAST_25, "{} dense runs past 25%", d.3);
    assert!(m.1 <= MOE_MEDIAN_BOUND, "MoE median |error| {:.3}", m.1);
    assert!(m.3 <= MOE_PAST_30, "{} MoE runs past 30%", m.3);
    // What is not predicted is said, row by row: the shapes the catalog does not fill and the SFT
    // rows, nothing else.
    for p in all.iter().filter(|p| p.error.is_none()) {
        assert!(
            p.note == "model shape not stated" || p.note.starts_with("sft run"),
            "{}: {}",
            p.id,
            p.note
        );
    }
}

/// `tpsim accuracy --runs` reads the file and prints the predictions the library makes.
#[test]
fn accuracy_command_reads_the_26_runs_file() {
    let rows = common::json(&["accuracy", "--runs", RUNS, "--format", "json"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), ROWS);
    for (row, lib) in rows.iter().zip(&predictions()) {
        assert_eq!(row["id"], lib.id.as_str());
        // The JSON's shortest decimal reads back within a rounding of the library's value.
        match (
            row["predicted_tokens_per_s_per_gpu"].as_f64(),
            lib.predicted_tokens_per_s_per_gpu,
        ) {
            (Some(a), Some(b)) => assert!((a / b - 1.0).abs() < 1e-9, "{}: {a} vs {b}", lib.id),
            (a, b) => assert_eq!(a, b, "{}", lib.id),
        }
    }
}
