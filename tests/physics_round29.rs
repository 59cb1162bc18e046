//! Two mechanisms the round-28 physics audit left out (validation/FIT.md, "Pipeline boundaries on
//! NVLink, and the embedding gradient all-reduce"): a pipeline's stage boundaries each on their own
//! link, and the word embedding's gradient all-reduce between the first and the last stage. Each
//! test checks a number worked out by hand from the rank order and the model's shape.

mod common;

use serde_json::Value;
use tpsim::cluster::{Cluster, Link};
use tpsim::cost::comm::Collective;
use tpsim::cost::groups::{pp_boundary_link, pp_hop_nvlink_share};
use tpsim::plan::{ParallelPlan, PlanRequest};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};

fn cluster(gpu: &str, nodes: u32, gpus_per_node: u32) -> Cluster {
    Cluster {
        gpu: tpsim::specs::load_gpu(gpu).unwrap(),
        nodes,
        gpus_per_node,
    }
}

/// A plan of Llama 3 8B on `cluster` at tp·pp = its GPUs, then given the tp, cp, dp, pp and vpp
/// the boundary rule reads.
fn plan_with(cluster: &Cluster, tp: u32, cp: u32, dp: u32, pp: u32, vpp: u32) -> ParallelPlan {
    let model = tpsim::specs::load_model("llama3-8b").unwrap();
    let training = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        64,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 8,
        pp: cluster.total_gpus() / 8,
        dp: 1,
        micro_batch: 1,
        ..PlanRequest::default()
    };
    let mut plan = ParallelPlan::build(&request, &model, cluster, &training).unwrap();
    (plan.tp, plan.cp, plan.dp, plan.pp, plan.vpp) = (tp, cp, dp, pp, vpp);
    plan
}

/// Megatron-Core's rank order (tp-cp-ep-dp-pp) puts stage i on ranks i·tp·cp·dp onwards; rank r
/// sends to r + tp·cp·dp. A boundary is on NVLink when every pair across it shares a domain.
#[test]
fn each_stage_boundary_sits_on_its_own_link() {
    // tp 4, pp 4 on two 8-GPU H100 nodes: stages 0 and 1 share node 0, 2 and 3 node 1. Boundaries
    // 0→1 and 2→3 are NVLink, 1→2 the network, the interleaved wrap 3→0 the network.
    let h100 = cluster("h100-sxm-80g", 2, 8);
    let plan = plan_with(&h100, 4, 1, 1, 4, 1);
    let links: Vec<Link> = (0..4).map(|b| pp_boundary_link(&h100, &plan, b)).collect();
    assert_eq!(
        links,
        [Link::Nvlink, Link::Network, Link::Nvlink, Link::Network]
    );
    // 1F1B: a micro-batch crosses the three boundaries once each way, two of three on NVLink.
    assert!((pp_hop_nvlink_share(&h100, &plan) - 2.0 / 3.0).abs() < 1e-12);

    // FIT.md's plan G (Llama 3.1 405B on 128 GB200: tp 4, cp 2, dp 2, pp 8, vpp 8): 64-GPU
    // segments, stride 16, so stages 0–3 and 4–7 each share one; boundaries 3→4 and the wrap
    // 7→0 cross the network, the other six stay on NVLink ("6 of its 8 boundaries").
    let gb200 = cluster("gb200-nvl72", 32, 4);
    let g = plan_with(&gb200, 4, 2, 2, 8, 8);
    let network: Vec<u32> = (0..8)
        .filter(|&b| pp_boundary_link(&gb200, &g, b) == Link::Network)
        .collect();
    assert_eq!(network, [3, 7]);
    // Interleaved: each p2p op of a stage sends to the next and receives from the previous, so
    // a stage runs at NVLink's pace only with both boundaries on it: stages 1, 2, 5 and 6 of 8.
    assert!((pp_hop_nvlink_share(&gb200, &g) - 0.5).abs() < 1e-12);

    // tp 8 fills a node: no two stages share one, every boundary crosses the network.
    let wide = plan_with(&h100, 8, 1, 1, 2, 1);
    assert_eq!(pp_boundary_link(&h100, &wide, 0), Link::Network);
    assert_eq!(pp_hop_nvlink_share(&h100, &wide), 0.0);
}

fn eval_json(args: &[&str]) -> Value {
    let mut all = vec!["eval", "--format", "json"];
    all.extend_from_slice(args);
    common::json(&all)
}

/// Llama 3 8B at tp 4, pp 4 on 16 H100s, as two 8-GPU nodes or four of 4 GPUs (the same plan
/// with every boundary on the network; TP stays in a node either way).
fn llama_tp4_pp4(gpus_per_node: &str, nodes: &str) -> Value {
    eval_json(&[
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        nodes,
        "--gpus-per-node",
        gpus_per_node,
        "--tp",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
    ])
}

/// The pipeline's fill and drain cross each boundary on its own link; the steady state keeps the
/// slowest boundary's pace. Two of the three boundaries on NVLink shorten the closed form's bubble
/// by (p − 1)/v × (2v − 2/p) sends × 2/3 × (network send − NVLink send), with nothing else
/// changed, and the simulated schedule (each stage's blocks carrying their own sends) is faster
/// too. Before: both layouts priced every hop at the network and gave the same step.
#[test]
fn boundaries_inside_a_node_shorten_the_fill_and_drain() {
    let two = llama_tp4_pp4("8", "2");
    let four = llama_tp4_pp4("4", "4");
    let (a, b) = (&two["plans"][0], &four["plans"][0]);
    let send_row = a["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["group"] == "pp" && e["op"] == "send_recv")
        .expect("a PP send row")
        .clone();
    assert_eq!(send_row["link"], "network", "{send_row}");
    let network_s = send_row["time_s"].as_f64().unwrap();
    let bytes = send_row["tensor_bytes"].as_f64().unwrap();
    let h100 = cluster("h100-sxm-80g", 2, 8);
    let nvlink_s = Collective::SendRecv.time(bytes, 2, h100.group_speed(Link::Nvlink, 1));
    assert!(nvlink_s < network_s / 2.0, "{nvlink_s} vs {network_s}");
    // p = 4, v = 1, no overlap of the sends (1F1B without vpp exposes them).
    let want = 3.0 * (2.0 - 2.0 / 4.0) * (2.0 / 3.0) * (network_s - nvlink_s);
    let closed = |p: &Value| p["schedule"]["closed_form_step_s"].as_f64().unwrap();
    let got = closed(b) - closed(a);
    assert!(
        (got - want).abs() <= 1e-9 + 1e-6 * want,
        "closed-form step difference {got} s, by hand {want} s"
    );
    let simulated = |p: &Value| p["schedule"]["simulated_step_s"].as_f64().unwrap();
    assert!(
        simulated(a) < simulated(b) - 0.5 * want,
        "simulated {} vs {}",
        simulated(a),
        simulated(b)
    );
}

fn pp_rows<'a>(plan: &'a Value, op: &str) -> Vec<&'a Value> {
    plan["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["group"] == "pp" && e["op"] == op)
        .collect()
}

/// GPT-3 175B (tied embeddings) at tp 8, pp 8 on 64 H100s.
fn gpt3(extra: &[&str]) -> Value {
    let mut args = vec![
        "--model",
        "gpt3-175b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "8",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
    ];
    args.extend_from_slice(extra);
    eval_json(&args)
}

/// With tied embeddings the last stage holds the output layer's copy of the word embedding;
/// Megatron-Core all-reduces its `main_grad` with the first stage's once a step after the DP
/// reduction (`finalize_model_grads` → `_allreduce_word_embedding_grads`, d98e8a64), as
/// Megatron-LM's optimizer and DeepSpeed's `ReduceTiedGrads` do: vocab/tp × h in the gradient
/// dtype over the two ranks, here 50,257 × 12,288 / 8 × 4 B = 308.78 MB, exposed. Before: no such
/// row, and the PP term held only the stage-boundary sends.
#[test]
fn tied_embeddings_all_reduce_their_gradient_between_the_ends() {
    let json = gpt3(&[]);
    assert_eq!(
        json["training"]["grad_dtype"], "fp32",
        "{}",
        json["training"]
    );
    let plan = &json["plans"][0];
    let rows = pp_rows(plan, "all_reduce");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows[0];
    let want = 50257.0 * 12288.0 / 8.0 * 4.0;
    assert!(
        (row["tensor_bytes"].as_f64().unwrap() - want).abs() < 1.0,
        "{row}"
    );
    assert_eq!(row["ranks"], 2);
    assert_eq!(row["count"], 1.0);
    assert_eq!(row["scope"], "per_step");
    // tp 8 · dp 1 = 8 ranks a stage: first and last stage on different nodes.
    assert_eq!(row["link"], "network");
    let allreduce_s = row["time_s"].as_f64().unwrap();
    let sends_s: f64 = pp_rows(plan, "send_recv")
        .iter()
        .map(|r| r["time_s"].as_f64().unwrap() * r["count"].as_f64().unwrap())
        .sum();
    let pp_term = plan["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "pp_comm")
        .unwrap();
    // All of it exposed: the PP term is the sends (exposed, no overlap at vpp 1) plus it.
    let exposed = pp_term["exposed_s"].as_f64().unwrap();
    assert!(
        (exposed - (sends_s + allreduce_s)).abs() <= 1e-9 * exposed.max(1.0),
        "PP exposed {exposed}, sends {sends_s} + all-reduce {allreduce_s}"
    );

    // Untied (Llama 3 8B) or one stage: nothing to reduce.
    let untied = llama_tp4_pp4("8", "2");
    assert!(pp_rows(&untied["plans"][0], "all_reduce").is_empty());
}

/// DeepSeek-V3's MTP reads the next token's embedding on the last stage, so it keeps a copy even
/// untied (`share_embeddings_and_output_weights or mtp_num_layers`): 129,280 × 7,168 × 2 B =
/// 1.853 GB at tp 1 with bf16 gradients (FIT.md plan H), beside the last stage's backward sends of
/// 128 micro-batches × 4096 × 7168 × 2 B = 7.516 GB. Before: the PP bytes were the sends alone.
#[test]
fn mtp_keeps_an_embedding_copy_whose_gradient_is_all_reduced() {
    let json = common::json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        "mbridge-25.09-pretrain-deepseek_v3-b200-256g-fp8-gbs2048",
        "--format",
        "json",
    ]);
    let planned = &json["planned"];
    assert_eq!(planned["training"]["grad_dtype"], "bf16");
    let plan = &planned["plans"][0];
    assert_eq!(
        (plan["tp"].as_u64(), plan["pp"].as_u64()),
        (Some(1), Some(16))
    );
    let pp = &plan["comm"]["pp"];
    let sends = 128.0 * 4096.0 * 7168.0 * 2.0;
    let embedding = 129280.0 * 7168.0 * 2.0;
    let got = pp["wire_bytes"].as_f64().unwrap();
    assert!(
        (got - (sends + embedding)).abs() < 1.0,
        "PP bytes {got}, sends {sends} + embedding gradient {embedding}"
    );
    assert_eq!(pp["link"], "network");
}
