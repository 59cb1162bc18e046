//! Hostile input (issue 14): every input file kind and CLI range, bent out of shape, must give
//! exit 0, 1 or 2; a one-line error on 2; finite, non-negative numbers in any output; and no file
//! lost, cut or left behind. One regression test per defect found, then a property test that
//! mutates every bundled input file (cases: `TPSIM_HOSTILE_CASES`, default small for CI).

use proptest::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The binary under test: `TPSIM_BIN` when set (to run this suite against an older build), else
/// the one cargo built.
fn binary() -> PathBuf {
    std::env::var_os("TPSIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tpsim")))
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .env("RUST_BACKTRACE", "0");
    cmd
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn finish(out: Output, args: &[&str]) -> Run {
    Run {
        code: out
            .status
            .code()
            .unwrap_or_else(|| panic!("{args:?} was killed by a signal: {:?}", out.status)),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `tpsim ARGS` in `dir`, killing it after `limit` (a hang is a failure, not a stuck suite).
fn run_in_for(dir: &Path, args: &[&str], limit: Duration) -> Run {
    let mut child = command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tpsim starts");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return finish(child.wait_with_output().expect("output"), args);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_in(dir: &Path, args: &[&str]) -> Run {
    run_in_for(dir, args, Duration::from_secs(60))
}

fn run(args: &[&str]) -> Run {
    run_in(Path::new(ROOT), args)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tpsim-hostile-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Exit 2 with exactly one line on stderr, which contains every one of `needles`.
fn assert_one_line_error(r: &Run, needles: &[&str], what: &str) {
    assert_eq!(
        r.code, 2,
        "{what}: want exit 2, got {}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: want one line on stderr, got:\n{}",
        r.stderr
    );
    assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "{what}: no {needle:?} in: {}",
            lines[0]
        );
    }
    assert!(
        !r.stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{what}: raw control characters on stderr: {:?}",
        r.stderr
    );
}

fn bundled(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap()
}

/// Replaces the value of the first `key:` line (at any indentation) with `value`.
fn set_key(text: &str, key: &str, value: &str) -> String {
    let mut done = false;
    text.lines()
        .map(|line| {
            let body = line.trim_start();
            if !done && body.starts_with(&format!("{key}:")) {
                done = true;
                let indent = &line[..line.len() - body.len()];
                format!("{indent}{key}: {value}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A CPU-calibrated profile, made once per test run.
fn calibrated_profile() -> &'static str {
    static PROFILE: OnceLock<String> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let dir = scratch("calibration");
        let r = run_in(
            &dir,
            &[
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
                "--ranks",
                "2",
                "--reps",
                "1",
                "--warmup",
                "0",
                "--sweep",
                "16,32,64",
                "--output",
                "cal.yaml",
            ],
        );
        assert_eq!(r.code, 0, "calibrate: {}", r.stderr);
        let text = std::fs::read_to_string(dir.join("cal.yaml")).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        text
    })
}

/// Every number in `value` finite; every one under a time or size key not negative.
fn check_numbers(value: &Value, key: &str, what: &str) {
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            assert!(x.is_finite(), "{what}: {key} = {x}");
            let time_or_size = ["_s", "_bytes", "_gib", "_us", "_days"]
                .iter()
                .any(|suffix| key.ends_with(suffix));
            if time_or_size {
                assert!(x >= 0.0, "{what}: {key} = {x} is negative");
            }
        }
        Value::Null if key == "step_s" || key == "predicted_step_s" => {
            panic!("{what}: {key} is null (a non-finite number)")
        }
        Value::Array(items) => items.iter().for_each(|v| check_numbers(v, key, what)),
        Value::Object(map) => map.iter().for_each(|(k, v)| check_numbers(v, k, what)),
        _ => {}
    }
}

// ---- 1. panics and aborts ------------------------------------------------------------------

#[test]
fn a_run_with_zero_gpus_per_node_is_an_error_not_a_panic() {
    let dir = scratch("runs-gpn");
    let runs = set_key(
        &bundled("validation/published_runs.yaml"),
        "gpus_per_node",
        "0",
    );
    std::fs::write(dir.join("runs.yaml"), runs).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_one_line_error(&r, &["gpus_per_node", "0"], "gpus_per_node 0");
}

#[test]
fn huge_warmup_and_reps_are_refused_with_their_bound() {
    let base = [
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
        "--ranks",
        "2",
    ];
    let mut validate = vec!["validate"];
    validate.extend(base);
    validate.extend(["--tp", "2", "--reps", "1", "--warmup", "4294967295"]);
    assert_one_line_error(&run(&validate), &["--warmup 4294967295", "1000"], "warmup");
    let dir = scratch("reps");
    let mut calibrate = vec!["calibrate"];
    calibrate.extend(base);
    calibrate.extend(["--reps", "4294967295", "--output", "x.yaml"]);
    assert_one_line_error(
        &run_in(&dir, &calibrate),
        &["--reps 4294967295", "1000"],
        "reps",
    );
    assert!(listing(&dir).is_empty());
}

#[test]
fn a_cpu_layer_too_large_for_memory_is_refused_before_allocating() {
    let r = run_in_for(
        Path::new(ROOT),
        &[
            "validate",
            "--backend",
            "cpu",
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "8",
            "--seq-len",
            "131072",
            "--tp",
            "2",
            "--ranks",
            "2",
            "--reps",
            "1",
        ],
        Duration::from_secs(20),
    );
    assert_one_line_error(&r, &["GiB", "cap"], "seq-len 131072");
}

#[test]
fn an_unwritable_stderr_still_exits_2() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = command(
        Path::new(ROOT),
        &["plan", "--params", "70B", "--nodes", "0"],
    )
    .stdout(Stdio::null())
    .stderr(full)
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
}

// ---- 2. non-finite or negative answers -------------------------------------------------------

#[test]
fn every_gpu_profile_number_has_a_range() {
    let profile = bundled("clusters/h100-sxm-80g.yaml");
    let dir = scratch("gpu-ranges");
    let keys = [
        "peak_bf16_tflops",
        "hbm_capacity_gib",
        "hbm_bandwidth_gb_per_s",
        "nvlink_gb_per_s",
        "nvlink_latency_us",
        "network_gb_per_s",
        "network_latency_us",
        "gemm_efficiency",
        "hbm_efficiency",
        "nvlink_efficiency",
        "network_efficiency",
    ];
    for key in keys {
        // A latency may be zero (so a tiny one is fine); every other key divides.
        let values: &[&str] = if key.ends_with("_us") {
            &["1e308", "-1", ".nan", ".inf"]
        } else {
            &["5e-324", "1e308", "-1", ".nan", ".inf"]
        };
        for value in values {
            std::fs::write(dir.join("g.yaml"), set_key(&profile, key, value)).unwrap();
            let r = run_in(
                &dir,
                &[
                    "plan", "--params", "7B", "--nodes", "2", "--gpu", "./g.yaml", "--format",
                    "json",
                ],
            );
            assert_one_line_error(&r, &[key], &format!("{key}: {value}"));
        }
    }
}

#[test]
fn a_sweep_bandwidth_must_be_in_range() {
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--axis",
        "network-bandwidth",
        "--values",
        "5e-324",
    ]);
    assert_one_line_error(&r, &["network_gb_per_s", "5e-324"], "sweep 5e-324");
}

#[test]
fn a_calibration_profile_is_checked() {
    let profile = calibrated_profile();
    let dir = scratch("calibration-ranges");
    // (key, value), where a key "a.b" sets `b:` on the first line after `a:`.
    for (key, value) in [
        ("throughput_tflops.value", "0.0"),
        ("latency_us.value", "-1e308"),
        ("median_us", ".nan"),
        ("m", "0"),
        ("element_bytes", ".inf"),
    ] {
        let text = match key.split_once('.') {
            Some((outer, inner)) => {
                let at = profile.find(&format!("{outer}:")).unwrap();
                profile[..at].to_string() + &set_key(&profile[at..], inner, value)
            }
            None => set_key(profile, key, value),
        };
        let key = key.split('.').next().unwrap();
        std::fs::write(dir.join("c.yaml"), text).unwrap();
        let r = run_in(
            &dir,
            &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "2",
                "--calibration",
                "./c.yaml",
                "--format",
                "json",
            ],
        );
        assert_one_line_error(&r, &[key], &format!("calibration {key}: {value}"));
    }
}

#[test]
fn published_times_and_batches_must_be_positive() {
    let runs = bundled("validation/published_runs.yaml");
    let dir = scratch("runs-ranges");
    for (key, value) in [
        ("iteration_time_s_from_eq3", "0"),
        ("iteration_time_s_from_eq3", "-1"),
        ("iteration_time_s_from_eq3", ".nan"),
        ("iteration_time_s_from_eq3", ".inf"),
        ("global_batch_size", "0"),
    ] {
        std::fs::write(dir.join("runs.yaml"), set_key(&runs, key, value)).unwrap();
        let r = run_in(
            &dir,
            &["accuracy", "--runs", "runs.yaml", "--format", "json"],
        );
        assert_one_line_error(&r, &[key], &format!("{key}: {value}"));
    }
}

// ---- 3. hangs and memory blow-ups ----------------------------------------------------------

#[test]
fn non_regular_inputs_are_refused_at_once() {
    let dir = scratch("fifo");
    let fifo = dir.join("f.yaml");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let fast = Duration::from_secs(10);
    for flag in ["--plan", "--model", "--gpu", "--hf-config", "--calibration"] {
        for input in ["/dev/zero", "./f.yaml", "./"] {
            let mut args = vec!["eval", flag, input, "--nodes", "1"];
            if flag != "--plan" {
                args.extend(["--tp", "1"]);
            }
            if flag == "--gpu" || flag == "--calibration" {
                args.extend(["--params", "1B"]);
            }
            let r = run_in_for(&dir, &args, fast);
            assert_one_line_error(&r, &["not a regular file"], &format!("{flag} {input}"));
        }
    }
    let r = run_in_for(&dir, &["accuracy", "--runs", "/dev/zero"], fast);
    assert_one_line_error(&r, &["not a regular file"], "--runs /dev/zero");
    let r = run_in_for(
        &dir,
        &["eval", "--nodes", "1", "--megatron-args", "@/dev/zero"],
        fast,
    );
    assert_one_line_error(&r, &["not a regular file"], "--megatron-args @/dev/zero");
}

#[test]
fn large_and_deep_inputs_are_refused_quickly() {
    let dir = scratch("deep");
    let cases = [
        (
            "flow.yaml",
            format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
        ),
        (
            "map.yaml",
            format!("{}1{}\n", "{a: ".repeat(100_000), "}".repeat(100_000)),
        ),
        ("big.yaml", format!("# {}\n", "x".repeat(5 << 20))),
    ];
    for (name, text) in cases {
        std::fs::write(dir.join(name), text).unwrap();
        let started = Instant::now();
        let r = run_in_for(&dir, &["eval", "--plan", name], Duration::from_secs(10));
        assert_one_line_error(&r, &[name], name);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn huge_head_counts_and_thread_counts_are_refused_quickly() {
    let r = run_in_for(
        Path::new(ROOT),
        &[
            "eval",
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "4294967295",
            "--nodes",
            "1",
            "--tp",
            "1",
        ],
        Duration::from_secs(3),
    );
    assert_one_line_error(&r, &["--heads 4294967295"], "heads");
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--threads",
        "100000",
    ]);
    assert_one_line_error(&r, &["--threads 100000", "1024"], "sweep threads");
}

// ---- 4. lost or overwritten files --------------------------------------------------------------

#[test]
fn a_save_cut_short_by_a_file_size_limit_leaves_the_old_file_whole() {
    use std::os::unix::process::CommandExt;
    let dir = scratch("fsize");
    let old = bundled("plans/seed-512b-32nodes.yaml");
    std::fs::write(dir.join("old.yaml"), &old).unwrap();
    let mut cmd = command(
        &dir,
        &[
            "plan", "--params", "70B", "--nodes", "8", "--save", "old.yaml",
        ],
    );
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 600,
                rlim_max: 600,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            Ok(())
        });
    }
    let out = cmd.stdout(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{:?}", out.status);
    assert_eq!(std::fs::read_to_string(dir.join("old.yaml")).unwrap(), old);
    assert_eq!(listing(&dir), vec!["old.yaml"]);
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let dir = scratch("overlap");
    let model = bundled("models/gpt3-175b.yaml");
    std::fs::write(dir.join("m.yaml"), &model).unwrap();
    let r = run_in(
        &dir,
        &[
            "plan", "--model", "m.yaml", "--nodes", "64", "--save", "./m.yaml",
        ],
    );
    assert_one_line_error(&r, &["--save", "--model"], "--save m.yaml --model m.yaml");
    assert_eq!(std::fs::read_to_string(dir.join("m.yaml")).unwrap(), model);
    assert!(r.stdout.is_empty());

    let gpu = bundled("clusters/h100-sxm-80g.yaml");
    std::fs::write(dir.join("g.yaml"), &gpu).unwrap();
    let r = run_in(
        &dir,
        &[
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
            "--ranks",
            "2",
            "--reps",
            "1",
            "--gpu",
            "g.yaml",
            "--output",
            "g.yaml",
        ],
    );
    assert_one_line_error(&r, &["--output", "--gpu"], "calibrate --gpu g --output g");
    assert_eq!(std::fs::read_to_string(dir.join("g.yaml")).unwrap(), gpu);
}

#[test]
fn reports_touch_nothing_tpsim_did_not_create() {
    // A user file named like the old writability probe survives.
    let dir = scratch("report-probe");
    std::fs::create_dir(dir.join("rep")).unwrap();
    std::fs::write(dir.join("rep/.tpsim-write-check"), "mine").unwrap();
    let r = run_in(
        &dir,
        &["plan", "--params", "7B", "--nodes", "2", "--report", "rep"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.join("rep/.tpsim-write-check")).unwrap(),
        "mine"
    );

    // A failing command leaves no new directory behind.
    let dir = scratch("report-new");
    let r = run_in(
        &dir,
        &[
            "plan", "--params", "7B", "--nodes", "0", "--report", "newdir",
        ],
    );
    assert_eq!(r.code, 2);
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));

    // A report that cannot be written prints nothing on stdout.
    let dir = scratch("report-fail");
    std::fs::create_dir_all(dir.join("rep/index.html")).unwrap();
    let r = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "2",
            "--global-batch",
            "1536",
            "--report",
            "rep",
            "--format",
            "json",
        ],
    );
    assert_one_line_error(&r, &["--report"], "report over a directory");
    assert!(
        r.stdout.is_empty(),
        "printed {} bytes before failing",
        r.stdout.len()
    );
}

#[test]
fn a_full_stdout_is_exit_2() {
    for args in [
        vec!["--help"],
        vec![
            "plan",
            "--params",
            "7B",
            "--nodes",
            "2",
            "--global-batch",
            "1536",
        ],
        vec![
            "eval",
            "--plan",
            "plans/seed-512b-32nodes.yaml",
            "--format",
            "json",
        ],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = command(Path::new(ROOT), &args)
            .stdout(full)
            .output()
            .unwrap();
        let r = finish(out, &args);
        assert_one_line_error(
            &r,
            &["writing the output"],
            &format!("{args:?} > /dev/full"),
        );
    }
}

// ---- 5. errors that help ---------------------------------------------------------------------

#[test]
fn a_bad_inline_model_names_its_key_and_line() {
    let dir = scratch("inline");
    let r = run_in(
        &dir,
        &["plan", "--params", "7B", "--nodes", "2", "--save", "p.yaml"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    let line = saved
        .lines()
        .position(|l| l.trim_start().starts_with("hidden:"))
        .unwrap()
        + 1;
    std::fs::write(dir.join("p.yaml"), set_key(&saved, "hidden", "abc")).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &["hidden", &format!("p.yaml:{line}:")],
        "inline hidden: abc",
    );
    assert!(!r.stderr.contains("untagged"), "{}", r.stderr);
}

#[test]
fn errors_quote_little_and_escape_control_characters() {
    let dir = scratch("quotes");
    let plan = bundled("plans/seed-512b-32nodes.yaml");
    for (key, value) in [
        ("gpu", format!("\"{}\"", "x".repeat(1 << 20))),
        ("recompute", "\"\\e[31m\\a\\0\"".to_string()),
        ("nodes", format!("\"{}\"", "9".repeat(1 << 20))),
    ] {
        std::fs::write(dir.join("p.yaml"), set_key(&plan, key, &value)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(&r, &[], key);
        assert!(
            r.stderr.len() < 600,
            "{key}: {} bytes of error",
            r.stderr.len()
        );
    }
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--gpu",
        "/etc/passwd",
    ]);
    assert_one_line_error(&r, &["/etc/passwd"], "--gpu /etc/passwd");
    assert!(r.stderr.len() < 400, "{}", r.stderr);
}

#[test]
fn the_sequence_length_cap_holds_for_every_source() {
    for args in [
        vec![
            "eval",
            "--model",
            "gpt3-175b",
            "--nodes",
            "128",
            "--tp",
            "8",
            "--pp",
            "16",
        ],
        vec!["plan", "--params", "70B", "--nodes", "8"],
        vec!["eval", "--plan", "plans/seed-512b-32nodes.yaml"],
        vec![
            "calibrate",
            "--backend",
            "cpu",
            "--model",
            "gpt3-175b",
            "--output",
            "/tmp/unused.yaml",
        ],
    ] {
        let mut args = args.clone();
        args.extend(["--seq-len", "4294967295"]);
        let r = run(&args);
        assert_one_line_error(&r, &["--seq-len 4294967295"], &format!("{args:?}"));
        assert!(
            !r.stderr.contains("--params"),
            "blames --params: {}",
            r.stderr
        );
    }
}

// ---- the generator ---------------------------------------------------------------------------

/// Values a user (or a fuzzer) might put where a number belongs.
const HOSTILE: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "5e-324",
    "1e-300",
    "1e308",
    "-1e308",
    ".nan",
    ".inf",
    "-.inf",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "-0.0",
    "0.5",
    "abc",
    "\"\\e[31m\"",
    "~",
    "[]",
    "{}",
    "1e-3",
    "3",
    "1000000",
];

/// An input file kind: its bundled text and the command that reads it (`FILE` is replaced).
struct Kind {
    name: &'static str,
    text: fn() -> String,
    args: &'static [&'static str],
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "model",
            text: || bundled("models/llama3-8b.yaml"),
            args: &[
                "plan", "--model", "FILE", "--nodes", "2", "--top", "2", "--format", "json",
            ],
        },
        Kind {
            name: "gpu",
            text: || bundled("clusters/a100-sxm-80g.yaml"),
            args: &[
                "plan", "--params", "7B", "--nodes", "2", "--gpu", "FILE", "--top", "2",
                "--format", "json",
            ],
        },
        Kind {
            name: "plan",
            text: || bundled("plans/seed-512b-32nodes.yaml"),
            args: &["eval", "--plan", "FILE", "--format", "json"],
        },
        Kind {
            name: "calibration",
            text: || calibrated_profile().to_string(),
            args: &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "2",
                "--calibration",
                "FILE",
                "--top",
                "2",
                "--format",
                "json",
            ],
        },
        Kind {
            name: "runs",
            text: || {
                // The first three runs keep each case fast.
                let all = bundled("validation/published_runs.yaml");
                let mut starts = all.match_indices("\n- id:").map(|(i, _)| i);
                let end = starts.nth(3).unwrap_or(all.len());
                all[..end].to_string() + "\n"
            },
            args: &["accuracy", "--runs", "FILE", "--format", "json"],
        },
    ]
}

/// Numeric `key: value` lines of `text` (line index, key).
fn numeric_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let body = line.trim_start().trim_start_matches("- ");
            let (key, value) = body.split_once(": ")?;
            let value = value.split(" #").next()?.trim();
            let numeric = value.parse::<f64>().is_ok() && !key.contains(' ');
            numeric.then(|| (i, key.to_string()))
        })
        .collect()
}

fn mutate(text: &str, picks: &[(usize, usize)]) -> String {
    let lines_of_interest = numeric_lines(text);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for &(which, value) in picks {
        if lines_of_interest.is_empty() {
            break;
        }
        let (index, key) = &lines_of_interest[which % lines_of_interest.len()];
        let line = &lines[*index];
        let at = line.find(&format!("{key}:")).unwrap();
        lines[*index] = format!("{}{key}: {}", &line[..at], HOSTILE[value % HOSTILE.len()]);
    }
    lines.join("\n") + "\n"
}

/// The invariants of one finished run in `dir`, where `before` was the listing and `input` the
/// file the command read.
fn check_invariants(
    r: &Run,
    what: &str,
    dir: &Path,
    before: &[String],
    input: Option<(&str, &str)>,
) {
    assert!(
        [0, 1, 2].contains(&r.code),
        "{what}: exit {}\nstderr: {}",
        r.code,
        r.stderr
    );
    if r.code == 2 {
        assert_one_line_error(r, &[], what);
    } else if !r.stdout.trim().is_empty() {
        let json: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("{what}: stdout is not JSON ({e})"));
        check_numbers(&json, "", what);
    }
    assert_eq!(
        listing(dir),
        before,
        "{what}: files changed in the directory"
    );
    if let Some((name, text)) = input {
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            text,
            "{what}: input changed"
        );
    }
}

fn cases() -> u32 {
    std::env::var("TPSIM_HOSTILE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_input_files_keep_the_invariants(
        kind in 0usize..5,
        picks in proptest::collection::vec((0usize..1000, 0usize..HOSTILE.len()), 1..4),
    ) {
        let kinds = kinds();
        let kind = &kinds[kind];
        let text = mutate(&(kind.text)(), &picks);
        let dir = scratch(kind.name);
        std::fs::write(dir.join("in.yaml"), &text).unwrap();
        let before = listing(&dir);
        let args: Vec<&str> = kind.args.iter().map(|a| if *a == "FILE" { "./in.yaml" } else { a }).collect();
        let r = run_in(&dir, &args);
        check_invariants(&r, &format!("{} {picks:?} {args:?}", kind.name), &dir, &before, Some(("in.yaml", &text)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hostile_command_line_numbers_keep_the_invariants(
        values in proptest::collection::vec(0usize..HOSTILE.len(), 4),
        flags in proptest::collection::vec(0usize..6, 1..4),
    ) {
        run_with_hostile_numbers(
            "cli",
            &["plan", "--params", "7B", "--nodes", "2", "--top", "2", "--format", "json"],
            &["--nodes", "--global-batch", "--seq-len", "--gpus-per-node", "--top", "--params"],
            &values,
            &flags,
        );
    }

    /// The same on an MoE model in FP8, over the context, expert and routing flags.
    #[test]
    fn hostile_parallelism_and_moe_numbers_keep_the_invariants(
        values in proptest::collection::vec(0usize..HOSTILE.len(), 4),
        flags in proptest::collection::vec(0usize..6, 1..4),
    ) {
        run_with_hostile_numbers(
            "cli-moe",
            &[
                "plan", "--model", "mixtral-8x7b", "--nodes", "2", "--seq-len", "4096",
                "--global-batch", "64", "--precision", "fp8", "--top", "2", "--format", "json",
            ],
            &["--cp", "--ep", "--etp", "--moe-imbalance", "--moe-capacity-factor", "--tp"],
            &values,
            &flags,
        );
    }

    /// The same on torchtitan's per-op selective recompute, over the pinned FSDP settings.
    #[test]
    fn hostile_fsdp_pins_keep_the_invariants(
        values in proptest::collection::vec(0usize..HOSTILE.len(), 4),
        flags in proptest::collection::vec(0usize..6, 1..4),
    ) {
        run_with_hostile_numbers(
            "cli-fsdp",
            &[
                "plan", "--model", "llama3-8b", "--nodes", "2", "--framework", "torchtitan",
                "--recompute", "selective", "--top", "2", "--format", "json",
            ],
            &["--zero", "--reshard-after-forward", "--micro-batch", "--tp", "--dp", "--seq-len"],
            &values,
            &flags,
        );
    }
}

/// Runs `base` with hostile values given to some of `names` and checks the invariants.
fn run_with_hostile_numbers(
    scratch_name: &str,
    base: &[&str],
    names: &[&str],
    values: &[usize],
    flags: &[usize],
) {
    let dir = scratch(scratch_name);
    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    for (i, flag) in flags.iter().enumerate() {
        let flag = names[*flag];
        let value = HOSTILE[values[i % values.len()]]
            .trim_matches('"')
            .to_string();
        match args.iter().position(|a| a == flag) {
            Some(at) => args[at + 1] = value,
            None => args.extend([flag.to_string(), value]),
        }
    }
    // `=` keeps values such as -1 from being read as flags.
    let mut argv: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i].starts_with("--") && i + 1 < args.len() && args[i] != "--format" {
            argv.push(format!("{}={}", args[i], args[i + 1]));
            i += 2;
        } else {
            argv.push(args[i].clone());
            i += 1;
        }
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let r = run_in(&dir, &argv);
    check_invariants(&r, &format!("{argv:?}"), &dir, &[], None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Routing flags have physical bounds: one expert can receive at most every token once (experts /
/// top-k times the balanced share: 4 for Mixtral's 8 experts top-2), and a dense model has no
/// routing at all. Both are refused with the value, the rule and a fix, not computed (a review
/// found `--moe-imbalance 64` on Mixtral printing 1,479 GiB of activations).
#[test]
fn routing_flags_are_bounded_by_the_model() {
    let mixtral = [
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "8",
        "--tp",
        "4",
        "--pp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "512",
        "--zero",
        "1",
    ];
    let with = |extra: &[&str]| {
        let args: Vec<&str> = mixtral.iter().chain(extra).copied().collect();
        run(&args)
    };
    let over = with(&["--moe-imbalance", "4.5"]);
    assert_eq!(over.code, 2, "{}", over.stderr);
    assert!(
        over.stderr.contains("--moe-imbalance 4.5") && over.stderr.contains("8 experts / top-2"),
        "{}",
        over.stderr
    );
    let at_bound = with(&["--moe-imbalance", "4"]);
    assert_ne!(at_bound.code, 2, "{}", at_bound.stderr);
    let dense = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--moe-capacity-factor",
        "1.25",
    ]);
    assert_eq!(dense.code, 2, "{}", dense.stderr);
    assert!(
        dense.stderr.contains("--moe-capacity-factor 1.25") && dense.stderr.contains("dense"),
        "{}",
        dense.stderr
    );
}

/// A pin that no plan can have is named in `plan`'s error, with the values the search offers, not
/// hidden behind a generic "cannot be split" line whose hint is the batch already in use (a review
/// found `--tp 3` on a 70B model answered with "change --global-batch (e.g. --global-batch 1536)").
#[test]
fn plan_names_the_pin_that_rules_out_every_plan() {
    let out = run(&["plan", "--params", "70B", "--nodes", "8", "--tp", "3"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--tp 3") && out.stderr.contains("--tp 1, 2, 4, 8"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    let together = run(&[
        "plan",
        "--params",
        "70B",
        "--nodes",
        "8",
        "--pp",
        "2",
        "--zero",
        "3",
        "--framework",
        "deepspeed",
    ]);
    assert_eq!(together.code, 2, "{}", together.stderr);
    assert!(
        together.stderr.contains("--zero 3 with --pp 2"),
        "{}",
        together.stderr
    );
}

/// A precision the GPU has no tensor cores for is refused by every searching command with the
/// GPU's name and the formats it has, as `eval` does — not searched into "no valid plan exists"
/// or "nothing fits".
#[test]
fn searching_commands_refuse_a_precision_the_gpu_lacks() {
    for args in [
        vec![
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--precision",
            "nvfp4",
        ],
        vec![
            "compare",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--precision",
            "mxfp8",
        ],
        vec![
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "gpu",
            "--values",
            "b200-sxm-180g,h100-sxm-80g",
            "--precision",
            "nvfp4",
        ],
    ] {
        let out = run(&args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("h100-sxm-80g has no") && out.stderr.contains("use bf16, fp8"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// A pin that only an uneven split allows says so (Llama 3.1 405B's 126 layers on 8 stages), and
/// pins under which nothing fits while unpinned plans do are named as the cause next to the
/// closest miss (a review found `--tp 1 --pp 1` told only to "add nodes").
#[test]
fn pins_are_named_as_the_cause_of_no_plan_or_no_fit() {
    let uneven = run(&[
        "plan",
        "--model",
        "llama3-405b",
        "--nodes",
        "64",
        "--global-batch",
        "1024",
        "--pp",
        "8",
    ]);
    assert_eq!(uneven.code, 2, "{}", uneven.stderr);
    assert!(
        uneven.stderr.contains("--pp 8 needs --allow-uneven-pp"),
        "{}",
        uneven.stderr
    );
    let misses = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "1",
        "--pp",
        "1",
        "--zero",
        "1",
    ]);
    assert_eq!(misses.code, 1, "{}", misses.stderr);
    assert!(
        misses.stderr.contains("nothing fits")
            && misses
                .stderr
                .contains("the pins --tp 1 --pp 1 --zero 1 rule out every plan that fits"),
        "{}",
        misses.stderr
    );
}

/// Nothing the user gave is lost on the way through a saved plan: the MoE routing a plan was
/// evaluated with is written by `plan --save`, read back by `eval --plan` (same step time), and
/// named in the training line (a review found `eval --plan` of an imbalanced Mixtral plan 15%
/// faster than the plan it saved).
#[test]
fn saved_plans_keep_their_moe_routing() {
    let dir = scratch("routing");
    let saved = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "8",
            "--global-batch",
            "256",
            "--seq-len",
            "4096",
            "--moe-imbalance",
            "1.5",
            "--moe-capacity-factor",
            "1.25",
            "--top",
            "1",
            "--save",
            "m.yaml",
            "--format",
            "json",
        ],
    );
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let planned: serde_json::Value = serde_json::from_str(&saved.stdout).unwrap();
    let step = planned["plans"][0]["time"]["step_s"].as_f64().unwrap();
    let again = run_in(&dir, &["eval", "--plan", "m.yaml", "--format", "json"]);
    assert_ne!(again.code, 2, "{}", again.stderr);
    let evaluated: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    let step_again = evaluated["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert!(
        (step_again / step - 1.0).abs() < 1e-9,
        "{step_again} vs {step}"
    );
    let text = run_in(&dir, &["eval", "--plan", "m.yaml"]);
    assert!(
        text.stdout
            .contains("busiest expert gets 1.25 x the balanced load"),
        "{}",
        text.stdout
    );
}

/// A recompute flag given with a saved plan replaces the plan's recompute, block layer count
/// included (a review found `--recompute-method uniform` silently ignored on a plan saved with
/// block recompute), and torchtitan's refusal of block recompute says where it came from.
#[test]
fn recompute_flags_replace_a_saved_block_recompute() {
    let dir = scratch("block");
    let saved = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "70B",
            "--nodes",
            "8",
            "--global-batch",
            "512",
            "--recompute",
            "full",
            "--top",
            "1",
            "--save",
            "blk.yaml",
        ],
    );
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let text = std::fs::read_to_string(dir.join("blk.yaml")).unwrap();
    assert!(text.contains("recompute_num_layers: 1"), "{text}");
    let uniform = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "blk.yaml",
            "--recompute",
            "full",
            "--recompute-method",
            "uniform",
        ],
    );
    let plan_line = uniform
        .stdout
        .lines()
        .find(|l| l.starts_with("plan:"))
        .unwrap();
    assert!(plan_line.contains("recompute full,"), "{plan_line}");
    let titan = run_in(
        &dir,
        &["eval", "--plan", "blk.yaml", "--framework", "torchtitan"],
    );
    assert_eq!(titan.code, 2, "{}", titan.stderr);
    assert!(
        titan.stderr.contains("recompute_num_layers: ")
            && titan.stderr.contains(" in blk.yaml")
            && titan.stderr.contains("--recompute-method uniform"),
        "{}",
        titan.stderr
    );
}

/// A CLI sweep of 3,680 hostile calls (2026-12-01) found these; each is now refused with its rule
/// or, for the saved plan, read back.
#[test]
fn a_sweep_of_hostile_flags_finds_each_refused_with_its_rule() {
    // `plan --save` over a model with its own head width wrote a file `eval --plan` refused.
    let dir = scratch("own-head-width");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "qwen3-30b-a3b",
            "--nodes",
            "32",
            "--global-batch",
            "256",
            "--hidden",
            "7",
            "--save",
            "q.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let back = run_in(&dir, &["eval", "--plan", "q.yaml"]);
    assert!(back.code == 0 || back.code == 1, "{}", back.stderr);
    // A published size that is not a size is refused, though it only documents the model.
    let text = set_key(
        &bundled("models/llama3-8b.yaml"),
        "published_params_b",
        ".nan",
    );
    std::fs::write(dir.join("m.yaml"), text).unwrap();
    let r = run_in(&dir, &["plan", "--model", "m.yaml", "--nodes", "1"]);
    assert_one_line_error(&r, &["published_params_b", "positive"], "published size");

    let deepseek = [
        "eval",
        "--model",
        "deepseek-v3",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "1",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--global-batch",
        "256",
    ];
    let mut kv = deepseek.to_vec();
    kv.extend(["--kv-heads", "64"]);
    assert_one_line_error(
        &run(&kv),
        &["--kv-heads 64", "latent", "drop --kv-heads"],
        "MLA kv",
    );

    let dense_plan = ["plan", "--model", "llama3-8b", "--nodes", "2"];
    let mut a2a = dense_plan.to_vec();
    a2a.extend(["--overlap-moe-expert-parallel-comm", "true"]);
    assert_one_line_error(&run(&a2a), &["dense", "drop the flag"], "plan a2a overlap");
    let mut tp1 = dense_plan.to_vec();
    tp1.extend(["--tp-comm-overlap", "true", "--tp", "1"]);
    assert_one_line_error(&run(&tp1), &["--tp 1", "--tp 2"], "plan tp overlap");
    let mut tokens = dense_plan.to_vec();
    tokens.extend(["--tokens", "1e-30"]);
    assert_one_line_error(
        &run(&tokens),
        &["--tokens", "less than one token"],
        "tokens",
    );
    let mut fp8 = dense_plan.to_vec();
    fp8.extend(["--framework", "megatron-lm-2021", "--precision", "fp8"]);
    assert_one_line_error(
        &run(&fp8),
        &["megatron-lm-2021", "--precision bf16"],
        "2021 fp8",
    );
    let mut negative = dense_plan.to_vec();
    negative[4] = "-1";
    assert_one_line_error(&run(&negative), &["--nodes", "negative"], "negative nodes");

    let sweep = [
        "sweep",
        "--model",
        "llama3-8b",
        "--global-batch",
        "64",
        "--axis",
        "nodes",
        "--values",
        "2,2",
    ];
    assert_one_line_error(&run(&sweep), &["twice", "once"], "duplicate point");
    // `02` is no second spelling of 2: leading zeros are refused as typed (round 9).
    let mut zeros = sweep;
    zeros[8] = "2,02";
    assert_one_line_error(
        &run(&zeros),
        &["--values 02 is not written in plain digits", "write 2"],
        "leading zeros",
    );

    let unfused_cp = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "4",
        "--cp",
        "2",
        "--pp",
        "1",
        "--micro-batch",
        "1",
        "--global-batch",
        "8",
        "--attention",
        "unfused",
    ];
    assert_one_line_error(
        &run(&unfused_cp),
        &["--cp 2", "--attention flash"],
        "unfused cp",
    );
}
