//! Figure 1: memory per GPU of the top plans, stacked by what holds it (`cost::memory`'s breakdown of
//! the most loaded GPU), against the GPU's capacity.

use super::svg::{GIB, StackedBars, plan_details, stacked_bars};
use crate::cost::Estimate;
use crate::cost::terms::TermKind;
use plotters::style::RGBColor;

pub(crate) fn memory_svg(plans: &[Estimate], labels: &[String]) -> Result<String, String> {
    let bars = plans
        .iter()
        .zip(labels)
        .map(|(e, label)| {
            let m = &e.memory;
            (
                label.clone(),
                vec![
                    m.weights_bytes.0 / GIB,
                    m.gradients_bytes.0 / GIB,
                    m.optimizer_bytes.0 / GIB,
                    m.activations_bytes.0 / GIB,
                    m.other_bytes.0 / GIB,
                ],
                format!("{:.1} GiB", m.total_bytes.0 / GIB),
            )
        })
        .collect();
    let capacity = plans
        .first()
        .map_or(0.0, |e| e.memory.capacity_bytes.0 / GIB);
    stacked_bars(&StackedBars {
        title: "Memory per GPU (most loaded GPU of each plan)",
        y_desc: "memory per GPU (GiB)",
        parts: &["weights", "gradients", "optimizer", "activations", "other"],
        bars,
        details: plans.iter().map(plan_details).collect(),
        ranges: None,
        line: Some((capacity, format!("GPU capacity {capacity:.1} GiB"))),
        // The optimizer's states in the colour of its step in the other figures; the others
        // Tableau 10's blue, purple, teal and green.
        part_colours: Some(vec![
            RGBColor(0x4E, 0x79, 0xA7),
            RGBColor(0xB0, 0x7A, 0xA1),
            super::svg::term_colour(TermKind::Optimizer),
            RGBColor(0x76, 0xB7, 0xB2),
            RGBColor(0x59, 0xA1, 0x4F),
        ]),
    })
}
