//! Review of the hybrid Mamba-Transformer stacks (Nemotron-H, Nemotron 3 Nano): what each output
//! path says of a hybrid stack, the Mamba-2 mixer's saved activations, the hardware FLOPs of its
//! attention blocks, and the inputs and plans tpsim must refuse for it in one line.

mod common;

use common::*;

/// Nemotron-H 8B's model file with `pattern` as its hybrid pattern and `head_dim` as its Mamba
/// head width, written into `dir` as `name`.
fn hybrid_file(dir: &std::path::Path, name: &str, pattern: &str, head_dim: u32) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml")).unwrap();
    let start = text.find("pattern: \"").unwrap() + "pattern: \"".len();
    let end = start + text[start..].find('"').unwrap();
    let text = format!("{}{pattern}{}", &text[..start], &text[end..])
        .replace("mamba_head_dim: 64", &format!("mamba_head_dim: {head_dim}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `eval --format json` of a model on one H100 node at tp 1, no recompute, ZeRO-1: its first plan.
fn eval_plan(model: &str) -> serde_json::Value {
    let v = json(&[
        "eval",
        "--model",
        model,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--recompute",
        "none",
        "--format",
        "json",
    ]);
    v["plans"][0].clone()
}

#[test]
fn a_mamba_mixer_keeps_the_gated_norms_input_too() {
    // Megatron-Core runs the gated RMSNorm after `mamba_split_conv1d_scan_combined`
    // (`MambaMixer._ssm_training`: `y = self.norm(y)`), so three d_inner-wide bf16 tensors stay
    // for the backward: the scan's `out_x`, the norm's input and `out_proj`'s input. Halving the
    // head width (d_inner 8192 → 4096) frees, per token and layer, 2 bytes × 2·4096 of `zxbcdt`
    // and 3 × 2 × 4096 of those: 40,960 bytes, over 52 layers of 8192 tokens.
    let dir = scratch("hybrid-review", "saved");
    let pattern = "M".repeat(52);
    let wide = eval_plan(&hybrid_file(&dir, "wide.yaml", &pattern, 64));
    let narrow = eval_plan(&hybrid_file(&dir, "narrow.yaml", &pattern, 32));
    let freed = wide["memory"]["activations_bytes"].as_f64().unwrap()
        - narrow["memory"]["activations_bytes"].as_f64().unwrap();
    assert_eq!(freed, 52.0 * 8192.0 * 40960.0);
}

#[test]
fn hardware_flops_count_attention_cores_of_attention_blocks_only() {
    // A stack of Mamba blocks alone has no attention core: nothing for FlashAttention's backward to
    // recompute, so without recompute the hardware FLOPs are the model FLOPs.
    let dir = scratch("hybrid-review", "flops");
    let plan = eval_plan(&hybrid_file(&dir, "mamba.yaml", &"M".repeat(52), 64));
    let (hardware, model) = (
        plan["hardware_tflops_per_gpu"].as_f64().unwrap(),
        plan["model_tflops_per_gpu"].as_f64().unwrap(),
    );
    assert!(
        (hardware / model - 1.0).abs() < 1e-12,
        "hardware {hardware} against model {model} TFLOP/s"
    );
    // Nemotron-H 8B's 4 attention blocks of 52: FlashAttention's recomputed QKᵀ is half the
    // causal core of 4 layers, 2·8192²·32·256/2/2 per sequence each, against the model's FLOPs.
    let plan = eval_plan("nemotron-h-8b");
    let ratio = plan["hardware_tflops_per_gpu"].as_f64().unwrap()
        / plan["model_tflops_per_gpu"].as_f64().unwrap();
    assert!(ratio > 1.0 && ratio < 1.01, "hardware / model {ratio}");
}

#[test]
fn every_output_says_the_model_is_a_hybrid_stack() {
    let args = [
        "plan",
        "--model",
        "nemotron-h-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "hybrid Mamba-Transformer stack of one block per layer (24 Mamba-2, 4 attention, 24 MLP"
        ),
        "{}",
        r.stdout
    );
    // Each hybrid layer is one block with at most one TP pair: never "4 times", nor MoE words
    // for a model without experts.
    let why = r.stdout.split("why the best plan:").nth(1).expect("why");
    assert!(!why.contains("4 times"), "{why}");
    assert!(!why.contains("MoE layers twice"), "{why}");
    if why.contains("TP 2") || why.contains("TP 4") {
        assert!(why.contains("one block of the hybrid pattern"), "{why}");
    }
    // The JSON and YAML carry the pattern and the mixer's shape.
    let mut with_json: Vec<&str> = args.to_vec();
    with_json.extend(["--format", "json"]);
    let v = json(&with_json);
    assert_eq!(
        v["model"]["hybrid"]["pattern"],
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    );
    assert_eq!(v["model"]["hybrid"]["mamba_heads"], 128);
    let mut with_yaml: Vec<&str> = args.to_vec();
    with_yaml.extend(["--format", "yaml"]);
    let y = run(&with_yaml);
    assert!(y.stdout.contains("mamba_state_dim: 128"), "{}", y.stdout);
}

#[test]
fn plans_megatron_core_cannot_run_for_a_hybrid_stack_are_refused() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--framework",
        "megatron-lm-2021",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--framework megatron-lm-2021",
            "use --framework megatron-core",
        ],
        &["panicked"],
        "2021 Megatron-LM",
    );
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--nodes",
        "2",
        "--global-batch",
        "128",
        "--ep",
        "8",
        "--overlap-moe-expert-parallel-comm",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--overlap-moe-expert-parallel-comm",
            "build_schedule_plan",
            "give --overlap-moe-expert-parallel-comm false",
        ],
        &["panicked"],
        "combined 1F1B",
    );
}

#[test]
fn hybrid_inputs_are_refused_in_their_own_words() {
    // Experts on a pattern without E: the pattern is what places MoE layers.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--num-experts",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &["has no MoE layer (E)", "put E where the MoE layers are"],
        &["--moe-first-k-dense-replace"],
        "experts without E",
    );
    // An empty pattern asks for the symbols, not for zero layers.
    let dir = scratch("hybrid-review", "empty");
    let file = hybrid_file(&dir, "empty.yaml", "", 64);
    let r = run(&[
        "eval",
        "--model",
        &file,
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &["is empty", "a pattern of 52 symbols"],
        &["layers: 0", "--layers 0"],
        "empty pattern",
    );
    // Megatron-LM's hybrid shape flags without a pattern: refused, not skipped as changing
    // nothing; a pattern that contradicts --num-layers: refused, not overridden.
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 64 --micro-batch-size 1 --bf16";
    for (extra, needles) in [
        (
            "--mamba-num-heads 128",
            &["--mamba-num-heads 128", "no --hybrid-layer-pattern"][..],
        ),
        (
            "--mamba-state-dim 128",
            &["--mamba-state-dim 128", "no --hybrid-layer-pattern"][..],
        ),
        (
            "--is-hybrid-model",
            &["--is-hybrid-model", "no --hybrid-layer-pattern"][..],
        ),
        (
            "--hybrid-override-pattern M*M*",
            &["--num-layers 32", "the hybrid pattern's 4 layers"][..],
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{line} {extra}"),
        ]);
        assert_one_line_error(
            &r,
            needles,
            &["not modelled; tpsim models transformer layers"],
            extra,
        );
    }
}
