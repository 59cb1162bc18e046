//! Review round 28 of this session's changes (outside5, newuser25, audit28, hostile50), read as
//! whole diffs. One test per defect found; each failed before its fix.
//! - newuser25's nothing-fits line: where the weights and optimizer states alone outgrow every
//!   GPU it says "no plan on 32 GPUs fits", then still offered "--allow-uneven-pp", which moves
//!   layers, not the states; and `eval` of a plan that misses for that reason said nothing of it
//!   (only that --recompute saves activation memory).
//! - audit28 made every MXFP8 parameter gather two bytes, right for Megatron-Core's distributed
//!   optimizer (bf16 into the gradient buffer) but not for ZeRO-3 (Megatron-FSDP, FSDP2), which
//!   gathers one quantized copy per pass: the row-wise data for the forward, the column-wise for
//!   the backward.
//! - hostile50's shape flags for an unread model_type: a tied config (SmolLM3) got `--style
//!   llama`, which unties the output layer (8% more parameters); Llama 4's text config got its
//!   experts' width as `--ffn-hidden` and no shared expert (the message's own key mapping says
//!   otherwise); ERNIE 4.5's shared experts and dense first layer were left out.
//! - newuser25's colours: the memory figure's weights, activations and other took the step
//!   figure's compute blue, PP-comm teal and CPU-offload green.

mod common;

use common::{json, legend_colours, offered_flags, run, scratch};
use serde_json::Value;

/// The "nothing fits:" line of a `plan` run that finds none.
fn nothing_fits_line(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
    r.stderr
        .lines()
        .find(|l| l.starts_with("nothing fits:"))
        .unwrap_or_else(|| panic!("{args:?}: no nothing-fits line in {}", r.stderr))
        .to_string()
}

/// Llama 3 405B on 4 nodes of 8 H100: 5.3 TB of weights and Adam states against 2.5 TB of GPU
/// memory. The line said no plan on the 32 GPUs fits and then "or add --allow-uneven-pp (deeper
/// pipelines than the 126 layers split evenly)".
#[test]
fn the_states_floor_does_not_offer_uneven_pipelines() {
    let line = nothing_fits_line(&[
        "plan",
        "--model",
        "llama3-405b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--seq-len",
        "2048",
        "--global-batch",
        "64",
    ]);
    assert!(line.contains("so no plan on 32 GPUs fits"), "{line}");
    assert!(
        !line.contains("--allow-uneven-pp"),
        "no pipeline depth shrinks the states the floor counts over all GPUs: {line}"
    );
}

/// `eval` of Llama 3 70B on one node of 8 H100 (tp 8): it does not fit, and the weights and
/// states alone (920 GiB) outgrow the 8 GPUs whatever the plan. `plan` says so; `eval` said only
/// that recompute saves activation memory. It now says what `plan` says, in the same words.
#[test]
fn eval_says_the_states_floor_plan_says() {
    let shape = [
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
    ];
    let mut plan_args = vec!["plan"];
    plan_args.extend(shape);
    let line = nothing_fits_line(&plan_args);
    let words = |text: &str| -> String {
        let start = text
            .find("the weights and optimizer states alone take")
            .unwrap_or_else(|| panic!("no states floor in {text}"));
        text[start..].split("; ").next().unwrap().to_string()
    };
    let from_plan = words(&line);
    assert!(from_plan.contains("at least 12 GPUs of 79.7 GiB"), "{line}");
    let mut eval_args = vec!["eval", "--tp", "8"];
    eval_args.extend(shape);
    let r = run(&eval_args);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.contains("optimizer states alone take"))
        .unwrap_or_else(|| panic!("eval says nothing of the states floor: {}", r.stderr));
    assert_eq!(words(note), from_plan, "eval: {note}\nplan: {line}");
}

/// Bytes each group's parameter all-gather carries per parameter (DP×CP, expert-DP), read off
/// the ledger against the fp32 gradients' reduce-scatter (tests/audit_round28.rs).
fn gather_bytes_per_param(v: &Value) -> (f64, f64) {
    assert_eq!(v["training"]["grad_dtype"], "fp32", "{}", v["training"]);
    let entries = v["plans"][0]["ledger"]["entries"]
        .as_array()
        .expect("ledger");
    let bytes = |group: &str, op: &str| {
        entries
            .iter()
            .find(|e| e["group"] == group && e["op"] == op)
            .unwrap_or_else(|| panic!("no {group} {op} row"))["tensor_bytes"]
            .as_f64()
            .unwrap()
    };
    let per_param =
        |group: &str| bytes(group, "all_gather") / (bytes(group, "reduce_scatter") / 4.0);
    (per_param("dp"), per_param("expert_dp"))
}

/// Qwen3-30B-A3B on four GB200 trays in MXFP8 (audit_round28's case) at ZeRO `zero`.
fn qwen3_mxfp8_at_zero(zero: &str) -> Value {
    json(&[
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "4",
        "--gpus-per-node",
        "4",
        "--ep",
        "8",
        "--micro-batch",
        "4",
        "--global-batch",
        "512",
        "--precision",
        "mxfp8",
        "--zero",
        zero,
        "--format",
        "json",
    ])
}

/// Under ZeRO-3 Megatron-Core is Megatron-FSDP, whose MXFP8 parameters live in a uint8
/// `model_weight_buffer` (row-wise data, gathered for the forward) and a `transpose_weight_buffer`
/// (column-wise, gathered for the backward): one byte a parameter a gather
/// (megatron_fsdp/param_and_grad_buffer.py at d98e8a64; Transformer Engine's
/// `MXFP8Tensor.fsdp_pre_all_gather` likewise for FSDP2). Megatron-FSDP does not run
/// `reuse_grad_buf_for_mxfp8_param_ag` (arguments.py sets it False; Megatron-Bridge config.py
/// "not implemented for Megatron FSDP"). The distributed optimizer (ZeRO-1) still gathers bf16.
#[test]
fn mxfp8_under_zero3_gathers_one_quantized_copy_per_pass() {
    let (dense, expert) = gather_bytes_per_param(&qwen3_mxfp8_at_zero("3"));
    assert!(
        (expert - 1.0).abs() < 1e-9 && dense > 1.0 && dense < 2.0,
        "ZeRO-3 MXFP8 gathers {dense} / {expert} bytes a parameter (DP / expert-DP)"
    );
    let (dense, expert) = gather_bytes_per_param(&qwen3_mxfp8_at_zero("1"));
    assert!(
        (dense - 2.0).abs() < 1e-9 && (expert - 2.0).abs() < 1e-9,
        "ZeRO-1 MXFP8 gathers {dense} / {expert} bytes a parameter, the code 2 / 2"
    );
}

/// The refusal of `config` (a config.json's text) by `plan --hf-config`, and the flags it offers
/// with the config's values, run as `plan`: (message, total, active parameters).
fn offered_flags_run(name: &str, config: &str) -> (String, f64, f64) {
    let dir = scratch("review_round28", name);
    let path = dir.join("config.json");
    std::fs::write(&path, config).unwrap();
    let r = run(&[
        "plan",
        "--hf-config",
        path.to_str().unwrap(),
        "--nodes",
        "4",
        "--global-batch",
        "256",
    ]);
    assert_eq!(r.code, 2, "{name}: {}", r.stderr);
    let message = r.stderr.trim().to_string();
    let flags = offered_flags(&message);
    let mut args = vec![
        "plan",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--top",
        "1",
        "--format",
        "json",
    ];
    args.extend(flags.iter().map(String::as_str));
    let v = json(&args);
    let _ = std::fs::remove_dir_all(&dir);
    (
        message,
        v["model"]["params"].as_f64().unwrap(),
        v["model"]["active_params"].as_f64().unwrap_or(0.0),
    )
}

fn near(got: f64, want: f64, tolerance: f64, what: &str) {
    assert!(
        (got / want - 1.0).abs() <= tolerance,
        "{what}: {got:.4e} against {want:.4e}"
    );
}

/// HuggingFaceTB/SmolLM3-3B ties its output layer to the embedding; `--style llama` unties it,
/// so the offered flags counted 3.34B against the card's 3.08B. Megatron-LM's switches for the
/// same block leave it tied.
#[test]
fn a_tied_config_gets_flags_that_tie_the_output_layer() {
    let config = std::fs::read_to_string("tests/data/hostile50/smollm3.json").unwrap();
    let (message, total, _) = offered_flags_run("smollm3", &config);
    assert!(!message.contains("--style llama"), "{message}");
    // 36 layers of 2048 (16 heads, 4 KV heads of 128) with SwiGLU 11008, one 128256 x 2048 table.
    let layer = 2.0 * 2048.0 * 2048.0 + 2.0 * 2048.0 * 512.0 + 3.0 * 2048.0 * 11008.0;
    near(total, 36.0 * layer + 128256.0 * 2048.0, 0.002, "SmolLM3 3B");
}

/// meta-llama/Llama-4-Scout-17B-16E's text config (Llama4TextConfig): `intermediate_size_mlp` is
/// the dense MLP's width and `intermediate_size` each expert's and the shared expert's
/// (`Llama4TextMoe`); the message's own mapping says so, but the values appended gave
/// `--ffn-hidden 8192` and no shared expert: 11.2B active against the card's 17B.
#[test]
fn llama4_text_flags_follow_its_own_key_mapping() {
    let config = r#"{
  "model_type": "llama4_text",
  "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
  "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
  "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1,
  "interleave_moe_layer_step": 1, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
  "attention_chunk_size": 8192, "max_position_embeddings": 10485760
}"#;
    let (message, total, active) = offered_flags_run("llama4_text", config);
    assert!(
        message.contains("--ffn-hidden 16384")
            && message.contains("--moe-ffn-hidden-size 8192")
            && message.contains("--moe-shared-expert-intermediate-size 8192"),
        "{message}"
    );
    // 48 layers: attention 2·5120² + 2·5120·1024, 16 routed experts and one shared of 3·5120·8192.
    let attention = 2.0 * 5120.0 * 5120.0 + 2.0 * 5120.0 * 1024.0;
    let expert = 3.0 * 5120.0 * 8192.0;
    let embeddings = 2.0 * 202048.0 * 5120.0;
    near(
        total,
        48.0 * (attention + 17.0 * expert + 16.0 * 5120.0) + embeddings,
        0.002,
        "Llama 4 Scout text total",
    );
    near(
        active,
        48.0 * (attention + 2.0 * expert + 16.0 * 5120.0) + embeddings,
        0.002,
        "Llama 4 Scout text active",
    );
}

/// baidu/ERNIE-4.5-21B-A3B-PT config.json (Ernie4_5_MoeConfig): two shared experts of
/// `moe_intermediate_size` and a dense first layer (`moe_layer_start_index` 1), both left out.
#[test]
fn ernie_shared_experts_and_dense_first_layer_are_offered() {
    let config = r#"{
  "model_type": "ernie4_5_moe",
  "hidden_size": 2560, "intermediate_size": 12288, "moe_intermediate_size": 1536,
  "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
  "vocab_size": 103424, "moe_num_experts": 64, "moe_k": 6, "moe_num_shared_experts": 2,
  "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
  "rms_norm_eps": 1e-05, "tie_word_embeddings": true, "use_bias": false,
  "max_position_embeddings": 131072
}"#;
    let (message, total, _) = offered_flags_run("ernie", config);
    assert!(
        message.contains("--moe-shared-expert-intermediate-size 3072")
            && message.contains("--moe-first-k-dense-replace 1"),
        "{message}"
    );
    let attention = 2.0 * 2560.0 * 2560.0 + 2.0 * 2560.0 * 512.0;
    let moe_layer = 64.0 * 3.0 * 2560.0 * 1536.0 + 3.0 * 2560.0 * 3072.0 + 64.0 * 2560.0;
    let dense_layer = 3.0 * 2560.0 * 12288.0;
    near(
        total,
        28.0 * attention + 27.0 * moe_layer + dense_layer + 103424.0 * 2560.0,
        0.002,
        "ERNIE 4.5 21B total",
    );
}

/// The seed plan's report and an MoE plan with CP: a colour names one thing in every figure. The
/// memory bars' weights were the step bars' compute blue, activations PP comm's teal (and other
/// CPU offload's green, a term these plans leave at zero). The optimizer's states and its step
/// share theirs.
#[test]
fn a_colour_names_one_thing_across_the_report_figures() {
    let dir = scratch("review_round28", "colours");
    let reports = [
        (
            dir.join("seed"),
            vec!["report", "plans/seed-512b-32nodes.yaml", "--out"],
        ),
        (
            dir.join("moe"),
            vec![
                "plan",
                "--model",
                "qwen3-30b-a3b",
                "--gpu",
                "h100-sxm-80g",
                "--nodes",
                "2",
                "--cp",
                "2",
                "--ep",
                "8",
                "--seq-len",
                "32768",
                "--global-batch",
                "64",
                "--report",
            ],
        ),
    ];
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for (out, mut args) in reports {
        let out_s = out.to_str().unwrap().to_string();
        args.push(&out_s);
        let r = run(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        for figure in ["step_time.svg", "memory.svg"] {
            let svg = std::fs::read_to_string(out.join(figure)).unwrap();
            for (name, colour) in legend_colours(&svg) {
                seen.push((colour, name, figure.to_string()));
            }
        }
    }
    assert!(
        seen.iter().any(|(_, n, _)| n == "EP comm") && seen.iter().any(|(_, n, _)| n == "PP comm"),
        "{seen:?}"
    );
    for (colour, name, figure) in &seen {
        for (other_colour, other_name, other_figure) in &seen {
            assert!(
                colour != other_colour || name == other_name,
                "{colour} is {name:?} in {figure} and {other_name:?} in {other_figure}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
