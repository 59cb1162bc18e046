//! Context parallelism, the experts' folding into the stage (Megatron-Core's parallel folding,
//! each framework's expert-parallel ranks) and the precision, checked together as the build runs them.

use crate::cluster::Cluster;
use crate::model::Model;
use crate::training::Training;

use super::error::PlanError;
use super::precision::{check_precision, check_precision_framework};
use super::request::PlanRequest;
use super::sequence::{
    cp_degrees_splitting, cp_heads_error, cp_splits_sequence, sp_sequence_error,
    ulysses_model_parallel_error,
};
use super::valid::{divisors, list};

/// Whether the framework refuses this model under a pipeline of `pp` stages: tied embeddings
/// under torchtitan (`TrainingFramework::runs_tied_embeddings_with_pp`); the search's question.
pub fn refuses_tied_embeddings_with_pp(pp: u32, model: &Model, training: &Training) -> bool {
    pp > 1 && model.tied_embeddings && !training.framework.runs_tied_embeddings_with_pp()
}

/// CP splits the sequence for load balancing, experts fold into the stage, the GPU runs the precision.
pub(super) fn check_context_experts_precision(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    training: &Training,
) -> Result<(), PlanError> {
    let gpus = cluster.total_gpus();
    // Megatron-DeepSpeed refuses Megatron's sequence parallelism beside Ulysses first
    // (megatron/initialize.py), then tensor and pipeline parallelism (parallel_state.py).
    if r.cp > 1
        && r.tp > 1
        && r.sequence_parallel
        && !training.framework.runs_sequence_parallelism_beside_cp()
    {
        return Err(PlanError::ulysses_with_sequence_parallel(r.cp, Some(r.tp)));
    }
    if let Some(err) = ulysses_model_parallel_error(r.cp, r.tp, r.pp, training) {
        return Err(err);
    }
    if refuses_tied_embeddings_with_pp(r.pp, model, training) {
        return Err(PlanError::TiedEmbeddingsWithPp { pp: r.pp });
    }
    if !cp_splits_sequence(r.cp, training.seq_len, training.framework) {
        return Err(PlanError::cp_sequence(
            r.cp,
            training.seq_len,
            cp_degrees_splitting(training.seq_len, gpus, training.framework),
            training.framework,
        ));
    }
    if let Some(err) = sp_sequence_error(r.tp, r.cp, r.sequence_parallel, training) {
        return Err(err);
    }
    if r.cp > 1 && training.attention == crate::training::AttentionKernel::Unfused {
        return Err(PlanError::CpWithUnfusedAttention { cp: r.cp });
    }
    check_precision_framework(training.framework, r.precision)?;
    if r.cp > 1
        && !training.cp_exchange.runs_sliding_windows()
        && model
            .attention_window
            .is_some_and(|w| w.windows_some_layer())
    {
        return Err(PlanError::cp_with_window(r.cp, training));
    }
    if let Some(err) = cp_heads_error(r.cp, r.tp, model, training) {
        return Err(err);
    }
    match model.moe {
        None if r.ep > 1 || r.etp > 1 => {
            return Err(PlanError::ExpertsOnDense {
                ep: r.ep,
                etp: r.etp,
                model: model.name.clone(),
            });
        }
        Some(moe) => {
            if !moe.experts.is_multiple_of(r.ep) {
                return Err(PlanError::EpExperts {
                    ep: r.ep,
                    experts: moe.experts,
                    valid: list(divisors(moe.experts)),
                });
            }
            // The framework's own expert layout first: torchtitan draws its EP ranks from
            // dp_shard x cp x tp with the expert TP it fixes, which that check names with the
            // --ep values it takes; Megatron-Core's folding below would tell a torchtitan run
            // to "give --etp", which torchtitan refuses at ep > 1.
            if let Some(err) = framework_expert_error(r, moe.experts, training) {
                return Err(err);
            }
            // Parallel folding: the experts' etp x ep x expert-dp fill the same tp x cp x dp
            // GPUs of a pipeline stage as the attention's (Megatron-Core parallel_state.py).
            let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
            let expert_model = u64::from(r.ep) * u64::from(r.etp);
            if stage_gpus % expert_model != 0 {
                let folds: Vec<u32> = divisors(moe.experts)
                    .into_iter()
                    .filter(|&d| stage_gpus.is_multiple_of(u64::from(d) * u64::from(r.etp)))
                    .collect();
                return Err(PlanError::EpFolding {
                    ep: r.ep,
                    etp: r.etp,
                    stage_gpus,
                    valid_ep: list(folds),
                });
            }
            // MoEFlexTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py) runs
            // DeepEP over the expert-TP x EP group with top-k x etp destinations and no separate
            // expert-TP gather; tpsim's DeepEP copy count is the EP group's alone. At ep 1 the
            // all-to-all dispatcher is what runs (`MoeDispatcher::written_for`), so it stands.
            if r.etp > 1
                && r.ep > 1
                && training.moe_dispatch.dispatcher == crate::training::MoeDispatcher::Deepep
            {
                return Err(PlanError::DeepepWithExpertTp { etp: r.etp });
            }
            if r.etp > 1 && megatron_core_refuses_biased_expert_tp(model, training) {
                return Err(PlanError::BiasedExpertsWithExpertTp {
                    etp: r.etp,
                    model: model.name.clone(),
                });
            }
        }
        None => {}
    }
    check_precision(cluster, r.precision)
}

/// Expert degrees the framework cannot lay out although they fold into the stage: torchtitan
/// does not split experts over TP ranks (no expert TP since #3167), and draws its EP ranks from
/// the FSDP shard ranks, the CP ranks and the TP ranks
/// (`TrainingFramework::expert_parallel_ranks`), so that under ZeRO-0 (replication) or HSDP's
/// copies fewer ranks are left to it than a stage has.
fn framework_expert_error(r: &PlanRequest, experts: u32, training: &Training) -> Option<PlanError> {
    let framework = training.framework;
    if !framework.runs_expert_tp(r.etp, r.ep, r.tp) {
        return Some(PlanError::TorchtitanExpertTp {
            etp: r.etp,
            tp: r.tp,
            ep: r.ep,
            want: framework.default_etp(r.tp, r.ep, true),
        });
    }
    if r.ep <= 1 && r.etp <= 1 {
        return None;
    }
    let ranks_at =
        |zero: u8, replicas: u32| framework.expert_parallel_ranks(r.tp, r.cp, r.dp, zero, replicas);
    let (ranks, dp_shard) = ranks_at(r.zero, r.dp_replicas)?;
    if ranks.is_multiple_of(u64::from(r.ep)) {
        return None;
    }
    let shard_why = if r.zero != 3 {
        format!("--zero {} replicates every rank's states", r.zero)
    } else if r.dp_replicas > 1 {
        format!("dp {} / --dp-replicas {}", r.dp, r.dp_replicas)
    } else {
        format!("dp {} under --zero 3", r.dp)
    };
    let valid: Vec<u32> = divisors(experts)
        .into_iter()
        .filter(|d| ranks.is_multiple_of(u64::from(*d)))
        .collect();
    let mut fix = format!("valid --ep here: {}", list(valid));
    if let Some((sharded, _)) = ranks_at(3, 1)
        && (r.zero != 3 || r.dp_replicas > 1)
        && sharded.is_multiple_of(u64::from(r.ep))
    {
        fix.push_str(&format!(
            ", or keep --ep {} with {}",
            r.ep,
            if r.zero != 3 {
                "--zero 3 (FSDP2 over the data-parallel ranks, torchtitan's default)"
            } else {
                "one copy of the sharded states (drop --dp-replicas)"
            }
        ));
    }
    Some(PlanError::TorchtitanExpertRanks {
        ep: r.ep,
        dp_shard,
        shard_why,
        cp: r.cp,
        tp: r.tp,
        ranks,
        fix,
    })
}

/// Megatron-Core builds experts with biases (GPT-OSS: `add_bias_linear`, as Megatron-Bridge's
/// gpt_oss_bridge.py sets it) only unsplit: `TransformerConfig.__post_init__`
/// (megatron/core/transformer/transformer_config.py) asserts `expert_tensor_parallel_size == 1`
/// whenever `num_moe_experts` is set with `add_bias_linear`, so every expert-TP degree above 1 is
/// refused there (Megatron-LM, Megatron-Bridge and NeMo alike build that config).
pub(super) fn megatron_core_refuses_biased_expert_tp(model: &Model, training: &Training) -> bool {
    model.moe.is_some()
        && model.linear_bias
        && training.framework == crate::training::TrainingFramework::MegatronCore
}
