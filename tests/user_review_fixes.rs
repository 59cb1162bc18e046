//! Regressions from the 2026-12-03 review of the command line by a new user who bets cluster time
//! on the answer (each test names the finding it guards).

mod common;
use common::{json, run};

/// DeepSeek-V3 on 2048 H100s at GPT-3's 1536 sequences (the default before 2026-12-08, when it
/// became GPT-3's tokens per step: 768 sequences at DeepSeek-V3's 4096).
const DEEPSEEK_2048: [&str; 9] = [
    "plan",
    "--model",
    "deepseek-v3",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "256",
    "--global-batch",
    "1536",
];

/// The table shows etp beside ep (eval's --etp defaults to tp, so a row without it could not be
/// run back), and marks ZeRO-3 rows that keep their gathered parameters ("3 keep"): each row's
/// columns, given to `eval`, reproduce the row.
#[test]
fn every_shown_column_is_enough_to_run_the_row_back() {
    let r = run(&[&DEEPSEEK_2048[..], &["--top", "10"][..]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r
        .stdout
        .lines()
        .find(|l| l.contains("┆ tp ┆"))
        .expect("a table header");
    assert!(
        header.contains("┆ ep ") && header.contains("┆ etp "),
        "{header}"
    );
    // Megatron-Core keeps ZeRO-3's gathered parameters only through torch FSDP2, without expert
    // parallelism (2026-12-06): DeepSeek-V3's plans, all with ep > 1, offer no "3 keep" row.
    // (The zero column's cell; the memory-range line's "--max-memory-gib 67.3 keeps" is not one.)
    assert!(!r.stdout.contains("3 keep ┆"), "{}", r.stdout);
    let planned = json(&[&DEEPSEEK_2048[..], &["--top", "10", "--format", "json"][..]].concat());
    let kept = planned["plans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["zero"] == 3)
        .expect("a ZeRO-3 row among the top 10");
    assert_eq!(kept["reshard_after_forward"], true);
    let flag = |key: &str| kept[key].to_string();
    let (tp, cp, pp, dp, ep, etp, mb) = (
        flag("tp"),
        flag("cp"),
        flag("pp"),
        flag("dp"),
        flag("ep"),
        flag("etp"),
        flag("micro_batch"),
    );
    let evaluated = json(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "1536",
        "--tp",
        &tp,
        "--cp",
        &cp,
        "--pp",
        &pp,
        "--dp",
        &dp,
        "--ep",
        &ep,
        "--etp",
        &etp,
        "--micro-batch",
        &mb,
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "3",
        "--format",
        "json",
    ]);
    let e = &evaluated["plans"][0];
    assert_eq!(e["memory"]["total_bytes"], kept["memory"]["total_bytes"]);
    assert_eq!(e["time"]["step_s"], kept["time"]["step_s"]);
}

/// NVFP4 has no published run behind tpsim's error bands: its range says the estimate is
/// unvalidated, in the table's line and in the JSON's range basis.
#[test]
fn nvfp4_plans_say_they_are_unvalidated() {
    let args = [
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--precision",
        "nvfp4",
        "--top",
        "2",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("no nvfp4 run among them: the nvfp4 estimate is unvalidated"),
        "{}",
        r.stdout
    );
    let v = json(&[&args[..], &["--format", "json"][..]].concat());
    let basis = v["plans"][0]["time"]["step_s_range_basis"]
        .as_str()
        .unwrap();
    assert!(basis.contains("unvalidated"), "{basis}");
    // FP8 has published runs: no such words.
    let fp8 = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--precision",
        "fp8",
        "--top",
        "2",
    ]);
    assert!(!fp8.stdout.contains("unvalidated"), "{}", fp8.stdout);
}

/// With context parallelism and one replica, gradients are still reduced over the CP ranks: the
/// explanation says so instead of "no gradient traffic".
#[test]
fn the_explanation_counts_cp_ranks_in_the_gradient_group() {
    let r = run(&[
        "plan",
        "--params",
        "175B",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--cp",
        "2",
        "--dp",
        "1",
        "--seq-len",
        "8192",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("DP 1 x CP 2 (2 ranks reduce gradients) with ZeRO-"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("no gradient traffic"), "{}", r.stdout);
}

/// The same 256 GB200 GPUs counted as 64 trays of 4 or 32 nodes of 8 sit in the same 64-GPU
/// NVLink segments and give the same plans.
#[test]
fn gb200_nodes_of_two_trays_give_the_same_answer() {
    let best = |nodes: &str, per_node: &str| {
        let v = json(&[
            "plan",
            "--model",
            "qwen3-235b-a22b",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            nodes,
            "--gpus-per-node",
            per_node,
            "--top",
            "1",
            "--format",
            "json",
        ]);
        v["plans"][0]["time"]["step_s"].as_f64().unwrap()
    };
    assert_eq!(best("64", "4"), best("32", "8"));
}

/// The default batch keeps GPT-3's tokens per step (1536 x 2048); at another sequence length the
/// note says how many sequences of that length make them.
#[test]
fn the_default_batch_note_says_when_it_is_not_gpt3s_token_batch() {
    let r = run(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "4",
        "--ep",
        "8",
        "--top",
        "1",
    ]);
    let note = r.stderr.lines().next().unwrap_or_default();
    assert!(
        note.contains("96 sequences x 32768 tokens = 3.1M tokens per step")
            && note.contains("GPT-3 175B's 3.1M tokens, 1536 x 2048"),
        "{note}"
    );
}

/// `eval --recompute-num-layers N` alone pins full recompute of N layers per chunk, as `plan`
/// reads the flag (it was dropped, and the plan evaluated without recompute).
#[test]
fn eval_reads_recompute_num_layers_as_plan_does() {
    let base = [
        "eval",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "16",
        "--micro-batch",
        "2",
        "--sequence-parallel",
        "--zero",
        "2",
        "--format",
        "json",
    ];
    let alone = json(&[&base[..], &["--recompute-num-layers", "1"][..]].concat());
    let spelled = json(
        &[
            &base[..],
            &[
                "--recompute",
                "full",
                "--recompute-method",
                "block",
                "--recompute-num-layers",
                "1",
            ][..],
        ]
        .concat(),
    );
    let p = &alone["plans"][0];
    assert_eq!(p["recompute"], "full");
    assert_eq!(p["recompute_num_layers"], 1);
    assert_eq!(p["time"]["step_s"], spelled["plans"][0]["time"]["step_s"]);
    assert_eq!(
        p["memory"]["total_bytes"],
        spelled["plans"][0]["memory"]["total_bytes"]
    );
}

/// Block recompute of 0 layers is refused on `eval` as on `plan` (it read as every layer).
#[test]
fn eval_refuses_zero_recompute_layers() {
    let r = run(&[
        "eval",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "16",
        "--recompute-num-layers",
        "0",
    ]);
    common::assert_one_line_error(
        &r,
        &["--recompute-num-layers 0", "at least 1"],
        &[],
        "block recompute of no layers",
    );
}
