//! Leftovers round 32, one regression test per finding, each run on the built binary: what a plan
//! file without a key is told (its error, `compare`'s note), the recompute default a plan that
//! does not fit is told of, and the help and README words for `plan`'s pins and `search` JSON.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// A 7B plan file on 2 nodes of H100s with `plan:` lines `plan`, in `dir`.
fn plan_file(dir: &Path, name: &str, scenario: &str, plan: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("gpu: h100-sxm-80g\nnodes: 2\nglobal_batch: 64\n{scenario}plan:\n{plan}"),
    )
    .unwrap();
    path
}

// ---- 1. a key the file does not write is said as defaulted, its fix as a file line ----------

#[test]
fn dp_replicas_without_a_zero_line_names_no_zero_line_the_file_lacks() {
    let dir = scratch("leftovers32", "dp-replicas-no-zero");
    let path = plan_file(
        &dir,
        "a.yaml",
        "params: 7B\nseq_len: 2048\n",
        "  tp: 2\n  pp: 1\n  dp: 8\n  micro_batch: 1\n  dp_replicas: 2\n",
    );
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    // It said "dp_replicas: 2 with zero: 0", a line the file does not have.
    assert_one_line_error(
        &r,
        &[
            "dp_replicas: 2",
            "has no zero: line under plan:",
            "ZeRO-0 (defaulted",
            "give zero: 1, 2 or 3",
        ],
        &["zero: 0", "--zero"],
        "dp_replicas without zero:",
    );
}

#[test]
fn a_file_without_sequence_parallel_is_not_quoted_as_the_flag() {
    let dir = scratch("leftovers32", "no-sp-line");
    // Mixtral at tp 2 under megatron-core needs sequence parallelism, which a 4095-token
    // sequence cannot split over 2 ranks: eval's default is off, and the refusal names it.
    let path = plan_file(
        &dir,
        "c.yaml",
        "model: mixtral-8x7b\nseq_len: 4095\n",
        "  tp: 2\n  pp: 1\n  dp: 8\n  ep: 8\n  micro_batch: 1\n",
    );
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &[
            "without sequence parallelism (defaulted off",
            "has no sequence_parallel: line under plan:",
            "with sequence_parallel: true",
        ],
        &["--sequence-parallel"],
        "MoE file without sequence_parallel:",
    );
}

// ---- 2. compare says a file's defaulted keys, as eval --plan does --------------------------

#[test]
fn compare_of_two_files_notes_each_file_that_omits_keys() {
    let dir = scratch("leftovers32", "compare-note");
    let scenario = "params: 7B\nseq_len: 2048\n";
    let bare = plan_file(
        &dir,
        "bare.yaml",
        scenario,
        "  tp: 2\n  pp: 1\n  dp: 8\n  micro_batch: 1\n",
    );
    let full = plan_file(
        &dir,
        "full.yaml",
        scenario,
        "  tp: 4\n  pp: 1\n  dp: 4\n  micro_batch: 1\n  sequence_parallel: true\n  zero: 1\n  recompute: none\n",
    );
    let (bare, full) = (bare.to_str().unwrap(), full.to_str().unwrap());
    let r = run(&["compare", "--plan", bare, "--plan", full]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let notes: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("under plan:, so compare took"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", r.stderr);
    assert!(
        notes[0].contains(bare) && notes[0].contains("no sequence_parallel:, zero:"),
        "{}",
        notes[0]
    );
    // compare takes no plan flags: the note offers the file's lines only.
    assert!(!notes[0].contains("give those flags"), "{}", notes[0]);
    // eval --plan prints the same settings for the same file.
    let eval = run(&["eval", "--plan", bare]);
    let eval_note = eval
        .stderr
        .lines()
        .find(|l| l.contains("under plan:, so eval took"))
        .unwrap_or_else(|| panic!("no eval note: {}", eval.stderr));
    let settings = |note: &str| {
        let from = note.find("defaults: ").expect("the settings");
        let to = note.find("; a `tpsim plan`").expect("the columns");
        note[from..to].to_string()
    };
    assert_eq!(settings(notes[0]), settings(eval_note));
    // The same file twice is said once; two files without the keys, once each.
    let r = run(&["compare", "--plan", bare, "--plan", bare]);
    let count = r.stderr.matches("so compare took").count();
    assert_eq!(count, 1, "{}", r.stderr);
}

// ---- 3. a plan that does not fit is told its recompute was defaulted ------------------------

#[test]
fn eval_that_does_not_fit_names_the_defaulted_recompute() {
    let plan = [
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--tp",
        "8",
        "--pp",
        "4",
        "--micro-batch",
        "4",
        "--sequence-parallel",
        "--zero",
        "1",
        "--global-batch",
        "64",
    ];
    let r = run(&plan);
    assert_eq!(r.code, 1, "does not fit: {}", r.stderr);
    assert!(
        r.stderr.contains("no recompute (--recompute")
            && r.stderr.contains("--recompute selective|full"),
        "{}",
        r.stderr
    );
    // Given, it is not said.
    let mut given = plan.to_vec();
    given.extend(["--recompute", "none"]);
    let r = run(&given);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        !r.stderr.contains("recompute selective|full"),
        "{}",
        r.stderr
    );
    // A plan that fits without it is not told (the README's examples read as they did).
    let r = run(&["eval", "--params", "7B", "--nodes", "1", "--tp", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("recompute"), "{}", r.stderr);
}

// ---- 4. README documents search.pinned and search.threads -----------------------------------

#[test]
fn readme_documents_every_search_json_field() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let line = readme
        .split("\n\n")
        .find(|p| p.contains("`search` (`plan` and `report`"))
        .expect("the JSON output paragraph");
    let search = json(&[
        "plan", "--params", "7B", "--nodes", "1", "--tp", "2", "--format", "json",
    ]);
    let fields = search["search"].as_object().expect("a search object");
    assert!(fields.contains_key("pinned"), "{fields:?}");
    for field in fields.keys() {
        assert!(
            line.contains(&format!("`{field}`")),
            "README's search fields lack `{field}`: {line}"
        );
    }
}

// ---- 5. plan --help says the pins default to searched ---------------------------------------

#[test]
fn plan_help_says_each_pin_defaults_to_searched() {
    let r = run(&["plan", "--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for flag in [
        "--tp",
        "--pp",
        "--cp",
        "--ep",
        "--dp",
        "--vpp",
        "--micro-batch",
        "--dp-replicas",
    ] {
        let head = format!("      {flag} <");
        let at = r
            .stdout
            .find(&head)
            .unwrap_or_else(|| panic!("{flag} not in plan --help"));
        let rest = &r.stdout[at + head.len()..];
        let entry = &rest[..rest.find("\n      --").unwrap_or(rest.len())];
        let words = entry.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains("Default: searched"), "{flag}: {entry}");
    }
}
