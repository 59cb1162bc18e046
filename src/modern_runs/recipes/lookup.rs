//! The keys every recipe rule matches on: a run's `model_key`, its GPU and its precision.

use crate::modern_runs::ModernRun;

/// A run's `model_key` and its GPU in capitals, the key every recipe rule below matches on.
pub(super) fn model_and_gpu(run: &ModernRun) -> (&str, String) {
    (
        run.model_key.as_deref().unwrap_or(""),
        run.hardware.gpu.to_ascii_uppercase(),
    )
}

/// Whether a run's published precision is `precision` (`plan.precision`: bf16, fp8, mxfp8, nvfp4).
pub(super) fn precision_is(run: &ModernRun, precision: &str) -> bool {
    run.plan
        .precision
        .as_deref()
        .is_some_and(|p| p.eq_ignore_ascii_case(precision))
}
