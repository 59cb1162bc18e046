//! Hostile input, round 8b: the leftovers round 8 found (a sweep point blamed on a flag never
//! typed, comma lists read two ways, a capacity printed as 0.0 GiB, `-0` echoed as 0, a plan
//! file's note offering a flag, a flag's three values said as two pairs, a duplicate key placed
//! at its mapping), and what a further audit of `sweep`, `compare` and `report` found. Every
//! error case checks exit 2, one line (so no panic or backtrace) and the words that name the
//! value, the rule and the fix.

mod common;

use common::*;

/// `sweep --axis params --values 7B,7` blamed `--params 7`, which the user never typed, and
/// offered shape flags the sweep itself refuses. Every bad params point is now named as the
/// `--values` item it is, and a count too small to shape is offered the size with a unit.
#[test]
fn a_params_sweep_point_is_named_as_the_values_item() {
    for (values, words) in [
        (
            "7B,7",
            &[
                "--values 7: no GPT-style shape",
                "--axis params derives a shape at each point, so give a larger size with a unit, e.g. 7B in place of 7",
            ][..],
        ),
        (
            "7B, 0.1",
            &[
                "--values 0.1: no GPT-style shape",
                "e.g. 1B in place of 0.1",
            ][..],
        ),
        ("-7B", &["--values -7B must be greater than zero"][..]),
        (
            "7B,1e30",
            &["--values 1e30 is more than 100T parameters"][..],
        ),
        ("7B,abc", &["--values abc has an unknown suffix"][..]),
    ] {
        let r = run(&[
            "sweep", "--nodes", "1", "--axis", "params", "--values", values,
        ]);
        assert_one_line_error(&r, words, &["--params", "--layers"], values);
    }
}

/// `calibrate --sweep "64, 128"` was refused for the space (`invalid value ' 128'`) while
/// `sweep --values "1, 2"` took it. Every comma list now reads its items by one rule.
#[test]
fn comma_lists_take_spaces_around_items_everywhere() {
    let dir = scratch("round8b", "lists");
    let r = run_in(
        &dir,
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--ranks",
            "1",
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "8",
            "--seq-len",
            "64",
            "--tp",
            "1, 2",
            "--sweep",
            // Three edges far enough apart that the fitted GEMM curve's slope cannot come out
            // negative on a noisy CPU (two tiny edges made it flaky under load).
            "64, 128, 256",
            "--max-message",
            "64KiB",
            "--copy-bytes",
            "1MiB",
            "--warmup",
            "0",
            "--reps",
            "2",
            "--output",
            "c.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let profile = std::fs::read_to_string(dir.join("c.yaml")).unwrap();
    let sweep = &profile[profile.find("gemm_sweep:").expect("a GEMM sweep")..];
    for edge in ["64", "128", "256"] {
        assert!(
            sweep.contains(&format!("label: sweep\n    m: {edge}\n")),
            "the sweep's edge {edge} is measured: {sweep}"
        );
    }
    // A bad item is still refused, quoted as typed.
    let r = run_in(
        &dir,
        &["calibrate", "--sweep", "16, x", "--output", "c.yaml"],
    );
    assert_one_line_error(
        &r,
        &["' x'", "--sweep", "expected a whole number"],
        &[],
        "--sweep 16, x",
    );
    // And the sweep's list reads the same way.
    let r = run(&[
        "sweep", "--params", "7B", "--axis", "nodes", "--values", "1, 2", "--format", "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A GPU profile with `hbm_capacity_gib: 0.001` was accepted, then every message said
/// `needs 10.2 GiB of 0.0 GiB`. Capacity now starts at 1 GiB (no model tpsim plans fits in less),
/// said with the rule.
#[test]
fn a_capacity_under_one_gib_is_refused_with_its_rule() {
    let dir = scratch("round8b", "capacity");
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let line = gpu
        .lines()
        .find(|l| l.starts_with("hbm_capacity_gib:"))
        .unwrap();
    for value in ["0.001", "0.5"] {
        std::fs::write(
            dir.join("g.yaml"),
            gpu.replacen(line, &format!("hbm_capacity_gib: {value}"), 1),
        )
        .unwrap();
        let r = run_in(
            &dir,
            &[
                "eval", "--params", "7B", "--nodes", "1", "--gpu", "./g.yaml", "--tp", "8", "--pp",
                "1",
            ],
        );
        assert_one_line_error(
            &r,
            &[
                &format!("hbm_capacity_gib: {value} is outside 1 to 102400 GiB"),
                "give a value in that range",
            ],
            &["0.0 GiB"],
            value,
        );
    }
    // 1 GiB is taken, and its shortfall printed against 1.0 GiB.
    std::fs::write(
        dir.join("g.yaml"),
        gpu.replacen(line, "hbm_capacity_gib: 1", 1),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--params", "7B", "--nodes", "1", "--gpu", "./g.yaml", "--tp", "8", "--pp", "1",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("of 1.0 GiB"), "{}", r.stdout);
    // clusters/README.md states the range the code checks.
    let readme = std::fs::read_to_string(format!("{ROOT}/clusters/README.md")).unwrap();
    assert!(
        readme.contains("| `hbm_capacity_gib` | 1 to 102,400 (100 TiB) GiB"),
        "clusters/README.md"
    );
}

/// `--nodes -0` was echoed back as `--nodes 0`: clap reads whole numbers through a signed parser,
/// so the minus sign was gone before any message. A minus sign on a whole number is now refused
/// as written, for every whole-number flag.
#[test]
fn a_minus_zero_is_quoted_as_typed() {
    let base = ["eval", "--params", "7B", "--tp", "8", "--pp", "1"];
    for (flag, value) in [
        ("--nodes", "-0"),
        ("--nodes", "-00"),
        ("--micro-batch", "-0"),
        ("--global-batch", "-0"),
    ] {
        let mut args = base.to_vec();
        if flag != "--nodes" {
            args.extend(["--nodes", "1"]);
        }
        let joined = format!("{flag}={value}");
        for tail in [vec![flag, value], vec![joined.as_str()]] {
            let r = run(&[&args[..], &tail[..]].concat());
            assert_one_line_error(
                &r,
                &[
                    &format!("{flag} {value} has a minus sign"),
                    // Without the sign it is 0, which these counts refuse (round 51).
                    &format!("write a whole number of 1 or more, e.g. {flag} 1"),
                ],
                &[&format!("{flag} 0 "), "= 0"],
                &format!("{tail:?}"),
            );
        }
    }
    // A zero without the sign still meets the flag's own rule.
    let r = run(&[
        "eval", "--params", "7B", "--nodes", "0", "--tp", "8", "--pp", "1",
    ]);
    assert_one_line_error(&r, &["--nodes 0 must be at least 1"], &[], "--nodes 0");
}

/// `eval --plan FILE` without `global_batch:` said `--global-batch not given` and offered only the
/// flag. It now names the file and its key, the flag as the alternative; a launch line without
/// --global-batch-size said GPT-3's batch was used where Megatron-LM's default is (and "0.0M
/// tokens"), and now leaves it to the launch line's own note.
#[test]
fn the_default_batch_note_names_where_the_batch_goes() {
    let dir = scratch("round8b", "batch-note");
    std::fs::write(
        dir.join("q.yaml"),
        "params: 7B\nnodes: 1\nplan: {tp: 8, pp: 1, dp: 1}\n",
    )
    .unwrap();
    for args in [
        &["eval", "--plan", "q.yaml"][..],
        &["report", "q.yaml", "--out", "r"],
    ] {
        let r = run_in(&dir, args);
        assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("note: q.yaml gives no global_batch: 1536 sequences x 2048 tokens")
                && r.stderr.contains(
                    "give the tokens per step you train with as a line global_batch: SEQUENCES in the file, or pass --global-batch SEQUENCES"
                )
                && !r.stderr.contains("--global-batch not given"),
            "{args:?}: {}",
            r.stderr
        );
    }
    let r = run(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 1 --bf16",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no --global-batch-size, so Megatron-LM's default applies")
            && !r.stderr.contains("--global-batch not given")
            && !r.stderr.contains("GPT-3"),
        "{}",
        r.stderr
    );
    // The default keeps GPT-3's tokens per step at a short length too (1536 x 2048 = 196608 x
    // 16), said in millions of tokens, not "0.0M".
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--seq-len",
        "16",
    ]);
    assert!(
        r.stderr
            .contains("196608 sequences x 16 tokens = 3.1M tokens per step")
            && !r.stderr.contains("0.0M"),
        "{}",
        r.stderr
    );
}

/// A launch-line flag given three times was noted as `2048, then 4096; 4096, then 2048`: two
/// pairs, the middle value twice. Each flag is now said once, its values in order.
#[test]
fn a_flag_given_three_times_is_said_once_in_order() {
    let line = "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 1 --bf16 --global-batch-size 2048 --global-batch-size 4096 --global-batch-size 2048";
    let r = run(&["eval", "--nodes", "2", "--megatron-args", line]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "a flag is given more than once with different values; the last is used, as Megatron-LM's argparse uses it: --global-batch-size 2048, then 4096, then 2048\n"
        ),
        "{}",
        r.stderr
    );
    let r = run(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        &line.replace(" --global-batch-size 2048 --global-batch-size 4096", ""),
    ]);
    assert!(
        !r.stderr.contains("given twice") && !r.stderr.contains("more than once"),
        "{}",
        r.stderr
    );
}

/// A key given twice was placed at the start of its mapping (`d.yaml:37:3` for a `tp:` repeated on
/// line 38; `g.yaml:3:1`, the profile's first key, for a top-level one). The message now points at
/// the second copy and names both lines.
#[test]
fn a_repeated_key_points_at_its_second_copy() {
    let dir = scratch("round8b", "dup-key");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let tp_line = plan.lines().position(|l| l == "  tp: 8").unwrap() + 1;
    // `tp: 4` two lines below `tp: 8`, after `pp: 16`.
    std::fs::write(
        dir.join("p.yaml"),
        plan.replacen("\n  pp: 16\n", "\n  pp: 16\n  tp: 4\n", 1),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[&format!(
            "p.yaml:{}:3: plan: tp is given twice in this mapping, so which value is meant is unclear; keep one tp: line (lines {tp_line} and {} both give it)",
            tp_line + 2,
            tp_line + 2
        )],
        &[&format!("p.yaml:{tp_line}:")],
        "tp twice",
    );
    // A top-level key in a GPU profile, and a flow mapping.
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let at = gpu
        .lines()
        .position(|l| l.starts_with("gpus_per_node:"))
        .unwrap()
        + 1;
    std::fs::write(
        dir.join("g.yaml"),
        gpu.replacen(
            "\ngpus_per_node: 8",
            "\ngpus_per_node: 8\ngpus_per_node: 4",
            1,
        ),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--params", "7B", "--nodes", "1", "--gpu", "./g.yaml", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[&format!(
            "g.yaml:{}:1: gpus_per_node is given twice in this mapping, so which value is meant is unclear; keep one gpus_per_node: line (lines {at} and {} both give it)",
            at + 1,
            at + 1
        )],
        &[":1:1:", ":3:1:"],
        "gpus_per_node twice",
    );
    std::fs::write(
        dir.join("f.yaml"),
        "params: 7B\nnodes: 1\nplan: {tp: 8, pp: 1, dp: 1, tp: 2}\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "f.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "f.yaml:3:29: plan: tp is given twice",
            "(line 3 gives it twice)",
        ],
        &["3:7:"],
        "flow",
    );
    // A copy the scan cannot read (YAML's `? key` form) gives no location rather than the
    // mapping's start.
    std::fs::write(
        dir.join("k.yaml"),
        "params: 7B\nnodes: 1\nplan:\n  tp: 8\n  pp: 1\n  ? tp\n  : 2\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "k.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "error: k.yaml: plan: tp is given twice in this mapping",
            "keep one tp: line",
        ],
        &["k.yaml:4:", "k.yaml:6:"],
        "? key",
    );
}

/// A sweep point past its axis's bound was blamed on the axis's flag, which the user never typed
/// and may not add (`--axis nodes at 100000000: --nodes 100000000 is more than 131072`; a point no
/// split fits offered `change --nodes, --global-batch (e.g. --global-batch 2)` on --axis
/// global-batch). Every message about a point now names `--values`.
#[test]
fn a_sweep_points_bound_and_fix_name_values() {
    for (axis, values, words, absent) in [
        (
            "nodes",
            "100000000",
            &["--axis nodes at 100000000: --values 100000000 is more than 131072"][..],
            &["--nodes"][..],
        ),
        (
            "seq-len",
            "2048,100000000",
            &["--axis seq-len at 100000000: --values 100000000 is larger than 16777216"][..],
            &["--seq-len"][..],
        ),
        (
            "global-batch",
            "100000000",
            &[
                "--values 100000000 is more than 4194304 sequences per step",
                "(e.g. --values 1536)",
            ][..],
            &["--global-batch"][..],
        ),
    ] {
        let mut args = vec![
            "sweep", "--params", "7B", "--axis", axis, "--values", values,
        ];
        if axis != "nodes" {
            args.extend(["--nodes", "1"]);
        }
        let r = run(&args);
        assert_one_line_error(&r, words, absent, &format!("{axis} {values}"));
    }
    // Every point without a valid split: the fix names the points, not the axis's flag.
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "4",
        "--axis",
        "global-batch",
        "--values",
        "1,3",
    ]);
    assert_one_line_error(
        &r,
        &["dp dividing --values 1", "(e.g. --values 2)"],
        &["--global-batch"],
        "global-batch 1,3",
    );
    // One such point among others is a row of the table saying the same.
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "4",
        "--axis",
        "global-batch",
        "--values",
        "1,64",
        "--format",
        "csv",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("dp dividing --values 1") && !r.stdout.contains("--global-batch"),
        "{}",
        r.stdout
    );
}

/// `--values 4294967296` on a count axis was "not a positive whole number" (it is one, too
/// large), and `--axis network-bandwidth --values 1e400` was quoted as `inf`. Both now quote the
/// value as typed with the rule it breaks.
#[test]
fn a_sweep_value_too_large_is_quoted_as_typed() {
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--axis",
        "global-batch",
        "--values",
        "4294967296",
    ]);
    assert_one_line_error(
        &r,
        &["--values 4294967296 is a whole number far too large for --axis global-batch"],
        &["not a positive whole number"],
        "4294967296",
    );
    for value in ["1e400", "0", "1e-9"] {
        let r = run(&[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "network-bandwidth",
            "--values",
            value,
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!(
                    "--values {value} for --axis network-bandwidth (each point's network_gb_per_s) is outside 0.001 to 1000000 GB/s"
                ),
                "e.g. --values 12.5,25,50",
            ],
            &["inf", "network_gb_per_s:", "--network"],
            value,
        );
    }
}

/// `compare` and `sweep` used the default global batch (1536 sequences) without a word, where
/// `plan`, `eval` and `report` say it; `compare --plan a.yaml --plan a.yaml` said each note
/// twice, and one `--plan` was "given 1 time(s)".
#[test]
fn compare_and_sweep_say_the_default_batch() {
    let dir = scratch("round8b", "compare-batch");
    std::fs::write(
        dir.join("q.yaml"),
        "params: 7B\nnodes: 1\nplan: {tp: 8, pp: 1, dp: 1}\n",
    )
    .unwrap();
    let r = run_in(&dir, &["compare", "--plan", "q.yaml", "--plan", "q.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stderr
            .matches("note: q.yaml gives no global_batch: 1536 sequences")
            .count(),
        1,
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.matches("gives no gpu:").count(), 1, "{}", r.stderr);
    for args in [
        &["compare", "--params", "7B", "--nodes", "1"][..],
        &[
            "sweep", "--params", "7B", "--axis", "nodes", "--values", "1",
        ],
        &[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "seq-len",
            "--values",
            "1024,2048",
        ],
    ] {
        let r = run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        // Over the sequence length each point takes GPT-3's tokens per step in its own sequences.
        let said = if args.contains(&"seq-len") {
            "note: --global-batch not given: 3.1M tokens per step at every point"
        } else {
            "note: --global-batch not given: 1536 sequences"
        };
        assert!(r.stderr.contains(said), "{args:?}: {}", r.stderr);
    }
    // Given, or swept, the batch is no default.
    for args in [
        &[
            "compare",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ][..],
        &[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "global-batch",
            "--values",
            "64",
        ],
    ] {
        let r = run(args);
        assert!(!r.stderr.contains("not given"), "{args:?}: {}", r.stderr);
    }
    let r = run_in(&dir, &["compare", "--plan", "q.yaml"]);
    assert_one_line_error(
        &r,
        &["--plan given once; compare takes two"],
        &["time(s)"],
        "once",
    );
}

/// `sweep --tp 8`, `compare --tp 8` and `report FILE --micro-batch 4` were refused as unexpected
/// arguments with clap's look-alike tip (`a similar argument exists: '--mtp-layers'`), another
/// flag entirely. Each now says why the command takes no degree and which command does.
#[test]
fn a_plan_degree_given_to_sweep_compare_or_report_names_the_command_that_takes_it() {
    for (args, words) in [
        (
            &[
                "sweep", "--params", "7B", "--axis", "nodes", "--values", "1", "--tp", "8",
            ][..],
            "sweep searches every plan at each point, so it takes no --tp; to pin it, search one point with tpsim plan ... --tp N",
        ),
        (
            &["compare", "--params", "7B", "--nodes", "1", "--pp=2"],
            "compare takes no --pp: it compares two saved plans",
        ),
        (
            &[
                "report",
                "plans/best-512b-32nodes.yaml",
                "--out",
                "r",
                "--micro-batch",
                "4",
            ],
            "report takes no --micro-batch: it reports the plan file's own degrees; change the file's micro_batch: line, or report other degrees with tpsim eval --plan FILE --micro-batch N --report DIR",
        ),
    ] {
        let r = run(args);
        assert_one_line_error(&r, &[words], &["similar argument", "--mtp-layers"], words);
    }
    // `eval --plan FILE --micro-batch N --report DIR`, the fix offered, runs.
    let dir = scratch("round8b", "report-degree");
    let plan = format!("{ROOT}/plans/best-512b-32nodes.yaml");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            &plan,
            "--micro-batch",
            "2",
            "--report",
            "r",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(dir.join("r/index.html").is_file());
}

/// A path with a double quote in it (`we"ird.yaml`) cut the rest of the message: the one-line
/// sanitizer read the quote's escape (`\"`) as the end of the quoted path, then the rest of the
/// line as an unclosed quote, and shortened it (`...replace that input; wri…`), fix and all.
#[cfg(unix)]
#[test]
fn a_path_with_a_quote_keeps_the_whole_message() {
    let dir = scratch("round8b", "quote-path");
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    std::fs::write(dir.join("we\"ird.yaml"), gpu).unwrap();
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "gpu",
            "--values",
            "we\"ird.yaml",
            "--chart",
            "we\"ird.yaml",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "--chart \"we\\\"ird.yaml\": is the input given with --values",
            "write to another path",
        ],
        &["…"],
        "quote in a path",
    );
}
