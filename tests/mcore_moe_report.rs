//! Out-of-sample accuracy on the Megatron-Core MoE report (NVIDIA, arXiv 2603.07685): its EP
//! dispatch latencies (Table 7, `validation/mcore_moe_dispatch_latency.yaml`) and its end-to-end
//! throughput (Table 11 with Table 20's plans and Appendix B.2's settings,
//! `validation/mcore_moe_report.yaml`). Nothing in tpsim was fitted
//! to these numbers; the bounds are today's errors, rounded up, so the tests fail when a change
//! moves tpsim away from them. validation/FIT.md ("The Megatron-Core MoE report") discusses them.

mod common;

use common::{ROOT, json};
use serde::Deserialize;
use tpsim::calibrate::fit::median;

/// Table 7 of the report (`validation/mcore_moe_dispatch_latency.yaml`).
#[derive(Deserialize)]
struct LatencyFile {
    rows: Vec<DispatchLatency>,
}

/// One row of Table 7: the forward dispatch and combine latency at one EP size.
#[derive(Deserialize)]
struct DispatchLatency {
    gpu: String,
    ep: u32,
    alltoall_dispatch_us: f64,
    alltoall_combine_us: f64,
}

fn dispatch_latency() -> Vec<DispatchLatency> {
    let path = format!("{ROOT}/validation/mcore_moe_dispatch_latency.yaml");
    let text = std::fs::read_to_string(&path).expect("the report's Table 7");
    let file: LatencyFile = yaml_serde::from_str(&text).expect("Table 7 parses");
    file.rows
}

/// Fails when the median or the worst of `errors` (|error| fractions) passes its bound; prints
/// the per-entry `lines` either way (`--nocapture`).
fn assert_within(errors: &[f64], lines: &[String], median_bound: f64, worst_bound: f64) {
    let table = lines.join("\n");
    eprintln!("{table}");
    let worst = errors.iter().copied().fold(0.0, f64::max);
    let middle = median(errors);
    assert!(
        middle <= median_bound,
        "median |error| {middle:.3} > {median_bound}\n{table}"
    );
    assert!(
        worst <= worst_bound,
        "worst |error| {worst:.3} > {worst_bound}\n{table}"
    );
}

/// The ledger's forward all-to-all times (dispatch, combine) in µs for DeepSeek-V3 with one
/// 4,096-token sequence per GPU, all GPUs in one EP group.
fn alltoall_forward_us(gpu: &str, ep: u32) -> (f64, f64) {
    let (profile, gpus_per_node) = match gpu {
        "gb200" => ("gb200-nvl72", 4),
        "h100" => ("h100-sxm-80g", 8),
        other => panic!("no profile for {other}"),
    };
    let nodes = (ep / gpus_per_node).to_string();
    let ep_text = ep.to_string();
    let per_node = gpus_per_node.to_string();
    let out = json(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        profile,
        "--nodes",
        &nodes,
        "--gpus-per-node",
        &per_node,
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        &ep_text,
        "--micro-batch",
        "1",
        "--global-batch",
        &ep_text,
        "--seq-len",
        "4096",
        "--moe-dispatcher",
        "alltoall",
        "--format",
        "json",
    ]);
    let entries = out["plans"][0]["ledger"]["entries"]
        .as_array()
        .expect("a ledger");
    let forward_us = |site: &str| {
        entries
            .iter()
            .find(|e| {
                e["group"] == "ep"
                    && e["pass"] == "forward"
                    && e["site"].as_str().is_some_and(|s| s.starts_with(site))
            })
            .and_then(|e| e["time_s"].as_f64())
            .unwrap_or_else(|| panic!("no forward {site} in the ledger"))
            * 1e6
    };
    (forward_us("MoE dispatch"), forward_us("MoE combine"))
}

/// Table 7's all-to-all latencies on GB200 (EP 8–64 inside one NVL72 domain) and H100 (EP 8 on
/// NVLink, 16–64 across 2–8 nodes' NICs), against the α-β all-to-all tpsim times every MoE layer
/// with. Today: median |error| 11%, worst 23% (GB200 EP 8, tpsim fast), all GB200 rows fast.
#[test]
fn alltoall_latency_matches_the_reports_table_7() {
    let mut errors = Vec::new();
    let mut lines = Vec::new();
    for row in dispatch_latency() {
        let (dispatch, combine) = alltoall_forward_us(&row.gpu, row.ep);
        for (what, predicted, published) in [
            ("dispatch", dispatch, row.alltoall_dispatch_us),
            ("combine", combine, row.alltoall_combine_us),
        ] {
            let error = predicted / published - 1.0;
            lines.push(format!(
                "{} ep {} {what}: published {published} µs, tpsim {predicted:.0} µs ({:+.1}%)",
                row.gpu,
                row.ep,
                100.0 * error
            ));
            errors.push(error.abs());
        }
    }
    assert_eq!(errors.len(), 16, "{lines:?}");
    assert_within(&errors, &lines, 0.13, 0.25);
}

/// The ninth run, as `eval` prices it with its stated plan and settings whatever its memory:
/// Qwen3-235B MXFP8 on 256 GB200 at three sequences per micro-batch (Table 20; Appendix B.2:
/// recompute moe_act and layernorm, 1F1B overlap on). The report ran it with activation
/// offloading, which tpsim does not model, so `accuracy` leaves it out as not fitting.
const QWEN3_GB200_MXFP8_EVAL: &[&str] = &[
    "eval",
    "--model",
    "qwen3-235b-a22b",
    "--gpu",
    "gb200-nvl72",
    "--nodes",
    "64",
    "--gpus-per-node",
    "4",
    "--tp",
    "1",
    "--pp",
    "4",
    "--vpp",
    "6",
    "--ep",
    "64",
    "--etp",
    "1",
    "--micro-batch",
    "3",
    "--global-batch",
    "3072",
    "--seq-len",
    "4096",
    "--allow-uneven-pp",
    "--precision",
    "mxfp8",
    "--recompute-modules",
    "moe_act",
    "layernorm",
    "--moe-dispatcher",
    "deepep",
    "--overlap-moe-expert-parallel-comm",
    "--zero",
    "1",
    "--format",
    "json",
];

/// Table 11's nine runs (DeepSeek-V3 and Qwen3-235B-A22B on GB300, GB200 and H100, 4K and 128K
/// tokens) as `tpsim accuracy --runs validation/mcore_moe_report.yaml` plans them: each with its
/// published plan pinned (Table 20's; Table 17's PP 8 for DeepSeek-V3 on H100) and its Appendix
/// B.2 settings (`modern_runs`'s `mcore-moe-report` source). Today: eight predicted, median
/// |error| 6.9%, worst +15.5% (DeepSeek-V3 on 1,024 H100); the ninth, which tpsim cannot fit
/// without the report's offloading, priced anyway by `eval` at +18.7%; over all nine, median
/// 7.2%, worst +18.7%. Issue 9's bounds are median 15%, none past 30%. (Before the fused RoPE
/// kernels were counted, 2026-12-05: 8.3% and +16.0%, nine 8.5% and +20.1%; before Blackwell's
/// tensor-core kernels ran at the sustained clock: 10.8% and +18.6%, nine 13.1% and +25.0%.)
#[test]
fn end_to_end_throughput_matches_the_reports_table_11() {
    let out = json(&[
        "accuracy",
        "--runs",
        "validation/mcore_moe_report.yaml",
        "--format",
        "json",
    ]);
    let runs = out.as_array().expect("one entry per run");
    assert_eq!(runs.len(), 9);
    let mut errors = Vec::new();
    let mut lines = Vec::new();
    for run in runs {
        let id = run["id"].as_str().expect("an id");
        match run["error"].as_f64() {
            Some(error) => {
                lines.push(format!("{id}: {:+.1}%", 100.0 * error));
                errors.push(error.abs());
            }
            None => {
                let note = run["note"].as_str().unwrap_or("");
                assert!(
                    id.ends_with("qwen3_235b_a22b-gb200-256g-mxfp8")
                        && note.contains("does not fit in tpsim's memory model"),
                    "{id} not predicted: {note}"
                );
            }
        }
    }
    assert_eq!(errors.len(), 8, "{lines:?}");
    // Worst: DeepSeek-V3 on 1,024 H100 at +17.7% since the combined 1F1B schedule's all-to-alls
    // hide only behind the compute Megatron-Core puts beside each (`moe::paired_layer_exposed_s`;
    // +16.0% when they hid behind the paired layer's whole other pass).
    assert_within(&errors, &lines, 0.09, 0.18);
    // All nine, the one that does not fit priced as `eval` prices it.
    let ninth = json(QWEN3_GB200_MXFP8_EVAL);
    let gpus = ninth["cluster"]["total_gpus"].as_f64().expect("total_gpus");
    let tokens = ninth["plans"][0]["tokens_per_s"]
        .as_f64()
        .expect("tokens/s");
    let error = tokens / gpus / 6212.0 - 1.0;
    lines.push(format!(
        "mcore-moe-report-qwen3_235b_a22b-gb200-256g-mxfp8 (eval, does not fit): {:+.1}%",
        100.0 * error
    ));
    errors.push(error.abs());
    assert_within(&errors, &lines, 0.09, 0.21);
}
