//! Review round 30: the second half of this session's change (leftovers 37, physics 31).
//! 1. `plan --emit torchtitan --moe-capacity-factor 1.0` on an MoE model (torchtitan taken from
//!    the emit) searched, then said "none of the 20729 plans that fit can run in torchtitan"
//!    under the emit's note, exit 1: the capacity factor is refused whatever the plan (torchtitan's
//!    dispatchers are dropless), so it is an input error now, one line and exit 2 before the
//!    search (`torchtitan_moe::capacity_factor_unsupported`, which the plan check shares), with
//!    both fixes (drop the flag, or `--emit megatron`), each of which runs.
//! 2. The EP-1 why-line named "the fastest plan with EP > 1 (tp 1 pp 2 dp 8 ep 8 etp 1, #45 of
//!    47308 that fit)" where `plan --model qwen3-30b-a3b --nodes 2 --top 60` showed that plan at
//!    row #49 (the table ranks the simulated schedule, the search the closed form) beside a twin
//!    at #51 with the same degrees: it now names the table's first row with ep > 1 by its row and
//!    full settings, and a plan below the table by its search rank, as `emit_note` does.

mod common;

use common::*;

#[test]
fn emit_torchtitan_refuses_a_capacity_factor_before_the_search() {
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "torchtitan",
        "--moe-capacity-factor",
        "1.0",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--emit torchtitan",
            "--moe-capacity-factor",
            "dropless",
            "drop --moe-capacity-factor",
            "--emit megatron",
        ],
        &["plans that fit", "note:"],
        "--emit torchtitan with a capacity factor",
    );
    // Both fixes run: the flag dropped, and the emit Megatron-Core runs.
    let dropped = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(dropped.code, 0, "{}", dropped.stderr);
    let megatron = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--emit",
        "megatron",
        "--moe-capacity-factor",
        "1.0",
    ]);
    assert_eq!(megatron.code, 0, "{}", megatron.stderr);
    assert!(
        megatron.stdout.contains("--moe-expert-capacity-factor"),
        "{}",
        megatron.stdout
    );
}

/// The table's rows: (row number, ep column, step column).
fn table_rows(stdout: &str) -> Vec<(usize, u32, String)> {
    let header = stdout
        .lines()
        .find(|l| l.contains("┆ tp ┆"))
        .expect("a plan table");
    let names: Vec<String> = header
        .trim_matches(|c| c == '│')
        .split('┆')
        .map(|c| c.trim().to_string())
        .collect();
    let col = |name: &str| names.iter().position(|n| n == name).unwrap();
    let (ep, step) = (col("ep"), col("step s"));
    stdout
        .lines()
        .filter(|l| l.starts_with('│') && !l.contains("┆ tp ┆"))
        .map(|l| {
            let cells: Vec<&str> = l
                .trim_matches(|c| c == '│')
                .split('┆')
                .map(str::trim)
                .collect();
            (
                cells[0].parse().unwrap(),
                cells[ep].parse().unwrap(),
                cells[step].to_string(),
            )
        })
        .collect()
}

#[test]
fn ep_one_line_names_the_table_row_of_the_fastest_ep_plan() {
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--top",
        "60",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = table_rows(&r.stdout);
    let (row, _, step) = rows
        .iter()
        .find(|(_, ep, _)| *ep > 1)
        .unwrap_or_else(|| panic!("no row with ep > 1 in --top 60: {}", r.stdout));
    assert_eq!(rows[0].1, 1, "the best plan is at ep 1: {}", r.stdout);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("EP 1: no expert parallelism"))
        .unwrap_or_else(|| panic!("no EP 1 line: {}", r.stdout));
    assert!(
        line.contains(&format!(", #{row} in the table) takes {step} s per step")),
        "want row #{row} at {step} s: {line}"
    );
    // Below the table (the default --top), it is named by its search rank and says how to see it.
    let short = run(&["plan", "--model", "qwen3-30b-a3b", "--nodes", "2"]);
    assert_eq!(short.code, 0, "{}", short.stderr);
    let line = short
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("EP 1: no expert parallelism"))
        .unwrap_or_else(|| panic!("no EP 1 line: {}", short.stdout));
    assert!(line.contains("below the table: --top "), "{line}");
}
