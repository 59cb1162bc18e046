//! Leftovers of the hostile-input and cross-command reviews, one regression test (or a few) per
//! finding, each run on the built binary: the exit code, the one line an error prints, and the
//! numbers two commands must agree on.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn lines_of(r: &Run) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    )
}

/// Writes a junk file under each of `names` in `dir`, as a user's folder might hold.
fn shadow(dir: &Path, names: &[&str]) {
    for name in names {
        std::fs::write(dir.join(name), "junk: 1\n").unwrap();
    }
}

// ---- 1. commands that pick a bundled spec themselves read the bundled one -------------------

#[test]
fn accuracy_reads_its_bundled_gpus_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "accuracy-shadow");
    shadow(&dir, &["a100-sxm-80g", "h100-sxm-80g", "jean-zay-a100-80g"]);
    let here = run_in(&dir, &["accuracy", "--format", "json"]);
    let home = run(&["accuracy", "--format", "json"]);
    assert_eq!(here.code, 0, "{}", lines_of(&here));
    assert!(!here.stderr.contains("names both"), "{}", here.stderr);
    assert_eq!(
        here.stdout, home.stdout,
        "the folder's files changed the result"
    );
}

#[test]
fn modern_accuracy_reads_its_bundled_gpus_and_models_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "modern-shadow");
    shadow(
        &dir,
        &[
            "h100-sxm-80g",
            "b200-sxm-180g",
            "deepseek-v3",
            "qwen3-30b-a3b",
        ],
    );
    let runs = Path::new(ROOT).join("validation/modern_runs.yaml");
    let runs = runs.to_str().unwrap();
    let here = run_in(&dir, &["accuracy", "--runs", runs, "--format", "json"]);
    let home = run(&["accuracy", "--runs", runs, "--format", "json"]);
    assert_eq!(here.code, 0, "{}", lines_of(&here));
    assert!(!here.stdout.contains("names both"), "{}", here.stdout);
    assert_eq!(
        here.stdout, home.stdout,
        "the folder's files changed the result"
    );
}

const TINY_CALIBRATION: [&str; 13] = [
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
    "--ranks",
    "2",
];

#[test]
fn calibrate_without_gpu_uses_the_bundled_base_whatever_files_the_folder_holds() {
    let dir = scratch("leftovers", "calibrate-shadow");
    shadow(&dir, &["h100-sxm-80g"]);
    let mut args = TINY_CALIBRATION.to_vec();
    args.extend(["--output", "out.yaml"]);
    let r = run_in(&dir, &args);
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let profile = std::fs::read_to_string(dir.join("out.yaml")).unwrap();
    assert!(
        profile.contains("unmeasured numbers from h100-sxm-80g"),
        "{profile}"
    );
    // The junk file is untouched, and naming it with --gpu still says it is ambiguous.
    assert_eq!(
        std::fs::read_to_string(dir.join("h100-sxm-80g")).unwrap(),
        "junk: 1\n"
    );
    let mut args = TINY_CALIBRATION.to_vec();
    args.extend(["--gpu", "h100-sxm-80g", "--output", "out2.yaml"]);
    let r = run_in(&dir, &args);
    assert_one_line_error(
        &r,
        &["--gpu h100-sxm-80g", "./h100-sxm-80g"],
        &[],
        "--gpu named",
    );
    assert!(!dir.join("out2.yaml").exists());
}

// ---- 2. the --emit note under the table points only to commands that work -----------------

fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

fn emit_note(r: &Run) -> String {
    r.stdout
        .lines()
        .chain(r.stderr.lines())
        .find(|l| l.starts_with("note: --emit "))
        .unwrap_or_else(|| panic!("no --emit note:\n{}", lines_of(r)))
        .to_string()
}

#[test]
fn emit_note_for_an_moe_model_under_deepspeed_names_a_command_that_writes_it() {
    let base = [
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--global-batch",
        "512",
    ];
    let r = run(&with(&base, &["--framework", "deepspeed", "--top", "3"]));
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let note = emit_note(&r);
    assert!(
        note.contains("--emit deepspeed writes no plan of this run"),
        "{note}"
    );
    assert!(
        note.contains("use --framework megatron-core with --emit megatron"),
        "{note}"
    );
    // What the note says --emit deepspeed does, it does.
    let refused = run(&with(
        &base,
        &["--framework", "deepspeed", "--emit", "deepspeed"],
    ));
    assert_one_line_error(&refused, &["mixture-of-experts"], &[], "--emit deepspeed");
    // And the command it points to writes the model.
    let written = run(&with(
        &base,
        &["--framework", "megatron-core", "--emit", "megatron"],
    ));
    assert_eq!(written.code, 0, "{}", lines_of(&written));
    assert!(
        written.stdout.contains("--num-experts 8"),
        "{}",
        written.stdout
    );
}

#[test]
fn emit_note_for_fp8_under_deepspeed_says_no_plan_can_be_written() {
    let base = [
        "plan",
        "--params",
        "70B",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--precision",
        "fp8",
        "--framework",
        "deepspeed",
    ];
    let r = run(&with(&base, &["--top", "3"]));
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let note = emit_note(&r);
    assert!(!note.contains("it writes the fastest plan"), "{note}");
    let feasible = json(&with(&base, &["--top", "1", "--format", "json"]))["search"]["feasible"]
        .as_u64()
        .unwrap();
    let words = format!("--emit deepspeed can write none of the {feasible} plans that fit");
    assert!(note.contains(&words), "{note}");
    assert!(note.contains("use --precision bf16"), "{note}");
    // Asked to emit, the precision is refused up front (exit 2), as `eval --emit deepspeed` refuses
    // it: every plan of the search carries it (tests/emit_precision.rs).
    let emitted = run(&with(&base, &["--emit", "deepspeed"]));
    assert_eq!(emitted.code, 2, "{}", lines_of(&emitted));
    assert!(
        emitted.stderr.contains(
            "--emit deepspeed with --precision fp8: a DeepSpeed config has no FP8/FP4 training key"
        ),
        "{}",
        emitted.stderr
    );
    assert!(emitted.stdout.is_empty(), "{}", emitted.stdout);
}

#[test]
fn emit_note_names_the_plan_emit_writes_and_the_top_that_shows_it() {
    let base = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--framework",
        "deepspeed",
        "--tp-comm-overlap",
        "true",
    ];
    let r = run(&with(&base, &["--top", "5"]));
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let note = emit_note(&r);
    assert!(
        note.contains("cannot write #1 (TP communication overlap"),
        "{note}"
    );
    let (_, after) = note
        .split_once("it writes the fastest plan it can: ")
        .unwrap_or_else(|| panic!("{note}"));
    let (words, place) = after.split_once(", #").unwrap();
    let rank: usize = place.split_once(' ').unwrap().0.parse().unwrap();
    assert!(
        place.contains(&format!("(--top {rank} shows it)")),
        "{note}"
    );
    // --emit writes that very plan, by that rank.
    let emitted = run(&with(&base, &["--emit", "deepspeed"]));
    assert_eq!(emitted.code, 0, "{}", lines_of(&emitted));
    assert!(
        emitted.stderr.contains(&format!("emitting plan #{rank} ")),
        "{}",
        emitted.stderr
    );
    // "tp 1 pp 1 dp 64 mb 2 ..." (or "tp 2 cp 4 pp 4 dp 2 ...") is written as
    // "tp 1 x cp 1 x pp 1 x dp 64".
    let w: Vec<&str> = words.split(' ').collect();
    let degree = |name: &str| {
        w.windows(2)
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1])
    };
    assert_eq!(
        (w[0], degree("pp").is_some(), degree("dp").is_some()),
        ("tp", true, true),
        "{words}"
    );
    let written = format!(
        "tp {} x cp {} x pp {} x dp {}",
        w[1],
        degree("cp").unwrap_or("1"),
        degree("pp").unwrap(),
        degree("dp").unwrap()
    );
    assert!(
        emitted
            .stderr
            .contains(&format!("configuration for {written} ")),
        "{written}: {}",
        emitted.stderr
    );
    // The --top it names shows it, and the note then says so.
    let shown = run(&with(&base, &["--top", &rank.to_string()]));
    let note = emit_note(&shown);
    assert!(note.ends_with(&format!("{words}, in the table")), "{note}");
}

// ---- 3. the values an --etp error lists are values the command accepts ----------------------

/// The comma-separated values after `marker` in `line`, up to the first character that is not
/// a digit, a comma or a space.
fn listed_after(line: &str, marker: &str) -> Vec<String> {
    let (_, rest) = line
        .split_once(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in: {line}"));
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == ' '))
        .unwrap_or(rest.len());
    rest[..end]
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn replace_value<'a>(args: &[&'a str], flag: &str, value: &'a str) -> Vec<&'a str> {
    let mut out = args.to_vec();
    let at = out.iter().position(|a| *a == flag).unwrap();
    out[at + 1] = value;
    out
}

#[test]
fn eval_etp_error_lists_only_values_that_fold_with_ep() {
    let base = [
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--pp",
        "1",
        "--ep",
        "8",
        "--etp",
        "3",
        "--global-batch",
        "512",
    ];
    let r = run(&base);
    assert_one_line_error(&r, &["--etp 3", "expert MLP width 14336"], &[], "etp 3");
    let valid = listed_after(&r.stderr, "valid: ");
    // ep 8 x etp must divide the 16 GPUs of the stage: 4 and 8 divide the width but not that.
    assert_eq!(valid, ["1", "2"], "{}", r.stderr);
    for v in &valid {
        let ok = run(&replace_value(&base, "--etp", v));
        assert!(ok.code == 0 || ok.code == 1, "--etp {v}: {}", lines_of(&ok));
    }
    for v in ["4", "8"] {
        let refused = run(&replace_value(&base, "--etp", v));
        assert_eq!(refused.code, 2, "--etp {v}: {}", lines_of(&refused));
    }
    // DeepEP takes no expert TP with EP: 1 alone.
    let deepep = run(&with(&base, &["--moe-dispatcher", "deepep"]));
    assert_eq!(
        listed_after(&deepep.stderr, "valid: "),
        ["1"],
        "{}",
        deepep.stderr
    );
}

#[test]
fn plan_etp_pin_error_lists_only_values_the_other_pins_accept() {
    let base = [
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--ep",
        "8",
        "--etp",
        "3",
        "--global-batch",
        "512",
        "--top",
        "1",
    ];
    let r = run(&base);
    assert_one_line_error(
        &r,
        &["--etp 3", "with --ep 8 the search offers"],
        &[],
        "pin",
    );
    let valid = listed_after(&r.stderr, "offers --etp ");
    assert_eq!(valid, ["1", "2"], "{}", r.stderr);
    for v in &valid {
        let ok = run(&replace_value(&base, "--etp", v));
        assert_eq!(ok.code, 0, "--etp {v}: {}", lines_of(&ok));
    }
    let refused = run(&replace_value(&base, "--etp", "4"));
    assert_eq!(refused.code, 2, "--etp 4: {}", lines_of(&refused));
    // Without another pin the list is the search's own.
    let alone = run(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--etp",
        "3",
        "--global-batch",
        "512",
    ]);
    assert_one_line_error(
        &alone,
        &["(the search offers --etp 1, 2, 4, 8)"],
        &[],
        "alone",
    );
}

// ---- 4. an expert-TP error names --tp when --etp was never typed ----------------------------

#[test]
fn expert_width_error_names_the_tp_the_user_typed() {
    let base = [
        "eval",
        "--model",
        "grok-1",
        "--nodes",
        "6",
        "--tp",
        "24",
        "--pp",
        "1",
        "--global-batch",
        "512",
        "--allow-cross-node-tp",
        // A length 24 TP ranks split evenly: Megatron-Core runs MoE layers under TP only with
        // sequence parallelism (eval takes it on), which splits the sequence over the TP ranks.
        "--seq-len",
        "8208",
    ];
    let r = run(&base);
    assert_one_line_error(
        &r,
        &[
            "--tp 24 does not divide the expert MLP width 32768",
            "--etp defaults to --tp",
        ],
        &["--etp 24"],
        "tp 24",
    );
    let valid = listed_after(&r.stderr, "give --etp, valid: ");
    assert_eq!(valid, ["1", "2", "4", "8"], "{}", r.stderr);
    // The fix it names runs: --tp 24 kept, --etp given.
    for v in &valid {
        let ok = run(&with(&base, &["--etp", v]));
        assert!(ok.code == 0 || ok.code == 1, "--etp {v}: {}", lines_of(&ok));
    }
    // Typed, --etp is named.
    let typed = run(&with(&base, &["--etp", "24"]));
    assert_one_line_error(
        &typed,
        &["--etp 24 does not divide"],
        &["--tp 24"],
        "etp 24",
    );
}

#[test]
fn expert_folding_error_names_the_tp_the_user_typed() {
    let r = run(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--tp",
        "4",
        "--pp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "512",
    ]);
    assert_one_line_error(
        &r,
        &["--ep 8 x --tp 4 does not divide the 16 GPUs", "give --etp"],
        &["--etp 4"],
        "folding",
    );
}

// ---- 5. the empty-stage error lists the pipeline depths that work ---------------------------

#[test]
fn empty_stage_error_lists_the_pp_values_that_give_every_stage_a_layer() {
    let base = [
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "64",
        "--tp",
        "1",
        "--pp",
        "32",
        "--ep",
        "8",
        "--allow-uneven-pp",
        "--global-batch",
        "4096",
    ];
    let r = run(&base);
    assert_one_line_error(
        &r,
        &[
            "--pp 32 leaves a stage without a transformer layer",
            "valid here: ",
        ],
        &[],
        "pp 32",
    );
    let valid = listed_after(&r.stderr, "valid here: ");
    assert_eq!(valid, ["1", "2", "4", "8", "16"], "{}", r.stderr);
    for pp in &valid {
        let ok = run(&replace_value(&base, "--pp", pp));
        assert!(ok.code == 0 || ok.code == 1, "--pp {pp}: {}", lines_of(&ok));
    }
}

// ---- 6. a slow calibrated profile prints its numbers; an edited one is refused --------------

/// A CPU-twin profile measured here, written to `dir/name`.
fn cpu_profile(dir: &Path, name: &str) -> String {
    let mut args = TINY_CALIBRATION.to_vec();
    args.extend(["--output", name]);
    let r = run_in(dir, &args);
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// `text` with every value of the keys in `keys` multiplied by `factor`.
fn scaled(text: &str, keys: &[&str], factor: f64) -> String {
    text.lines()
        .map(|line| {
            let key = line.trim_start().trim_start_matches("- ");
            for k in keys {
                if let Some(v) = key.strip_prefix(&format!("{k}: "))
                    && let Ok(v) = v.parse::<f64>()
                {
                    let indent = &line[..line.len() - key.len()];
                    return format!("{indent}{k}: {}", v * factor);
                }
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const TINY_EVAL: [&str; 18] = [
    "eval",
    "--layers",
    "2",
    "--hidden",
    "256",
    "--heads",
    "8",
    "--seq-len",
    "128",
    "--nodes",
    "1",
    "--gpus-per-node",
    "2",
    "--tp",
    "1",
    "--pp",
    "1",
    "--global-batch=8",
];

#[test]
fn a_slow_but_consistent_profile_prints_its_peak_not_zero() {
    let dir = scratch("leftovers", "slow-profile");
    let text = cpu_profile(&dir, "cpu.yaml");
    let peak: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("peak_bf16_tflops: "))
        .unwrap()
        .parse()
        .unwrap();
    // A device a thousand times slower: every throughput scaled together, and the GEMMs'
    // times with them (a GEMM's tflops is its flops over its median, round 48).
    let slow = scaled(
        &scaled(&text, &["peak_bf16_tflops", "tflops"], 1e-3),
        &["median_us", "min_us", "max_us"],
        1e3,
    );
    std::fs::write(dir.join("slow.yaml"), slow).unwrap();
    let r = run_in(&dir, &with(&TINY_EVAL, &["--calibration", "slow.yaml"]));
    assert!(r.code == 0 || r.code == 1, "{}", lines_of(&r));
    let header = r
        .stdout
        .lines()
        .find(|l| l.starts_with("cluster: "))
        .unwrap();
    let shown: f64 = header
        .split(", ")
        .nth(1)
        .and_then(|t| t.strip_suffix(" TFLOP/s bf16 each)"))
        .unwrap_or_else(|| panic!("{header}"))
        .parse()
        .unwrap();
    let want = peak * 1e-3;
    assert!(
        (shown - want).abs() <= 0.005 * want,
        "{header}: want {want} TFLOP/s"
    );
}

#[test]
fn a_profile_whose_peak_was_edited_below_its_measured_gemms_is_refused() {
    let dir = scratch("leftovers", "edited-profile");
    let text = cpu_profile(&dir, "cpu.yaml");
    std::fs::write(
        dir.join("edited.yaml"),
        scaled(&text, &["peak_bf16_tflops"], 1e-4),
    )
    .unwrap();
    let r = run_in(&dir, &with(&TINY_EVAL, &["--calibration", "edited.yaml"]));
    assert_one_line_error(
        &r,
        &[
            "edited.yaml",
            "gemm_shapes[0].tflops",
            "above the profile's peak_bf16_tflops",
        ],
        &[],
        "edited peak",
    );
    // The profile as written loads.
    let ok = run_in(&dir, &with(&TINY_EVAL, &["--calibration", "cpu.yaml"]));
    assert!(ok.code == 0 || ok.code == 1, "{}", lines_of(&ok));
}

// ---- 7. an error about a plan file's value names the file's key and the file ---------------

/// The bundled seed plan with `from` replaced by `to`, written to `dir/name`; its path.
fn edited_plan(dir: &Path, name: &str, from: &str, to: &str) -> String {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("plans/best-512b-32nodes.yaml")).unwrap();
    assert!(text.contains(from), "{from}");
    let path = dir.join(name);
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn plan_file_values_are_named_by_key_and_file() {
    let dir = scratch("leftovers", "file-keys");
    let vpp = edited_plan(&dir, "vpp.yaml", "\n  vpp: 7\n", "\n  vpp: 8\n");
    let r = run(&["eval", "--plan", &vpp]);
    assert_one_line_error(
        &r,
        // Unequal chunks run any vpp up to the stage's 7 layers (tests/hostile_round39.rs).
        &[
            &format!("vpp: 8 in {vpp} cuts each stage's 7 layers"),
            "valid: 1 to 7",
        ],
        &["--vpp 8"],
        "vpp in file",
    );
    let nodes = edited_plan(&dir, "nodes.yaml", "\nnodes: 32\n", "\nnodes: 0\n");
    let r = run(&["eval", "--plan", &nodes]);
    assert_one_line_error(
        &r,
        &[&format!("nodes: 0 in {nodes} must be at least 1")],
        &["--nodes 0"],
        "nodes in file",
    );
    // Several of the file's values: the file named once, in front; the fix names the file's
    // keys (round 8: the lines to edit, not flags).
    let tp = edited_plan(&dir, "tp.yaml", "\n  tp: 8\n", "\n  tp: 3\n");
    let r = run(&["eval", "--plan", &tp]);
    assert_one_line_error(
        &r,
        &[
            &format!("error: {tp}: tp: 3 x cp: 1 x pp: 16 x dp: 2 = 96 GPUs"),
            "change tp, cp or pp",
        ],
        &["--tp 3", "--tp,"],
        "degrees in file",
    );
    // A flag over the file is named as the flag; one equal to the file's value changed nothing,
    // so it is named with the file's key (round 9).
    let r = run(&["eval", "--plan", &tp, "--tp", "4", "--pp", "16"]);
    assert_one_line_error(
        &r,
        &["--tp 4 x cp: 1 x pp: 16 (also --pp 16) x dp: 2 = 128 GPUs"],
        &["tp: 3", "x --pp 16"],
        "flag over file",
    );
    // compare and report read plan files too.
    let seed = Path::new(ROOT).join("plans/best-512b-32nodes.yaml");
    let r = run(&["compare", "--plan", seed.to_str().unwrap(), "--plan", &vpp]);
    assert_one_line_error(
        &r,
        &[&format!("vpp: 8 in {vpp} cuts each stage's 7 layers")],
        &["--vpp 8"],
        "compare",
    );
    let out = dir.join("report");
    let r = run(&["report", &vpp, "--out", out.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &[&format!("vpp: 8 in {vpp} cuts each stage's 7 layers")],
        &["--vpp 8"],
        "report",
    );
}

// ---- 8. a plan file's relative paths are read from the plan file's folder ------------------

const SMALL_PLAN: &str =
    "nodes: 1\nglobal_batch: 64\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n  micro_batch: 1\n";

/// The step time `eval --format json` reports.
fn step_s(r: &Run) -> f64 {
    assert!(r.code == 0 || r.code == 1, "{}", lines_of(r));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["plans"][0]["time"]["step_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{}", r.stdout))
}

#[test]
fn a_plan_files_relative_model_and_gpu_are_read_beside_it_from_any_folder() {
    let dir = scratch("leftovers", "plan-folder");
    let specs = dir.join("specs");
    std::fs::create_dir_all(specs.join("gpus")).unwrap();
    std::fs::copy(
        Path::new(ROOT).join("models/llama3-8b.yaml"),
        specs.join("m.yaml"),
    )
    .unwrap();
    // A GPU of its own, so that reading the bundled one instead would show.
    let gpu = std::fs::read_to_string(Path::new(ROOT).join("clusters/h100-sxm-80g.yaml"))
        .unwrap()
        .replacen("name: h100-sxm-80g", "name: my-gpu", 1);
    assert!(gpu.contains("name: my-gpu"));
    std::fs::write(specs.join("gpus/g.yaml"), &gpu).unwrap();
    std::fs::write(
        specs.join("plan.yaml"),
        format!("model: m.yaml\ngpu: gpus/g.yaml\n{SMALL_PLAN}"),
    )
    .unwrap();
    let plan = specs.join("plan.yaml");
    for (cwd, path) in [
        (dir.as_path(), "specs/plan.yaml"),
        (specs.as_path(), "plan.yaml"),
        (Path::new("/"), plan.to_str().unwrap()),
    ] {
        let r = run_in(cwd, &["eval", "--plan", path]);
        assert!(r.code == 0 || r.code == 1, "from {cwd:?}: {}", lines_of(&r));
        assert!(
            r.stdout.contains("1 node x 8 my-gpu = 8 GPUs"),
            "from {cwd:?}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("32 layers, hidden 4096"), "{}", r.stdout);
    }
    // A missing one is said with the plan file, the key and the path looked at.
    std::fs::write(
        specs.join("missing.yaml"),
        format!("model: nope.yaml\n{SMALL_PLAN}"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "specs/missing.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "specs/missing.yaml",
            "model:",
            "specs/nope.yaml",
            "cannot read it",
        ],
        &["--model"],
        "missing model",
    );
}

#[test]
fn a_plan_files_bundled_names_stay_bundled_whatever_the_folders_hold() {
    let dir = scratch("leftovers", "plan-bundled");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("sub/plan.yaml"),
        format!("model: llama3-8b\ngpu: h100-sxm-80g\n{SMALL_PLAN}"),
    )
    .unwrap();
    let args = ["eval", "--plan", "sub/plan.yaml", "--format", "json"];
    let clean = step_s(&run_in(&dir, &args));
    // Files of those names in the current folder change nothing.
    shadow(&dir, &["llama3-8b", "h100-sxm-80g"]);
    assert_eq!(step_s(&run_in(&dir, &args)), clean);
    // Beside the plan file, a file of a bundled name could be either: refused, naming the fix.
    shadow(&dir.join("sub"), &["h100-sxm-80g"]);
    let r = run_in(&dir, &args[..3]);
    assert_one_line_error(
        &r,
        &[
            "sub/plan.yaml: gpu: h100-sxm-80g",
            "beside the plan file",
            "./h100-sxm-80g",
        ],
        &[],
        "ambiguous beside the plan",
    );
}

#[test]
fn plan_save_writes_a_gpu_file_as_its_path_from_the_plan_folder() {
    let dir = scratch("leftovers", "save-gpu-path");
    std::fs::create_dir_all(dir.join("gpus")).unwrap();
    std::fs::create_dir_all(dir.join("plans")).unwrap();
    std::fs::copy(
        Path::new(ROOT).join("clusters/h100-sxm-80g.yaml"),
        dir.join("gpus/g.yaml"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--gpu",
            "gpus/g.yaml",
            "--save",
            "plans/best.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", lines_of(&r));
    let saved = std::fs::read_to_string(dir.join("plans/best.yaml")).unwrap();
    assert!(saved.contains("\ngpu: ../gpus/g.yaml\n"), "{saved}");
    // Read back from the folder it was saved in and from the plan's own folder.
    for (cwd, path) in [
        (dir.clone(), "plans/best.yaml"),
        (dir.join("plans"), "best.yaml"),
    ] {
        let r = run_in(&cwd, &["eval", "--plan", path]);
        assert!(r.code == 0 || r.code == 1, "from {cwd:?}: {}", lines_of(&r));
    }
}

// ---- 9. an argument that is not UTF-8 is named, with exit 2 --------------------------------

#[test]
fn a_non_utf8_argument_is_one_line_naming_its_flag_and_value() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    for (args, flag) in [
        (vec![&b"plan"[..], b"--params", b"\xff"], "--params \\xff"),
        (
            vec![&b"plan"[..], b"--nodes", b"1", b"--model=a\xffb"],
            "--model a\\xffb",
        ),
        (
            vec![&b"eval"[..], b"--plan", b"\xff.yaml"],
            "--plan \\xff.yaml",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
            .args(args.iter().map(|a| OsString::from_vec(a.to_vec())))
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let r = Run {
            code: out.status.code().unwrap(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_one_line_error(
            &r,
            &[flag, "is not valid UTF-8", "retype it"],
            &["panicked", "one or more arguments"],
            flag,
        );
    }
}

// ---- 10. sweep's exit codes are plan's: 0 found, 1 nothing fits, 2 bad input ---------------

#[test]
fn sweep_exits_0_1_2_as_plan_does() {
    let sweep = |extra: &[&str]| run(&with(&["sweep", "--format", "csv"], extra));
    let found = sweep(&["--params", "70B", "--axis", "nodes", "--values", "1,4"]);
    assert_eq!(found.code, 0, "{}", lines_of(&found));
    // Valid points, none fitting (one with no valid split at all): exit 1, the rows printed.
    let none = sweep(&[
        "--params",
        "1T",
        "--axis",
        "nodes",
        "--values",
        "20,1",
        "--global-batch",
        "1536",
    ]);
    assert_eq!(none.code, 1, "{}", lines_of(&none));
    assert_eq!(none.stdout.lines().count(), 3, "{}", none.stdout);
    assert!(
        none.stderr.contains("nothing fits at any point"),
        "{}",
        none.stderr
    );
    // One point's value bad: exit 2, one line naming it, nothing on stdout.
    let bad = sweep(&["--params", "70B", "--axis", "nodes", "--values", "1,0,4"]);
    assert_one_line_error(&bad, &["\"0\"", "--axis nodes"], &[], "nodes 0");
    assert!(bad.stdout.is_empty(), "{}", bad.stdout);
    let bad = sweep(&[
        "--params",
        "70B",
        "--nodes",
        "2",
        "--axis",
        "gpu",
        "--values",
        "h100-sxm-80g,nope",
    ]);
    assert_one_line_error(
        &bad,
        &["--axis gpu at nope", "unknown GPU"],
        &[],
        "gpu nope",
    );
    assert!(bad.stdout.is_empty(), "{}", bad.stdout);
}

// ---- 11. sequence parallelism can be pinned off ---------------------------------------------

/// The `sequence_parallel` of every plan `plan --format json` shows.
fn sp_of_plans(extra: &[&str]) -> Vec<bool> {
    let v = json(&with(
        &[
            "plan",
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--global-batch",
            "512",
            "--top",
            "20",
            "--format",
            "json",
        ],
        extra,
    ));
    v["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sequence_parallel"].as_bool().unwrap())
        .collect()
}

#[test]
fn sequence_parallelism_pins_on_and_off_in_plan_and_eval() {
    // Unpinned, the best plans use it; pinned off, none does; pinned on (bare or true), all do.
    assert!(sp_of_plans(&[]).contains(&true));
    let off = sp_of_plans(&["--sequence-parallel", "false"]);
    assert!(!off.is_empty() && off.iter().all(|sp| !sp), "{off:?}");
    for on in [
        &["--sequence-parallel"][..],
        &["--sequence-parallel", "true"],
    ] {
        let plans = sp_of_plans(on);
        assert!(
            !plans.is_empty() && plans.iter().all(|sp| *sp),
            "{on:?}: {plans:?}"
        );
    }
    let bad = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--sequence-parallel",
        "maybe",
    ]);
    assert_one_line_error(
        &bad,
        &["'maybe'", "--sequence-parallel", "true, false"],
        &[],
        "maybe",
    );
    // eval takes the same form, and false turns a plan file's sequence parallelism off.
    let seed = Path::new(ROOT).join("plans/best-512b-32nodes.yaml");
    let seed = seed.to_str().unwrap();
    let line = |extra: &[&str]| {
        let r = run(&with(&["eval", "--plan", seed], extra));
        assert!(r.code == 0 || r.code == 1, "{}", lines_of(&r));
        r.stdout
            .lines()
            .find(|l| l.starts_with("plan: "))
            .unwrap()
            .to_string()
    };
    assert!(line(&[]).contains("sequence parallel on"));
    assert!(line(&["--sequence-parallel", "false"]).contains("sequence parallel off"));
    assert!(line(&["--sequence-parallel"]).contains("sequence parallel on"));
}

// ---- 12. the ledger agrees with the breakdown to rounding, count by count ------------------

/// Mixtral with a MoE layer every `freq` layers on 16 stages (the ledger once rounded the
/// busiest stage's MoE share where `evaluate` kept the model's average): every expert-parallel
/// ledger row runs exactly once per micro-batch per MoE layer of the slowest stage (the check in
/// `cost::ledger`'s tests allows twice that), the rows add up to `comm.ep` to 1e-9, and to the
/// GB the printed breakdown shows, to its two decimals.
#[test]
fn ledger_rows_count_and_total_exactly_what_the_breakdown_shows() {
    let mut checked = 0;
    for freq in ["3", "8"] {
        for (tp, ep, etp, dp) in [
            ("1", "2", "1", "2"),
            ("1", "1", "2", "2"),
            ("2", "1", "2", "1"),
        ] {
            for recompute in ["none", "full"] {
                let global_batch = (2 * dp.parse::<u32>().unwrap()).to_string();
                let args = [
                    "eval",
                    "--model",
                    "mixtral-8x7b",
                    "--moe-layer-freq",
                    freq,
                    "--nodes",
                    "4",
                    "--tp",
                    tp,
                    "--pp",
                    "16",
                    "--ep",
                    ep,
                    "--etp",
                    etp,
                    "--micro-batch",
                    "1",
                    "--global-batch",
                    &global_batch,
                    "--seq-len",
                    "4096",
                    "--recompute",
                    recompute,
                    "--zero",
                    "1",
                ];
                let what = args.join(" ");
                let v = json(&with(&args, &["--format", "json"]));
                let p = &v["plans"][0];
                let per_row = p["num_microbatches"].as_f64().unwrap()
                    * p["slowest_stage_moe_layers"].as_f64().unwrap();
                let rows: Vec<&Value> = p["ledger"]["entries"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["group"] == "ep" || e["group"] == "expert_tp")
                    .collect();
                for row in &rows {
                    assert_eq!(row["count"].as_f64().unwrap(), per_row, "{what}: {row}");
                }
                let ledger: f64 = rows
                    .iter()
                    .map(|e| e["count"].as_f64().unwrap() * e["wire_bytes"].as_f64().unwrap())
                    .sum();
                let comm = p["comm"]["ep"]["wire_bytes"].as_f64().unwrap();
                assert!(
                    (ledger - comm).abs() <= 1e-9 * comm.max(1.0),
                    "{what}: ledger {ledger} B vs comm.ep {comm} B"
                );
                assert_eq!(rows.is_empty(), comm == 0.0, "{what}");
                // The breakdown eval prints: "EP   0.40 GB on NVLink ...".
                let text = run(&args);
                assert!(text.code == 0 || text.code == 1, "{}", lines_of(&text));
                let shown = text
                    .stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("  EP "))
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|gb| gb.parse::<f64>().ok());
                match shown {
                    Some(gb) => assert!(
                        (gb - ledger / 1e9).abs() <= 0.005 + 1e-12,
                        "{what}: breakdown {gb} GB vs ledger {} GB",
                        ledger / 1e9
                    ),
                    None => assert_eq!(ledger, 0.0, "{what}: no EP line, ledger {ledger} B"),
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn compare_offers_the_files_keys_not_flags_it_does_not_take() {
    // `compare --plan` has no --tp/--pp/--dp: a plan file whose degrees do not fill the cluster is
    // told to change the file's keys.
    let dir = scratch("review-leftovers", "compare-keys");
    let good =
        std::fs::read_to_string(Path::new(ROOT).join("plans/best-512b-32nodes.yaml")).unwrap();
    let bad = good.replace("\n  dp: 2\n", "\n  dp: 3\n");
    assert_ne!(good, bad);
    std::fs::write(dir.join("good.yaml"), &good).unwrap();
    std::fs::write(dir.join("bad.yaml"), &bad).unwrap();
    let r = run_in(
        &dir,
        &["compare", "--plan", "good.yaml", "--plan", "bad.yaml"],
    );
    assert_one_line_error(
        &r,
        &["bad.yaml: ", "dp: 3 = 384 GPUs", "e.g. dp: 2"],
        &["--dp"],
        "compare with a file whose degrees do not fill the cluster",
    );
}
