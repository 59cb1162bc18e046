//! Whether tpsim orders published runs the way they measured: the ranking question (issue 11)
//! asked of the current-stack runs. A pair is two predicted runs of one published document (a
//! release of a source's benchmark table), of one model on the same GPUs and GPU count, at one sequence length and global
//! batch — what a user choosing between the two settings would compare — whose published tokens/s
//! per GPU differ by more than [`PUBLISHED_GAP`]. tpsim orders the pair when its faster prediction
//! is the faster measurement; a tie orders nothing.

use serde::Serialize;

use super::{ModernPrediction, ModernRun};

/// Smallest published difference a pair must show, as ln(faster / slower): 2%, the spread of one
/// recipe between releases (Megatron-Bridge's 25.09 and 25.11 tables give Llama 3 8B on 8 B200
/// 29,994 and 30,624 tokens/s per GPU in FP8, 29,388 and 29,521 in MXFP8: 2.1% and 0.5% apart,
/// software changes included; the one run vTrain measured twice differs by 0.05%). Closer than
/// that, which run is faster is not a measured order. A threshold, not a cost.
pub const PUBLISHED_GAP: f64 = 0.02;

/// How many pairs tpsim orders as measured, split by whether the two runs share a precision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PairOrder {
    /// Pairs at one precision: they differ in plan or in settings (overlap, compile, schedule).
    pub same_precision_pairs: usize,
    pub same_precision_ordered: usize,
    /// Pairs whose precisions differ (BF16 against FP8, FP8 against MXFP8), plan too or not.
    pub precision_pairs: usize,
    pub precision_ordered: usize,
}

impl PairOrder {
    pub fn pairs(&self) -> usize {
        self.same_precision_pairs + self.precision_pairs
    }
    pub fn ordered(&self) -> usize {
        self.same_precision_ordered + self.precision_ordered
    }
}

/// What makes two runs comparable: one published document (`ref`, `path` and `commit_or_version`
/// of the source: a release of a benchmark table), the same model, GPUs and GPU count, sequence
/// length and global batch.
fn comparable(a: &ModernRun, b: &ModernRun) -> bool {
    a.source.reference.is_some()
        && a.source.reference == b.source.reference
        && a.source.path == b.source.path
        && a.source.commit_or_version == b.source.commit_or_version
        && a.model_key.is_some()
        && a.model_key == b.model_key
        && a.hardware.gpu == b.hardware.gpu
        && a.hardware.num_gpus == b.hardware.num_gpus
        && a.model.seq_len == b.model.seq_len
        && a.plan.gbs == b.plan.gbs
}

/// Every pair of `runs` (with their `predictions`, index for index) that is comparable, predicted
/// on both sides and published more than [`PUBLISHED_GAP`] apart, counted.
pub fn pair_order(runs: &[ModernRun], predictions: &[ModernPrediction]) -> PairOrder {
    let mut order = PairOrder::default();
    let predicted: Vec<(&ModernRun, f64, f64)> = runs
        .iter()
        .zip(predictions)
        .filter_map(|(run, p)| {
            p.predicted_tokens_per_s_per_gpu
                .zip(p.published_tokens_per_s_per_gpu)
                .map(|(predicted, published)| (run, published, predicted))
        })
        .collect();
    for (i, &(a, published_a, predicted_a)) in predicted.iter().enumerate() {
        for &(b, published_b, predicted_b) in &predicted[i + 1..] {
            if !comparable(a, b) || (published_a / published_b).ln().abs() <= PUBLISHED_GAP {
                continue;
            }
            // A tie (the same prediction for both, as two runs tpsim cannot tell apart get) puts
            // neither first: counted as ordered, it was ordered or not by which run the file
            // lists first.
            let ordered = predicted_a != predicted_b
                && (published_a > published_b) == (predicted_a > predicted_b);
            if a.plan.precision == b.plan.precision {
                order.same_precision_pairs += 1;
                order.same_precision_ordered += usize::from(ordered);
            } else {
                order.precision_pairs += 1;
                order.precision_ordered += usize::from(ordered);
            }
        }
    }
    order
}
