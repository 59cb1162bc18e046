//! Hostile input, round 48: user-written hardware profiles (`--gpu FILE`), hand-edited calibrated
//! profiles (`--calibration FILE`), user-written model files and Hugging Face configs, and where
//! outputs go. Every error case checks exit 2, one line on stderr and the words that name the
//! value, the rule and the fix; each fix given is then followed and accepted. Defects found:
//! - a GPU profile's `peak_fp8_tflops` below its `peak_bf16_tflops` (100 against H100's 989.4)
//!   was accepted, though the range's own doc calls the bf16 peak the floor, and `eval
//!   --precision fp8` priced FP8 GEMMs ten times slower than bf16 without a word (93 s a step
//!   against 13 s); likewise a `peak_fp4_tflops` below the FP8 peak. Both are now refused naming
//!   the two peaks and the rule (a narrower tensor-core format runs at least as fast).
//! - a calibrated profile whose `peak_bf16_tflops` was edited (0.0915 → 5000 on a CPU twin) was
//!   accepted: its GEMMs' `efficiency` (tflops / peak, as calibrate writes it) no longer matched,
//!   the cluster line said "5000 TFLOP/s", MFU read 0.00137% and the step moved 10%. A GEMM's
//!   `efficiency` edited alone passed too. Both are refused: where every GEMM gives the same
//!   other peak the fix restores `peak_bf16_tflops`, otherwise it rewrites that `efficiency`.
//! - a calibrated GEMM's `median_us` (with its min and max) edited 100x, leaving `tflops` as
//!   written, was accepted: two rates for one GEMM, the fit reading one and the summary another.
//!   `tflops` is now checked against 2·m·n·k·batch / median; the fix names the median that
//!   agrees with tflops and efficiency, or the tflops that agrees with the median.
//! - a Hugging Face config whose language model sits under `"text_config"` (LLaVA-style, with a
//!   text `model_type`) was told `key "hidden_size" is missing ... (e.g. "hidden_size": 4096)`,
//!   a fix that copies one key of many; it now says `text_config` gives the key and to save that
//!   object as its own config.json, which is then read.
//!
//! Looked at and found sound: GPU profiles without a required key, with an unknown key, a key
//! given twice, YAML anchors and aliases, bandwidths and peaks at 0, -50, .nan, .inf and 1e300,
//! memory 0 and 1e300, an NVLink domain of 4 under an 8-GPU node, efficiencies 0 and 2, latency
//! -1, gpus_per_node 0 / 8.5 / "8", host memory and host link 0, a file that is a directory,
//! empty, binary or 10 MB; calibrated profiles without `calibration:`, with an unknown backend,
//! devices 0, negative or NaN medians, NaN bandwidths, unknown keys at either level, another
//! gemm_dtype, a negative unix_time_s, a CPU twin given an FP8 peak; model files with hidden not
//! divisible by heads, head_dim 0, vocab 0 and 1e12, layers 1e9, 32.0 and 32.5, kv_heads 5 and
//! 64, ffn 0, seq_len 0, MoE keys a model file does not take, rotary_base -1 and NaN,
//! published_params_b 0 / -8 / NaN (1e300 is documentation only, read by no output), an unknown
//! norm, anchors; HF configs with the same breakages, floats for counts, an unknown or missing
//! model_type, a model_type that contradicts `architectures`, `num_experts_per_tok` above the
//! experts, `num_local_experts` 0 and 1.5, `rope_scaling` as text, of an unknown type or with a
//! NaN factor, `max_position_embeddings` 0, `num_key_value_heads` null (transformers' MHA rule),
//! `torch_dtype` odd values (not read: `--precision` sets the training precision), a config with
//! both `text_config` and top-level keys (the top level is read, as transformers' text classes
//! do). Outputs: `plan --save`, `sweep --chart` and `calibrate -o` onto the `--model`, `--gpu`,
//! `--calibration` or `--hf-config` file, through a symlink, a hard link or `../o/./` spelling
//! (refused, inputs untouched); `report --out` onto a directory holding the plan file under a
//! report name, or holding a user's own index.html / report.json / search.svg (refused, files
//! untouched); `/dev/full` for every output flag; names with spaces and unicode; JSON of
//! `eval`/`plan` on profiles at every range edge (no NaN, infinity or negative number).
//! Left as found: a read-only directory could not be tried (the tests run as root); `calibrate`
//! writes an unbounded confidence bound as 1.7976931348623157e308, which it reads back and
//! prints as "unbounded".

mod common;

use common::*;
use std::path::Path;

const H100: &str = "clusters/h100-sxm-80g.yaml";

/// The bundled H100 profile with the line starting `key:` replaced by `line`.
fn h100_with(key: &str, line: &str) -> String {
    let text = std::fs::read_to_string(Path::new(ROOT).join(H100)).unwrap();
    let mut found = false;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{key}:")) {
                found = true;
                line.to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    assert!(found, "no {key}: line in {H100}");
    out.join("\n") + "\n"
}

fn eval_gpu(dir: &Path, gpu: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu,
        "--nodes",
        "1",
        "--tp",
        "2",
        "--global-batch",
        "8",
    ];
    args.extend(extra);
    run_in(dir, &args)
}

#[test]
fn an_fp8_peak_below_the_bf16_peak_is_refused() {
    let dir = scratch("hostile48", "fp8-floor");
    std::fs::write(
        dir.join("g.yaml"),
        h100_with("peak_fp8_tflops", "peak_fp8_tflops: 100"),
    )
    .unwrap();
    let r = eval_gpu(&dir, "g.yaml", &["--precision", "fp8"]);
    assert_one_line_error(
        &r,
        &[
            "g.yaml",
            "peak_fp8_tflops: 100",
            "peak_bf16_tflops: 989.4",
            "rule: a narrower tensor-core format runs at least as fast",
            "give the dense peak_fp8_tflops",
        ],
        &[],
        "peak_fp8_tflops 100 under bf16 989.4",
    );
    // The fix (the datasheet's dense peak) is accepted.
    std::fs::write(
        dir.join("g.yaml"),
        h100_with("peak_fp8_tflops", "peak_fp8_tflops: 1978.9"),
    )
    .unwrap();
    let ok = eval_gpu(&dir, "g.yaml", &["--precision", "fp8"]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // An FP4 peak under the FP8 one is refused alike (B200: 9000 over 4500).
    let b200 = std::fs::read_to_string(Path::new(ROOT).join("clusters/b200-sxm-180g.yaml"))
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("peak_fp4_tflops:") {
                "peak_fp4_tflops: 3000".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("b.yaml"), b200).unwrap();
    let r = eval_gpu(&dir, "b.yaml", &[]);
    assert_one_line_error(
        &r,
        &["peak_fp4_tflops: 3000", "peak_fp8_tflops: 4500", "rule:"],
        &[],
        "peak_fp4_tflops 3000 under fp8 4500",
    );
}

/// A CPU-twin calibrated profile, written by `tpsim calibrate` into `dir/cal.yaml`.
fn calibrated(dir: &Path) -> String {
    let r = run_in(
        dir,
        &[
            "calibrate",
            "--layers",
            "2",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--vocab",
            "128",
            "--seq-len",
            "64",
            "--backend",
            "cpu",
            "--ranks",
            "2",
            "--sweep",
            "16,32,64",
            "--max-message",
            "64KiB",
            "--copy-bytes",
            "1MiB",
            "--warmup",
            "0",
            "--reps",
            "3",
            "--tp",
            "1,2",
            "-o",
            "cal.yaml",
        ],
    );
    assert_eq!(r.code, 0, "calibrate: {}", r.stderr);
    std::fs::read_to_string(dir.join("cal.yaml")).unwrap()
}

fn eval_calibration(dir: &Path, file: &str) -> Run {
    run_in(
        dir,
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--layers",
            "2",
            "--calibration",
            file,
            "--nodes",
            "1",
            "--tp",
            "2",
            "--global-batch",
            "8",
        ],
    )
}

/// The value after `key: ` on the first line (trimmed) that starts with `key:`.
fn first_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key}: in the profile"))
        .trim()
}

/// `text` with its first line (trimmed) starting `key: ` given `value`.
fn with_first(text: &str, key: &str, value: &str) -> String {
    let mut done = false;
    text.lines()
        .map(|l| {
            let trimmed = l.trim_start();
            if !done && trimmed.starts_with(&format!("{key}: ")) {
                done = true;
                let indent = &l[..l.len() - trimmed.len()];
                format!("{indent}{key}: {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn a_calibrated_peak_edited_apart_from_the_measured_efficiencies_is_refused() {
    let dir = scratch("hostile48", "cal-peak");
    let text = calibrated(&dir);
    let peak = first_value(&text, "peak_bf16_tflops").to_string();
    std::fs::write(
        dir.join("edited.yaml"),
        with_first(&text, "peak_bf16_tflops", "5000"),
    )
    .unwrap();
    let r = eval_calibration(&dir, "edited.yaml");
    assert_one_line_error(
        &r,
        &[
            "edited.yaml",
            "gemm_shapes[0].efficiency",
            "peak_bf16_tflops 5000",
            "rule: tpsim calibrate writes efficiency = tflops / peak",
            "restore peak_bf16_tflops: ",
        ],
        &[],
        "calibrated peak_bf16_tflops 5000",
    );
    // The fix given is the peak calibrate wrote, and it is accepted.
    let fix = r.stderr.split("restore peak_bf16_tflops: ").nth(1).unwrap();
    let fix = &fix[..fix.find(',').unwrap()];
    let (fixed, written): (f64, f64) = (fix.parse().unwrap(), peak.parse().unwrap());
    assert!((fixed / written - 1.0).abs() < 1e-9, "{fix} against {peak}");
    std::fs::write(
        dir.join("edited.yaml"),
        with_first(&text, "peak_bf16_tflops", fix),
    )
    .unwrap();
    let ok = eval_calibration(&dir, "edited.yaml");
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // One GEMM's efficiency edited alone: its own line is the fix, not the peak.
    let efficiency = first_value(&text, "efficiency").to_string();
    std::fs::write(
        dir.join("edited.yaml"),
        with_first(&text, "efficiency", "0.1"),
    )
    .unwrap();
    let r = eval_calibration(&dir, "edited.yaml");
    assert_one_line_error(
        &r,
        &[
            "gemm_shapes[0].efficiency: 0.1",
            "this GEMM's efficiency was edited",
            &format!("write efficiency: {efficiency} there"),
        ],
        &["restore peak_bf16_tflops"],
        "calibrated efficiency 0.1",
    );
}

#[test]
fn a_calibrated_gemm_whose_tflops_is_not_its_flops_over_its_median_is_refused() {
    let dir = scratch("hostile48", "cal-median");
    let text = calibrated(&dir);
    // The first GEMM's median, minimum and maximum all 100x: a consistent spread, stale tflops.
    let mut edited = text.clone();
    let mut median = String::new();
    for key in ["median_us", "min_us", "max_us"] {
        let was = first_value(&text, key).to_string();
        let times_100 = was.parse::<f64>().unwrap() * 100.0;
        if key == "median_us" {
            median = was;
        }
        edited = with_first(&edited, key, &times_100.to_string());
    }
    std::fs::write(dir.join("edited.yaml"), &edited).unwrap();
    let r = eval_calibration(&dir, "edited.yaml");
    assert_one_line_error(
        &r,
        &[
            "gemm_shapes[0].tflops",
            "is not the GEMM's flops over its median_us",
            "rule: tpsim calibrate writes tflops = 2·m·n·k·batch / median",
            "restore the measured median_us (flops / tflops gives",
        ],
        &[],
        "calibrated median 100x",
    );
    let said: f64 = r.stderr.split("flops / tflops gives ").nth(1).unwrap()[..r
        .stderr
        .split("flops / tflops gives ")
        .nth(1)
        .unwrap()
        .find(" us")
        .unwrap()]
        .parse()
        .unwrap();
    let measured: f64 = median.parse().unwrap();
    assert!(
        (said / measured - 1.0).abs() < 1e-6,
        "{said} against {measured}"
    );
    // tflops edited alone: the rate from the median is the fix, and it is accepted.
    let tflops = first_value(&text, "tflops").to_string();
    std::fs::write(dir.join("edited.yaml"), with_first(&text, "tflops", "1e-5")).unwrap();
    let r = eval_calibration(&dir, "edited.yaml");
    assert_one_line_error(
        &r,
        &["gemm_shapes[0].tflops: 1e-5", "write tflops: "],
        &[],
        "calibrated tflops 1e-5",
    );
    let fix = r.stderr.split("write tflops: ").nth(1).unwrap();
    let fix = &fix[..fix.find(' ').unwrap()];
    let fixed: f64 = fix.parse().unwrap();
    let written: f64 = tflops.parse().unwrap();
    assert!(
        (fixed / written - 1.0).abs() < 1e-6,
        "{fix} against {tflops}"
    );
    std::fs::write(dir.join("edited.yaml"), with_first(&text, "tflops", fix)).unwrap();
    let ok = eval_calibration(&dir, "edited.yaml");
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // A rate rounded by hand to three significant digits is the same rate (within 1%), not two.
    let rounded = format!("{:.2e}", written);
    std::fs::write(
        dir.join("edited.yaml"),
        with_first(&text, "tflops", &rounded),
    )
    .unwrap();
    let ok = eval_calibration(&dir, "edited.yaml");
    assert!(
        ok.code == 0 || ok.code == 1,
        "tflops {rounded} (rounded from {tflops}): {}",
        ok.stderr
    );
}

#[test]
fn a_config_whose_language_model_is_under_text_config_says_so() {
    let dir = scratch("hostile48", "text-config");
    let text = format!(
        r#"{{"model_type": "llama", "text_config": {{"model_type": "llama", {HF_SHAPE}}}}}"#
    );
    let r = eval_hf(&dir, "config.json", &text);
    assert_one_line_error(
        &r,
        &[
            "config.json",
            "key \"hidden_size\" is missing at the top level",
            "\"text_config\" gives \"hidden_size\": 4096",
            "save the \"text_config\" object as a config.json of its own",
        ],
        &["(e.g. \"hidden_size\""],
        "text_config only",
    );
    // The fix: the text_config object as its own file is read.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let inner = serde_json::to_string(&value["text_config"]).unwrap();
    let ok = eval_hf(&dir, "text.json", &inner);
    assert_eq!(hf_model(&ok)["hidden"], 4096, "{}", ok.stderr);
}
