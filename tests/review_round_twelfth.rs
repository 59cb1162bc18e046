//! Fixes from the twelfth session's own review: the layout figure's legend at dp 1.

mod common;

use common::*;

/// The layout figure said "DP: replicas (same pp, tp; stride 8) reduce gradients over NVLink"
/// for a plan with one data-parallel replica, where nothing reduces gradients.
#[test]
fn layout_legend_names_no_gradient_reduction_at_dp_1() {
    let dir = scratch("review_round_twelfth", "dp1");
    let out = dir.to_str().unwrap();
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
        "--global-batch",
        "8",
        "--report",
        out,
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(
        svg.contains("DP: none (dp 1: one replica, no gradient reduction)"),
        "{svg}"
    );
    assert!(!svg.contains("replicas (same pp"), "{svg}");
    // With replicas the line counts them.
    let dir = scratch("review_round_twelfth", "dp8");
    let out = dir.to_str().unwrap();
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "8",
        "--zero",
        "3",
        "--report",
        out,
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    assert!(svg.contains("DP: 8 replicas (same pp, tp"), "{svg}");
}

/// A profile file named like a bundled one but without a host link was refused as "the
/// h100-sxm-80g profile does not give host_link_gb_per_s", which reads as if the bundled profile
/// lacked it: the file is named too.
#[test]
fn a_profile_file_without_a_host_link_is_named_by_its_path() {
    let dir = scratch("review_round_twelfth", "nolink");
    let profile: String = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("host_link_gb_per_s:") && !l.contains("\"host_link_gb_per_s:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("h100-sxm-80g.yaml");
    std::fs::write(&path, profile).unwrap();
    let file = path.to_str().unwrap();
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpu",
        file,
        "--cpu-offload-layers",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[&format!("h100-sxm-80g ({file})"), "host_link_gb_per_s"],
        &[],
        "profile file",
    );
}

/// `plan --cpu-offload-layers N` with nothing that fits said only "add nodes, use a
/// larger-memory GPU, or shorten --seq-len": offloading more layers, the fix the flag's user
/// reaches for first, is now named with the count that fits, and that count does fit.
#[test]
fn nothing_fits_names_the_offload_that_would() {
    let base = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--seq-len",
        "8192",
        "--tp",
        "1",
    ];
    let mut args = base.to_vec();
    args.extend(["--cpu-offload-layers", "4"]);
    let r = run(&args);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let hint = r
        .stderr
        .lines()
        .find(|l| l.starts_with("hint: offloading"))
        .unwrap_or_else(|| panic!("no offload hint: {}", r.stderr));
    let at = hint.find("--cpu-offload-layers ").unwrap() + "--cpu-offload-layers ".len();
    let n: String = hint[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let mut more = base.to_vec();
    more.extend(["--cpu-offload-layers", &n]);
    assert_eq!(run(&more).code, 0, "{hint}");
}

/// `sweep` said which pipeline schedule and CP exchange its points ran, but not that they
/// offloaded activations, in the JSON or the CSV: two sweeps of one model, with and without
/// `--cpu-offload-layers`, could not be told apart.
#[test]
fn a_sweep_says_its_points_offload() {
    let args = |format: &'static str, offload: bool| {
        let mut a = vec![
            "sweep",
            "--model",
            "llama3-70b",
            "--gpu",
            "gb200-nvl72",
            "--gpus-per-node",
            "4",
            "--axis",
            "nodes",
            "--values",
            "16,32",
            "--global-batch",
            "256",
            "--format",
            format,
        ];
        if offload {
            a.extend(["--cpu-offload-layers", "40"]);
        }
        a
    };
    assert_eq!(json(&args("json", true))["cpu_offload_layers"], 40);
    assert!(json(&args("json", false))["cpu_offload_layers"].is_null());
    let csv = |offload| {
        let r = run(&args("csv", offload));
        assert_eq!(r.code, 0, "{}", r.stderr);
        let mut lines = r.stdout.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let column = header
            .iter()
            .position(|h| *h == "cpu_offload_layers")
            .expect("a cpu_offload_layers column");
        lines
            .map(|l| l.split(',').nth(column).unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(csv(true), ["40", "40"]);
    assert_eq!(csv(false), ["0", "0"]);
}
