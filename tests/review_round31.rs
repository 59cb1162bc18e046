//! Regressions from the 31st review of what was merged into main (each test names the finding it
//! guards).

mod common;
use common::{run_in, scratch};

/// `text` without the top-level `overlap:` key and its indented mapping: a plan file as
/// `plan --save` wrote it before that key existed.
fn without_overlap_key(text: &str) -> String {
    let mut kept = Vec::new();
    let mut in_overlap = false;
    for line in text.lines() {
        if in_overlap && line.starts_with(' ') {
            continue;
        }
        in_overlap = line.starts_with("overlap:");
        if !in_overlap {
            kept.push(line);
        }
    }
    kept.join("\n") + "\n"
}

/// Finding: a plan file saved before plan files kept `overlap:` was told "evaluated with today's
/// default, overlap: {tp_comm: true, grad_reduce: true, ...}" even where `--tp-comm-overlap false
/// --overlap-grad-reduce false` were given and the plan ran with both off. The note now names the
/// overlap the plan was evaluated with, says the flags given are in it, and says nothing when
/// every overlap flag was given (nothing was assumed).
#[test]
fn an_old_saved_plan_names_the_overlap_it_ran_with_under_the_flags_given() {
    let dir = scratch("review_round31", "old_saved_overlap");
    let saved = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--save",
            "new.yaml",
        ],
    );
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let text = std::fs::read_to_string(dir.join("new.yaml")).unwrap();
    assert!(text.contains("overlap:"), "{text}");
    std::fs::write(dir.join("old.yaml"), without_overlap_key(&text)).unwrap();

    let some_flags = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "old.yaml",
            "--tp-comm-overlap",
            "false",
            "--overlap-grad-reduce",
            "false",
            "--format",
            "json",
        ],
    );
    assert_eq!(some_flags.code, 0, "{}", some_flags.stderr);
    let ran: serde_json::Value = serde_json::from_str(&some_flags.stdout).unwrap();
    assert_eq!(ran["training"]["overlap"]["tp_comm"], false);
    assert_eq!(ran["training"]["overlap"]["grad_reduce"], false);
    let note = some_flags
        .stderr
        .lines()
        .find(|l| l.contains("kept overlap:"))
        .unwrap_or_else(|| panic!("no overlap note: {}", some_flags.stderr));
    assert!(
        note.contains("overlap: {tp_comm: false, grad_reduce: false, param_gather: true, p2p: true, moe_a2a: false}"),
        "the note names the overlap evaluated: {note}"
    );
    assert!(
        note.contains("under the overlap flags given"),
        "the note says the flags are in it: {note}"
    );

    let all_flags = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "old.yaml",
            "--tp-comm-overlap",
            "false",
            "--overlap-grad-reduce",
            "false",
            "--overlap-param-gather",
            "true",
            "--overlap-p2p-comm",
            "true",
            "--overlap-moe-expert-parallel-comm",
            "false",
        ],
    );
    assert_eq!(all_flags.code, 0, "{}", all_flags.stderr);
    assert!(
        !all_flags.stderr.contains("kept overlap:"),
        "every overlap flag given: nothing assumed: {}",
        all_flags.stderr
    );
}
