//! Parameters one GPU holds on each kind of stage (before ZeRO sharding), Megatron-LM's
//! placement (embedding first, output layer last, `shared_embedding`'s copy), and the heaviest
//! stage's, which DP and expert-DP reduce and shard (Rajbhandari et al. 2020 §5).

use super::Stage;
use super::stage_layers::{stage_layers, stage_mix, stage_ranks, v_ends_mix, v_middle_mix};
use crate::cost::LayerMix;
use crate::model::{HybridRun, Model};
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Parameters one GPU holds on each kind of stage (before ZeRO), Megatron-LM's placement: word
/// embedding on the first stage, output layer on the last; with tied embeddings and pp > 1 the last
/// stage keeps its own copy of the embedding matrix (Megatron `shared_embedding`).
/// `middle_rank` picks a hybrid stack's middle stage (`stage_ranks`).
pub(super) fn stage_params(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> f64 {
    stage_params_at(
        model,
        plan,
        stage,
        stage_mix(model, plan, stage, middle_rank),
    )
}

/// [`stage_params`] with the stage's layer mix already known (`stage_mix`).
pub(super) fn stage_params_at(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
    mix: LayerMix,
) -> f64 {
    let t = f64::from(plan.tp);
    let (dense, expert) = layer_params_per_gpu_at(model, plan, mix);
    let layer = dense + expert;
    let word_embedding = model.word_embedding_params() / t;
    let output = if model.tied_embeddings {
        word_embedding
    } else {
        model.output_params() / t
    };
    let layers = |n: u32| f64::from(n) * layer;
    // MTP depths (on the last stage): their layers count with the stage's layers below; their
    // projection and norms split over TP. They read the next token's embedding, so with pp > 1 the
    // last stage keeps its own copy of the word embedding (Megatron-Core `GPTModel` builds
    // `embedding` when `pre_process or mtp_process`), which tied embeddings already hold.
    let mtp = f64::from(model.mtp_weight_copies()) * model.mtp_extra_params() / t;
    let mtp_embedding = if keeps_mtp_embedding_copy(model) {
        word_embedding
    } else {
        0.0
    };
    let last_layers = crate::cost::pipeline::last_stage_layers(model, plan);
    match stage {
        // The first GPU of a V holds chunk 0 and the last chunk, not the last stage's layers.
        Stage::Ends => {
            layers(v_ends_mix(model, plan).0)
                + mtp
                + model.word_embedding_params() / t
                + model.position_embedding_params()
                + model.output_params() / t
        }
        Stage::VMiddle => layers(v_middle_mix(model, plan).0),
        Stage::Only => {
            layers(last_layers)
                + mtp
                + model.word_embedding_params() / t
                + model.position_embedding_params()
                + model.output_params() / t
        }
        Stage::First => {
            layers(plan.stages.first)
                + model.word_embedding_params() / t
                + model.position_embedding_params()
        }
        Stage::Middle => layers(plan.stages.middle_max),
        Stage::Last => layers(last_layers) + mtp + output + mtp_embedding,
    }
}

/// Whether the last stage holds a word-embedding copy of its own for the MTP layers (untied
/// embeddings; tied ones are already there as the output layer).
pub(super) fn keeps_mtp_embedding_copy(model: &Model) -> bool {
    model.mtp_layers > 0 && !model.tied_embeddings
}

/// Parameters of the average transformer layer one GPU holds: the part split over TP (attention,
/// dense MLPs, router, shared experts, norms) and the routed experts' part (experts/ep experts,
/// each over etp; `moe.rs`), which ZeRO shards over expert-DP instead of DP.
pub fn layer_params_per_gpu(model: &Model, plan: &ParallelPlan) -> (f64, f64) {
    layer_params_per_gpu_at(model, plan, LayerMix::whole_model(model))
}

/// [`layer_params_per_gpu`] over layers of `mix` (one stage's: the dense prefix of DeepSeek-V3
/// sits on the first stage; a hybrid stack's stage holds its slice of the pattern): dense layers
/// hold their dense MLP, MoE layers their router, shared experts and this GPU's routed experts.
pub fn layer_params_per_gpu_at(model: &Model, plan: &ParallelPlan, mix: LayerMix) -> (f64, f64) {
    let t = f64::from(plan.tp);
    if let Some(run) = mix.run.or_else(|| model.whole_hybrid_run()) {
        return hybrid_layer_params_per_gpu(model, plan, run);
    }
    if model.moe.is_none() {
        return (model.layer_params() / t, 0.0);
    }
    let moe_share = mix.moe_share;
    let rest = (1.0 - moe_share) * model.dense_layer_params() / t
        + moe_share * moe_layer_rest_per_gpu(model, t);
    let expert = moe_share * crate::cost::moe::expert_params_per_gpu(model, plan);
    (rest, expert)
}

/// What one GPU holds of an MoE layer beside its routed experts: attention, router, shared experts
/// and norms split over the `t` TP ranks, LatentMoE's projections whole on each
/// (`Model::latent_projection_params`).
fn moe_layer_rest_per_gpu(model: &Model, t: f64) -> f64 {
    let experts = model.moe.map_or(0.0, |moe| f64::from(moe.experts));
    (model.moe_layer_params() - experts * model.expert_params()) / t
        + model.latent_projection_params() * (1.0 - 1.0 / t)
}

/// [`layer_params_per_gpu_at`] of a hybrid stack's `run` of layers (one stage's): the average over
/// the layers that stage runs — its slice of the pattern (`Model::hybrid_blocks_params_of`) and
/// the d MTP depths the last stage runs (each a transformer layer of the last layer's kind,
/// `Model::block_shares`), whose weights the depths hold once or once each
/// (`Model::mtp_weight_copies`).
fn hybrid_layer_params_per_gpu(model: &Model, plan: &ParallelPlan, run: HybridRun) -> (f64, f64) {
    let t = f64::from(plan.tp);
    let (experts, expert_params) = model.moe.map_or((0.0, 0.0), |moe| {
        (f64::from(moe.experts), model.expert_params())
    });
    let expert_per_gpu = crate::cost::moe::expert_params_per_gpu(model, plan);
    // LatentMoE's projections are whole on every TP rank (`Model::latent_projection_params`).
    let duplicated = model.latent_projection_params() * (1.0 - 1.0 / t);
    let moe_layers = f64::from(run.counts.moe);
    let main_rest =
        (model.hybrid_blocks_params_of(run.counts) - moe_layers * experts * expert_params) / t
            + moe_layers * duplicated;
    let main_expert = moe_layers * expert_per_gpu;
    let (mtp_rest, mtp_expert) = if model.mtp_layer_is_moe() {
        (moe_layer_rest_per_gpu(model, t), expert_per_gpu)
    } else {
        (model.dense_layer_params() / t, 0.0)
    };
    let copies = if run.mtp_depths > 0 {
        f64::from(model.mtp_weight_copies())
    } else {
        0.0
    };
    let stage_layers = f64::from(run.layers().max(1));
    (
        (main_rest + copies * mtp_rest) / stage_layers,
        (main_expert + copies * mtp_expert) / stage_layers,
    )
}

/// The stage whose GPUs hold the most parameters (before ZeRO sharding), and those parameters;
/// under a V schedule (`v_shaped`) the GPUs as the V places the chunks.
/// With it, the middle rank it is (`stage_ranks`).
fn heaviest_stage(model: &Model, plan: &ParallelPlan, v_shaped: bool) -> (Stage, u32, f64) {
    if plan.pp == 1 {
        return (Stage::Only, 1, stage_params(model, plan, Stage::Only, 1));
    }
    let candidates: &[Stage] = match (v_shaped, plan.pp > 2) {
        (true, _) => &[Stage::Ends, Stage::VMiddle],
        (false, true) => &[Stage::First, Stage::Last, Stage::Middle],
        (false, false) => &[Stage::First, Stage::Last],
    };
    let mut best = (
        candidates[0],
        1,
        stage_params(model, plan, candidates[0], 1),
    );
    for &stage in &candidates[1..] {
        for rank in stage_ranks(model, plan, stage) {
            let params = stage_params(model, plan, stage, rank);
            if params > best.2 {
                best = (stage, rank, params);
            }
        }
    }
    best
}

/// The most parameters any GPU of the plan holds (before ZeRO sharding), and the routed-expert
/// parameters among them: those DP and expert-DP reduce and shard. Under a V schedule the first
/// GPU holds both the embedding and the output layer (`Stage::Ends`).
pub fn max_stage_params(model: &Model, training: &Training, plan: &ParallelPlan) -> StageParams {
    let v_shaped = training.pp_schedule.v_kind().is_some();
    let (stage, rank, total) = heaviest_stage(model, plan, v_shaped);
    if model.moe.is_none() {
        return StageParams { total, expert: 0.0 };
    }
    let layers = f64::from(stage_layers(plan, model, stage));
    let mix = stage_mix(model, plan, stage, rank);
    StageParams {
        total,
        expert: layers * layer_params_per_gpu_at(model, plan, mix).1,
    }
}

/// The layers' weights one GPU of the heaviest stage (`max_stage_params`'s) holds, before ZeRO:
/// (non-expert, routed experts), without the embedding and output layer — what Muon
/// orthogonalizes (`cost::muon`). Off the search's hot path: only Muon plans ask.
pub fn max_stage_layer_params(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> (f64, f64) {
    let v_shaped = training.pp_schedule.v_kind().is_some();
    let (stage, rank, _) = heaviest_stage(model, plan, v_shaped);
    let layers = f64::from(stage_layers(plan, model, stage));
    let (dense, expert) = layer_params_per_gpu_at(model, plan, stage_mix(model, plan, stage, rank));
    (layers * dense, layers * expert)
}

/// Parameters of one GPU of a stage (before ZeRO sharding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageParams {
    pub total: f64,
    /// The routed experts' part of `total`.
    pub expert: f64,
}
