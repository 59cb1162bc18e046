//! Hostile input, round 10b: degenerate but valid clusters and models, MoE and context-parallel
//! edge cases, pins and the closest-miss line of `plan`, and spec files. Every error case checks
//! exit 2, one line (so no panic or backtrace) and the words that name the value, the rule and
//! the fix.

mod common;

use common::*;

/// `plan --cp 2 --seq-len 4097` said only "--cp 2 admits no valid plan (the search offers --cp 1)",
/// without the rule `eval` names: the sequence must split into 2·cp equal chunks. Both commands now
/// name the rule and the fix (a --seq-len that splits).
#[test]
fn a_cp_pin_that_cannot_split_the_sequence_names_the_rule_in_plan() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--cp",
        "2",
        "--seq-len",
        "4097",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp 2 does not split the 4097-token sequence into 2 x cp equal chunks",
            "valid: 1",
            "a multiple of 4 (e.g. --seq-len 4100)",
        ],
        &["admits no valid plan"],
        "plan --cp 2 --seq-len 4097",
    );
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "4",
        "--pp",
        "1",
        "--cp",
        "2",
        "--seq-len",
        "4098",
    ]);
    assert_one_line_error(
        &r,
        &["4098-token sequence", "(e.g. --seq-len 4100)"],
        &[],
        "eval --cp 2 --seq-len 4098",
    );
}

/// `plan --tp 2 --etp 4` on an MoE model said the two pins "each admit valid plans but not
/// together" and sent the user to `eval`, which evaluates that very plan (Megatron-Core folds
/// ep x etp into the stage's GPUs, whatever tp is). The search tried etp 1 and etp = tp only; a
/// pinned etp is now searched too.
#[test]
fn a_pinned_expert_tp_other_than_tp_is_searched() {
    // Llama-style, without biases: Megatron-Core splits biased (GPT-style) experts over no
    // expert-TP ranks.
    let moe = [
        "--style",
        "llama",
        "--layers",
        "8",
        "--hidden",
        "2048",
        "--heads",
        "16",
        "--num-experts",
        "8",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--format",
        "json",
    ];
    for (tp, etp) in [("2", "4"), ("1", "2")] {
        let mut args = vec!["plan"];
        args.extend(moe);
        args.extend(["--tp", tp, "--etp", etp]);
        let r = run(&args);
        assert_eq!(r.code, 0, "--tp {tp} --etp {etp}: {}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        let plans = v["plans"].as_array().unwrap();
        assert!(!plans.is_empty());
        for p in plans {
            assert_eq!(p["tp"].to_string(), tp, "{p}");
            assert_eq!(p["etp"].to_string(), etp, "{p}");
        }
    }
}

/// When nothing fits, the closest-miss line offered "or add --allow-uneven-pp (deeper pipelines
/// than the 32 layers split evenly)" on 8 GPUs and 32 layers (and on 1 GPU), where every pipeline
/// the GPUs allow already splits the layers evenly: the flag changes nothing. It is now offered
/// only where it lets a plan fit or miss by less.
#[test]
fn the_closest_miss_offers_uneven_pipelines_only_where_they_help() {
    for args in [
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--seq-len",
            "1048576",
            "--global-batch",
            "1",
        ][..],
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--global-batch",
            "1",
        ][..],
    ] {
        let r = run(args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("nothing fits: closest:"), "{}", r.stderr);
        assert!(!r.stderr.contains("--allow-uneven-pp"), "{}", r.stderr);
    }
    // 7 layers on 16 GPUs: pp 2 splits them 4 + 3 and misses by far less than pp 1.
    let shape = [
        "plan",
        "--layers",
        "7",
        "--hidden",
        "32768",
        "--heads",
        "128",
        "--nodes",
        "2",
        "--global-batch",
        "8",
        "--seq-len",
        "8192",
        "--zero",
        "0",
    ];
    let r = run(&shape);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("or add --allow-uneven-pp (deeper pipelines than the 7 layers"),
        "{}",
        r.stderr
    );
    let mut widened = shape.to_vec();
    widened.push("--allow-uneven-pp");
    let r = run(&widened);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("pp 2"), "{}", r.stderr);
}

/// Two pins that break one of the plan's own rules together (`--vpp 2 --pp 1`, `--sequence-parallel
/// --tp 1`, `--framework deepspeed --zero 3 --pp 2`) got "the pins ... each admit valid plans but
/// not together" and a pointer to `eval`: no rule, no fix. The rule and the fix are now named.
#[test]
fn two_pins_that_break_a_rule_together_name_it() {
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "64",
    ];
    for (pins, words) in [
        (
            &["--vpp", "2", "--pp", "1"][..],
            &["--vpp 2 with --pp 1", "pin --pp 2 or more, or drop --vpp"][..],
        ),
        (
            &["--sequence-parallel", "--tp", "1"][..],
            &[
                "--sequence-parallel with --tp 1",
                "pin --tp 2 or more, or drop --sequence-parallel",
            ][..],
        ),
        (
            &["--framework", "deepspeed", "--zero", "3", "--pp", "2"][..],
            &[
                "--zero 3 with --pp 2",
                "deepspeed runs at most ZeRO-1 with pipelines",
                "pin --zero 1 or --pp 1",
            ][..],
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(pins);
        let r = run(&args);
        assert_one_line_error(&r, words, &["not together"], &pins.join(" "));
    }
}

/// `plan --tp 8 --pp 2` on 8 GPUs said the pins "each admit valid plans but not together"; the
/// rule they break is the GPU count, which is now named with the product.
#[test]
fn pinned_degrees_whose_product_misses_the_gpu_count_name_it() {
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ];
    for (pins, words) in [
        (
            &["--tp", "8", "--pp", "2"][..],
            &[
                "--tp 8 x --pp 2 make 16 GPUs, which does not divide the 8 GPUs",
                "tp x cp x pp x dp = GPUs",
                "or change --nodes",
            ][..],
        ),
        (
            &["--tp", "2", "--cp", "1", "--pp", "2", "--dp", "1"][..],
            &["make 4 GPUs, which is not the 8 GPUs"][..],
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(pins);
        let r = run(&args);
        assert_one_line_error(&r, words, &["not together"], &pins.join(" "));
    }
}

/// A whole-number key written with a decimal point or an exponent (`layers: 4.5`, `layers: 4.0`,
/// `tp: 2.0` in a plan file, `hidden: 1e20`) got serde's type error alone: no fix. The whole
/// number to write is now named (or that the value is past the key's range).
#[test]
fn a_whole_number_key_with_a_decimal_point_names_the_number_to_write() {
    let dir = scratch("round10b", "fractional");
    let shape = "name: m\nlayers: 4\nhidden: 1024\nheads: 8\nffn_hidden: 4096\nvocab: 32000\nseq_len: 2048\n";
    for (from, to, words) in [
        (
            "layers: 4",
            "layers: 4.5",
            &[
                "layers: invalid type: floating point `4.5`",
                "write layers: 4 or layers: 5",
            ][..],
        ),
        (
            "layers: 4",
            "layers: 4.0",
            &["without a decimal point or exponent (layers: 4)"][..],
        ),
        (
            "layers: 4",
            "layers: 0.5",
            &["layers takes a whole number, 1 or more: write layers: 1"][..],
        ),
        (
            "hidden: 1024",
            "hidden: 1e20",
            // Since leftovers round 37 the key's own bound (`model::shape_bound`), not its
            // integer type's range, with a value that passes.
            &[
                "hidden: 1e20 is larger than 1048576",
                "give at most 1048576, e.g. hidden: 16384",
            ][..],
        ),
    ] {
        std::fs::write(dir.join("m.yaml"), shape.replace(from, to)).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
            ],
        );
        assert_one_line_error(&r, words, &[], to);
    }
    std::fs::write(
        dir.join("p.yaml"),
        bundled_plan_with("  tp: 8", "  tp: 8.0"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(&r, &["(tp: 8)"], &[], "tp: 8.0");
}

/// `--kv-heads 3` over 32 heads and `--pp 64` over 32 layers named the value and the rule but no
/// fix; each now names the value to give.
#[test]
fn kv_heads_and_pipeline_depth_errors_name_a_value_to_give() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--kv-heads",
        "3",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--kv-heads 3 must divide --heads 32",
            "give a divisor of 32, e.g. --kv-heads 2",
        ],
        &[],
        "--kv-heads 3",
    );
    let dir = scratch("round10b", "kv-heads");
    std::fs::write(
        dir.join("m.yaml"),
        "name: m\nlayers: 4\nhidden: 1024\nheads: 8\nkv_heads: 3\nffn_hidden: 4096\nvocab: 32000\nseq_len: 2048\n",
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &["kv_heads: 3", "e.g. kv_heads: 2"],
        &["--kv-heads"],
        "file",
    );
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "8",
        "--tp",
        "1",
        "--pp",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--pp 64 is larger than the model's 32 layers",
            "give --pp 32 or fewer",
        ],
        &[],
        "--pp 64",
    );
}

/// `--num-experts 1` on a dense shape said "--moe-router-topk 2 is more than --num-experts 1",
/// a flag the user never typed (Megatron's default top-k), and `--num-experts 4` over Qwen3's
/// top-8 named the model's top-k as a flag too. The top-k is now said to be the default or the
/// model's, with the fix.
#[test]
fn fewer_experts_than_a_top_k_not_given_names_where_it_came_from() {
    let dense = [
        "plan",
        "--layers",
        "8",
        "--hidden",
        "2048",
        "--heads",
        "16",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--num-experts",
        "1",
    ];
    let r = run(&dense);
    assert_one_line_error(
        &r,
        &[
            "--num-experts 1 is fewer than Megatron's default --moe-router-topk 2",
            "give --moe-router-topk 1 or less with it",
        ],
        &["--moe-router-topk 2 is more than"],
        "--num-experts 1",
    );
    let mut with_topk = dense.to_vec();
    with_topk.extend(["--moe-router-topk", "1", "--top", "1"]);
    assert_eq!(run(&with_topk).code, 0);
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--num-experts",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "fewer than the model's --moe-router-topk 8",
            "--moe-router-topk 4 or less",
        ],
        &[],
        "--num-experts 4 over top-8",
    );
}
