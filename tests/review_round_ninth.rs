//! Review of the DeepSpeed-Ulysses change and the memory lines that add up (ninth review round).

mod common;
use common::*;

use serde_json::Value;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `eval`'s memory lines, name → tenths of a GiB as printed.
fn printed_parts(stdout: &str) -> Vec<(String, i64)> {
    [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "other",
        "total",
    ]
    .iter()
    .map(|p| {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{p} ")))
            .unwrap_or_else(|| panic!("no {p} line: {stdout}"));
        let gib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        (p.to_string(), (gib * 10.0).round() as i64)
    })
    .collect()
}

/// The memory parts were made to add up by giving the missing tenths to the largest remainders,
/// which printed the same bytes differently: 3.74 GiB of gradients read 3.7 at micro-batch 1 and
/// 3.8 at micro-batch 2 (and `compare` put +0.1 between them), and a DeepSpeed plan's 14.96 GiB of
/// weights and of gradients read 15.0 and 14.9. Each named part now prints as it rounds alone;
/// "other" takes the rest, so the lines still add up.
#[test]
fn the_same_bytes_print_the_same_and_the_parts_still_add_up() {
    let base = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--recompute",
        "none",
        "--zero",
        "0",
    ];
    let mut gradients = Vec::new();
    for mb in ["1", "2"] {
        let mut args = base.to_vec();
        args.extend(["--micro-batch", mb]);
        let r = run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let parts = printed_parts(&r.stdout);
        let sum: i64 = parts[..5].iter().map(|(_, t)| t).sum();
        assert_eq!(sum, parts[5].1, "{}", r.stdout);
        args.extend(["--format", "json"]);
        let v = json(&args);
        let bytes = v["plans"][0]["memory"]["gradients_bytes"].as_f64().unwrap();
        assert_eq!(
            parts[1].1,
            (bytes / GIB * 10.0).round() as i64,
            "{}",
            r.stdout
        );
        gradients.push((bytes, parts[1].1));
    }
    assert_eq!(
        gradients[0].0, gradients[1].0,
        "the plans' gradients differ"
    );
    assert_eq!(gradients[0].1, gradients[1].1, "{gradients:?}");

    // Weights and gradients of one DeepSpeed ZeRO-1 plan: the same bytes, the same line.
    let ds = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--seq-len",
        "65536",
        "--framework",
        "deepspeed",
        "--cp",
        "8",
        "--zero",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
    ];
    let r = run(&ds);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let parts = printed_parts(&r.stdout);
    let mut args = ds.to_vec();
    args.extend(["--format", "json"]);
    let memory = json(&args)["plans"][0]["memory"].clone();
    assert_eq!(memory["weights_bytes"], memory["gradients_bytes"]);
    assert_eq!(parts[0].1, parts[1].1, "{}", r.stdout);
    let sum: i64 = parts[..5].iter().map(|(_, t)| t).sum();
    assert_eq!(sum, parts[5].1, "{}", r.stdout);
}

/// `compare` of two plans whose gradients are the same bytes (3.74 GiB, read 3.7 and 3.8 before)
/// shows no difference on that row.
#[test]
fn compare_shows_no_difference_for_the_same_bytes() {
    let dir = scratch("review9", "compare-same-bytes");
    for (name, mb) in [("a.yaml", "1"), ("b.yaml", "2")] {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
                "--recompute",
                "none",
                "--zero",
                "0",
                "--sequence-parallel",
                "false",
                "--micro-batch",
                mb,
                "--save",
                name,
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let v: Value = serde_json::from_str(
        &run_in(
            &dir,
            &[
                "compare", "--plan", "a.yaml", "--plan", "b.yaml", "--format", "json",
            ],
        )
        .stdout,
    )
    .unwrap();
    let r = run_in(&dir, &["compare", "--plan", "a.yaml", "--plan", "b.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = ["weights", "gradients", "optimizer"];
    for term in rows {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains("memory per GPU") && l.contains(&format!(" {term} ")))
            .unwrap_or_else(|| panic!("no {term} row: {}\n{v}", r.stdout));
        let cells: Vec<&str> = line.split(['│', '┆']).map(str::trim).collect();
        assert_eq!(cells[4], cells[5], "{term}: {line}");
        assert_eq!(cells[6], "0.0", "{term}: {line}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `eval --framework deepspeed --tp 2 --cp 2 --sequence-parallel` said to drop
/// --sequence-parallel, or use --cp 1; dropping it was refused next for the tp 2. The error names
/// the tp and a fix that runs.
#[test]
fn ulysses_beside_sequence_parallelism_names_the_tp_and_a_fix_that_runs() {
    let base = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--seq-len",
        "16384",
        "--framework",
        "deepspeed",
        "--cp",
        "2",
    ];
    let mut args = base.to_vec();
    args.extend(["--tp", "2", "--sequence-parallel"]);
    assert_one_line_error(
        &run(&args),
        &[
            "--cp 2 with --tp 2 and --sequence-parallel",
            "use --tp 1 with --sequence-parallel false, or --cp 1",
        ],
        &[],
        "Ulysses with TP and sequence parallelism",
    );
    let mut fixed = base.to_vec();
    fixed.extend(["--tp", "1", "--sequence-parallel", "false"]);
    let r = run(&fixed);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    // plan with tp unpinned: dropping --sequence-parallel is enough, and tp is not named.
    let mut pinned = base.to_vec();
    pinned[0] = "plan";
    pinned.push("--sequence-parallel");
    let r = run(&pinned);
    assert!(
        r.stderr.contains("--cp 2 with --sequence-parallel") && !r.stderr.contains("--tp"),
        "{}",
        r.stderr
    );
}
