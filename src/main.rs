//! Entry point: parse flags, run the command, map the outcome to an exit code
//! (0 plans found, 1 valid input but nothing fits, 2 error).

use clap::{CommandFactory, FromArgMatches};
use std::io::Write;
use std::process::ExitCode;

use tpsim::app::{self, Outcome};
use tpsim::cli::Cli;
use tpsim::input_file::sanitize_message;

/// `println!`/`eprintln!` panic when the stream fails. A closed stdout pipe (`tpsim ... | head`) is
/// the reader's choice: exit quietly, as Unix filters do. Any other write failure (a full disk,
/// stderr on /dev/full) is an error like the others: exit 2, with one line on stderr when stderr
/// still takes it. Every other panic keeps Rust's default report — it is a bug.
fn quiet_output_failures() {
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
            let _ = writeln!(
                std::io::stderr(),
                "error: writing the output: {}",
                message.trim_start_matches("failed printing to stdout: ")
            );
            std::process::exit(2);
        }
        if message.starts_with("failed printing to stderr") {
            std::process::exit(2);
        }
        default(info);
    }));
}

/// Flushes stdout; a failure other than a closed pipe is exit 2 (buffered output would otherwise
/// be lost silently at exit).
fn flush_stdout() -> Result<(), std::io::Error> {
    match std::io::stdout().flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

fn fail(message: &str) -> ExitCode {
    // When stderr itself cannot be written there is nobody to tell; the exit code still says 2.
    let _ = writeln!(std::io::stderr(), "error: {}", sanitize_message(message));
    ExitCode::from(2)
}

/// A file-size limit (`ulimit -f`) kills a process with SIGXFSZ in the middle of a write, before
/// `output_file` can remove its temporary file. Ignored, the write fails with EFBIG instead, and
/// the error path cleans up and says so (POSIX `setrlimit(2)`).
fn file_size_limit_is_an_error() {
    // SAFETY: setting a standard signal's disposition to SIG_IGN before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn main() -> ExitCode {
    quiet_output_failures();
    file_size_limit_is_an_error();
    let command = Cli::command();
    let parsed = command.clone().try_get_matches().and_then(|matches| {
        if let Some(line) = tpsim::cli_errors::whole_number_spelling_line(&command, &matches) {
            return Ok(Err(line));
        }
        Cli::from_arg_matches(&matches).map(Ok)
    });
    let cli = match parsed {
        Ok(Ok(cli)) => cli,
        Ok(Err(line)) => return fail(&line),
        Err(err) if !err.use_stderr() => {
            // --help and --version print to stdout and succeed, unless stdout cannot take them.
            // A closed pipe (`tpsim --help | head`) is the reader's choice, as for any output.
            let printed = match err.print() {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
                _ => Ok(()),
            };
            if printed.is_err() || flush_stdout().is_err() {
                return fail("writing the output: the help text could not be written to stdout");
            }
            return ExitCode::from(0);
        }
        Err(err) => return fail(&tpsim::cli_errors::usage_error_line(&err)),
    };
    let outcome = app::run(cli.command);
    if let Err(err) = flush_stdout() {
        return fail(&format!("writing the output: {err}"));
    }
    match outcome {
        Ok(Outcome::Found) => ExitCode::from(0),
        Ok(Outcome::NothingFits) => ExitCode::from(1),
        Err(err) => fail(&format!("{err:#}")),
    }
}
