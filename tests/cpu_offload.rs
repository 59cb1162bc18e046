//! Activation offloading to the CPU (`--cpu-offload-layers N`, Megatron-Core's
//! `--cpu-offloading-num-layers N` through Transformer Engine's CPU offload context): what it
//! frees on the GPU, what its copies cost, Megatron-Core's rules, and the launch line round trip.

mod common;

use common::*;
use serde_json::Value;

/// Llama 3 70B on 64 GB200s under Megatron-FSDP, the layout of Megatron-Bridge's GB200 recipe that
/// offloads (`llama3_workload_base_configs.py`), with `extra` flags.
fn gb200(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
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
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn eval_json(args: &[String]) -> Value {
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
    v.as_f64().unwrap()
}

/// The GPU keeps the L − N layers it does not offload at the peak (Transformer Engine's default
/// handler since 2.10): activations drop by N layers' worth, each of them the per-layer bytes the
/// copies carry, and every other part of memory stays.
#[test]
fn offloading_keeps_the_other_layers_and_one_reloaded() {
    let without = eval_json(&gb200(&[]));
    let with = eval_json(&gb200(&["--cpu-offload-layers", "40"]));
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
    let without = eval_json(&gb200(&[]));
    let hidden = eval_json(&gb200(&["--cpu-offload-layers", "40"]));
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
    let slow_args: Vec<String> = gb200(&["--cpu-offload-layers", "40"])
        .into_iter()
        .map(|a| {
            if a == "gb200-nvl72" {
                path.to_str().unwrap().to_string()
            } else {
                a
            }
        })
        .collect();
    let slow = eval_json(&slow_args);
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
    let r = run(
        &gb200(&["--cpu-offload-layers", "40", "--emit", "megatron"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
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
    let direct = eval_json(&gb200(&["--cpu-offload-layers", "40"]));
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
    let r = run(&gb200(&["--cpu-offload-layers", "40", "--emit", "nemo"])
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
