//! Figure 3: the whole search. Every evaluated plan is a point (memory per GPU against
//! throughput), coloured by TP degree; infeasible plans are grey and lie right of the capacity line;
//! the Pareto frontier (no other feasible plan needs less memory and runs faster) is drawn exactly, as
//! steps (no plan lies between two of its points).
//! The memory axis is labelled at 1, 2 and 5 of each decade, and plans needing more than about 4x
//! the capacity are squeezed into a shaded band at its right end (`MemoryAxis`).
//!
//! Thinning, so a 100k-plan search still writes in well under a second: above `MAX_POINTS` plans,
//! one plan is kept per 8 × 8-pixel cell per TP degree among feasible plans (per cell among infeasible ones) (the best-ranked, since the
//! planner's order is kept), and every frontier plan is kept. The subtitle says how many were drawn.

use std::collections::HashSet;

use plotters::prelude::*;

use super::svg::{FONT, GIB, svg, tp_colour};
use crate::cost::Estimate;
use crate::planner::SearchStats;

/// Above this many plans the scatter is thinned.
pub const MAX_POINTS: usize = 5000;
const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;
/// Side of a thinning cell, in pixels.
const CELL_PX: f64 = 8.0;
/// The legend's column right of the plot, so it never covers a point.
const LEGEND_W: u32 = 230;

/// Share of the plot's width given to the squeezed band of plans far past the capacity.
const SQUEEZED_SHARE: f64 = 0.1;

/// The x axis of memory per GPU: logarithmic, labelled at 1, 2 and 5 of each decade (or more
/// steps when the range is short) so the feasible region, a fraction of a decade left of the
/// capacity line, has labels; plans needing more than a few times the capacity (tens of TiB in a
/// wide search) are squeezed into a shaded band at the right instead of taking most of the width.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemoryAxis {
    pub lo: f64,
    pub hi: f64,
    /// Where the squeezed band starts (GiB), when there is one.
    pub squeezed_from: Option<f64>,
    /// The largest memory drawn, which the band's right end stands for.
    max: f64,
}

impl MemoryAxis {
    /// `lo`: the left end; `max`: the largest memory to place; `chosen`: the marked plan's memory,
    /// always left of the band.
    pub(crate) fn new(lo: f64, max: f64, capacity: f64, chosen: Option<f64>) -> Self {
        let limit = round_up_2_digits((4.0 * capacity).max(chosen.unwrap_or(0.0) * 1.25));
        // A band only pays when it saves a good part of a decade.
        if max <= limit * 2.5 || limit <= lo {
            return Self {
                lo,
                hi: max * 1.25,
                squeezed_from: None,
                max,
            };
        }
        let band = (limit / lo).ln() * SQUEEZED_SHARE / (1.0 - SQUEEZED_SHARE);
        Self {
            lo,
            hi: limit * band.exp(),
            squeezed_from: Some(limit),
            max,
        }
    }

    /// Where a plan needing `gib` is drawn: at its value, or inside the band in order of value.
    pub(crate) fn position(&self, gib: f64) -> f64 {
        match self.squeezed_from {
            Some(edge) if gib > edge => {
                let f = (gib / edge).ln() / (self.max / edge).ln().max(f64::MIN_POSITIVE);
                edge * ((self.hi / edge).ln() * (0.15 + 0.75 * f.clamp(0.0, 1.0))).exp()
            }
            _ => gib,
        }
    }

    fn right_of_labels(&self) -> f64 {
        self.squeezed_from.unwrap_or(self.hi)
    }

    /// The labelled ticks: 1-2-5 per decade, or 1..9 when that gives fewer than four; and the
    /// band's middle, labelled with where it starts.
    pub(crate) fn labelled_ticks(&self) -> Vec<f64> {
        let mut ticks = decade_ticks(self.lo, self.right_of_labels(), &[1.0, 2.0, 5.0]);
        if ticks.len() < 4 {
            ticks = decade_ticks(
                self.lo,
                self.right_of_labels(),
                &[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            );
        }
        if let Some(edge) = self.squeezed_from {
            ticks.push((edge * self.hi).sqrt());
        }
        ticks
    }

    /// Unlabelled grid lines: every integer step of each decade, left of the band.
    fn light_ticks(&self) -> Vec<f64> {
        decade_ticks(
            self.lo,
            self.right_of_labels(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        )
    }

    fn tick_label(&self, v: f64) -> String {
        match self.squeezed_from {
            Some(edge) if v > edge => format!("> {}", number(edge)),
            _ => number(v),
        }
    }
}

/// `steps` × 10^k inside [lo, hi], increasing.
fn decade_ticks(lo: f64, hi: f64, steps: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for step in steps {
            let v = step * decade;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// `v` rounded up at its second significant digit: 318.8 → 320, 716.4 → 720.
fn round_up_2_digits(v: f64) -> f64 {
    if v <= 0.0 {
        return v;
    }
    let unit = 10f64.powi(v.log10().floor() as i32 - 1);
    (v / unit).ceil() * unit
}

/// A tick's number: whole GiB from 1 up, else as many decimals as it needs (0.5, 0.02).
fn number(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A memory amount for the legend: GiB, or TiB from 1024 GiB.
fn gib_text(v: f64) -> String {
    if v >= 1024.0 {
        format!("{:.1} TiB", v / 1024.0)
    } else {
        format!("{} GiB", number(v))
    }
}

/// Indices of the Pareto-optimal feasible plans, by increasing memory.
pub(crate) fn pareto_frontier(plans: &[Estimate]) -> Vec<usize> {
    let mut feasible: Vec<usize> = (0..plans.len()).filter(|&i| plans[i].fits()).collect();
    feasible.sort_by(|&a, &b| {
        let (a, b) = (&plans[a], &plans[b]);
        a.memory
            .total_bytes
            .0
            .total_cmp(&b.memory.total_bytes.0)
            .then(b.tokens_per_s.total_cmp(&a.tokens_per_s))
    });
    let mut best = f64::NEG_INFINITY;
    let mut out = Vec::new();
    for i in feasible {
        if plans[i].tokens_per_s > best {
            best = plans[i].tokens_per_s;
            out.push(i);
        }
    }
    out
}

/// Which plans are drawn (see the module comment).
pub(crate) fn thin(
    plans: &[Estimate],
    frontier: &[usize],
    x_of: impl Fn(&Estimate) -> f64,
    x: (f64, f64),
    y: (f64, f64),
) -> Vec<usize> {
    if plans.len() <= MAX_POINTS {
        return (0..plans.len()).collect();
    }
    let cell = |v: f64, (lo, hi): (f64, f64), pixels: u32, log: bool| -> i64 {
        let f = if log {
            (v.max(lo).ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (v - lo) / (hi - lo)
        };
        (f * f64::from(pixels) / CELL_PX) as i64
    };
    let mut seen = HashSet::new();
    let mut keep: Vec<usize> = Vec::new();
    for (i, e) in plans.iter().enumerate() {
        let key = (
            cell(x_of(e), x, WIDTH, true),
            cell(e.tokens_per_s, y, HEIGHT, false),
            if e.fits() { e.plan.tp } else { 0 },
            e.fits(),
        );
        if seen.insert(key) {
            keep.push(i);
        }
    }
    let kept: HashSet<usize> = keep.iter().copied().collect();
    keep.extend(frontier.iter().filter(|i| !kept.contains(i)));
    keep.sort_unstable();
    keep
}

/// The pins of a search as the flags that gave them (`--tp 8 --pp 4`, as `plan`'s `pinned:` line), from
/// `SearchStats::pinned`; empty without pins.
pub(crate) fn pinned_flags(stats: &SearchStats) -> String {
    stats
        .pinned
        .iter()
        .map(|(key, value)| {
            let value = match value {
                serde_json::Value::String(word) => word.clone(),
                other => other.to_string(),
            };
            format!("--{} {value}", key.replace('_', "-"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `chosen`: the plan the report is about (the evaluated or best plan) and its name, marked with
/// a cross whether or not the search proposes it (a saved plan may lie outside the search space).
/// `stats`: the search's counts, whose pins (`SearchStats::pinned`) make the figure the pinned
/// search's: its title says so, and its subtitle what "evaluated" counts there, the candidates that
/// pass the pins and build, of the many more the search line counts.
pub(crate) fn search_svg(
    plans: &[Estimate],
    chosen: Option<(&Estimate, &str)>,
    stats: Option<&SearchStats>,
) -> Result<String, String> {
    let capacity = plans
        .first()
        .map_or(80.0, |e| e.memory.capacity_bytes.0 / GIB);
    let mem = |e: &Estimate| e.memory.total_bytes.0 / GIB;
    let with_chosen = || plans.iter().chain(chosen.map(|(e, _)| e));
    let x_lo = with_chosen().map(mem).fold(capacity, f64::min).max(1e-3) * 0.8;
    let x_max = with_chosen().map(mem).fold(capacity, f64::max);
    let axis = MemoryAxis::new(x_lo, x_max, capacity, chosen.map(|(e, _)| mem(e)));
    let x = |e: &Estimate| axis.position(mem(e));
    let y_hi = with_chosen()
        .map(|e| e.tokens_per_s)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.08;
    let frontier = pareto_frontier(plans);
    let drawn = thin(plans, &frontier, x, (axis.lo, axis.hi), (0.0, y_hi));
    // The TP degrees of the coloured points: an infeasible plan is drawn grey, so a degree none of
    // whose plans fits has no colour in the figure and no entry in its legend.
    let mut tps: Vec<u32> = drawn
        .iter()
        .filter(|&&i| plans[i].fits())
        .map(|&i| plans[i].plan.tp)
        .collect();
    tps.sort_unstable();
    tps.dedup();
    let mut subtitle = if drawn.len() == plans.len() {
        format!("all {} evaluated plans drawn", plans.len())
    } else {
        format!(
            "{} of {} evaluated plans drawn (one per 8x8-pixel cell per TP degree; frontier exact)",
            drawn.len(),
            plans.len()
        )
    };
    let pins = stats.map(pinned_flags).unwrap_or_default();
    let title = if pins.is_empty() {
        "The whole search: memory per GPU vs throughput".to_string()
    } else {
        if let Some(stats) = stats {
            subtitle.push_str(&format!(
                "; evaluated: the candidates that pass the pins and build, of the {} the search counts",
                stats.candidates
            ));
        }
        format!("The pinned search ({pins}): memory per GPU vs throughput")
    };
    svg(WIDTH + LEGEND_W, HEIGHT, |root| {
        let (plot, legend) = root.split_horizontally(WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption(&title, (FONT, 20))
            .margin(12)
            .margin_bottom(30)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (axis.lo..axis.hi)
                    .log_scale()
                    .with_key_points(axis.labelled_ticks())
                    .with_light_points(axis.light_ticks()),
                0.0..y_hi,
            )?;
        if let Some(edge) = axis.squeezed_from {
            // The squeezed band: plans past `edge` keep their order but not their distance.
            chart.draw_series([Rectangle::new(
                [(edge, 0.0), (axis.hi, y_hi)],
                RGBColor(0xF2, 0xF2, 0xF2).filled(),
            )])?;
        }
        chart
            .configure_mesh()
            .x_label_formatter(&|v| axis.tick_label(*v))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_desc(match axis.squeezed_from {
                Some(_) => "memory per GPU (GiB, log scale; the shaded band squeezes the rest)",
                None => "memory per GPU (GiB, log scale)",
            })
            .y_desc("throughput (tokens/s)")
            .label_style((FONT, 12))
            .draw()?;
        let grey = RGBColor(0xBB, 0xBB, 0xBB);
        chart.draw_series(
            drawn
                .iter()
                .filter(|&&i| !plans[i].fits())
                .map(|&i| Circle::new((x(&plans[i]), plans[i].tokens_per_s), 2, grey.filled())),
        )?;
        let mut entries: Vec<(String, RGBColor)> =
            vec![("● infeasible (out of memory)".to_string(), grey)];
        for tp in tps {
            let colour = tp_colour(tp);
            entries.push((format!("● TP {tp}"), colour));
            chart.draw_series(
                drawn
                    .iter()
                    .filter(|&&i| plans[i].fits() && plans[i].plan.tp == tp)
                    .map(|&i| {
                        Circle::new((x(&plans[i]), plans[i].tokens_per_s), 3, colour.filled())
                    }),
            )?;
        }
        // A staircase: no plan lies between two frontier points, so the best throughput within a
        // memory budget holds until the next point's memory, then steps up to it.
        let mut steps: Vec<(f64, f64)> = Vec::new();
        for &i in &frontier {
            let point = (x(&plans[i]), plans[i].tokens_per_s);
            if let Some(&(_, held)) = steps.last() {
                steps.push((point.0, held));
            }
            steps.push(point);
        }
        chart.draw_series(LineSeries::new(steps, BLACK.stroke_width(2)))?;
        entries.push(("— Pareto frontier".to_string(), BLACK));
        chart.draw_series(LineSeries::new(
            [(capacity, 0.0), (capacity, y_hi)],
            RED.stroke_width(2),
        ))?;
        entries.push((format!("— GPU capacity {capacity:.1} GiB"), RED));
        if let Some(edge) = axis.squeezed_from {
            let beyond = plans.iter().filter(|e| mem(e) > edge).count();
            entries.push((
                format!("▒ squeezed: {beyond} plans"),
                RGBColor(0x77, 0x77, 0x77),
            ));
            entries.push((
                format!("   from {} to {}", gib_text(edge), gib_text(x_max)),
                RGBColor(0x77, 0x77, 0x77),
            ));
        }
        if let Some((e, name)) = chosen {
            chart.draw_series([EmptyElement::at((x(e), e.tokens_per_s))
                + Cross::new((0, 0), 8, BLACK.stroke_width(2))])?;
            entries.push((format!("✕ {name}"), BLACK));
        }
        for (i, (text, colour)) in entries.into_iter().enumerate() {
            legend.draw(&Text::new(
                text,
                (4, 60 + 20 * i as i32),
                (FONT, 13).into_font().color(&colour),
            ))?;
        }
        root.draw(&Text::new(
            subtitle.clone(),
            (90, (HEIGHT - 20) as i32),
            (FONT, 12).into_font().color(&BLACK),
        ))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::planner::{SearchOptions, search};
    use crate::shape::derive_shape;
    use crate::specs;
    use crate::training::Training;

    #[test]
    fn memory_axis_labels_the_feasible_decade_and_squeezes_far_plans() {
        assert_eq!(round_up_2_digits(318.8), 320.0);
        assert_eq!(round_up_2_digits(716.4), 720.0);
        // 512B on 80 GiB GPUs: plans from 43 GiB to 10 TiB.
        let axis = MemoryAxis::new(34.0, 10_000.0, 79.7, Some(132.0));
        assert_eq!(axis.squeezed_from, Some(320.0));
        let ticks = axis.labelled_ticks();
        assert!(ticks.iter().filter(|t| (40.0..=80.0).contains(*t)).count() >= 3);
        assert_eq!(axis.tick_label(*ticks.last().unwrap()), "> 320");
        // Squeezed plans keep their order, inside the band.
        let (a, b) = (axis.position(1000.0), axis.position(9000.0));
        assert!(320.0 < a && a < b && b < axis.hi);
        assert_eq!(axis.position(100.0), 100.0);
        // A narrow range gets no band, and every tick is a number.
        let narrow = MemoryAxis::new(2.0, 60.0, 80.0, None);
        assert_eq!(narrow.squeezed_from, None);
        assert_eq!(
            narrow
                .labelled_ticks()
                .iter()
                .map(|t| narrow.tick_label(*t))
                .collect::<Vec<_>>(),
            ["2", "5", "10", "20", "50"]
        );
    }

    #[test]
    fn thinning_keeps_the_exact_frontier() {
        let model = derive_shape(512e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 32,
            gpus_per_node: 8,
        };
        let training = Training::megatron_lm_2021(2048, 1536);
        let options = SearchOptions {
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..SearchOptions::default()
        };
        let plans = search(&model, &cluster, &training, options).ranked;
        assert!(plans.len() > MAX_POINTS);
        let frontier = pareto_frontier(&plans);
        let mem = |e: &Estimate| e.memory.total_bytes.0;
        // Every feasible plan is matched or beaten by a frontier plan on both axes.
        for e in plans.iter().filter(|e| e.fits()) {
            assert!(
                frontier.iter().any(|&f| {
                    mem(&plans[f]) <= mem(e) && plans[f].tokens_per_s >= e.tokens_per_s
                })
            );
        }
        // No frontier plan dominates another.
        for w in frontier.windows(2) {
            let (a, b) = (&plans[w[0]], &plans[w[1]]);
            assert!(mem(a) <= mem(b) && a.tokens_per_s < b.tokens_per_s);
        }
        let drawn = thin(
            &plans,
            &frontier,
            |e| e.memory.total_bytes.0 / GIB,
            (10.0, 10_000.0),
            (0.0, 50_000.0),
        );
        assert!(drawn.len() < plans.len() / 2, "{}", drawn.len());
        for f in &frontier {
            assert!(drawn.binary_search(f).is_ok());
        }
        // Each TP degree among feasible plans keeps at least one point.
        for tp in [1, 2, 4, 8] {
            if plans.iter().any(|e| e.fits() && e.plan.tp == tp) {
                assert!(
                    drawn
                        .iter()
                        .any(|&i| plans[i].fits() && plans[i].plan.tp == tp)
                );
            }
        }
    }
}
