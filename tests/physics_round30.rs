//! Three mechanisms physics round 29 left in the leads (validation/FIT.md, "DeepSpeed's bf16
//! gradients, V-schedule sends, torchtitan's tied embeddings (physics round 30)"): DeepSpeed's
//! `BF16_Optimizer` and its gradient buffer (BLOOM and `--framework deepspeed`), the V schedules'
//! sends in their fill and drain, and torchtitan's refusal of tied embeddings under a pipeline.

mod common;

use serde_json::Value;
use tpsim::cost::terms::TermKind;
use tpsim::validation::{AccuracyRow, accuracy};

const RUNS: &str = "validation/published_runs.yaml";

/// BLOOM's row of the SC'21/BLOOM table, as the file says it ran, or with the line that says it
/// used DeepSpeed's `BF16_Optimizer` taken out (how tpsim priced it before).
fn bloom(with_bf16_optimizer: bool) -> AccuracyRow {
    let mut text = std::fs::read_to_string(RUNS).unwrap();
    let line = "    deepspeed_bf16_optimizer: true\n";
    assert_eq!(text.matches(line).count(), 1, "BLOOM's row says it");
    if !with_bf16_optimizer {
        text = text.replace(line, "");
    }
    accuracy(&text, RUNS)
        .unwrap()
        .into_iter()
        .find(|r| r.id == "bloom-176b-main")
        .unwrap()
}

fn term(row: &AccuracyRow, kind: TermKind) -> (f64, f64) {
    let t = row.estimate.terms.get(kind);
    (t.wire_bytes.0, t.exposed_s.0)
}

/// BLOOM ran deepspeed@olruwase/bf16-updates 5ea1c60f8 (bigscience tr11-176B-ml/chronicles.md),
/// whose `BF16_Optimizer` accumulates every micro-batch's bf16 gradients into an unsharded fp32
/// buffer (`fp32_groups_gradients_flat`) and keeps the bf16 `.grad`s beside it: 2 + 4 bytes a
/// parameter against the 2 of the bf16 weights (ZeRO-1 keeps them whole), where tpsim counted 2.
/// The tied embedding's all-reduce reads that buffer (`_exec_reduce_tied_grads`:
/// `dist.all_reduce(weight._hp_grad)`, no cast): 250,880 × 14,336 / 4 × 4 B = 3.596 GB, 1.798 GB
/// more than the bf16 count (the all-reduce over two ranks puts 1 × the tensor on the wire). The DP
/// all-reduce casts the buffer to bf16 (`communication_data_type`), 2 · 2 · (d − 1)/d bytes a
/// parameter, which is a 4-byte reduce-scatter's wire: twice the 2-byte one tpsim priced. And
/// `update_hp_grads` casts and adds 18 bytes a parameter every micro-batch: 128 micro-batches ×
/// the slowest stage's 6 layers × 2,466,437,120 / 4 parameters (12h² + 13h; the layer norms' and
/// the row-parallel biases' 4h replicated, under 1e-3 of it) × 18 B at the profile's achieved HBM
/// bandwidth and framework efficiency.
#[test]
fn bloom_accumulates_its_gradients_in_deepspeeds_fp32_buffer() {
    let (before, after) = (bloom(false), bloom(true));
    let m = &after.estimate.memory;
    let ratio = m.gradients_bytes.0 / m.weights_bytes.0;
    assert!((ratio - 3.0).abs() < 1e-9, "gradients / weights {ratio}");
    let m0 = &before.estimate.memory;
    assert!((m0.gradients_bytes.0 / m0.weights_bytes.0 - 1.0).abs() < 1e-9);

    let tied = 250_880.0 * 14_336.0 / 4.0;
    let (pp0, _) = term(&before, TermKind::PpComm);
    let (pp1, _) = term(&after, TermKind::PpComm);
    assert!(
        ((pp1 - pp0) - tied * 2.0).abs() < 1.0,
        "PP wire {pp0} -> {pp1}"
    );
    let (dp0, _) = term(&before, TermKind::DpGradReduce);
    let (dp1, _) = term(&after, TermKind::DpGradReduce);
    assert!((dp1 / dp0 - 2.0).abs() < 1e-9, "DP wire {dp0} -> {dp1}");

    let gpu = tpsim::specs::load_gpu("jean-zay-a100-80g").unwrap();
    let per_s = gpu.achieved_hbm_bandwidth().0 * gpu.framework_efficiency;
    let layer = (12.0 * 14_336.0f64.powi(2) + 13.0 * 14_336.0) / 4.0;
    let pass_s = 128.0 * 6.0 * layer * 18.0 / per_s;
    let (_, c0) = term(&before, TermKind::Compute);
    let (_, c1) = term(&after, TermKind::Compute);
    assert!(
        ((c1 - c0) / pass_s - 1.0).abs() < 2e-3,
        "compute {c0} -> {c1}, pass {pass_s}"
    );
    assert!(after.predicted_step_s > before.predicted_step_s + pass_s);
}

fn eval_json(args: &[&str]) -> Value {
    let mut all = vec!["eval", "--format", "json"];
    all.extend_from_slice(args);
    common::json(&all)
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

fn gradient_bytes_per_param(json: &Value) -> f64 {
    let memory = &json["plans"][0]["memory"];
    memory["gradients_bytes"].as_f64().unwrap()
        / memory["params_per_gpu_before_zero"].as_f64().unwrap()
}

/// Today's DeepSpeed (edaa7221, engine.py `_do_optimizer_sanity_check`) hands a bf16 model to
/// `BF16_Optimizer` under ZeRO-1 with `data_types.grad_accum_dtype` fp32 (what `--emit deepspeed`
/// writes for `--grad-dtype fp32`), and under ZeRO-0 with a pipeline and bf16 accumulation; its
/// buffer (`grad_acc_dtype`) sits beside the bf16 `.grad`s: 6 and 4 bytes a parameter, where tpsim
/// counted 4 and 2. ZeRO-1 with bf16 gradients runs DeepSpeed's ZeRO optimizer (2 bytes).
#[test]
fn deepspeeds_bf16_optimizer_keeps_the_bf16_gradients_beside_its_buffer() {
    let fp32_zero1 = deepspeed_llama(&["--zero", "1", "--grad-dtype", "fp32", "--pp", "1"]);
    assert!((gradient_bytes_per_param(&fp32_zero1) - 6.0).abs() < 1e-9);
    let bf16_zero0_pp = deepspeed_llama(&["--zero", "0", "--pp", "2"]);
    assert!((gradient_bytes_per_param(&bf16_zero0_pp) - 4.0).abs() < 1e-9);
    let bf16_zero1_pp = deepspeed_llama(&["--zero", "1", "--pp", "2"]);
    assert!((gradient_bytes_per_param(&bf16_zero1_pp) - 2.0).abs() < 1e-9);
    // The same plan under Megatron-Core keeps its fp32 `main_grad` alone (gradient-accumulation
    // fusion writes into it).
    let mut args = vec!["--zero", "1", "--grad-dtype", "fp32", "--pp", "1"];
    args.extend_from_slice(&["--framework", "megatron-core"]);
    let core = eval_json(
        &[
            &[
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
            ][..],
            &args[..],
        ]
        .concat(),
    );
    assert!((gradient_bytes_per_param(&core) - 4.0).abs() < 1e-9);
}

/// A Llama 3.2 1B-shaped Hugging Face config (its config.json: 16 layers, hidden 2048, 32 heads,
/// 8 KV heads, FFN 8192, vocabulary 128,256, `tie_word_embeddings: true`), tied or untied.
fn llama32_1b(dir: &std::path::Path, tied: bool) -> String {
    let config = format!(
        r#"{{"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 16, "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": {tied}}}"#
    );
    let path = dir.join(format!("llama32-1b-tied-{tied}.json"));
    std::fs::write(&path, config).unwrap();
    path.to_str().unwrap().to_string()
}

fn tied_run(config: &str, framework: &str, command: &str, extra: &[&str]) -> common::Run {
    let mut args = vec![
        command,
        "--hf-config",
        config,
        "--framework",
        framework,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--seq-len",
        "4096",
    ];
    args.extend_from_slice(extra);
    common::run(&args)
}

/// torchtitan's decoder refuses weight tying under any pipeline (`update_from_config`:
/// `NotImplementedError("Weight tying is not supported with Pipeline Parallel.")` when
/// `enable_weight_tying and pipeline_parallel_degree > 1`, torchtitan/models/common/decoder.py at
/// b5bcd76c6), and its Llama 3.2 1B and 3B flavours tie (`_1b`, `_3b` in models/llama3). Before,
/// tpsim priced such a plan, the round-29 embedding all-reduce included, and `plan` proposed it.
/// Megatron-Core runs it, and torchtitan the untied model.
#[test]
fn torchtitan_refuses_tied_embeddings_under_a_pipeline() {
    let dir = common::scratch("physics30", "tied");
    let tied = llama32_1b(&dir, true);
    let needles = [
        "--pp 2",
        "tied embeddings",
        "torchtitan",
        "Weight tying is not supported with Pipeline Parallel.",
        "--pp 1",
        "--framework megatron-core",
    ];
    for (schedule, vpp) in [("1f1b", "1"), ("zbv", "2")] {
        let r = tied_run(
            &tied,
            "torchtitan",
            "eval",
            &[
                "--tp",
                "1",
                "--pp",
                "2",
                "--vpp",
                vpp,
                "--pp-schedule",
                schedule,
            ],
        );
        common::assert_one_line_error(&r, &needles, &["panicked"], schedule);
    }
    let pinned = tied_run(&tied, "torchtitan", "plan", &["--pp", "2"]);
    common::assert_one_line_error(&pinned, &needles, &["panicked"], "plan --pp 2");
    // The search keeps to one stage.
    let searched = tied_run(&tied, "torchtitan", "plan", &["--format", "json"]);
    assert!(
        searched.code == 0 || searched.code == 1,
        "{}",
        searched.stderr
    );
    let plans: Value = serde_json::from_str(&searched.stdout).unwrap();
    let plans = plans["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    assert!(plans.iter().all(|p| p["pp"] == 1), "a pipeline proposed");
    // Megatron-Core keeps the last stage's copy and all-reduces its gradient; torchtitan runs the
    // untied model under a pipeline.
    for (config, framework) in [
        (&tied, "megatron-core"),
        (&llama32_1b(&dir, false), "torchtitan"),
    ] {
        let r = tied_run(config, framework, "eval", &["--tp", "1", "--pp", "2"]);
        assert!(r.code == 0 || r.code == 1, "{framework}: {}", r.stderr);
    }
}
