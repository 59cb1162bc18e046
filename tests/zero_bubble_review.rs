//! Review of `--pp-schedule zbv|dualpipev` (tests/zero_bubble.rs): what the V placement changes
//! beyond the schedule itself. GPU r of p runs model chunks r and 2p − 1 − r (PyTorch
//! `generate_stage_to_rank_mapping(style="v")`, torchtitan `_get_pp_rank_to_stage_indices_mapping`),
//! so memory, DP traffic and every sentence about "the first stage" and "the last stage" must follow
//! that placement, and a comparison of two plans that differ only in their schedule must say so.

mod common;

use common::*;
use serde_json::Value;

fn plan0(v: &Value) -> &Value {
    &v["plans"][0]
}

fn params(v: &Value) -> f64 {
    plan0(v)["memory"]["params_per_gpu_before_zero"]
        .as_f64()
        .unwrap()
}

/// Llama 3 8B cut to 30 layers on 4 stages of 2 chunks: 32 units (embedding and output counting
/// one layer each) in 8 chunks of 4, so chunk 0 and chunk 7 hold 3 layers, the others 4. The looped
/// first stage runs chunks 0 and 4 (7 layers); the V's first GPU chunks 0 and 7 (6 layers).
fn eval_8b_30(schedule: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--layers",
        "30",
        "--framework",
        "torchtitan",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--dp",
        "2",
        "--global-batch",
        "16",
        "--allow-uneven-pp",
        "--zero",
        "3",
        "--pp-schedule",
        schedule,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn json_8b_30(schedule: &str) -> Value {
    let r = eval_8b_30(schedule, &["--format", "json"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

/// The first GPU of a V holds chunk 0 and the last chunk with the embedding and the output layer,
/// not the looped last stage's layers (it was charged `last_stage_layers`: 7 layers here, not 6).
#[test]
fn the_first_gpu_of_the_v_holds_its_own_chunks_layers() {
    let looped = json_8b_30("1f1b");
    let v = json_8b_30("zbv");
    assert_eq!(plan0(&looped)["memory"]["stage"], "first");
    assert_eq!(
        plan0(&v)["memory"]["stage"],
        "ends",
        "{}",
        plan0(&v)["memory"]
    );
    // Looped first stage: 7 layers and the embedding (vocab x hidden, untied).
    let embedding = 128_256.0 * 4_096.0;
    let layer = (params(&looped) - embedding) / 7.0;
    // The V's first GPU: 6 layers, the embedding, the output layer and the final norm.
    let want = 6.0 * layer + 2.0 * embedding + 4_096.0;
    assert!(
        (params(&v) / want - 1.0).abs() < 1e-9,
        "{} vs {want} (one layer is {layer})",
        params(&v)
    );
    let r = eval_8b_30("zbv", &[]);
    assert!(
        r.stdout.contains(
            "layers per GPU in the V (GPU r runs model chunks r and 7 - r): first 6, others 8"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("embedding, output layer and loss on the first GPU"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout
            .contains("embedding on the first stage, output layer on the last"),
        "{}",
        r.stdout
    );
}

/// The other GPUs of the V can hold more than the first: Llama 3 405B (126 layers) on pp 4 puts
/// 30 layers on the first GPU and 32 on each other; memory was the first GPU's alone.
#[test]
fn memory_is_the_most_loaded_gpu_of_the_v() {
    let v = json(&[
        "eval",
        "--model",
        "llama3-405b",
        "--framework",
        "torchtitan",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--dp",
        "4",
        "--global-batch",
        "64",
        "--allow-uneven-pp",
        "--recompute",
        "full",
        "--zero",
        "3",
        "--pp-schedule",
        "zbv",
        "--format",
        "json",
    ]);
    let memory = &plan0(&v)["memory"];
    assert_eq!(memory["stage"], "v_middle", "{memory}");
    // DeepSeek-V3: the first GPU's chunk 0 holds the three dense layers and its last chunk one
    // decoder layer; every other GPU 8 MoE layers, their experts far heavier than the ends.
    // torchtitan draws ep 64 from FSDP2's shard ranks, so the plan is ZeRO-3 (new_user_round13).
    let v = json(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--framework",
        "torchtitan",
        "--nodes",
        "64",
        "--tp",
        "1",
        "--pp",
        "8",
        "--vpp",
        "2",
        "--ep",
        "64",
        "--dp",
        "64",
        "--zero",
        "3",
        "--global-batch",
        "1024",
        "--allow-uneven-pp",
        "--pp-schedule",
        "dualpipev",
        "--format",
        "json",
    ]);
    let memory = &plan0(&v)["memory"];
    assert_eq!(memory["stage"], "v_middle", "{memory}");
    for key in ["total_bytes", "activations_bytes", "weights_bytes"] {
        assert!(memory[key].as_f64().unwrap().is_finite(), "{memory}");
    }
}

/// DP traffic follows the GPU with the most parameters; under a V that is the first GPU with both
/// the embedding and the output layer, which no looped stage holds together.
#[test]
fn dp_traffic_counts_the_first_gpus_two_ends() {
    let args = |schedule: &'static str| {
        vec![
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--framework",
            "torchtitan",
            "--tp",
            "8",
            "--pp",
            "4",
            "--dp",
            "2",
            "--vpp",
            "2",
            "--global-batch",
            "64",
            "--recompute",
            "full",
            "--zero",
            "3",
            "--pp-schedule",
            schedule,
            "--format",
            "json",
        ]
    };
    let dp = |v: &Value| plan0(v)["comm"]["dp"]["wire_bytes"].as_f64().unwrap();
    let looped = json(&args("1f1b"));
    let v = json(&args("zbv"));
    // Same layers per GPU (20), plus the output layer's 1.05 B parameters / tp 8 on the first.
    assert!(dp(&v) > dp(&looped) * 1.03, "{} vs {}", dp(&v), dp(&looped));
}

/// Two saved files of one plan, one under 1F1B and one under ZB-V: compare said "the same plan
/// ... every difference below is zero" above a table of non-zero differences, and its plan row
/// named no schedule.
#[test]
fn compare_tells_plans_apart_by_their_schedule() {
    let dir = scratch("zero_bubble_review", "compare");
    let save = |schedule: &str, name: &str| {
        let path = dir.join(name);
        let r = run(&[
            "plan",
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--framework",
            "torchtitan",
            "--tp",
            "8",
            "--pp",
            "4",
            "--dp",
            "2",
            "--vpp",
            "2",
            "--global-batch",
            "64",
            "--pp-schedule",
            schedule,
            "--save",
            path.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        path.to_str().unwrap().to_string()
    };
    let a = save("1f1b", "a.yaml");
    let b = save("zbv", "b.yaml");
    let r = run(&["compare", "--plan", &a, "--plan", &b]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("are the same plan"), "{}", r.stderr);
    assert!(
        r.stdout.contains(" 1f1b ") && r.stdout.contains(" zbv "),
        "{}",
        r.stdout
    );
    // The same file twice is still the same plan.
    let r = run(&["compare", "--plan", &b, "--plan", &b]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("are the same plan"), "{}", r.stderr);
}

/// The schedule line, the report's timeline caption and the sweep's header name the V, not a
/// first and last stage or 1F1B.
#[test]
fn the_words_follow_the_v() {
    let r = eval_8b_30("dualpipev", &[]);
    assert!(
        r.stdout
            .contains("because the GPUs differ in work (the first runs the first and the last model chunk of the V"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("because the stages differ"),
        "{}",
        r.stdout
    );

    let dir = scratch("zero_bubble_review", "report");
    let r = eval_8b_30("zbv", &["--report", dir.to_str().unwrap()]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(
        html.contains("from the event-driven ZB-V schedule simulation"),
        "timeline caption"
    );
    assert!(
        !html.contains("event-driven 1F1B schedule"),
        "timeline caption"
    );

    let r = run(&[
        "sweep",
        "--model",
        "llama3-70b",
        "--framework",
        "torchtitan",
        "--axis",
        "nodes",
        "--values",
        "8",
        "--global-batch",
        "64",
        "--pp-schedule",
        "zbv",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r.stdout.lines().next().unwrap_or_default();
    assert!(
        header.contains("pipeline schedule zbv (ZBVZeroBubble)"),
        "{header}"
    );
}
