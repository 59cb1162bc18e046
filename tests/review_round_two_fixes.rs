//! Regressions from the second 2026-12-03 reviews: a hostile-input sweep and a cross-command
//! consistency review (each test names the finding it guards).

mod common;
use common::{assert_one_line_error, json, run, run_in, scratch};

/// A bare bundled name that is also a file in the working folder could mean either; tpsim once
/// read the file and still labelled it "bundled" (a copy with 8 layers printed as llama3-70b).
#[test]
fn a_bundled_name_shadowed_by_a_local_file_is_refused() {
    let dir = scratch("review2", "shadow");
    let bundled = std::fs::read_to_string(format!("{}/models/llama3-70b.yaml", common::ROOT))
        .unwrap()
        .replace("layers: 80", "layers: 8");
    std::fs::write(dir.join("llama3-70b"), bundled).unwrap();
    let args = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "1",
        "--global-batch",
        "8",
    ];
    let r = run_in(&dir, &args);
    assert_one_line_error(&r, &["llama3-70b", "./llama3-70b"], &[], "shadowed name");
    // Written as a path, the file is what is read.
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "./llama3-70b",
            "--nodes",
            "1",
            "--global-batch",
            "8",
            "--tp",
            "8",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("8 layers"), "{}", r.stdout);
    // Elsewhere the bundled name is the bundled model.
    let r = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--pp",
        "2",
    ]);
    assert!(r.stdout.contains("80 layers"), "{}", r.stdout);
}

/// A plan file with both `model:` and `params:` once dropped params without a word (the command
/// line refuses the same pair).
#[test]
fn a_plan_file_with_model_and_params_is_refused() {
    let dir = scratch("review2", "model-params");
    let path = dir.join("plan.yaml");
    std::fs::write(
        &path,
        "model: llama3-70b\nparams: 1T\ngpu: h100-sxm-80g\nnodes: 8\nglobal_batch: 64\nplan:\n  tp: 8\n  pp: 1\n  dp: 8\n  micro_batch: 1\n",
    )
    .unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(&r, &["model", "params", "1T"], &[], "model and params");
}

/// `eval --recompute-num-layers N` above a model chunk's layers (which Megatron-Core refuses) once
/// became full uniform recompute silently, through the flag and through a pasted launch line;
/// `plan`'s error offered 0, which the flag refuses.
#[test]
fn block_recompute_beyond_a_chunk_is_refused_and_never_suggested_as_zero() {
    let base = [
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "8",
        "--pp",
        "4",
        "--recompute-num-layers",
        "100",
    ];
    let r = run(&[&["eval"][..], &base[..]].concat());
    assert_one_line_error(
        &r,
        &["--recompute-num-layers 100", "20 layers"],
        &[],
        "eval",
    );
    let r = run(&[&["plan"][..], &base[..]].concat());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        !r.stderr.contains("--recompute-num-layers 0,"),
        "{}",
        r.stderr
    );
    let line = "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --seq-length 4096 --max-position-embeddings 4096 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 512 --sequence-parallel --recompute-granularity full --recompute-method block --recompute-num-layers 100 --bf16";
    let r = run(&["eval", "--nodes", "8", "--megatron-args", line]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("--recompute-num-layers 100"),
        "{}",
        r.stderr
    );
    // The whole chunk is every layer: still the same plan as full recompute.
    let whole = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "8",
        "--pp",
        "4",
        "--recompute-num-layers",
        "20",
    ]);
    assert_eq!(whole.code, 0, "{}", whole.stderr);
}

/// A pasted launch line with a position embedding Megatron-LM does not have was read as "no
/// learned positions".
#[test]
fn an_unknown_position_embedding_type_is_refused() {
    let line = "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 --position-embedding-type bogus";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", line]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("--position-embedding-type bogus"),
        "{}",
        r.stderr
    );
}

/// An MLP width tensor parallelism does not divide (Megatron's ColumnParallelLinear refuses it)
/// was accepted by plan and eval and written to a launch line; `calibrate` already refused it.
#[test]
fn an_mlp_width_tp_does_not_divide_is_refused() {
    let shape = [
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--ffn-hidden",
        "1001",
        "--nodes",
        "1",
        "--global-batch",
        "8",
    ];
    let r = run(&[&["eval"][..], &shape[..], &["--tp", "8"][..]].concat());
    assert_one_line_error(&r, &["--tp 8", "MLP width 1001"], &[], "eval tp 8");
    let planned = json(
        &[
            &["plan"][..],
            &shape[..],
            &["--format", "json", "--top", "50"][..],
        ]
        .concat(),
    );
    for p in planned["plans"].as_array().unwrap() {
        assert_eq!(p["tp"], 1, "{p}");
    }
}

/// A token budget below one step once trained in 1e-5 s: training runs whole steps.
#[test]
fn time_to_train_counts_whole_steps() {
    let base = [
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--tp",
        "8",
        "--pp",
        "4",
        "--sequence-parallel",
        "--format",
        "json",
    ];
    let one = json(&[&base[..], &["--tokens", "1"][..]].concat());
    let step = one["plans"][0]["time"]["step_s"].as_f64().unwrap();
    let ttt = one["plans"][0]["time_to_train_s"].as_f64().unwrap();
    assert!((ttt / step - 1.0).abs() < 1e-9, "{ttt} vs one step {step}");
    // 1.5 steps' tokens take two steps.
    let tokens = (1.5 * 512.0 * 8192.0) as u64;
    let half = json(&[&base[..], &["--tokens", &tokens.to_string()][..]].concat());
    let ttt = half["plans"][0]["time_to_train_s"].as_f64().unwrap();
    assert!(
        (ttt / step - 2.0).abs() < 1e-9,
        "{ttt} vs two steps of {step}"
    );
}

/// The consistency review: for a plan whose slowest stage is not the one with the most layers,
/// the per-GPU traffic the breakdown prints and the report's ledger counts are the same stage's
/// (the ledger once listed the middle stages' twice as many all-to-alls), and the breakdown says
/// which GPUs it describes.
#[test]
fn breakdown_and_ledger_count_the_same_stage() {
    let args = [
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--pp",
        "16",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--global-batch",
        "2048",
        "--seq-len",
        "4096",
        "--mtp-num-layers",
        "1",
        "--decoder-first-pipeline-num-layers",
        "4",
        "--decoder-last-pipeline-num-layers",
        "1",
        "--precision",
        "mxfp8",
        "--recompute",
        "selective",
        "--zero",
        "1",
    ];
    let text = run(&args);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains(
            "TP, CP, PP, EP: a GPU of the slowest stage, whose 1 transformer layer and 1 MTP layer set the step"
        ),
        "{}",
        text.stdout
    );
    let v = json(&[&args[..], &["--format", "json"][..]].concat());
    let plan = &v["plans"][0];
    let comm = plan["comm"]["ep"]["wire_bytes"].as_f64().unwrap();
    let ledger: f64 = plan["ledger"]["entries"]
        .as_array()
        .expect("eval's JSON carries the ledger")
        .iter()
        .filter(|e| e["group"] == "ep")
        .map(|e| e["count"].as_f64().unwrap() * e["wire_bytes"].as_f64().unwrap())
        .sum();
    assert!(
        (ledger / comm - 1.0).abs() < 1e-9,
        "ledger {ledger} vs comm {comm}"
    );
}

/// "Why the best plan" names every parallel dimension the plan uses: the expert all-to-alls
/// were half of DeepSeek-V3's step and went unmentioned.
#[test]
fn the_explanation_names_expert_and_context_parallel_traffic() {
    let r = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let why = r
        .stdout
        .split("why the best plan:")
        .nth(1)
        .expect("an explanation");
    assert!(why.contains("  EP "), "{why}");
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "32",
        "--seq-len",
        "131072",
        "--global-batch",
        "64",
        "--cp",
        "8",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let why = r
        .stdout
        .split("why the best plan:")
        .nth(1)
        .expect("an explanation");
    assert!(why.contains("  CP 8: on "), "{why}");
}

/// The closest miss of a search where nothing fits could not be run back: it left out sequence
/// parallelism (564 GiB printed, 577 GiB without it).
#[test]
fn the_closest_miss_names_sequence_parallelism() {
    let r = run(&["plan", "--params", "1T", "--nodes", "4"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("nothing fits: closest:"))
        .unwrap();
    assert!(line.contains("sequence-parallel"), "{line}");
}

/// The table's best row was a pipeline split no launch line tpsim writes can place (a first stage
/// holding only the embedding); such splits are not plans, and a best row `--emit` cannot write
/// is said under the table.
#[test]
fn no_stage_is_left_without_a_layer_and_unemittable_rows_are_said() {
    let planned = json(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--allow-uneven-pp",
        "--top",
        "20",
        "--format",
        "json",
    ]);
    for p in planned["plans"].as_array().unwrap() {
        let stages = &p["stages"];
        assert!(stages["first"].as_u64().unwrap() > 0, "{p}");
        assert!(stages["last"].as_u64().unwrap() > 0, "{p}");
    }
    let r = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--tp",
        "2",
        "--pp",
        "32",
        "--ep",
        "8",
        "--global-batch",
        "4096",
        "--allow-uneven-pp",
    ]);
    assert_one_line_error(
        &r,
        &["--pp 32", "without a transformer layer"],
        &[],
        "empty stage",
    );
}
