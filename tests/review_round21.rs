//! Regressions from the twenty-first review: the session that simulates every model chunk of an
//! interleaved schedule at its own layers (6cbb892), split `cost::ledger` and `cost::memory`
//! into directory modules, and fixed new-user round 19 (sweep axes, compare's decimals, report
//! numbering). Each test names the defect it guards; the review's list of what it checked and
//! found sound is in the commit that adds this file.
//!
//! Defects found and fixed:
//! 1. The timeline drew each block's EP all-to-all strip at its stage's mean share, so under
//!    interleaving (and a V schedule) the blocks of a model chunk of dense layers (DeepSeek-V3's
//!    first three; a chunk holding only the output layer) carried all-to-all strips they do not
//!    run (under a V schedule since the V came in; under interleaving since 6cbb892 priced the
//!    chunks apart but the strips still read the stage means). Each block now reads its own chunk (`Simulated::chunks`).
//! 2. `compare` gave equal bubble ratios of different (p, v, m) as the cause of a bubble that
//!    differs ("(p-1)/(v·m) = 0.031 (p=2 v=1 m=32) against 0.031 (p=4 v=3 m=32)"); equal ratios
//!    now fall through to the layer split, as the arm's comment always said.
//! 3. (found by the torchtitan GPT-OSS helper, fixed by the lead) A sliding-window model with
//!    `--cp` under torchtitan was told to "use --cp-exchange kv-all-gather or head-all-to-all",
//!    which torchtitan then refuses ("--cp-exchange kv-all-gather is Transformer Engine's context
//!    parallelism under Megatron-Core ..."): a fix refused in turn. Under a framework whose
//!    exchanges run no windows the fix now names Megatron-Core with those exchanges.

mod common;
use common::{assert_one_line_error, run, scratch};

/// DeepSeek-V3 (61 layers, the first three dense) on pp 8 × vpp 4 with the embedding and the
/// loss counted as layers (tpsim's uneven interleaved split, Megatron-Core's
/// `--pipeline-model-parallel-layout 'Et|t*2|…|t*2|L'`): 32 model chunks, of which chunk 0 of
/// stage 0 (layer 0), chunk 0 of stage 1 (layers 1 and 2) and chunk 3 of stage 7 (the output
/// layer alone) hold no MoE layer. With m = 8 the timeline draws 2·p·v·m = 512 blocks; the
/// 2·m·3 = 48 blocks of those three chunks run no all-to-all and carry no EP strip: 464 strips.
/// Read per stage, every block of stages 0, 1 and 7 carried its stage's mean share: 512 strips.
#[test]
fn a_model_chunk_of_dense_layers_draws_no_all_to_all_strips() {
    let dir = scratch("review21", "dense-chunks");
    let report = dir.join("report");
    let r = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--nodes",
        "128",
        "--global-batch",
        "512",
        "--framework",
        "megatron-core",
        "--precision",
        "fp8",
        "--tp",
        "2",
        "--pp",
        "8",
        "--ep",
        "64",
        "--etp",
        "2",
        "--dp",
        "64",
        "--vpp",
        "4",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--sequence-parallel",
        "--zero",
        "1",
        "--allow-uneven-pp",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("embedding and output layer count as one layer each"),
        "the layout this test counts on: {}",
        r.stdout
    );
    let svg = std::fs::read_to_string(report.join("timeline.svg")).unwrap();
    // Every block with TP traffic carries the dark TP strip at its lower edge, each at its own
    // share since leftovers round 23: 512 blocks drawn, none folded. The chunk holding the output
    // layer alone runs no layer's TP collectives, but the output layer's own (its input's gather,
    // the loss's all-reduces; `embedding_output_tp`), so its 2·m blocks carry a strip too.
    let (p, v, m) = (8, 4, 8);
    assert_eq!(
        rects_of(&svg, "#333333"),
        2 * m * p * v,
        "TP strips: one per block with TP traffic"
    );
    let dense_chunks = 3;
    assert_eq!(
        rects_of(&svg, "#9467BD"),
        2 * m * (p * v - dense_chunks),
        "EP strips: one per block of a chunk with MoE layers"
    );
    assert!(
        svg.contains("none on model chunks of dense layers"),
        "the legend names where no strip is drawn"
    );
}

/// The same under a V (torchtitan's DualPipeV): rank 0 runs virtual stage 0 and the last one.
/// A 32-layer DeepSeek-V3 with its first two layers dense on pp 8 splits into 16 virtual stages
/// of 2 layers, so rank 0's chunk 0 holds only dense layers and its chunk 1 MoE layers and the
/// output layer. With m = 16 the timeline draws 2·(2p)·m = 512 forward and backward blocks (the
/// weight-gradient blocks carry no strips); the 2·m = 32 of rank 0's chunk 0 carry no EP strip.
/// Read per rank, they carried the mean of its two chunks: 512 strips.
#[test]
fn a_v_schedules_dense_chunk_draws_no_all_to_all_strips() {
    let dir = scratch("review21", "dense-v-chunk");
    let report = dir.join("report");
    let r = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--layers",
        "32",
        "--moe-first-k-dense-replace",
        "2",
        "--nodes",
        "64",
        "--global-batch",
        "512",
        "--framework",
        "torchtitan",
        "--tp",
        "2",
        "--pp",
        "8",
        "--vpp",
        "2",
        "--ep",
        "32",
        "--dp",
        "32",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--sequence-parallel",
        "--zero",
        "3",
        "--pp-schedule",
        "dualpipev",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(report.join("timeline.svg")).unwrap();
    let (p, m) = (8, 16);
    assert_eq!(rects_of(&svg, "#333333"), 2 * 2 * p * m, "TP strips");
    assert_eq!(
        rects_of(&svg, "#9467BD"),
        2 * 2 * p * m - 2 * m,
        "EP strips: none on rank 0's chunk of dense layers"
    );
    assert!(svg.contains("none on model chunks of dense layers"));
}

/// `<rect>` elements of `svg` filled with `fill`.
fn rects_of(svg: &str, fill: &str) -> usize {
    svg.split("<rect")
        .skip(1)
        .filter(|rect| {
            rect.split('>')
                .next()
                .is_some_and(|attrs| attrs.contains(&format!("fill=\"{fill}\"")))
        })
        .count()
}

/// `compare` of tp 2 × pp 2 (v 1, m 32) against tp 1 × pp 4 × vpp 3 (m 32): both bubble ratios
/// are 1/32, yet the verdict gave "(p-1)/(v·m) = 0.031 (p=2 v=1 m=32) against 0.031 (p=4 v=3
/// m=32)" as why the bubble is 0.1 points less. The bubbles differ by the simulated schedule's
/// stages (16 layers and the output layer on the last against 8 and the output layer), which the
/// layer split names.
#[test]
fn equal_bubble_ratios_are_not_given_as_the_bubbles_cause() {
    let dir = scratch("review21", "equal-ratios");
    let a = "model: llama3-8b\ngpu: h100-sxm-80g\nnodes: 4\nseq_len: 8192\nglobal_batch: 256\nplan:\n  tp: 2\n  pp: 2\n  dp: 8\n  vpp: 1\n  micro_batch: 1\n  sequence_parallel: true\n  recompute: selective\n  zero: 1\n";
    let b = a
        .replace("tp: 2", "tp: 1")
        .replace("pp: 2", "pp: 4")
        .replace("vpp: 1", "vpp: 3")
        .replace("sequence_parallel: true", "sequence_parallel: false");
    let (pa, pb) = (dir.join("a.yaml"), dir.join("b.yaml"));
    std::fs::write(&pa, a).unwrap();
    std::fs::write(&pb, b).unwrap();
    let r = run(&[
        "compare",
        "--plan",
        pa.to_str().unwrap(),
        "--plan",
        pb.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let verdict = r
        .stdout
        .lines()
        .find(|l| l.contains("faster than"))
        .unwrap_or_else(|| panic!("no verdict: {}", r.stdout));
    let bubble = verdict
        .split("pipeline bubble")
        .nth(1)
        .unwrap_or_else(|| panic!("the bubble is named: {verdict}"));
    let bubble = bubble.split("), ").next().unwrap();
    assert!(
        !bubble.contains("0.031 (p=2 v=1 m=32) against 0.031"),
        "equal ratios given as the cause: {verdict}"
    );
    assert!(
        bubble.contains("layers per stage (first/middle/last) 16/16/16 against 8/8/8"),
        "the layer split is the cause: {verdict}"
    );
}

/// Defect 3: the window refusal's fix is one the framework takes, and following it plans.
#[test]
fn the_window_refusals_fix_is_one_the_framework_runs() {
    let base = [
        "eval",
        "--model",
        "gpt-oss-20b",
        "--nodes",
        "1",
        "--cp",
        "2",
    ];
    let torchtitan = run(&[&base[..], &["--framework", "torchtitan", "--zero", "3"]].concat());
    assert_one_line_error(
        &torchtitan,
        &[
            "--cp 2",
            "sliding-window",
            "use --framework megatron-core with --cp-exchange kv-all-gather",
        ],
        &["use --cp-exchange"],
        "torchtitan window refusal",
    );
    // Under Megatron-Core the exchanges themselves are the fix, and the one named runs.
    let core = run(&[&base[..], &["--ep", "4"]].concat());
    assert_one_line_error(
        &core,
        &["use --cp-exchange kv-all-gather or head-all-to-all"],
        &["--framework megatron-core with"],
        "megatron-core window refusal",
    );
    let followed = run(&[
        &base[..],
        &[
            "--framework",
            "megatron-core",
            "--ep",
            "4",
            "--cp-exchange",
            "kv-all-gather",
        ],
    ]
    .concat());
    // Priced, not refused (exit 1 would say only that it does not fit in memory).
    assert_ne!(followed.code, 2, "{}", followed.stderr);
    assert!(
        followed.stdout.contains("time per step"),
        "{}",
        followed.stdout
    );
}
