//! The sweep as an SVG line chart (plotters, SVG backend, its naive built-in font: no system fonts
//! are read). One panel per quantity — throughput, MFU, memory headroom, and, when `--tokens` is
//! given, days and cost to train — against the sweep's points: at their values on a log axis when
//! they are numbers (sweeps double: 16, 32, 64, 128), evenly spaced for GPU names. The title names
//! the model by its parameter count and the values swept.

use plotters::prelude::*;

use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::sweep::{Axis, Row, Sweep};
use crate::units::{format_count, parse_count};

#[derive(Debug, thiserror::Error)]
#[error("--chart {path}: cannot draw the chart: {message}")]
pub struct ChartError {
    pub path: String,
    pub message: String,
}

type Series = (&'static str, fn(&Row) -> Option<f64>);

/// Draws `sweep` into `path`.
pub fn draw(sweep: &Sweep, path: &str) -> Result<(), ChartError> {
    let fail = |e: &dyn std::fmt::Display| ChartError {
        path: path.to_string(),
        message: e.to_string(),
    };
    let mut panels: Vec<Series> = vec![
        ("throughput (tokens/s)", |r| r.tokens_per_s),
        ("MFU (%)", |r| r.mfu.map(|m| 100.0 * m)),
        ("memory headroom (GiB)", |r| r.memory_headroom_gib),
    ];
    if sweep.tokens.is_some() {
        panels.push(("days to train", |r| r.time_to_train_days));
        if sweep.price_per_gpu_hour.is_some() {
            panels.push(("cost to train ($)", |r| r.cost_to_train));
        }
    }
    let rows = panels.len().div_ceil(2);
    let title_px = 44;
    let root = SVGBackend::new(path, (1100, 360 * rows as u32 + title_px)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    root.draw(&Text::new(
        chart_title(sweep),
        (16, 14),
        ("sans-serif", 20).into_font().color(&BLACK),
    ))
    .map_err(|e| fail(&e))?;
    let (_, panels_area) = root.split_vertically(title_px);
    let labels: Vec<String> = sweep.rows.iter().map(|r| r.value.clone()).collect();
    let n = labels.len();
    // Numeric axes (nodes, sizes, bandwidths, lengths, batches) are usually swept by doubling:
    // place the points at their values on a log axis. GPU names keep even spacing.
    let positions: Vec<f64> = match numeric_values(&labels) {
        Some(values) => values.iter().map(|v| v.log2()).collect(),
        None => (0..n).map(|i| i as f64).collect(),
    };
    let log_axis = numeric_values(&labels).is_some();
    let x_lo = positions.iter().copied().fold(f64::INFINITY, f64::min);
    let x_hi = positions.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((x_hi - x_lo) * 0.08).max(0.5);
    let x_desc = if log_axis {
        format!("{} (log scale)", sweep.axis.title())
    } else {
        sweep.axis.title().to_string()
    };
    for (area, (title, value)) in panels_area.split_evenly((rows, 2)).iter().zip(panels) {
        let points: Vec<(f64, f64)> = sweep
            .rows
            .iter()
            .zip(&positions)
            .filter_map(|(r, &x)| value(r).map(|v| (x, v)))
            .collect();
        let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        let min = points.iter().map(|p| p.1).fold(0.0_f64, f64::min);
        let top = if max > 0.0 { max * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo - pad)..(x_hi + pad), min.min(0.0)..top)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_labels(0)
            .y_label_formatter(&|y| compact(*y))
            .x_desc(x_desc.as_str())
            .disable_x_mesh()
            .draw()
            .map_err(|e| fail(&e))?;
        // One label under each point, at its value (plotters would pick its own ticks).
        for (label, &x) in labels.iter().zip(&positions) {
            let (px, py) = chart.backend_coord(&(x, min.min(0.0)));
            area.draw(&Text::new(
                label.clone(),
                (
                    px - area.get_base_pixel().0,
                    py - area.get_base_pixel().1 + 6,
                ),
                ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(|e| fail(&e))?;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))
            .map_err(|e| fail(&e))?;
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))
            .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// The chart's title: what was swept, over which model (its parameter count, the one model fact a
/// sweep row carries) and which cluster.
fn chart_title(sweep: &Sweep) -> String {
    let first = sweep.rows.first();
    let params = first.map(|r| format_count(r.params)).unwrap_or_default();
    let gpus = first.map(|r| r.gpus).unwrap_or(0);
    let values = sweep
        .rows
        .iter()
        .map(|r| r.value.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    match sweep.axis {
        Axis::Params => format!("Best plan per model size ({values} parameters) on {gpus} GPUs"),
        Axis::Nodes => format!("Best plan for the {params}-parameter model on {values} nodes"),
        _ => format!(
            "Best plan for the {params}-parameter model on {gpus} GPUs, by {} ({values})",
            sweep.axis.title()
        ),
    }
}

/// The points' values when every one is a positive number ("16", "70B", "12.5"), else `None`.
fn numeric_values(labels: &[String]) -> Option<Vec<f64>> {
    labels
        .iter()
        .map(|l| parse_count("--values", l).ok().filter(|v| *v > 0.0))
        .collect()
}

/// Axis numbers short enough for a narrow label area: 412000 → "412k", 1.5e6 → "1.5M".
fn compact(y: f64) -> String {
    let a = y.abs();
    if a >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", y / 1e3)
    } else if a >= 100.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.1}")
    }
}
