//! Regressions from the 2026-12-02 review of the command line as a new user and a hostile one
//! would use it (each test names the finding it guards).

mod common;
use common::{assert_one_line_error, json, run};

/// `plan` with `--recompute selective` pinned evaluates it (the search skips it when open, since
/// FlashAttention already recomputes the attention core), and gives what `eval` gives.
#[test]
fn a_pinned_selective_recompute_is_evaluated_like_eval_does() {
    let pins = [
        "--params",
        "512B",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        "2",
        "--vpp",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--sequence-parallel",
        "--format",
        "json",
    ];
    let planned = json(&[&["plan", "--top", "1"][..], &pins[..]].concat());
    let evaluated = json(&[&["eval"][..], &pins[..]].concat());
    let step = |v: &serde_json::Value| v["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert_eq!(planned["plans"][0]["recompute"], "selective");
    assert_eq!(step(&planned), step(&evaluated));
    // Open search with only the recompute pinned: plans exist.
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--recompute",
        "selective",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A pipeline of thousands of stages times thousands of micro-batches is priced on the closed form
/// and says so; it was simulated block by block until the machine ran out of memory.
#[test]
fn a_schedule_too_large_to_simulate_keeps_the_closed_form_and_says_so() {
    let r = run(&[
        "eval",
        "--layers",
        "8192",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--nodes",
        "1024",
        "--tp",
        "1",
        "--pp",
        "8192",
        "--global-batch",
        "65536",
        "--micro-batch",
        "1",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("pipeline schedule: not simulated (1073741824"),
        "{}",
        r.stdout
    );
}

/// A node larger than the GPU's NVLink domain would price GPUs without NVLink as sharing it.
#[test]
fn gpus_per_node_beyond_the_nvlink_domain_is_refused() {
    let eval = |gpu: &str, gpn: &str| {
        run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--gpu",
            gpu,
            "--gpus-per-node",
            gpn,
            "--nodes",
            "4",
            "--tp",
            "4",
            "--pp",
            "1",
            "--global-batch",
            "512",
        ])
    };
    assert_one_line_error(
        &eval("h100-sxm-80g", "16"),
        &[
            "--gpus-per-node 16",
            "8 GPUs that share NVLink",
            "--gpus-per-node 8",
        ],
        &[],
        "16 H100 per node",
    );
    assert_one_line_error(
        &eval("gb200-nvl72", "16"),
        &[
            "--gpus-per-node 16",
            "72-GPU NVLink domain",
            "divisor of 72",
        ],
        &[],
        "16 GB200 per node",
    );
    for (gpu, gpn) in [("h100-sxm-80g", "4"), ("gb200-nvl72", "8")] {
        let r = eval(gpu, gpn);
        assert_eq!(r.code, 0, "{gpu} x {gpn}: {}", r.stderr);
    }
}

/// Block-style switches over a named model get the scenario's own one-line refusal (clap had
/// answered "--layers required").
#[test]
fn style_switches_over_a_named_model_name_the_conflict() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--swiglu",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &["--swiglu", "llama3-8b", "drop"],
        &["--layers <LAYERS>"],
        "swiglu",
    );
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--style",
        "gpt",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &["--style", "llama3-8b"],
        &["--layers <LAYERS>"],
        "style",
    );
}

/// The GPU's capacity is one number in the cluster line, the memory line and the JSON.
#[test]
fn gpu_capacity_is_one_number_everywhere() {
    let args = [
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "gb300-nvl72",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ];
    let v = json(&[&args[..], &["--format", "json"]].concat());
    let cluster = v["cluster"]["gpu_memory_bytes"].as_f64().unwrap();
    let capacity = v["plans"][0]["memory"]["capacity_bytes"].as_f64().unwrap();
    assert_eq!(cluster, capacity);
    let r = run(&args);
    let gib = format!("{:.1} GiB", capacity / f64::from(1u32 << 30));
    assert!(r.stdout.contains(&format!("GPUs ({gib},")), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("of {gib}")), "{}", r.stdout);
}

/// `eval --report` shows the search `plan` runs for the same scenario (it searched without the
/// model's selective-recompute modules when the evaluated plan did not recompute selectively).
#[test]
fn eval_report_shows_the_search_plan_runs() {
    let dir = common::scratch("review-fixes", "report-search");
    let out = dir.join("report");
    let out = out.to_str().unwrap();
    let scenario = [
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
    ];
    let r = run(&[
        &["eval"][..],
        &scenario[..],
        &["--tp", "1", "--pp", "1", "--report", out],
    ]
    .concat());
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/report.json")).unwrap())
            .unwrap();
    let planned = json(
        &[
            &["plan"][..],
            &scenario[..],
            &["--top", "1", "--format", "json"],
        ]
        .concat(),
    );
    assert_eq!(
        report["search"]["candidates"],
        planned["search"]["candidates"]
    );
    assert_eq!(report["search"]["feasible"], planned["search"]["feasible"]);
}

/// `--recompute-modules core_attn` on a model whose selective recompute means other modules is
/// named in the header, like every other selective recompute.
#[test]
fn a_core_attn_recompute_is_named_in_the_header() {
    let r = run(&[
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--recompute-modules",
        "core_attn",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("recompute selective = attention core"),
        "{}",
        r.stdout
    );
}

/// `plan --save` keeps the token budget, so `eval --plan` still prints the time to train.
#[test]
fn a_saved_plan_keeps_its_token_budget() {
    let dir = common::scratch("review-fixes", "tokens");
    let path = dir.join("p.yaml");
    let path = path.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tokens",
        "300B",
        "--top",
        "1",
        "--save",
        path,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&["eval", "--plan", path, "--format", "json"]);
    assert_eq!(v["training"]["tokens"].as_f64(), Some(3e11));
    let ttt = v["plans"][0]["time_to_train_s"].as_f64().unwrap();
    assert!(ttt > 0.0 && ttt.is_finite(), "{ttt}");
}

/// Mixture-of-experts settings a framework does not run are refused, as the others are.
#[test]
fn experts_under_a_framework_that_cannot_run_them_are_refused() {
    let base = [
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "8",
    ];
    let r = run(&[
        &base[..],
        &["--framework", "deepspeed", "--moe-dispatcher", "deepep"],
    ]
    .concat());
    assert_one_line_error(
        &r,
        &["--moe-dispatcher deepep", "deepspeed", "alltoall"],
        &[],
        "deepep",
    );
    let r = run(&[&base[..], &["--framework", "megatron-lm-2021"]].concat());
    assert_one_line_error(
        &r,
        &["megatron-lm-2021", "experts", "megatron-core"],
        &[],
        "2021",
    );
}

/// A plan file's block-recompute layer count under selective recompute is refused, not dropped.
#[test]
fn a_layer_count_without_full_recompute_is_refused() {
    let dir = common::scratch("review-fixes", "num-layers");
    let path = dir.join("p.yaml");
    std::fs::write(
        &path,
        "params: 7B\nnodes: 1\nglobal_batch: 64\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n  micro_batch: 1\n  recompute: selective\n  recompute_num_layers: 3\n",
    )
    .unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &["recompute_num_layers: 3 in", "selective", "recompute: full"],
        &[],
        "num layers",
    );
}

/// A plan the table shows as `full N/L` can be pinned in `plan` as it can in `eval`.
#[test]
fn block_recompute_layers_can_be_pinned_in_plan() {
    let scenario = [
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
    ];
    let v = json(
        &[
            &["plan"][..],
            &scenario[..],
            &[
                "--recompute-num-layers",
                "3",
                "--top",
                "5",
                "--format",
                "json",
            ],
        ]
        .concat(),
    );
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        assert_eq!(p["recompute"], "full");
        assert_eq!(p["recompute_num_layers"], 3);
    }
    let r = run(&[
        &["plan"][..],
        &scenario[..],
        &["--recompute-num-layers", "3", "--recompute", "selective"],
    ]
    .concat());
    assert_one_line_error(
        &r,
        &["--recompute-num-layers 3", "--recompute selective"],
        &[],
        "contradiction",
    );
    let r = run(&[
        &["plan"][..],
        &scenario[..],
        &["--recompute-num-layers", "0"],
    ]
    .concat());
    assert_one_line_error(&r, &["--recompute-num-layers 0", "1 or more"], &[], "zero");
    let r = run(&[
        &["plan"][..],
        &scenario[..],
        &["--recompute-num-layers", "2", "--framework", "torchtitan"],
    ]
    .concat());
    assert_one_line_error(
        &r,
        &[
            "--recompute-num-layers 2",
            "torchtitan",
            "every transformer block",
        ],
        &[],
        "torchtitan",
    );
}

/// A model whose layers split evenly over no pipeline of 2 to 16 stages (DeepSeek-V3's 61) gets a
/// note naming --allow-uneven-pp; "nothing fits" names it too.
#[test]
fn layer_counts_without_even_pipelines_point_to_uneven_splits() {
    let r = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--nodes",
        "128",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("no pipeline of 2 to 16 stages splits the 61 layers evenly")
            && r.stdout.contains("--allow-uneven-pp"),
        "{}",
        r.stdout
    );
    let r = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--nodes",
        "128",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
        "--top",
        "1",
        "--allow-uneven-pp",
    ]);
    assert!(
        !r.stdout.contains("stages splits the 61 layers evenly"),
        "{}",
        r.stdout
    );
    // Seven layers on 16 GPUs: a pipeline of 16 stages needs uneven ones, and comes closer.
    let r = run(&[
        "plan",
        "--layers",
        "7",
        "--hidden",
        "32768",
        "--heads",
        "128",
        "--nodes",
        "2",
        "--global-batch",
        "8",
        "--seq-len",
        "8192",
        "--zero",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("or add --allow-uneven-pp"),
        "{}",
        r.stderr
    );
    // Megatron 1T on 96 GPUs: its weights and optimizer states alone outgrow the cluster, so no
    // pipeline helps and none is offered (review round 28).
    let r = run(&["plan", "--model", "megatron-1t", "--nodes", "12"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("the weights and optimizer states alone take")
            && !r.stderr.contains("--allow-uneven-pp"),
        "{}",
        r.stderr
    );
}

/// The small-batch warning counts the context-parallel ranks a sequence is split over: 16
/// sequences of 128K tokens with cp 4 on 32 nodes fill the GPUs (8 micro-batches on 4 stages); 16
/// sequences without context parallelism do not (fewer sequences than nodes).
#[test]
fn the_small_batch_warning_counts_context_parallel_ranks() {
    let base = [
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "32",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "16",
        "--sequence-parallel",
    ];
    let long = run(&[&base[..], &["--cp", "4", "--seq-len", "131072"]].concat());
    assert!(!long.stderr.contains("is small for"), "{}", long.stderr);
    let short = run(&base);
    assert!(
        short
            .stderr
            .contains("--global-batch 16 is small for 32 nodes"),
        "{}",
        short.stderr
    );
}
