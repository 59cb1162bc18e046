//! One run's settings checked against what its source's framework accepts (ZeRO stage, gradient
//! accumulation, recompute, task, id, precision, MoE and hybrid keys, peak-memory units), each
//! failure said in the runs file's own keys.

use serde::Deserialize;

use super::recipes::{framework_of, stated_recompute};
use super::{ModernRun, RunResults, bundled_hybrid, bundled_moe, flagged, precision_of};
use crate::model::Model;
use crate::plan::Precision;
use crate::specs;
use crate::training::TrainingFramework;

/// A peak stated in both units is one peak: GB and GiB that disagree (past the rounding of one
/// decimal) leave which one the source meant unclear.
pub(super) fn check_peak_units(results: &RunResults) -> Result<(), String> {
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
pub(super) fn check_run_zero(run: &ModernRun) -> Result<(), String> {
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
pub(super) fn check_run_ga(run: &ModernRun) -> Result<(), String> {
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
    // A `plan.gbs: 0` has its own refusal (`plan_run`); the ga it derives, 0, is no fix.
    if derived > 0 && u64::from(ga) != derived {
        return Err(format!(
            "plan.ga: {ga} contradicts plan.gbs: {gbs} / (plan.dp: {dp} x plan.mbs: {mbs}) = {derived} (rule: Megatron-Core runs gbs / (dp x mbs) micro-batches per data-parallel rank each step, so ga is that); give the published values, e.g. ga: {derived}, or add flags: [source_inconsistency] where the source itself gives these numbers"
        ));
    }
    Ok(())
}

/// A run's `plan.recompute`, when given, is one [`recipes::stated_recompute`] reads: text it
/// does not ("ful AC", "bogus") would be left to the search as if unstated, pricing another
/// recompute than the source's without a word (the published runs file refuses it too).
pub(super) fn check_run_recompute(run: &ModernRun) -> Result<(), String> {
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
pub(super) fn check_run_task(task: &str) -> Result<(), String> {
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
pub(super) fn check_run_precision(run: &ModernRun) -> Result<(), String> {
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
pub(super) fn finite_moe<'de, D: serde::Deserializer<'de>>(
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
pub(super) fn check_run_moe(run: &ModernRun) -> Result<Option<Model>, String> {
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
pub(super) fn check_run_hybrid(run: &ModernRun) -> Result<(), String> {
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
