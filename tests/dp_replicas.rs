//! Copies of the ZeRO-sharded states (hybrid sharding): Megatron-Core's
//! `--num-distributed-optimizer-instances`, torchtitan's HSDP replicate degree, tpsim's
//! `--dp-replicas N`. Each copy is sharded over dp x cp / N ranks; the copies all-reduce each
//! reduced gradient shard. Memory, traffic, the search, the pasted launch line and the emitted
//! ones.

mod common;

use common::*;

/// `eval --format json` of Llama 3 8B on 4 nodes, tp 2, with `extra` flags: the one plan.
fn eval_8b(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    json(&args)["plans"][0].clone()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// ZeRO-1 kept in 4 copies shards the optimizer states over 16 / 4 = 4 ranks instead of 16: four
/// times the optimizer bytes, the same weights and gradients; the gradient traffic gains the
/// all-reduce of each shard across the copies, the parameter gather stays inside a copy.
#[test]
fn copies_multiply_the_sharded_states_and_add_the_shard_all_reduce() {
    let one = eval_8b(&["--zero", "1"]);
    let four = eval_8b(&["--zero", "1", "--dp-replicas", "4"]);
    assert_eq!(one["dp_replicas"], 1);
    assert_eq!(four["dp_replicas"], 4);
    let ratio = f(&four["memory"]["optimizer_bytes"]) / f(&one["memory"]["optimizer_bytes"]);
    assert!((ratio - 4.0).abs() < 1e-9, "optimizer ratio {ratio}");
    for same in ["weights_bytes", "gradients_bytes", "activations_bytes"] {
        assert_eq!(one["memory"][same], four["memory"][same], "{same}");
    }
    // Wire bytes per GPU: the reduce-scatter over 16 ranks moves 15/16 of the gradients, over 4
    // ranks 3/4, and the all-reduce of a quarter across 4 copies 2·3/4 of a quarter; the gather
    // of the updated weights moves 15/16 against 3/4 of them.
    let dp_one = f(&one["comm"]["dp"]["wire_bytes"]);
    let dp_four = f(&four["comm"]["dp"]["wire_bytes"]);
    assert!(dp_one > 0.0 && dp_four > 0.0);
    let grads = f(&one["memory"]["gradients_bytes"]);
    let weights_gathered = dp_one - grads * 15.0 / 16.0;
    let want = grads * (3.0 / 4.0 + 2.0 * 3.0 / 4.0 / 4.0)
        + weights_gathered * (3.0 / 4.0) / (15.0 / 16.0);
    assert!(
        (dp_four - want).abs() <= 1e-6 * want,
        "DP wire bytes {dp_four} vs {want}"
    );
    // The copies' all-reduce crosses nodes (4 copies of 4 ranks at stride 2 on 8-GPU nodes).
    assert_eq!(four["comm"]["dp"]["link"], "network");
}

/// Every input that cannot be a number of copies is one line and exit 2, naming the value, the
/// rule and a fix.
#[test]
fn impossible_copies_are_refused_with_the_rule() {
    let base = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
    ];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        run(&args)
    };
    assert_one_line_error(
        &with(&["--zero", "0", "--dp-replicas", "2"]),
        &["--dp-replicas 2", "--zero 0", "--zero 1, 2 or 3"],
        &[],
        "copies without ZeRO",
    );
    assert_one_line_error(
        &with(&["--zero", "1", "--dp-replicas", "3"]),
        &[
            "--dp-replicas 3",
            "does not divide the --dp 16 data-parallel ranks",
            "valid: 1, 2, 4, 8",
        ],
        // 16 copies would leave each one rank.
        &["8, 16"],
        "copies not dividing dp",
    );
    assert_one_line_error(
        &with(&["--zero", "1", "--dp-replicas", "16"]),
        &["--dp-replicas 16", "one rank", "--zero 0"],
        &[],
        "copies of one rank",
    );
    assert_one_line_error(
        &with(&["--zero", "1", "--dp-replicas", "0"]),
        &["--dp-replicas 0"],
        &[],
        "zero copies",
    );
    assert_one_line_error(
        &with(&[
            "--zero",
            "3",
            "--dp-replicas",
            "2",
            "--framework",
            "deepspeed",
        ]),
        &["--dp-replicas 2", "deepspeed", "MiCS", "--dp-replicas 1"],
        &[],
        "DeepSpeed",
    );
    assert_one_line_error(
        &with(&[
            "--zero",
            "1",
            "--dp-replicas",
            "2",
            "--framework",
            "torchtitan",
        ]),
        &["--dp-replicas 2", "torchtitan", "HSDP", "--zero 3"],
        &[],
        "torchtitan below ZeRO-3",
    );
    assert_one_line_error(
        &run(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--zero",
            "0",
            "--dp-replicas",
            "2",
        ]),
        &["--dp-replicas 2", "--zero 0"],
        &[],
        "pinned copies with a pinned ZeRO-0",
    );
}

/// A pasted Megatron-LM line's `--num-distributed-optimizer-instances` is read (it was skipped as
/// changing nothing), its errors speak the line's words, and `--emit megatron` writes it back: the
/// round trip gives the same plan and step.
#[test]
fn megatron_lines_read_and_write_the_distributed_optimizer_instances() {
    const LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --vocab-size 128256 --micro-batch-size 1 --global-batch-size 256 --bf16 --tensor-model-parallel-size 2";
    let pasted = run(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        &format!("{LINE} --use-distributed-optimizer --num-distributed-optimizer-instances 2"),
    ]);
    assert_eq!(pasted.code, 0, "{}", pasted.stderr);
    assert!(
        pasted
            .stdout
            .contains("ZeRO-1 (2 copies of the sharded states, each over 8 ranks)"),
        "{}",
        pasted.stdout
    );
    assert!(
        !pasted
            .stderr
            .contains("skipped: --num-distributed-optimizer-instances"),
        "{}",
        pasted.stderr
    );
    assert_one_line_error(
        &run(&[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{LINE} --num-distributed-optimizer-instances 2"),
        ]),
        &[
            "--num-distributed-optimizer-instances 2",
            "--use-distributed-optimizer",
        ],
        &["--dp-replicas", "--zero"],
        "instances without the distributed optimizer",
    );
    // The emitted line carries the instances, and reads back to the same step.
    let emitted = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
        "--zero",
        "1",
        "--dp-replicas",
        "2",
        "--emit",
        "megatron",
    ]);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    assert!(
        emitted
            .stdout
            .contains("--num-distributed-optimizer-instances 2"),
        "{}",
        emitted.stdout
    );
    let step = |args: &[&str]| f(&json(args)["plans"][0]["time"]["step_s"]);
    let direct = step(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--global-batch",
        "256",
        "--zero",
        "1",
        "--dp-replicas",
        "2",
        "--format",
        "json",
    ]);
    let read_back = json(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        emitted.stdout.trim(),
        "--format",
        "json",
    ]);
    assert_eq!(read_back["plans"][0]["dp_replicas"], 2);
    assert!(f(&read_back["plans"][0]["time"]["step_s"]) > 0.0 && direct > 0.0);
    // NeMo 1.x has no key tpsim can vouch for: refused, naming the emitters that have one.
    assert_one_line_error(
        &run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--global-batch",
            "256",
            "--zero",
            "1",
            "--dp-replicas",
            "2",
            "--emit",
            "nemo",
        ]),
        &["--dp-replicas", "--emit megatron", "megatron-bridge"],
        &[],
        "NeMo",
    );
}

/// The search offers copies that keep each one inside an NVLink domain where the framework runs
/// them, labels them "xN" with a line saying what it means, and a pin holds every shown plan to it.
#[test]
fn the_search_offers_node_local_copies_and_takes_a_pin() {
    let args = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "64",
        "--framework",
        "torchtitan",
        "--global-batch",
        "1024",
        "--top",
        "30",
        "--format",
        "json",
    ];
    let plans = json(&args)["plans"].as_array().unwrap().clone();
    // tp 1 on 8-GPU nodes: the node-local copy has 8 ranks, so 512 / 8 = 64 copies.
    assert!(
        plans.iter().any(|p| p["dp_replicas"] == 64 && p["tp"] == 1),
        "no node-local copies among the top 30"
    );
    let mut pinned = args.to_vec();
    pinned.extend_from_slice(&["--dp-replicas", "64"]);
    let plans = json(&pinned)["plans"].as_array().unwrap().clone();
    assert!(!plans.is_empty());
    assert!(plans.iter().all(|p| p["dp_replicas"] == 64));
    let table_args: Vec<&str> = pinned
        .iter()
        .copied()
        .filter(|a| *a != "--format" && *a != "json")
        .collect();
    let table = run(&table_args);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains(" x64 "), "{}", table.stdout);
    assert!(table.stdout.contains("zero \"xN\""), "{}", table.stdout);
}
