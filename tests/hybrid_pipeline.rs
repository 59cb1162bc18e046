//! Hybrid Mamba-Transformer stacks over pipeline stages. Megatron-Core slices a hybrid pattern
//! without '|' separators evenly over the stages, or with the first and last stage's layers given
//! and the rest evenly over the middle ones (`select_pipeline_segment`,
//! megatron/core/models/hybrid/hybrid_layer_allocation.py), and refuses virtual stages; NVIDIA's
//! own H100 recipes train Nemotron 3 Super at pp 2 and Ultra at pp 3, 4 and 6
//! (Megatron-Bridge recipes/nemotronh/h100). Each stage runs its own slice of the pattern, so
//! each is priced at its own blocks and the slowest sets the step.

mod common;

use common::*;
use tpsim::cluster::Cluster;
use tpsim::model::Model;
use tpsim::plan::{ParallelPlan, PlanRequest, Recompute};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};

fn h100_nodes(nodes: u32) -> Cluster {
    Cluster {
        gpu: tpsim::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes,
        gpus_per_node: 8,
    }
}

/// Nemotron-H 8B (52 layers, dense hybrid) with its pattern replaced by `pattern`.
fn nemotron_h_8b_with(pattern: &str) -> Model {
    let mut model = tpsim::specs::load_model("nemotron-h-8b").unwrap();
    let hybrid = model.hybrid.as_mut().unwrap();
    hybrid.pattern = pattern.into();
    model.layers = pattern.len() as u32;
    model
}

/// Step time of `model` at tp 8 with `pp` stages on pp nodes, 8K tokens, no recompute.
fn step_s(model: &Model, pp: u32) -> f64 {
    let cluster = h100_nodes(pp);
    let training = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        64,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 8,
        pp,
        dp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::None,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, model, &cluster, &training)
        .unwrap_or_else(|e| panic!("pp {pp}: {e}"));
    tpsim::cost::evaluate(model, &cluster, &training, &plan)
        .time
        .step_s
        .0
}

#[test]
fn each_stage_is_priced_at_its_own_slice_of_the_pattern() {
    // Nemotron-H 8B's blocks (24 Mamba, 4 attention, 24 MLP) as NVIDIA spreads them (two
    // attention blocks in each half), with all four attention blocks first, and with all four
    // last. At 8K tokens an attention block (QKV, the causal core, the projection) costs less than
    // a Mamba block or one of its 21,504-wide MLPs, and the last stage also runs the output layer:
    // it sets the step.
    let spread = tpsim::specs::load_model("nemotron-h-8b").unwrap();
    let pattern = &spread.hybrid.as_ref().unwrap().pattern;
    let without_attention: String = pattern.chars().filter(|c| *c != '*').collect();
    let front_loaded = nemotron_h_8b_with(&format!("****{without_attention}"));
    let back_loaded = nemotron_h_8b_with(&format!("{without_attention}****"));
    for model in [&front_loaded, &back_loaded] {
        assert_eq!(model.block_counts(), spread.block_counts());
    }
    // One stage runs every layer: where the blocks sit does not matter.
    let one = [&spread, &front_loaded, &back_loaded].map(|m| step_s(m, 1));
    assert!(
        one.iter().all(|s| (s / one[0] - 1.0).abs() < 1e-9),
        "pp 1: {one:?}"
    );
    // Two stages of 26 layers: the last stage holds 26 Mamba/MLP blocks when the attention is
    // in front, 24 and two attention blocks when spread, 22 and four when it is last.
    let [spread_s, front_s, back_s] = [&spread, &front_loaded, &back_loaded].map(|m| step_s(m, 2));
    assert!(
        front_s > 1.005 * spread_s && spread_s > 1.005 * back_s,
        "pp 2: front-loaded {front_s} s, spread {spread_s} s, back-loaded {back_s} s"
    );
}

#[test]
fn the_stages_split_the_work_of_one_stage() {
    // The same stack on one stage and on two (each with the same micro-batches): two stages share
    // the layers, so a step on two takes about half a step on one plus the pipeline's fill and
    // drain; the sum of the stages' slices is the whole pattern, so nothing is priced twice or
    // left out.
    let model = tpsim::specs::load_model("nemotron-h-8b").unwrap();
    let (one, two) = (step_s(&model, 1), step_s(&model, 2));
    let ratio = two / one;
    // 64 micro-batches, 2 stages: the 1F1B bubble is 1/64 of the busy time.
    assert!(
        ratio > 0.5 && ratio < 0.56,
        "{one} s on one stage, {two} s on two: {ratio}"
    );
}

/// `eval` of the bundled Nemotron 3 Super on 64 H100 at tp 1 and expert parallelism `ep`.
fn super_h100(ep: &str, extra: &[&str]) -> Run {
    let mut args = vec!["eval"];
    args.extend_from_slice(&SUPER_H100_RUN);
    args.extend_from_slice(&[
        "--ep",
        ep,
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
    ]);
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn nvidias_h100_layout_of_nemotron_3_super_is_priced() {
    // Megatron-Bridge's 64-GPU H100 recipe: tp 1, pp 2, ep 32 (recipes/nemotronh/h100/
    // nemotron_3_super.py). Refused before hybrid pipelines were priced.
    let r = super_h100("32", &["--pp", "2", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let plan = &v["plans"][0];
    assert_eq!(plan["pp"], 2);
    let step = plan["time"]["step_s"].as_f64().unwrap();
    assert!(step.is_finite() && step > 0.0, "{step}");
    // The 88 layers split evenly, as Megatron-Core's auto-split does.
    let r = super_h100("32", &["--pp", "2"]);
    assert!(
        r.stdout
            .contains("layers per stage: first 44, last 44 (even split)"),
        "{}",
        r.stdout
    );
    // pp 8 with four layers on the last stage (the recipe's long-context SFT layout): the other
    // 84 layers go 12 to a stage.
    let r = super_h100(
        "8",
        &["--pp", "8", "--decoder-last-pipeline-num-layers", "4"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("first 12"), "{}", r.stdout);
}

#[test]
fn pipelines_megatron_core_cannot_build_are_refused_in_one_line() {
    // 88 layers over 3 stages without '|' separators: Megatron-Core raises.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "3",
        "--tp",
        "8",
        "--pp",
        "3",
        "--ep",
        "1",
        "--global-batch",
        "96",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--pp 3 does not split 88 layers evenly",
            "--allow-uneven-pp",
            "2, 4, 8, 11",
        ],
        &["panicked"],
        "uneven hybrid pipeline",
    );
    // First and last stage layers that leave the middle stages uneven.
    let r = super_h100(
        "8",
        &[
            "--pp",
            "8",
            "--decoder-first-pipeline-num-layers",
            "10",
            "--decoder-last-pipeline-num-layers",
            "5",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "--decoder-first-pipeline-num-layers 10 and --decoder-last-pipeline-num-layers 5",
            "leave 73 of the 88 layers for the 6 other stage(s)",
            "split evenly",
        ],
        &["panicked"],
        "uneven hybrid middle stages",
    );
}

#[test]
fn plan_searches_pipelines_for_a_hybrid_stack() {
    // Pinned at pp 2, the search finds plans where it found none before.
    let v = json(&[
        "plan",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--pp",
        "2",
        "--format",
        "json",
    ]);
    let plans = v["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "{v}");
    assert!(plans.iter().all(|p| p["pp"] == 2), "{v}");
}

/// `eval --format json` of Megatron-Bridge's 64-GPU H100 layout of Nemotron 3 Super (tp 1, pp 2,
/// ep 32, micro-batch 1, 1,280 sequences of 4,096 tokens, its two shared MTP depths, bf16 moments
/// and gradients, HybridEP priced as DeepEP) with `recompute`.
fn super_h100_recipe(recompute: &[&str]) -> serde_json::Value {
    let mut args = vec!["eval"];
    args.extend_from_slice(&SUPER_H100_RUN);
    args.extend_from_slice(&[
        "--mtp-layers",
        "2",
        "--pp",
        "2",
        "--ep",
        "32",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--optimizer-states",
        "bf16-moments",
        "--grad-dtype",
        "bf16",
        "--moe-dispatcher",
        "deepep",
        "--format",
        "json",
    ]);
    args.extend_from_slice(recompute);
    json(&args)
}

#[test]
fn the_recipes_recompute_modules_are_what_lets_its_h100_layout_fit() {
    // The recipe recomputes ["layernorm", "moe_act", "moe", "core_attn"] ("full MoE recompute
    // provides the measured H100 activation headroom", recipes/nemotronh/h100/
    // nemotron_3_super.py): on a hybrid stack they apply to its MoE and attention blocks, the
    // Mamba blocks recompute nothing.
    let modules = super_h100_recipe(&[
        "--recompute",
        "selective",
        "--recompute-modules",
        "layernorm,moe_act,moe,core_attn",
    ]);
    let none = super_h100_recipe(&["--recompute", "none"]);
    let plan = |v: &serde_json::Value| v["plans"][0].clone();
    let memory = |v: &serde_json::Value| plan(v)["memory"]["total_bytes"].as_f64().unwrap();
    let step = |v: &serde_json::Value| plan(v)["time"]["step_s"].as_f64().unwrap();
    assert_eq!(plan(&modules)["memory"]["fits"], true, "{}", plan(&modules));
    assert_eq!(plan(&none)["memory"]["fits"], false, "{}", plan(&none));
    assert!(memory(&modules) < 0.8 * memory(&none));
    // The MoE layers' forward runs again, their all-to-alls with it.
    assert!(step(&modules) > 1.05 * step(&none));
    let ep = |v: &serde_json::Value| plan(v)["comm"]["ep"]["wire_bytes"].as_f64().unwrap();
    assert!(
        (ep(&modules) / ep(&none) - 1.5).abs() < 0.01,
        "{} {}",
        ep(&modules),
        ep(&none)
    );
}
