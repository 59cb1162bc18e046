//! Figure 5: the pipeline timeline of one step, straight from the event-driven schedule simulation
//! (`cost::schedule`, 1F1B or interleaved 1F1B; `cost::v_schedule`, ZB-V or DualPipeV, whose
//! weight-gradient blocks get their own colour): one row per stage, a block per forward and backward
//! of each micro-batch (and model chunk), idle time left blank, the exposed TP, CP and EP (MoE token
//! traffic) communication inside each block as strips of their shares at its lower edge, one after
//! the other, then the exposed DP gradient reduction, the optimizer step and the exposed DP
//! parameter gather, each in its step term's colour (`svg::term_colour`).
//!
//! Up to `MAX_BLOCKS` blocks, the busiest stage's at least `MIN_BLOCK_PX` pixels wide on average on
//! the step's time axis, the whole step is drawn, one rectangle per block. Longer steps, or steps
//! whose blocks would be narrower than that (a block under a pixel is no rectangle at all, and the row reads as idle),
//! are drawn as two panels, each on its own time axis: the start, until the last stage has run its
//! first 2v + 4 blocks (every stage's warm-up and a couple of steady 1F1B rounds), and the end,
//! from the earliest of the stages' last 2v + 4 blocks (every stage's cool-down); the steady middle
//! is folded and its time span printed. A strip of exposed communication is at least a pixel
//! wide, so what the legend keys is drawn.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::svg::{FONT, svg};
use crate::cost::schedule::{Block, Direction};
use crate::cost::simulated::{ChunkComm, Simulated};
use crate::cost::terms::TermKind;
use crate::plan::ParallelPlan;

pub const MAX_BLOCKS: usize = 3000;

/// Width of the figure, and of its time axis in pixels: the figure less the body's margins (28 on
/// the left, 20 on the right), the chart's (8 each side) and the stage labels' 70.
const WIDTH: u32 = 1100;
pub const PLOT_PX: f64 = (WIDTH - 28 - 20 - 2 * 8 - 70) as f64;

/// The mean width, in pixels, of the busiest stage's blocks a whole-step panel may draw; narrower
/// ones fold the step. Every block keeps a pixel's gap to the next, and a forward is about a third
/// of its backward: at 4 pixels on average a forward still shows a pixel or two of colour.
pub const MIN_BLOCK_PX: f64 = 4.0;

/// Fill of a forward / backward block of model chunk `chunk` (blue / green shades; distinct from
/// every other colour in the figure so blocks can be counted by colour).
pub fn block_colour(direction: Direction, chunk: u32) -> RGBColor {
    const FWD: [RGBColor; 4] = [
        RGBColor(0x1F, 0x77, 0xB4),
        RGBColor(0x6B, 0xAE, 0xD6),
        RGBColor(0x08, 0x45, 0x94),
        RGBColor(0x9E, 0xCA, 0xE1),
    ];
    const BWD: [RGBColor; 4] = [
        RGBColor(0x31, 0xA3, 0x54),
        RGBColor(0x74, 0xC4, 0x76),
        RGBColor(0x00, 0x6D, 0x2C),
        RGBColor(0xA1, 0xD9, 0x9B),
    ];
    // ColorBrewer's YlOrBr: the weight-gradient blocks of a split backward (`v_schedule`).
    const WGT: [RGBColor; 4] = [
        RGBColor(0xEC, 0x70, 0x14),
        RGBColor(0xFE, 0xC4, 0x4F),
        RGBColor(0xCC, 0x4C, 0x02),
        RGBColor(0xFE, 0xE3, 0x91),
    ];
    match direction {
        Direction::Forward => FWD[chunk as usize % 4],
        Direction::Backward => BWD[chunk as usize % 4],
        Direction::Weight => WGT[chunk as usize % 4],
    }
}

/// The strips take their terms' colours in the step-time figure (`svg::term_colour`): dark grey
/// TP, Category10's brown CP and purple EP, apart from the blocks' blues and greens; red DP
/// gradient reduce, pink DP parameter gather, amber optimizer — one colour per term in every
/// figure.
const TP_COLOUR: RGBColor = super::svg::term_colour(TermKind::TpComm);
const CP_COLOUR: RGBColor = super::svg::term_colour(TermKind::CpComm);
const EP_COLOUR: RGBColor = super::svg::term_colour(TermKind::EpComm);
const DP_REDUCE_COLOUR: RGBColor = super::svg::term_colour(TermKind::DpGradReduce);
const DP_GATHER_COLOUR: RGBColor = super::svg::term_colour(TermKind::DpParamGather);
const PP_COLOUR: RGBColor = super::svg::term_colour(TermKind::PpComm);
const OPT_COLOUR: RGBColor = super::svg::term_colour(TermKind::Optimizer);

struct Panel<'a> {
    x: (f64, f64),
    blocks: Vec<&'a Block>,
    tail: bool,
}

pub(crate) fn gantt_svg(sim: &Simulated, plan: &ParallelPlan) -> Result<String, String> {
    let s = &sim.schedule;
    let p = plan.pp;
    // `stage_costs` puts each layer's exposed CP and EP communication into its forward and backward
    // blocks, beside the TP collectives; their share of a block is their exposed time over all the
    // blocks hold (compute, TP, CP, EP and PP: `StepTerms::pipeline_busy_s`).
    let busy_s = sim.estimate.terms.pipeline_busy_s();
    let share_of_blocks = |exposed_s: f64| {
        if busy_s > 0.0 {
            (exposed_s / busy_s).clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let cp_share = share_of_blocks(sim.estimate.time.cp_comm_exposed_s.0);
    // The TP and EP collectives are each model chunk's own layers' (`Simulated::chunks`): a chunk
    // of dense layers (DeepSeek-V3's first three) has no all-to-all, a chunk with more MoE layers
    // more, and a chunk holding the output layer a smaller TP share of its longer blocks. Read per
    // stage, the mean of a stage's chunks put EP strips on the blocks of a dense chunk; read as
    // one share of the whole step, every block's TP strip was the same length.
    // A split backward (`v_schedule`) runs the weight gradients as blocks of their own.
    let split_backward = sim
        .schedule
        .blocks
        .iter()
        .any(|b| b.direction == Direction::Weight);
    let chunks_per_stage = (sim.chunks.len() / sim.stages.len().max(1)).max(1);
    // The share of a block of `group`'s exposed seconds (TP or EP: forward, backward).
    let fraction = |group: fn(&ChunkComm) -> (f64, f64),
                    stage: u32,
                    chunk: u32,
                    direction: Direction|
     -> f64 {
        let Some((cost, comm)) = sim
            .chunks
            .get(stage as usize * chunks_per_stage + chunk as usize % chunks_per_stage)
        else {
            return 0.0;
        };
        let (forward, backward) = group(comm);
        let (exposed, block) = match direction {
            Direction::Forward => (forward, cost.forward_s),
            Direction::Backward if split_backward => (backward, cost.backward_s - cost.weight_s),
            Direction::Backward => (backward, cost.backward_s),
            // The weight gradients move no tokens and run no TP collective.
            Direction::Weight => (0.0, cost.weight_s),
        };
        if block > 0.0 {
            (exposed / block).clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let tp_fraction = |stage, chunk, direction| fraction(|c| c.tp, stage, chunk, direction);
    let ep_fraction = |stage, chunk, direction| fraction(|c| c.ep, stage, chunk, direction);
    // Every chunk's forward and backward share of a group, its largest, whether they differ and
    // whether some chunk has none.
    let shares = |of: &dyn Fn(u32, u32, Direction) -> f64| {
        let all: Vec<f64> = (0..sim.stages.len() as u32)
            .flat_map(|st| (0..chunks_per_stage as u32).map(move |c| (st, c)))
            .flat_map(|(st, c)| {
                [
                    of(st, c, Direction::Forward),
                    of(st, c, Direction::Backward),
                ]
            })
            .collect();
        let max = all.iter().copied().fold(0.0, f64::max);
        let uneven = all.iter().any(|f| (f - max).abs() > 0.0005);
        (max, uneven, max > 0.0 && all.contains(&0.0))
    };
    let (tp_max, tp_uneven, _) = shares(&tp_fraction);
    let (ep_share, ep_uneven, ep_none_somewhere) = shares(&ep_fraction);
    let pipeline_end = s.step_s;
    let tails_s = sim.tail_dp_grad_reduce_s
        + sim.tail_after_pipeline_s
        + sim.tail_optimizer_s
        + sim.tail_dp_param_gather_s;
    // The simulated blocks hold compute and the layers' communication; activation offloading's
    // exposed copies are a term of the step the schedule does not place: the axis ended at the
    // optimizer, short of the step the subtitle gave (13 s drawn of an 865 s step), without a word.
    let offload_s = sim.estimate.time.offload_exposed_s.0;
    // The axis ends at the step eval prints (less the offload copies, which are not drawn). A V
    // schedule whose blocks end before the slowest stage's work as the closed form adds it up
    // (`simulated::simulate_step`: the bubble is clamped at 0 there) ended the axis short of it;
    // the tail now ends at the step, and the gap before it is said in the subtitle.
    let step_end = (sim.estimate.time.step_s.0 - offload_s).max(pipeline_end + tails_s);
    let tail_start = step_end - tails_s;
    let unplaced_s = tail_start - pipeline_end;
    let whole = || {
        vec![Panel {
            x: (0.0, step_end),
            blocks: s.blocks.iter().collect(),
            tail: true,
        }]
    };
    let per_stage = s.blocks.len() / p.max(1) as usize;
    // Blocks of the last stage kept at each end: its warm-up/cool-down plus two steady rounds.
    let keep = ((2 * plan.vpp + 4) as usize).min(per_stage).max(1);
    // The busiest stage's mean block on the whole step's axis: under `MIN_BLOCK_PX` the step is
    // folded too.
    let mean_block_px = s.busy_s.iter().copied().fold(0.0, f64::max)
        / per_stage.max(1) as f64
        / step_end.max(f64::MIN_POSITIVE)
        * PLOT_PX;
    let panels: Vec<Panel> =
        if (s.blocks.len() <= MAX_BLOCKS && mean_block_px >= MIN_BLOCK_PX) || per_stage == 0 {
            whole()
        } else {
            // Start panel: until the last stage has run `keep` blocks, so every stage's warm-up shows.
            // End panel: from the earliest of the stages' last `keep` blocks (the last stage's cool-down
            // starts first), so every stage's cool-down shows.
            let last_stage = &s.blocks[(p as usize - 1) * per_stage..];
            let t_a = last_stage[keep - 1].end_s;
            let t_b = (0..p as usize)
                .map(|st| s.blocks[st * per_stage + per_stage - keep].start_s)
                .fold(f64::INFINITY, f64::min);
            if t_b <= t_a {
                whole()
            } else {
                vec![
                    Panel {
                        x: (0.0, t_a),
                        blocks: s.blocks.iter().filter(|b| b.start_s < t_a).collect(),
                        tail: false,
                    },
                    Panel {
                        x: (t_b, step_end),
                        blocks: s.blocks.iter().filter(|b| b.end_s > t_b).collect(),
                        tail: true,
                    },
                ]
            }
        };
    let row_h = 26u32.min(520 / p.max(1)).max(6);
    let panel_h = 90 + row_h * p;
    let height = 90 + panel_h * panels.len() as u32 + 40;
    // Without a pipeline there is no 1F1B schedule: one stage runs the micro-batches in turn.
    let title = format!(
        "{} of one step ({}; p = {}, {}{}): simulated",
        if p > 1 {
            "Pipeline timeline"
        } else {
            "Timeline"
        },
        if p > 1 {
            sim.summary.pipeline_schedule().words(plan.vpp)
        } else {
            "no pipeline"
        },
        p,
        plan.schedule_m_words().replace('=', " = "),
        if plan.vpp > 1 {
            format!(", v = {}", plan.vpp)
        } else {
            String::new()
        }
    );
    let subtitle = format!(
        "{}; step {:.3} s{}",
        if p > 1 {
            format!(
                "bubble ratio {:.3} simulated vs {} = {:.3}; all stages idle {:.2}% of their time",
                sim.summary.simulated_bubble_ratio,
                sim.summary.pipeline_schedule().closed_form_words(),
                sim.summary.closed_form_bubble_ratio,
                sim.summary.pipeline_idle_share * 100.0,
            )
        } else {
            format!(
                "no pipeline: every GPU runs all {} layers, no bubble",
                plan.stages.max_layers()
            )
        },
        sim.estimate.time.step_s.0,
        if panels.len() > 1 {
            format!(
                "; {} blocks: the steady middle ({:.2} s to {:.2} s) is folded",
                s.blocks.len(),
                panels[0].x.1,
                panels[1].x.0
            )
        } else {
            String::new()
        }
    );
    let subtitle = if offload_s > 0.0 {
        format!("{subtitle}; not drawn: {offload_s:.3} s of exposed CPU offload copies")
    } else {
        subtitle
    };
    // Each entry: its swatches (one per model chunk's shade with interleaving) and its text.
    let chunks = plan.vpp.clamp(1, 4);
    let repeat = if plan.vpp > 4 {
        " (shades repeat every 4)"
    } else {
        ""
    };
    let shades = |direction| (0..chunks).map(|c| block_colour(direction, c)).collect();
    let mut legend: Vec<(Vec<RGBColor>, String)> = vec![
        (
            shades(Direction::Forward),
            if chunks > 1 {
                format!("forward, model chunks 0 to {}{repeat}", plan.vpp - 1)
            } else {
                "forward".to_string()
            },
        ),
        (
            shades(Direction::Backward),
            if chunks > 1 {
                format!(
                    "backward (incl. recompute), chunks 0 to {}{repeat}",
                    plan.vpp - 1
                )
            } else {
                "backward (incl. recompute)".to_string()
            },
        ),
    ];
    if split_backward {
        legend[1].1 = format!(
            "input gradient (incl. recompute), chunks 0 to {}",
            plan.vpp - 1
        );
        legend.push((
            shades(Direction::Weight),
            format!(
                "weight gradient (the split backward's W), chunks 0 to {}",
                plan.vpp - 1
            ),
        ));
    }
    // Only when the stripe is drawn: TP collectives overlapped with compute leave none.
    if tp_max > 0.0 {
        legend.push((
            vec![TP_COLOUR],
            format!(
                "exposed TP collectives (dark strip at the lower edge, {}{:.1}% of {})",
                if tp_uneven { "up to " } else { "" },
                100.0 * tp_max,
                if tp_uneven { "a block" } else { "each block" },
            ),
        ));
    }
    // Each in the order drawn, after the TP strip.
    if cp_share > 0.0 {
        legend.push((
            vec![CP_COLOUR],
            format!(
                "exposed CP comm, the K/V exchange (strip after the TP one, {:.1}% of each block)",
                100.0 * cp_share
            ),
        ));
    }
    if ep_share > 0.0 {
        legend.push((
            vec![EP_COLOUR],
            format!(
                "exposed EP comm, the MoE all-to-alls ({}{}{:.1}% of {}{})",
                if cp_share > 0.0 {
                    "strip after the CP one, "
                } else {
                    "strip after the TP one, "
                },
                if ep_uneven { "up to " } else { "" },
                100.0 * ep_share,
                if ep_uneven { "a block" } else { "each block" },
                match (ep_none_somewhere, chunks_per_stage > 1) {
                    (true, true) => "; none on model chunks of dense layers",
                    (true, false) => "; none on stages of dense layers",
                    (false, _) => "",
                }
            ),
        ));
    }
    // The step-time bars' names for the same terms (`TermKind::label`); the embedding all-reduce
    // and the parameter gather only where they have exposed time (neither for an untied model at
    // ZeRO-0), the reduce and the step always, as before.
    for (seconds, colour, kind) in [
        (
            sim.tail_dp_grad_reduce_s,
            DP_REDUCE_COLOUR,
            TermKind::DpGradReduce,
        ),
        (sim.tail_after_pipeline_s, PP_COLOUR, TermKind::PpComm),
        (sim.tail_optimizer_s, OPT_COLOUR, TermKind::Optimizer),
        (
            sim.tail_dp_param_gather_s,
            DP_GATHER_COLOUR,
            TermKind::DpParamGather,
        ),
    ] {
        if seconds > 0.0 || matches!(kind, TermKind::DpGradReduce | TermKind::Optimizer) {
            legend.push((vec![colour], tail_words(kind)));
        }
    }
    // Said as a legend entry without a swatch, which wraps where the subtitle would run off.
    if unplaced_s > 1e-9 * step_end {
        legend.push((
            Vec::new(),
            format!(
                "blank before the tail: {unplaced_s:.3} s the step keeps past the simulated \
                 blocks (the closed form's {busy_s:.3} s of stage work)"
            ),
        ));
    }
    // Entries flow left to right, wrapping to a new line before the figure's right edge.
    let mut placed: Vec<(i32, i32, Vec<RGBColor>, String)> = Vec::new();
    let (mut x, mut line) = (12, 0);
    for (swatches, text) in legend {
        let w = 11 * swatches.len() as i32 + 4 + (6.2 * text.chars().count() as f64) as i32;
        if x > 12 && x + w > 1088 {
            (x, line) = (12, line + 1);
        }
        placed.push((x, 58 + 18 * line, swatches, text));
        x += w + 22;
    }
    let legend_extra = 18 * line;
    svg(WIDTH, height + legend_extra as u32, |root| {
        root.draw(&Text::new(
            title.clone(),
            (12, 8),
            (FONT, 20).into_font().color(&BLACK),
        ))?;
        root.draw(&Text::new(
            subtitle.clone(),
            (12, 36),
            (FONT, 13).into_font().color(&BLACK),
        ))?;
        for (x0, y0, swatches, text) in &placed {
            let mut x = *x0;
            // Swatches as glyphs, so that the figure's rectangles are its blocks only.
            for colour in swatches {
                root.draw(&Text::new(
                    "■",
                    (x, y0 - 2),
                    (FONT, 14).into_font().color(colour),
                ))?;
                x += 11;
            }
            root.draw(&Text::new(
                text.clone(),
                (x + 4, y0 - 1),
                (FONT, 12).into_font().color(&BLACK),
            ))?;
        }
        // A right margin, so the last time label (centred on the axis end) is not clipped.
        let body = root.margin(80 + legend_extra, 20, 0, 28);
        let areas = body.split_evenly((panels.len(), 1));
        for (panel, area) in panels.iter().zip(areas.iter()) {
            let mut chart = ChartBuilder::on(area)
                .margin(8)
                .x_label_area_size(40)
                .y_label_area_size(70)
                // Row r (stage p-1-r) spans r..r+1; its label is drawn below, at its middle.
                .build_cartesian_2d(panel.x.0..panel.x.1, 0.0..f64::from(p))?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .x_desc("time in the step (s)")
                // One row without a pipeline: its label says what it is, and an axis title would
                // be longer than the row is tall.
                .y_desc(if p > 1 { "pipeline stage" } else { "" })
                .label_style((FONT, 12))
                .draw()?;
            // At most ~24 labels, so they never overlap on deep pipelines.
            for stage in (0..p).filter(|stage| stage.is_multiple_of(p.div_ceil(24))) {
                let (px, py) = chart.backend_coord(&(panel.x.0, f64::from(p - 1 - stage) + 0.5));
                let (ax, ay) = area.get_base_pixel();
                // Without a pipeline the one row is every GPU running every layer, not a stage.
                area.draw(&Text::new(
                    if p > 1 {
                        format!("stage {stage}")
                    } else {
                        "every GPU".to_string()
                    },
                    (px - ax - 6, py - ay),
                    (FONT, 12)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Right, VPos::Center)),
                ))?;
            }
            let row = |stage: u32| f64::from(p - 1 - stage);
            // A row's band, with a pixel margin so neighbouring blocks stay apart.
            let band = |a: f64, z: f64, stage: u32, colour: RGBColor, top: u32, bottom: u32| {
                let y = row(stage);
                let mut r = Rectangle::new([(a, y), (z, y + 1.0)], colour.filled());
                r.set_margin(top, bottom, 0, 1);
                r
            };
            let (lo, hi) = panel.x;
            let clip = |a: f64, b: f64| (a.max(lo), b.min(hi));
            let gap = (row_h / 8).max(1);
            // The exposed-communication strips take the lower quarter of the row as drawn, which is
            // taller than `row_h` when the pipeline is shallow (p = 1 draws one row of ~75 px).
            let drawn_row = {
                let (_, y0) = chart.backend_coord(&(lo, 0.0));
                let (_, y1) = chart.backend_coord(&(lo, 1.0));
                (y0 - y1).unsigned_abs().max(row_h)
            };
            let strip_top = drawn_row - drawn_row / 4;
            // A strip inside a block: no gap of its own (the block keeps one), and at least a
            // pixel wide (ending before its block's gap), so each share the legend names is drawn.
            let pixel_s = {
                let (x0, _) = chart.backend_coord(&(lo, 0.0));
                let (x1, _) = chart.backend_coord(&(hi, 0.0));
                (hi - lo) / f64::from((x1 - x0).max(1))
            };
            // A strip outside the panel (of a block that starts before it) is not drawn.
            let strip = |b: &Block, from: f64, to: f64, colour: RGBColor| {
                let to = to.max((from + 1.01 * pixel_s).min(b.end_s - pixel_s));
                let (a, z) = clip(from, to);
                (z > a).then(|| {
                    let y = row(b.stage);
                    let mut r = Rectangle::new([(a, y), (z, y + 1.0)], colour.filled());
                    r.set_margin(strip_top, gap, 0, 0);
                    r
                })
            };
            // A block under two pixels (a step whose tail dwarfs its blocks, too few to fold) has
            // no room for its gap: with it, a block of no pixels was a rectangle of width -1.
            let blocks: Vec<_> = panel
                .blocks
                .iter()
                .map(|b| {
                    let (a, z) = clip(b.start_s, b.end_s);
                    let px = chart.backend_coord(&(z, 0.0)).0 - chart.backend_coord(&(a, 0.0)).0;
                    let mut r = band(a, z, b.stage, block_colour(b.direction, b.chunk), gap, gap);
                    if px < 2 {
                        r.set_margin(gap, gap, 0, 0);
                    }
                    r
                })
                .collect();
            chart.draw_series(blocks)?;
            // Each block's own chunk's TP share.
            let tp_share = |b: &Block| tp_fraction(b.stage, b.chunk, b.direction);
            chart.draw_series(
                panel
                    .blocks
                    .iter()
                    .filter(|b| tp_share(b) > 0.0)
                    .filter_map(|b| {
                        let to = b.start_s + tp_share(b) * (b.end_s - b.start_s);
                        strip(b, b.start_s, to, TP_COLOUR)
                    }),
            )?;
            // The CP and EP strips follow the TP one, at the same lower edge: each block's exposed
            // communication reads as one run of strips from its start.
            // A block's CP share is the slowest stage's; its EP share its own model chunk's.
            for k in 0..2 {
                let share_of = |b: &Block| match k {
                    0 => cp_share,
                    _ => ep_fraction(b.stage, b.chunk, b.direction),
                };
                let (before, colour) = match k {
                    0 => (0.0, CP_COLOUR),
                    _ => (cp_share, EP_COLOUR),
                };
                chart.draw_series(
                    panel
                        .blocks
                        .iter()
                        .filter(|b| share_of(b) > 0.0)
                        .filter_map(|b| {
                            let d = b.end_s - b.start_s;
                            let from = b.start_s + ((tp_share(b) + before) * d).min(d);
                            strip(b, from, (from + share_of(b) * d).min(b.end_s), colour)
                        }),
                )?;
            }
            if panel.tail {
                // The gradients are reduced, the word embedding's gradient all-reduced between the
                // ends (Megatron-Core `finalize_model_grads`: after `finish_grad_sync`), the
                // optimizer steps, then (ZeRO-1/2, DeepSpeed's BF16_Optimizer) the updated weights
                // are gathered; ZeRO-3's exposed gathers, which wait in the forwards, are summed
                // there too.
                let reduce_end = tail_start + sim.tail_dp_grad_reduce_s;
                let embedding_end = reduce_end + sim.tail_after_pipeline_s;
                let optimizer_end = embedding_end + sim.tail_optimizer_s;
                // A band keeps a pixel's gap at its right end, so one under two pixels (no exposed
                // DP at dp 1: zero seconds) would be a rectangle of negative width, which is no SVG.
                let tail = [
                    (tail_start, reduce_end, DP_REDUCE_COLOUR),
                    (reduce_end, embedding_end, PP_COLOUR),
                    (embedding_end, optimizer_end, OPT_COLOUR),
                    (optimizer_end, step_end, DP_GATHER_COLOUR),
                ];
                // Only the first and the last stage hold the tied word embedding and take part in
                // its all-reduce (Megatron-Core `finalize_model_grads.py`
                // `_allreduce_word_embedding_grads` over the embedding group, the first and the last
                // pipeline stage): a middle stage waits, idle, for the optimizer's gradient norm,
                // which every stage all-reduces (`clip_grads.py` `get_grad_norm_fp32`).
                let takes_part = |stage: u32, colour: RGBColor| {
                    colour != PP_COLOUR || stage == 0 || stage + 1 == p
                };
                for stage in 0..p {
                    chart.draw_series(
                        tail.iter()
                            .filter(|(a, z, _)| z - a >= 2.0 * pixel_s)
                            .filter(|&&(_, _, colour)| takes_part(stage, colour))
                            .map(|&(a, z, colour)| band(a, z, stage, colour, gap, gap)),
                    )?;
                }
            }
        }
        Ok(())
    })
}

/// A tail band's legend words: the step-time figure's label for its term, exposed.
fn tail_words(kind: TermKind) -> String {
    match kind {
        TermKind::Optimizer => "optimizer step".to_string(),
        TermKind::PpComm => {
            "exposed PP comm: word embedding gradient all-reduce (first and last stage)".to_string()
        }
        _ => format!("exposed {}", kind.label()),
    }
}
