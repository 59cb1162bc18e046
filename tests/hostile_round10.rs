//! Hostile input, round 10: round 9's leftovers (a `--gpus-per-node` equal to the GPU's default
//! blamed for a plan file's cluster size; Hugging Face config numbers quoted as serde renders
//! them, not as written; a plan file's `+8` named by its bare key), and what an audit of
//! `report`, `sweep`, `compare`, `calibrate`, `--emit`, `--megatron-args` and `accuracy` found.
//! Every error case checks exit 2, one line (so no panic or backtrace) and the words that name
//! the value, the rule and the fix.

mod common;

use common::*;

/// A plan file without `gpus_per_node:` runs on its GPU's node size (8 on an H100), so
/// `--gpus-per-node 8` sets nothing over it; the mismatch message still said "(set by
/// --nodes ... and --gpus-per-node)" and offered dropping `--gpus-per-node`, which changes
/// nothing.
#[test]
fn a_gpus_per_node_flag_equal_to_the_gpu_default_is_not_named_as_an_override() {
    let dir = scratch("round10", "gpn-default");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let plan: String = plan
        .lines()
        .filter(|l| !l.starts_with("gpus_per_node:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("p.yaml"), plan).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "p.yaml",
            "--gpus-per-node",
            "8",
            "--nodes",
            "16",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "but the cluster has 128 (set by --nodes over the file's nodes: 32)",
            "or drop --nodes to plan on the file's cluster",
        ],
        &["--gpus-per-node"],
        "--gpus-per-node 8 on an H100 plan",
    );
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "p.yaml",
            "--gpus-per-node",
            "8",
            "--tp",
            "4",
        ],
    );
    assert_one_line_error(
        &r,
        &["but the cluster has 256; choose degrees whose product is 256"],
        &["--gpus-per-node", "drop"],
        "--gpus-per-node 8 and --tp 4",
    );
    // A node size that differs from the GPU's is still named, with the fix of dropping it.
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--gpus-per-node", "4"]);
    assert_one_line_error(
        &r,
        &[
            "(set by --gpus-per-node)",
            "or drop --gpus-per-node to plan on the file's cluster",
        ],
        &[],
        "--gpus-per-node 4",
    );
}

/// A Hugging Face config's number was quoted as serde renders it (`"sliding_window": 1e30` as
/// `1e+30`, `1E3` as `1000.0`, `-1.50` as `-1.5`); the message now quotes the config's text.
#[test]
fn an_hf_config_number_is_quoted_as_written() {
    let dir = scratch("round10", "hf-written");
    for (entry, shown, rule) in [
        (
            "\"sliding_window\": 1e30",
            "key \"sliding_window\" is 1e30,",
            "not a positive integer",
        ),
        (
            "\"sliding_window\":1E3",
            "key \"sliding_window\" is 1E3,",
            "not a positive integer",
        ),
        (
            "\"sliding_window\" : -1.50",
            "key \"sliding_window\" is -1.50,",
            "not a positive integer",
        ),
        (
            "\"num_key_value_heads\": 8.0E0",
            "key \"num_key_value_heads\" is 8.0E0,",
            "not a positive integer",
        ),
        (
            "\"sliding_window\": 5000000000",
            "key \"sliding_window\" is 5000000000,",
            "too large",
        ),
    ] {
        let config = format!("{{\"model_type\": \"mistral\", {HF_SHAPE}, {entry}}}");
        let r = eval_hf(&dir, "c.json", &config);
        assert_one_line_error(&r, &[shown, rule, "c.json"], &["e+30", "1000.0"], entry);
    }
    let r = eval_hf(&dir, "c.json", "{\"model_type\": 1e30}");
    assert_one_line_error(
        &r,
        &["\"model_type\": 1e30 must be a string"],
        &["1e+30"],
        "model_type 1e30",
    );
}

/// A plan file's `tp: +8`, `tp: -0` or `tp: 0x8` was named by the bare key (`tp: +8 has a plus
/// sign`) where the parser's other messages name the path (`plan.tp: invalid type ...`); the
/// message now gives the path the user would search for, and the line to write.
#[test]
fn an_odd_whole_number_in_a_file_is_named_by_its_path() {
    let dir = scratch("round10", "odd-path");
    for (from, to, words) in [
        (
            "  tp: 8",
            "  tp: +8",
            &[":37:7: plan.tp: +8 has a plus sign", "write tp: 8"][..],
        ),
        (
            "  tp: 8",
            "  tp: -0",
            // tp 0 is refused in turn, so a whole number of 1 or more is offered (round 22).
            &["plan.tp: -0 has a minus sign", "e.g. tp: 1"][..],
        ),
        (
            "  tp: 8",
            "  tp: 0x8",
            &["plan.tp: 0x8 is written in hexadecimal", "write tp: 8"][..],
        ),
        (
            "  layers: 112",
            "  layers: 0x70",
            &[
                "model.layers: 0x70 is written in hexadecimal",
                "write layers: 112",
            ][..],
        ),
        (
            "nodes: 32",
            "nodes: +32",
            &[":21:8: nodes: +32 has a plus sign", "write nodes: 32"][..],
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(&r, words, &[": tp: +8"], to);
    }
}

/// `--params 7B --seq-len 10000000` said "no GPT-style shape of 7B parameters ... (below ~1B
/// parameters the steps are too coarse)": the count is fine, the sequence is what leaves no
/// shape (the derived shape's learned position table outweighs 7B). The message now names the
/// sequence and offers a shorter one; `sweep --axis params` no longer offers 1B in place of 7B.
#[test]
fn a_sequence_too_long_for_a_derived_shape_is_named() {
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--seq-len",
        "10000000",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--params 7B",
            "fits a sequence of 10000000 tokens",
            "one position embedding per token",
            "give a shorter --seq-len, at most 6771712 (e.g. --seq-len 2048)",
        ],
        &["below ~1B", "too coarse"],
        "--seq-len 10000000",
    );
    let r = run(&[
        "sweep",
        "--seq-len",
        "10000000",
        "--nodes",
        "1",
        "--axis",
        "params",
        "--values",
        "7B",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--values 7B",
            "fits a sequence of 10000000 tokens",
            "give a shorter --seq-len",
        ],
        &["1B in place of 7B", "too coarse"],
        "sweep --axis params at 10M tokens",
    );
}

/// A hand-made published-runs file whose run names a GPU without an A100 profile (or is not a
/// full plan) lost that run without a word: the table and summary counted the other runs only.
/// Each skipped run is now named on stderr with why, and a file of skipped runs only says why.
#[test]
fn accuracy_names_every_run_it_skips() {
    let dir = scratch("round10", "accuracy-skips");
    let bundled =
        std::fs::read_to_string(format!("{ROOT}/validation/published_runs.yaml")).unwrap();
    let first = bundled.find("\n- id:").unwrap() + 1;
    let second = first + 1 + bundled[first + 1..].find("\n- id:").unwrap() + 1;
    let third = second + 1 + bundled[second + 1..].find("\n- id:").unwrap() + 1;
    let run_a = &bundled[first..second];
    let run_b = &bundled[second..third];
    assert!(run_a.contains("gpu: NVIDIA A100 (DGX A100, Selene)"));
    let odd_gpu = run_a.replacen(
        "gpu: NVIDIA A100 (DGX A100, Selene)",
        "gpu: NVIDIA Z9000",
        1,
    );
    std::fs::write(dir.join("runs.yaml"), format!("{odd_gpu}{run_b}")).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("1 run:"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("skipped run megatron-sc21-t1-1.7b: hardware.gpu \"NVIDIA Z9000\"")
            && r.stderr.contains("validation/modern_runs.yaml"),
        "{}",
        r.stderr
    );
    std::fs::write(dir.join("one.yaml"), &odd_gpu).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "one.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "one.yaml: no runs tpsim can evaluate: run megatron-sc21-t1-1.7b",
            "\"NVIDIA Z9000\"",
            "an A100",
        ],
        &["panicked"],
        "a run on an unknown GPU",
    );
}
