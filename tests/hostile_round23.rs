//! Hostile input and new-user reading, round 23: copies of the ZeRO-sharded states
//! (`--dp-replicas`, hybrid sharding) through every command and input, and the order line of
//! `tpsim accuracy --runs`. Every error case checks exit 2, one line on stderr and the words that
//! name the value, the rule and the fix.

mod common;

use common::*;

/// `eval` of Llama 3 8B on 4 nodes at tp 2 (dp 16) with `extra` flags.
fn eval_8b(extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
    ];
    args.extend_from_slice(extra);
    run(&args)
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

/// Copies that leave each one rank named the fix as arithmetic left undone ("give a --dp-replicas
/// of at most 16 / 2"), and where the copies could only be one ("at most 2 / 2") it offered a
/// count that is no copies at all without saying so. The counts that work are listed.
#[test]
fn copies_of_one_rank_list_the_counts_that_work() {
    assert_one_line_error(
        &eval_8b(&["--zero", "1", "--dp-replicas", "16"]),
        &["--dp-replicas 16", "one rank", "valid: 1, 2, 4, 8"],
        &["/ 2"],
        "dense copies of one rank",
    );
    // Expert copies of one rank are valid (Megatron-Core asserts only the division; the expert
    // gradients are all-reduced whole across the copies): tests/review_round_tenth.rs.
}

/// A plan file's `dp_replicas:` was refused in the flag's words (`--dp-replicas 3 does not divide
/// dp: 16`, "give --dp-replicas 1 or more", "drop --dp-replicas") and a negative one was offered
/// `dp_replicas: 0`, which is refused in turn. Now the file's key, and 1.
#[test]
fn a_plan_files_copies_are_named_by_its_key() {
    let dir = scratch("round23", "file-copies");
    let saved = {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "4",
                "--global-batch",
                "256",
                "--top",
                "1",
                "--dp-replicas",
                "2",
                "--save",
                "p.yaml",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::read_to_string(dir.join("p.yaml")).unwrap()
    };
    assert!(saved.contains("  dp_replicas: 2\n"), "{saved}");
    let eval_with = |name: &str, from: &str, to: &str| {
        assert!(saved.contains(from), "{from:?} in {saved}");
        std::fs::write(dir.join(name), saved.replacen(from, to, 1)).unwrap();
        run_in(&dir, &["eval", "--plan", name])
    };
    assert_one_line_error(
        &eval_with("neg.yaml", "dp_replicas: 2", "dp_replicas: -1"),
        &["dp_replicas: -1", "1 or more", "dp_replicas: 1"],
        &["dp_replicas: 0"],
        "negative copies",
    );
    assert_one_line_error(
        &eval_with("zero.yaml", "dp_replicas: 2", "dp_replicas: 0"),
        &["dp_replicas: 0 in zero.yaml", "dp_replicas: 1 or more"],
        &["--dp-replicas"],
        "no copies",
    );
    assert_one_line_error(
        &eval_with("three.yaml", "dp_replicas: 2", "dp_replicas: 3"),
        &["dp_replicas: 3", "dp: 16", "valid: 1, 2, 4, 8"],
        // 16 copies would leave each one rank.
        &["--dp-replicas", "8, 16"],
        "copies not dividing dp",
    );
    assert_one_line_error(
        &eval_with("one-rank.yaml", "dp_replicas: 2", "dp_replicas: 16"),
        &["dp_replicas: 16 in one-rank.yaml", "valid: 1, 2, 4, 8"],
        &["--dp-replicas"],
        "copies of one rank",
    );
    assert_one_line_error(
        &eval_with("zero0.yaml", "zero: 1", "zero: 0"),
        &["dp_replicas: 2 with zero: 0", "give zero: 1, 2 or 3"],
        &["--dp-replicas"],
        "copies without ZeRO",
    );
}

/// `sweep --dp-replicas 2` (and its Megatron alias) got the generic "it is a flag of tpsim plan,
/// tpsim eval", where every other pin is told that sweep searches it and how to pin it; `report`
/// likewise, where the other degrees are told to change the file's line.
#[test]
fn sweep_and_report_say_copies_are_a_pin() {
    for flag in ["--dp-replicas", "--num-distributed-optimizer-instances"] {
        let r = run(&[
            "sweep",
            "--model",
            "llama3-8b",
            "--global-batch",
            "256",
            "--axis",
            "nodes",
            "--values",
            "4",
            flag,
            "2",
        ]);
        assert_one_line_error(
            &r,
            &[
                flag,
                "sweep searches every plan at each point",
                "tpsim plan ... --dp-replicas N",
            ],
            &[],
            "sweep",
        );
    }
    let r = run(&[
        "report",
        "plans/seed-512b-32nodes.yaml",
        "--out",
        "/tmp/unused",
        "--dp-replicas",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &["report takes no --dp-replicas", "dp_replicas: line"],
        &[],
        "report",
    );
}

/// `eval --dp-replicas 2` without `--zero` was told "--dp-replicas 2 with --zero 0", a flag the
/// user never typed: ZeRO-0 is eval's default, and the message now says so.
#[test]
fn copies_over_evals_default_zero_name_the_default() {
    assert_one_line_error(
        &eval_8b(&["--dp-replicas", "2"]),
        &[
            "--dp-replicas 2",
            "--zero was not given",
            "ZeRO-0",
            "--zero 1, 2 or 3",
            "--use-distributed-optimizer",
        ],
        &["with --zero 0"],
        "copies without --zero",
    );
}

/// `eval --emit deepspeed --dp-replicas 2` plans as DeepSpeed, and its error offered `--framework
/// megatron-core`, which `--emit deepspeed` refuses in turn. The fix offered now is another emit,
/// and it runs.
#[test]
fn deepspeed_copies_offer_an_emit_that_runs() {
    assert_one_line_error(
        &eval_8b(&["--zero", "1", "--dp-replicas", "2", "--emit", "deepspeed"]),
        &[
            "--emit deepspeed",
            "--dp-replicas 2",
            "MiCS",
            "--emit megatron (--num-distributed-optimizer-instances 2)",
        ],
        &["--framework megatron-core"],
        "eval --emit deepspeed",
    );
    let fix = eval_8b(&["--zero", "1", "--dp-replicas", "2", "--emit", "megatron"]);
    assert_eq!(fix.code, 0, "{}", fix.stderr);
    assert!(
        fix.stdout
            .contains("--num-distributed-optimizer-instances 2"),
        "{}",
        fix.stdout
    );
}

/// `plan --emit nemo --dp-replicas 2` searched, then exited 1 ("none of the 7185 plans that fit
/// can run in NeMo: each for one of these 3 reasons", two of them about ZeRO-3 plans the pin had
/// nothing to do with): the pin and the emit contradict each other, an input error said first.
#[test]
fn plan_emit_refuses_pinned_copies_it_cannot_write() {
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "2", "--emit", "nemo"]),
        &[
            "--emit nemo",
            "2 copies of the sharded states (--dp-replicas)",
            "--emit megatron",
        ],
        &["none of the", "ZeRO-3"],
        "plan --emit nemo",
    );
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "2", "--emit", "deepspeed"]),
        &["--emit deepspeed", "MiCS", "--dp-replicas 1"],
        &[],
        "plan --emit deepspeed",
    );
    // One copy is no copies: nothing to refuse.
    let one = plan_8b(&["--dp-replicas", "1", "--emit", "nemo"]);
    assert_eq!(one.code, 0, "{}", one.stderr);
}

/// A pinned `--dp-replicas` with no plan was offered the unpinned search's copies ("the search
/// offers --dp-replicas 1, 2, 4"), which are only the NVLink-domain ones: pins 8 and 16 run too.
/// Under DeepSpeed and 2021 Megatron-LM, which keep no copies, it said only that the search
/// offers 1, not why. Now the rule, and every count that finds a plan.
#[test]
fn a_pinned_copy_count_names_the_rule_and_the_counts_that_run() {
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "3"]),
        &[
            "--dp-replicas 3",
            "dp x cp / N",
            "--dp-replicas 1, 2, 4, 8, 16",
        ],
        &[],
        "three copies",
    );
    let sixteen = plan_8b(&["--dp-replicas", "16", "--format", "json"]);
    assert_eq!(sixteen.code, 0, "{}", sixteen.stderr);
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "3", "--tp", "2"]),
        &["with --tp 2", "--dp-replicas 1, 2, 4, 8)"],
        &[],
        "three copies beside tp 2",
    );
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "2", "--framework", "deepspeed"]),
        &["--dp-replicas 2", "deepspeed", "MiCS", "--dp-replicas 1"],
        &["the search offers"],
        "DeepSpeed",
    );
    assert_one_line_error(
        &plan_8b(&["--dp-replicas", "2", "--framework", "megatron-lm-2021"]),
        &[
            "--dp-replicas 2",
            "megatron-lm-2021",
            "partial distributed optimizer",
        ],
        &["the search offers"],
        "2021 Megatron-LM",
    );
}

/// The bundled current-stack runs file with only its runs `ids` (in that order), each then
/// edited by `edits` (`(index, from, to)`, replaced once in that run's text).
fn runs_file(ids: &[&str], edits: &[(usize, &str, &str)]) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let runs_at = text.find("\nruns:\n").expect("a runs: key") + "\nruns:\n".len();
    let mut out = text[..runs_at].to_string();
    for (index, id) in ids.iter().enumerate() {
        let start = runs_at
            + text[runs_at..]
                .find(&format!("- id: {id}\n"))
                .unwrap_or_else(|| panic!("a run {id}"));
        let end = text[start + 2..]
            .find("\n- id:")
            .map_or(text.len(), |i| start + 2 + i + 1);
        let mut run = text[start..end].to_string();
        for (_, from, to) in edits.iter().filter(|(i, _, _)| *i == index) {
            assert!(run.contains(from), "{id} has {from:?}");
            run = run.replacen(from, to, 1);
        }
        out.push_str(&run);
    }
    out
}

const FP8_RUN: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128";
const MXFP8_RUN: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-mxfp8-alt-gbs128";

fn accuracy_of(name: &str, text: &str) -> Run {
    let dir = scratch("round23", name);
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    run_in(&dir, &["accuracy", "--runs", "runs.yaml"])
}

/// The `order:` line of a table.
fn order_line(r: &Run) -> String {
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.starts_with("order:"))
        .unwrap_or_else(|| panic!("no order line: {}", r.stdout))
        .to_string()
}

/// Two runs tpsim predicts the same (one plan and settings, published 10% apart) were counted as
/// ordered or not by which one the file listed first: a tie put the faster first when the slower
/// came first. A tie orders nothing, in either order.
#[test]
fn a_tied_prediction_orders_no_pair_in_either_order() {
    let faster = [
        (1, FP8_RUN, "fp8-copy-published-faster"),
        (
            1,
            "tokens_per_s_per_gpu: 37556",
            "tokens_per_s_per_gpu: 41312",
        ),
    ];
    let first = runs_file(&[FP8_RUN, FP8_RUN], &faster);
    let swapped: Vec<(usize, &str, &str)> =
        faster.iter().map(|&(_, from, to)| (0, from, to)).collect();
    let second = runs_file(&[FP8_RUN, FP8_RUN], &swapped);
    for (name, text) in [("tie-ab", first), ("tie-ba", second)] {
        let line = order_line(&accuracy_of(name, &text));
        assert!(
            line.contains("1 pair of runs") && line.contains("puts the faster first in 0: 0 of 1"),
            "{name}: {line}"
        );
    }
}

/// `runs: []` printed an empty table and "0 of 0 runs not predicted" with exit 0, as if a file
/// had been checked.
#[test]
fn an_empty_runs_list_is_refused() {
    let text = runs_file(&[], &[]).replacen("\nruns:\n", "\nruns: []\n", 1);
    assert_one_line_error(
        &accuracy_of("empty", &text),
        &["runs.yaml", "lists no runs", "validation/modern_runs.yaml"],
        &[],
        "no runs",
    );
}

/// Runs without a source `ref` pair with none, and the order line was left out without a word: a
/// user whose file names no source could not tell why. It is said, with the runs that cannot pair.
#[test]
fn runs_that_pair_with_none_are_said() {
    let ref_line = "    ref: NVIDIA Megatron-Bridge performance summary, 25.11 NeMo container\n";
    let text = runs_file(
        &[FP8_RUN, MXFP8_RUN],
        &[(0, ref_line, ""), (1, ref_line, "")],
    );
    let line = order_line(&accuracy_of("no-ref", &text));
    assert!(
        line.contains("no pair of runs to order")
            && line.contains("2 of the 2 runs have no source.ref or model_key"),
        "{line}"
    );
    // With their source, the two runs of one table are a pair.
    let line = order_line(&accuracy_of(
        "with-ref",
        &runs_file(&[FP8_RUN, MXFP8_RUN], &[]),
    ));
    assert!(line.starts_with("order: 1 pair of runs "), "{line}");
}

/// `compare` of two saved plans that differ only in their copies of the sharded states named the
/// term that moved ("DP gradient reduction 0.1 points less") but not why, where a ZeRO stage or
/// dp difference is named beside it. The copies are named.
#[test]
fn compare_names_the_copies_behind_the_dp_term() {
    let dir = scratch("round23", "compare-copies");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--top",
            "1",
            "--dp-replicas",
            "2",
            "--save",
            "two.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let two = std::fs::read_to_string(dir.join("two.yaml")).unwrap();
    std::fs::write(
        dir.join("one.yaml"),
        two.replacen("dp_replicas: 2", "dp_replicas: 1", 1),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["compare", "--plan", "two.yaml", "--plan", "one.yaml"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let verdict = r.stdout.lines().last().unwrap_or_default();
    assert!(
        verdict.contains("DP gradient reduction")
            && verdict.contains("(copies of the sharded states 1 against 2)"),
        "{verdict}"
    );
}
