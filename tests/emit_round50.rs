//! Emitted configs against the frameworks' own schemas, round 50: `--emit deepspeed`,
//! `--emit nemo` and `--emit torchtitan` read as a user pasting them into the framework would.
//!
//! Defects found and fixed (each test below failed before its fix):
//! 1. `--framework deepspeed --zero 0 --grad-dtype fp32 --emit deepspeed` wrote `"bf16":
//!    {"enabled": true}` beside `"data_types": {"grad_accum_dtype": "fp32"}` with
//!    `"zero_optimization": {"stage": 0}`, which DeepSpeed refuses at `deepspeed.initialize`:
//!    without ZeRO, `_do_optimizer_sanity_check` (deepspeed/runtime/engine.py at
//!    deepspeedai/DeepSpeed edaa7221) accepts only a gradient dtype equal to the model's and
//!    raises `NotImplementedError("unsupported mix of model_dtype=torch.bfloat16 and
//!    grad_accum_dtype=torch.float32")`. Now refused, exit 2, with the fix (`--grad-dtype bf16`
//!    or `--zero 1`).
//! 2. A DeepSpeed plan whose gradients no ZeRO optimizer reduces (ZeRO-0; ZeRO-1 with fp32
//!    gradients, which `_do_optimizer_sanity_check` hands to `BF16_Optimizer`; pipelines, whose
//!    engine turns `enable_backward_allreduce` off) was priced with the gradient reduction hidden
//!    under the backward (`--overlap-grad-reduce`, DeepSpeed's default in tpsim) and written with
//!    `"overlap_comm": true`; but `overlap_comm` is read only by DeepSpeed's ZeRO optimizers
//!    (stage_1_and_2.py `create_gradient_handling_hooks`, stage3.py), and the engine all-reduces
//!    those plans' gradients after the backward (engine.py `_backward_epilogue` ->
//!    `allreduce_gradients` -> `buffered_allreduce_fallback`; pipe/engine.py `_exec_reduce_grads`):
//!    the config ran exposed what tpsim priced hidden. First refused at emit (this round); the
//!    lead then moved the rule into the cost model (`cost::grad_reduce_overlaps`): such plans are
//!    priced with the reduction exposed, in `plan`'s search too, and written `overlap_comm: false`.
//! 3. `--emit nemo` at ZeRO-0 wrote `optim.name: fused_adam` with `overlap_grad_sync: true`,
//!    priced with the gradient all-reduce hidden; NeMo 1.x (NVIDIA/NeMo 8cfedd7203) reads
//!    `overlap_grad_sync` for its distributed optimizers only, and its fused_adam path
//!    all-reduces during the backward only at pp 1 without sequence parallelism or
//!    gradient_accumulation_fusion (megatron_base_model.py `configure_optimizers`,
//!    `async_grad_allreduce`), else after it (megatron_gpt_model.py `allreduce_main_grads`).
//!    Now refused, exit 2, with the fix.
//!
//! Read and found sound (schema file and commit):
//! - DeepSpeed (deepspeedai/DeepSpeed edaa7221, 2026-08-22): `train_batch_size`,
//!   `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps` and their identity
//!   (runtime/config.py `_batch_assertion`, world size = dp under Megatron-DeepSpeed's mpu),
//!   `bf16.enabled`, `data_types.grad_accum_dtype` ("fp32"/"bf16", `DtypeEnum`),
//!   `zero_optimization.stage`/`overlap_comm`, `sequence_parallel_size`, and
//!   `seq_parallel_communication_data_type` (runtime/constants.py; the key was
//!   `seq_parallel_comm_data_type` before #7175, 2025-03-26, as microsoft/DeepSpeed 38327e07
//!   still has it: a config for DeepSpeed older than v0.16.5 loses it and reduces in fp32).
//! - torchtitan (pytorch/torchtitan b5bcd76c66d0): every `TrainingConfig`, `ParallelismConfig`
//!   and `CompileConfig` field the recipe sets exists with that type and literal values
//!   (torchtitan/config/configs.py: `fsdp_reshard_after_forward` "always"/"never",
//!   `context_parallel_load_balancer` "headtail", `mixed_precision_reduce` "float32"); FSDP2
//!   shards over dp_shard x cp (distributed/fsdp.py `resolve_fsdp_mesh`), which tpsim already
//!   refuses for ZeRO-0 beside cp; llama3's parallelize.py always applies the mixed-precision
//!   policy (`apply_fsdp_to_decoder`, also at shard degree 1), so a replicated plan trains in bf16.
//! - NeMo 1.x (NVIDIA/NeMo 8cfedd7203): `optim.name` per ZeRO stage (`distributed_fused_adam`
//!   or `mcore_distributed_optim` make `with_distributed_adam`, megatron_base_model.py), and
//!   `grad_sync_dtype`/`overlap_grad_sync`/`overlap_param_sync` as setup_mcore_distributed_parallel
//!   reads them.
//! - Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed f4157bea): every launcher flag written
//!   (`--ds-sequence-parallel-size`, `--no-pipeline-parallel`, `--zero-stage`,
//!   `--use-flash-attn-v2`, recompute flags, `--bf16`) exists in megatron/arguments.py.

mod common;

use common::{assert_one_line_error, run};

/// Llama 3 8B on two 8-GPU H100 nodes under DeepSpeed, with `more` appended.
fn deepspeed_eval(more: &[&str]) -> common::Run {
    let mut args = more.to_vec();
    args.extend_from_slice(&["--emit", "deepspeed"]);
    eval_without_emit(&args)
}

#[test]
fn zero0_with_fp32_gradients_is_refused_as_deepspeed_refuses_the_dtype_mix() {
    for pp in ["1", "2"] {
        let r = deepspeed_eval(&[
            "--pp",
            pp,
            "--zero",
            "0",
            "--grad-dtype",
            "fp32",
            "--overlap-grad-reduce",
            "false",
        ]);
        assert_one_line_error(
            &r,
            &[
                "--grad-dtype fp32",
                "ZeRO-0",
                "grad_accum_dtype",
                "--grad-dtype bf16",
                "--zero 1",
            ],
            &[],
            &format!("zero 0, fp32 gradients, pp {pp}"),
        );
    }
    // bf16 gradients without ZeRO are DeepSpeed's DDP_BFLOAT16 path: written.
    let ok = deepspeed_eval(&["--pp", "2", "--zero", "0", "--overlap-grad-reduce", "false"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(
        ok.stdout.contains("\"grad_accum_dtype\": \"bf16\""),
        "{}",
        ok.stdout
    );
}

#[test]
fn gradient_reduction_is_priced_and_written_exposed_where_no_zero_optimizer_reduces_them() {
    // ZeRO-0; ZeRO-1 with fp32 gradients (BF16_Optimizer); ZeRO-1 under the pipeline engine: the
    // engine reduces after the backward, so the plan is priced with nothing hiding the
    // reduction and the config says overlap_comm false, even with --overlap-grad-reduce true.
    for more in [
        &["--pp", "2", "--zero", "0", "--overlap-grad-reduce", "true"][..],
        &["--pp", "2", "--zero", "0"][..],
        &[
            "--pp",
            "1",
            "--zero",
            "1",
            "--grad-dtype",
            "fp32",
            "--overlap-grad-reduce",
            "true",
        ][..],
        &["--pp", "2", "--zero", "1", "--overlap-grad-reduce", "true"][..],
    ] {
        let emitted = deepspeed_eval(more);
        assert_eq!(emitted.code, 0, "{more:?}: {}", emitted.stderr);
        assert!(
            emitted.stdout.contains("\"overlap_comm\": false"),
            "{more:?}: {}",
            emitted.stdout
        );
        let priced = eval_without_emit(more);
        let dp_line = priced
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("DP grad reduce"))
            .unwrap_or_else(|| panic!("{more:?}: no DP grad reduce line: {}", priced.stdout));
        assert!(dp_line.contains("nothing hides it"), "{more:?}: {dp_line}");
    }
    // Where a ZeRO optimizer reduces during the backward (pp 1: ZeRO-1 with bf16 gradients,
    // ZeRO-2), it is priced hidden and written overlap_comm true.
    for more in [
        &["--pp", "1", "--zero", "1", "--overlap-grad-reduce", "true"][..],
        &[
            "--pp",
            "1",
            "--zero",
            "2",
            "--grad-dtype",
            "fp32",
            "--overlap-grad-reduce",
            "true",
        ][..],
    ] {
        let emitted = deepspeed_eval(more);
        assert_eq!(emitted.code, 0, "{more:?}: {}", emitted.stderr);
        assert!(
            emitted.stdout.contains("\"overlap_comm\": true"),
            "{more:?}: {}",
            emitted.stdout
        );
        let priced = eval_without_emit(more);
        let dp_line = priced
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("DP grad reduce"))
            .unwrap_or_else(|| panic!("{more:?}: no DP grad reduce line: {}", priced.stdout));
        assert!(
            dp_line.contains("hidden by the backward"),
            "{more:?}: {dp_line}"
        );
    }
}

/// `eval --framework deepspeed` of Llama 3 8B on 2 nodes with `more`: the priced breakdown
/// (`deepspeed_eval` adds `--emit deepspeed`).
fn eval_without_emit(more: &[&str]) -> common::Run {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--framework",
        "deepspeed",
        "--tp",
        "1",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--seq-len",
        "4096",
        "--recompute",
        "full",
    ];
    args.extend_from_slice(more);
    run(&args)
}

#[test]
fn nemo_zero0_refuses_an_overlapped_reduction_its_fused_adam_runs_after_the_backward() {
    let nemo = |more: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--tp",
            "1",
            "--pp",
            "2",
            "--global-batch",
            "64",
            "--micro-batch",
            "1",
            "--seq-len",
            "4096",
            "--recompute",
            "full",
            "--emit",
            "nemo",
        ];
        args.extend_from_slice(more);
        run(&args)
    };
    let r = nemo(&["--zero", "0", "--overlap-grad-reduce", "true"]);
    assert_one_line_error(
        &r,
        &[
            "ZeRO-0",
            "NeMo 1.x",
            "overlap_grad_sync",
            "--overlap-grad-reduce false",
            "--zero 1",
        ],
        &[],
        "nemo zero 0 overlapped",
    );
    for more in [
        &["--zero", "0", "--overlap-grad-reduce", "false"][..],
        &["--zero", "1", "--overlap-grad-reduce", "true"][..],
    ] {
        let ok = nemo(more);
        assert_eq!(ok.code, 0, "{more:?}: {}", ok.stderr);
        assert!(
            ok.stdout.contains("overlap_grad_sync"),
            "{more:?}: {}",
            ok.stdout
        );
    }
}
