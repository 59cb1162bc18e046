//! Leftovers of the twenty-first round: a Megatron-DeepSpeed line's `--zero-stage` skipped as a
//! harmless flag, its `--ds-sequence-parallel-size` refused even under `--framework deepspeed` (the
//! line `--emit deepspeed` writes did not read back), unequal interleaved chunks stated in the table's words only (no per-chunk layer
//! list in the JSON), an NVFP4 training line without its scaling recipe, and a Nemotron-H config
//! error naming CLI flags where the config gave keys.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "leftovers21";

/// A Llama-shaped line on one node of eight GPUs, as `--emit deepspeed` writes its Megatron-DeepSpeed
/// arguments (`--zero-stage N`, `--no-pipeline-parallel` at pp 1) with `extra` added.
fn deepspeed_line(extra: &str) -> String {
    format!(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --position-embedding-type rope --bf16 --tensor-model-parallel-size 2 --deepspeed --deepspeed_config ds_config.json {extra}"
    )
}

fn eval_line(framework: Option<&str>, line: &str) -> Run {
    let mut args = vec!["eval", "--nodes", "1", "--format", "json"];
    if let Some(f) = framework {
        args.extend(["--framework", f]);
    }
    args.extend(["--megatron-args", line]);
    run(&args)
}

/// `--zero-stage 3` was skipped with the learning rate: the line was priced without ZeRO. Under
/// `--framework deepspeed` it is the plan's stage now; priced as Megatron-Core (which has no such
/// flag) it is refused, and so are the stages DeepSpeed itself would not run.
#[test]
fn a_megatron_deepspeed_zero_stage_is_read_or_refused_by_name() {
    for stage in [1u64, 3] {
        let r = eval_line(
            Some("deepspeed"),
            &deepspeed_line(&format!("--zero-stage {stage} --no-pipeline-parallel")),
        );
        assert!(r.code == 0 || r.code == 1, "ZeRO-{stage}: {}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(
            v["plans"][0]["zero"].as_u64(),
            Some(stage),
            "ZeRO-{stage}: {}",
            v["plans"][0]["stages"]
        );
    }
    assert_one_line_error(
        &eval_line(None, &deepspeed_line("--zero-stage 1")),
        &[
            // Round 24: the line says --deepspeed, so the message says that the flag is still
            // needed and why, not that the stage is Megatron-DeepSpeed's (the line said so).
            "the line has --deepspeed and --zero-stage 1",
            "a --deepspeed line needs --framework deepspeed on the command line, because",
            "add --framework deepspeed",
        ],
        &[],
        "priced as Megatron-Core",
    );
    assert_one_line_error(
        &eval_line(
            Some("deepspeed"),
            &deepspeed_line("--zero-stage 2 --pipeline-model-parallel-size 2"),
        ),
        &[
            "--zero-stage 2 with --pipeline-model-parallel-size 2",
            "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
        ],
        &[],
        "ZeRO-2 on the pipeline engine",
    );
    assert_one_line_error(
        &eval_line(Some("deepspeed"), &deepspeed_line("--zero-stage 3")),
        &[
            "--zero-stage 3 without --no-pipeline-parallel",
            "add --no-pipeline-parallel",
        ],
        &[],
        "ZeRO-3 without --no-pipeline-parallel",
    );
    assert_one_line_error(
        &eval_line(
            Some("deepspeed"),
            &deepspeed_line("--zero-stage 1 --use-distributed-optimizer"),
        ),
        &[
            "--zero-stage 1 with --use-distributed-optimizer",
            "drop --use-distributed-optimizer",
        ],
        &[],
        "two shardings",
    );
    // Megatron-Core's optimizer settings, whose fixes ("add --use-distributed-optimizer") the
    // refusal above would turn back.
    assert_one_line_error(
        &eval_line(
            Some("deepspeed"),
            &deepspeed_line("--zero-stage 0 --num-distributed-optimizer-instances 2"),
        ),
        &[
            "--zero-stage 0 with --num-distributed-optimizer-instances 2",
            "Megatron-DeepSpeed does not have",
        ],
        &["add --use-distributed-optimizer"],
        "Megatron-Core's instances",
    );
    assert_one_line_error(
        &eval_line(Some("deepspeed"), &deepspeed_line("--zero-stage 4")),
        &["zero-stage", "4", "0, 1, 2, 3"],
        &[],
        "stage 4",
    );
}

/// `--emit deepspeed` writes a context-parallel plan's Megatron-DeepSpeed arguments with
/// `--ds-sequence-parallel-size N`, and `--megatron-args` refused that flag even under
/// `--framework deepspeed`, whose fix it named. Read there now as Ulysses' cp; still refused (in
/// one line, naming the framework) when priced as Megatron-Core, and beside Megatron-Core's degree.
#[test]
fn the_megatron_deepspeed_line_emit_writes_for_ulysses_reads_back() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "deepspeed",
        "--cp",
        "8",
        "--seq-len",
        "32768",
        "--global-batch",
        "16",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let emitted = r
        .stderr
        .lines()
        .find_map(|l| {
            l.split_once("give Megatron-DeepSpeed ")
                .map(|(_, args)| args)
        })
        .unwrap_or_else(|| panic!("no Megatron-DeepSpeed arguments: {}", r.stderr));
    assert!(
        emitted.contains("--ds-sequence-parallel-size 8"),
        "{emitted}"
    );
    let line = format!(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 32768 --micro-batch-size 1 --global-batch-size 16 --position-embedding-type rope {emitted}"
    );
    let r = eval_line(Some("deepspeed"), &line);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["plans"][0]["cp"].as_u64(), Some(8), "{}", r.stdout);
    assert_eq!(
        v["training"]["cp_exchange"].as_str(),
        Some("head-all-to-all")
    );
    // The line without its ZeRO stage, so that the Ulysses degree is what is refused.
    let words: Vec<&str> = line.split_whitespace().collect();
    let ulysses_only = words
        .iter()
        .enumerate()
        .filter(|(i, w)| **w != "--zero-stage" && (*i == 0 || words[i - 1] != "--zero-stage"))
        .map(|(_, w)| *w)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!ulysses_only.contains("zero-stage"), "{ulysses_only}");
    assert_one_line_error(
        &eval_line(None, &ulysses_only),
        &[
            "--ds-sequence-parallel-size 8 is Megatron-DeepSpeed's DeepSpeed-Ulysses degree",
            "add --framework deepspeed",
        ],
        &[],
        "Ulysses priced as Megatron-Core",
    );
    assert_one_line_error(
        &eval_line(
            Some("deepspeed"),
            &format!("{line} --context-parallel-size 2"),
        ),
        &[
            "--ds-sequence-parallel-size 8 with --context-parallel-size 2",
            "two context parallelisms",
        ],
        &[],
        "two degrees",
    );
}

/// llama3-70b's 80 layers on pp 4 x vpp 3: each stage's 20 in chunks of 7, 7 and 6, said only in
/// the table's words. The JSON lists them now, and the equal layout lists its equal chunks.
#[test]
fn the_json_lists_each_stages_chunk_layers() {
    let chunks = |vpp: &str| {
        let v = json(&[
            "eval",
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
            "--vpp",
            vpp,
            "--format",
            "json",
        ]);
        let layers: Vec<Vec<u64>> = v["plans"][0]["stage_chunk_layers"]
            .as_array()
            .unwrap_or_else(|| panic!("vpp {vpp}: no stage_chunk_layers: {}", v["plans"][0]))
            .iter()
            .map(|stage| {
                stage
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_u64().unwrap())
                    .collect()
            })
            .collect();
        layers
    };
    assert_eq!(chunks("3"), vec![vec![7, 7, 6]; 4]);
    assert_eq!(chunks("2"), vec![vec![10, 10]; 4]);
}

/// `--precision fp8` and `mxfp8` name their scaling on the training line; nvfp4 named none.
#[test]
fn the_nvfp4_training_line_names_its_two_level_block_scaling() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--precision",
        "nvfp4",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let training = r
        .stdout
        .lines()
        .find(|l| l.starts_with("training: "))
        .unwrap();
    for needle in [
        "nvfp4 with two-level block scaling",
        "one E4M3 scale per 16 elements and an FP32 scale per tensor",
        "priced as 4.5 bits an element",
    ] {
        assert!(training.contains(needle), "no {needle:?} in: {training}");
    }
    assert!(!training.contains("mxfp8 with"), "{training}");
}

/// A Nemotron-H config's layer-pattern errors named Megatron-Core's `--hybrid-override-pattern`
/// flag as the rule and told a config that lists its layers as `layers_block_type` to give a
/// `hybrid_override_pattern` it does not have: each now names the key the pattern came from.
#[test]
fn nemotron_h_pattern_errors_name_the_key_the_pattern_came_from() {
    let dir = scratch(SUITE, "hf");
    let empty = nemotron_h_moe_config("").replace(
        "\"hybrid_override_pattern\": \"ME*E\"",
        "\"hybrid_override_pattern\": \"\"",
    );
    assert!(empty.contains("\"hybrid_override_pattern\": \"\""));
    assert_one_line_error(
        &eval_hf(&dir, "empty.json", &empty),
        &[
            "key \"hybrid_override_pattern\" \"\" is empty",
            "write a \"hybrid_override_pattern\" of 4 symbols",
        ],
        &["--hybrid-override-pattern", "write a pattern"],
        "empty pattern",
    );
    let listed = nemotron_h_moe_config("").replace(
        "\"hybrid_override_pattern\": \"ME*E\"",
        "\"layers_block_type\": [\"mamba\", \"moe\", \"attention\"]",
    );
    assert!(listed.contains("layers_block_type"));
    assert_one_line_error(
        &eval_hf(&dir, "listed.json", &listed),
        &[
            "key \"layers_block_type\" (as a pattern: \"ME*\") has 3 entries but the model has 4 layers",
            "give \"num_hidden_layers\": 3 or a \"layers_block_type\" of 4 entries",
        ],
        &[
            "--hybrid-override-pattern",
            "--layers",
            "hybrid_override_pattern",
        ],
        "layers_block_type list",
    );
    let _ = std::fs::remove_dir_all(dir);
}
