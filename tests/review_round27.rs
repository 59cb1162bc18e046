//! Review round 27: the last session's changes outside `src/cost/`, read whole. One test per
//! defect fixed, each failing on main's 3354214:
//!
//! 1. `sweep --format csv` wrote the range basis with its commas turned into semicolons: a CSV
//!    reader (Python's `csv`, a spreadsheet) read another text than the JSON's. The cell is now
//!    quoted as RFC 4180 has it, as every other cell with a comma already was.
//! 2. `eval --delay-wgrad-compute` where TP comm overlap applies (tp > 1 with sequence
//!    parallelism; on by default under `--framework megatron-core`) was priced. Megatron-Core
//!    cannot build that model: it passes `ub_bulk_wgrad=tp_comm_bulk_wgrad` (default True, no
//!    Megatron-LM flag turns it off; model_parallel_config.py and
//!    extensions/transformer_engine.py at d98e8a64) to every TE LayerNormLinear, and Transformer
//!    Engine's `WeightGradStore` asserts "ub_bulk_wgrad is not supported when enabling
//!    delay_wgrad_compute" (module/_common.py at d0067d0da). Flags and a pasted launch line are
//!    now refused in one line, with the switch that fixes it.
//! 3. `accuracy --run ID` found the shipped runs file holding an id by scanning its lines for
//!    `id: ID` exactly: an id typed in another case (which `--run`'s suggestions accept) or written
//!    quoted in the file got the `--runs FILE` placeholder. It is now looked up with the YAML
//!    parser, in any case, and said as the file writes it.
//! 4. `validate --tp T --micro-batch B --global-batch G` refused a split in eval's words, naming
//!    `--dp 1`, a flag validate does not take; it now says the rule without it.
//!
//! Looked at and found sound (no change): the planner builds the plans first and evaluates each
//! valid one once (`collect_into_vec` on an indexed iterator, in enumeration order); candidates
//! = feasible + every infeasible reason + ruled_out_by_pins (Llama 3 70B on 64 H100s with `--tp 8
//! --allow-uneven-pp`: 124842 = 5071 + 18513 + 101258); `plan --format json` is identical at
//! `--threads 1, 2, 4` but for `elapsed_s`/`threads` (Qwen3-30B-A3B on 128 H100s, 745824
//! candidates; Llama 3 70B pinned with uneven splits); `search.pinned` is typed (numbers, bools,
//! the recompute's name) and in the `pinned:` line's order. A plan file's omitted keys take the
//! values eval's flags take when not given (vpp, micro_batch, cp, ep 1, recompute none, the
//! default precision, reshard_after_forward true, dp_replicas 1 by serde default and
//! `PlanRequest::default`; etp and sequence_parallel through `PlanFile::etp_for` /
//! `sequence_parallel_for`, in eval, report and compare alike; zero 0); the note names exactly
//! the keys whose default differs from a `plan` row's (sp, zero, etp), as the flag note does.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "review27";

/// The CSV's basis cell, read by an RFC 4180 reader, is the JSON's `time.step_s_range_basis`.
#[test]
fn sweep_csv_basis_cell_reads_back_as_the_json_text() {
    let sweep = |format: &str| {
        run(&[
            "sweep",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--axis",
            "gpu",
            "--values",
            "h100-sxm-80g,h800-sxm-80g",
            "--format",
            format,
        ])
    };
    let r = sweep("json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let bases: Vec<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["time"]["step_s_range_basis"].as_str().unwrap().into())
        .collect();
    assert!(
        bases.iter().all(|b| b.contains(',')),
        "the test needs a basis with a comma: {bases:?}"
    );
    let r = sweep("csv");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let records = csv_records(&r.stdout);
    let column = records[0]
        .iter()
        .position(|h| h == "time.step_s_range_basis")
        .expect("a basis column");
    assert_eq!(records.len(), 1 + bases.len(), "{}", r.stdout);
    for (cells, basis) in records[1..].iter().zip(&bases) {
        assert_eq!(cells.len(), records[0].len(), "{cells:?}");
        assert_eq!(&cells[column], basis);
    }
}

/// Mixtral 8x7B at tp 2 with sequence parallelism and the MoE all-to-all overlap (as
/// tests/leftovers_round30.rs prices the delayed wgrad), with `extra`.
fn mixtral(extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--model",
        "mixtral-8x7b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--tp",
        "2",
        "--pp",
        "1",
        "--ep",
        "8",
        "--etp",
        "1",
        "--zero",
        "1",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "true",
        "--overlap-moe-expert-parallel-comm",
        "true",
        "--delay-wgrad-compute",
    ];
    args.extend_from_slice(extra);
    run(&args)
}

const MIXTRAL_LINE: &str = "--tensor-model-parallel-size 2 --expert-model-parallel-size 4 --sequence-parallel --overlap-moe-expert-parallel-comm --delay-wgrad-compute --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-experts 8 --moe-router-topk 2 --ffn-hidden-size 14336 --moe-ffn-hidden-size 14336 --swiglu --disable-bias-linear --global-batch-size 256 --micro-batch-size 1 --seq-length 4096 --bf16 --moe-token-dispatcher-type alltoall --use-distributed-optimizer";

/// Transformer Engine refuses delay_wgrad_compute beside Megatron-Core's TP comm overlap, and so
/// does eval, whether the overlap is the framework's default, typed, or on a pasted line.
#[test]
fn delayed_wgrad_with_tp_comm_overlap_is_refused() {
    let te = "ub_bulk_wgrad is not supported when enabling delay_wgrad_compute";
    assert_one_line_error(
        &mixtral(&[]),
        &[
            "--delay-wgrad-compute with TP comm overlap (--framework megatron-core's default at tp 2",
            te,
            "give --tp-comm-overlap false",
        ],
        &[],
        "the default overlap",
    );
    assert_one_line_error(
        &mixtral(&["--tp-comm-overlap"]),
        &["--delay-wgrad-compute with --tp-comm-overlap:", te],
        &[],
        "the typed overlap",
    );
    let r = mixtral(&["--tp-comm-overlap", "false"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pasted = |line: &str| {
        run(&[
            "eval",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "2",
            "--megatron-args",
            line,
        ])
    };
    assert_one_line_error(
        &pasted(&format!("{MIXTRAL_LINE} --tp-comm-overlap")),
        &[
            "--megatron-args: --delay-wgrad-compute with --tp-comm-overlap at tp 2",
            te,
            "drop --tp-comm-overlap or --delay-wgrad-compute from the line",
        ],
        &[],
        "the pasted line",
    );
    // Without the overlap the line is priced (exit 1 here: it does not fit two nodes).
    let r = pasted(MIXTRAL_LINE);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("note: --delay-wgrad-compute:") && !r.stderr.contains("error:"),
        "{}",
        r.stderr
    );
}

/// `--run` finds the shipped file holding an id as `--runs` reads ids: in any case, and quoted.
#[test]
fn accuracy_run_finds_the_file_holding_an_id_as_the_file_reads_it() {
    let id = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128";
    let want = format!("tpsim accuracy --runs validation/modern_runs.yaml --run {id}");
    let shouted = id.to_uppercase();
    assert_one_line_error(
        &run(&["accuracy", "--run", &shouted]),
        &[&want],
        &["--runs FILE"],
        "bundled file, id in capitals",
    );
    assert_one_line_error(
        &run(&[
            "accuracy",
            "--runs",
            "validation/mbridge_26_runs.yaml",
            "--run",
            &format!(" {shouted} "),
        ]),
        &[&want],
        &[],
        "the other runs file, id in capitals",
    );
    // A runs file that quotes its ids (read from the working directory, as --runs reads it).
    let dir = scratch(SUITE, "quoted");
    std::fs::create_dir_all(dir.join("validation")).unwrap();
    std::fs::write(
        dir.join("validation/modern_runs.yaml"),
        "schema_version: 1\nmodel_catalog: {}\nruns:\n- id: \"acme-quoted-run\"\n",
    )
    .unwrap();
    assert_one_line_error(
        &run_in(&dir, &["accuracy", "--run", "acme-quoted-run"]),
        &["tpsim accuracy --runs validation/modern_runs.yaml --run acme-quoted-run"],
        &["--runs FILE"],
        "a quoted id",
    );
}

/// validate takes no --dp, so its batch refusal does not name one.
#[test]
fn validate_batch_refusal_names_no_flag_validate_lacks() {
    let r = run(&[
        "validate",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "8",
        "--seq-len",
        "128",
        "--nodes",
        "1",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--tp",
        "2",
        "--mb",
        "3",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch 64 is not divisible by --micro-batch 3; valid micro-batches: 1, 2, 4, 8, 16, 32, 64",
        ],
        &["--dp"],
        "validate mb 3",
    );
}
