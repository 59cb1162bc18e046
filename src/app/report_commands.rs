//! Command handlers' report half: turns a finished `plan` or `eval` into the report directory
//! (`--report DIR`, `tpsim report FILE --out DIR`). Like `app.rs`, it touches files and uses anyhow.

use anyhow::{Result, anyhow};

use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::cost::ledger::ledger;
use crate::cost::simulated::{ScheduleSummary, Simulated};
use crate::model::Model;
use crate::planner::{SearchOptions, refine_top, search};
use crate::report::{self, PlanDetail, Report, ReportInputs, detail_for, plan_label};
use crate::training::Training;

/// Fails early, before any work, when `dir` cannot become the report directory, or when one of
/// the files the report writes there is one of the command's `inputs` (flag, path). Creates
/// nothing: the directory appears only once the whole report is written (`output_file`).
pub fn check_dir(flag: &str, dir: &str, inputs: &[(&str, &str)]) -> Result<()> {
    crate::output_file::check_report_dir(flag, dir)?;
    // An input among the report's files is said as such, before the user's other files.
    crate::output_file::refuse_report_overlap(flag, dir, &report::FILE_NAMES, inputs)?;
    Ok(crate::output_file::refuse_foreign_report_files(
        flag,
        dir,
        &report::FILE_NAMES,
    )?)
}

/// Writes every file of the report into `dir` (see `output_file::write_report_dir`), none of
/// them over one of the command's `inputs`.
pub fn write_dir(
    flag: &str,
    dir: &str,
    files: &[(String, String)],
    inputs: &[(&str, &str)],
) -> Result<()> {
    Ok(crate::output_file::write_report_dir(
        flag, dir, files, inputs,
    )?)
}

/// Everything one report needs from the command.
pub struct Written<'a> {
    pub flag: &'a str,
    pub dir: &'a str,
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub training: &'a Training,
    pub report: &'a Report,
    pub labels: Vec<String>,
    pub evaluated: &'a [Estimate],
    pub chosen: &'a Simulated,
    pub chosen_label: String,
    pub notes: Vec<String>,
    /// The command's input files (flag, path), which no report file may replace.
    pub inputs: &'a [(&'a str, &'a str)],
}

/// Renders and writes the report; returns the line that says so: "wrote DIR/index.html and N
/// more files", and that it replaced an earlier report there (`output_file::replacing_words`,
/// looked up before the write).
pub fn write_report(w: Written) -> Result<String> {
    let index = std::path::Path::new(w.dir).join("index.html");
    let replacing = crate::output_file::replacing_words(&index, "report");
    let chosen_plan = w.chosen.estimate.plan;
    let chosen_in_evaluated = w.evaluated.iter().position(|e| e.plan == chosen_plan);
    let chosen_ledger = ledger(w.model, w.cluster, w.training, &chosen_plan);
    let files = report::render_files(&ReportInputs {
        report: w.report,
        cluster: w.cluster,
        labels: w.labels,
        evaluated: w.evaluated,
        chosen_in_evaluated,
        chosen: w.chosen,
        chosen_label: w.chosen_label,
        chosen_ledger: &chosen_ledger,
        notes: w.notes,
    })
    .map_err(|e| anyhow!("{} {}: drawing the figures failed: {e}", w.flag, w.dir))?;
    write_dir(w.flag, w.dir, &files.files, w.inputs)?;
    Ok(format!(
        "wrote {} and {} more files{replacing}",
        index.display(),
        files.files.len() - 1
    ))
}

/// The scenario a report is about.
pub type Scene<'a> = (&'a Model, &'a Cluster, &'a Training);

/// Ledger and schedule summary of each shown plan.
pub fn details_of(
    (model, cluster, training): Scene,
    plans: &[Estimate],
    simulated: &[Option<Simulated>],
) -> Vec<PlanDetail> {
    plans
        .iter()
        .zip(simulated)
        .map(|(e, sim)| {
            detail_for(
                model,
                cluster,
                training,
                &e.plan,
                sim.as_ref().map(|x| x.summary),
            )
        })
        .collect()
}

/// A bubble ratio as the schedule line prints it: three decimals, or two significant digits where
/// three decimals would print a non-zero ratio as 0.000 (pp 2 over 2,048 virtual micro-batches).
fn ratio_text(ratio: f64) -> String {
    if ratio > 0.0 && ratio < 0.000_5 {
        format!("{ratio:.1e}")
    } else {
        format!("{ratio:.3}")
    }
}

/// What `eval` says about the simulated schedule; a plan without a pipeline (pp 1) has none.
pub fn schedule_note(s: &ScheduleSummary, pp: u32, vpp: u32) -> String {
    let name = s.pipeline_schedule().words(vpp);
    let closed = s.pipeline_schedule().closed_form_words();
    if pp == 1 {
        return "pipeline schedule: none (pp 1: one stage runs every layer, no bubble)".to_string();
    }
    // The MTP layers the last stage (a V's first GPU) runs beside the output layer.
    let mtp_words = match s.mtp_layers_on_last {
        0 => String::new(),
        1 => "the MTP layer, ".to_string(),
        n => format!("{n} MTP layers, "),
    };
    if let Some(blocks) = s.not_simulated_blocks {
        format!(
            "pipeline schedule: not simulated ({blocks} forward and backward blocks of {name}, more than the {} tpsim simulates); the closed form is used: {:.3} s, bubble ratio {closed} = {}",
            crate::cost::schedule::MAX_SIMULATED_BLOCKS,
            s.closed_form_step_s,
            ratio_text(s.closed_form_bubble_ratio)
        )
    } else if s.simulated_step_used && s.pipeline_schedule().v_kind().is_some() {
        // A V places chunks r and 2p − 1 − r on GPU r (`cost::v_schedule`): the first GPU runs
        // both ends of the model, not a first and a last stage.
        format!(
            "pipeline schedule: the simulated {name} step is used: {:.3} s vs {:.3} s from the closed form ({:+.2}%), because the GPUs differ in work (the first runs the first and the last model chunk of the V, with the embedding, {}the output layer and the loss); bubble ratio (idle / busy of the slowest GPU) {} simulated vs {closed} = {}; all GPUs idle {:.2}% of their time",
            s.simulated_step_s,
            s.closed_form_step_s,
            100.0 * (s.simulated_step_s / s.closed_form_step_s - 1.0),
            mtp_words,
            ratio_text(s.simulated_bubble_ratio),
            ratio_text(s.closed_form_bubble_ratio),
            s.pipeline_idle_share * 100.0,
        )
    } else if s.simulated_step_used {
        format!(
            "pipeline schedule: the simulated {name} step is used: {:.3} s vs {:.3} s from the closed form ({:+.2}%), because the stages differ in work (first stage {}, last stage {} plus {}the output layer); bubble ratio (idle / busy of the slowest stage) {} simulated vs {closed} = {}; all stages idle {:.2}% of their time",
            s.simulated_step_s,
            s.closed_form_step_s,
            100.0 * (s.simulated_step_s / s.closed_form_step_s - 1.0),
            crate::units::count_words(s.layers_per_stage_first, "layer", "layers"),
            crate::units::count_words(s.layers_per_stage_last, "layer", "layers"),
            mtp_words,
            ratio_text(s.simulated_bubble_ratio),
            ratio_text(s.closed_form_bubble_ratio),
            s.pipeline_idle_share * 100.0,
        )
    } else {
        format!(
            "pipeline schedule: the simulated {name} step equals the closed form ({:.3} s; bubble ratio {closed} = {})",
            s.closed_form_step_s,
            ratio_text(s.closed_form_bubble_ratio)
        )
    }
}

/// Where a report goes: the flag that named the directory, the directory, and the command's input
/// files (flag, path), which no report file may replace.
pub struct Destination<'a> {
    pub flag: &'a str,
    pub dir: &'a str,
    pub inputs: &'a [(&'a str, &'a str)],
}

/// The search's feasible plans numbered as `plan` numbers its rows: its default list (the
/// closed-form best `PLAN_TOP_DEFAULT`, refined by the schedule simulation and re-ranked,
/// `refine_top`), then the rest of the first 64 the same way after them, twins folded into the
/// first of each set (`planner::fold_firsts`). Numbered on the closed form alone, a plan the
/// simulation moved up (an uneven pipeline's slower last stage moves others down) had one
/// number in the report and another in `plan`'s table.
fn listed_rows(scene: Scene, feasible: &[Estimate]) -> Vec<(Estimate, Option<Simulated>)> {
    let (model, cluster, training) = scene;
    let head = &feasible[..feasible.len().min(64)];
    let cut = head.len().min(crate::cli::PLAN_TOP_DEFAULT);
    let mut rows: Vec<(Estimate, Option<Simulated>)> = Vec::new();
    for part in [&head[..cut], &head[cut..]] {
        let refined = refine_top(model, cluster, training, part);
        rows.extend(refined.plans.into_iter().zip(refined.simulated));
    }
    let estimates: Vec<Estimate> = rows.iter().map(|(e, _)| *e).collect();
    let firsts = crate::planner::fold_firsts(&estimates);
    let mut rows: Vec<Option<(Estimate, Option<Simulated>)>> = rows.into_iter().map(Some).collect();
    firsts.iter().filter_map(|&i| rows[i].take()).collect()
}

/// `eval --report DIR`: the evaluated plan next to the best ones of its scenario, and the whole
/// search behind it.
pub fn write_eval_report(
    destination: Destination,
    scene: Scene,
    options: SearchOptions,
    report: &Report,
    simulated: &Simulated,
    schedule_line: String,
) -> Result<()> {
    let Destination { flag, dir, inputs } = destination;
    let (model, cluster, training) = scene;
    let plan = simulated.estimate.plan;
    let result = search(model, cluster, training, options);
    // The search's top plans numbered as `plan` lists them (`listed_rows`); the evaluated plan's
    // row is itself, or the twin it folds into, on the simulated step or the closed form.
    let listed = listed_rows(scene, result.feasible());
    let closed = crate::cost::evaluate(model, cluster, training, &plan);
    let twin_of_this = |e: &Estimate| {
        e.plan == plan
            || crate::planner::folds_together(e, &simulated.estimate)
            || crate::planner::folds_together(e, &closed)
    };
    let this_rank = listed
        .iter()
        .position(|(e, _)| twin_of_this(e))
        .map(|i| i + 1);
    let numbered: Vec<(usize, Estimate, Option<Simulated>)> = listed
        .into_iter()
        .enumerate()
        .filter(|(_, (e, _))| !twin_of_this(e))
        .take(4)
        .map(|(i, (e, sim))| (i + 1, e, sim))
        .collect();
    let others: Vec<Estimate> = numbered.iter().map(|(_, e, _)| *e).collect();
    let others_simulated: Vec<Option<Simulated>> =
        numbered.iter().map(|(_, _, sim)| sim.clone()).collect();
    let mut shown = report.clone();
    shown.search = Some(result.stats.clone());
    shown.plans.extend(others.iter().copied());
    shown
        .details
        .extend(details_of(scene, &others, &others_simulated));
    // Each bar carries its number in `plan`'s list.
    let search_rank = |e: &Estimate| {
        numbered
            .iter()
            .find(|(_, shown, _)| shown.plan == e.plan)
            .map(|(rank, _, _)| *rank)
    };
    let mut labels = vec![match this_rank {
        Some(rank) => format!(
            "this plan (search #{rank}) {}",
            crate::report::degrees_label(&simulated.estimate)
        ),
        None => format!(
            "this plan {}",
            crate::report::degrees_label(&simulated.estimate)
        ),
    }];
    labels.extend(others.iter().map(|e| match search_rank(e) {
        Some(rank) => plan_label(rank, e),
        None => crate::report::degrees_label(e),
    }));
    let wrote = write_report(Written {
        flag,
        dir,
        model,
        cluster,
        training,
        report: &shown,
        labels,
        evaluated: &result.ranked,
        chosen: simulated,
        chosen_label: "the evaluated plan".to_string(),
        notes: vec![
            schedule_line,
            "The first bar is the evaluated plan; the others are the best plans the search finds for the same scenario, numbered as `plan` lists them (settings that change nothing folded; ZeRO stage and the other settings under each bar).".to_string(),
        ],
        inputs,
    })?;
    eprintln!("{wrote}");
    Ok(())
}
