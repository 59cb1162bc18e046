//! Hostile input, round 41, on launch lines' uneven pipeline flags and malformed current-stack
//! runs files: a runs file's `plan.vp: 0` on a dense run panicked ("attempt to divide by zero",
//! exit 101: the search took the pinned 0 as a chunk count); an MoE (bundled-model) run's
//! `model.seq_len: 0` was predicted at 0 tokens/s and summed as a -100% error, where a dense run's
//! is refused with its key and a fix; a `plan.gbs: 0` beside `plan.ga` was refused as a `ga` that
//! contradicts gbs / (dp x mbs) with the fix "e.g. ga: 0", which names the wrong key and a value
//! that is refused in turn; `--decoder-first/last-pipeline-num-layers` whose remainder the other
//! stages cannot split evenly were told "leave N layers for M other stages ... change the
//! first/last values", naming neither the values given, the layer count nor the pipeline size,
//! nor a count that splits; with pp 1 they were told of "0 other stages", where the rule is
//! that the split flags need a pipeline (said so now, before the counts); a launch line's
//! `--pipeline-model-parallel-size` past its layer count (8 on 4 layers) was told to cut the
//! hybrid pattern into 8 '|' segments or to add --decoder-first/last-pipeline-num-layers or the
//! --account-for-* flags, each refused in turn (a stage holds at least one layer);
//! `--moe-layer-freq 2` beside a hybrid pattern was told as "--moe-layer-freq 2 / first dense
//! layers 0 ... drop them", naming a setting never given.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix; every runs-file case checks the row's reason and that nothing is predicted.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "hostile41";

/// The current-stack runs file cut to the one run `id`, with `from` replaced by `to` in it.
fn one_run(id: &str, from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let header_end = text.find("\nruns:\n").expect("a runs: list") + "\nruns:\n".len();
    let start = text
        .find(&format!("- id: {id}\n"))
        .unwrap_or_else(|| panic!("run {id} in validation/modern_runs.yaml"));
    let end = text[start + 1..]
        .find("\n- id: ")
        .map_or(text.len(), |i| start + 1 + i + 1);
    let block = &text[start..end];
    assert_eq!(block.matches(from).count(), 1, "{from:?} once in run {id}");
    format!("{}{}", &text[..header_end], block.replacen(from, to, 1))
}

/// `accuracy --runs FILE --format json` on `yaml`: the one row, after exit 0.
fn accuracy_row(name: &str, yaml: &str) -> Value {
    let dir = scratch(SUITE, name);
    let file = dir.join("runs.yaml");
    std::fs::write(&file, yaml).unwrap();
    let r = run(&[
        "accuracy",
        "--runs",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{name}: exit {}\n{}", r.code, r.stderr);
    let rows: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{name}: {rows}");
    rows[0].clone()
}

const DENSE: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs128";
const MOE: &str = "mbridge-25.11-pretrain-deepseek_v3-gb300-256g-bf16-gbs4096";

/// `plan.vp: 0` on a dense run divided the stage's layers by the pinned 0 in the search (a
/// panic, exit 101). It is now the row's reason, said in the file's key with the fix.
#[test]
fn runs_file_vp_zero_is_a_reason_not_a_panic() {
    let row = accuracy_row("vp-zero", &one_run(DENSE, "    vp: null\n", "    vp: 0\n"));
    assert!(
        row["predicted_tokens_per_s_per_gpu"].is_null(),
        "nothing predicted: {row}"
    );
    let note = row["note"].as_str().unwrap_or_default();
    for needle in ["plan.vp: 0 is not a degree", "plan.vp: 1 or more"] {
        assert!(note.contains(needle), "no {needle:?} in: {note}");
    }
}

/// An MoE run's `model.seq_len: 0` was priced (0 tokens/s, error -100%); it is refused as a
/// dense run's is, with the key and an example.
#[test]
fn runs_file_moe_seq_len_zero_is_refused_as_a_dense_runs_is() {
    let row = accuracy_row(
        "moe-seq-zero",
        &one_run(MOE, "    seq_len: 4096\n", "    seq_len: 0\n"),
    );
    assert!(
        row["predicted_tokens_per_s_per_gpu"].is_null() && row["error"].is_null(),
        "nothing predicted, no error summed: {row}"
    );
    let note = row["note"].as_str().unwrap_or_default();
    for needle in ["model.seq_len: 0 must be at least 1", "model.seq_len: 2048"] {
        assert!(note.contains(needle), "no {needle:?} in: {note}");
    }
    // The dense run says the same words.
    let dense = accuracy_row(
        "dense-seq-zero",
        &one_run(DENSE, "    seq_len: 8192\n", "    seq_len: 0\n"),
    );
    assert_eq!(dense["note"].as_str(), Some(note), "one wording: {dense}");
}

/// `plan.gbs: 0` beside `plan.ga: 8` was refused as a ga contradicting gbs / (dp x mbs) = 0,
/// "e.g. ga: 0"; the gbs is what is wrong, and its own reason names it and the range.
#[test]
fn runs_file_gbs_zero_beside_ga_names_gbs_not_ga_zero() {
    let row = accuracy_row(
        "gbs-zero",
        &one_run(DENSE, "    gbs: 128\n", "    gbs: 0\n"),
    );
    assert!(
        row["predicted_tokens_per_s_per_gpu"].is_null(),
        "nothing predicted: {row}"
    );
    let note = row["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("plan.gbs 0 is outside 1 to") && !note.contains("ga: 0"),
        "the gbs named, no ga: 0: {note}"
    );
}

const LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000";

fn eval_line(extra: &str) -> Run {
    let line = format!("{LINE} {extra}");
    run(&["eval", "--nodes", "1", "--megatron-args", &line])
}

/// First/last stage counts whose remainder the middle stages cannot split: the message names the
/// values, the layers and the pipeline size, and a count that splits, which then runs.
#[test]
fn first_last_counts_that_do_not_split_name_values_and_a_count_that_does() {
    let cases = [
        (
            "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 30",
            "--decoder-first-pipeline-num-layers 30 leaves 2 of the 32 layers for the 3 other stage(s) of --pipeline-model-parallel-size 4, which Megatron-Core needs to split evenly",
            "e.g. --decoder-first-pipeline-num-layers 8",
            "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 8",
        ),
        (
            "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 10 --decoder-last-pipeline-num-layers 10",
            "--decoder-first-pipeline-num-layers 10 and --decoder-last-pipeline-num-layers 10 leave 12 of the 32 layers for the 0 other stage(s) of --pipeline-model-parallel-size 2, which Megatron-Core needs to split evenly",
            "e.g. --decoder-first-pipeline-num-layers 22",
            "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 22 --decoder-last-pipeline-num-layers 10",
        ),
        // pp 1 has no other stages: the rule is the pipeline's, and dropping the count runs
        // (a count that "splits", 32, was refused in turn for the pp).
        (
            "--pipeline-model-parallel-size 1 --decoder-first-pipeline-num-layers 30",
            "need --pipeline-model-parallel-size 2 or more",
            "drop them",
            "--pipeline-model-parallel-size 1",
        ),
    ];
    for (given, said, example, fixed) in cases {
        assert_one_line_error(
            &eval_line(given),
            &[said, example],
            &["change the first/last values", "panicked"],
            given,
        );
        let r = eval_line(fixed);
        assert!(
            r.code == 0 || r.code == 1,
            "the fix {fixed} runs: exit {}\n{}",
            r.code,
            r.stderr
        );
    }
}

/// A pipeline deeper than the layer count: every fix the split messages offered ('|' segments,
/// first/last counts, the --account-for-* flags) leaves a stage empty and was refused in turn.
/// The rule is said (a stage needs a layer) with a pipeline size that runs.
#[test]
fn a_pipeline_past_the_layer_count_is_told_a_size_that_runs() {
    let shape = "--num-layers 4 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000";
    for extra in ["", "--hybrid-override-pattern MMMM"] {
        let line = format!("{shape} {extra} --pipeline-model-parallel-size 8");
        let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
        assert_one_line_error(
            &r,
            &[
                "--pipeline-model-parallel-size 8 is more than the model's 4 layers",
                "a stage needs at least one layer",
                "e.g. --pipeline-model-parallel-size 4",
            ],
            &["cut the pattern", "add --decoder-first/last", "panicked"],
            &line,
        );
        let fixed = line.replace("size 8", "size 4");
        let r = run(&["eval", "--nodes", "1", "--megatron-args", &fixed]);
        assert!(
            r.code == 0 || r.code == 1,
            "the fix runs: {fixed}: exit {}\n{}",
            r.code,
            r.stderr
        );
    }
}

/// `--moe-layer-freq 2` beside a hybrid pattern was told as "--moe-layer-freq 2 / first dense
/// layers 0 ... drop them", naming a setting never given; only what was given is named.
#[test]
fn a_layer_frequency_beside_a_hybrid_pattern_names_only_what_was_given() {
    let line = "--num-layers 4 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000 --hybrid-override-pattern MEME --num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall";
    let given = format!("{line} --moe-layer-freq 2");
    assert_one_line_error(
        &run(&["eval", "--nodes", "1", "--megatron-args", &given]),
        &[
            "--moe-layer-freq 2 with a hybrid pattern",
            "E symbols place the MoE layers",
            "drop it",
        ],
        &["first dense layers 0", "drop them"],
        "freq beside a pattern",
    );
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert!(
        r.code == 0 || r.code == 1,
        "without it the line runs: exit {}\n{}",
        r.code,
        r.stderr
    );
}
