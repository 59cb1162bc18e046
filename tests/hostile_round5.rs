//! Hostile input, round 5: defects an adversarial audit of the built binary found (sizes with a
//! space inside read as one value, values in errors whose ends were not visible, quoted numbers in
//! YAML said in serde's words with no fix, a plan saved where the report needed its directory),
//! one regression test each. Every error case checks exit 2, one line (so no panic or backtrace)
//! and the words that name the value, the rule and the fix.

mod common;

use common::*;
use std::path::Path;

const ONE_NODE: &[&str] = &["--nodes", "1", "--global-batch", "64", "--top", "1"];

fn plan_with(extra: &[&str]) -> Run {
    let mut args = vec!["plan"];
    args.extend_from_slice(ONE_NODE);
    args.extend_from_slice(extra);
    run(&args)
}

/// `--params "7 B"` planned a 7B model and `--max-message "8 KiB"` measured 8 KiB: a space inside
/// a size was dropped, though `7B 13B` (two values) was refused only as "not a number". Every size
/// parser now reads one word: spaces around it (a shell quote's) are trimmed, a space inside is
/// refused as possibly two values.
#[test]
fn a_size_with_a_space_inside_is_refused_as_possibly_two_values() {
    for (flag, value) in [
        ("--params", "7 B"),
        ("--params", "7B 13B"),
        ("--params", "7.5 T"),
        ("--params", "1 000"),
        ("--params", "7\tB"),
        ("--tokens", "300 B"),
        ("--tokens", "300B 1T"),
    ] {
        let mut extra = vec![flag, value];
        if flag == "--tokens" {
            extra.extend(["--params", "7B"]);
        }
        let r = plan_with(&extra);
        assert_one_line_error(
            &r,
            &[
                flag,
                &format!("{value:?}"),
                "has a space inside",
                "one value or two",
                "512B, not 512 B",
            ],
            &["panicked", "not a number"],
            &format!("{flag} {value:?}"),
        );
    }
    // The same rule on a sweep's points.
    let r = run(&[
        "sweep", "--nodes", "1", "--axis", "params", "--values", "7B,13 B",
    ]);
    assert_one_line_error(
        &r,
        &["--values \"13 B\" has a space inside"],
        &["panicked"],
        "sweep --values 7B,13 B",
    );
    // Spaces around one value, as a shell quote leaves them, are harmless.
    let r = plan_with(&["--params", " 7B "]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = plan_with(&["--params", "7B", "--tokens", " 300B"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `calibrate --max-message "8 KiB"` read 8 KiB, `1000.5` was rounded down to 1000 bytes, and a
/// count past 2^64 was clamped to 16 EiB: the byte sizes follow the same one-word rule, and
/// neither drop part of a byte nor clamp.
#[test]
fn a_byte_size_is_one_word_of_whole_bytes_that_fits_its_count() {
    let dir = scratch("hostile5", "bytes");
    let out = dir.join("profile.yaml");
    let out = out.to_str().unwrap();
    for (flag, value, words) in [
        (
            "--max-message",
            "8 KiB",
            &["\"8 KiB\"", "has a space inside", "8KiB, not 8 KiB"][..],
        ),
        (
            "--min-message",
            "8KiB 16KiB",
            &["\"8KiB 16KiB\"", "has a space inside"][..],
        ),
        (
            "--max-message",
            "1000.5",
            &[
                "1000.5",
                "not a whole number of bytes",
                "e.g. --max-message 8KiB",
            ][..],
        ),
        (
            "--copy-bytes",
            "99999999999999999999999",
            &["99999999999999999999999", "64-bit", "--copy-bytes 1GiB"][..],
        ),
    ] {
        let r = run(&[
            "calibrate",
            "--params",
            "7B",
            "--backend",
            "cpu",
            flag,
            value,
            "-o",
            out,
        ]);
        let mut needles = vec![flag];
        needles.extend_from_slice(words);
        assert_one_line_error(&r, &needles, &["panicked"], &format!("{flag} {value:?}"));
        assert!(
            !Path::new(out).exists(),
            "{flag} {value:?}: wrote a profile"
        );
    }
}

/// `--run "x y"` was quoted back as `--run x y: no run ...`, which reads as the id `x` and a
/// stray `y`; an empty value was handled in one message only. A value that is empty or holds a
/// space is now put in double quotes in every message that quotes it.
#[test]
fn values_with_spaces_are_quoted_in_errors_so_their_ends_show() {
    let r = run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        "x y",
    ]);
    assert_one_line_error(
        &r,
        &["--run \"x y\": no run of", "give one of its ids"],
        &["--run x y"],
        "--run \"x y\"",
    );
    let r = run(&["accuracy", "--run", "x y"]);
    assert_one_line_error(
        &r,
        &["--run \"x y\":", "published-runs file"],
        &["--run x y"],
        "--run \"x y\" on the bundled runs",
    );
    let r = run(&["plan", "--nodes", "1", "--model", "my model.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "--model \"my model.yaml\": cannot read it",
            "check the path",
        ],
        &[],
        "--model \"my model.yaml\"",
    );
    // A plain name or path is shown as typed, and an unknown name is quoted once.
    let r = run(&["plan", "--nodes", "1", "--model", "no-such-model"]);
    assert_one_line_error(
        &r,
        &["unknown model \"no-such-model\"; known:"],
        &["\\\""],
        "--model no-such-model",
    );
    let r = run(&["plan", "--nodes", "1", "--model", "a b"]);
    assert_one_line_error(
        &r,
        &["unknown model \"a b\";"],
        &["\\\""],
        "--model \"a b\"",
    );
}

/// `layers: "80"` in a spec said `invalid type: string "80", expected u32`: serde's words, with no
/// fix. A quoted number stays refused (YAML reads it as text, and tpsim does not turn text into a
/// number silently), now said as such with the unquoted line to write; serde's type names are said
/// in words.
#[test]
fn a_quoted_number_in_a_spec_is_named_with_the_line_to_write() {
    let dir = scratch("hostile5", "quoted");
    let spec = std::fs::read_to_string(Path::new(ROOT).join("models/llama3-8b.yaml")).unwrap();
    let with_layers = |value: &str| {
        let text: String = spec
            .lines()
            .map(|l| {
                if l.starts_with("layers:") {
                    format!("layers: {value}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(dir.join("m.yaml"), text).unwrap();
        run_in(
            &dir,
            &[
                "plan",
                "--model",
                "./m.yaml",
                "--nodes",
                "1",
                "--global-batch",
                "64",
            ],
        )
    };
    for quoted in ["\"32\"", "'32'", "\" 32 \""] {
        let r = with_layers(quoted);
        assert_one_line_error(
            &r,
            &[
                "m.yaml:6:",
                "layers:",
                "a whole number from 1 to 4294967295",
                "in quotes",
                "write it without quotes (layers: 32)",
            ],
            &["expected u32", "panicked"],
            quoted,
        );
    }
    // Text that is no number is not called a quoted number.
    let r = with_layers("\"32x\"");
    assert_one_line_error(
        &r,
        &["layers:", "\"32x\"", "expected a whole number"],
        &["in quotes", "expected u32"],
        "32x",
    );
    let r = with_layers("~");
    assert_one_line_error(
        &r,
        &[
            "layers:",
            "an empty value (null)",
            "expected a whole number",
        ],
        &["unit value"],
        "null",
    );
    std::fs::write(dir.join("list.yaml"), "[]\n").unwrap();
    let r = run_in(&dir, &["eval", "--plan", "list.yaml"]);
    assert_one_line_error(
        &r,
        &["list.yaml:1:1:", "expected a mapping of keys"],
        &["struct PlanFile"],
        "a list as a plan",
    );
}

/// `plan --save p.yaml --report p.yaml` saved the plan, then failed on the report (exit 2 with a
/// file written); `--report p.yaml/sub` too. Both are now refused before any work, nothing written.
#[test]
fn a_saved_plan_where_the_report_needs_a_folder_is_refused_before_any_work() {
    let dir = scratch("hostile5", "save-report");
    for (save, report) in [("p.yaml", "p.yaml"), ("p.yaml", "p.yaml/sub")] {
        assert_save_and_report_refused(&dir, save, report, save);
    }
}

/// `plan --save SAVE --report REPORT` in `dir` exits 2 with one line naming both and writes
/// nothing at `written` (the file as the folder resolves it).
fn assert_save_and_report_refused(dir: &std::path::Path, save: &str, report: &str, written: &str) {
    let r = run_in(
        dir,
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--save",
            save,
            "--report",
            report,
        ],
    );
    assert_one_line_error(
        &r,
        &[
            &format!("--save {save}"),
            &format!("--report {report}"),
            "give the file and the report different paths",
        ],
        &["panicked"],
        &format!("--save {save} --report {report}"),
    );
    assert!(
        !dir.join(written).exists(),
        "--save {save} --report {report}: written anyway"
    );
}

/// `--megatron-args @script` that is not UTF-8 said "give a YAML or JSON file" of a launch script.
#[test]
fn a_binary_launch_script_is_asked_for_as_text() {
    let dir = scratch("hostile5", "binary-launch");
    std::fs::write(dir.join("launch.sh"), b"\xff\xfe--num-layers 2").unwrap();
    let r = run_in(
        &dir,
        &["eval", "--nodes", "1", "--megatron-args", "@launch.sh"],
    );
    assert_one_line_error(
        &r,
        &[
            "--megatron-args @launch.sh",
            "not UTF-8",
            "launch line or script",
        ],
        &["YAML or JSON"],
        "binary launch script",
    );
}

/// `tpsim plan --help | head -1` printed "error: writing the output: the help text could not be
/// written to stdout" and exited 2, where a closed pipe is the reader's choice for every other
/// output (exit 0, nothing said).
#[test]
fn help_into_a_closed_pipe_exits_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .args(["plan", "--help"])
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// `global_batch: "-5"` in a plan file said "the number is in quotes ... write it without quotes
/// (global_batch: -5)", a fix refused again once taken; so did `"1e3"` and `"99999999999"` for a
/// u32, `seq_len: "2048.5"` and `zero: "300"` (0 to 255). The hint is now given only when the
/// unquoted text is a value of the type (a whole number in its range; a finite number for a
/// float), and the rest keep the type error alone.
#[test]
fn a_quoted_number_is_told_to_lose_its_quotes_only_when_that_would_be_read() {
    let dir = scratch("hostile5", "quoted-in-range");
    let plan =
        std::fs::read_to_string(Path::new(ROOT).join("plans/best-512b-32nodes.yaml")).unwrap();
    let gpu = std::fs::read_to_string(Path::new(ROOT).join("clusters/h100-sxm-80g.yaml")).unwrap();
    // `text` with the line starting `key:` (after its indent) set to `key: value`.
    let with = |text: &str, key: &str, value: &str| -> String {
        text.lines()
            .map(|l| {
                let indent = l.len() - l.trim_start().len();
                if l.trim_start().starts_with(&format!("{key}:")) {
                    format!("{}{key}: {value}\n", &l[..indent])
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    };
    let eval_plan = |key: &str, value: &str| {
        std::fs::write(dir.join("p.yaml"), with(&plan, key, value)).unwrap();
        run_in(&dir, &["eval", "--plan", "p.yaml"])
    };
    for (key, value, words) in [
        ("global_batch", "\"-5\"", "from 1 to 4294967295"),
        ("global_batch", "\"1e3\"", "from 1 to 4294967295"),
        ("global_batch", "\"99999999999\"", "from 1 to 4294967295"),
        ("seq_len", "\"2048.5\"", "from 1 to 4294967295"),
        ("zero", "\"300\"", "from 0 to 255"),
    ] {
        let r = eval_plan(key, value);
        assert_one_line_error(
            &r,
            &[
                &format!("{key}: invalid type: string {value}"),
                &format!("expected a whole number {words}"),
            ],
            &["in quotes", "without quotes", "panicked"],
            &format!("{key}: {value}"),
        );
    }
    // A value the type holds keeps the hint.
    for (key, value, fix) in [
        ("global_batch", "\"1536\"", "(global_batch: 1536)"),
        ("zero", "\"1\"", "(zero: 1)"),
    ] {
        let r = eval_plan(key, value);
        assert_one_line_error(
            &r,
            &["in quotes", &format!("write it without quotes {fix}")],
            &["panicked"],
            &format!("{key}: {value}"),
        );
    }
    // A float field: a finite number gets the hint, an infinite one does not.
    let plan_gpu = |value: &str| {
        std::fs::write(dir.join("g.yaml"), with(&gpu, "hbm_capacity_gib", value)).unwrap();
        run_in(
            &dir,
            &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--gpu",
                "./g.yaml",
            ],
        )
    };
    let r = plan_gpu("\"79.65\"");
    assert_one_line_error(
        &r,
        &["write it without quotes (hbm_capacity_gib: 79.65)"],
        &["panicked"],
        "hbm_capacity_gib: \"79.65\"",
    );
    for value in ["\"1e400\"", "\"inf\""] {
        let r = plan_gpu(value);
        assert_one_line_error(
            &r,
            &["hbm_capacity_gib:", "expected a number"],
            &["in quotes", "panicked"],
            value,
        );
    }
}

/// `plan --save p.yaml --report sub/../p.yaml` (and `--report link/p.yaml`, `link` pointing to
/// the folder itself) saved p.yaml, then failed on the report with a second error line: the
/// paths were compared as written. They are now compared as the file system resolves them, and
/// refused before any work, nothing written.
#[cfg(unix)]
#[test]
fn a_saved_plan_where_the_report_needs_a_folder_is_refused_however_the_path_is_spelled() {
    let dir = scratch("hostile5", "save-report-resolved");
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(".", dir.join("link")).unwrap();
    for (save, report) in [
        ("p.yaml", "sub/../p.yaml"),
        ("p.yaml", "link/p.yaml"),
        ("p.yaml", "./link/sub/../p.yaml/rep"),
        ("link/p.yaml", "p.yaml"),
        ("sub/../p.yaml", "no-such-dir/../p.yaml"),
    ] {
        assert_save_and_report_refused(&dir, save, report, "p.yaml");
    }
    // Different files, however spelled, still both get written.
    let r = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--save",
            "link/p.yaml",
            "--report",
            "sub/../rep",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(dir.join("p.yaml").is_file() && dir.join("rep").is_dir());
}

/// `calibrate --max-message 1.0001MiB` measured 1048680 bytes and `--copy-bytes 1.2345KB` 1234:
/// the whole-bytes check read only plain numbers, and a unit's share of a byte was cut off. The
/// size after its unit is now checked, the value shown in bytes.
#[test]
fn a_byte_size_with_a_unit_keeps_every_part_of_a_byte() {
    let dir = scratch("hostile5", "bytes-unit");
    let out = dir.join("profile.yaml");
    let out = out.to_str().unwrap();
    for (flag, value, bytes) in [
        ("--max-message", "1.0001MiB", "(1048680.8576)"),
        ("--max-message", "1.0001KiB", "(1024.1024)"),
        ("--copy-bytes", "1.2345KB", "(1234.5)"),
        ("--min-message", "8.0001KiB", "(8192.1024)"),
    ] {
        let r = run(&[
            "calibrate",
            "--params",
            "7B",
            "--backend",
            "cpu",
            flag,
            value,
            "-o",
            out,
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("{flag} {value}: is not a whole number of bytes {bytes}"),
                &format!("e.g. {flag} 8KiB"),
            ],
            &["panicked", "must be at least 4"],
            &format!("{flag} {value}"),
        );
        assert!(!Path::new(out).exists(), "{flag} {value}: wrote a profile");
    }
}

/// `--max-message "7B "` said `--max-message 7B  must be at least ...` and `--max-message ""`
/// said `--max-message : not a byte size`, the ends of the value out of sight; `--params 7x` said
/// `--params "7x"` in Rust's debug quoting. Every size error now shows the value as the rest of
/// tpsim does: in double quotes when it is empty or holds a space, as typed otherwise.
#[test]
fn a_size_in_an_error_is_quoted_as_every_other_value_is() {
    let dir = scratch("hostile5", "bytes-quoted");
    let out = dir.join("profile.yaml");
    let out = out.to_str().unwrap();
    let calibrate = |flags: &[&str]| {
        let mut args = vec!["calibrate", "--params", "7B", "--backend", "cpu", "-o", out];
        args.extend_from_slice(flags);
        run(&args)
    };
    for (flags, needle, absent) in [
        (
            &["--max-message", "7B "][..],
            "--max-message \"7B \" must be at least 4 x --min-message 8KiB",
            "--max-message 7B ",
        ),
        (
            &["--max-message", ""][..],
            "--max-message \"\": not a byte size",
            "--max-message :",
        ),
        (
            &["--min-message", " 8KiB", "--max-message", "9KiB"][..],
            "--max-message 9KiB must be at least 4 x --min-message \" 8KiB\"",
            "--min-message  8KiB",
        ),
        (
            &["--copy-bytes", "0.5 "][..],
            "--copy-bytes \"0.5 \": must be at least 1 byte",
            "--copy-bytes 0.5",
        ),
        (
            &["--copy-bytes", "2GiB "][..],
            "--copy-bytes \"2GiB \" is over the CPU backend's limit",
            "--copy-bytes 2GiB",
        ),
    ] {
        let r = calibrate(flags);
        assert_one_line_error(&r, &[needle], &[absent, "panicked"], needle);
        assert!(!Path::new(out).exists(), "{flags:?}: wrote a profile");
    }
    // A count: shown as typed when it is one plain word, in quotes when empty.
    for (value, needle) in [
        ("7x", "--params 7x has an unknown suffix"),
        ("", "--params \"\" is empty"),
        ("-5B", "--params -5B must be greater than zero"),
    ] {
        let r = plan_with(&["--params", value]);
        assert_one_line_error(&r, &[needle], &["\"7x\"", "\"-5B\"", "panicked"], value);
    }
}
