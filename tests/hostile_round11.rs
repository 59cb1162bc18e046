//! Hostile input, round 11: round 10's leftovers (a token count quoted as tpsim reads it, a
//! too-long sequence named by a key the file does not have or a flag the sweep refuses, a
//! published-runs number past its type with no fix, `plan --ep` on a dense model, an all-dense
//! `--moe-layer-freq` list, zero counts quoted as `--vocab = 0`) and what probing `--hf-config`
//! files found. Every error case checks exit 2, one line (so no panic or backtrace) and the
//! words that name the value, the rule and the fix.

mod common;

use common::*;

/// `--tokens 0.5` said "--tokens 0.5: 5e-1 is less than one token", quoting a number the user
/// never typed beside the one they did; `--tokens 1e20` said "1e20: 1e20 tokens".
#[test]
fn a_token_count_is_quoted_only_as_typed() {
    for (typed, rule, absent) in [
        ("0.5", "--tokens 0.5 is less than one token", "5e-1"),
        (
            "0.0000000001B",
            "--tokens 0.0000000001B is less than one token",
            "e-1",
        ),
        (
            "100000T",
            "--tokens 100000T is more than 1e16 tokens",
            "1e17",
        ),
    ] {
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
            "--tokens",
            typed,
        ]);
        assert_one_line_error(
            &r,
            &[rule, "e.g. --tokens 300B"],
            &[absent, &format!("{typed}:")],
            typed,
        );
    }
}

/// A plan file with `params: 7B` and a top-level `seq_len: 10000000` was told "give a shorter
/// model.seq_len", a key it does not have; the fix now names the key the file has (or
/// `--seq-len` when the flag set it) and the longest sequence that has a shape.
#[test]
fn a_too_long_sequence_in_a_plan_file_names_the_key_the_file_has() {
    let dir = scratch("round11", "seq-len-key");
    let plan = "params: 7B\nnodes: 1\nseq_len: 10000000\nglobal_batch: 64\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n  micro_batch: 1\n";
    std::fs::write(dir.join("p.yaml"), plan).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "params: 7B in p.yaml",
            "fits a sequence of 10000000 tokens",
            "give a shorter seq_len, at most 6771712 (e.g. seq_len: 2048)",
        ],
        &["model.seq_len", "--seq-len"],
        "seq_len: 10000000 in the file",
    );
    // The flag over the file's value is named as the flag.
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--seq-len", "9000000"]);
    assert_one_line_error(
        &r,
        &[
            "fits a sequence of 9000000 tokens",
            "give a shorter --seq-len, at most 6771712 (e.g. --seq-len 2048)",
        ],
        &["model.seq_len", "seq_len:"],
        "--seq-len 9000000 over the file",
    );
    // The longest sequence offered has a shape.
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "p.yaml",
            "--seq-len",
            "6771712",
            "--format",
            "json",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// `sweep --axis seq-len` with a point too long for the `--params` shape said "give a shorter
/// --values (e.g. 2048)": the message now names the point to replace and the longest that works.
#[test]
fn a_too_long_sweep_point_is_named_with_the_points_that_work() {
    let r = run(&[
        "sweep",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--axis",
        "seq-len",
        "--values",
        "2048,10000000",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--axis seq-len at 10000000",
            "replace 10000000 in --values with a point of at most 6771712 tokens",
            "(e.g. --values 2048,6771712)",
        ],
        &["give a shorter --values", "--seq-len"],
        "sweep --axis seq-len 10000000",
    );
}

/// A published-runs file's `num_gpus: 1e12` got serde's "invalid type: floating point
/// `1000000000000.0`, expected a whole number from 0 to 4294967295" and `99999999999` the same
/// with no fix at all; a negative count was offered `num_gpus: 0`, which the file refuses.
#[test]
fn a_runs_file_count_past_its_range_is_named_as_written_with_a_fix() {
    let dir = scratch("round11", "runs-num-gpus");
    let runs = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let at = runs.find("    num_gpus: ").expect("a num_gpus line");
    let end = at + runs[at..].find('\n').unwrap();
    for (value, words) in [
        (
            "1e12",
            &[
                "runs[0].hardware.num_gpus: 1e12 is more than 4294967295",
                "give the run's GPU count, e.g. num_gpus: 8",
            ][..],
        ),
        (
            "99999999999",
            &["runs[0].hardware.num_gpus: 99999999999 is more than 4294967295"][..],
        ),
        ("-8", &["num_gpus: -8 is negative", "e.g. num_gpus: 1"][..]),
    ] {
        let text = format!("{}    num_gpus: {value}{}", &runs[..at], &runs[end..]);
        std::fs::write(dir.join("runs.yaml"), text).unwrap();
        let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
        assert_one_line_error(
            &r,
            words,
            &["1000000000000.0", "invalid", "num_gpus: 0"],
            value,
        );
    }
    // The same words in a plan file, where a float past any number was cut short ("1000…").
    for (from, to, words) in [
        (
            "  tp: 8",
            "  tp: 1e300",
            &["plan.tp: 1e300 is more than 4294967295", "e.g. tp: 8"][..],
        ),
        (
            "  tp: 8",
            "  tp: -1e300",
            &["plan.tp: -1e300 is negative", "e.g. tp: 1"][..],
        ),
        (
            "  layers: 112",
            "  layers: 99999999999999999999999",
            &[
                "model.layers: 99999999999999999999999 is past the largest whole number layers takes",
            ][..],
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(&r, words, &["…", "expected any value"], to);
    }
}

/// `plan --ep 2` on a dense model said "--ep 2 admits no valid plan ... (the search offers --ep
/// 1)", where `eval` says the rule: expert parallelism needs experts.
#[test]
fn plan_says_a_dense_model_has_no_experts_to_split() {
    for (pins, named, drop) in [
        (&["--ep", "2"][..], "--ep 2:", "drop --ep"),
        (&["--etp", "2"][..], "--etp 2:", "drop --etp"),
        (
            &["--ep", "2", "--etp", "2"][..],
            "--ep 2 --etp 2:",
            "drop --ep and --etp",
        ),
    ] {
        let mut args = vec![
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ];
        args.extend(pins);
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                named,
                "expert parallelism needs a mixture-of-experts model (llama3-8b is dense",
                drop,
            ],
            &["the search offers"],
            named,
        );
    }
}

/// `--moe-layer-freq "[0]*8"` (every layer dense) was "not an integer nor a list tpsim can
/// represent"; it is a list tpsim reads, which leaves no MoE layer.
#[test]
fn an_all_dense_moe_layer_list_is_named_as_such() {
    let r = run(&[
        "eval",
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
        "--moe-layer-freq",
        "[0]*8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--moe-layer-freq \"[0]*8\" leaves no MoE layer",
            "\"[1]*8\"",
            "drop --num-experts",
        ],
        &["can represent"],
        "[0]*8",
    );
}

/// Zero counts were quoted `--vocab = 0` and `--tp = 0` beside `--nodes 0` elsewhere: every one
/// now reads as typed.
#[test]
fn zero_counts_are_quoted_as_typed() {
    let shape = ["--layers", "8", "--hidden", "2048", "--heads", "16"];
    for (flag, more) in [
        ("--vocab", &[][..]),
        ("--seq-len", &[][..]),
        ("--num-experts", &[][..]),
        ("--tp", &["--pp", "1"][..]),
    ] {
        let mut args = vec!["eval"];
        args.extend(shape);
        args.extend(["--nodes", "1", flag, "0"]);
        args.extend(more);
        let r = run(&args);
        assert_one_line_error(&r, &[&format!("{flag} 0 ")], &[" = 0"], flag);
    }
}

/// Probing `--hf-config` files: a GLM-4.5 config's `"n_group": 0` was read as "no groups" and
/// its `"topk_group"` skipped unread (so `"x"` passed), though `Glm4MoeTopkRouter` uses both on
/// every token; a DeepSeek-V3 config's `"num_key_value_heads": "x"` passed unread. Each is now
/// checked as the count it is.
#[test]
fn hf_config_counts_tpsim_does_not_price_are_still_checked() {
    let dir = scratch("round11", "hf-counts");
    for (file, key, value, words) in [
        (
            "glm-4.5-air.json",
            "n_group",
            "0",
            &["key \"n_group\" is 0, which is not a positive integer"][..],
        ),
        (
            "glm-4.5-air.json",
            "topk_group",
            "\"x\"",
            &["key \"topk_group\" is \"x\", which is not a positive integer"][..],
        ),
        (
            "deepseek-v3.json",
            "num_key_value_heads",
            "-1",
            &["key \"num_key_value_heads\" is -1, which is not a positive integer"][..],
        ),
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/models/hf/{file}")).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(config.get(key).is_some(), "{file} has {key}");
        config[key] = serde_json::from_str(value).unwrap();
        let r = eval_hf(&dir, "c.json", &config.to_string());
        assert_one_line_error(&r, words, &[], &format!("{file} {key}: {value}"));
    }
}

/// A GLM config asking a token for more router groups than it has (`n_group` 1, `topk_group` 2,
/// which the router's top-k over one group refuses) was read as no group limit.
#[test]
fn hf_config_group_topk_above_one_group_is_refused() {
    let dir = scratch("round11", "hf-groups");
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/glm-4.5-air.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["n_group"] = serde_json::json!(1);
    config["topk_group"] = serde_json::json!(2);
    let r = eval_hf(&dir, "c.json", &config.to_string());
    assert_one_line_error(
        &r,
        &[
            "\"n_group\" 1 / \"topk_group\" 2",
            "a token cannot use more groups than there are",
        ],
        &[],
        "n_group 1, topk_group 2",
    );
}
