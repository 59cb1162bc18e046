//! What physics round 30 left (validation/FIT.md, "V-schedule links, DeepSpeed's ZeRO-0 bf16
//! optimizer, Ulysses gradients, the timeline's DP strip (physics round 31)"): the V schedules'
//! hops each on their own stage boundary's link, DeepSpeed's `BF16_Optimizer` sharding its states
//! at ZeRO-0, the fp32 gradient all-reduce under DeepSpeed-Ulysses, and the timeline's DP strip in
//! the step terms' own colours.

mod common;

use serde_json::Value;
use tpsim::cluster::{Cluster, Link};
use tpsim::cost::comm::Collective;
use tpsim::cost::groups::{pp_chain_nvlink_share, pp_hop_nvlink_share};
use tpsim::plan::{ParallelPlan, PlanRequest};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};

fn eval_json(args: &[&str]) -> Value {
    let mut all = vec!["eval", "--format", "json"];
    all.extend_from_slice(args);
    common::json(&all)
}

/// Llama 3 8B at tp 4, pp 4 on 16 H100s under torchtitan's `schedule` (zbv or dualpipev), as two
/// 8-GPU nodes or four of 4 GPUs: the same plan, in the first with boundaries 0→1 and 2→3 inside a
/// node (`groups::pp_boundary_link`), in the second every boundary on the network.
fn llama_v(schedule: &str, gpus_per_node: &str, nodes: &str) -> Value {
    eval_json(&[
        "--framework",
        "torchtitan",
        "--pp-schedule",
        schedule,
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
        "--vpp",
        "2",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
    ])
}

fn schedule_s(plan: &Value, key: &str) -> f64 {
    plan["schedule"][key].as_f64().unwrap()
}

/// A V's chunk 0 runs stages 0 → p − 1 and chunk 1 back p − 1 → 0 on the same GPUs, so a
/// micro-batch crosses each of the p − 1 boundaries twice each way, never the wrap: the share of
/// its hops on NVLink is 1F1B's (2 of 3 here), not the interleaved schedule's (a stage with both
/// boundaries on NVLink: none of 4 here). Before, every V hop ran at the PP group's (network)
/// send, and both layouts gave the same step; now the boundaries inside a node make the fill and
/// drain shorter in the closed form, and the simulation (each block's send at its own boundary)
/// shorter still, while the steady state keeps the slowest boundary's pace.
#[test]
fn v_schedule_hops_each_take_their_own_boundarys_link() {
    let h100 = Cluster {
        gpu: tpsim::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 2,
        gpus_per_node: 8,
    };
    let model = tpsim::specs::load_model("llama3-8b").unwrap();
    let training = Training::with_framework(
        TrainingFramework::Torchtitan,
        8192,
        64,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 4,
        pp: 4,
        dp: 1,
        micro_batch: 1,
        ..PlanRequest::default()
    };
    let mut plan: ParallelPlan = ParallelPlan::build(&request, &model, &h100, &training).unwrap();
    plan.vpp = 2;
    assert!((pp_chain_nvlink_share(&h100, &plan) - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(pp_hop_nvlink_share(&h100, &plan), 0.0, "the looped rule");

    for schedule in ["zbv", "dualpipev"] {
        let two = &llama_v(schedule, "8", "2")["plans"][0];
        let four = &llama_v(schedule, "4", "4")["plans"][0];
        let send = two["ledger"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["group"] == "pp" && e["op"] == "send_recv")
            .expect("a PP send row")
            .clone();
        assert_eq!(send["link"], "network", "{send}");
        let network_s = send["time_s"].as_f64().unwrap();
        let nvlink_s = Collective::SendRecv.time(
            send["tensor_bytes"].as_f64().unwrap(),
            2,
            h100.group_speed(Link::Nvlink, 1),
        );
        let (closed2, closed4) = (
            schedule_s(two, "closed_form_step_s"),
            schedule_s(four, "closed_form_step_s"),
        );
        // Some of the fill and drain's hops are faster; not more than every hop of the busiest
        // rank's 2m micro-batch blocks (the steady state is unchanged).
        assert!(
            closed4 - closed2 > 1e-4,
            "{schedule}: closed {closed4} vs {closed2}"
        );
        assert!(closed4 - closed2 < 2.0 * 64.0 * (network_s - nvlink_s));
        let (sim2, sim4) = (
            schedule_s(two, "simulated_step_s"),
            schedule_s(four, "simulated_step_s"),
        );
        assert!(sim4 - sim2 > 1e-4, "{schedule}: simulated {sim4} vs {sim2}");
    }
}

/// Llama 3 8B under `--framework deepspeed` on 16 H100s, full recompute.
fn deepspeed_llama(extra: &[&str]) -> Value {
    let mut args = vec![
        "--framework",
        "deepspeed",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--tp",
        "1",
    ];
    args.extend_from_slice(extra);
    eval_json(&args)
}

fn term<'a>(plan: &'a Value, kind: &str) -> &'a Value {
    plan["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} term in {}", plan["terms"]))
}

/// DeepSpeed at ZeRO-0 with a pipeline runs `BF16_Optimizer` ("bf16 must use z0! it implements its
/// own zero stage 1 equivalent", BLOOM's tr11-176B-ml.slurm): each DP rank steps its partition
/// of the fp32 master weights and moments (`fp32_groups_flat_partition`) and `all_gather_dp_groups`
/// gathers the bf16 parameters after the step (bf16_optimizer.py at edaa7221). So the optimizer
/// states are ZeRO-1's (sharded over dp 8) and the DP param gather moves 2 bytes × (d − 1)/d a
/// parameter of the stage, exposed; the gradients stay a (bf16) all-reduce. Before, ZeRO-0 kept
/// the states whole and gathered nothing.
#[test]
fn deepspeeds_bf16_optimizer_shards_its_states_at_zero_0() {
    let zero0 = &deepspeed_llama(&["--zero", "0", "--pp", "2"])["plans"][0];
    let zero1 = &deepspeed_llama(&["--zero", "1", "--pp", "2"])["plans"][0];
    let memory = |p: &Value, key: &str| p["memory"][key].as_f64().unwrap();
    let optimizer0 = memory(zero0, "optimizer_bytes");
    let optimizer1 = memory(zero1, "optimizer_bytes");
    assert!(
        (optimizer0 / optimizer1 - 1.0).abs() < 1e-9,
        "optimizer bytes {optimizer0} vs ZeRO-1's {optimizer1}"
    );
    let params = memory(zero0, "params_per_gpu_before_zero");
    // Adam's fp32 master weights and two moments, 12 bytes a parameter, over 8 DP ranks.
    assert!(
        optimizer0 < 12.0 * params / 8.0 * 1.05,
        "{optimizer0} for {params} params"
    );

    let gather = term(zero0, "dp_param_gather");
    let wire = gather["wire_bytes"].as_f64().unwrap();
    let want = 2.0 * params * 7.0 / 8.0;
    assert!(
        (wire / want - 1.0).abs() < 0.02,
        "gather wire {wire} vs {want}"
    );
    assert!(gather["exposed_s"].as_f64().unwrap() > 0.0);
    let reduce = term(zero0, "dp_grad_reduce")["wire_bytes"]
        .as_f64()
        .unwrap();
    // The bf16 all-reduce: 2 · 2 · (d − 1)/d bytes a parameter.
    assert!(
        (reduce / (4.0 * params * 7.0 / 8.0) - 1.0).abs() < 0.02,
        "reduce wire {reduce}"
    );
    // The ledger says so, and its words name the optimizer.
    let row = zero0["ledger"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["group"] == "dp" && e["op"] == "all_gather")
        .expect("a DP all-gather row")
        .clone();
    assert!(
        row["site"].as_str().unwrap().contains("BF16_Optimizer"),
        "{row}"
    );
    // Without a pipeline ZeRO-0 is DeepSpeed's `DDP_BFLOAT16`: nothing sharded, nothing gathered.
    let plain = &deepspeed_llama(&["--zero", "0", "--pp", "1"])["plans"][0];
    assert_eq!(term(plain, "dp_param_gather")["wire_bytes"], 0.0);
}

/// Under DeepSpeed-Ulysses (cp > 1) the engine takes its communication dtype from
/// `seq_parallel_communication_data_type` (engine.py `_configure_distributed_model` at edaa7221),
/// fp32 by default and as `--emit deepspeed` writes it for `--grad-dtype fp32`; ZeRO-1 with fp32
/// accumulation runs `BF16_Optimizer`, which all-reduces its buffer cast to that dtype
/// (`allreduce_bucket`): 2 · 4 · (d − 1)/d bytes a parameter, twice the 4-byte reduce-scatter's
/// wire tpsim priced (= the bf16 all-reduce it runs without Ulysses).
#[test]
fn ulysses_all_reduces_the_fp32_buffer_in_fp32() {
    let reduce = |extra: &[&str]| {
        let mut args = vec!["--zero", "1", "--grad-dtype", "fp32", "--pp", "1"];
        args.extend_from_slice(extra);
        let json = deepspeed_llama(&args);
        let plan = &json["plans"][0];
        let d = plan["dp"].as_f64().unwrap() * plan["cp"].as_f64().unwrap();
        let params = plan["memory"]["params_per_gpu_before_zero"]
            .as_f64()
            .unwrap();
        let wire = term(plan, "dp_grad_reduce")["wire_bytes"].as_f64().unwrap();
        wire / (params * (d - 1.0) / d)
    };
    let plain = reduce(&["--cp", "1"]);
    let ulysses = reduce(&["--cp", "2"]);
    assert!(
        (plain - 4.0).abs() < 0.05,
        "without Ulysses {plain} B a parameter"
    );
    assert!(
        (ulysses - 8.0).abs() < 0.1,
        "under Ulysses {ulysses} B a parameter"
    );
    // bf16 gradients under ZeRO-1 run DeepSpeed's ZeRO optimizer: unchanged.
    let json = deepspeed_llama(&["--zero", "1", "--cp", "2", "--pp", "1"]);
    let plan = &json["plans"][0];
    let params = plan["memory"]["params_per_gpu_before_zero"]
        .as_f64()
        .unwrap();
    let d = plan["dp"].as_f64().unwrap() * 2.0;
    let wire = term(plan, "dp_grad_reduce")["wire_bytes"].as_f64().unwrap();
    assert!((wire / (params * (d - 1.0) / d) - 2.0).abs() < 0.05);
}

/// The timeline's DP strip splits the exposed DP time as the step-time bars do: "DP grad reduce"
/// in its red, "DP param gather" in its pink (`svg::term_colour`), where before one red band said
/// "exposed DP communication" for both. A ZeRO-1 plan with exposed gathers draws both.
#[test]
fn the_timeline_splits_the_dp_strip_into_its_terms() {
    let out = common::scratch("physics_round31", "timeline");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .args([
            "eval",
            "--framework",
            "deepspeed",
            "--model",
            "llama3-8b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--tp",
            "1",
            "--pp",
            "2",
            "--zero",
            "0",
            "--report",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    assert!(!svg.contains("exposed DP communication"), "the old words");
    for words in ["exposed DP grad reduce", "exposed DP param gather"] {
        assert!(svg.contains(words), "no {words:?} in the legend");
    }
    let step = std::fs::read_to_string(out.join("step_time.svg")).unwrap();
    // Each colour drawn in the timeline as the step bars draw it.
    for colour in ["#D62728", "#FF9DA7"] {
        let lower = colour.to_lowercase();
        assert!(
            svg.contains(colour) || svg.contains(&lower),
            "timeline lacks {colour}"
        );
        assert!(step.contains(colour) || step.contains(&lower));
    }
    // A tied model's word-embedding gradient all-reduce after the schedule (the PP term's
    // `after_pipeline_s`) gets its own band in the PP term's colour, so the axis reaches the step
    // the title states: the seed 512B model is tied (`new_user_round7` keeps the committed report
    // what `tpsim report` writes).
    let seed = std::fs::read_to_string(format!(
        "{}/reports/seed-512b-32nodes/timeline.svg",
        common::ROOT
    ))
    .unwrap();
    assert!(seed.contains("exposed PP comm: word embedding gradient all-reduce"));
}
