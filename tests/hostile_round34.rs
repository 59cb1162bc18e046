//! Hostile input, round 34: `plan` (and `sweep`, `compare`) on a hybrid Mamba-Transformer stack
//! with a framework, an offload or a combined 1F1B schedule the stack never takes said "8 GPUs
//! cannot be split into tp x pp x dp", which they can; `--recompute-modules` over a hybrid stack
//! dropped `plan`'s selective plans without a word, and an MoE hybrid's default modules made
//! `eval --recompute selective` refuse a `--recompute-modules` never given; `--calibration` with
//! an unknown name or a missing file offered the bundled GPUs, none of which is calibrated; the
//! `--hf-config` help left out two `model_type`s it reads. Every error case checks exit 2, one
//! line on stderr and the words that name the value, the rule and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile34";

/// What a hybrid stack refuses whatever the degrees fails every candidate of a search: `plan`
/// and `sweep` said the cluster could not be split (it can: tp 1, pp 1, dp 8), naming the heads,
/// layers and batch instead of the rule `eval` names. Each now says `eval`'s words.
#[test]
fn a_search_over_a_hybrid_stack_names_what_the_stack_refuses() {
    for (model, extra, needles) in [
        (
            "nemotron-h-8b",
            &["--framework", "torchtitan"][..],
            &[
                "--framework torchtitan with the hybrid Mamba-Transformer model nemotron-h-8b",
                "use --framework megatron-core",
            ][..],
        ),
        (
            "nemotron-h-8b",
            &["--cpu-offload-layers", "2"][..],
            &[
                "--cpu-offload-layers 2 with the hybrid",
                "get_cpu_offload_context",
                "drop --cpu-offload-layers",
            ][..],
        ),
        (
            "nemotron-3-nano-30b-a3b",
            &["--overlap-moe-expert-parallel-comm"][..],
            &[
                "--overlap-moe-expert-parallel-comm with the hybrid",
                "build_schedule_plan",
                "give --overlap-moe-expert-parallel-comm false",
            ][..],
        ),
    ] {
        let mut args = vec![
            "plan",
            "--model",
            model,
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ];
        args.extend_from_slice(extra);
        assert_one_line_error(
            &run(&args),
            needles,
            &["cannot be split", "panicked"],
            &format!("plan {model} {extra:?}"),
        );
    }
    let r = run(&[
        "sweep",
        "--model",
        "nemotron-h-8b",
        "--global-batch",
        "64",
        "--framework",
        "deepspeed",
        "--axis",
        "nodes",
        "--values",
        "1,2",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--framework deepspeed with the hybrid Mamba-Transformer model nemotron-h-8b",
            "use --framework megatron-core",
        ],
        &["cannot be split", "panicked"],
        "sweep deepspeed over a hybrid stack",
    );
}

/// A hybrid stack's listed recompute modules are priced on its blocks (since the seventeenth
/// session; `cost::module_recompute`). Given modules made `plan` drop every selective plan
/// silently (it printed a table as if the flag were not there), and an MoE hybrid's default
/// modules (moe_act, layernorm: what tpsim picks for a transformer with experts) made `eval
/// --recompute selective` refuse "--recompute-modules", which was never given. Given modules
/// are the plan's, in the flag's or the launch line's words; without them selective recompute is
/// Megatron-Core's default (core_attn).
#[test]
fn recompute_modules_over_a_hybrid_stack_are_the_ones_given_and_never_defaulted() {
    let r = run(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--recompute-modules",
        "mlp",
        "--recompute",
        "selective",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "plan --recompute-modules mlp: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["training"]["recompute_modules"][0], "mlp", "{v}");
    assert!(
        v["plans"].as_array().is_some_and(
            |plans| !plans.is_empty() && plans.iter().all(|p| p["recompute"] == "selective")
        ),
        "{v}"
    );
    let r = run(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--recompute-modules",
        "core_attn",
        "--recompute",
        "selective",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "core_attn is the default: {}", r.stderr);

    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--ep",
        "8",
        "--recompute",
        "selective",
    ]);
    assert!(
        r.code == 0 || r.code == 1,
        "no modules were given: {}",
        r.stderr
    );
    assert!(
        r.stdout.contains("recompute selective = attention core"),
        "{}",
        r.stdout
    );

    // A pretrain_mamba.py line's modules are the line's, and dropped from it.
    let line = "--hybrid-layer-pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- --hidden-size 4096 --ffn-hidden-size 21504 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type none --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --squared-relu --tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64 --bf16 --recompute-granularity selective --recompute-modules mlp";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("recompute selective = Megatron-Core modules mlp"),
        "{}",
        r.stdout
    );
}

/// `--calibration` reads a profile `tpsim calibrate` wrote; no bundled profile is one. An
/// unknown name said `unknown GPU "foo"` and listed the bundled GPUs, and a missing path said
/// "or give a bundled name", both fixes that fail. Both now say the file cannot be read; a
/// bundled name still says it holds datasheet numbers and belongs to --gpu.
#[test]
fn a_calibration_is_a_file_never_a_bundled_name() {
    let dir = scratch(SUITE, "calibration");
    for (given, needles) in [
        (
            "foo",
            &["--calibration foo: cannot read it", "check the path"][..],
        ),
        (
            "missing/profile.yaml",
            &["--calibration missing/profile.yaml: cannot read it"][..],
        ),
        (
            "h100-sxm-80g",
            &[
                "no `calibration:` section",
                "pass it with --gpu h100-sxm-80g",
            ][..],
        ),
    ] {
        let r = run_in(
            &dir,
            &[
                "eval",
                "--calibration",
                given,
                "--params",
                "7B",
                "--nodes",
                "1",
                "--tp",
                "1",
            ],
        );
        assert_one_line_error(
            &r,
            needles,
            &["unknown GPU", "bundled name", "a100-sxm-40g"],
            given,
        );
    }
}

/// `--hf-config`'s help lists the `model_type`s it reads: it left out kimi_k2 and nemotron_h,
/// which the reader takes (and its own error lists).
#[test]
fn hf_config_help_names_every_model_type_it_reads() {
    let r = run(&["plan", "--help"]);
    assert_eq!(r.code, 0);
    let help: String = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = help
        .find("--hf-config <FILE>")
        .expect("--hf-config in help");
    let text = &help[start..start + 400];
    for model_type in ["kimi_k2", "nemotron_h", "glm4_moe", "gpt_oss"] {
        assert!(text.contains(model_type), "{model_type} not in: {text}");
    }
}

/// `validate` runs one dense transformer layer (attention and MLP) and compares it with the
/// model's prediction; on a hybrid stack, whose layers are each a Mamba-2 mixer, attention or an
/// MLP, it compared two different layers without a word (it refuses experts and latent attention
/// for that reason). It now refuses the stack in one line.
#[test]
fn validate_refuses_a_hybrid_stack() {
    let r = run(&[
        "validate",
        "--backend",
        "cpu",
        "--model",
        "nemotron-h-8b",
        "--reps",
        "1",
        "--warmup",
        "0",
    ]);
    assert_one_line_error(
        &r,
        &[
            "nemotron-h-8b has a hybrid Mamba-Transformer stack",
            "validate's layer does not run",
            "validate a dense model",
        ],
        &["panicked", "GiB on the CPU backend"],
        "validate hybrid",
    );
}

/// `plan` pins that leave `--emit nemo` nothing to write are input errors, as `eval --emit nemo`
/// says of its one plan: a pinned ZeRO-3 (NeMo 1.x has no ZeRO-3 optimizer) and pinned
/// selective recompute of modules other than the attention core searched, then exited 1 with
/// "none of the plans that fit can run in NeMo" and reasons of plans the pins never let through.
#[test]
fn plan_pins_nemo_cannot_write_are_input_errors() {
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--emit",
        "nemo",
    ];
    for (extra, needles) in [
        (
            &["--zero", "3"][..],
            &[
                "--emit nemo: --zero 3 has no NeMo 1.x optimizer",
                "pin --zero 0, 1 or 2",
            ][..],
        ),
        (
            &["--reshard-after-forward", "true"][..],
            &[
                "--reshard-after-forward true pins ZeRO-3",
                "pin --zero 0, 1 or 2",
            ][..],
        ),
        (
            &["--recompute", "selective", "--recompute-modules", "mlp"][..],
            &[
                "--emit nemo: --recompute selective of mlp has no NeMo 1.x setting",
                "drop --recompute-modules",
            ][..],
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        assert_one_line_error(
            &run(&args),
            needles,
            &["none of the", "panicked"],
            &format!("{extra:?}"),
        );
    }
    // ZeRO-2 pinned is NeMo's distributed_fused_adam: written.
    let mut args = base.to_vec();
    args.extend_from_slice(&["--zero", "2"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `--tp-comm-overlap` needs sequence parallelism; `eval` refuses it without, and `plan` refused
/// it beside `--tp 1`, but beside a pinned `--sequence-parallel false` it searched and printed
/// plans none of which can use it (and `--emit megatron` then left the flag off the line).
#[test]
fn a_tp_overlap_beside_sequence_parallel_pinned_off_is_refused() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--sequence-parallel",
        "false",
        "--tp-comm-overlap",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--tp-comm-overlap with --sequence-parallel false",
            "needs sequence parallelism",
            "drop --sequence-parallel false or --tp-comm-overlap",
        ],
        &["panicked"],
        "plan sp false with tp overlap",
    );
}

/// A saved plan of a hybrid MoE stack evaluated under `--framework torchtitan` was told to keep
/// `ep: 8` with `zero: 3` (torchtitan's expert-rank rule), a fix that then met the stack's own
/// refusal of torchtitan. The stack's rule comes first now.
#[test]
fn a_hybrid_plan_under_another_framework_names_the_stack_first() {
    let dir = scratch(SUITE, "hybrid-framework");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "nemotron-3-nano-30b-a3b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--ep",
            "8",
            "--zero",
            "1",
            "--save",
            "nano.yaml",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let r = run_in(
        &dir,
        &["eval", "--plan", "nano.yaml", "--framework", "torchtitan"],
    );
    assert_one_line_error(
        &r,
        &[
            "torchtitan with the hybrid Mamba-Transformer model nemotron-3-nano-30b-a3b",
            "use --framework megatron-core",
        ],
        &["zero: 3", "panicked"],
        "eval --plan hybrid --framework torchtitan",
    );
}
