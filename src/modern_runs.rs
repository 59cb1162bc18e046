//! Published runs on current stacks (`validation/modern_runs.yaml`: NVIDIA's DGX benchmark recipes,
//! NeMo, Megatron-Bridge, torchtitan, NeMo AutoModel; see `validation/modern_runs.md`): each run
//! that tpsim can express is planned with its published plan pinned and the unstated settings
//! (recompute, ZeRO, expert TP) left to the search, and compared in tokens/s per GPU, which does not
//! depend on how a source counts FLOPs (modern_runs.md, caveat 1).

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

mod pair_order;
mod recipes;

pub use pair_order::{PUBLISHED_GAP, PairOrder, pair_order};

use recipes::{
    automodel_config_ep, framework_of, kernel_fusion_of, loss_kernel_of, mtp_layers_of,
    pipeline_defaults, recipe_fp8_scaling, recipe_grad_dtype, recipe_moe_dispatch,
    recipe_optimizer_states, recipe_overlaps_moe_alltoall, recipe_recompute_modules,
    recipe_stage_split, stated_recompute,
};

use crate::cluster::Cluster;
use crate::model::{Model, ModelFile, ShapeOverrides};
use crate::plan::{Precision, Recompute};
use crate::planner::{Pins, SearchOptions, StageSplitPin, refine_top, search};
use crate::specs;
use crate::training::{AttentionKernel, Training, TrainingFramework};

// Every struct below refuses keys it does not know (a typo such as `num_gpu:` would otherwise be
// dropped and the run planned on a default), as every other input file does. Keys the file
// carries for people and that tpsim does not read are listed as `IgnoredAny`: known, so
// accepted, and never read.

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModernRunsFile {
    pub schema_version: u32,
    pub runs: Vec<ModernRun>,
    #[serde(default)]
    pub generated: IgnoredAny,
    #[serde(default)]
    pub description: IgnoredAny,
    #[serde(default)]
    pub conventions: IgnoredAny,
    /// The models the runs come from; each run carries its own shape, which is what tpsim reads.
    #[serde(default)]
    pub model_catalog: IgnoredAny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModernRun {
    pub id: String,
    /// Where the run was published.
    #[serde(default)]
    pub source: RunSource,
    pub task: String,
    #[serde(default)]
    pub model_key: Option<String>,
    pub model: RunModel,
    pub hardware: RunHardware,
    pub plan: RunPlan,
    pub results: RunResults,
    #[serde(default)]
    pub flags: Vec<String>,
    /// What the source says beside the table (settings read from the run's config, caveats).
    #[serde(default)]
    pub notes: Vec<String>,
    #[serde(default)]
    pub model_source: IgnoredAny,
    /// The bundled MoE model of `model_key`, loaded once by [`parse_runs_file`]'s check of
    /// `model.moe` and priced by [`plan_run`] (`None` for a dense run, or a run read otherwise:
    /// [`plan_run`] loads it then).
    #[serde(skip)]
    bundled_moe_model: Option<Model>,
}

/// Why a runs file is refused: its YAML (at file:line:column, as every input file's), or a run id
/// given twice.
#[derive(Debug, thiserror::Error)]
pub enum RunsFileError {
    #[error(transparent)]
    Yaml(#[from] specs::SpecError),
    #[error(
        "{at}: run id {id} is given twice (first at line {first}); each run needs its own id (a run given twice counts twice in the summary): rename or remove one of them"
    )]
    DuplicateId {
        /// `file:line` of the second run with the id.
        at: String,
        id: String,
        first: usize,
    },
    #[error(
        "{origin}: runs: lists no runs, so there is nothing to predict; add runs under runs: (each - id: with source, model, hardware, plan and results, as in validation/modern_runs.yaml)"
    )]
    NoRuns { origin: String },
    #[error(
        "{origin}: schema_version: {given} is not a schema tpsim reads (rule: the runs files it reads, validation/modern_runs.yaml and its kin, are schema_version: {RUNS_SCHEMA_VERSION}, whose keys it knows); write the file in that schema with schema_version: {RUNS_SCHEMA_VERSION}"
    )]
    Schema { origin: String, given: u32 },
    #[error("{origin}: run {id}: {message}")]
    Number {
        origin: String,
        id: String,
        message: String,
    },
}

/// The runs-file schema tpsim reads (`schema_version: 1` in validation/modern_runs.yaml,
/// mbridge_26_runs.yaml and mcore_moe_report.yaml): a file of another version (`schema_version:
/// 9`) was read as this one without a word.
pub const RUNS_SCHEMA_VERSION: u32 = 1;

/// The published numbers a prediction is divided by, each in its range: a tiny one would make
/// the error infinite (`+inf`, `inf%`), a NaN would print as `NaN`.
const PUBLISHED_TOKENS_PER_S_PER_GPU: crate::cluster::Range = crate::cluster::Range::new(
    "results.tokens_per_s_per_gpu",
    1e-3,
    1e8,
    "tokens/s",
    "rule: a GPU trains a positive number of tokens a second, at most 100 million",
);
const PUBLISHED_PEAK_MEMORY_GIB: crate::cluster::Range = crate::cluster::Range::new(
    "results.peak_memory_gib",
    1e-3,
    1e5,
    "GiB",
    "rule: a GPU's peak memory is positive, at most 100000 GiB; null when the source does not state it",
);
/// The same peak in GB (1e9 bytes), the unit the runs file's conventions give it in.
const PUBLISHED_PEAK_MEMORY_GB: crate::cluster::Range = crate::cluster::Range::new(
    "results.peak_memory_gb",
    1e-3,
    1e5,
    "GB",
    "rule: a GPU's peak memory is positive, at most 100000 GB; null when the source does not state it",
);
/// The source's FLOPs per token: a NaN, zero or negative one compared as no match and chose the
/// layout without multi-token prediction without a word.
const PUBLISHED_MODEL_FLOPS_PER_TOKEN: crate::cluster::Range = crate::cluster::Range::new(
    "results.implied_model_flops_per_token",
    1.0,
    1e17,
    "FLOPs",
    "rule: a token costs a positive number of FLOPs, at most 1e17 (1000x a 2T-parameter model's); null when the source does not state it",
);

/// The source's numbers beside the tokens/s that tpsim does not compare, each in the range it can
/// be true in (null when the source does not state it).
const PUBLISHED_OTHER_NUMBERS: [crate::cluster::Range; 5] = [
    crate::cluster::Range::new(
        "results.mfu",
        1e-3,
        1.0,
        "",
        "rule: the fraction of the GPU's peak FLOP/s the run reached, above 0 and at most 1, so 0.45 for 45%; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.step_time_s",
        1e-4,
        1e6,
        "s",
        "rule: a training step takes a positive time, at most 1e6 s (11.6 days); null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.model_tflops_per_gpu",
        1e-3,
        1e5,
        "TFLOP/s",
        "rule: a GPU computes a positive number of model FLOP/s, at most 100000 TFLOP/s; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.mfu_peak_tflops",
        1.0,
        1e5,
        "TFLOP/s",
        "rule: the GPU peak the source divides by for its MFU, positive, at most 100000 TFLOP/s; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.tokens_per_s_total",
        1e-3,
        1e14,
        "tokens/s",
        "rule: a run trains a positive number of tokens a second, at most 100 million per GPU on a million GPUs; null when the source does not state it",
    ),
];

/// Parses a current-stack runs file (`validation/modern_runs.yaml`'s format): unknown keys and
/// repeated run ids are refused.
pub fn parse_runs_file(text: &str, origin: &str) -> Result<ModernRunsFile, RunsFileError> {
    crate::input_file::check_depth(origin, text).map_err(specs::SpecError::from)?;
    specs::check_number_spellings(origin, text)?;
    let mut file: ModernRunsFile =
        yaml_serde::from_str(text).map_err(|err| specs::yaml_error(origin, text, &err))?;
    if file.schema_version != RUNS_SCHEMA_VERSION {
        return Err(RunsFileError::Schema {
            origin: origin.to_string(),
            given: file.schema_version,
        });
    }
    // An empty list printed an empty table and exit 0, as if every run had been checked.
    if file.runs.is_empty() {
        return Err(RunsFileError::NoRuns {
            origin: origin.to_string(),
        });
    }
    check_unique_ids(text, origin, file.runs.iter().map(|r| r.id.as_str()))?;
    for run in &mut file.runs {
        let results = &run.results;
        check_run_id(&run.id)
            .and_then(|()| {
                [
                    (PUBLISHED_TOKENS_PER_S_PER_GPU, results.tokens_per_s_per_gpu),
                    (PUBLISHED_PEAK_MEMORY_GIB, results.peak_memory_gib),
                    (PUBLISHED_PEAK_MEMORY_GB, results.peak_memory_gb),
                    (
                        PUBLISHED_MODEL_FLOPS_PER_TOKEN,
                        results.implied_model_flops_per_token,
                    ),
                ]
                .into_iter()
                .chain(PUBLISHED_OTHER_NUMBERS.into_iter().zip([
                    results.mfu,
                    results.step_time_s,
                    results.model_tflops_per_gpu,
                    results.mfu_peak_tflops,
                    results.tokens_per_s_total,
                ]))
                .filter_map(|(range, value)| Some(range.check(value?)))
                .collect::<Result<(), String>>()
            })
            .and_then(|()| check_peak_units(results))
            .and_then(|()| check_run_zero(run))
            .and_then(|()| check_run_ga(run))
            .and_then(|()| check_run_task(&run.task))
            .and_then(|()| recipes::check_id_release(&run.id))
            .and_then(|()| check_run_recompute(run))
            .and_then(|()| check_run_precision(run))
            .and_then(|()| check_run_hybrid(run))
            .and_then(|()| check_run_moe(run))
            .map_err(|message| RunsFileError::Number {
                origin: origin.to_string(),
                id: crate::input_file::quote(&run.id),
                message,
            })
            .map(|model| run.bundled_moe_model = model)?;
    }
    Ok(file)
}

/// A peak stated in both units is one peak: GB and GiB that disagree (past the rounding of one
/// decimal) leave which one the source meant unclear.
fn check_peak_units(results: &RunResults) -> Result<(), String> {
    if let (Some(gb), Some(gib)) = (results.peak_memory_gb, results.peak_memory_gib)
        && (gb * 1e9 / (gib * crate::units::GIB) - 1.0).abs() > 0.01
    {
        return Err(format!(
            "results.peak_memory_gb: {} and results.peak_memory_gib: {} disagree ({} GB is {:.1} GiB; rule: one peak in two units, GB = 1e9 bytes, GiB = 2^30); correct the one that is wrong or drop it",
            crate::units::show_number(gb),
            crate::units::show_number(gib),
            crate::units::show_number(gb),
            gb * 1e9 / crate::units::GIB
        ));
    }
    Ok(())
}

/// A run's `plan.zero`, which the file carries for people (tpsim reads `fsdp`): null, the
/// source's words (`FSDP2 (fully_shard)`), or a ZeRO stage, 0 to 3. Read as any value, `zero: 7`
/// or `zero: 1.5` passed without a word.
fn check_run_zero(run: &ModernRun) -> Result<(), String> {
    let refuse = |shown: String| {
        Err(format!(
            "plan.zero: {shown} is not a ZeRO stage (rule: a whole number 0 to 3, or the source's words such as FSDP2 (fully_shard); null when the source does not say); write the stage the run used, e.g. zero: 1, or null"
        ))
    };
    match &run.plan.zero {
        None | Some(yaml_serde::Value::Null) => Ok(()),
        Some(yaml_serde::Value::Number(n)) => match n.as_u64() {
            Some(0..=3) => Ok(()),
            _ => refuse(n.to_string()),
        },
        // Words, unless they are a number: `zero: "7"` is the stage 7 quoted.
        Some(yaml_serde::Value::String(text)) => match text.trim().parse::<f64>() {
            Ok(stage) if !(stage.fract() == 0.0 && (0.0..=3.0).contains(&stage)) => {
                refuse(crate::input_file::quote(text))
            }
            _ if text.trim().is_empty() => refuse(crate::input_file::quote(text)),
            _ => Ok(()),
        },
        Some(yaml_serde::Value::Bool(b)) => refuse(b.to_string()),
        Some(yaml_serde::Value::Sequence(_)) => refuse("a list".into()),
        Some(yaml_serde::Value::Mapping(_)) => refuse("a mapping".into()),
        Some(yaml_serde::Value::Tagged(_)) => refuse("a tagged value".into()),
    }
}

/// A Megatron-Core row's `plan.ga`, when given beside its micro-batch, is the micro-batches each
/// data-parallel rank runs per step, gbs / (dp x mbs): Megatron derives it, so a `ga` that says
/// otherwise was ignored without a word. A row flagged as inconsistent in its source is left out
/// (`excluded`) and not checked.
fn check_run_ga(run: &ModernRun) -> Result<(), String> {
    let p = &run.plan;
    if framework_of(run) != TrainingFramework::MegatronCore || flagged(run).is_some() {
        return Ok(());
    }
    let (Some(ga), Some(mbs), Some(gbs)) = (p.ga, p.mbs, p.gbs) else {
        return Ok(());
    };
    let dp = p.dp.unwrap_or(1);
    // Zero degrees and batches that are not whole micro-batches have their own refusals.
    let per_step = u64::from(dp) * u64::from(mbs);
    if per_step == 0 || !u64::from(gbs).is_multiple_of(per_step) {
        return Ok(());
    }
    let derived = u64::from(gbs) / per_step;
    if u64::from(ga) != derived {
        return Err(format!(
            "plan.ga: {ga} contradicts plan.gbs: {gbs} / (plan.dp: {dp} x plan.mbs: {mbs}) = {derived} (rule: Megatron-Core runs gbs / (dp x mbs) micro-batches per data-parallel rank each step, so ga is that); give the published values, e.g. ga: {derived}, or add flags: [source_inconsistency] where the source itself gives these numbers"
        ));
    }
    Ok(())
}

/// A run's `plan.recompute`, when given, is one [`recipes::stated_recompute`] reads: text it
/// does not ("ful AC", "bogus") would be left to the search as if unstated, pricing another
/// recompute than the source's without a word (the published runs file refuses it too).
fn check_run_recompute(run: &ModernRun) -> Result<(), String> {
    match run.plan.recompute.as_deref() {
        Some(text) if stated_recompute(text).is_none() => Err(format!(
            "plan.recompute: {} is not a recompute tpsim reads (rule: none, text starting with full, or text naming selective; null when the source does not say, which leaves it to the search); write e.g. recompute: full AC, recompute: selective AC, or null",
            crate::input_file::quote(text)
        )),
        _ => Ok(()),
    }
}

/// A run's `task`, where it spells pretraining otherwise than `pretrain` (`Pretrain`,
/// `pre-train`, `pretraining`) or is blank: the run was left out as a fine-tuning run, with the
/// note "Pretrain run (packed sequences, other FLOPs)" (" run ..." for a blank one). Other tasks
/// (`sft`, as NeMo's SFT rows; `lora`) are still left out as fine-tuning.
fn check_run_task(task: &str) -> Result<(), String> {
    let letters: String = task
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    if letters.is_empty() {
        return Err(format!(
            "task: {} names no task (rule: pretrain is the task tpsim predicts; any other, such as sft, is left out as fine-tuning); write task: pretrain, or the run's task",
            crate::input_file::quote(task)
        ));
    }
    if task != "pretrain" && letters.starts_with("pretrain") {
        return Err(format!(
            "task: {} is not written as tpsim reads it (rule: pretrain, in lower case, is the task it predicts; any other, such as sft, is left out as fine-tuning); write task: pretrain",
            crate::input_file::quote(task)
        ));
    }
    Ok(())
}

/// A run's `id`, which the accuracy table shows as it is: an escape sequence in it reached the
/// terminal (`\x1b` colored the rest of the table) and a bidirectional override printed the row
/// backwards; a blank one named no run.
pub(crate) fn check_run_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("id: is blank (rule: every run has an id, which names it in the accuracy table); write one, e.g. id: my-run-8g-bf16".into());
    }
    if id
        .chars()
        .any(|c| c.is_control() || crate::input_file::is_bidi_control(c))
    {
        return Err("id: holds a control character (rule: the id names the run in the accuracy table, where it would garble the output); write it with visible characters only, e.g. id: my-run-8g-bf16".into());
    }
    Ok(())
}

/// A run's `plan.precision`, when given, is one tpsim prices: a typo (`fp7`) left the run out
/// with the note "precision fp7", naming neither the rule nor the fix.
fn check_run_precision(run: &ModernRun) -> Result<(), String> {
    match run.plan.precision.as_deref() {
        Some(text) if precision_of(text).is_err() => {
            let valid: Vec<&str> = Precision::ALL.iter().map(|p| p.as_str()).collect();
            Err(format!(
                "plan.precision: {} is not a precision tpsim reads (rule: one of {}; null for bf16); write e.g. precision: {}",
                crate::input_file::quote(text),
                valid.join(", "),
                closest_precision(text)
            ))
        }
        _ => Ok(()),
    }
}

/// The precision `text` most likely meant: the one it starts with or contains, else bf16.
fn closest_precision(text: &str) -> &'static str {
    let lower = text.to_ascii_lowercase();
    Precision::ALL
        .iter()
        .rev()
        .map(|p| p.as_str())
        .find(|p| lower == *p || lower.contains(p))
        .unwrap_or("bf16")
}

/// A run's `model.moe` as JSON, refusing a non-finite number in it: read straight into a JSON
/// value, `.nan` and `.inf` became null, so `moe: .inf` priced the run as dense and
/// `experts: .nan` was taken as not given, without a word.
fn finite_moe<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    fn non_finite(value: &yaml_serde::Value) -> Option<f64> {
        match value {
            yaml_serde::Value::Number(n) => n.as_f64().filter(|f| !f.is_finite()),
            yaml_serde::Value::Sequence(items) => items.iter().find_map(non_finite),
            yaml_serde::Value::Mapping(map) => map.values().find_map(non_finite),
            yaml_serde::Value::Tagged(tagged) => non_finite(&tagged.value),
            _ => None,
        }
    }
    let Some(value) = Option::<yaml_serde::Value>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if let Some(bad) = non_finite(&value) {
        return Err(serde::de::Error::custom(format!(
            "moe holds {}, which is not a finite number (rule: an MoE run lists whole counts; a dense run has moe: null); write the run's MoE numbers, or moe: null",
            crate::cluster::show_number(bad)
        )));
    }
    serde_json::to_value(value)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The keys of a run's `model.moe` (`validation/modern_runs.yaml`'s catalog writes each).
const RUN_MOE_KEYS: [&str; 5] = [
    "experts",
    "topk",
    "expert_ffn_hidden",
    "shared_experts",
    "moe_layers",
];

/// A run's `model.moe` against the bundled model tpsim prices the run with ([`bundled_moe`]):
/// its keys are [`RUN_MOE_KEYS`], and each number given is the bundled model's (a run whose
/// `model_key` has no bundled model is said not predicted, in its row). Gives the bundled model
/// it loaded, for [`plan_run`] to price the run with.
fn check_run_moe(run: &ModernRun) -> Result<Option<Model>, String> {
    let Some(moe) = run.model.moe.as_ref().filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let bundled = run.model_key.as_deref().and_then(bundled_moe);
    let Some(map) = moe.as_object() else {
        return Err(format!(
            "model.moe: {moe} is not a mapping (rule: an MoE run lists {}; a dense run has moe: null); write the run's MoE numbers, or moe: null",
            RUN_MOE_KEYS.join(", ")
        ));
    };
    if let Some(key) = map.keys().find(|k| !RUN_MOE_KEYS.contains(&k.as_str())) {
        let file = bundled.map_or(String::new(), |name| format!(" (models/{name}.yaml)"));
        return Err(format!(
            "model.moe.{key} is not a key of a run's moe (rule: it lists {}; the model's other MoE settings, such as glu_clamp_limit, are its bundled model file's{file}); remove it",
            RUN_MOE_KEYS.join(", ")
        ));
    }
    let Some(name) = bundled else {
        return Ok(None);
    };
    let model = specs::load_bundled_model(name).map_err(|e| e.to_string())?;
    // The layer count may differ: the weak-scaling proxies truncate the bundled model.
    check_bundled_shape(run, &model, name, "MoE", false)?;
    let Some(ours) = model.moe else {
        return Ok(Some(model));
    };
    let shared_experts = ours
        .shared_expert_ffn_hidden
        .checked_div(ours.ffn_hidden)
        .unwrap_or(0);
    for (key, value, what) in [
        ("experts", ours.experts, "routed experts"),
        ("topk", ours.router_topk, "experts per token"),
        ("expert_ffn_hidden", ours.ffn_hidden, "expert MLP width"),
        ("shared_experts", shared_experts, "shared experts"),
        ("moe_layers", model.moe_layers(), "MoE layers"),
    ] {
        let Some(given) = map.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        if given.as_u64() != Some(u64::from(value)) {
            return Err(format!(
                "model.moe.{key}: {given} is not the {value} {what} of the bundled {name} that tpsim prices model_key {} with (rule: a current-stack MoE run is priced as its bundled model, models/{name}.yaml); write the bundled value, e.g. {key}: {value}, or null",
                run.model_key.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(Some(model))
}

/// A run's stated shape against the bundled model tpsim prices it with (an MoE run's
/// [`bundled_moe`], a hybrid run's [`bundled_hybrid`]): each number given (not null) must be the
/// bundled model's, or the run would be priced as a model other than the one its row states
/// without a word. `with_layers` checks the layer count too (an MoE run may truncate it).
fn check_bundled_shape(
    run: &ModernRun,
    model: &Model,
    name: &str,
    kind: &str,
    with_layers: bool,
) -> Result<(), String> {
    let m = &run.model;
    let layers = if with_layers { m.layers } else { None };
    for (key, given, ours) in [
        ("layers", layers, model.layers),
        ("hidden", m.hidden, model.hidden),
        ("heads", m.heads, model.heads),
        ("kv_heads", m.kv_heads, model.kv_heads),
        ("head_dim", m.head_dim, model.head_dim),
        ("ffn_hidden", m.ffn_hidden, model.ffn_hidden),
        ("vocab", m.vocab, model.vocab),
    ] {
        if let Some(given) = given
            && given != ours
        {
            return Err(format!(
                "model.{key}: {given} is not the {ours} of the bundled {name} that tpsim prices model_key {} with (rule: a current-stack {kind} run is priced as its bundled model, models/{name}.yaml); write the bundled value, e.g. {key}: {ours}, or null",
                run.model_key.as_deref().unwrap_or_default(),
            ));
        }
    }
    Ok(())
}

/// A hybrid Mamba-Transformer run (`model_key` of a [`bundled_hybrid`] model) is priced as its
/// bundled model whatever its row says: the shape it states must be that model's, and its
/// `model.moe` null (the bundled model carries its experts and their latent width, which a run's
/// moe keys cannot say).
fn check_run_hybrid(run: &ModernRun) -> Result<(), String> {
    let Some(name) = run.model_key.as_deref().and_then(bundled_hybrid) else {
        return Ok(());
    };
    let model = specs::load_bundled_model(name).map_err(|e| e.to_string())?;
    check_bundled_shape(run, &model, name, "hybrid", true)?;
    if let Some(moe) = run.model.moe.as_ref().filter(|v| !v.is_null()) {
        return Err(format!(
            "model.moe: {moe} is given for model_key {}, which tpsim prices as the bundled {name} with its own experts (rule: a current-stack hybrid run is priced as its bundled model, models/{name}.yaml); write moe: null",
            run.model_key.as_deref().unwrap_or_default(),
        ));
    }
    Ok(())
}

/// Refuses a run id given twice in the runs file `text` (either format: each run is a mapping with
/// an `id:` key), naming the line of each.
pub fn check_unique_ids<'a>(
    text: &str,
    origin: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<(), RunsFileError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if seen.insert(id) {
            continue;
        }
        let lines = id_lines(text, id);
        let first = lines.first().copied().unwrap_or(0);
        let at = match lines.get(1) {
            Some(line) => format!("{origin}:{line}"),
            None => origin.to_string(),
        };
        return Err(RunsFileError::DuplicateId {
            at,
            id: crate::input_file::quote(id),
            first,
        });
    }
    Ok(())
}

/// The 1-based lines of `text` whose key is `id:` (after any `- ` sequence markers) and whose
/// value, unquoted, is `id`.
fn id_lines(text: &str, id: &str) -> Vec<usize> {
    let unquote = |v: &str| {
        let v = v.trim();
        for q in ['"', '\''] {
            if let Some(inner) = v.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
                return inner.to_string();
            }
        }
        v.split(" #").next().unwrap_or(v).trim_end().to_string()
    };
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let mut key = line.trim_start();
            while let Some(rest) = key.strip_prefix("- ") {
                key = rest.trim_start();
            }
            let value = key.strip_prefix("id:")?;
            (unquote(value) == id).then_some(i + 1)
        })
        .collect()
}

/// The publication a run comes from, as the runs file cites it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSource {
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    #[serde(default)]
    pub table: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub repo: IgnoredAny,
    /// The file in `repo` the table is in, and the version it was read at: with `ref`, what names
    /// one published document (`pair_order` compares runs of one document). Any YAML value.
    #[serde(default)]
    pub path: Option<serde_json::Value>,
    #[serde(default)]
    pub commit_or_version: Option<serde_json::Value>,
}

impl RunSource {
    /// "reference, table, url" with what the file gives.
    pub fn describe(&self) -> String {
        let parts: Vec<&str> = [&self.reference, &self.table, &self.url]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if parts.is_empty() {
            "source not stated".into()
        } else {
            parts.join("; ")
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunModel {
    pub name: String,
    #[serde(default)]
    pub layers: Option<u32>,
    #[serde(default)]
    pub hidden: Option<u32>,
    #[serde(default)]
    pub heads: Option<u32>,
    #[serde(default)]
    pub kv_heads: Option<u32>,
    #[serde(default)]
    pub ffn_hidden: Option<u32>,
    #[serde(default)]
    pub vocab: Option<u32>,
    #[serde(default, deserialize_with = "finite_moe")]
    pub moe: Option<serde_json::Value>,
    #[serde(default)]
    pub seq_len: Option<u32>,
    #[serde(default)]
    pub params_b: IgnoredAny,
    #[serde(default)]
    pub active_params_b: IgnoredAny,
    /// The width of one attention head (null: hidden / heads); a dense run is built with it, an
    /// MoE run's must be its bundled model's.
    #[serde(default)]
    pub head_dim: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunHardware {
    pub gpu: String,
    /// The host as the source describes it ("Grand Teton, 8x H100 96GB HBM2e per host, 500W power limit, ...").
    #[serde(default)]
    pub system: Option<String>,
    pub num_gpus: u32,
    pub gpus_per_node: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunPlan {
    #[serde(default)]
    pub tp: Option<u32>,
    #[serde(default)]
    pub pp: Option<u32>,
    #[serde(default)]
    pub cp: Option<u32>,
    #[serde(default)]
    pub vp: Option<u32>,
    #[serde(default)]
    pub ep: Option<u32>,
    #[serde(default)]
    pub etp: Option<u32>,
    #[serde(default)]
    pub dp: Option<u32>,
    #[serde(default)]
    pub mbs: Option<u32>,
    #[serde(default)]
    pub gbs: Option<u32>,
    /// Gradient-accumulation steps (local batches per optimizer step, as AutoModel's table
    /// states them).
    #[serde(default)]
    pub ga: Option<u32>,
    #[serde(default)]
    pub precision: Option<String>,
    /// The precision as the source spells it ("float8 rowwise", "Float8 (torchao)", ...).
    #[serde(default)]
    pub precision_raw: Option<String>,
    #[serde(default)]
    pub recompute: Option<String>,
    /// Whether the run shards with FSDP (ZeRO-3); null when the source does not say. A boolean:
    /// read as any value, `fsdp: yes` or `fsdp: 1` was silently no FSDP.
    #[serde(default)]
    pub fsdp: Option<bool>,
    /// Overlap and compile settings the source states ("torch.compile, async TP", ...).
    #[serde(default)]
    pub overlap: Option<String>,
    #[serde(default)]
    pub dp_derived: IgnoredAny,
    #[serde(default)]
    pub ga_derived: IgnoredAny,
    #[serde(default)]
    pub fsdp_raw: IgnoredAny,
    /// The ZeRO stage or sharding the source states, for people (`FSDP2 (fully_shard)`; what
    /// tpsim reads is `fsdp`): read as any value, `zero: 7` passed without a word
    /// ([`check_run_zero`]).
    #[serde(default)]
    pub zero: Option<yaml_serde::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResults {
    #[serde(default)]
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Peak memory per GPU the source reports, in GiB (torchtitan logs the caching allocator's
    /// peak reserved memory, the largest over the GPUs).
    #[serde(default)]
    pub peak_memory_gib: Option<f64>,
    /// Model FLOPs per token by the source's own count (its TFLOP/s over its tokens/s).
    #[serde(default)]
    pub implied_model_flops_per_token: Option<f64>,
    // The source's other numbers, for people: tpsim compares tokens/s per GPU only. Read as
    // any value, an MFU of 1.5 or NaN, a step of 0 s or a negative TFLOP/s passed without a
    // word; each is checked against its range (`PUBLISHED_OTHER_NUMBERS`).
    #[serde(default)]
    pub tokens_per_s_total: Option<f64>,
    #[serde(default)]
    pub model_tflops_per_gpu: Option<f64>,
    #[serde(default)]
    pub mfu: Option<f64>,
    #[serde(default)]
    pub mfu_peak_tflops: Option<f64>,
    #[serde(default)]
    pub step_time_s: Option<f64>,
    /// The same peak in GB (1e9 bytes), the unit the file's conventions name: used where no
    /// `peak_memory_gib` is given (it was ignored, so a run stating its peak in GB only was
    /// compared on speed alone without a word).
    #[serde(default)]
    pub peak_memory_gb: Option<f64>,
    #[serde(default)]
    pub flop_accounting: IgnoredAny,
    #[serde(default)]
    pub derived_fields: IgnoredAny,
}

/// One run's prediction, or why tpsim cannot express it.
#[derive(Debug, Clone, Serialize)]
pub struct ModernPrediction {
    pub id: String,
    /// The source family: dgxc, nemo, mbridge, torchtitan, automodel.
    pub source: String,
    pub gpu: String,
    /// The bundled profile the run is planned on (`hardware_profile`), if any.
    pub gpu_profile: Option<String>,
    pub moe: bool,
    /// The source's tokens/s per GPU (`results.tokens_per_s_per_gpu`); None where it states none
    /// (NeMo's long-context table gives step times only), which the table writes "-" and the
    /// JSON null: read as 0, 17 rows of validation/modern_runs.yaml said "published 0".
    pub published_tokens_per_s_per_gpu: Option<f64>,
    pub predicted_tokens_per_s_per_gpu: Option<f64>,
    /// The quantity `error` compares: "tokens_per_s_per_gpu", so a positive error is a prediction
    /// faster than published (the SC'21/BLOOM file's rows compare step times, `ERROR_OF_STEP_S`,
    /// where a negative one is).
    pub error_of: &'static str,
    /// predicted / published − 1.
    pub error: Option<f64>,
    /// The chosen plan's settings the source left open, or why nothing was predicted.
    pub note: String,
    /// Peak memory per GPU the source reports, in bytes (the runs file's `peak_memory_gib` ×
    /// 2^30), where it does; in bytes as `plan`'s JSON says memory (`memory.total_bytes`).
    pub published_peak_memory_bytes: Option<f64>,
    /// tpsim's memory on the most loaded GPU of the predicted plan: `plan`'s
    /// `memory.total_bytes` for it.
    pub predicted_memory_bytes: Option<f64>,
    /// predicted / published − 1 for the memory, where both exist.
    pub memory_error: Option<f64>,
}

/// Bundled profile of a GPU name as the runs spell it.
pub fn gpu_profile(name: &str) -> Option<&'static str> {
    RUN_GPUS
        .iter()
        .find(|(gpu, _)| *gpu == name)
        .map(|(_, profile)| *profile)
}

/// Bundled profiles of the GPUs whose published runs offload activations to the CPU
/// (Megatron-Bridge's recipes, `recipes::OFFLOAD_RECIPE_GPUS`): where `plan`'s offload note rests
/// on runs it is compared with.
pub fn offload_validated_profiles() -> impl Iterator<Item = &'static str> {
    recipes::OFFLOAD_RECIPE_GPUS
        .iter()
        .filter_map(|gpu| gpu_profile(gpu))
}

/// A runs file's `hardware.gpu` names, as written, and the bundled profile of each.
const RUN_GPUS: [(&str, &str); 7] = [
    ("H100", "h100-sxm-80g"),
    ("H200", "h200-sxm-141g"),
    ("H800", "h800-sxm-80g"),
    ("B200", "b200-sxm-180g"),
    ("B300", "b300-sxm-288g"),
    ("GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
];

/// Bundled profile of a run's hardware: its GPU name, except where the host is a known variant of
/// that GPU. An H100 with HBM2e is the 96 GB SXM part Meta runs at a 500 W power limit (torchtitan's
/// benchmark hosts: "96GB HBM2e", "the default 500W power limit", 2024-12 and 2025-06; "lower-TDP
/// HBM2e 95GB H100s", 2024-08), not the 700 W, 80 GB HBM3 DGX H100; `hardware.system` says which.
pub fn hardware_profile(hardware: &RunHardware) -> Option<&'static str> {
    let hbm2e = hardware
        .system
        .as_deref()
        .is_some_and(|system| system.contains("HBM2e"));
    match hardware.gpu.as_str() {
        "H100" if hbm2e => Some("h100-sxm-96g-500w"),
        name => gpu_profile(name),
    }
}

/// Bundled MoE model of a catalog key.
fn bundled_moe(key: &str) -> Option<&'static str> {
    Some(match key {
        "deepseek_v3" => "deepseek-v3",
        "kimi_k2" => "kimi-k2",
        "qwen3_30b_a3b" => "qwen3-30b-a3b",
        "qwen3_235b_a22b" => "qwen3-235b-a22b",
        "gpt_oss_120b" => "gpt-oss-120b",
        "gpt_oss_20b" => "gpt-oss-20b",
        "grok1_314b" => "grok-1",
        _ => return None,
    })
}

/// Bundled hybrid Mamba-Transformer model of a catalog key (the runs files state no shape for
/// these: Megatron-Bridge loads them from their HF configs at run time).
fn bundled_hybrid(key: &str) -> Option<&'static str> {
    Some(match key {
        "nemotron3_nano" => "nemotron-3-nano-30b-a3b",
        "nemotron3_super" => "nemotron-3-super-120b-a12b",
        "nemotron3_ultra" => "nemotron-3-ultra-550b-a55b",
        _ => return None,
    })
}

/// The model a run trains: a bundled hybrid model (its shape unstated in the runs file), a bundled MoE model (with the run's layer count, for the truncated
/// weak-scaling proxies), or a dense shape from the run's fields in the block style of its family
/// (Llama: SwiGLU, RMSNorm, RoPE, untied; GPT-3: GeLU, LayerNorm, biases, learned positions, tied;
/// Nemotron-4: squared-ReLU MLP, LayerNorm, RoPE, untied, no biases).
fn model_of(run: &ModernRun) -> Result<Model, String> {
    let m = &run.model;
    if let Some(name) = run.model_key.as_deref().and_then(bundled_hybrid) {
        let mut model = specs::load_bundled_model(name).map_err(|e| e.to_string())?;
        model.seq_len = m.seq_len.unwrap_or(model.seq_len);
        model.mtp_layers = mtp_layers_of(run, &model);
        return Ok(model);
    }
    if m.moe.as_ref().is_some_and(|v| !v.is_null()) {
        let key = run.model_key.as_deref().unwrap_or("");
        let name = bundled_moe(key).ok_or_else(|| format!("MoE model {key} is not bundled"))?;
        let model = match &run.bundled_moe_model {
            Some(model) => model.clone(),
            None => specs::load_bundled_model(name).map_err(|e| e.to_string())?,
        };
        let layers = m.layers.unwrap_or(model.layers);
        let overrides = ShapeOverrides {
            layers: (layers != model.layers).then_some(layers),
            ..ShapeOverrides::default()
        };
        let mut model = if overrides == ShapeOverrides::default() {
            model
        } else {
            model
                .with_overrides(&overrides)
                .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))?
        };
        model.seq_len = m.seq_len.unwrap_or(model.seq_len);
        model.mtp_layers = mtp_layers_of(run, &model);
        return Ok(model);
    }
    if m.name.contains("Mamba") || m.name.contains("LatentMoE") {
        return Err("hybrid Mamba/LatentMoE model".into());
    }
    let llama = m.name.contains("Llama") || m.name.contains("Mistral");
    let gpt = m.name.starts_with("GPT");
    let file = ModelFile {
        rotary_base: None,
        name: m.name.clone(),
        description: None,
        source: None,
        published_params_b: None,
        published_active_params_b: None,
        layers: m.layers.unwrap_or(0),
        hidden: m.hidden.unwrap_or(0),
        heads: m.heads.unwrap_or(0),
        kv_heads: m.kv_heads,
        head_dim: m.head_dim,
        ffn_hidden: m.ffn_hidden,
        vocab: m.vocab.unwrap_or(256_000),
        seq_len: m.seq_len.unwrap_or(0),
        seq_len_assumed: false,
        gated_mlp: llama,
        linear_bias: gpt,
        qkv_bias: false,
        qk_norm: false,
        shared_layer_norm: false,
        tied_embeddings: gpt,
        position_embedding_type: Some(if gpt {
            crate::model::PositionEmbedding::LearnedAbsolute
        } else {
            crate::model::PositionEmbedding::Rope
        }),
        learned_position_embeddings: None,
        rotary_percent: None,
        norm: Some(if llama {
            crate::model::Norm::Rmsnorm
        } else {
            crate::model::Norm::Layernorm
        }),
        dropout: false,
        mla: None,
        moe: None,
        mtp_layers: 0,
        attention_window: None,
        hybrid: None,
    };
    Model::from_file(&file)
        .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))
}

fn precision_of(text: &str) -> Result<Precision, String> {
    Precision::ALL
        .into_iter()
        .find(|p| p.as_str() == text)
        .ok_or_else(|| format!("precision {text}"))
}

/// Why a run is left out, or None when tpsim can express it.
pub fn excluded(run: &ModernRun) -> Option<String> {
    if run.task != "pretrain" {
        return Some(format!("{} run (packed sequences, other FLOPs)", run.task));
    }
    if run.id.contains("maxtext") {
        return Some("MaxText (JAX), not a framework tpsim models".into());
    }
    if let Some(flag) = flagged(run) {
        return Some(format!("flagged {flag} in the source"));
    }
    if hardware_profile(&run.hardware).is_none() {
        // The names `gpu_profile` knows, and the one meant where the name is one in other case
        // or a profile's (`gpu: gb200`, `gpu: h100-sxm-80g`).
        let upper = run.hardware.gpu.to_ascii_uppercase();
        let known: Vec<&str> = RUN_GPUS.iter().map(|(gpu, _)| *gpu).collect();
        let hint = known
            .iter()
            .rev()
            .find(|name| upper.starts_with(**name))
            .map_or(String::new(), |name| format!("; write gpu: {name}"));
        return Some(format!(
            "GPU {} has no profile (hardware.gpu names one of {}, as written){hint}",
            run.hardware.gpu,
            known.join(", ")
        ));
    }
    if run.results.tokens_per_s_per_gpu.is_none() {
        return Some("no tokens/s published".into());
    }
    let m = &run.model;
    let p = &run.plan;
    let bundled_hybrid = run.model_key.as_deref().and_then(bundled_hybrid).is_some();
    if !bundled_hybrid
        && (m.layers.is_none() || m.hidden.is_none() || m.heads.is_none() || m.seq_len.is_none())
    {
        return Some("model shape not stated".into());
    }
    if p.tp.is_none() || p.pp.is_none() || p.dp.is_none() || p.gbs.is_none() {
        return Some("plan not stated".into());
    }
    if p.precision_raw
        .as_deref()
        .is_some_and(|raw| raw.contains("rowwise"))
    {
        // torchao's row-wise scaled float8 (one scale per row of each operand, its own GEMM
        // kernel): not the per-tensor scaling tpsim's fp8 models; in this very source it runs
        // slower than bf16 (asyncTP_llama3_h100_2025-06_torchtitan.md).
        return Some("float8 with row-wise scaling: tpsim's fp8 is per-tensor scaling".into());
    }
    None
}

/// The flag that says the source's numbers for the run disagree, if it has one.
fn flagged(run: &ModernRun) -> Option<&String> {
    run.flags
        .iter()
        .find(|f| f.contains("source_inconsistency") || f.contains("SUSPECT"))
}

/// Whether the run trains a mixture-of-experts model: its stated `model.moe`, or the experts of the
/// bundled hybrid model it is priced as (whose shape the runs file does not state).
fn trains_experts(run: &ModernRun) -> bool {
    run.model.moe.as_ref().is_some_and(|v| !v.is_null())
        || run
            .model_key
            .as_deref()
            .and_then(bundled_hybrid)
            .and_then(|name| specs::load_bundled_model(name).ok())
            .is_some_and(|model| model.moe.is_some())
}

/// Predicts one run with its published plan pinned.
pub fn predict(run: &ModernRun) -> ModernPrediction {
    let published = run.results.tokens_per_s_per_gpu;
    let source = run.id.split('-').next().unwrap_or("").to_string();
    let mut out = ModernPrediction {
        id: run.id.clone(),
        source,
        gpu: run.hardware.gpu.clone(),
        gpu_profile: hardware_profile(&run.hardware).map(str::to_string),
        moe: trains_experts(run),
        published_tokens_per_s_per_gpu: published,
        predicted_tokens_per_s_per_gpu: None,
        error_of: "tokens_per_s_per_gpu",
        error: None,
        note: String::new(),
        published_peak_memory_bytes: run
            .results
            .peak_memory_gib
            .map(|gib| gib * crate::units::GIB)
            .or(run.results.peak_memory_gb.map(|gb| gb * 1e9)),
        predicted_memory_bytes: None,
        memory_error: None,
    };
    match predict_tokens(run) {
        Ok((tokens, memory_bytes, note)) => {
            out.predicted_tokens_per_s_per_gpu = Some(tokens);
            // `excluded` leaves out a run without a published rate, so every predicted one has it.
            out.error = published.map(|published| tokens / published - 1.0);
            out.predicted_memory_bytes = Some(memory_bytes);
            out.memory_error = out
                .published_peak_memory_bytes
                .filter(|m| *m > 0.0)
                .map(|m| memory_bytes / m - 1.0);
            out.note = note;
        }
        Err(why) => out.note = why,
    }
    out
}

fn predict_tokens(run: &ModernRun) -> Result<(f64, f64, String), String> {
    let planned = plan_run(run)?;
    Ok((
        planned.estimate.tokens_per_s / f64::from(planned.cluster.total_gpus()),
        planned.estimate.memory.total_bytes.0,
        planned.note,
    ))
}

/// A published run as tpsim plans it: the scenario the run describes and the estimate of its
/// published plan with the unstated settings searched (`tpsim accuracy --run ID` prints it).
pub struct PlannedRun {
    pub model: Model,
    pub cluster: Cluster,
    pub training: Training,
    pub estimate: crate::cost::Estimate,
    /// The settings the search chose, as the accuracy table's last column says them.
    pub note: String,
}

/// The run's GPU count against its plan and its nodes, said in the runs file's own keys (a
/// command-line message would name `--dp` and a cluster size the file never gave).
fn check_gpu_count(run: &ModernRun) -> Result<(), String> {
    let hw = &run.hardware;
    let p = &run.plan;
    let degrees = [
        ("plan.tp", p.tp.unwrap_or(1)),
        ("plan.cp", p.cp.unwrap_or(1)),
        ("plan.pp", p.pp.unwrap_or(1)),
        ("plan.dp", p.dp.unwrap_or(1)),
    ];
    if let Some((key, _)) = degrees.iter().find(|(_, d)| *d == 0) {
        return Err(format!(
            "{key} is 0; a parallel degree is at least 1: give the published value"
        ));
    }
    let product: u64 = degrees.iter().map(|(_, d)| u64::from(*d)).product();
    if product != u64::from(hw.num_gpus) {
        let terms: Vec<String> = degrees.iter().map(|(k, d)| format!("{k} {d}")).collect();
        let model_parallel = product / u64::from(p.dp.unwrap_or(1));
        let dp_fix = if u64::from(hw.num_gpus).is_multiple_of(model_parallel) {
            format!(
                ", or plan.dp to {} if the GPU count is right",
                u64::from(hw.num_gpus) / model_parallel
            )
        } else {
            String::new()
        };
        return Err(format!(
            "hardware.num_gpus {} is not {} = {product} GPUs; change hardware.num_gpus to {product}{dp_fix}",
            hw.num_gpus,
            terms.join(" x ")
        ));
    }
    if hw.gpus_per_node == 0 || !hw.num_gpus.is_multiple_of(hw.gpus_per_node) {
        return Err(format!(
            "hardware.num_gpus {} is not whole nodes of hardware.gpus_per_node {}; change hardware.gpus_per_node to the GPUs in one node of the run (8 on DGX H100/B200, 4 on GB200/GB300 trays)",
            hw.num_gpus, hw.gpus_per_node
        ));
    }
    Ok(())
}

/// The `eval` flags a plan error names, and the current-stack runs file's keys for them (under
/// `plan.`; the model's, `--seq-len` among them, are `model_file_words`'s under `model.`).
const RUN_PLAN_KEYS: [(&str, &str); 9] = [
    ("--tp", "tp"),
    ("--pp", "pp"),
    ("--dp", "dp"),
    ("--cp", "cp"),
    ("--vpp", "vp"),
    ("--micro-batch", "mbs"),
    ("--global-batch", "gbs"),
    ("--ep", "ep"),
    ("--etp", "etp"),
];

/// A plan error said in the runs file's keys (`--tp 3 does not divide ...` is `plan.tp: 3 does
/// not divide ...`): a runs file has no flags.
fn in_runs_file_words(message: &str) -> String {
    let said = crate::model_file_words::in_file_keys(message, "plan.", &RUN_PLAN_KEYS);
    crate::model_file_words::in_runs_file_model_words(&said)
}

/// Plans `run` with its published plan pinned (see `predict`), or says why it cannot.
pub fn plan_run(run: &ModernRun) -> Result<PlannedRun, String> {
    if let Some(why) = excluded(run) {
        return Err(why);
    }
    // What the command line would refuse, refused here too: a run file is input like any other.
    // Said in the file's keys, with the fix, as every other row's reason is.
    if run.hardware.num_gpus == 0 {
        return Err(
            "hardware.num_gpus is 0; a run needs at least one GPU: give the GPUs the run trained on"
                .into(),
        );
    }
    if let Some(gbs) = run.plan.gbs
        && !(1..=crate::training::MAX_GLOBAL_BATCH).contains(&gbs)
    {
        return Err(format!(
            "plan.gbs {gbs} is outside 1 to {} sequences (rule: a step trains at least one sequence, at most tpsim's --global-batch limit); give the published global batch in sequences",
            crate::training::MAX_GLOBAL_BATCH
        ));
    }
    if !run
        .results
        .tokens_per_s_per_gpu
        .is_some_and(|t| t.is_finite() && t > 0.0)
    {
        return Err("no positive published tokens/s per GPU to compare with".into());
    }
    let model = model_of(run)?;
    let hw = &run.hardware;
    let gpu = specs::load_bundled_gpu(hardware_profile(hw).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    check_gpu_count(run)?;
    let cluster = Cluster {
        gpu,
        nodes: hw.num_gpus / hw.gpus_per_node,
        gpus_per_node: hw.gpus_per_node,
    };
    let framework = framework_of(run);
    let p = &run.plan;
    let (tp, pp, dp, gbs) = (
        p.tp.unwrap_or(1),
        p.pp.unwrap_or(1),
        p.dp.unwrap_or(1),
        p.gbs.unwrap_or(1),
    );
    let mut training =
        Training::with_framework(framework, model.seq_len, gbs, AttentionKernel::Flash);
    // torchtitan's async TP (`enable_async_tensor_parallel`, micro-pipelined all-gather and
    // reduce-scatter matmuls) is the TP-communication overlap; its rows say when it is on.
    if p.overlap
        .as_deref()
        .is_some_and(|o| o.to_ascii_lowercase().contains("async tp"))
    {
        training.overlap.tp_comm = true;
    }
    training.overlap.moe_a2a = recipe_overlaps_moe_alltoall(run);
    recipes::recipe_comm_overlap(run, &mut training.overlap);
    if let Some(gather) = recipes::recipe_low_precision_param_gather(run) {
        training.fp8_param_gather = gather;
    }
    if let Some(factor) = recipes::recipe_capacity_factor(run) {
        training.moe_capacity_factor = Some(factor);
        training.moe_imbalance = training.moe_imbalance.min(factor);
    }
    training.moe_dispatch = recipe_moe_dispatch(run);
    training.fp8_scaling = recipe_fp8_scaling(run);
    training.bf16_layers = recipes::recipe_bf16_layers(run);
    training.module_precision = recipes::recipe_module_precision(run);
    // NeMo AutoModel runs Transformer Engine's attention (its configs' `attn: te`, the tables'
    // "TE"), whose context parallelism is TE's K/V ring, not PyTorch's context_parallel.
    if run.id.starts_with("automodel") {
        training.cp_exchange = crate::training::CpExchange::KvRing;
    }
    // PyTorch's pipelining runs one schedule per gradient-accumulation step (torchtitan `train.py`,
    // AutoModel `recipes/llm/benchmark.py`): a row that states GA > 1 with a pipeline runs its
    // local batch, gbs / (dp x GA), per schedule.
    let ga = p.ga.unwrap_or(1);
    // Said in the file's key: `ga: 0` was read as no accumulation and a `ga` that does not divide
    // gbs / dp was truncated into a `--local-batch` the file never gave.
    if ga == 0 {
        return Err(
            "plan.ga is 0; a step accumulates at least 1 local batch: give the published value"
                .into(),
        );
    }
    if framework == TrainingFramework::Torchtitan
        && pp > 1
        && ga > 1
        && gbs.is_multiple_of(dp)
        && !gbs.is_multiple_of(dp.saturating_mul(ga))
    {
        return Err(format!(
            "plan.ga: {ga} does not divide the {} sequences each data-parallel rank trains per step (plan.gbs: {gbs} / plan.dp: {dp}) into whole local batches; give the published value (one that divides it)",
            gbs / dp
        ));
    }
    if framework == TrainingFramework::Torchtitan && pp > 1 && ga > 1 {
        training.local_batch = Some(gbs / (dp * ga).max(1));
    }
    if let Some((states, grads)) = recipe_optimizer_states(run) {
        training.optimizer_states = states;
        training.grad_dtype = grads;
    }
    if let Some(grads) = recipe_grad_dtype(run) {
        training.grad_dtype = grads;
    }
    training.recompute_modules = recipe_recompute_modules(run);
    training.cpu_offload_layers = recipes::recipe_cpu_offload_layers(run).unwrap_or(0);
    // The recipe's offload checked as the command line checks `--cpu-offload-layers`: a row of
    // fewer layers was planned offloading more layers than the model has (the memory took all
    // but one), and a stated recompute beside it left the search nothing, said without a reason.
    let offload = training.cpu_offload_layers;
    if offload > 0 && offload >= model.layers {
        return Err(format!(
            "the row's Megatron-Bridge recipe offloads {offload} layers' activations to the CPU (cpu_offloading_num_layers), but model.layers is {}; Megatron-Core offloads fewer than all layers: give the published layer count",
            model.layers
        ));
    }
    if offload > 0
        && let Some(text) = p.recompute.as_deref()
        && stated_recompute(text).is_some_and(|r| r != Recompute::None)
    {
        return Err(format!(
            "plan.recompute: {} beside the row's Megatron-Bridge recipe, which offloads {offload} layers' activations to the CPU (cpu_offloading_num_layers); Megatron-Core offloads only without recompute: give recompute: null, as the recipe runs",
            crate::input_file::quote(text)
        ));
    }
    // NeMo AutoModel's MoE models reshard and reduce-scatter once per step under a pipeline,
    // not after every schedule (`MoEFSDPSyncMixin` patches the pipeline stage's backward:
    // nemo_automodel/components/moe/fsdp_mixin.py).
    training.fsdp_syncs_once_per_step = run.id.starts_with("automodel") && model.moe.is_some();
    training.pipeline_keeps_outputs = recipes::pipeline_keeps_outputs_of(run);
    training.eager_glu_clamp = recipes::eager_glu_clamp_of(framework);
    training.kernel_fusion = kernel_fusion_of(run);
    // torchtitan's Llama expands K and V with `repeat_kv` before SDPA; NeMo AutoModel's rows run
    // Transformer Engine's attention, which takes grouped K and V as they are.
    training.sdpa_repeats_kv = run.id.starts_with("torchtitan");
    training.loss = loss_kernel_of(run, &model, training.kernel_fusion);
    let recompute = p.recompute.as_deref().unwrap_or("");
    let fsdp = p.fsdp == Some(true);
    let (vpp, micro_batch) = pipeline_defaults(run, framework);
    let options = SearchOptions {
        allow_uneven_pp: !model.layers.is_multiple_of(pp),
        allow_cross_node_tp: false,
        precision: precision_of(p.precision.as_deref().unwrap_or("bf16"))?,
        pins: Pins {
            tp: Some(tp),
            cp: Some(p.cp.unwrap_or(1)),
            pp: Some(pp),
            dp: Some(dp),
            vpp: Some(vpp),
            micro_batch,
            // A recipe that recomputes modules runs selective granularity.
            recompute: stated_recompute(recompute)
                .or(training.recompute_modules.map(|_| Recompute::Selective))
                .or(recipes::recipe_recompute(run))
                // Megatron-Core offloads only without recompute.
                .or((training.cpu_offload_layers > 0).then_some(Recompute::None)),
            // No published row states a block-recompute layer count: searched.
            recompute_num_layers: None,
            zero: fsdp.then_some(3),
            sequence_parallel: None,
            // Unstated expert parallelism is left to the search (a dense model only has ep 1).
            ep: p.ep.or_else(|| automodel_config_ep(run)),
            etp: p.etp,
            stage_split: match recipe_stage_split(run, &model, pp, vpp) {
                Some((first, last)) => StageSplitPin::Given(first, last),
                None => StageSplitPin::Own,
            },
            // torchtitan's default `reshard_after_forward_policy = "default"` reshards after the
            // forward when there is no pipeline (torchtitan/models/llama3/infra/parallelize.py
            // `apply_fsdp`); with PP it keeps the gathered weights across micro-batches.
            reshard_after_forward: (framework == TrainingFramework::Torchtitan && fsdp)
                .then_some(pp == 1),
            // No published row states copies of the sharded states (HSDP, partial distributed
            // optimizer): one copy, as the recipes' defaults have it.
            dp_replicas: Some(1),
        },
    };
    let result = search(&model, &cluster, &training, options);
    let Some(best) = result.feasible().first() else {
        return Err(match result.closest_miss() {
            Some(miss) => format!(
                "the published plan does not fit in tpsim's memory model ({:.1} of {:.1} GiB at best)",
                miss.memory.total_bytes.0 / crate::units::GIB,
                miss.memory.capacity_bytes.0 / crate::units::GIB
            ),
            None => {
                // Name the rule: the published degrees as one request (the unstated settings at
                // their defaults) and what `ParallelPlan::build` says of it.
                let pins = options.pins;
                let request = crate::plan::PlanRequest {
                    tp,
                    cp: pins.cp.unwrap_or(1),
                    pp,
                    dp,
                    vpp: pins.vpp.unwrap_or(1),
                    micro_batch: pins.micro_batch.unwrap_or(1),
                    ep: pins.ep.unwrap_or(1),
                    etp: pins.etp.unwrap_or(1),
                    precision: options.precision,
                    allow_uneven_pp: options.allow_uneven_pp,
                    stage_split: pins.stage_split.given(),
                    // The first ZeRO stage the run's optimizer states can run at, so the rule
                    // named is the split's, not the default stage's.
                    zero: pins.zero.unwrap_or_else(|| {
                        (0..=3)
                            .find(|&z| training.optimizer_states.allows_zero(z))
                            .unwrap_or(0)
                    }),
                    ..crate::plan::PlanRequest::default()
                };
                match crate::plan::ParallelPlan::build(&request, &model, &cluster, &training) {
                    Err(why) => format!(
                        "the published plan is not a valid plan for tpsim: {}",
                        in_runs_file_words(&why.to_string())
                    ),
                    Ok(_) => "the published plan is not a valid plan for tpsim".into(),
                }
            }
        });
    };
    let refined = refine_top(&model, &cluster, &training, std::slice::from_ref(best));
    let chosen = refined.plans[0];
    let note = format!(
        "recompute {}{}, ZeRO-{}, ep {}, etp {}, micro-batch {} x {}{}{}",
        match (chosen.plan.recompute, training.recompute_modules) {
            (Recompute::Selective, Some(modules)) => format!("selective ({})", modules.describe()),
            _ => crate::report::recompute_label(&chosen.plan),
        },
        // The recipe's activation offloading (`recipes::recipe_cpu_offload_layers`), which the
        // recompute word alone would hide.
        match training.offloaded_layers(model.layers) {
            0 => String::new(),
            n => format!(" ({n} of {} layers offloaded to the CPU)", model.layers),
        },
        // As `plan`'s zero column: "3 keep", "1 x4".
        crate::report::zero_label(&chosen.plan),
        chosen.plan.ep,
        chosen.plan.etp,
        chosen.plan.micro_batch,
        chosen.plan.num_microbatches,
        if chosen.plan.vpp > 1 {
            format!(", vpp {}", chosen.plan.vpp)
        } else {
            String::new()
        },
        if chosen.plan.schedule_runs > 1 {
            format!(", {} pipeline schedules", chosen.plan.schedule_runs)
        } else {
            String::new()
        }
    );
    Ok(PlannedRun {
        model,
        cluster,
        training,
        estimate: chosen,
        note,
    })
}

/// Median and largest |memory error| and the count past `bound` of the predictions whose source
/// states a peak memory.
pub fn memory_summary(
    predictions: &[&ModernPrediction],
    bound: f64,
) -> Option<(usize, f64, f64, usize)> {
    median_max_past(
        predictions
            .iter()
            .filter_map(|p| p.memory_error.map(f64::abs)),
        bound,
    )
}

/// The framework family of a run's source, as the accuracy summary groups dense runs: NVIDIA's
/// DGX benchmark recipes, NeMo and Megatron-Bridge all train on Megatron-Core.
pub fn framework_family(source: &str) -> &str {
    match source {
        "dgxc" | "nemo" | "mbridge" => "Megatron-Core family (DGX recipes, NeMo, Megatron-Bridge)",
        "automodel" => "NeMo AutoModel",
        other => other,
    }
}

/// Median and largest |error| and the count past `bound` of the predictions that have one.
pub fn summary(predictions: &[&ModernPrediction], bound: f64) -> Option<(usize, f64, f64, usize)> {
    median_max_past(
        predictions.iter().filter_map(|p| p.error.map(f64::abs)),
        bound,
    )
}

fn median_max_past(
    errors: impl Iterator<Item = f64>,
    bound: f64,
) -> Option<(usize, f64, f64, usize)> {
    let mut errors: Vec<f64> = errors.collect();
    if errors.is_empty() {
        return None;
    }
    errors.sort_by(f64::total_cmp);
    let n = errors.len();
    let median = if n % 2 == 1 {
        errors[n / 2]
    } else {
        0.5 * (errors[n / 2 - 1] + errors[n / 2])
    };
    let past = errors.iter().filter(|e| **e > bound).count();
    Some((n, median, errors[n - 1], past))
}
