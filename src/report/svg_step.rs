//! Figure 2: where one step's time goes for the top plans (the parts of `StepTime`, which add up to
//! the step), with each plan's MFU written over its bar.

use super::svg::{StackedBars, plan_details, stacked_bars};
use crate::cost::Estimate;

pub(crate) fn step_svg(plans: &[Estimate], labels: &[String]) -> Result<String, String> {
    let bars = plans
        .iter()
        .zip(labels)
        .map(|(e, label)| {
            let t = &e.time;
            (
                label.clone(),
                vec![
                    t.compute_s.0,
                    t.tp_comm_exposed_s.0,
                    t.pp_comm_exposed_s.0,
                    t.dp_comm_exposed_s.0,
                    t.bubble_s.0,
                    t.optimizer_s.0,
                ],
                format!("MFU {:.1}%", e.mfu * 100.0),
            )
        })
        .collect();
    stacked_bars(&StackedBars {
        title: "Step time of the top plans",
        y_desc: "time per step (s)",
        parts: &[
            "compute",
            "exposed TP comm",
            "exposed PP comm",
            "exposed DP comm",
            "pipeline bubble",
            "optimizer",
        ],
        bars,
        details: plans.iter().map(plan_details).collect(),
        line: None,
    })
}
