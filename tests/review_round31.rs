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

/// Finding: `eval --tp 6` for Llama 3 70B on 32 GB200 NVL72 nodes (128 GPUs, 4 a node) offered
/// "valid: 1, 2, 4" — the degrees inside one node — though eval runs `--tp 16` there (TP spans
/// the NVLink domain) and the same refusal on 18 nodes (72 GPUs, through `plan::check_heads`)
/// offered 8. Both lists now bound TP by the NVLink domain, and each degree offered is taken.
#[test]
fn eval_tp_offers_the_nvlink_domain_degrees_it_accepts() {
    let dir = scratch("review_round31", "tp_nvlink_domain");
    let eval = |tp: &str| {
        run_in(
            &dir,
            &[
                "eval",
                "--model",
                "llama3-70b",
                "--gpu",
                "gb200-nvl72",
                "--nodes",
                "32",
                "--global-batch",
                "512",
                "--tp",
                tp,
            ],
        )
    };
    let refused = eval("6");
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    let valid = refused
        .stderr
        .split_once("valid: ")
        .unwrap_or_else(|| panic!("no valid list: {}", refused.stderr))
        .1
        .lines()
        .next()
        .unwrap();
    let offered: Vec<&str> = valid
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(
        offered.contains(&"16"),
        "eval runs --tp 16 here, so the refusal offers it: {}",
        refused.stderr
    );
    // Each one offered is taken as input (whether the plan then fits memory is another matter:
    // tp 1 does not, and says so with exit 1).
    for tp in offered {
        let r = eval(tp);
        assert!(
            r.code != 2 && !r.stderr.contains("error:"),
            "--tp {tp} was offered but: {}",
            r.stderr
        );
    }
}
