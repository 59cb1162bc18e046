//! Regressions from the fourteenth review of valid usage by a new user: an ML infrastructure
//! engineer plans Llama 3, Qwen3 MoE and DeepSeek-V3 on H100 and GB200, carries the winners to
//! `--emit megatron|megatron-bridge|nemo`, pastes the lines back with `--megatron-args`, reads
//! Hugging Face configs, and plans torchtitan MoE runs with HSDP (each test names the finding).

mod common;
use common::{assert_one_line_error, json, run, run_in, scratch};

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// `--emit megatron` for Llama 3 70B wrote no `--rotary-base`, so the line trained at
/// Megatron-LM's default base 10000 (arguments.py: `--rotary-base`, type=int, default=10000)
/// instead of Llama 3's 500000 (params.json rope_theta; Herd paper §3.2); Megatron-Bridge's
/// overrides and NeMo's fragment said nothing of it either (GPTModelProvider.rotary_base and
/// NeMo 1.x's `cfg.get('rotary_base', 10000)` default to 10000). All three now carry it.
#[test]
fn llama3_configs_carry_the_rotary_base() {
    let base = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
    ];
    let emit = |target: &'static str| {
        let mut args = base.to_vec();
        args.extend(["--emit", target]);
        stdout_of(&args)
    };
    let megatron = emit("megatron");
    assert!(megatron.contains(" --rotary-base 500000 "), "{megatron}");
    let bridge = emit("megatron-bridge");
    assert!(
        bridge.lines().any(|l| l == "model.rotary_base=500000"),
        "{bridge}"
    );
    let nemo = emit("nemo");
    assert!(
        nemo.lines().any(|l| l.trim() == "rotary_base: 500000"),
        "{nemo}"
    );
    // The bundled MoE models carry theirs too (Mixtral: config.json rope_theta 1000000).
    let mixtral = [
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--emit",
        "megatron",
    ];
    assert!(stdout_of(&mixtral).contains(" --rotary-base 1000000 "));
    // A model at the frameworks' default (Mistral 7B v0.1: rope_theta 10000) says nothing on
    // Megatron-LM's line, and Megatron-Bridge still writes it, over whatever the recipe it lands
    // on sets.
    let mistral = [
        "plan",
        "--hf-config",
        "models/hf/mistral-7b-v0.1.json",
        "--nodes",
        "8",
        "--global-batch",
        "512",
        "--emit",
    ];
    let mut args = mistral.to_vec();
    args.push("megatron");
    assert!(!stdout_of(&args).contains("--rotary-base"));
    let mut args = mistral.to_vec();
    args.push("megatron-bridge");
    assert!(
        stdout_of(&args)
            .lines()
            .any(|l| l == "model.rotary_base=10000")
    );
    // Learned positions rotate nothing: no base anywhere.
    let gpt3 = ["plan", "--model", "gpt3-175b", "--nodes", "32", "--emit"];
    for target in ["megatron", "megatron-bridge", "nemo"] {
        let mut args = gpt3.to_vec();
        args.push(target);
        assert!(!stdout_of(&args).contains("rotary_base"), "{target}");
    }
}

/// The emitted Llama 3 line pasted back through `--megatron-args` reads `--rotary-base` into the
/// model (it was "skipped" as changing nothing, and the line `eval --emit megatron` wrote from it
/// lost the base again).
#[test]
fn megatron_line_round_trips_the_rotary_base() {
    let line = stdout_of(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "128",
        "--emit",
        "megatron",
    ]);
    let line = line.lines().last().unwrap().to_string();
    assert!(line.contains("--rotary-base 500000"), "{line}");
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &line,
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("--rotary-base"), "{}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["model"]["rotary_base"], 500000.0, "{}", out["model"]);
    let again = stdout_of(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &line,
        "--emit",
        "megatron",
    ]);
    assert!(again.contains("--rotary-base 500000"), "{again}");
    // Megatron-LM reads it as an integer: 5e5 is refused there, and here in one line.
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &line.replace("500000", "5e5"),
    ]);
    assert_one_line_error(
        &r,
        &["--rotary-base \"5e5\"", "integer"],
        &[],
        "--rotary-base 5e5",
    );
}

/// A Hugging Face config's `rope_theta` (top level, or inside transformers 5's
/// `rope_parameters`) becomes the model's rotary base and reaches `--emit`; one the integer
/// field cannot take is refused naming the key.
#[test]
fn hf_rope_theta_reaches_the_emitted_line() {
    let out = json(&[
        "eval",
        "--hf-config",
        "models/hf/llama-3-8b.json",
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
    assert_eq!(out["model"]["rotary_base"], 500000.0, "{}", out["model"]);
    let line = stdout_of(&[
        "plan",
        "--hf-config",
        "models/hf/llama-3-8b.json",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--emit",
        "megatron",
    ]);
    assert!(line.contains("--rotary-base 500000"), "{line}");

    let dir = scratch("new_user14", "rope-theta");
    let shape = common::HF_SHAPE;
    let write = |name: &str, extra: &str| {
        std::fs::write(
            dir.join(name),
            format!(r#"{{"model_type": "llama", {shape}, {extra}}}"#),
        )
        .unwrap();
    };
    let eval = |name: &str| {
        run_in(
            &dir,
            &[
                "eval",
                "--hf-config",
                name,
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
                "--global-batch",
                "64",
                "--format",
                "json",
            ],
        )
    };
    write(
        "nested.json",
        r#""rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}"#,
    );
    let r = eval("nested.json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let model: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(model["model"]["rotary_base"], 1000000.0);
    write("default.json", r#""rope_theta": 10000.0"#);
    let r = eval("default.json");
    let model: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        model["model"].get("rotary_base").is_none(),
        "{}",
        model["model"]
    );
    write("half.json", r#""rope_theta": 0.5"#);
    assert_one_line_error(
        &eval("half.json"),
        &["rope_theta", "0.5", "whole number"],
        &[],
        "rope_theta 0.5",
    );
}

/// A model file's `rotary_base` is checked like `rotary_percent`: a whole number, for rotary
/// positions only.
#[test]
fn model_file_rotary_base_is_checked() {
    let dir = scratch("new_user14", "model-file");
    let llama = std::fs::read_to_string(format!("{}/models/llama3-8b.yaml", common::ROOT)).unwrap();
    let save = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).unwrap();
        run_in(
            &dir,
            &[
                "eval", "--model", name, "--nodes", "1", "--tp", "8", "--pp", "1",
            ],
        )
    };
    let r = save(
        "frac.yaml",
        llama.replace("rotary_base: 500000", "rotary_base: 500000.5"),
    );
    assert_one_line_error(
        &r,
        &["rotary_base 500000.5", "whole number"],
        &[],
        "fractional base",
    );
    let r = save(
        "alibi.yaml",
        llama.replace(
            "position_embedding_type: rope",
            "position_embedding_type: alibi",
        ),
    );
    assert_one_line_error(
        &r,
        &["rotary_base 500000", "rotates nothing"],
        &[],
        "alibi base",
    );
}

/// `eval --framework torchtitan` with HSDP copies on an MoE model refused with Megatron-Core's
/// rule ("Megatron-Core splits them into the same number of copies (parallel_state.py ...)"),
/// which torchtitan does not have; it now names torchtitan's own (ep must divide dp_shard x cp x
/// tp), while Megatron-Core plans keep theirs.
#[test]
fn torchtitan_hsdp_with_experts_is_refused_in_torchtitan_words() {
    let base = [
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--pp",
        "1",
        "--ep",
        "8",
        "--etp",
        "1",
        "--dp-replicas",
        "4",
        "--global-batch",
        "512",
    ];
    let mut args = base.to_vec();
    args.extend(["--framework", "torchtitan", "--zero", "3"]);
    assert_one_line_error(
        &run(&args),
        &[
            "--ep 8 under --framework torchtitan",
            "dp_shard x cp x tp",
            "drop --dp-replicas",
        ],
        &["Megatron-Core", "num_distributed_optimizer_instances"],
        "torchtitan HSDP with ep 8",
    );
    let mut args = base.to_vec();
    args.extend(["--framework", "megatron-core", "--zero", "1"]);
    assert_one_line_error(
        &run(&args),
        &[
            "Megatron-Core splits them",
            "num_distributed_optimizer_instances",
        ],
        &[],
        "megatron-core copies with ep 8",
    );
}

/// torchtitan removed expert tensor parallelism (#3167, "[MoE][4/n] deprecate expert tensor
/// parallel (ETP)": no `expert_tensor_parallel_degree`, and parallel_dims.py's EP mesh is
/// `dp_shard * cp * tp // ep` whatever the TP), yet tpsim still evaluated etp = tp under
/// `--framework torchtitan`, and `eval` defaulted --etp to --tp there. Now etp 1 is the only
/// degree torchtitan runs, and `eval`'s default follows it.
#[test]
fn torchtitan_runs_no_expert_tensor_parallelism() {
    let base = [
        "eval",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--framework",
        "torchtitan",
        "--tp",
        "2",
        "--pp",
        "1",
        "--ep",
        "8",
        "--zero",
        "3",
        "--global-batch",
        "512",
    ];
    let mut args = base.to_vec();
    args.extend(["--etp", "2"]);
    assert_one_line_error(
        &run(&args),
        &[
            "--etp 2 with --tp 2 under --framework torchtitan",
            "#3167",
            "use --etp 1",
        ],
        &["or --etp 2"],
        "torchtitan etp = tp",
    );
    let mut args = base.to_vec();
    args.extend(["--format", "json"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("--etp"), "{}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["plans"][0]["etp"], 1, "{}", out["plans"][0]);
    // EP draws on the TP ranks too: ep 16 over dp_shard 8 x tp 2 runs.
    let mut args = base.to_vec();
    args[12] = "16";
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The README pastes `--emit megatron`'s line back as `eval` flags ("reads back to the same
/// plan"); with the rotary base on Llama 3's line, and `--rotary-percent` on any partial-rotary
/// model's (GPT-NeoX 20B: 0.25), `eval` stopped at "unexpected argument". Both read as
/// Megatron-LM's names now, into the model, and the line evaluates to the plan's step time.
#[test]
fn emitted_rotary_flags_paste_back_as_eval_flags() {
    for (config, nodes, want) in [
        ("models/hf/llama-3-70b.json", "16", "--rotary-base 500000"),
        ("models/hf/gpt-neox-20b.json", "2", "--rotary-percent 0.25"),
    ] {
        let plan = [
            "plan",
            "--hf-config",
            config,
            "--nodes",
            nodes,
            "--global-batch",
            "256",
        ];
        let mut args = plan.to_vec();
        args.extend(["--emit", "megatron"]);
        let line = stdout_of(&args);
        assert!(line.contains(want), "{line}");
        let mut args = plan.to_vec();
        args.extend(["--top", "1", "--format", "json"]);
        let best = json(&args)["plans"][0]["time"]["step_s"].as_f64().unwrap();
        let mut args = vec!["eval", "--nodes", nodes, "--format", "json"];
        args.extend(line.split_whitespace());
        let out = json(&args);
        let step = out["plans"][0]["time"]["step_s"].as_f64().unwrap();
        assert!(
            (step - best).abs() < 1e-9 * best,
            "{config}: {step} vs {best}"
        );
        let model = &out["model"];
        match want {
            "--rotary-base 500000" => assert_eq!(model["rotary_base"], 500000.0, "{model}"),
            _ => assert_eq!(model["rotary_percent"], 0.25, "{model}"),
        }
    }
    // Over a named model they are refused like the other block-style flags, not dropped.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--rotary-base",
        "1000000",
    ]);
    assert_one_line_error(
        &r,
        &["--rotary-base", "already fixes it"],
        &[],
        "--rotary-base over a model",
    );
}
