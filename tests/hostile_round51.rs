//! Hostile input, round 51: the input channels earlier rounds attacked least (`sweep --axis`
//! values, `compare` with three plans and mixed files, `report --out` on odd paths, `--format` on
//! every command, numbers at the extremes, plan files with YAML anchors, tags, duplicate keys and
//! several documents, and `-` where a file is taken). Defects found (each test below failed
//! before its fix):
//! - a zero written with leading zeros or a sign on a count flag (`--nodes 00`, `--tp +0`,
//!   `--global-batch -0`) was told "write --nodes 0" (or "write the number without it"), which
//!   is refused in turn ("--nodes 0 must be at least 1"). A count (the spec keys that start at 1,
//!   `specs::POSITIVE_KEYS`, by the flag's name) is now offered 1 or more; a flag that takes 0
//!   (`--cpu-offload-layers 00`) is still offered 0, which runs.
//! - `sweep --values 1,000` (a thousands separator) on an axis of positive counts (nodes,
//!   seq-len, global-batch) was told "--values 000 ... write 0 in its place", refused in turn
//!   ("--values \"0\" is not a positive whole number"), with no word that the comma split one
//!   number in two. It now says the point is zero, which the axis refuses, and that a comma
//!   separates points (write 1000); `--axis cpu-offload-layers`, which takes 0, keeps its fix.
//! - a plan file's `nodes: 00` (or `micro_batch: 000`) was told "write nodes: 0", refused in turn;
//!   `tp: +0` already got "write a whole number of 1 or more". Leading zeros now get the same.
//! - `-` where a file is read (`--plan -`, `report --plan -`, `compare --plan -`, `--runs -`,
//!   `--hf-config -`, `--calibration -`, `--megatron-args @-`, `--model -`, `--gpu -`), which many
//!   tools read as standard input, was told "cannot read it: No such file or directory; check the
//!   path" (or "unknown model \"-\"", with the bundled names), as if `-` were misspelt. It now says
//!   tpsim reads the input from a file, not standard input, and to save it to a file; a file
//!   that is really named `-` is still read.
//!
//! Looked at and found sound: every `--axis` with 0, -0, 1e30, NaN, inf, 1e-30, 0x10, 4k, 1M,
//! 1_000, `,,`, a point twice, 2^32, leading and trailing spaces; `compare` with three `--plan`s
//! (keep two, with a runnable fix), a plan against itself (said), a runs file as a plan (named);
//! `--format` values each command does not take (clap's list of those it does); `report --out` on
//! an existing file, a symlinked directory holding the user's `index.html`, a directory holding
//! the user's files, a copy of the repository's reports/ (tpsim's own report replaced, the user's
//! README kept); plan files with an anchor and alias (read), a merge key under an unknown key
//! (named), `!!map`/`!custom` tags, duplicate keys, `---` documents, `tp: 8.0`, `0x8`, `yes`,
//! `3_2`, `+32`, `512_000M`, `.inf` (each refused with its key and fix); `--price-per-gpu-hour -0`,
//! `--tokens 1e30`, `--seq-len 4k`, `--global-batch 1,024`, `--tokens 1,000B`.

mod common;

use common::*;

const SUITE: &str = "hostile51";

/// The arguments of `args` with `from` replaced by `to`.
fn with<'a>(args: &[&'a str], from: &str, to: &'a str) -> Vec<&'a str> {
    args.iter()
        .map(|a| if *a == from { to } else { *a })
        .collect()
}

#[test]
fn a_zero_spelt_oddly_on_a_count_flag_is_offered_a_count_that_runs() {
    for (args, typed, flag) in [
        (
            vec![
                "plan",
                "--params",
                "1B",
                "--nodes",
                "00",
                "--global-batch",
                "64",
            ],
            "00",
            "--nodes",
        ),
        (
            vec![
                "eval",
                "--params",
                "1B",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--tp",
                "+0",
            ],
            "+0",
            "--tp",
        ),
        (
            vec![
                "plan",
                "--params",
                "1B",
                "--nodes",
                "1",
                "--global-batch",
                "-0",
            ],
            "-0",
            "--global-batch",
        ),
    ] {
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                &format!("{flag} {typed}"),
                "1 or more",
                &format!("e.g. {flag} 1"),
            ],
            &[&format!("write {flag} 0"), "without it (digits only)"],
            &format!("{args:?}"),
        );
        let fixed = with(&args, typed, "1");
        let done = run(&fixed);
        assert!(
            done.code == 0 || done.code == 1,
            "{fixed:?}: the fix is refused: {}",
            done.stderr
        );
    }
    // A flag that takes 0 is still offered 0, which runs.
    let args = [
        "plan",
        "--params",
        "1B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "00",
    ];
    let r = run(&args);
    assert_one_line_error(
        &r,
        &["--cpu-offload-layers 00", "write --cpu-offload-layers 0"],
        &["1 or more"],
        "--cpu-offload-layers 00",
    );
    let fixed = with(&args, "00", "0");
    let done = run(&fixed);
    assert!(done.code == 0 || done.code == 1, "{}", done.stderr);
}

#[test]
fn a_thousands_separator_in_sweep_values_is_not_offered_a_zero_point() {
    let args = [
        "sweep",
        "--params",
        "1B",
        "--nodes",
        "1",
        "--axis",
        "global-batch",
        "--values",
        "1,000",
    ];
    let r = run(&args);
    assert_one_line_error(
        &r,
        &[
            "--values 000",
            "zero",
            "global-batch",
            "comma",
            "write 1000",
        ],
        &["write 0 in its place"],
        "sweep --values 1,000",
    );
    let fixed = with(&args, "1,000", "1000");
    let done = run(&fixed);
    assert!(done.code == 0 || done.code == 1, "{}", done.stderr);
    for (axis, nodes) in [("nodes", "--global-batch"), ("seq-len", "--nodes")] {
        let r = run(&[
            "sweep", "--params", "1B", nodes, "64", "--axis", axis, "--values", "+0",
        ]);
        assert_one_line_error(
            &r,
            &["--values +0", "zero", axis],
            &["write 0 in its place", "comma"],
            &format!("--axis {axis} --values +0"),
        );
    }
    // An axis that takes 0 keeps the fix that runs.
    let r = run(&[
        "sweep",
        "--params",
        "1B",
        "--nodes",
        "1",
        "--axis",
        "cpu-offload-layers",
        "--values",
        "000",
    ]);
    assert_one_line_error(
        &r,
        &["--values 000", "write 0 in its place"],
        &["comma"],
        "cpu-offload-layers 000",
    );
}

#[test]
fn a_plan_files_zero_with_leading_zeros_on_a_count_is_offered_one() {
    let dir = scratch(SUITE, "leading-zero-count");
    let path = dir.join("plan.yaml");
    std::fs::write(
        &path,
        bundled_plan_with("  micro_batch: 1", "  micro_batch: 000"),
    )
    .unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &["micro_batch", "000", "leading zeros", "micro_batch: 1"],
        &["micro_batch: 0"],
        "micro_batch: 000",
    );
    std::fs::write(
        &path,
        bundled_plan_with("  micro_batch: 1", "  micro_batch: 1"),
    )
    .unwrap();
    let done = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert!(done.code == 0 || done.code == 1, "{}", done.stderr);
    // A key that takes 0 is still offered 0.
    std::fs::write(&path, bundled_plan_with("  zero: 1", "  zero: 00")).unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(&r, &["zero: 0"], &["1 or more"], "zero: 00");
}

#[test]
fn a_dash_for_an_input_file_says_tpsim_reads_no_standard_input() {
    let dir = scratch(SUITE, "dash");
    let plan = format!("{ROOT}/plans/best-512b-32nodes.yaml");
    for (args, flag) in [
        (vec!["eval", "--plan", "-"], "--plan -"),
        (vec!["report", "--plan", "-", "--out", "rep"], "--plan -"),
        (vec!["compare", "--plan", "-", "--plan", &plan], "--plan -"),
        (vec!["accuracy", "--runs", "-"], "--runs -"),
        (
            vec!["plan", "--hf-config", "-", "--nodes", "1"],
            "--hf-config -",
        ),
        (
            vec![
                "plan",
                "--params",
                "1B",
                "--nodes",
                "1",
                "--calibration",
                "-",
            ],
            "--calibration -",
        ),
        (
            vec!["eval", "--nodes", "1", "--megatron-args", "@-"],
            "--megatron-args @-",
        ),
        (vec!["plan", "--model", "-", "--nodes", "1"], "--model -"),
        (
            vec!["plan", "--params", "1B", "--gpu", "-", "--nodes", "1"],
            "--gpu -",
        ),
    ] {
        let r = run_in(&dir, &args);
        assert_one_line_error(
            &r,
            &[flag, "not standard input", "save the input to a file"],
            &["No such file", "no such file", "unknown"],
            &format!("{args:?}"),
        );
    }
    // A file that is named `-` is a file, and is read.
    std::fs::copy(&plan, dir.join("-")).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "-"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}
