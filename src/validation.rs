//! Published training runs (`validation/published_runs.yaml`) turned into tpsim scenarios, and
//! the prediction error on each.
//!
//! The published step time is `results.iteration_time_s` where the source logs it (BLOOM), else the
//! dataset's `derived.iteration_time_s_from_eq3` (Megatron SC'21: Eq. 3 FLOPs / reported FLOP/s).
//! The hardware maps to a bundled profile by what the run names: Jean Zay → `jean-zay-a100-80g`,
//! other A100 80GB runs → `a100-sxm-80g` (Selene is DGX A100), A100 40GB runs → `a100-sxm-40g`.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::cost::{Estimate, evaluate};
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, PlanRequest, Recompute};
use crate::specs::{self, SpecError};
use crate::training::{AttentionKernel, Training};

/// validation/published_runs.yaml, built in so `tpsim accuracy` works from any directory.
pub const BUNDLED_PUBLISHED_RUNS: &str = include_str!("../validation/published_runs.yaml");

// Every struct below refuses keys it does not know (a typo such as `num_gpu:` would otherwise be
// dropped and the run planned on a default), as every other input file does. Keys the file
// carries for people (sources, provenance, figures tpsim does not compare) are listed as
// `IgnoredAny` (named with a leading `_`): known, so accepted, and never read.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunModel {
    arch: String,
    layers: u32,
    hidden: u32,
    heads: u32,
    kv_heads: Option<u32>,
    ffn_hidden: Option<u32>,
    vocab: u32,
    vocab_padded: Option<u32>,
    seq_len: u32,
    /// The published parameter count in billions, checked against the shape
    /// ([`check_published_figures`]).
    #[serde(default)]
    params_b: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunHardware {
    gpu: String,
    gpus_per_node: u32,
    num_gpus: u32,
    /// The GPU's memory: the runs are evaluated on A100 profiles of 80 GB (40 GB where the run
    /// says so, outside Jean Zay), so a run on another size is skipped rather than checked
    /// against the wrong size.
    #[serde(default)]
    gpu_memory_gb: Option<f64>,
    /// The 16-bit dense peak the source's percentages are of, checked against the profile's.
    #[serde(default)]
    peak_tflops_16bit: Option<f64>,
    #[serde(default, rename = "interconnect")]
    _interconnect: IgnoredAny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunPlan {
    tp: u32,
    pp: u32,
    dp: u32,
    /// Context parallelism: these runs have none (null or 1); read so that a run with some is
    /// refused rather than planned without it.
    #[serde(default)]
    cp: Option<u32>,
    virtual_pipeline_stages: Option<u32>,
    sequence_parallel: Option<bool>,
    recompute: Option<String>,
    zero_stage: Option<u8>,
    micro_batch_size: u32,
    global_batch_size: u32,
    /// Megatron-LM's `--num-layers-per-virtual-pipeline-stage`: the run's interleaving said in
    /// layers, read beside `virtual_pipeline_stages` (see [`vpp_of`]).
    #[serde(default)]
    layers_per_virtual_stage: Option<u32>,
    #[serde(default, rename = "pp_partition")]
    _pp_partition: IgnoredAny,
    /// Free text that starts with the GEMM precision (`fp16 (--fp16, --loss-scale 8192)`,
    /// `bf16`); checked by [`check_precision`], since the runs are evaluated at 16 bits.
    #[serde(default)]
    precision: Option<String>,
    #[serde(default, rename = "ddp_impl")]
    _ddp_impl: IgnoredAny,
    #[serde(default, rename = "distributed_optimizer")]
    _distributed_optimizer: IgnoredAny,
    #[serde(default, rename = "batch_rampup")]
    _batch_rampup: IgnoredAny,
    #[serde(default, rename = "zero_note")]
    _zero_note: IgnoredAny,
    /// The run's optimizer was DeepSpeed's 2022 `BF16_Optimizer` (BLOOM): fp32 gradient
    /// accumulation in an unsharded buffer beside the bf16 gradients (`cost::bf16_optimizer`).
    #[serde(default)]
    deepspeed_bf16_optimizer: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunResults {
    iteration_time_s: Option<f64>,
    /// Checked against the step time and the shape ([`check_published_figures`]).
    #[serde(default)]
    tflops_per_gpu: Option<f64>,
    #[serde(default, rename = "percent_of_peak")]
    _percent_of_peak: IgnoredAny,
    #[serde(default, rename = "aggregate_pflops")]
    _aggregate_pflops: IgnoredAny,
    #[serde(default, rename = "samples_per_s")]
    _samples_per_s: IgnoredAny,
    /// Checked against the step time ([`check_published_figures`]).
    #[serde(default)]
    tokens_per_s: Option<f64>,
    #[serde(default, rename = "mfu")]
    _mfu: IgnoredAny,
    #[serde(default, rename = "hfu")]
    _hfu: IgnoredAny,
    #[serde(default, rename = "peak_memory_gb")]
    _peak_memory_gb: IgnoredAny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunDerived {
    iteration_time_s_from_eq3: Option<f64>,
    #[serde(default, rename = "dp")]
    _dp: IgnoredAny,
    #[serde(default, rename = "num_microbatches_per_replica")]
    _num_microbatches_per_replica: IgnoredAny,
    #[serde(default, rename = "tokens_per_s")]
    _tokens_per_s: IgnoredAny,
    #[serde(default, rename = "tokens_per_s_from_eq3")]
    _tokens_per_s_from_eq3: IgnoredAny,
    #[serde(default, rename = "percent_of_peak_hw_flops")]
    _percent_of_peak_hw_flops: IgnoredAny,
    #[serde(default, rename = "approx_model_flops_utilization_pct")]
    _approx_model_flops_utilization_pct: IgnoredAny,
    #[serde(default, rename = "note")]
    _note: IgnoredAny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishedRun {
    id: String,
    completeness: Option<String>,
    model: RunModel,
    hardware: RunHardware,
    plan: RunPlan,
    results: RunResults,
    derived: Option<RunDerived>,
    #[serde(default, rename = "name")]
    _name: IgnoredAny,
    #[serde(default, rename = "group")]
    _group: IgnoredAny,
    #[serde(default, rename = "kind")]
    _kind: IgnoredAny,
    #[serde(default, rename = "source")]
    _source: IgnoredAny,
    #[serde(default, rename = "notes")]
    _notes: IgnoredAny,
}

/// What `AccuracyRow::error` compares: step times.
pub const ERROR_OF_STEP_S: &str = "step_s";

/// One published run against tpsim's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyRow {
    pub id: String,
    pub gpu_profile: String,
    pub gpus: u32,
    pub plan: String,
    pub published_step_s: f64,
    pub predicted_step_s: f64,
    /// The quantity `error` compares: "step_s" (`ERROR_OF_STEP_S`), so a negative error is a
    /// prediction faster than published; `tpsim accuracy --runs` on a current-stack file compares
    /// tokens/s instead, where a positive one is.
    pub error_of: &'static str,
    /// (predicted − published) / published.
    pub error: f64,
    pub fits: bool,
    /// The plan's memory on its most loaded GPU, as `plan`'s JSON `memory.total_bytes`.
    pub predicted_memory_bytes: f64,
    #[serde(skip)]
    pub estimate: Estimate,
}

#[derive(Debug, thiserror::Error)]
pub enum AccuracyError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("run {id}: {message}")]
    Run { id: String, message: String },
}

fn gpu_profile_for(hardware: &str) -> Option<&'static str> {
    if hardware.contains("Jean Zay") {
        Some("jean-zay-a100-80g")
    } else if hardware.contains("A100") {
        Some("a100-sxm-80g")
    } else {
        None
    }
}

/// The run's `plan.recompute`: text that starts with full, selective or none (the bundled file
/// writes `full (--activations-checkpoint-method uniform)`), null for none. Anything else is
/// refused: read as none, it would drop the recompute forward from the step without a word.
fn recompute_of(text: Option<&str>) -> Result<Recompute, String> {
    match text {
        None => Ok(Recompute::None),
        Some(t) if t.starts_with("full") => Ok(Recompute::Full),
        Some(t) if t.starts_with("selective") => Ok(Recompute::Selective),
        Some(t) if t.starts_with("none") => Ok(Recompute::None),
        Some(t) => Err(format!(
            "plan.recompute: {} is not a recompute method (rule: it starts with full, selective or none, as Megatron-LM's --recompute-granularity); write the run's method, e.g. recompute: full, or null for none",
            crate::input_file::quote(t)
        )),
    }
}

/// The run's `plan.precision`: this file's runs are evaluated with 16-bit GEMMs on A100 profiles
/// (the training is Megatron-LM 2021's, whose fp16 and bf16 run the same tensor-core rate), so the
/// text must start with fp16 or bf16 (or be null). Anything else (`fp8`, `fp32`) was evaluated at 16
/// bits without a word.
fn check_precision(text: Option<&str>) -> Result<(), String> {
    match text {
        None => Ok(()),
        Some(t)
            if ["fp16", "bf16"]
                .iter()
                .any(|p| t.trim_start().to_ascii_lowercase().starts_with(p)) =>
        {
            Ok(())
        }
        Some(t) => Err(format!(
            "plan.precision: {} is not fp16 or bf16 (rule: this file's runs are evaluated with 16-bit GEMMs on A100 profiles, which have no FP8 tensor cores); write the run's 16-bit precision, e.g. precision: bf16, or write the run in the current-stack format (validation/modern_runs.yaml)",
            crate::input_file::quote(t)
        )),
    }
}

/// The run's virtual pipeline stages: `plan.virtual_pipeline_stages`, or the count
/// `plan.layers_per_virtual_stage` (Megatron-LM's `--num-layers-per-virtual-pipeline-stage`)
/// implies: a stage's layers (`layers / pp`) over it. Given alone it was dropped without a word
/// and the run planned without interleaving; given with a count it contradicts, one was.
fn vpp_of(p: &RunPlan, layers: u32) -> Result<u32, String> {
    let Some(per_chunk) = p.layers_per_virtual_stage else {
        return Ok(p.virtual_pipeline_stages.unwrap_or(1));
    };
    if per_chunk == 0 {
        return Err(
            "plan.layers_per_virtual_stage: 0 must be at least 1 (rule: a virtual stage holds at least one layer); give the published value, or null with plan.virtual_pipeline_stages".to_string(),
        );
    }
    let per_stage = layers / p.pp.max(1);
    if !layers.is_multiple_of(p.pp.max(1)) || !per_stage.is_multiple_of(per_chunk) {
        return Err(format!(
            "plan.layers_per_virtual_stage: {per_chunk} does not divide a stage's model.layers {layers} / plan.pp {} = {per_stage} layers (rule: each virtual stage holds the same whole number of layers, as Megatron-LM's --num-layers-per-virtual-pipeline-stage); give a divisor of {per_stage}, or null with plan.virtual_pipeline_stages",
            p.pp
        ));
    }
    let implied = per_stage / per_chunk;
    // Without a pipeline the count it implies was refused as `plan.virtual_pipeline_stages:
    // {implied} needs pipeline parallelism; use plan.virtual_pipeline_stages: 1`, a key and value
    // the file never gave and a fix that contradicts the layers per virtual stage in turn.
    // Megatron-LM refuses the interleaved schedule without a pipeline (a launch line's
    // `--num-layers-per-virtual-pipeline-stage` is told so in `emit::megatron_reader`).
    if p.pp <= 1 && implied > 1 {
        return Err(format!(
            "plan.layers_per_virtual_stage: {per_chunk} makes model.layers {layers} / {per_chunk} = {implied} virtual stages, but plan.pp is {} (no pipeline), and the interleaved schedule needs one (Megatron-LM refuses it); give the published plan.pp of 2 or more, or null for plan.layers_per_virtual_stage (no interleaving)",
            p.pp
        ));
    }
    match p.virtual_pipeline_stages {
        Some(vpp) if vpp != implied => Err(format!(
            "plan.virtual_pipeline_stages: {vpp} contradicts plan.layers_per_virtual_stage: {per_chunk}, which makes {per_stage} / {per_chunk} = {implied} virtual stages of a stage's {per_stage} layers (model.layers {layers} / plan.pp {}); give one of them, or values that agree (virtual_pipeline_stages: {implied})",
            p.pp
        )),
        _ => Ok(implied),
    }
}

/// The `eval` flags that plan and model errors name, and the runs file's keys for them (under
/// `plan.`; the model's under `model.` are `model_file_words`'s).
const RUN_PLAN_KEYS: [(&str, &str); 7] = [
    ("--tp", "tp"),
    ("--pp", "pp"),
    ("--dp", "dp"),
    ("--vpp", "virtual_pipeline_stages"),
    ("--micro-batch", "micro_batch_size"),
    ("--global-batch", "global_batch_size"),
    ("--zero", "zero_stage"),
];

/// A model or plan error said in a runs file's words: `--heads 7` is `model.heads: 7`, `--vpp 0`
/// is `plan.virtual_pipeline_stages: 0` (the keys the user has to change; a runs file has no
/// flags). The vocabulary is `model.vocab_padded` where the run gives one, as tpsim reads it.
fn in_runs_file_words(message: &str, vocab_padded: bool) -> String {
    let said = crate::model_file_words::in_file_keys(message, "plan.", &RUN_PLAN_KEYS);
    let said = crate::model_file_words::in_runs_file_model_words(&said);
    if vocab_padded {
        said.replace("model.vocab", "model.vocab_padded")
    } else {
        said
    }
}

/// Longest published step time accepted: an hour per step is past any run on record (BLOOM's
/// 105 s, Megatron SC'21's 1T run's 60 s).
const MAX_PUBLISHED_STEP_S: f64 = 3600.0;
/// Most GPUs in one run: 2^24, past any cluster built.
const MAX_RUN_GPUS: u32 = 1 << 24;

/// The run's numbers that tpsim divides by or compares with, each in its range.
fn check_run_numbers(run: &PublishedRun, published_step_s: f64) -> Result<(), String> {
    use crate::cluster::{MAX_GPUS_PER_NODE, Range};
    let hw = &run.hardware;
    if !(1..=MAX_GPUS_PER_NODE).contains(&hw.gpus_per_node) {
        return Err(format!(
            "hardware.gpus_per_node: {} is outside 1 to {MAX_GPUS_PER_NODE} (rule: at least one GPU, at most an NVL72 rack); give the GPUs per node",
            hw.gpus_per_node
        ));
    }
    if !(1..=MAX_RUN_GPUS).contains(&hw.num_gpus) {
        return Err(format!(
            "hardware.num_gpus: {} is outside 1 to {MAX_RUN_GPUS} (rule: a run uses at least one GPU); give the GPU count",
            hw.num_gpus
        ));
    }
    for (key, value) in [
        ("plan.global_batch_size", run.plan.global_batch_size),
        ("plan.micro_batch_size", run.plan.micro_batch_size),
        ("plan.tp", run.plan.tp),
        ("plan.pp", run.plan.pp),
        ("plan.dp", run.plan.dp),
    ] {
        if value == 0 {
            return Err(format!(
                "{key}: 0 must be at least 1 (rule: a positive count); give the published value"
            ));
        }
    }
    check_gpu_count(run)?;
    // Two step times for one run: `results.iteration_time_s` was used and the derived one dropped
    // without a word, however far apart. The derived time is arithmetic on the published TFLOP/s,
    // which SC'21 gives to 3 significant figures (about 0.4%, the bundled file's `derived.note`), so
    // two times within 1% are one time rounded twice.
    if let (Some(stated), Some(derived)) = (
        run.results.iteration_time_s,
        run.derived
            .as_ref()
            .and_then(|d| d.iteration_time_s_from_eq3),
    ) && stated.is_finite()
        && derived.is_finite()
        && derived > 0.0
        && (stated / derived - 1.0).abs() > 0.01
    {
        return Err(format!(
            "results.iteration_time_s {} and derived.iteration_time_s_from_eq3 {} are two published step times that differ by {:.0}% (rule: a run has one step time; within 1% they are one time rounded twice); keep the one the source states and remove the other",
            crate::units::show_number(stated),
            crate::units::show_number(derived),
            ((stated / derived - 1.0).abs() * 100.0)
        ));
    }
    let key = if run.results.iteration_time_s.is_some() {
        "results.iteration_time_s"
    } else {
        "derived.iteration_time_s_from_eq3"
    };
    Range::new(
        key,
        1e-6,
        MAX_PUBLISHED_STEP_S,
        "s",
        "rule: a step takes positive time, at most an hour",
    )
    .check(published_step_s)
}

/// How far a published tokens/s may sit from global batch x sequence length / step time: the
/// published figures are rounded (SC'21's TFLOP/s to 3 significant figures, about 0.4%).
const TOKENS_PER_S_TOLERANCE: f64 = 0.01;
/// How far a published parameter count may sit from the shape's: sources round it (SC'21's
/// "1.7B" is 1.65B by the shape, 2.9% off) and count or leave out the position embeddings,
/// biases and norms.
const PARAMS_B_TOLERANCE: f64 = 0.05;
/// Slack on a published TFLOP/s beyond the FLOP counts it may use (rounding).
const TFLOPS_TOLERANCE: f64 = 0.02;

/// The figures a source publishes beside its step time, each against what it must agree with, so
/// that a figure that contradicts the step or the shape is refused rather than carried silently:
/// `results.tokens_per_s` = global batch x sequence length / step; `results.tflops_per_gpu` between the lowest count sources use — 6 FLOPs per parameter and token
/// (Kaplan et al. 2020, §2.1: C ≈ 6N per token, attention left out), or the model FLOPs of a step
/// (`Model::model_flops_per_step`, no recompute, causal attention) where that is lower — and
/// Narayanan et al. 2021 eq. 3's count (4 passes of every layer with all attention pairs, 3 of the
/// output layer: the recompute forward counted, as SC'21 and BLOOM count it), over step x GPUs;
/// `model.params_b` = the shape's parameters (`Model::params`); and
/// `hardware.peak_tflops_16bit` = the GPU profile's dense bf16 peak.
fn check_published_figures(
    run: &PublishedRun,
    model: &Model,
    cluster: &Cluster,
    published_step_s: f64,
) -> Result<(), String> {
    let show = crate::units::show_number;
    let step_key = if run.results.iteration_time_s.is_some() {
        "results.iteration_time_s"
    } else {
        "derived.iteration_time_s_from_eq3"
    };
    let batch = run.plan.global_batch_size;
    let seq = run.model.seq_len;
    let off = |given: f64, expected: f64| (given / expected - 1.0).abs();
    if let Some(given) = run.results.tokens_per_s {
        let expected = f64::from(batch) * f64::from(seq) / published_step_s;
        if !given.is_finite() || off(given, expected) > TOKENS_PER_S_TOLERANCE {
            return Err(format!(
                "results.tokens_per_s: {} contradicts the step time: plan.global_batch_size {batch} x model.seq_len {seq} / {step_key} {} s = {} tokens/s (rule: tokens/s = global batch x sequence length / step time, within {:.0}%); give the source's figures that agree, or results.tokens_per_s: null",
                show(given),
                show(published_step_s),
                crate::sweep::thousands(expected),
                TOKENS_PER_S_TOLERANCE * 100.0
            ));
        }
    }
    if let Some(given) = run.model.params_b {
        let expected = model.params() / 1e9;
        if !given.is_finite() || off(given, expected) > PARAMS_B_TOLERANCE {
            return Err(format!(
                "model.params_b: {} contradicts the shape, which has {expected:.2}B parameters (model.layers {}, model.hidden {}, {} {}; rule: within {:.0}% of the shape's count); give the source's count, fix the shape, or model.params_b: null",
                show(given),
                model.layers,
                model.hidden,
                if run.model.vocab_padded.is_some() {
                    "model.vocab_padded"
                } else {
                    "model.vocab"
                },
                model.vocab,
                PARAMS_B_TOLERANCE * 100.0
            ));
        }
    }
    if let Some(given) = run.results.tflops_per_gpu {
        let per_gpu_s = published_step_s * f64::from(run.hardware.num_gpus) * 1e12;
        let six_n = 6.0 * model.params() * f64::from(batch) * f64::from(seq);
        let low = six_n.min(model.model_flops_per_step(batch, seq).0) / per_gpu_s;
        let high = (4.0 * f64::from(model.layers) * model.layer_forward_flops(batch, seq).0
            + 3.0 * model.logits_forward_flops(batch, seq).0)
            / per_gpu_s;
        if !given.is_finite()
            || given < low * (1.0 - TFLOPS_TOLERANCE)
            || given > high * (1.0 + TFLOPS_TOLERANCE)
        {
            return Err(format!(
                "results.tflops_per_gpu: {} contradicts the step time: the shape's FLOPs over {step_key} {} s on hardware.num_gpus {} give {low:.1} (6 FLOPs per parameter and token, or the model FLOPs) to {high:.1} (Narayanan et al. 2021 eq. 3, recompute counted) TFLOP/s per GPU (rule: a published TFLOP/s counts the step's FLOPs one of these ways, within {:.0}%); give the source's figures that agree, or results.tflops_per_gpu: null",
                show(given),
                show(published_step_s),
                run.hardware.num_gpus,
                TFLOPS_TOLERANCE * 100.0
            ));
        }
    }
    if let Some(given) = run.hardware.peak_tflops_16bit {
        let profile = cluster.gpu.peak_bf16_tflops;
        if !given.is_finite() || off(given, profile) > 0.01 {
            return Err(format!(
                "hardware.peak_tflops_16bit: {} contradicts the GPU the run is evaluated on, {} with a dense 16-bit peak of {} TFLOP/s (rule: the peak the source's percentages are of is the GPU's); give {}, or hardware.peak_tflops_16bit: null",
                show(given),
                cluster.gpu.name,
                show(profile),
                show(profile)
            ));
        }
    }
    Ok(())
}

/// The run's GPU count against its plan and its nodes, said in the runs file's own keys (the plan
/// builder's message names `--dp` and a cluster of whole nodes the file never gave).
fn check_gpu_count(run: &PublishedRun) -> Result<(), String> {
    let hw = &run.hardware;
    let p = &run.plan;
    if let Some(cp) = p.cp.filter(|&cp| cp != 1) {
        return Err(format!(
            "plan.cp: {cp} is not supported in a published-runs file (rule: its runs are planned without context parallelism, cp null or 1); give cp: null, or write the run in the current-stack format (validation/modern_runs.yaml)"
        ));
    }
    let degrees = [("plan.tp", p.tp), ("plan.pp", p.pp), ("plan.dp", p.dp)];
    // Three u32 degrees multiply within u128 whatever their values.
    let product: u128 = degrees.iter().map(|(_, d)| u128::from(*d)).product();
    let gpus = u128::from(hw.num_gpus);
    if product != gpus {
        let terms: Vec<String> = degrees.iter().map(|(k, d)| format!("{k} {d}")).collect();
        let model_parallel = product / u128::from(p.dp);
        let dp_fix = if gpus.is_multiple_of(model_parallel) {
            format!(
                ", or plan.dp to {} if the GPU count is right",
                gpus / model_parallel
            )
        } else {
            format!(
                ", or plan.tp and plan.pp to degrees whose product divides {gpus} if the GPU count is right (no plan.dp works: {gpus} is not a multiple of plan.tp x plan.pp = {model_parallel})"
            )
        };
        return Err(format!(
            "hardware.num_gpus {} is not {} = {product} GPUs (rule: every GPU holds one shard of the plan); change hardware.num_gpus to {product}{dp_fix}",
            hw.num_gpus,
            terms.join(" x ")
        ));
    }
    if !hw.num_gpus.is_multiple_of(hw.gpus_per_node) {
        // The most GPUs per node that divides both: what a run on part of each node used.
        let a = crate::integer::gcd(u64::from(hw.num_gpus), u64::from(hw.gpus_per_node));
        return Err(format!(
            "hardware.num_gpus {} is not whole nodes of hardware.gpus_per_node {} (rule: a run uses whole nodes); change hardware.gpus_per_node to the GPUs the run used in each node, a divisor of {} such as {a}",
            hw.num_gpus, hw.gpus_per_node, hw.num_gpus
        ));
    }
    Ok(())
}

/// Evaluates every full-plan run in the YAML text; runs on hardware without a profile are skipped
/// ([`accuracy_with_skips`] says which and why).
pub fn accuracy(runs_yaml: &str, origin: &str) -> Result<Vec<AccuracyRow>, AccuracyError> {
    accuracy_with_skips(runs_yaml, origin).map(|(rows, _)| rows)
}

/// [`accuracy`], with the runs it skipped: a run that is not a full plan, is on hardware without
/// a profile or has no published step time is said in the second list (`run ID: why`), so no run
/// of the user's file is dropped without a word.
pub fn accuracy_with_skips(
    runs_yaml: &str,
    origin: &str,
) -> Result<(Vec<AccuracyRow>, Vec<String>), AccuracyError> {
    crate::input_file::check_depth(origin, runs_yaml).map_err(SpecError::from)?;
    specs::check_number_spellings(origin, runs_yaml)?;
    let runs: Vec<PublishedRun> = yaml_serde::from_str(runs_yaml).map_err(|err| {
        // The whole file is no list (a plan or model file, a mapping): said as the wrong kind of
        // file, with the two kinds `accuracy` reads, not as a bare type error.
        let raw = err.to_string();
        if raw.starts_with("invalid type: ") && raw.contains(", expected a sequence") {
            return AccuracyError::Spec(SpecError::Invalid {
                origin: origin.to_string(),
                message: "is not a runs file: a published-runs file is a list of runs (- id: ... lines, as validation/published_runs.yaml), and a current-stack runs file has top-level schema_version: and model_catalog: keys (as validation/modern_runs.yaml); give --runs one of those".into(),
            });
        }
        AccuracyError::Spec(specs::yaml_error(origin, runs_yaml, &err))
    })?;
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for run in runs {
        let id = crate::input_file::quote(&run.id);
        crate::modern_runs::check_run_id(&run.id).map_err(|message| AccuracyError::Run {
            id: id.clone(),
            message,
        })?;
        if run.completeness.as_deref() != Some("full_plan") {
            skipped.push(format!(
                "run {id}: completeness: {} is not full_plan, so the plan is not known in full (write completeness: full_plan once every degree is given)",
                run.completeness
                    .as_deref()
                    .map_or("(none)".to_string(), crate::input_file::quote)
            ));
            continue;
        }
        let Some(mut profile) = gpu_profile_for(&run.hardware.gpu) else {
            skipped.push(format!(
                "run {id}: hardware.gpu {:?} is no GPU this file's runs are evaluated on (an A100: a name with A100 or Jean Zay in it); for other GPUs give a current-stack runs file such as validation/modern_runs.yaml",
                run.hardware.gpu
            ));
            continue;
        };
        // An A100 40GB (said by the key, or by the name where the key is absent) is not the
        // 80 GB profile: its memory would be checked against twice what it has. A DGX A100 of
        // 40 GB parts is the bundled a100-sxm-40g (the same node, links and peaks); Jean Zay's
        // profile is its 80 GB partition, so its 40 GB nodes stay skipped.
        let memory_gb = run.hardware.gpu_memory_gb.or_else(|| {
            let name = run.hardware.gpu.replace(' ', "");
            name.contains("40GB").then_some(40.0)
        });
        if memory_gb == Some(40.0) && profile == "a100-sxm-80g" {
            profile = "a100-sxm-40g";
        }
        let profile_gb = if profile == "a100-sxm-40g" {
            40.0
        } else {
            80.0
        };
        if let Some(gb) = memory_gb.filter(|gb| *gb != profile_gb) {
            let said = match run.hardware.gpu_memory_gb {
                Some(_) => format!("hardware.gpu_memory_gb {}", crate::units::show_number(gb)),
                None => format!("hardware.gpu {:?}", run.hardware.gpu),
            };
            skipped.push(format!(
                "run {id}: {said} is not the memory of an A100 profile this file's runs are evaluated on ({profile}, {}; a100-sxm-40g takes 40 GB DGX A100 runs), so its memory would be checked against the wrong size; give runs on 80 GB or 40 GB A100s, or a current-stack runs file with its own GPU profile (validation/modern_runs.yaml)",
                crate::units::show_number(profile_gb) + " GB"
            ));
            continue;
        }
        let published = run.results.iteration_time_s.or(run
            .derived
            .as_ref()
            .and_then(|d| d.iteration_time_s_from_eq3));
        let Some(published_step_s) = published else {
            skipped.push(format!(
                "run {id}: no published step time (results.iteration_time_s or derived.iteration_time_s_from_eq3); add one"
            ));
            continue;
        };
        let fail = |message: String| AccuracyError::Run {
            id: crate::input_file::quote(&run.id),
            message,
        };
        check_run_numbers(&run, published_step_s).map_err(fail)?;
        let m = &run.model;
        let model = Model {
            rotary_base: None,
            name: run.id.clone(),
            layers: m.layers,
            hidden: m.hidden,
            heads: m.heads,
            kv_heads: m.kv_heads.unwrap_or(m.heads),
            head_dim: m.hidden.checked_div(m.heads).unwrap_or(0),
            // Saturating: a hidden size past u32 / 4 is refused by `check` as the run gives it,
            // not as the 0 that 4 x hidden wraps to.
            ffn_hidden: m.ffn_hidden.unwrap_or(m.hidden.saturating_mul(4)),
            vocab: m.vocab_padded.unwrap_or(m.vocab),
            seq_len: m.seq_len,
            gated_mlp: false,
            linear_bias: true,
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: true,
            position_embedding: if m.arch.contains("ALiBi") {
                PositionEmbedding::Alibi
            } else {
                PositionEmbedding::LearnedAbsolute
            },
            rotary_percent: None,
            norm: Norm::Layernorm,
            dropout: true,
            mla: None,
            moe: None,
            mtp_layers: 0,
            attention_window: None,
            hybrid: None,
        };
        let in_file_words =
            |message: String| in_runs_file_words(&message, m.vocab_padded.is_some());
        model
            .check()
            .map_err(|e| fail(in_file_words(e.to_string())))?;
        let gpu = specs::load_bundled_gpu(profile)?;
        let hw = &run.hardware;
        let cluster = Cluster {
            gpu,
            // Whole nodes: `check_run_numbers` refused any other count.
            nodes: hw.num_gpus / hw.gpus_per_node,
            gpus_per_node: hw.gpus_per_node,
        };
        check_published_figures(&run, &model, &cluster, published_step_s).map_err(fail)?;
        let mut training = Training::with_framework(
            crate::training::TrainingFramework::MegatronLm2021,
            m.seq_len,
            run.plan.global_batch_size,
            AttentionKernel::Unfused,
        );
        let p = &run.plan;
        // The 2022 `BF16_Optimizer` always accumulated in fp32 (`fp32_groups_gradients_flat`,
        // deepspeed@5ea1c60f8 runtime/bf16_optimizer.py); what its step and its tied all-reduce
        // read is that buffer.
        if p.deepspeed_bf16_optimizer == Some(true) {
            training.deepspeed_bf16_optimizer = true;
            training.grad_dtype = crate::training::GradDtype::Fp32;
        }
        check_precision(p.precision.as_deref()).map_err(fail)?;
        let request = PlanRequest {
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            vpp: vpp_of(p, m.layers).map_err(fail)?,
            micro_batch: p.micro_batch_size,
            sequence_parallel: p.sequence_parallel.unwrap_or(false),
            recompute: recompute_of(p.recompute.as_deref()).map_err(fail)?,
            zero: p.zero_stage.unwrap_or(0),
            allow_uneven_pp: true,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training)
            .map_err(|e| fail(in_file_words(e.to_string())))?;
        let estimate = evaluate(&model, &cluster, &training, &plan);
        let predicted_step_s = estimate.time.step_s.0;
        rows.push(AccuracyRow {
            id: run.id.clone(),
            gpu_profile: profile.to_string(),
            gpus: hw.num_gpus,
            // The label sweep and compare write (`sweep::plan_label`: sequence parallelism, the
            // recompute as plan's table writes it), and the run's global batch, which differs
            // from run to run.
            plan: {
                let label = crate::sweep::PlanLabel::of(&plan);
                format!(
                    "{} gbs{}",
                    crate::sweep::plan_label(&label, crate::sweep::LabelDims::of([&label], false)),
                    plan.global_batch
                )
            },
            published_step_s,
            predicted_step_s,
            error_of: ERROR_OF_STEP_S,
            error: predicted_step_s / published_step_s - 1.0,
            fits: estimate.memory.fits,
            predicted_memory_bytes: estimate.memory.total_bytes.0,
            estimate,
        });
    }
    Ok((rows, skipped))
}

/// One measured vTrain run (`validation/vtrain_ground_truth.json`), the subset of fields we use.
#[derive(Debug, Deserialize)]
struct VtrainRow {
    subset: String,
    model: VtrainModel,
    hardware: VtrainHardware,
    plan: VtrainPlan,
    results: VtrainResults,
    flags: VtrainFlags,
}

#[derive(Debug, Deserialize)]
struct VtrainModel {
    layers: u32,
    hidden: u32,
    heads: u32,
    ffn_hidden: u32,
    vocab: u32,
    seq_len: u32,
}

#[derive(Debug, Deserialize)]
struct VtrainHardware {
    num_gpus: u32,
    gpus_per_node: u32,
    interconnect: VtrainInterconnect,
}

#[derive(Debug, Deserialize)]
struct VtrainInterconnect {
    #[serde(rename = "inter_node_Gbps")]
    inter_node_gbps: f64,
}

#[derive(Debug, Deserialize)]
struct VtrainPlan {
    tp: u32,
    pp: u32,
    dp: u32,
    micro_batch_size: u32,
    global_batch_size: u32,
}

#[derive(Debug, Deserialize)]
struct VtrainResults {
    iteration_time_s: f64,
}

#[derive(Debug, Deserialize)]
struct VtrainFlags {
    tp_spans_nodes: bool,
}

/// A vTrain scenario ready to evaluate, with its measured step time.
pub struct VtrainCase {
    pub subset: String,
    pub model: Model,
    pub cluster: Cluster,
    pub training: Training,
    pub plan: ParallelPlan,
    pub measured_step_s: f64,
}

/// Reads vTrain's measured runs as scenarios on the given A100 profile, with the inter-node
/// bandwidth the row states (vTrain's configs: 800 Gb/s per node). Rows whose TP group spans nodes
/// are left out (vTrain's own doubts; see vtrain_ground_truth.md). All runs use full recompute and
/// plain 1F1B (`use_checkpoint true`, `pipeline_scheduling 1f1b`).
pub fn vtrain_cases(
    json: &str,
    a100: &crate::cluster::GpuProfile,
) -> Result<Vec<VtrainCase>, serde_json::Error> {
    let rows: Vec<VtrainRow> = serde_json::from_str(json)?;
    let mut cases = Vec::new();
    for row in rows.into_iter().filter(|r| !r.flags.tp_spans_nodes) {
        let m = &row.model;
        let model = Model {
            rotary_base: None,
            name: "vtrain".into(),
            layers: m.layers,
            hidden: m.hidden,
            heads: m.heads,
            kv_heads: m.heads,
            head_dim: m.hidden.checked_div(m.heads).unwrap_or(0),
            ffn_hidden: m.ffn_hidden,
            vocab: m.vocab,
            seq_len: m.seq_len,
            gated_mlp: false,
            linear_bias: true,
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: true,
            position_embedding: PositionEmbedding::LearnedAbsolute,
            rotary_percent: None,
            norm: Norm::Layernorm,
            dropout: true,
            mla: None,
            moe: None,
            mtp_layers: 0,
            attention_window: None,
            hybrid: None,
        };
        let hw = &row.hardware;
        let mut gpu = a100.clone();
        gpu.network_gb_per_s = hw.interconnect.inter_node_gbps / 8.0 / f64::from(hw.gpus_per_node);
        let gpus_per_node = hw.gpus_per_node.min(hw.num_gpus);
        let cluster = Cluster {
            gpu,
            nodes: hw.num_gpus.div_ceil(gpus_per_node),
            gpus_per_node,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronLm2021,
            m.seq_len,
            row.plan.global_batch_size,
            AttentionKernel::Unfused,
        );
        let p = &row.plan;
        let request = PlanRequest {
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            vpp: 1,
            micro_batch: p.micro_batch_size,
            sequence_parallel: false,
            recompute: Recompute::Full,
            zero: 0,
            allow_uneven_pp: true,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        if let Ok(plan) = ParallelPlan::build(&request, &model, &cluster, &training) {
            cases.push(VtrainCase {
                subset: row.subset,
                model,
                cluster,
                training,
                plan,
                measured_step_s: row.results.iteration_time_s,
            });
        }
    }
    Ok(cases)
}

/// Mean squared log error of predicted vs measured step time over `cases`, with the framework
/// constants set to the given values: the objective `validation/FIT.md` minimises.
pub fn vtrain_msle(cases: &[VtrainCase], framework_efficiency: f64, layer_overhead_us: f64) -> f64 {
    let mut sum = 0.0;
    for case in cases {
        let mut cluster = case.cluster.clone();
        cluster.gpu.framework_efficiency = framework_efficiency;
        cluster.gpu.layer_overhead_us = layer_overhead_us;
        let predicted = evaluate(&case.model, &cluster, &case.training, &case.plan)
            .time
            .step_s
            .0;
        let log_ratio = (case.measured_step_s / predicted).ln();
        sum += log_ratio * log_ratio;
    }
    sum / cases.len().max(1) as f64
}
