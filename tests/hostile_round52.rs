//! Hostile input, round 52: hand-edited files (GPU profiles, model files, saved plans, calibrated
//! profiles), valid flags that together mean nothing on plan / eval / sweep / compare / emit, and
//! extreme but valid sizes. Defects found (each test below failed before its fix):
//! - a zero count compared before it was checked: `--heads 0 --kv-heads 2` (or a model file's
//!   `heads: 0` beside `kv_heads: 8`) was told "--kv-heads 2 is more than --heads 0 ... give
//!   --kv-heads dividing --heads", which no KV count does; `--hidden 0 --heads 4` (a file's
//!   `hidden: 0`) was told "--heads 4 is more than --hidden 0 ... e.g. --heads 1", refused in
//!   turn. The zero is now refused as a count of at least 1, with its own fix.
//! - a plan file's `precision: nvfp4` on an H100 (or `fp8` on an A100), and its `framework:
//!   megatron-lm-2021` on a mixture-of-experts model, were told as "--precision nvfp4: ..." and
//!   "--framework megatron-lm-2021: ...", flags never typed, in `eval --plan`, `report` and
//!   `compare --plan`; they are now the file's keys (`precision: nvfp4 in p.yaml`), and a flag
//!   typed over the file keeps its flag.
//! - `--sequence-parallel` at `--tp 1` (and a plan file's `sequence_parallel: true` at `tp: 1`)
//!   was told the rule and no fix; it now offers `--sequence-parallel false` or `--tp 2` or more
//!   (`sequence_parallel: false` / `tp: 2` in a file), each of which runs.
//! - a calibrated profile's `nvlink_gb_per_s` edited apart from the all-reduce it was measured
//!   from (0.86 GB/s measured, 500 written) was accepted and moved the TP time 4x without a word;
//!   `hbm_bandwidth_gb_per_s` apart from `copy.gb_per_s` likewise. Both are refused now (as round
//!   48 refuses a peak edited apart from its GEMMs), naming the measurement and the value that
//!   restores it, which is then accepted.
//!
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix; every fix offered is run.
//!
//! Looked at and found sound: GPU profiles with `microscaling: false` (or absent, or `"yes"`)
//! beside a `peak_fp4_tflops` and `--precision mxfp8` (the fix, deleting the peak, then refuses
//! mxfp8 naming bf16 and fp8, on eval, plan and sweep), no `peak_fp4_tflops` with nvfp4,
//! `nvlink_domain_gpus` 0, 2, 6 (not a multiple of the node), 72.0, a 5-GPU node under a 72-GPU
//! domain (fix runs), `gpus_per_node` 144, efficiencies 1.5 / 0 / .nan, host link and memory,
//! capacity and peak at 1e308, quoted numbers, empty and control-character names; model files
//! with `moe.router_topk` past or at 0, `moe.experts` 0, 1 (top-1), 6 (ep 4 refused naming the
//! valid ep), 100000 and past u32, `moe.ffn_hidden` 0, unknown MoE keys, `layers` 100000,
//! `seq_len` 4194304 (exit 1, nothing fits, with the fix), `vocab` 0, `head_dim` 100 over 32 heads
//! of hidden 4096; saved plans with degrees whose product is not the cluster (fix runs), a
//! `seq_len` that `cp` does not split (fix runs), `global_batch` past u32 or quoted, a
//! `micro_batch` that does not split the batch, `vpp: 2` at `pp: 1`, `zero: 3`, `etp: 4` past the
//! stage, `reshard_after_forward: false` at ZeRO-1, `gpus_per_node: 4` under an 8-GPU plan,
//! `framework: deepspeed` beside `cp_exchange: kv-ring`, `framework: torchtitan` at ZeRO-1 with
//! cp; calibrated profiles with ranks past devices, a fit at 1e308, r_squared 7, the other
//! backend's gemm_dtype, microscaling true on the CPU twin; `--cp 2 --seq-len 4097` (fix 4100
//! runs), `--ep 2` on a dense model, `--precision nvfp4|mxfp8` on H100, `--vpp 2` at `--pp 1`,
//! `--micro-batch 64 --global-batch 32`, `--global-batch 30` at dp 4, on eval, plan, sweep (which
//! takes no pins and says so), compare (likewise) and `--emit megatron`; 1 GPU, 100,000 GPUs
//! (the fix `--global-batch 6250` runs), seq 1, seq 4,194,304 (4 s), one layer with vocab 1,
//! global batch 1: every JSON number finite and not negative, nothing over 10 s.
//!
//! Left as found: (outside this round's area, src/training.rs) `--framework megatron-lm-2021`
//! takes `--zero 2` and `--zero 3` at pp 1 in eval and in plan's search, where
//! `TrainingFramework::runs_zero_stage`'s own doc says 2021 Megatron-LM ran ZeRO 0–1; a count
//! past u32 in a model or plan file (`moe.experts: 4294967296`, `global_batch: 4294967296`) is
//! told "is more than 4294967295, the largest whole number experts takes; check the value", the
//! type's bound, where `moe.experts` stops at 16384 (said once the value is under u32); `eval
//! --emit deepspeed` picks `--framework deepspeed` itself, while `eval --emit torchtitan` refuses
//! "the plan is evaluated as --framework megatron-core" and asks for `--framework torchtitan`
//! (which runs); a `--gpu FILE` whose `name:` is a bundled GPU's (h100-sxm-80g over GB200
//! numbers) is printed under that name in the cluster line.

mod common;

use common::*;
use std::path::Path;

/// `text` with its first line equal to `from` replaced by `to`.
fn with_line(text: &str, from: &str, to: &str) -> String {
    let at = text
        .find(&format!("\n{from}\n"))
        .unwrap_or_else(|| panic!("no line {from:?}"))
        + 1;
    format!("{}{to}{}", &text[..at], &text[at + from.len()..])
}

#[test]
fn a_zero_head_or_hidden_count_is_refused_as_zero_not_as_the_other_counts_fault() {
    let shape = ["eval", "--layers", "2", "--nodes", "1", "--tp", "1"];
    let with = |extra: &[&str]| run(&[&shape[..], extra].concat());
    let r = with(&["--hidden", "64", "--heads", "0", "--kv-heads", "2"]);
    assert_one_line_error(
        &r,
        &["--heads 0 must be at least 1", "e.g. --heads"],
        &["--kv-heads 2 is more than"],
        "--heads 0 --kv-heads 2",
    );
    let r = with(&["--hidden", "0", "--heads", "4"]);
    assert_one_line_error(
        &r,
        &["--hidden 0 must be at least 1", "e.g. --hidden"],
        &["--heads 4 is more than"],
        "--hidden 0 --heads 4",
    );
    // The fixes run: a head count, a width.
    for extra in [
        &["--hidden", "64", "--heads", "4", "--kv-heads", "2"][..],
        &["--hidden", "64", "--heads", "4"][..],
    ] {
        let ok = with(extra);
        assert!(ok.code == 0 || ok.code == 1, "{extra:?}: {}", ok.stderr);
    }
    // A model file says the same in its keys.
    let dir = scratch("hostile52", "zero-heads");
    let llama = std::fs::read_to_string(Path::new(ROOT).join("models/llama3-8b.yaml")).unwrap();
    let line = |key: &str| {
        llama
            .lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .unwrap()
            .to_string()
    };
    for (key, needle) in [
        ("heads", "heads: 0 must be at least 1"),
        ("hidden", "hidden: 0 must be at least 1"),
    ] {
        std::fs::write(
            dir.join("m.yaml"),
            with_line(&llama, &line(key), &format!("{key}: 0")),
        )
        .unwrap();
        let r = run_in(
            &dir,
            &["eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8"],
        );
        assert_one_line_error(
            &r,
            &["m.yaml", needle, &format!("e.g. {key}: ")],
            &["is more than"],
            &format!("model file {key}: 0"),
        );
    }
}

/// A saved Mixtral 8x7B plan on 4 H100 nodes, written by `tpsim plan --save` into `dir`.
fn saved_plan(dir: &Path) -> String {
    let r = run_in(
        dir,
        &[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "4",
            "--save",
            "base.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::read_to_string(dir.join("base.yaml")).unwrap()
}

#[test]
fn a_plan_files_precision_and_framework_are_named_as_its_keys() {
    let dir = scratch("hostile52", "file-precision");
    let base = saved_plan(&dir);
    std::fs::write(
        dir.join("p.yaml"),
        with_line(&base, "  precision: bf16", "  precision: nvfp4"),
    )
    .unwrap();
    for args in [
        &["eval", "--plan", "p.yaml"][..],
        &["report", "p.yaml", "--out", "rep"][..],
        &["compare", "--plan", "p.yaml", "--plan", "base.yaml"][..],
    ] {
        let r = run_in(&dir, args);
        assert_one_line_error(
            &r,
            &[
                "precision: nvfp4 in p.yaml",
                "no nvfp4 tensor cores",
                "use bf16, fp8",
            ],
            &["--precision"],
            &format!("{args:?} with precision: nvfp4"),
        );
    }
    // The fix, a precision the H100 runs, is accepted.
    std::fs::write(
        dir.join("p.yaml"),
        with_line(&base, "  precision: bf16", "  precision: fp8"),
    )
    .unwrap();
    let ok = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // A flag typed over the file keeps its flag.
    let r = run_in(
        &dir,
        &["eval", "--plan", "base.yaml", "--precision", "nvfp4"],
    );
    assert_one_line_error(
        &r,
        &["--precision nvfp4"],
        &["precision: nvfp4"],
        "--precision nvfp4 over the file",
    );
    // The framework likewise; its fix, the flag over the file, runs.
    std::fs::write(
        dir.join("p.yaml"),
        with_line(
            &base,
            "framework: megatron-core",
            "framework: megatron-lm-2021",
        ),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "framework: megatron-lm-2021 in p.yaml",
            "no mixture-of-experts layers",
            "use --framework megatron-core",
        ],
        &["--framework megatron-lm-2021"],
        "framework: megatron-lm-2021 on Mixtral",
    );
    let ok = run_in(
        &dir,
        &["eval", "--plan", "p.yaml", "--framework", "megatron-core"],
    );
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
}

#[test]
fn sequence_parallelism_at_tp_1_offers_a_fix_that_runs() {
    let flags = ["eval", "--params", "7B", "--nodes", "1", "--tp", "1"];
    let r = run(&[&flags[..], &["--sequence-parallel"]].concat());
    assert_one_line_error(
        &r,
        &[
            "--sequence-parallel needs --tp > 1",
            "use --sequence-parallel false, or --tp 2 or more",
        ],
        &[],
        "--tp 1 --sequence-parallel",
    );
    for fix in [
        &["--tp", "1", "--sequence-parallel", "false"][..],
        &["--tp", "2", "--sequence-parallel"][..],
    ] {
        let ok = run(&[&["eval", "--params", "7B", "--nodes", "1"][..], fix].concat());
        assert!(ok.code == 0 || ok.code == 1, "{fix:?}: {}", ok.stderr);
    }
    // In a plan file's words: the keys to edit, and the edit runs.
    let dir = scratch("hostile52", "sp-tp1");
    let base = saved_plan(&dir);
    assert!(base.contains("\n  tp: 1\n"), "{base}");
    let on = with_line(
        &base,
        "  sequence_parallel: false",
        "  sequence_parallel: true",
    );
    std::fs::write(dir.join("p.yaml"), &on).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "sequence_parallel: true in p.yaml",
            "use sequence_parallel: false, or tp: 2 or more",
        ],
        &["--sequence-parallel"],
        "plan file sequence_parallel: true at tp: 1",
    );
    let ok = run_in(&dir, &["eval", "--plan", "base.yaml"]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
}

/// A CPU-twin calibrated profile on two ranks, written by `tpsim calibrate` into `dir/cal.yaml`.
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

/// The value of the top-level `key:` line of a profile.
fn top_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key}: line"))
        .trim()
}

#[test]
fn a_calibrated_link_edited_apart_from_its_measurement_is_refused() {
    let dir = scratch("hostile52", "cal-links");
    let text = calibrated(&dir);
    let ok = eval_calibration(&dir, "cal.yaml");
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // The copy calibrate measured is the memory bandwidth it wrote.
    let hbm = top_value(&text, "hbm_bandwidth_gb_per_s").to_string();
    let hbm_line = format!("hbm_bandwidth_gb_per_s: {hbm}");
    std::fs::write(
        dir.join("e.yaml"),
        with_line(&text, &hbm_line, "hbm_bandwidth_gb_per_s: 3000"),
    )
    .unwrap();
    let r = eval_calibration(&dir, "e.yaml");
    assert_one_line_error(
        &r,
        &[
            "e.yaml",
            "hbm_bandwidth_gb_per_s: 3000",
            "copy.gb_per_s",
            "rule: tpsim calibrate writes the measured rate",
            "restore hbm_bandwidth_gb_per_s: ",
        ],
        &[],
        "calibrated hbm_bandwidth_gb_per_s 3000",
    );
    // The value it gives to restore is the one calibrate wrote, and it runs.
    let fix = r
        .stderr
        .split("restore hbm_bandwidth_gb_per_s: ")
        .nth(1)
        .unwrap();
    let fix = &fix[..fix.find(' ').unwrap()];
    let (fixed, written): (f64, f64) = (fix.parse().unwrap(), hbm.parse().unwrap());
    assert!((fixed / written - 1.0).abs() < 1e-9, "{fix} against {hbm}");
    std::fs::write(
        dir.join("e.yaml"),
        with_line(&text, &hbm_line, &format!("hbm_bandwidth_gb_per_s: {fix}")),
    )
    .unwrap();
    let ok = eval_calibration(&dir, "e.yaml");
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // The intra-node link is the two-rank all-reduce's bus bandwidth: edited 100x, refused.
    let nvlink = top_value(&text, "nvlink_gb_per_s").to_string();
    let nvlink_line = format!("nvlink_gb_per_s: {nvlink}");
    let edited: f64 = nvlink.parse::<f64>().unwrap() * 100.0;
    std::fs::write(
        dir.join("e.yaml"),
        with_line(&text, &nvlink_line, &format!("nvlink_gb_per_s: {edited}")),
    )
    .unwrap();
    let r = eval_calibration(&dir, "e.yaml");
    assert_one_line_error(
        &r,
        &[
            "nvlink_gb_per_s: ",
            "the all-reduce among 2 ranks, measured ",
            "restore nvlink_gb_per_s: ",
        ],
        &[],
        "calibrated nvlink_gb_per_s x100",
    );
}
