//! Hostile input, round 36: an empty `--hybrid-layer-pattern` in a launch line was told as a
//! `--num-layers 0` never given; `eval --emit nemo` on a hybrid MoE stack offered `--emit
//! megatron-bridge`, which refuses the stack; `--mtp-layers` beside a hybrid line's '/' depths named
//! a `--mtp-num-layers` the line does not have (and the reader refuses); a hybrid line's virtual
//! stages from `--num-layers-per-virtual-pipeline-stage` or a layout were told as
//! `--num-virtual-stages-per-pipeline-rank`; an MoE plan at tp > 1 whose sequence does not split
//! over the TP ranks was told to add the `--sequence-parallel` that is refused in turn; a Nemotron-H
//! config's `n_groups` beside a different `mamba_n_groups` (or `conv_kernel` beside `mamba_d_conv`)
//! dropped one without a word; `plan --vpp 2` on a hybrid stack did not say the stack's rule.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "hostile36";

/// A small hybrid launch line (`PATTERN` replaced), one node, pipeline size 2.
const HYBRID_LINE: &str = "--hybrid-layer-pattern PATTERN --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";

fn eval_line(line: &str, extra: &[&str]) -> Run {
    let mut args = vec!["eval", "--nodes", "1", "--megatron-args", line];
    args.extend_from_slice(extra);
    run(&args)
}

/// A pattern with no symbol before its MTP depths (`''`, `--hybrid-layer-pattern=`, `'/*E'`)
/// said "--num-layers 0 must be at least 1", a flag the line never gave, or for '/*E' "write the
/// depths as /*E", which it did. Each names the pattern and the missing layers.
#[test]
fn an_empty_hybrid_pattern_is_named_as_the_pattern() {
    for (pattern, shown) in [
        ("''", r#"--hybrid-layer-pattern """#),
        ("'/*E'", r#"--hybrid-layer-pattern "/*E""#),
    ] {
        let line = HYBRID_LINE.replace("PATTERN", pattern);
        assert_one_line_error(
            &eval_line(&line, &[]),
            &[
                shown,
                "its main pattern (before any '/' MTP depth) is empty",
                "Megatron-LM takes the layer count from it",
                "e.g. --hybrid-layer-pattern 'M-M*'",
            ],
            &["--num-layers 0", "write the depths as", "panicked"],
            pattern,
        );
    }
    let line = HYBRID_LINE.replace("--hybrid-layer-pattern PATTERN", "--hybrid-layer-pattern=");
    assert_one_line_error(
        &eval_line(&line, &[]),
        &[r#"--hybrid-layer-pattern """#, "main pattern"],
        &["--num-layers 0", "panicked"],
        "--hybrid-layer-pattern=",
    );
}

/// `eval --emit nemo` on a hybrid MoE stack refused its experts first, with "use ... --emit
/// megatron or --emit megatron-bridge", when Megatron-Bridge refused hybrid stacks; `plan --emit
/// nemo` named the stack. Both now name the stack and offer the configurations that carry it
/// (--emit megatron, and since the nineteenth session --emit megatron-bridge).
#[test]
fn emit_nemo_on_a_hybrid_moe_stack_names_the_stack() {
    for command in ["eval", "plan"] {
        let mut args = vec![
            command,
            "--model",
            "nemotron-3-nano-30b-a3b",
            "--nodes",
            "2",
            "--global-batch",
            "64",
            "--emit",
            "nemo",
        ];
        if command == "eval" {
            args.extend(["--tp", "2"]);
        }
        assert_one_line_error(
            &run(&args),
            &[
                "--emit nemo: hybrid Mamba-Transformer models",
                "not written for NeMo yet; use --emit megatron,",
                "or --emit megatron-bridge",
            ],
            &["mixture-of-experts", "panicked"],
            command,
        );
    }
}

/// A hybrid line's MTP depths are its pattern's '/' segments: `--mtp-layers 1` beside two of them
/// said the line "sets --mtp-num-layers 2" and to change that flag, which the line does not have and
/// the reader refuses beside a pattern. The same count, or a line without depths, is taken.
#[test]
fn mtp_layers_beside_a_hybrid_lines_depths_names_the_pattern() {
    let line = HYBRID_LINE.replace("PATTERN", "'M*M-M*M-/*-/*-'").replace(
        "--pipeline-model-parallel-size 2",
        "--pipeline-model-parallel-size 1",
    );
    for (given, fix) in [
        ("1", "write 1 '/' segments in the line's pattern"),
        ("0", "drop the '/' segments from the line's pattern"),
    ] {
        assert_one_line_error(
            &eval_line(&line, &["--mtp-layers", given]),
            &[
                &format!("--mtp-layers {given} contradicts the --megatron-args launch line"),
                "whose --hybrid-layer-pattern has 2 MTP depths ('/' segments)",
                fix,
            ],
            &["--mtp-num-layers", "panicked"],
            given,
        );
    }
    let r = eval_line(&line, &["--mtp-layers", "2", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["model"]["mtp_layers"], 2, "{}", v["model"]);
}

/// Virtual stages a hybrid line makes with `--num-layers-per-virtual-pipeline-stage`, a
/// `--pipeline-model-parallel-layout` or `--num-virtual-stages-per-pipeline-rank` were refused as
/// "--num-virtual-stages-per-pipeline-rank 2", a flag the line does not have. Megatron-LM refuses
/// each beside a hybrid pattern (its stages and virtual stages are the pattern's '|' segments,
/// arguments.py): each is named, with the segments as the fix.
#[test]
fn a_hybrid_lines_virtual_stages_are_named_by_the_flag_given() {
    let line = HYBRID_LINE.replace("PATTERN", "M*M-M*M-");
    for (extra, flag) in [
        (
            "--num-layers-per-virtual-pipeline-stage 2",
            "--num-layers-per-virtual-pipeline-stage with --hybrid-layer-pattern",
        ),
        (
            "--pipeline-model-parallel-layout Et*2|t*2|t*2|t*2L",
            "--pipeline-model-parallel-layout with --hybrid-layer-pattern",
        ),
        (
            "--num-virtual-stages-per-pipeline-rank 2",
            "--num-virtual-stages-per-pipeline-rank with --hybrid-layer-pattern",
        ),
    ] {
        assert_one_line_error(
            &eval_line(&format!("{line} {extra}"), &[]),
            &[flag, "arguments.py", "'|'", "'M*M*|M*M*'"],
            &["panicked"],
            extra,
        );
    }
}

/// An MoE plan at tp > 1 is refused without sequence parallelism; where the sequence does not
/// split over the TP ranks, the default left it off and the refusal said "add
/// --sequence-parallel", which was then refused for the sequence. The fix now names the sequence
/// length, and following it evaluates.
#[test]
fn moe_under_tp_with_a_sequence_sp_cannot_split_names_the_sequence() {
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--nodes",
            "1",
            "--tp",
            "4",
            "--global-batch",
            "8",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    assert_one_line_error(
        &eval(&["--seq-len", "2"]),
        &[
            "--tp 4 without --sequence-parallel on a mixture-of-experts model",
            "each 2-token sequence to split evenly over the 4 tensor-parallel ranks",
            "give a --seq-len that is a multiple of 4 (e.g. --seq-len 4) with --sequence-parallel, or use --tp 1",
        ],
        &["add --sequence-parallel", "panicked"],
        "--seq-len 2 --tp 4",
    );
    // Where the sequence splits, the fix is as before.
    assert_one_line_error(
        &eval(&["--seq-len", "8", "--sequence-parallel", "false"]),
        &["add --sequence-parallel, or use --tp 1"],
        &["multiple of", "panicked"],
        "--sequence-parallel false",
    );
    let r = eval(&["--seq-len", "4", "--sequence-parallel", "--format", "json"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// A Nemotron-H config's saved attribute and its constructor argument for one Mamba setting
/// (`n_groups` / `mamba_n_groups`, `conv_kernel` / `mamba_d_conv`) that disagree: the attribute
/// was taken and the other dropped without a word. Refused naming both; agreeing keys are read.
#[test]
fn a_nemotron_h_configs_two_names_for_one_mamba_setting_must_agree() {
    let dir = scratch(SUITE, "mamba-keys");
    for (extra, needles) in [
        (
            r#", "mamba_n_groups": 4"#,
            &[
                r#"keys "n_groups" 8 and "mamba_n_groups" 4 give different values"#,
                "keep one of them, or make them agree",
            ][..],
        ),
        (
            r#", "conv_kernel": 4, "mamba_d_conv": 3"#,
            &[r#"keys "conv_kernel" 4 and "mamba_d_conv" 3 give different values"#][..],
        ),
    ] {
        assert_one_line_error(
            &eval_hf(&dir, "config.json", &nemotron_h_moe_config(extra)),
            needles,
            &["panicked"],
            extra,
        );
    }
    let r = eval_hf(
        &dir,
        "config.json",
        &nemotron_h_moe_config(r#", "mamba_n_groups": 8, "mamba_d_conv": 4"#),
    );
    assert_eq!(hf_model(&r)["hybrid"]["mamba_groups"], 8, "{}", r.stdout);
}

/// `plan --vpp 2` on a hybrid stack said only that the pin "admits no valid plan ... (the search
/// offers --vpp 1)"; then the stack's rule. Since Megatron-Core 0.17 a hybrid stack's virtual
/// stages are its pattern's '|' segments, which `--emit megatron` writes: the pin is searched
/// (uneven splits allowed: 118 layers fill no pp x 2 chunks evenly).
#[test]
fn plan_vpp_on_a_hybrid_stack_is_searched() {
    for extra in [&["--vpp", "2"][..], &["--pp", "4", "--vpp", "2"][..]] {
        let mut args = vec![
            "plan",
            "--model",
            "nemotron-h-56b",
            "--nodes",
            "8",
            "--global-batch",
            "256",
            "--allow-uneven-pp",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).expect("json");
        let plans = v["plans"].as_array().expect("plans");
        assert!(!plans.is_empty(), "{extra:?}: {v}");
        assert!(plans.iter().all(|p| p["vpp"] == 2), "{extra:?}: {v}");
    }
}
