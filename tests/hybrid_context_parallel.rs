//! Context parallelism in hybrid Mamba-Transformer stacks, as Megatron-Core runs it
//! (`megatron/core/ssm/mamba_context_parallel.py` at Megatron-LM d98e8a64): the attention layers
//! keep their exchange, and every Mamba mixer trades sequence shards for head shards around its
//! conv and scan — z, x, B, C and dt by one all-to-all each, the scan's output y back — and the
//! gradients the reverse way in backward (`cost::hybrid::MambaExchange`, the `mamba_cp_comm` term).

mod common;

use common::*;
use serde_json::Value;

const BASE: [&str; 5] = ["eval", "--model", "nemotron-h-8b", "--format", "json"];

fn eval(extra: &[&str]) -> Value {
    let args: Vec<&str> = BASE.iter().chain(extra).copied().collect();
    json(&args)["plans"][0].clone()
}

fn term<'a>(plan: &'a Value, kind: &str) -> &'a Value {
    plan["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} term in {plan}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Nemotron-H 8B's Mamba layers: the M symbols of its pattern.
fn mamba_layers() -> f64 {
    let file = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml")).unwrap();
    let pattern = file
        .lines()
        .find_map(|l| l.trim().strip_prefix("pattern: \""))
        .unwrap();
    pattern
        .chars()
        .take_while(|c| *c != '"')
        .filter(|c| *c == 'M')
        .count() as f64
}

#[test]
fn a_hybrid_stack_takes_context_parallelism_and_prices_the_mamba_exchange() {
    let p = eval(&[
        "--nodes",
        "1",
        "--tp",
        "2",
        "--cp",
        "2",
        "--seq-len",
        "16384",
        "--global-batch",
        "8",
    ]);
    assert_eq!(p["cp"], 2, "{p}");
    let mamba = term(&p, "mamba_cp_comm");
    assert_eq!(mamba["group"], "cp");
    // Synchronous all-to-alls the conv and `out_proj` wait for: nothing hides them.
    assert_eq!(mamba["hidden_by"], "nothing");
    assert!(f(&mamba["time_s"]) > 0.0);
    assert_eq!(f(&mamba["time_s"]), f(&mamba["exposed_s"]));
    // The attention layers keep their own exchange, and the CP group's traffic is both.
    let attention = term(&p, "cp_comm");
    assert!(f(&attention["wire_bytes"]) > 0.0);
    let both = f(&attention["wire_bytes"]) + f(&mamba["wire_bytes"]);
    assert!((f(&p["comm"]["cp"]["wire_bytes"]) / both - 1.0).abs() < 1e-12);
    assert!((f(&p["ledger"]["cp_wire_bytes"]) / both - 1.0).abs() < 1e-9);
    // A transformer has the term at zero.
    let llama = json(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--cp",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(
        f(&term(&llama["plans"][0], "mamba_cp_comm")["wire_bytes"]),
        0.0
    );
}

#[test]
fn the_exchange_moves_the_bytes_of_the_mixers_tensors() {
    // Hand count from MambaMixer's shapes for Nemotron-H 8B (d_inner 8192 = 128 heads x 64, 8
    // groups of state 128) at tp 2, cp 2, micro-batch 1 of 16,384 tokens: a rank holds 8,192
    // tokens of its TP rank's in_proj output, bf16. z and x: 8192 x 4096 x 2 = 67,108,864 bytes
    // each; B and C: 8192 x (4 groups x 128) x 2 = 8,388,608; dt: 8192 x 64 x 2 = 1,048,576; y
    // back: 67,108,864. Each all-to-all keeps half, so one pass sends 109,576,192 bytes and a
    // mixer's forward and backward 219,152,384 per micro-batch.
    let p = eval(&[
        "--nodes",
        "1",
        "--tp",
        "2",
        "--cp",
        "2",
        "--seq-len",
        "16384",
        "--global-batch",
        "8",
    ]);
    let rows: Vec<&Value> = p["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["site"].as_str().unwrap().starts_with("Mamba"))
        .collect();
    let micro_batches = 4.0; // 8 sequences over dp 2
    let count = mamba_layers() * micro_batches;
    assert_eq!(mamba_layers(), 24.0);
    let tensor = |prefix: &str| {
        let row = rows
            .iter()
            .find(|e| e["site"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix}: {rows:?}"));
        assert_eq!(f(&row["count"]), count, "{row}");
        assert_eq!(row["op"], "all_to_all");
        f(&row["tensor_bytes"])
    };
    assert_eq!(tensor("Mamba mixer: z,"), 67_108_864.0);
    assert_eq!(tensor("Mamba mixer: x,"), 67_108_864.0);
    assert_eq!(tensor("Mamba mixer: B "), 8_388_608.0);
    assert_eq!(tensor("Mamba mixer: C "), 8_388_608.0);
    assert_eq!(tensor("Mamba mixer: dt,"), 1_048_576.0);
    assert_eq!(tensor("Mamba mixer: scan output y"), 67_108_864.0);
    assert_eq!(tensor("Mamba backward: gradient of y"), 67_108_864.0);
    assert_eq!(rows.len(), 12, "six forward, six backward: {rows:?}");
    let mamba = term(&p, "mamba_cp_comm");
    assert_eq!(f(&mamba["wire_bytes"]), count * 219_152_384.0);
    // The rows' times add up to the term's.
    let rows_s: f64 = rows.iter().map(|e| f(&e["count"]) * f(&e["time_s"])).sum();
    assert!((rows_s / f(&mamba["time_s"]) - 1.0).abs() < 1e-9);
}

#[test]
fn a_tp_rank_with_fewer_groups_than_cp_sends_each_group_to_several_cp_ranks() {
    // At tp 8 a TP rank holds one of the 8 groups; at cp 2 MambaContextParallel repeats it on
    // both CP ranks (group_repeat_count 2), so B and C go out twice as wide: 8192 tokens x (2 x
    // 128) x 2 bytes = 4,194,304 each, where without the copy they would be 2,097,152.
    let p = eval(&[
        "--nodes",
        "2",
        "--tp",
        "8",
        "--cp",
        "2",
        "--seq-len",
        "16384",
        "--global-batch",
        "8",
    ]);
    let b = p["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["site"].as_str().unwrap().starts_with("Mamba mixer: B "))
        .unwrap();
    assert_eq!(f(&b["tensor_bytes"]), 4_194_304.0, "{b}");
}

#[test]
fn full_recompute_runs_the_forward_exchange_again() {
    let at = |recompute: &str| {
        let p = eval(&[
            "--nodes",
            "1",
            "--tp",
            "2",
            "--cp",
            "2",
            "--seq-len",
            "16384",
            "--global-batch",
            "8",
            "--recompute",
            recompute,
        ]);
        f(&term(&p, "mamba_cp_comm")["wire_bytes"])
    };
    let (none, full, selective) = (at("none"), at("full"), at("selective"));
    // Forward, backward, and the forward again: 3 passes for 2.
    assert!((full / none - 1.5).abs() < 1e-12, "{full} vs {none}");
    // Megatron-Core's selective recompute re-runs attention cores, no Mamba layer.
    assert_eq!(selective, none);
}

#[test]
fn the_exchange_takes_longer_as_cp_grows_and_longer_on_the_network_than_on_nvlink() {
    // 32 H100s at tp 4: cp 2 keeps the CP group in a node (NVLink), cp 4 and 8 cross nodes.
    let at = |cp: &str| {
        eval(&[
            "--nodes",
            "4",
            "--tp",
            "4",
            "--cp",
            cp,
            "--seq-len",
            "65536",
            "--global-batch",
            "8",
            "--recompute",
            "full",
        ])
    };
    let (two, four, eight) = (at("2"), at("4"), at("8"));
    assert_eq!(two["comm"]["cp"]["link"], "nvlink");
    assert_eq!(four["comm"]["cp"]["link"], "network");
    assert_eq!(eight["comm"]["cp"]["link"], "network");
    let time = |p: &Value| f(&term(p, "mamba_cp_comm")["time_s"]);
    let bytes = |p: &Value| f(&term(p, "mamba_cp_comm")["wire_bytes"]);
    assert!(time(&two) < time(&four), "{} {}", time(&two), time(&four));
    assert!(
        time(&four) < time(&eight),
        "{} {}",
        time(&four),
        time(&eight)
    );
    // Per byte sent, the network is slower than NVLink.
    assert!(time(&four) / bytes(&four) > 2.0 * time(&two) / bytes(&two));
}

#[test]
fn activations_shrink_with_cp() {
    let at = |cp: &str| {
        let p = eval(&[
            "--nodes",
            "1",
            "--tp",
            "2",
            "--cp",
            cp,
            "--seq-len",
            "32768",
            "--global-batch",
            "8",
            "--sequence-parallel",
        ]);
        f(&p["memory"]["activations_bytes"])
    };
    let (one, two, four) = (at("1"), at("2"), at("4"));
    assert!(two < 0.6 * one, "cp 2 keeps {two}, cp 1 {one}");
    assert!(four < 0.6 * two, "cp 4 keeps {four}, cp 2 {two}");
}

#[test]
fn the_search_offers_context_parallel_plans_for_a_hybrid_stack_at_long_sequences() {
    let v = json(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--seq-len",
        "131072",
        "--nodes",
        "4",
        "--global-batch",
        "32",
        "--top",
        "400",
        "--format",
        "json",
    ]);
    let plans = v["plans"].as_array().unwrap();
    let with_cp: Vec<&Value> = plans.iter().filter(|p| f(&p["cp"]) > 1.0).collect();
    assert!(
        !with_cp.is_empty(),
        "no plan with cp > 1 among {}",
        plans.len()
    );
    assert!(
        with_cp
            .iter()
            .all(|p| f(&term(p, "mamba_cp_comm")["wire_bytes"]) > 0.0)
    );
    // Pinned, cp 2 plans are searched and fit.
    let r = run(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--seq-len",
        "131072",
        "--nodes",
        "4",
        "--global-batch",
        "32",
        "--cp",
        "2",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn what_megatron_core_refuses_is_refused_in_one_line() {
    // 128 Mamba heads at tp 8 leave 16 per TP rank: cp 32 leaves a CP rank half a head.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--cp",
        "32",
        "--seq-len",
        "65536",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp 32 with the hybrid Mamba-Transformer model nemotron-h-8b at --tp 8",
            "nheads must be evenly divisible by tp_size * cp_size",
            "mamba_context_parallel.py",
            "valid cp at tp 8: 1, 2, 4, 8, 16",
        ],
        &["panicked", "not priced"],
        "heads",
    );
    // 96 heads in 6 groups: cp 4 splits the heads (24 per rank) but not the 6 groups.
    let dir = scratch("hybrid_context_parallel", "groups");
    let file = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml"))
        .unwrap()
        .replace("mamba_heads: 128 ", "mamba_heads: 96 ")
        .replace("mamba_groups: 8 ", "mamba_groups: 6 ");
    assert!(file.contains("mamba_groups: 6 "));
    let path = dir.join("six-groups.yaml");
    std::fs::write(&path, file).unwrap();
    let r = run(&[
        "eval",
        "--model",
        path.to_str().unwrap(),
        "--nodes",
        "1",
        "--tp",
        "1",
        "--cp",
        "4",
        "--seq-len",
        "16384",
        "--global-batch",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp 4",
            "6 Mamba groups over tp 1",
            "ngroups must be evenly divisible by tp_size * cp_size",
            "valid cp at tp 1: 1, 2, 3, 6",
        ],
        &["panicked"],
        "groups",
    );
}

#[test]
fn an_emitted_line_with_cp_reads_back_as_the_same_plan() {
    let plan = [
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--cp",
        "4",
        "--seq-len",
        "32768",
        "--global-batch",
        "16",
        "--sequence-parallel",
        "--zero",
        "1",
    ];
    let emit: Vec<&str> = ["eval"]
        .iter()
        .chain(&plan)
        .chain(&["--emit", "megatron"])
        .copied()
        .collect();
    let r = run(&emit);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.lines().last().unwrap().to_string();
    assert!(line.contains("--context-parallel-size 4"), "{line}");
    assert!(line.contains("--hybrid-layer-pattern"), "{line}");
    let direct: Vec<&str> = ["eval"]
        .iter()
        .chain(&plan)
        .chain(&["--format", "json"])
        .copied()
        .collect();
    let direct = json(&direct)["plans"][0].clone();
    let back = json(&[
        "eval",
        "--megatron-args",
        &line,
        "--nodes",
        "2",
        "--format",
        "json",
    ])["plans"][0]
        .clone();
    assert_eq!(back["cp"], 4);
    let (a, b) = (f(&direct["time"]["step_s"]), f(&back["time"]["step_s"]));
    assert!((a / b - 1.0).abs() < 1e-9, "step: {a} vs {b}");
    let (a, b) = (
        f(&direct["memory"]["total_bytes"]),
        f(&back["memory"]["total_bytes"]),
    );
    assert!((a / b - 1.0).abs() < 1e-9, "memory: {a} vs {b}");
    // Megatron-Bridge's HybridModelProvider takes the same degree.
    let bridge: Vec<&str> = ["eval"]
        .iter()
        .chain(&plan)
        .chain(&["--emit", "megatron-bridge"])
        .copied()
        .collect();
    let r = run(&bridge);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("model.context_parallel_size=4"),
        "{}",
        r.stdout
    );
}
