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
    // Said as such since round 8b (was clap's "unexpected argument '--dp'").
    assert!(
        r.stderr.contains("report takes no --dp")
            && r.stderr.contains("change the file's dp: line"),
        "{}",
        r.stderr
    );
}

/// `nodes: 1e400` in a plan file (or `layers: 1e400` in a model file) was refused as
/// `invalid type: string "1e400"`, a string the user never wrote: the number is past f64, so the
/// YAML parser keeps it as text. The message now says so. A whole number past 128 bits was named
/// with serde's Rust type (`99999999999999999999 as u128`), which it no longer is.
#[test]
fn a_number_too_large_for_yaml_is_called_that_not_a_string() {
    let dir = scratch("round6", "yaml-overflow");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let model = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    let model_layers = model
        .lines()
        .find(|l| l.starts_with("layers:"))
        .unwrap()
        .to_string();
    for (file, text, key) in [
        (
            "p.yaml",
            plan.replacen("\nnodes: 32\n", "\nnodes: 1e400\n", 1),
            "nodes",
        ),
        (
            "p.yaml",
            plan.replacen("\nnodes: 32\n", "\nnodes: -1e400\n", 1),
            "nodes",
        ),
        (
            "m.yaml",
            model.replacen(&model_layers, "layers: 1e400", 1),
            "layers",
        ),
    ] {
        std::fs::write(dir.join(file), &text).unwrap();
        let args: &[&str] = if file == "p.yaml" {
            &["eval", "--plan", "p.yaml"]
        } else {
            &[
                "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
            ]
        };
        let r = run_in(&dir, args);
        assert_one_line_error(
            &r,
            &[
                &format!("{key}: invalid type"),
                "1e400 is too large for any number, so YAML reads it as text",
                "give a value in range",
            ],
            &["in quotes", "panicked"],
            &format!("{file} {key}"),
        );
    }
    std::fs::write(
        dir.join("p.yaml"),
        plan.replacen("\nnodes: 32\n", "\nnodes: 99999999999999999999\n", 1),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "nodes: 99999999999999999999 is more than 4294967295, the largest whole number nodes takes",
            "e.g. nodes: 32",
        ],
        &["u128", "panicked"],
        "nodes past 128 bits",
    );
    // `inf` written as a word is not a number too large: no such claim.
    std::fs::write(
        dir.join("p.yaml"),
        plan.replacen("\nnodes: 32\n", "\nnodes: inf\n", 1),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &["nodes: invalid type: string \"inf\""],
        &["too large", "panicked"],
        "nodes: inf",
    );
}

/// `eval --plan p.yaml` with `gpu: nonexist` (or `model: nonexist`) in the file answered
/// "unknown GPU "nonexist"", not saying the name came from the file, though a path there that
/// cannot be read is named as `p.yaml: gpu: ...`. An unknown name is now named the same way.
#[test]
fn an_unknown_name_in_a_plan_file_is_named_with_the_file_and_key() {
    let dir = scratch("round6", "plan-unknown-name");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let model_at = plan.find("\nmodel:\n").unwrap() + 1;
    let gpu_at = plan.find("\ngpu: ").unwrap() + 1;
    for (text, words) in [
        (
            plan.replacen("\ngpu: h100-sxm-80g\n", "\ngpu: nonexist\n", 1),
            "p.yaml: gpu: unknown GPU \"nonexist\"; known: a100-sxm-40g, a100-sxm-80g",
        ),
        (
            format!("{}model: nonexist\n{}", &plan[..model_at], &plan[gpu_at..]),
            "p.yaml: model: unknown model \"nonexist\"; known: bloom-176b",
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), &text).unwrap();
        for args in [
            &["eval", "--plan", "p.yaml"][..],
            &["report", "p.yaml", "--out", "r"][..],
            &["compare", "--plan", "p.yaml", "--plan", "p.yaml"][..],
        ] {
            let r = run_in(&dir, args);
            assert_one_line_error(&r, &[words], &["panicked"], &format!("{args:?}"));
        }
    }
}

/// `plan --save link.yaml`, `link.yaml` a symlink to a file not written yet, replaced the link
/// with a regular file: the link the user made was lost. The plan is now written where the link
/// points, as a shell's `>` would write it, and the link stays.
#[test]
fn saving_through_a_dangling_link_keeps_the_link() {
    let dir = scratch("round6", "dangling-save");
    std::fs::create_dir_all(dir.join("plans")).unwrap();
    let link = dir.join("latest.yaml");
    std::os::unix::fs::symlink("plans/p.yaml", &link).unwrap();
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
        "--save",
        link.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    let saved = std::fs::read_to_string(dir.join("plans/p.yaml")).unwrap();
    assert!(saved.starts_with("# Written by `tpsim plan`"), "{saved}");
}

/// A launch flag given twice as `--num-layers 32 ... --num-layers=+32` was noted as "given twice
/// with different values", though Megatron-LM's argparse reads both as 32.
#[test]
fn a_launch_flag_repeated_with_the_same_number_gets_no_note() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 \
                --global-batch-size 64 --micro-batch-size 1 --bf16 --num-layers=+32";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stderr.contains("given twice"), "{}", r.stderr);
    let differs = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &line.replace("=+32", "=40"),
    ]);
    assert!(differs.stderr.contains("given twice"), "{}", differs.stderr);
}

/// A pasted launch line whose plan does not build was refused with tpsim's flag names
/// (`--cp 2 does not split the 4095-token sequence`, `--global-batch 64 is not divisible by --dp 8
/// x --micro-batch 128`), flags the user never typed. The error now speaks the line's words.
#[test]
fn a_launch_line_plan_error_names_the_megatron_flags() {
    let base =
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --global-batch-size 64 --bf16";
    for (extra, want, not) in [
        (
            "--seq-length 4095 --micro-batch-size 1 --context-parallel-size 2",
            "--context-parallel-size 2 does not split the 4095-token sequence",
            "--cp 2",
        ),
        (
            "--seq-length 4096 --micro-batch-size 128",
            "--global-batch-size 64 is not divisible by data-parallel size 8 x --micro-batch-size 128",
            "--dp 8",
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{base} {extra}"),
        ]);
        // The line's overlap note comes first; the error is the last line.
        assert_eq!(r.code, 2, "{extra}: {}", r.stderr);
        let error = r.stderr.lines().last().unwrap_or_default();
        assert!(
            error.starts_with("error: --megatron-args: ") && error.contains(want),
            "{extra}: {error}"
        );
        assert!(!error.contains(not), "{extra}: {error}");
    }
}
