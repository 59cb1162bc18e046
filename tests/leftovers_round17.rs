//! Leftovers of the seventeenth session's hostile round (reported, in files the round did not
//! edit): the refusal of experts on a hybrid pattern without E named no flag the user typed, and
//! `--cp-exchange` beside a hybrid stack's search sent the user to `eval --cp 2`, which a hybrid
//! stack refused then (it is priced since 2026-12-07).

mod common;

use common::*;

#[test]
fn experts_on_a_hybrid_pattern_without_e_name_the_flags_that_gave_them() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--num-experts",
        "8",
        "--nodes",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &[
            "has no MoE layer (E)",
            "rule: a hybrid stack's MoE layers are its pattern's E symbols",
            "--num-experts",
        ],
        &["panicked"],
        "--num-experts on a dense hybrid",
    );
}

#[test]
fn cp_exchange_beside_a_hybrid_search_sends_the_user_to_a_cp_2_that_runs() {
    // Since 2026-12-07 a hybrid stack is searched and evaluated with context parallelism
    // (tests/hybrid_context_parallel.rs), so its search gets a transformer's note, whose advice
    // (`eval --cp 2`) now runs.
    let r = run(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("--cp-exchange"))
        .collect();
    assert!(note.len() <= 1, "{}", r.stderr);
    if let Some(note) = note.first() {
        assert!(!note.contains("cp 1 only"), "{note}");
        assert!(note.contains("--cp 2 or more"), "{note}");
    }
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--cp",
        "2",
        "--sequence-parallel",
        "--zero",
        "1",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Mamba CP comm"), "{}", r.stdout);
}

#[test]
fn two_stages_have_no_middle_stage_in_the_layers_column() {
    // The review of the seventeenth session: a first/last split at pp 2 read "17/0/14" in `plan`'s
    // layers column and "middle 0" in its explanation, a middle stage of no layers that does not
    // exist.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--layers",
        "31",
        "--nodes",
        "2",
        "--global-batch",
        "512",
        "--allow-uneven-pp",
        "--pp",
        "2",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first_row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("│  1 "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    // The layers cell: two numbers, the first and the last stage's.
    let cells: Vec<&str> = first_row.split('┆').map(str::trim).collect();
    let layers = cells
        .iter()
        .find(|c| c.contains('/') && c.split('/').all(|n| n.parse::<u32>().is_ok()))
        .unwrap_or_else(|| panic!("{first_row}"));
    assert_eq!(layers.split('/').count(), 2, "{first_row}");
    assert!(!r.stdout.contains("/0/"), "{}", r.stdout);
    if let Some(line) = r
        .stdout
        .lines()
        .find(|l| l.contains("layers per stage: first"))
    {
        assert!(!line.contains("middle"), "{line}");
    }
}

#[test]
fn a_hybrid_middle_stage_that_holds_the_most_says_which_one() {
    // A hybrid stack's middle stages each hold their own slice of the pattern, so "a middle stage"
    // does not say which GPUs hold the most (the review of the seventeenth session): the text and
    // the JSON name its pipeline rank.
    let args = [
        "eval",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "8",
        "--pp",
        "4",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--decoder-first-pipeline-num-layers",
        "10",
        "--decoder-last-pipeline-num-layers",
        "10",
    ];
    let r = run(&args);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("most loaded: a middle stage (pipeline rank 1 of 0-3)"),
        "{}",
        r.stdout
    );
    let mut with_json = args.to_vec();
    with_json.extend_from_slice(&["--format", "json"]);
    let v = json(&with_json);
    assert_eq!(v["plans"][0]["memory"]["middle_rank"], 1, "{v}");
    // A transformer's middle stage stands for all of them: no rank.
    let v = json(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--decoder-first-pipeline-num-layers",
        "10",
        "--decoder-last-pipeline-num-layers",
        "10",
        "--format",
        "json",
    ]);
    assert!(v["plans"][0]["memory"].get("middle_rank").is_none(), "{v}");
}
