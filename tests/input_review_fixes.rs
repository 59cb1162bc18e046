//! Regressions from the 2026-12-02 review of the command line as a new user and a hostile one
//! would use it (each test names the finding it guards).

mod common;
use common::{assert_one_line_error, json, run};

/// `plan` with `--recompute selective` pinned evaluates it (the search skips it when open, since
/// FlashAttention already recomputes the attention core), and gives what `eval` gives.
#[test]
fn a_pinned_selective_recompute_is_evaluated_like_eval_does() {
    let pins = [
        "--params",
        "512B",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        "2",
        "--vpp",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--sequence-parallel",
        "--format",
        "json",
    ];
    let planned = json(&[&["plan", "--top", "1"][..], &pins[..]].concat());
    let evaluated = json(&[&["eval"][..], &pins[..]].concat());
    let step = |v: &serde_json::Value| v["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert_eq!(planned["plans"][0]["recompute"], "selective");
    assert_eq!(step(&planned), step(&evaluated));
    // Open search with only the recompute pinned: plans exist.
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--recompute",
        "selective",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let _ = assert_one_line_error;
}
