//! Figure 2: where one step's time goes for the top plans (the exposed terms of the step, which add
//! up to it), with each plan's MFU written over its bar and its error range as a bar.

use super::svg::{StackedBars, plan_details, stacked_bars};
use crate::cost::Estimate;
use crate::cost::terms::TermKind;

pub(crate) fn step_svg(
    plans: &[Estimate],
    labels: &[String],
    ranges: Vec<(f64, f64)>,
) -> Result<String, String> {
    // Only the terms some shown plan spends time on; each keeps the colour of its kind.
    let kinds: Vec<TermKind> = TermKind::ALL
        .into_iter()
        .filter(|k| plans.iter().any(|e| e.terms.exposed(*k) > 0.0))
        .collect();
    let bars = plans
        .iter()
        .zip(labels)
        .map(|(e, label)| {
            (
                label.clone(),
                kinds.iter().map(|k| e.terms.exposed(*k)).collect(),
                format!("MFU {}%", crate::units::show_measured(e.mfu * 100.0, 1)),
            )
        })
        .collect();
    stacked_bars(&StackedBars {
        title: "Step time of the top plans",
        y_desc: "time per step (s)",
        parts: &kinds.iter().map(|k| k.label()).collect::<Vec<_>>(),
        bars,
        details: plans.iter().map(plan_details).collect(),
        line: None,
        ranges: Some(ranges),
        // Each term its own colour, whichever are shown, the one the timeline gives it.
        part_colours: kinds.iter().map(|k| super::svg::term_colour(*k)).collect(),
    })
}
