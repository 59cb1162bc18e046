//! Command handlers: turn flags into validated domain values, call the core, render. The only
//! module that touches files, stdout and anyhow. One file per command (or family of commands)
//! under `app/`; `scenario` turns the shared flags into a validated scenario.

use anyhow::Result;

use crate::cli::{Command, Format};
use crate::report::{self, Report};

/// What a command ended with: found plans, or valid input where nothing fits.
pub enum Outcome {
    Found,
    NothingFits,
}

pub fn run(command: Command) -> Result<Outcome> {
    let outcome = run_command(command);
    // A command that fails says its one-line error alone; one that succeeds says what it held.
    match &outcome {
        Ok(_) => held_notes::print_held(),
        Err(_) => held_notes::drop_held(),
    }
    outcome
}

fn run_command(command: Command) -> Result<Outcome> {
    // Every command but `completions` may search on the global worker pool.
    let threads = match &command {
        Command::Plan(args) => Some(thread_env::ThreadSource::Flag(args.threads)),
        Command::Sweep(args) => Some(thread_env::ThreadSource::Flag(args.threads)),
        Command::Completions(_) => None,
        _ => Some(thread_env::ThreadSource::NoFlag),
    };
    if let Some(threads) = threads {
        thread_env::size_worker_pool(threads)?;
    }
    match command {
        Command::Plan(args) => plan(*args),
        Command::Eval(args) => eval(*args, false),
        Command::Report(args) => report_command(args),
        Command::Accuracy(args) => accuracy(args),
        Command::Sweep(args) => sweep_command(args),
        Command::Compare(args) => compare_command(args),
        Command::Completions(args) => completions(args),
        Command::Calibrate(args) => calibration_commands::calibrate(args),
        Command::Validate(args) => calibration_commands::validate(args),
    }
}

/// `tpsim accuracy`.
mod accuracy_command;
/// `calibrate` and `validate` handlers (a child module, so they share `resolve_scenario`).
mod calibration_commands;
/// `tpsim compare`.
mod compare_command;
/// `tpsim completions`.
mod completions_command;
/// `--cp-exchange` beside a plan with cp 1.
mod cp_exchange_note;
/// `--emit`: framework launch configurations out.
mod emit_commands;
/// `tpsim eval` and `tpsim report`.
mod eval_command;
/// The plan file's settings `--framework` replaces with its own.
mod framework_over_file;
/// Notes held until the input is known to be valid.
mod held_notes;
/// Megatron-LM launch lines and arguments in.
mod megatron_paste;
/// `tpsim plan`.
mod pin_conflict;
mod plan_command;
/// Plan errors in the words of the input: flag, flag default or plan-file key.
mod plan_error_words;
/// Writing the report directory of `plan --report` and `eval --report`.
mod report_commands;
/// Plan files saved before `framework:`, `attention:` and `overlap:` existed: what was taken.
mod saved_plan_keys;
/// Flags → validated model, cluster and training settings.
mod scenario;
/// `tpsim sweep`.
mod sweep_command;
/// The worker-pool size the environment asks for.
mod thread_env;
use accuracy_command::accuracy;
use compare_command::compare_command;
use completions_command::completions;
use eval_command::{eval, report_command};
use plan_command::plan;
use scenario::{check_seq_len, resolve_model, resolve_scenario};
use sweep_command::sweep_command;

fn print_report(report: &Report, format: Format, table: impl FnOnce(&Report) -> String) {
    match format {
        Format::Json => println!("{}", report::to_json(report)),
        Format::Yaml => print!("{}", report::to_yaml(report)),
        Format::Table => print!("{}", table(report)),
    }
}
