//! DeepSpeed's context parallelism, DeepSpeed-Ulysses (`sequence_parallel_size`): planned,
//! priced as the all-to-all over heads with its K/V head repeat, refused where DeepSpeed refuses
//! it, and written back.

mod common;

use common::*;
use serde_json::Value;

const LONG: &[&str] = &[
    "--model",
    "llama3-8b",
    "--seq-len",
    "65536",
    "--global-batch",
    "16",
    "--framework",
    "deepspeed",
];

fn with(extra: &[&str]) -> Vec<String> {
    LONG.iter()
        .chain(extra.iter())
        .map(|s| s.to_string())
        .collect()
}

fn run_owned(args: &[String]) -> Run {
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn first_plan(doc: &Value) -> &Value {
    &doc["plans"][0]
}

/// At 64K tokens the search splits the sequence as Ulysses does, never beside Megatron's sequence
/// parallelism (Megatron-DeepSpeed refuses the two together), and the header names the scheme.
#[test]
fn plan_searches_ulysses_without_megatron_sequence_parallelism() {
    let mut args = vec!["plan".to_string()];
    args.extend(with(&["--nodes", "1"]));
    let r = run_owned(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("DeepSpeed-Ulysses"), "{}", r.stdout);
    args.extend([
        "--format".to_string(),
        "json".to_string(),
        "--top".to_string(),
        "50".to_string(),
    ]);
    let doc: Value = serde_json::from_str(&run_owned(&args).stdout).unwrap();
    let plans = doc["plans"].as_array().unwrap();
    assert!(plans.iter().any(|p| p["cp"].as_u64() > Some(1)));
    // Megatron-DeepSpeed asserts tp 1 and pp 1 beside Ulysses (megatron/core/parallel_state.py):
    // the search used to rank tp 2 x cp 4 third here.
    for p in plans {
        if p["cp"].as_u64() > Some(1) {
            assert_eq!(
                (p["tp"].as_u64(), p["pp"].as_u64()),
                (Some(1), Some(1)),
                "{p}"
            );
            assert_eq!(p["sequence_parallel"], false, "{p}");
        }
    }
    assert_eq!(doc["training"]["cp_exchange"], "head-all-to-all");
}

/// Ulysses repeats a TP rank's K/V heads up to cp where there are fewer (`kv_replication_factor`),
/// so at cp 16 a model with 8 K/V heads sends as many K/V bytes as one with 16, and at cp 8 fewer.
#[test]
fn ulysses_sends_repeated_kv_heads_where_there_are_fewer_than_cp() {
    let cp_bytes = |kv: &str, cp: &str| {
        let mut args = vec!["eval".to_string()];
        args.extend(with(&[
            "--kv-heads",
            kv,
            "--nodes",
            "2",
            "--tp",
            "1",
            "--cp",
            cp,
            "--micro-batch",
            "1",
            "--zero",
            "2",
            "--format",
            "json",
        ]));
        let r = run_owned(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).unwrap();
        first_plan(&doc)["comm"]["cp"]["wire_bytes"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(cp_bytes("8", "16"), cp_bytes("16", "16"));
    assert!(cp_bytes("8", "8") < cp_bytes("16", "8"));
}

/// Megatron-DeepSpeed: "sequence_parallel_size > 1 enables DeepSpeed's sequence parallel, which is
/// not compatible with Megatron-LM's sequence parallel".
#[test]
fn ulysses_beside_megatron_sequence_parallelism_is_refused() {
    let mut args = vec!["eval".to_string()];
    args.extend(with(&[
        "--nodes",
        "1",
        "--tp",
        "2",
        "--cp",
        "4",
        "--sequence-parallel",
        "--zero",
        "1",
    ]));
    assert_one_line_error(
        &run_owned(&args),
        &[
            "--cp 4",
            "--sequence-parallel",
            "Megatron-DeepSpeed",
            "--sequence-parallel false",
        ],
        &[],
        "Ulysses with sequence parallelism",
    );
}

/// A ring is not DeepSpeed's; a TP rank whose query heads cp does not split is refused with the cp
/// that would.
#[test]
fn exchanges_and_head_splits_deepspeed_does_not_run_are_refused() {
    let mut ring = vec!["eval".to_string()];
    ring.extend(with(&[
        "--nodes",
        "1",
        "--tp",
        "1",
        "--cp",
        "8",
        "--cp-exchange",
        "kv-ring",
    ]));
    assert_one_line_error(
        &run_owned(&ring),
        &["--cp-exchange kv-ring", "Ulysses", "head-all-to-all"],
        &[],
        "a ring under deepspeed",
    );
    let mut heads = vec!["eval".to_string()];
    heads.extend(with(&["--nodes", "8", "--tp", "1", "--cp", "64"]));
    assert_one_line_error(
        &run_owned(&heads),
        &[
            "--cp 64",
            "32 query and 8 K/V heads",
            "valid cp: 1, 2, 4, 8, 16, 32",
        ],
        &[],
        "query heads cp does not split",
    );
}

/// A Megatron-DeepSpeed line's Ulysses degree is not a Megatron-Core argument: it was skipped as
/// changing nothing.
#[test]
fn a_pasted_ulysses_degree_is_refused_not_skipped() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 32768 --vocab-size 128256 --micro-batch-size 1 --global-batch-size 16 --bf16 --tensor-model-parallel-size 1 --ds-sequence-parallel-size 8";
    assert_one_line_error(
        &run(&["eval", "--nodes", "1", "--megatron-args", line]),
        &[
            "--ds-sequence-parallel-size 8",
            "--framework deepspeed --cp",
        ],
        &[],
        "--ds-sequence-parallel-size",
    );
}

/// Megatron-DeepSpeed's `initialize_model_parallel` asserts "DeepSpeed's sequence parallel does
/// not work with tensor parallel or pipeline parallel" (megatron/core/parallel_state.py), and ALST's
/// UlyssesSPAttentionHF wraps a Hugging Face model with neither: `eval` priced tp 2 x cp 4 and
/// pp 2 x cp 4, and `plan` proposed them; both are refused now, pinned or evaluated.
#[test]
fn ulysses_beside_tensor_or_pipeline_parallelism_is_refused() {
    for (extra, degrees, fix) in [
        (&["--tp", "2", "--pp", "1"][..], "--tp 2", "--tp 1"),
        (&["--tp", "1", "--pp", "2"][..], "--pp 2", "--pp 1"),
        (
            &["--tp", "2", "--pp", "2"][..],
            "--tp 2 and --pp 2",
            "--tp 1 --pp 1",
        ),
    ] {
        for command in ["eval", "plan"] {
            let mut args = vec![command.to_string()];
            let mut flags = vec!["--nodes", "2", "--cp", "4"];
            flags.extend_from_slice(extra);
            args.extend(with(&flags));
            assert_one_line_error(
                &run_owned(&args),
                &[
                    &format!("--cp 4 with {degrees} under --framework deepspeed"),
                    "does not work with tensor parallel or pipeline parallel",
                    &format!("use {fix}, or --cp 1"),
                ],
                &["…"],
                &format!("{command} {degrees}"),
            );
        }
    }
    // Megatron-Core runs the same a2a beside both.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--seq-len",
        "65536",
        "--global-batch",
        "16",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--cp",
        "4",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// Ulysses gives each rank one contiguous seq/cp shard (Megatron-DeepSpeed's get_batch asserts
/// `seq_length % seq_parallel_world_size == 0`; ALST's UlyssesSPDataLoaderAdapter the same) and
/// has no causal load-balancing chunks: a 24,584-token sequence (8 x 3,073) runs at cp 8, where
/// tpsim asked for a multiple of 2 x cp; Megatron-Core's ring still does.
#[test]
fn ulysses_needs_the_sequence_to_be_a_multiple_of_cp_not_two_cp() {
    let base = [
        "--model",
        "llama3-8b",
        "--seq-len",
        "24584",
        "--global-batch",
        "16",
        "--nodes",
        "1",
        "--tp",
        "1",
    ];
    let mut deepspeed = vec!["eval"];
    deepspeed.extend_from_slice(&base);
    deepspeed.extend_from_slice(&["--framework", "deepspeed", "--cp", "8", "--zero", "3"]);
    let r = run(&deepspeed);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let mut megatron = vec!["eval"];
    megatron.extend_from_slice(&base);
    megatron.extend_from_slice(&["--cp", "8"]);
    assert_one_line_error(
        &run(&megatron),
        &["2 x cp equal chunks", "multiple of 16"],
        &[],
        "megatron-core's ring at 24584",
    );
    // The search proposes cp 8 there too.
    let mut plan = vec!["plan"];
    plan.extend_from_slice(&base[..8]);
    plan.extend_from_slice(&["--framework", "deepspeed", "--cp", "8", "--format", "json"]);
    let r = run(&plan);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(first_plan(&doc)["cp"], 8, "{}", r.stdout);
    // Where cp does not divide the sequence, the error names Ulysses's rule and the cp that do.
    let mut odd = vec!["eval"];
    odd.extend_from_slice(&base[..6]);
    odd.extend_from_slice(&["--nodes", "2", "--framework", "deepspeed", "--cp", "16"]);
    assert_one_line_error(
        &run(&odd),
        &[
            "--cp 16 does not split the 24584-token sequence into cp equal shards",
            "seq_length % sequence_parallel_size == 0",
            "valid: 1, 2, 4, 8;",
            "multiple of 16 (e.g. --seq-len 24592)",
        ],
        &["2 x cp", "load balancing"],
        "deepspeed cp 16 at 24584",
    );
}

/// The repeated K/V heads are what the attention saves: at cp 16 a model with 8 K/V heads keeps as
/// many activation bytes as one with 16 (each rank holds the whole sequence of one head); tpsim
/// counted s/cp tokens of 8 heads, half of it.
#[test]
fn ulysses_saves_the_repeated_kv_heads() {
    let activations = |kv: &str, cp: &str| {
        let mut args = vec!["eval".to_string()];
        args.extend(with(&[
            "--kv-heads",
            kv,
            "--nodes",
            "2",
            "--tp",
            "1",
            "--cp",
            cp,
            "--micro-batch",
            "1",
            "--zero",
            "3",
            "--format",
            "json",
        ]));
        let r = run_owned(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let doc: Value = serde_json::from_str(&r.stdout).unwrap();
        first_plan(&doc)["memory"]["activations_bytes"]
            .as_f64()
            .unwrap()
    };
    let (repeated, sixteen) = (activations("8", "16"), activations("16", "16"));
    assert!(
        (repeated / sixteen - 1.0).abs() < 1e-12,
        "{repeated} {sixteen}"
    );
    assert!(activations("8", "8") < activations("16", "8"));
}

/// With sequence_parallel_size above 1, DeepSpeed reduces gradients in
/// "seq_parallel_communication_data_type" (deepspeed/runtime/engine.py), fp32 by default
/// (runtime/constants.py): the config tpsim wrote left it out, so the run reduced twice the bytes
/// tpsim priced in bf16. It is written as the gradient dtype now, only beside Ulysses.
#[test]
fn the_config_reduces_gradients_in_the_dtype_tpsim_prices() {
    let emitted = |extra: &[&str]| {
        let mut args = vec!["eval".to_string()];
        let mut flags = vec![
            "--nodes",
            "1",
            "--tp",
            "1",
            "--zero",
            "2",
            "--emit",
            "deepspeed",
        ];
        flags.extend_from_slice(extra);
        args.extend(with(&flags));
        let r = run_owned(&args);
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        let config: Value = serde_json::from_str(&r.stdout).unwrap();
        (config, r.stderr)
    };
    let (config, stderr) = emitted(&["--cp", "8"]);
    assert_eq!(config["sequence_parallel_size"], 8, "{config}");
    assert_eq!(
        config["seq_parallel_communication_data_type"], "bf16",
        "{config}"
    );
    assert_eq!(config["data_types"]["grad_accum_dtype"], "bf16", "{config}");
    // Llama 3 8B has 8 K/V heads for 32 query heads: Megatron-DeepSpeed's Ulysses asserts as many
    // K/V heads as query heads (megatron/model/transformer.py), so the note sends it to ALST.
    assert!(
        stderr.contains("--ds-sequence-parallel-size 8")
            && stderr.contains("8 K/V heads for 32 query heads")
            && stderr.contains("UlyssesSPAttentionHF"),
        "{stderr}"
    );
    let (config, _) = emitted(&["--cp", "8", "--grad-dtype", "fp32"]);
    assert_eq!(
        config["seq_parallel_communication_data_type"], "fp32",
        "{config}"
    );
    let (config, stderr) = emitted(&["--cp", "1", "--recompute", "full"]);
    assert!(
        config.get("seq_parallel_communication_data_type").is_none(),
        "{config}"
    );
    assert!(config.get("sequence_parallel_size").is_none(), "{config}");
    assert!(!stderr.contains("UlyssesSPAttentionHF"), "{stderr}");
}

/// "why the best plan" said Ulysses "exchanges its keys and values", a ring's words; it names the
/// all-to-all of Q, K, V and the output now.
#[test]
fn why_the_best_plan_names_the_all_to_all() {
    let mut args = vec!["plan".to_string()];
    args.extend(with(&["--nodes", "1"]));
    let r = run_owned(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  CP 8:"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        line.contains("trades Q, K, V and the attention output")
            && !line.contains("keys and values"),
        "{line}"
    );
}

/// One deepspeed cp > 1 plan reads the same in `plan`, `eval`, `compare`, `sweep` and a saved plan
/// evaluated back.
#[test]
fn a_ulysses_plan_reads_the_same_everywhere() {
    let dir = scratch("deepspeed-ulysses", "same-everywhere");
    let common = [
        "--model",
        "llama3-8b",
        "--seq-len",
        "65536",
        "--global-batch",
        "16",
        "--framework",
        "deepspeed",
    ];
    let numbers = |p: &Value| {
        (
            p["time"]["step_s"].as_f64().unwrap(),
            p["memory"]["total_bytes"].as_f64().unwrap(),
        )
    };
    let mut plan = vec!["plan"];
    plan.extend_from_slice(&common);
    plan.extend_from_slice(&["--nodes", "2", "--save", "p.yaml", "--format", "json"]);
    let r = run_in(&dir, &plan);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    let best = first_plan(&doc);
    assert!(best["cp"].as_u64() > Some(1), "{best}");
    let want = numbers(best);
    let degree = |k: &str| best[k].as_u64().unwrap().to_string();
    let zero = degree("zero");
    let (tp, cp, pp, mb) = (
        degree("tp"),
        degree("cp"),
        degree("pp"),
        degree("micro_batch"),
    );
    let mut eval = vec!["eval"];
    eval.extend_from_slice(&common);
    eval.extend_from_slice(&[
        "--nodes",
        "2",
        "--tp",
        &tp,
        "--cp",
        &cp,
        "--pp",
        &pp,
        "--micro-batch",
        &mb,
        "--zero",
        &zero,
        "--format",
        "json",
    ]);
    let recompute = best["recompute"].as_str().unwrap().to_string();
    eval.extend_from_slice(&["--recompute", &recompute]);
    let r = run_in(&dir, &eval);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(numbers(first_plan(&doc)), want, "eval");
    let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(numbers(first_plan(&doc)), want, "eval --plan");
    assert_eq!(doc["training"]["cp_exchange"], "head-all-to-all");
    let mut compare = vec!["compare"];
    compare.extend_from_slice(&common);
    compare.extend_from_slice(&["--nodes", "2", "--format", "json"]);
    let r = run_in(&dir, &compare);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(numbers(&doc["a"]), want, "compare");
    let mut sweep = vec!["sweep"];
    sweep.extend_from_slice(&common);
    sweep.extend_from_slice(&["--axis", "nodes", "--values", "2", "--format", "json"]);
    let r = run_in(&dir, &sweep);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    let row = &doc["rows"][0];
    assert_eq!(
        (
            row["time"]["step_s"].as_f64().unwrap(),
            row["memory"]["total_bytes"].as_f64().unwrap()
        ),
        want,
        "sweep"
    );
}

/// DeepSpeed runs ZeRO-3 on experts only through AutoEP, which takes no sequence, tensor or
/// expert-tensor parallelism (deepspeed/runtime/engine.py `_validate_zero3_moe_compatibility`):
/// the search proposed ZeRO-3 with Ulysses on Mixtral, which DeepSpeed refuses at start-up.
#[test]
fn deepspeed_zero3_on_experts_runs_only_without_cp_tp_or_etp() {
    let base = [
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "2",
        "--framework",
        "deepspeed",
        "--seq-len",
        "65536",
        "--global-batch",
        "32",
    ];
    let mut args = vec!["plan"];
    args.extend(base);
    args.extend(["--format", "json", "--top", "200"]);
    let doc = json(&args);
    let plans = doc["plans"].as_array().unwrap();
    assert!(plans.iter().any(|p| p["cp"].as_u64() > Some(1)));
    for p in plans {
        if p["zero"] == 3 {
            assert!(
                p["cp"] == 1 && p["tp"] == 1 && p["etp"] == 1,
                "ZeRO-3 beside cp/tp/etp: {p}"
            );
        }
    }
    let mut eval = vec!["eval"];
    eval.extend(base);
    eval.extend([
        "--cp",
        "16",
        "--ep",
        "8",
        "--zero",
        "3",
        "--recompute",
        "full",
    ]);
    let r = run(&eval);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr.lines().any(
            |l| l.starts_with("note: ZeRO-3 on a mixture-of-experts model")
                && l.contains("AutoEP")
                && l.contains("--zero 2")
        ),
        "{}",
        r.stderr
    );
}
