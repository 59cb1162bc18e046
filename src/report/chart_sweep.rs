//! The sweep as an SVG line chart (plotters, SVG backend, its naive built-in font: no system fonts
//! are read). One panel per quantity — throughput, MFU, memory headroom, and, when `--tokens` is
//! given, days and cost to train — against the sweep's points, evenly spaced in the order given.

use plotters::prelude::*;

use crate::sweep::{Row, Sweep};

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
    let root = SVGBackend::new(path, (1100, 360 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let labels: Vec<String> = sweep.rows.iter().map(|r| r.value.clone()).collect();
    let n = labels.len();
    for (area, (title, value)) in root.split_evenly((rows, 2)).iter().zip(panels) {
        let points: Vec<(f64, f64)> = sweep
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| value(r).map(|v| (i as f64, v)))
            .collect();
        let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
        let min = points.iter().map(|p| p.1).fold(0.0_f64, f64::min);
        let top = if max > 0.0 { max * 1.1 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), min.min(0.0)..top)
            .map_err(|e| fail(&e))?;
        let label_of = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_labels(n.max(2) * 2 + 1)
            .x_label_formatter(&label_of)
            .y_label_formatter(&|y| compact(*y))
            .x_desc(sweep.axis.title())
            .disable_x_mesh()
            .draw()
            .map_err(|e| fail(&e))?;
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
