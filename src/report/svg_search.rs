//! Figure 3: the whole search. Every evaluated plan is a point (memory per GPU against
//! throughput), coloured by TP degree; infeasible plans are grey and lie right of the capacity line;
//! the Pareto frontier (no other feasible plan needs less memory and runs faster) is drawn exactly.
//!
//! Thinning, so a 100k-plan search still writes in well under a second: above `MAX_POINTS` plans,
//! one plan is kept per 8 × 8-pixel cell per TP degree among feasible plans (per cell among infeasible ones) (the best-ranked, since the
//! planner's order is kept), and every frontier plan is kept. The subtitle says how many were drawn.

use std::collections::HashSet;

use plotters::prelude::*;

use super::svg::{FONT, GIB, svg, tp_colour};
use crate::cost::Estimate;

/// Above this many plans the scatter is thinned.
pub const MAX_POINTS: usize = 5000;
const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;
/// Side of a thinning cell, in pixels.
const CELL_PX: f64 = 8.0;
/// The legend's column right of the plot, so it never covers a point.
const LEGEND_W: u32 = 230;

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
            cell(e.memory.total_bytes.0 / GIB, x, WIDTH, true),
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

/// `chosen`: the plan the report is about (the evaluated or best plan) and its name, marked with
/// a cross whether or not the search proposes it (a saved plan may lie outside the search space).
pub(crate) fn search_svg(
    plans: &[Estimate],
    chosen: Option<(&Estimate, &str)>,
) -> Result<String, String> {
    let capacity = plans
        .first()
        .map_or(80.0, |e| e.memory.capacity_bytes.0 / GIB);
    let mem = |e: &Estimate| e.memory.total_bytes.0 / GIB;
    let with_chosen = || plans.iter().chain(chosen.map(|(e, _)| e));
    let x_lo = with_chosen().map(mem).fold(capacity, f64::min).max(1e-3) * 0.8;
    let x_hi = with_chosen().map(mem).fold(capacity, f64::max) * 1.25;
    let y_hi = with_chosen()
        .map(|e| e.tokens_per_s)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.08;
    let frontier = pareto_frontier(plans);
    let drawn = thin(plans, &frontier, (x_lo, x_hi), (0.0, y_hi));
    let mut tps: Vec<u32> = drawn.iter().map(|&i| plans[i].plan.tp).collect();
    tps.sort_unstable();
    tps.dedup();
    let subtitle = if drawn.len() == plans.len() {
        format!("all {} evaluated plans drawn", plans.len())
    } else {
        format!(
            "{} of {} evaluated plans drawn (one per 8x8-pixel cell per TP degree; frontier exact)",
            drawn.len(),
            plans.len()
        )
    };
    svg(WIDTH + LEGEND_W, HEIGHT, |root| {
        let (plot, legend) = root.split_horizontally(WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption("The whole search: memory per GPU vs throughput", (FONT, 20))
            .margin(12)
            .margin_bottom(30)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), 0.0..y_hi)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_desc("memory per GPU (GiB, log scale)")
            .y_desc("throughput (tokens/s)")
            .label_style((FONT, 12))
            .draw()?;
        let grey = RGBColor(0xBB, 0xBB, 0xBB);
        chart.draw_series(
            drawn
                .iter()
                .filter(|&&i| !plans[i].fits())
                .map(|&i| Circle::new((mem(&plans[i]), plans[i].tokens_per_s), 2, grey.filled())),
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
                        Circle::new((mem(&plans[i]), plans[i].tokens_per_s), 3, colour.filled())
                    }),
            )?;
        }
        chart.draw_series(LineSeries::new(
            frontier
                .iter()
                .map(|&i| (mem(&plans[i]), plans[i].tokens_per_s)),
            BLACK.stroke_width(2),
        ))?;
        entries.push(("— Pareto frontier".to_string(), BLACK));
        chart.draw_series(LineSeries::new(
            [(capacity, 0.0), (capacity, y_hi)],
            RED.stroke_width(2),
        ))?;
        entries.push((format!("— GPU capacity {capacity:.1} GiB"), RED));
        if let Some((e, name)) = chosen {
            chart.draw_series([EmptyElement::at((mem(e), e.tokens_per_s))
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
    use crate::training::{GradDtype, Training};

    #[test]
    fn thinning_keeps_the_exact_frontier() {
        let model = derive_shape(512e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 32,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: 2048,
            global_batch: 1536,
            grad_dtype: GradDtype::Bf16,
            optimizer_states: crate::training::OptimizerStates::Fp32,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework: crate::training::TrainingFramework::MegatronLm2021,
            overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
            moe_imbalance: 1.0,
            moe_capacity_factor: None,
            moe_dispatch: crate::training::MoeDispatch::default(),
            fp8_param_gather: false,
            kernel_fusion: crate::training::KernelFusion::Fused,
            loss: crate::training::LossKernel::VocabParallel,
            local_batch: None,
            cp_exchange: crate::training::TrainingFramework::MegatronLm2021.default_cp_exchange(),
            recompute_modules: None,
            fsdp_syncs_once_per_step: false,
        };
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
        let drawn = thin(&plans, &frontier, (10.0, 10_000.0), (0.0, 50_000.0));
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
