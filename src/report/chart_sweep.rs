//! The sweep as an SVG chart (plotters, SVG backend, its naive built-in font: no system fonts
//! are read). One panel per quantity — throughput, MFU, free memory, and, when `--tokens` is
//! given, days and cost to train — against the sweep's points: at their values on a log axis, joined
//! by a line, when they are numbers (sweeps double: 16, 32, 64, 128); evenly spaced and unjoined
//! markers for GPU names (categories: nothing lies between two GPU models), each label
//! wrapped after a '-' when it would reach its neighbour. The title (wrapped to the figure) names
//! the model (by name where it has one, and parameter count) and the values swept, and the GPU count only when every point
//! has it; otherwise each point's count is under its label.

use plotters::prelude::*;

use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::sweep::{Axis, Row, Sweep};
use crate::units::{GIB, format_count, parse_count};

#[derive(Debug, thiserror::Error)]
#[error("--chart {path}: cannot draw the chart: {message}")]
pub struct ChartError {
    pub path: String,
    pub message: String,
}

type Series = (String, fn(&Row) -> Option<f64>);

const WIDTH: u32 = 1100;
/// Width of one panel's plot area: half the figure less margins (12 a side) and the y labels (70).
const PLOT_W: f64 = (WIDTH / 2 - 2 * 12 - 70) as f64;
/// Characters of the 20-pixel title that fit across the figure (about 9 pixels each).
const TITLE_CHARS: usize = 110;
/// What a panel says at a point where no plan fits, and where no split is valid at all (the
/// table's "nothing fits" and "no valid plan" rows).
const NOTHING_FITS: &str = "nothing fits";
const NO_VALID_PLAN: &str = "no valid plan";
/// Width of a character of the 12-pixel point labels, for wrapping them (a generous average).
const LABEL_CHAR_PX: f64 = 6.0;
const LABEL_LINE_PX: u32 = 14;
/// Most values the title lists one by one; past it, the first three and the last.
const TITLE_VALUES: usize = 12;
/// Least room between two point labels, in pixels; a label that would come closer to the one
/// before it is left out (its point keeps its marker).
const LABEL_GAP_PX: i32 = 6;

/// Draws `sweep` into `path`.
/// The throughput panel's title, which also marks the panel that draws ranges.
const THROUGHPUT: &str = "throughput (tokens/s), bars: range of tpsim's error";
/// The free-memory panel's title, which also marks the panel that draws each point's memory range:
/// a bar down to the memory left at the high end of tpsim's measured memory error (the table's
/// `memory range:` line, the JSON's `memory.total_bytes_high`), below 0 where the plan would not fit.
const FREE_MEMORY: &str = "free memory (GiB), bars: down to tpsim's memory error's high end";

pub fn draw(sweep: &Sweep, path: &str) -> Result<(), ChartError> {
    let fail = |e: &dyn std::fmt::Display| ChartError {
        path: path.to_string(),
        message: e.to_string(),
    };
    let mut panels: Vec<Series> = vec![
        (THROUGHPUT.into(), |r| r.tokens_per_s),
        ("MFU (%)".into(), |r| r.mfu.map(|m| 100.0 * m)),
        (FREE_MEMORY.into(), |r| r.memory.free_gib()),
    ];
    if sweep.tokens.is_some() {
        panels.push(("days to train".into(), |r| r.time_to_train_days()));
        if let Some(price) = sweep.price_per_gpu_hour {
            // Across GPUs the one price is not each GPU's rent: the panel says whose price it
            // drew, as the table's note does (`sweep_command::one_price_note`).
            let title = if sweep.axis == Axis::Gpu {
                format!(
                    "cost to train ($), every GPU at ${} per GPU-hour",
                    crate::units::show_number(price)
                )
            } else {
                "cost to train ($)".to_string()
            };
            panels.push((title, |r| r.cost_to_train));
        }
    }
    let rows = panels.len().div_ceil(2);
    let title_lines = wrap(&chart_title(sweep), TITLE_CHARS);
    let title_px = 20 + 26 * title_lines.len() as u32;
    let root = SVGBackend::new(path, (WIDTH, 360 * rows as u32 + title_px)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    for (i, line) in title_lines.iter().enumerate() {
        root.draw(&Text::new(
            line.clone(),
            (16, 14 + 26 * i as i32),
            ("sans-serif", 20).into_font().color(&BLACK),
        ))
        .map_err(|e| fail(&e))?;
    }
    let (_, panels_area) = root.split_vertically(title_px);
    let values: Vec<String> = sweep.rows.iter().map(|r| r.value.clone()).collect();
    let n = values.len();
    // Numeric axes (nodes, sizes, bandwidths, lengths, batches) are usually swept by doubling:
    // place the points at their values on a log axis. GPU names (and any values that are not all
    // numbers) are categories: even spacing, and no line between points.
    let numbers = match sweep.axis {
        Axis::Gpu => None,
        _ => numeric_values(&values),
    };
    let log_axis = numbers.is_some();
    let positions: Vec<f64> = match &numbers {
        Some(numbers) => numbers.iter().map(|v| v.log2()).collect(),
        None => (0..n).map(|i| i as f64).collect(),
    };
    let x_lo = positions.iter().copied().fold(f64::INFINITY, f64::min);
    let x_hi = positions.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((x_hi - x_lo) * 0.08).max(0.5);
    // The narrowest gap between neighbouring points, in pixels of a panel's plot area.
    let span = x_hi - x_lo + 2.0 * pad;
    let mut sorted = positions.clone();
    sorted.sort_by(f64::total_cmp);
    let gap_px = sorted
        .windows(2)
        .map(|w| (w[1] - w[0]) / span * PLOT_W)
        .fold(PLOT_W, f64::min);
    // Each point's label, wrapped to its gap, and its GPU count when the points differ in it.
    let counts_differ =
        sweep.axis != Axis::Nodes && sweep.rows.iter().any(|r| r.gpus != sweep.rows[0].gpus);
    let labels: Vec<Vec<String>> = sweep
        .rows
        .iter()
        .map(|r| {
            let mut lines =
                wrap_label(&r.value, ((gap_px - 6.0) / LABEL_CHAR_PX).max(4.0) as usize);
            if counts_differ {
                lines.push(format!("{} GPUs", r.gpus));
            }
            lines
        })
        .collect();
    let label_lines = labels.iter().map(Vec::len).max().unwrap_or(1) as u32;
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
        // The throughput panel carries each point's range of tpsim's error (the `range s` column,
        // `uncertainty::interval`), drawn as a bar from low to high.
        let ranges: Vec<(f64, f64, f64)> = if title.as_str() == THROUGHPUT {
            sweep
                .rows
                .iter()
                .zip(&positions)
                .filter_map(|(r, &x)| Some((x, r.tokens_per_s_low?, r.tokens_per_s_high?)))
                .collect()
        } else if title.as_str() == FREE_MEMORY {
            // From the free memory at tpsim's peak down to what is left at the high end of its
            // memory error (against the capacity the panel's points are free of).
            sweep
                .rows
                .iter()
                .zip(&positions)
                .filter_map(|(r, &x)| {
                    let free = r.memory.free_gib()?;
                    let high = r.memory.total_bytes_high?;
                    Some((x, (r.memory.capacity_bytes - high) / GIB, free))
                })
                .collect()
        } else {
            Vec::new()
        };
        let max = points
            .iter()
            .map(|p| p.1)
            .chain(ranges.iter().map(|r| r.2))
            .fold(0.0_f64, f64::max);
        let min = points
            .iter()
            .map(|p| p.1)
            .chain(ranges.iter().map(|r| r.1))
            .fold(0.0_f64, f64::min);
        let top = if max > 0.0 { max * 1.1 } else { 1.0 };
        // Below 0 (a memory range past the capacity) with the same headroom as the top, so a
        // bar's cap stays off the axis.
        let bottom = if min < 0.0 { min * 1.1 } else { 0.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(22 + LABEL_LINE_PX * label_lines)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo - pad)..(x_hi + pad), bottom..top)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .x_labels(0)
            .y_label_formatter(&|y| compact(*y, top))
            .x_desc(x_desc.as_str())
            .disable_x_mesh()
            .draw()
            .map_err(|e| fail(&e))?;
        // One label under each point, at its value (plotters would pick its own ticks), left to
        // right, each only where it clears the one drawn before it: 200 points a few pixels
        // apart printed their labels over each other into one black bar.
        let mut order: Vec<usize> = (0..positions.len()).collect();
        order.sort_by(|&a, &b| positions[a].total_cmp(&positions[b]));
        let mut drawn_to_px = i32::MIN;
        for i in order {
            let (lines, x) = (&labels[i], positions[i]);
            let (px, py) = chart.backend_coord(&(x, bottom));
            let half_px = (lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64
                * LABEL_CHAR_PX
                / 2.0)
                .ceil() as i32;
            if px - half_px < drawn_to_px.saturating_add(LABEL_GAP_PX) {
                continue;
            }
            drawn_to_px = px + half_px;
            for (i, line) in lines.iter().enumerate() {
                area.draw(&Text::new(
                    line.clone(),
                    (
                        px - area.get_base_pixel().0,
                        py - area.get_base_pixel().1 + 6 + (LABEL_LINE_PX * i as u32) as i32,
                    ),
                    ("sans-serif", 12)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(|e| fail(&e))?;
            }
        }
        // A line only where the axis is numeric: between two GPU models there is no point to
        // interpolate, so their markers stand alone (and a little larger). It joins the points in
        // the axis's order, not the order `--values` gave them (64,16,128,32 drew a zigzag back
        // and forth), and breaks where a point has no value (nothing fits there).
        if log_axis {
            for run in joined_runs(sweep, &positions, value) {
                chart
                    .draw_series(LineSeries::new(run, BLUE.stroke_width(2)))
                    .map_err(|e| fail(&e))?;
            }
        }
        let cap = span * 0.012;
        // The memory range in red, as the memory figure draws the capacity: a plan near it.
        let colour = if title == FREE_MEMORY {
            RED.mix(0.6)
        } else {
            BLUE.mix(0.55)
        };
        for &(x, low, high) in &ranges {
            let bar = colour.stroke_width(2);
            chart
                .draw_series([
                    PathElement::new(vec![(x, low), (x, high)], bar),
                    PathElement::new(vec![(x - cap, low), (x + cap, low)], bar),
                    PathElement::new(vec![(x - cap, high), (x + cap, high)], bar),
                ])
                .map_err(|e| fail(&e))?;
        }
        let radius = if log_axis { 4 } else { 6 };
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(*p, radius, BLUE.filled())),
            )
            .map_err(|e| fail(&e))?;
        // A point without a plan has no value in any panel: said at its place above the axis, or
        // its label reads as a point drawn off the chart or lost (the table's row says why).
        for (r, &x) in sweep
            .rows
            .iter()
            .zip(&positions)
            .filter(|(r, _)| r.label.is_none())
        {
            let (px, py) = chart.backend_coord(&(x, bottom));
            area.draw(&Text::new(
                if r.no_valid_plan.is_some() {
                    NO_VALID_PLAN
                } else {
                    NOTHING_FITS
                },
                (
                    px - area.get_base_pixel().0,
                    py - area.get_base_pixel().1 - 6,
                ),
                ("sans-serif", 12)
                    .into_font()
                    .color(&RED)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            ))
            .map_err(|e| fail(&e))?;
        }
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// The runs of points a panel's line joins: every point in order of its position on the x axis,
/// a run ending at a point without a value (nothing fits there: no line passes over it).
fn joined_runs(
    sweep: &Sweep,
    positions: &[f64],
    value: fn(&Row) -> Option<f64>,
) -> Vec<Vec<(f64, f64)>> {
    let mut order: Vec<(f64, Option<f64>)> = sweep
        .rows
        .iter()
        .zip(positions)
        .map(|(r, &x)| (x, value(r)))
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (x, y) in order {
        match (y, runs.last_mut()) {
            (Some(y), Some(run)) => run.push((x, y)),
            (None, Some(run)) if !run.is_empty() => runs.push(Vec::new()),
            _ => {}
        }
    }
    runs.retain(|run| run.len() > 1);
    runs
}

/// The chart's title: what was swept, over which model (its name where it has one, and its
/// parameter count) and which cluster. A GPU count is named only when every point has it; else
/// each point's count is under its label.
fn chart_title(sweep: &Sweep) -> String {
    let first = sweep.rows.first();
    let params = first.map(|r| format_count(r.params)).unwrap_or_default();
    let gpus = first.map(|r| r.gpus).unwrap_or(0);
    // The GPU and the batch, unless the axis varies them: a chart read apart from the command
    // that drew it says what it was drawn for (either may be a default the user did not give).
    let gpu = match sweep.axis {
        Axis::Gpu => "GPUs".to_string(),
        _ => first.map_or("GPUs".to_string(), |r| r.gpu.clone()),
    };
    let on_gpus = if sweep.rows.iter().all(|r| r.gpus == gpus) {
        format!(" on {gpus} {gpu}")
    } else {
        let lo = sweep.rows.iter().map(|r| r.gpus).min().unwrap_or(0);
        let hi = sweep.rows.iter().map(|r| r.gpus).max().unwrap_or(0);
        format!(" on {lo} to {hi} {gpu} (each point's count under it)")
    };
    // Every value while they fit a line or two; past `TITLE_VALUES` the first three and the last
    // (200 points listed every one of them over ten lines of title); the labels name the rest.
    let all: Vec<&str> = sweep.rows.iter().map(|r| r.value.as_str()).collect();
    let values = if all.len() > TITLE_VALUES {
        format!("{}, ..., {}", all[..3].join(", "), all[all.len() - 1])
    } else {
        all.join(", ")
    };
    // A named model by its name and size ("llama3-70b (70.6B parameters)"); a derived shape by
    // its size, the one thing it is.
    let model = match &sweep.model_name {
        Some(name) => format!("{name} ({params} parameters)"),
        None => format!("the {params}-parameter model"),
    };
    let title = match sweep.axis {
        Axis::Params => format!("Best plan per model size ({values} parameters){on_gpus}"),
        Axis::Nodes => {
            let per_node = first.map_or(0, |r| r.gpus / r.value.parse::<u32>().unwrap_or(1).max(1));
            format!("Best plan for {model} on {values} nodes of {per_node} {gpu}")
        }
        // The GPU names are under the points; listing them again only lengthens the title.
        Axis::Gpu => format!("Best plan for {model}{on_gpus}, by GPU"),
        _ => format!(
            "Best plan for {model}{on_gpus}, by {} ({values})",
            sweep.axis.title()
        ),
    };
    match (sweep.axis, first) {
        (Axis::SeqLen | Axis::GlobalBatch, _) | (_, None) => title,
        (_, Some(r)) => format!(
            "{title}; {} sequences x {} tokens per step",
            r.global_batch, r.seq_len
        ),
    }
}

/// `text` in lines of at most `width` characters, broken at spaces (a longer word keeps its line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// A point's label in lines of at most `width` characters, broken after a '-', '_' or '/' (GPU
/// names: "h200-sxm-" / "141g"), so neighbouring labels do not overprint.
fn wrap_label(label: &str, width: usize) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut piece = String::new();
    for c in label.chars() {
        piece.push(c);
        if matches!(c, '-' | '_' | '/') {
            pieces.push(std::mem::take(&mut piece));
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        match lines.last_mut() {
            Some(line) if line.chars().count() + piece.chars().count() <= width => {
                line.push_str(&piece)
            }
            _ => lines.push(piece),
        }
    }
    lines
}

/// The points' values when every one is a positive number ("16", "70B", "12.5"), else `None`.
fn numeric_values(labels: &[String]) -> Option<Vec<f64>> {
    labels
        .iter()
        .map(|l| parse_count("--values", l).ok().filter(|v| *v > 0.0))
        .collect()
}

/// Axis numbers short enough for a narrow label area: 412000 → "412k", 1.5e6 → "1.5M". Below 100,
/// as many decimals as the axis's top needs for its ticks to read apart (an axis to 0.44 GiB ticks
/// every 0.05: "0.05", "0.10", not "0.1", "0.1").
fn compact(y: f64, top: f64) -> String {
    let a = y.abs();
    if a >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", y / 1e3)
    } else if a >= 100.0 {
        format!("{y:.0}")
    } else {
        let decimals = if top > 0.0 {
            (1.0 - top.log10().floor()).clamp(1.0, 6.0) as usize
        } else {
            1
        };
        format!("{y:.decimals$}")
    }
}
