//! Review of the host-memory check for activation offloading (`host_memory_gib_per_gpu`,
//! `out_of_host_memory`): the sweep's CSV says a host miss as its JSON and table do, and `plan`'s
//! hint moves the offloaded count the way the closest miss needs.

mod common;

use common::*;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The bundled H100 profile with `host_memory_gib_per_gpu: 2`, written into `dir`: Llama 3 8B on
/// one node then overflows the host with 16 of its 32 layers offloaded, and fits with 8.
fn h100_with_2_gib_host(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let edited: Vec<String> = text
        .lines()
        .map(|line| {
            if line.starts_with("host_memory_gib_per_gpu:") {
                "host_memory_gib_per_gpu: 2".to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    let path = dir.join("h100-2g.yaml");
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn sweep_csv_names_the_host_memory_the_closest_miss_overflows() {
    let dir = scratch("review13", "csv");
    let gpu = h100_with_2_gib_host(&dir);
    let args = |format: &str| {
        vec![
            "sweep".to_string(),
            "--model".into(),
            "llama3-8b".into(),
            "--gpu".into(),
            gpu.clone(),
            "--cpu-offload-layers".into(),
            "31".into(),
            "--axis".into(),
            "nodes".into(),
            "--values".into(),
            "1".into(),
            "--format".into(),
            format.into(),
        ]
    };
    let strs = |v: &[String]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let json_args = strs(&args("json"));
    let j = json(&json_args.iter().map(String::as_str).collect::<Vec<_>>());
    let memory = &j["rows"][0]["memory"];
    let host = memory["closest_miss_host_bytes"]
        .as_f64()
        .unwrap_or_else(|| panic!("a host miss in the JSON: {memory}"));
    let have = memory["host_capacity_bytes"].as_f64().unwrap();
    assert_eq!(have, 2.0 * GIB);
    assert!(host > have, "{memory}");
    // The closest miss fits the GPU: its GPU bytes alone, under the capacity, say nothing of why.
    assert!(
        memory["closest_miss_bytes"].as_f64().unwrap() < memory["capacity_bytes"].as_f64().unwrap()
    );
    let csv_args = strs(&args("csv"));
    let r = run(&csv_args.iter().map(String::as_str).collect::<Vec<_>>());
    // Nothing fits at any point: exit 1.
    assert_eq!(r.code, 1, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let cell = |name: &str| {
        let column = header
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no {name} column: {}", lines[0]));
        lines[1].split(',').nth(column).unwrap().to_string()
    };
    assert_eq!(cell("memory.closest_miss_host_bytes"), format!("{host:.0}"));
    assert_eq!(cell("memory.host_capacity_bytes"), format!("{have:.0}"));
}

#[test]
fn sweep_csv_leaves_the_host_cells_empty_where_the_gpu_is_what_misses() {
    let r = run(&[
        "sweep",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-sxm-80g",
        "--axis",
        "nodes",
        "--values",
        "1",
        "--format",
        "csv",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let cell = |name: &str| {
        let column = header.iter().position(|c| *c == name).unwrap();
        lines[1].split(',').nth(column).unwrap().to_string()
    };
    assert!(
        !cell("memory.closest_miss_bytes").is_empty(),
        "{}",
        r.stdout
    );
    assert_eq!(cell("memory.closest_miss_host_bytes"), "");
    assert_eq!(cell("memory.host_capacity_bytes"), "");
}

#[test]
fn plan_hints_fewer_offloaded_layers_when_the_host_is_what_overflows() {
    let dir = scratch("review13", "fewer");
    let gpu = h100_with_2_gib_host(&dir);
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.as_str(),
        "--nodes",
        "1",
        "--cpu-offload-layers",
        "16",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("nothing fits:") && l.contains("fits the GPU")),
        "{}",
        r.stderr
    );
    // Offloading more only adds to what the host holds; 8 of the 32 layers fits.
    let hint = r
        .stderr
        .lines()
        .find(|l| l.starts_with("hint: offloading"))
        .unwrap_or_else(|| panic!("no offload hint: {}", r.stderr));
    assert!(
        hint.starts_with("hint: offloading 8 of the 32 layers (--cpu-offload-layers 8) fits:")
            && hint.contains("of 2.0 GiB of host memory per GPU"),
        "{hint}"
    );
    // And it does fit, host memory included.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu.as_str(),
        "--nodes",
        "1",
        "--cpu-offload-layers",
        "8",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn plan_still_hints_more_offloaded_layers_when_the_gpu_is_what_overflows() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "jean-zay-a100-80g",
        "--nodes",
        "2",
        "--cpu-offload-layers",
        "40",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let hint = r
        .stderr
        .lines()
        .find(|l| l.starts_with("hint: offloading"))
        .unwrap_or_else(|| panic!("no offload hint: {}", r.stderr));
    assert!(
        hint.starts_with("hint: offloading 60 of the 80 layers") && !hint.contains("host memory"),
        "{hint}"
    );
}

#[test]
fn bundled_host_memory_sources_cite_a_public_source_for_gb200_and_h200() {
    for (file, needle) in [
        ("gb200-nvl72.yaml", "cpu_offloading.rst"),
        ("h200-sxm-141g.yaml", "H200-SXM-141GBx8_TRT_MaxQ.json"),
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/clusters/{file}")).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains("\"host_memory_gib_per_gpu:"))
            .unwrap_or_else(|| panic!("{file}: no host memory source"));
        assert!(
            line.contains(needle) && !line.contains("as recalled"),
            "{file}: {line}"
        );
    }
}
