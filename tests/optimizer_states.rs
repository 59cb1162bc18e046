//! How parameters and Adam's states are stored (`--optimizer-states`, Megatron-LM's
//! precision-aware optimizer flags): the bytes each format keeps, what it changes in memory, which
//! framework and ZeRO stage can run it, and that launch lines and plan files carry it.

mod common;

use common::{assert_one_line_error, json, run, scratch};
use tpsim::cluster::Cluster;
use tpsim::cost::evaluate;
use tpsim::plan::{ParallelPlan, PlanRequest, Recompute};
use tpsim::specs::{load_gpu, load_model};
use tpsim::training::{
    AttentionKernel, GradDtype, OptimizerStates, Training, TrainingFramework, WEIGHT_BYTES,
};

/// Bytes per parameter besides the gradient: the ZeRO paper's 2 + 12 (Rajbhandari et al. 2020
/// §3.1), FSDP2's fp32 parameters with fp32 moments (4 + 8), Megatron-Core's precision-aware
/// optimizer with 16-bit remainders and bf16 moments (2 + 2 + 4) or, at its default dtypes, fp32
/// moments (2 + 2 + 8), a bf16 model with a plain Adam (2 + 4).
#[test]
fn each_format_keeps_the_bytes_its_framework_allocates() {
    let kept = |s: OptimizerStates| (s.param_bytes(), s.optimizer_bytes());
    assert_eq!(kept(OptimizerStates::Fp32), (WEIGHT_BYTES, 12.0));
    assert_eq!(kept(OptimizerStates::Fp32Params), (4.0, 8.0));
    assert_eq!(kept(OptimizerStates::Bf16Moments), (2.0, 6.0));
    assert_eq!(kept(OptimizerStates::PrecisionAware), (2.0, 10.0));
    assert_eq!(kept(OptimizerStates::Bf16), (2.0, 4.0));
    assert_eq!(
        TrainingFramework::Torchtitan.default_optimizer_states(),
        OptimizerStates::Fp32Params
    );
    assert_eq!(
        TrainingFramework::MegatronCore.default_optimizer_states(),
        OptimizerStates::Fp32
    );
}

/// Qwen3-30B-A3B on one 8-GPU H100 node with EP 8 and FSDP (NeMo AutoModel's published plan): the
/// experts are not sharded further (expert-DP 1), so each GPU keeps its 16 experts of every layer
/// whole. With fp32 parameters and moments that does not fit in 80 GB; with AutoModel's bf16
/// parameters, gradients and moments it does, and the difference is exactly the bytes per
/// parameter the formats differ by.
#[test]
fn bf16_states_fit_the_moe_model_fsdp2_fp32_states_cannot() {
    let model = load_model("qwen3-30b-a3b").unwrap();
    let cluster = Cluster {
        gpu: load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let estimate = |states: OptimizerStates, grads: GradDtype| {
        let mut training = Training::with_framework(
            TrainingFramework::Torchtitan,
            4096,
            512,
            AttentionKernel::Flash,
        );
        training.optimizer_states = states;
        training.grad_dtype = grads;
        let request = PlanRequest {
            tp: 1,
            pp: 1,
            dp: 8,
            ep: 8,
            micro_batch: 4,
            recompute: Recompute::Full,
            zero: 3,
            reshard_after_forward: true,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan)
    };
    let fp32 = estimate(OptimizerStates::Fp32Params, GradDtype::Fp32);
    let bf16 = estimate(OptimizerStates::Bf16, GradDtype::Bf16);
    assert!(!fp32.memory.fits, "fp32 states: {:?}", fp32.memory);
    assert!(bf16.memory.fits, "bf16 states: {:?}", bf16.memory);
    // The optimizer keeps half the bytes (4 vs 8 per parameter), the gradients half (2 vs 4).
    let ratio = bf16.memory.optimizer_bytes.0 / fp32.memory.optimizer_bytes.0;
    assert!((ratio - 0.5).abs() < 1e-12, "optimizer ratio {ratio}");
    let ratio = bf16.memory.gradients_bytes.0 / fp32.memory.gradients_bytes.0;
    assert!((0.5..0.5 + 0.05).contains(&ratio), "gradient ratio {ratio}");
    // The stored parameters: 2 bytes less per parameter of the shards; the gathered bf16 units
    // are the same.
    let shards = fp32.memory.optimizer_bytes.0 / 8.0;
    let saved = fp32.memory.weights_bytes.0 - bf16.memory.weights_bytes.0;
    assert!(
        (saved / (2.0 * shards) - 1.0).abs() < 1e-9,
        "{saved} B saved"
    );
}

#[test]
fn a_format_its_framework_does_not_run_is_refused() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--zero",
        "1",
        "--optimizer-states",
        "bf16",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--optimizer-states bf16",
            "--framework megatron-core",
            "--framework torchtitan",
        ],
        &[],
        "bf16 states under megatron-core",
    );
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--optimizer-states",
        "bf16-moments",
    ]);
    assert_one_line_error(
        &r,
        &["bf16-moments", "--framework megatron-core"],
        &[],
        "bf16 moments under torchtitan",
    );
}

/// The precision-aware optimizer lives in Megatron-Core's distributed optimizer: a pinned ZeRO
/// stage other than 1 is refused, and the search proposes ZeRO-1 only.
#[test]
fn bf16_moments_run_at_zero_1_only() {
    for command in ["eval", "plan"] {
        let r = run(&[
            command,
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--pp",
            "1",
            "--zero",
            "3",
            "--optimizer-states",
            "bf16-moments",
        ]);
        assert_one_line_error(&r, &["--zero 3", "bf16-moments", "--zero 1"], &[], command);
    }
    let out = json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--optimizer-states",
        "bf16-moments",
        "--top",
        "20",
        "--format",
        "json",
    ]);
    let plans = out["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    assert!(plans.iter().all(|p| p["zero"] == 1), "{plans:?}");
    assert_eq!(out["training"]["optimizer_states"], "bf16-moments");
}

/// A Megatron-LM line with the precision-aware optimizer and bf16 moments reads as bf16-moments;
/// the same dtypes without the switch, or dtypes tpsim does not model, are refused by name; and
/// what `--emit megatron` writes reads back to the same estimate.
#[test]
fn launch_lines_carry_the_precision_aware_optimizer() {
    let base = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \
        --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --bf16 \
        --use-distributed-optimizer";
    let line = format!(
        "{base} --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    );
    let read = json(&[
        "eval",
        "--megatron-args",
        &line,
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(read["training"]["optimizer_states"], "bf16-moments");
    let without = format!("{base} --exp-avg-dtype bf16");
    let r = run(&["eval", "--megatron-args", &without, "--nodes", "1"]);
    assert_one_line_error(
        &r,
        &["--exp-avg-dtype bf16", "--use-precision-aware-optimizer"],
        &[],
        "state dtype without the switch",
    );
    let fp8 = format!(
        "{base} --use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8"
    );
    let r = run(&["eval", "--megatron-args", &fp8, "--nodes", "1"]);
    assert_one_line_error(
        &r,
        &["--exp-avg-dtype fp8", "bf16 moments"],
        &[],
        "fp8 moments",
    );
    let r = run(&[
        "eval",
        "--megatron-args",
        &line,
        "--nodes",
        "1",
        "--optimizer-states",
        "fp32",
    ]);
    assert_one_line_error(
        &r,
        &["--optimizer-states fp32", "contradicts"],
        &[],
        "flag against the line",
    );

    let emitted = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "256",
        "--optimizer-states",
        "bf16-moments",
        "--emit",
        "megatron",
    ]);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let written = emitted.stdout.lines().last().unwrap();
    assert!(
        written.contains("--use-precision-aware-optimizer"),
        "{written}"
    );
    let again = json(&[
        "eval",
        "--megatron-args",
        written,
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(again["training"]["optimizer_states"], "bf16-moments");
}

/// A saved plan keeps its optimizer states.
#[test]
fn plan_files_keep_the_optimizer_states() {
    let dir = scratch("optimizer-states", "save");
    let saved = dir.join("plan.yaml");
    let saved = saved.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--optimizer-states",
        "bf16",
        "--save",
        saved,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(saved).unwrap();
    assert!(text.contains("optimizer_states: bf16"), "{text}");
    let out = json(&["eval", "--plan", saved, "--format", "json"]);
    assert_eq!(out["training"]["optimizer_states"], "bf16");
}

/// What a launch line says of its optimizer is kept when --framework is given beside it, and a
/// framework that cannot keep it is refused; `compare` refuses a ZeRO stage the states cannot run
/// at, as `eval` and `plan` do.
#[test]
fn no_command_drops_or_bypasses_the_states() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \
        --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --bf16 \
        --use-distributed-optimizer --use-precision-aware-optimizer --exp-avg-dtype bf16 \
        --exp-avg-sq-dtype bf16";
    let out = json(&[
        "eval",
        "--megatron-args",
        line,
        "--nodes",
        "1",
        "--framework",
        "megatron-core",
        "--format",
        "json",
    ]);
    assert_eq!(out["training"]["optimizer_states"], "bf16-moments");
    let r = run(&[
        "eval",
        "--megatron-args",
        line,
        "--nodes",
        "1",
        "--framework",
        "deepspeed",
    ]);
    assert_one_line_error(
        &r,
        &["bf16-moments", "--framework deepspeed"],
        &[],
        "deepspeed",
    );

    let dir = scratch("optimizer-states", "compare");
    let saved = dir.join("z3.yaml");
    let saved = saved.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--zero",
        "3",
        "--global-batch",
        "64",
        "--save",
        saved,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&[
        "compare",
        "--plan",
        saved,
        "--plan",
        saved,
        "--optimizer-states",
        "bf16-moments",
    ]);
    // The plan file's ZeRO stage, named by its key and the file.
    assert_one_line_error(
        &r,
        &[&format!("zero: 3 in {saved}"), "bf16-moments"],
        &["--zero 3"],
        "compare",
    );
}

/// The precision-aware optimizer's master is 16-bit remainders only beside bf16 parameters: with
/// FP8 parameter gather (Megatron-Core's default under FP8 at ZeRO-1) it keeps a whole fp32 copy,
/// so its states are 4 + 4 of fp32's 4 + 8 bytes instead of 2 + 4.
#[test]
fn fp8_parameters_keep_a_whole_fp32_master() {
    let optimizer = |precision: &str, states: &str| {
        let out = json(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--pp",
            "1",
            "--zero",
            "1",
            "--precision",
            precision,
            "--optimizer-states",
            states,
            "--format",
            "json",
        ]);
        out["plans"][0]["memory"]["optimizer_bytes"]
            .as_f64()
            .unwrap()
    };
    let ratio = optimizer("bf16", "bf16-moments") / optimizer("bf16", "fp32");
    assert!(
        (ratio - 6.0 / 12.0).abs() < 1e-9,
        "bf16 parameters: {ratio}"
    );
    let ratio = optimizer("fp8", "bf16-moments") / optimizer("fp8", "fp32");
    assert!((ratio - 8.0 / 12.0).abs() < 1e-9, "fp8 parameters: {ratio}");
}

/// Megatron-Core's precision-aware optimizer at its default dtypes (`--use-precision-aware-optimizer`
/// alone: fp32 main params kept as 16-bit remainders, fp32 moments; optimizer_config.py), which
/// Megatron-Bridge's performance scripts turn on for every bf16 run: a launch line with the switch
/// alone reads as `precision-aware` (it was refused as not modelled), `--emit megatron` and
/// `--emit megatron-bridge` write it with fp32 moments, the line written reads back to the same
/// estimate, and it runs at ZeRO-1 under Megatron-Core only, as bf16-moments does. It keeps 4
/// bytes per parameter fewer than the fp32 master with fp32 moments, sharded over dp.
#[test]
fn the_precision_aware_optimizer_at_its_default_dtypes() {
    let base = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \
        --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --bf16 \
        --use-distributed-optimizer";
    let eval_line = |line: &str| {
        json(&[
            "eval",
            "--megatron-args",
            line,
            "--nodes",
            "1",
            "--format",
            "json",
        ])
    };
    let aware = eval_line(&format!("{base} --use-precision-aware-optimizer"));
    assert_eq!(aware["training"]["optimizer_states"], "precision-aware");
    let spelled = eval_line(&format!(
        "{base} --use-precision-aware-optimizer --main-params-dtype fp32 --exp-avg-dtype fp32 \
         --exp-avg-sq-dtype fp32"
    ));
    assert_eq!(spelled["training"]["optimizer_states"], "precision-aware");
    let plain = eval_line(base);
    assert_eq!(plain["training"]["optimizer_states"], "fp32");
    let memory = |out: &serde_json::Value, key: &str| {
        out["plans"][0]["memory"][key]
            .as_f64()
            .unwrap_or_else(|| panic!("plans[0].memory.{key}"))
    };
    let dp = plain["plans"][0]["dp"].as_f64().expect("plans[0].dp");
    assert_eq!(dp, 4.0, "8 GPUs at tp 2");
    // The distributed optimizer shards each TP rank's states over dp; the fp32 master's 4 bytes
    // become 2 bytes of remainder.
    let sharded_params = memory(&plain, "params_per_gpu_before_zero") / dp;
    let saved_per_param =
        (memory(&plain, "optimizer_bytes") - memory(&aware, "optimizer_bytes")) / sharded_params;
    assert!(
        (saved_per_param - 2.0).abs() < 0.05,
        "the precision-aware optimizer keeps 2 bytes per parameter fewer: {saved_per_param}"
    );

    for (emit, want) in [
        ("megatron", "--exp-avg-dtype fp32"),
        ("megatron-bridge", "optimizer.exp_avg_dtype=torch.float32"),
    ] {
        let emitted = run(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "256",
            "--optimizer-states",
            "precision-aware",
            "--emit",
            emit,
        ]);
        assert_eq!(emitted.code, 0, "{}", emitted.stderr);
        assert!(emitted.stdout.contains(want), "{emit}: {}", emitted.stdout);
        assert!(
            emitted.stdout.contains("use-precision-aware-optimizer")
                || emitted
                    .stdout
                    .contains("use_precision_aware_optimizer=true"),
            "{emit}: {}",
            emitted.stdout
        );
        if emit == "megatron" {
            let written = emitted.stdout.lines().last().unwrap();
            let again = eval_line(written);
            assert_eq!(again["training"]["optimizer_states"], "precision-aware");
        }
    }

    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--pp",
        "1",
        "--zero",
        "3",
        "--optimizer-states",
        "precision-aware",
    ]);
    assert_one_line_error(
        &r,
        &["--zero 3", "precision-aware", "--zero 1"],
        &[],
        "zero 3",
    );
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
        "--optimizer-states",
        "precision-aware",
    ]);
    assert_one_line_error(
        &r,
        &["precision-aware", "--framework megatron-core"],
        &[],
        "precision-aware under torchtitan",
    );
}
