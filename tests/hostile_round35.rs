//! Hostile input, round 35: a current-stack runs file's shape numbers beside a bundled model
//! (an MoE run's hidden or vocab, a hybrid run's layers or moe) were dropped without a word; a
//! Hugging Face config's shared-expert count times width was told as one key's value, wrapped
//! past 2^32; a Nemotron-H config's `layers_block_type` beside a different
//! `hybrid_override_pattern` was dropped; `--emit deepspeed`'s refusals named `--framework
//! deepspeed`, never typed, with a fix the emit refuses; a shape flag beside a `--megatron-args`
//! line won over the line's value; a sweep point's fix read "drop --values". Every error case
//! checks exit 2, one line on stderr and the words that name the value, the rule and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile35";

/// A current-stack runs file with one run of `model_key` KEY, model mapping MODEL.
const RUNS: &str = "schema_version: 1
model_catalog: {}
runs:
- id: mbridge-25.11-pretrain-KEY-gb300-64g-bf16-gbs512
  task: pretrain
  model_key: KEY
  model: MODEL
  hardware: {gpu: GB300, num_gpus: 64, gpus_per_node: 4}
  plan: {tp: 1, pp: 1, cp: 1, ep: 64, dp: 64, mbs: 1, gbs: 512, precision: bf16}
  results: {tokens_per_s_per_gpu: 1000}
";

const QWEN3_30B: &str = "{name: Qwen3-30B-A3B, layers: 48, hidden: HIDDEN, heads: 32, kv_heads: 4, head_dim: 128, ffn_hidden: 6144, vocab: VOCAB, seq_len: 4096, moe: {experts: 128, topk: 8, expert_ffn_hidden: 768, shared_experts: 0, moe_layers: 48}}";

const SUPER: &str = "{name: Nemotron 3 Super, layers: LAYERS, hidden: null, heads: null, kv_heads: null, head_dim: null, ffn_hidden: null, vocab: null, seq_len: 8192, moe: MOE}";

fn accuracy_of(name: &str, key: &str, model: &str) -> Run {
    let dir = scratch(SUITE, name);
    std::fs::write(
        dir.join("runs.yaml"),
        RUNS.replace("KEY", key).replace("MODEL", model),
    )
    .unwrap();
    run_in(&dir, &["accuracy", "--runs", "runs.yaml"])
}

/// A run priced as a bundled model took only its layer count (MoE) or nothing (hybrid) from its
/// row: `hidden: 9999`, `vocab: 7`, a hybrid's `layers: 7` or `moe: {experts: 3}` were read and
/// dropped, and the run priced as the bundled model without a word. Each is refused in its key,
/// naming the bundled value; the bundled values, or null, are read as before.
#[test]
fn a_runs_shape_beside_its_bundled_model_is_that_model_or_refused() {
    for (name, key, model, needles) in [
        (
            "moe-hidden",
            "qwen3_30b_a3b",
            QWEN3_30B
                .replace("HIDDEN", "9999")
                .replace("VOCAB", "151936"),
            &[
                "model.hidden: 9999 is not the 2048 of the bundled qwen3-30b-a3b",
                "models/qwen3-30b-a3b.yaml",
                "e.g. hidden: 2048, or null",
            ][..],
        ),
        (
            "moe-vocab",
            "qwen3_30b_a3b",
            QWEN3_30B.replace("HIDDEN", "2048").replace("VOCAB", "7"),
            &["model.vocab: 7 is not the 151936", "vocab: 151936, or null"][..],
        ),
        (
            "hybrid-layers",
            "nemotron3_super",
            SUPER.replace("LAYERS", "7").replace("MOE", "null"),
            &[
                "model.layers: 7 is not the 88 of the bundled nemotron-3-super-120b-a12b",
                "hybrid run is priced as its bundled model",
                "layers: 88, or null",
            ][..],
        ),
        (
            "hybrid-moe",
            "nemotron3_super",
            SUPER
                .replace("LAYERS", "null")
                .replace("MOE", "{experts: 3}"),
            &[
                "model.moe:",
                "model_key nemotron3_super",
                "bundled nemotron-3-super-120b-a12b",
                "write moe: null",
            ][..],
        ),
    ] {
        assert_one_line_error(
            &accuracy_of(name, key, &model),
            needles,
            &["panicked"],
            name,
        );
    }
    for (name, key, model) in [
        (
            "moe-same",
            "qwen3_30b_a3b",
            QWEN3_30B
                .replace("HIDDEN", "2048")
                .replace("VOCAB", "151936"),
        ),
        (
            "hybrid-same",
            "nemotron3_super",
            SUPER.replace("LAYERS", "88").replace("MOE", "null"),
        ),
    ] {
        let r = accuracy_of(name, key, &model);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        assert!(r.stdout.contains("recompute none"), "{name}: {}", r.stdout);
    }
}

/// A shared-expert width is a count times a width: DeepSeek's `n_shared_experts` 3000 (x
/// `moe_intermediate_size` 2048) was told as `"n_shared_experts" is 6144000`, and 3000000 as
/// 1849032704 (the product wrapped past 2^32). Both keys are named as written, with the product.
#[test]
fn a_shared_expert_width_past_the_bound_names_both_keys_as_written() {
    let dir = scratch(SUITE, "shared-width");
    let deepseek = std::fs::read_to_string(format!("{ROOT}/models/hf/deepseek-v3.json")).unwrap();
    for (count, product) in [(3000u64, "6144000"), (3_000_000, "6144000000")] {
        let mut config: serde_json::Value = serde_json::from_str(&deepseek).unwrap();
        config["n_shared_experts"] = serde_json::json!(count);
        let r = eval_hf(&dir, "config.json", &config.to_string());
        assert_one_line_error(
            &r,
            &[
                &format!("\"n_shared_experts\" {count} x \"moe_intermediate_size\" 2048"),
                &format!("{product} wide"),
                "larger than 4194304",
                "check the config",
            ],
            &["1849032704", "panicked"],
            &format!("deepseek n_shared_experts {count}"),
        );
    }
    let nemotron = nemotron_h_moe_config("")
        .replace("\"n_shared_experts\": 1", "\"n_shared_experts\": 100000");
    assert_one_line_error(
        &eval_hf(&dir, "config.json", &nemotron),
        &[
            "\"n_shared_experts\" 100000 x \"moe_shared_expert_intermediate_size\" 3712",
            "371200000 wide",
        ],
        &["4294967295", "panicked"],
        "nemotron-h n_shared_experts",
    );
}

/// A Nemotron-H config with both `hybrid_override_pattern` and transformers'
/// `layers_block_type` was planned as the pattern, the list dropped without a word even where it
/// says another stack. Two that disagree are refused naming both; two that agree are read.
#[test]
fn a_nemotron_h_pattern_and_layer_list_that_disagree_are_refused() {
    let dir = scratch(SUITE, "pattern-and-list");
    let list = r#", "layers_block_type": ["mamba", "moe", "attention", "moe"]"#;
    let disagree = nemotron_h_moe_config(list).replace("\"ME*E\"", "\"M*EE\"");
    assert_one_line_error(
        &eval_hf(&dir, "config.json", &disagree),
        &[
            "\"hybrid_override_pattern\" \"M*EE\"",
            "\"layers_block_type\" (the pattern \"ME*E\")",
            "keep one of them",
        ],
        &["panicked"],
        "pattern and list disagree",
    );
    let agree = eval_hf(&dir, "config.json", &nemotron_h_moe_config(list));
    assert_eq!(agree.code, 0, "{}", agree.stderr);
}

/// `--emit deepspeed` without `--framework` plans as DeepSpeed runs it (a note says so, dropped
/// with an error): the refusals named `--framework deepspeed`, a flag never typed, and offered
/// `--framework megatron-core`, which the emit then refuses in turn ("the DeepSpeed configuration
/// runs on DeepSpeed"). They now name the emit and offer the emit that runs on Megatron-Core;
/// a model no DeepSpeed configuration describes (experts, a hybrid stack: DeepEP or LatentMoE
/// refused first) gets the emit's own refusal, as `plan` gave it for a hybrid stack.
#[test]
fn a_refusal_of_the_framework_emit_deepspeed_chose_names_the_emit() {
    for (extra, needles, absent) in [
        (
            &["--model", "llama3-8b", "--cp-exchange", "kv-ring"][..],
            &[
                "--cp-exchange kv-ring with --emit deepspeed (which plans as --framework deepspeed)",
                "use --cp-exchange head-all-to-all, or --emit megatron",
            ][..],
            &["--framework megatron-core", "panicked"][..],
        ),
        (
            &["--model", "mixtral-8x7b", "--moe-dispatcher", "deepep"][..],
            &["--emit deepspeed: mixture-of-experts models are not written for DeepSpeed"][..],
            &["DeepEP", "panicked"][..],
        ),
        (
            &["--model", "nemotron-3-super-120b-a12b"][..],
            &["--emit deepspeed: hybrid Mamba-Transformer models"][..],
            &["latent width", "--framework", "panicked"][..],
        ),
        (
            &["--model", "nemotron-h-8b"][..],
            &["--emit deepspeed: hybrid Mamba-Transformer models"][..],
            &["--framework", "panicked"][..],
        ),
    ] {
        for command in ["plan", "eval"] {
            let mut args = vec![command, "--nodes", "1", "--global-batch", "64"];
            args.extend_from_slice(extra);
            args.extend(["--emit", "deepspeed"]);
            if command == "eval" {
                args.extend(["--tp", "1"]);
            }
            assert_one_line_error(&run(&args), needles, absent, &format!("{args:?}"));
        }
    }
    // A framework the user typed is named as typed.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--framework",
        "deepspeed",
        "--cp-exchange",
        "kv-ring",
        "--emit",
        "deepspeed",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp-exchange kv-ring with --framework deepspeed:",
            "or --framework megatron-core",
        ],
        &["which plans as", "panicked"],
        "--framework deepspeed typed",
    );
}

/// A shape flag beside a `--megatron-args` line that sets another value won over the line
/// without a word: `--hidden 1024` over `--hidden-size 2048` priced a model still named
/// `megatron-l8-h2048`, `--mtp-layers 2` over `--mtp-num-layers 1` two MTP depths; `--seq-len`
/// and `--global-batch` were refused there, and `--layers` by clap. Each is refused naming the
/// line's flag; the same value, or a flag the line leaves to Megatron's default, is taken.
#[test]
fn a_shape_flag_that_contradicts_a_launch_line_is_refused() {
    const LINE: &str = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 1 --bf16";
    for (line_extra, flag, value, needles) in [
        (
            "",
            "--hidden",
            "1024",
            &[
                "--hidden 1024 contradicts the --megatron-args launch line, which sets --hidden-size 2048",
                "drop --hidden or change --hidden-size in the line",
            ][..],
        ),
        (
            " --mtp-num-layers 1",
            "--mtp-layers",
            "2",
            &["--mtp-layers 2 contradicts", "--mtp-num-layers 1"][..],
        ),
        (
            " --vocab-size 5000",
            "--vocab",
            "1024",
            &["--vocab 1024 contradicts", "--vocab-size 5000"][..],
        ),
        (
            " --num-experts 8",
            "--num-experts",
            "4",
            &["--num-experts 4 contradicts", "sets --num-experts 8"][..],
        ),
    ] {
        let line = format!("{LINE}{line_extra}");
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &line,
            flag,
            value,
        ]);
        assert_one_line_error(&r, needles, &["panicked"], &format!("{flag} {value}"));
    }
    for (flag, value, words) in [
        ("--hidden", "2048", "hidden 2048,"),
        ("--vocab", "1024", "vocab 1024;"),
    ] {
        let r = run(&["eval", "--nodes", "1", "--megatron-args", LINE, flag, value]);
        assert_eq!(r.code, 0, "{flag} {value}: {}", r.stderr);
        assert!(r.stdout.contains(words), "{flag} {value}: {}", r.stdout);
    }
}

/// A sweep says a point's refusal in its own words, the axis's flag read as `--values`; a fix
/// that drops the flag ("drop --cpu-offload-layers" for a hybrid stack, which offloads no
/// layers) read "drop --values", which the sweep cannot run without. It now says to drop that
/// point, in the table's note and in the error when no point has a plan.
#[test]
fn a_sweep_point_refused_for_its_value_is_dropped_not_the_values() {
    let args = |values| {
        run(&[
            "sweep",
            "--model",
            "nemotron-h-8b",
            "--global-batch",
            "64",
            "--nodes",
            "1",
            "--axis",
            "cpu-offload-layers",
            "--values",
            values,
        ])
    };
    let r = args("2,4");
    assert_one_line_error(
        &r,
        &[
            "--axis cpu-offload-layers at 2",
            "not in the hybrid stack",
            "drop that point from --values",
        ],
        &["drop --values", "panicked"],
        "every point refused",
    );
    let r = args("0,2");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("drop that point from --values") && !r.stdout.contains("drop --values"),
        "{}",
        r.stdout
    );
}
