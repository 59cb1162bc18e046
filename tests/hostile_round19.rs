//! Hostile input and new-user reading, round 19: mixture-of-experts layouts, ZeRO-3 resharding in
//! `sweep` and `compare`, `compare`'s search mode against `plan`'s, `--emit deepspeed`, the MoE
//! capacity factor in plan files and `--max-memory-gib` extremes. Every error case checks exit 2,
//! one line on stderr and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// `--max-memory-gib 1e308` was echoed in its note as a 309-digit number (and `1e-300` in its
/// error as 300 zeros); the value now reads back as it was typed.
#[test]
fn an_extreme_memory_limit_is_echoed_short() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
        "--max-memory-gib",
        "1e308",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("note: --max-memory-gib 1e308 is not below the 79.7 GiB"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("0000000000"), "{}", r.stderr);
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--max-memory-gib",
        "1e-300",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--max-memory-gib 1e-300",
            "below 1 GiB",
            "--max-memory-gib 71",
        ],
        &["0000000000"],
        "tiny limit",
    );
}

/// A model with experts on every other layer (Megatron's `--moe-layer-freq 2`) printed the same
/// header as one with experts on every layer ("128 experts (top-8, ffn 768)"), so the user could
/// not check which layers the plans priced as MoE. The header now says which and how many.
#[test]
fn the_header_says_which_layers_have_experts() {
    let header = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--model",
            "qwen3-30b-a3b",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--top",
            "1",
        ];
        args.extend(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
        r.stdout.lines().next().unwrap().to_string()
    };
    let every = header(&[]);
    assert!(every.contains("128 experts (top-8, ffn 768)"), "{every}");
    assert!(!every.contains("MoE on every"), "{every}");
    let half = header(&["--moe-layer-freq", "2"]);
    assert!(
        half.contains("MoE on every 2nd layer from the first: 24 of 48 layers"),
        "{half}"
    );
    let sparse = header(&["--moe-layer-freq", "3", "--moe-first-k-dense-replace", "2"]);
    assert!(
        sparse.contains("first 2 layers dense, then MoE on every 3rd layer: 16 of 48 layers"),
        "{sparse}"
    );
}

/// `--emit deepspeed` wrote `"stage": 3` for a ZeRO-3 plan that keeps the gathered parameters
/// from forward to backward (`3 keep`), a config DeepSpeed runs with resharding: a different plan
/// from the one priced on the line above it. It is now refused, as Megatron's writers refuse it.
#[test]
fn deepspeed_does_not_write_a_kept_zero3_plan_as_plain_stage_3() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
        "--tp",
        "1",
        "--zero",
        "3",
        "--reshard-after-forward",
        "false",
        "--emit",
        "deepspeed",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--emit deepspeed",
            "reshard_after_forward false",
            "stage3_max_reuse_distance",
            "use --reshard-after-forward true",
        ],
        &[],
        "kept ZeRO-3 for DeepSpeed",
    );
    // The resharding plan is still written.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
        "--tp",
        "1",
        "--zero",
        "3",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("\"stage\": 3"), "{}", r.stdout);
}

/// `compare --tokens 300B` was taken and printed nothing of it in the table (only the JSON had
/// `time_to_train_s`), where `plan` and `eval` print the time to train. The table now has it.
#[test]
fn compare_prints_the_time_to_train() {
    let args = [
        "compare",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--tokens",
        "300B",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("time to train"))
        .unwrap_or_else(|| panic!("no time to train row:\n{}", r.stdout));
    assert!(row.contains("days"), "{row}");
    // The same number plan's train column prints for the best plan.
    let plan = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--tokens",
        "300B",
        "--top",
        "1",
    ]);
    let best = plan
        .stdout
        .lines()
        .find(|l| l.starts_with("│ 1"))
        .unwrap()
        .to_string();
    let days = best
        .split('┆')
        .next_back()
        .unwrap()
        .trim()
        .trim_end_matches(" │");
    let days = days.trim_end_matches(" days").trim();
    let cells: Vec<&str> = row.split('┆').map(str::trim).collect();
    assert_eq!(cells[3], days, "{row} against {best}");
    // Without --tokens there is no such row.
    let r = run(&args[..7]);
    assert!(!r.stdout.contains("time to train"), "{}", r.stdout);
}

/// `compare` without plan files ran its search without `plan`'s checks: `--framework
/// megatron-lm-2021 --precision fp8` said "nothing fits" (exit 1) where `plan` refuses the
/// precision (exit 2), and `--overlap-moe-expert-parallel-comm` on a dense model was taken and
/// ignored. Both are now refused as `plan` refuses them.
#[test]
fn compare_refuses_what_plan_refuses() {
    let base = [
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
    ];
    for (extra, needles) in [
        (
            &["--framework", "megatron-lm-2021", "--precision", "fp8"][..],
            &["--precision fp8", "megatron-lm-2021", "--precision bf16"][..],
        ),
        (
            &["--overlap-moe-expert-parallel-comm"][..],
            &["model llama3-8b is dense", "drop the flag"][..],
        ),
    ] {
        for command in ["plan", "compare"] {
            let mut args = vec![command];
            args.extend(base);
            args.extend(extra);
            assert_one_line_error(&run(&args), needles, &[], &format!("{command} {extra:?}"));
        }
        // sweep printed "nothing fits" at every point for the first, and took the second.
        let mut args = vec![
            "sweep",
            "--model",
            "llama3-8b",
            "--global-batch",
            "64",
            "--axis",
            "nodes",
            "--values",
            "1,2",
        ];
        args.extend(extra);
        assert_one_line_error(
            &run(&args),
            needles,
            &["nothing fits"],
            &format!("sweep {extra:?}"),
        );
    }
    // eval said "change the plan", which no plan of a dense model can do.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--tp",
        "1",
        "--overlap-moe-expert-parallel-comm",
    ]);
    assert_one_line_error(
        &r,
        &["model llama3-8b is dense", "drop the flag"],
        &["change the plan"],
        "eval on a dense model",
    );
}

/// A ZeRO-3 plan that keeps its gathered parameters (`plan`'s `3 keep`) was labelled `zero3` by
/// `sweep` and `compare`, and the sweep's JSON and CSV had no resharding field, so `eval --zero 3`
/// from the label priced another plan (4.63 s where the sweep said 4.55 s). The labels now read
/// `zero3 keep` and the exports carry `reshard_after_forward`.
#[test]
fn sweep_and_compare_name_a_kept_zero3_plan() {
    let scenario = [
        "--model",
        "llama3-8b",
        "--global-batch",
        "256",
        "--framework",
        "torchtitan",
        "--precision",
        "nvfp4",
        "--gpu",
        "b200-sxm-180g",
    ];
    let mut plan = vec!["plan", "--nodes", "2", "--top", "1"];
    plan.extend(scenario);
    let r = run(&plan);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let best = r.stdout.lines().find(|l| l.starts_with("│ 1")).unwrap();
    assert!(best.contains("3 keep"), "{best}");

    let mut sweep = vec!["sweep", "--axis", "nodes", "--values", "2"];
    sweep.extend(scenario);
    let r = run(&sweep);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("ZeRO-3 keep nvfp4"), "{}", r.stdout);
    sweep.extend(["--format", "csv"]);
    let r = run(&sweep);
    let mut lines = r.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == "reshard_after_forward")
        .expect("a reshard_after_forward column");
    assert_eq!(row[at], "false", "{}", r.stdout);
    sweep.truncate(sweep.len() - 2);
    sweep.extend(["--format", "json"]);
    let out = json(&sweep);
    assert_eq!(out["rows"][0]["reshard_after_forward"], false, "{out}");

    let mut compare = vec!["compare", "--nodes", "2"];
    compare.extend(scenario);
    let r = run(&compare);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let labels = r.stdout.lines().find(|l| l.starts_with("│ plan")).unwrap();
    assert!(labels.contains("ZeRO-3 keep nvfp4"), "{labels}");
}

/// A plan file's `moe_capacity_factor: 0.5` was refused with the fix "e.g.
/// --moe-capacity-factor 1.25" (a flag), where the file's `moe_imbalance` gets its key; and
/// `plan --save` wrote the imbalance as capped by the capacity factor (`--moe-imbalance 2
/// --moe-capacity-factor 1.5` saved `moe_imbalance: 1.5`), so `eval --plan FILE
/// --moe-capacity-factor 3` priced a balanced load instead of the 2 the user gave. The file now
/// keeps the imbalance as given, and the header names the capacity factor.
#[test]
fn the_capacity_factor_and_the_imbalance_survive_a_plan_file() {
    let dir = scratch("round19", "capacity");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--seq-len",
            "2048",
            "--moe-imbalance",
            "2",
            "--moe-capacity-factor",
            "1.5",
            "--top",
            "1",
            "--save",
            "p.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("the busiest expert gets 1.5 x the balanced load")
            && r.stdout
                .contains("MoE capacity factor 1.5: tokens past 1.5 x"),
        "{}",
        r.stdout
    );
    let text = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    assert!(text.contains("moe_imbalance: 2"), "{text}");
    let r = run_in(
        &dir,
        &["eval", "--plan", "p.yaml", "--moe-capacity-factor", "3"],
    );
    // The busier expert may need more memory than the plan has: exit 1 is a verdict.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("the busiest expert gets 2 x the balanced load"),
        "{}",
        r.stdout
    );
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert!(
        r.stdout
            .contains("the busiest expert gets 1.5 x the balanced load"),
        "{}",
        r.stdout
    );

    std::fs::write(
        dir.join("low.yaml"),
        text.replace("moe_capacity_factor: 1.5", "moe_capacity_factor: 0.5"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "low.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "moe_capacity_factor: 0.5 in low.yaml",
            "between 1 and 64",
            "e.g. moe_capacity_factor: 1.25",
        ],
        &["--moe-capacity-factor"],
        "file capacity factor",
    );
}

/// `sweep --axis nodes` prefixed errors that no point causes with the first point ("--axis nodes
/// at 1: --moe-capacity-factor 2: model llama3-8b is dense ..."), as if 1 node were at fault. An
/// error every point gives is now said once, without a point; one point's error keeps its point.
#[test]
fn sweep_says_an_error_of_every_point_without_a_point() {
    let sweep = |extra: &[&str]| {
        let mut args = vec!["sweep", "--model", "llama3-8b", "--global-batch", "64"];
        args.extend(extra);
        run(&args)
    };
    for (extra, needle) in [
        (
            &["--moe-capacity-factor", "2"][..],
            "--moe-capacity-factor 2: model llama3-8b is dense",
        ),
        (
            &["--recompute-modules", "moe_act"][..],
            "this model is dense",
        ),
        (
            &["--cp-exchange", "torch-all-gather"][..],
            "which --framework megatron-core does not run",
        ),
    ] {
        let mut args = vec!["--axis", "nodes", "--values", "1,2"];
        args.extend(extra);
        assert_one_line_error(&sweep(&args), &[needle], &["--axis nodes at"], needle);
    }
    // An unknown GPU among known ones is that point's.
    let r = sweep(&[
        "--nodes",
        "1",
        "--axis",
        "gpu",
        "--values",
        "h100-sxm-80g,nope",
    ]);
    assert_one_line_error(&r, &["--axis gpu at nope: unknown GPU"], &[], "one bad GPU");
}

/// A price of -1e308 was echoed as 309 digits; a model with one MTP layer was described as
/// "1 MTP layer (on the last stage, each with its own output-layer pass and loss)".
#[test]
fn numbers_and_counts_read_as_written() {
    let r = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1",
        "--tokens",
        "1B",
        "--price-per-gpu-hour",
        "-1e308",
    ]);
    assert_one_line_error(
        &r,
        &["--price-per-gpu-hour -1e308 must be a positive amount"],
        &["0000000000"],
        "negative price",
    );
    let header = |mtp: &str| {
        let r = run(&[
            "eval",
            "--model",
            "deepseek-v3",
            "--mtp-layers",
            mtp,
            "--nodes",
            "64",
            "--global-batch",
            "1024",
            "--tp",
            "8",
            "--pp",
            "1",
            "--ep",
            "64",
        ]);
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        r.stdout.lines().next().unwrap().to_string()
    };
    let one = header("1");
    assert!(
        one.contains("1 MTP layer (on the last stage, with its own output-layer pass and loss)"),
        "{one}"
    );
    let two = header("2");
    assert!(
        two.contains(
            "2 MTP layers (on the last stage, each with its own output-layer pass and loss)"
        ),
        "{two}"
    );
}

/// `sweep --price-per-gpu-hour 1e-20` was accepted and printed every cost as "$0"; a price below a
/// tenth of a cent is refused now, and a cost under ten dollars prints its cents (or three
/// significant digits), never nothing.
#[test]
fn a_price_too_small_to_show_is_refused_and_small_costs_show() {
    let sweep = |price: &str, tokens: &str| {
        run(&[
            "sweep",
            "--model",
            "llama3-8b",
            "--axis",
            "nodes",
            "--values",
            "1",
            "--global-batch",
            "64",
            "--price-per-gpu-hour",
            price,
            "--tokens",
            tokens,
        ])
    };
    assert_one_line_error(
        &sweep("1e-20", "1T"),
        &[
            "--price-per-gpu-hour 1e-20",
            "0.001",
            "e.g. --price-per-gpu-hour 2.5",
        ],
        &[],
        "tiny price",
    );
    let r = sweep("0.002", "1M");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cost = r
        .stdout
        .lines()
        .find(|l| l.contains("tp2") || l.contains("tp1") || l.contains("tp4") || l.contains("tp8"))
        .and_then(|l| l.split('┆').next_back())
        .map(|c| c.trim().trim_end_matches('│').trim().to_string())
        .unwrap_or_default();
    assert!(
        cost.starts_with('$') && cost != "$0",
        "{cost:?}\n{}",
        r.stdout
    );
}
