//! Hostile input and new-user reading, round 16: what probing every command again found. Every
//! error case checks exit 2, one line on stderr (no note before it, no panic, no backtrace) and
//! the words that name the value, the rule and the fix.

mod common;

use common::*;
use std::path::Path;

/// The bundled H100 profile at the slow ends of its ranges (peaks 0.000001 TFLOP/s, efficiencies
/// 0.001), written to `dir/slow.yaml`: a plan on it trains at 1.6e-7 tokens/s.
fn write_slow_profile(dir: &Path) {
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let profile: String = h100
        .lines()
        .map(|line| {
            // Top-level keys only: the `sources:` list quotes them too.
            let key = match line.starts_with(' ') {
                true => "",
                false => line.split(':').next().unwrap_or(""),
            };
            if key == "peak_bf16_tflops" || key == "peak_fp8_tflops" {
                format!("{key}: 0.000001\n")
            } else if key.ends_with("_efficiency") {
                format!("{key}: 0.001\n")
            } else if key == "name" {
                "name: slow\n".to_string()
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    std::fs::write(dir.join("slow.yaml"), profile).unwrap();
}

/// The cells of the table row whose first cell is `first`.
fn row_cells(table: &str, first: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| {
            l.trim_matches(|c| c == '│' || c == ' ')
                .split(['┆', '│'])
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"))
}

/// The cell of `row` under the header cell `column` of `table`.
fn cell(table: &str, row: &[String], column: &str) -> String {
    let header = table
        .lines()
        .map(|l| {
            l.trim_matches(|c| c == '│' || c == ' ')
                .split(['┆', '│'])
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.iter().any(|c| c == column))
        .unwrap_or_else(|| panic!("no column {column:?} in:\n{table}"));
    let at = header.iter().position(|c| c == column).unwrap();
    row[at].clone()
}

/// Round 15 made `eval` print a positive throughput with three significant digits where rounding
/// would print 0 ("0.000000162 tokens/s"), but `plan`'s and `sweep`'s tables, `compare`'s
/// throughput row and `--emit`'s header still printed the same plan's rate as "0" tokens/s: two
/// commands, two numbers for one quantity, one of them "no training at all". They now print
/// what `eval` prints.
#[test]
fn a_slow_plans_throughput_reads_the_same_in_every_command() {
    let dir = scratch("hostile16", "slow-rate-tables");
    write_slow_profile(&dir);
    let scenario = [
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--gpu",
        "slow.yaml",
    ];
    let with = |head: &[&str], tail: &[&str]| -> Vec<String> {
        head.iter()
            .chain(&scenario)
            .chain(tail)
            .map(|s| s.to_string())
            .collect()
    };
    let go = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_in(&dir, &args);
        assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
        r
    };
    let plan = go(with(&["plan"], &["--top", "1", "--save", "best.yaml"]));
    let eval = go(vec!["eval".into(), "--plan".into(), "best.yaml".into()]);
    let line = eval
        .stdout
        .lines()
        .find(|l| l.starts_with("throughput: "))
        .unwrap_or_else(|| panic!("{}", eval.stdout));
    let eval_rate = line["throughput: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert_ne!(eval_rate, "0", "{line}");

    let row = row_cells(&plan.stdout, "1");
    assert_eq!(cell(&plan.stdout, &row, "tokens/s"), eval_rate, "plan");

    let sweep = go(with(&["sweep"], &["--axis", "seq-len", "--values", "2048"]));
    let row = row_cells(&sweep.stdout, "2048");
    assert_eq!(cell(&sweep.stdout, &row, "tokens/s"), eval_rate, "sweep");

    let compare = go(vec![
        "compare".into(),
        "--plan".into(),
        "best.yaml".into(),
        "--plan".into(),
        "best.yaml".into(),
    ]);
    let row = row_cells(&compare.stdout, "throughput");
    assert_eq!(row[3], eval_rate, "compare plan A: {row:?}");
    assert_eq!(row[4], eval_rate, "compare plan B: {row:?}");

    let emit = go(with(&["plan"], &["--emit", "megatron"]));
    assert!(
        emit.stderr.contains(&format!(" {eval_rate} tokens/s")),
        "--emit header: {}",
        emit.stderr
    );
}

/// `eval --recompute-method block` without `--recompute` or `--recompute-num-layers` was refused
/// with "--recompute-num-layers 1 counts the layers ... or drop --recompute-num-layers": a flag
/// and a value nobody typed (the count is Megatron-LM's default), and a fix that drops a flag
/// that is not there. The error now names the flag given and drops that one.
#[test]
fn a_block_method_alone_is_named_as_typed() {
    let args = [
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--recompute-method",
        "block",
    ];
    let r = run(&args);
    assert_one_line_error(
        &r,
        &[
            "--recompute-method block",
            "default of 1 layer",
            "add --recompute full",
            "drop --recompute-method",
        ],
        &[
            "--recompute-num-layers 1 counts",
            "drop --recompute-num-layers",
        ],
        "eval --recompute-method block",
    );
    // Typed, the count is still named as typed.
    let mut typed = args.to_vec();
    typed.extend(["--recompute-num-layers", "2"]);
    assert_one_line_error(
        &run(&typed),
        &[
            "--recompute-num-layers 2 counts",
            "drop --recompute-num-layers",
        ],
        &["default of"],
        "eval --recompute-method block --recompute-num-layers 2",
    );
}

/// `calibrate --tp 2,2` measured the TP-2 shard shapes twice and wrote each twice into the
/// profile, and `--sweep 32,64,32` timed an edge twice and fitted the GEMM curve with it weighed
/// double, where `sweep --values 1,1` is refused ("lists the same point twice"). Both lists are
/// now refused the same way, before anything is measured or written.
#[test]
fn calibrate_refuses_a_degree_or_edge_listed_twice() {
    let dir = scratch("hostile16", "calibrate-twice");
    let base = [
        "calibrate",
        "--backend",
        "cpu",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "8",
        "--seq-len",
        "128",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--ranks",
        "2",
        "--output",
        "cal.yaml",
    ];
    for (extra, words) in [
        (
            ["--tp", "2,2"],
            ["--tp 2,2", "lists 2 twice", "give each TP degree once"],
        ),
        (
            ["--sweep", "32,64,32"],
            [
                "--sweep 32,64,32",
                "lists 32 twice",
                "give each edge length once",
            ],
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(&extra).copied().collect();
        let r = run_in(&dir, &args);
        assert_one_line_error(&r, &words, &[], &extra.join(" "));
        assert!(!dir.join("cal.yaml").exists(), "{extra:?} wrote a profile");
    }
}

/// A GPU profile giving `peak_fp4_tflops` without `microscaling: true` was accepted with the
/// peak never read; `--precision nvfp4` then said the GPU "has no nvfp4 tensor cores
/// (microscaling formats need Blackwell tensor cores)", blaming hardware the file describes as
/// having an FP4 peak, with no word on the key to set. The profile is now refused, naming both
/// keys and the fix.
#[test]
fn an_fp4_peak_without_microscaling_is_refused() {
    let dir = scratch("hostile16", "fp4-peak");
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    assert!(!h100.contains("microscaling: true"));
    std::fs::write(
        dir.join("fp4.yaml"),
        format!("{h100}\npeak_fp4_tflops: 3958\n"),
    )
    .unwrap();
    for args in [
        vec![
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ],
        vec![
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--precision",
            "nvfp4",
        ],
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--gpu", "fp4.yaml"]).collect();
        assert_one_line_error(
            &run_in(&dir, &args),
            &[
                "fp4.yaml",
                "peak_fp4_tflops: 3958",
                "microscaling",
                "add microscaling: true",
                "delete the peak_fp4_tflops line",
            ],
            &["has no nvfp4 tensor cores"],
            &args.join(" "),
        );
    }
}

/// `--max-memory-gib 0.04` (above 0, so accepted) held plans "below 0.0 GiB" in the cluster line
/// and ended "needs 17.1 GiB of 0.0 GiB (misses by 17.0 GiB)": the user's limit printed as
/// nothing, and a difference that does not match the two numbers beside it. A limit below the
/// 1 GiB floor of any GPU profile's memory is now refused, from the flag and from a plan file.
#[test]
fn a_memory_limit_below_any_gpus_memory_is_refused() {
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--max-memory-gib",
        "0.04",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--max-memory-gib 0.04",
            "below 1 GiB",
            "--max-memory-gib 71",
        ],
        &["0.0 GiB"],
        "plan --max-memory-gib 0.04",
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);

    let dir = scratch("hostile16", "memory-floor");
    let saved = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--top",
            "1",
            "--save",
            "p.yaml",
        ],
    );
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let text = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    std::fs::write(dir.join("p.yaml"), format!("{text}max_memory_gib: 0.5\n")).unwrap();
    assert_one_line_error(
        &run_in(&dir, &["eval", "--plan", "p.yaml"]),
        &["max_memory_gib: 0.5", "below 1 GiB", "max_memory_gib: 71"],
        &[],
        "eval --plan with max_memory_gib: 0.5",
    );
    // The floor itself is a limit.
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--max-memory-gib",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("of 1.0 GiB"), "{}", r.stderr);
}
