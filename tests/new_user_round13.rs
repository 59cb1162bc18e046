//! Regressions from the thirteenth review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time plans the models they train (Llama 3, DeepSeek-V3,
//! Qwen3 MoE, Mixtral, GPT-OSS) on the bundled clusters and carries `plan`'s winners to `eval`,
//! `--emit`, `compare`, `sweep` and the report (each test names the finding it guards).

mod common;
use common::{assert_one_line_error, json, run};

/// Qwen3-30B-A3B on four H100 nodes under torchtitan, as a torchtitan user plans it.
const QWEN_TORCHTITAN: [&str; 10] = [
    "--model",
    "qwen3-30b-a3b",
    "--nodes",
    "4",
    "--global-batch",
    "512",
    "--framework",
    "torchtitan",
    "--seq-len",
    "4096",
];

fn with(base: &[&'static str], extra: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(extra).copied().collect()
}

/// `plan --framework torchtitan` ranked first a Qwen3-30B-A3B plan with ep 8 beside ZeRO-0
/// (tp 1, pp 2, dp 16): torchtitan draws its expert-parallel ranks from FSDP2's shard ranks, CP
/// and TP (parallel_dims.py: ep must divide dp_shard x cp x tp), and ZeRO-0 leaves it one rank,
/// so torchtitan refuses to build the plan the user was told to run. Such plans are now
/// `invalid_plan`, and `eval` names the rule and the fix (--zero 3, torchtitan's default).
#[test]
fn torchtitan_expert_parallelism_needs_its_fsdp_ranks() {
    let out = json(&with(
        &with(&["plan"], &QWEN_TORCHTITAN),
        &["--top", "20", "--format", "json"],
    ));
    let plans = out["plans"].as_array().expect("plans");
    assert!(!plans.is_empty());
    for p in plans {
        let (tp, cp, dp, ep, etp) = (
            p["tp"].as_u64().unwrap(),
            p["cp"].as_u64().unwrap(),
            p["dp"].as_u64().unwrap(),
            p["ep"].as_u64().unwrap(),
            p["etp"].as_u64().unwrap(),
        );
        let zero = p["zero"].as_u64().unwrap();
        let replicas = p["dp_replicas"].as_u64().unwrap();
        let dp_shard = if zero == 3 { dp / replicas } else { 1 };
        let ranks = dp_shard * cp * if etp == tp && tp > 1 { 1 } else { tp };
        assert!(
            ranks % ep == 0,
            "torchtitan cannot build ep {ep} over dp_shard {dp_shard} x cp {cp} x tp {tp} (etp {etp}, zero {zero}): {p}"
        );
        assert!(etp == 1 || etp == tp, "torchtitan etp {etp} at tp {tp}");
    }

    // eval of the row the search used to rank first: refused, naming the rule and the fix.
    let r = run(&with(
        &["eval"],
        &with(
            &QWEN_TORCHTITAN,
            &[
                "--tp",
                "1",
                "--pp",
                "2",
                "--ep",
                "8",
                "--zero",
                "0",
                "--recompute",
                "none",
            ],
        ),
    ));
    assert_one_line_error(
        &r,
        &[
            "--ep 8 under --framework torchtitan",
            "dp_shard x cp x tp",
            "= 1",
            "--zero 3",
        ],
        &["Megatron-Core"],
        "torchtitan ep 8 with ZeRO-0",
    );
    // Without --zero, the message says the ZeRO-0 was eval's default, not the user's.
    let r = run(&with(
        &["eval"],
        &with(
            &QWEN_TORCHTITAN,
            &["--tp", "1", "--pp", "2", "--ep", "8", "--recompute", "none"],
        ),
    ));
    assert_one_line_error(
        &r,
        &["--zero was not given", "not torchtitan's", "--zero 3"],
        &[],
        "torchtitan ep 8 with eval's default ZeRO-0",
    );
    // With FSDP2 (--zero 3) the same degrees run.
    let r = run(&with(
        &["eval"],
        &with(
            &QWEN_TORCHTITAN,
            &[
                "--tp",
                "1",
                "--pp",
                "2",
                "--ep",
                "8",
                "--zero",
                "3",
                "--recompute",
                "none",
            ],
        ),
    ));
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    // torchtitan splits experts over all TP ranks or none.
    let r = run(&with(
        &["eval"],
        &with(
            &QWEN_TORCHTITAN,
            &[
                "--tp",
                "4",
                "--etp",
                "2",
                "--pp",
                "1",
                "--ep",
                "4",
                "--zero",
                "3",
                "--recompute",
                "full",
            ],
        ),
    ));
    assert_one_line_error(
        &r,
        &[
            "--etp 2 with --tp 4 under --framework torchtitan",
            "ETP=TP or ETP=1",
        ],
        &[],
        "torchtitan etp 2 at tp 4",
    );
}

/// Llama 3 70B on 16 H100 nodes with Megatron-Core's precision-aware optimizer in FP8: the
/// training line said "weights + states: 8 bytes per parameter" while the memory breakdown below
/// it counted 10 (with FP8 parameter gathers the master copy is a whole fp32, not the 16-bit
/// remainder of a bf16 weight). The line now reads the count memory uses, plan by plan.
#[test]
fn bytes_per_parameter_line_matches_the_optimizer_memory() {
    let eval = |precision: &'static str| {
        json(&[
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--seq-len",
            "8192",
            "--global-batch",
            "512",
            "--tp",
            "8",
            "--pp",
            "2",
            "--vpp",
            "10",
            "--micro-batch",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--recompute",
            "none",
            "--optimizer-states",
            "bf16-moments",
            "--precision",
            precision,
            "--format",
            "json",
        ])
    };
    let text = |precision: &'static str| {
        let r = run(&[
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--seq-len",
            "8192",
            "--global-batch",
            "512",
            "--tp",
            "8",
            "--pp",
            "2",
            "--vpp",
            "10",
            "--micro-batch",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--recompute",
            "none",
            "--optimizer-states",
            "bf16-moments",
            "--precision",
            precision,
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    for precision in ["bf16", "fp8"] {
        let p = &eval(precision)["plans"][0];
        let m = &p["memory"];
        let params = m["params_per_gpu_before_zero"].as_f64().unwrap();
        let dp = p["dp"].as_f64().unwrap();
        // ZeRO-1: the weights whole, the optimizer's states over dp.
        let weights = m["weights_bytes"].as_f64().unwrap() / params;
        let states = m["optimizer_bytes"].as_f64().unwrap() * dp / params;
        let counted = (weights + states).round() as u32;
        let out = text(precision);
        let line = out
            .lines()
            .find(|l| l.starts_with("training:"))
            .expect("training line");
        assert!(
            line.contains(&format!(
                "(weights + states: {counted} bytes per parameter)"
            )),
            "{precision}: memory counts {counted} bytes per parameter, the line says: {line}"
        );
    }
}
