//! Hostile input, round 28: `--megatron-args @file` launch scripts that keep their arguments in
//! quoted shell variables (Megatron-LM's own examples/pretrain_gpt.sh), and Megatron flags spelled
//! with underscores. Every error case checks exit 2, one line on stderr and the words that name
//! the value, the rule and the fix.

mod common;

use common::*;

/// Megatron-LM's examples/pretrain_gpt.sh (NVIDIA/Megatron-LM@9e72d571), as written: each group
/// of arguments a double-quoted variable spanning lines, expanded unquoted on the torchrun line.
const PRETRAIN_GPT_SH: &str = r#"#!/bin/bash

# Runs the "345M" parameter model

export CUDA_DEVICE_MAX_CONNECTIONS=1

CHECKPOINT_PATH=<Specify path>
DATA_PATH=<Specify path and file prefix>_text_document

GPT_ARGS="
    --num-layers 24 \
    --hidden-size 1024 \
    --num-attention-heads 16 \
    --seq-length 1024 \
    --max-position-embeddings 1024 \
    --micro-batch-size 4 \
    --global-batch-size 8 \
    --lr 0.00015 \
    --bf16
"

DATA_ARGS="
    --data-path $DATA_PATH \
    --split 949,50,1
"

torchrun pretrain_gpt.py \
    $GPT_ARGS \
    $DATA_ARGS \
    --tensor-model-parallel-size 2 \
    --save $CHECKPOINT_PATH
"#;

fn eval_script(dir: &std::path::Path, script: &str) -> Run {
    std::fs::write(dir.join("launch.sh"), script).unwrap();
    run_in(
        dir,
        &[
            "eval",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--megatron-args",
            "@launch.sh",
            "--format",
            "json",
        ],
    )
}

/// A variable holding the arguments in double quotes over several lines was refused as "leaves a
/// quote open (bash refuses it ...)": bash reads such a string to its closing quote, and
/// Megatron-LM's own example script is written so. It is read now, every flag in it used.
#[test]
fn a_quoted_variable_over_several_lines_is_read() {
    let dir = scratch("hostile28", "multiline");
    let r = eval_script(&dir, PRETRAIN_GPT_SH);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let model = &json["model"];
    assert_eq!(model["layers"], 24, "{model}");
    assert_eq!(model["hidden"], 1024, "{model}");
    assert_eq!(model["heads"], 16, "{model}");
    assert_eq!(model["seq_len"], 1024, "{model}");
    let plan = &json["plans"][0];
    assert_eq!(plan["tp"], 2, "{plan}");
    assert_eq!(plan["micro_batch"], 4, "{plan}");
    // The closing quote ends the list: `torchrun` is no stray word after --bf16.
    assert!(!r.stderr.contains("torchrun"), "{}", r.stderr);
    assert!(r.stderr.contains("--lr"), "{}", r.stderr);
}

/// The same list on one line (`GPT_ARGS="--num-layers 24 ..."`) was read as one word and
/// dropped, and the script refused as lacking --num-layers, which it gives.
#[test]
fn a_quoted_variable_on_one_line_is_read() {
    let dir = scratch("hostile28", "oneline");
    let r = eval_script(
        &dir,
        "GPT_ARGS=\"--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 4 --global-batch-size 8 --bf16\"\ntorchrun pretrain_gpt.py $GPT_ARGS --tensor-model-parallel-size 2\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(json["model"]["layers"], 24);
    assert_eq!(json["plans"][0]["tp"], 2);
}

/// A quote the script never closes is still refused, with the line where it opens.
#[test]
fn a_quote_never_closed_is_refused_with_its_line() {
    let dir = scratch("hostile28", "open");
    let r = eval_script(
        &dir,
        "# launch\nGPT_ARGS=\"\n    --num-layers 24 \\\n    --hidden-size 1024\n",
    );
    assert_one_line_error(
        &r,
        &[
            "GPT_ARGS=\\\"",
            "(line 2)",
            "leaves a quote open",
            "close the quote",
        ],
        &[],
        "unclosed quote",
    );
}

/// `--tensor_model_parallel_size 2` was skipped as an argument that "does not change memory or
/// time" and the plan evaluated at TP 1: Megatron-LM's argparse refuses the underscore spelling
/// (its flags are matched as written), and the long names are too far from the dashed ones for
/// the did-you-mean check.
#[test]
fn a_flag_spelled_with_underscores_is_refused() {
    let base = "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 --global-batch-size 8 --bf16";
    for (flag, dashed) in [
        (
            "--tensor_model_parallel_size 2",
            "--tensor-model-parallel-size",
        ),
        (
            "--pipeline_model_parallel_size=2",
            "--pipeline-model-parallel-size",
        ),
        ("--use_distributed_optimizer", "--use-distributed-optimizer"),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{base} {flag}"),
        ]);
        assert_one_line_error(
            &r,
            &["is not a Megatron-LM argument", "with dashes", dashed],
            &["did you mean"],
            flag,
        );
    }
    // torchrun's own flags take underscores: read, not refused.
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("--nproc_per_node 8 {base}"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A config's `head_dim` set apart from hidden / heads was used (the parameters and the attention
/// were priced at it) but the model line said only "hidden 4096, 32 heads", which reads as heads
/// of 128: `"head_dim": 100` (a typo for 128) left no trace in what tpsim echoes. The line says
/// the width now where it is not hidden / heads, and stays as it was where it is.
#[test]
fn a_head_dim_apart_from_hidden_over_heads_is_echoed() {
    let dir = scratch("hostile28", "head_dim");
    let model_line = |config: &str| {
        std::fs::write(dir.join("c.json"), config).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--hf-config",
                "c.json",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
                "--global-batch",
                "64",
            ],
        );
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.starts_with("model "))
            .unwrap()
            .to_string()
    };
    let narrow = model_line(&format!(
        r#"{{"model_type": "llama", {HF_SHAPE}, "head_dim": 100}}"#
    ));
    assert!(
        narrow.contains("hidden 4096, 32 heads, head dim 100, ffn 14336"),
        "{narrow}"
    );
    let plain = model_line(&format!(
        r#"{{"model_type": "llama", {HF_SHAPE}, "head_dim": 128}}"#
    ));
    assert!(plain.contains("32 heads, ffn 14336"), "{plain}");
    assert!(!plain.contains("head dim"), "{plain}");
    // Qwen3-30B-A3B: 32 heads of 128 over hidden 2048, with its 4 KV heads.
    let qwen = model_line(
        &std::fs::read_to_string(format!("{ROOT}/models/hf/qwen3-30b-a3b.json")).unwrap(),
    );
    assert!(
        qwen.contains("hidden 2048, 32 heads, 4 KV heads, head dim 128,"),
        "{qwen}"
    );
}
