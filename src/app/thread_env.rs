//! `RAYON_NUM_THREADS`, which sizes the worker pool every search runs on when `--threads` is not
//! given: held to the bound `--threads` has. Unchecked, `RAYON_NUM_THREADS=100000` started that
//! many threads for a search of a tenth of a second (5,000 took 34 s).

use anyhow::{Result, bail};

use super::plan_command::MAX_THREADS;

/// The environment variable rayon reads for its global pool.
const RAYON_NUM_THREADS: &str = "RAYON_NUM_THREADS";

/// Refuses a `RAYON_NUM_THREADS` past [`MAX_THREADS`]. Rayon itself ignores a value that is not a
/// whole number and reads 0 as "every core", so those stay its business.
pub(super) fn check_thread_env() -> Result<()> {
    let Some(value) = std::env::var_os(RAYON_NUM_THREADS) else {
        return Ok(());
    };
    let Some(threads) = value.to_str().and_then(|v| v.trim().parse::<u128>().ok()) else {
        return Ok(());
    };
    if threads > MAX_THREADS as u128 {
        bail!(
            "{RAYON_NUM_THREADS}={threads} (environment) is more than {MAX_THREADS} threads; the search is CPU-bound, so more threads than cores only add overhead: unset it, or set at most {MAX_THREADS}"
        );
    }
    Ok(())
}
