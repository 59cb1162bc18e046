//! Layers kept in bf16 under low-precision training: Megatron-Core's `--first-last-layers-bf16`
//! with `--num-layers-at-start-in-bf16` / `--num-layers-at-end-in-bf16` (`fp8_utils.get_fp8_context`,
//! `fp4_utils.get_fp4_context`: a layer at the ends of the stack runs under a null context), and
//! the MTP layers under NVFP4, which Megatron-Core gives no FP4 context
//! (`multi_token_prediction.py`). NVIDIA's NVFP4 recipe for Nemotron 3 Super keeps its last 14
//! of 88 layers in bf16 (Megatron-Bridge `nemotron_3_super_bf16_with_nvfp4_mixed`).

mod common;

use common::*;
use serde_json::Value;

/// Llama 3 70B at tp 2 × pp 4 on 32 B200s, FP8 with sequence parallelism, and `extra`.
const LLAMA_PP4: [&str; 26] = [
    "eval",
    "--model",
    "llama3-70b",
    "--gpu",
    "b200-sxm-180g",
    "--nodes",
    "4",
    "--global-batch",
    "256",
    "--seq-len",
    "8192",
    "--tp",
    "2",
    "--pp",
    "4",
    "--micro-batch",
    "1",
    "--recompute",
    "none",
    "--zero",
    "1",
    "--precision",
    "fp8",
    "--sequence-parallel",
    "--format",
    "json",
];

fn llama_pp4(extra: &[&str]) -> Value {
    let mut args = LLAMA_PP4.to_vec();
    args.extend(extra);
    json(&args)
}

fn plan0(v: &Value) -> &Value {
    &v["plans"][0]
}

fn step_s(v: &Value) -> f64 {
    plan0(v)["time"]["step_s"].as_f64().unwrap()
}

/// Nemotron 3 Super on 64 GB300s at `precision` with its two MTP depths, and `extra`.
fn super_at(precision: &str, extra: &[&str]) -> Value {
    let mut flags = vec!["--mtp-layers", "2"];
    flags.extend(extra);
    let plan: Vec<&str> = SUPER_GB300_PLAN
        .iter()
        .copied()
        .map(|a| if a == "mxfp8" { precision } else { a })
        .collect();
    let mut args = vec!["eval", "--model", "nemotron-3-super-120b-a12b"];
    args.extend(&flags);
    args.extend(plan);
    args.extend(["--format", "json"]);
    json(&args)
}

#[test]
fn the_whole_stack_in_bf16_prices_as_a_bf16_run() {
    // Every layer kept in bf16 (the MTP layers are under NVFP4 already) leaves nothing of the
    // layers at NVFP4: the step is the bf16 run's, but for the data-parallel terms, which gather and
    // reduce the parameters as the NVFP4 plan keeps them.
    let bf16 = super_at("bf16", &[]);
    let all = super_at(
        "nvfp4",
        &[
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            "0",
            "--num-layers-at-end-in-bf16",
            "88",
        ],
    );
    let plain = super_at("nvfp4", &[]);
    let compute = |v: &Value| plan0(v)["time"]["compute_s"].as_f64().unwrap();
    let (b, a, p) = (compute(&bf16), compute(&all), compute(&plain));
    assert!((a / b - 1.0).abs() < 1e-9, "all-bf16 {a} against bf16 {b}");
    assert!(p < 0.85 * b, "nvfp4 {p} against bf16 {b}");
    // Memory too: no quantized copies or saved inputs are left.
    let memory = |v: &Value, field: &str| plan0(v)["memory"][field].as_f64().unwrap();
    for field in ["weights_bytes", "activations_bytes", "total_bytes"] {
        let (b, a, p) = (
            memory(&bf16, field),
            memory(&all, field),
            memory(&plain, field),
        );
        assert!(
            (a / b - 1.0).abs() < 1e-9,
            "{field}: all-bf16 {a} against bf16 {b}"
        );
        assert!(p < b, "{field}: nvfp4 {p} against bf16 {b}");
    }
}

#[test]
fn nvfp4_runs_the_mtp_layers_in_bf16_and_mxfp8_does_not() {
    // With the 88 decoder layers in bf16, what is left at the plan's precision is the two MTP
    // depths: under NVFP4 they are bf16 too (the MTP block's own layers 0 and 1 take
    // get_fp4_context, which the last 88 cover), under MXFP8 they are not (the FP8 context wraps
    // the whole block).
    let end_88 = [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "0",
        "--num-layers-at-end-in-bf16",
        "88",
    ];
    let compute = |v: &Value| plan0(v)["time"]["compute_s"].as_f64().unwrap();
    let bf16 = compute(&super_at("bf16", &[]));
    let nvfp4 = compute(&super_at("nvfp4", &end_88));
    let mxfp8 = compute(&super_at("mxfp8", &end_88));
    assert!((nvfp4 / bf16 - 1.0).abs() < 1e-9, "{nvfp4} against {bf16}");
    // Two MTP depths of 90 layers at MXFP8: a few tenths of a percent faster.
    assert!(mxfp8 < bf16 * 0.999, "{mxfp8} against {bf16}");
    let text = run(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--mtp-layers",
        "2",
        "--gpu",
        "gb300-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "512",
        "--precision",
        "nvfp4",
        "--ep",
        "64",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
        "--zero",
        "1",
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "0",
        "--num-layers-at-end-in-bf16",
        "88",
    ]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains(
            "by --first-last-layers-bf16, and the MTP block, whose own layers the counts cover"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn bf16_layers_slow_the_stages_that_hold_them_and_say_so() {
    let plain = llama_pp4(&[]);
    let kept = llama_pp4(&[
        "--first-last-layers-bf16",
        "--num-layers-at-end-in-bf16",
        "4",
    ]);
    // 4 of the last stage's 20 layers and 1 of the first's run their GEMMs at bf16: the step,
    // paced by the slowest stage, is slower, by less than a fifth of the stage's layers would make it.
    let (a, b) = (step_s(&plain), step_s(&kept));
    assert!(b > a * 1.03 && b < a * 1.2, "{a} -> {b}");
    assert_eq!(
        kept["training"]["bf16_layers"],
        serde_json::json!({"at_start": 1, "at_end": 4})
    );
    assert!(plain["training"].get("bf16_layers").is_none());
    // The ledger lists the bf16 layers' sequence-parallel gathers apart, at bf16's size, and its
    // TP bytes are the estimate's.
    let ledger = &plan0(&kept)["ledger"];
    let entries = ledger["entries"].as_array().unwrap();
    let tp_wire: f64 = entries
        .iter()
        .filter(|e| e["group"] == "tp")
        .map(|e| e["wire_bytes"].as_f64().unwrap() * e["count"].as_f64().unwrap())
        .sum();
    let estimate = plan0(&kept)["comm"]["tp"]["wire_bytes"].as_f64().unwrap();
    assert!(
        (tp_wire / estimate - 1.0).abs() < 1e-9,
        "{tp_wire} vs {estimate}"
    );
    let gather = |bf16: bool| {
        entries
            .iter()
            .find(|e| {
                e["group"] == "tp"
                    && e["op"] == "all_gather"
                    && e["pass"] == "forward"
                    && e.get("bf16_layers").is_some() == bf16
            })
            .map(|e| e["tensor_bytes"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no forward gather with bf16_layers {bf16}: {ledger}"))
    };
    assert_eq!(gather(true), 2.0 * gather(false));
    assert!(
        plan0(&plain)["comm"]["tp"]["wire_bytes"].as_f64().unwrap() < estimate,
        "bf16 gathers carry more bytes"
    );
}

#[test]
fn bf16_layers_reaching_a_middle_stage_price_it_on_its_own() {
    // vpp 5 on pp 4: chunks of 4 layers; the last 6 layers fill the last stage's last chunk and 2
    // of stage 2's. Stage 2 is slower than before but not the slowest: the step is the one with the
    // last 4 in bf16. With the last 20 (one chunk on every stage), every stage is slower.
    let base = [
        "--vpp",
        "5",
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "0",
        "--num-layers-at-end-in-bf16",
    ];
    let with = |n: &'static str| {
        let mut extra = base.to_vec();
        extra.push(n);
        step_s(&llama_pp4(&extra))
    };
    let none = step_s(&llama_pp4(&["--vpp", "5"]));
    let (four, six, twenty) = (with("4"), with("6"), with("20"));
    assert!(four > none * 1.03, "{none} -> {four}");
    assert!((six / four - 1.0).abs() < 0.002, "{four} vs {six}");
    assert!(twenty > six * 1.03, "{six} -> {twenty}");
}

#[test]
fn a_saved_plan_keeps_its_bf16_layers() {
    let dir = scratch("bf16-layers", "saved");
    let file = dir.join("plan.yaml");
    let file = file.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
        "--pp",
        "4",
        "--tp",
        "2",
        "--first-last-layers-bf16",
        "--num-layers-at-end-in-bf16",
        "4",
        "--save",
        file,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(file).unwrap();
    assert!(saved.contains("bf16_layers:"), "{saved}");
    assert!(saved.contains("at_end: 4"), "{saved}");
    let v = json(&["eval", "--plan", file, "--format", "json"]);
    assert_eq!(
        v["training"]["bf16_layers"],
        serde_json::json!({"at_start": 1, "at_end": 4})
    );
}

#[test]
fn bf16_layers_that_cannot_apply_are_refused_in_one_line() {
    let eval = |extra: &[&str]| {
        let mut args = LLAMA_PP4.to_vec();
        args.extend(extra);
        run(&args)
    };
    assert_one_line_error(
        &eval(&["--num-layers-at-end-in-bf16", "4"]),
        &["--num-layers-at-end-in-bf16 4", "--first-last-layers-bf16"],
        &[],
        "a count without the switch",
    );
    assert_one_line_error(
        &eval(&[
            "--first-last-layers-bf16",
            "--num-layers-at-end-in-bf16",
            "21",
        ]),
        &[
            "--num-layers-at-end-in-bf16 21",
            "--pp 4",
            "20 of 80",
            "20 or fewer",
        ],
        &[],
        "more than a stage's layers under FP8",
    );
    assert_one_line_error(
        &eval(&["--first-last-layers-bf16", "--fp8-scaling", "delayed"]),
        &["--fp8-scaling delayed", "--fp8-scaling current"],
        &[],
        "delayed scaling",
    );
    assert_one_line_error(
        &eval(&["--first-last-layers-bf16", "--framework", "torchtitan"]),
        &[
            "--first-last-layers-bf16",
            "--framework torchtitan",
            "megatron-core",
        ],
        &[],
        "another framework",
    );
    assert_one_line_error(
        &eval(&[
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            "0",
            "--num-layers-at-end-in-bf16",
            "0",
        ]),
        &["keeps no layer in bf16"],
        &[],
        "nothing kept",
    );
    let bf16 = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--tp",
        "8",
        "--first-last-layers-bf16",
    ]);
    assert_one_line_error(
        &bf16,
        &[
            "--first-last-layers-bf16",
            "already bf16",
            "--precision fp8",
        ],
        &[],
        "a bf16 run",
    );
}

/// `eval` of the Llama 3 70B plan with its last 4 layers in bf16 and `extra`, as text.
fn llama_pp4_text(extra: &[&str]) -> Run {
    let mut args: Vec<&str> = LLAMA_PP4
        .iter()
        .copied()
        .filter(|a| *a != "--format" && *a != "json")
        .collect();
    args.extend([
        "--first-last-layers-bf16",
        "--num-layers-at-end-in-bf16",
        "4",
    ]);
    args.extend(extra);
    run(&args)
}

#[test]
fn the_launch_configs_write_the_bf16_layers_and_read_them_back() {
    let line = llama_pp4_text(&["--emit", "megatron"]);
    assert_eq!(line.code, 0, "{}", line.stderr);
    assert!(
        line.stdout.contains(
            "--first-last-layers-bf16 --num-layers-at-start-in-bf16 1 --num-layers-at-end-in-bf16 4"
        ),
        "{}",
        line.stdout
    );
    let args: String = line
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let read = json(&[
        "eval",
        "--megatron-args",
        &args,
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--format",
        "json",
    ]);
    let direct = llama_pp4(&[
        "--first-last-layers-bf16",
        "--num-layers-at-end-in-bf16",
        "4",
    ]);
    assert_eq!(
        read["training"]["bf16_layers"],
        direct["training"]["bf16_layers"]
    );
    assert!((step_s(&read) / step_s(&direct) - 1.0).abs() < 1e-9);
    // Counts without the switch change nothing in Megatron-Core: read as none, with a note.
    let without = run(&[
        "eval",
        "--megatron-args",
        &args.replace("--first-last-layers-bf16 ", ""),
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
    ]);
    assert_eq!(without.code, 0, "{}", without.stderr);
    assert!(
        without
            .stderr
            .contains("ignored without --first-last-layers-bf16"),
        "{}",
        without.stderr
    );
    assert!(
        !without
            .stdout
            .contains("in bf16 by --first-last-layers-bf16")
    );

    let bridge = llama_pp4_text(&["--emit", "megatron-bridge"]);
    assert_eq!(bridge.code, 0, "{}", bridge.stderr);
    for key in [
        "mixed_precision.first_last_layers_bf16=true",
        "mixed_precision.num_layers_at_start_in_bf16=1",
        "mixed_precision.num_layers_at_end_in_bf16=4",
    ] {
        assert!(bridge.stdout.contains(key), "{key}: {}", bridge.stdout);
    }
    let mut plain: Vec<&str> = LLAMA_PP4
        .iter()
        .copied()
        .filter(|a| *a != "--format" && *a != "json")
        .collect();
    plain.extend(["--emit", "megatron-bridge"]);
    let plain = run(&plain);
    assert!(
        plain
            .stdout
            .contains("mixed_precision.first_last_layers_bf16=false"),
        "{}",
        plain.stdout
    );
    assert!(!plain.stdout.contains("num_layers_at_end_in_bf16"));

    // NeMo 1.x's FP8 is delayed scaling, which Megatron-Core refuses with bf16 layers.
    assert_one_line_error(
        &llama_pp4_text(&["--emit", "nemo"]),
        &[
            "--emit nemo",
            "--first-last-layers-bf16",
            "--emit megatron-bridge",
        ],
        &["--fp8-scaling delayed"],
        "nemo",
    );
}

#[test]
fn a_plan_file_cannot_keep_the_mtp_layers_in_bf16_by_hand() {
    // `mtp: true` is what a quantization recipe file keeps (the accuracy runner's recipes): no flag
    // sets it and no launch config tpsim writes could carry it, so a plan file's is refused.
    let dir = scratch("bf16-layers", "mtp");
    let file = dir.join("plan.yaml");
    let saved = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
        "--first-last-layers-bf16",
        "--save",
        file.to_str().unwrap(),
    ]);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("at_end: 1"), "{text}");
    std::fs::write(&file, text.replace("at_end: 1", "at_end: 1\n  mtp: true")).unwrap();
    assert_one_line_error(
        &run(&["eval", "--plan", file.to_str().unwrap()]),
        &["mtp: true", "remove mtp"],
        &[],
        "mtp by hand",
    );
}

/// Nemotron 3 Super (2 MTP depths) on 64 GB300s at tp 1 × ep 64 in `precision`, its modules at
/// `modules`: the step time and the compute.
fn super_with_modules(
    precision: tpsim::plan::Precision,
    modules: tpsim::training::ModulePrecision,
) -> (f64, f64) {
    use tpsim::plan::{ParallelPlan, PlanRequest, Recompute};
    use tpsim::training::{AttentionKernel, Training, TrainingFramework};
    let mut model = tpsim::specs::load_model("nemotron-3-super-120b-a12b").unwrap();
    model.mtp_layers = 2;
    let cluster = tpsim::cluster::Cluster {
        gpu: tpsim::specs::load_gpu("gb300-nvl72").unwrap(),
        nodes: 16,
        gpus_per_node: 4,
    };
    let mut training = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        512,
        AttentionKernel::Flash,
    );
    training.module_precision = modules;
    let request = PlanRequest {
        tp: 1,
        pp: 1,
        dp: 64,
        ep: 64,
        micro_batch: 1,
        recompute: Recompute::None,
        zero: 1,
        precision,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let e = tpsim::cost::evaluate(&model, &cluster, &training, &plan);
    (e.time.step_s.0, e.time.compute_s.0)
}

#[test]
fn a_quantization_recipes_modules_run_at_their_own_precision() {
    use tpsim::plan::Precision::{Bf16, Mxfp8, Nvfp4};
    use tpsim::training::ModulePrecision;
    let plain = super_with_modules(Nvfp4, ModulePrecision::NONE);
    // Overrides to the plan's own precision change nothing.
    let same = super_with_modules(
        Nvfp4,
        ModulePrecision {
            attention_linears: Some(Nvfp4),
            latent_projections: Some(Nvfp4),
            mamba_out_proj: Some(Nvfp4),
        },
    );
    assert_eq!(plain, same);
    // Megatron-Bridge's te_quant.cfg: attention linears and latent projections bf16, the Mamba
    // out_proj MXFP8 — each slower than NVFP4, so each override adds time, and together more.
    let each = [
        ModulePrecision {
            attention_linears: Some(Bf16),
            ..ModulePrecision::NONE
        },
        ModulePrecision {
            latent_projections: Some(Bf16),
            ..ModulePrecision::NONE
        },
        ModulePrecision {
            mamba_out_proj: Some(Mxfp8),
            ..ModulePrecision::NONE
        },
    ]
    .map(|m| super_with_modules(Nvfp4, m).1 - plain.1);
    for (i, extra) in each.iter().enumerate() {
        assert!(*extra > 0.0, "override {i} adds {extra} s");
    }
    let recipe = ModulePrecision {
        attention_linears: Some(Bf16),
        latent_projections: Some(Bf16),
        mamba_out_proj: Some(Mxfp8),
    };
    let all = super_with_modules(Nvfp4, recipe).1 - plain.1;
    assert!(
        (all / each.iter().sum::<f64>() - 1.0).abs() < 1e-6,
        "{all} vs {each:?}"
    );
    // Inside a bf16 plan an override changes nothing (Transformer Engine's overrides apply to
    // modules that would run quantized).
    assert_eq!(
        super_with_modules(Bf16, recipe),
        super_with_modules(Bf16, ModulePrecision::NONE)
    );
}

#[test]
fn fp8_parameter_gathers_move_the_bf16_layers_in_bf16() {
    // Megatron-Core builds the layers kept in bf16 outside `fp8_model_init`: under FP8 parameter
    // gather their weights are gathered in bf16, one byte a parameter more than the others.
    let gather = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "llama3-70b",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--seq-len",
            "8192",
            "--tp",
            "4",
            "--pp",
            "1",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
            "--zero",
            "1",
            "--precision",
            "fp8",
            "--sequence-parallel",
            "--format",
            "json",
        ];
        args.extend(extra);
        let v = json(&args);
        assert_eq!(v["training"]["fp8_param_gather"], true);
        plan0(&v)["ledger"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["group"] == "dp" && e["op"] == "all_gather")
            .map(|e| e["tensor_bytes"].as_f64().unwrap())
            .unwrap()
    };
    let (none, eight) = (
        gather(&[]),
        gather(&[
            "--first-last-layers-bf16",
            "--num-layers-at-end-in-bf16",
            "8",
        ]),
    );
    // Llama 3 70B: 80 layers of 856M parameters; 9 of them (the first, Megatron-Core's default
    // start count, and the last 8) a byte more each, over tp 4.
    let layer_params = 856e6 / 4.0;
    let extra = eight - none;
    assert!(
        (extra / (9.0 * layer_params) - 1.0).abs() < 0.02,
        "{none} -> {eight}: {extra} bytes more"
    );
}

#[test]
fn a_search_names_the_bf16_layer_rules() {
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--model",
            "llama3-70b",
            "--gpu",
            "b200-sxm-180g",
            "--nodes",
            "4",
            "--global-batch",
            "256",
            "--precision",
            "fp8",
            "--first-last-layers-bf16",
        ];
        args.extend(extra);
        run(&args)
    };
    // Delayed scaling refuses every plan: said once, not as a cluster that cannot be split.
    assert_one_line_error(
        &plan(&["--fp8-scaling", "delayed"]),
        &["--fp8-scaling delayed", "--fp8-scaling current"],
        &["cannot be split"],
        "delayed scaling in a search",
    );
    // A pinned pp whose stages hold fewer layers than the count: Megatron-Core's rule.
    assert_one_line_error(
        &plan(&["--pp", "4", "--num-layers-at-end-in-bf16", "30"]),
        &["--num-layers-at-end-in-bf16 30 with --pp 4", "20 or fewer"],
        &[],
        "a pinned pp",
    );
    // Unpinned, the plans the rule refuses are counted under their own reason.
    let searched = plan(&["--num-layers-at-end-in-bf16", "30"]);
    assert_eq!(searched.code, 0, "{}", searched.stderr);
    assert!(
        searched.stdout.contains("bf16_layers_past_stage"),
        "{}",
        searched.stdout
    );
}
