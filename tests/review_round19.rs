//! Review of the nineteenth session's hybrid pipelines as '|' pattern segments and `--emit
//! torchtitan`: refusals of hand-cut `--hybrid-layer-pattern` lines must name what the line holds
//! and a fix Megatron-LM accepts beside a hybrid pattern (arguments.py refuses
//! `--num-virtual-stages-per-pipeline-rank`, `--pipeline-model-parallel-layout` and
//! `--account-for-*-in-pipeline-split` there).

mod common;

use common::{assert_one_line_error, run};

/// The flags Megatron-LM's arguments.py refuses beside any `--hybrid-layer-pattern`.
const REFUSED_BESIDE_A_PATTERN: [&str; 4] = [
    "--num-virtual-stages-per-pipeline-rank",
    "--num-layers-per-virtual-pipeline-stage",
    "--pipeline-model-parallel-layout",
    "--account-for-",
];

/// Nemotron-H 56B's `--emit megatron` line at pp 1 on 64 H100s.
fn nemotron_h_56b_line() -> String {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--global-batch",
        "768",
        "--tp",
        "8",
        "--pp",
        "1",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--emit",
        "megatron",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(line.contains("--pipeline-model-parallel-size 1 "), "{line}");
    line
}

/// `line` on `pp` stages with its pattern cut into segments of `counts` layers (none: uncut).
fn cut_line(line: &str, pp: u32, counts: &[usize]) -> String {
    let start = line.find("--hybrid-layer-pattern '").expect("pattern") + 24;
    let end = start + line[start..].find('\'').expect("closing quote");
    let pattern = &line[start..end];
    let main: Vec<char> = pattern.split('/').next().unwrap().chars().collect();
    let mut cut = String::new();
    let mut at = 0;
    for &n in counts {
        if !cut.is_empty() {
            cut.push('|');
        }
        cut.extend(&main[at..at + n]);
        at += n;
    }
    if counts.is_empty() {
        cut.extend(&main[..]);
    } else {
        assert_eq!(at, main.len(), "counts add up to the pattern");
    }
    format!("{}{cut}{}", &line[..start], &line[end..]).replace(
        "--pipeline-model-parallel-size 1 ",
        &format!("--pipeline-model-parallel-size {pp} "),
    )
}

fn eval_line(line: &str) -> common::Run {
    run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--megatron-args",
        line,
    ])
}

#[test]
fn an_uncut_hybrid_pattern_pp_does_not_divide_is_told_to_cut_it_not_to_count_the_embedding() {
    // 118 layers on 4 stages without '|': Megatron-Core's select_pipeline_segment refuses it, and
    // arguments.py refuses --account-for-*-in-pipeline-split beside a hybrid pattern, so the fix
    // is '|' segments (or the first/last stage counts Megatron-Core still takes without them).
    let line = cut_line(&nemotron_h_56b_line(), 4, &[]);
    let r = eval_line(&line);
    assert_one_line_error(
        &r,
        &["118", "--pipeline-model-parallel-size 4", "'|'"],
        &REFUSED_BESIDE_A_PATTERN,
        "uncut pattern on pp 4",
    );
}

#[test]
fn a_cut_tpsim_does_not_price_is_refused_in_the_patterns_words() {
    // Eight chunks filled front to back (15 x 7 + 13) on pp 4: tpsim prices 14/15.../15/14 for
    // this plan; the refusal names both cuts and the pattern to give, not a layout flag that
    // Megatron-LM refuses beside a hybrid pattern.
    let line = cut_line(&nemotron_h_56b_line(), 4, &[15, 15, 15, 15, 15, 15, 15, 13]);
    let r = eval_line(&line);
    assert_one_line_error(
        &r,
        &[
            "--hybrid-layer-pattern",
            "15/15/15/15/15/15/15/13",
            "14/15/15/15/15/15/15/14",
        ],
        &REFUSED_BESIDE_A_PATTERN,
        "filled chunks on pp 4 x 2 segments",
    );
}

#[test]
fn virtual_stages_from_segments_tpsim_does_not_price_name_the_segments() {
    // Four segments on pp 2 are two virtual stages per rank over 59 layers a stage, which tpsim
    // prices as unequal chunks of 30 and 29 (`StageLayout::balanced_chunks`, since the balanced
    // interleaving of this session): the refusal of a 30/30/30/28 cut names the pattern's
    // segments and the cut tpsim prices, not --num-virtual-stages-per-pipeline-rank, which the
    // line does not hold and Megatron-LM refuses beside a hybrid pattern.
    let line = cut_line(&nemotron_h_56b_line(), 2, &[30, 30, 30, 28]);
    let r = eval_line(&line);
    assert_one_line_error(
        &r,
        &[
            "--hybrid-layer-pattern",
            "segments of 30/30/30/28 layers",
            "as 30/30/29/29 layers",
        ],
        &REFUSED_BESIDE_A_PATTERN,
        "4 segments on pp 2",
    );
    // The cut it names reads back, and so does a cut of 2 segments on the same pipeline.
    for counts in [&[30, 30, 29, 29][..], &[59, 59]] {
        let fine = cut_line(&nemotron_h_56b_line(), 2, counts);
        let r = eval_line(&fine);
        assert_eq!(r.code, 0, "{counts:?}: {}", r.stderr);
    }
}

#[test]
fn a_torchtitan_recipe_without_a_pipeline_turns_cuda_graphs_off_as_tpsim_prices_it() {
    // torchtitan at b5bcd76c66d0 captures each forward-backward in a CUDA graph unless
    // training.disable_cuda_graphs (TrainingConfig, default False; trainer.py
    // wrap_with_cuda_graph), which tpsim does not price: its graph pool and replay change memory
    // and time. The recipe set it only at pp > 1 (where torchtitan refuses graphs), leaving an
    // FSDP plan at pp 1 to run captured.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan",
        "--tp",
        "1",
        "--zero",
        "3",
        "--recompute",
        "full",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("pipeline_parallel_degree=1,"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("    config.training.disable_cuda_graphs = True\n"),
        "{}",
        r.stdout
    );
}
