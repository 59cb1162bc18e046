//! Hostile input, round 46: what landed this session (`plan`'s `pinned:` line and its `--mb` /
//! `--sp` aliases, plan files without `sequence_parallel:`/`zero:`/`etp:`, `validate --tp`'s batch
//! rule, `sweep`'s range-basis column, Qwen's sliding-window keys, `calibrate`'s size flags).
//! Defects found and fixed, one test each:
//! - `sweep --sp false` answered "it is a flag of tpsim plan, tpsim eval, tpsim validate", and
//!   `validate --tp 2 --sp` was then refused with clap's "a similar argument exists:
//!   '--moe-dispatcher'" (`--mb`: "'--moe-imbalance'"): validate took neither alias that plan's
//!   table and `pinned:` line teach.
//! - `validate --tp 2 --sequence-parallel false` (or `true`), as `plan`'s `pinned:` line writes
//!   it, was refused with "unexpected argument 'false' found", naming no rule or fix: validate's
//!   flag took no value where plan's and eval's take true or false.
//! - A plan file for a mixture-of-experts model without `sequence_parallel:` (tp 2, ep 2,
//!   Mixtral 8x7B) was refused "without --sequence-parallel ... Megatron-Core refuses", where the
//!   same degrees as flags (`eval --tp 2 --ep 2`) run with it on and a note: the file's missing
//!   key was read as `false`, not as the flag not given. `eval --plan`, `report` and
//!   `compare --plan` now take eval's default there, and eval's note names it.
//! - `sweep --format csv`'s range-basis cell turned every comma into a semicolon, the GPU's name
//!   included: a custom `--gpu FILE` named `acme "x1", rév 2` read `acme "x1"; rév 2` in the basis
//!   beside the row's own `gpu` cell and the JSON's text.
//! - A Qwen config with `use_sliding_window: true` and a `layer_types` of `full_attention` on every
//!   layer (no layer slides, as transformers runs it) was refused as an unmodelled window; a
//!   `layer_types` of the wrong length or type was refused with the same words, not as the list
//!   transformers' `layer_type_validation` refuses.
//! - `calibrate --backend cuda --min-message 10MB --max-message 1MB` (or `--min-message 0`,
//!   `--sweep 0`) on a machine without a CUDA driver was told to install the driver, and only once
//!   it was installed that the sizes are wrong; the sizes' own rules are now checked first.
//!
//! Looked at and found sound: `--mb`/`--sp` given twice and beside their long names (plan, eval,
//! and now validate: "given twice, every spelling"), `--mb 0`, `-1`, `1.5`, `99999`, `--sp=`,
//! `--sp yes`/`2`, `sweep`/`compare` refusing them by name; the pinned line for `--sp false --tp
//! 1`, recompute-num-layers, reshard-after-forward and dp-replicas pins; plan files with
//! `sequence_parallel:`/`zero:`/`etp:` given as null, `~`, empty, `1`, `"true"`, `yes`, `1.5`,
//! `-1`, `"1"`, `4` (each a one-line error naming the key, line and fix), and the missing-key
//! note under `framework: torchtitan|deepspeed` and `--framework` over the file; `validate`'s
//! "without --tp" refusal beside `--top`, its batch rule at every micro-batch that does or does not
//! split `--global-batch`, `--tp 1 --sequence-parallel`, `--micro-batch 0`, `--global-batch 0`;
//! Qwen sliding-window keys as null, negative, strings, past the layer count, `use_sliding_window`
//! null/1/"true"; `calibrate --backend cpu` at `--min-message 0`, `--max-message` 1/-1/1TB/1.5GB,
//! `--copy-bytes 0`, `--sweep 0`, `--reps 0`, `--ranks 0`, `--tp 0`.

mod common;

use common::*;

const SUITE: &str = "hostile46";

const VALIDATE_LAYER: [&str; 16] = [
    "validate",
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
    "--nodes",
    "1",
    "--reps",
    "1",
    "--warmup",
];

fn validate(extra: &[&str]) -> Run {
    let mut args: Vec<&str> = VALIDATE_LAYER.to_vec();
    args.push("0");
    args.extend_from_slice(extra);
    run(&args)
}

/// The `validating tp .. sp .. micro-batch ..` line validate prints for its case.
fn validating_line(r: &Run) -> String {
    r.stdout
        .lines()
        .chain(r.stderr.lines())
        .find(|l| l.starts_with("validating tp "))
        .unwrap_or_else(|| panic!("no validating line:\n{}\n{}", r.stdout, r.stderr))
        .to_string()
}

/// `sweep --sp false` names validate as a command that takes `--sp`; validate takes it (and
/// `--mb`), and runs the same layer as with the long names.
#[test]
fn validate_takes_the_mb_and_sp_aliases_sweep_names_it_for() {
    let r = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--sp",
        "false",
    ]);
    assert_one_line_error(
        &r,
        &["sweep takes no --sp", "tpsim validate"],
        &[],
        "sweep --sp",
    );

    let short = validate(&["--tp", "2", "--sp", "--mb", "2"]);
    assert_eq!(short.code, 0, "{}", short.stderr);
    let long = validate(&["--tp", "2", "--sequence-parallel", "--micro-batch", "2"]);
    assert_eq!(long.code, 0, "{}", long.stderr);
    assert_eq!(
        validating_line(&short),
        "validating tp 2 sp true micro-batch 2"
    );
    assert_eq!(validating_line(&short), validating_line(&long));

    // Given twice across spellings: refused as plan and eval refuse it.
    let twice = validate(&["--tp", "2", "--mb", "2", "--micro-batch", "4"]);
    assert_one_line_error(
        &twice,
        &["--micro-batch is given twice", "--mb 2", "--micro-batch 4"],
        &["--moe-imbalance"],
        "validate --mb twice",
    );
}

/// `plan --tp 2 --sp false` prints `pinned: --tp 2 --sequence-parallel false`; validate takes those
/// words, either value, and `false` without --tp is refused by the "without --tp" rule, whose
/// example then runs.
#[test]
fn validate_takes_sequence_parallel_true_or_false_as_plan_writes_it() {
    let plan = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpu",
        "h100-sxm-80g",
        "--tp",
        "2",
        "--sp",
        "false",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(
        plan.stdout
            .lines()
            .any(|l| l.starts_with("pinned: --tp 2 --sequence-parallel false")),
        "{}",
        plan.stdout
    );
    for (value, sp) in [("false", "false"), ("true", "true")] {
        let r = validate(&["--tp", "2", "--sequence-parallel", value]);
        assert_eq!(r.code, 0, "--sequence-parallel {value}: {}", r.stderr);
        assert_eq!(
            validating_line(&r),
            format!("validating tp 2 sp {sp} micro-batch 1")
        );
    }
    // `false` is the default: the same layer as without the flag.
    let r = validate(&["--tp", "1", "--sp", "false"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        validating_line(&r),
        "validating tp 1 sp false micro-batch 1"
    );

    let r = validate(&["--sp", "false"]);
    assert_one_line_error(
        &r,
        &[
            "--sequence-parallel false without --tp",
            "add --tp N (e.g. --tp 2 --sequence-parallel false)",
        ],
        &[],
        "validate --sp false without --tp",
    );
    let fix = validate(&["--tp", "2", "--sequence-parallel", "false"]);
    assert_eq!(fix.code, 0, "the fix runs: {}", fix.stderr);
}

const MIXTRAL_WITHOUT_SP: &str = "model: mixtral-8x7b\nnodes: 2\ngpu: h100-sxm-80g\nglobal_batch: 64\nplan:\n  tp: 2\n  pp: 1\n  dp: 8\n  ep: 2\n";

fn field<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
    let mut at = &v["plans"][0];
    for key in path {
        at = &at[*key];
    }
    at
}

/// A MoE plan file without `sequence_parallel:` runs what `eval --tp 2 --ep 2` runs (sequence
/// parallelism on, Megatron-Core's requirement), with the same numbers, and eval's note names the
/// key; `compare --plan` reads it the same way.
#[test]
fn a_moe_plan_file_without_sequence_parallel_runs_as_the_flags_not_given_do() {
    let dir = scratch(SUITE, "moe_sp");
    let path = dir.join("mixtral.yaml");
    std::fs::write(&path, MIXTRAL_WITHOUT_SP).unwrap();
    let path = path.to_string_lossy().into_owned();

    let r = run(&["eval", "--plan", &path]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.contains("under plan:, so eval took"))
        .unwrap_or_else(|| panic!("no note: {}", r.stderr));
    for needle in ["sequence_parallel:", "sequence parallel on", "moe_layer.py"] {
        assert!(note.contains(needle), "{needle:?} missing: {note}");
    }

    let from_file = json(&["eval", "--plan", &path, "--format", "json"]);
    let from_flags = json(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--pp",
        "1",
        "--dp",
        "8",
        "--ep",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(
        field(&from_file, &["sequence_parallel"]),
        &serde_json::Value::Bool(true)
    );
    for path in [
        &["sequence_parallel"][..],
        &["etp"],
        &["time", "step_s"],
        &["memory", "total_bytes"],
    ] {
        assert_eq!(
            field(&from_file, path),
            field(&from_flags, path),
            "{path:?} differs between the file and the flags"
        );
    }

    // compare --plan reads the same file the same way (it was refused as eval was).
    let other = dir.join("mixtral-zero1.yaml");
    std::fs::write(&other, format!("{MIXTRAL_WITHOUT_SP}  zero: 1\n")).unwrap();
    let r = run(&[
        "compare",
        "--plan",
        &path,
        "--plan",
        &other.to_string_lossy(),
    ]);
    assert!(r.code == 0 || r.code == 1, "compare: {}", r.stderr);

    // Written as false, the file is still refused, in the file's words.
    let off = dir.join("mixtral-off.yaml");
    std::fs::write(
        &off,
        format!("{MIXTRAL_WITHOUT_SP}  sequence_parallel: false\n"),
    )
    .unwrap();
    let r = run(&["eval", "--plan", &off.to_string_lossy()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("Megatron-Core refuses"), "{}", r.stderr);
}

/// The CSV's basis cell keeps a custom GPU's name as its `gpu` cell and the JSON write it.
#[test]
fn sweep_csv_range_basis_keeps_a_custom_gpu_name_as_written() {
    let dir = scratch(SUITE, "basis");
    let base = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let name = "acme \"x1\", rév 2";
    let text: String = base
        .lines()
        .map(|l| {
            if l.starts_with("name:") {
                "name: \"acme \\\"x1\\\", rév 2\"".to_string()
            } else if l.starts_with("peak_bf16_tflops:") {
                "peak_bf16_tflops: 900".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let gpu = dir.join("acme.yaml");
    std::fs::write(&gpu, text).unwrap();
    let values = format!("h100-sxm-80g,{}", gpu.to_string_lossy());
    let args = |format: &'static str| {
        vec![
            "sweep".to_string(),
            "--model".into(),
            "llama3-8b".into(),
            "--nodes".into(),
            "1".into(),
            "--axis".into(),
            "gpu".into(),
            "--values".into(),
            values.clone(),
            "--format".into(),
            format.into(),
        ]
    };
    let json_args = args("json");
    let v = json(&json_args.iter().map(String::as_str).collect::<Vec<_>>());
    let row = &v["rows"][1];
    assert_eq!(row["gpu"], name);
    let basis = row["time"]["step_s_range_basis"].as_str().unwrap();
    assert!(basis.contains(name), "{basis}");

    let csv_args = args("csv");
    let r = run(&csv_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.lines().nth(2).expect("the custom GPU's row");
    // RFC 4180: the name's quotes doubled, inside a quoted cell, in both cells.
    let quoted = "acme \"\"x1\"\", rév 2";
    assert!(
        line.contains(&format!(",\"{quoted}\",")),
        "gpu cell: {line}"
    );
    assert_eq!(
        line.matches(quoted).count(),
        2,
        "the basis names the GPU as the gpu cell does: {line}"
    );
    assert!(!line.contains("\"\"x1\"\"; rév"), "{line}");
}

fn qwen_config(dir: &std::path::Path, name: &str, extra: serde_json::Value) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/qwen3-8b.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, config.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// `use_sliding_window: true` with a `layer_types` that slides no layer is full attention, as
/// transformers runs it (the same numbers as the config without the keys); a `layer_types` of the
/// wrong length or type is refused as the list it is.
#[test]
fn qwen_layer_types_without_a_sliding_layer_read_as_full_attention() {
    let dir = scratch(SUITE, "qwen_layer_types");
    let layers = 36;
    let eval = |config: &str| {
        run(&[
            "eval",
            "--hf-config",
            config,
            "--nodes",
            "1",
            "--gpu",
            "h100-sxm-80g",
            "--tp",
            "8",
            "--global-batch",
            "64",
            "--format",
            "json",
        ])
    };
    let plain = eval(&qwen_config(&dir, "plain", serde_json::json!({})));
    assert!(plain.code == 0 || plain.code == 1, "{}", plain.stderr);
    let full = qwen_config(
        &dir,
        "full",
        serde_json::json!({"use_sliding_window": true, "layer_types": vec!["full_attention"; layers]}),
    );
    let r = eval(&full);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let a: serde_json::Value = serde_json::from_str(&plain.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        field(&a, &["time", "step_s"]),
        field(&b, &["time", "step_s"])
    );

    // A window on some layer is still refused as not modelled.
    let mut some = vec!["full_attention"; layers];
    some[layers - 1] = "sliding_attention";
    let sliding = qwen_config(
        &dir,
        "sliding",
        serde_json::json!({"use_sliding_window": true, "layer_types": some}),
    );
    assert_one_line_error(
        &eval(&sliding),
        &["use_sliding_window", "not modelled"],
        &[],
        "a sliding layer",
    );
    // ... unless the window is null: no layer slides then either (Qwen2Attention reads
    // config.sliding_window on a sliding layer).
    let null_window = qwen_config(
        &dir,
        "null_window",
        serde_json::json!({"use_sliding_window": true, "layer_types": some, "sliding_window": null}),
    );
    let r = eval(&null_window);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);

    for (name, value, said) in [
        (
            "short",
            serde_json::json!(["full_attention", "full_attention"]),
            "a list of 2 entries",
        ),
        (
            "text",
            serde_json::json!("full_attention"),
            "\"full_attention\"",
        ),
    ] {
        let config = qwen_config(
            &dir,
            name,
            serde_json::json!({"use_sliding_window": true, "layer_types": value}),
        );
        assert_one_line_error(
            &eval(&config),
            &[
                "key \"layer_types\" is",
                said,
                "not a list of 36 attention types",
                "layer_type_validation",
            ],
            &["not modelled"],
            name,
        );
    }
}

/// The CUDA backend's size rules are told before its driver is looked for: on a machine with no
/// driver (this one, or any CI runner) the sizes' error comes first; with a GPU, the same.
#[test]
fn calibrate_cuda_size_flags_are_checked_before_the_driver() {
    let dir = scratch(SUITE, "cuda_sizes");
    let out = dir.join("cal.yaml");
    let out = out.to_string_lossy();
    let base = [
        "calibrate",
        "--backend",
        "cuda",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "8",
        "--seq-len",
        "128",
        "--output",
        &out,
    ];
    for (extra, needles) in [
        (
            &["--min-message", "10MB", "--max-message", "1MB"][..],
            &["--max-message 1MB must be at least 4 x --min-message 10MB"][..],
        ),
        (
            &["--min-message", "0"],
            &["--min-message 0", "at least 1 byte"],
        ),
        (
            &["--copy-bytes", "0"],
            &["--copy-bytes 0", "at least 1 byte"],
        ),
        (&["--sweep", "0"], &["--sweep 0", "at least 1"]),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        assert_one_line_error(&run(&args), needles, &["libcuda"], &format!("{extra:?}"));
    }
}
