//! Leftovers round 39: the default global batch keeps GPT-3's tokens per step (1536 x 2048 =
//! 3,145,728) at any sequence length, in every command that takes it.

mod common;
use common::{csv_records, run};

/// `plan` at a 131072-token context without --global-batch: 24 sequences (3.1M tokens), not
/// 1536 sequences (201M tokens, a 9,318 s step on one node).
#[test]
fn plan_default_batch_keeps_gpt3_tokens_at_long_context() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--seq-len",
        "131072",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r.stderr.lines().next().unwrap_or_default();
    assert!(
        note.starts_with(
            "note: --global-batch not given: 24 sequences x 131072 tokens = 3.1M tokens per step (GPT-3 175B's 3.1M tokens, 1536 x 2048, Brown et al. 2020, in sequences of --seq-len 131072)"
        ),
        "{note}"
    );
    assert!(
        r.stdout
            .contains("training: 24 sequences x 131072 tokens per step"),
        "{}",
        r.stdout
    );
}

/// `eval` takes the same default as `plan` (one function, one source).
#[test]
fn eval_default_batch_matches_plan_at_long_context() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--seq-len",
        "131072",
        "--tp",
        "2",
        "--cp",
        "4",
    ]);
    assert!(
        r.stdout
            .contains("micro-batch 1 x 24 micro-batches = 24 sequences"),
        "{}",
        r.stdout
    );
}

/// A length that is no power of two takes the 2^a or 3 x 2^a nearest GPT-3's tokens (1024 x 3000
/// = 3.07M), not a plain rounding (1049, a prime no data-parallel degree divides).
#[test]
fn default_batch_at_an_odd_length_stays_splittable() {
    let r = run(&[
        "plan",
        "--params",
        "1B",
        "--nodes",
        "1",
        "--seq-len",
        "3000",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r.stderr.lines().next().unwrap_or_default();
    assert!(
        note.contains("1024 sequences x 3000 tokens = 3.1M tokens per step"),
        "{note}"
    );
}

/// `sweep --axis seq-len`: each point takes the default at its own length, the same tokens per
/// step, and the note says so; the 2048 point keeps GPT-3's 1536 sequences.
#[test]
fn sweep_over_seq_len_keeps_the_default_tokens_per_step() {
    let r = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--axis",
        "seq-len",
        "--values",
        "2048,131072",
        "--format",
        "csv",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let records = csv_records(&r.stdout);
    let header = &records[0];
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (seq, batch) = (column("seq_len"), column("global_batch"));
    let pairs: Vec<(String, String)> = records[1..]
        .iter()
        .map(|row| (row[seq].clone(), row[batch].clone()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("2048".to_string(), "1536".to_string()),
            ("131072".to_string(), "24".to_string())
        ]
    );
    assert!(
        r.stderr.contains(
            "--global-batch not given: 3.1M tokens per step at every point, in sequences of the point's length"
        ),
        "{}",
        r.stderr
    );
}

/// One wording of a range's basis: the JSON's `time.step_s_range_basis` is the text the range
/// line says after "tpsim's error on" (it was "dense models, megatron-core on h100 (136 runs)"
/// beside "136 runs, dense models, megatron-core on h100").
#[test]
fn json_range_basis_is_the_range_lines_words() {
    let args = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "128",
        "--top",
        "1",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = common::json(&[&args[..], &["--format", "json"][..]].concat());
    let basis = v["plans"][0]["time"]["step_s_range_basis"]
        .as_str()
        .unwrap();
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("range: "))
        .expect("a range line");
    assert!(
        line.contains(&format!("percentile of tpsim's error on {basis})")),
        "{basis:?} vs {line}"
    );
}
