//! Entry point: parse flags, run the command, map the outcome to an exit code
//! (0 plans found, 1 valid input but nothing fits, 2 error).

use clap::Parser;
use std::process::ExitCode;

use tpsim::app::{self, Outcome};
use tpsim::cli::Cli;

fn main() -> ExitCode {
    match app::run(Cli::parse().command) {
        Ok(Outcome::Found) => ExitCode::from(0),
        Ok(Outcome::NothingFits) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
