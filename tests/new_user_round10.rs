//! Regressions from the tenth review of valid usage by a new user: an ML infrastructure engineer
//! meeting tpsim for the first time plans bundled models (Llama 3 70B, Mixtral 8x7B, DeepSeek-V3)
//! and Hugging Face configs of their own, takes a hybrid-sharded row to `eval`, and reads the
//! README's first screen against what the commands print (each test names the finding it guards).

mod common;
use common::{ROOT, json, run};

/// Qwen2.5-7B on 2 nodes with the ZeRO-1 states in 2 copies of 4 ranks (`plan`'s `1 x2` row):
/// each copy sits inside one node.
const HYBRID: [&str; 20] = [
    "--hf-config",
    "models/hf/qwen2.5-7b.json",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--tp",
    "2",
    "--dp",
    "8",
    "--micro-batch",
    "4",
    "--sequence-parallel",
    "true",
    "--zero",
    "1",
    "--dp-replicas",
    "2",
    "--recompute",
    "none",
];

/// `eval` of a hybrid-sharded plan printed "DP 20.94 GB on network" (and `plan`'s why-line "on
/// network"), while its own ledger put the reduce-scatter and the all-gather inside each copy on
/// NVLink and only the all-reduce across the copies on the network, as the layout figure and the
/// README ("their gathers on NVLink, only the all-reduce on the network") say. Both lines now name
/// both links and which collective crosses the network.
#[test]
fn hybrid_sharding_names_the_nvlink_its_copies_gather_on() {
    let mut args = vec!["eval"];
    args.extend(HYBRID);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let dp = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  DP "))
        .unwrap_or_else(|| panic!("no DP line in {}", r.stdout));
    assert!(dp.contains("GB on network and NVLink"), "{dp}");
    assert!(
        dp.contains(
            "each copy's 4 ranks reduce-scatter and gather on NVLink, only the all-reduce across the 2 copies crosses the network"
        ),
        "{dp}"
    );

    // The ledger the words must agree with: the copy's collectives on NVLink, the copies'
    // all-reduce on the network.
    args.extend(["--format", "json"]);
    let v = json(&args);
    let entries = v["plans"][0]["ledger"]["entries"].as_array().unwrap();
    let links = |group: &str| -> Vec<&str> {
        entries
            .iter()
            .filter(|e| e["group"] == group)
            .map(|e| e["link"].as_str().unwrap())
            .collect()
    };
    assert!(!links("dp").is_empty(), "{entries:?}");
    assert!(links("dp").iter().all(|&l| l == "nvlink"), "{entries:?}");
    assert_eq!(links("dp_replica"), ["network"], "{entries:?}");

    // `plan`'s reading of the same row.
    let mut args = vec!["plan"];
    args.extend(HYBRID);
    args.extend(["--top", "1"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let why = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  DP 8"))
        .unwrap_or_else(|| panic!("no DP why-line in {}", r.stdout));
    assert!(
        why.contains("on network and NVLink (each copy's 4 ranks reduce-scatter and gather on NVLink, only the all-reduce across the 2 copies crosses the network)"),
        "{why}"
    );
}

/// Without hybrid sharding nothing changes: a DP group inside one node still reads "on NVLink".
#[test]
fn one_copy_inside_a_node_stays_on_nvlink() {
    let r = run(&[
        "eval",
        "--hf-config",
        "models/hf/qwen2.5-7b.json",
        "--nodes",
        "1",
        "--global-batch",
        "256",
        "--tp",
        "2",
        "--dp",
        "4",
        "--micro-batch",
        "4",
        "--sequence-parallel",
        "true",
        "--zero",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let dp = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  DP "))
        .unwrap_or_else(|| panic!("no DP line in {}", r.stdout));
    assert!(dp.contains("GB on NVLink "), "{dp}");
    assert!(!dp.contains("copies"), "{dp}");
}

/// `plan --model mixtral-8x7b --nodes 1 --global-batch 64` trained on 32768-token sequences (the
/// bundled model's own length) and said so only as "64 sequences x 32768 tokens", with no word on
/// where 32768 came from, while a Hugging Face config's model line names its default. Every model
/// line now says which sequence length was taken when `--seq-len` was not given.
#[test]
fn the_model_line_names_a_sequence_length_nobody_gave() {
    let model_line = |args: &[&str]| -> String {
        let r = run(args);
        assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.starts_with("model "))
            .unwrap_or_else(|| panic!("no model line in {}", r.stdout))
            .to_string()
    };
    let line = model_line(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
    ]);
    // Round 24: "as given" beside "--seq-len not given" read as a contradiction; the shape is
    // now "used as stated" (src/report/table.rs), which no one can read against "not given".
    assert!(
        line.contains(
            "(bundled; --seq-len not given: 32768 tokens, the bundled model's training length, shape used as stated)"
        ),
        "{line}"
    );
    // Given, nothing is said.
    let line = model_line(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--top",
        "1",
    ]);
    assert!(line.contains("(bundled, shape used as stated)"), "{line}");
    assert!(!line.contains("not given"), "{line}");
    // A derived shape and a shape from flags take GPT-3's 2048.
    let line = model_line(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
    ]);
    assert!(
        line.contains("; --seq-len not given: 2048 tokens, GPT-3's, printed so you can check it)"),
        "{line}"
    );
    let line = model_line(&[
        "eval",
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--tp",
        "1",
    ]);
    assert!(
        line.contains("(flags; --seq-len not given: 2048 tokens, GPT-3's, shape used as stated)"),
        "{line}"
    );
    // The JSON carries the same words, with the sequence length they name.
    let v = json(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(v["training"]["seq_len"], 8192);
    let origin = v["model"]["origin"].as_str().unwrap();
    assert!(
        origin.contains("--seq-len not given: 8192 tokens"),
        "{origin}"
    );
}

/// A saved plan names its sequence length (`seq_len:`), so `eval --plan` says nothing of a
/// default.
#[test]
fn a_saved_plan_names_no_sequence_length_default() {
    let r = run(&["eval", "--plan", "plans/seed-512b-32nodes.yaml"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stdout.contains("--seq-len not given"), "{}", r.stdout);
}

/// The README's first screen said "on B200 tpsim reads up to 106% fast" of the MoE runs, while
/// `accuracy --runs validation/modern_runs.yaml` prints a worst MoE error of 163.2% (an H100
/// run): a newcomer planning MoE on H100 read the headline as the worst case. It now quotes the
/// worst the command prints.
#[test]
fn readme_headline_quotes_the_worst_moe_error() {
    let r = run(&["accuracy", "--runs", "validation/modern_runs.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let moe = r
        .stdout
        .lines()
        .find(|l| l.starts_with("MoE: "))
        .unwrap_or_else(|| panic!("no MoE summary in {}", r.stdout));
    let at = moe.find("max ").expect("a max") + 4;
    let max: f64 = moe[at..]
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no max in {moe}"));
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let head = &readme[..readme.find("```").unwrap()];
    let quoted = format!("{}% on H100", max.round());
    assert!(
        head.contains(&quoted),
        "the README's first screen should quote {quoted} ({moe}):\n{head}"
    );
}

/// `plan`'s `search:` line counts dropped candidates under `invalid_plan` (Mistral 7B with its
/// sliding window at 8192 tokens: 3983 of them) and the README never said what that is. Every
/// reason a search reports is now explained in the README's "What the output means".
#[test]
fn readme_explains_every_reason_the_search_line_counts() {
    let v = json(&[
        "plan",
        "--hf-config",
        "models/hf/mistral-7b-v0.1.json",
        "--nodes",
        "1",
        "--global-batch",
        "128",
        "--seq-len",
        "8192",
        "--tp",
        "2",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let reasons = v["search"]["infeasible_by_reason"].as_object().unwrap();
    for key in ["invalid_plan", "out_of_memory", "ruled_out_by_pins"] {
        assert!(reasons.contains_key(key), "{key} not counted: {reasons:?}");
    }
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let start = readme.find("**What the output means.**").unwrap();
    let section = &readme[start..start + readme[start..].find("\n## ").unwrap()];
    for key in reasons.keys() {
        assert!(
            section.contains(&format!("`{key}` (")),
            "the README does not say what the search line's {key} counts"
        );
    }
}
