//! The worker-pool size: `--threads` where the command has it, else `RAYON_NUM_THREADS`, which
//! sizes the pool every search runs on when the flag is not given. Both are held to one bound.
//! Unchecked, `RAYON_NUM_THREADS=100000` started that many threads for a search of a tenth of a
//! second (5,000 took 34 s).

use anyhow::{Context, Result, bail};

use super::plan_command::MAX_THREADS;

/// The environment variable rayon reads for its global pool.
const RAYON_NUM_THREADS: &str = "RAYON_NUM_THREADS";

/// Where the pool size comes from for one command.
pub(super) enum ThreadSource {
    /// The command has `--threads`; `Some` when it was given.
    Flag(Option<usize>),
    /// The command has no `--threads`: only the environment can size the pool.
    NoFlag,
}

/// Sizes the global worker pool before the command runs. A `--threads` given wins over
/// `RAYON_NUM_THREADS` (rayon's own rule: an explicit `num_threads` is used before the variable is
/// read, the doc of `ThreadPoolBuilder::num_threads` in rayon-core 1.x), and sizes the global pool itself, so
/// every parallel loop of the command (the search, and the searches behind its notes) runs on
/// that many threads; the environment is then not read at all.
pub(super) fn size_worker_pool(source: ThreadSource) -> Result<()> {
    match source {
        ThreadSource::Flag(Some(0)) => {
            bail!("--threads 0: give at least one thread, or omit it to use every core")
        }
        ThreadSource::Flag(Some(n)) if n > MAX_THREADS => bail!(
            "--threads {n} is more than {MAX_THREADS}; the search is CPU-bound, so more threads than cores only add overhead (omit it to use every core)"
        ),
        ThreadSource::Flag(Some(n)) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("starting the worker threads"),
        ThreadSource::Flag(None) => check_thread_env(true),
        ThreadSource::NoFlag => check_thread_env(false),
    }
}

/// Refuses a `RAYON_NUM_THREADS` past [`MAX_THREADS`]. Rayon itself ignores a value that is not a
/// whole number and reads 0 as "every core", so those stay its business. `has_flag`: the command
/// takes `--threads`, which the error then offers as a fix.
fn check_thread_env(has_flag: bool) -> Result<()> {
    let Some(value) = std::env::var_os(RAYON_NUM_THREADS) else {
        return Ok(());
    };
    let Some(threads) = value.to_str().and_then(|v| v.trim().parse::<u128>().ok()) else {
        return Ok(());
    };
    if threads > MAX_THREADS as u128 {
        let flag = if has_flag {
            ", or give --threads N, which takes precedence"
        } else {
            ""
        };
        bail!(
            "{RAYON_NUM_THREADS}={threads} (environment) is more than {MAX_THREADS} threads; the search is CPU-bound, so more threads than cores only add overhead: unset it, or set at most {MAX_THREADS}{flag}"
        );
    }
    Ok(())
}
