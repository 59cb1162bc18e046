//! Hostile input, round 26: activation offloading (`--cpu-offload-layers`, a plan file's
//! `cpu_offload_layers:`, a pasted `--cpu-offloading-num-layers`) under `--emit`, plan files and
//! pasted lines; the Megatron-Bridge run ids the recipe rules key on (`accuracy --runs`); the
//! recipe's offload against a row's own layers and recompute; the timeline of an offloading plan.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

/// Saves the best plan of Llama 3 8B on one H100 node offloading 8 layers as `dir/off.yaml`, with
/// each `(from, to)` line replacement applied (whole lines), and returns its path.
fn offloading_plan(dir: &Path, name: &str, edits: &[(&str, &str)]) -> String {
    let saved = dir.join("off.yaml");
    if !saved.exists() {
        let r = run(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--cpu-offload-layers",
            "8",
            "--pp",
            "1",
            "--save",
            saved.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let mut text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("\ncpu_offload_layers: 8\n"), "{text}");
    for (from, to) in edits {
        let line = format!("\n{from}\n");
        assert!(text.contains(&line), "no line {from:?} in:\n{text}");
        text = text.replacen(&line, &format!("\n{to}\n"), 1);
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// A plan file's `cpu_offload_layers: 8` beside its own `pp: 2` was refused as "--cpu-offload-layers
/// 8 with pp: 2 ...; give pp: 1, or drop --cpu-offload-layers", and beside its `recompute:
/// selective` as "--cpu-offload-layers 8 with --recompute selective ...; give --recompute none":
/// flags the user never typed, for lines of the file. They are the file's keys now.
#[test]
fn a_plan_files_offload_is_named_by_its_keys() {
    let dir = scratch("hostile26", "offload-file");
    let piped = offloading_plan(
        &dir,
        "pp2.yaml",
        &[("  pp: 1", "  pp: 2"), ("  dp: 4", "  dp: 2")],
    );
    for command in ["eval", "compare"] {
        let mut args = vec![command, "--plan", &piped];
        if command == "compare" {
            args.extend(["--plan", &piped]);
        }
        assert_one_line_error(
            &run(&args),
            &[
                "cpu_offload_layers: 8",
                "pp: 2",
                "pp2.yaml",
                "without a pipeline",
                "give pp: 1, or drop cpu_offload_layers",
            ],
            &["--cpu-offload-layers", "--pp"],
            command,
        );
    }
    let recomputing = offloading_plan(
        &dir,
        "selective.yaml",
        &[("  recompute: none", "  recompute: selective")],
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &recomputing]),
        &[
            "cpu_offload_layers: 8",
            "recompute: selective",
            "without recompute",
            "give recompute: none, or drop cpu_offload_layers",
        ],
        &["--cpu-offload-layers", "--recompute"],
        "file recompute",
    );
    // A flag typed over the file keeps its flag; the file's offload keeps its key.
    let plain = offloading_plan(&dir, "plain.yaml", &[]);
    assert_one_line_error(
        &run(&["eval", "--plan", &plain, "--recompute", "full"]),
        &[
            "cpu_offload_layers: 8 in",
            "--recompute full",
            "give --recompute none, or drop cpu_offload_layers",
        ],
        &["--cpu-offload-layers"],
        "typed recompute",
    );
    // A file's `framework: deepspeed` is no `--framework deepspeed`.
    let deepspeed = offloading_plan(
        &dir,
        "deepspeed.yaml",
        &[("framework: megatron-core", "framework: deepspeed")],
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &deepspeed]),
        &[
            "cpu_offload_layers: 8 in the plan file",
            "framework: deepspeed in the plan file",
            "use --framework megatron-core",
        ],
        &["--framework deepspeed"],
        "file framework",
    );
}

/// `--emit deepspeed` with `--cpu-offload-layers` planned as DeepSpeed runs and refused the offload
/// as "--framework deepspeed does not run", a flag never typed; `plan --emit nemo` said "none of
/// the 189 plans that fit can run in NeMo" with exit 1, for an input no plan could satisfy. Both
/// are the emitter's refusal now, exit 2.
#[test]
fn emitting_for_a_framework_without_offloading_is_refused_in_emit_words() {
    let base = [
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "4",
    ];
    for (command, target, name) in [
        ("eval", "deepspeed", "DeepSpeed"),
        ("plan", "deepspeed", "DeepSpeed"),
        ("plan", "nemo", "NeMo"),
    ] {
        let mut args = vec![command];
        args.extend(base);
        if command == "eval" {
            args.extend(["--tp", "8", "--pp", "1"]);
        }
        args.extend(["--emit", target]);
        assert_one_line_error(
            &run(&args),
            &[
                &format!("--emit {target}: activation offloading (--cpu-offload-layers 4)"),
                &format!("not written for {name}"),
                "use --emit megatron or --emit megatron-bridge, or drop --cpu-offload-layers",
            ],
            &["--framework deepspeed", "none of the"],
            &format!("{command} --emit {target}"),
        );
    }
}

/// A pasted `--cpu-offloading-num-layers -1` was "negative: it must be a positive integer (at
/// least 1)", though the line's 0 reads as no offloading (Megatron-LM's default).
#[test]
fn a_pasted_offload_count_states_its_own_rule() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --bf16";
    for (value, why) in [("-1", "is negative"), ("2.5", "is not a whole number")] {
        let pasted = format!("{line} --cpu-offloading-num-layers {value}");
        assert_one_line_error(
            &run(&["eval", "--nodes", "1", "--megatron-args", &pasted]),
            &[
                &format!("--cpu-offloading-num-layers \"{value}\" {why}"),
                "0 (none, Megatron-LM's default) or more",
                "e.g. --cpu-offloading-num-layers 8",
            ],
            &["at least 1"],
            value,
        );
    }
    let zero = format!("{line} --cpu-offloading-num-layers 0");
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &zero]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The Megatron-Bridge GB200 Llama 3 70B FSDP row (whose recipe offloads 40 layers) as a runs file
/// of its own, its id and each `(from, to)` text replaced.
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
    let mut row = text[start..end].to_string();
    for (from, to) in edits {
        assert!(row.contains(from), "no {from:?} in the row");
        row = row.replacen(from, to, 1);
    }
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("schema_version: 1\nmodel_catalog: {{}}\nruns:\n{row}"),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// `mbridge-26.99-...` (or `mbridge-26.-x`, `mbridge-26.02.01x-...`) matched no 26.x release, so
/// the row took the generic Megatron-Bridge settings and none of a release's, and an id in capitals
/// (`MBRIDGE-...`) matched no rule at all: each was planned without a word (the capitals' row with
/// full recompute the recipe never runs). They are refused now, naming the containers known.
#[test]
fn a_bridge_id_names_a_container_the_rules_know() {
    let dir = scratch("hostile26", "bridge-ids");
    for (id, container) in [
        ("mbridge-26.99-pretrain", "26.99"),
        ("mbridge-26.-pretrain", "26."),
        ("mbridge-26.02.01x-pretrain", "26.02.01x"),
        ("mbridge-pretrain", "pretrain"),
    ] {
        let file = bridge_row(
            &dir,
            "unknown.yaml",
            &[("- id: mbridge-26.04.01-pretrain", &format!("- id: {id}"))],
        );
        assert_one_line_error(
            &run(&["accuracy", "--runs", &file]),
            &[
                &format!("names Megatron-Bridge container {container},"),
                "26.02, 26.02.01, 26.04, 26.04.01",
                "write the row's container",
            ],
            &[],
            id,
        );
    }
    let capitals = bridge_row(
        &dir,
        "capitals.yaml",
        &[("- id: mbridge-26.04.01", "- id: MBRIDGE-26.04.01")],
    );
    assert_one_line_error(
        &run(&["accuracy", "--runs", &capitals]),
        &[
            "starts with MBRIDGE",
            "matched as written",
            "write id: mbridge-26.04.01-pretrain-llama3_70b",
        ],
        &[],
        "capitals",
    );
}

/// The note of the one row of `file` in `accuracy --format json`.
fn row_note(file: &str) -> (Value, String) {
    let rows = json(&["accuracy", "--runs", file, "--format", "json"]);
    let row = rows[0].clone();
    let note = row["note"].as_str().unwrap().to_string();
    (row, note)
}

/// The recipe's 40 offloaded layers on a row of 40 (or 30) layers were planned as offloading all
/// but one ("--cpu-offloading-num-layers 40" over 30 layers, +153% faster than published), and a
/// row stating full recompute beside them said only "the published plan is not a valid plan for
/// tpsim". Each row now says why it is not predicted.
#[test]
fn the_recipes_offload_is_checked_against_the_row() {
    let dir = scratch("hostile26", "bridge-offload");
    for layers in ["40", "30"] {
        let file = bridge_row(
            &dir,
            &format!("layers{layers}.yaml"),
            &[("    layers: 80\n", &format!("    layers: {layers}\n"))],
        );
        let (row, note) = row_note(&file);
        assert!(row["predicted_tokens_per_s_per_gpu"].is_null(), "{row}");
        assert!(
            note.contains("offloads 40 layers' activations")
                && note.contains(&format!("model.layers is {layers}"))
                && note.contains("fewer than all layers"),
            "{note}"
        );
    }
    let file = bridge_row(
        &dir,
        "recompute.yaml",
        &[("    recompute: null\n", "    recompute: full\n")],
    );
    let (row, note) = row_note(&file);
    assert!(row["predicted_tokens_per_s_per_gpu"].is_null(), "{row}");
    assert!(
        note.contains("plan.recompute: full")
            && note.contains("offloads only without recompute")
            && note.contains("give recompute: null"),
        "{note}"
    );
    // The row as published is still predicted, offloading.
    let file = bridge_row(&dir, "as-published.yaml", &[]);
    let (row, _) = row_note(&file);
    assert!(row["predicted_tokens_per_s_per_gpu"].is_number(), "{row}");
}

/// On a slow host link the offload copies were 98% of the step, and the timeline drew 13 s of an
/// 865 s step, its axis ending at the optimizer, with nothing saying what was left out.
#[test]
fn the_timeline_says_the_offload_copies_are_not_drawn() {
    let dir = scratch("hostile26", "timeline");
    let profile = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let slow: String = profile
        .lines()
        .map(|l| {
            if l.starts_with("host_link_gb_per_s:") {
                "host_link_gb_per_s: 2".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let gpu = dir.join("slow.yaml");
    std::fs::write(&gpu, slow).unwrap();
    let report = dir.join("report");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.to_str().unwrap(),
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--recompute",
        "none",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "31",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(report.join("timeline.svg")).unwrap();
    assert!(
        svg.contains("s of exposed CPU offload copies") && svg.contains("not drawn"),
        "the timeline does not say the offload copies are left out"
    );
    assert!(!svg.contains("NaN"), "NaN in the timeline");
}
