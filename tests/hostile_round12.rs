//! Hostile input, round 12: what probing `accuracy --runs` files, sweeps with odd points and
//! `eval`/`plan` at the edge of valid shapes found. Every error case checks exit 2, one line (so
//! no panic or backtrace) and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// A one-run published-runs file, every number in range: the base the tests below spoil one key
/// of at a time.
const RUN: &str = "- id: r1
  completeness: full_plan
  model: {arch: GPT, layers: 24, hidden: 2304, heads: 24, kv_heads: null, ffn_hidden: 9216, vocab: 51200, seq_len: 2048}
  hardware: {gpu: A100, gpus_per_node: 8, num_gpus: 32}
  plan: {tp: 1, pp: 1, dp: 32, micro_batch_size: 16, global_batch_size: 512, recompute: full, virtual_pipeline_stages: null, sequence_parallel: null, zero_stage: null}
  results: {iteration_time_s: 3.5}
";

/// `tpsim accuracy --runs` on [`RUN`] with `from` replaced by `to`.
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn accuracy_with(name: &str, from: &str, to: &str) -> Run {
    assert!(RUN.contains(from), "the run has {from:?}");
    let dir = scratch("round12", name);
    std::fs::write(dir.join("runs.yaml"), RUN.replacen(from, to, 1)).unwrap();
    run_in(&dir, &["accuracy", "--runs", "runs.yaml"])
}

/// The base run evaluates (so the tests below fail on the key they spoil, nothing else).
#[test]
fn the_base_run_evaluates() {
    let r = accuracy_with("base", "recompute: full", "recompute: full");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("full ZeRO-0"), "{}", r.stdout);
}

/// `recompute: bogus` (or `5`, or a cut-short `ful`) was read as no recompute
/// and the run evaluated without a word: a silently changed value, the step time off by the
/// recompute forward.
#[test]
fn an_unknown_recompute_in_a_runs_file_is_refused() {
    for value in ["bogus", "5", "ful"] {
        let r = accuracy_with(
            &format!("recompute-{value}"),
            "recompute: full",
            &format!("recompute: {value}"),
        );
        assert_one_line_error(
            &r,
            &[
                &format!("plan.recompute: {value} is not a recompute method"),
                "full, selective or none",
                "e.g. recompute: full",
            ],
            &[],
            value,
        );
    }
    // What the bundled file writes, and null, still read.
    for value in [
        "full (--activations-checkpoint-method uniform)",
        "selective",
        "none",
        "null",
    ] {
        let r = accuracy_with(
            "recompute-ok",
            "recompute: full",
            &format!("recompute: {value}"),
        );
        assert_eq!(r.code, 0, "{value}: {}", r.stderr);
    }
}

/// `hidden: 1073741824` with `ffn_hidden: null` made the default MLP width 4 x hidden wrap to 0
/// in a u32, and the run was refused as "--ffn-hidden 0 must be at least 1; omit it", a value the
/// file never gave and a fix it had already taken.
#[test]
fn a_huge_hidden_size_with_the_default_mlp_width_is_named_as_given() {
    let r = accuracy_with(
        "huge-hidden",
        "hidden: 2304, heads: 24, kv_heads: null, ffn_hidden: 9216",
        "hidden: 1073741824, heads: 1, kv_heads: null, ffn_hidden: null",
    );
    assert_one_line_error(
        &r,
        &["run r1", "model.hidden: 1073741824 is larger than 1048576"],
        &["ffn_hidden: 0", "--ffn-hidden", "--hidden"],
        "hidden 2^30",
    );
}

/// A runs file's model and plan errors named the flags of `eval` (`--heads 7`, `--vpp 0`,
/// `--global-batch 512`), which a runs file does not have; they now name the file's keys.
#[test]
fn a_runs_file_error_names_the_files_keys() {
    let r = accuracy_with("heads-7", "heads: 24", "heads: 7");
    assert_one_line_error(
        &r,
        &[
            "run r1",
            "model.hidden: 2304 is not divisible by model.heads: 7",
        ],
        &["--heads", "--hidden"],
        "heads 7",
    );
    let r = accuracy_with(
        "vpp-0",
        "virtual_pipeline_stages: null",
        "virtual_pipeline_stages: 0",
    );
    assert_one_line_error(
        &r,
        &["plan.virtual_pipeline_stages: 0 is not a degree"],
        &["--vpp"],
        "vpp 0",
    );
    let r = accuracy_with("mb-17", "micro_batch_size: 16", "micro_batch_size: 17");
    assert_one_line_error(
        &r,
        &[
            "plan.global_batch_size: 512 is not divisible by plan.dp: 32 x plan.micro_batch_size: 17",
            "valid micro-batches",
        ],
        &["--global-batch", "--micro-batch", "--dp"],
        "micro-batch 17",
    );
    let r = accuracy_with("kv-5", "kv_heads: null", "kv_heads: 5");
    assert_one_line_error(
        &r,
        &["model.kv_heads: 5 must divide model.heads: 24"],
        &["--kv-heads", "--heads"],
        "kv_heads 5",
    );
    // A padded vocabulary is the key tpsim reads the count from.
    let r = accuracy_with(
        "vocab-padded-0",
        "vocab: 51200",
        "vocab: 51200, vocab_padded: 0",
    );
    assert_one_line_error(
        &r,
        &["model.vocab_padded: 0 must be at least 1"],
        &["--vocab", "model.vocab:"],
        "vocab_padded 0",
    );
}

/// A run on A100 40GB (`gpu_memory_gb: 40`, or `A100 40GB` in the name) was evaluated on the 80 GB
/// profile and reported as fitting with 47.5 GiB a GPU; a size no A100 profile has is skipped,
/// saying why (and a file of nothing else is refused, naming the run). 40 GB runs are evaluated on
/// the bundled a100-sxm-40g since it exists (tests/hostile_round31.rs).
#[test]
fn a_run_on_a_40_gb_a100_is_not_evaluated_on_the_80_gb_profile() {
    let to = "gpu: A100, gpu_memory_gb: 48,";
    let r = accuracy_with("a100-48", "gpu: A100,", to);
    assert_one_line_error(
        &r,
        &[
            "run r1",
            "hardware.gpu_memory_gb 48 is not the memory of an A100 profile",
            "give runs on 80 GB or 40 GB A100s",
        ],
        &[],
        to,
    );
    // 80 GB said by the key still evaluates.
    let r = accuracy_with("a100-80", "gpu: A100,", "gpu: A100, gpu_memory_gb: 80,");
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Sequence parallelism splits each sequence (each CP rank's share of it) into tp equal shards
/// (Megatron-Core's `_split_along_first_dim` asserts the first dimension divides by the TP size):
/// `eval --seq-len 1 --tp 8 --sequence-parallel` was evaluated as if eight GPUs held an eighth of
/// one token each, and `sweep --axis seq-len --values 1,2` picked `tp8 ... sp` at one token.
#[test]
fn sequence_parallelism_needs_whole_shards_of_the_sequence() {
    let eval = |seq: &str, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--seq-len",
            seq,
            "--sequence-parallel",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    assert_one_line_error(
        &eval("1", &[]),
        &[
            "--sequence-parallel with --tp 8",
            "1-token sequence",
            "not a multiple of 8",
            "--seq-len 8",
            "--sequence-parallel false",
        ],
        &[],
        "seq 1, tp 8",
    );
    assert_one_line_error(
        &eval("2052", &[]),
        &["2052-token sequence", "e.g. --seq-len 2056"],
        &[],
        "seq 2052, tp 8",
    );
    // Under CP each rank's share is split: 4096 / cp 2 = 2048 tokens, whole over tp 8.
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--cp",
        "2",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--sequence-parallel",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    // The search keeps sequence parallelism off where the shards would not be whole.
    let sweep = json(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--axis",
        "seq-len",
        "--values",
        "1,2,4",
        "--format",
        "json",
    ]);
    for row in sweep["rows"].as_array().unwrap() {
        let seq: u64 = row["value"].as_str().unwrap().parse().unwrap();
        if row["sequence_parallel"] == true {
            let tp = row["tp"].as_u64().unwrap();
            let cp = row["cp"].as_u64().unwrap();
            assert_eq!(seq / cp % tp, 0, "{row}");
        }
    }
}

/// The same rule said in a Megatron-LM launch line's words: its flags, and its way of turning
/// the switch off (leaving it out).
#[test]
fn sequence_parallel_shards_in_a_launch_line() {
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 100 --max-position-embeddings 2048 --tensor-model-parallel-size 8 --sequence-parallel --global-batch-size 64 --micro-batch-size 1 --bf16",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--sequence-parallel with --tensor-model-parallel-size 8",
            "100-token sequence",
            "e.g. --seq-length 104",
            "or drop --sequence-parallel",
        ],
        &["--tp ", "--seq-len ", "--sequence-parallel false"],
        "seq-length 100, tp 8",
    );
}

/// A sweep point where valid plans exist but none fits was a JSON/CSV row of nulls and empty
/// cells beside `feasible: 0`, and a table cell "nothing fits (N candidates)": nothing said why,
/// or by how much. Each such row now carries the memory of the plan that misses by least
/// (`plan`'s "closest"), a finite number above the capacity.
#[test]
fn a_sweep_point_where_nothing_fits_says_by_how_much() {
    let args = |format: &'static str| {
        vec![
            "sweep",
            "--params",
            "175B",
            "--global-batch",
            "1536",
            "--axis",
            "nodes",
            "--values",
            "1,64",
            "--format",
            format,
        ]
    };
    let sweep = json(&args("json"));
    let rows = sweep["rows"].as_array().unwrap();
    let (short, fits) = (&rows[0], &rows[1]);
    assert_eq!(short["search"]["feasible"], 0, "{short}");
    let need = short["memory"]["closest_miss_bytes"]
        .as_f64()
        .expect("a number");
    let have = short["memory"]["capacity_bytes"].as_f64().unwrap();
    assert!(need.is_finite() && need > have, "{need} of {have}");
    assert!(fits["memory"]["closest_miss_bytes"].is_null(), "{fits}");
    // CSV: a column of its own, empty where a plan fits.
    let r = run(&args("csv"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let column = lines[0]
        .split(',')
        .position(|c| c == "memory.closest_miss_bytes")
        .expect("a memory.closest_miss_bytes column");
    let cell = |line: &str| csv_cells(line)[column].clone();
    assert_eq!(cell(lines[1]), format!("{need:.0}"));
    assert_eq!(cell(lines[2]), "");
    // Table: the cell says it.
    let r = run(&args("table"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "nothing fits: the closest needs {:.1} GiB of {:.1} GiB",
            need / GIB,
            have / GIB
        )),
        "{}",
        r.stdout
    );
}
