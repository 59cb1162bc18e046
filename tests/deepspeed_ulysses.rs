//! DeepSpeed's context parallelism, DeepSpeed-Ulysses (`sequence_parallel_size`): planned,
//! priced as the all-to-all over heads with its K/V head repeat, refused where DeepSpeed refuses
//! it, and written back.

mod common;

use common::*;
use serde_json::Value;

const LONG: &[&str] = &[
    "--model",
    "llama3-8b",
    "--seq-len",
    "65536",
    "--global-batch",
    "16",
    "--framework",
    "deepspeed",
];

fn with(extra: &[&str]) -> Vec<String> {
    LONG.iter()
        .chain(extra.iter())
        .map(|s| s.to_string())
        .collect()
}

fn run_owned(args: &[String]) -> Run {
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn first_plan(doc: &Value) -> &Value {
    &doc["plans"][0]
}

/// At 64K tokens the search splits the sequence as Ulysses does, never beside Megatron's sequence
/// parallelism (Megatron-DeepSpeed refuses the two together), and the header names the scheme.
#[test]
fn plan_searches_ulysses_without_megatron_sequence_parallelism() {
    let mut args = vec!["plan".to_string()];
    args.extend(with(&["--nodes", "1"]));
    let r = run_owned(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("DeepSpeed-Ulysses"), "{}", r.stdout);
    args.extend([
        "--format".to_string(),
        "json".to_string(),
        "--top".to_string(),
        "50".to_string(),
    ]);
    let doc: Value = serde_json::from_str(&run_owned(&args).stdout).unwrap();
    let plans = doc["plans"].as_array().unwrap();
    assert!(plans.iter().any(|p| p["cp"].as_u64() > Some(1)));
    for p in plans {
        if p["cp"].as_u64() > Some(1) && p["tp"].as_u64() > Some(1) {
            assert_eq!(p["sequence_parallel"], false, "{p}");
        }
    }
    assert_eq!(doc["training"]["cp_exchange"], "head-all-to-all");
}

/// Ulysses repeats a TP rank's K/V heads up to cp where there are fewer (`kv_replication_factor`),
/// so at cp 16 a model with 8 K/V heads sends as many K/V bytes as one with 16, and at cp 8 fewer.
#[test]
fn ulysses_sends_repeated_kv_heads_where_there_are_fewer_than_cp() {
    let cp_bytes = |kv: &str, cp: &str| {
        let mut args = vec!["eval".to_string()];
        args.extend(with(&[
            "--kv-heads",
            kv,
            "--nodes",
            "2",
            "--tp",
            "1",
            "--cp",
            cp,
            "--micro-batch",
            "1",
            "--zero",
            "2",
            "--format",
            "json",
        ]));
        let r = run_owned(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).unwrap();
        first_plan(&doc)["comm"]["cp"]["wire_bytes"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(cp_bytes("8", "16"), cp_bytes("16", "16"));
    assert!(cp_bytes("8", "8") < cp_bytes("16", "8"));
}

/// Megatron-DeepSpeed: "sequence_parallel_size > 1 enables DeepSpeed's sequence parallel, which is
/// not compatible with Megatron-LM's sequence parallel".
#[test]
fn ulysses_beside_megatron_sequence_parallelism_is_refused() {
    let mut args = vec!["eval".to_string()];
    args.extend(with(&[
        "--nodes",
        "1",
        "--tp",
        "2",
        "--cp",
        "4",
        "--sequence-parallel",
        "--zero",
        "1",
    ]));
    assert_one_line_error(
        &run_owned(&args),
        &[
            "--cp 4",
            "--sequence-parallel",
            "Megatron-DeepSpeed",
            "--sequence-parallel false",
        ],
        &[],
        "Ulysses with sequence parallelism",
    );
}

/// A ring is not DeepSpeed's; a TP rank whose query heads cp does not split is refused with the cp
/// that would.
#[test]
fn exchanges_and_head_splits_deepspeed_does_not_run_are_refused() {
    let mut ring = vec!["eval".to_string()];
    ring.extend(with(&[
        "--nodes",
        "1",
        "--tp",
        "1",
        "--cp",
        "8",
        "--cp-exchange",
        "kv-ring",
    ]));
    assert_one_line_error(
        &run_owned(&ring),
        &["--cp-exchange kv-ring", "Ulysses", "head-all-to-all"],
        &[],
        "a ring under deepspeed",
    );
    let mut heads = vec!["eval".to_string()];
    heads.extend(with(&["--nodes", "8", "--tp", "8", "--cp", "8"]));
    assert_one_line_error(
        &run_owned(&heads),
        &["--cp 8", "4 query and 1 K/V heads", "valid cp: 1, 2, 4"],
        &[],
        "query heads cp does not split",
    );
}

/// A Megatron-DeepSpeed line's Ulysses degree is not a Megatron-Core argument: it was skipped as
/// changing nothing.
#[test]
fn a_pasted_ulysses_degree_is_refused_not_skipped() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 32768 --vocab-size 128256 --micro-batch-size 1 --global-batch-size 16 --bf16 --tensor-model-parallel-size 1 --ds-sequence-parallel-size 8";
    assert_one_line_error(
        &run(&["eval", "--nodes", "1", "--megatron-args", line]),
        &[
            "--ds-sequence-parallel-size 8",
            "--framework deepspeed --cp",
        ],
        &[],
        "--ds-sequence-parallel-size",
    );
}
