//! Regressions from the twelfth review of valid usage by a new user: an ML engineer who trains
//! with torchtitan (FSDP2, async TP, pipeline schedules, HSDP) or DeepSpeed (ZeRO stages) meets
//! tpsim for the first time and carries `plan`'s rows to `eval` (each test names the finding it
//! guards).

mod common;
use common::{assert_one_line_error, json, run};

/// Llama 3 8B on two H100 nodes under torchtitan, as a torchtitan user types it (full
/// recompute, so that every plan below fits).
fn torchtitan(extra: &[&str]) -> Vec<String> {
    [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "torchtitan",
        "--recompute",
        "full",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect()
}

fn run_owned(args: &[String]) -> common::Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

/// `eval --framework torchtitan --tp 2` said "eval took Megatron-LM's defaults: sequence parallel
/// off (--sequence-parallel), ZeRO-0 (--zero)" as if those were the user's framework's defaults:
/// torchtitan's TP plan always shards the sequence, and it shards the states with FSDP2 unless
/// told otherwise (data_parallel_shard_degree -1). The note now says they are not torchtitan's
/// and which flag gives torchtitan's own.
#[test]
fn eval_defaults_note_says_they_are_not_torchtitans() {
    let r = run_owned(&torchtitan(&["--tp", "2", "--pp", "1"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.starts_with("note: not given, so eval took"))
        .unwrap_or_else(|| panic!("no note on the defaults taken:\n{}", r.stderr));
    assert!(note.contains("not torchtitan's"), "{note}");
    assert!(note.contains("torchtitan's TP always runs it"), "{note}");
    assert!(
        note.contains("data_parallel_shard_degree -1, is --zero 3"),
        "{note}"
    );
    // DeepSpeed's zero_optimization.stage defaults to 0: the note says the two agree.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
        "--tp",
        "8",
        "--pp",
        "1",
        "--recompute",
        "full",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.starts_with("note: not given, so eval took"))
        .unwrap_or_else(|| panic!("no note on the defaults taken:\n{}", r.stderr));
    assert!(note.contains("zero_optimization.stage"), "{note}");
    assert!(!note.contains("not torchtitan's"), "{note}");
}

/// `eval --framework torchtitan --dp-replicas 2` (torchtitan's HSDP replicate degree) without
/// --zero told the user to "give --zero 1, 2 or 3 (or --use-distributed-optimizer)", and --zero 1
/// or 2 is then refused: torchtitan keeps copies only of FSDP2's shards. The refusal now names
/// the one fix that runs, in torchtitan's terms.
#[test]
fn dp_replicas_without_zero_names_torchtitans_fix() {
    let r = run_owned(&torchtitan(&[
        "--tp",
        "1",
        "--pp",
        "1",
        "--dp-replicas",
        "2",
    ]));
    assert_one_line_error(
        &r,
        &[
            "--dp-replicas 2",
            "data_parallel_replicate_degree 2",
            "give --zero 3",
        ],
        &["--zero 1, 2 or 3", "--use-distributed-optimizer"],
        "torchtitan HSDP without --zero",
    );
    // The fix it names runs.
    let r = run_owned(&torchtitan(&[
        "--tp",
        "1",
        "--pp",
        "1",
        "--dp-replicas",
        "2",
        "--zero",
        "3",
    ]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    // DeepSpeed keeps no copies at any stage: its own refusal, not a --zero that would not help.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
        "--tp",
        "1",
        "--pp",
        "1",
        "--dp-replicas",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &["--dp-replicas 2", "MiCS", "give --dp-replicas 1"],
        &["--zero 1, 2 or 3"],
        "deepspeed --dp-replicas",
    );
}

/// `plan --help` says --reshard-after-forward "implies --zero 3", but `eval
/// --reshard-after-forward false` without --zero refused ("needs --zero 3 ... but the plan has
/// ZeRO-0"): the same flag meant two things. eval now takes it as ZeRO-3 too, and evaluates the
/// plan `plan`'s "3 keep" row names.
#[test]
fn eval_reshard_after_forward_implies_zero3_as_plan() {
    let r = run_owned(&torchtitan(&[
        "--tp",
        "1",
        "--pp",
        "1",
        "--reshard-after-forward",
        "false",
        "--format",
        "json",
    ]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let implied: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let pinned = json(
        &torchtitan(&[
            "--tp",
            "1",
            "--pp",
            "1",
            "--zero",
            "3",
            "--reshard-after-forward",
            "false",
            "--format",
            "json",
        ])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    let (a, b) = (&implied["plans"][0], &pinned["plans"][0]);
    assert_eq!(a["zero"], 3, "{a}");
    assert_eq!(a["time"]["step_s"], b["time"]["step_s"]);
    assert_eq!(a["memory"], b["memory"]);
    // A stage below 3 the user typed is still refused.
    let r = run_owned(&torchtitan(&[
        "--tp",
        "1",
        "--pp",
        "1",
        "--zero",
        "2",
        "--reshard-after-forward",
        "false",
    ]));
    assert_one_line_error(
        &r,
        &["--reshard-after-forward needs --zero 3", "ZeRO-2"],
        &[],
        "typed ZeRO-2",
    );
}

/// `eval --framework torchtitan --tp-comm-overlap` (torchtitan's async TP) refused with Megatron's
/// words only ("needs --sequence-parallel (Megatron-LM arguments.py)"). The refusal now names
/// torchtitan's setting and that its TP always runs sequence parallel.
#[test]
fn async_tp_refusal_speaks_torchtitan() {
    let r = run_owned(&torchtitan(&[
        "--tp",
        "2",
        "--pp",
        "1",
        "--tp-comm-overlap",
    ]));
    assert_one_line_error(
        &r,
        &["torchtitan's async TP", "add --sequence-parallel"],
        &["Megatron-LM arguments.py"],
        "async TP without SP",
    );
    let r = run_owned(&torchtitan(&[
        "--tp",
        "1",
        "--pp",
        "1",
        "--tp-comm-overlap",
    ]));
    assert_one_line_error(
        &r,
        &[
            "enable_async_tensor_parallel",
            "tensor_parallel_degree",
            "--tp 2 or more",
        ],
        &["Megatron-LM arguments.py"],
        "async TP at tp 1",
    );
}

/// `plan --framework torchtitan` with pipelined rows at vpp > 1 said "pipelined plans use the
/// simulated 1F1B schedule": torchtitan's `1F1B` runs one stage per rank, and those rows need
/// `Interleaved1F1B`. The note names both.
#[test]
fn torchtitan_plan_names_interleaved_schedule() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "torchtitan",
        "--pp",
        "2",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("step times: pipelined plans"))
        .unwrap_or_else(|| panic!("no step-times note:\n{}", r.stdout));
    assert!(line.contains("pipeline_parallel_schedule 1F1B"), "{line}");
    assert!(line.contains("Interleaved1F1B"), "{line}");
}

/// `plan --framework deepspeed`'s memory-range line said its runs were "none of them
/// megatron-deepspeed", a name no flag spells, beside "as deepspeed runs it" in the header. It
/// names the framework as --framework does.
#[test]
fn memory_range_names_the_framework_as_given() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("memory range:"))
        .unwrap_or_else(|| panic!("no memory-range line:\n{}", r.stdout));
    assert!(line.contains("none of them deepspeed,"), "{line}");
    assert!(!line.contains("megatron-deepspeed"), "{line}");
}
