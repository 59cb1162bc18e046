//! Review round 20: defects found reading this session's change (balanced interleaving,
//! torchtitan's expert layout, context parallelism in hybrid stacks), one test per defect, each
//! failing before its fix.

mod common;

use common::{assert_one_line_error, json, run};

/// Llama 3 70B on 128 H100s at tp 8 x pp 4: 20 layers per stage, which vpp 3 cuts into chunks
/// of 7, 7 and 6 (`StageLayout::balanced_chunks`) and vpp 2 and 4 into equal ones.
const LLAMA3_70B_PP4: [&str; 15] = [
    "--model",
    "llama3-70b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "16",
    "--tp",
    "8",
    "--pp",
    "4",
    "--global-batch",
    "512",
    "--sequence-parallel",
    "--zero",
    "1",
];

fn plan_of(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["eval"];
    args.extend_from_slice(&LLAMA3_70B_PP4);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--format", "json"]);
    json(&args)["plans"][0].clone()
}

fn compute_s(extra: &[&str]) -> f64 {
    plan_of(extra)["time"]["compute_s"].as_f64().unwrap()
}

/// Megatron-LM's line for Llama 3 70B on pp 4 with `virtual` (a flag and its value).
fn llama3_70b_line(virtual_stages: &str) -> String {
    format!(
        "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --group-query-attention \
         --num-query-groups 8 --ffn-hidden-size 28672 --swiglu --normalization RMSNorm \
         --position-embedding-type rope --untie-embeddings-and-output-weights \
         --disable-bias-linear --seq-length 8192 --max-position-embeddings 8192 \
         --micro-batch-size 1 --global-batch-size 512 --tensor-model-parallel-size 8 \
         --pipeline-model-parallel-size 4 {virtual_stages} --sequence-parallel \
         --use-distributed-optimizer --bf16 --vocab-size 128256"
    )
}

#[test]
fn virtual_stages_that_do_not_divide_a_stage_without_a_layout_are_refused_as_megatron_does() {
    // Without a --pipeline-model-parallel-layout, Megatron-Core cuts each stage into
    // vp_size equal chunks and asserts "num_layers_per_pipeline_rank ... should be divisible by
    // vp_size" (megatron/core/transformer/transformer_block.py get_num_layers_to_build at
    // d98e8a64): the line below never trains, yet it was priced as tpsim's 7/7/6 chunks.
    let eval = |line: &str| {
        run(&[
            "eval",
            "--megatron-args",
            line,
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "16",
            "--format",
            "json",
        ])
    };
    let r = eval(&llama3_70b_line("--num-virtual-stages-per-pipeline-rank 3"));
    assert_one_line_error(
        &r,
        &[
            "--num-virtual-stages-per-pipeline-rank 3",
            "20 layers",
            "get_num_layers_to_build",
            "1, 2, 4, 5, 10, 20",
            "--pipeline-model-parallel-layout",
        ],
        &["panicked"],
        "vpp 3 on 20 layers without a layout",
    );
    // A vpp that divides the stage is read as before, and so are the unequal chunks when the
    // line gives the layout `--emit megatron` writes.
    let divides = eval(&llama3_70b_line("--num-virtual-stages-per-pipeline-rank 4"));
    assert_eq!(divides.code, 0, "{}", divides.stderr);
    let with_layout = eval(&llama3_70b_line(
        "--pipeline-model-parallel-layout 'Et*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*6|t*6|t*6|t*6L'",
    ));
    assert_eq!(with_layout.code, 0, "{}", with_layout.stderr);
    let plan: serde_json::Value = serde_json::from_str(&with_layout.stdout).unwrap();
    assert_eq!(plan["plans"][0]["vpp"], 3);
}

#[test]
fn block_recompute_counts_each_unequal_chunks_own_layers() {
    // `--recompute-method block --recompute-num-layers N` recomputes the first N layers of every
    // model chunk (megatron/core/recompute.py, over the chunk's own layers): on chunks of 7, 7 and
    // 6, N = 6 recomputes 6 + 6 + 6 = 18 of the stage's 20 layers (0.9), N = 3 recomputes 9
    // (0.45). It was priced as N of the heavier chunk's 7 (6/7 = 0.857, 3/7 = 0.429). The
    // compute time is linear in the recomputed share, between no recompute and full.
    let share = |vpp: &str, n: &str| {
        let none = compute_s(&["--vpp", vpp, "--recompute", "none"]);
        let full = compute_s(&["--vpp", vpp, "--recompute", "full"]);
        let block = compute_s(&[
            "--vpp",
            vpp,
            "--recompute",
            "full",
            "--recompute-method",
            "block",
            "--recompute-num-layers",
            n,
        ]);
        (block - none) / (full - none)
    };
    for (vpp, n, want) in [("3", "6", 0.9), ("3", "3", 0.45), ("3", "2", 0.3)] {
        let got = share(vpp, n);
        assert!(
            (got - want).abs() < 1e-9,
            "vpp {vpp}, N {n}: recomputed share {got}, want {want}"
        );
    }
    // Equal chunks (vpp 4, 5 layers each) as before: N / 5.
    let equal = share("4", "3");
    assert!((equal - 0.6).abs() < 1e-9, "vpp 4, N 3: {equal}");
}

#[test]
fn the_heavier_chunks_in_flight_weigh_in_the_first_stages_activations() {
    // The first stage of interleaved 1F1B holds the warm-up's (v − 1)·p + 2·(p − 1) forwards and
    // one more: v·p + p − 1 chunks, forward k running virtual stage (k / p) mod v (Megatron-Core
    // schedules.py get_model_chunk_id, micro-batch groups of p). With vpp 3 that is every chunk
    // of four micro-batches (80 layers) and three more chunks of the first, heavier virtual
    // stage (3 x 7): 101 layers, not the 15/3 x 20 = 100 of equal chunks. Against vpp 2 (11/2
    // x 20 = 110 layers) the activations held are 101/110 of it; vpp 4 (19/4 x 20 = 95) checks
    // that they scale with the layers in flight at all.
    let args = ["--recompute", "selective", "--seq-len", "4096"];
    let activations = |vpp: &str| {
        let mut extra = vec!["--vpp", vpp];
        extra.extend_from_slice(&args);
        let plan = plan_of(&extra);
        assert_eq!(plan["memory"]["stage"], "first", "vpp {vpp}");
        plan["memory"]["activations_bytes"].as_f64().unwrap()
    };
    let (two, three, four) = (activations("2"), activations("3"), activations("4"));
    let ratio = |a: f64, b: f64| a / b;
    assert!(
        (ratio(four, two) - 95.0 / 110.0).abs() < 1e-9,
        "vpp 4 against vpp 2: {}",
        ratio(four, two)
    );
    assert!(
        (ratio(three, two) - 101.0 / 110.0).abs() < 1e-9,
        "vpp 3 against vpp 2: {}, want 101/110 = {}",
        ratio(three, two),
        101.0 / 110.0
    );
}

#[test]
fn torchtitans_expert_layout_is_not_named_a_megatron_default_eval_took() {
    // At ep 1 torchtitan splits every routed expert over the TP ranks (etp = tp, its only layout
    // there: torchtitan/models/common/moe_sharding.py expert_param_placement_dense), so every
    // `plan` row at ep 1 has it too; the note said eval took it as "Megatron-LM's defaults, not
    // torchtitan's" and told the user to give --etp to match a plan row. Megatron-Core, whose
    // search also ranks etp 1, keeps the note.
    let eval = |framework: &str, zero: &str| {
        run(&[
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "8",
            "--framework",
            framework,
            "--zero",
            zero,
        ])
    };
    let torchtitan = eval("torchtitan", "3");
    assert_eq!(torchtitan.code, 0, "{}", torchtitan.stderr);
    assert!(
        torchtitan.stdout.contains("ep 1 x etp 8"),
        "{}",
        torchtitan.stdout
    );
    assert!(
        !torchtitan.stderr.contains("expert tensor parallelism"),
        "{}",
        torchtitan.stderr
    );
    let megatron = eval("megatron-core", "1");
    assert_eq!(megatron.code, 0, "{}", megatron.stderr);
    assert!(
        megatron
            .stderr
            .contains("expert tensor parallelism 8 as tp (--etp)"),
        "{}",
        megatron.stderr
    );
}
