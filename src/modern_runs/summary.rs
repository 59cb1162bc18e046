//! The accuracy summary over predictions: median and largest |error| and the count past a bound,
//! for throughput and memory, and the framework family the dense runs are grouped by.

use super::ModernPrediction;

/// Median and largest |memory error| and the count past `bound` of the predictions whose source
/// states a peak memory.
pub fn memory_summary(
    predictions: &[&ModernPrediction],
    bound: f64,
) -> Option<(usize, f64, f64, usize)> {
    median_max_past(
        predictions
            .iter()
            .filter_map(|p| p.memory_error.map(f64::abs)),
        bound,
    )
}

/// The framework family of a run's source, as the accuracy summary groups dense runs: NVIDIA's
/// DGX benchmark recipes, NeMo and Megatron-Bridge all train on Megatron-Core.
pub fn framework_family(source: &str) -> &str {
    match source {
        "dgxc" | "nemo" | "mbridge" => "Megatron-Core family (DGX recipes, NeMo, Megatron-Bridge)",
        "automodel" => "NeMo AutoModel",
        other => other,
    }
}

/// Median and largest |error| and the count past `bound` of the predictions that have one.
pub fn summary(predictions: &[&ModernPrediction], bound: f64) -> Option<(usize, f64, f64, usize)> {
    median_max_past(
        predictions.iter().filter_map(|p| p.error.map(f64::abs)),
        bound,
    )
}

fn median_max_past(
    errors: impl Iterator<Item = f64>,
    bound: f64,
) -> Option<(usize, f64, f64, usize)> {
    let mut errors: Vec<f64> = errors.collect();
    if errors.is_empty() {
        return None;
    }
    errors.sort_by(f64::total_cmp);
    let n = errors.len();
    let median = if n % 2 == 1 {
        errors[n / 2]
    } else {
        0.5 * (errors[n / 2 - 1] + errors[n / 2])
    };
    let past = errors.iter().filter(|e| **e > bound).count();
    Some((n, median, errors[n - 1], past))
}

/// One of the issues' accuracy targets for published tokens/s per GPU: the median |error| at most
/// `median`, and no run past `none_past`. The accuracy summary says of each whether it is met, and
/// tests/modern_accuracy.rs counts against the same bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccuracyTarget {
    /// Where the target was set.
    pub issue: &'static str,
    /// Largest median |error| that meets the target (a fraction: 0.10 = 10%).
    pub median: f64,
    /// The |error| no run may pass (a fraction).
    pub none_past: f64,
}

impl AccuracyTarget {
    /// Whether a median |error| meets the target (at most [`Self::median`]).
    pub fn median_met(&self, median: f64) -> bool {
        median <= self.median
    }

    /// Whether a count of runs past [`Self::none_past`] meets the target (none).
    pub fn none_past_met(&self, past: usize) -> bool {
        past == 0
    }
}

/// Dense runs (issue 8 item 9): median |error| at most 10%, none past 25%.
pub const DENSE_TARGET: AccuracyTarget = AccuracyTarget {
    issue: "issue 8",
    median: 0.10,
    none_past: 0.25,
};

/// MoE runs (issue 9 item 7): median |error| at most 15%, none past 30%.
pub const MOE_TARGET: AccuracyTarget = AccuracyTarget {
    issue: "issue 9",
    median: 0.15,
    none_past: 0.30,
};
