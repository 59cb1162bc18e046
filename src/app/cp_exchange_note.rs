//! `--cp-exchange` given for a plan without context parallelism: valid input that changes no
//! number (with cp 1 no sequence is split and nothing is exchanged), so it is said on stderr
//! rather than silently ignored.

use clap::ValueEnum;

use crate::cli::TrainingArgs;

/// The note for `--cp-exchange` beside a plan (or a pin) with cp 1; `why` names where the cp 1
/// comes from and `fix` how to get context parallelism. `None` when the flag is absent or cp > 1.
pub(super) fn unused_with_cp_1(
    args: &TrainingArgs,
    cp: u32,
    why: &str,
    fix: &str,
) -> Option<String> {
    let exchange = args.cp_exchange.filter(|_| cp == 1)?;
    let name = exchange
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string());
    Some(format!(
        "note: --cp-exchange {name} changes nothing: {why}, so no sequence is split across GPUs and nothing is exchanged; {fix}, or drop --cp-exchange"
    ))
}
