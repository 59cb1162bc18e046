//! Muon as Megatron-Core runs it (`--optimizer-states muon`, a launch line's `--optimizer muon`):
//! the states it keeps, the Newton–Schulz step it adds (duplicated on every TP rank, divided over
//! the layer-wise optimizer's owners), which stacks and stages it runs with, and that launch lines,
//! emitted configurations and plan files carry it.

mod common;

use common::{assert_one_line_error, json, run};

fn eval_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--pp",
        "4",
        "--micro-batch",
        "1",
        "--global-batch",
        "128",
        "--seq-len",
        "8192",
        "--sequence-parallel",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

fn plan_f64(out: &serde_json::Value, path: &[&str]) -> f64 {
    let mut v = &out["plans"][0];
    for key in path {
        v = &v[*key];
    }
    v.as_f64()
        .unwrap_or_else(|| panic!("plans[0].{}", path.join(".")))
}

/// Muon keeps one fp32 momentum where Adam keeps two moments: 4 bytes per parameter of the
/// layers' weights fewer, sharded as the distributed optimizer shards them; the embedding and
/// output layer keep Adam's.
#[test]
fn muon_keeps_one_moment_for_the_layers_weights() {
    let pins = ["--tp", "8", "--zero", "1"];
    let adam = eval_json(&pins);
    let muon = eval_json(&[&pins[..], &["--optimizer-states", "muon"]].concat());
    assert_eq!(muon["training"]["optimizer_states"], "muon");
    let dp = plan_f64(&adam, &["dp"]);
    let params = plan_f64(&adam, &["memory", "params_per_gpu_before_zero"]);
    let saved = (plan_f64(&adam, &["memory", "optimizer_bytes"])
        - plan_f64(&muon, &["memory", "optimizer_bytes"]))
        / (params / dp);
    // The first stage (the most loaded) holds Llama 3 70B's word embedding, 128256 × 8192 over
    // tp 8, which keeps Adam's moments.
    let embedding = 128256.0 * 8192.0 / 8.0;
    let want = 4.0 * (1.0 - embedding / params);
    assert!(
        (saved - want).abs() < 1e-6 * want,
        "bytes saved per sharded parameter: {saved}, want {want}"
    );
}

/// Every TP rank orthogonalizes the whole of each weight its DP rank owns (`--muon-tp-mode
/// duplicated`), so on the same 64 GPUs the Newton–Schulz step of tp 8 × dp 2 costs about four
/// times that of tp 2 × dp 8 (the owned share is 4× larger, the TP split gives nothing back); Adam's
/// memory-bound step is the same size in both. The optimizer term carries the TP gathers' bytes.
#[test]
fn tensor_parallelism_multiplies_the_newton_schulz_step() {
    let optimizer_s = |tp: &str, states: &str| {
        let out = eval_json(&["--tp", tp, "--zero", "1", "--optimizer-states", states]);
        let terms = out["plans"][0]["terms"].as_array().expect("terms").clone();
        let term = terms
            .iter()
            .find(|t| t["kind"] == "optimizer")
            .expect("optimizer term")
            .clone();
        (
            term["exposed_s"].as_f64().unwrap(),
            term["wire_bytes"].as_f64().unwrap(),
        )
    };
    let (adam_tp8, _) = optimizer_s("8", "fp32");
    let (adam_tp2, _) = optimizer_s("2", "fp32");
    let (muon_tp8, bytes_tp8) = optimizer_s("8", "muon");
    let (muon_tp2, bytes_tp2) = optimizer_s("2", "muon");
    assert!(
        (adam_tp8 / adam_tp2 - 1.0).abs() < 0.05,
        "{adam_tp8} {adam_tp2}"
    );
    let ratio = (muon_tp8 - adam_tp8) / (muon_tp2 - adam_tp2);
    assert!(
        ratio > 3.5 && ratio < 4.5,
        "Newton-Schulz tp 8 / tp 2: {ratio}"
    );
    assert!(muon_tp8 > 10.0 * adam_tp8, "{muon_tp8} vs {adam_tp8}");
    assert!(
        bytes_tp8 > bytes_tp2 && bytes_tp2 > 0.0,
        "{bytes_tp8} {bytes_tp2}"
    );
}

/// Without the distributed optimizer every DP rank updates every weight: at tp 2 × dp 8 the step
/// is 8 times the layer-wise optimizer's.
#[test]
fn without_the_distributed_optimizer_every_rank_runs_every_weight() {
    let muon_s = |zero: &str| {
        let out = eval_json(&["--tp", "2", "--zero", zero, "--optimizer-states", "muon"]);
        let adam = eval_json(&["--tp", "2", "--zero", zero]);
        plan_f64(&out, &["time", "optimizer_s"]) - plan_f64(&adam, &["time", "optimizer_s"])
    };
    let ratio = muon_s("0") / muon_s("1");
    assert!(ratio > 7.5 && ratio < 8.5, "zero 0 / zero 1: {ratio}");
}

/// A Megatron-LM line's `--optimizer muon` (and the deprecated `dist_muon`) reads as Muon, what
/// `--emit megatron` writes reads back the same, and Megatron-Bridge's configuration selects its
/// layer-wise optimizer (`dist_muon`, the distributed optimizer off) at the priced TP mode.
/// Settings that change the step's cost are refused by name; the precision-aware switch with
/// Muon is refused as Megatron-Core refuses it.
#[test]
fn launch_lines_and_configurations_carry_muon() {
    let base = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \
        --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 --bf16 \
        --use-distributed-optimizer";
    let read = |line: &str| {
        json(&[
            "eval",
            "--megatron-args",
            line,
            "--nodes",
            "1",
            "--format",
            "json",
        ])
    };
    for name in ["muon", "dist_muon"] {
        let out = read(&format!("{base} --optimizer {name}"));
        assert_eq!(out["training"]["optimizer_states"], "muon", "{name}");
        assert_eq!(out["plans"][0]["zero"], 1, "{name}");
    }
    let emitted = run(&[
        "eval",
        "--megatron-args",
        &format!("{base} --optimizer muon"),
        "--nodes",
        "1",
        "--emit",
        "megatron",
    ]);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let written = emitted.stdout.lines().last().unwrap();
    assert!(written.contains("--optimizer muon"), "{written}");
    assert_eq!(read(written)["training"]["optimizer_states"], "muon");

    let bridge = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--zero",
        "1",
        "--optimizer-states",
        "muon",
        "--emit",
        "megatron-bridge",
    ]);
    assert_eq!(bridge.code, 0, "{}", bridge.stderr);
    for want in [
        "optimizer.optimizer=dist_muon",
        "optimizer.use_distributed_optimizer=false",
        "optimizer.muon_tp_mode=duplicated",
    ] {
        assert!(bridge.stdout.contains(want), "{want}: {}", bridge.stdout);
    }

    for (extra, named) in [
        ("--muon-num-ns-steps 10", "--muon-num-ns-steps 10"),
        ("--muon-tp-mode blockwise", "--muon-tp-mode blockwise"),
        ("--muon-use-syrk", "--muon-use-syrk"),
        ("--use-precision-aware-optimizer", "adam"),
    ] {
        let r = run(&[
            "eval",
            "--megatron-args",
            &format!("{base} --optimizer muon {extra}"),
            "--nodes",
            "1",
        ]);
        assert_one_line_error(&r, &[named], &[], extra);
    }
    let r = run(&[
        "eval",
        "--megatron-args",
        &format!("{base} --optimizer sgd"),
        "--nodes",
        "1",
    ]);
    assert_one_line_error(&r, &["--optimizer sgd", "muon"], &[], "sgd");
}

/// Muon runs under Megatron-Core only, not under Megatron-FSDP, and not for stacks whose matrices
/// tpsim does not list (hybrid Mamba stacks): each refused in one line with its fix; the search
/// proposes ZeRO-0 and ZeRO-1 only.
#[test]
fn muon_is_refused_where_it_is_not_priced() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--zero",
        "3",
        "--optimizer-states",
        "muon",
    ]);
    assert_one_line_error(&r, &["--zero 3", "muon", "--zero 1"], &[], "zero 3");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--framework",
        "torchtitan",
        "--optimizer-states",
        "muon",
    ]);
    assert_one_line_error(
        &r,
        &["muon", "--framework megatron-core"],
        &[],
        "torchtitan",
    );
    let r = run(&[
        "eval",
        "--model",
        "nemotron-h-56b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--optimizer-states",
        "muon",
    ]);
    assert_one_line_error(&r, &["hybrid", "--optimizer-states fp32"], &[], "hybrid");
    let out = json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--optimizer-states",
        "muon",
        "--top",
        "20",
        "--format",
        "json",
    ]);
    let plans = out["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    assert!(
        plans.iter().all(|p| p["zero"].as_u64().unwrap() <= 1),
        "{plans:?}"
    );
}

/// Megatron-Core's layer-wise Muon cannot run experts with biases under its distributed optimizer
/// (optimizer/__init__.py at d98e8a64 asserts "Non-emerging expert-parallel param groups are not
/// yet supported"): GPT-OSS with Muon at ZeRO-1 is refused in one line, ZeRO-0 runs, and the
/// search proposes ZeRO-0 only. A model whose experts have no biases (Qwen3-30B-A3B) is not
/// affected.
#[test]
fn muon_with_biased_experts_runs_without_the_distributed_optimizer() {
    let eval = |model: &str, zero: &str| {
        run(&[
            "eval",
            "--model",
            model,
            "--nodes",
            "8",
            "--tp",
            "1",
            "--ep",
            "8",
            "--zero",
            zero,
            "--optimizer-states",
            "muon",
        ])
    };
    let r = eval("gpt-oss-120b", "1");
    assert_one_line_error(
        &r,
        &["--zero 1", "biases", "--zero 0"],
        &[],
        "gpt-oss zero 1",
    );
    // Valid input either way: priced, whether or not it fits (ZeRO-0 keeps every state whole).
    for (model, zero) in [("gpt-oss-120b", "0"), ("qwen3-30b-a3b", "1")] {
        let r = eval(model, zero);
        assert!(
            r.code != 2 && r.stdout.contains("time per step"),
            "{model} zero {zero}: {} {}",
            r.code,
            r.stderr
        );
    }
    let out = json(&[
        "plan",
        "--model",
        "gpt-oss-120b",
        "--nodes",
        "8",
        "--optimizer-states",
        "muon",
        "--format",
        "json",
    ]);
    let plans = out["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    assert!(plans.iter().all(|p| p["zero"] == 0), "{plans:?}");
}
