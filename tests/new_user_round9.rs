//! Regressions from the ninth review of valid usage by a new user: an ML infrastructure engineer
//! about to train a mixture-of-experts model (DeepSeek-V3, Qwen3, Mixtral) on H100 and GB200
//! plans it at several sizes, pins the expert dimensions, compares the two best plans and renders
//! the report (each test names the finding it guards).

mod common;
use common::{json, run, scratch};

/// DeepSeek-V3 on 128 H100 nodes with DeepEP, the all-to-all overlap and FP8 (`plan`'s best two
/// tie on step time).
const DEEPSEEK_128: [&str; 14] = [
    "--model",
    "deepseek-v3",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "128",
    "--global-batch",
    "2048",
    "--moe-dispatcher",
    "deepep",
    "--overlap-moe-expert-parallel-comm",
    "--precision",
    "fp8",
    "--allow-uneven-pp",
];

/// The number right after `before` in `text`.
fn number_after(text: &str, before: &str) -> f64 {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"))
        + before.len();
    let len = text[at..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len() - at);
    text[at..at + len]
        .parse()
        .unwrap_or_else(|_| panic!("no number after {before:?} in {text}"))
}

/// `compare` of DeepSeek-V3's two best plans printed a total-memory row of 61.8 and 67.1 GiB,
/// "+5.3", and under it "plan A needs 5.2 GiB less memory per GPU": the sentence took the
/// unrounded totals (61.85 and 67.05) where the row subtracts the printed ones. The sentence now
/// gives the row's difference.
#[test]
fn compare_verdict_gives_the_memory_difference_the_total_row_prints() {
    let mut args = vec!["compare"];
    args.extend(DEEPSEEK_128);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let total = r
        .stdout
        .lines()
        .find(|l| l.contains("memory per GPU") && l.contains(" total "))
        .unwrap_or_else(|| panic!("no total row in {}", r.stdout));
    let cells: Vec<&str> = total.split('┆').map(|c| c.trim()).collect();
    let row_diff: f64 = cells[cells.len() - 1]
        .trim_end_matches('│')
        .trim()
        .parse()
        .unwrap();
    let verdict = r
        .stdout
        .lines()
        .find(|l| l.contains("GiB less memory per GPU"))
        .unwrap_or_else(|| panic!("no memory verdict in {}", r.stdout));
    let said = number_after(verdict, "needs ");
    assert!(
        (said - row_diff.abs()).abs() < 1e-9,
        "the verdict says {said} GiB, the total row {row_diff}:\n{}",
        r.stdout
    );
}

/// The layout figure of a 128-node plan (tp 2 on 8-GPU nodes) draws the nodes holding replica 0,
/// and with it replicas 1..3 beside it on those nodes (cells labelled (0..3, pp, tp)); its note
/// said "those holding data-parallel replica 0; the other 120 nodes hold replicas 1..63",
/// contradicting the cells it drew. The note now counts the replicas drawn (since figures round 27
/// the drawn nodes hold each stage's whole first EP group: replicas 0..15).
#[test]
fn folded_layout_names_the_replicas_its_nodes_hold() {
    let dir = scratch("new-user-round9", "layout");
    let mut args = vec!["eval"];
    args.extend(DEEPSEEK_128);
    args.extend([
        "--tp",
        "2",
        "--pp",
        "8",
        "--ep",
        "32",
        "--etp",
        "1",
        "--vpp",
        "4",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--report",
        dir.to_str().unwrap(),
    ]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    // The largest dp index among the drawn cells' "(dp,pp,tp)" labels.
    let drawn = svg
        .split('>')
        .filter_map(|piece| piece.split('<').next())
        .filter_map(|text| {
            let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
            let parts: Vec<u32> = inner.split(',').filter_map(|n| n.parse().ok()).collect();
            (parts.len() == 3).then_some(parts[0])
        })
        .max()
        .expect("cells labelled (dp,pp,tp)");
    // Since figures round 27 the fold draws each stage's whole first EP group (ep 32 at stride 1
    // over tp 2: replicas 0..15 on 4 nodes a stage), not only replica 0's node.
    assert_eq!(drawn, 15, "ep 32 over tp 2: one EP group holds 16 replicas");
    let note = svg
        .split('>')
        .filter_map(|piece| piece.split('<').next())
        .find(|t| t.contains("nodes drawn"))
        .expect("a folding note");
    assert!(
        note.contains("those holding data-parallel replicas 0..15;")
            && note.contains("the other 96 nodes hold replicas 16..63"),
        "{note}"
    );
}

/// Mixtral 8x7B with tp 8, pp 2 and ep 4 on two nodes has one dense data-parallel replica but
/// expert-DP 2 (8 GPUs a stage, 4 EP ranks): the table's `DP s` read 0.07 and the JSON 180 GB of
/// DP traffic (the expert gradients over expert-DP), while "why the best plan" said "DP 1: a single
/// replica; no gradient traffic", the JSON's link was null and `eval` printed the traffic "on -".
/// The line now names expert-DP with the traffic, and the link is expert-DP's (NVLink here).
#[test]
fn expert_gradients_with_one_dense_replica_are_named_with_their_link() {
    let scenario = [
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--tp",
        "8",
        "--pp",
        "2",
        "--etp",
        "1",
        "--ep",
        "4",
    ];
    let mut args = vec!["plan", "--top", "1"];
    args.extend(scenario);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    args.extend(["--format", "json"]);
    let best = &json(&args)["plans"][0];
    assert_eq!(best["dp"], 1);
    let dp = &best["comm"]["dp"];
    let gb = dp["wire_bytes"].as_f64().unwrap() / 1e9;
    assert!(gb > 1.0, "expert gradients move: {dp}");
    assert_eq!(dp["link"], "nvlink", "{dp}");
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("DP 1"))
        .unwrap_or_else(|| panic!("no DP line in {}", r.stdout));
    assert!(!line.contains("no gradient traffic"), "{line}");
    assert!(line.contains("(experts over expert-DP 2)"), "{line}");
    assert!(
        line.contains(&format!("{gb:.2} GB per GPU per step on NVLink")),
        "{line}"
    );

    let mut args = vec![
        "eval",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "--zero",
        "1",
    ];
    args.extend(scenario);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  DP ") && l.contains(" GB on "))
        .unwrap_or_else(|| panic!("no DP traffic line in {}", r.stdout));
    assert!(line.contains(" GB on NVLink "), "{line}");
}

/// DeepSeek-V3's best plan on 128 nodes (tp 2, ep 32): its DP line said "DP 64 with ZeRO-1 ...
/// on network and NVLink (4 ranks per node ...)", the dense group's ring, though most of those
/// bytes are the expert gradients over expert-DP 4 (128 GPUs a stage over 32 EP ranks), one rank
/// per node; no line of `plan` named expert-DP at all. The line now names it and its link.
#[test]
fn dp_line_names_the_expert_dp_group_and_its_link() {
    let mut args = vec!["plan", "--top", "1"];
    args.extend(DEEPSEEK_128);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    args.extend(["--format", "json"]);
    let best = &json(&args)["plans"][0];
    let n = |key: &str| best[key].as_u64().unwrap();
    let expert_dp = n("tp") * n("cp") * n("dp") / (n("ep") * n("etp"));
    assert!(expert_dp > 1 && n("ep") * n("etp") != n("tp"), "{best}");
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("DP {} ", n("dp"))))
        .unwrap_or_else(|| panic!("no DP line in {}", r.stdout));
    assert!(
        line.contains(&format!("(experts over expert-DP {expert_dp}, on network)")),
        "{line}"
    );
}
