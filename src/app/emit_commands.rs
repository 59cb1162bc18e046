//! `--emit`: the launch configuration of a chosen plan for Megatron-LM, Megatron-Bridge, NeMo,
//! DeepSpeed or torchtitan (stdout), with what the configuration cannot carry (stderr).

use anyhow::{Result, bail};

use super::Outcome;
use super::scenario::Scenario;
use crate::cli::EmitTarget;
use crate::cost::Estimate;
use crate::cost::simulated::simulate_plan;
use crate::emit::{self, Framework};
use crate::units::{GIB, show_step_s};

pub(super) fn framework_of(target: EmitTarget) -> Framework {
    match target {
        EmitTarget::Megatron => Framework::Megatron,
        EmitTarget::MegatronBridge => Framework::MegatronBridge,
        EmitTarget::Nemo => Framework::Nemo,
        EmitTarget::Deepspeed => Framework::DeepSpeed,
        EmitTarget::Torchtitan => Framework::Torchtitan,
    }
}

pub(super) fn target_name(target: EmitTarget) -> &'static str {
    match target {
        EmitTarget::Megatron => "megatron",
        EmitTarget::MegatronBridge => "megatron-bridge",
        EmitTarget::Nemo => "nemo",
        EmitTarget::Deepspeed => "deepspeed",
        EmitTarget::Torchtitan => "torchtitan",
    }
}

/// The launch configuration text (stdout), plus what it cannot carry (stderr).
pub(super) fn emitted(framework: Framework, s: &Scenario, e: &Estimate) -> String {
    let plan = &e.plan;
    // The plan's time and memory are those of the framework tpsim evaluated (issue 8 item 4); the
    // configuration writes its overlap, precision and gradient settings explicitly.
    eprintln!(
        "note: evaluated as --framework {} runs it; the {} configuration below sets the same precision, gradient dtype and communication overlap",
        s.training.framework.as_str(),
        framework.name()
    );
    // `--tokens` is no setting of the configuration; its answer, said by `plan` and `eval`'s
    // breakdown, would otherwise be lost beside a launch configuration.
    if let (Some(tokens), Some(seconds)) = (s.training.tokens, e.time_to_train_s) {
        eprintln!(
            "note: --tokens {}: {} to train at {} s per step ({})",
            crate::units::format_token_count(tokens),
            crate::report::duration(seconds),
            show_step_s(e.time.step_s.0),
            crate::report::train_steps(tokens, plan, &s.training)
        );
    }
    if let Some(why) = framework.unsaid_moe_imbalance(&s.training) {
        eprintln!("note: {why}");
    }
    if let Some(why) = framework.unsaid_overlap(&s.model, &s.training, plan) {
        eprintln!("note: {why}");
    }
    if let Some(why) = framework.unsaid_model(&s.model) {
        eprintln!("note: {why}");
    }
    if let Some(why) = framework.unsaid_gpt_oss_details(&s.model, &s.training, plan) {
        eprintln!("note: {why}");
    }
    if let Some(why) = framework.unsaid_positions(&s.model, &s.training) {
        eprintln!("note: {why}");
    }
    match framework {
        Framework::Megatron => format!("{}\n", emit::megatron_args(&s.model, &s.training, plan)),
        Framework::MegatronBridge => {
            eprintln!(
                "note: Megatron-Bridge overrides for scripts/training/run_recipe.py on a recipe of this model; run on {} {} x {} GPUs (dp = {})",
                s.cluster.nodes,
                if s.cluster.nodes == 1 {
                    "node"
                } else {
                    "nodes"
                },
                s.cluster.gpus_per_node,
                plan.dp
            );
            format!("{}\n", emit::bridge_overrides(&s.model, &s.training, plan))
        }
        Framework::Nemo => emit::nemo_yaml(&s.model, &s.cluster, &s.training, plan),
        Framework::DeepSpeed => {
            eprintln!(
                "note: DeepSpeed derives dp = {} GPUs / (tp x pp{}); give Megatron-DeepSpeed {}",
                s.cluster.total_gpus(),
                if plan.cp > 1 {
                    " x sequence_parallel_size"
                } else {
                    ""
                },
                emit::megatron_deepspeed_args(&s.training, plan)
            );
            // Megatron-DeepSpeed's Ulysses splits K and V as it splits Q: ParallelAttention asserts
            // `projection_size == kv_projection_size` under DeepSpeed's sequence parallelism
            // (megatron/model/transformer.py), so grouped-query models run it as ALST's
            // UlyssesSPAttentionHF (deepspeed/runtime/sequence_parallel/ulysses_sp.py), which
            // repeats K/V heads and reads the config's sequence_parallel_size.
            if plan.cp > 1 && s.model.kv_heads != s.model.heads {
                eprintln!(
                    "note: Megatron-DeepSpeed's Ulysses takes only as many K/V heads as query heads (ParallelAttention asserts it), and {} has {} K/V heads for {} query heads: run sequence_parallel_size {} as ALST's UlyssesSPAttentionHF on the Hugging Face model (docs/_tutorials/ulysses-alst-sequence-parallelism.md), which repeats K/V heads up to it",
                    s.model.name, s.model.kv_heads, s.model.heads, plan.cp
                );
            }
            format!("{}\n", emit::deepspeed_json(&s.training, plan))
        }
        Framework::Torchtitan => {
            for note in emit::torchtitan_notes(&s.model, &s.training, &s.cluster, plan) {
                eprintln!("note: {note}");
            }
            emit::torchtitan_recipe(&s.model, &s.training, plan)
        }
    }
}

/// `plan --emit`: what makes every plan of the search unwritable is an input error, said before
/// the search (and before `--save` writes anything or a note is said).
pub(super) fn check_emit_input(
    target: EmitTarget,
    s: &Scenario,
    precision: crate::plan::Precision,
) -> Result<()> {
    let framework = framework_of(target);
    // Offloading (Megatron-Core's) first: the mismatch's fix would refuse it in turn.
    if let Some(why) = framework.cpu_offload_unsupported(&s.training) {
        bail!("--emit {}: {why}", target_name(target));
    }
    // A model the configuration cannot describe is an input error whatever the plans and the
    // framework: said before the mismatch, whose fix (`--framework torchtitan`) would meet it.
    if let Some(why) = framework.model_unsupported(&s.model) {
        bail!("--emit {}: {why}", target_name(target));
    }
    // A plan searched for another framework is refused whatever fits: the header's time and
    // memory would be that framework's, not those of the one the configuration runs on.
    if let Some(why) = framework.framework_mismatch(s.training.framework) {
        bail!("--emit {}: {why}", target_name(target));
    }
    // Likewise optimizer states the configuration cannot keep.
    if let Some(why) = framework.optimizer_states_unsupported(&s.training) {
        bail!("--emit {}: {why}", target_name(target));
    }
    if let Some(why) = framework.moe_routing_unsupported(&s.training) {
        bail!("--emit {}: {why}", target_name(target));
    }
    // The torchtitan recipe's rules that hold whatever the plan (model, precision, gradients).
    if let Some(why) = framework.run_unsupported(&s.model, &s.training, precision) {
        bail!("--emit {}: {why}", target_name(target));
    }
    // Every plan of the search has the precision given, so a precision the configuration cannot
    // say is an input error, not a search where nothing can run.
    if target == EmitTarget::Deepspeed && precision != crate::plan::Precision::Bf16 {
        bail!(
            "--emit deepspeed with --precision {}: a DeepSpeed config has no FP8/FP4 training key (Transformer Engine is wired in by the model code, not by ds_config); use --precision bf16, or --emit megatron",
            precision.as_str()
        );
    }
    Ok(())
}

/// `plan --emit`: the fastest feasible plan the framework can run (`check_emit_input` first).
pub(super) fn emit_best(
    target: EmitTarget,
    s: &Scenario,
    feasible: &[Estimate],
) -> Result<Outcome> {
    let framework = framework_of(target);
    if feasible.is_empty() {
        eprintln!(
            "nothing fits, so there is nothing to emit; run without --emit to see the closest miss"
        );
        return Ok(Outcome::NothingFits);
    }
    let Some((rank, chosen)) = feasible.iter().enumerate().find(|(_, e)| {
        framework
            .unsupported(&s.model, &s.training, &e.plan)
            .is_none()
    }) else {
        eprintln!(
            "none of the {} plans that fit can run in {}: {}",
            feasible.len(),
            framework.name(),
            framework.why_none_can_run(&s.model, &s.training, feasible.iter().map(|e| &e.plan))
        );
        return Ok(Outcome::NothingFits);
    };
    // Report the simulated schedule's step time, as `plan` and `eval` do for shown plans.
    let simulated = |e: &Estimate| {
        simulate_plan(&s.model, &s.cluster, &s.training, &e.plan)
            .map(|sim| sim.estimate)
            .unwrap_or(*e)
    };
    let chosen = &simulated(chosen);
    if rank > 0 {
        eprintln!(
            "note: the fastest plan ({} s per step) cannot run in {} ({}); emitting plan #{} ({} s per step), the fastest that can",
            show_step_s(simulated(&feasible[0]).time.step_s.0),
            framework.name(),
            framework
                .unsupported(&s.model, &s.training, &feasible[0].plan)
                .unwrap_or_default(),
            rank + 1,
            show_step_s(chosen.time.step_s.0)
        );
    }
    // The plan in `eval`'s words (`plan_words`), so the header and `eval`'s plan line of the
    // configuration read back describe one plan.
    eprintln!(
        "{} configuration for {}: {} s per step, {} tokens/s, {:.1} of {:.1} GiB",
        framework.name(),
        crate::report::plan_words(&chosen.plan),
        show_step_s(chosen.time.step_s.0),
        crate::units::show_measured(chosen.tokens_per_s, 0),
        chosen.memory.total_bytes.0 / GIB,
        chosen.memory.capacity_bytes.0 / GIB
    );
    print!("{}", emitted(framework, s, chosen));
    Ok(Outcome::Found)
}
