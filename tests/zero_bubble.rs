//! The V-shaped pipeline schedules with a split backward that torchtitan runs through PyTorch's
//! pipelining: `--pp-schedule zbv` (ZBVZeroBubble) and `--pp-schedule dualpipev` (DualPipeV).
//! Who may run them, what they need, and what they change: the bubble, the memory of the first
//! GPU (both ends of the V), the search, plan files and the JSON.

mod common;

use common::*;

/// Llama 3 70B on 8 H100 nodes under torchtitan, tp 8, pp 4, dp 2, two chunks per GPU.
fn eval_70b(extra: &[&str]) -> Run {
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn json_70b(extra: &[&str]) -> serde_json::Value {
    let mut args = extra.to_vec();
    args.extend_from_slice(&["--format", "json"]);
    let r = eval_70b(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

fn step_s(v: &serde_json::Value) -> f64 {
    v["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

fn bubble_s(v: &serde_json::Value) -> f64 {
    v["plans"][0]["time"]["bubble_s"].as_f64().unwrap()
}

#[test]
fn the_v_schedules_are_torchtitans_only() {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
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
        "zbv",
    ];
    let r = run(&args);
    assert_one_line_error(
        &r,
        &[
            "--pp-schedule zbv",
            "ZBVZeroBubble",
            "--framework torchtitan",
        ],
        &["panicked"],
        "zbv under megatron-core",
    );
    args.extend_from_slice(&["--framework", "deepspeed"]);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &["deepspeed", "--framework torchtitan"],
        &[],
        "zbv under deepspeed",
    );
}

#[test]
fn a_v_schedule_needs_two_chunks_a_pipeline_and_enough_micro_batches() {
    let r = run(&[
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
        "4",
        "--global-batch",
        "64",
        "--pp-schedule",
        "zbv",
    ]);
    assert_one_line_error(&r, &["--vpp is 4", "give --vpp 2"], &[], "zbv with vpp 4");
    let r = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--framework",
        "torchtitan",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--zero",
        "3",
        "--pp-schedule",
        "zbv",
    ]);
    // Without a pipeline there is nothing to schedule: evaluated, with a note that says so.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--pp-schedule zbv has no pipeline to schedule at pp 1"),
        "{}",
        r.stderr
    );
    let r = run(&[
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
        "8",
        "--pp-schedule",
        "dualpipev",
    ]);
    assert_one_line_error(
        &r,
        &["dualpipev", "2 x --pp 4 = 8", "runs 4"],
        &[],
        "dualpipev with 4 micro-batches on 4 stages",
    );
    let r = eval_70b(&["--pp-schedule", "zero-bubble"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("zbv") && r.stderr.contains("dualpipev"),
        "{}",
        r.stderr
    );
}

#[test]
fn torchtitans_names_are_read() {
    let ours = json_70b(&["--pp-schedule", "zbv"]);
    let theirs = json_70b(&["--pp-schedule", "ZBVZeroBubble"]);
    assert_eq!(step_s(&ours), step_s(&theirs));
    assert_eq!(ours["training"]["pp_schedule"], "zbv");
    let dual = json_70b(&["--pp-schedule", "DualPipeV"]);
    assert_eq!(dual["training"]["pp_schedule"], "dualpipev");
    let plain = json_70b(&[]);
    assert_eq!(plain["training"]["pp_schedule"], "1f1b");
}

#[test]
fn the_split_backward_shortens_the_bubble_of_the_same_plan() {
    // Same layout, same work: the weight gradients fill idle time, so the bubble shrinks and the
    // step with it; the compute does not change.
    let interleaved = json_70b(&[]);
    for schedule in ["zbv", "dualpipev"] {
        let v = json_70b(&["--pp-schedule", schedule]);
        assert!(
            bubble_s(&v) < bubble_s(&interleaved),
            "{schedule}: {} vs {}",
            bubble_s(&v),
            bubble_s(&interleaved)
        );
        assert!(step_s(&v) < step_s(&interleaved));
        let compute = |x: &serde_json::Value| x["plans"][0]["time"]["compute_s"].as_f64().unwrap();
        assert!((compute(&v) / compute(&interleaved) - 1.0).abs() < 1e-9);
    }
}

#[test]
fn the_first_gpu_holds_both_ends_of_the_v() {
    let v = json_70b(&["--pp-schedule", "zbv"]);
    // With 32 micro-batches the other GPUs' receive buffers (two receiving chunks each) outweigh
    // the first GPU's ends: the most loaded GPU is one of them (tests/zero_bubble_review.rs shows
    // the first GPU most loaded with fewer micro-batches).
    let memory = &v["plans"][0]["memory"];
    assert_eq!(memory["stage"], "v_middle", "{memory}");
    // Embedding and output layer on one GPU: it moves more DP traffic than the looped first
    // stage (the heaviest GPU's parameters set it).
    let looped = json_70b(&[]);
    let dp_bytes =
        |x: &serde_json::Value| x["plans"][0]["comm"]["dp"]["wire_bytes"].as_f64().unwrap();
    assert!(
        dp_bytes(&v) > dp_bytes(&looped),
        "{} vs {}",
        dp_bytes(&v),
        dp_bytes(&looped)
    );
    let r = eval_70b(&["--pp-schedule", "zbv"]);
    assert!(
        r.stdout
            .contains("embedding, output layer and loss on the first GPU"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("the simulated ZB-V step"), "{}", r.stdout);
}

#[test]
fn plan_searches_v_plans_and_says_how_it_ranked() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--framework",
        "torchtitan",
        "--global-batch",
        "64",
        "--pp",
        "4",
        "--pp-schedule",
        "dualpipev",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    // Pipelined plans run the V (two chunks, at least 2·pp micro-batches); plans without a
    // pipeline need no schedule and stay among the candidates.
    let mut pipelined = 0;
    for p in plans {
        let pp = p["pp"].as_u64().unwrap();
        if pp == 1 {
            assert_eq!(p["vpp"], 1, "{p}");
            continue;
        }
        pipelined += 1;
        assert_eq!(p["vpp"], 2, "{p}");
        assert!(p["num_microbatches"].as_u64().unwrap() >= 2 * pp);
    }
    assert!(pipelined > 0, "{plans:?}");
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--framework",
        "torchtitan",
        "--global-batch",
        "64",
        "--pp",
        "4",
        "--pp-schedule",
        "dualpipev",
    ]);
    assert!(
        r.stdout.contains("simulated DualPipeV schedule"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_saved_plan_keeps_its_schedule() {
    let dir = scratch("zero_bubble", "saved");
    let path = dir.join("zbv.yaml");
    let path_s = path.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--framework",
        "torchtitan",
        "--global-batch",
        "64",
        "--pp-schedule",
        "zbv",
        "--save",
        path_s,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("pp_schedule: zbv"), "{text}");
    let back = run(&["eval", "--plan", path_s, "--format", "json"]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    let v: serde_json::Value = serde_json::from_str(&back.stdout).unwrap();
    assert_eq!(v["training"]["pp_schedule"], "zbv");
    // A file's schedule under another framework is refused in the file's words.
    let r = run(&["eval", "--plan", path_s, "--framework", "megatron-core"]);
    assert_one_line_error(
        &r,
        &["pp_schedule: zbv in the plan file"],
        &[],
        "file schedule",
    );
}

#[test]
fn torch_compile_is_refused_with_a_split_backward() {
    let r = eval_70b(&["--pp-schedule", "dualpipev", "--torch-compile", "true"]);
    assert_one_line_error(
        &r,
        &[
            "--pp-schedule dualpipev",
            "torch.compile",
            "--pp-schedule 1f1b",
        ],
        &[],
        "dualpipev under torch.compile",
    );
}

#[test]
fn the_search_keeps_v_plans_whose_micro_batches_are_not_a_multiple_of_pp() {
    // Interleaved 1F1B needs m a multiple of pp (Megatron's rule); the V schedules do not: 64
    // sequences at micro-batch 2 on dp 1 are 32 micro-batches, not a multiple of pp 3... so use
    // a layout where it matters: Llama 3 8B (32 layers) on pp 8 with 12 micro-batches.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--global-batch",
        "12",
        "--pp",
        "8",
        "--pp-schedule",
        "zbv",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert!(
        plans
            .iter()
            .any(|p| { p["vpp"] == 2 && p["num_microbatches"].as_u64().unwrap() % 8 != 0 }),
        "{plans:?}"
    );
}

#[test]
fn the_layout_figure_draws_the_v() {
    let dir = scratch("zero_bubble", "layout");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--tp",
        "2",
        "--pp",
        "4",
        "--dp",
        "1",
        "--vpp",
        "2",
        "--global-batch",
        "16",
        "--recompute",
        "full",
        "--pp-schedule",
        "zbv",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(
        svg.contains("PP (ZB-V): stage s runs model chunks s and 7 - s"),
        "{svg}"
    );
    assert!(!svg.contains("sends activations to stage s+1"), "{svg}");
}

#[test]
fn the_first_gpu_of_the_v_sends_twice_per_micro_batch() {
    // Chunk 0's activations forward and chunk 1's gradients back: the loss and the embedding have
    // no neighbour. The interleaved plan's slowest stage is its last (it runs the output layer),
    // whose last chunk sends no activations (Megatron-Core `send_forward` skips the last stage,
    // p2p_communication.py:494): 2·v − 1 = 3 sends; the comm line and the ledger count the same
    // sends.
    let v = json_70b(&["--pp-schedule", "zbv"]);
    let looped = json_70b(&[]);
    let pp_bytes =
        |x: &serde_json::Value| x["plans"][0]["comm"]["pp"]["wire_bytes"].as_f64().unwrap();
    assert!((pp_bytes(&v) / pp_bytes(&looped) - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(
        v["plans"][0]["ledger"]["pp_wire_bytes"].as_f64().unwrap(),
        pp_bytes(&v)
    );
}
