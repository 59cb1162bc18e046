//! Published runs on current stacks (`validation/modern_runs.yaml`: NVIDIA's DGX benchmark recipes,
//! NeMo, Megatron-Bridge, torchtitan, NeMo AutoModel; see `validation/modern_runs.md`): each run
//! that tpsim can express is planned with its published plan pinned and the unstated settings
//! (recompute, ZeRO, expert TP) left to the search, and compared in tokens/s per GPU, which does not
//! depend on how a source counts FLOPs (modern_runs.md, caveat 1).
//!
//! One file per job: `run.rs` (a run as the file states it), `runs_file.rs` (reading a file),
//! `run_checks.rs` (one run's settings checked), `run_specs.rs` (the GPU profile and model it is
//! planned on), `recipes` (what its source ran beyond its table), `plan_run.rs` (planning it),
//! `predict.rs` (its prediction), `summary.rs` (the accuracy summary) and `pair_order.rs` (the
//! order of published pairs).

mod pair_order;
mod plan_run;
mod predict;
mod recipes;
mod run;
mod run_checks;
mod run_specs;
mod runs_file;
mod summary;

pub use pair_order::{PUBLISHED_GAP, PairOrder, pair_order};
pub use plan_run::{PlannedRun, plan_run};
use predict::flagged;
pub use predict::{ModernPrediction, excluded, predict};
pub use run::{ModernRun, ModernRunsFile, RunHardware, RunModel, RunPlan, RunResults, RunSource};
pub(crate) use run_checks::check_run_id;
use run_checks::{
    check_peak_units, check_run_ga, check_run_hybrid, check_run_moe, check_run_precision,
    check_run_recompute, check_run_task, check_run_zero, finite_moe,
};
use run_specs::{RUN_GPUS, bundled_hybrid, bundled_moe, model_of, precision_of};
pub use run_specs::{gpu_profile, hardware_profile, offload_validated_profiles};
pub use runs_file::{RUNS_SCHEMA_VERSION, RunsFileError, check_unique_ids, parse_runs_file};
pub use summary::{
    AccuracyTarget, DENSE_TARGET, MOE_TARGET, framework_family, memory_summary, summary,
};
