//! Figure 1: memory per GPU of the top plans, stacked by what holds it (`cost::memory`'s breakdown of
//! the most loaded GPU), against the GPU's capacity, with each plan's memory range (the 5th–95th
//! percentile of tpsim's peak-memory error, `memory_margin`) as a box, as figure 2 draws the step's.

use super::svg::{GIB, MEMORY_PARTS, StackedBars, plan_details, stacked_bars};
use crate::cost::Estimate;

/// `ranges`: per plan, its memory's (low, high) in bytes (`memory_margin::total_bytes_low` and
/// `total_bytes_high`); None where no published run states its peak memory.
pub(crate) fn memory_svg(
    plans: &[Estimate],
    labels: &[String],
    ranges: Option<Vec<(f64, f64)>>,
) -> Result<String, String> {
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
    let parts: Vec<&str> = MEMORY_PARTS.iter().map(|(name, _)| *name).collect();
    stacked_bars(&StackedBars {
        title: "Memory per GPU (most loaded GPU of each plan)",
        y_desc: "memory per GPU (GiB)",
        parts: &parts,
        bars,
        details: plans.iter().map(plan_details).collect(),
        ranges: ranges.map(|r| {
            r.into_iter()
                .map(|(low, high)| (low / GIB, high / GIB))
                .collect()
        }),
        line: Some((capacity, format!("GPU capacity {capacity:.1} GiB"))),
        part_colours: MEMORY_PARTS.iter().map(|(_, colour)| *colour).collect(),
    })
}
