//! End-to-end tests of the ecosystem commands with real files: Hugging Face configs in
//! (`models/hf/`), Megatron-LM launch lines in, Megatron/NeMo/DeepSpeed configurations out (and the
//! Megatron round trip), sweeps, comparisons and shell completions; error cases checked for their
//! message and exit code 2.

mod common;

use assert_cmd::Command;
use serde_json::Value;

/// Runs `tpsim ARGS` in the crate root; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("tpsim")
        .expect("the tpsim binary is built")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("NO_COLOR")
        .args(args)
        .output()
        .expect("tpsim runs");
    (
        out.status.code().expect("tpsim exited normally"),
        String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    )
}

fn run_json(args: &[&str]) -> Value {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    parse_json(args, &stdout, &stderr)
}

fn parse_json(args: &[&str], stdout: &str, stderr: &str) -> Value {
    serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// Asserts exit code 2, a one-line error, and that it contains every needle.
fn assert_error(args: &[&str], needles: &[&str]) {
    let (code, stdout, stderr) = run(args);
    assert_eq!(
        code, 2,
        "{args:?}: expected exit 2\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.is_empty(),
        "{args:?}: errors go to stderr, stdout was {stdout}"
    );
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn hf_configs_give_published_sizes_through_the_cli() {
    // Published totals: Llama 3 model card 8.03B / 70.6B; Mistral 7.24B; Qwen2.5-7B 7.61B; Qwen3-8B
    // 8.2B; Gemma-2B 2.51B; GPT-2 124M; GPT-NeoX-20B 20.55B; Falcon-7B 6.92B.
    for (file, published, kv_heads) in [
        ("llama-3-8b.json", 8.03e9, 8),
        ("llama-3-70b.json", 70.6e9, 8),
        ("mistral-7b-v0.1.json", 7.24e9, 8),
        ("qwen2.5-7b.json", 7.61e9, 4),
        ("qwen3-8b.json", 8.19e9, 8),
        ("gemma-2b.json", 2.51e9, 1),
        ("gpt2.json", 0.1244e9, 12),
        ("gpt-neox-20b.json", 20.55e9, 64),
        ("falcon-7b.json", 6.92e9, 1),
    ] {
        let path = format!("models/hf/{file}");
        let args = [
            "eval",
            "--hf-config",
            &path,
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
            "--seq-len",
            "1024",
            "--format",
            "json",
        ];
        // A 70B model does not fit on one node without parallelism: exit 1, the JSON still printed.
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{file}: {stderr}");
        let json = parse_json(&args, &stdout, &stderr);
        let params = json["model"]["params"].as_f64().unwrap();
        assert!(
            (params / published - 1.0).abs() < 0.005,
            "{file}: {params} vs {published}"
        );
        assert_eq!(json["model"]["kv_heads"], kv_heads, "{file}");
    }
}

#[test]
fn hf_config_sets_the_sequence_length_and_gating() {
    let json = run_json(&[
        "plan",
        "--hf-config",
        "models/hf/llama-3-70b.json",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    // The default is a training length (4096), not the config's max_position_embeddings (issue 10 item 6).
    assert_eq!(json["training"]["seq_len"], 4096);
    assert_eq!(json["model"]["gated_mlp"], true);
    assert_eq!(json["model"]["ffn_hidden"], 28672);
    assert_eq!(json["plans"].as_array().unwrap().len(), 1);
}

#[test]
fn hf_config_errors_name_the_problem() {
    assert_error(
        &[
            "plan",
            "--hf-config",
            "tests/data/bert-base-uncased.config.json",
            "--nodes",
            "1",
        ],
        &[
            "\"bert\"",
            "llama, mistral, qwen2, qwen3, gemma, gpt2, gpt_neox, falcon",
        ],
    );
    assert_error(
        &[
            "plan",
            "--hf-config",
            "models/hf/missing.json",
            "--nodes",
            "1",
        ],
        &["--hf-config models/hf/missing.json", "cannot read"],
    );
    assert_error(
        &["plan", "--hf-config", "README.md", "--nodes", "1"],
        &["not valid JSON"],
    );
    assert_error(
        &[
            "plan",
            "--hf-config",
            "models/hf/gpt2.json",
            "--params",
            "7B",
            "--nodes",
            "1",
        ],
        &["cannot be used with"],
    );
}

#[test]
fn a_pasted_megatron_launch_line_evaluates_like_tpsim_flags() {
    let megatron = run_json(&[
        "eval",
        "--nodes",
        "16",
        "--num-layers",
        "80",
        "--hidden-size",
        "8192",
        "--num-attention-heads",
        "64",
        "--group-query-attention",
        "--num-query-groups",
        "8",
        "--ffn-hidden-size",
        "28672",
        "--swiglu",
        "--seq-length",
        "4096",
        "--tensor-model-parallel-size",
        "8",
        "--pipeline-model-parallel-size",
        "4",
        "--num-layers-per-virtual-pipeline-stage",
        "5",
        "--micro-batch-size",
        "1",
        "--global-batch-size",
        "512",
        "--sequence-parallel",
        "--recompute-granularity",
        "selective",
        "--use-distributed-optimizer",
        "--format",
        "json",
    ]);
    let ours = run_json(&[
        "eval",
        "--nodes",
        "16",
        "--layers",
        "80",
        "--hidden",
        "8192",
        "--heads",
        "64",
        "--kv-heads",
        "8",
        "--ffn-hidden",
        "28672",
        "--gated-mlp",
        "--seq-len",
        "4096",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--micro-batch",
        "1",
        "--global-batch",
        "512",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(
        megatron["plans"][0]["vpp"], 4,
        "80 layers / pp 4 / 5 per virtual stage"
    );
    assert_eq!(
        megatron["plans"][0]["zero"], 1,
        "distributed optimizer = ZeRO-1"
    );
    assert_eq!(megatron["plans"], ours["plans"]);
    assert_eq!(megatron["model"]["params"], ours["model"]["params"]);
}

#[test]
fn megatron_virtual_stage_layers_are_validated() {
    assert_error(
        &[
            "eval",
            "--nodes",
            "16",
            "--num-layers",
            "80",
            "--hidden-size",
            "8192",
            "--num-attention-heads",
            "64",
            "--tensor-model-parallel-size",
            "8",
            "--pipeline-model-parallel-size",
            "4",
            "--num-layers-per-virtual-pipeline-stage",
            "3",
            "--global-batch-size",
            "512",
        ],
        &[
            "--num-layers-per-virtual-pipeline-stage 3",
            "20 layers",
            "valid: 1, 2, 4, 5, 10, 20",
        ],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "1",
            "--layers",
            "4",
            "--hidden",
            "512",
            "--heads",
            "8",
            "--normalization",
            "BatchNorm",
            "--tp",
            "1",
        ],
        &["--normalization BatchNorm", "LayerNorm or RMSNorm"],
    );
}

/// `plan --emit megatron` printed, then read back by `eval` on the same cluster: the same plan.
#[test]
fn megatron_args_round_trip_to_the_same_plan() {
    for (model_flags, nodes) in [
        (vec!["--params", "175B"], "64"),
        (vec!["--hf-config", "models/hf/llama-3-70b.json"], "16"),
        (vec!["--model", "gpt3-175b", "--gpu", "a100-sxm-80g"], "128"),
        // The attention kernel and the gradient precision travel in the line as well.
        (
            vec![
                "--params",
                "175B",
                "--attention",
                "unfused",
                "--grad-dtype",
                "fp32",
            ],
            "64",
        ),
    ] {
        let mut plan_args = vec!["plan"];
        plan_args.extend(&model_flags);
        plan_args.extend([
            "--nodes",
            nodes,
            "--global-batch",
            "1536",
            "--emit",
            "megatron",
        ]);
        let (code, line, stderr) = run(&plan_args);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(line.lines().count(), 1, "one line on stdout: {line}");
        assert!(line.starts_with("--num-layers "), "{line}");
        assert!(stderr.contains("Megatron-LM configuration for"), "{stderr}");
        let unfused = model_flags.contains(&"unfused");
        assert!(
            line.contains(if unfused {
                "--attention-backend unfused"
            } else {
                "--attention-backend flash"
            }),
            "{line}"
        );
        // Megatron-Core (the default framework) reduces gradients in fp32 unless told otherwise.
        assert_eq!(
            line.contains("--accumulate-allreduce-grads-in-fp32"),
            !model_flags.contains(&"bf16"),
            "{line}"
        );

        let mut eval_args = vec!["eval", "--nodes", nodes, "--format", "json"];
        if let Some(i) = model_flags.iter().position(|f| *f == "--gpu") {
            eval_args.extend(["--gpu", model_flags[i + 1]]);
        }
        eval_args.extend(line.split_whitespace());
        let back = run_json(&eval_args);

        // The plan `plan` chose for Megatron, recovered from its own JSON.
        let mut json_args = plan_args.clone();
        json_args.truncate(json_args.len() - 2);
        json_args.extend(["--format", "json", "--top", "200"]);
        let ranked = run_json(&json_args);
        let chosen = ranked["plans"]
            .as_array()
            .unwrap()
            .iter()
            // Megatron-LM runs ZeRO-0/1, and ZeRO-2/3 as Megatron-FSDP without pipelines.
            .find(|p| p["zero"].as_u64().unwrap() <= 1 || p["pp"] == 1)
            .expect("a Megatron-runnable plan is in the top 200");
        let back_plan = &back["plans"][0];
        for key in [
            "tp",
            "pp",
            "dp",
            "vpp",
            "micro_batch",
            "num_microbatches",
            "sequence_parallel",
            "recompute",
            "zero",
            "stages",
        ] {
            assert_eq!(
                back_plan[key], chosen[key],
                "{key} after the round trip of {line}"
            );
        }
        assert_eq!(back_plan["time"]["step_s"], chosen["time"]["step_s"]);
        assert_eq!(back_plan["memory"], chosen["memory"], "{line}");
        assert_eq!(back["model"]["params"], ranked["model"]["params"], "{line}");
        assert_eq!(back["training"], ranked["training"], "{line}");

        // The same line through --megatron-args reads back to the same evaluation.
        let mut quoted = vec!["eval", "--nodes", nodes, "--format", "json"];
        if let Some(i) = model_flags.iter().position(|f| *f == "--gpu") {
            quoted.extend(["--gpu", model_flags[i + 1]]);
        }
        let line = line.trim().to_string();
        quoted.extend(["--megatron-args", line.as_str()]);
        let via_args = run_json(&quoted);
        assert_eq!(via_args["plans"][0]["time"], back_plan["time"], "{line}");
        assert_eq!(via_args["training"], back["training"], "{line}");
    }
}

#[test]
fn nemo_fragment_carries_the_plan() {
    let (code, yaml, _) = run(&[
        "eval",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--emit",
        "nemo",
    ]);
    assert_eq!(code, 0);
    let doc: Value = yaml_serde::from_str(&yaml).expect("the NeMo fragment is YAML");
    assert_eq!(doc["trainer"]["num_nodes"], 32);
    assert_eq!(doc["trainer"]["devices"], 8);
    let m = &doc["model"];
    assert_eq!(m["tensor_model_parallel_size"], 8);
    assert_eq!(m["pipeline_model_parallel_size"], 16);
    assert_eq!(m["global_batch_size"], 1536);
    assert_eq!(m["sequence_parallel"], true);
    assert_eq!(m["activations_checkpoint_granularity"], "selective");
    // NeMo 1.x: mcore_distributed_optim is Megatron-Core's distributed optimizer (ZeRO-1);
    // distributed_fused_adam (Apex) shards gradients too (ZeRO-2).
    assert_eq!(m["optim"]["name"], "mcore_distributed_optim");
}

#[test]
fn deepspeed_config_obeys_the_batch_identity() {
    let (code, stdout, stderr) = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--pp",
        "1",
        "--zero",
        "3",
        "--micro-batch",
        "2",
        "--global-batch",
        "512",
        "--recompute",
        "full",
        "--sequence-parallel",
        "--framework",
        "deepspeed",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json: Value = serde_json::from_str(&stdout).expect("stdout is only the JSON");
    let get = |k: &str| json[k].as_u64().unwrap();
    // DeepSpeed: train_batch_size = micro × accumulation × dp, dp = 128 / (8 × 1) = 16.
    assert_eq!(get("train_batch_size"), 512);
    assert_eq!(
        get("train_micro_batch_size_per_gpu") * get("gradient_accumulation_steps") * 16,
        512
    );
    assert_eq!(json["zero_optimization"]["stage"], 3);
    assert_eq!(json["bf16"]["enabled"], true);
    assert!(
        stderr.contains("--tensor-model-parallel-size 8"),
        "{stderr}"
    );
}

#[test]
fn emitting_what_a_framework_cannot_run_is_an_error() {
    assert_error(
        &[
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--tp",
            "8",
            "--pp",
            "2",
            "--zero",
            "3",
            "--reshard-after-forward",
            "false",
            "--global-batch",
            "512",
            "--emit",
            "megatron",
        ],
        // Megatron-FSDP reshards after every forward (megatron_fsdp.py `_post_forward`).
        &[
            "--emit megatron",
            "ZeRO-3",
            "reshard_after_forward false",
            "--reshard-after-forward true",
        ],
    );
    assert_error(
        &[
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "16",
            "--tp",
            "8",
            "--pp",
            "2",
            "--zero",
            "2",
            "--global-batch",
            "512",
            "--framework",
            "deepspeed",
            "--emit",
            "deepspeed",
        ],
        &["--emit deepspeed", "pipeline", "--zero 1 or --pp 1"],
    );
}

/// The numbers of `plan --emit`'s header (stderr): "... : S s per step, T tokens/s, M of C GiB",
/// and its degrees "tp A x cp B x pp C x dp D".
fn emit_header(stderr: &str) -> (f64, f64, [u64; 4], &str) {
    let header = stderr
        .lines()
        .find(|l| l.contains(" configuration for tp "))
        .unwrap_or_else(|| panic!("no header in {stderr}"));
    // The plan in eval's words, then ": S s per step, ...".
    let (_, numbers) = header.rsplit_once(": ").expect("header numbers");
    let words: Vec<&str> = numbers.split_whitespace().collect();
    let step_s: f64 = words[0].parse().unwrap();
    let used_gib: f64 = words[words.len() - 4].parse().unwrap();
    let degrees = header.split_once("configuration for ").unwrap().1;
    let degrees: Vec<&str> = degrees.split_whitespace().collect();
    let value = |name: &str| -> u64 {
        let i = degrees.iter().position(|w| *w == name).unwrap();
        degrees[i + 1].trim_end_matches(',').parse().unwrap()
    };
    (
        step_s,
        used_gib,
        [value("tp"), value("cp"), value("pp"), value("dp")],
        header,
    )
}

/// `--emit` writes a configuration for the framework that runs it; a plan evaluated for another
/// framework is refused (one line, exit 2) instead of printed with that framework's time and
/// memory beside a configuration that would run differently.
#[test]
fn emit_refuses_a_plan_evaluated_for_another_framework() {
    let job = [
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "256",
        "--pp",
        "4",
    ];
    let refused = |args: Vec<&str>, needles: &[&str]| {
        assert_error(&args, needles);
        let stderr = run(&args).2;
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    };
    for target in ["megatron", "nemo", "megatron-bridge"] {
        // The review's case is torchtitan with FSDP (ZeRO-3) under pipelines; DeepSpeed and the
        // 2021 baseline run ZeRO-1 at most with pipelines.
        for (framework, zero) in [
            ("torchtitan", "3"),
            ("deepspeed", "1"),
            ("megatron-lm-2021", "1"),
        ] {
            let mut args = vec!["plan"];
            args.extend(job);
            args.extend(["--zero", zero, "--framework", framework, "--emit", target]);
            let emit = format!("--emit {target}");
            let given = format!("--framework {framework}");
            refused(args, &[&emit, &given, "use --framework megatron-core"]);
        }
    }
    // The DeepSpeed config runs in DeepSpeed: another framework given is refused, on `plan` and
    // on `eval`; with none given, `--emit deepspeed` plans as DeepSpeed runs it and says so.
    let mut args = vec!["plan"];
    args.extend(job);
    args.extend(["--framework", "megatron-core", "--emit", "deepspeed"]);
    refused(
        args,
        &[
            "--emit deepspeed",
            "--framework megatron-core",
            "use --framework deepspeed",
        ],
    );
    let mut args = vec!["plan"];
    args.extend(job);
    args.extend(["--emit", "deepspeed"]);
    let (code, _, stderr) = run(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--emit deepspeed plans as --framework deepspeed runs it"),
        "{stderr}"
    );
    refused(
        vec![
            "eval",
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--tp",
            "8",
            "--global-batch",
            "256",
            "--framework",
            "torchtitan",
            "--emit",
            "deepspeed",
        ],
        &[
            "--emit deepspeed",
            "--framework torchtitan",
            "use --framework deepspeed",
        ],
    );
}

/// The header `plan --emit megatron` prints is what the emitted line evaluates to when read back
/// (the review's case: a FSDP + PP plan for 70B on 64 H100).
#[test]
fn emit_header_is_what_the_emitted_line_evaluates_to() {
    let (code, line, stderr) = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "256",
        "--pp",
        "4",
        "--zero",
        "3",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (step_s, used_gib, _, header) = emit_header(&stderr);
    let (code, back, stderr) = eval_line(line.trim(), &["--nodes", "8"]);
    assert_eq!(code, 0, "{stderr}");
    let back = &back["plans"][0];
    let back_step_s = back["time"]["step_s"].as_f64().unwrap();
    let back_gib = back["memory"]["total_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
    // The header prints 2 and 1 decimals.
    assert!(
        (back_step_s - step_s).abs() <= 0.005,
        "{header} vs {back_step_s} s"
    );
    assert!(
        (back_gib - used_gib).abs() <= 0.05,
        "{header} vs {back_gib} GiB"
    );
}

/// An MoE plan's header says how the experts fold over each stage's GPUs (ep x etp x expert-dp
/// = tp x cp x dp), with the degrees the line writes; a dense plan's header has no experts.
#[test]
fn emit_header_shows_expert_parallelism_for_moe_models() {
    let (code, line, stderr) = run(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "8",
        "--global-batch",
        "256",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (_, _, [tp, cp, pp, dp], header) = emit_header(&stderr);
    assert_eq!(tp * cp * pp * dp, 64, "{header}");
    let experts = header
        .split_once(", experts: ")
        .unwrap_or_else(|| panic!("no experts in {header}"))
        .1;
    let words: Vec<&str> = experts.split_whitespace().collect();
    assert_eq!(
        (words[0], words[3], words[6]),
        ("ep", "etp", "expert-dp"),
        "{header}"
    );
    let ep: u64 = words[1].parse().unwrap();
    let etp: u64 = words[4].parse().unwrap();
    let expert_dp: u64 = words[7].trim_end_matches(',').parse().unwrap();
    assert_eq!(ep * etp * expert_dp, tp * cp * dp, "{header}");
    assert_eq!(ep * etp * expert_dp * pp, 64, "{header}");
    assert!(
        line.contains(&format!("--expert-model-parallel-size {ep} "))
            && line.contains(&format!("--expert-tensor-parallel-size {etp} ")),
        "{header}\n{line}"
    );
    let (code, _, stderr) = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--global-batch",
        "128",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let header = emit_header(&stderr).3;
    assert!(!header.contains("experts"), "{header}");
}

#[test]
fn sweep_over_nodes_exports_json_and_csv() {
    let json = run_json(&[
        "sweep",
        "--params",
        "175B",
        "--axis",
        "nodes",
        "--values",
        "16,64",
        "--tokens",
        "300B",
        "--price-per-gpu-hour",
        "2.5",
        "--format",
        "json",
    ]);
    assert_eq!(json["axis"], "nodes");
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["gpus"], 128);
    assert_eq!(rows[1]["gpus"], 512);
    let tps = |r: &Value| r["tokens_per_s"].as_f64().unwrap();
    assert!(tps(&rows[1]) > 3.0 * tps(&rows[0]), "4x the GPUs");
    for r in rows {
        // cost = whole steps × step time / 3600 × GPUs × price (GPT-3's 1536 × 2048 tokens a step)
        let steps = (300e9_f64 / (1536.0 * 2048.0)).ceil();
        let hours = steps * r["time"]["step_s"].as_f64().unwrap() / 3600.0;
        let expected = hours * r["gpus"].as_f64().unwrap() * 2.5;
        let cost = r["cost_to_train"].as_f64().unwrap();
        assert!((cost / expected - 1.0).abs() < 1e-9, "{cost} vs {expected}");
        let free = r["memory"]["free_bytes"].as_f64().unwrap();
        assert!(free >= 0.0 && free < r["memory"]["capacity_bytes"].as_f64().unwrap());
    }

    let (code, csv, stderr) = run(&[
        "sweep",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--axis",
        "gpu",
        "--values",
        "a100-sxm-80g,h100-sxm-80g",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let cells: Vec<Vec<String>> = lines[1..].iter().map(|l| common::csv_cells(l)).collect();
    assert_eq!(cells[0][col("value")], "a100-sxm-80g");
    let a100: f64 = cells[0][col("tokens_per_s")].parse().unwrap();
    let h100: f64 = cells[1][col("tokens_per_s")].parse().unwrap();
    assert!(
        h100 > 1.5 * a100,
        "H100 ({h100}) well ahead of A100 ({a100})"
    );
}

#[test]
fn sweep_over_bandwidth_sequence_and_batch() {
    let rows = |args: &[&str]| -> Vec<Value> { run_json(args)["rows"].as_array().unwrap().clone() };
    let bw = rows(&[
        "sweep",
        "--params",
        "70B",
        "--nodes",
        "16",
        "--axis",
        "network-bandwidth",
        "--values",
        "1,50",
        "--format",
        "json",
    ]);
    let tps = |r: &Value| r["tokens_per_s"].as_f64().unwrap();
    assert!(
        tps(&bw[1]) > tps(&bw[0]),
        "more network bandwidth is never slower"
    );
    let seq = rows(&[
        "sweep",
        "--params",
        "70B",
        "--nodes",
        "16",
        "--axis",
        "seq-len",
        "--values",
        "1024,4096",
        "--format",
        "json",
    ]);
    assert_eq!(seq.len(), 2);
    let gb = rows(&[
        "sweep",
        "--params",
        "70B",
        "--nodes",
        "16",
        "--axis",
        "global-batch",
        "--values",
        "256,1024",
        "--format",
        "json",
    ]);
    let step = |r: &Value| r["time"]["step_s"].as_f64().unwrap();
    assert!(
        step(&gb[1]) > step(&gb[0]),
        "4x the batch takes longer per step"
    );
    let sizes = rows(&[
        "sweep", "--nodes", "32", "--axis", "params", "--values", "70B,175B", "--format", "json",
    ]);
    assert!(sizes[1]["params"].as_f64().unwrap() > 2.0 * sizes[0]["params"].as_f64().unwrap());
}

#[test]
fn sweep_chart_is_an_svg_with_every_panel() {
    let dir = std::env::temp_dir().join(format!("tpsim-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nodes.svg");
    let path_str = path.to_str().unwrap();
    let (code, stdout, stderr) = run(&[
        "sweep",
        "--params",
        "175B",
        "--axis",
        "nodes",
        "--values",
        "16,32,64",
        "--tokens",
        "300B",
        "--price-per-gpu-hour",
        "2",
        "--chart",
        path_str,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("sweep over nodes"), "{stdout}");
    assert!(stderr.contains("wrote the sweep chart"), "{stderr}");
    assert!(!stdout.contains("wrote"), "notes stay off stdout");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    for title in [
        "throughput (tokens/s)",
        "MFU (%)",
        "free memory (GiB)",
        "days to train",
        "cost to train ($)",
    ] {
        assert!(svg.contains(title), "{title} missing");
    }
    assert!(svg.matches("<polyline").count() >= 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sweep_errors_name_value_rule_and_fix() {
    assert_error(
        &[
            "sweep", "--params", "175B", "--axis", "nodes", "--values", "16,abc",
        ],
        &["--values \"abc\"", "positive whole number", "--axis nodes"],
    );
    assert_error(
        &[
            "sweep",
            "--params",
            "175B",
            "--nodes",
            "8",
            "--axis",
            "network-bandwidth",
            "--values",
            "-5",
        ],
        &["network-bandwidth", "GB/s"],
    );
    assert_error(
        &[
            "sweep", "--params", "175B", "--nodes", "8", "--axis", "gpu", "--values", "tpu-v5",
        ],
        &["--axis gpu at tpu-v5", "h100-sxm-80g"],
    );
    assert_error(
        &[
            "sweep",
            "--model",
            "gpt3-175b",
            "--nodes",
            "8",
            "--axis",
            "params",
            "--values",
            "70B",
        ],
        &["--axis params", "drop --params/--model"],
    );
    assert_error(
        &[
            "sweep",
            "--params",
            "175B",
            "--axis",
            "nodes",
            "--values",
            "8",
            "--price-per-gpu-hour",
            "2",
        ],
        &["--price-per-gpu-hour needs --tokens"],
    );
}

#[test]
fn compare_names_the_deciding_term() {
    let json = run_json(&[
        "compare", "--params", "512B", "--nodes", "32", "--format", "json",
    ]);
    let verdict = json["verdict"].as_str().unwrap();
    assert!(verdict.contains("faster"), "{verdict}");
    assert!(verdict.contains("points less"), "{verdict}");
    let (a, b) = (&json["a"], &json["b"]);
    // One step-time source: the compared step times are the simulated ones plan/eval print, and
    // the JSON says how each was obtained.
    for (side, schedule) in [("a", "a_schedule"), ("b", "b_schedule")] {
        assert_eq!(
            json[side]["time"]["step_s"].as_f64(),
            json[schedule]["simulated_step_s"].as_f64(),
            "{side}"
        );
    }
    // The verdict's signed points add up to the gap between the two steps.
    let points: f64 = verdict
        .split(": ")
        .nth(1)
        .unwrap()
        .split(", ")
        .map(|part| {
            let words: Vec<&str> = part.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "points").unwrap();
            let x: f64 = words[at - 1].parse().unwrap();
            if words[at + 1].starts_with("less") {
                x
            } else {
                -x
            }
        })
        .sum();
    let (sa, sb) = (
        a["time"]["step_s"].as_f64().unwrap(),
        b["time"]["step_s"].as_f64().unwrap(),
    );
    let gap = 100.0 * (sb - sa) / sb;
    assert!(
        (points - gap).abs() <= 0.1 * verdict.matches("points").count() as f64,
        "{verdict}: {points} vs {gap}"
    );
    assert!(a["time"]["step_s"].as_f64() <= b["time"]["step_s"].as_f64());
    // Two different layouts, not a ZeRO twin.
    assert!(
        [
            "tp",
            "pp",
            "dp",
            "vpp",
            "micro_batch",
            "recompute",
            "sequence_parallel"
        ]
        .iter()
        .any(|k| a[k] != b[k])
    );
    let names: Vec<&str> = json["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in ["weights", "activations", "bubble", "TP comm", "DP", "step"] {
        assert!(names.contains(&name), "{name} not compared: {names:?}");
    }
}

#[test]
fn compare_two_saved_plans() {
    let dir = std::env::temp_dir().join(format!("tpsim-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flat = dir.join("flat.yaml");
    std::fs::write(
        &flat,
        "model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 64\nglobal_batch: 1536\nplan:\n  tp: 8\n  pp: 8\n  dp: 8\n  sequence_parallel: true\n  recompute: selective\n  zero: 1\n",
    )
    .unwrap();
    let interleaved = dir.join("interleaved.yaml");
    std::fs::write(
        &interleaved,
        "model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 64\nglobal_batch: 1536\nplan:\n  tp: 8\n  pp: 8\n  dp: 8\n  vpp: 3\n  sequence_parallel: true\n  recompute: selective\n  zero: 1\n",
    )
    .unwrap();
    let (code, stdout, stderr) = run(&[
        "compare",
        "--plan",
        flat.to_str().unwrap(),
        "--plan",
        interleaved.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let verdict = stdout.lines().last().unwrap();
    assert!(
        verdict.starts_with("plan B is ") && verdict.contains("pipeline bubble"),
        "{verdict}"
    );
    assert!(stdout.contains("activations") && stdout.contains("bubble"));
    std::fs::remove_dir_all(&dir).unwrap();

    assert_error(
        &["compare", "--plan", "plans/seed-512b-32nodes.yaml"],
        &["--plan given once", "compare takes two"],
    );
}

#[test]
fn completions_for_every_shell() {
    for (shell, marker) in [
        ("bash", "_tpsim()"),
        ("zsh", "#compdef tpsim"),
        ("fish", "complete -c tpsim"),
    ] {
        let (code, stdout, stderr) = run(&["completions", shell]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(marker), "{shell}: {marker} missing");
        assert!(
            stdout.contains("sweep") && stdout.contains("hf-config"),
            "{shell}"
        );
    }
    assert_error(&["completions", "tcsh"], &["tcsh"]);
}

#[test]
fn every_subcommand_help_has_worked_examples() {
    for sub in [
        "plan",
        "eval",
        "accuracy",
        "sweep",
        "compare",
        "completions",
    ] {
        let (code, stdout, _) = run(&[sub, "--help"]);
        assert_eq!(code, 0);
        assert!(stdout.contains("Example"), "{sub} --help has no examples");
        assert!(stdout.contains(&format!("tpsim {sub}")), "{sub} --help");
    }
}

#[test]
fn machine_output_stays_clean_under_no_color() {
    let out = Command::cargo_bin("tpsim")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .args([
            "sweep", "--params", "70B", "--axis", "nodes", "--values", "8,16", "--format", "csv",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains('\u{1b}'), "no escape codes on stdout");
    assert!(!String::from_utf8(out.stderr).unwrap().contains('\u{1b}'));
    assert!(stdout.starts_with("axis,value,"), "{stdout}");
}

#[test]
fn a_whole_megatron_launch_script_reads_like_its_flags() {
    let (code, stdout, stderr) = run(&[
        "eval",
        "--nodes",
        "16",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let script = parse_json(&[], &stdout, &stderr);
    // Skipped arguments are listed on stderr, never mixed into the JSON on stdout.
    assert!(
        stderr.contains("--lr") && stderr.contains("--data-path"),
        "{stderr}"
    );
    let flags = run_json(&[
        "eval",
        "--nodes",
        "16",
        "--layers",
        "80",
        "--hidden",
        "8192",
        "--heads",
        "64",
        "--kv-heads",
        "8",
        "--ffn-hidden",
        "28672",
        "--gated-mlp",
        "--normalization",
        "RMSNorm",
        "--disable-bias-linear",
        "--untie-embeddings-and-output-weights",
        "--position-embedding-type",
        "rope",
        "--hidden-dropout",
        "0",
        "--attention-dropout",
        "0",
        "--vocab",
        "128256",
        "--seq-len",
        "8192",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--micro-batch",
        "1",
        "--global-batch",
        "512",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--grad-dtype",
        "fp32",
        // The script turns on no overlap switch, so Megatron-LM overlaps only p2p (arguments.py
        // defaults), whatever Megatron-Core's performance recipes would set.
        "--tp-comm-overlap",
        "false",
        "--overlap-grad-reduce",
        "false",
        "--overlap-param-gather",
        "false",
        "--format",
        "json",
    ]);
    assert_eq!(script["plans"], flags["plans"]);
    assert_eq!(script["training"]["overlap"], flags["training"]["overlap"]);
    // The script describes Llama-3-70B: the same count as its Hugging Face config (at the script's
    // --seq-length 8192; the config's default would be the 4096-token training length).
    let hf = run_json(&[
        "eval",
        "--hf-config",
        "models/hf/llama-3-70b.json",
        "--seq-len",
        "8192",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--global-batch",
        "512",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--grad-dtype",
        "fp32",
        "--tp-comm-overlap",
        "false",
        "--overlap-grad-reduce",
        "false",
        "--overlap-param-gather",
        "false",
        "--format",
        "json",
    ]);
    assert_eq!(script["model"]["params"], hf["model"]["params"]);
    assert_eq!(script["plans"][0]["time"], hf["plans"][0]["time"]);

    assert_error(
        &[
            "eval",
            "--nodes",
            "16",
            "--megatron-args",
            "--num-layers $NL --hidden-size 8192",
        ],
        &["--num-layers \"$NL\"", "expand shell variables"],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "16",
            "--megatron-args",
            "--hidden-size 8192",
        ],
        &["lack --num-layers"],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "1",
            "--gpus-per-node",
            "3",
            "--megatron-args",
            "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --global-batch-size 64 --tensor-model-parallel-size 2",
        ],
        &[
            "--tensor-model-parallel-size 2",
            "does not divide the 3 GPUs",
        ],
    );
}

#[test]
fn sweep_points_agree_with_plan_and_do_not_depend_on_threads() {
    let sweep = |threads: &str| {
        run_json(&[
            "sweep",
            "--params",
            "512B",
            "--axis",
            "nodes",
            "--values",
            "32,64",
            "--threads",
            threads,
            "--format",
            "json",
        ])
    };
    let (one, two) = (sweep("1"), sweep("2"));
    assert_eq!(one["rows"], two["rows"], "same rows on 1 and 2 threads");
    let plan = run_json(&[
        "plan", "--params", "512B", "--nodes", "32", "--top", "1", "--format", "json",
    ]);
    let best = &plan["plans"][0];
    let row = &one["rows"][0];
    for key in ["tp", "pp", "dp", "vpp", "micro_batch", "zero"] {
        assert_eq!(row[key], best[key], "{key}");
    }
    assert_eq!(row["time"]["step_s"], best["time"]["step_s"]);
}

/// Megatron flags that change memory or time are modelled, or refused when tpsim cannot model
/// them; none is reported as "skipped".
#[test]
fn megatron_args_that_change_the_result_are_not_skipped() {
    const BASE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --bf16";
    let eval = |extra: &str| -> (i32, Value, String) {
        let line = format!("{BASE} {extra}");
        let args = [
            "eval",
            "--nodes",
            "4",
            "--format",
            "json",
            "--megatron-args",
            &line,
        ];
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{extra}: {stderr}");
        (code, parse_json(&args, &stdout, &stderr), stderr)
    };
    let (_, plain, _) = eval("");
    assert_eq!(plain["training"]["attention"], "flash");
    // --bf16 without --grad-reduce-in-bf16: Megatron-LM keeps fp32 gradients (arguments.py).
    assert_eq!(plain["training"]["grad_dtype"], "fp32");
    let (_, bf16_grads, _) = eval("--grad-reduce-in-bf16");
    assert_eq!(bf16_grads["training"]["grad_dtype"], "bf16");

    let (_, rc, stderr) = eval("--recompute-activations");
    assert_eq!(rc["plans"][0]["recompute"], "selective", "{stderr}");
    assert!(!stderr.contains("--recompute-activations"), "{stderr}");

    let (_, v, stderr) = eval("--num-virtual-stages-per-pipeline-rank 2");
    assert_eq!(v["plans"][0]["vpp"], 2, "{stderr}");

    let (_, fp32, stderr) = eval("--accumulate-allreduce-grads-in-fp32");
    assert_eq!(fp32["training"]["grad_dtype"], "fp32", "{stderr}");
    assert!(
        fp32["plans"][0]["memory"]["gradients_bytes"].as_f64()
            > bf16_grads["plans"][0]["memory"]["gradients_bytes"].as_f64()
    );

    for (extra, kernel) in [
        ("--attention-backend flash", "flash"),
        ("--attention-backend fused", "flash"),
        ("--attention-backend auto", "flash"),
        ("--attention-backend unfused", "unfused"),
        ("--attention-backend local", "unfused"),
        ("--use-flash-attn", "flash"),
    ] {
        let (_, json, stderr) = eval(extra);
        assert_eq!(json["training"]["attention"], kernel, "{extra}: {stderr}");
        assert!(!stderr.contains("skipped"), "{extra}: {stderr}");
    }

    let (_, cp1, stderr) = eval("--context-parallel-size 1 --expert-model-parallel-size 1");
    assert_eq!(
        cp1["plans"][0]["time"], plain["plans"][0]["time"],
        "{stderr}"
    );

    let refused = |extra: &str, needles: &[&str]| {
        let line = format!("{BASE} {extra}");
        assert_error(&["eval", "--nodes", "4", "--megatron-args", &line], needles);
    };
    refused("--fp32", &["--fp32", "bf16/fp16 mixed precision"]);
    // Context parallelism is read: dp = 32 GPUs / (tp 2 x cp 2 x pp 4) (arguments.py).
    let (_, cp2, stderr) = eval("--context-parallel-size 2");
    assert_eq!(cp2["plans"][0]["cp"], 2, "{stderr}");
    assert_eq!(cp2["plans"][0]["dp"], 2, "{stderr}");
    // Expert parallelism needs experts; experts are read (issue 9 item 6), and MoE arguments
    // tpsim does not model are refused by name.
    refused(
        "--expert-model-parallel-size 4",
        &["--expert-model-parallel-size 4", "without --num-experts"],
    );
    refused(
        "--num-experts 8 --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity",
        &["--moe-pad-expert-input-to-capacity", "not modelled"],
    );
    refused(
        "--attention-backend sdpa",
        &[
            "--attention-backend",
            "\"sdpa\"",
            "flash, fused, auto, unfused, local",
        ],
    );
    refused(
        "--recompute-activations --recompute-granularity full",
        &["--recompute-activations", "--recompute-granularity full"],
    );
    refused(
        "--attention-backend unfused --use-flash-attn",
        &["--use-flash-attn", "--attention-backend unfused"],
    );
    refused(
        "--num-layers-per-virtual-pipeline-stage 4 --num-virtual-stages-per-pipeline-rank 2",
        &["only one of them"],
    );
    // A flag next to the line that contradicts it does not silently win.
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--attention",
            "flash",
            "--megatron-args",
            &format!("{BASE} --attention-backend unfused"),
        ],
        &["--attention flash", "unfused"],
    );
}

#[test]
fn megatron_swiglu_ffn_default_and_query_groups_follow_megatron() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --swiglu --num-query-groups 8 --seq-length 4096 --global-batch-size 512 --bf16";
    let args = [
        "eval",
        "--nodes",
        "1",
        "--format",
        "json",
        "--megatron-args",
        line,
    ];
    let (code, stdout, stderr) = run(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    let json = parse_json(&args, &stdout, &stderr);
    // Megatron-LM arguments.py: int((4 * 4096 * 2 / 3) / 64) * 64 = 10880.
    assert_eq!(json["model"]["ffn_hidden"], 10880);
    // --num-query-groups without --group-query-attention: Megatron ignores it, and says so here.
    assert_eq!(json["model"]["kv_heads"], 32);
    assert!(
        stderr.contains("--num-query-groups 8 is ignored without --group-query-attention"),
        "{stderr}"
    );
    let gqa = format!("{line} --group-query-attention");
    let args = [
        "eval",
        "--nodes",
        "1",
        "--format",
        "json",
        "--megatron-args",
        &gqa,
    ];
    let json = {
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{stderr}");
        parse_json(&args, &stdout, &stderr)
    };
    assert_eq!(json["model"]["kv_heads"], 8);
}

fn write_plan(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn compare_refuses_plans_of_different_scenarios() {
    let dir = std::env::temp_dir().join(format!("tpsim-compare-scen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = "plan:\n  tp: 8\n  pp: 8\n  dp: 8\n  sequence_parallel: true\n  recompute: selective\n  zero: 1\n";
    let a = write_plan(
        &dir,
        "a.yaml",
        &format!("model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 64\nglobal_batch: 1536\n{plan}"),
    );
    let other_model = write_plan(
        &dir,
        "b.yaml",
        &format!("params: 70B\ngpu: h100-sxm-80g\nnodes: 64\nglobal_batch: 1024\n{plan}"),
    );
    assert_error(
        &["compare", "--plan", &a, "--plan", &other_model],
        &[
            "different scenarios",
            "model:",
            "GPU:",
            "global batch: 1536 against 1024",
        ],
    );
    let other_nodes = write_plan(
        &dir,
        "c.yaml",
        "model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 32\nglobal_batch: 1536\nplan:\n  tp: 8\n  pp: 8\n  dp: 4\n  zero: 1\n",
    );
    assert_error(
        &["compare", "--plan", &a, "--plan", &other_nodes],
        &["nodes: 64 against 32", "--nodes"],
    );
    let other_seq = write_plan(
        &dir,
        "d.yaml",
        &format!(
            "model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 64\nglobal_batch: 1536\nseq_len: 1024\n{plan}"
        ),
    );
    assert_error(
        &["compare", "--plan", &a, "--plan", &other_seq],
        &["sequence length: 2048 against 1024"],
    );
    // The search-only flags do not apply to two saved plans.
    for flag in ["--allow-cross-node-tp", "--allow-uneven-pp"] {
        let (code, stdout, stderr) = run(&["compare", "--plan", &a, "--plan", &a, flag]);
        assert_eq!(code, 2, "{flag}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.contains("cannot be used with"),
            "{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flags_that_would_be_ignored_are_refused() {
    for extra in [["--report", "/tmp/tpsim-never"], ["--format", "json"]] {
        let mut args = vec![
            "plan", "--params", "70B", "--nodes", "8", "--emit", "megatron",
        ];
        args.extend(extra);
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.contains("cannot be used with"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = run(&[
        "eval",
        "--model",
        "gpt3-175b",
        "--nodes",
        "64",
        "--tp",
        "8",
        "--pp",
        "8",
        "--emit",
        "megatron",
        "--format",
        "json",
    ]);
    assert_eq!(code, 2, "{stderr}");
    for (axis, values, fixed) in [
        ("nodes", "8,16", ["--nodes", "8"]),
        ("seq-len", "2048,4096", ["--seq-len", "1024"]),
        ("global-batch", "512,1024", ["--global-batch", "256"]),
        (
            "gpu",
            "a100-sxm-80g,h100-sxm-80g",
            ["--gpu", "h200-sxm-141g"],
        ),
    ] {
        let mut args = vec![
            "sweep", "--params", "70B", "--axis", axis, "--values", values,
        ];
        if axis != "nodes" {
            args.extend(["--nodes", "8"]);
        }
        args.extend(fixed);
        let flag = format!("{} {}", fixed[0], fixed[1]);
        assert_error(
            &args,
            &[&flag, &format!("--axis {axis}"), &format!("drop {flag}")],
        );
    }
    // A GPU profile with a bandwidth axis is fine: the axis replaces only the network figure.
    let (code, _, stderr) = run(&[
        "sweep",
        "--params",
        "70B",
        "--nodes",
        "8",
        "--gpu",
        "a100-sxm-80g",
        "--axis",
        "network-bandwidth",
        "--values",
        "25,50",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn sweep_table_plan_label_keys_recompute() {
    let (code, stdout, stderr) = run(&[
        "sweep", "--params", "70B", "--axis", "nodes", "--values", "8",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(" recompute "), "{stdout}");
    assert!(!stdout.contains("sp none"), "{stdout}");
}

#[test]
fn hf_config_defaults_are_not_silent() {
    let dir = std::env::temp_dir().join(format!("tpsim-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shape = r#""hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 32000"#;
    let no_type = write_plan(
        &dir,
        "no-type.json",
        &format!("{{{shape}, \"max_position_embeddings\": 4096}}"),
    );
    assert_error(
        &["plan", "--hf-config", &no_type, "--nodes", "1"],
        &[
            "\"model_type\"",
            "llama, mistral, qwen2, qwen3, gemma, gpt2, gpt_neox, falcon",
        ],
    );
    let no_len = write_plan(
        &dir,
        "no-len.json",
        &format!("{{\"model_type\": \"llama\", {shape}}}"),
    );
    // Without a position limit the default training length is used, and said.
    let json = run_json(&[
        "plan",
        "--hf-config",
        &no_len,
        "--nodes",
        "4",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json["training"]["seq_len"], 4096);
    assert!(
        json["model"]["origin"]
            .as_str()
            .unwrap()
            .contains("--seq-len not given"),
        "{json}"
    );
    let json = run_json(&[
        "plan",
        "--hf-config",
        &no_len,
        "--nodes",
        "4",
        "--seq-len",
        "4096",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json["training"]["seq_len"], 4096);
    let yes = write_plan(
        &dir,
        "yes.json",
        &format!(
            "{{\"model_type\": \"llama\", {shape}, \"max_position_embeddings\": 4096, \"tie_word_embeddings\": \"yes\"}}"
        ),
    );
    assert_error(
        &["plan", "--hf-config", &yes, "--nodes", "1"],
        &["\"tie_word_embeddings\"", "\"yes\"", "boolean"],
    );
    assert_error(
        &[
            "plan",
            "--hf-config",
            "models/hf/gpt2.json",
            "--nodes",
            "1",
            "--seq-len",
            "2048",
        ],
        &["--seq-len 2048", "\"n_positions\" is 1024"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Issue 13: configs the real frameworks accept and mean the same ----

/// Runs `eval --format json --megatron-args LINE` plus `extra`; returns (code, JSON or Null, stderr).
fn eval_line(line: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["eval", "--format", "json"];
    args.extend(extra);
    args.extend(["--megatron-args", line]);
    let (code, stdout, stderr) = run(&args);
    let json = if code == 0 || code == 1 {
        parse_json(&args, &stdout, &stderr)
    } else {
        Value::Null
    };
    (code, json, stderr)
}

/// A small dense model on 4 nodes: tp 2, pp 4 (dp 4 on 32 GPUs).
const SMALL: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4";

/// --global-batch and --seq-len beside a launch line that sets the same quantity are refused as a
/// conflict (as --tp or --layers are), naming both values; the same value, or a batch the line
/// leaves to Megatron's default, is taken.
#[test]
fn batch_and_sequence_flags_beside_a_launch_line_do_not_override_it() {
    // SMALL sets --seq-length 4096 and --global-batch-size 512.
    assert_error(
        &[
            "eval",
            "--nodes",
            "8",
            "--global-batch",
            "1024",
            "--megatron-args",
            SMALL,
        ],
        &[
            "--global-batch 1024",
            "--global-batch-size 512",
            "drop --global-batch",
        ],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "8",
            "--seq-len",
            "8192",
            "--megatron-args",
            SMALL,
        ],
        &["--seq-len 8192", "--seq-length 4096", "drop --seq-len"],
    );
    // One error line (the notes before it are the reader's, about the line).
    let stderr = run(&[
        "eval",
        "--nodes",
        "8",
        "--seq-len",
        "8192",
        "--megatron-args",
        SMALL,
    ])
    .2;
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.lines().last().unwrap().starts_with("error"),
        "{stderr}"
    );
    // The same values: taken.
    let (code, json, stderr) = eval_line(
        SMALL,
        &["--nodes", "8", "--global-batch", "512", "--seq-len", "4096"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json["training"]["global_batch"], 512, "{stderr}");
    assert_eq!(json["training"]["seq_len"], 4096, "{stderr}");
    // A line without --global-batch-size takes --global-batch.
    let unbatched = SMALL.replace("--global-batch-size 512 ", "");
    assert!(!unbatched.contains("--global-batch-size"), "{unbatched}");
    let (code, json, stderr) = eval_line(&unbatched, &["--nodes", "8", "--global-batch", "1024"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json["training"]["global_batch"], 1024, "{stderr}");
}

#[test]
fn megatron_bf16_without_grad_reduce_in_bf16_keeps_fp32_gradients() {
    // arguments.py validate_args: with --bf16, accumulate_allreduce_grads_in_fp32 becomes true
    // unless --grad-reduce-in-bf16 is given.
    let (_, plain, stderr) = eval_line(&format!("{SMALL} --bf16"), &["--nodes", "4"]);
    assert_eq!(plain["training"]["grad_dtype"], "fp32", "{stderr}");
    let (_, bf16, stderr) = eval_line(
        &format!("{SMALL} --bf16 --grad-reduce-in-bf16"),
        &["--nodes", "4"],
    );
    assert_eq!(bf16["training"]["grad_dtype"], "bf16", "{stderr}");
    assert!(
        plain["plans"][0]["memory"]["gradients_bytes"].as_f64()
            > bf16["plans"][0]["memory"]["gradients_bytes"].as_f64()
    );
    let (_, main_bf16, _) = eval_line(
        &format!("{SMALL} --bf16 --main-grads-dtype bf16"),
        &["--nodes", "4"],
    );
    assert_eq!(main_bf16["training"]["grad_dtype"], "bf16");
    // The same flags pasted on eval read the same way.
    let pasted = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--nodes",
            "4",
            "--format",
            "json",
            "--num-layers",
            "32",
            "--hidden-size",
            "4096",
            "--num-attention-heads",
            "32",
            "--seq-length",
            "4096",
            "--global-batch-size",
            "512",
            "--tp",
            "2",
            "--pp",
            "4",
        ];
        args.extend(extra);
        run_json(&args)
    };
    assert_eq!(pasted(&["--bf16"])["training"]["grad_dtype"], "fp32");
    assert_eq!(
        pasted(&["--bf16", "--grad-reduce-in-bf16"])["training"]["grad_dtype"],
        "bf16"
    );
    // A tpsim flag that contradicts the line is refused, not silently preferred.
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--grad-dtype",
            "bf16",
            "--megatron-args",
            &format!("{SMALL} --bf16"),
        ],
        &["--grad-dtype bf16", "fp32", "--grad-reduce-in-bf16"],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{SMALL} --bf16 --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32"),
        ],
        &[
            "--accumulate-allreduce-grads-in-fp32",
            "--grad-reduce-in-bf16",
        ],
    );
}

#[test]
fn emitted_configs_say_the_planned_gradient_precision() {
    for (grad, megatron_flag, fp32) in [
        ("bf16", "--grad-reduce-in-bf16", false),
        ("fp32", "--accumulate-allreduce-grads-in-fp32", true),
    ] {
        let base = [
            "eval",
            "--model",
            "llama3-70b",
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
            "--grad-dtype",
            grad,
            "--emit",
        ];
        let emit = |target: &str| {
            let mut args = base.to_vec();
            args.push(target);
            // DeepSpeed has no TP-communication overlap: plan for what it runs.
            // Nor does it overlap the reduction of ZeRO-1's fp32 gradients (BF16_Optimizer
            // all-reduces them after the backward: emit_round50).
            if target == "deepspeed" {
                args.extend(["--framework", "deepspeed", "--overlap-grad-reduce", "false"]);
            }
            let (code, stdout, stderr) = run(&args);
            assert!(code == 0 || code == 1, "{target}: {stderr}");
            stdout
        };
        let line = emit("megatron");
        assert!(line.contains(megatron_flag), "{line}");
        // The line reads back to the same gradient precision.
        let (_, back, stderr) = eval_line(line.trim(), &["--nodes", "16"]);
        assert_eq!(back["training"]["grad_dtype"], grad, "{stderr}");
        let bridge = emit("megatron-bridge");
        assert!(
            bridge.contains(&format!("ddp.grad_reduce_in_fp32={fp32}"))
                && bridge.contains(&format!("mixed_precision.grad_reduce_in_fp32={fp32}")),
            "{bridge}"
        );
        let nemo: Value = yaml_serde::from_str(&emit("nemo")).unwrap();
        assert_eq!(nemo["model"]["optim"]["grad_sync_dtype"], grad);
        let ds: Value = serde_json::from_str(&emit("deepspeed")).unwrap();
        assert_eq!(ds["data_types"]["grad_accum_dtype"], grad);
    }
}

/// The README's Llama-405B `--allow-uneven-pp` example: its best plan interleaves an uneven split.
#[test]
fn uneven_interleaved_plan_emits_a_valid_line_and_reads_back() {
    let plan = [
        "plan",
        "--model",
        "llama3-405b",
        "--nodes",
        "2048",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "2048",
        "--allow-uneven-pp",
    ];
    let mut json_args = plan.to_vec();
    json_args.extend(["--format", "json", "--top", "1"]);
    let best = run_json(&json_args)["plans"][0].clone();
    assert_eq!(best["stages"]["even"], false, "{best}");
    assert!(best["vpp"].as_u64().unwrap() > 1, "{best}");
    let mut emit_args = plan.to_vec();
    emit_args.extend(["--emit", "megatron"]);
    let (code, line, stderr) = run(&emit_args);
    assert_eq!(code, 0, "{stderr}");
    let (pp, vpp) = (best["pp"].as_u64().unwrap(), best["vpp"].as_u64().unwrap());
    // Megatron-LM arguments.py: (126 layers + embedding + loss) / pp / N = vpp.
    let per_virtual = (126 + 2) / (pp * vpp);
    assert!(
        line.contains(
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
        ) && line.contains(&format!(
            "--num-layers-per-virtual-pipeline-stage {per_virtual} "
        )),
        "{line}"
    );
    assert!(
        !line.contains("--decoder-first-pipeline-num-layers"),
        "{line}"
    );
    let (code, back, stderr) = eval_line(line.trim(), &["--nodes", "2048"]);
    assert_eq!(code, 0, "{stderr}");
    let back = &back["plans"][0];
    for key in [
        "tp",
        "pp",
        "dp",
        "vpp",
        "micro_batch",
        "stages",
        "recompute",
        "zero",
    ] {
        assert_eq!(back[key], best[key], "{key}: {line}");
    }
    assert_eq!(back["memory"], best["memory"], "{line}");
}

#[test]
fn megatron_pipeline_split_values_are_honoured_or_refused() {
    // 30 layers on pp 4: Megatron places 7, 8, 8, 7 with both --account-for-* switches, the same
    // as tpsim's split, and as --decoder-first/last-pipeline-num-layers 7.
    const L30: &str = "--num-layers 30 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --global-batch-size 256 --pipeline-model-parallel-size 4 --micro-batch-size 1 --bf16";
    let (code, counted, stderr) = eval_line(
        &format!(
            "{L30} --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
        ),
        &["--nodes", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(counted["plans"][0]["stages"]["first"], 7);
    let (code, first_last, stderr) = eval_line(
        &format!(
            "{L30} --decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7"
        ),
        &["--nodes", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    for key in ["first", "middle_max", "last"] {
        assert_eq!(
            first_last["plans"][0]["stages"][key],
            counted["plans"][0]["stages"][key]
        );
    }
    assert_eq!(
        first_last["plans"][0]["time"]["step_s"], counted["plans"][0]["time"]["step_s"],
        "the same layers per stage give the same step"
    );
    assert_eq!(first_last["plans"][0]["stages"]["given"], true);
    // Other first/last values are evaluated as given, not replaced by tpsim's split: 9 and 9
    // leave 6 for each middle stage, so the end stages are the slowest and the step is longer.
    let (code, nine, stderr) = eval_line(
        &format!(
            "{L30} --decoder-first-pipeline-num-layers 9 --decoder-last-pipeline-num-layers 9"
        ),
        &["--nodes", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    let stages = &nine["plans"][0]["stages"];
    assert_eq!(
        (&stages["first"], &stages["middle_max"], &stages["last"]),
        (&9.into(), &6.into(), &9.into())
    );
    assert!(
        nine["plans"][0]["time"]["step_s"].as_f64().unwrap()
            > counted["plans"][0]["time"]["step_s"].as_f64().unwrap()
    );
    // Megatron's own refusal: the middle stages must share the rest evenly.
    assert_error(
        &[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!(
                "{L30} --decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 7"
            ),
        ],
        &[
            "--decoder-first-pipeline-num-layers 6 and --decoder-last-pipeline-num-layers 7",
            "17 of the 30 layers for the 2 other stage(s)",
        ],
    );
    // Without any split argument Megatron refuses 30 layers on 4 stages.
    assert_error(
        &["eval", "--nodes", "1", "--megatron-args", L30],
        &[
            "does not divide 30 layers",
            "--account-for-embedding-in-pipeline-split",
        ],
    );
}

#[test]
fn megatron_reader_accepts_what_megatron_accepts() {
    // --sequence-parallel with TP 1: Megatron turns it off with a warning.
    let (code, sp, stderr) = eval_line(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --sequence-parallel --bf16",
        &["--nodes", "1"],
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(sp["plans"][0]["sequence_parallel"], false);
    assert!(
        stderr.contains("turns sequence parallelism off"),
        "{stderr}"
    );

    // --global-batch-size is optional: Megatron's default is micro-batch x dp.
    let (code, gbs, stderr) = eval_line(
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --tensor-model-parallel-size 8 --micro-batch-size 2 --bf16",
        &["--nodes", "4"],
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(gbs["training"]["global_batch"], 2 * 4, "{stderr}");
    assert!(stderr.contains("micro-batch 2 x dp 4 = 8"), "{stderr}");

    // The SC'21 scripts' --activations-checkpoint-method uniform is full recompute.
    let (_, legacy, stderr) = eval_line(
        &format!("{SMALL} --bf16 --activations-checkpoint-method uniform"),
        &["--nodes", "4"],
    );
    assert_eq!(legacy["plans"][0]["recompute"], "full", "{stderr}");
    let (_, checkpoint, _) = eval_line(
        &format!("{SMALL} --bf16 --checkpoint-activations"),
        &["--nodes", "4"],
    );
    assert_eq!(checkpoint["plans"][0]["recompute"], "full");
    let (_, modern, _) = eval_line(
        &format!(
            "{SMALL} --bf16 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
        ),
        &["--nodes", "4"],
    );
    assert_eq!(modern["plans"][0], legacy["plans"][0]);
    // block covering all 8 layers of each stage recomputes every layer: full.
    let (_, block, stderr) = eval_line(
        &format!(
            "{SMALL} --bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 8"
        ),
        &["--nodes", "4"],
    );
    assert_eq!(block["plans"][0], legacy["plans"][0], "{stderr}");

    // Block recompute of N layers per chunk is tpsim's recompute_num_layers, never read as every
    // layer recomputed.
    for extra in [
        "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
        "--activations-checkpoint-method block --activations-checkpoint-num-layers 2",
    ] {
        let (_, partial, stderr) = eval_line(&format!("{SMALL} --bf16 {extra}"), &["--nodes", "4"]);
        let plan = &partial["plans"][0];
        assert_eq!(plan["recompute"], "full", "{extra}: {stderr}");
        assert_eq!(plan["recompute_num_layers"], 2, "{extra}: {stderr}");
        assert!(
            plan["memory"]["activations_bytes"].as_f64()
                > legacy["plans"][0]["memory"]["activations_bytes"].as_f64(),
            "{extra}: recomputing 2 of 8 layers keeps more activations than recomputing all"
        );
    }
    // Uniform chunks of several layers are refused by name.
    for (extra, needles) in [
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 4",
            vec!["uniform recompute with 4 layers per chunk"],
        ),
        (
            "--recompute-granularity full --recompute-num-layers 4",
            vec!["--recompute-num-layers without --recompute-method"],
        ),
    ] {
        assert_error(
            &[
                "eval",
                "--nodes",
                "4",
                "--megatron-args",
                &format!("{SMALL} --bf16 {extra}"),
            ],
            &needles,
        );
    }
    // The same Megatron names pasted on eval read the same way.
    let pasted = run_json(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--pp",
        "4",
        "--recompute",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(pasted["plans"][0]["recompute_num_layers"], 2);
    assert_error(
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "4",
            "--recompute",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "2",
        ],
        &["--recompute-method uniform --recompute-num-layers 2"],
    );

    // --microbatch-group-size-per-virtual-pipeline-stage: pp (Megatron's default) is read,
    // another value is refused by name, and Megatron's own rule is enforced.
    let vpp = format!("{SMALL} --bf16 --num-layers-per-virtual-pipeline-stage 4");
    let (code, group, stderr) = eval_line(
        &format!("{vpp} --microbatch-group-size-per-virtual-pipeline-stage 4"),
        &["--nodes", "4"],
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(group["plans"][0]["vpp"], 2);
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{vpp} --microbatch-group-size-per-virtual-pipeline-stage 8"),
        ],
        &[
            "--microbatch-group-size-per-virtual-pipeline-stage 8",
            "not modelled",
        ],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{vpp} --microbatch-group-size-per-virtual-pipeline-stage 3"),
        ],
        &[
            "--microbatch-group-size-per-virtual-pipeline-stage 3",
            "between pp",
        ],
    );
}

#[test]
fn megatron_flags_that_change_the_answer_are_modelled_or_refused() {
    for (extra, needle) in [
        (
            "--multi-latent-attention",
            "--multi-latent-attention without --kv-lora-rank",
        ),
        (
            "--moe-expert-capacity-factor 1.25",
            "--moe-expert-capacity-factor without --num-experts",
        ),
        (
            "--fp8-format hybrid --fp8-recipe blockwise",
            "--fp8-recipe blockwise",
        ),
        ("--fp8-format e5m2", "\"e5m2\""),
        // Megatron-LM's own refusal: TP overlap needs sequence parallelism.
        (
            "--tp-comm-overlap",
            "--tp-comm-overlap without sequence parallelism",
        ),
        (
            "--cpu-offloading-num-layers 4",
            "--cpu-offloading-num-layers 4",
        ),
        ("--use-torch-fsdp2", "--use-torch-fsdp2"),
        // Megatron-Core's own refusal of a name it does not know.
        (
            "--recompute-granularity selective --recompute-modules core_attn attn_proj",
            "'attn_proj' is not a module Megatron-Core recomputes",
        ),
        ("--optimizer sgd", "--optimizer sgd"),
        ("--exp-avg-dtype bf16", "--exp-avg-dtype bf16"),
    ] {
        let (code, stdout, stderr) = run(&[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{SMALL} --bf16 {extra}"),
        ]);
        assert_eq!(code, 2, "{extra}: {stderr}");
        assert!(
            stdout.is_empty() && stderr.contains(needle),
            "{extra}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(!stderr.contains("skipped"), "{extra}: {stderr}");
    }
    // --kv-channels equal to hidden / heads changes nothing.
    let (_, plain, _) = eval_line(&format!("{SMALL} --bf16"), &["--nodes", "4"]);
    let (_, kv, stderr) = eval_line(
        &format!("{SMALL} --bf16 --kv-channels 128"),
        &["--nodes", "4"],
    );
    assert_eq!(kv["plans"][0], plain["plans"][0], "{stderr}");
    // Another head width is read as the model's (Megatron-Core's kv_channels).
    let (_, narrow, stderr) = eval_line(
        &format!("{SMALL} --bf16 --kv-channels 64"),
        &["--nodes", "4"],
    );
    assert_eq!(narrow["model"]["head_dim"], 64, "{stderr}");
    assert!(
        narrow["model"]["params"].as_f64().unwrap() < plain["model"]["params"].as_f64().unwrap(),
        "{stderr}"
    );
    // --quick-geglu is gated (argument_utils.py gated_linear_unit) and keeps the 4h default.
    let (_, geglu, stderr) = eval_line(&format!("{SMALL} --bf16 --quick-geglu"), &["--nodes", "4"]);
    assert_eq!(geglu["model"]["gated_mlp"], true, "{stderr}");
    assert_eq!(geglu["model"]["ffn_hidden"], 4 * 4096);
    // Megatron-FSDP and torch FSDP2 without pipelines are ZeRO stages tpsim models.
    const PP1: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --tensor-model-parallel-size 2 --bf16";
    for (extra, zero) in [
        // Megatron-LM asserts both companions of torch FSDP2 (arguments.py `validate_args`).
        (
            "--use-torch-fsdp2 --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights",
            3,
        ),
        ("--use-megatron-fsdp", 3),
        (
            "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads",
            2,
        ),
        ("--use-distributed-optimizer", 1),
    ] {
        let (_, json, stderr) = eval_line(&format!("{PP1} {extra}"), &["--nodes", "4"]);
        assert_eq!(json["plans"][0]["zero"], zero, "{extra}: {stderr}");
    }
    // ... and `--emit megatron` writes them, which reads back to the same ZeRO stage.
    let (code, line, stderr) = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--pp",
        "1",
        "--zero",
        "2",
        "--global-batch",
        "512",
        "--emit",
        "megatron",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(
        line.contains("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads "),
        "{line}"
    );
    let (_, back, stderr) = eval_line(line.trim(), &["--nodes", "4"]);
    assert_eq!(back["plans"][0]["zero"], 2, "{stderr}");
}

#[test]
fn nemo_fragment_writes_dropout_and_the_right_optimizer() {
    let emit = |zero: &str, model: &str| {
        let (code, yaml, stderr) = run(&[
            "eval",
            "--model",
            model,
            "--nodes",
            "16",
            "--tp",
            "8",
            "--pp",
            "2",
            "--zero",
            zero,
            "--global-batch",
            "512",
            "--sequence-parallel",
            // NeMo 1.x's fused_adam (ZeRO-0) all-reduces after the backward under sequence
            // parallelism (emit_round50).
            "--overlap-grad-reduce",
            if zero == "0" { "false" } else { "true" },
            "--emit",
            "nemo",
        ]);
        assert!(code == 0 || code == 1, "{stderr}");
        yaml_serde::from_str::<Value>(&yaml).expect("the NeMo fragment is YAML")
    };
    let zero1 = emit("1", "llama3-70b");
    assert_eq!(zero1["model"]["optim"]["name"], "mcore_distributed_optim");
    // Llama has no dropout; the YAML default (0.1) must not survive the merge.
    assert_eq!(zero1["model"]["hidden_dropout"], 0.0);
    assert_eq!(zero1["model"]["attention_dropout"], 0.0);
    assert_eq!(
        emit("2", "llama3-70b")["model"]["optim"]["name"],
        "distributed_fused_adam"
    );
    assert_eq!(
        emit("0", "llama3-70b")["model"]["optim"]["name"],
        "fused_adam"
    );
    assert_eq!(emit("1", "gpt3-175b")["model"]["hidden_dropout"], 0.1);
}

#[test]
fn megatron_bridge_overrides_carry_the_plan() {
    let (code, text, stderr) = run(&[
        "plan",
        "--hf-config",
        "models/hf/llama-3-70b.json",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--emit",
        "megatron-bridge",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let overrides: std::collections::HashMap<&str, &str> = text
        .lines()
        .map(|l| {
            l.split_once('=')
                .unwrap_or_else(|| panic!("KEY=VALUE: {l}"))
        })
        .collect();
    let (_, line, _) = run(&[
        "plan",
        "--hf-config",
        "models/hf/llama-3-70b.json",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--emit",
        "megatron",
    ]);
    let value_of = |flag: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let i = words.iter().position(|w| *w == flag).unwrap();
        words[i + 1].to_string()
    };
    for (key, flag) in [
        (
            "model.tensor_model_parallel_size",
            "--tensor-model-parallel-size",
        ),
        (
            "model.pipeline_model_parallel_size",
            "--pipeline-model-parallel-size",
        ),
        ("train.global_batch_size", "--global-batch-size"),
        ("train.micro_batch_size", "--micro-batch-size"),
        ("model.num_layers", "--num-layers"),
    ] {
        assert_eq!(overrides[key], value_of(flag), "{key}");
    }
    let distributed = line.contains("--use-distributed-optimizer").to_string();
    assert_eq!(overrides["ddp.use_distributed_optimizer"], distributed);
    assert_eq!(
        overrides["optimizer.use_distributed_optimizer"],
        distributed
    );
    assert_eq!(overrides["model.hidden_dropout"], "0.0");
    assert!(overrides.contains_key("ddp.grad_reduce_in_fp32"));
}

/// Issue 10 item 7: the script's torchrun `--nnodes`/`--nproc_per_node` give the cluster.
#[test]
fn megatron_script_torchrun_sizes_give_the_cluster() {
    let (code, stdout, stderr) = run(&[
        "eval",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let json = parse_json(&[], &stdout, &stderr);
    assert_eq!(json["cluster"]["nodes"], 16, "{stderr}");
    assert!(!stderr.contains("--nnodes"), "read, not skipped: {stderr}");
    let line = "torchrun --nnodes=2 --nproc_per_node=4 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16";
    let (code, json, stderr) = eval_line(line, &[]);
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(json["cluster"]["nodes"], 2);
    assert_eq!(json["cluster"]["gpus_per_node"], 4);
    assert_eq!(json["plans"][0]["dp"], 4);
    // A shell variable is not guessed at: tpsim asks for --nodes.
    let (code, _, stderr) = run(&[
        "eval",
        "--megatron-args",
        "torchrun --nnodes $NNODES pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --bf16",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--nnodes $NNODES") && stderr.contains("--nodes is required"),
        "{stderr}"
    );
}

// ---- Issue 8: the new plan dimensions and settings travel through --emit and back ----

/// `eval FLAGS --emit megatron`, then the line read back through `--megatron-args` and pasted as
/// flags (`READ_BACK` are the cluster/framework flags the line does not carry): both give the
/// plan, training and evaluation of the original. Returns the line.
fn megatron_round_trip(flags: &[&str], read_back: &[&str]) -> String {
    let mut original_args = vec!["eval", "--format", "json"];
    original_args.extend(flags);
    let original = run_json(&original_args);
    let mut emit_args = vec!["eval"];
    emit_args.extend(flags);
    emit_args.extend(["--emit", "megatron"]);
    let (code, line, stderr) = run(&emit_args);
    assert!(code == 0 || code == 1, "{flags:?}: {stderr}");
    assert_eq!(line.lines().count(), 1, "{line}");
    let line = line.trim().to_string();
    let mut via_args = vec!["eval", "--format", "json"];
    via_args.extend(read_back);
    via_args.extend(["--megatron-args", line.as_str()]);
    let mut pasted = vec!["eval", "--format", "json"];
    pasted.extend(read_back);
    pasted.extend(line.split_whitespace());
    for back_args in [via_args, pasted] {
        let (code, stdout, stderr) = run(&back_args);
        assert!(code == 0 || code == 1, "{line}: {stderr}");
        let back = parse_json(&back_args, &stdout, &stderr);
        let (a, b) = (&original["plans"][0], &back["plans"][0]);
        for key in [
            "tp",
            "cp",
            "pp",
            "dp",
            "vpp",
            "micro_batch",
            "sequence_parallel",
            "recompute",
            "recompute_num_layers",
            "zero",
            "reshard_after_forward",
            "precision",
            "stages",
            "memory",
        ] {
            assert_eq!(b[key], a[key], "{key} after the round trip of {line}");
        }
        assert_eq!(b["time"]["step_s"], a["time"]["step_s"], "{line}");
        assert_eq!(back["training"], original["training"], "{line}");
    }
    line
}

#[test]
fn context_parallelism_is_written_and_read_back() {
    let line = megatron_round_trip(
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--seq-len",
            "16384",
            "--tp",
            "2",
            "--cp",
            "4",
            "--pp",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
        ],
        &["--nodes", "4"],
    );
    assert!(line.contains("--context-parallel-size 4 "), "{line}");
    // DeepSpeed's context parallelism is Ulysses: its degree is written in the config and in the
    // Megatron-DeepSpeed arguments beside it (at tp 1: Megatron-DeepSpeed asserts no TP beside it).
    let (code, stdout, stderr) = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "1",
        "--cp",
        "2",
        "--global-batch",
        "64",
        "--zero",
        "3",
        "--recompute",
        "full",
        "--framework",
        "deepspeed",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let config: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(config["sequence_parallel_size"], 2, "{stdout}");
    assert!(
        stderr.contains("--ds-sequence-parallel-size 2")
            && stderr.contains("tp x pp x sequence_parallel_size"),
        "{stderr}"
    );
    let bridge = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--cp",
        "2",
        "--pp",
        "2",
        "--sequence-parallel",
        "--zero",
        "1",
        "--global-batch",
        "64",
        "--emit",
        "megatron-bridge",
    ])
    .1;
    assert!(
        bridge.lines().any(|l| l == "model.context_parallel_size=2"),
        "{bridge}"
    );
}

#[test]
fn the_405b_plan_with_context_parallelism_emits_it_for_megatron() {
    // The best 405B plan uses cp > 1: the line must say it, or the read-back dp is wrong.
    let (code, line, stderr) = run(&[
        "plan",
        "--model",
        "llama3-405b",
        "--nodes",
        "2048",
        "--global-batch",
        "2048",
        "--allow-uneven-pp",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let best = run_json(&[
        "plan",
        "--model",
        "llama3-405b",
        "--nodes",
        "2048",
        "--global-batch",
        "2048",
        "--allow-uneven-pp",
        "--format",
        "json",
        "--top",
        "1",
    ])["plans"][0]
        .clone();
    let cp = best["cp"].as_u64().unwrap();
    assert_eq!(
        line.contains(&format!("--context-parallel-size {cp} ")),
        cp > 1,
        "{line}"
    );
    assert!(stderr.contains(&format!("x cp {cp} x")), "{stderr}");
}

#[test]
fn low_precision_is_written_and_read_back() {
    // FP8 (per-tensor) on H100 with Megatron-Core's FP8 parameter gather.
    let line = megatron_round_trip(
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
            "--precision",
            "fp8",
        ],
        &["--nodes", "4"],
    );
    assert!(
        line.contains("--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather"),
        "{line}"
    );
    // MXFP8 and NVFP4 on Blackwell.
    for (precision, flags) in [
        (
            "mxfp8",
            "--fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather",
        ),
        (
            "nvfp4",
            "--fp4-format e2m1 --fp4-recipe nvfp4 --fp4-param-gather",
        ),
    ] {
        let line = megatron_round_trip(
            &[
                "--model",
                "llama3-8b",
                "--gpu",
                "b200-sxm-180g",
                "--nodes",
                "4",
                "--tp",
                "2",
                "--pp",
                "2",
                "--sequence-parallel",
                "--zero",
                "1",
                "--global-batch",
                "64",
                "--precision",
                precision,
            ],
            &["--nodes", "4", "--gpu", "b200-sxm-180g"],
        );
        assert!(line.contains(flags), "{precision}: {line}");
    }
    // A Megatron-LM line runs on Megatron-Core, which all-gathers the FP8 parameters: a plan
    // evaluated for torchtitan (bf16 weights plus FP8 copies) is not written as one ...
    let fp8 = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sequence-parallel",
        "--zero",
        "1",
        "--global-batch",
        "64",
        "--precision",
        "fp8",
    ];
    let mut torchtitan = fp8.to_vec();
    torchtitan.extend(["--framework", "torchtitan", "--emit", "megatron"]);
    assert_error(
        &torchtitan,
        &[
            "--emit megatron",
            "--framework torchtitan",
            "--framework megatron-core",
        ],
    );
    // ... and a line without --fp8-param-gather is evaluated without it, as Megatron-LM runs it:
    // the bf16 weights stay the parameters beside the FP8 copies, and the distributed optimizer
    // gathers them in bf16.
    let mut core = fp8.to_vec();
    core.extend(["--emit", "megatron"]);
    let (code, line, stderr) = run(&core);
    assert_eq!(code, 0, "{stderr}");
    assert!(line.contains(" --fp8-param-gather"), "{line}");
    let without = line.trim().replace(" --fp8-param-gather", "");
    let eval_json = |line: &str| {
        let args = [
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            line,
            "--format",
            "json",
        ];
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 0, "{stderr}");
        parse_json(&args, &stdout, &stderr)
    };
    let (with_gather, without_gather) = (eval_json(line.trim()), eval_json(&without));
    let at = |v: &Value, path: &[&str]| {
        path.iter()
            .fold(&v["plans"][0], |v, k| &v[*k])
            .as_f64()
            .unwrap()
    };
    assert!(
        at(&without_gather, &["memory", "weights_bytes"])
            > at(&with_gather, &["memory", "weights_bytes"])
    );
    assert!(
        at(&without_gather, &["comm", "dp", "wire_bytes"])
            > at(&with_gather, &["comm", "dp", "wire_bytes"])
    );
    assert_eq!(without_gather["training"]["fp8_param_gather"], false);
    // Recipes tpsim does not model are refused by name; a --precision flag that contradicts the
    // line does not silently win.
    let small = format!("{SMALL} --bf16 --use-distributed-optimizer --sequence-parallel");
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{small} --fp8-format e4m3 --fp8-recipe blockwise"),
        ],
        &["--fp8-recipe blockwise", "not modelled"],
    );
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--precision",
            "fp8",
            "--megatron-args",
            &small,
        ],
        &["--precision fp8", "bf16"],
    );
    // Megatron-LM refuses --fp8-param-gather without the distributed optimizer; tpsim's
    // Megatron-Core FP8 needs it, so a ZeRO-0 FP8 plan is not written for Megatron.
    assert_error(
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "2",
            "--global-batch",
            "64",
            "--precision",
            "fp8",
            "--zero",
            "0",
            "--emit",
            "megatron",
        ],
        &["--emit megatron", "--zero 1"],
    );
    // Bridge writes the MixedPrecisionConfig fields; DeepSpeed has no FP8 key.
    let bridge = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sequence-parallel",
        "--zero",
        "1",
        "--global-batch",
        "64",
        "--precision",
        "fp8",
        "--emit",
        "megatron-bridge",
    ])
    .1;
    for key in [
        "mixed_precision.fp8=hybrid",
        "mixed_precision.fp8_recipe=tensorwise",
        "mixed_precision.fp8_param_gather=true",
        "mixed_precision.first_last_layers_bf16=false",
    ] {
        assert!(bridge.lines().any(|l| l == key), "{key}: {bridge}");
    }
    let nemo: Value = yaml_serde::from_str(
        &run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
            "--precision",
            "fp8",
            "--emit",
            "nemo",
        ])
        .1,
    )
    .unwrap();
    assert_eq!(nemo["model"]["fp8"], true);
    assert_eq!(nemo["model"]["fp8_params"], true);
}

#[test]
fn block_recompute_is_written_and_read_back() {
    let line = megatron_round_trip(
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "4",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
            "--recompute",
            "full",
            "--recompute-method",
            "block",
            "--recompute-num-layers",
            "3",
        ],
        &["--nodes", "4"],
    );
    assert!(
        line.contains(
            "--recompute-granularity full --recompute-method block --recompute-num-layers 3"
        ),
        "{line}"
    );
    // Block over the whole chunk (8 layers per stage) is every layer: the uniform plan.
    let whole = |method: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "4",
            "--global-batch",
            "64",
            "--recompute",
            "full",
            "--format",
            "json",
        ];
        args.extend(method);
        run_json(&args)["plans"][0].clone()
    };
    assert_eq!(
        whole(&["--recompute-method", "block", "--recompute-num-layers", "8"]),
        whole(&[
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1"
        ])
    );
}

#[test]
fn megatron_fsdp_with_pipelines_is_written_and_read_back() {
    for (zero, strategy) in [("2", "optim_grads"), ("3", "optim_grads_params")] {
        let line = megatron_round_trip(
            &[
                "--model",
                "llama3-8b",
                "--nodes",
                "4",
                "--tp",
                "2",
                "--pp",
                "2",
                "--sequence-parallel",
                "--zero",
                zero,
                "--global-batch",
                "64",
            ],
            &["--nodes", "4"],
        );
        assert!(
            line.contains(&format!(
                "--use-megatron-fsdp --data-parallel-sharding-strategy {strategy} --ckpt-format fsdp_dtensor "
            )),
            "{line}"
        );
    }
}

#[test]
fn communication_overlap_is_written_and_read_back() {
    // Megatron-Core's defaults: everything overlapped.
    let line = megatron_round_trip(
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "4",
            "--vpp",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
        ],
        &["--nodes", "4"],
    );
    for flag in [
        "--tp-comm-overlap",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    ] {
        assert!(line.contains(flag), "{flag}: {line}");
    }
    assert!(!line.contains("--no-overlap-p2p-communication"), "{line}");
    // Every overlap off (as the 2021 baseline runs, its local DDP all-reducing after the
    // backward) is written as such and reads back.
    let line = megatron_round_trip(
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--pp",
            "4",
            "--vpp",
            "2",
            "--sequence-parallel",
            "--zero",
            "1",
            "--global-batch",
            "64",
            "--tp-comm-overlap",
            "false",
            "--overlap-grad-reduce",
            "false",
            "--overlap-param-gather",
            "false",
            "--overlap-p2p-comm",
            "false",
        ],
        &["--nodes", "4"],
    );
    assert!(
        line.contains("--no-overlap-p2p-communication")
            && !line.contains("--overlap-grad-reduce")
            && !line.contains("--tp-comm-overlap")
            && !line.contains("--overlap-param-gather"),
        "{line}"
    );
    // An overlap flag that contradicts the line is refused.
    assert_error(
        &[
            "eval",
            "--nodes",
            "4",
            "--overlap-grad-reduce",
            "--megatron-args",
            &format!("{SMALL} --bf16"),
        ],
        &["--overlap-grad-reduce true", "leaves off"],
    );
    // DeepSpeed's overlap_comm follows the gradient-reduction overlap; a plan with TP overlap is
    // not written for DeepSpeed.
    assert_error(
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--tp",
            "2",
            "--sequence-parallel",
            "--global-batch",
            "64",
            "--framework",
            "deepspeed",
            "--tp-comm-overlap",
            "--emit",
            "deepspeed",
        ],
        &[
            "--emit deepspeed",
            "TP communication overlap",
            "--tp-comm-overlap false",
        ],
    );
    let (code, ds, stderr) = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "4",
        "--tp",
        "2",
        "--sequence-parallel",
        "--global-batch",
        "64",
        "--framework",
        "deepspeed",
        // overlap_comm is read by DeepSpeed's ZeRO optimizers only (ZeRO-0 is refused with it:
        // emit_round50).
        "--zero",
        "1",
        "--emit",
        "deepspeed",
    ]);
    assert!(code == 0 || code == 1, "{stderr}");
    let ds: Value = serde_json::from_str(&ds).unwrap();
    assert_eq!(ds["zero_optimization"]["overlap_comm"], true);
    assert!(stderr.contains("--framework deepspeed"), "{stderr}");
}

// ---- Issue 9 item 6: mixture-of-experts and latent attention through Megatron-LM arguments ----

/// `plan --emit megatron` for an MoE model, read back by `eval --megatron-args` (and, where every
/// flag is one `eval` takes, pasted on `eval`) on the same cluster: the same degrees, expert
/// parallelism included, the same model (total and active parameters) and the same evaluation.
#[test]
fn megatron_args_round_trip_moe_models_and_expert_parallelism() {
    for (model_flags, nodes, pasted) in [
        (vec!["--model", "mixtral-8x7b"], "8", true),
        (
            vec!["--model", "mixtral-8x7b", "--ep", "8", "--etp", "1"],
            "8",
            true,
        ),
        // Latent attention, shared experts and three dense layers first (--moe-layer-freq list).
        (vec!["--model", "deepseek-v3"], "64", true),
        // A head width other than hidden / heads and a norm over each query/key head.
        (vec!["--model", "qwen3-30b-a3b"], "8", true),
    ] {
        let mut plan_args = vec!["plan"];
        plan_args.extend(&model_flags);
        plan_args.extend([
            "--nodes",
            nodes,
            "--global-batch",
            "256",
            "--seq-len",
            "4096",
            "--emit",
            "megatron",
        ]);
        let (code, line, stderr) = run(&plan_args);
        assert_eq!(code, 0, "{plan_args:?}: {stderr}");
        let line = line.trim().to_string();
        for flag in [
            "--num-experts ",
            "--moe-router-topk ",
            "--moe-ffn-hidden-size ",
            "--expert-model-parallel-size ",
            "--expert-tensor-parallel-size ",
            "--moe-grouped-gemm",
            "--moe-token-dispatcher-type alltoall",
        ] {
            assert!(line.contains(flag), "{flag} missing from {line}");
        }

        let mut json_args = plan_args.clone();
        json_args.truncate(json_args.len() - 2);
        json_args.extend(["--format", "json", "--top", "200"]);
        let ranked = run_json(&json_args);
        let chosen = ranked["plans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["zero"].as_u64().unwrap() <= 1 || p["pp"] == 1)
            .expect("a Megatron-runnable plan is in the top 200");

        let mut via_args = vec!["eval", "--nodes", nodes, "--format", "json"];
        via_args.extend(["--megatron-args", line.as_str()]);
        let mut reads = vec![run_json(&via_args)];
        if pasted {
            let mut pasted_args = vec!["eval", "--nodes", nodes, "--format", "json"];
            pasted_args.extend(line.split_whitespace());
            reads.push(run_json(&pasted_args));
        }
        for back in reads {
            let back_plan = &back["plans"][0];
            for key in [
                "tp",
                "pp",
                "dp",
                "cp",
                "ep",
                "etp",
                "vpp",
                "micro_batch",
                "recompute",
                "zero",
            ] {
                assert_eq!(
                    back_plan[key], chosen[key],
                    "{key} after the round trip of {line}"
                );
            }
            for key in ["params", "active_params"] {
                assert!(back["model"][key].as_f64().unwrap() > 0.0, "{key}: {line}");
                assert_eq!(back["model"][key], ranked["model"][key], "{key}: {line}");
            }
            assert_eq!(
                back_plan["time"]["step_s"], chosen["time"]["step_s"],
                "{line}"
            );
            assert_eq!(back_plan["memory"], chosen["memory"], "{line}");
        }
    }
}

/// DeepSeek-V3's first three dense layers are written as Megatron's per-layer list, and its latent
/// attention with its widths.
#[test]
fn megatron_emit_writes_deepseek_layer_pattern_and_latent_attention() {
    let (code, line, stderr) = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--nodes",
        "64",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    for needle in [
        "--moe-layer-freq '[0]*3+[1]*58' ",
        "--moe-shared-expert-intermediate-size 2048 ",
        "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 ",
    ] {
        assert!(line.contains(needle), "{needle} missing from {line}");
    }
}

/// Megatron MoE arguments tpsim does not model, or that contradict each other, are refused by
/// name with exit 2, never skipped.
#[test]
fn megatron_args_refuse_moe_arguments_tpsim_does_not_model() {
    const MOE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --global-batch-size 256 --tensor-model-parallel-size 1 --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --bf16";
    for (extra, needles) in [
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity",
            &["--moe-pad-expert-input-to-capacity", "not modelled"][..],
        ),
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-layer-recompute",
            &["--moe-layer-recompute", "--recompute-modules moe"][..],
        ),
        // Megatron's default dispatcher is allgather; tpsim models the all-to-all.
        (
            "--expert-model-parallel-size 8",
            &["allgather", "--moe-token-dispatcher-type alltoall"][..],
        ),
        (
            "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-layer-freq [0]*3+[1]*58",
            &["--moe-layer-freq", "61 entries", "one per layer"][..],
        ),
    ] {
        assert_error(
            &[
                "eval",
                "--nodes",
                "8",
                "--megatron-args",
                &format!("{MOE} {extra}"),
            ],
            needles,
        );
    }
    assert_error(
        &[
            "eval",
            "--nodes",
            "8",
            "--megatron-args",
            "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --expert-model-parallel-size 8",
        ],
        &[
            "--expert-model-parallel-size 8 without --num-experts",
            "--num-experts",
        ],
    );
    // Megatron-LM's default --expert-tensor-parallel-size is the TP size (for experts without
    // biases: Megatron-Core asserts ETP 1 for biased ones, add_bias_linear's default).
    let (code, json, stderr) = eval_line(
        &format!(
            "{} --tensor-model-parallel-size 4 --sequence-parallel --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall --disable-bias-linear",
            MOE.replace("--tensor-model-parallel-size 1 ", "")
        ),
        &["--nodes", "8"],
    );
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(json["plans"][0]["etp"], 4, "{stderr}");
    assert_eq!(json["plans"][0]["ep"], 2, "{stderr}");
}

/// The writers that do not carry experts yet refuse MoE models with the reason, rather than
/// writing a dense model with another parameter count.
#[test]
fn emit_other_than_megatron_refuses_moe_models() {
    for (target, framework) in [("nemo", "megatron-core"), ("deepspeed", "deepspeed")] {
        assert_error(
            &[
                "eval",
                "--model",
                "mixtral-8x7b",
                "--nodes",
                "8",
                "--tp",
                "8",
                "--pp",
                "1",
                "--global-batch",
                "256",
                "--framework",
                framework,
                "--emit",
                target,
            ],
            &["mixture-of-experts", "--emit megatron"],
        );
    }
}

/// Megatron-Bridge overrides carry the experts, the expert parallelism and the same MoE shape as
/// the Megatron-LM line (DeepSeek-V3: latent attention, shared experts, three dense layers first).
#[test]
fn megatron_bridge_overrides_carry_experts() {
    let emit = |target: &str| {
        let (code, text, stderr) = run(&[
            "eval",
            "--model",
            "deepseek-v3",
            "--nodes",
            "64",
            "--tp",
            "8",
            "--pp",
            "1",
            "--ep",
            "32",
            "--etp",
            "1",
            "--global-batch",
            "256",
            "--seq-len",
            "4096",
            "--emit",
            target,
        ]);
        // The plan is pinned, fitting or not (exit 1): only the written configuration matters.
        assert!(code == 0 || code == 1, "{target}: {stderr}");
        assert!(!text.is_empty(), "{target}: {stderr}");
        text
    };
    let bridge = emit("megatron-bridge");
    let overrides: std::collections::HashMap<&str, &str> = bridge
        .lines()
        .map(|l| {
            l.split_once('=')
                .unwrap_or_else(|| panic!("KEY=VALUE: {l}"))
        })
        .collect();
    let line = emit("megatron");
    let words: Vec<&str> = line.split_whitespace().collect();
    let value_of = |flag: &str| {
        let i = words
            .iter()
            .position(|w| *w == flag)
            .unwrap_or_else(|| panic!("{flag}: {line}"));
        words[i + 1]
    };
    for (key, flag) in [
        ("model.num_moe_experts", "--num-experts"),
        ("model.moe_router_topk", "--moe-router-topk"),
        ("model.moe_ffn_hidden_size", "--moe-ffn-hidden-size"),
        (
            "model.moe_shared_expert_intermediate_size",
            "--moe-shared-expert-intermediate-size",
        ),
        (
            "model.expert_model_parallel_size",
            "--expert-model-parallel-size",
        ),
        (
            "model.expert_tensor_parallel_size",
            "--expert-tensor-parallel-size",
        ),
        ("model.kv_lora_rank", "--kv-lora-rank"),
        ("model.q_lora_rank", "--q-lora-rank"),
        (
            "model.moe_token_dispatcher_type",
            "--moe-token-dispatcher-type",
        ),
    ] {
        assert_eq!(
            overrides.get(key).copied(),
            Some(value_of(flag)),
            "{key}: {bridge}"
        );
    }
    assert_eq!(overrides["model.expert_model_parallel_size"], "32");
    assert_eq!(overrides["model.moe_grouped_gemm"], "true");
    // One entry per layer: the list Megatron's --moe-layer-freq [0]*3+[1]*58 evaluates to.
    let freq: Vec<&str> = overrides["model.moe_layer_freq"]
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .collect();
    assert_eq!(freq.len(), 61);
    assert!(freq[..3].iter().all(|v| *v == "0") && freq[3..].iter().all(|v| *v == "1"));
}

/// DeepSeek-V3's 61 layers interleaved on pp 4 x vp 4: tpsim writes Megatron-Bridge's
/// filled-chunk layout and reads it back to the same plan; a layout it does not model is refused.
#[test]
fn deepseek_v3_pipeline_layout_round_trips() {
    let eval = [
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--tp",
        "1",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--ep",
        "64",
        "--micro-batch",
        "1",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
        "--zero",
        "2",
        "--allow-uneven-pp",
        // As Megatron-Bridge's DeepSeek-V3 recipes recompute (`recompute_modules=["mla_up_proj"]`).
        "--recompute-modules",
        "mla_up_proj",
    ];
    let mut emit = eval.to_vec();
    emit.extend(["--emit", "megatron"]);
    let (code, line, stderr) = run(&emit);
    assert_eq!(code, 0, "{stderr}");
    let layout = format!("'Et*4|{}t*1L'", "t*4|".repeat(14));
    assert!(
        line.contains(&format!("--pipeline-model-parallel-layout {layout}")),
        "{line}"
    );
    assert!(
        !line.contains("--num-layers-per-virtual-pipeline-stage"),
        "{line}"
    );
    let mut json = eval.to_vec();
    json.extend(["--format", "json"]);
    let direct = run_json(&json);
    let pasted = run_json(&[
        "eval",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--megatron-args",
        line.trim(),
        "--format",
        "json",
    ]);
    for key in ["pp", "vpp", "ep", "micro_batch"] {
        assert_eq!(pasted["plan"][key], direct["plan"][key], "{key}");
    }
    assert_eq!(pasted["plan"]["stages"], direct["plan"]["stages"]);
    assert_eq!(pasted["time"]["step_s"], direct["time"]["step_s"]);
    // Megatron's even layout is tpsim's even split.
    let small = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --bf16";
    let even = run_json(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        small,
        "--format",
        "json",
    ]);
    let laid_out = run_json(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        &format!("{small} --pipeline-model-parallel-layout Et*8|t*8|t*8|t*8L"),
        "--format",
        "json",
    ]);
    assert_eq!(laid_out["time"]["step_s"], even["time"]["step_s"]);
    let other = line.replace(&layout, "'Et*20|t*10|t*20|t*11L'");
    assert_error(
        &[
            "eval",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            "64",
            "--gpus-per-node",
            "4",
            "--megatron-args",
            other.trim(),
        ],
        &["--pipeline-model-parallel-layout", "different numbers"],
    );
}

#[test]
fn given_splits_and_mtp_layouts_round_trip_through_megatron_arguments() {
    // A first/last split is written back as first/last arguments, not as the
    // --account-for-* switches that would place 8/9/8 on 30 layers over 4 stages.
    let (code, emitted, stderr) = run(&[
        "eval",
        "--layers",
        "30",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--seq-len",
        "2048",
        "--decoder-first-pipeline-num-layers",
        "9",
        "--decoder-last-pipeline-num-layers",
        "9",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        emitted.contains("--decoder-first-pipeline-num-layers 9")
            && emitted.contains("--decoder-last-pipeline-num-layers 9")
            && !emitted.contains("account-for"),
        "{emitted}"
    );
    // An interleaved layout places the MTP layer before the loss, as Megatron-Core requires.
    let (code, emitted, stderr) = run(&[
        "eval",
        "--layers",
        "61",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--mtp-layers",
        "1",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--allow-uneven-pp",
        "--global-batch",
        "64",
        "--seq-len",
        "2048",
        "--emit",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        emitted.contains("t*1mL'") && emitted.contains("--mtp-num-layers 1"),
        "{emitted}"
    );
    // Megatron-Bridge's layout form with one chunk per stage is read as a given split, with
    // its MTP layer; a layout whose m count differs from --mtp-num-layers is refused.
    const L13: &str = "--num-layers 13 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --global-batch-size 64 --pipeline-model-parallel-size 4 --micro-batch-size 1 --bf16";
    let (code, json, stderr) = eval_line(
        &format!("{L13} --mtp-num-layers 1 --pipeline-model-parallel-layout Et*4|t*4|t*4|t*1mL"),
        &["--nodes", "2"],
    );
    assert_eq!(code, 0, "{stderr}");
    let stages = &json["plans"][0]["stages"];
    assert_eq!((&stages["first"], &stages["last"]), (&4.into(), &1.into()));
    assert_eq!(json["model"]["mtp_layers"], 1);
    assert_error(
        &[
            "eval",
            "--nodes",
            "2",
            "--megatron-args",
            &format!("{L13} --pipeline-model-parallel-layout Et*4|t*4|t*4|t*1mL"),
        ],
        &["1 MTP layer(s)", "--mtp-num-layers 0"],
    );
    // Writers that do not carry MTP refuse it instead of dropping it.
    assert_error(
        &[
            "eval",
            "--layers",
            "30",
            "--hidden",
            "1024",
            "--heads",
            "8",
            "--mtp-layers",
            "1",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
            "--seq-len",
            "2048",
            "--emit",
            "nemo",
        ],
        &["--mtp-layers 1", "--emit megatron"],
    );
}

#[test]
fn a_plan_files_given_split_is_not_carried_to_another_pipeline() {
    let dir = std::env::temp_dir().join(format!("tpsim-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plan.yaml");
    let file = file.to_str().unwrap();
    let (code, _, stderr) = run(&[
        "plan",
        "--layers",
        "30",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "4",
        "--vpp",
        "1",
        "--allow-uneven-pp",
        "--global-batch",
        "64",
        "--seq-len",
        "2048",
        "--save",
        file,
    ]);
    assert_eq!(code, 0, "{stderr}");
    // `plan` with --allow-uneven-pp searched the first/last split and saved it.
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains("stage_split"), "{text}");
    let (code, out, stderr) = run(&["eval", "--plan", file, "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let json: Value = serde_json::from_str(&out).unwrap();
    let stages = &json["plans"][0]["stages"];
    assert_eq!(stages["given"], true);
    let (first, last) = (
        stages["first"].as_u64().unwrap(),
        stages["last"].as_u64().unwrap(),
    );
    // It is at least as fast as tpsim's own split of the same plan.
    let plan = &json["plans"][0];
    let degrees: Vec<String> = ["tp", "dp", "micro_batch"]
        .iter()
        .map(|k| plan[k].to_string())
        .collect();
    let (code, out, stderr) = run(&[
        "eval",
        "--layers",
        "30",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--pp",
        "4",
        "--allow-uneven-pp",
        "--global-batch",
        "64",
        "--seq-len",
        "2048",
        "--tp",
        &degrees[0],
        "--dp",
        &degrees[1],
        "--micro-batch",
        &degrees[2],
        "--recompute",
        plan["recompute"].as_str().unwrap(),
        "--zero",
        &plan["zero"].to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let own: Value = serde_json::from_str(&out).unwrap();
    assert!(
        plan["time"]["step_s"].as_f64().unwrap()
            <= own["plans"][0]["time"]["step_s"].as_f64().unwrap() * (1.0 + 1e-9)
    );
    // The saved split belongs to its pipeline: another --pp is refused, not silently combined.
    assert_error(
        &["eval", "--plan", file, "--pp", "2", "--dp", "4"],
        &["stage_split", &format!("({first}, {last})")],
    );
    // Nor to other layers.
    assert_error(
        &["eval", "--plan", file, "--layers", "34"],
        &["stage_split", "--layers/--mtp-layers"],
    );
    // DeepSpeed's config has no such split: refused rather than dropped (the file's framework,
    // megatron-core, is refused by --emit deepspeed first; tests/hostile_round21.rs).
    assert_error(
        &[
            "eval",
            "--plan",
            file,
            "--emit",
            "deepspeed",
            "--framework",
            "deepspeed",
        ],
        &["first/last stage split", "--emit megatron"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// DeepSeek-V3 without MTP on 256 GB200s at pp 8 × vp 4 (Megatron-Core's DeepSeek-V3 GB200 guide and
/// Megatron-Bridge's performance configs: 'Et|(tt|)*30L', "the last stage is Loss"): 61 layers +
/// embedding + loss are 63 units, which fill 31 chunks of 2 and leave the loss alone in the last.
/// tpsim plans it, writes it in that form, and reads Megatron-Core's spelling back to the same plan.
#[test]
fn deepseek_v3_layout_with_the_loss_alone_in_the_last_chunk_round_trips() {
    let flags = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--tp",
        "2",
        "--sequence-parallel",
        "--etp",
        "1",
        "--pp",
        "8",
        "--vpp",
        "4",
        "--ep",
        "32",
        "--micro-batch",
        "1",
        "--global-batch",
        "4096",
        "--zero",
        "1",
        "--allow-uneven-pp",
    ];
    let read_back = [
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
    ];
    let line = megatron_round_trip(&flags, &read_back);
    let layout = format!("'Et|{}L'", "t*2|".repeat(30));
    assert!(
        line.contains(&format!("--pipeline-model-parallel-layout {layout}")),
        "{line}"
    );
    let mut direct_args = vec!["eval", "--format", "json"];
    direct_args.extend(flags);
    let direct = run_json(&direct_args);
    let grouped = line.replace(&layout, "'Et|(tt|)*30L'");
    let mut pasted_args = vec!["eval", "--format", "json", "--megatron-args", &grouped];
    pasted_args.extend(read_back);
    let pasted = run_json(&pasted_args);
    assert_eq!(pasted["plans"][0]["stages"], direct["plans"][0]["stages"]);
    assert_eq!(
        pasted["plans"][0]["time"]["step_s"],
        direct["plans"][0]["time"]["step_s"]
    );
    // Stage 0: the embedding and chunks of 1 + 2 + 2 + 2 layers; the middle stages 4 chunks of
    // 2; the last 3 chunks of 2 and the loss.
    let stages = &direct["plans"][0]["stages"];
    assert_eq!(
        (&stages["first"], &stages["middle_max"], &stages["last"]),
        (&7.into(), &8.into(), &6.into())
    );
}

/// Megatron-Bridge's DeepSeek-V3 recipe on 1,024 H100s (25.09 `run_script.py`: pp 8 × vp 4 with
/// the layout 'Et|(tt|)*30mL' and the MoE all-to-all overlap): the layout counts the embedding,
/// the MTP layer and the loss as a layer each, is written back in that form, and the overlap hides
/// part of the all-to-alls behind the paired micro-batch's compute.
#[test]
fn deepseek_v3_h100_layout_and_moe_alltoall_overlap_round_trip() {
    let flags = [
        "--model",
        "deepseek-v3",
        "--mtp-layers",
        "1",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "128",
        "--tp",
        "2",
        "--pp",
        "8",
        "--vpp",
        "4",
        "--ep",
        "64",
        "--etp",
        "1",
        "--micro-batch",
        "1",
        "--global-batch",
        "8192",
        "--seq-len",
        "4096",
        "--precision",
        "fp8",
        "--sequence-parallel",
        "--zero",
        "1",
        "--allow-uneven-pp",
        "--overlap-moe-expert-parallel-comm",
        // With it, as the recipe runs it (`set_moe_a2a_overlap_overrides`); the line writes it
        // only where the plan was priced with it (leftovers round 30).
        "--delay-wgrad-compute",
        // The recipe's TP comm overlap is off (Transformer Engine refuses it beside the delayed
        // wgrad, and eval with it: review 27).
        "--tp-comm-overlap",
        "false",
        // The recipe's selective recompute (without it the FP8 router padding's rows leave the
        // plan 1.6 GiB short).
        "--recompute",
        "selective",
        "--recompute-modules",
        "mla_up_proj",
        "mlp",
    ];
    // Read back both ways: as --megatron-args and pasted on eval.
    let line = megatron_round_trip(&flags, &["--gpu", "h100-sxm-80g", "--nodes", "128"]);
    let layout = format!("'Et|{}mL'", "t*2|".repeat(30));
    assert!(
        line.contains(&format!("--pipeline-model-parallel-layout {layout}")),
        "{line}"
    );
    assert!(
        line.contains("--overlap-moe-expert-parallel-comm"),
        "{line}"
    );
    assert!(line.contains("--delay-wgrad-compute"), "{line}");
    let mut direct_args = vec!["eval", "--format", "json"];
    direct_args.extend(flags);
    let direct = run_json(&direct_args);
    // The line reads back to the same plan and step, and so does Megatron-Core's own spelling of
    // the layout.
    let grouped = line.replace(&layout, "'Et|(tt|)*30mL'");
    for written in [&line, &grouped] {
        let pasted = run_json(&[
            "eval",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "128",
            "--megatron-args",
            written,
            "--format",
            "json",
        ]);
        assert_eq!(pasted["plans"][0]["stages"], direct["plans"][0]["stages"]);
        assert_eq!(pasted["training"], direct["training"]);
        assert_eq!(
            pasted["plans"][0]["time"]["step_s"],
            direct["plans"][0]["time"]["step_s"]
        );
    }
    let stages = &direct["plans"][0]["stages"];
    assert_eq!(
        (&stages["first"], &stages["middle_max"], &stages["last"]),
        (&7.into(), &8.into(), &6.into())
    );
    // The overlap hides part of the all-to-alls; without it they are all exposed.
    let terms = |plan: &Value| {
        (
            plan["comm"]["ep"]["time_s"].as_f64().unwrap(),
            plan["time"]["ep_comm_exposed_s"].as_f64().unwrap(),
        )
    };
    let (total, exposed) = terms(&direct["plans"][0]);
    assert!(exposed < 0.6 * total, "{exposed} of {total}");
    let without: Vec<&str> = flags
        .iter()
        .copied()
        .filter(|f| {
            ![
                "--overlap-moe-expert-parallel-comm",
                "--delay-wgrad-compute",
            ]
            .contains(f)
        })
        .collect();
    let mut plain_args = vec!["eval", "--format", "json"];
    plain_args.extend(without.iter().copied());
    let plain = run_json(&plain_args);
    let (plain_total, plain_exposed) = terms(&plain["plans"][0]);
    assert_eq!(plain_total, total);
    assert!(
        plain_exposed >= plain_total,
        "{plain_exposed} of {plain_total}"
    );
    let mut plain_emit = vec!["eval"];
    plain_emit.extend(without.iter().copied());
    plain_emit.extend(["--emit", "megatron"]);
    let (code, plain_line, stderr) = run(&plain_emit);
    assert_eq!(code, 0, "{stderr}");
    assert!(!plain_line.contains("overlap-moe"), "{plain_line}");
    // The combined 1F1B schedule needs virtual stages with a pipeline: without them the flag
    // changes nothing and is not written.
    let mut no_vpp: Vec<&str> = flags.to_vec();
    let at = no_vpp.iter().position(|f| *f == "--vpp").unwrap();
    no_vpp[at + 1] = "1";
    let mut no_vpp_args = vec!["eval", "--format", "json"];
    no_vpp_args.extend(no_vpp.iter().copied());
    let (code, stdout, stderr) = run(&no_vpp_args);
    if code == 0 {
        let (t, e) = terms(&parse_json(&no_vpp_args, &stdout, &stderr)["plans"][0]);
        assert!(e >= t, "{e} of {t}");
    }
}

/// Where Megatron-Core refuses the MoE all-to-all overlap (transformer_config.py), tpsim refuses
/// it when asked for, writes nothing for it, and the header does not claim it; other frameworks
/// have no combined 1F1B schedule.
#[test]
fn moe_alltoall_overlap_is_refused_where_megatron_core_refuses_it() {
    let base = [
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep",
        "8",
        "--global-batch",
        "256",
    ];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = base.to_vec();
        args.extend(extra);
        args
    }
    assert_error(
        &with(
            &base,
            &[
                "--pp",
                "1",
                "--framework",
                "torchtitan",
                "--overlap-moe-expert-parallel-comm",
            ],
        ),
        &[
            "--overlap-moe-expert-parallel-comm",
            "torchtitan",
            "megatron-core",
        ],
    );
    assert_error(
        &with(
            &base,
            &[
                "--pp",
                "1",
                "--recompute",
                "full",
                "--overlap-moe-expert-parallel-comm",
            ],
        ),
        &["--overlap-moe-expert-parallel-comm", "full recompute"],
    );
    let no_ep: Vec<&str> = base
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if i > 0 && base[i - 1] == "--ep" {
                "1"
            } else {
                a
            }
        })
        .collect();
    assert_error(
        &with(&no_ep, &["--pp", "1", "--overlap-moe-expert-parallel-comm"]),
        &["--overlap-moe-expert-parallel-comm", "ep 1"],
    );
    // Without a pipeline the combined schedule holds one more micro-batch's activations.
    let json_of = |args: Vec<&str>| {
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || code == 1, "{stderr}");
        parse_json(&args, &stdout, &stderr)
    };
    let plain = json_of(with(&base, &["--pp", "1", "--format", "json"]));
    let overlapped = json_of(with(
        &base,
        &[
            "--pp",
            "1",
            "--overlap-moe-expert-parallel-comm",
            "--format",
            "json",
        ],
    ));
    let activations = |v: &Value| {
        v["plans"][0]["memory"]["activations_bytes"]
            .as_f64()
            .unwrap()
    };
    assert!(
        activations(&overlapped) > 1.5 * activations(&plain),
        "{} vs {}",
        activations(&overlapped),
        activations(&plain)
    );
    assert!(
        overlapped["plans"][0]["time"]["ep_comm_exposed_s"]
            .as_f64()
            .unwrap()
            < plain["plans"][0]["time"]["ep_comm_exposed_s"]
                .as_f64()
                .unwrap()
    );
    // More than one MTP layer: refused; with a pipeline but no virtual stages the framework
    // default is off, so the plan runs without it.
    let dsv3 = [
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "128",
        "--tp",
        "2",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--ep",
        "64",
        "--etp",
        "1",
        "--global-batch",
        "8192",
        "--sequence-parallel",
        "--allow-uneven-pp",
        "--overlap-moe-expert-parallel-comm",
    ];
    let mut two_mtp = dsv3.to_vec();
    two_mtp.extend(["--mtp-layers", "2"]);
    assert_error(&two_mtp, &["--overlap-moe-expert-parallel-comm", "MTP"]);
    // A launch line that asks for --delay-wgrad-compute alone is refused, as Megatron-Core does.
    let line = "--num-layers 48 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --kv-channels 128 --ffn-hidden-size 6144 --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 --swiglu --seq-length 4096 --global-batch-size 256 --micro-batch-size 1 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --bf16 --delay-wgrad-compute";
    assert_error(
        &["eval", "--nodes", "2", "--megatron-args", line],
        &[
            "--delay-wgrad-compute",
            "--overlap-moe-expert-parallel-comm",
        ],
    );
}

/// With MTP, interleaved uneven splits count the embedding and the loss as a layer each and the
/// MTP layers either as units of the last chunk (when that splits evenly) or on top of it; both
/// are written as a layout and read back to the same plan. A layout that leaves a stage without
/// a transformer layer is refused naming the layout.
#[test]
fn mtp_layouts_with_units_counted_either_way_round_trip() {
    let flags = [
        "--model",
        "llama3-8b",
        "--layers",
        "30",
        "--mtp-layers",
        "1",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--pp",
        "4",
        "--vpp",
        "4",
        "--allow-uneven-pp",
        "--global-batch",
        "64",
    ];
    let mut emit = vec!["eval"];
    emit.extend(flags);
    emit.extend(["--emit", "megatron"]);
    let (code, line, stderr) = run(&emit);
    assert_eq!(code, 0, "{stderr}");
    let layout = format!("'Et|{}tmL'", "t*2|".repeat(14));
    assert!(
        line.contains(&format!("--pipeline-model-parallel-layout {layout}")),
        "{line}"
    );
    let mut direct = vec!["eval", "--format", "json"];
    direct.extend(flags);
    let direct = run_json(&direct);
    let pasted = run_json(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        line.trim(),
        "--format",
        "json",
    ]);
    assert_eq!(pasted["plans"][0]["stages"], direct["plans"][0]["stages"]);
    assert_eq!(
        pasted["plans"][0]["time"]["step_s"],
        direct["plans"][0]["time"]["step_s"]
    );
    let empty_last = line.replace(&layout, "'Et*30|mL'").replace(
        "--pipeline-model-parallel-size 4",
        "--pipeline-model-parallel-size 2",
    );
    assert_error(
        &["eval", "--nodes", "2", "--megatron-args", empty_last.trim()],
        &[
            "--pipeline-model-parallel-layout",
            "last stage without a transformer layer",
        ],
    );
}

/// Launch scripts quote words the shell unquotes: a quoted flag, a quoted value, and a quoted
/// array item holding a flag and its value (Megatron-LM's `examples/llama/
/// train_llama3_8b_h100_fp8.sh`: `"--fp8-format hybrid"`, expanded unquoted) read as the program
/// receives them.
#[test]
fn shell_quotes_in_launch_lines_are_read_as_the_shell_passes_them() {
    let plain = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 64 --tensor-model-parallel-size 2 --bf16 --fp8-format hybrid --fp8-param-gather --use-distributed-optimizer";
    let quoted = "'--num-layers' 32 --hidden-size \"4096\" --num-attention-heads 32 --seq-length 4096 --global-batch-size 64 \"--tensor-model-parallel-size=2\" --bf16 \"--fp8-format hybrid\" \"--fp8-param-gather\" --use-distributed-optimizer";
    let read = |line: &str| {
        run_json(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            line,
            "--format",
            "json",
        ])
    };
    let (a, b) = (read(plain), read(quoted));
    for key in ["tp", "dp", "zero", "precision"] {
        assert!(!b["plans"][0][key].is_null(), "{key}");
        assert_eq!(a["plans"][0][key], b["plans"][0][key], "{key}");
    }
    assert_eq!(b["plans"][0]["tp"], 2);
    assert_eq!(
        a["plans"][0]["time"]["step_s"],
        b["plans"][0]["time"]["step_s"]
    );
    assert_eq!(a["training"], b["training"]);
    assert_eq!(b["plans"][0]["precision"], "fp8");
}
