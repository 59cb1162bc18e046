//! Hostile input, round 13: what probing the newest inputs found: Megatron-LM's model switches
//! pasted into `eval` (`--moe-shared-expert-gate`, `--window-size`), the current-stack runs file's
//! plan and MoE keys, model files with the new MoE keys, and the sequence-length fixes of the
//! context- and sequence-parallel rules. Every error case checks exit 2, one line (so no panic or
//! backtrace) and the words that name the value, the rule and the fix.

mod common;

use common::*;

/// A dense Llama-3-8B-shaped Megatron-LM launch line (no experts).
const DENSE_LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --disable-bias-linear --untie-embeddings-and-output-weights --normalization RMSNorm --position-embedding-type rope --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64 --bf16";

/// `--megatron-args` of a dense line with `--moe-shared-expert-gate` evaluated the dense model
/// without a word: the switch was dropped, where `--moe-router-topk` and the other MoE arguments
/// of a line without `--num-experts` are refused (and `eval --moe-shared-expert-gate` over a
/// dense model is too).
#[test]
fn a_dense_launch_line_with_the_shared_expert_gate_is_refused() {
    let line = format!("{DENSE_LINE} --moe-shared-expert-gate");
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
    assert_one_line_error(
        &r,
        &[
            "--moe-shared-expert-gate without --num-experts",
            "a dense model has no experts",
            "add --num-experts N or drop it",
        ],
        &[],
        "dense line with --moe-shared-expert-gate",
    );
}

/// The bundled GPT-OSS 120B model file with its `from` line (a prefix of the line) replaced by
/// `to`, evaluated on two nodes.
fn eval_gpt_oss_with(name: &str, from: &str, to: &str) -> Run {
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-120b.yaml")).unwrap();
    let at = text
        .find(from)
        .unwrap_or_else(|| panic!("the model has {from:?}"));
    let end = at + text[at..].find('\n').unwrap();
    let dir = scratch("round13", name);
    std::fs::write(
        dir.join("m.yaml"),
        format!("{}{to}{}", &text[..at], &text[end..]),
    )
    .unwrap();
    run_in(
        &dir,
        &[
            "eval",
            "--model",
            "m.yaml",
            "--nodes",
            "2",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
        ],
    )
}

/// A model file's `moe: shared_expert_gate: true` without shared experts evaluated as if the
/// key were not there: a gate on nothing, said nowhere (the flag and the launch line refuse it).
#[test]
fn a_model_file_gate_without_shared_experts_is_refused() {
    let r = eval_gpt_oss_with(
        "gate-no-shared",
        "  glu_clamp_limit: 7.0",
        "  glu_clamp_limit: 7.0\n  shared_expert_gate: true",
    );
    assert_one_line_error(
        &r,
        &[
            "m.yaml",
            "moe.shared_expert_gate",
            "no shared experts",
            "moe.shared_expert_ffn_hidden",
        ],
        &["--moe"],
        "shared_expert_gate without shared experts",
    );
}

/// A model file's `moe: glu_clamp_limit` with `gated_mlp: false` priced the clamp of a gated
/// activation's two halves on experts that have no such halves.
#[test]
fn a_model_file_clamped_glu_without_a_gated_mlp_is_refused() {
    let r = eval_gpt_oss_with("clamp-no-glu", "gated_mlp: true", "gated_mlp: false");
    assert_one_line_error(
        &r,
        &[
            "m.yaml",
            "moe.glu_clamp_limit",
            "gated_mlp: false",
            "gated_mlp: true",
        ],
        &["--"],
        "clamped_glu with gated_mlp false",
    );
    // The bundled file as it is still evaluates.
    let r = eval_gpt_oss_with("clamp-glu", "gated_mlp: true", "gated_mlp: true");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// The bundled current-stack runs file cut to its header and the run `id`, each `(from, to)`
/// applied to that run's lines once.
fn modern_run(id: &str, edits: &[(&str, &str)]) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let runs_at = text.find("\nruns:\n").expect("a runs: key") + "\nruns:\n".len();
    let start = runs_at
        + text[runs_at..]
            .find(&format!("- id: {id}\n"))
            .unwrap_or_else(|| panic!("a run {id}"));
    let end = text[start + 2..]
        .find("\n- id:")
        .map_or(text.len(), |i| start + 2 + i + 1);
    let mut run = text[start..end].to_string();
    for (from, to) in edits {
        assert!(run.contains(from), "{id} has {from:?}");
        run = run.replacen(from, to, 1);
    }
    format!("{}{run}", &text[..runs_at])
}

const GPT_OSS_RUN: &str = "mbridge-25.11-pretrain-gpt_oss_120b-gb300-64g-bf16-gbs1280";
const LLAMA_RUN: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-mxfp8-alt-gbs128";

fn accuracy_of(name: &str, text: &str, format: &str) -> Run {
    let dir = scratch("round13", name);
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    run_in(
        &dir,
        &["accuracy", "--runs", "runs.yaml", "--format", format],
    )
}

/// A current-stack run's `model.moe` was read only as "not null": `clamped_glu: 1`, a misspelt
/// key, or `experts: 64` for the 128-expert GPT-OSS 120B were all accepted and the bundled
/// model's numbers used in their place without a word.
#[test]
fn a_current_stack_runs_moe_keys_are_read_or_refused() {
    for (name, to, words) in [
        (
            "clamped",
            "      shared_experts: 0\n      clamped_glu: 1",
            &[
                "model.moe.clamped_glu",
                "experts, topk, expert_ffn_hidden, shared_experts, moe_layers",
                "models/gpt-oss-120b.yaml",
            ][..],
        ),
        (
            "typo",
            "      shared_experts: 0\n      expert: 128",
            &["model.moe.expert", "remove it"][..],
        ),
    ] {
        let text = modern_run(GPT_OSS_RUN, &[("      shared_experts: 0", to)]);
        let r = accuracy_of(name, &text, "table");
        assert_one_line_error(&r, words, &[], name);
    }
    for (from, to, words) in [
        (
            "      experts: 128",
            "      experts: 64",
            &[
                "model.moe.experts: 64",
                "128",
                "gpt-oss-120b",
                "e.g. experts: 128",
            ][..],
        ),
        (
            "      topk: 4",
            "      topk: 99",
            &["model.moe.topk: 99", "e.g. topk: 4"][..],
        ),
        (
            "      expert_ffn_hidden: 2880",
            "      expert_ffn_hidden: 1",
            &[
                "model.moe.expert_ffn_hidden: 1",
                "e.g. expert_ffn_hidden: 2880",
            ][..],
        ),
        (
            "      shared_experts: 0",
            "      shared_experts: 2",
            &["model.moe.shared_experts: 2", "e.g. shared_experts: 0"][..],
        ),
        (
            "      moe_layers: 36",
            "      moe_layers: 35",
            &["model.moe.moe_layers: 35", "e.g. moe_layers: 36"][..],
        ),
        (
            "      moe_layers: 36",
            "      moe_layers: -1",
            &["model.moe.moe_layers: -1", "e.g. moe_layers: 36"][..],
        ),
    ] {
        let text = modern_run(GPT_OSS_RUN, &[(from, to)]);
        let r = accuracy_of(to.trim(), &text, "table");
        assert_one_line_error(&r, words, &["--"], to);
    }
    // Null keys say nothing, and the bundled runs still read.
    let text = modern_run(GPT_OSS_RUN, &[("      topk: 4", "      topk: null")]);
    let r = accuracy_of("null", &text, "table");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The note of a current-stack run whose published plan tpsim cannot build.
fn plan_note(name: &str, edits: &[(&str, &str)]) -> String {
    let r = accuracy_of(name, &modern_run(LLAMA_RUN, edits), "json");
    assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    let rows: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let note = rows
        .as_array()
        .and_then(|rows| rows.first())
        .map(|row| row["note"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("{name}: {}", r.stdout));
    assert!(
        note.contains("not a valid plan for tpsim"),
        "{name}: {note}"
    );
    note
}

/// A current-stack run whose published plan breaks a rule was said in `eval`'s flags (`--tp 3
/// does not divide ...`, `--global-batch 128 is not divisible by --dp 8 x --micro-batch 3`,
/// `give a --seq-len that is a multiple of 8`): a runs file has no flags, and the keys to change
/// are `plan.tp`, `plan.gbs`, `plan.mbs`, `model.seq_len`.
#[test]
fn a_current_stack_runs_plan_errors_name_the_files_keys() {
    for (name, edits, words) in [
        (
            "tp3",
            &[("    tp: 1", "    tp: 3"), ("num_gpus: 8", "num_gpus: 24")][..],
            &["plan.tp: 3 does not divide 32 attention heads"][..],
        ),
        (
            "mbs3",
            &[("    mbs: 2", "    mbs: 3")][..],
            &["plan.gbs: 128 is not divisible by plan.dp: 8 x plan.mbs: 3"][..],
        ),
        (
            "cp4",
            &[
                ("    seq_len: 8192", "    seq_len: 8190"),
                ("    cp: 1", "    cp: 4"),
                ("    dp: 8", "    dp: 2"),
                ("    ga: 8", "    ga: 32"),
            ][..],
            &[
                "plan.cp: 4 does not split",
                "model.seq_len that is a multiple of 8",
            ][..],
        ),
        (
            "vp5",
            &[
                ("    pp: 1", "    pp: 8"),
                ("    dp: 8", "    dp: 1"),
                ("    ga: 8", "    ga: 64"),
                ("    vp: null", "    vp: 5"),
            ][..],
            // Unequal chunks run any vp up to the stage's layers (tests/hostile_round39.rs).
            &[
                "plan.vp: 5 cuts each stage's 4 layers into 5 model chunks",
                "give plan.vp: 4 or fewer",
            ][..],
        ),
        (
            "ep2",
            &[("    ep: 1", "    ep: 2")][..],
            &["plan.ep: 2", "use plan.ep: 1"][..],
        ),
    ] {
        let note = plan_note(name, edits);
        for word in words {
            assert!(note.contains(word), "{name}: no {word:?} in: {note}");
        }
        assert!(!note.contains("--"), "{name}: a flag in: {note}");
    }
}

/// The context-parallel and sequence-parallel rules offered a sequence length past the 16M
/// tokens tpsim accepts (`e.g. --seq-len 16777218`), which the next run refused as "larger than
/// 16777216": the fix now offers the nearest length that both rules and the bound allow.
#[test]
fn a_sequence_length_fix_stays_within_the_bound() {
    for (seq_len, sp, offered) in [
        ("16777215", false, "e.g. --seq-len 16777212"),
        ("16777212", true, "e.g. --seq-len 16777200"),
    ] {
        let mut args = vec![
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "3",
            "--tp",
            "8",
            "--cp",
            "3",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--seq-len",
            seq_len,
        ];
        if sp {
            args.push("--sequence-parallel");
        }
        let r = run(&args);
        assert_one_line_error(&r, &[offered], &["16777218", "16777224"], seq_len);
    }
}

/// A plan file's sequence-parallel error named the file's key in its example but not in its
/// rule: "give a --seq-len that is a multiple of 8 (e.g. seq_len: 2048)".
#[test]
fn a_plan_files_sequence_fix_names_its_key_throughout() {
    let dir = scratch("round13", "plan-sp");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml"))
        .unwrap()
        .replace("seq_len: 2048", "seq_len: 2047");
    std::fs::write(dir.join("p.yaml"), plan).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &["give a seq_len that is a multiple of 8 (e.g. seq_len: 2048)"],
        &["--seq-len"],
        "plan file seq_len 2047",
    );
    // Typed over the file, the flag stays the flag.
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--seq-len", "2050"]);
    assert_one_line_error(
        &r,
        &["give a --seq-len that is a multiple of 8 (e.g. --seq-len 2056)"],
        &[],
        "--seq-len 2050 over the file",
    );
}

/// `--window-size "(4294967296,0)"` said "is not a pair of non-negative integers", which it is:
/// the window is past the longest sequence, and the message now says so.
#[test]
fn a_window_past_any_sequence_is_named_as_such() {
    for text in ["(4294967296,0)", "(99999999999999999999,0)"] {
        let r = run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--window-size",
            text,
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("--window-size {text}"),
                "longer than any sequence tpsim plans",
            ],
            &["not a pair"],
            text,
        );
    }
}
