//! `tpsim completions`: the shell completion script clap derives from the command line.

use anyhow::{Result, anyhow};

use super::Outcome;
use crate::cli::{Cli, CompletionsArgs};

pub(super) fn completions(args: CompletionsArgs) -> Result<Outcome> {
    use clap::CommandFactory;
    use std::io::Write;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "tpsim", &mut script);
    // `tpsim completions bash | head` closes the pipe early: that is not an error.
    match std::io::stdout().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow!("writing the completion script: {e}"))
        }
        _ => Ok(Outcome::Found),
    }
}
