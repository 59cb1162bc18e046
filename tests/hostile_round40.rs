//! Hostile input, round 40, wide over every command and input channel: `eval --megatron-args`
//! with `--allow-cross-node-tp` refused a line's TP group past the NVLink domain and told the user
//! to pass the `--allow-cross-node-tp` already given (the flag was dropped beside a launch line);
//! a flag given twice, by one spelling or by an alias beside it (`--tp 8
//! --tensor-model-parallel-size 4`, `-o a --output b`), or report's plan file given both as its
//! argument and as `--plan`, was told in clap's words ("the argument '--tp <TP>' cannot be used
//! multiple times"), naming neither the values nor the spelling typed, and no fix; calibrate's
//! byte sizes (`--copy-bytes`, `--min-message`, `--max-message`) with a minus sign were refused
//! as an "unexpected argument '-1'", not as a size; a Hugging Face config whose router groups
//! break the rules quoted `"n_group" 8 / "topk_group" 4` as the config's keys where the config
//! leaves them out (transformers' defaults), so the fix, writing the keys, went unsaid; two flags
//! that do not go together (`--emit megatron --report DIR`, `--calibration FILE --gpu NAME`,
//! `--zero 1 --use-distributed-optimizer`) were told as clap's "the argument '--emit
//! <FRAMEWORK>' cannot be used with '--report <DIR>'", without the values typed or a fix.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile40";

/// A launch line's TP 8 on nodes of 4 GPUs spans two NVLink domains. Refused without
/// `--allow-cross-node-tp`, whose fix names that flag; with it, the line is evaluated, as any
/// other plan is (the flag was dropped beside `--megatron-args`, and the refusal asked for it
/// again).
#[test]
fn allow_cross_node_tp_beside_a_launch_line_is_honoured() {
    let line = "@examples/megatron/llama3-70b.sh";
    let cluster = ["--gpus-per-node", "4", "--nodes", "32"];
    let mut refused = vec!["eval", "--megatron-args", line];
    refused.extend_from_slice(&cluster);
    assert_one_line_error(
        &run(&refused),
        &[
            "--tensor-model-parallel-size 8 spans NVLink domains (4 GPUs per domain)",
            "pass --allow-cross-node-tp",
        ],
        &["panicked"],
        "without the flag",
    );
    let mut allowed = refused.clone();
    allowed.extend(["--allow-cross-node-tp", "--format", "json"]);
    let r = run(&allowed);
    assert_eq!(r.code, 0, "with the flag: {}", r.stderr);
    let plan = &serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()["plans"][0];
    assert_eq!(plan["tp"], 8, "the line's TP is evaluated: {plan}");
    assert_eq!(plan["pp"], 4, "the line's PP is evaluated: {plan}");
    assert!(
        !r.stderr.contains("spans NVLink domains"),
        "no refusal: {}",
        r.stderr
    );
}

/// A flag given twice, whatever its spellings, names each spelling with its value as typed and
/// says to keep one; clap's "cannot be used multiple times" said neither.
#[test]
fn a_flag_given_twice_names_each_spelling_and_value() {
    let dir = scratch(SUITE, "twice");
    let out = dir.join("c.yaml");
    let out = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![
                "eval",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--tensor-model-parallel-size",
                "4",
            ],
            vec![
                "--tp is given twice (--tp 8, --tensor-model-parallel-size 4)",
                "every spelling naming the same --tp",
            ],
        ),
        (
            vec!["plan", "--params", "7B", "--nodes", "1", "--nodes=2"],
            vec!["--nodes is given twice (--nodes 1, --nodes 2)"],
        ),
        (
            vec![
                "eval",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--sequence-parallel",
                "--sequence-parallel",
                "false",
            ],
            vec![
                "--sequence-parallel is given twice (--sequence-parallel, --sequence-parallel false)",
            ],
        ),
        (
            vec![
                "calibrate",
                "--backend",
                "cpu",
                "-o",
                out,
                "--output",
                "other.yaml",
            ],
            vec![
                "--output is given twice (-o ",
                ", --output other.yaml), every spelling naming the same --output",
            ],
        ),
        (
            vec![
                "report",
                "plans/seed-512b-32nodes.yaml",
                "--plan",
                "plans/best-512b-32nodes.yaml",
                "--out",
                out,
            ],
            vec![
                "the plan file is given twice (plans/seed-512b-32nodes.yaml, --plan plans/best-512b-32nodes.yaml)",
            ],
        ),
    ];
    for (args, words) in cases {
        let mut needles = words.clone();
        needles.push("tpsim takes each setting once");
        needles.push("keep one");
        assert_one_line_error(
            &run(&args),
            &needles,
            &["cannot be used multiple times", "cannot be used with"],
            &args.join(" "),
        );
    }
    assert!(!std::path::Path::new(out).exists(), "nothing was written");
}

/// calibrate's byte sizes with a minus sign are sizes below one byte, refused as such with the
/// flag and the value; clap took `-1B` for a flag `-1`.
#[test]
fn a_negative_byte_size_is_refused_as_a_size() {
    let dir = scratch(SUITE, "bytes");
    let out = dir.join("c.yaml");
    for flag in ["--copy-bytes", "--min-message", "--max-message"] {
        let r = run(&[
            "calibrate",
            "--backend",
            "cpu",
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "8",
            "--seq-len",
            "128",
            "--output",
            out.to_str().unwrap(),
            flag,
            "-1B",
        ]);
        assert_one_line_error(
            &r,
            &[&format!(
                "{flag} -1B: must be at least 1 byte; e.g. {flag} 8KiB"
            )],
            &["unexpected argument"],
            flag,
        );
        assert!(!out.exists(), "{flag}: nothing was written");
    }
}

/// DeepSeek-V3's config with one routed expert: the router groups it leaves out are
/// DeepseekV3Config's defaults (n_group 8, topk_group 4), which the message now says, with the fix
/// (add the key); it quoted them as the config's own keys. Keys the config gives are quoted as
/// before.
#[test]
fn router_groups_from_the_class_defaults_are_said_to_be_defaults() {
    let dir = scratch(SUITE, "groups");
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/deepseek-v3.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["n_routed_experts"] = serde_json::json!(1);
    config["num_experts_per_tok"] = serde_json::json!(1);
    assert!(config.get("n_group").is_none() && config.get("topk_group").is_none());
    let r = eval_hf(&dir, "c.json", &config.to_string());
    assert_one_line_error(
        &r,
        &[
            "\"n_group\" 8 (not in the config: transformers' default, so add the key to change it)",
            "\"topk_group\" 4 (not in the config: transformers' default, so add the key to change it)",
            "the groups must divide the experts evenly",
        ],
        &[],
        "defaults",
    );
    config["n_group"] = serde_json::json!(1);
    let r = eval_hf(&dir, "c.json", &config.to_string());
    assert_one_line_error(
        &r,
        &[
            "keys \"n_group\" 1 / \"topk_group\" 4 (not in the config",
            "a token cannot use more groups than there are",
        ],
        &["\"n_group\" 1 (not in the config"],
        "n_group given",
    );
}

/// Two flags that do not go together are named as typed, in the order typed, with their values
/// (a launch line by its flag alone), and the fix: drop one. Clap's words named the flags' value
/// placeholders and no fix.
#[test]
fn two_flags_that_do_not_go_together_are_named_as_typed() {
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--emit",
                "megatron",
                "--report",
                "never-written",
            ],
            "--emit megatron cannot be used with --report never-written: tpsim plan takes one or the other",
        ),
        (
            vec![
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--gpu",
                "a100-sxm-80g",
                "--calibration",
                "cpu.yaml",
            ],
            "--gpu a100-sxm-80g cannot be used with --calibration cpu.yaml",
        ),
        (
            vec![
                "eval",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--zero",
                "1",
                "--use-distributed-optimizer",
            ],
            "--zero 1 cannot be used with --use-distributed-optimizer: tpsim eval takes one or the other",
        ),
        (
            vec![
                "eval",
                "--nodes",
                "1",
                "--megatron-args",
                "--num-layers 2 --hidden-size 128 --num-attention-heads 2",
                "--tensor-model-parallel-size",
                "4",
            ],
            "--megatron-args cannot be used with --tensor-model-parallel-size 4",
        ),
    ];
    for (args, words) in cases {
        assert_one_line_error(
            &run(&args),
            &[words, "drop one of them"],
            &[
                "the argument '",
                "<FRAMEWORK>",
                "<NAME|FILE>",
                "--num-layers 2",
            ],
            &args.join(" "),
        );
    }
    assert!(!std::path::Path::new(ROOT).join("never-written").exists());
}
