//! What every figure shares: the plotters SVG canvas written to a String, fonts, colours and the
//! short plan labels the figures and the HTML table agree on. Text stays `<text>` (naive font): no
//! system fonts are read, and the browser picks a sans-serif face.

use plotters::prelude::*;

use crate::cost::Estimate;

pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

pub(crate) const FONT: &str = "sans-serif";
pub(crate) const GIB: f64 = crate::units::GIB;

/// Draws onto a `width` × `height` SVG and returns its text.
pub(crate) fn svg<F>(width: u32, height: u32, draw: F) -> Result<String, String>
where
    F: FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult,
{
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// "#1 t8·p16·d2": rank and the plan's degrees ([`degrees_label`]); the HTML table gives the rest.
pub fn plan_label(rank: usize, e: &Estimate) -> String {
    format!("#{rank} {}", degrees_label(e))
}

/// "t8·p16·d2": the degrees that multiply to the GPU count, in `plan`'s column order, with c
/// (context parallel), e and et (expert and expert-tensor parallel) where the plan uses them, et
/// beside any e: "t4·c2·p1·d8·e8·et1". The precision, when not bf16, is printed under each bar (`plan_details`) and
/// in the HTML table's precision column, so labels stay short enough to sit side by side.
pub fn degrees_label(e: &Estimate) -> String {
    let p = &e.plan;
    let mut out = format!("t{}", p.tp);
    if p.cp > 1 {
        out += &format!("·c{}", p.cp);
    }
    out += &format!("·p{}·d{}", p.pp, p.dp);
    if p.ep > 1 {
        out += &format!("·e{}", p.ep);
    }
    // Beside any ep, 1 included, as `plan`'s table shows the etp column and one-line messages
    // name "ep 16 etp 1" (`pin_conflict::degrees_words`): read back without it, Megatron-LM takes
    // --expert-tensor-parallel-size as tp, another plan.
    if p.ep > 1 || p.etp > 1 {
        out += &format!("·et{}", p.etp);
    }
    out
}

/// Colours of TP degrees 1, 2, 4, 8, 16, … (category10).
pub(crate) fn tp_colour(tp: u32) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(0x1F, 0x77, 0xB4),
        RGBColor(0xFF, 0x7F, 0x0E),
        RGBColor(0x2C, 0xA0, 0x2C),
        RGBColor(0xD6, 0x27, 0x28),
        RGBColor(0x94, 0x67, 0xBD),
        RGBColor(0x8C, 0x56, 0x4B),
        RGBColor(0xE3, 0x77, 0xC2),
        RGBColor(0x17, 0xBE, 0xCF),
    ];
    PALETTE[(tp.max(1).ilog2() as usize) % PALETTE.len()]
}

/// One colour per step term, in every figure that shows it: the step-time bars (`svg_step`), the
/// pipeline timeline's strips (`svg_gantt`: its exposed TP, CP, EP and DP communication and its
/// optimizer step) and, for the optimizer, the memory bars' optimizer states, so a term a reader
/// finds in one figure is the same colour in the next. Tableau 10 and Category10 hues; the
/// timeline's forward/backward blues and greens (`svg_gantt::block_colour`) stay its own.
pub(crate) const fn term_colour(kind: crate::cost::terms::TermKind) -> RGBColor {
    use crate::cost::terms::TermKind;
    match kind {
        TermKind::Compute => RGBColor(0x4E, 0x79, 0xA7),
        TermKind::TpComm => RGBColor(0x33, 0x33, 0x33),
        TermKind::CpComm => RGBColor(0x8C, 0x56, 0x4B),
        TermKind::PpComm => RGBColor(0x76, 0xB7, 0xB2),
        TermKind::EpComm => RGBColor(0x94, 0x67, 0xBD),
        TermKind::DpGradReduce => RGBColor(0xD6, 0x27, 0x28),
        TermKind::DpParamGather => RGBColor(0xFF, 0x9D, 0xA7),
        TermKind::Bubble => RGBColor(0xBA, 0xB0, 0xAC),
        TermKind::Optimizer => RGBColor(0xFF, 0xBF, 0x00),
        TermKind::HostOffload => RGBColor(0x59, 0xA1, 0x4F),
        TermKind::MambaCpComm => RGBColor(0xF2, 0x8E, 0x2B),
    }
}

/// The memory figure's parts (`svg_memory`), each with its colour: the optimizer's states in the
/// optimizer step's [`term_colour`], the others in Category10's four hues no step term, timeline
/// block or light stage colour takes (cyan, magenta, olive, grey), so that no colour names a
/// memory part in one figure and a step term in the next.
pub(crate) const MEMORY_PARTS: [(&str, RGBColor); 5] = [
    ("weights", RGBColor(0x17, 0xBE, 0xCF)),
    ("gradients", RGBColor(0xE3, 0x77, 0xC2)),
    (
        "optimizer",
        term_colour(crate::cost::terms::TermKind::Optimizer),
    ),
    ("activations", RGBColor(0xBC, 0xBD, 0x22)),
    ("other", RGBColor(0x7F, 0x7F, 0x7F)),
];

/// One colour per pipeline stage, light so labels stay readable: the first 10 from a light
/// category palette (Tableau's category20 light tones), then one hue per stage stepped by the golden
/// angle (137.5°, so neighbouring stages stay far apart on the colour wheel) at a lightness the
/// labels read on, so no two stages of a drawn layout share a colour.
pub(crate) fn stage_colour(stage: u32) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(0xAE, 0xC7, 0xE8),
        RGBColor(0xFF, 0xBB, 0x78),
        RGBColor(0x98, 0xDF, 0x8A),
        RGBColor(0xFF, 0x98, 0x96),
        RGBColor(0xC5, 0xB0, 0xD5),
        RGBColor(0xC4, 0x9C, 0x94),
        RGBColor(0xF7, 0xB6, 0xD2),
        RGBColor(0xDB, 0xDB, 0x8D),
        RGBColor(0x9E, 0xDA, 0xE5),
        RGBColor(0xC7, 0xC7, 0xC7),
    ];
    if let Some(colour) = PALETTE.get(stage as usize) {
        return *colour;
    }
    let k = f64::from(stage - PALETTE.len() as u32);
    // Lightness alternates over three bands so stages 360/137.5 apart differ too.
    let lightness = [0.80, 0.70, 0.88][(stage as usize) % 3];
    hsl((k * 137.508 + 15.0) % 360.0, 0.55, lightness)
}

/// HSL (hue in degrees, saturation and lightness in [0, 1]) to RGB (CSS Color 4 §7.1).
fn hsl(hue: f64, saturation: f64, lightness: f64) -> RGBColor {
    let f = |n: f64| {
        let k = (n + hue / 30.0) % 12.0;
        let a = saturation * lightness.min(1.0 - lightness);
        let v = lightness - a * (k - 3.0).min(9.0 - k).clamp(-1.0, 1.0);
        (v * 255.0).round() as u8
    };
    RGBColor(f(0.0), f(8.0), f(4.0))
}

/// Stacked bars for the top plans, one per plan, with an optional horizontal line and a text label
/// over each bar: the shape figures 1 and 2 share.
pub(crate) struct StackedBars<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    pub parts: &'a [&'a str],
    /// Per plan: its label, its part values (same order as `parts`), the text above the bar.
    pub bars: Vec<(String, Vec<f64>, String)>,
    pub line: Option<(f64, String)>,
    /// Per plan: a (low, high) range drawn as an error bar over the stack.
    pub ranges: Option<Vec<(f64, f64)>>,
    /// Per plan: lines printed under its label (`plan_details`), so plans that share their degrees
    /// but differ in vpp, micro-batch, sequence parallelism, ZeRO or recompute tell apart.
    pub details: Vec<Vec<(String, RGBColor)>>,
    /// Each part's colour (same order as `parts`), so a part keeps its colour whichever others a
    /// figure shows: [`term_colour`] for a step term, [`MEMORY_PARTS`] for a memory part.
    pub part_colours: Vec<RGBColor>,
}

impl StackedBars<'_> {
    fn colour(&self, part: usize) -> RGBColor {
        self.part_colours[part]
    }
}

/// What tells apart plans with the same degrees, under each bar: "vpp 7 · mb 1 · ZeRO-1" (and the
/// precision when not bf16: "vpp 1 · mb 1 · ZeRO-1 · fp8"),
/// "recompute none", and, in red, "does not fit" for a plan over the GPU's memory.
pub(crate) fn plan_details(e: &Estimate) -> Vec<(String, RGBColor)> {
    let grey = RGBColor(0x44, 0x44, 0x44);
    let mut lines = vec![
        (
            format!(
                "vpp {} · mb {}{} · ZeRO-{}{}",
                e.plan.vpp,
                e.plan.micro_batch,
                // Sequence parallelism, as the sweep's plan cell says it: two plans of the same
                // degrees, micro-batch and ZeRO stage differ by gigabytes with it and without.
                if e.plan.sequence_parallel {
                    " · sp"
                } else {
                    ""
                },
                super::table::zero_label(&e.plan),
                // The number format, where it is not the default bf16.
                if e.plan.precision == crate::plan::Precision::Bf16 {
                    String::new()
                } else {
                    format!(" · {}", e.plan.precision.as_str())
                }
            ),
            grey,
        ),
        (
            format!(
                "recompute {}{}",
                super::table::recompute_label(&e.plan),
                // Activations offloaded to host memory (`--cpu-offload-layers`), which the plan's
                // degrees do not show and which sets its memory.
                if e.memory.offloaded_layer_bytes.0 > 0.0 {
                    " · CPU offload"
                } else {
                    ""
                }
            ),
            grey,
        ),
    ];
    if !e.fits() {
        lines.push(("does not fit".to_string(), RGBColor(0xB0, 0x00, 0x20)));
    }
    lines
}

/// Estimated width in pixels of a figure text of plotters size `size`: plotters' SVG backend writes
/// size s as s/1.24 px (its output: 12 → 9.68), and 0.62 em a character is DejaVu Sans's (the usual
/// `sans-serif` face) average for these labels rounded up (its digits 0.64 em, lower case 0.55–0.63,
/// '·' and space 0.32), so a label laid out by it does not reach what it estimates.
pub(crate) fn text_width_px(text: &str, size: f64) -> f64 {
    0.62 * size / 1.24 * text.chars().count() as f64
}

/// Size of the bar labels and of the detail lines under them.
const LABEL_SIZE: f64 = 12.0;
const DETAIL_SIZE: f64 = 11.0;
/// Pixels between the lines under a bar, and the least room a bar is given (the old fixed spacing).
const LINE_PX: i32 = 15;
const MIN_SLOT_PX: f64 = 120.0;

/// A bar's label on one line when it fits in `slot_px`, else on two: what comes before the
/// degrees ("this plan (search #1)") over the degrees ("t2·c2·p4·d2·e8"), each whole, so a line
/// never breaks inside a plan's name; the bar spacing then grows to the longer line.
fn label_lines(label: &str, slot_px: f64) -> Vec<String> {
    match label.rsplit_once(' ') {
        Some((head, degrees)) if text_width_px(label, LABEL_SIZE) > slot_px => {
            vec![head.to_string(), degrees.to_string()]
        }
        _ => vec![label.to_string()],
    }
}

pub(crate) fn stacked_bars(spec: &StackedBars) -> Result<String, String> {
    let n = spec.bars.len().max(1) as u32;
    let tallest = spec
        .bars
        .iter()
        .map(|b| b.1.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(spec.line.as_ref().map_or(0.0, |l| l.0))
        .max(
            spec.ranges
                .iter()
                .flatten()
                .map(|r| r.1)
                .fold(0.0, f64::max),
        );
    let y_max = if tallest > 0.0 { tallest * 1.18 } else { 1.0 };
    // Each bar's room: at least the old 120 pixels, wider when a label line or a detail line under
    // a bar would otherwise reach its neighbour's (4 pixels kept between them).
    let gap_px = 4.0;
    let labels: Vec<Vec<String>> = spec
        .bars
        .iter()
        .map(|b| label_lines(&b.0, MIN_SLOT_PX - gap_px))
        .collect();
    let widest = labels
        .iter()
        .flatten()
        .map(|l| text_width_px(l, LABEL_SIZE))
        .chain(
            spec.details
                .iter()
                .flatten()
                .map(|(l, _)| text_width_px(l, DETAIL_SIZE)),
        )
        .fold(0.0, f64::max);
    let slot_px = MIN_SLOT_PX.max((widest + gap_px).ceil()) as u32;
    let extra_lines = labels.iter().map(Vec::len).max().unwrap_or(1) as i32 - 1;
    let extra_px = (LINE_PX * extra_lines) as u32;
    let legend_w = 200;
    // 120 = the y labels (70), the margins (2 × 12) and a little more, so each bar gets `slot_px`.
    let width = (120 + slot_px * n).max(560) + legend_w;
    let height = 520 + extra_px;
    svg(width, height, |root| {
        let (plot, legend) = root.split_horizontally(width - legend_w);
        let mut chart = ChartBuilder::on(&plot)
            .caption(spec.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(100 + extra_px)
            .y_label_area_size(70)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..y_max)?;
        // A bar's right edge. One bar's axis (0..0) has no width of its own, so plotters puts
        // segment 1 where segment 0 starts and the bar came out 28 pixels wide below zero (and
        // the capacity line of no length); there it ends at the plot's right edge.
        let right = |k: u32| {
            if n == 1 {
                SegmentValue::Last
            } else {
                SegmentValue::Exact(k)
            }
        };
        // Plotters writes each label's first line as its tick label; a second line is drawn below.
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n as usize)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels
                    .get(*i as usize)
                    .and_then(|l| l.first())
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc("plan (rank and degrees t·c·p·d·e·et; under it vpp, micro-batch, sp when on, ZeRO, recompute)")
            .y_desc(spec.y_desc)
            .label_style((FONT, 12))
            .draw()?;
        for (part, _) in spec.parts.iter().enumerate() {
            let colour = spec.colour(part);
            let rects = spec.bars.iter().enumerate().map(|(i, (_, values, _))| {
                let below: f64 = values[..part].iter().sum();
                let i = i as u32;
                let mut r = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), below),
                        (right(i + 1), below + values[part]),
                    ],
                    colour.filled(),
                );
                r.set_margin(0, 0, 14, 14);
                r
            });
            chart.draw_series(rects)?;
        }
        if let Some(ranges) = &spec.ranges {
            for (i, &(low, high)) in ranges.iter().enumerate() {
                let i = i as u32;
                let mut bar = Rectangle::new(
                    [(SegmentValue::Exact(i), low), (right(i + 1), high)],
                    BLACK.stroke_width(2),
                );
                bar.set_margin(0, 0, 52, 52);
                chart.draw_series(std::iter::once(bar))?;
            }
        }
        // Every value label sits in one row at the top of the plot, above the tallest bar, range
        // and capacity line, so none is drawn on a bar, over the line or at a height that could
        // read as the bar's own.
        let label_y = y_max * 0.985;
        chart.draw_series(spec.bars.iter().enumerate().map(|(i, (_, _, text))| {
            let (y, v) = (label_y, plotters::style::text_anchor::VPos::Top);
            Text::new(
                text.clone(),
                (SegmentValue::CenterOf(i as u32), y),
                (FONT, 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        v,
                    )),
            )
        }))?;
        if let Some((value, _)) = &spec.line {
            chart.draw_series(LineSeries::new(
                [(SegmentValue::Exact(0), *value), (right(n), *value)],
                RED.stroke_width(2),
            ))?;
        }
        let top_centre = |text: String, at: (i32, i32), size: f64, colour: &RGBColor| {
            Text::new(
                text,
                at,
                (FONT, size)
                    .into_font()
                    .color(colour)
                    .pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    )),
            )
        };
        // A label's second line under its first (which plotters put 11 pixels under the axis),
        // then the details, one line lower when some label has two.
        for (i, lines) in labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(SegmentValue::CenterOf(i as u32), 0.0));
            for (k, text) in lines.iter().enumerate().skip(1) {
                let at = (x, y + 11 + LINE_PX * k as i32);
                plot.draw(&top_centre(text.clone(), at, LABEL_SIZE, &BLACK))?;
            }
        }
        for (i, lines) in spec.details.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(SegmentValue::CenterOf(i as u32), 0.0));
            for (k, (text, colour)) in lines.iter().enumerate() {
                let at = (x, y + 26 + LINE_PX * (k as i32 + extra_lines));
                plot.draw(&top_centre(text.clone(), at, DETAIL_SIZE, colour))?;
            }
        }
        // The legend sits beside the plot, as coloured text, so it never covers a bar and adds no
        // rectangle that could be mistaken for one.
        let mut entries: Vec<(String, RGBColor)> = spec
            .parts
            .iter()
            .enumerate()
            .rev()
            .map(|(i, name)| (format!("■ {name}"), spec.colour(i)))
            .collect();
        if let Some((_, name)) = &spec.line {
            entries.push((format!("— {name}"), RED));
        }
        if spec.ranges.is_some() {
            entries.push(("▯ range: 5th–95th percentile".to_string(), BLACK));
            entries.push(("   of tpsim's measured error".to_string(), BLACK));
        }
        // The mark in the part's colour, the name in black: a light fill (amber, pink) read as
        // coloured text on white was barely legible.
        for (i, (text, colour)) in entries.into_iter().enumerate() {
            let y = 60 + 20 * i as i32;
            match text.split_once(' ') {
                Some((mark, name)) if mark.chars().count() == 1 => {
                    legend.draw(&Text::new(
                        mark.to_string(),
                        (4, y),
                        (FONT, 13).into_font().color(&colour),
                    ))?;
                    legend.draw(&Text::new(
                        name.to_string(),
                        (20, y),
                        (FONT, 13).into_font().color(&BLACK),
                    ))?;
                }
                // A name's second line, under the name, not under the mark.
                _ => {
                    legend.draw(&Text::new(
                        text.trim_start().to_string(),
                        (20, y),
                        (FONT, 13).into_font().color(&colour),
                    ))?;
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_of_a_large_pipeline_has_its_own_colour() {
        let colours: Vec<(u8, u8, u8)> = (0..128)
            .map(|s| {
                let c = stage_colour(s);
                (c.0, c.1, c.2)
            })
            .collect();
        let mut unique = colours.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), colours.len());
        // Light enough for black labels: each channel average above 55%.
        for (r, g, b) in colours {
            assert!(
                u32::from(r) + u32::from(g) + u32::from(b) > 3 * 140,
                "{r} {g} {b}"
            );
        }
    }

    #[test]
    fn hsl_matches_css() {
        let red = hsl(0.0, 1.0, 0.5);
        assert_eq!((red.0, red.1, red.2), (255, 0, 0));
        let c = hsl(120.0, 1.0, 0.25);
        assert_eq!((c.0, c.1, c.2), (0, 128, 0));
    }
}
