//! Host memory for activation offloading (`--cpu-offload-layers N`): the offloaded layers live in
//! the host memory the profile gives each GPU (`host_memory_gib_per_gpu`), and a plan whose
//! offloaded activations overflow it does not run, whatever its GPU memory says. `eval`, `plan`,
//! `sweep` and `compare` say so in the same numbers.

mod common;

use common::*;
use serde_json::Value;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Llama 3.1 405B on 256 GB200s, tp 2, pp 1, ZeRO-3, micro-batch 1, no recompute, offloading
/// `layers` of its 126 layers, plus `extra`.
fn llama405_gb200(layers: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "eval",
        "--model",
        "llama3-405b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--tp",
        "2",
        "--pp",
        "1",
        "--zero",
        "3",
        "--micro-batch",
        "1",
        "--global-batch",
        "256",
        "--recompute",
        "none",
        "--cpu-offload-layers",
        layers,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn eval_json(args: &[String]) -> Value {
    let mut with_json = as_strs(args);
    with_json.extend(["--format", "json"]);
    json(&with_json)["plans"][0].clone()
}

/// The bundled H100 profile with `host_memory_gib_per_gpu` set to `value` (or removed where
/// `None`), written into `dir`.
fn h100_with_host_memory(dir: &std::path::Path, value: Option<&str>) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let edited: Vec<String> = text
        .lines()
        .filter_map(|line| {
            if line.starts_with("host_memory_gib_per_gpu:") {
                value.map(|v| format!("host_memory_gib_per_gpu: {v}"))
            } else if line.contains("\"host_memory_gib_per_gpu:") && value.is_none() {
                None
            } else {
                Some(line.to_string())
            }
        })
        .collect();
    let path = dir.join("h100-host.yaml");
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn every_bundled_profile_gives_its_host_memory_with_a_source() {
    for entry in std::fs::read_dir(format!("{ROOT}/clusters")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("\nhost_link_gb_per_s:") {
            continue;
        }
        assert!(
            text.contains("\nhost_memory_gib_per_gpu:"),
            "{}: a profile that can offload must say how much host memory a GPU has",
            path.display()
        );
        assert!(
            text.contains("\"host_memory_gib_per_gpu:"),
            "{}: host_memory_gib_per_gpu has no line in sources",
            path.display()
        );
    }
}

#[test]
fn eval_prints_the_offloaded_activations_against_the_host_memory() {
    let args = llama405_gb200("60", &["--sequence-parallel"]);
    let r = run(&as_strs(&args));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("offloaded"))
        .unwrap_or_else(|| panic!("no offloaded line:\n{}", r.stdout));
    assert!(
        line.contains("of 240.0 GiB host memory per GPU — fits"),
        "{line}"
    );

    let plan = eval_json(&args);
    let memory = &plan["memory"];
    let host = memory["host_bytes"].as_f64().unwrap();
    let per_layer = memory["offloaded_layer_bytes"].as_f64().unwrap();
    // pp 1: one micro-batch in flight, so the host holds the 60 offloaded layers once.
    assert!(
        (host - 60.0 * per_layer).abs() <= 1e-6 * host,
        "{host} vs 60 x {per_layer}"
    );
    assert_eq!(memory["host_capacity_bytes"].as_f64().unwrap(), 240.0 * GIB);
    assert_eq!(memory["host_fits"], true);
    // The line prints the JSON's number.
    assert!(line.contains(&format!("{:.1} GiB", host / GIB)), "{line}");
}

#[test]
fn a_plan_whose_offloaded_activations_overflow_the_host_does_not_fit() {
    // Without sequence parallelism 120 offloaded layers of 405B take ~298 GiB per GPU: the GPU
    // holds the rest easily, the Grace's 240 GiB per GPU does not.
    let args = llama405_gb200("120", &[]);
    let r = run(&as_strs(&args));
    assert_eq!(r.code, 1, "a plan that does not fit exits 1: {}", r.stderr);
    let total = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("total"))
        .unwrap();
    assert!(total.contains("— fits"), "the GPU itself fits: {total}");
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("offloaded"))
        .unwrap();
    assert!(line.contains("DOES NOT FIT: misses by"), "{line}");

    let plan = eval_json(&args);
    assert_eq!(plan["memory"]["fits"], true);
    assert_eq!(plan["memory"]["host_fits"], false);
    assert!(plan["memory"]["host_bytes"].as_f64().unwrap() > 240.0 * GIB);

    // Its launch line is still written, with the reason it will not run in the warning.
    let mut emit = as_strs(&args);
    emit.extend(["--emit", "megatron"]);
    let r = run(&emit);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("warning: this plan does not fit: its offloaded activations take"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("--cpu-offloading-num-layers 120"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_profile_without_host_memory_cannot_offload() {
    let dir = scratch("host-memory", "absent");
    let gpu = h100_with_host_memory(&dir, None);
    let base = [
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.as_str(),
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "16",
    ];
    let mut eval = vec!["eval", "--tp", "1", "--pp", "1", "--recompute", "none"];
    eval.extend(base);
    assert_one_line_error(
        &run(&eval),
        &[
            "host_memory_gib_per_gpu",
            "--cpu-offload-layers 16",
            "drop it",
        ],
        &["panicked"],
        "eval on a profile without host memory",
    );
    let mut plan = vec!["plan"];
    plan.extend(base);
    assert_one_line_error(
        &run(&plan),
        &["host_memory_gib_per_gpu"],
        &["panicked"],
        "plan on a profile without host memory",
    );
    // Without offloading the profile is as good as ever.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.as_str(),
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "1",
        "--pp",
        "1",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(!r.stdout.contains("host memory per GPU"), "{}", r.stdout);
}

#[test]
fn a_host_memory_that_is_no_size_is_refused() {
    for bad in ["0", "-1", ".nan", ".inf", "1e9"] {
        let dir = scratch("host-memory", &format!("bad-{}", bad.replace('.', "")));
        let gpu = h100_with_host_memory(&dir, Some(bad));
        let r = run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--gpu",
            gpu.as_str(),
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ]);
        assert_one_line_error(
            &r,
            &["host_memory_gib_per_gpu"],
            &["panicked"],
            &format!("host_memory_gib_per_gpu: {bad}"),
        );
    }
}

#[test]
fn plan_sweep_and_compare_name_the_host_memory_when_it_is_what_misses() {
    let dir = scratch("host-memory", "tiny");
    let gpu = h100_with_host_memory(&dir, Some("1"));
    let base = [
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.as_str(),
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "32768",
        "--cpu-offload-layers",
        "16",
    ];
    let mut plan = vec!["plan"];
    plan.extend(base);
    let r = run(&plan);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("out_of_host_memory"), "{}", r.stdout);
    let nothing = r
        .stderr
        .lines()
        .find(|l| l.starts_with("nothing fits:"))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        nothing.contains("fits the GPU") && nothing.contains("which has 1.0 GiB per GPU"),
        "{nothing}"
    );

    // The sweep's axis gives the node count.
    let mut sweep = vec!["sweep", "--axis", "nodes", "--values", "1"];
    sweep.extend(base.iter().enumerate().filter_map(|(i, a)| {
        let node_flag = *a == "--nodes" || (i > 0 && base[i - 1] == "--nodes");
        (!node_flag).then_some(*a)
    }));
    let mut sweep_json = sweep.clone();
    sweep_json.extend(["--format", "json"]);
    let r = run(&sweep_json);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    let memory = &out["rows"][0]["memory"];
    assert!(
        memory["closest_miss_host_bytes"].as_f64().unwrap() > GIB,
        "{memory}"
    );
    assert_eq!(memory["host_capacity_bytes"].as_f64().unwrap(), GIB);
    let r = run(&sweep);
    assert!(
        r.stdout
            .contains("the closest fits the GPU but its offloaded activations need"),
        "{}",
        r.stdout
    );
}

#[test]
fn compare_says_which_plan_the_host_memory_rules_out() {
    let dir = scratch("host-memory", "compare");
    let a = dir.join("a.yaml");
    let b = dir.join("b.yaml");
    let args = [
        "plan",
        "--model",
        "llama3-405b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "256",
        "--tp",
        "2",
        "--cp",
        "1",
        "--pp",
        "1",
        "--sequence-parallel",
        "false",
        "--cpu-offload-layers",
        "94",
        "--save",
        a.to_str().unwrap(),
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(&a).unwrap();
    assert!(saved.contains("cpu_offload_layers: 94"), "{saved}");
    std::fs::write(
        &b,
        saved.replace("cpu_offload_layers: 94", "cpu_offload_layers: 120"),
    )
    .unwrap();
    let r = run(&[
        "compare",
        "--plan",
        a.to_str().unwrap(),
        "--plan",
        b.to_str().unwrap(),
    ]);
    assert!(
        r.stdout.contains("is the one that runs:")
            && r.stdout
                .contains("of host memory per GPU, which has 240.0 GiB"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}
