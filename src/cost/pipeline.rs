//! Pipeline bubble of (interleaved) 1F1B, and the transformer layers the stages run.

use crate::model::Model;
use crate::plan::ParallelPlan;

/// Transformer layers the last stage (the only one without pipelining) runs: its decoder layers
/// and the model's MTP layers, which Megatron-Core builds on the last stage with the loss
/// (`GPTModel.mtp_process` = `post_process` by default).
pub fn last_stage_layers(model: &Model, plan: &ParallelPlan) -> u32 {
    if plan.pp == 1 {
        model.layers + model.mtp_layers
    } else {
        plan.stages.last + model.mtp_layers
    }
}

/// Transformer layers of the stage that runs the most, MTP layers included.
pub fn max_stage_layers(model: &Model, plan: &ParallelPlan) -> u32 {
    let last = last_stage_layers(model, plan);
    if plan.pp == 1 {
        last
    } else {
        plan.stages.first.max(plan.stages.middle_max).max(last)
    }
}

/// Fraction of ideal compute time the pipeline sits idle: (p − 1)/(v·m), Narayanan et al. 2021 §2.2
/// (1F1B: (p − 1)/m; interleaved with v model chunks per GPU: divided by v).
pub fn bubble_ratio(pp: u32, vpp: u32, num_microbatches: u32) -> f64 {
    if pp <= 1 {
        return 0.0;
    }
    f64::from(pp - 1) / (f64::from(vpp) * f64::from(num_microbatches))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narayanan_bubble() {
        assert_eq!(bubble_ratio(1, 1, 8), 0.0);
        assert_eq!(bubble_ratio(8, 1, 64), 7.0 / 64.0);
        assert_eq!(bubble_ratio(8, 2, 64), 7.0 / 128.0);
        // Megatron SC'21 1T run: p = 64, m = 512.
        assert!((bubble_ratio(64, 1, 512) - 0.123).abs() < 1e-3);
    }
}
