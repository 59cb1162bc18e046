//! Hostile input, round 15: what probing every command and input channel again found. Every error
//! case checks exit 2, one line on stderr (so no note before it, no panic, no backtrace) and the
//! words that name the value, the rule and the fix.

mod common;

use common::*;

const MIXTRAL: [&str; 4] = ["--model", "mixtral-8x7b", "--nodes", "4"];

fn with(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run_owned(args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

/// `plan --emit deepspeed --framework torchtitan --save FILE` searched, wrote the best plan to FILE
/// ("saved the best plan to ...") and only then refused the emit (exit 2): a failed run left an
/// output file behind. The emit's input checks now run before the search, so nothing is written.
#[test]
fn a_refused_emit_writes_no_saved_plan() {
    let dir = scratch("hostile15", "emit-save");
    for (args, words) in [
        (
            vec![
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--framework",
                "torchtitan",
                "--emit",
                "deepspeed",
                "--save",
                "best.yaml",
            ],
            [
                "--emit deepspeed",
                "--framework torchtitan",
                "use --framework deepspeed",
            ],
        ),
        (
            vec![
                "plan",
                "--model",
                "mixtral-8x7b",
                "--nodes",
                "4",
                "--global-batch",
                "256",
                "--emit",
                "nemo",
                "--save",
                "best.yaml",
            ],
            ["--emit nemo", "mixture-of-experts", "--emit megatron"],
        ),
    ] {
        let r = run_in(&dir, &args);
        assert_one_line_error(&r, &words, &["saved the best plan"], &args.join(" "));
        assert!(
            !dir.join("best.yaml").exists(),
            "{args:?}: a refused run wrote its --save file"
        );
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
}

/// Notes about the input (a routing or window that changes nothing, the framework `--emit`
/// plans for, the default batch, a launch line's skipped flags) were printed as soon as they were
/// known, so input refused a moment later got them before its error: two to four lines on stderr
/// for one error. They are now held until the input is known to be valid, and dropped when it is
/// refused.
#[test]
fn a_refused_input_gets_its_error_without_the_notes_before_it() {
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            with(
                &["plan"],
                &[
                    &MIXTRAL[..],
                    &[
                        "--global-batch",
                        "256",
                        "--moe-routing",
                        "round-robin",
                        "--tp",
                        "3",
                    ],
                ]
                .concat(),
            ),
            vec!["--tp 3", "admits no valid plan", "--tp 1, 2, 4, 8"],
        ),
        (
            with(
                &["plan"],
                &[
                    &MIXTRAL[..],
                    &[
                        "--global-batch",
                        "256",
                        "--attention-window",
                        "999999",
                        "--precision",
                        "nvfp4",
                    ],
                ]
                .concat(),
            ),
            vec!["--precision nvfp4", "h100-sxm-80g"],
        ),
        (
            with(
                &["eval"],
                &[
                    &MIXTRAL[..],
                    &[
                        "--tp",
                        "2",
                        "--pp",
                        "1",
                        "--ep",
                        "8",
                        "--global-batch",
                        "256",
                    ],
                    &["--moe-routing", "round-robin", "--tp-comm-overlap", "true"],
                    &["--sequence-parallel", "false"],
                ]
                .concat(),
            ),
            // Megatron-Core runs no MoE layer under TP without sequence parallelism, the first
            // rule this plan breaks (the TP overlap needs it too).
            vec!["--tp 2 without --sequence-parallel", "mixture-of-experts"],
        ),
        // The default batch's note and `--emit deepspeed`'s choice of framework came first.
        (
            with(
                &["eval"],
                &[
                    &MIXTRAL[..],
                    &["--tp", "2", "--pp", "1", "--ep", "8", "--emit", "deepspeed"],
                ]
                .concat(),
            ),
            vec!["--emit deepspeed", "mixture-of-experts", "--emit megatron"],
        ),
        (
            with(
                &["eval"],
                &[
                    "--params",
                    "7B",
                    "--nodes",
                    "1",
                    "--tp",
                    "8",
                    "--framework",
                    "torchtitan",
                    "--emit",
                    "deepspeed",
                ],
            ),
            vec![
                "--emit deepspeed",
                "--framework torchtitan",
                "use --framework deepspeed",
            ],
        ),
        (
            with(
                &["sweep"],
                &[
                    "--params",
                    "7B",
                    "--nodes",
                    "1",
                    "--axis",
                    "gpu",
                    "--values",
                    "h100-sxm-80g,gb200-nvl72",
                    "--threads",
                    "0",
                ],
            ),
            vec!["--threads 0", "at least one thread"],
        ),
    ];
    for (args, words) in cases {
        let r = run_owned(&args);
        assert_one_line_error(&r, &words, &["note:"], &args.join(" "));
    }
}

/// The held notes still reach stderr when the input is valid.
#[test]
fn held_notes_are_said_when_the_input_is_valid() {
    let args = with(
        &["plan"],
        &[
            &MIXTRAL[..],
            &[
                "--global-batch",
                "256",
                "--moe-routing",
                "round-robin",
                "--top",
                "1",
            ],
        ]
        .concat(),
    );
    let r = run_owned(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("note: --moe-routing round-robin changes only")),
        "{}",
        r.stderr
    );
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("note: --emit deepspeed plans as --framework deepspeed")),
        "{}",
        r.stderr
    );
}

/// `eval --plan FILE --framework deepspeed` said "note: --cp 2 is evaluated as asked" of a cp the
/// plan file set, naming a flag nobody gave. A degree the file sets is now named by its key and
/// the file; one given as a flag still by the flag.
#[test]
fn a_framework_note_names_the_plan_files_key_not_a_flag_never_given() {
    let dir = scratch("hostile15", "framework-note");
    let plan = bundled_plan_with("  cp: 1", "  cp: 2").replace("  dp: 2\n", "  dp: 1\n");
    std::fs::write(dir.join("cp.yaml"), plan).unwrap();
    // 2021 Megatron-LM has no context parallelism (DeepSpeed's is Ulysses since 2026-12-05).
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "cp.yaml",
            "--framework",
            "megatron-lm-2021",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    for words in [
        "note: cp: 2 in cp.yaml is evaluated as asked",
        "note: sequence_parallel: true in cp.yaml is evaluated as asked",
    ] {
        assert!(
            r.stderr.lines().any(|l| l.starts_with(words)),
            "{words}: {}",
            r.stderr
        );
    }
    assert!(!r.stderr.contains("--cp 2"), "{}", r.stderr);
    // DeepSpeed's pipeline engine has no interleaving.
    std::fs::write(
        dir.join("vpp.yaml"),
        bundled_plan_with("  cp: 1", "  cp: 1"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &["eval", "--plan", "vpp.yaml", "--framework", "deepspeed"],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("note: vpp: 7 in vpp.yaml is evaluated as asked")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--vpp 7"), "{}", r.stderr);
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "cp.yaml",
            "--framework",
            "megatron-lm-2021",
            "--cp",
            "2",
        ],
    );
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("note: --cp 2 is evaluated as asked")),
        "{}",
        r.stderr
    );
}

/// `plan --save` and `calibrate --output` wrote the output path into the file's first comment as
/// typed: a path with a line break (`$'x\ny.yaml'`) ended the comment early, the rest of the path
/// became a YAML line, and the file tpsim had just written (exit 0) could not be read back
/// (`invalid type: string "y.yaml\`. model"`). The path is now quoted with its line break escaped.
#[test]
fn an_output_path_with_a_line_break_leaves_a_file_tpsim_reads_back() {
    let dir = scratch("hostile15", "newline-path");
    let saved = "best\nplan.yaml";
    let r = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--top",
            "1",
            "--save",
            saved,
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(dir.join(saved)).unwrap();
    assert!(
        text.starts_with("# Written by `tpsim plan`; read it back with `tpsim eval --plan \"best\\nplan.yaml\"`.\n"),
        "{text}"
    );
    let r = run_in(&dir, &["eval", "--plan", saved, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let profile = "cal\nprofile.yaml";
    let r = run_in(
        &dir,
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--layers",
            "1",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--seq-len",
            "32",
            "--ranks",
            "2",
            "--tp",
            "1,2",
            // Edges far apart: at 16 and 32 alone the GEMM times of one repetition on a loaded
            // machine can fall with their FLOPs, which `calibrate` refuses as noise; this test is
            // about the file name, not the fit.
            "--sweep",
            "16,256",
            "--max-message",
            "64KiB",
            "--copy-bytes",
            "1MiB",
            "--warmup",
            "0",
            "--reps",
            "1",
            "--output",
            profile,
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run_in(
        &dir,
        &[
            "eval",
            "--layers",
            "1",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--seq-len",
            "32",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--global-batch",
            "2",
            "--calibration",
            profile,
            "--format",
            "json",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stdout.contains("NaN"), "{}", r.stdout);
}

/// `calibrate --backend cpu --micro-batch 4294967295` said "backend: cpu (--backend cpu)" and only
/// then refused the shard GEMMs as too large for the CPU backend: two lines for one error, and the
/// error never named the flag that made the GEMMs that large. The GEMMs are now checked before the
/// backend is named, and the error names the tokens per micro-batch that set their size.
#[test]
fn a_calibration_too_large_for_the_cpu_is_refused_before_it_starts() {
    let dir = scratch("hostile15", "calibrate-huge");
    let r = run_in(
        &dir,
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--layers",
            "1",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--seq-len",
            "32",
            "--ranks",
            "2",
            "--tp",
            "1,2",
            "--sweep",
            "16,32",
            "--warmup",
            "0",
            "--reps",
            "1",
            "--micro-batch",
            "4294967295",
            "--output",
            "cal.yaml",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "--seq-len 32 x --micro-batch 4294967295",
            "too large for the CPU backend",
            "use a small model",
        ],
        &["backend: cpu"],
        "huge micro-batch",
    );
    assert!(!dir.join("cal.yaml").exists());
}

/// `RAYON_NUM_THREADS=100000 tpsim plan ...` started 100,000 worker threads for a search of a tenth
/// of a second (5,000 threads took 34 s): the environment bypassed the bound `--threads` has. It is
/// now refused with that bound; a value within it still runs.
#[test]
fn a_thread_count_from_the_environment_has_the_flags_bound() {
    let search = [
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
    ];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .args(search)
        .env("RAYON_NUM_THREADS", "100000")
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
        &["RAYON_NUM_THREADS=100000", "more than 1024", "unset it"],
        &[],
        "huge RAYON_NUM_THREADS",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .args(search)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// A DeepSeek config's MoE layers are those at i >= first_k_dense_replace with
/// i % moe_layer_freq == 0; tpsim counted every moe_layer_freq-th layer from first_k_dense_replace
/// itself, so `moe_layer_freq` 7 (with DeepSeek-V3's 3 dense layers of 61) gave 9 MoE layers where
/// the config has 8 (7, 14, ..., 56), and 100 gave one where it has none: a different model,
/// without a word. The first MoE layer is now the first multiple of the frequency past the dense
/// ones, and a config left with no MoE layer is refused.
#[test]
fn a_deepseek_layer_frequency_places_the_configs_moe_layers() {
    let dir = scratch("hostile15", "deepseek-freq");
    let config = |freq: u32| {
        let text = std::fs::read_to_string(format!("{ROOT}/models/hf/deepseek-v3.json")).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["moe_layer_freq"] = freq.into();
        value.to_string()
    };
    for (freq, first_moe) in [(1, 3), (2, 4), (7, 7)] {
        let r = eval_hf(&dir, &format!("freq{freq}.json"), &config(freq));
        let model = hf_model(&r);
        assert_eq!(model["moe"]["layer_freq"], freq, "{}", r.stderr);
        assert_eq!(
            model["moe"]["first_dense_layers"], first_moe,
            "{}",
            r.stderr
        );
    }
    let r = eval_hf(&dir, "freq100.json", &config(100));
    assert_one_line_error(
        &r,
        &[
            "\"moe_layer_freq\" 100",
            "\"first_k_dense_replace\" 3",
            "none of the 61 layers",
            "check both keys",
        ],
        &[],
        "freq 100",
    );
}

/// `compare --plan a.yaml --plan b.yaml --global-batch 7` (dp 2) ended "valid micro-batches for
/// this dp: none: --global-batch 7 is not divisible by dp: 2" with no fix, where `eval` names a
/// multiple to give. The shared rule now carries that fix, in the file's words where the file set
/// the batch.
#[test]
fn a_batch_no_micro_batch_splits_names_a_multiple_to_give_in_compare() {
    let plan = format!("{ROOT}/plans/best-512b-32nodes.yaml");
    let seed = format!("{ROOT}/plans/seed-512b-32nodes.yaml");
    let r = run(&[
        "compare",
        "--plan",
        &plan,
        "--plan",
        &seed,
        "--global-batch",
        "7",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--global-batch 7 is not divisible by dp: 2",
            "give a multiple of 2 (e.g. --global-batch 8)",
        ],
        &[],
        "compare --global-batch 7",
    );
    let dir = scratch("hostile15", "compare-batch");
    std::fs::write(
        dir.join("b7.yaml"),
        bundled_plan_with("global_batch: 1536", "global_batch: 7"),
    )
    .unwrap();
    let r = run_in(&dir, &["compare", "--plan", "b7.yaml", "--plan", "b7.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "global_batch: 7 is not divisible by dp: 2",
            "give a multiple of 2 (e.g. global_batch: 8)",
        ],
        &["--global-batch"],
        "compare file batch 7",
    );
}

/// A GPU profile whose sustained matmul fraction is 0.001 (the range allows it) printed
/// "tensor-core kernels 100% slower", no speed at all, and one a hair under the reference
/// "0% slower" beside the note that it is slower. The share now keeps the decimals that hold it
/// off both ends.
#[test]
fn a_slower_clock_is_never_shown_as_0_or_100_percent_slower() {
    let dir = scratch("hostile15", "clock-share");
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    for (fraction, shown) in [("0.001", "99.9% slower"), ("0.8869", "0.01% slower")] {
        let profile: String = h100
            .lines()
            .map(|line| {
                if line.starts_with("sustained_matmul_fraction:") {
                    format!("sustained_matmul_fraction: {fraction}\n")
                } else if line.starts_with("name:") {
                    format!("name: clock-{fraction}\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        std::fs::write(dir.join("gpu.yaml"), profile).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--global-batch",
                "64",
                "--gpu",
                "gpu.yaml",
            ],
        );
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        assert!(
            r.stdout.contains(&format!("tensor-core kernels {shown}")),
            "{fraction}: {}",
            r.stdout
        );
    }
}

/// A GPU profile at the slow ends of its ranges (peak 0.000001 TFLOP/s, efficiencies 0.001)
/// printed "throughput: 0 tokens/s, ... (MFU 0.0%)" for a plan that does train: a positive rate
/// shown as none. Both are now shown to three significant digits when rounding would print 0.
#[test]
fn a_slow_profiles_throughput_is_never_shown_as_zero() {
    let dir = scratch("hostile15", "slow-rate");
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let profile: String = h100
        .lines()
        .map(|line| {
            // Top-level keys only: the `sources:` list quotes them too.
            let key = match line.starts_with(' ') {
                true => "",
                false => line.split(':').next().unwrap_or(""),
            };
            if key == "peak_bf16_tflops" || key == "peak_fp8_tflops" {
                format!("{key}: 0.000001\n")
            } else if key.ends_with("_efficiency") {
                format!("{key}: 0.001\n")
            } else if key == "name" {
                "name: slow\n".to_string()
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    std::fs::write(dir.join("slow.yaml"), profile).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "64",
            "--gpu",
            "slow.yaml",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("throughput: "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(!line.starts_with("throughput: 0 tokens/s"), "{line}");
    assert!(!line.contains("MFU 0.0%"), "{line}");
    assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
}

/// `plan --save FILE` where nothing fits exited 1 and wrote no file without a word about it, where
/// `--report DIR` says "no report written to DIR: no plan fits". It now says the same of the file.
#[test]
fn a_save_where_nothing_fits_says_no_plan_was_saved() {
    let dir = scratch("hostile15", "save-nothing-fits");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--params",
            "1T",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--save",
            "best.yaml",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l == "no plan saved to best.yaml: no plan fits"),
        "{}",
        r.stderr
    );
    assert!(!dir.join("best.yaml").exists());
}
