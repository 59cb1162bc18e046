//! The word embedding's gradient all-reduce between the first and the last pipeline stage, when
//! the last stage holds its own copy of the embedding (tied input and output embeddings, or the
//! next-token embedding multi-token prediction reads). Once per step, after the last backward.
//!
//! - Megatron-Core `finalize_model_grads` (megatron/core/distributed/finalize_model_grads.py at
//!   d98e8a64): after every model chunk's `finish_grad_sync` (the DP reduce-scatter or
//!   all-reduce) it calls `_allreduce_word_embedding_grads`, which all-reduces the whole
//!   `main_grad` of `shared_embedding_or_output_weight()` (vocab/tp × h in the gradient buffer's
//!   dtype) over the embedding group when `share_embeddings_and_output_weights or
//!   mtp_num_layers`. The embedding group is the first and the last rank of each PP group
//!   (`default_embedding_ranks`, parallel_state.py). The call is synchronous on the default stream
//!   and nothing runs beside it: the optimizer step waits for it, so all of it is exposed.
//!   `_allreduce_position_embedding_grads` moves nothing for a GPT: its group is the first stage
//!   alone (`default_position_embedding_ranks` returns `[pp_ranks[0]]`), so a size-1 group skips it.
//! - Megatron-LM's 2021-22 code (the SC'21 runs): `MegatronOptimizer.allreduce_word_embedding_grads`
//!   in `reduce_model_grads`, after the DP all-reduce, the same all-reduce of `main_grad` over the
//!   embedding group (megatron/optimizer/optimizer.py, microsoft/Megatron-DeepSpeed at f4157bea).
//! - DeepSpeed's pipeline engine: a `TiedLayerSpec` module built on both stages is reduced by
//!   `ReduceTiedGrads` (`_exec_reduce_tied_grads` → `PipelineModule.allreduce_tied_weight_gradients`,
//!   `dist.all_reduce(weight.grad, group=tied group)`), issued after the last backward and before
//!   `ReduceGrads` (deepspeed/runtime/pipe/schedule.py `TrainSchedule.steps`), equally exposed.
//!
//! The two ranks sit as far apart as the PP group reaches (rank r and r + (pp − 1)·tp·cp·dp), so
//! the all-reduce runs on the PP group's link. A V-shaped schedule runs the first and the last
//! chunk on the same GPU, which holds both copies: nothing crosses a link.

use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Whether a GPU of the last stage holds a copy of the word embedding whose gradient it must add to
/// the first stage's (tied embeddings or MTP, with the ends on different GPUs).
pub fn last_stage_holds_embedding_copy(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> bool {
    plan.pp > 1
        && training.pp_schedule.v_kind().is_none()
        && (model.tied_embeddings || model.mtp_layers > 0)
}

/// Bytes of the all-reduced gradient on each of the two GPUs: vocab/tp × h in the gradient dtype
/// (`Training::grad_dtype`, the `main_grad` buffer); 0 where no copy needs it.
pub fn grad_allreduce_bytes(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    if !last_stage_holds_embedding_copy(model, training, plan) {
        return 0.0;
    }
    model.word_embedding_params() / f64::from(plan.tp.max(1)) * training.grad_dtype.bytes()
}
