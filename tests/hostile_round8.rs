//! Hostile input, round 8: defects an adversarial audit of the built binary found in negative
//! counts in spec files, the fixes plan-file errors offer, and the other inputs below, one
//! regression test each. Every error case checks exit 2, one line (so no panic or backtrace) and
//! the words that name the value, the rule and the fix.

mod common;

use common::*;

/// `tp: -1` in a plan file was refused as "invalid type: integer `-1`, expected a whole number
/// from 0 to 4294967295": the machine type's range, which even offers 0, not tp's rule. A
/// negative count in any spec file (plan, model, GPU profile) now names the key's rule and a fix.
#[test]
fn a_negative_count_in_a_spec_file_names_the_keys_rule() {
    let dir = scratch("round8", "negative-count");
    for (from, to, words) in [
        (
            "  tp: 8",
            "  tp: -1",
            "plan.tp: -1 is negative; tp must be a positive whole number (1 or more), e.g. tp: 1",
        ),
        (
            "  micro_batch: 1",
            "  micro_batch: -2",
            "plan.micro_batch: -2 is negative; micro_batch must be a positive whole number",
        ),
        (
            "nodes: 32",
            "nodes: -32",
            "nodes: -32 is negative; nodes must be a positive whole number (1 or more), e.g. nodes: 1",
        ),
        (
            "  layers: 112",
            "  layers: -1",
            "model.layers: -1 is negative; layers must be a positive whole number",
        ),
        (
            "  zero: 1",
            "  zero: -1",
            "plan.zero: -1 is negative; zero is a ZeRO stage: use 0, 1, 2 or 3",
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(
            &r,
            &["p.yaml:", words],
            &["4294967295", "from 0 to 255", "invalid type"],
            to,
        );
    }
    // A GPU profile's and a model file's counts say the same.
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    std::fs::write(
        dir.join("g.yaml"),
        gpu.replacen("\ngpus_per_node: 8", "\ngpus_per_node: -8", 1),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--params", "7B", "--nodes", "1", "--gpu", "g.yaml", "--tp", "1", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "g.yaml:",
            "gpus_per_node: -8 is negative; gpus_per_node must be a positive whole number",
        ],
        &["4294967295"],
        "gpus_per_node: -8",
    );
}

/// A plan-file error offered flags as its fix (`e.g. --global-batch 10`, `no --dp works ...;
/// change --tp, --cp or --pp`) where the value to change is a line of the file. The fix now names
/// the file's keys; a flag the user typed over the file keeps its flag.
#[test]
fn a_plan_file_errors_fix_names_the_files_keys() {
    let dir = scratch("round8", "fix-keys");
    for (from, to, words, absent) in [
        (
            "global_batch: 1536",
            "global_batch: 9",
            &[
                "global_batch: 9 is not divisible by dp: 2",
                "(e.g. global_batch: 10)",
            ][..],
            &["--global-batch"][..],
        ),
        (
            "  tp: 8",
            "  tp: 16",
            &["tp: 16 x cp: 1 x pp: 16 x dp: 2 = 512 GPUs", "(e.g. dp: 1)"][..],
            &["--dp"][..],
        ),
        (
            "nodes: 32",
            "nodes: 9",
            &["no dp works", "change tp, cp or pp"][..],
            &["--dp", "--tp"][..],
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        for command in [
            &["eval", "--plan", "p.yaml"][..],
            &["report", "p.yaml", "--out", "r"],
        ] {
            let r = run_in(&dir, command);
            assert_one_line_error(&r, words, absent, &format!("{to}: {command:?}"));
        }
    }
    // `--dp 2` typed over the file is the user's flag: the fix may name it. (The file's own
    // value differs: a flag equal to it is named with the file's key, round 9.)
    std::fs::write(
        dir.join("p.yaml"),
        bundled_plan_with("global_batch: 1536", "global_batch: 8"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--global-batch", "9"]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch 9 is not divisible",
            "e.g. --global-batch 10",
        ],
        &["global_batch: 10"],
        "--global-batch over the file",
    );
}

/// A Hugging Face config whose `hidden_act` is no string (`5`, `["silu"]`) was read as if the key
/// were absent: the activation check looked only at strings, so the value was lost without a
/// word. It is now refused, naming the key and its value.
#[test]
fn an_activation_that_is_no_string_is_refused() {
    let dir = scratch("round8", "hf-act");
    for value in ["5", "[\"silu\"]", "true"] {
        let config = format!(r#"{{"model_type": "llama", {HF_SHAPE}, "hidden_act": {value}}}"#);
        let r = eval_hf(&dir, "c.json", &config);
        assert_one_line_error(
            &r,
            &[
                &format!("key \"hidden_act\" is {value}"),
                "which is not a string naming the activation",
                "correct it in the config",
            ],
            &["panicked"],
            value,
        );
    }
    // null is the config class's None, as before.
    let config = format!(r#"{{"model_type": "llama", {HF_SHAPE}, "hidden_act": null}}"#);
    let r = eval_hf(&dir, "c.json", &config);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// `--plan` and `--hf-config` given a symbolic link that loops, or one to a missing file, said
/// "no such file", though the path is there: a link. Every input now says what the link is and
/// where it points.
#[cfg(unix)]
#[test]
fn a_link_that_loops_or_points_nowhere_is_named_as_a_link() {
    let dir = scratch("round8", "links");
    std::os::unix::fs::symlink("b.yaml", dir.join("a.yaml")).unwrap();
    std::os::unix::fs::symlink("a.yaml", dir.join("b.yaml")).unwrap();
    std::os::unix::fs::symlink("gone.yaml", dir.join("dangling.yaml")).unwrap();
    let one = ["--nodes", "1", "--tp", "8", "--pp", "1"];
    for (path, words) in [
        (
            "a.yaml",
            "cannot read it: it is a symbolic link to b.yaml that loops",
        ),
        (
            "dangling.yaml",
            "cannot read it: it is a symbolic link to gone.yaml, which does not exist",
        ),
    ] {
        for (flag, args) in [
            ("--plan", vec!["eval", "--plan", path]),
            (
                "--hf-config",
                [&["eval", "--hf-config", path][..], &one].concat(),
            ),
            ("--model", [&["eval", "--model", path][..], &one].concat()),
        ] {
            let r = run_in(&dir, &args);
            assert_one_line_error(
                &r,
                &[&format!("{flag} {path}: {words}"), "check the path"],
                &["no such file", "No such file", "Too many levels"],
                &format!("{flag} {path}"),
            );
        }
    }
    // A path with nothing there is still "no such file".
    let r = run_in(&dir, &["eval", "--plan", "none.yaml"]);
    assert_one_line_error(&r, &["none.yaml: no such file"], &["link"], "absent");
}

/// A plan file without a model or without nodes was refused with the flags' words ("no model
/// given: pass --params 512B, --model ...", "--nodes is required ... (e.g. --nodes 32)"), as if no
/// file had been given. The message now names the file and the line to add, the flag as the
/// alternative.
#[test]
fn a_plan_file_short_of_a_model_or_nodes_names_the_line_to_add() {
    let dir = scratch("round8", "plan-short");
    for (text, words) in [
        (
            "nodes: 1\nplan: {tp: 8, pp: 1, dp: 1}\n",
            "p.yaml gives no model (no model or params key); add one, e.g. params: 512B or model: gpt3-175b",
        ),
        (
            "params: 7B\nplan: {tp: 8, pp: 1, dp: 1}\n",
            "p.yaml gives no nodes: how many nodes of 8 GPUs the cluster has; add a line such as nodes: 32, or pass --nodes",
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), text).unwrap();
        for args in [
            &["eval", "--plan", "p.yaml"][..],
            &["report", "p.yaml", "--out", "r"],
            &["compare", "--plan", "p.yaml", "--plan", "p.yaml"],
        ] {
            let r = run_in(&dir, args);
            assert_one_line_error(
                &r,
                &[words],
                &["no model given", "--nodes is required", "pass nodes"],
                &format!("{text:?} {args:?}"),
            );
        }
    }
}

/// An empty spec file (or one of comments only) was refused as "f.yaml:1:1: missing field
/// `plan`" (`name` for a model or GPU file), and a key left out as serde's "missing field `pp`",
/// neither with a fix. The empty file is now named as empty, and a missing key with the line to
/// add and the mapping it goes under.
#[test]
fn an_empty_spec_or_a_missing_key_names_the_fix() {
    let dir = scratch("round8", "empty-spec");
    std::fs::write(dir.join("e.yaml"), "\n# nothing yet\n").unwrap();
    for args in [
        &["eval", "--plan", "e.yaml"][..],
        &[
            "eval", "--model", "e.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
        &[
            "eval", "--params", "7B", "--gpu", "e.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    ] {
        let r = run_in(&dir, args);
        assert_one_line_error(
            &r,
            &[
                "e.yaml: is empty (blank lines and comments only)",
                "check that this is the right file",
            ],
            &["missing field", ":1:1:"],
            &format!("{args:?}"),
        );
    }
    std::fs::write(
        dir.join("p.yaml"),
        bundled_plan_with("  pp: 16", "").replacen("\n\n", "\n", 1),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "p.yaml:",
            "plan: missing key pp, which has no default; add a pp: line under plan:",
        ],
        &["missing field"],
        "no pp",
    );
}

/// A key given twice in a spec was refused as serde's "duplicate field `gpus_per_node`", and a
/// GPU profile's `nvlink_domain_gpus: 3` and `fa2_attention_efficiency: 0` with their rule but no
/// fix. Each now says what to write.
#[test]
fn a_repeated_key_and_a_gpu_profiles_domain_and_shares_name_the_fix() {
    let dir = scratch("round8", "gpu-profile");
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let fa2 = gpu
        .lines()
        .find(|l| l.starts_with("fa2_attention_efficiency:"))
        .unwrap();
    for (text, words) in [
        (
            gpu.replacen(
                "\ngpus_per_node: 8",
                "\ngpus_per_node: 8\ngpus_per_node: 4",
                1,
            ),
            "gpus_per_node is given twice in this mapping, so which value is meant is unclear; keep one gpus_per_node: line",
        ),
        (
            gpu.replacen(
                "\ngpus_per_node: 8",
                "\ngpus_per_node: 8\nnvlink_domain_gpus: 3",
                1,
            ),
            "nvlink_domain_gpus: 3 must be a positive multiple of gpus_per_node (8) (an NVLink domain spans whole nodes); give e.g. nvlink_domain_gpus: 8, or delete the line",
        ),
        (
            gpu.replacen(fa2, "fa2_attention_efficiency: 0", 1),
            "fa2_attention_efficiency: 0 must be a fraction in (0, 1] (a share of a peak rate); give the measured share, e.g. 0.75, or delete the line",
        ),
    ] {
        std::fs::write(dir.join("g.yaml"), &text).unwrap();
        let r = run_in(
            &dir,
            &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "2",
                "--gpu",
                "./g.yaml",
                "--global-batch",
                "64",
            ],
        );
        assert_one_line_error(&r, &["g.yaml", words], &["duplicate field"], words);
    }
    std::fs::write(
        dir.join("p.yaml"),
        bundled_plan_with("  tp: 8", "  tp: 8\n  tp: 4"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &["p.yaml:", "plan: tp is given twice", "keep one tp: line"],
        &["duplicate field"],
        "tp twice",
    );
}

/// A plan file's `params: 1e30` skipped the 100T bound `--params 1e30` meets, and was refused as
/// a shape too coarse to derive, with the fix "give the shape instead (--layers --hidden
/// --heads)", flags of another input; its other count errors read "in q.yaml: params 0 ...". Both
/// inputs now meet the same bounds, and the file's errors name its key and the file.
#[test]
fn a_plan_files_params_meets_the_flags_bounds_in_its_own_words() {
    let dir = scratch("round8", "plan-params");
    let plan = |params: &str| {
        std::fs::write(
            dir.join("q.yaml"),
            format!(
                "params: {params}\nnodes: 1\nglobal_batch: 64\nplan: {{tp: 8, pp: 1, dp: 1}}\n"
            ),
        )
        .unwrap();
        run_in(&dir, &["eval", "--plan", "q.yaml"])
    };
    let r = plan("1e30");
    assert_one_line_error(
        &r,
        &[
            "q.yaml: params: 1e30 is more than 100T parameters",
            "check the value",
        ],
        &["no GPT-style shape", "--layers"],
        "params: 1e30",
    );
    let flag = run(&[
        "eval", "--params", "1e30", "--nodes", "1", "--tp", "8", "--pp", "1",
    ]);
    assert_one_line_error(
        &flag,
        &["--params 1e30 is more than 100T parameters"],
        &[],
        "--params 1e30",
    );
    let r = plan("7");
    assert_one_line_error(
        &r,
        &[
            "params: 7 in q.yaml: no GPT-style shape",
            "give the shape instead (model.layers model.hidden model.heads)",
        ],
        &["--layers", "--params"],
        "params: 7",
    );
    let r = plan("-7B");
    assert_one_line_error(
        &r,
        &["q.yaml: params: -7B must be greater than zero; give a count such as 512B"],
        &["in q.yaml"],
        "params: -7B",
    );
}
