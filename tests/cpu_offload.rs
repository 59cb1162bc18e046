//! Activation offloading to the CPU (`--cpu-offload-layers N`, Megatron-Core's
//! `--cpu-offloading-num-layers N` through Transformer Engine's CPU offload context): what it
//! frees on the GPU, what its copies cost, Megatron-Core's rules, the launch-line round trip, and
//! the review against Megatron-Core and Transformer Engine (the copies' windows span the decoder's
//! L − 1 layers, MTP layers cover none; a dense prefix is offloaded as dense layers; `compare`
//! tells an offloading plan from the same layout without it; pasted launch lines are read as
//! Megatron-LM reads them).

mod common;

use common::*;
use serde_json::Value;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Llama 3 70B on 64 GB200s under Megatron-FSDP (Megatron-Bridge's recipe layout), on `gpu`.
fn llama_gb200(gpu: &str, extra: &[&str]) -> Vec<String> {
    let mut args = strings(&[
        "eval",
        "--model",
        "llama3-70b",
        "--gpu",
        gpu,
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--tp",
        "1",
        "--pp",
        "1",
        "--zero",
        "3",
        "--micro-batch",
        "1",
        "--global-batch",
        "256",
        "--precision",
        "fp8",
        "--recompute",
        "none",
    ]);
    args.extend(strings(extra));
    args
}

fn plan_json(args: &[String]) -> Value {
    let mut with_json: Vec<&str> = args.iter().map(String::as_str).collect();
    with_json.extend(["--format", "json"]);
    json(&with_json)["plans"][0].clone()
}

fn term<'a>(plan: &'a Value, kind: &str) -> &'a Value {
    plan["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} term"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// GB200's profile behind a 1 GB/s host link, where every copy is exposed beyond its window.
fn slow_host_profile(name: &str) -> String {
    let dir = scratch("cpu_offload_review", name);
    let profile: String = std::fs::read_to_string(format!("{ROOT}/clusters/gb200-nvl72.yaml"))
        .unwrap()
        .lines()
        .map(|line| {
            if line.starts_with("host_link_gb_per_s:") {
                "host_link_gb_per_s: 1\n".to_string()
            } else if line.starts_with("name:") {
                "name: gb200-slow-host\n".to_string()
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    let path = dir.join("slow.yaml");
    std::fs::write(&path, profile).unwrap();
    path.to_str().unwrap().to_string()
}

/// What the compute hides of the copies (their time less what is exposed) when every copy is
/// longer than its window: N windows of w layers' forward and backward, N·w = L − 1 per
/// micro-batch (Transformer Engine's `layer_window_map` covers the layers from the end of layer 0
/// to the end of layer L − 1).
fn hidden_s(plan: &Value) -> f64 {
    let copies = term(plan, "host_offload");
    assert!(f(&copies["exposed_s"]) > 0.0, "{copies}");
    f(&copies["time_s"]) - f(&copies["exposed_s"])
}

/// The GPU keeps the L − N layers it does not offload at the peak (Transformer Engine's default
/// handler since 2.10): activations drop by N layers' worth, each of them the per-layer bytes the
/// copies carry, and every other part of memory stays.
#[test]
fn offloading_keeps_the_other_layers() {
    let without = plan_json(&llama_gb200("gb200-nvl72", &[]));
    let with = plan_json(&llama_gb200("gb200-nvl72", &["--cpu-offload-layers", "40"]));
    let layer = f(&with["memory"]["offloaded_layer_bytes"]);
    assert!(layer > 0.0);
    assert_eq!(f(&without["memory"]["offloaded_layer_bytes"]), 0.0);
    let freed =
        f(&without["memory"]["activations_bytes"]) - f(&with["memory"]["activations_bytes"]);
    assert!(
        (freed - 40.0 * layer).abs() < 1e-6 * freed,
        "freed {freed} vs 40 layers of {layer}"
    );
    for part in ["weights_bytes", "gradients_bytes", "optimizer_bytes"] {
        assert_eq!(with["memory"][part], without["memory"][part], "{part}");
    }
    // The copies carry each offloaded layer out and back once per micro-batch.
    let copies = term(&with, "host_offload");
    let micro_batches = f(&with["num_microbatches"]);
    assert!(
        (f(&copies["wire_bytes"]) - 2.0 * 40.0 * micro_batches * layer).abs()
            < 1e-6 * f(&copies["wire_bytes"])
    );
}

/// On GB200's NVLink-C2C the copies hide under the next layers' compute; on a slow host link
/// they do not, and the step grows by exactly the exposed part (nothing else in the time model
/// depends on where activations live).
#[test]
fn copies_the_compute_cannot_cover_lengthen_the_step() {
    let without = plan_json(&llama_gb200("gb200-nvl72", &[]));
    let hidden = plan_json(&llama_gb200("gb200-nvl72", &["--cpu-offload-layers", "40"]));
    let fast = term(&hidden, "host_offload");
    assert!(f(&fast["time_s"]) > 0.0);
    assert_eq!(f(&fast["exposed_s"]), 0.0, "{fast}");
    assert_eq!(fast["hidden_by"], "layer_compute");
    assert!((f(&hidden["time"]["step_s"]) - f(&without["time"]["step_s"])).abs() < 1e-9);

    // The same GPU behind a 1 GB/s host link.
    let dir = scratch("cpu_offload", "slow_link");
    let profile = std::fs::read_to_string(format!("{ROOT}/clusters/gb200-nvl72.yaml"))
        .unwrap()
        .lines()
        .map(|line| {
            if line.starts_with("host_link_gb_per_s:") {
                "host_link_gb_per_s: 1".to_string()
            } else if line.starts_with("name:") {
                "name: gb200-slow-host".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join("slow.yaml");
    std::fs::write(&path, profile).unwrap();
    let slow_args: Vec<String> = llama_gb200("gb200-nvl72", &["--cpu-offload-layers", "40"])
        .into_iter()
        .map(|a| {
            if a == "gb200-nvl72" {
                path.to_str().unwrap().to_string()
            } else {
                a
            }
        })
        .collect();
    let slow = plan_json(&slow_args);
    let copies = term(&slow, "host_offload");
    let exposed = f(&copies["exposed_s"]);
    assert!(exposed > 0.0 && exposed < f(&copies["time_s"]), "{copies}");
    assert!((f(&slow["time"]["offload_exposed_s"]) - exposed).abs() < 1e-12);
    let grown = f(&slow["time"]["step_s"]) - f(&without["time"]["step_s"]);
    assert!(
        (grown - exposed).abs() < 1e-9 * exposed,
        "{grown} vs {exposed}"
    );
}

/// Megatron-Core's rules (`transformer_config.py`) and tpsim's own: each refused in one line.
#[test]
fn megatron_cores_rules_are_refused_by_name() {
    let base = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", "llama3-70b", "--nodes", "8", "--tp", "8"];
        args.extend(extra);
        run(&args)
    };
    assert_one_line_error(
        &base(&["--pp", "4", "--cpu-offload-layers", "10"]),
        &[
            "--cpu-offload-layers 10",
            "--pp 4",
            "no support for Pipeline parallelism",
            "--pp 1",
        ],
        &[],
        "pipeline",
    );
    assert_one_line_error(
        &base(&["--recompute", "selective", "--cpu-offload-layers", "10"]),
        &[
            "--recompute selective",
            "does not work when activation recomputation",
            "--recompute none",
        ],
        &[],
        "recompute",
    );
    assert_one_line_error(
        &base(&["--cpu-offload-layers", "80"]),
        &["80 of the model's 80 layers", "at most 79"],
        &[],
        "every layer",
    );
    assert_one_line_error(
        &base(&["--framework", "torchtitan", "--cpu-offload-layers", "8"]),
        &["--framework torchtitan", "--framework megatron-core"],
        &[],
        "framework",
    );
    // A profile that gives no host link cannot price the copies.
    let dir = scratch("cpu_offload", "no_link");
    let profile: String = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("host_link_gb_per_s:") && !l.contains("\"host_link_gb_per_s:"))
        .map(|l| {
            if l.starts_with("name:") {
                "name: h100-no-host-link\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join("nolink.yaml");
    std::fs::write(&path, profile).unwrap();
    assert_one_line_error(
        &base(&["--gpu", path.to_str().unwrap(), "--cpu-offload-layers", "8"]),
        &["host_link_gb_per_s", "h100-no-host-link"],
        &[],
        "profile without a host link",
    );
    // `plan` names the rule a pin breaks.
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--pp",
        "4",
        "--cpu-offload-layers",
        "10",
    ]);
    assert_one_line_error(
        &r,
        &["--pp 4 with --cpu-offload-layers 10", "--pp 1"],
        &[],
        "plan pin",
    );
}

/// `plan` searches only what Megatron-Core can offload: no pipeline, no recompute.
#[test]
fn the_search_keeps_to_plans_that_can_offload() {
    let v = json(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "256",
        "--cpu-offload-layers",
        "40",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        assert_eq!(p["pp"], 1, "{p}");
        assert_eq!(p["recompute"], "none", "{p}");
    }
    assert_eq!(v["training"]["cpu_offload_layers"], 40);
}

/// `--emit megatron` writes `--cpu-offloading-num-layers N`, a pasted line is read back to the
/// same plan and step, and `plan --save` keeps the setting in the plan file.
#[test]
fn launch_lines_and_plan_files_keep_the_offload() {
    let r = run(&llama_gb200(
        "gb200-nvl72",
        &["--cpu-offload-layers", "40", "--emit", "megatron"],
    )
    .iter()
    .map(String::as_str)
    .collect::<Vec<_>>());
    assert!(r.code == 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("--num-layers"))
        .expect("a launch line");
    assert!(line.contains("--cpu-offloading-num-layers 40"), "{line}");
    let start = line.find("--num-layers").unwrap();
    let pasted = json(&[
        "eval",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--megatron-args",
        &line[start..],
        "--format",
        "json",
    ]);
    let direct = plan_json(&llama_gb200("gb200-nvl72", &["--cpu-offload-layers", "40"]));
    assert_eq!(pasted["training"]["cpu_offload_layers"], 40);
    assert_eq!(
        pasted["plans"][0]["memory"]["activations_bytes"],
        direct["memory"]["activations_bytes"]
    );

    let dir = scratch("cpu_offload", "save");
    let file = dir.join("plan.yaml");
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "256",
        "--cpu-offload-layers",
        "40",
        "--save",
        file.to_str().unwrap(),
    ]);
    assert!(r.code == 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("cpu_offload_layers: 40"), "{text}");
    let back = json(&["eval", "--plan", file.to_str().unwrap(), "--format", "json"]);
    assert_eq!(back["training"]["cpu_offload_layers"], 40);
    // Writers without the setting refuse rather than drop it.
    let r = run(&llama_gb200(
        "gb200-nvl72",
        &["--cpu-offload-layers", "40", "--emit", "nemo"],
    )
    .iter()
    .map(String::as_str)
    .collect::<Vec<_>>());
    assert_one_line_error(
        &r,
        &["--cpu-offload-layers 40", "--emit megatron"],
        &[],
        "nemo",
    );
}

/// The windows span L − 1 layers whatever N is: halving the decoder (80 → 40 layers of one
/// shape) scales what they hide by 39/79, not 40/80; and an MTP layer, which runs after the last
/// window outside the offload context, widens none of them.
#[test]
fn the_copies_hide_behind_l_minus_one_decoder_layers() {
    let slow = slow_host_profile("window");
    let full = plan_json(&llama_gb200(&slow, &["--cpu-offload-layers", "20"]));
    let other_n = plan_json(&llama_gb200(&slow, &["--cpu-offload-layers", "60"]));
    assert!(
        (hidden_s(&full) - hidden_s(&other_n)).abs() < 1e-9 * hidden_s(&full),
        "N changes the windows' sum"
    );
    let half = plan_json(&llama_gb200(
        &slow,
        &["--layers", "40", "--cpu-offload-layers", "20"],
    ));
    let ratio = hidden_s(&half) / hidden_s(&full);
    assert!(
        (ratio - 39.0 / 79.0).abs() < 1e-9,
        "hidden ratio {ratio}, want 39/79 (40/80 = 0.5 was an L/N window)"
    );
    let mtp = plan_json(&llama_gb200(
        &slow,
        &["--mtp-layers", "1", "--cpu-offload-layers", "20"],
    ));
    assert!(
        (hidden_s(&mtp) - hidden_s(&full)).abs() < 1e-9 * hidden_s(&full),
        "an MTP layer changed the windows: {} vs {}",
        hidden_s(&mtp),
        hidden_s(&full)
    );
}

/// DeepSeek-V3's first three layers are dense: offloading them frees dense layers, not the stage's
/// average layer, and the host's share and the copies' bytes are the offloaded layers' own.
#[test]
fn a_dense_prefix_is_offloaded_as_dense_layers() {
    let args = |n: &str| {
        strings(&[
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
            "1",
            "--ep",
            "64",
            "--zero",
            "3",
            "--micro-batch",
            "1",
            "--global-batch",
            "1024",
            "--precision",
            "fp8",
            "--recompute",
            "none",
            "--cpu-offload-layers",
            n,
        ])
    };
    let none = plan_json(&args("0"));
    let one = plan_json(&args("1"));
    let three = plan_json(&args("3"));
    let thirty = plan_json(&args("30"));
    let activations = |p: &Value| f(&p["memory"]["activations_bytes"]);
    let layer = |p: &Value| f(&p["memory"]["offloaded_layer_bytes"]);
    let dense = layer(&one);
    assert_eq!(layer(&three), dense, "the first three layers are alike");
    // The peak holds the L − N layers not offloaded (Transformer Engine's default handler): one
    // offloaded layer frees one dense layer, three free three.
    let freed = activations(&none) - activations(&one);
    assert!(
        (freed - dense).abs() < 1e-6 * freed,
        "freed {freed} vs one dense layer of {dense}"
    );
    let freed = activations(&none) - activations(&three);
    assert!(
        (freed - 3.0 * dense).abs() < 1e-6 * freed,
        "freed {freed} vs three dense layers of {dense}"
    );
    // Past the prefix the MoE layers, larger here, raise the offloaded layers' mean.
    assert!(
        layer(&thirty) > dense * 1.1,
        "{} vs {dense}",
        layer(&thirty)
    );
    let moe = (30.0 * layer(&thirty) - 3.0 * dense) / 27.0;
    let freed = activations(&none) - activations(&thirty);
    assert!(
        (freed - (3.0 * dense + 27.0 * moe)).abs() < 1e-6 * freed,
        "freed {freed}: 3 dense and 27 MoE layers"
    );
    let copies = term(&thirty, "host_offload");
    let m = f(&thirty["num_microbatches"]);
    assert!(
        (f(&copies["wire_bytes"]) - 2.0 * 30.0 * m * layer(&thirty)).abs()
            < 1e-6 * f(&copies["wire_bytes"])
    );
}

/// Two plan files of one layout, one offloading: `compare` evaluates each with its own setting,
/// does not call them the same plan, and its labels name the offload.
#[test]
fn compare_tells_an_offloading_plan_from_the_same_layout_without() {
    let dir = scratch("cpu_offload_review", "compare");
    let with = dir.join("with.yaml");
    let without = dir.join("without.yaml");
    for (file, extra) in [
        (&with, vec!["--cpu-offload-layers", "40"]),
        (&without, vec![]),
    ] {
        let mut args = strings(&[
            "plan",
            "--model",
            "llama3-70b",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--tp",
            "1",
            "--pp",
            "1",
            "--zero",
            "3",
            "--micro-batch",
            "1",
            "--global-batch",
            "256",
            "--precision",
            "fp8",
            "--recompute",
            "none",
            "--save",
            file.to_str().unwrap(),
        ]);
        args.extend(strings(&extra));
        let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let (a, b) = (with.to_str().unwrap(), without.to_str().unwrap());
    let r = run(&["compare", "--plan", a, "--plan", b]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("same plan"), "{}", r.stderr);
    assert!(
        r.stdout.contains("offload 40") && r.stdout.contains("offload 0"),
        "{}",
        r.stdout
    );
    let v = json(&["compare", "--plan", a, "--plan", b, "--format", "json"]);
    assert_eq!(v["offload_layers"], serde_json::json!([40, 0]));
    assert!(f(&v["a"]["memory"]["activations_bytes"]) < f(&v["b"]["memory"]["activations_bytes"]));
    // One file twice is still the same plan, and a comparison without offloading says nothing
    // of it.
    let r = run(&["compare", "--plan", a, "--plan", a]);
    assert!(r.stderr.contains("same plan"), "{}", r.stderr);
    let v = json(&["compare", "--plan", b, "--plan", b, "--format", "json"]);
    assert!(v.get("offload_layers").is_none(), "{v}");
}

/// Llama 3 70B as a Megatron-LM launch line, with `extra` arguments.
fn pasted(extra: &str) -> Run {
    let line = format!(
        "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 256 --bf16 --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 {extra}"
    );
    run(&[
        "eval",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--megatron-args",
        &line,
        "--format",
        "json",
    ])
}

fn error_line(r: &Run) -> String {
    assert_eq!(r.code, 2, "want exit 2: {}", r.stderr);
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.stderr);
    errors[0].to_string()
}

/// `--cpu-offloading-num-layers 0` is Megatron-LM's default (no offloading) and reads as none; a
/// bare `--cpu-offloading`, which Megatron-LM's argparse does not know, is refused with the
/// argument that does offload rather than read as nothing.
#[test]
fn pasted_lines_say_offloading_as_megatron_lm_does() {
    let plain = pasted("");
    let zero = pasted("--cpu-offloading-num-layers 0");
    // Exit 1: the line's plan (bf16, no recompute, no ZeRO) does not fit; it is still evaluated.
    assert!(zero.code <= 1, "{}", zero.stderr);
    let activations = |r: &Run| {
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        v["plans"][0]["memory"]["activations_bytes"].clone()
    };
    assert_eq!(activations(&zero), activations(&plain));

    for extra in [
        "--cpu-offloading",
        "--cpu-offloading --cpu-offloading-num-layers 20",
    ] {
        let line = error_line(&pasted(extra));
        assert!(
            line.contains("--cpu-offloading:") && line.contains("--cpu-offloading-num-layers N"),
            "{extra}: {line}"
        );
    }

    // Megatron-Core's rules in the line's words: its own flag, no plan file, no tpsim flag.
    let line = error_line(&pasted("--cpu-offloading-num-layers 80"));
    assert!(
        line.contains("--cpu-offloading-num-layers 80") && line.contains("at most 79"),
        "{line}"
    );
    assert!(
        !line.contains("plan file") && !line.contains("cpu_offload_layers"),
        "{line}"
    );
    let line = error_line(&pasted(
        "--cpu-offloading-num-layers 20 --recompute-activations",
    ));
    assert!(
        line.contains("--recompute-activations") && line.contains("drop the recompute arguments"),
        "{line}"
    );
    assert!(!line.contains("--recompute none"), "{line}");
}

/// A flag beside a line that offloads another count would win silently: refused, as --global-batch
/// is; the same count, or a line that offloads nothing, takes it.
#[test]
fn a_flag_that_contradicts_the_lines_offload_is_refused() {
    let line = "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 256 --bf16 --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256";
    let eval = |extra_line: &str, flag: &str| {
        run(&[
            "eval",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--megatron-args",
            &format!("{line} {extra_line}"),
            "--cpu-offload-layers",
            flag,
            "--format",
            "json",
        ])
    };
    let err = error_line(&eval("--cpu-offloading-num-layers 20", "30"));
    assert!(
        err.contains("--cpu-offload-layers 30") && err.contains("--cpu-offloading-num-layers 20"),
        "{err}"
    );
    for (extra_line, flag) in [("--cpu-offloading-num-layers 20", "20"), ("", "30")] {
        let r = eval(extra_line, flag);
        assert!(r.code <= 1, "{extra_line} / {flag}: {}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(
            v["training"]["cpu_offload_layers"],
            flag.parse::<u32>().unwrap()
        );
    }
}

/// `--emit megatron-bridge` turns weight offloading off beside the layer count, as NVIDIA's
/// performance scripts do (Megatron-Core's default was on until 2025-09), and only then.
#[test]
fn bridge_overrides_offload_activations_only() {
    let emit = |extra: &[&str]| {
        let mut args = strings(&[
            "eval",
            "--model",
            "llama3-70b",
            "--gpu",
            "gb200-nvl72",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--tp",
            "2",
            "--pp",
            "1",
            "--zero",
            "1",
            "--micro-batch",
            "1",
            "--global-batch",
            "256",
            "--recompute",
            "none",
            "--emit",
            "megatron-bridge",
        ]);
        args.extend(strings(extra));
        let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        // Exit 1 where the plan does not fit: the configuration is written all the same.
        assert!(r.code <= 1, "{}", r.stderr);
        r.stdout
    };
    let on = emit(&["--cpu-offload-layers", "40"]);
    assert!(on.contains("model.cpu_offloading=true"), "{on}");
    assert!(on.contains("model.cpu_offloading_num_layers=40"), "{on}");
    assert!(on.contains("model.cpu_offloading_weights=false"), "{on}");
    let off = emit(&[]);
    assert!(off.contains("model.cpu_offloading=false"), "{off}");
    assert!(!off.contains("cpu_offloading_weights"), "{off}");
}

/// The breakdown says what the GPU holds at the peak (the other L − N layers), not that one
/// offloaded layer is back "at a time" (several are, in the backward), and the host's share is
/// the copies' bytes.
#[test]
fn the_breakdown_says_what_the_peak_holds() {
    let args = llama_gb200("gb200-nvl72", &["--cpu-offload-layers", "30"]);
    let r = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("activations"))
        .unwrap();
    assert!(
        line.contains("30 of 80 layers offloaded") && line.contains("the GPU holds the other 50)"),
        "{line}"
    );
    assert!(!line.contains("at a time"), "{line}");
    let plan = plan_json(&args);
    let host_gib = 30.0 * f(&plan["memory"]["offloaded_layer_bytes"]) / (1u64 << 30) as f64;
    assert!(
        line.contains(&format!("{host_gib:.1} GiB per GPU there")),
        "{line}"
    );
}

/// `plan`'s best plan recomputes without a pipeline: under Megatron-Core, on a GPU with a host
/// link, the note prices plans that offload instead and names the flag, with the plan and the step
/// `eval` gives that plan (`tests/offload_note.rs` has the rest of the note's behaviour).
#[test]
fn plan_names_an_offload_that_beats_its_recompute() {
    let base = [
        "--model",
        "llama3-70b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "256",
        "--pp",
        "1",
        "--tp",
        "1",
        "--micro-batch",
        "2",
    ];
    let mut args = vec!["plan"];
    args.extend(base);
    args.extend(["--top", "1"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stdout
        .lines()
        .find(|l| l.starts_with("note: offloading the activations of"))
        .unwrap_or_else(|| panic!("no offload note:\n{}", r.stdout));
    let after = |text: &str, key: &str| -> String {
        let at = text.find(key).unwrap_or_else(|| panic!("{key} in {text}")) + key.len();
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect()
    };
    let layers = after(note, "add --cpu-offload-layers ");
    let step: f64 = after(note, "and take ").parse().unwrap();
    let best = json(&{
        let mut a = args.clone();
        a.extend(["--format", "json"]);
        a
    });
    let p = &best["plans"][0];
    assert_ne!(p["recompute"], "none", "{p}");
    let mut eval = vec!["eval"];
    eval.extend(base);
    let cp = after(note, " cp ");
    let cp = if cp.is_empty() { "1".to_string() } else { cp };
    let dp = after(note, " dp ");
    let zero = after(note, " ZeRO-");
    eval.extend([
        "--cp",
        &cp,
        "--dp",
        &dp,
        "--zero",
        &zero,
        "--recompute",
        "none",
        "--cpu-offload-layers",
        &layers,
        "--format",
        "json",
    ]);
    if p["sequence_parallel"] == true {
        eval.push("--sequence-parallel");
    }
    let e = json(&eval);
    let eval_step = e["plans"][0]["time"]["step_s"].as_f64().unwrap();
    assert!(
        (eval_step - step).abs() < 0.006,
        "note {step} s, eval {eval_step} s"
    );
    assert!(step < p["time"]["step_s"].as_f64().unwrap());
    // Asked for, the offload is searched and the note is not repeated.
    let mut asked = args.clone();
    asked.extend(["--cpu-offload-layers", &layers]);
    let r = run(&asked);
    assert!(
        !r.stdout.contains("note: offloading the activations"),
        "{}",
        r.stdout
    );
}
