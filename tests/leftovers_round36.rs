//! Leftovers, round 36 (the lead's, from the leads list of the twenty-sixth session):
//! - a Hugging Face config of a `model_type` tpsim does not read whose counts are per-layer lists
//!   (tencent's Hunyuan-A13B, `hunyuan_v1_moe`: `moe_topk`, `moe_intermediate_size` and
//!   `num_shared_expert` as one value per layer, HunYuanMoEV1Config "List form enables layer-wise
//!   customization") was offered shape flags without its top-k, expert width or shared expert, so
//!   the offered flags priced a top-2 model with no shared expert (6.0B active against the card's
//!   13B). A list of one value is now read as that value; experts are `intermediate_size` wide where
//!   no `moe_intermediate_size` is given (Mixtral's convention, which `HunYuanMoEV1Experts` reuses);
//!   a list whose values differ is said, since one flag holds one value.
//!   The config under tests/data/leftovers36/ is typed after the Hub's
//!   tencent/Hunyuan-A13B-Instruct config.json as transformers' HunYuanMoEV1Config and its
//!   modeling file read it, not fetched from the Hub, so a key may differ from the file there.

mod common;

use common::*;

const DATA: &str = "tests/data/leftovers36";

#[test]
fn per_layer_counts_of_an_unread_config_are_offered_as_flags() {
    let r = run(&[
        "plan",
        "--hf-config",
        &format!("{DATA}/hunyuan_a13b.json"),
        "--nodes",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "model_type \"hunyuan_v1_moe\" is not one tpsim reads",
            "--num-experts 64 --moe-router-topk 8 --moe-ffn-hidden-size 3072 --moe-shared-expert-intermediate-size 3072",
        ],
        &["runs from"],
        "hunyuan",
    );
    let flags = offered_flags(&r.stderr);
    let mut args: Vec<&str> = vec![
        "plan",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--top",
        "1",
        "--format",
        "json",
    ];
    args.extend(flags.iter().map(String::as_str));
    let v = json(&args);
    let total = v["model"]["params"].as_f64().unwrap();
    let active = v["model"]["active_params"].as_f64().unwrap();
    // The model card: 80B total, 13B active.
    assert!((total / 80e9 - 1.0).abs() < 0.02, "total {total:.4e}");
    assert!((active / 13e9 - 1.0).abs() < 0.03, "active {active:.4e}");
}

#[test]
fn a_per_layer_count_that_differs_is_said_not_dropped_silently() {
    let r = run(&[
        "plan",
        "--hf-config",
        &format!("{DATA}/hunyuan_topk_differs.json"),
        "--nodes",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "its per-layer moe_topk runs from 4 to 8: one flag holds one value, so give the one to price",
            "--num-experts 64",
        ],
        &["--moe-router-topk", "eos_token_id"],
        "hunyuan topk differs",
    );
}

/// Every whole-number flag of `plan` and `eval`, read from their `--help`.
fn whole_number_flags(command: &str) -> Vec<String> {
    let help = run(&[command, "--help"]);
    let mut flags: Vec<String> = help
        .stdout
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line =
                line.split_once(", ").map_or(
                    line,
                    |(short, rest)| {
                        if short.len() == 2 { rest } else { line }
                    },
                );
            let (flag, rest) = line.split_once(' ')?;
            (flag.starts_with("--") && rest.starts_with('<')).then(|| flag.to_string())
        })
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

#[test]
fn a_zero_spelled_with_leading_zeros_is_told_a_fix_that_is_accepted() {
    // `--num-experts 00` was told "so write --num-experts 0", which is refused next ("must be at
    // least 1"). Every whole-number flag: where the fix offered is `FLAG 0`, FLAG 0 must not be
    // refused as too small (a model with experts and latent attention, so the MoE and MLA widths
    // are read).
    let too_small = ["at least", "1 or more", "give 1"];
    // In a scratch directory: `--report 00` and `--save 00` write there, not into the checkout
    // (a run from the repository root left a report directory `00/` that was committed).
    let dir = scratch("leftovers36", "zeros");
    let run = |args: &[&str]| run_in(&dir, args);
    let mut offered_zero = 0;
    for command in ["plan", "eval"] {
        let flags = whole_number_flags(command);
        assert!(flags.len() > 20, "{command}: {flags:?}");
        let base: Vec<&str> = match command {
            "plan" => vec![
                "plan",
                "--model",
                "deepseek-v3",
                "--nodes",
                "32",
                "--top",
                "1",
            ],
            _ => vec![
                "eval",
                "--model",
                "deepseek-v3",
                "--nodes",
                "32",
                "--tp",
                "1",
                "--pp",
                "16",
                "--ep",
                "16",
                "--micro-batch",
                "1",
            ],
        };
        for flag in &flags {
            let mut args = base.clone();
            args.extend([flag.as_str(), "00"]);
            let spelled = run(&args);
            if !spelled.stderr.contains(&format!("so write {flag} 0")) {
                continue;
            }
            offered_zero += 1;
            let mut args = base.clone();
            args.extend([flag.as_str(), "0"]);
            let zero = run(&args);
            let quoted = format!("{flag} 0");
            assert!(
                !(zero.code == 2
                    && zero.stderr.contains(&quoted)
                    && too_small.iter().any(|w| zero.stderr.contains(w))),
                "{command} {flag} 00 was told to write {flag} 0, which is refused: {}",
                zero.stderr
            );
        }
    }
    assert!(offered_zero > 3, "only {offered_zero} flags offered 0");
}

#[test]
fn a_file_given_without_its_flag_is_told_the_flag_that_reads_it() {
    // `compare a.yaml b.yaml` was told "unexpected argument 'a.yaml' found (see --help)": no fix.
    for (args, words) in [
        (
            &["compare", "a.yaml", "b.yaml"][..],
            &[
                "compare takes no bare file a.yaml",
                "--plan a.yaml --plan OTHER.yaml",
            ][..],
        ),
        (
            &["eval", "p.yaml"][..],
            &["eval takes no bare file p.yaml", "--plan p.yaml"][..],
        ),
        (
            &["plan", "m.yaml", "--nodes", "1"][..],
            &[
                "plan takes no bare file m.yaml",
                "--model m.yaml",
                "--gpu m.yaml",
            ][..],
        ),
        (
            &["report", "a.yaml", "b.yaml"][..],
            &[
                "report takes no bare file b.yaml",
                "tpsim report PLAN_FILE --out DIR",
            ][..],
        ),
    ] {
        assert_one_line_error(&run(args), words, &["unexpected argument"], &args.join(" "));
    }
    // The fix offered is taken: the two bundled plans compared with --plan.
    let r = run(&[
        "compare",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--plan",
        "plans/best-512b-32nodes.yaml",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn the_dp_why_line_says_deepspeeds_bf16_optimizer_shards_at_zero_0() {
    // Review round 30: eval's DP line said the BF16_Optimizer's own ZeRO-1, plan's why-line only
    // "DP 8 with ZeRO-0", a stage whose states are not sharded.
    let r = run(&[
        "plan",
        "--params",
        "8B",
        "--nodes",
        "2",
        "--framework",
        "deepspeed",
        "--zero",
        "0",
        "--pp",
        "2",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("DP ") && l.contains("with ZeRO-"))
        .unwrap_or_else(|| panic!("no DP why-line: {}", r.stdout));
    assert!(
        line.contains("with ZeRO-0 (DeepSpeed's BF16_Optimizer shards its fp32 states over dp all the same: its own ZeRO-1)"),
        "{line}"
    );
}
