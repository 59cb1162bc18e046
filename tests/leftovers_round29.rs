//! Leftovers of the twenty-ninth round, wording, input checks and output fields only: the report's
//! search figure under pins says it is the pinned search and what "evaluated" counts; `plan`'s
//! JSON carries the pins its text prints; a plan file's defaulted `etp` is said to be defaulted;
//! an empty `--megatron-args @FILE` is said to be empty; an unknown key is given its fix; and the
//! default-batch note names a small cluster's batch beside the largest.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "leftovers29";

/// The search counts of `plan ... --format json`: candidates, and the plans evaluated (those that
/// pass the pins and build: candidates less the ones refused before evaluation).
fn evaluated_of(search: &Value) -> (u64, u64) {
    let candidates = search["candidates"].as_u64().unwrap();
    let refused: u64 = [
        "ruled_out_by_pins",
        "invalid_plan",
        "local_batch_split",
        "bf16_layers_past_stage",
    ]
    .iter()
    .filter_map(|reason| search["infeasible_by_reason"][reason].as_u64())
    .sum();
    (candidates, candidates - refused)
}

/// `plan --tp 8 --pp 4 --report DIR`: the search figure was titled "The whole search" and said
/// "N of M evaluated plans" beside a search line counting some 30,000 candidates; it now says it
/// is the pinned search, with the pins, and that "evaluated" counts the candidates that pass the
/// pins and build, of the candidates the search line counts. Without pins it is the whole search.
#[test]
fn the_search_figure_under_pins_says_it_is_the_pinned_search() {
    let base = ["plan", "--params", "512B", "--nodes", "32"];
    for (pins, title) in [
        (
            &["--tp", "8", "--pp", "4"][..],
            "The pinned search (--tp 8 --pp 4): memory per GPU vs throughput",
        ),
        (&[][..], "The whole search: memory per GPU vs throughput"),
    ] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(pins);
        let mut with_json = args.clone();
        with_json.extend_from_slice(&["--format", "json"]);
        let (candidates, evaluated) = evaluated_of(&json(&with_json)["search"]);
        let dir = scratch(SUITE, if pins.is_empty() { "whole" } else { "pinned" });
        let report = dir.join("r");
        args.extend_from_slice(&["--report", report.to_str().unwrap()]);
        let r = run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let svg = std::fs::read_to_string(report.join("search.svg")).unwrap();
        assert!(svg.contains(title), "{pins:?}: no {title:?} in the figure");
        let counted = format!(
            "evaluated plans drawn; evaluated: the candidates that pass the pins and build, of the {candidates} the search counts"
        );
        let drawn = format!("all {evaluated} evaluated plans drawn");
        if pins.is_empty() {
            assert!(!svg.contains("pinned") && !svg.contains("pass the pins"));
        } else {
            assert!(candidates > 10 * evaluated, "{candidates} {evaluated}");
            assert!(svg.contains(&counted), "no {counted:?} in the figure");
            assert!(svg.contains(&drawn), "no {drawn:?} in the figure");
            let page = std::fs::read_to_string(report.join("index.html")).unwrap();
            assert!(page.contains(
                "Every evaluated plan of the pinned search (the candidates that pass the pins --tp 8 --pp 4 and build)"
            ));
        }
    }
}

/// `plan --format json` printed no pins where the text prints a `pinned:` line: `search.pinned`
/// now holds them by plan key, in the line's order, and is absent without pins.
#[test]
fn plan_json_carries_the_pins_its_text_prints() {
    let args = [
        "plan",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--pp",
        "4",
        "--tp",
        "8",
        "--recompute",
        "selective",
    ];
    let text = run(&args);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = text
        .stdout
        .lines()
        .find(|l| l.starts_with("pinned: "))
        .expect("a pinned: line");
    assert!(line.starts_with("pinned: --tp 8 --pp 4 --recompute selective ("));
    let mut with_json = args.to_vec();
    with_json.extend_from_slice(&["--format", "json"]);
    let r = run(&with_json);
    let pinned = &serde_json::from_str::<Value>(&r.stdout).unwrap()["search"]["pinned"];
    assert_eq!(
        pinned,
        &serde_json::json!({"tp": 8, "pp": 4, "recompute": "selective"})
    );
    // In the line's order, as the object is written.
    let at = |key: &str| r.stdout.find(&format!("\"{key}\": ")).unwrap();
    let pinned_at = r.stdout.find("\"pinned\"").unwrap();
    let order: Vec<usize> = ["tp", "pp", "recompute"]
        .iter()
        .map(|k| pinned_at + r.stdout[pinned_at..].find(&format!("\"{k}\": ")).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert!(at("candidates") < pinned_at);
    let unpinned = json(&[
        "plan", "--params", "512B", "--nodes", "32", "--format", "json",
    ]);
    assert!(unpinned["search"].get("pinned").is_none());
}

/// A plan file without `etp:` runs the framework's default expert TP (`PlanFile::etp_for`), and
/// an error about it said `--etp 8` (a flag never typed; `etp: N in FILE` where the default
/// matched the value the file was read with): it now says the degree was defaulted, as the file
/// has no etp: line, and that an etp: line under plan: sets another. A file that writes the line
/// is quoted as before.
#[test]
fn a_defaulted_etp_is_said_to_be_defaulted() {
    let dir = scratch(SUITE, "etp");
    let plan = |etp: &str| {
        format!(
            "model: mixtral-8x7b\ngpu: h100-sxm-80g\nnodes: 1\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n  ep: 8\n  micro_batch: 1\n  sequence_parallel: true\n{etp}"
        )
    };
    let error_line = |r: &Run| -> String {
        assert_eq!(r.code, 2, "{}", r.stderr);
        let errors: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{}", r.stderr);
        errors[0].to_string()
    };
    std::fs::write(dir.join("p.yaml"), plan("")).unwrap();
    let line = error_line(&run_in(&dir, &["eval", "--plan", "p.yaml"]));
    for needle in [
        "ep: 8 in p.yaml x etp 8 (defaulted: p.yaml has no etp: line under plan:",
        "an etp: line there sets another",
        "does not divide the 8 GPUs",
    ] {
        assert!(line.contains(needle), "no {needle:?} in: {line}");
    }
    assert!(
        !line.contains("--etp 8") && !line.contains("etp: 8 in"),
        "{line}"
    );
    // Written in the file, it is the file's value, quoted as such.
    std::fs::write(dir.join("q.yaml"), plan("  etp: 8\n")).unwrap();
    let line = error_line(&run_in(&dir, &["eval", "--plan", "q.yaml"]));
    assert!(line.contains("etp: 8"), "{line}");
    assert!(!line.contains("defaulted"), "{line}");
}

/// `eval --megatron-args @empty.sh` said the line "lacks --num-layers": an empty file, or one of
/// only comments and blank lines, is now said to be that, with the fix.
#[test]
fn an_empty_megatron_args_file_is_said_to_be_empty() {
    let dir = scratch(SUITE, "empty-launch");
    for (file, text, words) in [
        ("empty.sh", "", "empty.sh is empty"),
        ("blank.sh", "\n  \n", "blank.sh is empty"),
        (
            "comments.sh",
            "#!/bin/bash\n# the launch line goes here\n\n",
            "comments.sh holds only comments and blank lines, no flag",
        ),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
        let arg = format!("@{file}");
        let r = run_in(&dir, &["eval", "--megatron-args", &arg, "--nodes", "1"]);
        assert_one_line_error(
            &r,
            &[
                &format!("--megatron-args @{file}: {words}"),
                "write the launch line into the file",
            ],
            &["lacks --num-layers"],
            file,
        );
    }
}

/// An unknown key in a plan file listed the valid keys and no fix: the message now says to remove
/// the line, or to rename it to the valid key it misspells when one is near.
#[test]
fn an_unknown_plan_key_is_given_its_fix() {
    let dir = scratch(SUITE, "unknown-key");
    let good = "model: llama3-8b\ngpu: h100-sxm-80g\nnodes: 1\nplan:\n  tp: 1\n  pp: 1\n  dp: 8\n  micro_batch: 1\n";
    for (name, text, needles) in [
        (
            "typo.yaml",
            format!("{good}  recompte: full\n"),
            vec![
                "unknown field `recompte`, expected one of",
                "rename it to recompute: (the valid key nearest it), or remove the recompte: line",
            ],
        ),
        (
            "foreign.yaml",
            good.replace("gpu:", "cluster:"),
            vec![
                "unknown field `cluster`, expected one of",
                "; remove the cluster: line",
            ],
        ),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
        let r = run_in(&dir, &["eval", "--plan", name]);
        let absent: &[&str] = if name == "foreign.yaml" {
            &["rename it"]
        } else {
            &[]
        };
        assert_one_line_error(&r, &needles, absent, name);
    }
}

/// The default-batch note gave only Llama 3 405B's 16M tokens on 16K GPUs; it now names a small
/// cluster's too, Llama 3 8B's 128 x 8192 on 8 GPUs, which is the published run it cites
/// (validation/modern_runs.yaml).
#[test]
fn the_default_batch_note_names_a_small_clusters_batch() {
    let r = run(&["plan", "--params", "8B", "--nodes", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.starts_with("note: --global-batch not given"))
        .expect("the default-batch note");
    assert!(
        note.contains(
            "(Llama 3 8B: 1M tokens on 8 GPUs, 128 x 8192; Llama 3 405B: 16M tokens on 16K GPUs)"
        ),
        "{note}"
    );
    // The run the example quotes.
    let runs: serde_json::Value = yaml_serde::from_str(
        &std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap(),
    )
    .unwrap();
    let run = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "mbridge-25.11-pretrain-llama3_8b-h100-8g-fp8-gbs128")
        .expect("the cited run");
    assert_eq!(run["hardware"]["num_gpus"], 8);
    assert_eq!(run["plan"]["gbs"], 128);
    assert_eq!(run["model"]["seq_len"], 8192);
    assert_eq!(run["model"]["name"], "Llama 3 8B");
    let tokens = 128.0 * 8192.0 / 1e6;
    assert!((tokens - 1.0_f64).abs() < 0.05, "{tokens}");
}
