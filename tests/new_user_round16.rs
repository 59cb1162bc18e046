//! Regressions from the sixteenth review of valid usage by a new user: an ML infrastructure
//! engineer plans Llama 3, DeepSeek-V3, Qwen3 and Nemotron 3 on H100, H200, B200 and GB200
//! clusters, under Megatron-Core and torchtitan, and carries the winners to `eval`, `compare`,
//! `report` and `--emit` (each test names the finding).

mod common;
use common::{json, run};

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// Llama 3 70B on 8 H100 nodes under torchtitan with a local batch of 8 sequences per
/// data-parallel rank.
const TITAN_LOCAL_BATCH: &[&str] = &[
    "--model",
    "llama3-70b",
    "--nodes",
    "8",
    "--seq-len",
    "8192",
    "--global-batch",
    "256",
    "--framework",
    "torchtitan",
    "--local-batch",
    "8",
];

fn with(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|a| a.to_string()).collect()
}

/// `plan --framework torchtitan --local-batch 8` ranked first tp 1 cp 2 pp 1 dp 32 with
/// micro-batch 1 x 8 micro-batches (73.1 GiB), and `eval` priced that plan too; but without a
/// pipeline torchtitan has no schedule to split the local batch: its non-PP
/// `forward_backward_step` runs the whole local batch in one forward and backward (train.py), so
/// the plan it runs holds eight sequences' activations at once (397.9 GiB). A pipeline-less plan's
/// micro-batch is now the local batch: the search counts the others as `local_batch_split`, and
/// `eval` refuses them naming the rule and `--micro-batch 8`.
#[test]
fn without_a_pipeline_torchtitans_micro_batch_is_the_local_batch() {
    let args = with(TITAN_LOCAL_BATCH, &["--top", "50", "--format", "json"]);
    let mut plan_args = vec!["plan"];
    plan_args.extend(args.iter().map(String::as_str));
    let plans = json(&plan_args);
    let plans = plans["plans"].as_array().expect("plans");
    let unpipelined: Vec<_> = plans.iter().filter(|p| p["pp"] == 1).collect();
    assert!(!unpipelined.is_empty(), "no pp 1 plan in the top 50");
    for p in &unpipelined {
        assert_eq!(
            p["micro_batch"], 8,
            "pp 1 plan with another micro-batch: {p}"
        );
        assert_eq!(
            p["schedule_runs"].as_u64().unwrap() * 8 * p["dp"].as_u64().unwrap(),
            256,
            "{p}"
        );
    }
    let eval = |mb: &str| {
        let args = with(
            TITAN_LOCAL_BATCH,
            &[
                "--tp",
                "1",
                "--cp",
                "2",
                "--pp",
                "1",
                "--micro-batch",
                mb,
                "--recompute",
                "selective",
                "--zero",
                "3",
            ],
        );
        let mut eval_args = vec!["eval"];
        eval_args.extend(args.iter().map(String::as_str));
        run(&eval_args)
    };
    let refused = eval("1");
    common::assert_one_line_error(
        &refused,
        &[
            "--local-batch 8",
            "without a pipeline",
            "one forward and backward",
            "--micro-batch 8",
        ],
        &[],
        "eval pp 1 micro-batch 1 with a local batch of 8",
    );
    // What torchtitan runs: eight sequences in one forward, which does not fit (exit 1).
    let whole = eval("8");
    assert_eq!(whole.code, 1, "{}", whole.stderr);
    assert!(
        whole.stdout.contains("micro-batch 8 x 1 micro-batch =")
            && whole.stdout.contains("DOES NOT FIT"),
        "{}",
        whole.stdout
    );
    // With a pipeline the schedule splits the local batch into micro-batches, as before.
    let args = with(
        TITAN_LOCAL_BATCH,
        &[
            "--tp",
            "4",
            "--pp",
            "4",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
            "--zero",
            "3",
        ],
    );
    let mut eval_args = vec!["eval"];
    eval_args.extend(args.iter().map(String::as_str));
    stdout_of(&eval_args);
}

/// The value of `key: value` in a YAML fragment's lines (indentation ignored).
fn yaml_value<'a>(yaml: &'a str, key: &str) -> Option<&'a str> {
    yaml.lines().find_map(|line| {
        line.trim()
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(": "))
    })
}

/// `plan --model llama3-70b --nodes 8 --emit nemo` (tp 8, pp 4, vpp 5) wrote `overlap_p2p_comm:
/// true` and nothing of `batch_p2p_comm`, so the merged megatron_gpt_config.yaml kept its
/// `batch_p2p_comm: True`, which NeMo 1.x copies into Megatron-Core's ModelParallelConfig by name:
/// the interleaved schedule then raises "Can not use both overlap_p2p_comm and batch_p2p_comm"
/// (schedules.py) at the first step. The fragment now writes `batch_p2p_comm` as the opposite of
/// `overlap_p2p_comm`, as Megatron-LM derives it (`batch_p2p_comm = not overlap_p2p_comm`) and
/// Megatron-Bridge sets it for interleaved pipelines.
#[test]
fn nemo_fragment_turns_batched_p2p_off_where_it_overlaps_p2p() {
    let emit = |extra: &[&str]| {
        let args = with(
            &[
                "eval",
                "--model",
                "llama3-70b",
                "--nodes",
                "8",
                "--seq-len",
                "8192",
                "--global-batch",
                "512",
                "--tp",
                "8",
                "--pp",
                "4",
                "--micro-batch",
                "2",
                "--sequence-parallel",
                "--zero",
                "1",
                "--emit",
                "nemo",
            ],
            extra,
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        stdout_of(&args)
    };
    let interleaved = emit(&["--vpp", "5"]);
    assert_eq!(
        yaml_value(&interleaved, "overlap_p2p_comm"),
        Some("true"),
        "{interleaved}"
    );
    assert_eq!(
        yaml_value(&interleaved, "batch_p2p_comm"),
        Some("false"),
        "{interleaved}"
    );
    // Without the overlap (no interleaving, or --overlap-p2p-comm false) the sends stay batched,
    // NeMo's default.
    for extra in [&[][..], &["--vpp", "5", "--overlap-p2p-comm", "false"][..]] {
        let fragment = emit(extra);
        assert_eq!(
            yaml_value(&fragment, "overlap_p2p_comm"),
            Some("false"),
            "{extra:?}: {fragment}"
        );
        assert_eq!(
            yaml_value(&fragment, "batch_p2p_comm"),
            Some("true"),
            "{extra:?}: {fragment}"
        );
    }
}
