//! A review of the emitted launch configurations against what the frameworks accept: each test
//! here is a configuration `--emit` wrote that the framework refused, or ran as another plan.
//! Megatron-LM lines were checked by running Megatron-LM's own `parse_args`, `validate_args` and
//! `core_transformer_config_from_args` (Megatron-Core 0.20) on them.

mod common;

use common::*;

/// The stderr line that lists the Megatron-DeepSpeed launcher arguments beside the JSON.
fn launcher_args(r: &Run) -> &str {
    r.stderr
        .lines()
        .find_map(|l| {
            l.split_once("give Megatron-DeepSpeed ")
                .map(|(_, args)| args)
        })
        .unwrap_or_else(|| panic!("no launcher arguments in: {}", r.stderr))
}

/// GPT-OSS's experts have biases (Megatron-Bridge's provider sets `add_bias_linear`), and
/// Megatron-Core's `TransformerConfig.__post_init__` asserts "Bias in Moe is only supported when
/// ETP==1". `eval --tp 2 --ep 8 --emit megatron` wrote `--expert-tensor-parallel-size 2` (the
/// expert TP follows --tp), a line Megatron-LM refuses as it builds the model config; the plan is
/// refused now, naming the rule and --etp 1, and the search offers etp 1 alone.
#[test]
fn biased_experts_are_not_split_over_expert_tp_ranks() {
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "gpt-oss-20b",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--tp",
            "2",
            "--ep",
            "8",
            "--micro-batch",
            "1",
            "--zero",
            "1",
            "--emit",
            "megatron",
        ];
        args.extend(extra);
        run(&args)
    };
    // The expert TP by default: named as the user's --tp.
    assert_one_line_error(
        &eval(&[]),
        &[
            "--tp 2 on gpt-oss-20b",
            "Bias in Moe is only supported when ETP==1",
            "give --etp 1",
        ],
        &[],
        "etp defaulting to tp 2",
    );
    // The expert TP given.
    assert_one_line_error(
        &eval(&["--etp", "2"]),
        &[
            "--etp 2 on gpt-oss-20b",
            "Bias in Moe is only supported when ETP==1",
            "use --etp 1",
        ],
        &[],
        "--etp 2",
    );
    let ok = eval(&["--etp", "1"]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    assert!(
        ok.stdout.contains("--expert-tensor-parallel-size 1 "),
        "{}",
        ok.stdout
    );
    // A search pinned to etp 2 finds nothing now (it ranked etp-2 plans before).
    let pinned = run(&[
        "plan",
        "--model",
        "gpt-oss-20b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--tp",
        "2",
        "--etp",
        "2",
    ]);
    assert_eq!(pinned.code, 2, "{}\n{}", pinned.stdout, pinned.stderr);
    assert!(pinned.stderr.contains("--etp 1"), "{}", pinned.stderr);
    // Experts without biases still split over expert-TP ranks.
    let qwen = run(&[
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--tp",
        "2",
        "--ep",
        "4",
        "--etp",
        "2",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--emit",
        "megatron",
    ]);
    assert!(qwen.code == 0 || qwen.code == 1, "{}", qwen.stderr);
    assert!(
        qwen.stdout.contains("--expert-tensor-parallel-size 2 "),
        "{}",
        qwen.stdout
    );
}

/// `--emit deepspeed` named only the degrees for Megatron-DeepSpeed. At pp 1 without
/// `--no-pipeline-parallel`, Megatron-DeepSpeed builds GPTModelPipe and DeepSpeed runs it in its
/// PipelineEngine, which asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism";
/// without `--zero-stage 3` it builds the model outside `deepspeed.zero.Init` (every parameter on
/// every GPU); without `--bf16` its parameters are fp32. The line carries all three now, with the
/// config's stage.
#[test]
fn megatron_deepspeed_arguments_carry_what_the_config_needs() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--global-batch",
        "32",
        "--seq-len",
        "131072",
        "--cp",
        "8",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let config: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    assert_eq!(config["zero_optimization"]["stage"], 3, "{}", r.stdout);
    let args = launcher_args(&r);
    for needle in [
        "--pipeline-model-parallel-size 1 --no-pipeline-parallel",
        "--ds-sequence-parallel-size 8",
        "--zero-stage 3",
        "--bf16",
    ] {
        assert!(args.contains(needle), "{needle:?} in: {args}");
    }
    // With pipelines, DeepSpeed's pipeline engine is what runs (ZeRO-1 at most).
    let piped = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--framework",
        "deepspeed",
        "--tp",
        "1",
        "--pp",
        "2",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--emit",
        "deepspeed",
    ]);
    assert!(piped.code == 0 || piped.code == 1, "{}", piped.stderr);
    let args = launcher_args(&piped);
    assert!(
        args.contains("--pipeline-model-parallel-size 2 --zero-stage 1 --bf16"),
        "{args}"
    );
    assert!(!args.contains("--no-pipeline-parallel"), "{args}");
}

/// Megatron-DeepSpeed's GPTModelPipe sets DeepSpeed's activation-checkpoint interval from
/// `--recompute-method uniform` only ("deepspeed's pipeline doesn't support the block recompute
/// method"): a pipelined plan that recomputes 4 of a stage's 16 layers was written as
/// `--recompute-method block --recompute-num-layers 4`, which runs with no recompute at all. It is
/// refused now; at pp 1 (`--no-pipeline-parallel`, Megatron's own transformer) it is written.
#[test]
fn partial_recompute_with_deepspeed_pipelines_is_refused() {
    let eval = |pp: &str| {
        run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--framework",
            "deepspeed",
            "--tp",
            "1",
            "--pp",
            pp,
            "--micro-batch",
            "1",
            "--zero",
            "1",
            "--recompute",
            "full",
            "--recompute-num-layers",
            "4",
            "--emit",
            "deepspeed",
        ])
    };
    assert_one_line_error(
        &eval("2"),
        &[
            "--emit deepspeed",
            "4 of each stage's 16 layers",
            "drops --recompute-method block",
            "--pp 1",
        ],
        &[],
        "block recompute at pp 2",
    );
    let flat = eval("1");
    assert!(flat.code == 0 || flat.code == 1, "{}", flat.stderr);
    let args = launcher_args(&flat);
    assert!(
        args.contains("--no-pipeline-parallel")
            && args.contains("--recompute-method block --recompute-num-layers 4"),
        "{args}"
    );
}
