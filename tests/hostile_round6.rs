//! Hostile input, round 6: defects an adversarial audit of the built binary found in YAML and
//! JSON inputs, launch lines, edge numbers and output paths, one regression test each. Every error
//! case checks exit 2, one line (so no panic or backtrace) and the words that name the value, the
//! rule and the fix.

mod common;

use common::*;

/// The bundled current-stack runs file cut to its header and first run, with `edit` applied to
/// that run's lines.
fn one_modern_run(edit: impl Fn(&str) -> String) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let runs_at = text.find("\nruns:\n").expect("a runs: key") + "\nruns:\n".len();
    let first = &text[runs_at..];
    let end = first[2..].find("\n- id:").map_or(first.len(), |i| i + 3);
    format!("{}{}", &text[..runs_at], edit(&first[..end]))
}

/// `accuracy --runs` on a current-stack file printed a published tokens/s of 1e-320 as `0`, its
/// error as `+inf` and the summary as `median |error| inf%`; a NaN peak memory printed `NaN`.
/// The published numbers a prediction is divided by now have a range, and a run outside it is
/// refused with its id, key and range.
#[test]
fn published_numbers_of_a_current_stack_run_are_in_range() {
    let dir = scratch("round6", "modern-numbers");
    for (from, to, key) in [
        (
            "tokens_per_s_per_gpu: 37556",
            "tokens_per_s_per_gpu: 1e-320",
            "results.tokens_per_s_per_gpu: 1e-320",
        ),
        (
            "tokens_per_s_per_gpu: 37556",
            "tokens_per_s_per_gpu: 1e300",
            "results.tokens_per_s_per_gpu: 1e300",
        ),
        (
            "tokens_per_s_per_gpu: 37556",
            "tokens_per_s_per_gpu: .nan",
            "results.tokens_per_s_per_gpu: NaN",
        ),
        (
            "peak_memory_gb: null",
            "peak_memory_gib: .nan",
            "results.peak_memory_gib: NaN",
        ),
        (
            "peak_memory_gb: null",
            "peak_memory_gib: 1e-320",
            "results.peak_memory_gib: 1e-320",
        ),
        (
            "peak_memory_gb: null",
            "peak_memory_gib: -4",
            "results.peak_memory_gib: -4",
        ),
    ] {
        let text = one_modern_run(|run| {
            assert!(run.contains(from), "the first run has {from}");
            run.replacen(from, to, 1)
        });
        std::fs::write(dir.join("runs.yaml"), text).unwrap();
        for extra in [
            &[][..],
            &["--format", "json"][..],
            &[
                "--run",
                "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128",
            ][..],
        ] {
            let mut args = vec!["accuracy", "--runs", "runs.yaml"];
            args.extend_from_slice(extra);
            let r = run_in(&dir, &args);
            assert_one_line_error(
                &r,
                &[
                    "runs.yaml: run mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128",
                    key,
                    "is outside",
                    "give a value in that range",
                ],
                &["inf%", "panicked"],
                &format!("{to} {extra:?}"),
            );
        }
    }
    // The run as published still predicts.
    let text =
        one_modern_run(|run| run.replacen("peak_memory_gb: null", "peak_memory_gib: 84.9", 1));
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("84.9 / "), "{}", r.stdout);
}

/// `report PLAN --nodes 64` on a plan for 32 nodes answered "(e.g. --dp 4)", a flag `report`
/// does not take (it reads the degrees from the file only, and refuses `--dp` as an unexpected
/// argument). Its fix now names the file's key, as `compare --plan` does.
#[test]
fn report_offers_the_plan_files_keys_not_flags_it_lacks() {
    let plan = format!("{ROOT}/plans/best-512b-32nodes.yaml");
    let dir = scratch("round6", "report-fix");
    for (nodes, fix) in [("64", "(e.g. dp: 4)"), ("1", "change tp, cp or pp")] {
        let r = run_in(&dir, &["report", &plan, "--out", "r", "--nodes", nodes]);
        assert_one_line_error(
            &r,
            &["but the cluster has", fix],
            &["--dp", "--tp", "--pp"],
            &format!("report --nodes {nodes}"),
        );
        assert!(!dir.join("r").exists(), "no report written");
    }
    // `report` has no --dp, which is why the fix must not offer it.
    let r = run_in(&dir, &["report", &plan, "--out", "r", "--dp", "4"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("unexpected argument '--dp'"),
        "{}",
        r.stderr
    );
}
