//! What a hybrid Mamba-Transformer stack takes: the framework, schedule and degrees its Mamba
//! layers run under ([`hybrid_run_refusal`], [`mamba_cp_refusal`]).

use crate::model::Model;
use crate::training::Training;

use super::error::PlanError;
use super::request::PlanRequest;
use super::valid::{divisors, list};

/// What a hybrid Mamba-Transformer stack refuses whatever the degrees (the framework, the combined
/// 1F1B schedule, layer offloading): every candidate of a search fails it, so the search's "no
/// valid plan" names it in `eval`'s words. None for another model or a run the stack can take.
pub fn hybrid_run_refusal(model: &Model, training: &Training) -> Option<String> {
    match check_hybrid(&PlanRequest::default(), model, training) {
        Err(PlanError::Hybrid(words)) => Some(words),
        _ => None,
    }
}

/// A hybrid Mamba-Transformer stack (`model::hybrid`) as Megatron-Core builds it, and as far as
/// tpsim prices it: its Mamba heads and groups split over TP (`MambaMixer` asserts `nheads %
/// tp_size == 0` and `ngroups % tp_size == 0`); any pipeline split with or without virtual
/// stages, each stage priced at its own slice of the pattern, since Megatron-Core 0.17 takes the
/// split from '|' separators in the pattern (`emit::MegatronSplit::PatternSegments`,
/// `select_pipeline_segment` in megatron/core/models/hybrid/hybrid_layer_allocation.py at
/// d98e8a64ddf3: one segment per model chunk, chunk `vp·pp + rank`); context parallelism where
/// `MambaContextParallel` can split the mixer's heads and groups (`mamba_cp_refusal`);
/// Megatron-Core's stack only (2021's Megatron-LM had no Mamba layers; torchtitan and
/// DeepSpeed have no hybrid stack); Megatron-Core's default selective recompute only; no combined
/// 1F1B schedule (`combined_1f1b.py` builds each micro-batch's plan with the model's
/// `build_schedule_plan`, which `GPTModel` has and the hybrid model does not).
pub(super) fn check_hybrid(
    r: &PlanRequest,
    model: &Model,
    training: &Training,
) -> Result<(), PlanError> {
    let Some(hybrid) = &model.hybrid else {
        return Ok(());
    };
    let fail = |words: String| Err(PlanError::Hybrid(words));
    let framework = training.framework;
    if framework != crate::training::TrainingFramework::MegatronCore {
        return fail(format!(
            "--framework {} with the hybrid Mamba-Transformer model {}: tpsim prices Megatron-Core's hybrid stack (MambaStack) only; use --framework megatron-core",
            framework.as_str(),
            model.name
        ));
    }
    for (count, what) in [
        (hybrid.mamba_heads, "Mamba heads"),
        (hybrid.mamba_groups, "Mamba groups"),
    ] {
        if !count.is_multiple_of(r.tp) {
            return fail(format!(
                "--tp {} does not divide the {count} {what} of {} (rule: Megatron-Core's MambaMixer splits heads and groups evenly over TP); valid: {}",
                r.tp,
                model.name,
                list(
                    divisors(hybrid.mamba_groups.min(hybrid.mamba_heads))
                        .into_iter()
                        .filter(|d| hybrid.mamba_heads.is_multiple_of(*d)
                            && hybrid.mamba_groups.is_multiple_of(*d))
                )
            ));
        }
    }
    if let Some(words) = mamba_cp_refusal(r.tp, r.cp, model) {
        return fail(words);
    }
    if training.overlap.moe_a2a && model.moe.is_some() {
        return fail(format!(
            "--overlap-moe-expert-parallel-comm with the hybrid Mamba-Transformer model {}: Megatron-Core's combined 1F1B schedule builds each micro-batch's plan with GPTModel.build_schedule_plan, which its hybrid model does not have (rule: combined_1f1b.py); give --overlap-moe-expert-parallel-comm false",
            model.name
        ));
    }
    // Layer-level CPU offloading (`--cpu-offloading-num-layers`) is TransformerBlock's
    // (`get_cpu_offload_context` in transformer_block.py); the hybrid stack has none, only the
    // fine-grained activation offloading of hybrid_model.py, which tpsim does not price.
    if training.cpu_offload_layers > 0 {
        return fail(format!(
            "--cpu-offload-layers {} with the hybrid Mamba-Transformer model {}: Megatron-Core offloads whole layers only in its transformer block (transformer_block.py get_cpu_offload_context), not in the hybrid stack; drop --cpu-offload-layers",
            training.cpu_offload_layers, model.name
        ));
    }
    Ok(())
}

/// What `MambaContextParallel` (megatron/core/ssm/mamba_context_parallel.py at d98e8a64) asserts
/// of a TP rank's Mamba heads and groups under cp > 1, in `eval`'s words, or None: every CP rank
/// needs whole heads ("nheads must be evenly divisible by tp_size * cp_size"), and whole groups —
/// a TP rank's groups split over the CP ranks ("ngroups must be evenly divisible by tp_size *
/// cp_size") or, where it holds fewer groups than cp, each group repeated over cp / groups ranks
/// ("cp_size must be evenly divisible by ngroups/tp_size"). None for a transformer and at cp 1.
pub fn mamba_cp_refusal(tp: u32, cp: u32, model: &Model) -> Option<String> {
    let hybrid = model.hybrid.as_ref().filter(|_| cp > 1)?;
    let tp = tp.max(1);
    let heads = hybrid.mamba_heads / tp;
    let groups = hybrid.mamba_groups / tp;
    let splits = |c: u32| {
        heads.is_multiple_of(c)
            && if groups < c {
                groups > 0 && c.is_multiple_of(groups)
            } else {
                groups.is_multiple_of(c)
            }
    };
    if splits(cp) {
        return None;
    }
    let valid = list(divisors(heads).into_iter().filter(|&c| splits(c)));
    let rule = if !heads.is_multiple_of(cp) {
        format!(
            "its {} Mamba heads over tp {tp} leave {heads} per TP rank, and MambaContextParallel asserts \"nheads must be evenly divisible by tp_size * cp_size\"",
            hybrid.mamba_heads
        )
    } else if groups < cp {
        format!(
            "its {} Mamba groups over tp {tp} leave {groups} per TP rank, fewer than cp, and MambaContextParallel repeats each over cp / groups ranks only where that divides (\"cp_size must be evenly divisible by ngroups/tp_size\")",
            hybrid.mamba_groups
        )
    } else {
        format!(
            "its {} Mamba groups over tp {tp} leave {groups} per TP rank, and MambaContextParallel asserts \"ngroups must be evenly divisible by tp_size * cp_size\"",
            hybrid.mamba_groups
        )
    };
    Some(format!(
        "--cp {cp} with the hybrid Mamba-Transformer model {} at --tp {tp}: {rule} (megatron/core/ssm/mamba_context_parallel.py); valid cp at tp {tp}: {valid}",
        model.name
    ))
}
