//! Hostile input, round 9: round 8's leftovers (whole numbers written `+8` or `007` read as 8
//! and 7 without a word, on the command line and in files; a flag equal to the plan file's value
//! blamed for a GPU-count mismatch; an escaped quote ending a string in the duplicate-key scan),
//! and what a further audit found. Every error case checks exit 2, one line (so no panic or
//! backtrace) and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// `--tp +8` and `--tp 007` were read as 8 and 7 and every later line echoed those, not what was
/// typed. A whole number written with a plus sign or leading zeros is now refused as typed, with
/// the plain digits to write, for every whole-number flag and every `sweep --values` point.
#[test]
fn a_whole_number_flag_takes_plain_digits_only() {
    for (flag, value, plain) in [
        ("--tp", "+8", "8"),
        ("--tp", "008", "8"),
        ("--nodes", "+1", "1"),
        ("--nodes", "01", "1"),
        ("--global-batch", "064", "64"),
        ("--seq-len", "+2048", "2048"),
    ] {
        let mut args = vec!["eval", "--params", "7B"];
        for (f, v) in [("--nodes", "1"), ("--tp", "8")] {
            if f != flag {
                args.extend([f, v]);
            }
        }
        args.extend([flag, value]);
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                &format!("{flag} {value} is not written in plain digits"),
                &format!("write {flag} {plain}"),
            ],
            &["panicked"],
            &format!("{flag} {value}"),
        );
    }
    for (axis, values, bad, plain) in [
        ("nodes", "1,02", "02", "2"),
        ("seq-len", "+2048", "+2048", "2048"),
        ("global-batch", "0512", "0512", "512"),
    ] {
        let mut args = vec![
            "sweep", "--params", "7B", "--axis", axis, "--values", values,
        ];
        if axis != "nodes" {
            args.extend(["--nodes", "1"]);
        }
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                &format!("--values {bad} is not written in plain digits"),
                &format!("write {plain} in its place"),
            ],
            &[],
            values,
        );
    }
    // Plain digits still work.
    let r = run(&["eval", "--params", "7B", "--nodes", "1", "--tp", "8"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A plan file's `tp: +8`, `tp: 0x8` or `tp: 0b1000` was read as 8 without a word, `tp: -0` said
/// "invalid type: integer `0`, expected a whole number from 0 ...", and `tp: 007` (unquoted) was
/// said to be "in quotes". Each is now refused at its line with the digits to write; the same
/// reader serves model and GPU files.
#[test]
fn a_whole_number_in_a_file_takes_plain_digits_only() {
    let dir = scratch("round9", "file-digits");
    for (value, words) in [
        (
            "+8",
            &["p.yaml:", ":7: plan.tp: +8 has a plus sign", "write tp: 8"][..],
        ),
        (
            "0x8",
            &["tp: 0x8 is written in hexadecimal", "write tp: 8"][..],
        ),
        (
            "0b1000",
            &["tp: 0b1000 is written in binary", "write tp: 8"][..],
        ),
        ("0o10", &["tp: 0o10 is written in octal", "write tp: 8"][..]),
        // tp 0 is refused in turn, so a whole number of 1 or more is offered (round 22).
        ("-0", &["tp: -0 has a minus sign", "e.g. tp: 1"][..]),
        (
            "007",
            &[
                "007 has leading zeros, so YAML reads it as text",
                "write tp: 7",
            ][..],
        ),
        (
            "\"007\"",
            &["the number is in quotes", "write it without quotes (tp: 7)"][..],
        ),
    ] {
        std::fs::write(
            dir.join("p.yaml"),
            bundled_plan_with("  tp: 8", &format!("  tp: {value}")),
        )
        .unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(
            &r,
            words,
            &["is in quotes, so YAML reads it as text: write it without quotes (tp: 007)"],
            value,
        );
        if value == "007" {
            assert!(!r.stderr.contains("in quotes"), "{}", r.stderr);
        }
    }
    std::fs::write(
        dir.join("m.yaml"),
        "name: m\nlayers: +2\nhidden: 64\nheads: 2\nffn_hidden: 256\nvocab: 100\nseq_len: 128\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--model", "m.yaml", "--nodes", "1"]);
    assert_one_line_error(
        &r,
        &["m.yaml:2:9: layers: +2 has a plus sign", "write layers: 2"],
        &[],
        "model file",
    );
    // A text key keeps leading zeros as written (a commit id), and a quoted +8 is text.
    std::fs::write(
        dir.join("m.yaml"),
        "name: '+8'\nlayers: 2\nhidden: 64\nheads: 2\nffn_hidden: 256\nvocab: 100\nseq_len: 128\n",
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["eval", "--model", "m.yaml", "--nodes", "1", "--tp", "1"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `{name: "x\"y", layers: 2, layers: 3}`: the duplicate-key scan ended the string at the escaped
/// quote, read the rest of the line as a string, found one `layers` and gave no location. Both
/// copies are now found past the escape.
#[test]
fn a_duplicate_key_is_placed_past_an_escaped_quote() {
    let dir = scratch("round9", "escaped-quote");
    std::fs::write(
        dir.join("m.yaml"),
        "{name: \"x\\\"y\", layers: 2, hidden: 64, heads: 2, layers: 3, ffn_hidden: 256, vocab: 100}\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--model", "m.yaml", "--nodes", "1"]);
    assert_one_line_error(
        &r,
        &[
            "m.yaml:1:49: layers is given twice",
            "keep one layers: line",
            "(line 1 gives it twice)",
        ],
        &[],
        "escaped quote",
    );
}

/// `eval --plan FILE --tp 8` where the file says `tp: 8` named the degree `--tp 8`, as if the flag
/// had set it over the file, and `--nodes 32` where the file says `nodes: 32` was said to have
/// resized the cluster ("set by --nodes over the file's nodes: 32"), with "drop --nodes" offered
/// as a fix that changes nothing. A flag equal to the file's value is now named after the file's
/// key, and only a flag that changed the cluster is blamed for its size.
#[test]
fn a_flag_equal_to_the_plan_file_is_not_named_as_an_override() {
    let plan = "plans/seed-512b-32nodes.yaml";
    let r = run(&["eval", "--plan", plan, "--tp", "8", "--nodes", "16"]);
    assert_one_line_error(
        &r,
        &[
            "tp: 8 (also --tp 8) x cp: 1 x pp: 16 x dp: 2 = 256 GPUs",
            "but the cluster has 128 (set by --nodes over the file's nodes: 32)",
            "or drop --nodes",
        ],
        &["--tp 8 x"],
        "--tp equal to the file",
    );
    let r = run(&["eval", "--plan", plan, "--tp", "4", "--nodes", "32"]);
    assert_one_line_error(
        &r,
        &[
            "--tp 4 x cp: 1 x pp: 16 x dp: 2 = 128 GPUs, but the cluster has 256; choose degrees whose product is 256",
        ],
        &["set by --nodes", "drop --nodes"],
        "--nodes equal to the file",
    );
    let r = run(&[
        "eval", "--plan", plan, "--pp", "16", "--dp", "2", "--nodes", "16",
    ]);
    assert_one_line_error(
        &r,
        &[
            "pp: 16 (also --pp 16) x dp: 2 (also --dp 2) = 256 GPUs",
            "(e.g. --dp 1)",
        ],
        &["x --pp 16", "x --dp 2"],
        "two flags equal to the file",
    );
}

/// `--moe-imbalance nan` was quoted back as `--moe-imbalance NaN`, and `--moe-capacity-factor
/// 1e400` or `--price-per-gpu-hour 1e400` as `inf`: Rust reads those spellings as numbers, and
/// the message quoted the number, not what was typed. Every plain-number flag now refuses a value
/// that is not finite as typed.
#[test]
fn a_number_flag_refuses_nan_and_infinity_as_typed() {
    for flag in ["--moe-imbalance", "--moe-capacity-factor"] {
        for value in ["nan", "1e400", "-inf", "Infinity"] {
            let arg = format!("{flag}={value}");
            let r = run(&["plan", "--model", "mixtral-8x7b", "--nodes", "1", &arg]);
            assert_one_line_error(
                &r,
                &[
                    &format!("invalid value '{value}' for '{flag} <F>'"),
                    "is not a finite number",
                    "give a number such as 1.25",
                ],
                &["NaN", " inf:"],
                &arg,
            );
        }
    }
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--axis",
        "nodes",
        "--values",
        "1",
        "--tokens",
        "1T",
        "--price-per-gpu-hour",
        "1e400",
    ]);
    assert_one_line_error(
        &r,
        &[
            "invalid value '1e400' for '--price-per-gpu-hour <PRICE>'",
            "is not a finite number",
        ],
        &["inf must"],
        "price",
    );
}

/// `accuracy --runs PLAN.yaml` (a plan file, or any file that is no list) said only
/// `s.yaml:1:1: invalid type: map, expected a sequence`, with no fix. It now says the file is not
/// a runs file and names the two kinds `accuracy` reads.
#[test]
fn accuracy_names_a_file_that_is_no_runs_file() {
    let dir = scratch("round9", "runs-kind");
    std::fs::copy(
        format!("{ROOT}/plans/seed-512b-32nodes.yaml"),
        dir.join("s.yaml"),
    )
    .unwrap();
    std::fs::write(dir.join("t.yaml"), "hello\n").unwrap();
    for file in ["s.yaml", "t.yaml"] {
        let r = run_in(&dir, &["accuracy", "--runs", file]);
        assert_one_line_error(
            &r,
            &[
                &format!("{file}: is not a runs file"),
                "a list of runs",
                "validation/modern_runs.yaml",
                "give --runs one of those",
            ],
            &["expected a sequence"],
            file,
        );
    }
}

/// A plan, model or runs file saved with a UTF-8 byte-order mark (Windows editors) was misread:
/// `BOM nodes: 1 / params: 7B / plan: {...}` said "missing key plan, which has no default" of a
/// file that has it. YAML allows the mark at the start of a file; it is now skipped. (A
/// config.json keeps its refusal, round 4: JSON does not allow one.)
#[test]
fn a_yaml_file_with_a_byte_order_mark_is_read() {
    let dir = scratch("round9", "bom");
    std::fs::write(
        dir.join("p.yaml"),
        "\u{feff}nodes: 1\nparams: 7B\nplan: {tp: 8, pp: 1, dp: 1}\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("missing key"), "{}", r.stderr);
    std::fs::write(
        dir.join("m.yaml"),
        "\u{feff}name: m\nlayers: 2\nhidden: 64\nheads: 2\nffn_hidden: 256\nvocab: 100\nseq_len: 128\n",
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "1", "--pp", "1",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let runs = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    std::fs::write(dir.join("r.yaml"), format!("\u{feff}{runs}")).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "r.yaml", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A plan indented with tabs said only "found character that cannot start any token" (or "found
/// a tab character that violates indentation ... while scanning a plain scalar"), naming no fix.
/// Both now say the line is indented with a tab and to use spaces.
#[test]
fn a_tab_indented_line_is_named_with_the_fix() {
    let dir = scratch("round9", "tabs");
    for (text, line) in [
        (
            "params: 7B\nnodes: 1\nplan:\n\ttp: 8\n\tpp: 1\n\tdp: 1\n",
            4,
        ),
        (
            "params: 7B\nnodes: 1\nplan:\n  tp: 8\n \tpp: 1\n  dp: 1\n",
            5,
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), text).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(
            &r,
            &[
                &format!("p.yaml:{line}:"),
                &format!("line {line} is indented with a tab"),
                "replace the tab with spaces",
            ],
            &["cannot start any token", "while scanning"],
            text,
        );
    }
}
