//! torchtitan's local batch: one pipeline schedule per gradient-accumulation step, each with its
//! own fill and drain (`--local-batch`, `Training::local_batch`, `ParallelPlan::schedule_runs`).

mod common;
use common::{assert_one_line_error, json, run, scratch};

/// Llama 3 70B on 4 nodes, pp 4, dp 8, 64 sequences: 8 sequences per replica.
const BASE: &[&str] = &[
    "eval",
    "--model",
    "llama3-70b",
    "--nodes",
    "4",
    "--tp",
    "1",
    "--pp",
    "4",
    "--dp",
    "8",
    "--global-batch",
    "64",
    "--zero",
    "3",
    "--recompute",
    "full",
];

fn with(extra: &[&str]) -> Vec<String> {
    BASE.iter().chain(extra).map(|a| a.to_string()).collect()
}

/// The evaluated plan (micro-batch 1: 8 micro-batches per replica) under torchtitan.
fn eval(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--micro-batch",
        "1",
        "--framework",
        "torchtitan",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let args = with(&args);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    json(&args)["plans"][0].clone()
}

fn number(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn each_local_batch_fills_and_drains_the_pipeline_again() {
    let one = eval(&[]);
    let two = eval(&["--local-batch", "4"]);
    let four = eval(&["--local-batch", "2"]);
    assert_eq!(one["schedule_runs"], 1);
    assert_eq!(two["schedule_runs"], 2);
    assert_eq!(four["schedule_runs"], 4);
    // The same work per step but for FSDP2's unsharded gradient accumulation, whose first
    // micro-batch of each schedule upcasts (6 bytes per parameter) where later ones add (10): a
    // second schedule makes one more micro-batch a first one. And each schedule reduce-scatters
    // once, copying the accumulated fp32 gradients into the reduce-scatter input (4 + 4 bytes per
    // parameter, `compute::sharded_dp_copy_bytes_per_param`). The bubble is paid once per schedule.
    let compute = |j: &serde_json::Value| number(&j["time"]["compute_s"]);
    // 8 micro-batches in one schedule average (6 + 7 x 10) / 8 = 9.5 bytes per parameter, two
    // schedules of 4 (6 + 3 x 10) / 4 = 9: 0.5 bytes x 8 micro-batches = 4 bytes per parameter
    // saved, and 8 bytes more for the second schedule's copy-in: 4 bytes per parameter more of the
    // slowest stage's 20 layers (70B over pp 4, tp 1), and the copy-in of the output layer it
    // holds (the last stage), on the H100's achieved bandwidth.
    let model = tpsim::specs::load_model("llama3-70b").unwrap();
    let gpu = tpsim::specs::load_gpu("h100-sxm-80g").unwrap();
    let output_layer = f64::from(model.vocab) * f64::from(model.hidden);
    let expected = (4.0 - 8.0) * 20.0 * model.layer_params() - 8.0 * output_layer;
    let expected = expected / gpu.achieved_hbm_bandwidth().0 / gpu.framework_efficiency;
    let saved = compute(&one) - compute(&two);
    assert!(
        (saved - expected).abs() < 1e-6 * expected.abs(),
        "{saved} vs {expected}"
    );
    let bubble = |j: &serde_json::Value| number(&j["time"]["bubble_s"]);
    assert!(bubble(&one) > 0.0);
    let ratio = bubble(&two) / bubble(&one);
    assert!((1.8..=2.2).contains(&ratio), "bubble ratio {ratio}");
    let step = |j: &serde_json::Value| number(&j["time"]["step_s"]);
    assert!(step(&one) < step(&two) && step(&two) < step(&four));
    // The local batch is the whole replica batch: one schedule, the same step.
    let whole = eval(&["--local-batch", "8"]);
    assert_eq!(whole["schedule_runs"], 1);
    assert!((step(&whole) - step(&one)).abs() < 1e-9 * step(&one));
}

#[test]
fn a_local_batch_that_does_not_split_the_step_is_refused() {
    let with = |extra: &[&str]| {
        let args = with(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args)
    };
    assert_one_line_error(
        &with(&["--framework", "torchtitan", "--local-batch", "3"]),
        &[
            "--local-batch 3",
            "8 sequences per step",
            "valid: 1, 2, 4, 8",
        ],
        &["panicked"],
        "local batch not dividing the replica batch",
    );
    assert_one_line_error(
        &with(&[
            "--framework",
            "torchtitan",
            "--micro-batch",
            "2",
            "--local-batch",
            "1",
        ]),
        &["--local-batch 1", "--micro-batch 2"],
        &["panicked"],
        "local batch smaller than a micro-batch",
    );
    assert_one_line_error(
        &with(&["--framework", "torchtitan", "--local-batch", "0"]),
        &["--local-batch"],
        &["panicked"],
        "local batch 0",
    );
    assert_one_line_error(
        &with(&["--framework", "megatron-core", "--local-batch", "4"]),
        &["--local-batch", "megatron-core", "--framework torchtitan"],
        &["panicked"],
        "local batch outside torchtitan",
    );
}

#[test]
fn a_saved_plan_keeps_its_local_batch() {
    let dir = scratch("local-batch", "saved");
    let path = dir.join("plan.yaml");
    let path = path.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
        "--local-batch",
        "4",
        "--save",
        path,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(path).unwrap();
    assert!(saved.contains("local_batch: 4"), "{saved}");
    let again = json(&["eval", "--plan", path, "--format", "json"]);
    assert_eq!(again["training"]["local_batch"], 4);
}

#[test]
fn the_local_batch_is_named_where_it_is_the_reason() {
    // Interleaving needs a multiple of pp micro-batches in every schedule, not only in the step.
    let vpp = with(&[
        "--vpp",
        "2",
        "--micro-batch",
        "1",
        "--framework",
        "torchtitan",
        "--local-batch",
        "2",
    ]);
    let vpp: Vec<&str> = vpp.iter().map(String::as_str).collect();
    assert_one_line_error(
        &run(&vpp),
        &[
            "--vpp 2",
            "4 pipeline schedules",
            "runs 2 micro-batches",
            "--local-batch",
        ],
        &["Megatron-LM"],
        "interleaving with a small local batch",
    );
    // `plan` says the local batch, not the global batch, is what rules every plan out.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
        "--local-batch",
        "3",
    ]);
    assert_one_line_error(
        &r,
        &["--local-batch 3", "drop --local-batch"],
        &["--global-batch 64)"],
        "plan with a local batch nothing satisfies",
    );
    // Two plans of one scenario but for the local batch are not compared as plans.
    let dir = scratch("local-batch", "compare");
    let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    for (path, extra) in [(&a, vec!["--local-batch", "4"]), (&b, vec![])] {
        let mut args = vec![
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--pp",
            "2",
            "--global-batch",
            "64",
            "--framework",
            "torchtitan",
            "--save",
            path.to_str().unwrap(),
        ];
        args.extend(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    assert_one_line_error(
        &run(&[
            "compare",
            "--plan",
            a.to_str().unwrap(),
            "--plan",
            b.to_str().unwrap(),
        ]),
        &["different scenarios", "--local-batch"],
        &["faster"],
        "compare across local batches",
    );
}

/// Under PyTorch's pipelining FSDP reshards and reduce-scatters at the end of every schedule
/// (torch/distributed/pipelining/stage.py): with the weights kept across a schedule's
/// micro-batches, each schedule gathers them again and reduce-scatters its gradients, so the DP
/// traffic of those two grows with the schedules per step, and the ledger lists as many.
#[test]
fn fsdp_gathers_and_reduces_once_per_schedule() {
    let kept = ["--reshard-after-forward", "false"];
    let one = eval(&kept);
    let four = eval(&[kept[0], kept[1], "--local-batch", "2"]);
    assert_eq!(four["schedule_runs"], 4);
    let dp = |p: &serde_json::Value| number(&p["comm"]["dp"]["wire_bytes"]);
    assert!(
        (dp(&four) / dp(&one) - 4.0).abs() < 1e-9,
        "{} vs {}",
        dp(&four),
        dp(&one)
    );
    let counts = |p: &serde_json::Value, op: &str| -> u64 {
        p["ledger"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["group"] == "dp" && e["op"] == op)
            .map(|e| e["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(counts(&one, "reduce_scatter"), 1);
    assert_eq!(counts(&four, "reduce_scatter"), 4);
    assert_eq!(counts(&four, "all_gather"), 4);
    // ZeRO-2 (FSDP2 without resharding after the forward) likewise.
    let zero2 = |extra: &[&str]| {
        let mut args: Vec<String> = BASE
            .iter()
            .map(|a| if *a == "3" { "2" } else { a }.to_string())
            .collect();
        args.extend(
            [
                "--micro-batch",
                "1",
                "--framework",
                "torchtitan",
                "--format",
                "json",
            ]
            .iter()
            .chain(extra)
            .map(|a| a.to_string()),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&args)["plans"][0].clone()
    };
    assert!((dp(&zero2(&["--local-batch", "2"])) / dp(&zero2(&[])) - 4.0).abs() < 1e-9);
    // More exposed DP time too: each schedule's reduce-scatter follows its last backward.
    let exposed = |p: &serde_json::Value| number(&p["time"]["dp_comm_exposed_s"]);
    assert!(exposed(&four) > exposed(&one));
}
