//! Leftovers round 30: what this session's reviews left, one test per defect fixed.
//!
//! 1. A count key given no whole number (`etp: null`, `tp: ~`, `micro_batch: [1]`) was refused
//!    with two ranges: serde's "expected a whole number from 0 to 4294967295", then "1 or more".
//! 2. `eval`'s TP line, without TP comm overlap, named the sequence-parallel re-gather in plans
//!    without sequence parallelism and the reduce-scatter where an all-reduce runs.
//! 3. `--delay-wgrad-compute` was accepted and priced as absent: Transformer Engine then stores the
//!    wgrad GEMM and waits for the input gradient's collective at once (`module/linear.py` at
//!    d0067d0da: `wgrad_store.put`, then `dgrad_work.wait()`), so nothing hides it.
//! 4. Under a V schedule the JSON's `stage_chunk_layers` listed the looped stages' chunks, not the
//!    two chunks a GPU of the V holds, which the breakdown and ledger count.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn a_count_key_without_a_number_is_told_one_range() {
    let dir = scratch("round30", "count-null");
    for (from, to) in [
        ("  etp: 1", "  etp: null"),
        ("  tp: 8", "  tp: ~"),
        ("  micro_batch: 1", "  micro_batch: null"),
        ("  ep: 1", "  ep: [1]"),
        ("  pp: 16", "  pp: abc"),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        let key = from.trim().split(':').next().unwrap();
        assert_one_line_error(
            &r,
            &[
                &format!("plan.{key}:"),
                "expected a whole number from 1 to 4294967295",
                &format!("{key} takes a whole number of 1 or more"),
            ],
            &["from 0 to", "panicked"],
            to,
        );
    }
    // A key that takes 0 keeps its range from 0.
    std::fs::write(
        dir.join("p.yaml"),
        bundled_plan_with("  zero: 1", "  zero: null"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &["from 0 to 255", "use 0, 1, 2 or 3"],
        &["from 1 to"],
        "zero",
    );
}

/// `eval`'s text for Llama 3 8B on one node at tp 8, TP comm overlap off, with the flags `extra`.
fn tp_line(extra: &[&str]) -> String {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--tp-comm-overlap",
        "false",
    ];
    args.extend_from_slice(extra);
    let r = run(&args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("TP comm") && l.contains(" hidden by "))
        .unwrap_or_else(|| panic!("{args:?}: no TP line with what hides it:\n{}", r.stdout))
        .to_string()
}

#[test]
fn the_tp_line_names_only_the_collectives_the_plan_runs() {
    let with_sp = tp_line(&["--sequence-parallel", "true"]);
    assert!(
        with_sp.contains("re-gather under the dgrad GEMMs")
            && with_sp.contains("input gradients' reduce-scatter under their wgrad GEMMs")
            && !with_sp.contains("all-reduce"),
        "{with_sp}"
    );
    let without_sp = tp_line(&["--sequence-parallel", "false"]);
    assert!(
        without_sp.contains("input gradients' all-reduce under their wgrad GEMMs")
            && !without_sp.contains("re-gather")
            && !without_sp.contains("sequence-parallel")
            && !without_sp.contains("reduce-scatter"),
        "{without_sp}"
    );
}

fn tp_term(plan: &Value) -> (f64, f64) {
    let t = plan["terms"]
        .as_array()
        .expect("terms")
        .iter()
        .find(|t| t["kind"] == "tp_comm")
        .expect("a TP term");
    (
        t["time_s"].as_f64().expect("time"),
        t["exposed_s"].as_f64().expect("exposed"),
    )
}

#[test]
fn delayed_wgrad_leaves_the_input_gradient_collective_exposed() {
    let eval = |extra: &[&str]| {
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
            "--tp-comm-overlap",
            "false",
            "--overlap-moe-expert-parallel-comm",
            "true",
        ];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        (r.stderr, run_json(&args))
    };
    let (_, plain) = eval(&[]);
    let (notes, delayed) = eval(&["--delay-wgrad-compute"]);
    let (time, exposed) = tp_term(&plain["plans"][0]);
    let (delayed_time, delayed_exposed) = tp_term(&delayed["plans"][0]);
    // The same traffic, less of it hidden.
    assert!(
        (delayed_time / time - 1.0).abs() < 1e-12,
        "{time} s vs {delayed_time} s"
    );
    assert!(
        delayed_exposed > exposed * 1.01,
        "exposed {exposed} s without, {delayed_exposed} s with --delay-wgrad-compute"
    );
    assert!(
        notes.contains("note: --delay-wgrad-compute:") && notes.contains("waits for"),
        "{notes}"
    );
}

fn run_json(args: &[&str]) -> Value {
    let mut with = args.to_vec();
    with.extend_from_slice(&["--format", "json"]);
    json(&with)
}

/// `stage_chunk_layers` of Llama 3 8B cut to 30 layers over 4 pipeline GPUs of 2 chunks each
/// (unequal chunks), under torchtitan with the pipeline schedule flags `schedule`, and the layers
/// of the GPU that sets the step.
fn chunk_layers(schedule: &[&str]) -> (Vec<Vec<u64>>, u64) {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--layers",
        "30",
        "--tp",
        "2",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--allow-uneven-pp",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--framework",
        "torchtitan",
        "--format",
        "json",
    ];
    args.extend_from_slice(schedule);
    let v = json(&args);
    let plan = &v["plans"][0];
    let chunks = plan["stage_chunk_layers"]
        .as_array()
        .unwrap_or_else(|| panic!("no stage_chunk_layers: {plan}"))
        .iter()
        .map(|g| {
            g.as_array()
                .expect("a GPU's chunks")
                .iter()
                .map(|c| c.as_u64().expect("layers"))
                .collect()
        })
        .collect();
    (
        chunks,
        plan["slowest_stage_layers"].as_u64().expect("layers"),
    )
}

#[test]
fn v_schedule_chunk_layers_are_listed_per_gpu_of_the_v() {
    // The interleaved listing gives each virtual stage's layers (GPU g holds vs g and g + 4); the
    // chunk layout is the schedule's own (`cost::pipeline::ChunkLayout`), the same under the V.
    let (looped, _) = chunk_layers(&[]);
    let stage = |vs: usize| looped[vs % 4][vs / 4];
    let (v, layers) = chunk_layers(&["--pp-schedule", "zbv"]);
    // GPU g of the V holds virtual stages g and 7 − g (PyTorch `ScheduleZBVZeroBubble`).
    let want: Vec<Vec<u64>> = (0..4).map(|g| vec![stage(g), stage(7 - g)]).collect();
    assert_eq!(v, want, "the V's GPUs; virtual stages {looped:?}");
    // An unequal layout, so the pairing shows.
    assert_ne!(v, looped);
    // The breakdown counts the layers of one of these GPUs.
    let per_gpu: Vec<u64> = v.iter().map(|g| g.iter().sum()).collect();
    assert!(
        per_gpu.contains(&layers),
        "{layers} layers; GPUs hold {per_gpu:?}"
    );
}
