//! Command handlers: turn flags into validated domain values, call the core, render. The only
//! module that touches files, stdout and anyhow. One file per command (or family of commands)
//! under `app/`; `scenario` turns the shared flags into a validated scenario.

use anyhow::{Context, Result, anyhow, bail};

use crate::cli::{
    AttentionArg, Command, EmitTarget, Format, GradDtypeArg, SweepArgs, SweepAxis, SweepFormat,
};
use crate::cli::{
    Cli, ClusterArgs, CompareArgs, CompareFormat, CompletionsArgs, EvalArgs, TrainingArgs,
};
use crate::cost::Estimate;
use crate::cost::evaluate;
use crate::cost::simulated::simulate_plan;
use crate::emit::{self, Framework};
use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, PlanRequest, Recompute};
use crate::planner::{SearchOptions, search};
use crate::report::chart_sweep;
use crate::report::{self, Report};
use crate::specs::{self, ModelRef, PlanFile};
use crate::training::{AttentionKernel, GradDtype};
use crate::units::{GIB, format_count};
use crate::{compare, sweep};

/// What a command ended with: found plans, or valid input where nothing fits.
pub enum Outcome {
    Found,
    NothingFits,
}

pub fn run(command: Command) -> Result<Outcome> {
    match command {
        Command::Plan(args) => plan(args),
        Command::Eval(args) => eval(args, false),
        Command::Report(args) => report_command(args),
        Command::Accuracy(args) => accuracy(args),
        Command::Sweep(args) => sweep_command(args),
        Command::Compare(args) => compare_command(args),
        Command::Completions(args) => completions(args),
        Command::Calibrate(args) => calibration_commands::calibrate(args),
        Command::Validate(args) => calibration_commands::validate(args),
    }
}

/// `calibrate` and `validate` handlers (a child module, so they share `resolve_scenario`).
mod calibration_commands;
/// Megatron-LM in, framework configs out, sweep, compare, completions.
mod ecosystem_commands;
use ecosystem_commands::{compare_command, completions, sweep_command};

/// `tpsim accuracy`.
mod accuracy_command;
/// `tpsim eval` and `tpsim report`.
mod eval_command;
/// `tpsim plan`.
mod plan_command;
/// Writing the report directory of `plan --report` and `eval --report`.
mod report_commands;
/// Flags → validated model, cluster and training settings.
mod scenario;
use accuracy_command::accuracy;
use eval_command::{eval, report_command};
use plan_command::plan;
use scenario::{DEFAULT_VOCAB, Scenario, model_file_of, resolve_model, resolve_scenario};

fn print_report(report: &Report, format: Format, table: impl FnOnce(&Report) -> String) {
    match format {
        Format::Json => println!("{}", report::to_json(report)),
        Format::Yaml => print!("{}", report::to_yaml(report)),
        Format::Table => print!("{}", table(report)),
    }
}
