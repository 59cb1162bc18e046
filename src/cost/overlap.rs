//! Which communication overlaps and what hiding it still costs: the overlap switches that take
//! effect for a plan (`overlap_applied`), the exposed part of communication run under compute
//! (`exposed_under`, with Calculon's `processor_usage` penalty, [`OVERLAP_COMPUTE_PENALTY`]) and
//! a group's communication per pass before and after overlap (`PassComm`).

use super::moe;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Fraction of overlapped communication time that still lands on the step (see `evaluate`):
/// communication kernels take SMs from the compute they hide under. Calculon (Isaev et al. 2023,
/// `systems/a100_80g.json`) gives `processor_usage` 0.15 for NVLink and 0.02 for InfiniBand, the
/// share of the processor a transfer occupies; tpsim charges 0.15 on every link, because NCCL's
/// network collectives also run on SMs (the reduction and the copies into the proxy's buffers)
/// and the MoE report measures DeepEP, whose traffic is mostly on the NIC, taking about 20% of
/// the GEMMs' rate while it runs ("Scalable Training of MoE Models with Megatron Core", 2026,
/// §4.2.3: 20 SMs). Not fitted.
pub const OVERLAP_COMPUTE_PENALTY: f64 = 0.15;

/// Exposed part of `comm_s` run under `window_s` of compute: what the window cannot cover, plus the
/// slowdown the hidden part still causes.
pub(crate) fn exposed_under(comm_s: f64, window_s: f64) -> f64 {
    let not_hidden = (comm_s - window_s).max(0.0);
    not_hidden + OVERLAP_COMPUTE_PENALTY * (comm_s - not_hidden)
}

/// A group's communication per layer (TP, CP) or per model chunk (PP) per micro-batch, before and
/// after overlap, split by the pass it runs in. Backward includes the recompute forward's share.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct PassComm {
    pub forward_s: f64,
    pub backward_s: f64,
    pub forward_exposed_s: f64,
    pub backward_exposed_s: f64,
    /// Bytes one GPU sends, forward and backward together.
    pub wire_bytes: f64,
}

impl PassComm {
    /// `self` at `share`, field by field: one block's communication at a hybrid stack's average
    /// layer's share of that block (1 leaves it unchanged).
    pub fn scaled(&self, share: f64) -> PassComm {
        PassComm {
            forward_s: share * self.forward_s,
            backward_s: share * self.backward_s,
            forward_exposed_s: share * self.forward_exposed_s,
            backward_exposed_s: share * self.backward_exposed_s,
            wire_bytes: share * self.wire_bytes,
        }
    }

    /// `self` plus `share` of the difference `a − b`, field by field.
    pub fn plus_scaled_difference(&self, share: f64, a: &PassComm, b: &PassComm) -> PassComm {
        let at = |x: f64, ya: f64, yb: f64| x + share * (ya - yb);
        PassComm {
            forward_s: at(self.forward_s, a.forward_s, b.forward_s),
            backward_s: at(self.backward_s, a.backward_s, b.backward_s),
            forward_exposed_s: at(
                self.forward_exposed_s,
                a.forward_exposed_s,
                b.forward_exposed_s,
            ),
            backward_exposed_s: at(
                self.backward_exposed_s,
                a.backward_exposed_s,
                b.backward_exposed_s,
            ),
            wire_bytes: at(self.wire_bytes, a.wire_bytes, b.wire_bytes),
        }
    }

    pub fn total_s(&self) -> f64 {
        self.forward_s + self.backward_s
    }
    pub fn exposed_s(&self) -> f64 {
        self.forward_exposed_s + self.backward_exposed_s
    }
}

/// Whether TP communication overlap applies: asked for, TP > 1, and sequence parallelism (which
/// Megatron-Core's `--tp-comm-overlap` requires, arguments.py).
pub(crate) fn tp_overlap_on(training: &Training, plan: &ParallelPlan) -> bool {
    training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel
}

/// Whether the gradient reduction runs during the backward for `plan` (`--overlap-grad-reduce`
/// asked for, and the framework can run it there). DeepSpeed reads `zero_optimization.overlap_comm`
/// only in its ZeRO optimizers (stage_1_and_2.py `create_gradient_handling_hooks`, stage3.py); the
/// engine reduces the gradients itself, after the backward (engine.py `_backward_epilogue` ->
/// `allreduce_gradients`), where none of them runs: ZeRO-0, and where
/// `_do_optimizer_sanity_check` hands the model to `BF16_Optimizer`
/// (`bf16_optimizer::accumulates_in`: ZeRO-1 with fp32 gradients); and its pipeline engine turns
/// `enable_backward_allreduce` off and reduces after the schedule (pipe/engine.py
/// `_exec_reduce_grads`; deepspeedai/DeepSpeed at edaa7221 for all three).
pub fn grad_reduce_overlaps(training: &Training, plan: &ParallelPlan) -> bool {
    let deepspeed_reduces_after_backward = training.framework
        == crate::training::TrainingFramework::Deepspeed
        && (plan.zero == 0
            || super::bf16_optimizer::accumulates_in(training, plan).is_some()
            || plan.pp > 1);
    training.overlap.grad_reduce && !deepspeed_reduces_after_backward
}

/// The overlap switches that take effect for `plan`, by the rules the estimate follows: TP comm
/// overlap needs tp > 1 with sequence parallelism (`tp_overlap_on`); gradients are reduced, and
/// the distributed optimizer gathers parameters (ZeRO ≥ 1), only over more than one data-parallel
/// rank (dp × cp); pipeline sends overlap only in the interleaved schedule; the MoE all-to-all
/// overlap only where Megatron-Core's combined 1F1B schedule can pair micro-batches; DeepSpeed
/// reduces gradients during the backward only in its ZeRO optimizers (`grad_reduce_overlaps`)
/// (`moe::alltoall_overlap_applies`). What `training.overlap` asks for and this gives can differ:
/// the report's header and JSON (`overlap_applied`) say which.
/// The model enters by whether it has experts and how many MTP layers it has, which is all the
/// MoE rule reads (so a report's model summary serves as well as the model).
pub fn overlap_applied(
    has_experts: bool,
    mtp_layers: u32,
    training: &Training,
    plan: &ParallelPlan,
) -> crate::training::Overlap {
    let o = training.overlap;
    let data_ranks = plan.dp * plan.cp;
    let moe_layer_recomputed = moe::recomputes_moe_layer(training.recompute_modules, plan);
    crate::training::Overlap {
        tp_comm: tp_overlap_on(training, plan),
        grad_reduce: grad_reduce_overlaps(training, plan) && data_ranks > 1,
        param_gather: o.param_gather && plan.zero >= 1 && data_ranks > 1,
        p2p: o.p2p && plan.pp > 1 && plan.vpp > 1,
        moe_a2a: o.moe_a2a
            && moe::alltoall_overlap_refusal_of(
                has_experts,
                mtp_layers,
                moe_layer_recomputed,
                plan,
            )
            .is_none(),
    }
}
