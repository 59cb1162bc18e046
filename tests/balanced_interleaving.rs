//! Interleaving an even split into chunks of unequal size: 80 layers on pp 4 x vpp 3 give each
//! stage 20 layers in chunks of 7, 7 and 6. Megatron-Core builds such chunks only from a
//! `--pipeline-model-parallel-layout` (megatron/core/transformer/pipeline_parallel_layer_layout.py;
//! without one, `get_num_layers_to_build` asserts that vp_size divides the stage's layers) and
//! torchtitan from `module_fqns_per_model_part`; tpsim gives the earliest virtual stages the
//! extra layer, writes that layout, reads it back, and refuses the frameworks that cannot say it.

mod common;

use common::{assert_one_line_error, json, run};

const LLAMA3_70B: [&str; 17] = [
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
    "--recompute",
    "full",
    "--zero",
    "1",
];

fn eval_args<'a>(vpp: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["eval"];
    args.extend_from_slice(&LLAMA3_70B);
    args.extend_from_slice(&["--vpp", vpp]);
    args.extend_from_slice(extra);
    args
}

fn eval_json(vpp: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = eval_args(vpp, extra);
    args.extend_from_slice(&["--format", "json"]);
    json(&args)["plans"][0].clone()
}

fn emitted(vpp: &str, extra: &[&str], target: &str) -> String {
    let mut args = eval_args(vpp, extra);
    args.extend_from_slice(&["--emit", target]);
    let r = run(&args);
    assert_eq!(r.code, 0, "--emit {target}: {}", r.stderr);
    r.stdout
}

/// The quoted value of `--flag '...'` on a launch line.
fn quoted_after(line: &str, flag: &str) -> String {
    let start = line.find(&format!("{flag} '")).expect(flag) + flag.len() + 2;
    let end = start + line[start..].find('\'').expect("closing quote");
    line[start..end].to_string()
}

#[test]
fn a_vpp_that_does_not_divide_the_stage_is_priced_between_its_neighbours() {
    // The interleaved schedule's fill and drain shrink as (p − 1)/(v·m) (Narayanan et al. 2021
    // §2.2): three virtual stages sit between two and four whatever the chunks' sizes.
    let bubble = |vpp: &str| eval_json(vpp, &[])["time"]["bubble_s"].as_f64().unwrap();
    let (two, three, four) = (bubble("2"), bubble("3"), bubble("4"));
    assert!(
        two > three && three > four,
        "bubble vpp 2/3/4: {two} {three} {four}"
    );
    let plan = eval_json("3", &[]);
    assert_eq!(plan["vpp"], 3);
    assert_eq!(plan["stages"]["even"], true);
    // Every stage holds its 20 layers: the work per stage is the vpp 2 plan's.
    let busy = |p: &serde_json::Value| p["time"]["compute_s"].as_f64().unwrap();
    let with_two = eval_json("2", &[]);
    assert!(
        (busy(&plan) - busy(&with_two)).abs() < 1e-6 * busy(&with_two),
        "compute {} vs {}",
        busy(&plan),
        busy(&with_two)
    );
}

#[test]
fn eval_says_how_the_stage_is_chunked() {
    let r = run(&eval_args("3", &[]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("each stage's 20 in 3 chunks: 2 of 7 layers, then 1 of 6"),
        "{}",
        r.stdout
    );
}

#[test]
fn megatron_gets_a_layout_and_reads_it_back_as_the_same_plan() {
    let out = emitted("3", &[], "megatron");
    let line = out
        .lines()
        .find(|l| l.contains("--num-layers"))
        .expect("launch line");
    assert_eq!(
        quoted_after(line, "--pipeline-model-parallel-layout"),
        "Et*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*6|t*6|t*6|t*6L"
    );
    // Megatron-LM refuses a virtual-stage argument beside a layout (arguments.py).
    assert!(
        !line.contains("--num-layers-per-virtual-pipeline-stage"),
        "{line}"
    );
    assert!(
        !line.contains("--num-virtual-stages-per-pipeline-rank"),
        "{line}"
    );
    let read = json(&[
        "eval",
        "--megatron-args",
        line,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "16",
        "--format",
        "json",
    ])["plans"][0]
        .clone();
    let priced = eval_json("3", &[]);
    assert_eq!(read["vpp"], 3);
    let step = |p: &serde_json::Value| p["time"]["step_s"].as_f64().unwrap();
    assert!(
        (step(&read) - step(&priced)).abs() < 1e-9 * step(&priced),
        "read back {} vs {}",
        step(&read),
        step(&priced)
    );
}

#[test]
fn a_layout_whose_stages_differ_is_refused_in_one_line() {
    // 81 layers in 9 chunks of 7 and 3 of 6 on pp 4: stage 0 holds 7+7+7, stage 3 7+7+6.
    let line = "--num-layers 81 --hidden-size 8192 --num-attention-heads 64 --ffn-hidden-size 28672 \
                --seq-length 8192 --max-position-embeddings 8192 --tensor-model-parallel-size 8 \
                --pipeline-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 512 --bf16 \
                --pipeline-model-parallel-layout 'Et*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*6|t*6|t*6L'";
    let r = run(&[
        "eval",
        "--megatron-args",
        line,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "16",
    ]);
    assert_one_line_error(
        &r,
        &["9 leading chunks 7 layers", "different layer counts"],
        &["panicked"],
        "unbalanced layout",
    );
}

#[test]
fn bridge_writes_the_layout_and_nemo_refuses() {
    let bridge = emitted("3", &[], "megatron-bridge");
    assert!(
        bridge.contains(
            "model.pipeline_model_parallel_layout='Et*7|t*7|t*7|t*7|t*7|t*7|t*7|t*7|t*6|t*6|t*6|t*6L'"
        ),
        "{bridge}"
    );
    let mut args = eval_args("3", &[]);
    args.extend_from_slice(&["--emit", "nemo"]);
    assert_one_line_error(
        &run(&args),
        &["--vpp 3", "unequal size", "--emit megatron"],
        &[],
        "nemo",
    );
}

#[test]
fn frameworks_without_per_chunk_layouts_refuse_with_the_ones_that_have_them() {
    assert_one_line_error(
        &run(&eval_args("3", &["--framework", "megatron-lm-2021"])),
        &["--vpp 3", "megatron-core", "valid: 1, 2, 4, 5, 10, 20"],
        &[],
        "megatron-lm-2021",
    );
    // A chunk without a layer stays refused everywhere; where unequal chunks are taken every
    // vpp up to the stage's layers works, not only its divisors (tests/hostile_round39.rs).
    assert_one_line_error(
        &run(&eval_args("30", &[])),
        &["--vpp 30", "valid: 1 to 20"],
        &["megatron-core and torchtitan can"],
        "vpp past the layers",
    );
}

#[test]
fn plan_searches_a_pinned_vpp_that_chunks_unequally() {
    let mut args = vec!["plan"];
    args.extend_from_slice(&[
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--pp",
        "4",
        "--vpp",
        "3",
        "--format",
        "json",
    ]);
    let v = json(&args);
    let plans = v["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "{v}");
    assert!(plans.iter().all(|p| p["vpp"] == 3 && p["pp"] == 4));
}

#[test]
fn torchtitan_lists_the_unequal_chunks() {
    // torchtitan shards everything (FSDP2) or nothing: ZeRO-3 in place of the base's ZeRO-1.
    let mut args = eval_args("3", &["--framework", "torchtitan", "--emit", "torchtitan"]);
    let zero = args.iter().position(|a| *a == "--zero").unwrap();
    args[zero + 1] = "3";
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = r.stdout;
    let sizes: Vec<u32> = out
        .lines()
        .filter_map(|l| {
            let at = l.find("_layers(")? + 8;
            let inner = &l[at..at + l[at..].find(')')?];
            let (a, b) = inner.split_once(", ")?;
            Some(b.trim().parse::<u32>().ok()? - a.trim().parse::<u32>().ok()?)
        })
        .collect();
    assert_eq!(sizes, [7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6], "{out}");
}

#[test]
fn a_hybrid_stack_cuts_its_pattern_into_unequal_segments_and_reads_them_back() {
    // Nemotron-H 56B's 118 layers on pp 2 x vpp 2: 59 per stage in chunks of 30 and 29.
    let base = [
        "eval",
        "--model",
        "nemotron-h-56b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "2",
        "--vpp",
        "2",
        "--global-batch",
        "256",
        "--sequence-parallel",
        "--zero",
        "1",
    ];
    let mut emit = base.to_vec();
    emit.extend_from_slice(&["--emit", "megatron"]);
    let r = run(&emit);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("--hybrid-layer-pattern"))
        .expect("launch line");
    let pattern = quoted_after(line, "--hybrid-layer-pattern");
    let lengths: Vec<usize> = pattern
        .split('/')
        .next()
        .unwrap()
        .split('|')
        .map(str::len)
        .collect();
    assert_eq!(lengths, [30, 30, 29, 29], "{pattern}");
    let mut as_json = base.to_vec();
    as_json.extend_from_slice(&["--format", "json"]);
    let priced = json(&as_json)["plans"][0]["time"]["step_s"]
        .as_f64()
        .unwrap();
    let read = json(&[
        "eval",
        "--megatron-args",
        line,
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "8",
        "--format",
        "json",
    ])["plans"][0]["time"]["step_s"]
        .as_f64()
        .unwrap();
    assert!((read - priced).abs() < 1e-9 * priced, "{read} vs {priced}");
}
