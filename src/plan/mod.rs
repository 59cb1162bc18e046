//! A 3D-parallel plan, validated when it is built.
//!
//! Abbreviations used everywhere in tpsim: `tp` tensor-parallel degree (Megatron column/row splits,
//! inside a node), `cp` context-parallel degree (the sequence split over ranks, ring attention),
//! `pp` pipeline stages, `dp` data-parallel replicas, `ep` expert-parallel degree and `etp` expert
//! tensor-parallel degree (mixture-of-experts layers, Megatron-Core's parallel folding), `vpp`
//! virtual pipeline stages per GPU (interleaved 1F1B), `micro_batch` sequences per micro-batch, `sp`
//! sequence parallelism, `zero` ZeRO stage (Rajbhandari et al. 2020; 3 = FSDP).
//! Megatron-Core's rank order is tp-cp-dp-pp for attention and dense layers (`RankGenerator`,
//! megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp").
//!
//! The module splits by job: the request ([`request`]), the checked plan and its build ([`build`]),
//! the error ([`error`]), one file per family of checks, and the stage layouts ([`stage_layout`]).

mod build;
mod check_stages;
mod degrees;
mod error;
mod experts;
mod hybrid;
mod layer_options;
mod precision;
mod request;
mod schedule;
mod sequence;
mod stage_layout;
mod valid;

pub use build::ParallelPlan;
pub use error::PlanError;
pub use experts::refuses_tied_embeddings_with_pp;
pub use hybrid::{hybrid_run_refusal, mamba_cp_refusal};
pub use layer_options::bf16_layers_pp_refusal;
pub use precision::{check_precision, check_precision_framework};
pub use request::{PlanRequest, Precision, Recompute};
pub use schedule::check_batch_split;
pub use sequence::{
    cp_degrees_splitting, cp_heads_error, cp_sequence_multiple, cp_splits_sequence,
    moe_needs_sequence_parallel, sp_splits_sequence, ulysses_model_parallel_error,
    ulysses_refuses_model_parallelism,
};
pub(crate) use stage_layout::unit_chunks;
pub use stage_layout::{StageLayout, first_last_splits};
pub use valid::divisors;
