//! Hostile input, round 31: the refusal of a total GPU count counts its fix in the node size the
//! input gives (a plan file's gpus_per_node, a launch line's torchrun --nproc_per_node), a zero
//! node size is refused as itself, validate's YAML never writes `.nan`, a runs file's 40 GB A100s
//! are evaluated on the bundled a100-sxm-40g, and a one-layer model is not told to pipeline.

mod common;

use common::*;

const SUITE: &str = "hostile31";

/// A 7B plan on 4 nodes of 4 H100s: the file's node size (4) is not the profile's (8).
const PLAN_4_PER_NODE: &str = "params: 7B
gpu: h100-sxm-80g
nodes: 4
gpus_per_node: 4
seq_len: 2048
global_batch: 64
plan:
  tp: 4
  pp: 1
  dp: 4
  micro_batch: 1
";

/// `eval --plan FILE --gpus 16`, where the file runs 4 GPUs a node, was told "for 16 GPUs give
/// --nodes 2" (the profile's 8 a node): following it would give the file's plan 8 GPUs.
#[test]
fn a_gpu_count_over_a_plan_file_is_counted_in_the_files_nodes() {
    let dir = scratch(SUITE, "plan-file-gpus");
    std::fs::write(dir.join("p.yaml"), PLAN_4_PER_NODE).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--gpus", "16"]);
    assert_one_line_error(
        &r,
        &[
            "--gpus 16",
            "4 per node on h100-sxm-80g, as p.yaml's gpus_per_node says",
            "for 16 GPUs give --nodes 4",
        ],
        &["--nodes 2", "the profile's node"],
        "plan file, --gpus 16",
    );
    // The file without its nodes: the error counts the nodes in the file's size too.
    std::fs::write(
        dir.join("no-nodes.yaml"),
        PLAN_4_PER_NODE.replace("nodes: 4\n", ""),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "no-nodes.yaml"]);
    assert_one_line_error(
        &r,
        &["no-nodes.yaml gives no nodes: how many nodes of 4 GPUs"],
        &["of 8 GPUs"],
        "plan file without nodes",
    );
}

/// A launch line with torchrun's `--nproc-per-node=4`, and `--gpus 32` beside it: "for 32 GPUs
/// give --nodes 4" (8 a node), which with the line's 4 a node is 16 GPUs.
#[test]
fn a_gpu_count_beside_a_launch_line_is_counted_in_its_torchrun_nodes() {
    let line = "torchrun --nnodes=4 --nproc-per-node=4 pretrain_gpt.py --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --tensor-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 64 --bf16";
    let r = run(&["eval", "--megatron-args", line, "--gpus", "32"]);
    assert_one_line_error(
        &r,
        &[
            "--gpus 32",
            "4 per node on h100-sxm-80g, as the launch line's torchrun --nproc_per_node says",
            "for 32 GPUs give --nodes 8",
        ],
        &["--nodes 4"],
        "launch line, --gpus 32",
    );
}

/// `--gpus-per-node 0 --gpus 8` said "(1 per node on h100-sxm-80g, as --gpus-per-node says) ...
/// give --nodes 8": the 0 given was read as 1. Without --nodes, `--gpus-per-node 0` (or 4) was
/// answered "--nodes is required: how many nodes of 8 GPUs", the profile's size, not the one given.
#[test]
fn a_zero_node_size_is_refused_as_itself_and_a_given_one_is_counted_in() {
    for args in [
        &[
            "plan",
            "--params",
            "7B",
            "--gpus-per-node",
            "0",
            "--gpus",
            "8",
        ][..],
        &["plan", "--params", "7B", "--gpus-per-node", "0"][..],
        &[
            "sweep",
            "--params",
            "7B",
            "--gpus-per-node",
            "0",
            "--axis",
            "global-batch",
            "--values",
            "8,16",
        ][..],
    ] {
        let r = run(args);
        assert_one_line_error(
            &r,
            &["--gpus-per-node 0 must be at least 1"],
            &["1 per node", "--nodes is required", "of 0 GPUs"],
            &args.join(" "),
        );
    }
    let r = run(&["plan", "--params", "7B", "--gpus-per-node", "4"]);
    assert_one_line_error(
        &r,
        &["--nodes is required: how many nodes of 4 GPUs"],
        &["of 8 GPUs"],
        "--gpus-per-node 4 without --nodes",
    );
}

/// `validate --tp 1 --format yaml` wrote `comm_error: .nan` (no TP communication at tp 1 to
/// compare with): a NaN in the output. It is null now, as JSON already wrote it.
#[test]
fn validate_at_tp_1_writes_no_nan_in_yaml() {
    let args = [
        "validate",
        "--backend",
        "cpu",
        "--layers",
        "2",
        "--hidden",
        "64",
        "--heads",
        "4",
        "--seq-len",
        "32",
        "--global-batch",
        "8",
        "--tp",
        "1",
        "--warmup",
        "0",
        "--reps",
        "1",
    ];
    let yaml = run(&[&args[..], &["--format", "yaml"]].concat());
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    assert!(
        !yaml.stdout.to_lowercase().contains("nan") && !yaml.stdout.contains(".inf"),
        "{}",
        yaml.stdout
    );
    assert!(yaml.stdout.contains("comm_error: null"), "{}", yaml.stdout);
    let json = run(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(json.code, 0, "{}", json.stderr);
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(rows[0]["comm_error"].is_null(), "{}", json.stdout);
    assert!(rows[0]["layer_error"].is_f64(), "{}", json.stdout);
}

/// A published run on 40 GB A100s was skipped ("give runs on 80 GB A100s") although tpsim
/// bundles the 40 GB part since a100-sxm-40g: it is now evaluated there (and its memory checked
/// against 40 GB, where this 1.7B run at micro-batch 16 does not fit).
#[test]
fn a_published_run_on_40_gb_a100s_is_evaluated_on_a100_sxm_40g() {
    let run_file = "- id: r40
  completeness: full_plan
  model: {arch: GPT, layers: 24, hidden: 2304, heads: 24, kv_heads: null, ffn_hidden: 9216, vocab: 51200, seq_len: 2048}
  hardware: {gpu: GPU_NAME, gpus_per_node: 8, num_gpus: 32}
  plan: {tp: 1, pp: 1, dp: 32, micro_batch_size: 16, global_batch_size: 512, recompute: full, virtual_pipeline_stages: null, sequence_parallel: null, zero_stage: null}
  results: {iteration_time_s: 3.5}
";
    for (name, gpu) in [
        ("key", "A100, gpu_memory_gb: 40"),
        ("name", "NVIDIA A100 40GB"),
    ] {
        let dir = scratch(SUITE, &format!("a100-40-{name}"));
        std::fs::write(dir.join("runs.yaml"), run_file.replace("GPU_NAME", gpu)).unwrap();
        let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
        assert_eq!(r.code, 0, "{gpu}: {}", r.stderr);
        assert!(r.stdout.contains("a100-sxm-40g"), "{gpu}: {}", r.stdout);
        assert!(!r.stdout.contains("a100-sxm-80g"), "{gpu}: {}", r.stdout);
        assert!(!r.stderr.contains("skipped"), "{gpu}: {}", r.stderr);
    }
}

/// A one-layer model was told "no pipeline of 2 to 8 stages splits the 1 layers evenly ... add
/// --allow-uneven-pp", which searches the same 8 plans: one layer is no pipeline however split.
#[test]
fn a_one_layer_model_is_not_told_to_allow_uneven_pipelines() {
    let dir = scratch(SUITE, "one-layer");
    std::fs::write(
        dir.join("tiny.yaml"),
        "name: tiny\nlayers: 1\nhidden: 8\nheads: 1\nffn_hidden: 8\nvocab: 1\nseq_len: 1\n",
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "tiny.yaml",
            "--nodes",
            "1",
            "--global-batch",
            "8",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("--allow-uneven-pp"), "{}", r.stdout);
    assert!(!r.stderr.contains("--allow-uneven-pp"), "{}", r.stderr);
    // Three layers split evenly over 3 stages, so the note is not about depth alone: a prime
    // count past the deepest pipeline still gets it.
    std::fs::write(
        dir.join("seventeen.yaml"),
        "name: seventeen\nlayers: 17\nhidden: 64\nheads: 4\nffn_hidden: 256\nvocab: 128\nseq_len: 32\n",
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "seventeen.yaml",
            "--nodes",
            "1",
            "--global-batch",
            "8",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        format!("{}{}", r.stdout, r.stderr).contains("--allow-uneven-pp"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}

/// `sweep --axis gpu --values a100-sxm-40g,gb200-nvl72 --gpus 8` was refused "(8 per node on
/// h100-sxm-80g, the profile's node) ... give --nodes 1": the default GPU, which is no point of the
/// sweep, and a fix that gives the GB200 point 4 GPUs. Where the points' nodes differ no count is
/// given; where they agree, it is counted in theirs.
#[test]
fn a_gpu_count_on_the_gpu_axis_is_counted_in_the_points_nodes() {
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--axis",
        "gpu",
        "--values",
        "a100-sxm-40g,gb200-nvl72",
        "--gpus",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--gpus 8",
            "nodes of different sizes (a100-sxm-40g: 8 a node, gb200-nvl72: 4 a node)",
        ],
        &["h100-sxm-80g", "give --nodes 1"],
        "gpu axis, different nodes",
    );
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--axis",
        "gpu",
        "--values",
        "gb200-nvl72",
        "--world-size",
        "16",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--world-size 16",
            "4 per node on gb200-nvl72",
            "for 16 GPUs give --nodes 4",
        ],
        &["h100-sxm-80g", "--nodes 2"],
        "gpu axis, one GPU",
    );
}

/// `calibrate --gpus 8`: calibrate has no cluster flags, so clap answered "a similar argument
/// exists: '--gpu'", the GPU profile (a type), for a GPU count.
#[test]
fn calibrate_says_a_gpu_count_is_not_a_gpu_type() {
    for flag in ["--gpus", "--num-gpus=8", "--world-size"] {
        let mut args = vec!["calibrate", "--backend", "cpu", flag];
        if !flag.contains('=') {
            args.push("8");
        }
        let r = run(&args);
        let typed = flag.split('=').next().unwrap();
        assert_one_line_error(
            &r,
            &[
                &format!("calibrate takes no {typed}, a total GPU count"),
                "--ranks",
                "--gpu names a GPU profile, a type, not a count",
            ],
            &["similar argument"],
            flag,
        );
    }
}
