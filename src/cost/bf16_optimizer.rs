//! DeepSpeed's `BF16_Optimizer` (deepspeed/runtime/bf16_optimizer.py): the bf16 model's gradients
//! accumulate, micro-batch by micro-batch, into a flat buffer of their own beside the `.grad`s
//! autograd writes, and the step reads that buffer.
//!
//! What it does, from the code BLOOM ran (deepspeed@olruwase/bf16-updates 5ea1c60f8, 2022-03-31,
//! bigscience train/tr11-176B-ml/chronicles.md; squashed into deepspeedai/DeepSpeed as 56c522386,
//! "bf16+pipeline parallelism (#1801)", v0.6.2) and today's (edaa7221):
//! - **Memory**: `fp32_groups_gradients_flat` is `torch.zeros_like(bf16_groups_flat[i],
//!   dtype=float32)` (today `dtype=self.grad_acc_dtype`), the whole group, not a DP shard
//!   ("It doesn't shard the static fp32 buffer it reuses, which consumes `4 bytes * params` of
//!   additional memory", tr11-176B-ml/README.md); the bf16 `.grad`s stay beside it
//!   (`update_hp_grads(clear_lp_grads=False)` from the pipeline engine's `_exec_backward_pass`,
//!   and `clear_lp_grads` only at the next backward's start), so a parameter holds 2 bytes of
//!   bf16 gradient plus the buffer's width ([`gradient_bytes_per_param`]).
//! - **The accumulation pass**: after every micro-batch's backward `update_hp_grads` runs
//!   `hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))` per parameter, eagerly: the cast reads
//!   the bf16 gradient and writes an fp32 copy, the add reads both and writes the sum
//!   ([`accumulation_pass_bytes`]; `.to` is a no-op where the buffer is bf16). Today's
//!   `immediate_grad_update` runs the same add from a hook and defaults to false
//!   (runtime/precision_config.py `DeepSpeedBF16Config`).
//! - **The DP reduction**: the pipeline engine's `_exec_reduce_grads` → `_bf16_reduce_grads` →
//!   `buffered_allreduce_fallback(grads=optimizer.get_grads_for_reduction())` all-reduces the
//!   buffer over DP, but `allreduce_bucket` casts each bucket to `communication_data_type` first,
//!   which is bf16 wherever `bf16.enabled` and the config sets none (engine.py: 5ea1c60f8 "elif
//!   self.bfloat16_enabled(): return torch.bfloat16", today the same since #3370), and BLOOM's
//!   config set none (tr11-176B-ml.slurm; its README: "pytorch-1.11 ... for its NCCL version which
//!   supports BF16 comms"). A bf16 all-reduce moves 2 · 2 · (d − 1)/d bytes a parameter: the wire
//!   bytes of the 4-byte reduce-scatter tpsim's ZeRO-1 prices for an fp32 [`GradDtype`]. Then each
//!   rank steps its fp32 shard and all-gathers the bf16 parameters (`all_gather_dp_groups`), the
//!   ZeRO-1 gather tpsim already counts.
//! - **The tied embedding's all-reduce**: `_exec_reduce_tied_grads` all-reduces `weight._hp_grad`,
//!   the buffer's view, with no cast: at the buffer's width (`embedding_grad_sync`).
//!
//! When it runs: today's `_do_optimizer_sanity_check` (engine.py) hands a bf16 model to it under
//! ZeRO-1 with `data_types.grad_accum_dtype` fp32 (no optimizer offload), and under ZeRO-0 with a
//! pipeline (`PipelineModule`, pp > 1) and bf16 accumulation; ZeRO-0 without a pipeline runs
//! `DDP_BFLOAT16` (plain bf16 gradients), ZeRO-2/3 DeepSpeed's ZeRO optimizers. The 2022 code BLOOM
//! ran took it for every bf16 run at ZeRO-0 and accumulated in fp32 always.

use crate::plan::ParallelPlan;
use crate::training::{GradDtype, Training, TrainingFramework};

/// Bytes of the bf16 `.grad` autograd writes beside the buffer.
const LOW_PRECISION_GRAD_BYTES: f64 = 2.0;

/// The dtype `BF16_Optimizer`'s gradient buffer has where the run uses it, else `None`: under
/// `--framework deepspeed` where today's DeepSpeed picks it (ZeRO-1 with fp32 accumulation, or
/// ZeRO-0 with a pipeline and bf16 accumulation), elsewhere where the run says it used it
/// (`Training::deepspeed_bf16_optimizer`, BLOOM). The buffer holds `Training::grad_dtype`.
pub fn accumulates_in(training: &Training, plan: &ParallelPlan) -> Option<GradDtype> {
    let runs = match training.framework {
        TrainingFramework::Deepspeed => match (plan.zero, training.grad_dtype) {
            (1, GradDtype::Fp32) => true,
            (0, GradDtype::Bf16) => plan.pp > 1,
            _ => false,
        },
        _ => training.deepspeed_bf16_optimizer,
    };
    runs.then_some(training.grad_dtype)
}

/// Whether the plan says ZeRO-0 but `BF16_Optimizer` runs its "own ZeRO stage 1 equivalent"
/// (BLOOM's tr11-176B-ml.slurm): it flattens each group and steps only this DP rank's partition
/// (`fp32_groups_flat_partition`, the fp32 master weights and Adam's moments, `dp_process_group`
/// over `get_data_parallel_world_size`), then `update_lp_params` → `all_gather_dp_groups` gathers
/// the bf16 parameters (bf16_optimizer.py at edaa7221). So memory and traffic are ZeRO-1's, with
/// the gradient all-reduced (`_bf16_reduce_grads`) where ZeRO-1 reduce-scatters.
pub fn shards_states_at_zero0(training: &Training, plan: &ParallelPlan) -> bool {
    plan.zero == 0 && accumulates_in(training, plan).is_some()
}

/// Gradient bytes a parameter holds under the optimizer: the bf16 `.grad` and the buffer.
pub fn gradient_bytes_per_param(buffer: GradDtype) -> f64 {
    LOW_PRECISION_GRAD_BYTES + buffer.bytes()
}

/// HBM bytes a parameter moves each micro-batch in `update_hp_grads`:
/// `hp_grad.add_(lp.grad.to(hp_grad.dtype))`, the cast (read 2, write the buffer's width) where
/// the dtypes differ, then the add (read both, write the sum).
pub fn accumulation_pass_bytes(buffer: GradDtype) -> f64 {
    let b = buffer.bytes();
    let cast = if b == LOW_PRECISION_GRAD_BYTES {
        0.0
    } else {
        LOW_PRECISION_GRAD_BYTES + b
    };
    cast + 3.0 * b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_casts_then_adds() {
        // fp32: read 2 + write 4, then read 4 + 4 and write 4.
        assert_eq!(accumulation_pass_bytes(GradDtype::Fp32), 18.0);
        // bf16: `.to(bf16)` returns the gradient itself; the add reads 2 + 2 and writes 2.
        assert_eq!(accumulation_pass_bytes(GradDtype::Bf16), 6.0);
        assert_eq!(gradient_bytes_per_param(GradDtype::Fp32), 6.0);
        assert_eq!(gradient_bytes_per_param(GradDtype::Bf16), 4.0);
    }
}
