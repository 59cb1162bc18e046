//! The report directory: `index.html` plus one SVG per figure and the JSON. The page links the SVGs
//! with relative `<img src>` paths and carries its own CSS, so it opens from disk with no server and
//! no network.

use std::fmt::Write as _;

use super::ledger_html::ledger_table;
use super::svg_gantt::gantt_svg;
use super::svg_layout::layout_svg;
use super::svg_memory::memory_svg;
use super::svg_search::search_svg;
use super::svg_step::step_svg;
use super::table::{gib, mfu_note, recompute_label, scenario_line, stage_layers_label, stats_line};
use super::{Report, to_json};
use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::cost::ledger::Ledger;
use crate::cost::simulated::Simulated;

/// Every file name `render_files` may write (`search.svg` only after a search), so that a command
/// can refuse, before any work, a report directory where one of them is an input file.
pub const FILE_NAMES: [&str; 7] = [
    "index.html",
    "report.json",
    "memory.svg",
    "step_time.svg",
    "search.svg",
    "layout.svg",
    "timeline.svg",
];

/// What the report shows beyond the `Report` value.
pub struct ReportInputs<'a> {
    pub report: &'a Report,
    pub cluster: &'a Cluster,
    /// One label per shown plan (`report.plans`), as the figures print them.
    pub labels: Vec<String>,
    /// Every evaluated plan of the search (empty: no search figure).
    pub evaluated: &'a [Estimate],
    /// Index in `evaluated` of the plan drawn in the layout and timeline, if it is there.
    pub chosen_in_evaluated: Option<usize>,
    /// The plan drawn in the layout, timeline and ledger, with its simulated schedule.
    pub chosen: &'a Simulated,
    pub chosen_label: String,
    pub chosen_ledger: &'a Ledger,
    /// Sentences worth reading first (e.g. the simulation changed the order).
    pub notes: Vec<String>,
}

/// File name → contents.
pub struct ReportFiles {
    pub files: Vec<(String, String)>,
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px}\
th{background:#f3f3f3}td.n{text-align:right}figure{margin:2em 0}img{max-width:100%;border:1px solid #eee}\
pre{background:#f7f7f7;padding:.8em;white-space:pre-wrap;overflow-wrap:anywhere}.note{background:#fff7d6;padding:.5em;border-left:4px solid #e0b000}";

/// The plans table: every column of `plan`'s terminal table, with cp, ep, etp, precision and their
/// exposed-time columns shown by the same rule (a column shows when any plan uses it), so each row
/// multiplies to the GPU count and names its number format.
fn plans_html(plans: &[Estimate], labels: &[String], report: &Report) -> String {
    let any = |f: &dyn Fn(&Estimate) -> bool| plans.iter().any(f);
    let show_cp = any(&|e| e.plan.cp > 1);
    // ep and etp together, as `plan`'s table shows them (`eval --etp` defaults to tp, so ep alone
    // would not say how to run an expert-parallel row).
    let show_ep = any(&|e| e.plan.ep > 1 || e.plan.etp > 1);
    let show_etp = show_ep;
    // Layers per stage (first/middle/last), as `plan`'s table: only when a plan has a first/last
    // split.
    let show_layers = any(&|e| e.plan.stages.is_first_last(e.plan.pp, e.plan.vpp));
    let show_precision = any(&|e| e.plan.precision != crate::plan::Precision::Bf16);
    // The time to train `--tokens`, as `plan`'s table adds it (`table::duration`).
    let show_train = any(&|e| e.time_to_train_s.is_some());
    // (header, shown, cell of one plan, numeric)
    type Cell = fn(&Estimate) -> String;
    let columns: [(&str, bool, Cell, bool); 25] = [
        ("tp", true, |e| e.plan.tp.to_string(), true),
        ("cp", show_cp, |e| e.plan.cp.to_string(), true),
        ("pp", true, |e| e.plan.pp.to_string(), true),
        ("dp", true, |e| e.plan.dp.to_string(), true),
        ("ep", show_ep, |e| e.plan.ep.to_string(), true),
        ("etp", show_etp, |e| e.plan.etp.to_string(), true),
        ("vpp", true, |e| e.plan.vpp.to_string(), true),
        ("layers", show_layers, |e| stage_layers_label(&e.plan), true),
        ("mb", true, |e| e.plan.micro_batch.to_string(), true),
        ("m", true, |e| e.plan.num_microbatches.to_string(), true),
        (
            "sp",
            true,
            |e| {
                if e.plan.sequence_parallel {
                    "yes"
                } else {
                    "no"
                }
                .to_string()
            },
            false,
        ),
        ("recomp", true, |e| recompute_label(&e.plan), false),
        // "3 keep" where ZeRO-3 keeps the gathered parameters, as `plan`'s table writes it.
        ("zero", true, |e| super::table::zero_label(&e.plan), true),
        (
            "prec",
            show_precision,
            |e| e.plan.precision.as_str().to_string(),
            false,
        ),
        (
            "mem GiB",
            true,
            |e| {
                format!(
                    "{}/{}",
                    gib(e.memory.total_bytes.0),
                    gib(e.memory.capacity_bytes.0)
                )
            },
            true,
        ),
        (
            "step s",
            true,
            |e| crate::units::show_step_s(e.time.step_s.0),
            true,
        ),
        (
            "tokens/s",
            true,
            |e| crate::units::show_measured(e.tokens_per_s, 0),
            true,
        ),
        (
            "MFU %",
            true,
            |e| crate::units::show_measured(e.mfu * 100.0, 1),
            true,
        ),
        (
            "bubble %",
            true,
            |e| format!("{:.1}", e.bubble_share * 100.0),
            true,
        ),
        (
            "TP s",
            true,
            |e| format!("{:.2}", e.time.tp_comm_exposed_s.0),
            true,
        ),
        (
            "CP s",
            show_cp,
            |e| format!("{:.2}", e.time.cp_comm_exposed_s.0),
            true,
        ),
        (
            "PP s",
            true,
            |e| format!("{:.2}", e.time.pp_comm_exposed_s.0),
            true,
        ),
        (
            "EP s",
            show_ep || show_etp,
            |e| format!("{:.2}", e.time.ep_comm_exposed_s.0),
            true,
        ),
        (
            "DP s",
            true,
            |e| format!("{:.2}", e.time.dp_comm_exposed_s.0),
            true,
        ),
        (
            "train",
            show_train,
            |e| {
                e.time_to_train_s
                    .map(super::table::duration)
                    .unwrap_or_default()
            },
            true,
        ),
    ];
    let shown: Vec<_> = columns.iter().filter(|c| c.1).collect();
    // The cost to train beside the time to train, with the ends of its range: the numbers `plan`
    // prints on its train and range lines and report.json holds (`cost_to_train`,
    // `cost_to_train_low`/`_high`, from `uncertainty::cost_to_train_ends`).
    let show_cost = any(&|e| e.cost_to_train.is_some());
    let cost_cell = |e: &Estimate| -> String {
        let Some(cost) = e.cost_to_train else {
            return String::new();
        };
        let dollars = |x: f64| format!("${}", crate::sweep::cost_text(x));
        match crate::uncertainty::cost_to_train_ends(
            e,
            &report.cluster.gpu,
            report.training.framework,
            crate::uncertainty::ModelKind::of(report.model.moe.is_some()),
        ) {
            Some((low, high)) => {
                format!("{} ({} to {})", dollars(cost), dollars(low), dollars(high))
            }
            None => dollars(cost),
        }
    };
    let mut out = String::from("<table><thead><tr><th>plan</th>");
    for (header, ..) in &shown {
        let _ = write!(out, "<th>{}</th>", escape(header));
    }
    if show_cost {
        out.push_str("<th>cost to train</th>");
    }
    out.push_str("</tr></thead><tbody>\n");
    for (e, label) in plans.iter().zip(labels) {
        let _ = write!(out, "<tr><td>{}</td>", escape(label));
        for (_, _, cell, numeric) in &shown {
            let class = if *numeric { " class=\"n\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(&cell(e)));
        }
        if show_cost {
            let _ = write!(out, "<td class=\"n\">{}</td>", escape(&cost_cell(e)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
    out
}

/// Height of the warning band added above a figure of a plan that does not fit.
const BANNER_PX: u32 = 26;

/// `svg` with a red warning line above its drawing (the drawing moves down, nothing is covered).
fn with_banner(svg: &str, warning: &str) -> Result<String, String> {
    let open_end = svg.find('>').ok_or("an SVG without its opening tag")? + 1;
    let open = &svg[..open_end];
    let number = |attr: &str| -> Result<u32, String> {
        let start = open
            .find(&format!(" {attr}=\""))
            .ok_or_else(|| format!("an SVG without {attr}"))?
            + attr.len()
            + 3;
        let end = start + open[start..].find('"').ok_or("an unclosed SVG attribute")?;
        open[start..end]
            .parse()
            .map_err(|_| format!("an SVG {attr} that is not a whole number"))
    };
    let (width, height) = (number("width")?, number("height")?);
    let taller = height + BANNER_PX;
    let open = open
        .replacen(
            &format!(" height=\"{height}\""),
            &format!(" height=\"{taller}\""),
            1,
        )
        .replacen(
            &format!("viewBox=\"0 0 {width} {height}\""),
            &format!("viewBox=\"0 0 {width} {taller}\""),
            1,
        );
    let body = svg[open_end..]
        .trim_end()
        .strip_suffix("</svg>")
        .ok_or("an SVG without its closing tag")?;
    Ok(format!(
        "{open}\n<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{BANNER_PX}\" fill=\"#FDECEA\" stroke=\"none\"/>\n<text x=\"8\" y=\"18\" font-family=\"sans-serif\" font-size=\"14\" font-weight=\"bold\" fill=\"#B00020\">{}</text>\n<g transform=\"translate(0,{BANNER_PX})\">{body}</g>\n</svg>\n",
        escape(warning)
    ))
}

/// `eval`'s `range:` and `memory range:` lines for `estimate`, named "this plan" as `eval` names
/// it (`uncertainty::within_error_line`, `memory_margin::margin_line`); the memory line only
/// where the plan would not fit at the high end of tpsim's memory error.
pub(crate) fn range_lines(estimate: &Estimate, report: &Report) -> Vec<String> {
    let step = crate::uncertainty::within_error_line(
        std::slice::from_ref(estimate),
        &report.cluster.gpu,
        report.training.framework,
        crate::uncertainty::ModelKind::of(report.model.moe.is_some()),
    );
    let memory = crate::memory_margin::margin_line(
        estimate,
        report.cluster.gpu_memory_bytes as f64,
        report.training.framework,
        "this plan",
    );
    step.into_iter().chain(memory).collect()
}

/// Renders every file of the report directory.
pub fn render_files(inputs: &ReportInputs) -> Result<ReportFiles, String> {
    let report = inputs.report;
    let plans = &report.plans;
    let chosen = inputs.chosen;
    let plan = &chosen.estimate.plan;
    // A plan that does not fit is marked wherever it is named: in the plans table, under its bars
    // (`plan_details`), and, when it is the plan the report is about, on the page's first line and
    // in a warning band over every figure.
    let table_labels: Vec<String> = plans
        .iter()
        .zip(&inputs.labels)
        .map(|(e, label)| {
            if e.fits() {
                label.clone()
            } else {
                format!("{label} (does not fit)")
            }
        })
        .collect();
    let does_not_fit = (!chosen.estimate.fits()).then(|| {
        let memory = &chosen.estimate.memory;
        if memory.misses_only_host() {
            // The GPU holds it; the host memory its offloaded activations need does not.
            format!(
                "{} does not fit: {}",
                inputs.chosen_label,
                super::table::misfit_words(memory)
            )
        } else {
            format!(
                "{} does not fit (OOM): it needs {} GiB of {} GiB per GPU",
                inputs.chosen_label,
                gib(memory.total_bytes.0),
                gib(memory.capacity_bytes.0)
            )
        }
    });
    let mut figures: Vec<(&str, String, String)> = vec![
        (
            "memory.svg",
            "Memory per GPU of the shown plans, by what holds it, against the GPU's capacity; the black outlined box (▯) spans the range tpsim's measured peak-memory error gives it (5th–95th percentile; its top is the plan's memory.total_bytes_high, the figure the memory range line gives).".into(),
            memory_svg(
                plans,
                &inputs.labels,
                crate::uncertainty::memory_band_for(inputs.report.training.framework).map(
                    |(band, _)| {
                        plans
                            .iter()
                            .map(|e| {
                                (
                                    crate::memory_margin::total_bytes_low(e, band),
                                    crate::memory_margin::total_bytes_high(e, band),
                                )
                            })
                            .collect()
                    },
                ),
            )?,
        ),
        (
            "step_time.svg",
            "Where each plan's step time goes (exposed terms only), with its MFU; the black outlined box (▯) spans the range tpsim's measured error gives the step (5th–95th percentile).".into(),
            step_svg(plans, &inputs.labels, {
                let (band, _) = crate::uncertainty::band_for(
                    &inputs.cluster.gpu.name,
                    inputs.report.training.framework,
                    crate::uncertainty::ModelKind::of(inputs.report.model.moe.is_some()),
                );
                plans
                    .iter()
                    .map(|e| {
                        let r = crate::uncertainty::interval(e, band);
                        (r.step_s_low, r.step_s_high)
                    })
                    .collect()
            })?,
        ),
    ];
    if !inputs.evaluated.is_empty() {
        let pins = inputs
            .report
            .search
            .as_ref()
            .map(super::svg_search::pinned_flags)
            .unwrap_or_default();
        let evaluated = if pins.is_empty() {
            "Every evaluated plan".to_string()
        } else {
            format!(
                "Every evaluated plan of the pinned search (the candidates that pass the pins {pins} and build)"
            )
        };
        figures.push((
            "search.svg",
            format!("{evaluated}: memory per GPU against throughput, by TP degree; grey plans do not fit; the black line is the Pareto frontier."),
            search_svg(
                inputs.evaluated,
                Some((&chosen.estimate, inputs.chosen_label.as_str())),
                inputs.report.search.as_ref(),
            )?,
        ));
    }
    figures.push((
        "layout.svg",
        format!(
            "Where the GPUs of {} sit: nodes, {} coordinates, TP groups{}{}.",
            inputs.chosen_label,
            if plan.cp > 1 {
                "(dp, c, pp, tp)"
            } else {
                "(dp, pp, tp)"
            },
            if plan.cp > 1 {
                match inputs.report.training.cp_exchange {
                    crate::training::CpExchange::KvAllGather
                    | crate::training::CpExchange::HeadAllToAll => {
                        ", blocks of interleaved CP groups (blue)"
                    }
                    _ => ", blocks of interleaved CP rings (blue)",
                }
            } else {
                ""
            },
            if plan.ep > 1 {
                ", EP groups (red; second line: expert-DP and EP rank)"
            } else {
                ""
            },
        ),
        layout_svg(
            inputs.cluster,
            plan,
            inputs.report.training.cp_exchange,
            inputs.report.training.pp_schedule,
        )?,
    ));
    // A schedule too large to simulate has no blocks to draw (`ScheduleSummary::
    // not_simulated_blocks`); the schedule line under the breakdown says so.
    if chosen.summary.not_simulated_blocks.is_none() {
        figures.push((
            "timeline.svg",
            if plan.pp > 1 {
                format!(
                    "One step of {} from the event-driven {} schedule simulation.",
                    inputs.chosen_label,
                    chosen.summary.pipeline_schedule().words(plan.vpp)
                )
            } else if plan.num_microbatches > 1 {
                // No pipeline, no schedule: the figure's title says "no pipeline" too.
                format!(
                    "One step of {}, simulated: no pipeline, so every GPU runs its {} micro-batches one after the other.",
                    inputs.chosen_label, plan.num_microbatches
                )
            } else {
                // One micro-batch (the figure's title says m = 1): nothing runs "one after the
                // other", one forward and one backward fill the step.
                format!(
                    "One step of {}, simulated: no pipeline and one micro-batch, so every GPU runs one forward and one backward.",
                    inputs.chosen_label
                )
            },
            gantt_svg(chosen, plan)?,
        ));
    }

    if let Some(warning) = &does_not_fit {
        for (_, _, svg) in &mut figures {
            *svg = with_banner(svg, warning)?;
        }
    }

    let mut html = String::new();
    let verdict = match &does_not_fit {
        Some(warning) => format!(" — {warning}"),
        None => String::new(),
    };
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tpsim report: {}{}</title><style>{STYLE}</style></head><body>\n<h1>tpsim report: {} on {} GPUs{}</h1>\n",
        escape(&report.model.name),
        escape(&verdict),
        escape(&report.model.name),
        report.cluster.total_gpus,
        escape(&verdict)
    );
    // The scenario as the drawn plan runs it (its overlaps, its recompute), as `eval` prints it:
    // the other shown plans may use what it does not.
    let inputs_report = Report {
        plans: vec![inputs.chosen.estimate],
        details: Vec::new(),
        ..report.clone()
    };
    let _ = writeln!(
        html,
        "<h2>Inputs</h2>\n<pre>{}</pre>",
        escape(&scenario_line(&inputs_report))
    );
    if let Some(stats) = &report.search {
        let _ = writeln!(
            html,
            "<h2>Search</h2>\n<p>{}</p>",
            escape(&stats_line(stats))
        );
    }
    for note in &inputs.notes {
        let _ = writeln!(html, "<p class=\"note\">{}</p>", escape(note));
    }
    let _ = writeln!(
        html,
        "<h2>Plans</h2>\n{}",
        plans_html(plans, &table_labels, report)
    );
    if let Some(note) = mfu_note(plans, report.cluster.peak_flops) {
        let _ = writeln!(html, "<p>{}</p>", escape(&note));
    }
    // The drawn plan's step and memory ranges in words, the lines `eval` prints under its
    // breakdown (same functions, same plan): step_time.svg draws the step's range as a box but
    // gives no number, and the memory range had no place on the page.
    for line in range_lines(&chosen.estimate, report) {
        let _ = writeln!(html, "<p class=\"range\">{}</p>", escape(&line));
    }
    let _ = writeln!(html, "<h2>Figures</h2>");
    for (i, (name, caption, _)) in figures.iter().enumerate() {
        let _ = writeln!(
            html,
            "<figure><img src=\"{name}\" alt=\"{}\"><figcaption>Figure {}. {}</figcaption></figure>",
            escape(caption),
            i + 1,
            escape(caption)
        );
    }
    let _ = writeln!(
        html,
        "<h2>Figure {}. Communication ledger of {}</h2>\n<p>Every collective one GPU issues in a step (TP, CP, PP and EP: a GPU of the slowest stage, whose time sets the step; DP: the stage with the most parameters), with where in the layer it comes from. Each group's step total equals the cost model's <code>comm.*.wire_bytes</code>: EP's includes the expert-TP gathers and scatters, DP's the expert gradients over expert DP, each shown beneath. A count with a fraction is an average per stage: the cost model's share of recomputed layers, or of the TP pairs of MoE layers on the busiest stage.</p>",
        figures.len() + 1,
        escape(&inputs.chosen_label)
    );
    html.push_str(&ledger_table(inputs.chosen_ledger));
    let _ = writeln!(
        html,
        "<p>Also here: <a href=\"report.json\">report.json</a> (the same data, with each plan's ledger).</p>\n</body></html>"
    );

    let mut files: Vec<(String, String)> = figures
        .into_iter()
        .map(|(name, _, svg)| (name.to_string(), svg))
        .collect();
    files.push(("index.html".into(), html));
    files.push(("report.json".into(), to_json(report)));
    Ok(ReportFiles { files })
}
