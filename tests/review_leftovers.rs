//! Leftovers of the hostile-input and cross-command reviews, one regression test (or a few) per
//! finding, each run on the built binary: the exit code, the one line an error prints, and the
//! numbers two commands must agree on.

mod common;

use common::*;
use std::path::Path;

fn lines_of(r: &Run) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    )
}

/// Writes a junk file under each of `names` in `dir`, as a user's folder might hold.
fn shadow(dir: &Path, names: &[&str]) {
    for name in names {
        std::fs::write(dir.join(name), "junk: 1\n").unwrap();
    }
}

// ---- 1. commands that pick a bundled spec themselves read the bundled one -------------------

#[test]
fn accuracy_reads_its_bundled_gpus_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "accuracy-shadow");
    shadow(&dir, &["a100-sxm-80g", "h100-sxm-80g", "jean-zay-a100-80g"]);
    let here = run_in(&dir, &["accuracy", "--format", "json"]);
    let home = run(&["accuracy", "--format", "json"]);
    assert_eq!(here.code, 0, "{}", lines_of(&here));
    assert!(!here.stderr.contains("names both"), "{}", here.stderr);
    assert_eq!(
        here.stdout, home.stdout,
        "the folder's files changed the result"
    );
}

#[test]
fn modern_accuracy_reads_its_bundled_gpus_and_models_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "modern-shadow");
    shadow(
        &dir,
        &[
            "h100-sxm-80g",
            "b200-sxm-180g",
            "deepseek-v3",
            "qwen3-30b-a3b",
        ],
    );
    let runs = Path::new(ROOT).join("validation/modern_runs.yaml");
    let runs = runs.to_str().unwrap();
    let here = run_in(&dir, &["accuracy", "--runs", runs, "--format", "json"]);
    let home = run(&["accuracy", "--runs", runs, "--format", "json"]);
    assert_eq!(here.code, 0, "{}", lines_of(&here));
    assert!(!here.stdout.contains("names both"), "{}", here.stdout);
    assert_eq!(
        here.stdout, home.stdout,
        "the folder's files changed the result"
    );
}

const TINY_CALIBRATION: [&str; 13] = [
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
];

#[test]
fn calibrate_without_gpu_uses_the_bundled_base_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "calibrate-shadow");
    shadow(&dir, &["h100-sxm-80g"]);
    let mut args = TINY_CALIBRATION.to_vec();
    args.extend(["--output", "out.yaml"]);
    let r = run_in(&dir, &args);
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let profile = std::fs::read_to_string(dir.join("out.yaml")).unwrap();
    assert!(
        profile.contains("unmeasured numbers from h100-sxm-80g"),
        "{profile}"
    );
    // The junk file is untouched, and naming it with --gpu still says it is ambiguous.
    assert_eq!(
        std::fs::read_to_string(dir.join("h100-sxm-80g")).unwrap(),
        "junk: 1\n"
    );
    let mut args = TINY_CALIBRATION.to_vec();
    args.extend(["--gpu", "h100-sxm-80g", "--output", "out2.yaml"]);
    let r = run_in(&dir, &args);
    assert_one_line_error(
        &r,
        &["--gpu h100-sxm-80g", "./h100-sxm-80g"],
        &[],
        "--gpu named",
    );
    assert!(!dir.join("out2.yaml").exists());
}
