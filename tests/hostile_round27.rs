//! Hostile input, round 27: a current-stack runs file's rows without a published rate, its
//! `schema_version`, a `task` spelled otherwise than `pretrain`, a `hardware.gpu` written as a
//! profile name; a pasted `--cpu-offloading-num-layers` written as a word; the sweep table of an
//! offloading sweep. Every error case checks exit 2, one line on stderr and the words that name
//! the value, the rule and the fix.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

/// The Megatron-Bridge GB200 Llama 3 70B FSDP row as a runs file of its own, with each
/// `(from, to)` text replaced (the first occurrence), written as `dir/name`.
fn bridge_row(dir: &Path, name: &str, edits: &[(&str, &str)]) -> String {
    const ID: &str = "mbridge-26.04.01-pretrain-llama3_70b-gb200-64g-fp8-gbs256";
    let text = std::fs::read_to_string(format!("{ROOT}/validation/mbridge_26_runs.yaml")).unwrap();
    let start = text
        .find(&format!("\n- id: {ID}\n"))
        .expect("the row is in the file")
        + 1;
    let end = text[start + 1..]
        .find("\n- id: ")
        .map_or(text.len(), |at| start + 1 + at + 1);
    let mut file = format!(
        "schema_version: 1\nmodel_catalog: {{}}\nruns:\n{}",
        &text[start..end]
    );
    for (from, to) in edits {
        assert!(file.contains(from), "no {from:?} in the row");
        file = file.replacen(from, to, 1);
    }
    let path = dir.join(name);
    std::fs::write(&path, file).unwrap();
    path.to_str().unwrap().to_string()
}

/// A row that publishes no tokens/s (the 17 rows of NeMo's long-context table in
/// validation/modern_runs.yaml give step times only) was shown with a published rate of 0 in the
/// table and `"published_tokens_per_s_per_gpu": 0.0` in the JSON and YAML: a number the source
/// never gave, read by a script as a measured zero. It is "-" and null now.
#[test]
fn a_row_without_a_published_rate_shows_none() {
    let dir = scratch("hostile27", "unpublished");
    let file = bridge_row(
        &dir,
        "unpublished.yaml",
        &[("tokens_per_s_per_gpu: 4224", "tokens_per_s_per_gpu: null")],
    );
    let rows = json(&["accuracy", "--runs", &file, "--format", "json"]);
    let row = &rows[0];
    assert_eq!(row["note"], "no tokens/s published", "{row}");
    assert!(row["published_tokens_per_s_per_gpu"].is_null(), "{row}");
    let yaml = run(&["accuracy", "--runs", &file, "--format", "yaml"]);
    assert_eq!(yaml.code, 0, "{}", yaml.stderr);
    assert!(
        yaml.stdout.contains("published_tokens_per_s_per_gpu: null"),
        "{}",
        yaml.stdout
    );
    let table = run(&["accuracy", "--runs", &file]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let line = table
        .stdout
        .lines()
        .find(|l| l.contains("mbridge-26.04.01-pretrain-llama3_70b"))
        .unwrap();
    let cells: Vec<&str> = line.split('┆').map(str::trim).collect();
    assert_eq!(cells[2], "-", "{line}");

    // The bundled file's long-context rows, and `--run` of one.
    let bundled = format!("{ROOT}/validation/modern_runs.yaml");
    const LONG: &str = "nemo-longctx-llama2_7b-h100-4k-4g-fp8";
    let one = json(&[
        "accuracy", "--runs", &bundled, "--run", LONG, "--format", "json",
    ]);
    assert!(
        one["run"]["published_tokens_per_s_per_gpu"].is_null(),
        "{one}"
    );
    assert!(one["planned"].is_null(), "{one}");
    // A predicted row still carries its rate.
    let published = bridge_row(&dir, "published.yaml", &[]);
    let rows = json(&["accuracy", "--runs", &published, "--format", "json"]);
    assert_eq!(rows[0]["published_tokens_per_s_per_gpu"], 4224.0);
}

/// `schema_version: 9` (or 0) was read as the schema tpsim knows, without a word.
#[test]
fn a_runs_file_of_another_schema_is_refused() {
    let dir = scratch("hostile27", "schema");
    for version in ["9", "0"] {
        let file = bridge_row(
            &dir,
            "schema.yaml",
            &[("schema_version: 1", &format!("schema_version: {version}"))],
        );
        assert_one_line_error(
            &run(&["accuracy", "--runs", &file]),
            &[
                &format!("schema_version: {version} is not a schema tpsim reads"),
                "are schema_version: 1",
                "write the file in that schema with schema_version: 1",
            ],
            &[],
            version,
        );
    }
}

/// `task: Pretrain` (or `pre-train`, `pretraining`) left the row out with the note "Pretrain run
/// (packed sequences, other FLOPs)", a fine-tuning run's reason; a blank task " run (...)".
#[test]
fn a_pretraining_task_is_written_as_tpsim_reads_it() {
    let dir = scratch("hostile27", "task");
    for task in ["Pretrain", "pre-train", "pretraining", "PRETRAIN"] {
        let file = bridge_row(
            &dir,
            "task.yaml",
            &[("  task: pretrain", &format!("  task: {task}"))],
        );
        assert_one_line_error(
            &run(&["accuracy", "--runs", &file]),
            &[
                &format!("task: {task} is not written as tpsim reads it"),
                "pretrain, in lower case, is the task it predicts",
                "write task: pretrain",
            ],
            &["packed sequences"],
            task,
        );
    }
    let file = bridge_row(&dir, "blank.yaml", &[("  task: pretrain", "  task: ''")]);
    assert_one_line_error(
        &run(&["accuracy", "--runs", &file]),
        &["task: \"\" names no task", "write task: pretrain"],
        &[],
        "blank",
    );
    // A fine-tuning task is still left out with its reason.
    let file = bridge_row(&dir, "sft.yaml", &[("  task: pretrain", "  task: sft")]);
    let rows = json(&["accuracy", "--runs", &file, "--format", "json"]);
    assert_eq!(rows[0]["note"], "sft run (packed sequences, other FLOPs)");
}

/// `gpu: gb200` or `gpu: gb200-nvl72` (tpsim's own profile name) left the row out as "GPU gb200
/// has no profile", naming neither the names a runs file takes nor the one meant.
#[test]
fn a_runs_files_gpu_names_what_to_write() {
    let dir = scratch("hostile27", "gpu");
    for (gpu, fix) in [
        ("gb200", Some("GB200")),
        ("gb200-nvl72", Some("GB200")),
        ("h100-sxm-80g", Some("H100")),
        ("MI300X", None),
    ] {
        let file = bridge_row(
            &dir,
            "gpu.yaml",
            &[("    gpu: GB200", &format!("    gpu: {gpu}"))],
        );
        let rows = json(&["accuracy", "--runs", &file, "--format", "json"]);
        let note = rows[0]["note"].as_str().unwrap();
        assert!(
            note.contains(&format!("GPU {gpu} has no profile"))
                && note.contains("H100, H200, H800, B200, B300, GB200, GB300, as written"),
            "{note}"
        );
        match fix {
            Some(name) => assert!(note.ends_with(&format!("; write gpu: {name}")), "{note}"),
            None => assert!(!note.contains("write gpu"), "{note}"),
        }
    }
}

/// A pasted `--cpu-offloading-num-layers abc` (or `0x10`, `nan`) was "not a positive integer",
/// though the count's rule is 0 (none) or more; round 26 fixed the words of -1 and 2.5 only.
#[test]
fn a_pasted_offload_count_in_words_states_its_own_rule() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --bf16";
    for value in ["abc", "0x10", "nan"] {
        let pasted = format!("{line} --cpu-offloading-num-layers {value}");
        assert_one_line_error(
            &run(&["eval", "--nodes", "1", "--megatron-args", &pasted]),
            &[
                &format!(
                    "--cpu-offloading-num-layers \"{value}\" is not a whole number in decimal digits"
                ),
                "0 (none, Megatron-LM's default) or more",
                "e.g. --cpu-offloading-num-layers 8",
            ],
            &["positive integer"],
            value,
        );
    }
}

/// `sweep --cpu-offload-layers 31` printed its table under "sweep over nodes: ..., as
/// megatron-core runs it", its plans read as keeping every activation: the best-plan column
/// shows the degrees, and only the JSON and CSV said the points offload.
#[test]
fn an_offloading_sweeps_table_says_so() {
    let args = [
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "31",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = r.stdout.lines().next().unwrap();
    assert!(
        header.contains(
            "activations of the first 31 layers offloaded to host memory (--cpu-offload-layers 31)"
        ),
        "{header}"
    );
    let plain = run(&args[..args.len() - 2]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(!plain.stdout.contains("offloaded"), "{}", plain.stdout);
    let sweep: Value =
        serde_json::from_str(&run(&[&args[..], &["--format", "json"]].concat()).stdout).unwrap();
    assert_eq!(sweep["cpu_offload_layers"], 31);
}
