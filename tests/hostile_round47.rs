//! Hostile input, round 47: the least-attacked commands (`completions`, `accuracy --run` and
//! `accuracy --format`, `sweep --axis ... --values`) and the environment.
//! Defects found and fixed, one test each:
//! - `accuracy --run ID` without `--runs`, for the id of a current-stack run
//!   (`mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128`, in validation/modern_runs.yaml),
//!   was told the bundled file is a published-runs file and given `tpsim eval` of an SC'21 run
//!   (megatron-sc21-t1-1.7b) as the fix: the id was never looked up, so the error neither said the
//!   bundled file has no such run nor named the `--runs` file that has it. It now says so and
//!   gives `tpsim accuracy --runs validation/modern_runs.yaml --run ID`, which runs.
//! - `accuracy --runs validation/mbridge_26_runs.yaml --run ID` for a run of
//!   validation/modern_runs.yaml (and the other way round) was told only "give one of its ids (the
//!   first column ...)"; it now names the shipped runs file that holds the id, and that command runs.
//! - `accuracy --runs FILE --run ID` with the id in another case (`MBRIDGE-25.11-...`) suggested
//!   nothing, where a prefix of the id suggests the ids it begins: ids are matched exactly, and
//!   the suggestions now ignore case and surrounding white space.
//!
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix; every fix offered is run.
//!
//! Looked at and found sound: `completions` for bash, zsh, fish, elvish and powershell (exit 0),
//! `BASH`, `nu`, '', two shells, none (exit 2, one line, the possible values), written to
//! /dev/full (one-line error, exit 2); `accuracy --run` with a prefix, a leading or trailing space,
//! a newline, '', a Unicode hyphen; `accuracy --format json|yaml` of validation/modern_runs.yaml and
//! validation/mbridge_26_runs.yaml (every number finite, no `.nan`/`.inf`, runs not predicted are
//! null with a note), `--format csv` refused with the possible values; `sweep --values` of one
//! point, unsorted points (rows in the order given), repeated points in every spelling (`7B,7b`,
//! `7B,7000M`, `50,50.0`, `0,00`), `2..8` and `2-8` (no range syntax; refused naming the value),
//! 1000 and 1001 node counts (0.5 s; points with no split are rows saying why, no NaN or negative
//! cell in the CSV); `sweep --top`, `--emit`, `--report` (refused naming the commands that take
//! them); `RAYON_NUM_THREADS` 0, -1, '', ' 4', 1.5, `abc` (rayon's own reading), 100000 and 1e20
//! (refused in one line); `NO_COLOR` (no escape codes), `COLUMNS=20`, a `TPSIM_` variable (none
//! is read).
//!
//! Left as found then: `RAYON_NUM_THREADS=100000` was refused beside `--threads 2` too. Since
//! leftovers round 31 a given `--threads` sizes the global pool itself and wins over the variable
//! (tests/leftovers_round31.rs).

mod common;

use common::*;

const MODERN: &str = "validation/modern_runs.yaml";
const MBRIDGE_26: &str = "validation/mbridge_26_runs.yaml";
/// The first run of validation/modern_runs.yaml.
const MODERN_ID: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128";
/// The first run of validation/mbridge_26_runs.yaml.
const MBRIDGE_26_ID: &str = "mbridge-26.06.01-pretrain-deepseek_v3-gb300-256g-mxfp8-gbs4096";

/// The `tpsim ...` command an error's fix gives after `marker`, as arguments (ids have no spaces).
fn fix_after<'a>(stderr: &'a str, marker: &str) -> Vec<&'a str> {
    let at = stderr
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in: {stderr}"));
    let fix = stderr[at + "tpsim ".len()..].lines().next().unwrap();
    fix.split_whitespace().collect()
}

#[test]
fn run_id_of_a_current_stack_file_without_runs_names_that_file() {
    let r = run(&["accuracy", "--run", MODERN_ID]);
    assert_one_line_error(
        &r,
        &[
            MODERN_ID,
            "with no run of that id",
            &format!("tpsim accuracy --runs {MODERN} --run {MODERN_ID}"),
        ],
        &["megatron-sc21-t1-1.7b", "tpsim eval"],
        "accuracy --run <current-stack id> without --runs",
    );
    let fix = fix_after(&r.stderr, "tpsim accuracy --runs");
    let done = run(&fix);
    assert_eq!(done.code, 0, "{fix:?}: {}", done.stderr);
    assert!(
        done.stdout.contains(&format!("run {MODERN_ID}:")),
        "{}",
        done.stdout
    );
    // An SC'21 id still gets the eval example: the file has it, but no breakdown.
    let sc21 = run(&["accuracy", "--run", "megatron-sc21-t1-1.7b"]);
    assert_one_line_error(&sc21, &["tpsim eval"], &["no run of that id"], "SC'21 id");
}

#[test]
fn run_id_of_the_other_runs_file_names_the_file_that_holds_it() {
    for (given, id, holder) in [
        (MBRIDGE_26, MODERN_ID, MODERN),
        (MODERN, MBRIDGE_26_ID, MBRIDGE_26),
    ] {
        let r = run(&["accuracy", "--runs", given, "--run", id]);
        assert_one_line_error(
            &r,
            &[
                id,
                given,
                &format!("tpsim accuracy --runs {holder} --run {id}"),
            ],
            &[],
            "--run of the other runs file",
        );
        let fix = fix_after(&r.stderr, "tpsim accuracy --runs");
        let done = run(&fix);
        assert!(done.code == 0 || done.code == 1, "{fix:?}: {}", done.stderr);
        assert!(done.stdout.contains(id), "{fix:?}: {}", done.stdout);
    }
}

#[test]
fn run_id_in_another_case_suggests_the_id() {
    let upper = MODERN_ID.to_uppercase();
    let r = run(&["accuracy", "--runs", MODERN, "--run", &upper]);
    assert_one_line_error(
        &r,
        &[&upper, &format!("e.g. {MODERN_ID}")],
        &[],
        "--run in upper case",
    );
    let padded = format!("  {}\t", MODERN_ID.to_uppercase());
    let r = run(&["accuracy", "--runs", MODERN, "--run", &padded]);
    assert_one_line_error(&r, &[&format!("e.g. {MODERN_ID}")], &[], "--run padded");
    let done = run(&["accuracy", "--runs", MODERN, "--run", MODERN_ID]);
    assert_eq!(done.code, 0, "{}", done.stderr);
}
