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
