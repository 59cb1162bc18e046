//! Hostile input, round 39, on the session's unequal model chunks, torchtitan MoE recipes and
//! context parallelism in hybrid stacks: a `--vpp` above a stage's layers was refused as one that
//! "does not divide" the stage with the divisors as the valid values, though the vpp 3, 6, 7 ...
//! that list left out run (unequal chunks); a model named from a file such as `q"x.json` was
//! written into the torchtitan recipe as `"q"x"`, which Python does not parse; a stray symbol in
//! a '|'-cut hybrid pattern was counted as a layer and the cut (or --num-layers) refused for it;
//! `--num-virtual-stages-per-pipeline-rank` past a stage's layers offered a layout from an eval
//! that refuses it; under torchtitan an --ep past the stage was told Megatron-Core's "give --etp",
//! and under Megatron-Core an --ep no expert TP can fold was told to give one, with no --ep named.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile39";

/// Llama 3 70B on 128 H100s at tp 8 x pp 4: 20 layers per stage.
const LLAMA3_70B_PP4: [&str; 13] = [
    "--model",
    "llama3-70b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "16",
    "--tp",
    "8",
    "--pp",
    "4",
    "--global-batch",
    "512",
    "--sequence-parallel",
];

fn eval_llama(extra: &[&str]) -> Run {
    let mut args = vec!["eval"];
    args.extend_from_slice(&LLAMA3_70B_PP4);
    args.extend_from_slice(extra);
    run(&args)
}

/// Under megatron-core and torchtitan a stage of 20 layers takes any vpp up to 20 (vpp 3 as
/// chunks of 7, 7 and 6); vpp 21 was refused as not dividing 20 with "valid: 1, 2, 4, 5, 10, 20",
/// which names the wrong rule and leaves out the vpp 3, 6, 7, ... that run. It now names the rule
/// (a chunk per layer at most) and the range, from the flag and from a plan file alike.
/// megatron-lm-2021, which cannot cut unequal chunks, keeps the divisors.
#[test]
fn a_vpp_past_the_stage_layers_names_the_range_unequal_chunks_take() {
    for framework in ["megatron-core", "torchtitan"] {
        assert_one_line_error(
            &eval_llama(&["--vpp", "21", "--framework", framework, "--zero", "3"]),
            &[
                "--vpp 21",
                "20 layers into 21 model chunks, more than it has layers",
                &format!("{framework} takes chunks of unequal size"),
                "give --vpp 20 or fewer, valid: 1 to 20",
            ],
            &["does not divide", "1, 2, 4, 5, 10, 20", "panicked"],
            framework,
        );
        // Every vpp in that range is taken: 7 (unequal) and 20 (one layer a chunk); exit 1 is
        // a plan that is priced but does not fit.
        for vpp in ["7", "20"] {
            let r = eval_llama(&["--vpp", vpp, "--framework", framework, "--zero", "3"]);
            assert!(
                (r.code == 0 || r.code == 1) && r.stdout.contains(&format!("(vpp {vpp})")),
                "{framework} vpp {vpp}: {}",
                r.stderr
            );
        }
    }
    // The same from a saved plan, in the file's words.
    let dir = scratch(SUITE, "vpp-past-stage");
    let saved = dir.join("plan.yaml");
    let saved = saved.to_str().unwrap();
    let mut args = vec!["plan"];
    args.extend_from_slice(&LLAMA3_70B_PP4);
    args.extend_from_slice(&["--vpp", "3", "--top", "1", "--save", saved]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(saved).unwrap();
    assert!(text.contains("  vpp: 3\n"), "{text}");
    std::fs::write(saved, text.replace("  vpp: 3\n", "  vpp: 21\n")).unwrap();
    assert_one_line_error(
        &run(&["eval", "--plan", saved]),
        &["vpp: 21 in", "give vpp: 20 or fewer, valid: 1 to 20"],
        &["does not divide", "panicked"],
        "plan file",
    );
    // Without unequal chunks the divisors are the rule.
    assert_one_line_error(
        &eval_llama(&["--vpp", "21", "--framework", "megatron-lm-2021"]),
        &["does not divide the 20 layers", "valid: 1, 2, 4, 5, 10, 20"],
        &["panicked"],
        "megatron-lm-2021",
    );
}

/// A model named from its file's name (`q"x.json`, `l"x.json`) was written into the torchtitan
/// recipe as `qwen3_configs["q"x"]` and `model_registry("l"x")`: Python refuses the file. The name
/// is now a Python string literal with the quote escaped, in the MoE flavor's registration, the
/// `model_registry` call, and the dense note that says which key to add.
#[test]
fn a_model_name_with_a_quote_is_escaped_in_the_torchtitan_recipe() {
    let dir = scratch(SUITE, "quoted-name");
    let moe = dir.join("q\"x.json");
    std::fs::copy(format!("{ROOT}/models/hf/qwen3-30b-a3b.json"), &moe).unwrap();
    let moe = moe.to_str().unwrap();
    // 24 layers: no shipped qwen3 flavor, so the recipe registers its own under the model's name.
    let r = run(&[
        "eval",
        "--hf-config",
        moe,
        "--layers",
        "24",
        "--gpu",
        "h100-sxm-80g",
        "--framework",
        "torchtitan",
        "--zero",
        "3",
        "--emit",
        "torchtitan",
        "--nodes",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "8",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(r#"qwen3.qwen3_configs["q\"x"] = _tpsim_flavor"#),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("        \"q\\\"x\",\n"), "{}", r.stdout);
    assert!(!r.stdout.contains(r#""q"x""#), "{}", r.stdout);

    let dense = dir.join("l\"x.json");
    std::fs::copy(format!("{ROOT}/models/hf/llama-3-8b.json"), &dense).unwrap();
    let dense = dense.to_str().unwrap();
    let r = run(&[
        "eval",
        "--hf-config",
        dense,
        "--layers",
        "16",
        "--gpu",
        "h100-sxm-80g",
        "--framework",
        "torchtitan",
        "--zero",
        "3",
        "--emit",
        "torchtitan",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "8",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(r#"config.model_spec = model_registry("l\"x")"#),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(r#"add "l\"x" to llama3_configs"#),
        "{}",
        r.stderr
    );
}

/// Nemotron-H 8B at pp 2 x vpp 3 as `--emit megatron` cuts it: six segments of 9/9/9/9/8/8.
const NEMOTRON_H_8B_SEGMENTS: &str = "M-M-M-M*-|M-M-M-M-M|*-M-M-M-M|-M*-M-M-M|-M-M*-M-|M-M-M-M-";

fn eval_hybrid_segments(pattern: &str) -> Run {
    let line = format!(
        "--num-layers 52 --hidden-size 4096 --num-attention-heads 32 --group-query-attention \
         --num-query-groups 8 --ffn-hidden-size 21504 --squared-relu --normalization RMSNorm \
         --position-embedding-type none --untie-embeddings-and-output-weights \
         --disable-bias-linear --hybrid-layer-pattern '{pattern}' --mamba-num-heads 128 \
         --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8 --seq-length 8192 \
         --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 16 \
         --tensor-model-parallel-size 2 --context-parallel-size 2 \
         --pipeline-model-parallel-size 2 --use-distributed-optimizer --bf16 --vocab-size 131072"
    );
    run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--megatron-args",
        &line,
    ])
}

/// A symbol no block prices (a stray space, an 'x', a gated DeltaNet 'G') in a '|'-cut hybrid
/// pattern was counted as a layer by the segment check, which then refused the cut: "the
/// segments between the first and the last hold different numbers of layers (10/9/9/9/8/8) ...
/// cut the pattern as `tpsim eval ... --emit megatron` writes it", naming neither the symbol nor
/// its fix. The symbol is now named first, in the words a pattern without '|' gets.
#[test]
fn an_unpriced_symbol_in_a_cut_hybrid_pattern_is_named_before_the_segments() {
    for (pattern, symbol) in [
        (format!(" {NEMOTRON_H_8B_SEGMENTS}"), "' '"),
        (format!("x{NEMOTRON_H_8B_SEGMENTS}"), "'x'"),
        (
            NEMOTRON_H_8B_SEGMENTS.replacen("M-M-M-M*-", "M-M-M-MG-", 1),
            "'G' (a gated DeltaNet layer)",
        ),
    ] {
        assert_one_line_error(
            &eval_hybrid_segments(&pattern),
            &[
                &format!("has the symbol {symbol}"),
                "rule: M Mamba-2, * attention, - MLP, E MoE, one per layer",
                "write the pattern with those symbols only",
            ],
            &["hold different numbers of layers", "panicked"],
            &pattern,
        );
    }
    // The same cut without the stray symbol is read, unequal chunks and all.
    let r = eval_hybrid_segments(NEMOTRON_H_8B_SEGMENTS);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("(vpp 3)"), "{}", r.stdout);
}

/// Megatron-LM's line for Llama 3 70B on pp 4 (20 layers a stage), with `extra` appended.
fn llama3_70b_line(extra: &str) -> String {
    format!(
        "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --group-query-attention \
         --num-query-groups 8 --ffn-hidden-size 28672 --swiglu --normalization RMSNorm \
         --position-embedding-type rope --untie-embeddings-and-output-weights \
         --disable-bias-linear --seq-length 8192 --max-position-embeddings 8192 \
         --micro-batch-size 1 --global-batch-size 512 --tensor-model-parallel-size 8 \
         --pipeline-model-parallel-size 4 --sequence-parallel --use-distributed-optimizer \
         --bf16 --vocab-size 128256 {extra}"
    )
}

/// `--num-virtual-stages-per-pipeline-rank 21` on stages of 20 layers was told to give "the
/// unequal chunks as a --pipeline-model-parallel-layout, which `tpsim eval ... --vpp 21 --emit
/// megatron` writes", and that eval refuses vpp 21 (a chunk without a layer). Past the stage's
/// layers the divisors alone are offered, with why no layout helps; at vpp 3 the layout is still
/// offered, and the eval it names writes it.
#[test]
fn virtual_stages_past_the_stage_layers_offer_no_layout_that_eval_refuses() {
    let eval = |extra: &str| {
        run(&[
            "eval",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "16",
            "--megatron-args",
            &llama3_70b_line(extra),
        ])
    };
    let r = eval("--num-virtual-stages-per-pipeline-rank 21");
    assert_one_line_error(
        &r,
        &[
            "--num-virtual-stages-per-pipeline-rank 21",
            "give one of 1, 2, 4, 5, 10, 20",
            "no layout cuts a stage of 20 layers into 21 chunks",
        ],
        &["--vpp 21 --emit megatron", "panicked"],
        "vpp 21",
    );
    // The fix it once offered is refused.
    let offered = eval_llama(&["--vpp", "21", "--emit", "megatron"]);
    assert_eq!(offered.code, 2, "{}", offered.stderr);
    // vpp 3 keeps the layout, which the named eval writes.
    assert_one_line_error(
        &eval("--num-virtual-stages-per-pipeline-rank 3"),
        &["--pipeline-model-parallel-layout, which `tpsim eval ... --vpp 3 --emit megatron`"],
        &["panicked"],
        "vpp 3",
    );
    let written = eval_llama(&["--vpp", "3", "--zero", "1", "--emit", "megatron"]);
    assert!(written.code == 0 || written.code == 1, "{}", written.stderr);
    assert!(
        written
            .stdout
            .contains("--pipeline-model-parallel-layout 'Et*7|"),
        "{}",
        written.stdout
    );
}

/// Under `--framework torchtitan` an --ep the stage's GPUs do not hold was refused in
/// Megatron-Core's words: "over which Megatron-Core folds the experts (--etp defaults to --tp, as
/// in Megatron-Core); give --etp with ep x etp dividing 4", and torchtitan refuses every --etp
/// but 1 at ep > 1. torchtitan's own rule (EP ranks from dp_shard x cp x tp) now comes first, with
/// the --ep values it takes; Megatron-Core keeps its folding words.
#[test]
fn an_ep_past_the_stage_under_torchtitan_is_told_in_torchtitans_words() {
    let eval = |framework: &str, tp: &str, zero: &str| {
        run(&[
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "2",
            "--tp",
            tp,
            "--ep",
            "8",
            "--pp",
            "4",
            "--global-batch",
            "256",
            "--framework",
            framework,
            "--zero",
            zero,
        ])
    };
    for tp in ["1", "2"] {
        assert_one_line_error(
            &eval("torchtitan", tp, "3"),
            &[
                "--ep 8 under --framework torchtitan",
                "ep must divide dp_shard x cp x tp",
                "valid --ep here: 1, 2, 4",
            ],
            &["Megatron-Core", "--etp", "panicked"],
            &format!("torchtitan tp {tp}"),
        );
    }
    // A value it offers is taken.
    let r = run(&[
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--ep",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "256",
        "--framework",
        "torchtitan",
        "--zero",
        "3",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert_one_line_error(
        &eval("megatron-core", "2", "1"),
        &["over which Megatron-Core folds the experts"],
        &["panicked"],
        "megatron-core",
    );
}

/// Under Megatron-Core an --ep that alone does not divide the stage's GPUs (ep 8 on a stage of 4)
/// was told "give --etp with ep x etp dividing 4, or another --ep": no --etp can help, and no --ep
/// was named. It now says so and lists the --ep values that fold at the expert TP in force; where
/// an --etp does help (ep 4 x tp 2 on 4 GPUs) both fixes stay, with the values, and each works.
#[test]
fn an_ep_no_expert_tp_can_fold_offers_the_ep_values_that_do() {
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "2",
            "--pp",
            "4",
            "--global-batch",
            "256",
            "--framework",
            "megatron-core",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    for (tp, valid) in [("1", "1, 2, 4"), ("2", "1, 2")] {
        assert_one_line_error(
            &eval(&["--tp", tp, "--ep", "8"]),
            &[
                "--ep 8 does not divide the 4 GPUs of a pipeline stage",
                "so no --etp fits it beside them",
                &format!("give another --ep, valid with the expert TP at --tp {tp}"),
                &format!("Megatron-Core): {valid}"),
            ],
            &["give --etp", "--etp 1 ", "--etp 2 ", "panicked"],
            &format!("tp {tp}"),
        );
    }
    assert_one_line_error(
        &eval(&["--tp", "2", "--ep", "4"]),
        &[
            "give --etp with ep x etp dividing 4",
            "(valid with the expert TP at --tp 2: 1, 2)",
        ],
        &["--etp 2", "panicked"],
        "ep 4 x tp 2",
    );
    // A typed --etp keeps the core's words, with the --ep values that fold beside it.
    assert_one_line_error(
        &eval(&["--tp", "2", "--ep", "2", "--etp", "4"]),
        &[
            "--ep 2 x --etp 4 does not divide",
            "with --etp 4, valid --ep: 1",
        ],
        &["panicked"],
        "ep 2 x etp 4",
    );
    for fix in [
        &["--tp", "2", "--ep", "2"][..],
        &["--tp", "2", "--ep", "4", "--etp", "1"][..],
        &["--tp", "1", "--ep", "4"][..],
    ] {
        let r = eval(fix);
        assert!(r.code == 0 || r.code == 1, "{fix:?}: {}", r.stderr);
    }
}
