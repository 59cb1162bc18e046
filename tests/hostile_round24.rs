//! Hostile input, round 24: switches of a pasted launch line given a value, the
//! gradient-accumulation count of an `accuracy --runs` file, and more. Every error case checks
//! exit 2, one line on stderr and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// A Megatron launch line for Llama-3-8B-like shapes at tp 2, with `extra` appended.
fn launch_line(extra: &str) -> String {
    format!(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 --untie-embeddings-and-output-weights --no-gradient-accumulation-fusion --tensor-model-parallel-size 2 {extra}"
    )
}

fn eval_line(extra: &str) -> Run {
    run(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        &launch_line(extra),
    ])
}

/// `--sequence-parallel=false` in a pasted line was read as the bare switch: sequence parallelism
/// on, the opposite of what it says (`--use-distributed-optimizer=0` turned ZeRO-1 on, and
/// `--torch-fsdp2-no-reshard-after-forward=false` kept the gathered weights). Megatron-LM's
/// argparse refuses a value for a store_true switch; so does tpsim now, naming the switch.
#[test]
fn a_switch_given_a_value_in_a_launch_line_is_refused() {
    for (extra, token) in [
        ("--sequence-parallel=false", "--sequence-parallel=false"),
        (
            "--use-distributed-optimizer=0",
            "--use-distributed-optimizer=0",
        ),
        (
            "--use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward=false",
            "--torch-fsdp2-no-reshard-after-forward=false",
        ),
    ] {
        let flag = token.split('=').next().unwrap();
        let value = token.split('=').nth(1).unwrap();
        assert_one_line_error(
            &eval_line(extra),
            &[
                &format!("{token:?}"),
                &format!("a value to {flag}, a switch that takes none"),
                &format!("ignored explicit argument '{value}'"),
                &format!("write {flag} to turn it on, or leave it out"),
            ],
            &[],
            token,
        );
    }
    // The bare switches still read as before.
    let r = eval_line("--sequence-parallel");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("sequence parallel on"), "{}", r.stdout);
    let r = eval_line("");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("sequence parallel off"), "{}", r.stdout);
}

/// The bundled current-stack runs file with only the run `id`, its text edited `from` → `to`.
fn one_run(id: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let runs_at = text.find("\nruns:\n").expect("a runs: key") + "\nruns:\n".len();
    let start = text
        .find(&format!("- id: {id}\n"))
        .unwrap_or_else(|| panic!("a run {id}"));
    let end = text[start + 2..]
        .find("\n- id:")
        .map_or(text.len(), |i| start + 2 + i + 1);
    let run = &text[start..end];
    assert!(run.contains(from), "{id} has {from:?}");
    format!("{}{}", &text[..runs_at], run.replacen(from, to, 1))
}

/// `accuracy --runs` of `text` (as runs.yaml in a scratch folder), as JSON: its one run's
/// reason not to predict, or None when it was predicted.
fn why_not_predicted(name: &str, text: &str) -> Option<String> {
    let dir = scratch("round24", name);
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    let r = run_in(
        &dir,
        &["accuracy", "--runs", "runs.yaml", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let rows = out.as_array().expect("a list of runs").clone();
    assert_eq!(rows.len(), 1, "{name}: {}", r.stdout);
    let row = &rows[0];
    if row["predicted_tokens_per_s_per_gpu"].is_number() {
        return None;
    }
    Some(
        row["note"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no reason in {row}"))
            .to_string(),
    )
}

const KIMI_RUN: &str = "automodel-kimi_k2-h100-256g-bf16";

/// A runs file's `ga: 0` was read as no gradient accumulation and the run predicted (40.8% off,
/// where its published `ga: 2` is 29.4%); a `ga` that does not divide gbs / dp was truncated
/// into a `--local-batch 5` (or `--local-batch 0`) the file never gave, named by a flag. Both are
/// said in the file's key.
#[test]
fn a_runs_files_accumulation_count_is_checked_in_its_key() {
    assert!(
        why_not_predicted("kimi", &one_run(KIMI_RUN, "ga: 2\n", "ga: 2\n")).is_none(),
        "the published run is predicted"
    );
    let why = why_not_predicted("ga0", &one_run(KIMI_RUN, "ga: 2\n", "ga: 0\n"))
        .expect("ga: 0 is not predicted");
    assert!(
        why.contains("plan.ga is 0") && why.contains("at least 1"),
        "{why}"
    );
    for ga in ["3", "5000"] {
        let why = why_not_predicted(
            &format!("ga{ga}"),
            &one_run(KIMI_RUN, "ga: 2\n", &format!("ga: {ga}\n")),
        )
        .unwrap_or_else(|| panic!("ga: {ga} is not predicted"));
        assert!(
            why.contains(&format!("plan.ga: {ga} does not divide the 16 sequences"))
                && why.contains("plan.gbs: 512 / plan.dp: 32"),
            "{why}"
        );
        assert!(!why.contains("--local-batch"), "{why}");
    }
}

const FP8_RUN: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128";

/// `accuracy --runs` of `text` as runs.yaml in a scratch folder.
fn accuracy_of(name: &str, text: &str) -> Run {
    let dir = scratch("round24", name);
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    run_in(&dir, &["accuracy", "--runs", "runs.yaml"])
}

/// A runs file's `precision: fp7` left the run out with the note "precision fp7" (exit 0), naming
/// neither the rule nor the fix, where a recompute typo is refused; `FP8` likewise.
#[test]
fn a_runs_files_precision_typo_is_refused_with_the_valid_ones() {
    for (given, fix) in [("fp7", "precision: bf16"), ("FP8", "precision: fp8")] {
        assert_one_line_error(
            &accuracy_of(
                &format!("precision-{given}"),
                &one_run(
                    FP8_RUN,
                    "precision: fp8\n",
                    &format!("precision: {given}\n"),
                ),
            ),
            &[
                "runs.yaml",
                &format!("plan.precision: {given} is not a precision tpsim reads"),
                "bf16, fp8, mxfp8, nvfp4",
                fix,
            ],
            &[],
            given,
        );
    }
}

/// `implied_model_flops_per_token: .nan` (or a negative one) was taken without a word: it picks
/// whether a DeepSeek run's layout has a multi-token-prediction layer, and a NaN compared as no
/// match, choosing one silently.
#[test]
fn a_runs_files_flops_per_token_must_be_a_positive_number() {
    for given in [".nan", "-1", "0"] {
        assert_one_line_error(
            &accuracy_of(
                &format!("flops{given}"),
                &one_run(
                    FP8_RUN,
                    "implied_model_flops_per_token: 51469805091.064",
                    &format!("implied_model_flops_per_token: {given}"),
                ),
            ),
            &[
                "results.implied_model_flops_per_token",
                "is outside 1 to 1e17 FLOPs",
                "null when the source does not state it",
            ],
            &[],
            given,
        );
    }
}

/// A run id holding an escape (`"\x1bx-run"`) was printed raw in the accuracy table (the
/// terminal took the escape sequence), and one holding U+202E printed its row backwards; a blank
/// id named no run. In both runs-file formats.
#[test]
fn a_run_id_with_control_characters_is_refused() {
    let id_line = format!("- id: {FP8_RUN}\n");
    for (name, id, shown, rule) in [
        (
            "esc",
            "\"\\x1bx-run\"",
            "run \\u{1b}x-run: id:",
            "control character",
        ),
        (
            "bidi",
            "\"\u{202e}x-run\"",
            "run \\u{202e}x-run: id:",
            "control character",
        ),
        ("blank", "\"  \"", "run \"  \": id:", "is blank"),
    ] {
        let r = accuracy_of(
            &format!("id-{name}"),
            &one_run(FP8_RUN, &id_line, &format!("- id: {id}\n")),
        );
        assert_one_line_error(&r, &["runs.yaml", shown, rule, "e.g. id: "], &[], name);
        assert!(r.stdout.is_empty(), "{name}: {}", r.stdout);
    }
    // The published-runs format (a list of runs) too.
    let published =
        std::fs::read_to_string(format!("{ROOT}/validation/published_runs.yaml")).unwrap();
    let first = "- id: megatron-sc21-t1-1.7b\n";
    assert!(published.contains(first));
    let r = accuracy_of(
        "published-esc",
        &published.replacen(first, "- id: \"\\x1bzz\"\n", 1),
    );
    assert_one_line_error(
        &r,
        &["run \\u{1b}zz: id:", "control character"],
        &["\u{1b}"],
        "published esc",
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

/// A model name holding U+202E (a right-to-left override) was printed as it is in every table
/// (the rest of the line shown backwards), where a control character is refused; in an error, a
/// name with one (or a tab) was escaped twice (`"h100\\tx"`), showing a backslash never typed.
#[test]
fn bidirectional_overrides_are_refused_in_names_and_escaped_once_in_errors() {
    let dir = scratch("round24", "bidi-name");
    let saved = {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--top",
                "1",
                "--save",
                "p.yaml",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::read_to_string(dir.join("p.yaml")).unwrap()
    };
    assert!(saved.contains("  name: llama3-8b\n"), "{saved}");
    std::fs::write(
        dir.join("bidi.yaml"),
        saved.replacen("  name: llama3-8b\n", "  name: \"model\u{202e}-x\"\n", 1),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "bidi.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "model.name: model\\u{202e}-x",
            "control character",
            "model.name: my-model",
        ],
        &["\u{202e}"],
        "bidi model name",
    );
    for (gpu, shown) in [
        ("h100\u{202e}-x", "unknown GPU \"h100\\u{202e}-x\""),
        ("h100\tx", "unknown GPU \"h100\\tx\""),
        ("a\"b", "unknown GPU \"a\\\"b\""),
    ] {
        let r = run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "8",
            "--gpu",
            gpu,
        ]);
        assert_one_line_error(
            &r,
            &[shown, "known: a100-sxm-40g, a100-sxm-80g"],
            &["\\\\"],
            gpu,
        );
    }
}

/// `plan --zero 3 --dp-replicas 2 --emit megatron` wrote the fastest plan, ZeRO-3 keeping the
/// gathered parameters with 2 copies (6.48 s), as `--use-torch-fsdp2
/// --torch-fsdp2-no-reshard-after-forward --num-distributed-optimizer-instances 2`: torch FSDP2
/// ignores the instances, and the line read back by `eval --megatron-args` was another plan
/// (one copy, 6.436 s). That plan is not written now: the line emitted reads back as the plan
/// and step time it was printed with. Pinned, the contradiction is an input error.
#[test]
fn emitted_copies_under_kept_gathered_zero3_read_back_as_priced() {
    let r = plan_8b(&["--zero", "3", "--dp-replicas", "2", "--emit", "megatron"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r
        .stderr
        .lines()
        .find(|l| l.starts_with("Megatron-LM configuration for "))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("--num-layers"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        !(line.contains("--use-torch-fsdp2")
            && line.contains("--num-distributed-optimizer-instances")),
        "{line}"
    );
    let back = run(&["eval", "--nodes", "4", "--megatron-args", line]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    assert!(!back.stderr.contains("is ignored"), "{}", back.stderr);
    let plan_line = back
        .stdout
        .lines()
        .find(|l| l.starts_with("plan: "))
        .unwrap()
        .trim_start_matches("plan: ");
    assert!(header.contains(plan_line), "{header}\n{plan_line}");
    // The same step time, to the digits the header prints.
    let secs = |text: &str, marker: &str| -> f64 {
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} in {text}"));
        let before = text[..at].trim_end();
        before[before.rfind(' ').unwrap() + 1..].parse().unwrap()
    };
    let printed = secs(header, " s per step");
    let read_back = secs(&back.stdout, " s (the exposed part of each term)");
    assert!(
        (printed - read_back).abs() < 0.006,
        "{printed} against {read_back}"
    );

    assert_one_line_error(
        &plan_8b(&[
            "--zero",
            "3",
            "--reshard-after-forward",
            "false",
            "--dp-replicas",
            "2",
            "--emit",
            "megatron",
        ]),
        &[
            "--emit megatron",
            "--dp-replicas 2 with --zero 3 --reshard-after-forward false",
            "ignores --num-distributed-optimizer-instances",
            "use --dp-replicas 1, or --reshard-after-forward true",
        ],
        &["none of the"],
        "plan, pinned",
    );
    assert_one_line_error(
        &run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--global-batch",
            "256",
            "--zero",
            "3",
            "--reshard-after-forward",
            "false",
            "--dp-replicas",
            "2",
            "--emit",
            "megatron",
        ]),
        &[
            "--emit megatron",
            "2 copies of the sharded states",
            "torch FSDP2",
            "use --dp-replicas 1",
        ],
        &[],
        "eval",
    );
}

/// `plan --zero 3 --reshard-after-forward false --emit megatron-bridge` searched, then exited 1
/// ("none of the 710 plans that fit can run in Megatron-Bridge"): the pin and the emit
/// contradict each other, an input error said before the search.
/// NeMo 1.x writes no ZeRO-3 at all (round 34): told to pin `--reshard-after-forward true`, which
/// then failed in turn, it now names the stages it has.
#[test]
fn a_pinned_kept_gather_under_bridge_or_nemo_is_an_input_error() {
    for (target, fix) in [
        (
            "megatron-bridge",
            "use --reshard-after-forward true, or --emit megatron",
        ),
        ("nemo", "pin --zero 0, 1 or 2"),
    ] {
        assert_one_line_error(
            &plan_8b(&[
                "--zero",
                "3",
                "--reshard-after-forward",
                "false",
                "--emit",
                target,
            ]),
            &[&format!("--emit {target}"), fix],
            &["none of the"],
            target,
        );
    }
}

/// `plan` of Llama 3 8B on 4 nodes (32 GPUs) with `extra` flags.
fn plan_8b(extra: &[&str]) -> Run {
    let mut args = vec![
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
    ];
    args.extend_from_slice(extra);
    run(&args)
}
