//! Hostile input and new-user reading, round 20: the ecosystem commands (`--emit`,
//! `--megatron-args`, `--hf-config`). Every error case checks exit 2, one line on stderr and the
//! words that name the value, the rule and the fix.

mod common;

use common::*;

/// A Llama-8B-shaped launch line on one node with tp 4, without the switches a case adds.
const LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --vocab-size 128256 --micro-batch-size 1 --global-batch-size 64 --disable-bias-linear --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --bf16 --tensor-model-parallel-size 4";

fn launch(extra: &str) -> Run {
    run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{LINE} {extra}"),
    ])
}

fn plan_line(r: &Run) -> &str {
    r.stdout
        .lines()
        .find(|l| l.starts_with("plan:"))
        .unwrap_or_else(|| panic!("no plan line: {}\n{}", r.stdout, r.stderr))
}

fn step_line(r: &Run) -> String {
    r.stdout
        .lines()
        .find(|l| l.starts_with("time per step"))
        .unwrap_or_else(|| panic!("no step line: {}\n{}", r.stdout, r.stderr))
        .to_string()
}

/// `--no-sequence-parallel` (and `--disable-tp-comm-overlap`) was skipped as an argument that
/// "does not change memory or time", and the `--sequence-parallel` beside it kept sequence
/// parallelism on. Megatron-LM's switches are `store_true` flags with no negation, so its
/// argparse refuses the line; tpsim now refuses it too, naming the switch and the fix.
#[test]
fn a_negated_switch_is_refused_not_skipped() {
    let r = launch(
        "--hidden-dropout 0 --attention-dropout 0 --sequence-parallel --no-sequence-parallel",
    );
    assert_one_line_error(
        &r,
        &[
            "\"--no-sequence-parallel\"",
            "is not a Megatron-LM argument",
            "leaving it out",
        ],
        &["skipped:"],
        "--no-sequence-parallel",
    );
    let r = launch("--hidden-dropout 0 --attention-dropout 0 --disable-tp-comm-overlap");
    assert_one_line_error(
        &r,
        &["\"--disable-tp-comm-overlap\"", "--tp-comm-overlap off"],
        &[],
        "--disable-tp-comm-overlap",
    );
    // Megatron-LM's own negations are still read.
    let r = launch("--hidden-dropout 0 --attention-dropout 0 --no-rope-fusion");
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `--cp-comm-type a2a` (or all_gather) was skipped as an argument that "does not change memory
/// or time", and the plan priced Transformer Engine's p2p K/V ring. Both are read and priced now
/// (tests/cp_comm_types.rs); a type per layer that differs is refused as not modelled.
#[test]
fn a_context_parallel_exchange_is_read_not_skipped() {
    for (types, words) in [
        ("a2a", "--cp-comm-type a2a"),
        ("all_gather", "--cp-comm-type all_gather"),
    ] {
        let r = launch(&format!(
            "--hidden-dropout 0 --attention-dropout 0 --context-parallel-size 2 --cp-comm-type {types}"
        ));
        assert_eq!(r.code, 0, "{types}: {}", r.stderr);
        assert!(r.stdout.contains(words), "{types}: {}", r.stdout);
        assert!(!r.stderr.contains("skipped"), "{types}: {}", r.stderr);
    }
    // One type per layer (the line's 32; tests/cp_comm_types.rs for a list of another length).
    let mixed = format!("p2p {}", ["a2a"; 31].join(" "));
    let r = launch(&format!(
        "--hidden-dropout 0 --attention-dropout 0 --context-parallel-size 2 --cp-comm-type {mixed}"
    ));
    assert_one_line_error(
        &r,
        &["--cp-comm-type p2p a2a", "per layer", "not modelled"],
        &[],
        "p2p a2a",
    );
    let r = launch(
        "--hidden-dropout 0 --attention-dropout 0 --context-parallel-size 2 --cp-comm-type p2p",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(plan_line(&r).contains("cp 2"), "{}", r.stdout);
    let r = launch("--hidden-dropout 0 --attention-dropout 0 --cp-comm-type a2a");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r =
        launch("--hidden-dropout 0 --attention-dropout 0 --context-parallel-size 2 --cp-comm-type");
    assert_one_line_error(&r, &["--cp-comm-type needs a value"], &[], "no value");
}

/// `--hidden-dropout 0.1 --attention-dropout 0` was read as no dropout without a word (tpsim has
/// one switch for both), so the masks of the hidden dropout were not priced and an emitted line
/// wrote both as 0. The line is still read so, and a note now says it.
#[test]
fn a_launch_line_with_one_dropout_of_two_says_how_it_is_read() {
    let r = launch("--hidden-dropout 0.1 --attention-dropout 0");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--hidden-dropout 0.1 with --attention-dropout 0")
            && r.stderr.contains("one switch for both"),
        "{}",
        r.stderr
    );
    let r = launch("--hidden-dropout 0");
    assert!(
        r.stderr
            .contains("--attention-dropout 0.1 (Megatron-LM's default)"),
        "{}",
        r.stderr
    );
    let r = launch("--hidden-dropout 0 --attention-dropout 0");
    assert!(!r.stderr.contains("one switch for both"), "{}", r.stderr);
}

/// Gemma-7B's 16 heads are 256 wide over a hidden size of 3072: the NeMo fragment and the
/// Megatron-Bridge overrides wrote no `kv_channels`, so NeMo's `kv_channels: null` and a recipe
/// that leaves it None built 192-wide heads where tpsim priced 256. Both now write it.
#[test]
fn nemo_and_bridge_write_the_head_width() {
    let dir = scratch("round20", "kv-channels");
    std::fs::write(
        dir.join("gemma-7b.json"),
        r#"{"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "num_hidden_layers": 28, "intermediate_size": 24576, "vocab_size": 256000, "max_position_embeddings": 8192}"#,
    )
    .unwrap();
    let emit = |target: &str| {
        let r = run_in(
            &dir,
            &[
                "eval",
                "--hf-config",
                "gemma-7b.json",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
                "--global-batch",
                "64",
                "--sequence-parallel",
                "--emit",
                target,
            ],
        );
        assert!(r.code == 0 || r.code == 1, "{target}: {}", r.stderr);
        r.stdout
    };
    let nemo = emit("nemo");
    assert!(nemo.contains("\n  kv_channels: 256\n"), "{nemo}");
    let bridge = emit("megatron-bridge");
    assert!(bridge.contains("\nmodel.kv_channels=256\n"), "{bridge}");
    assert!(emit("megatron").contains("--kv-channels 256"));
}

/// GPT-2's `resid_pdrop`, `embd_pdrop` and `attn_pdrop` were never read: a config with all three
/// at 0.0 (as nanoGPT-style pre-training sets them) was priced with dropout masks and emitted
/// with Megatron's default 0.1. They are read now; a mix is refused by name.
#[test]
fn gpt2_dropout_keys_are_read() {
    let dir = scratch("round20", "gpt2-dropout");
    let shape =
        r#""model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 50257"#;
    let off = eval_hf(
        &dir,
        "off.json",
        &format!(r#"{{{shape}, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}}"#),
    );
    assert_eq!(hf_model(&off)["dropout"], false, "{}", off.stdout);
    let default = eval_hf(&dir, "default.json", &format!("{{{shape}}}"));
    assert_eq!(hf_model(&default)["dropout"], true);
    let r = eval_hf(
        &dir,
        "mixed.json",
        &format!(r#"{{{shape}, "resid_pdrop": 0.0}}"#),
    );
    assert_one_line_error(
        &r,
        &[
            "\"resid_pdrop\" 0.0",
            "\"attn_pdrop\" 0.1 (the class default)",
            "one switch",
            "set them all to 0.0 or all above 0",
        ],
        &[],
        "mixed GPT-2 dropout",
    );
}

/// The Llama-style classes (Llama, Mistral, Qwen, Gemma, the MoE families) read
/// `attention_dropout`, and Falcon and GPT-NeoX `hidden_dropout` / `attention_dropout`; tpsim
/// dropped the first and Falcon's pair and read NeoX's hidden one alone, pricing (and emitting,
/// `--attention-dropout 0`) other dropout than the config's. Each is read now.
#[test]
fn attention_and_hidden_dropout_keys_are_read() {
    let dir = scratch("round20", "hf-dropout");
    let r = eval_hf(
        &dir,
        "llama.json",
        &format!(r#"{{"model_type": "llama", {HF_SHAPE}, "attention_dropout": 0.1}}"#),
    );
    assert_one_line_error(
        &r,
        &[
            "\"attention_dropout\" 0.1",
            "no other dropout",
            "set it to 0.0",
        ],
        &["differ"],
        "llama attention dropout",
    );
    let r = eval_hf(
        &dir,
        "llama0.json",
        &format!(r#"{{"model_type": "llama", {HF_SHAPE}, "attention_dropout": 0.0}}"#),
    );
    assert_eq!(hf_model(&r)["dropout"], false);
    let falcon = r#""model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32, "vocab_size": 65024"#;
    std::fs::write(
        dir.join("falcon.json"),
        format!(r#"{{{falcon}, "hidden_dropout": 0.1, "attention_dropout": 0.1}}"#),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "falcon.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--global-batch",
            "64",
            "--format",
            "json",
        ],
    );
    assert_eq!(hf_model(&r)["dropout"], true, "{}", r.stderr);
    let neox = r#""model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64, "num_hidden_layers": 44, "intermediate_size": 24576, "vocab_size": 50432"#;
    let r = eval_hf(
        &dir,
        "neox.json",
        &format!(r#"{{{neox}, "hidden_dropout": 0.1}}"#),
    );
    assert_one_line_error(
        &r,
        &["\"hidden_dropout\" 0.1 and \"attention_dropout\" 0 (the class default) differ"],
        &[],
        "NeoX hidden dropout alone",
    );
}

fn qwen3_with(dir: &std::path::Path, name: &str, extra: &str) {
    std::fs::write(
        dir.join(name),
        format!(
            r#"{{"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960{extra}}}"#
        ),
    )
    .unwrap();
}

/// `"rope_scaling": {"rope_type": "yarn", ...}` (Qwen3's long-context setting) was dropped: the
/// model read as plain RoPE, priced with the fused kernel and emitted as
/// `--position-embedding-type rope`. Megatron-Bridge builds such a GPT model with
/// `position_embedding_type = "yarn"` and runs it unfused, as Megatron-LM does; tpsim now reads
/// it so, the emitted line says yarn and reads back to the same step. Latent attention keeps
/// "rope" (Megatron-Bridge passes MLA the YaRN factors instead). A `rope_scaling` transformers
/// cannot build a model from is refused.
#[test]
fn a_yarn_rope_scaling_is_read_as_yarn() {
    let dir = scratch("round20", "yarn");
    qwen3_with(
        &dir,
        "yarn.json",
        r#", "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#,
    );
    qwen3_with(&dir, "plain.json", "");
    let eval = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--hf-config",
            name,
            "--nodes",
            "1",
            "--tp",
            "8",
            "--pp",
            "1",
            "--global-batch",
            "64",
        ];
        args.extend(extra);
        run_in(&dir, &args)
    };
    let yarn = eval("yarn.json", &[]);
    assert_eq!(yarn.code, 0, "{}", yarn.stderr);
    assert!(
        yarn.stdout.contains("rotary positions (YaRN)"),
        "{}",
        yarn.stdout
    );
    let plain = eval("plain.json", &[]);
    assert_ne!(
        step_line(&yarn),
        step_line(&plain),
        "unfused RoPE costs more"
    );
    let json = eval("yarn.json", &["--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["model"]["position_embedding_type"], "yarn");
    assert_eq!(value["training"]["rope_fusion"], false);
    let line = eval("yarn.json", &["--emit", "megatron"]);
    assert!(
        line.stdout.contains("--position-embedding-type yarn"),
        "{}",
        line.stdout
    );
    let back = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        line.stdout.trim(),
    ]);
    assert_eq!(step_line(&back), step_line(&yarn), "{}", back.stderr);
    // A Llama 3.1 scaling changes only the frequencies: still rope.
    qwen3_with(
        &dir,
        "llama3.json",
        r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}"#,
    );
    assert!(
        eval("llama3.json", &[])
            .stdout
            .contains("rotary positions,")
    );
    // Latent attention stays rope.
    let deepseek = std::fs::read_to_string(format!("{ROOT}/models/hf/deepseek-v3.json")).unwrap();
    let with_yarn = deepseek.replacen(
        "\"rms_norm_eps\"",
        "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"original_max_position_embeddings\": 4096},\n  \"rms_norm_eps\"",
        1,
    );
    std::fs::write(dir.join("deepseek.json"), with_yarn).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "deepseek.json",
            "--nodes",
            "64",
            "--tp",
            "1",
            "--ep",
            "64",
            "--pp",
            "8",
            "--allow-uneven-pp",
            "--global-batch",
            "512",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        hf_model(&r)["position_embedding_type"],
        "rope",
        "{}",
        r.stderr
    );
    for (name, scaling, needles) in [
        (
            "string.json",
            r#""yarn""#,
            &["\"rope_scaling\" is \"yarn\"", "not an object"][..],
        ),
        (
            "untyped.json",
            r#"{"factor": 4.0}"#,
            &["no \"rope_type\"", "yarn, longrope, llama3"][..],
        ),
        (
            "unknown.json",
            r#"{"rope_type": "ntk"}"#,
            &["\"rope_type\" \"ntk\"", "remove \"rope_scaling\""][..],
        ),
    ] {
        qwen3_with(&dir, name, &format!(r#", "rope_scaling": {scaling}"#));
        let r = eval(name, &[]);
        assert_one_line_error(&r, needles, &[], name);
    }
}

/// `--tokens` beside `--emit` was read and then lost: the launch configuration has no place for
/// it and the time to train was printed nowhere. A note says it now.
#[test]
fn emit_says_the_time_to_train_tokens() {
    for command in ["plan", "eval"] {
        let r = run(&[
            command,
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--sequence-parallel",
            "--global-batch",
            "64",
            "--tokens",
            "1T",
            "--emit",
            "megatron",
        ]);
        assert!(r.code == 0 || r.code == 1, "{command}: {}", r.stderr);
        assert!(
            r.stderr.contains("note: --tokens 1.00T: ") && r.stderr.contains(" days to train at "),
            "{command}: {}",
            r.stderr
        );
        assert!(!r.stdout.contains("tokens"), "{}", r.stdout);
    }
}

/// `--transformer-impl local` was skipped as "does not change memory or time" while the line was
/// priced with Transformer Engine's fused kernels, FP8 and TP overlap it cannot run; it is refused
/// by name now, and Megatron-LM's default is still read.
#[test]
fn a_non_transformer_engine_implementation_is_refused() {
    for value in ["local", "inference_optimized"] {
        let r = launch(&format!(
            "--hidden-dropout 0 --attention-dropout 0 --transformer-impl {value}"
        ));
        assert_one_line_error(
            &r,
            &[
                &format!("--transformer-impl {value}"),
                "not modelled",
                "transformer_engine",
            ],
            &["skipped"],
            value,
        );
    }
    let r =
        launch("--hidden-dropout 0 --attention-dropout 0 --transformer-impl transformer_engine");
    assert_eq!(r.code, 0, "{}", r.stderr);
}
