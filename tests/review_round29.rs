//! Review, round 29: the defects found reading this session's merged change (59b9e7f..3862ccb).
//! - tests/leftovers_round36.rs ran `plan ... --report 00` from the repository root while trying
//!   every whole-number flag with `00`, which wrote a report directory `00/` into the checkout,
//!   and two commits took it in; the test now runs in a scratch directory.
//! - `cli_errors::FLAGS_COUNTING_FROM_ONE` missed `calibrate`'s and `validate`'s counts that
//!   refuse 0 under names no spec key has (`--ranks`, `--reps`, `calibrate --sweep`): `--reps 00`
//!   was told "so write --reps 0", which is refused next ("at least one timed repetition").
//! - `hf_config::unknown::shape_flags` fell through a per-layer list whose values differ to the
//!   next key: a Hunyuan config whose `moe_intermediate_size` differs by layer was offered
//!   `--moe-ffn-hidden-size <intermediate_size>` (the dense width) and a shared expert of it,
//!   beside the note that the list differs and one flag holds one value.

mod common;

use common::*;
use serde_json::Value;

/// No directory at the repository's top holds a rendered report (`index.html` beside
/// `report.json`): a test's `--report DIR` writes into a scratch directory, and the checkout's
/// reports live under reports/.
#[test]
fn the_checkout_holds_no_report_written_by_a_test() {
    let stray: Vec<String> = std::fs::read_dir(ROOT)
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("index.html").is_file() && path.join("report.json").is_file())
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        stray.is_empty(),
        "report directories at the repository's top: {stray:?}"
    );
}

/// `calibrate` and `validate` counts that start at 1, spelled `00`: told to write 1 or more, and
/// the zero their old fix offered is refused in turn (so the fix was wrong, not merely worded).
#[test]
fn calibrate_and_validate_counts_spelled_00_are_told_1_or_more() {
    let dir = scratch("review29", "counts");
    let shape = [
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
    ];
    for (command, flag) in [
        ("calibrate", "--reps"),
        ("calibrate", "--ranks"),
        ("calibrate", "--sweep"),
        ("validate", "--reps"),
        ("validate", "--ranks"),
    ] {
        let with = |value: &str| {
            let mut args = vec![command];
            args.extend_from_slice(&shape);
            if command == "calibrate" {
                args.extend(["--output", "out.yaml"]);
            } else {
                args.extend(["--tp", "2"]);
            }
            args.extend([flag, value]);
            run_in(&dir, &args)
        };
        // Zero itself is refused: the fix must not offer it.
        let zero = with("0");
        assert_eq!(zero.code, 2, "{command} {flag} 0: {}", zero.stderr);
        let spelled = with("00");
        assert_one_line_error(
            &spelled,
            &[
                &format!("{flag} 00"),
                &format!("write a whole number of 1 or more, e.g. {flag} 1"),
            ],
            &[&format!("so write {flag} 0")],
            &format!("{command} {flag} 00"),
        );
    }
}

/// A Hunyuan config whose per-layer `moe_intermediate_size` differs: no expert width is offered
/// (the note says the list differs), not the dense `intermediate_size` in its place, nor a shared
/// expert as wide as that.
#[test]
fn a_differing_per_layer_expert_width_offers_no_width_from_another_key() {
    let dir = scratch("review29", "hunyuan");
    let text = std::fs::read_to_string(format!("{ROOT}/tests/data/leftovers36/hunyuan_a13b.json"))
        .unwrap();
    let mut config: Value = serde_json::from_str(&text).unwrap();
    let layers = config["num_hidden_layers"].as_u64().unwrap() as usize;
    let dense = config["intermediate_size"].as_u64().unwrap();
    let widths: Vec<u64> = (0..layers)
        .map(|i| if i < layers / 2 { dense } else { dense / 2 })
        .collect();
    config["moe_intermediate_size"] = Value::from(widths);
    let path = dir.join("hunyuan_width_differs.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    let r = run_in(
        &dir,
        &[
            "plan",
            "--hf-config",
            path.to_str().unwrap(),
            "--nodes",
            "4",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            &format!(
                "its per-layer moe_intermediate_size runs from {} to {dense}",
                dense / 2
            ),
            "--num-experts 64",
            "--moe-router-topk 8",
        ],
        &[
            "--moe-ffn-hidden-size",
            "--moe-shared-expert-intermediate-size",
        ],
        "hunyuan width differs",
    );
}
