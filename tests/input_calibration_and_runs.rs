//! Regressions from the hostile-input report on calibrated profiles, `validate` and runs files
//! (each test names the finding it guards: A4, A6, B1, B2, B3).

mod common;
use common::{ROOT, Run, assert_one_line_error, run_in, scratch};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SUITE: &str = "calruns";

/// A small model the CPU measures in milliseconds.
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

/// A CPU-calibrated profile written by this build, made once per test run.
fn calibrated_profile() -> &'static str {
    static PROFILE: OnceLock<String> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let dir = scratch(SUITE, "calibration");
        let mut args = vec!["calibrate"];
        args.extend(TINY);
        args.extend([
            "--backend",
            "cpu",
            "--ranks",
            "2",
            "--tp",
            "1,2",
            "--sweep",
            "16,32,64",
            "--max-message",
            "64KiB",
            "--copy-bytes",
            "1MiB",
            "--warmup",
            "0",
            "--reps",
            "1",
            "-o",
            "cal.yaml",
        ]);
        let r = run_in(&dir, &args);
        assert_eq!(r.code, 0, "calibrate: {}", r.stderr);
        std::fs::read_to_string(dir.join("cal.yaml")).unwrap()
    })
}

/// Writes `text` as `name` in a fresh scratch directory and returns that directory.
fn write_scratch(test: &str, name: &str, text: &str) -> PathBuf {
    let dir = scratch(SUITE, test);
    std::fs::write(dir.join(name), text).unwrap();
    dir
}

/// `eval` of the tiny model on one node at tp 2 with the calibrated profile `profile`.
fn eval_calibrated(dir: &Path, profile: &str, extra: &[&str]) -> Run {
    let mut args = vec!["eval", "--calibration", profile];
    args.extend(TINY);
    args.extend(["--nodes", "1", "--global-batch", "8", "--tp", "2"]);
    args.extend(extra);
    run_in(dir, &args)
}

/// A4: a calibrated profile measures bf16 GEMMs only, so it must not carry the datasheet's
/// FP8/FP4 peaks, and low precision on it is refused naming the profile and bf16 (it printed
/// MFU 241% on a CPU twin).
#[test]
fn a4_low_precision_on_a_calibrated_profile_is_refused() {
    let profile = calibrated_profile();
    for key in ["peak_fp8_tflops", "peak_fp4_tflops", "fp8_gemm_efficiency"] {
        assert!(
            !profile.lines().any(|l| l.starts_with(&format!("{key}:"))),
            "{key} kept in:\n{profile}"
        );
    }
    assert!(
        profile
            .contains("peak_fp8_tflops 1978.9, fp8_gemm_efficiency 0.709 of h100-sxm-80g not kept"),
        "the profile's notes should say what was dropped"
    );
    let dir = write_scratch("a4", "cal.yaml", profile);
    let bf16 = eval_calibrated(&dir, "cal.yaml", &[]);
    assert!(bf16.code == 0 || bf16.code == 1, "bf16: {}", bf16.stderr);
    for precision in ["fp8", "mxfp8", "nvfp4"] {
        let r = eval_calibrated(&dir, "cal.yaml", &["--precision", precision]);
        assert_one_line_error(
            &r,
            &[
                &format!("--precision {precision}"),
                "calibrated-cpu",
                "use bf16",
            ],
            &[],
            precision,
        );
    }
    // A CPU twin written before the fix, with the H100's FP8 peak beside its measured one.
    let legacy = profile.replacen(
        "gemm_efficiency:",
        "peak_fp8_tflops: 1978.9\nfp8_gemm_efficiency: 0.709\ngemm_efficiency:",
        1,
    );
    std::fs::write(dir.join("old.yaml"), legacy).unwrap();
    for extra in [&[][..], &["--precision", "fp8"][..]] {
        let r = eval_calibrated(&dir, "old.yaml", extra);
        assert_one_line_error(
            &r,
            &[
                "--calibration old.yaml",
                "peak_fp8_tflops 1978.9",
                "never measured",
                "tpsim calibrate",
            ],
            &[],
            "legacy CPU twin",
        );
    }
}

/// A6: `validate --ranks 2 --tp 4` ran 4 ranks without a word.
#[test]
fn a6_validate_refuses_fewer_ranks_than_the_tp_split() {
    let dir = scratch(SUITE, "a6");
    let mut args = vec![
        "validate",
        "--backend",
        "cpu",
        "--warmup",
        "0",
        "--reps",
        "1",
    ];
    args.extend(TINY);
    let with = |extra: &[&'static str]| {
        let mut all = args.clone();
        all.extend(extra);
        run_in(&dir, &all)
    };
    let r = with(&["--ranks", "2", "--tp", "4"]);
    assert_one_line_error(
        &r,
        &["--ranks 2", "--tp 4", "give --ranks 4"],
        &[],
        "--ranks 2 --tp 4",
    );
    // The search's splits are checked too (this tiny model's top plans use tp 1 and 2).
    let r = with(&["--ranks", "1", "--top", "2"]);
    assert_one_line_error(&r, &["--ranks 1", "tp 2", "give --ranks 2"], &[], "search");
    // As many ranks as the split, or more, still run.
    let r = with(&["--ranks", "4", "--tp", "4", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(rows[0]["ranks_run"].as_u64(), Some(4));
}

/// The header of `validation/modern_runs.yaml` and its first run: a one-run current-stack file.
fn one_modern_run() -> (String, String) {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("validation/modern_runs.yaml")).unwrap();
    let (head, runs) = text.split_once("\nruns:\n").unwrap();
    let first = match runs[2..].find("\n- id: ") {
        Some(end) => &runs[..end + 3],
        None => runs,
    };
    let id = first
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("- id: ")
        .to_string();
    (format!("{head}\nruns:\n{first}\n"), id)
}

/// B1: a runs file whose GPU count disagrees with its plan was told "the cluster has 40" and
/// `--dp 40`, a flag `accuracy` does not have; it must name the file's keys and value.
#[test]
fn b1_a_gpu_count_that_disagrees_with_the_plan_names_the_runs_file_keys() {
    let (file, id) = one_modern_run();
    assert!(file.contains("    num_gpus: 8\n") && file.contains("    dp: 8\n"));
    let dir = write_scratch(
        "b1",
        "runs.yaml",
        &file.replacen("    num_gpus: 8\n", "    num_gpus: 9\n", 1),
    );
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml", "--run", &id]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for needle in [
        "hardware.num_gpus 9",
        "plan.dp 8",
        "= 8 GPUs",
        "change hardware.num_gpus to 8",
        "plan.dp to 9",
    ] {
        assert!(r.stderr.contains(needle), "no {needle:?} in: {}", r.stderr);
    }
    for wrong in ["--dp", "cluster has"] {
        assert!(!r.stderr.contains(wrong), "{wrong:?} in: {}", r.stderr);
    }
    let r = run_in(
        &dir,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let note = rows[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("hardware.num_gpus 9 is not plan.tp 1"),
        "{note}"
    );
    // Whole nodes are said in the file's keys too.
    let dir = write_scratch(
        "b1-nodes",
        "runs.yaml",
        &file.replacen("    gpus_per_node: 4\n", "    gpus_per_node: 3\n", 1),
    );
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml", "--run", &id]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("hardware.num_gpus 8 is not whole nodes of hardware.gpus_per_node 3"),
        "{}",
        r.stderr
    );
}

/// B2: duplicate run ids and unknown keys in a runs file were accepted silently.
#[test]
fn b2_runs_files_refuse_duplicate_ids_and_unknown_keys_at_their_line() {
    let (file, id) = one_modern_run();
    let run_line = file.lines().position(|l| l.starts_with("- id: ")).unwrap() + 1;
    let first_run = &file[file.find("\n- id: ").unwrap() + 1..];
    let twice = format!("{file}{first_run}");
    let second_line = run_line + first_run.lines().count();
    let dir = write_scratch("b2", "dup.yaml", &twice);
    for extra in [&[][..], &["--run", id.as_str()][..]] {
        let r = run_in(
            &dir,
            &[&["accuracy", "--runs", "dup.yaml"][..], extra].concat(),
        );
        assert_one_line_error(
            &r,
            &[
                &format!(
                    "dup.yaml:{second_line}: run id {id} is given twice (first at line {run_line})"
                ),
                "rename or remove one",
            ],
            &[],
            "duplicate id",
        );
    }
    // An unknown key, at any level, with its line.
    for (after, key) in [
        ("  task: pretrain\n", "zzz"),
        ("    num_gpus: 8\n", "num_gpu"),
    ] {
        let text = file.replacen(
            after,
            &format!(
                "{after}{}{key}: 1\n",
                &after[..after.len() - after.trim_start().len()]
            ),
            1,
        );
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap()
            + 1;
        std::fs::write(dir.join("extra.yaml"), text).unwrap();
        let r = run_in(&dir, &["accuracy", "--runs", "extra.yaml"]);
        assert_one_line_error(
            &r,
            &[
                &format!("extra.yaml:{line}:"),
                &format!("unknown field `{key}`"),
            ],
            &[],
            key,
        );
    }
    // The published-runs format: the same run twice.
    let published =
        std::fs::read_to_string(Path::new(ROOT).join("validation/published_runs.yaml")).unwrap();
    let start = published.find("\n- ").unwrap() + 1;
    let end = published[start + 2..]
        .find("\n- ")
        .map_or(published.len(), |e| start + 2 + e + 1);
    let twice = format!("{}{}", &published[..end], &published[start..end]);
    std::fs::write(dir.join("published.yaml"), twice).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "published.yaml"]);
    assert_one_line_error(&r, &["published.yaml:", "is given twice"], &[], "published");
}

/// B2's guard: the repository's own runs file keeps loading under the stricter parser.
#[test]
fn b2_the_bundled_modern_runs_file_parses_with_every_key_known() {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("validation/modern_runs.yaml")).unwrap();
    let file = tpsim::modern_runs::parse_runs_file(&text, "validation/modern_runs.yaml").unwrap();
    assert!(file.runs.len() > 300);
}

/// B3: a calibration section with an unknown backend, a GEMM efficiency of 50 (5000% of the
/// peak) or no shard-shape GEMMs was accepted silently.
#[test]
fn b3_calibration_sections_are_checked_for_backend_efficiency_and_shapes() {
    let profile = calibrated_profile();
    let shapes_at = profile.find("  gemm_shapes:\n").unwrap();
    let sweep_at = profile.find("  gemm_sweep:\n").unwrap();
    let efficiency_at = shapes_at + profile[shapes_at..].find("    efficiency: ").unwrap();
    let efficiency_end = efficiency_at + profile[efficiency_at..].find('\n').unwrap();
    let cases = [
        (
            profile.replacen("  backend: cpu\n", "  backend: tpu\n", 1),
            vec![
                "calibration: backend: tpu is not a calibration backend",
                "cpu or cuda",
            ],
        ),
        (
            format!(
                "{}    efficiency: 50.0{}",
                &profile[..efficiency_at],
                &profile[efficiency_end..]
            ),
            vec![
                "calibration: gemm_shapes[0].efficiency: 50 is outside 0 to 1",
                "at most 1",
            ],
        ),
        (
            format!(
                "{}  gemm_shapes: []\n{}",
                &profile[..shapes_at],
                &profile[sweep_at..]
            ),
            vec!["calibration: gemm_shapes: is empty", "tpsim calibrate"],
        ),
    ];
    let dir = scratch(SUITE, "b3");
    for (text, needles) in cases {
        std::fs::write(dir.join("c.yaml"), text).unwrap();
        let r = eval_calibrated(&dir, "c.yaml", &[]);
        assert_one_line_error(&r, &needles, &[], needles[0]);
    }
}

/// The bundled published-runs file (step times, `validation/published_runs.yaml`) cut to its
/// header and first run: Megatron SC'21's 1.7B GPT, tp 1 x pp 1 x dp 32 on 32 GPUs of 8 a node.
fn one_published_run() -> String {
    let all =
        std::fs::read_to_string(Path::new(ROOT).join("validation/published_runs.yaml")).unwrap();
    let first = all.find("\n- id: ").unwrap() + 1;
    let end = all[first..]
        .find("\n- id: ")
        .map_or(all.len(), |e| first + e + 1);
    let text = all[..end].to_string();
    for line in [
        "    gpus_per_node: 8\n",
        "    num_gpus: 32\n",
        "    tp: 1\n",
        "    pp: 1\n",
        "    dp: 32\n",
        "    cp: null\n",
    ] {
        assert!(
            text.contains(line),
            "no {line:?} in the first published run"
        );
    }
    text
}

/// B1 in the published-runs format: a run whose num_gpus is not tp x pp x dp was told "the
/// cluster has 40" (its GPUs rounded up to whole nodes) and `--dp 40`, a flag `accuracy` does not
/// have; it must name the file's keys and values, and the key to change.
#[test]
fn b1_published_runs_gpu_count_against_the_plan_names_the_file_keys() {
    let file = one_published_run();
    let dir = scratch(SUITE, "b1-published");
    let cases: [(String, Vec<&str>); 3] = [
        // The hostile report's acc/gpus33.yaml.
        (
            file.replacen("    num_gpus: 32\n", "    num_gpus: 33\n", 1),
            vec![
                "hardware.num_gpus 33 is not plan.tp 1 x plan.pp 1 x plan.dp 32 = 32 GPUs",
                "change hardware.num_gpus to 32",
                "or plan.dp to 33",
            ],
        ),
        // No plan.dp gives 32 GPUs with tp 3: the fix names tp and pp instead.
        (
            file.replacen("    tp: 1\n", "    tp: 3\n", 1),
            vec![
                "hardware.num_gpus 32 is not plan.tp 3 x plan.pp 1 x plan.dp 32 = 96 GPUs",
                "change hardware.num_gpus to 96",
                "plan.tp and plan.pp",
            ],
        ),
        // 4 GPUs of a node of 8: not whole nodes (it was planned on a cluster of 8).
        (
            file.replacen("    num_gpus: 32\n", "    num_gpus: 4\n", 1)
                .replacen("    dp: 32\n", "    dp: 4\n", 1),
            vec![
                "hardware.num_gpus 4 is not whole nodes of hardware.gpus_per_node 8",
                "change hardware.gpus_per_node",
                "such as 4",
            ],
        ),
    ];
    for (text, needles) in cases {
        std::fs::write(dir.join("runs.yaml"), text).unwrap();
        let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
        assert_one_line_error(
            &r,
            &[&["run megatron-sc21-t1-1.7b: "][..], &needles[..]].concat(),
            &["--dp", "--tp", "cluster has"],
            needles[0],
        );
    }
    // The fix the message gives is one the file accepts (the published TFLOP/s, of 32 GPUs,
    // would contradict the same step on 4: dropped with them).
    let fixed = file
        .replacen("    tflops_per_gpu: 137\n", "    tflops_per_gpu: null\n", 1)
        .replacen("    num_gpus: 32\n", "    num_gpus: 4\n", 1)
        .replacen("    dp: 32\n", "    dp: 4\n", 1)
        .replacen("    gpus_per_node: 8\n", "    gpus_per_node: 4\n", 1);
    std::fs::write(dir.join("runs.yaml"), fixed).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// B2 in the published-runs format: unknown keys, at any level, were dropped without a word
/// (a typo such as `num_gpu:` left the run on the published value silently); they are refused at
/// file:line:column like every other input file's.
#[test]
fn b2_published_runs_files_refuse_unknown_keys_at_their_line() {
    let file = one_published_run();
    let dir = scratch(SUITE, "b2-published");
    for (after, key) in [
        ("  completeness: full_plan\n", "zzz"),
        ("    num_gpus: 32\n", "num_gpu"),
        ("    dp: 32\n", "data_parallel"),
        ("    tflops_per_gpu: 137\n", "iteration_time"),
    ] {
        assert!(file.contains(after), "no {after:?}");
        let indent = &after[..after.len() - after.trim_start().len()];
        let text = file.replacen(after, &format!("{after}{indent}{key}: 1\n"), 1);
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap()
            + 1;
        std::fs::write(dir.join("extra.yaml"), text).unwrap();
        let r = run_in(&dir, &["accuracy", "--runs", "extra.yaml"]);
        assert_one_line_error(
            &r,
            &[
                &format!("extra.yaml:{line}:"),
                &format!("unknown field `{key}`"),
            ],
            &[],
            key,
        );
    }
    // A context-parallel degree was read as a key and dropped: the run was planned without it.
    let text = file.replacen("    cp: null\n", "    cp: 2\n", 1);
    std::fs::write(dir.join("cp.yaml"), text).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "cp.yaml"]);
    assert_one_line_error(
        &r,
        &["plan.cp: 2", "cp null or 1", "modern_runs.yaml"],
        &[],
        "cp 2",
    );
    // cp 1 is no context parallelism: accepted, and the same prediction as null.
    let plain = write_scratch("b2-published-cp1", "runs.yaml", &file);
    let r = run_in(
        &plain,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(
        plain.join("runs.yaml"),
        file.replacen("    cp: null\n", "    cp: 1\n", 1),
    )
    .unwrap();
    let one = run_in(
        &plain,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(one.stdout, r.stdout);
}
