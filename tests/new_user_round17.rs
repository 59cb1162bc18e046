//! Regressions from the seventeenth review of valid usage by a new user: an ML infrastructure
//! engineer follows the README and each subcommand's `--help`, then plans Llama 3, Mixtral,
//! GPT-OSS, DeepSeek-V3 and Nemotron 3 on H100, H200, B200 and GB200/GB300 clusters and carries
//! the winners to `eval`, `compare`, `report`, `sweep` and `--emit` (each test names the finding).

mod common;
use common::{ROOT, run};
use std::path::Path;

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// The example command lines under `Examples:` in a subcommand's `--help` (each starts with
/// `tpsim`; the `# ...` comment cut off).
fn help_examples(subcommand: &str) -> Vec<Vec<String>> {
    let help = stdout_of(&[subcommand, "--help"]);
    let examples = help
        .split("Examples:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Examples: in `tpsim {subcommand} --help`"));
    // The help wraps long lines: a line that starts neither an example nor a comment continues
    // the example above it; a blank line ends the examples.
    let mut lines: Vec<String> = Vec::new();
    for line in examples.lines().map(str::trim) {
        if line.is_empty() && !lines.is_empty() {
            break;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match lines.last_mut() {
            Some(last) if !line.starts_with("tpsim ") && !last.contains('#') => {
                last.push(' ');
                last.push_str(line);
            }
            _ if line.starts_with("tpsim ") => lines.push(line.to_string()),
            _ => break,
        }
    }
    lines
        .iter()
        .map(|l| {
            l.split('#').next().unwrap()["tpsim ".len()..]
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// `tpsim compare --help` showed `tpsim compare --plan plans/a.yaml --plan plans/b.yaml` as the
/// way to compare two saved plans, but neither file exists (the example failed with "cannot read
/// plans/a.yaml"). Every example in `compare --help` now runs as written from the repository root.
#[test]
fn compare_help_examples_run_as_written() {
    let examples = help_examples("compare");
    assert!(examples.len() >= 2, "{examples:?}");
    assert!(
        examples.iter().any(|e| e.iter().any(|a| a == "--plan")),
        "no saved-plan example: {examples:?}"
    );
    for example in &examples {
        let args: Vec<&str> = example.iter().map(String::as_str).collect();
        assert_eq!(args[0], "compare", "{args:?}");
        let r = run(&args);
        assert_eq!(r.code, 0, "`tpsim {}` failed: {}", args.join(" "), r.stderr);
    }
}

/// The input files the subcommands' `--help` texts name (after `--plan`, `--hf-config`,
/// `--runs`, `report`, `@`) exist in the repository, so a newcomer can paste them.
#[test]
fn help_texts_name_only_files_that_exist() {
    for sub in [
        "plan", "eval", "report", "accuracy", "sweep", "compare", "validate",
    ] {
        let help = stdout_of(&[sub, "--help"]);
        let words: Vec<&str> = help.split_whitespace().collect();
        for pair in words.windows(2) {
            let file = match pair[0] {
                "--plan" | "--hf-config" | "--runs" | "report" => pair[1],
                _ => match pair[1].strip_prefix('@') {
                    Some(f) if pair[0] == "--megatron-args" => f,
                    _ => continue,
                },
            };
            let file = file.trim_end_matches([')', ',', ';']);
            if !file.contains('/') || file.starts_with('<') || file.contains("FILE") {
                continue;
            }
            assert!(
                Path::new(ROOT).join(file).exists(),
                "`tpsim {sub} --help` names {file}, which does not exist"
            );
        }
    }
}

/// `plan --model mixtral-8x7b-v0.1` (the Hub's name, and the name of the bundled sample
/// models/hf/mixtral-8x7b-v0.1.json) or `--model deepseek-v3-671b` answered "unknown model" with
/// the list of 21 names and no suggestion, while `--model llama-3-70b` got "did you mean
/// llama3-70b?". A name that extends a bundled one now gets that one suggested too.
#[test]
fn a_hub_name_with_a_suffix_suggests_the_bundled_model() {
    for (asked, meant) in [
        ("mixtral-8x7b-v0.1", "mixtral-8x7b"),
        ("deepseek-v3-671b", "deepseek-v3"),
        ("Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
    ] {
        let r = run(&["plan", "--model", asked, "--nodes", "8"]);
        assert_eq!(r.code, 2, "{asked}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("(did you mean {meant}?)")),
            "{asked}: {}",
            r.stderr
        );
    }
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80gb",
        "--nodes",
        "8",
    ]);
    assert!(
        r.stderr.contains("(did you mean h100-sxm-80g?)"),
        "{}",
        r.stderr
    );
}

/// `plan --gpu gb300-nvl72` (and `--gpu h200-sxm-141g`) said its range came from "321 runs, dense
/// models, every framework and GPU; none measured on gb300-nvl72", while
/// `tpsim accuracy --runs validation/modern_runs.yaml` predicts GB300 runs (4 dense, Megatron-Bridge)
/// and H200 runs (torchtitan), and those runs are among the 321: the family has too few runs for
/// a band of its own (scripts/vtrain_residuals.py's MIN_RUNS), not none. The range line now says
/// so.
#[test]
fn the_range_line_does_not_deny_the_runs_accuracy_predicts() {
    let runs = common::json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    let predicted_on = |profile: &str| {
        runs.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["gpu_profile"] == profile && !r["error"].is_null())
            .count()
    };
    for (gpu, family) in [("gb300-nvl72", "gb300-nvl72"), ("h200-sxm-141g", "h200")] {
        assert!(predicted_on(gpu) > 0, "no {gpu} run predicted");
        let out = stdout_of(&[
            "plan",
            "--model",
            "llama3-8b",
            "--gpu",
            gpu,
            "--nodes",
            "2",
            "--global-batch",
            "64",
            "--top",
            "2",
        ]);
        let range = out
            .lines()
            .find(|l| l.starts_with("range:"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(
            !range.contains(&format!("none measured on {family}")),
            "{gpu}: {range}"
        );
        assert!(
            range.contains(&format!(
                "fewer than 8 of them on {family}, too few for a band of its own"
            )),
            "{gpu}: {range}"
        );
    }
    let script = std::fs::read_to_string(Path::new(ROOT).join("scripts/vtrain_residuals.py"))
        .expect("scripts/vtrain_residuals.py");
    assert!(
        script.contains("\nMIN_RUNS = 8\n"),
        "the range line says 'fewer than 8': keep it in step with MIN_RUNS"
    );
}
