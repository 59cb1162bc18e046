//! Entry point: parse flags, run the command, map the outcome to an exit code
//! (0 plans found, 1 valid input but nothing fits, 2 error).

use clap::Parser;
use std::process::ExitCode;

use tpsim::app::{self, Outcome};
use tpsim::cli::Cli;

/// `println!` panics when stdout fails. A closed pipe (`tpsim ... | head`) is the reader's choice:
/// exit quietly, as Unix filters do. Any other write failure (a full disk) is an error like the
/// others: one line, exit 2. Every other panic keeps Rust's default report — it is a bug.
fn quiet_stdout_failures() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") {
            if message.contains("Broken pipe") {
                std::process::exit(0);
            }
            eprintln!(
                "error: writing the output: {}",
                message.trim_start_matches("failed printing to stdout: ")
            );
            std::process::exit(2);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_stdout_failures();
    match app::run(Cli::parse().command) {
        Ok(Outcome::Found) => ExitCode::from(0),
        Ok(Outcome::NothingFits) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
