//! Megatron-Core's selective recompute by module (`--recompute-modules`): what each module frees
//! and runs again, how the search, the launch lines and the plan files carry it, and the inputs
//! it refuses.

mod common;

use common::{assert_one_line_error, json, run, scratch};

/// DeepSeek-V3 on 256 B200 as Megatron-Bridge's recipe runs it (pp 16 with the 4/…/1 split and
/// MTP, ep 8, FP8).
const DSV3_B200: &[&str] = &[
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
    "--zero",
    "1",
    "--global-batch",
    "2048",
    "--seq-len",
    "4096",
    "--decoder-first-pipeline-num-layers",
    "4",
    "--decoder-last-pipeline-num-layers",
    "1",
    "--mtp-layers",
    "1",
    "--precision",
    "fp8",
];

fn with<S: AsRef<str>>(base: &[S], extra: &[&str]) -> Vec<String> {
    base.iter()
        .map(|s| s.as_ref().to_string())
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn plan_of(v: &serde_json::Value) -> &serde_json::Value {
    &v["plans"][0]
}

#[test]
fn mla_up_proj_frees_q_k_v_for_its_up_projections() {
    let none = json(&args(&with(
        DSV3_B200,
        &["--recompute", "none", "--format", "json"],
    )));
    let up = json(&args(&with(
        DSV3_B200,
        &["--recompute-modules", "mla_up_proj", "--format", "json"],
    )));
    let (a, b) = (plan_of(&none), plan_of(&up));
    assert_eq!(b["recompute"], "selective");
    assert_eq!(
        up["training"]["recompute_modules"],
        serde_json::json!(["mla_up_proj"])
    );
    // Q (128 × 192), K (128 × 192) and V (128 × 128) per token and the normed latents (1536 +
    // 512), bf16, 4096 tokens, on the most loaded stage: a middle one (4 MoE layers; the first
    // holds the 3 dense layers), 15 micro-batches in flight there.
    assert_eq!(a["memory"]["stage"], "middle");
    assert_eq!(b["memory"]["stage"], "middle");
    let freed = a["memory"]["activations_bytes"].as_f64().unwrap()
        - b["memory"]["activations_bytes"].as_f64().unwrap();
    let expected = 2.0 * 4096.0 * (24576.0 + 24576.0 + 16384.0 + 1536.0 + 512.0) * 4.0 * 15.0;
    assert!(
        (freed / expected - 1.0).abs() < 0.02,
        "freed {freed:.3e}, expected {expected:.3e}"
    );
    // The up projections run again: slower, more hardware FLOPs, the model FLOPs unchanged.
    let (ta, tb) = (
        a["time"]["step_s"].as_f64().unwrap(),
        b["time"]["step_s"].as_f64().unwrap(),
    );
    assert!(tb > ta && tb < 1.02 * ta, "{ta} -> {tb}");
    let recomputed = b["hardware_tflops_per_gpu"].as_f64().unwrap() * tb
        - a["hardware_tflops_per_gpu"].as_f64().unwrap() * ta;
    assert!(recomputed > 0.0, "{recomputed}");
}

#[test]
fn the_moe_module_repeats_the_token_all_to_alls() {
    let base = with(DSV3_B200, &["--format", "json"]);
    let none = json(&args(&with(&base, &["--recompute", "none"])));
    let moe = json(&args(&with(&base, &["--recompute-modules", "moe"])));
    // Per MoE layer of the stage that sets the step (the two plans' slowest stages can differ).
    let ep = |v: &serde_json::Value| {
        let plan = plan_of(v);
        plan["comm"]["ep"]["wire_bytes"].as_f64().unwrap()
            / plan["slowest_stage_moe_layers"].as_f64().unwrap()
    };
    // Dispatch and combine in forward and backward, and the forward pair again.
    assert!(
        (ep(&moe) / ep(&none) - 1.5).abs() < 1e-9,
        "{} vs {}",
        ep(&moe),
        ep(&none)
    );
    let ledger = &plan_of(&moe)["ledger"];
    let text = ledger.to_string();
    assert!(
        text.contains("recompute") && text.contains("MoE dispatch"),
        "{text}"
    );
    // The whole MoE layer frees more than its activation alone.
    let act = json(&args(&with(&base, &["--recompute-modules", "moe_act"])));
    let activations =
        |v: &serde_json::Value| plan_of(v)["memory"]["activations_bytes"].as_f64().unwrap();
    assert!(activations(&moe) < activations(&act));
    assert!(activations(&act) < activations(&none));
}

#[test]
fn launch_lines_and_plan_files_carry_the_modules() {
    let modules = with(DSV3_B200, &["--recompute-modules", "mla_up_proj,moe_act"]);
    let r = run(&args(&with(&modules, &["--emit", "megatron"])));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(
        line.contains("--recompute-granularity selective --recompute-modules moe_act mla_up_proj"),
        "{line}"
    );
    let direct = json(&args(&with(&modules, &["--format", "json"])));
    let back = json(&[
        "eval",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "32",
        "--megatron-args",
        &line,
        "--format",
        "json",
    ]);
    assert_eq!(
        back["training"]["recompute_modules"],
        serde_json::json!(["moe_act", "mla_up_proj"])
    );
    assert_eq!(
        plan_of(&back)["time"]["step_s"],
        plan_of(&direct)["time"]["step_s"]
    );
    let bridge = run(&args(&with(&modules, &["--emit", "megatron-bridge"])));
    assert_eq!(bridge.code, 0, "{}", bridge.stderr);
    assert!(
        bridge
            .stdout
            .contains("model.recompute_modules=[moe_act,mla_up_proj]"),
        "{}",
        bridge.stdout
    );
    // A flag that says other modules than the line contradicts it; the same ones agree.
    let both = |modules: &str| {
        run(&[
            "eval",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "32",
            "--megatron-args",
            &line,
            "--recompute-modules",
            modules,
        ])
    };
    assert_one_line_error(
        &both("moe"),
        &[
            "--recompute-modules moe",
            "contradicts",
            "moe_act mla_up_proj",
        ],
        &[],
        "flag against line",
    );
    assert_eq!(both("mla_up_proj,moe_act").code, 0);
    // A line with modules but no selective granularity: Megatron-LM ignores them, and says so.
    let ignored = line.replace("--recompute-granularity selective ", "");
    let r = run(&[
        "eval",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "32",
        "--megatron-args",
        &ignored,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("only with --recompute-granularity selective"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_search_recomputes_the_output_discarding_modules_and_saves_them() {
    let dir = scratch("recompute_modules", "search");
    let saved = dir.join("dsv3.yaml");
    let saved_arg = saved.to_str().unwrap();
    let plan = [
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--top",
        "1",
    ];
    let r = run(&args(&with(&plan, &["--save", saved_arg])));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "recompute selective = Megatron-Core modules moe_act, layernorm, mla_up_proj"
        ),
        "{}",
        r.stdout
    );
    let searched = json(&args(&with(&plan, &["--format", "json"])));
    let evaluated = json(&["eval", "--plan", saved_arg, "--format", "json"]);
    assert_eq!(
        plan_of(&evaluated)["time"]["step_s"],
        plan_of(&searched)["time"]["step_s"]
    );
    // `sweep` says the same modules in its JSON.
    let sweep = json(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--axis",
        "nodes",
        "--values",
        "256",
        "--global-batch",
        "4096",
        "--format",
        "json",
    ]);
    assert_eq!(
        sweep["recompute_modules"],
        searched["training"]["recompute_modules"]
    );
    // A dense Llama under Megatron-Core has no such module: selective stays the attention core,
    // which the search skips with fused attention.
    let dense = json(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert!(dense["training"].get("recompute_modules").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn modules_that_cannot_apply_are_refused_with_one_line() {
    let llama = [
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ];
    let cases: [(Vec<String>, &[&str]); 6] = [
        (
            with(&llama, &["--recompute-modules", "attn_proj"]),
            &["'attn_proj'", "core_attn"],
        ),
        (
            with(&llama, &["--recompute-modules", "mla_up_proj"]),
            &["mla_up_proj", "multi_latent_attention"],
        ),
        (
            with(&llama, &["--recompute-modules", "moe_act"]),
            &["moe_act", "dense"],
        ),
        (
            with(
                &llama,
                &[
                    "--recompute-modules",
                    "core_attn",
                    "--framework",
                    "torchtitan",
                ],
            ),
            &["Megatron-Core", "--framework torchtitan"],
        ),
        (
            with(
                &llama,
                &["--recompute-modules", "mlp", "--recompute", "full"],
            ),
            &["--recompute full", "selective"],
        ),
        (
            with(&llama, &["--recompute-modules", "mlp", "--emit", "nemo"]),
            &["NeMo 1.x", "--recompute-modules mlp"],
        ),
    ];
    for (case, needles) in cases {
        let r = run(&args(&case));
        assert_one_line_error(&r, needles, &["panicked"], &case.join(" "));
    }
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--recompute",
        "none",
        "--recompute-modules",
        "moe_act",
    ]);
    assert_one_line_error(&r, &["--recompute none", "selective"], &[], "plan pin");
}

/// tpsim's own `--recompute selective` under Megatron-Core means the output-discarding modules the
/// model has, in `eval` as in `plan`: one pinned plan, one answer. A launch line's selective
/// recompute without modules is Megatron-Core's default, the attention core.
#[test]
fn plan_and_eval_mean_the_same_selective_recompute() {
    let pins = [
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "4",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "512",
        "--tp",
        "2",
        "--pp",
        "1",
        "--cp",
        "1",
        "--sequence-parallel",
        "--ep",
        "8",
        "--etp",
        "1",
        "--micro-batch",
        "2",
        "--zero",
        "1",
        "--recompute",
        "selective",
        "--format",
        "json",
    ];
    let planned = json(&args(&with(&["plan"], &pins)));
    let evaluated = json(&args(&with(&["eval"], &pins)));
    assert_eq!(
        planned["training"]["recompute_modules"],
        serde_json::json!(["moe_act", "layernorm"])
    );
    assert_eq!(
        evaluated["training"]["recompute_modules"],
        planned["training"]["recompute_modules"]
    );
    assert_eq!(
        plan_of(&planned)["time"]["step_s"],
        plan_of(&evaluated)["time"]["step_s"]
    );
    assert_eq!(
        plan_of(&planned)["memory"]["total_bytes"],
        plan_of(&evaluated)["memory"]["total_bytes"]
    );
    // The same plan as a Megatron-LM line that says only "selective": the attention core.
    let line = run(&args(&with(
        &with(&["eval"], &pins[..pins.len() - 2]),
        &["--emit", "megatron"],
    )));
    assert_eq!(line.code, 0, "{}", line.stderr);
    let bare = line
        .stdout
        .trim()
        .replace(" --recompute-modules moe_act layernorm", "");
    let pasted = json(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "4",
        "--megatron-args",
        &bare,
        "--format",
        "json",
    ]);
    assert!(pasted["training"].get("recompute_modules").is_none());
    assert!(
        plan_of(&pasted)["memory"]["activations_bytes"]
            .as_f64()
            .unwrap()
            > plan_of(&evaluated)["memory"]["activations_bytes"]
                .as_f64()
                .unwrap()
    );
}

#[test]
fn what_megatron_core_refuses_of_the_modules_is_refused() {
    let eval = with(DSV3_B200, &[]);
    // The MoE all-to-all overlap cannot run while the MoE layer is recomputed.
    let r = run(&args(&with(
        &eval,
        &[
            "--recompute-modules",
            "moe",
            "--overlap-moe-expert-parallel-comm",
        ],
    )));
    assert_one_line_error(
        &r,
        &["--overlap-moe-expert-parallel-comm", "moe"],
        &[],
        "a2a overlap",
    );
    // A plan file recomputing fully, given modules: selective with them, as without a file.
    let dir = scratch("recompute_modules", "file");
    let file = dir.join("full.yaml");
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--global-batch",
        "256",
        "--recompute",
        "full",
        "--top",
        "1",
        "--save",
        file.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let from_file = json(&[
        "eval",
        "--plan",
        file.to_str().unwrap(),
        "--recompute-modules",
        "moe_act",
        "--format",
        "json",
    ]);
    assert_eq!(plan_of(&from_file)["recompute"], "selective");
    // A hand-edited plan file with a module Megatron-Core does not have: exit 2, naming the key.
    // (`plan --save` writes no modules for this full-recompute plan; the edit adds them.)
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("\nrecompute_modules:"), "{text}");
    let edited = dir.join("edited.yaml");
    std::fs::write(&edited, format!("recompute_modules:\n- attn_proj\n{text}")).unwrap();
    let r = run(&["eval", "--plan", edited.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &["recompute_modules", "'attn_proj'", "core_attn"],
        &["panicked"],
        "edited plan file",
    );
    let _ = std::fs::remove_dir_all(&dir);
    // Launch lines Megatron-LM refuses.
    let r = run(&args(&with(
        &eval,
        &["--recompute-modules", "moe_act", "--emit", "megatron"],
    )));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    let pasted = |line: &str| {
        run(&[
            "eval",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "32",
            "--megatron-args",
            line,
        ])
    };
    for (bad, needles) in [
        (
            line.replace("--moe-grouped-gemm", ""),
            &["moe_act", "--moe-grouped-gemm"][..],
        ),
        (
            line.replace(
                "--recompute-modules moe_act",
                "--recompute-modules moe_act,layernorm",
            ),
            &["separate words"][..],
        ),
        (
            line.replace("--fp8-recipe tensorwise", "--fp8-recipe delayed"),
            &["delayed scaling", "moe_act"][..],
        ),
    ] {
        assert_ne!(bad, line, "the test's line changed: {line}");
        let r = pasted(&bad);
        assert_one_line_error(&r, needles, &["panicked"], &bad);
    }
}
