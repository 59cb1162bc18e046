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

/// The note for `--cp-exchange` beside a search (`plan` without `--cp`, `sweep`, `compare`) that
/// priced no plan with cp > 1 (`any_cp` false): the exchange changed none of its numbers.
/// `searched` names the search ("the search", "the sweep's searches at every point"), and
/// `longest_seq` the longest sequence it planned, to name the search's bound on a CP rank's share
/// (`planner::MIN_TOKENS_PER_CP_RANK`) where that is what left cp at 1. A hybrid
/// Mamba-Transformer stack is searched with context parallelism as a transformer is (its
/// attention layers run the exchange `--cp-exchange` names), so it gets the same note.
pub(super) fn unused_by_search(
    args: &TrainingArgs,
    any_cp: bool,
    searched: &str,
    longest_seq: u32,
) -> Option<String> {
    if any_cp {
        return None;
    }
    let least = crate::planner::MIN_TOKENS_PER_CP_RANK;
    let why = if longest_seq < 2 * least {
        format!(
            "no plan {searched} priced has cp above 1 (the search gives each context-parallel rank at least {least} tokens of a sequence, and the longest here is {longest_seq})"
        )
    } else {
        format!("no plan {searched} priced has cp above 1")
    };
    unused_with_cp_1(
        args,
        1,
        &why,
        "price a plan with --cp 2 or more with `tpsim eval` to use it",
    )
}
