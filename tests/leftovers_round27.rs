//! Leftovers of the twenty-seventh round, message wording only: a Muon line with `--zero-stage`
//! is told to drop the flags it has (not `--deepspeed`, which it lacks), a tpsim plan file given
//! to `--megatron-args @FILE` is named a plan file with `--plan FILE` as the fix, a `--copy-bytes`
//! in PiB is too large (with the limit and a size that works), not "not a byte size", and a NaN
//! in a Hugging Face config is placed at its column in characters, as an editor counts them.

mod common;

use common::*;

const SUITE: &str = "leftovers27";

/// `--optimizer muon --zero-stage 1` under `--framework megatron-core`, with no `--deepspeed` on
/// the line, was told "drop --deepspeed and --zero-stage": the fix names only what the line has.
/// The same line with `--deepspeed` is still told to drop both.
#[test]
fn a_muon_line_with_zero_stage_is_told_to_drop_only_the_flags_it_has() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --optimizer muon --zero-stage 1";
    let r = run(&[
        "eval",
        "--megatron-args",
        line,
        "--framework",
        "megatron-core",
        "--nodes",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &["--zero-stage 1 with --optimizer muon", "drop --zero-stage"],
        &["--deepspeed"],
        "muon without --deepspeed",
    );
    let with_deepspeed = format!("{line} --deepspeed");
    let r = run(&[
        "eval",
        "--megatron-args",
        &with_deepspeed,
        "--framework",
        "deepspeed",
        "--nodes",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &["drop --deepspeed and --zero-stage"],
        &[],
        "muon with --deepspeed",
    );
}

/// `eval --megatron-args @plan.yaml` with a tpsim plan file said the line "lacks --num-layers":
/// it is named a plan file, with its keys, and the fix `--plan FILE`, which evaluates it.
#[test]
fn a_plan_file_given_as_a_launch_line_is_named_a_plan_file() {
    let dir = scratch(SUITE, "planfile");
    std::fs::write(
        dir.join("plan.yaml"),
        bundled_plan_with("nodes: 32", "nodes: 32"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--megatron-args", "@plan.yaml"]);
    assert_one_line_error(
        &r,
        &["plan.yaml is a tpsim plan file", "plan", "--plan plan.yaml"],
        &["lacks --num-layers"],
        "plan file as a launch line",
    );
    // The fix it names works.
    let ok = run_in(&dir, &["eval", "--plan", "plan.yaml"]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    // A launch line in a file is still read as one.
    std::fs::write(
        dir.join("launch.sh"),
        "# plan: not a key here\n--hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64\n",
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--megatron-args", "@launch.sh"]);
    assert_one_line_error(&r, &["lack --num-layers"], &["plan file"], "launch file");
}

/// `calibrate --copy-bytes 1PiB` was "not a byte size": PiB is a byte unit, and the size is over
/// the CPU backend's limit, which the message names with a size that works.
#[test]
fn a_copy_size_in_pib_is_too_large_not_unreadable() {
    let dir = scratch(SUITE, "pib");
    let r = run_in(
        &dir,
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--params",
            "1B",
            "--copy-bytes",
            "1PiB",
            "--output",
            "o.yaml",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "--copy-bytes 1PiB",
            "over the CPU backend's limit of 1GiB",
            "e.g. --copy-bytes 64MiB",
        ],
        &["not a byte size"],
        "1PiB",
    );
}

/// A NaN after non-ASCII text on its line was placed at a column counted in bytes (each `ü`
/// two): the column is now the NaN's in characters, as an editor shows it.
#[test]
fn a_nan_after_unicode_is_placed_at_its_column_in_characters() {
    let dir = scratch(SUITE, "nan");
    let prefix = format!(
        r#"{{"model_type": "llama", "_name_or_path": "ünïcödé-中文", {HF_SHAPE}, "rope_theta": "#
    );
    let config = format!("{prefix}NaN}}");
    let chars = prefix.chars().count() + 1;
    let bytes = prefix.len() + 1;
    assert_ne!(chars, bytes);
    let r = eval_hf(&dir, "config.json", &config);
    assert_one_line_error(
        &r,
        &[
            "key \"rope_theta\" is NaN",
            &format!("line 1 column {chars})"),
        ],
        &[&format!("column {bytes}")],
        "NaN after unicode",
    );
}
