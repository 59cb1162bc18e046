//! Review, round 13 (b): launch scripts read by `--megatron-args @file`. A flag that takes several
//! values (`--recompute-modules`, `--cp-comm-type`) at the end of a quoted variable or an array
//! took the list's close and the launcher line after it as its values; a quoted variable that
//! appends to itself (`EXTRA_ARGS="$EXTRA_ARGS --use-coordinator"`, as Megatron-LM's example
//! scripts extend their lists) was dropped without a word.

mod common;

use common::*;

/// The flags of a small GPT every script below shares (one line, so each script adds one group).
const SHAPE: &str = "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16";

fn eval_script(dir: &std::path::Path, script: &str) -> Run {
    std::fs::write(dir.join("launch.sh"), script).unwrap();
    run_in(
        dir,
        &[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            "@launch.sh",
            "--format",
            "json",
        ],
    )
}

fn first_plan(r: &Run) -> serde_json::Value {
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    json["plans"][0].clone()
}

/// The modules `--recompute-modules` named, as eval's JSON gives them.
fn recompute_modules(r: &Run) -> serde_json::Value {
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    json["training"]["recompute_modules"].clone()
}

/// `--recompute-modules core_attn mlp` last in a quoted variable spanning lines (Megatron-LM's
/// examples/pretrain_gpt.sh layout) was refused: "'\"' is not a module Megatron-Core recomputes"
/// (the closing quote and `torchrun` read as modules).
#[test]
fn recompute_modules_last_in_a_quoted_variable_stop_at_its_quote() {
    let dir = scratch("review13b", "modules_quoted");
    let script = format!(
        "GPT_ARGS=\"\n    {SHAPE}\n    --recompute-granularity selective\n    --recompute-modules core_attn mlp\n\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS\n"
    );
    let r = eval_script(&dir, &script);
    assert_eq!(first_plan(&r)["recompute"], "selective");
    assert_eq!(
        recompute_modules(&r),
        serde_json::json!(["core_attn", "mlp"])
    );
}

/// The same in an array (`MODEL_ARGS=( ... )`): `)` and the torchrun line were read as modules.
#[test]
fn recompute_modules_last_in_an_array_stop_at_its_bracket() {
    let dir = scratch("review13b", "modules_array");
    let script = format!(
        "MODEL_ARGS=(\n    {SHAPE}\n    --recompute-granularity selective\n    --recompute-modules core_attn mlp\n)\ntorchrun --nproc_per_node 8 pretrain_gpt.py ${{MODEL_ARGS[@]}}\n"
    );
    let r = eval_script(&dir, &script);
    assert_eq!(
        recompute_modules(&r),
        serde_json::json!(["core_attn", "mlp"])
    );
}

/// `--cp-comm-type a2a` last in a quoted variable was refused as "3 types for 24 layers" (a2a,
/// the closing quote and `torchrun`).
#[test]
fn cp_comm_type_last_in_a_quoted_variable_is_one_type() {
    let dir = scratch("review13b", "cp_comm_quoted");
    let script = format!(
        "GPT_ARGS=\"{SHAPE} --context-parallel-size 2 --cp-comm-type a2a\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS\n"
    );
    let plan = first_plan(&eval_script(&dir, &script));
    assert_eq!(plan["cp"], 2, "{plan}");
}

/// A variable extended by a later assignment (`GPT_ARGS="$GPT_ARGS --tensor-model-parallel-size
/// 2 --sequence-parallel"`) was dropped whole, silently: the plan was evaluated at TP 1 without
/// sequence parallelism, though the script runs TP 2 with it.
#[test]
fn a_variable_that_extends_itself_is_read() {
    let dir = scratch("review13b", "append");
    let script = format!(
        "GPT_ARGS=\"{SHAPE}\"\nGPT_ARGS=\"$GPT_ARGS --tensor-model-parallel-size 2 --sequence-parallel\"\nEXTRA=\"${{EXTRA}} --context-parallel-size 2\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS $EXTRA\n"
    );
    let plan = first_plan(&eval_script(&dir, &script));
    assert_eq!(plan["tp"], 2, "{plan}");
    assert_eq!(plan["cp"], 2, "{plan}");
    assert_eq!(plan["sequence_parallel"], true, "{plan}");
}

/// A Slurm script's `srun --account=proj --overlap ...` line was refused: "--account ... takes no
/// abbreviations ... write the whole name: --account-for-embedding-in-pipeline-split", and the
/// same for --overlap, though they are srun's own flags (srun(1)), never Megatron-LM's, and the
/// script runs. They are skipped as other launcher flags are.
#[test]
fn srun_flags_that_begin_megatron_flags_are_no_abbreviations() {
    let dir = scratch("review13b", "srun");
    let script = format!(
        "#!/bin/bash\n#SBATCH --nodes=1\nsrun --account=proj --overlap --ntasks-per-node=8 \\\n    python pretrain_gpt.py {SHAPE} --tensor-model-parallel-size 2\n"
    );
    let r = eval_script(&dir, &script);
    assert_eq!(first_plan(&r)["tp"], 2);
    assert!(r.stderr.contains("--account=proj"), "{}", r.stderr);
    // A Megatron-LM flag's start is still refused.
    let r = eval_script(
        &dir,
        &format!("python pretrain_gpt.py {SHAPE} --overlap-grad 1"),
    );
    assert_one_line_error(&r, &["--overlap-grad-reduce"], &[], "abbreviation");
}

/// An array written on one line (`ARGS=(--num-layers 24 ... --bf16)`, as Megatron-LM's
/// examples/mimo scripts write theirs) was refused: "\"--bf16)\" is not a Megatron-LM argument;
/// did you mean --bf16?", and its first flag read as the word `ARGS=(--num-layers`. Bash reads
/// `(` and `)` as words of their own; so does tpsim now, and `ARGS+=(...)` appends.
#[test]
fn an_array_on_one_line_is_read_with_its_last_flag() {
    let dir = scratch("review13b", "array_one_line");
    let script = format!(
        "ARGS=({SHAPE} --save $(pwd)/ckpt --recompute-granularity selective --recompute-modules mlp)\nARGS+=(--tensor-model-parallel-size 2)\ntorchrun --nproc_per_node 8 pretrain_gpt.py ${{ARGS[@]}}\n"
    );
    let r = eval_script(&dir, &script);
    assert_eq!(first_plan(&r)["tp"], 2, "{}", r.stderr);
    assert_eq!(recompute_modules(&r), serde_json::json!(["mlp"]));
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(json["model"]["layers"], 24);
}

/// `GPT_ARGS+=" --tensor-model-parallel-size 2"` (bash's append) was dropped silently: TP 1.
#[test]
fn a_quoted_append_is_read() {
    let dir = scratch("review13b", "append_op");
    let script = format!(
        "GPT_ARGS=\"{SHAPE}\"\nGPT_ARGS+=\" --tensor-model-parallel-size 2\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS\n"
    );
    assert_eq!(first_plan(&eval_script(&dir, &script))["tp"], 2);
}
