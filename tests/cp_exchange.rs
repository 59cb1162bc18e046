//! `--cp-exchange`: Transformer Engine's K/V ring or PyTorch's context_parallel (torchtitan).

mod common;
use common::{assert_one_line_error, json, run, scratch};

const EVAL: &[&str] = &[
    "eval",
    "--model",
    "llama3-8b",
    "--gpu",
    "h100-sxm-96g-500w",
    "--nodes",
    "1",
    "--tp",
    "1",
    "--cp",
    "4",
    "--dp",
    "2",
    "--micro-batch",
    "1",
    "--global-batch",
    "2",
    "--seq-len",
    "131072",
    "--zero",
    "3",
    "--recompute",
    "full",
    "--format",
    "json",
];

fn eval(extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = EVAL.iter().chain(extra).copied().collect();
    json(&args)
}

fn step_s(j: &serde_json::Value) -> f64 {
    j["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

#[test]
fn torchtitan_runs_pytorchs_all_gather_by_default_and_it_costs_more() {
    let torch = eval(&["--framework", "torchtitan"]);
    let ring = eval(&["--framework", "torchtitan", "--cp-exchange", "kv-ring"]);
    assert_eq!(torch["training"]["cp_exchange"], "torch-all-gather");
    assert_eq!(ring["training"]["cp_exchange"], "kv-ring");
    // The same work; PyTorch's ring adds its fp32 merges and wider K/V.
    assert!(
        step_s(&torch) > step_s(&ring) * 1.02,
        "{} vs {}",
        step_s(&torch),
        step_s(&ring)
    );
    let cp_bytes =
        |j: &serde_json::Value| j["plans"][0]["comm"]["cp"]["wire_bytes"].as_f64().unwrap();
    // K/V for all 32 query heads rather than 8 K/V heads: several times the bytes.
    assert!(cp_bytes(&torch) > 3.0 * cp_bytes(&ring));
    // The table says how CP runs.
    let table: Vec<&str> = EVAL[..EVAL.len() - 2]
        .iter()
        .copied()
        .chain(["--framework", "torchtitan"])
        .collect();
    let r = run(&table);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("context parallelism: PyTorch's context_parallel"),
        "{}",
        r.stdout
    );
}

#[test]
fn pytorchs_all_gather_is_refused_outside_torchtitan() {
    let args: Vec<&str> = EVAL
        .iter()
        .copied()
        .chain([
            "--framework",
            "megatron-core",
            "--cp-exchange",
            "torch-all-gather",
        ])
        .collect();
    assert_one_line_error(
        &run(&args),
        &[
            "--cp-exchange torch-all-gather",
            "megatron-core",
            "--framework torchtitan",
        ],
        &["panicked"],
        "torch all-gather under megatron-core",
    );
}

#[test]
fn a_saved_plan_keeps_its_cp_exchange() {
    let dir = scratch("cp-exchange", "saved");
    let path = dir.join("plan.yaml");
    let path = path.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--cp",
        "4",
        "--global-batch",
        "2",
        "--seq-len",
        "131072",
        "--framework",
        "torchtitan",
        "--cp-exchange",
        "kv-ring",
        "--save",
        path,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(path).unwrap();
    assert!(saved.contains("cp_exchange: kv-ring"), "{saved}");
    let again = json(&["eval", "--plan", path, "--format", "json"]);
    assert_eq!(again["training"]["cp_exchange"], "kv-ring");
}
