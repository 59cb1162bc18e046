//! LatentMoE (Nemotron 3 Super and Ultra; Megatron-Core `--moe-latent-size`): the routed experts
//! work on a latent width between two projections replicated on every TP rank, so the experts'
//! weights, their GEMMs, the token permutations and the all-to-all all carry latent-wide rows. The
//! bundled counts against the published sizes, the mechanism against the same model on the full
//! width, and every way in and out (model file, `--megatron-args`, `--hf-config`, `--emit`).

mod common;

use common::*;
use serde_json::Value;

/// `eval --format json` of `model` (a bundled name or a file) at Megatron-Bridge's GB300 plan for
/// Nemotron 3 Super.
fn super_plan(model: &str) -> Value {
    super_gb300_eval(model, &[])
}

/// The bundled Super's file with its `latent_size` line replaced by `line` (empty: removed),
/// written into `dir`.
fn super_file(dir: &std::path::Path, name: &str, line: &str) -> String {
    let text =
        std::fs::read_to_string(format!("{ROOT}/models/nemotron-3-super-120b-a12b.yaml")).unwrap();
    let start = text.find("  latent_size:").unwrap();
    let end = start + text[start..].find('\n').unwrap() + 1;
    let text = format!("{}{line}{}", &text[..start], &text[end..])
        .replace("name: nemotron-3-super-120b-a12b", &format!("name: {name}"));
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn bundled_counts_match_the_published_sizes() {
    // Published: Super "12B active parameters and 120B parameters in total" (Megatron-Bridge's
    // nemotron3-super page), Ultra 550B-A55B (its checkpoint's name). Active counts here leave out
    // the embedding and output layer (2 × 131072 × h), as the Nano's card separates them.
    for (name, total_b, active_b) in [
        ("nemotron-3-super-120b-a12b", 120.0, 12.0),
        ("nemotron-3-ultra-550b-a55b", 550.0, 55.0),
    ] {
        let v = super_plan(name);
        let model = &v["model"];
        let hidden = number(&model["hidden"]);
        let embeddings = 2.0 * 131072.0 * hidden;
        let total = number(&model["params"]) / 1e9;
        let active = (number(&model["active_params"]) - embeddings) / 1e9;
        assert!(
            (total / total_b - 1.0).abs() < 0.01,
            "{name}: {total:.2}B against {total_b}B"
        );
        assert!(
            (active / active_b - 1.0).abs() < 0.03,
            "{name}: {active:.2}B active against {active_b}B"
        );
        assert!(model["moe"]["latent_size"].as_u64().is_some(), "{name}");
    }
}

#[test]
fn the_latent_width_shrinks_the_experts_and_adds_two_projections_per_moe_layer() {
    let dir = scratch("latent-moe", "width");
    let full = super_file(&dir, "super-full-width", "");
    let half = super_file(&dir, "super-latent-2048", "  latent_size: 2048\n");
    let (latent, full, half) = (
        super_plan("nemotron-3-super-120b-a12b"),
        super_plan(&full),
        super_plan(&half),
    );
    // Parameters: each of the 40 MoE layers' 512 experts is an MLP of 2688 on the expert width
    // (two matrices, squared ReLU), and LatentMoE adds h × latent twice.
    let (h, ffn, experts, moe_layers) = (4096.0, 2688.0, 512.0, 40.0);
    let expert = |width: f64| 2.0 * width * ffn;
    let params = |v: &Value| number(&v["model"]["params"]);
    let expected =
        params(&full) + moe_layers * (experts * (expert(1024.0) - expert(h)) + 2.0 * h * 1024.0);
    assert!(
        (params(&latent) - expected).abs() < 1.0,
        "{} against {expected}",
        params(&latent)
    );
    // The all-to-all moves one expert-width row per routed copy: its bytes follow the width.
    let ep_bytes = |v: &Value| number(&v["plans"][0]["comm"]["ep"]["wire_bytes"]);
    let ratio = ep_bytes(&latent) / ep_bytes(&half);
    assert!((ratio - 0.5).abs() < 1e-9, "1024 against 2048: {ratio}");
    assert!(ep_bytes(&full) > 3.9 * ep_bytes(&latent));
    // And the experts' compute shrinks with them: the full-width experts take longer.
    let compute = |v: &Value| number(&v["plans"][0]["time"]["compute_s"]);
    assert!(compute(&latent) < compute(&half) && compute(&half) < compute(&full));
}

#[test]
fn the_projections_are_whole_on_every_tensor_parallel_rank() {
    // `fc1_latent_proj`/`fc2_latent_proj` are `parallel_mode="duplicated"`: at tp 2 each rank
    // holds them whole, so the weights per GPU fall by less than the rest of the dense part.
    let weights = |tp: &str| {
        let v = json(&[
            "eval",
            "--model",
            "nemotron-3-super-120b-a12b",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--global-batch",
            "512",
            "--tp",
            tp,
            if tp == "1" {
                "--sequence-parallel=false"
            } else {
                "--sequence-parallel"
            },
            "--pp",
            "1",
            "--ep",
            "64",
            "--etp",
            "1",
            "--micro-batch",
            "1",
            "--recompute",
            "none",
            "--zero",
            "1",
            "--format",
            "json",
        ]);
        number(&v["plans"][0]["memory"]["weights_bytes"])
    };
    let (one, two) = (weights("1"), weights("2"));
    // bf16 weights: the latent projections' 40 × 2 × 4096 × 1024 stay, 2 bytes each.
    let latent_bytes = 40.0 * 2.0 * 4096.0 * 1024.0 * 2.0;
    assert!(two - one / 2.0 > 0.99 * latent_bytes / 2.0, "{one} {two}");
}

#[test]
fn a_megatron_launch_line_with_a_latent_width_prices_as_the_bundled_model() {
    // Megatron-LM's own Nemotron 3 Super arguments (examples/post_training/modelopt/conf/nvidia/
    // NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh, MODEL_ARGS) with a vocabulary and a plan.
    let line = "--num-experts 512 --moe-router-score-function sigmoid --moe-grouped-gemm --moe-aux-loss-coeff 1e-4 --moe-router-topk 22 --moe-permute-fusion --moe-router-topk-scaling-factor 5.0 --moe-router-enable-expert-bias --moe-router-dtype fp32 --moe-router-load-balancing-type seq_aux_loss --moe-shared-expert-intermediate-size 5376 --moe-token-dispatcher-type alltoall --moe-latent-size 1024 --is-hybrid-model --mamba-num-heads 128 --mamba-head-dim 64 --hybrid-layer-pattern MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME --untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type none --squared-relu --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 2 --ffn-hidden-size 2688 --kv-channels 128 --normalization RMSNorm --attention-dropout 0.0 --hidden-dropout 0.0 --bf16 --seq-length 8192 --max-position-embeddings 8192 --vocab-size 131072 --tensor-model-parallel-size 1 --expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --micro-batch-size 1 --global-batch-size 512 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather";
    let from_line = json(&[
        "eval",
        "--gpu",
        "gb300-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--megatron-args",
        line,
        "--format",
        "json",
    ]);
    let bundled = json(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--gpu",
        "gb300-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "512",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "64",
        "--etp",
        "1",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--recompute",
        "none",
        "--format",
        "json",
    ]);
    assert_eq!(from_line["model"]["moe"], bundled["model"]["moe"]);
    assert_eq!(from_line["model"]["params"], bundled["model"]["params"]);
    assert_eq!(
        from_line["plans"][0]["tokens_per_s"],
        bundled["plans"][0]["tokens_per_s"]
    );
}

#[test]
fn bad_latent_widths_are_refused_in_one_line() {
    let dir = scratch("latent-moe", "bad");
    let zero = super_file(&dir, "super-zero", "  latent_size: 0\n");
    let r = run(&["eval", "--model", &zero, "--nodes", "8"]);
    assert_one_line_error(
        &r,
        &["moe.latent_size: 0", "latent width"],
        &["panicked", "--moe-latent-size"],
        "latent 0",
    );
    let dense = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --moe-latent-size 512";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", dense]);
    assert_one_line_error(
        &r,
        &["--moe-latent-size", "--num-experts"],
        &["panicked"],
        "latent without experts",
    );
}

#[test]
fn a_nemotron_h_config_reads_its_latent_width() {
    let dir = scratch("latent-moe", "hf");
    let config = |latent: &str| nemotron_h_moe_config(&format!(", \"moe_latent_size\": {latent}"));
    let latent = hf_model(&eval_hf(&dir, "config.json", &config("1024")));
    assert_eq!(latent["moe"]["latent_size"], 1024);
    for none in ["null", "0"] {
        let model = hf_model(&eval_hf(&dir, "config.json", &config(none)));
        assert!(model["moe"].get("latent_size").is_none(), "{none}: {model}");
        assert!(number(&model["params"]) > number(&latent["params"]));
    }
}

#[test]
fn emitted_launch_lines_carry_the_latent_width() {
    // A transformer MoE with a latent width (Megatron-Core's MoELayer runs it in GPTModel too):
    // Qwen3-30B-A3B's shape with latent 1024.
    let dir = scratch("latent-moe", "emit");
    let text = std::fs::read_to_string(format!("{ROOT}/models/qwen3-30b-a3b.yaml"))
        .unwrap()
        .replace("name: qwen3-30b-a3b", "name: qwen3-latent")
        .replace("\nmoe:\n", "\nmoe:\n  latent_size: 1024\n");
    let path = dir.join("qwen3-latent.yaml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let emit = |target: &str| {
        let r = run(&[
            "plan",
            "--model",
            path,
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--emit",
            target,
        ]);
        assert_eq!(r.code, 0, "{target}: {}", r.stderr);
        r.stdout
    };
    let megatron = emit("megatron");
    assert!(megatron.contains("--moe-latent-size 1024"), "{megatron}");
    let bridge = emit("megatron-bridge");
    assert!(
        bridge.lines().any(|l| l == "model.moe_latent_size=1024"),
        "{bridge}"
    );
    // The written line reads back as the same model.
    let args: String = megatron
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let start = args.find("--").unwrap();
    let back = json(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        &args[start..].replace(" \\", " "),
        "--format",
        "json",
    ]);
    assert_eq!(back["model"]["moe"]["latent_size"], 1024);
    let file = json(&[
        "eval", "--model", path, "--nodes", "2", "--tp", "1", "--format", "json",
    ]);
    assert_eq!(back["model"]["params"], file["model"]["params"]);
}
