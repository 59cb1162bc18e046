//! The pure cost model: `evaluate(model, cluster, training, plan) -> Estimate`. No I/O, no globals,
//! no allocation, so the planner can call it millions of times a second from any thread.
//!
//! A plan is a set of communication groups (`groups.rs`: kind, size, stride, link) and a step is a
//! sum of terms (`terms.rs`: compute, each group's communication, bubble, optimizer), each with its
//! bytes, its full time, its exposed time and what hides the rest. What overlaps is the framework's
//! (`TrainingFramework::default_overlap`, each setting overridable):
//! - TP collectives sit on the critical path unless TP communication overlap is on (Megatron-Core
//!   userbuffers, torchtitan async TP, sequence parallelism required): then each all-gather and
//!   reduce-scatter runs in chunks under its neighbouring linear GEMM, which is cut into tp pieces
//!   (so it runs at the smaller pieces' efficiency); what the GEMMs cannot cover stays exposed.
//! - CP's K/V ring exchange runs under the attention blocks of the step it feeds (Transformer
//!   Engine's P2P ring attention); a send longer than its step's attention is exposed.
//! - PP sends and receives are synchronous (two per micro-batch per model chunk exposed) unless the
//!   interleaved schedule overlaps them (`--overlap-p2p-communication`, vpp > 1).
//! - Gradient reduction overlaps with the backward pass of the micro-batch that produces it when the
//!   framework buckets it (PyTorch DDP, Megatron `overlap_grad_reduce`, FSDP, DeepSpeed's ZeRO
//!   optimizers only: `overlap::grad_reduce_overlaps`); what does not fit in
//!   that window is exposed, and so is the last bucket. The distributed optimizer's parameter
//!   all-gather after the step is exposed unless `overlap_param_gather` hides it under the next
//!   forward; ZeRO-3's forward gathers hide behind the forward.
//! - Hidden communication still costs 15% of its time ([`OVERLAP_COMPUTE_PENALTY`]).
//! - The optimizer step runs after all of that.
//!
//! One file per job: `evaluate.rs` (the step as a sum of terms) returns an `Estimate`
//! (`estimate.rs`) from the stages' times (`stage_times.rs`), which are built from the unit costs
//! of each stage's average layer (`unit_costs.rs`), kept per layer mix (`mix_costs.rs`,
//! `layer_mix.rs`); `overlap.rs` says what hides and `tp_collectives.rs` counts TP collectives.
//! Unit tests of the unit costs are in `tests/`.

pub mod bf16_optimizer;
pub mod cast;
pub mod comm;
pub mod compute;
pub mod context_parallel;
pub mod embedding_grad_sync;
pub mod embedding_output_tp;
mod estimate;
mod evaluate;
pub mod groups;
pub mod hybrid;
mod layer_mix;
pub mod ledger;
pub mod memory;
mod mix_costs;
pub mod module_recompute;
pub mod moe;
pub mod moe_router;
pub mod muon;
mod overlap;
pub mod pipeline;
pub mod schedule;
pub mod simulated;
mod stage_times;
pub mod terms;
pub mod torch_ring;
mod tp_collectives;
mod unit_costs;
pub mod v_schedule;

pub use estimate::{Estimate, Infeasible, StepTime, cost_to_train};
pub use evaluate::evaluate;
pub use layer_mix::{Bf16Part, LayerMix, slowest_stage_mix};
pub(crate) use mix_costs::MixCosts;
pub use overlap::{OVERLAP_COMPUTE_PENALTY, grad_reduce_overlaps, overlap_applied};
pub(crate) use overlap::{PassComm, exposed_under};
pub(crate) use stage_times::stage_moe_layers;
pub use stage_times::{Ends, SlowestStage, slowest_stage};
pub use tp_collectives::{
    column_grad_collective_async, sp_regathers_in_backward, tp_pairs_per_layer,
    tp_recompute_repeats_collectives,
};
pub(crate) use tp_collectives::{recomputed_modules, tp_pairs_at, tp_recompute_share};
#[cfg(test)]
pub(crate) use unit_costs::unit_costs;
pub(crate) use unit_costs::{UnitCosts, unit_costs_at};

#[cfg(test)]
mod tests;
