//! Hybrid Mamba-Transformer stacks written as Megatron-LM launch lines: `pretrain_hybrid.py`
//! (pretrain_mamba.py before it) takes the pattern with `--hybrid-layer-pattern` (the layer count
//! from it, the MTP depths as '/' segments, megatron/core/models/hybrid/hybrid_layer_allocation.py
//! `ParsedHybridPattern`), the mixer's shape with `--mamba-*`, shared MTP weights with
//! `--mtp-use-repeated-layer`. The line read back (`eval --megatron-args`) prices the same plan.

mod common;

use common::*;

/// `eval --emit megatron` of `args`: the line, and then the same plan priced from it and priced
/// directly, each as (step s, total memory bytes, params).
fn round_trip(args: &[&str], cluster: &[&str]) -> (String, [f64; 3], [f64; 3]) {
    let mut emit: Vec<&str> = vec!["eval"];
    emit.extend_from_slice(args);
    emit.extend_from_slice(&["--emit", "megatron"]);
    let r = run(&emit);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.lines().last().unwrap_or_default().to_string();
    let numbers = |v: &serde_json::Value| {
        [
            v["plans"][0]["time"]["step_s"].as_f64().unwrap(),
            v["plans"][0]["memory"]["total_bytes"].as_f64().unwrap(),
            v["model"]["params"].as_f64().unwrap(),
        ]
    };
    let mut direct: Vec<&str> = vec!["eval"];
    direct.extend_from_slice(args);
    direct.extend_from_slice(&["--format", "json"]);
    let mut back: Vec<&str> = vec!["eval", "--megatron-args", &line, "--format", "json"];
    back.extend_from_slice(cluster);
    (line.clone(), numbers(&json(&direct)), numbers(&json(&back)))
}

fn same(a: [f64; 3], b: [f64; 3]) -> bool {
    a.iter().zip(&b).all(|(x, y)| (x / y - 1.0).abs() < 1e-9)
}

#[test]
fn a_dense_hybrid_line_reads_back_as_the_plan() {
    let (line, direct, back) = round_trip(
        &[
            "--model",
            "nemotron-h-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--tp",
            "2",
            "--zero",
            "1",
        ],
        &["--nodes", "1"],
    );
    assert!(
        line.contains(
            "--hybrid-layer-pattern 'M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-'"
        ),
        "{line}"
    );
    for flag in [
        "--mamba-num-heads 128",
        "--mamba-head-dim 64",
        "--mamba-state-dim 128",
        "--mamba-num-groups 8",
        "--squared-relu",
    ] {
        assert!(line.contains(flag), "{flag}: {line}");
    }
    // Megatron-LM takes the layer count from the pattern.
    assert!(!line.contains("--num-layers"), "{line}");
    assert!(same(direct, back), "{direct:?} vs {back:?}");
}

#[test]
fn shared_mtp_depths_are_written_as_pattern_segments() {
    let mut args = vec!["--model", "nemotron-3-super-120b-a12b", "--mtp-layers", "2"];
    args.extend(SUPER_GB300_PLAN);
    let (line, direct, back) = round_trip(
        &args,
        &[
            "--gpu",
            "gb300-nvl72",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
        ],
    );
    assert!(line.contains("MEMEMEME/*E/*E'"), "{line}");
    assert!(line.contains("--mtp-use-repeated-layer"), "{line}");
    assert!(line.contains("--moe-latent-size 1024"), "{line}");
    assert!(!line.contains("--mtp-num-layers"), "{line}");
    assert!(same(direct, back), "{direct:?} vs {back:?}");
}

#[test]
fn a_hybrid_pipeline_with_a_short_last_stage_reads_back() {
    let mut args = SUPER_H100_RUN.to_vec();
    args.extend_from_slice(&[
        "--pp",
        "8",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--decoder-last-pipeline-num-layers",
        "4",
    ]);
    let (line, direct, back) = round_trip(&args, &["--gpu", "h100-sxm-80g", "--nodes", "8"]);
    // The split is the pattern's '|' segments (Megatron-Core 0.17 on), seven of 12 layers and
    // the last of 4; Megatron-LM refuses the first/last counts beside them.
    assert!(!line.contains("--decoder-"), "{line}");
    let start = line.find("--hybrid-layer-pattern '").expect("pattern") + 24;
    let pattern = &line[start..start + line[start..].find('\'').unwrap()];
    let main = pattern.split('/').next().unwrap();
    let lengths: Vec<usize> = main.split('|').map(str::len).collect();
    assert_eq!(lengths, [12, 12, 12, 12, 12, 12, 12, 4], "{line}");
    assert!(same(direct, back), "{direct:?} vs {back:?}");
}

#[test]
fn mtp_segments_tpsim_does_not_price_are_refused_in_one_line() {
    let base = "--hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 --position-embedding-type none --micro-batch-size 1 --global-batch-size 8 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 --ffn-hidden-size 512";
    for (pattern, needles) in [
        ("M*ME/*E/*-", &["MTP segments", "*E"][..]),
        ("M*ME/MM", &["MTP segments", "/*E"][..]),
        ("M*M*/*E", &["MTP segments"][..]),
    ] {
        let line = format!("--hybrid-layer-pattern {pattern} {base}");
        let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
        assert_one_line_error(&r, needles, &["panicked"], pattern);
    }
    let line = format!("--hybrid-layer-pattern M*ME --mtp-use-repeated-layer {base}");
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
    assert_one_line_error(
        &r,
        &["--mtp-use-repeated-layer", "no MTP depths"],
        &["panicked"],
        "repeated layer without depths",
    );
}
