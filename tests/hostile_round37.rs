//! Hostile input, round 37: a report's timeline whose step is almost all tail (a ZeRO-3 gradient
//! reduction hundreds of times the blocks) drew its sub-pixel blocks as rectangles of width -1.
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix.

mod common;

use common::*;

const SUITE: &str = "hostile37";

/// Every `<rect>`'s width and height in an SVG.
fn rect_sizes(svg: &str) -> Vec<(f64, f64)> {
    let attr = |el: &str, name: &str| -> f64 {
        el.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .map_or(0.0, |v| v.parse().unwrap())
    };
    svg.split("<rect")
        .skip(1)
        .map(|el| el.split('>').next().unwrap())
        .map(|el| (attr(el, "width"), attr(el, "height")))
        .collect()
}

/// Kimi K2 on two nodes under ZeRO-3: the gradient reduction after the last backward is some 500 s
/// of a 540 s step, so its few micro-batch blocks are under a pixel each on the step's axis (and
/// too few to fold). Each kept a pixel's gap at its right end, which made a block of no pixels a
/// rectangle of width -1 (no SVG). A block under two pixels now drops the gap.
#[test]
fn a_timeline_of_sub_pixel_blocks_draws_no_negative_width() {
    let dir = scratch(SUITE, "sub-pixel-blocks");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "kimi-k2",
            "--nodes",
            "2",
            "--tp",
            "8",
            "--global-batch",
            "96",
            "--zero",
            "3",
            "--report",
            "report",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("report/timeline.svg")).unwrap();
    let sizes = rect_sizes(&svg);
    assert!(
        sizes.iter().all(|&(w, h)| w >= 0.0 && h >= 0.0),
        "timeline.svg: a rectangle of negative size: {sizes:?}"
    );
    // The forward and backward blocks are still drawn.
    let blocks = svg
        .split("<rect")
        .skip(1)
        .filter(|el| el.contains(r##"fill="#1F77B4""##) || el.contains(r##"fill="#31A354""##))
        .count();
    assert!(blocks >= 2, "no block drawn:\n{svg}");
}

/// A one-node FP8 launch line (`EXTRA` replaced).
const FP8_LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --use-distributed-optimizer --bf16 --vocab-size 32000 --fp8-format hybrid EXTRA";

fn eval_fp8_line(extra: &str, flags: &[&str]) -> Run {
    let line = FP8_LINE.replace("EXTRA", extra);
    let mut args = vec!["eval", "--nodes", "1", "--megatron-args", &line];
    args.extend_from_slice(flags);
    run(&args)
}

/// Megatron-LM's `--fp8-recipe` defaults to delayed, under which Megatron-Core refuses bf16 layers.
/// The refusal named `--fp8-scaling delayed` (never typed) and offered `--fp8-scaling current`,
/// which beside the line is refused as contradicting it. It now names the line's recipe and the
/// fix in the line.
#[test]
fn bf16_layers_under_a_lines_default_recipe_name_the_recipe() {
    for extra in [
        "--first-last-layers-bf16",
        "--fp8-recipe delayed --first-last-layers-bf16",
    ] {
        assert_one_line_error(
            &eval_fp8_line(extra, &[]),
            &[
                "--megatron-args: --first-last-layers-bf16 with delayed FP8 scaling",
                "--fp8-recipe delayed, Megatron-LM's default",
                "Delayed scaling does not support first / last layer in BF16",
                "add --fp8-recipe tensorwise to the line",
            ],
            &["--fp8-scaling", "panicked"],
            extra,
        );
    }
}

/// A line's `--num-layers-at-start-in-bf16 40` on 32 layers was refused as "bf16_layers
/// at_start: 40 in the plan file"; there is no plan file. It is now the line's own flag.
#[test]
fn a_lines_bf16_count_past_the_model_names_the_lines_flag() {
    assert_one_line_error(
        &eval_fp8_line(
            "--fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 40",
            &[],
        ),
        &[
            "--num-layers-at-start-in-bf16 40",
            "has 32 transformer layers",
            "give 32 or fewer",
        ],
        &["plan file", "bf16_layers", "panicked"],
        "at start 40",
    );
}

/// The bf16-layer flags beside a launch line: a count that differs from the line's won silently,
/// the switch alone reset the line's counts to Megatron-Core's default 1 and 1, and a count beside
/// a line that has the switch was refused as "--first-last-layers-bf16 ... which is not given".
/// A different count is now a contradiction; the switch or the same count keep the line's counts.
#[test]
fn bf16_layer_flags_beside_a_line_do_not_override_it() {
    let line = "--fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 2";
    assert_one_line_error(
        &eval_fp8_line(line, &["--num-layers-at-start-in-bf16", "5"]),
        &[
            "--num-layers-at-start-in-bf16 5 contradicts the --megatron-args launch line",
            "keeps 2 layer(s) at the start in bf16",
            "drop --num-layers-at-start-in-bf16 or change the line",
        ],
        &["not given", "panicked"],
        "start 5 beside 2",
    );
    assert_one_line_error(
        &eval_fp8_line(
            "--fp8-recipe tensorwise --first-last-layers-bf16",
            &["--num-layers-at-end-in-bf16", "5"],
        ),
        &[
            "--num-layers-at-end-in-bf16 5 contradicts the --megatron-args launch line",
            "keeps 1 layer(s) at the end in bf16",
        ],
        &["not given", "panicked"],
        "end 5 beside the default",
    );
    for flags in [
        &["--first-last-layers-bf16"][..],
        &["--num-layers-at-start-in-bf16", "2"][..],
        &[
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            "2",
        ][..],
    ] {
        let mut all = flags.to_vec();
        all.extend(["--format", "json"]);
        let r = eval_fp8_line(line, &all);
        assert!(r.code == 0 || r.code == 1, "{flags:?}: {}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(
            (
                &v["training"]["bf16_layers"]["at_start"],
                &v["training"]["bf16_layers"]["at_end"]
            ),
            (&serde_json::json!(2), &serde_json::json!(1)),
            "{flags:?}"
        );
    }
}

/// An MoE launch line with a sliding window (`--window-size (511,0)`: 512 tokens per query).
const MOE_LINE: &str = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 2 --expert-model-parallel-size 4 --use-distributed-optimizer --bf16 --vocab-size 32000 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024 --moe-shared-expert-intermediate-size 2048 --sequence-parallel --swiglu --disable-bias-linear --window-size (511,0) --moe-token-dispatcher-type alltoall";

/// `--moe-router-topk 4` beside a line's `--moe-router-topk 2` priced top-4 routing, and the same
/// for the experts' widths, their layer frequency and the window; `--dp-replicas 4` beside a line
/// was dropped (the plan kept one copy). Each is now refused as contradicting the line; the line's
/// own values are taken.
#[test]
fn expert_window_and_replica_flags_beside_a_line_do_not_override_it() {
    for (flags, needles) in [
        (
            &["--moe-router-topk", "4"][..],
            &[
                "--moe-router-topk 4 contradicts the --megatron-args launch line",
                "--moe-router-topk 2",
            ][..],
        ),
        (
            &["--moe-ffn-hidden-size", "512"][..],
            &[
                "--moe-ffn-hidden-size 512 contradicts",
                "--moe-ffn-hidden-size 1024",
            ][..],
        ),
        (
            &["--moe-shared-expert-intermediate-size", "0"][..],
            &[
                "--moe-shared-expert-intermediate-size 0 contradicts",
                "2048",
            ][..],
        ),
        (
            &["--moe-layer-freq", "2"][..],
            &["--moe-layer-freq 2 contradicts", "every 1 layer(s)"][..],
        ),
        (
            &["--attention-window", "1024"][..],
            &[
                "--attention-window 1024 contradicts",
                "--window-size \"(511,0)\" (512 tokens per query)",
            ][..],
        ),
        (
            &["--dp-replicas", "4"][..],
            &[
                "--dp-replicas 4 contradicts",
                "--num-distributed-optimizer-instances 1",
                "set --num-distributed-optimizer-instances 4 in the line",
            ][..],
        ),
    ] {
        let mut args = vec!["eval", "--nodes", "1", "--megatron-args", MOE_LINE];
        args.extend_from_slice(flags);
        let mut all: Vec<&str> = needles.to_vec();
        all.push("drop ");
        assert_one_line_error(&run(&args), &all, &["panicked"], flags[0]);
    }
    // The line's own values beside it are taken.
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        MOE_LINE,
        "--moe-router-topk",
        "2",
        "--attention-window",
        "512",
        "--dp-replicas",
        "1",
        "--format",
        "json",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["model"]["moe"]["router_topk"], 2, "{}", v["model"]);
}
