//! Review round 23: this session's optimizer pricing — the precision-aware optimizer at its
//! default dtypes and Muon (`cost::muon`, the optimizer term, Muon's memory, refusals, emitters),
//! read against Megatron-LM at d98e8a64 (megatron/core/optimizer/{emerging_optimizers.py,
//! layer_wise_optimizer.py,__init__.py}, megatron/training/arguments.py) and Megatron-Bridge
//! v0.2.0..v0.6.0.
//!
//! Defects found and fixed, a test each:
//! 1. The QKV weight's Newton–Schulz was priced as 3·groups per-group blocks. Megatron-Core's
//!    `TensorParallelMuon.orthogonalize` views the fused weight as [groups, q + k + v, hidden],
//!    splits dim 1 and reshapes each part back to (-1, hidden): one heads·d × hidden query
//!    matrix and one groups·d × hidden key and value matrix (the same in muon.py since
//!    a2381d8007). Multi-head attention (kv_heads = heads) was priced at 1/heads of its query's
//!    iteration; Llama 3 70B's Muon step at tp 8 rises from 1.908 to 2.101 s. No published row
//!    moves: the only Muon rows, Kimi K2's, use MLA, whose projections were already whole.
//! 2. `--dp-replicas N > 1` with Muon and ZeRO-1 was priced and emitted
//!    (`--num-distributed-optimizer-instances 2 --optimizer muon`), a line Megatron-Core asserts
//!    on: "LayerWiseDistributedOptimizer does not support num_distributed_optimizer_instances > 1"
//!    (layer_wise_optimizer.py). Refused by `ParallelPlan::build` and by `plan`'s pins.
//! 3. `eval`'s optimizer line said "gathered whole over TP" also at tp 1 (no gather), and at
//!    tp > 1 never said the bytes of that fp32 gather, which the optimizer term carries (JSON
//!    `terms[optimizer].wire_bytes`) and the TP line leaves out: the line now says them.
//! 4. A launch line's `--optimizer dist_muon` without `--use-distributed-optimizer` was read as
//!    ZeRO-0, though arguments.py turns the layer-wise distributed optimizer on for it by itself.
//! 5. A launch line's `--muon-no-split-qkv` was skipped as changing neither memory nor time,
//!    though without the split the fused QKV weight is one (heads + 2·groups)·d × hidden matrix
//!    to orthogonalize: refused by name, as the other Muon settings tpsim does not price are
//!    (left alone under `--multi-latent-attention`, whose projections are never split).

mod common;
use common::{assert_one_line_error, json, run};
use tpsim::cost::muon::{flops_per_param, newton_schulz_flops};

/// Defect 1, multi-head attention: GPT-3 175B's layer is Q, K, V and the output projection, each
/// h × h, FC1 4h × h and FC2 h × 4h; the per-group split priced Q, K and V as 96 blocks of
/// 128 × h each.
#[test]
fn muon_qkv_split_gives_three_whole_matrices_with_multi_head_attention() {
    let model = tpsim::specs::load_model("gpt3-175b").unwrap();
    let h: f64 = 12288.0;
    let attention = 4.0 * newton_schulz_flops(h, h);
    let mlp = newton_schulz_flops(4.0 * h, h) + newton_schulz_flops(h, 4.0 * h);
    let params = 4.0 * h * h + 8.0 * h * h;
    let want = (attention + mlp) / params;
    let got = flops_per_param(&model).rest;
    assert!(
        (got / want - 1.0).abs() < 1e-12,
        "GPT-3 175B Newton-Schulz FLOPs per parameter: got {got}, want {want}"
    );
}

/// Defect 1, grouped-query attention: Llama 3 8B (32 heads, 8 groups, d 128, hidden 4096): one
/// 4096-row query matrix and 1024-row key and value matrices, not 8 groups of 512 + 128 + 128.
#[test]
fn muon_qkv_split_gives_one_query_matrix_across_groups() {
    let model = tpsim::specs::load_model("llama3-8b").unwrap();
    let h: f64 = 4096.0;
    let f: f64 = 14336.0;
    let attention = newton_schulz_flops(h, h) + 2.0 * newton_schulz_flops(1024.0, h);
    let proj = newton_schulz_flops(h, h);
    let mlp = newton_schulz_flops(2.0 * f, h) + newton_schulz_flops(h, f);
    let params = h * (h + 2.0 * 1024.0) + h * h + 3.0 * f * h;
    let want = (attention + proj + mlp) / params;
    let got = flops_per_param(&model).rest;
    assert!(
        (got / want - 1.0).abs() < 1e-12,
        "Llama 3 8B Newton-Schulz FLOPs per parameter: got {got}, want {want}"
    );
}

const MUON_8B: &[&str] = &[
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "4",
    "--framework",
    "megatron-core",
    "--optimizer-states",
    "muon",
    "--global-batch",
    "256",
];

/// `command` on the Muon scenario with `extra` flags.
fn cmd(command: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
    std::iter::once(&command)
        .chain(MUON_8B)
        .chain(extra)
        .copied()
        .collect()
}

/// Defect 2: several copies of Muon's sharded states, refused in eval (and its --emit) and in
/// plan's pins, naming the value, Megatron-Core's assertion and the fix.
#[test]
fn muon_with_several_state_copies_is_refused() {
    let needles = [
        "--dp-replicas 2",
        "muon",
        "num_distributed_optimizer_instances > 1",
        "drop --dp-replicas",
    ];
    let copies = [
        "--tp",
        "2",
        "--dp",
        "16",
        "--zero",
        "1",
        "--dp-replicas",
        "2",
    ];
    let eval = run(&cmd("eval", &copies));
    assert_one_line_error(&eval, &needles, &[], "eval --dp-replicas 2 with Muon");
    let emit = run(&cmd(
        "eval",
        &[&copies[..], &["--emit", "megatron"]].concat(),
    ));
    assert_one_line_error(
        &emit,
        &needles,
        &[],
        "eval --emit megatron with Muon copies",
    );
    let plan = run(&cmd("plan", &["--dp-replicas", "2"]));
    assert_one_line_error(&plan, &needles, &[], "plan --dp-replicas 2 with Muon");
    // One copy stays priced: the refusal is about copies, not about ZeRO-1.
    let one = json(&cmd(
        "eval",
        &["--tp", "2", "--dp", "16", "--zero", "1", "--format", "json"],
    ));
    assert_eq!(one["plans"][0]["zero"], 1);
}

/// The optimizer term of `eval --format json`, and the optimizer line of the text.
fn optimizer_term_and_line(extra: &[&'static str]) -> (serde_json::Value, String) {
    let mut args = cmd("eval", extra);
    let text = run(&args);
    assert!(text.code == 0 || text.code == 1, "{}", text.stderr);
    let line = text
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("optimizer") && l.contains(" s "))
        .unwrap_or_else(|| panic!("no optimizer time line in:\n{}", text.stdout))
        .to_string();
    args.extend(["--format", "json"]);
    let doc = json(&args);
    let term = doc["plans"][0]["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "optimizer")
        .unwrap()
        .clone();
    (term, line)
}

/// Defect 3: at tp 1 there is no TP gather to speak of; at tp 2 the line says the gather's bytes,
/// the same as the optimizer term's wire bytes in the JSON.
#[test]
fn muon_optimizer_line_says_its_tp_gather_only_where_there_is_one() {
    let (term, line) = optimizer_term_and_line(&["--tp", "1", "--dp", "32", "--zero", "1"]);
    assert_eq!(term["wire_bytes"].as_f64().unwrap(), 0.0);
    assert!(line.contains("Muon"), "{line}");
    assert!(!line.contains("gathered"), "tp 1 has no TP gather: {line}");

    let (term, line) = optimizer_term_and_line(&["--tp", "2", "--dp", "16", "--zero", "1"]);
    let bytes = term["wire_bytes"].as_f64().unwrap();
    assert!(bytes > 0.0, "tp 2 gathers over TP: {term}");
    let said = format!("({:.2} GB", bytes / 1e9);
    assert!(
        line.contains("gathered whole over (expert) TP") && line.contains(&said),
        "want {said} in: {line}"
    );
}

/// Defect 4: `--optimizer dist_muon` turns the layer-wise distributed optimizer on by itself
/// (arguments.py at d98e8a64: `args.use_layer_wise_distributed_optimizer = True`), so a line
/// without `--use-distributed-optimizer` shards Muon's states (ZeRO-1). It was read as ZeRO-0:
/// every rank held and orthogonalized every weight (16× the Newton–Schulz work here).
#[test]
fn dist_muon_on_a_launch_line_shards_the_states() {
    let dir = common::scratch("review_round23", "dist_muon");
    let emitted = run(&cmd(
        "eval",
        &[
            "--tp", "2", "--dp", "16", "--zero", "1", "--emit", "megatron",
        ],
    ));
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let line = emitted.stdout.trim().to_string();
    assert!(
        line.contains("--use-distributed-optimizer") && line.contains("--optimizer muon"),
        "{line}"
    );
    let dist = line
        .replace("--use-distributed-optimizer", "")
        .replace("--optimizer muon", "--optimizer dist_muon");
    let read = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let at = format!("@{}", path.display());
        json(&[
            "eval",
            "--nodes",
            "4",
            "--gpu",
            "h100-sxm-80g",
            "--megatron-args",
            &at,
            "--format",
            "json",
        ])
    };
    let muon = read("muon.sh", &line);
    let dist = read("dist_muon.sh", &dist);
    for doc in [&muon, &dist] {
        assert_eq!(doc["training"]["optimizer_states"], "muon");
        assert_eq!(doc["plans"][0]["zero"], 1, "{}", doc["plans"][0]);
    }
    assert_eq!(
        muon["plans"][0]["time"]["optimizer_s"],
        dist["plans"][0]["time"]["optimizer_s"]
    );
    assert_eq!(
        muon["plans"][0]["memory"]["optimizer_bytes"],
        dist["plans"][0]["memory"]["optimizer_bytes"]
    );
}

/// Defect 5: `--muon-no-split-qkv` changes the Newton–Schulz step; refused by name.
#[test]
fn muon_without_the_qkv_split_is_refused_by_name() {
    let dir = common::scratch("review_round23", "no_split_qkv");
    let emitted = run(&cmd(
        "eval",
        &[
            "--tp", "2", "--dp", "16", "--zero", "1", "--emit", "megatron",
        ],
    ));
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let line = emitted
        .stdout
        .trim()
        .replace("--optimizer muon", "--optimizer muon --muon-no-split-qkv");
    let path = dir.join("no_split.sh");
    std::fs::write(&path, line).unwrap();
    let at = format!("@{}", path.display());
    let r = run(&[
        "eval",
        "--nodes",
        "4",
        "--gpu",
        "h100-sxm-80g",
        "--megatron-args",
        &at,
    ]);
    assert_one_line_error(
        &r,
        &["--muon-no-split-qkv", "query, key and value", "drop it"],
        &["skipped"],
        "--muon-no-split-qkv",
    );
}
