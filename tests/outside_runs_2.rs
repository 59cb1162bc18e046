//! Published training runs in no validation file (validation/outside_runs_2.md), each run through
//! `tpsim eval` with the plan its source states, the settings it does not state at the
//! framework's defaults. Nothing was fitted to them: the bounds record the error measured on
//! 2026-12-07 (`predicted / published − 1`, tokens/s per GPU) with 8 points either side, so a change
//! that moves a prediction by more than that fails here, and a prediction that doubles or halves
//! fails on every row. They are not targets.
//!
//! Sources (the numbers each row transcribes are asserted below against the source's own columns):
//! - Megatron-LM README, "GPT-3 Example": GPT-3 175B on 1024 A100, TP 8, PP 16, global batch 1536
//!   of 2048 tokens, "each iteration takes around 32 seconds resulting in 138 teraFLOPs per GPU";
//!   the script it names (`examples/pretrain_gpt3_175B.sh`) runs micro-batch 1, `--fp16`,
//!   `--checkpoint-activations` (full recompute), no interleaving.
//! - Dao-AILab/flash-attention `training/README.md`, "Training speed" (8 x A100 80GB SXM4):
//!   GPT3-1.3B 169k tokens/s, GPT3-2.7B 85k tokens/s at 2048 tokens and 1M tokens per batch; the
//!   configs (`configs/experiment/pile/gpt3xl-flash.yaml`, `gpt3-2.7B-flash-hdim128.yaml`) give the
//!   shapes, micro-batch 8 / 4 on 80 GB, DDP with a ZeRO-1 optimizer, no activation checkpointing.
//! - jzhang38/TinyLlama `README.md`: 1.1B (22 layers, hidden 2048, 32 heads, 4 query groups, SwiGLU
//!   5632), 2048 tokens, 2M tokens per batch, 16 A100-40G, FSDP, "24k tokens per second per
//!   A100-40G GPU" without activation checkpointing, 16k tokens per GPU per micro-batch.
//! - mosaicml/llm-foundry `scripts/train/benchmarking/README.md`, "A100 40GB with 1600 Gbps
//!   node-node interconnect (RoCE)": MPT rows with FSDP FULL_SHARD, tokens/s per GPU.
//!
//! The FlashAttention, TinyLlama and MPT code paths run fused kernels (FlashAttention's fused
//! dense / dropout-add-LayerNorm, TinyLlama's fused RMSNorm / SwiGLU / rotary, MPT's native
//! `F.layer_norm` / GELU), which tpsim counts as `--torch-compile true` (the reading of
//! validation/FIT.md, "FlashAttention on A100"); read eagerly, TinyLlama and four MPT rows do not
//! fit in 40 GB, which the runs did.

mod common;

/// A row: id, published tokens/s per GPU, tpsim arguments, observed error (2026-12-07).
struct Row {
    id: &'static str,
    published: f64,
    args: Vec<String>,
    observed: f64,
}

/// Points of error either side of the observed one before the test fails.
const MARGIN: f64 = 0.08;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn mpt(
    layers: u32,
    hidden: u32,
    heads: u32,
    gpus: u32,
    mb: u32,
    gbs: u32,
    ac: &str,
) -> Vec<String> {
    args(&format!(
        "eval --layers {layers} --hidden {hidden} --heads {heads} --ffn-hidden {} --vocab 50432 \
         --style llama --seq-len 2048 --gpu a100-sxm-40g --nodes {} --tp 1 --pp 1 --dp {gpus} \
         --global-batch {gbs} --micro-batch {mb} --zero 3 --recompute {ac} --framework torchtitan \
         --torch-compile true",
        4 * hidden,
        gpus / 8
    ))
}

// llm-foundry A100 40GB rows: (model, #GPUs, MicroBatchSize, GlobalBatchSize, Throughput (T/s),
// Throughput (T/s/GPU)), as the table prints them.
const MPT_ROWS: [(&str, u32, u32, u32, f64, f64); 7] = [
    ("70b", 128, 4, 512, 48194.0, 376.0),
    ("70b", 64, 2, 128, 17672.0, 276.0),
    ("30b", 128, 6, 768, 110803.0, 865.0),
    ("13b", 128, 16, 2048, 252444.0, 1972.0),
    ("7b", 64, 18, 1152, 234614.0, 3665.0),
    ("3b", 64, 6, 384, 623167.0, 9736.0),
    ("1b", 64, 10, 640, 1216104.0, 19001.0),
];

fn rows() -> Vec<Row> {
    // Megatron-LM README: 1536 sequences x 2048 tokens in 32 s on 1024 GPUs.
    let gpt3 = 1536.0 * 2048.0 / 32.0 / 1024.0;
    assert_eq!(gpt3, 96.0);
    let mut out = vec![
        Row {
            id: "megatron-lm-readme-gpt3-175b-1024xa100",
            published: gpt3,
            args: args(
                "eval --model gpt3-175b --gpu a100-sxm-80g --nodes 128 --tp 8 --pp 16 --dp 8 \
                 --global-batch 1536 --micro-batch 1 --recompute full --framework megatron-lm-2021 \
                 --attention unfused --seq-len 2048",
            ),
            observed: 0.069,
        },
        Row {
            id: "flash-attention-gpt3-1.3b-8xa100",
            published: 169_000.0 / 8.0,
            args: args(
                "eval --layers 24 --hidden 2048 --heads 16 --vocab 50264 --seq-len 2048 \
                 --gpu a100-sxm-80g --nodes 1 --tp 1 --pp 1 --dp 8 --global-batch 512 \
                 --micro-batch 8 --zero 1 --recompute none --framework torchtitan --torch-compile true",
            ),
            observed: 0.091,
        },
        Row {
            id: "flash-attention-gpt3-2.7b-8xa100",
            published: 85_000.0 / 8.0,
            args: args(
                "eval --layers 32 --hidden 2560 --heads 20 --vocab 50264 --seq-len 2048 \
                 --gpu a100-sxm-80g --nodes 1 --tp 1 --pp 1 --dp 8 --global-batch 512 \
                 --micro-batch 4 --zero 1 --recompute none --framework torchtitan --torch-compile true",
            ),
            observed: 0.100,
        },
        Row {
            id: "tinyllama-1.1b-16xa100-40g",
            published: 24_000.0,
            args: args(
                "eval --layers 22 --hidden 2048 --heads 32 --kv-heads 4 --ffn-hidden 5632 --gated-mlp \
                 --style llama --vocab 32000 --seq-len 2048 --gpu a100-sxm-40g --nodes 2 --tp 1 --pp 1 \
                 --dp 16 --global-batch 1024 --micro-batch 8 --zero 3 --recompute none \
                 --framework torchtitan --torch-compile true",
            ),
            observed: 0.069,
        },
    ];
    let shapes = |m: &str| match m {
        "70b" => (80, 8192, 64),
        "30b" => (48, 7168, 56),
        "13b" => (40, 5120, 40),
        "7b" => (32, 4096, 32),
        "3b" => (32, 2560, 20),
        "1b" => (24, 2048, 16),
        _ => unreachable!(),
    };
    let observed = [0.088, 0.389, 0.036, 0.057, 0.071, 0.135, 0.139];
    let ids = [
        "mpt-70b-128xa100-40g",
        "mpt-70b-64xa100-40g",
        "mpt-30b-128xa100-40g",
        "mpt-13b-128xa100-40g",
        "mpt-7b-64xa100-40g",
        "mpt-3b-64xa100-40g",
        "mpt-1b-64xa100-40g",
    ];
    for (i, &(m, gpus, mb, gbs, total, per_gpu)) in MPT_ROWS.iter().enumerate() {
        // The table's per-GPU column is its total over the GPUs (truncated, within a token/s).
        assert!(
            (total / gpus as f64 - per_gpu).abs() <= 1.1,
            "{m} on {gpus}: {total} / {gpus} vs {per_gpu}"
        );
        let (l, h, a) = shapes(m);
        // Activation checkpointing: True for the 70B/30B/13B/7B rows, False for 3B and 1B.
        let ac = if matches!(m, "3b" | "1b") {
            "none"
        } else {
            "full"
        };
        out.push(Row {
            id: ids[i],
            published: per_gpu,
            args: mpt(l, h, a, gpus, mb, gbs, ac),
            observed: observed[i],
        });
    }
    out
}

#[test]
fn outside_runs_2_stay_within_their_measured_error() {
    let mut failures = Vec::new();
    for row in rows() {
        let a: Vec<&str> = row
            .args
            .iter()
            .map(String::as_str)
            .chain(["--format", "json"])
            .collect();
        let out = common::json(&a);
        let plan = &out["plans"][0];
        assert!(
            plan["infeasible"].is_null(),
            "{}: the published plan ran, tpsim says it does not fit: {plan}",
            row.id
        );
        let gpus = plan["tp"].as_f64().unwrap()
            * plan["pp"].as_f64().unwrap()
            * plan["dp"].as_f64().unwrap()
            * plan["cp"].as_f64().unwrap();
        let predicted = plan["tokens_per_s"].as_f64().unwrap() / gpus;
        let error = predicted / row.published - 1.0;
        eprintln!(
            "{:40} published {:>8.1} predicted {:>8.1} {:+6.1}% (recorded {:+.1}%)",
            row.id,
            row.published,
            predicted,
            100.0 * error,
            100.0 * row.observed
        );
        if (error - row.observed).abs() > MARGIN {
            failures.push(format!(
                "{}: {:+.1}% vs recorded {:+.1}%",
                row.id,
                100.0 * error,
                100.0 * row.observed
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The bundled A100 40GB profile is what these rows need: 40 GiB, and the 40 GB part's HBM2.
#[test]
fn the_a100_40gb_profile_is_bundled() {
    let out = common::json(&[
        "eval",
        "--params",
        "1B",
        "--gpu",
        "a100-sxm-40g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    let text = out["cluster"].to_string();
    assert!(text.contains("a100-sxm-40g"), "{text}");
    let gpu = tpsim::specs::load_gpu("a100-sxm-40g").unwrap();
    assert_eq!(gpu.hbm_capacity_gib, 40.0);
    assert_eq!(gpu.hbm_bandwidth_gb_per_s, 1555.0);
}
