//! A hybrid Mamba-Transformer stack's pipeline as its layer pattern's '|' segments (Megatron-Core
//! core_v0.17.0 on: `select_pipeline_segment` in megatron/core/models/hybrid/
//! hybrid_layer_allocation.py takes one segment per model chunk, segment `vp·pp + rank` on
//! pipeline rank `rank`, and Megatron-LM's arguments.py derives the virtual stages from them and
//! refuses every other split argument beside a pattern). tpsim searches virtual stages and uneven
//! splits for such stacks, `--emit megatron` cuts the pattern into the chunks it priced, and
//! `--megatron-args` reads a cut pattern back as that split.

mod common;

use common::{assert_one_line_error, json, run};

const NEMOTRON_H_56B: [&str; 9] = [
    "--model",
    "nemotron-h-56b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "8",
    "--global-batch",
    "768",
    "--allow-uneven-pp",
];

/// `eval` of Nemotron-H 56B with `extra`, and its `--emit megatron` line.
fn eval_and_line(extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec!["eval"];
    args.extend_from_slice(&NEMOTRON_H_56B);
    args.extend_from_slice(&[
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
    ]);
    args.extend_from_slice(extra);
    let mut as_json = args.clone();
    as_json.extend_from_slice(&["--format", "json"]);
    let estimate = json(&as_json);
    args.extend_from_slice(&["--emit", "megatron"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
    (estimate, r.stdout.trim().to_string())
}

/// The main pattern (before any '/') of a line's `--hybrid-layer-pattern`.
fn pattern_of(line: &str) -> String {
    let start = line.find("--hybrid-layer-pattern '").expect("pattern") + 24;
    let end = start + line[start..].find('\'').expect("closing quote");
    line[start..end].split('/').next().unwrap().to_string()
}

fn segment_lengths(pattern: &str) -> Vec<usize> {
    pattern.split('|').map(str::len).collect()
}

/// The evaluated plan of `eval --format json`.
fn plan(v: &serde_json::Value) -> &serde_json::Value {
    &v["plans"][0]
}

fn step_s(v: &serde_json::Value) -> f64 {
    plan(v)["time"]["step_s"].as_f64().expect("step_s")
}

/// `eval --megatron-args` of `line` on the same cluster, as JSON.
fn read_back(line: &str) -> serde_json::Value {
    json(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--megatron-args",
        line,
        "--format",
        "json",
    ])
}

#[test]
fn virtual_stages_of_a_hybrid_stack_are_written_as_pattern_segments_and_read_back() {
    // 118 layers on pp 4 x vpp 2: tpsim's own split counts the embedding and the loss as a layer
    // each (120 units, 15 a chunk): 14 layers in the first chunk, 15 in the middle ones, 14 last.
    let (estimate, line) = eval_and_line(&["--tp", "8", "--pp", "4", "--vpp", "2"]);
    let pattern = pattern_of(&line);
    assert_eq!(
        segment_lengths(&pattern),
        [14, 15, 15, 15, 15, 15, 15, 14],
        "{line}"
    );
    // The segments are the model's pattern in order: without the separators, the bundled one.
    let bundled = json(&[
        "eval",
        "--model",
        "nemotron-h-56b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(
        pattern.replace('|', ""),
        bundled["model"]["hybrid"]["pattern"].as_str().unwrap(),
        "{line}"
    );
    // Megatron-LM refuses every other split argument beside a hybrid pattern.
    for refused in [
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers",
        "--account-for-embedding-in-pipeline-split",
        "--pipeline-model-parallel-layout",
    ] {
        assert!(!line.contains(refused), "{refused} in {line}");
    }
    let back = read_back(&line);
    assert_eq!(plan(&back)["pp"], 4, "{back}");
    assert_eq!(plan(&back)["vpp"], 2, "{back}");
    let (a, b) = (step_s(&estimate), step_s(&back));
    assert!((a - b).abs() <= 1e-9 * a, "{a} vs {b}");
}

#[test]
fn every_pipeline_of_a_hybrid_stack_round_trips_through_its_segments() {
    for extra in [
        &["--tp", "8", "--pp", "2"][..],
        &["--tp", "8", "--pp", "4"][..],
        &["--tp", "4", "--pp", "8", "--vpp", "3"][..],
        &["--tp", "8", "--pp", "4", "--vpp", "5"][..],
    ] {
        let (estimate, line) = eval_and_line(extra);
        let pattern = pattern_of(&line);
        let (pp, vpp) = (
            plan(&estimate)["pp"].as_u64().unwrap(),
            plan(&estimate)["vpp"].as_u64().unwrap(),
        );
        let lengths = segment_lengths(&pattern);
        assert_eq!(lengths.len() as u64, pp * vpp, "{extra:?}: {line}");
        assert_eq!(lengths.iter().sum::<usize>(), 118, "{extra:?}: {line}");
        let back = read_back(&line);
        assert_eq!(plan(&back)["vpp"], vpp, "{extra:?}: {back}");
        let (a, b) = (step_s(&estimate), step_s(&back));
        assert!((a - b).abs() <= 1e-9 * a, "{extra:?}: {a} vs {b}");
    }
}

#[test]
fn the_search_offers_virtual_stages_for_a_hybrid_stack() {
    let mut args = vec!["plan"];
    args.extend_from_slice(&NEMOTRON_H_56B);
    args.extend_from_slice(&["--pp", "4", "--top", "40", "--format", "json"]);
    let v = json(&args);
    let plans = v["plans"].as_array().expect("plans");
    assert!(
        plans.iter().any(|p| p["vpp"].as_u64().unwrap() > 1),
        "no interleaved plan among {} for a 118-layer stack on pp 4",
        plans.len()
    );
}

/// A hand-written line of 52 Nemotron-H 8B layers on 2 stages, `pattern` in place of the bundled
/// one, with `extra` arguments.
fn hybrid_8b_line(pattern: &str, pp: u32, extra: &str) -> String {
    format!(
        "--hybrid-layer-pattern '{pattern}' --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 21504 --mamba-num-heads 128 --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8 --squared-relu --disable-bias-linear --untie-embeddings-and-output-weights --normalization RMSNorm --position-embedding-type none --vocab-size 131072 --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 4 --pipeline-model-parallel-size {pp} --micro-batch-size 1 --global-batch-size 256 --sequence-parallel --use-distributed-optimizer --bf16 {extra}"
    )
}

/// 52 symbols of Nemotron-H 8B's kinds cut at `cuts`.
fn cut(cuts: &[usize]) -> String {
    let base: String = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-".into();
    assert_eq!(base.len(), 52);
    let mut out = String::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&52)) {
        if !out.is_empty() {
            out.push('|');
        }
        out.push_str(&base[start..end]);
        start = end;
    }
    out
}

fn eval_8b_line(line: &str) -> common::Run {
    run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--megatron-args",
        line,
    ])
}

#[test]
fn a_hand_cut_first_and_last_stage_is_taken_as_given() {
    let line = hybrid_8b_line(&cut(&[20]), 2, "");
    let v = json(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--megatron-args",
        &line,
        "--format",
        "json",
    ]);
    let stages = &plan(&v)["stages"];
    assert_eq!(
        (stages["first"].as_u64(), stages["last"].as_u64()),
        (Some(20), Some(32)),
        "{v}"
    );
    // The same split given the pre-0.17 way prices the same.
    let flags = hybrid_8b_line(
        &cut(&[]),
        2,
        "--decoder-first-pipeline-num-layers 20 --decoder-last-pipeline-num-layers 32",
    );
    let w = json(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--megatron-args",
        &flags,
        "--format",
        "json",
    ]);
    let (a, b) = (step_s(&v), step_s(&w));
    assert!((a - b).abs() <= 1e-9 * a, "{a} vs {b}");
}

#[test]
fn segments_megatron_or_tpsim_cannot_take_are_refused_in_one_line() {
    let cases: [(String, &[&str]); 7] = [
        (
            hybrid_8b_line(&cut(&[17, 34]), 2, ""),
            &[
                "3 '|' segments",
                "--pipeline-model-parallel-size 2",
                "multiple of the pipeline size",
            ],
        ),
        (
            hybrid_8b_line(&cut(&[26]), 1, ""),
            &[
                "2 '|' segments",
                "--pipeline-model-parallel-size 1",
                "give --pipeline-model-parallel-size 2",
            ],
        ),
        (
            // Four segments on two stages, the second empty.
            hybrid_8b_line(&cut(&[20, 40]).replacen('|', "||", 1), 2, ""),
            &["(20/0/20/12)", "a segment holds no layer"],
        ),
        (
            hybrid_8b_line(&cut(&[10, 20, 36]), 4, ""),
            &["(10/10/16/16)", "different numbers of layers"],
        ),
        (
            hybrid_8b_line(&cut(&[26]), 2, "--decoder-first-pipeline-num-layers 26"),
            &[
                "--decoder-first/last-pipeline-num-layers",
                "explicitly defined",
            ],
        ),
        (
            hybrid_8b_line(&cut(&[]), 2, "--account-for-embedding-in-pipeline-split"),
            &["--account-for-embedding/loss-in-pipeline-split with --hybrid-layer-pattern"],
        ),
        (
            // Four chunks on two stages (vpp 2) as 12/14/14/12: the stages hold 26 each, as
            // tpsim's even split, but its chunks are 13 each.
            hybrid_8b_line(&cut(&[12, 26, 40]), 2, ""),
            &["12/14/14/12", "13/13/13/13", "--emit megatron"],
        ),
    ];
    for (line, needles) in cases {
        assert_one_line_error(&eval_8b_line(&line), needles, &["panicked"], &line);
    }
}

#[test]
fn a_model_files_pattern_with_stage_boundaries_says_the_stages_are_the_plans() {
    let dir = common::scratch("hybrid_segments", "model");
    let file = dir.join("cut.yaml");
    std::fs::write(
        &file,
        "name: cut-hybrid\nlayers: 4\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 2048\nposition_embedding_type: none\nnorm: rmsnorm\nlinear_bias: false\nhybrid:\n  pattern: \"M*|M-\"\n  mamba_heads: 32\n  mamba_head_dim: 64\n  mamba_state_dim: 128\n  mamba_groups: 8\n",
    )
    .unwrap();
    assert_one_line_error(
        &run(&["eval", "--model", file.to_str().unwrap(), "--nodes", "1"]),
        &["symbol '|'", "pipeline-stage boundary", "--pp and --vpp"],
        &["panicked"],
        "model file with '|'",
    );
}

/// `eval ... --emit TARGET` of Nemotron 3 Super with two MTP depths on pp 2, the H100 recipe's
/// plan (tp 1, ep 32, its recompute modules), which fits.
fn super_emit(target: &str) -> common::Run {
    let mut args = vec!["eval"];
    args.extend_from_slice(&common::SUPER_H100_RUN);
    args.extend_from_slice(&[
        "--pp",
        "2",
        "--ep",
        "32",
        "--mtp-layers",
        "2",
        "--micro-batch",
        "1",
        "--zero",
        "1",
        "--recompute",
        "selective",
        "--recompute-modules",
        "layernorm,moe_act,moe,core_attn",
        "--emit",
        target,
    ]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{target}: {}", r.stderr);
    r
}

/// The value of `key` in Megatron-Bridge overrides (`KEY=VALUE` lines).
fn override_of<'a>(overrides: &'a str, key: &str) -> &'a str {
    overrides
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {overrides}"))
}

#[test]
fn megatron_bridge_writes_a_hybrid_stacks_provider_fields_with_the_same_segments() {
    let bridge = super_emit("megatron-bridge");
    assert!(
        bridge.stderr.contains("Nemotron-H or Nemotron 3 recipe"),
        "{}",
        bridge.stderr
    );
    let overrides = bridge.stdout.as_str();
    let megatron = super_emit("megatron");
    let line = megatron.stdout.trim();
    // One pattern, one cut: the Megatron-LM line's main pattern is Bridge's layer pattern.
    assert_eq!(
        override_of(overrides, "model.hybrid_layer_pattern"),
        format!("'{}'", pattern_of(line)),
        "{overrides}"
    );
    assert_eq!(segment_lengths(&pattern_of(line)).len(), 2, "{line}");
    for (key, value) in [
        ("model.num_layers", "88"),
        ("model.hybrid_override_pattern", "null"),
        ("model.mtp_hybrid_override_pattern", "'*E'"),
        ("model.mtp_num_layers", "2"),
        ("model.mtp_use_repeated_layer", "true"),
        ("model.mamba_num_heads", "128"),
        ("model.mamba_head_dim", "64"),
        ("model.mamba_state_dim", "128"),
        ("model.mamba_num_groups", "8"),
        ("model.moe_layer_freq", "1"),
        ("model.pipeline_model_parallel_size", "2"),
        ("model.virtual_pipeline_model_parallel_size", "null"),
        ("model.account_for_embedding_in_pipeline_split", "false"),
        ("model.num_layers_in_first_pipeline_stage", "null"),
    ] {
        assert_eq!(override_of(overrides, key), value, "{key} in {overrides}");
    }
    // Without MTP the recipe's own depths are cleared.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--tp",
        "4",
        "--emit",
        "megatron-bridge",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for (key, value) in [
        ("model.mtp_hybrid_override_pattern", "null"),
        ("model.mtp_num_layers", "null"),
        ("model.mtp_use_repeated_layer", "false"),
        ("model.pipeline_model_parallel_size", "1"),
    ] {
        assert_eq!(override_of(&r.stdout, key), value, "{key} in {}", r.stdout);
    }
    assert!(
        !override_of(&r.stdout, "model.hybrid_layer_pattern").contains('|'),
        "{}",
        r.stdout
    );
}

#[test]
fn megatron_bridge_refuses_a_hybrid_stacks_virtual_stages_in_one_line() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--allow-uneven-pp",
        "--global-batch",
        "768",
        "--emit",
        "megatron-bridge",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--vpp 2 with the hybrid Mamba-Transformer model nemotron-h-56b",
            "HybridModelProvider",
            "use --emit megatron",
        ],
        &["panicked"],
        "bridge hybrid vpp",
    );
}
