//! `tpsim calibrate` and `tpsim validate` end to end on the CPU backend (what CI can run), and the
//! cuda backend's refusal on a machine without CUDA.

use assert_cmd::Command;
use serde_json::Value;
use tpsim::cluster::GpuProfile;

fn tpsim() -> Command {
    Command::cargo_bin("tpsim").unwrap()
}

/// A small model the CPU measures in well under a second per GEMM.
const TINY: &[&str] = &[
    "--layers",
    "2",
    "--hidden",
    "128",
    "--heads",
    "8",
    "--seq-len",
    "64",
];

/// Quick CPU calibration flags: tiny sweep, short messages, few repetitions.
const QUICK: &[&str] = &[
    "--backend",
    "cpu",
    "--ranks",
    "2",
    "--sweep",
    "16,32,64",
    "--max-message",
    "64KiB",
    "--copy-bytes",
    "1MiB",
    "--warmup",
    "0",
    "--reps",
    "3",
];

fn calibrate_to(path: &std::path::Path) -> GpuProfile {
    let out = tpsim()
        .arg("calibrate")
        .args(TINY)
        .args(QUICK)
        .args(["--tp", "1,2", "--output"])
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "calibrate failed: {stderr}");
    assert!(stderr.contains("backend: cpu (--backend cpu)"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("tp2 mlp_down wgrad"), "{stdout}");
    let text = std::fs::read_to_string(path).unwrap();
    yaml_serde::from_str(&text).unwrap()
}

fn step_s(args: &[&str]) -> f64 {
    let out = tpsim()
        .arg("plan")
        .args(TINY)
        .args(["--nodes", "1", "--global-batch", "8", "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

#[test]
fn cpu_calibration_writes_a_profile_that_plan_reads_and_that_changes_the_times() {
    let dir = std::env::temp_dir().join(format!("tpsim-cal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cpu.yaml");
    let profile = calibrate_to(&path);
    let calibration = profile.calibration.as_ref().expect("calibration section");
    assert_eq!(calibration.backend, "cpu");
    assert_eq!(calibration.devices, 2);
    // 2 TP degrees x 4 matrices x (forward + 2 backward GEMMs), and a 3 x 3 sweep.
    assert_eq!(calibration.gemm_shapes.len(), 24);
    assert_eq!(calibration.gemm_sweep.len(), 9);
    assert!(calibration.gemm_shapes.iter().all(|g| g.median_us > 0.0
        && g.min_us <= g.median_us
        && g.median_us <= g.max_us
        && g.reps == 3));
    // All-reduce, all-gather, reduce-scatter among 2, and send/recv; 8 KiB..64 KiB = 4 sizes.
    assert_eq!(calibration.collectives.len(), 4);
    for fit in &calibration.collectives {
        assert_eq!(fit.points.len(), 4);
        assert!(fit.alpha_us.ci95_low <= fit.alpha_us.value);
        assert!(fit.alpha_us.value <= fit.alpha_us.ci95_high);
        for p in &fit.points {
            let factor = fit.collective.wire_factor(fit.ranks);
            assert!((p.busbw_gb_per_s - p.algbw_gb_per_s * factor).abs() < 1e-9);
        }
    }
    assert!(profile.hbm_bandwidth_gb_per_s > 0.0);
    assert_eq!(profile.gpus_per_node, 2);
    assert!(profile.check().is_ok());

    let calibrated = step_s(&["--calibration", path.to_str().unwrap()]);
    let datasheet = step_s(&["--gpus-per-node", "2"]);
    assert!(calibrated > 0.0 && datasheet > 0.0);
    // A CPU is orders of magnitude slower than the H100 datasheet profile.
    assert!(
        calibrated > 10.0 * datasheet,
        "calibrated {calibrated} s vs datasheet {datasheet} s"
    );
    // `eval` reads it too.
    let out = tpsim()
        .arg("eval")
        .args(TINY)
        .args([
            "--nodes",
            "1",
            "--global-batch",
            "8",
            "--tp",
            "2",
            "--format",
            "json",
        ])
        .args(["--calibration", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cluster"]["gpus_per_node"].as_u64(), Some(2));
    assert_eq!(json["cluster"]["gpu"].as_str(), Some("calibrated-cpu"));
    assert!(json["plans"][0]["time"]["step_s"].as_f64().unwrap() > 10.0 * datasheet);
    std::fs::remove_dir_all(&dir).ok();
}

fn validate_json(args: &[&str]) -> Vec<Value> {
    let out = tpsim()
        .arg("validate")
        .args([
            "--backend",
            "cpu",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--format",
            "json",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "validate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The cost model's TP bytes per rank for one layer: 4 all-reduce equivalents of b·s·h bf16
/// values, each 2(t−1)/t of it on the wire, and under sequence parallelism the backward's 2
/// all-gathers of the column-parallel inputs again, (t−1)/t each (worked by hand here, not
/// through the library).
fn model_bytes(tp: u64, micro_batch: u64, seq: u64, hidden: u64, sp: bool) -> u64 {
    let all_gathers = if sp { 2 } else { 0 };
    (4 * 2 + all_gathers) * (tp - 1) * micro_batch * seq * hidden * 2 / tp
}

#[test]
fn cpu_validation_passes_numerics_and_sends_the_modelled_bytes() {
    for (tp, sp, extra) in [
        ("2", false, vec![]),
        ("4", true, vec!["--micro-batch", "2"]),
    ] {
        let mut args = TINY.to_vec();
        args.extend(["--tp", tp]);
        if sp {
            args.push("--sequence-parallel");
        }
        args.extend(extra.iter().copied());
        let rows = validate_json(&args);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        let t: u64 = tp.parse().unwrap();
        let mb = if sp { 2 } else { 1 };
        assert_eq!(row["sequence_parallel"].as_bool(), Some(sp));
        assert_eq!(row["ranks_run"].as_u64(), Some(t));
        assert_eq!(
            row["wire_bytes_per_rank"].as_u64(),
            Some(model_bytes(t, mb, 64, 128, sp))
        );
        assert_eq!(row["bytes_match"].as_bool(), Some(true));
        assert_eq!(row["numerics_ok"].as_bool(), Some(true));
        let err = row["max_relative_error"].as_f64().unwrap();
        // bf16 on the wire: errors of the order of its unit roundoff 2^-8, not zero and not O(1).
        assert!(err > 1e-5 && err < 3e-2, "max relative error {err}");
        assert_eq!(row["tensor_errors"].as_array().unwrap().len(), 6);
        assert!(row["measured_layer_ms"].as_f64().unwrap() > 0.0);
        assert!(row["predicted_layer_ms"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn unsharded_cpu_layer_matches_the_f64_reference_to_f32_precision() {
    let mut args = TINY.to_vec();
    args.extend(["--tp", "1"]);
    let rows = validate_json(&args);
    let err = rows[0]["max_relative_error"].as_f64().unwrap();
    assert!(err < 1e-5, "tp 1 has no wire, only f32 rounding: {err}");
    assert_eq!(rows[0]["wire_bytes_per_rank"].as_u64(), Some(0));
}

#[test]
fn gated_gqa_layer_validates_with_sequence_parallelism() {
    let rows = validate_json(&[
        "--layers",
        "2",
        "--hidden",
        "128",
        "--heads",
        "8",
        "--kv-heads",
        "4",
        "--gated-mlp",
        "--ffn-hidden",
        "256",
        "--seq-len",
        "32",
        "--tp",
        "4",
        "--sequence-parallel",
    ]);
    assert_eq!(rows[0]["numerics_ok"].as_bool(), Some(true));
    assert_eq!(rows[0]["bytes_match"].as_bool(), Some(true));
}

#[test]
fn forcing_cuda_without_cuda_exits_2_with_the_library_and_the_hint() {
    // This machine and CI have no CUDA driver; on a GPU machine this test does not apply.
    let commands: [&[&str]; 2] = [
        &[
            "calibrate",
            "--backend",
            "cuda",
            "--output",
            "/nonexistent/never-written.yaml",
        ],
        &["validate", "--backend", "cuda", "--tp", "2"],
    ];
    for command in commands {
        let out = tpsim().args(command).args(TINY).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("libcuda.so"), "{stderr}");
        assert!(stderr.contains("LD_LIBRARY_PATH"), "{stderr}");
        assert!(stderr.contains("scripts/with-cuda-libs"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn auto_backend_says_which_backend_it_picked() {
    let mut args = TINY.to_vec();
    args.extend(["--tp", "2", "--backend", "auto", "--reps", "1"]);
    let out = tpsim().arg("validate").args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("backend: cpu (auto: cuda not usable: "),
        "{stderr}"
    );
}

#[test]
fn bad_calibration_input_is_one_line_with_the_rule() {
    let cases: &[(&[&str], &str)] = &[
        (&["calibrate", "--reps", "0", "-o", "x.yaml"], "--reps 0"),
        (
            &[
                "calibrate",
                "--backend",
                "cpu",
                "--max-message",
                "lots",
                "-o",
                "x.yaml",
            ],
            "--max-message lots: not a byte size",
        ),
        (
            &["calibrate", "--backend", "cpu", "--tp", "3", "-o", "x.yaml"],
            "--tp 3 must divide the 8 heads",
        ),
        (
            &[
                "plan",
                "--nodes",
                "1",
                "--calibration",
                "clusters/h100-sxm-80g.yaml",
            ],
            "has no `calibration:` section",
        ),
        (
            &["validate", "--backend", "cpu", "--tp", "3"],
            "--tp 3 must divide the 8 attention heads",
        ),
    ];
    for (args, want) in cases {
        let out = tpsim().args(*args).args(TINY).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn one_cpu_rank_says_collectives_were_not_measured_and_keeps_datasheet_links() {
    let dir = std::env::temp_dir().join(format!("tpsim-cal1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("one.yaml");
    let mut args: Vec<&str> = QUICK.to_vec();
    let ranks = args.iter().position(|a| *a == "--ranks").unwrap();
    args[ranks + 1] = "1";
    let out = tpsim()
        .arg("calibrate")
        .args(TINY)
        .args(&args)
        .args(["--tp", "1", "--output"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("collectives: not measured (one device)"),
        "{stdout}"
    );
    let profile: GpuProfile =
        yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let datasheet: GpuProfile =
        yaml_serde::from_str(&std::fs::read_to_string("clusters/h100-sxm-80g.yaml").unwrap())
            .unwrap();
    let calibration = profile.calibration.unwrap();
    assert!(calibration.collectives.is_empty());
    assert!(
        calibration
            .notes
            .iter()
            .any(|n| n.contains("could not be measured"))
    );
    assert_eq!(profile.nvlink_gb_per_s, datasheet.nvlink_gb_per_s);
    assert_eq!(profile.nvlink_latency_us, datasheet.nvlink_latency_us);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_calibrate_and_validate_flags_are_consistent() {
    // clap checks flag definitions only in debug builds; `cargo test --release` needs this.
    use clap::CommandFactory;
    tpsim::cli::Cli::command().debug_assert();
}

/// Runs tpsim with `args` + TINY and checks it failed with exit 2, one `error:` line naming
/// `want`, no panic, and nothing measured (no backend line, no calibration).
fn refused_up_front(args: &[&str], want: &str) -> String {
    let out = tpsim().args(args).args(TINY).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(want), "{args:?}: want {want:?} in {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(!stderr.contains("backend: "), "{args:?}: {stderr}");
    assert!(!stderr.contains("calibrating"), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    stderr
}

const CPU_VALIDATE: &[&str] = &["validate", "--backend", "cpu", "--reps", "1"];

#[test]
fn validate_refuses_bad_tp_micro_batch_and_sequence_parallel_before_measuring() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--tp", "2", "--micro-batch", "0"],
            "--micro-batch 0 must be at least 1",
        ),
        (&["--tp", "0"], "--tp 0 must be at least 1"),
        (
            &["--tp", "1", "--sequence-parallel"],
            "--sequence-parallel needs --tp 2 or more",
        ),
    ];
    for (args, want) in cases {
        let mut all = CPU_VALIDATE.to_vec();
        all.extend(args.iter().copied());
        let stderr = refused_up_front(&all, want);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}

#[test]
fn validate_tp_and_top_are_alternatives() {
    let mut all = CPU_VALIDATE.to_vec();
    all.extend(["--tp", "2", "--top", "3"]);
    refused_up_front(&all, "cannot be used with");
}

#[test]
fn calibrate_checks_the_output_path_before_measuring() {
    let dir = std::env::temp_dir().join(format!("tpsim-calout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let under_file = file.join("profile.yaml");
    let dir_text = dir.to_str().unwrap().to_string();
    let under_text = under_file.to_str().unwrap().to_string();
    for (output, want) in [
        ("/proc/x".to_string(), "cannot write there".to_string()),
        (
            under_text.clone(),
            format!("{} is a file, not a folder", file.display()),
        ),
        (dir_text.clone(), "is a directory".to_string()),
    ] {
        let mut all = vec!["calibrate"];
        all.extend(QUICK.iter().copied());
        all.extend(["--output", output.as_str()]);
        let stderr = refused_up_front(&all, &format!("--output {output}: {want}"));
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert!(!under_file.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn byte_size_and_sweep_errors_quote_the_value_as_typed_and_state_the_rule() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "--max-message",
            "3GiB",
            "--max-message 3GiB is over the CPU backend's limit of 1GiB",
        ),
        (
            "--max-message",
            "0",
            "--max-message 0: must be at least 1 byte",
        ),
        (
            "--copy-bytes",
            "1TiB",
            "--copy-bytes 1TiB is over the CPU backend's limit of 1GiB",
        ),
        ("--sweep", "0", "--sweep 0: edge lengths must be at least 1"),
        (
            "--sweep",
            "64",
            "--sweep 64: the GEMM curve fit needs at least two",
        ),
    ];
    for (flag, value, want) in cases {
        let stderr = refused_up_front(
            &[
                "calibrate",
                "--backend",
                "cpu",
                "--reps",
                "1",
                flag,
                value,
                "-o",
                "never-written.yaml",
            ],
            want,
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!stderr.contains("not a byte size"), "{stderr}");
        assert!(!stderr.contains('['), "{stderr}");
    }
    assert!(!std::path::Path::new("never-written.yaml").exists());
}

#[test]
fn validate_top_caps_the_plans_micro_batch_on_the_cpu_and_says_so() {
    let start = std::time::Instant::now();
    let mut args = TINY.to_vec();
    args.extend(["--top", "2", "--warmup", "0", "--reps", "1"]);
    let out = tpsim()
        .args([
            "validate",
            "--backend",
            "cpu",
            "--ranks",
            "2",
            "--format",
            "json",
        ])
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("instead of the plan's"), "{stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert!(row["micro_batch"].as_u64().unwrap() <= 4, "{row}");
        assert!(
            row["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains("of the plan's")),
            "{row}"
        );
    }
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
}
