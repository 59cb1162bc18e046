//! Tensor-core kernels run at the GPU's sustained clock (MSMF/MAMF, `sustained_matmul_fraction`),
//! relative to the share the fitted framework efficiency already holds (validation/FIT.md,
//! "Tensor-core kernels at the sustained clock").

mod common;

use common::*;
use tpsim::cluster::{Cluster, REFERENCE_SUSTAINED_MATMUL_FRACTION};
use tpsim::cost::compute::Gemm;
use tpsim::specs::load_gpu;

fn cluster(gpu: &str) -> Cluster {
    Cluster {
        gpu: load_gpu(gpu).unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    }
}

/// The measured shares as the profiles carry them: B200 0.823 (its own measurement), GB200 and
/// GB300 B200's, H100 H200's, which is the reference, and A100 none (the reference too).
#[test]
fn each_profile_runs_its_tensor_cores_at_its_sustained_share() {
    let factor = |gpu: &str| load_gpu(gpu).unwrap().sustained_clock_factor();
    let blackwell = 0.823 / REFERENCE_SUSTAINED_MATMUL_FRACTION;
    for gpu in [
        "b200-sxm-180g",
        "gb200-nvl72",
        "gb300-nvl72",
        "b300-sxm-288g",
    ] {
        assert!(
            (factor(gpu) - blackwell).abs() < 1e-12,
            "{gpu}: {}",
            factor(gpu)
        );
    }
    for gpu in [
        "h100-sxm-80g",
        "h200-sxm-141g",
        "h800-sxm-80g",
        "a100-sxm-80g",
    ] {
        assert_eq!(factor(gpu), 1.0, "{gpu}");
    }
    assert!((blackwell - 0.928).abs() < 0.001, "{blackwell}");
}

/// A compute-bound GEMM slows by the factor; a memory-bound one (few rows, the HBM roof) does not,
/// since the HBM clock is not the SM clock.
#[test]
fn only_the_compute_roof_moves() {
    let b200 = cluster("b200-sxm-180g");
    let mut burst = b200.clone();
    burst.gpu.sustained_matmul_fraction = None;
    let big = Gemm {
        m: 8192.0,
        n: 8192.0,
        k: 8192.0,
        batch: 1.0,
    };
    let skinny = Gemm {
        m: 8.0,
        n: 8192.0,
        k: 8192.0,
        batch: 1.0,
    };
    let ratio = big.time(&b200) / big.time(&burst);
    assert!(
        (ratio - REFERENCE_SUSTAINED_MATMUL_FRACTION / 0.823).abs() < 1e-9,
        "{ratio}"
    );
    assert_eq!(skinny.time(&b200), skinny.time(&burst));
}

/// A profile file whose share is not a fraction is refused with the key, the value and the rule.
#[test]
fn a_share_outside_zero_to_one_is_refused() {
    let dir = scratch("sustained", "bad-share");
    let profile = std::fs::read_to_string(format!("{ROOT}/clusters/b200-sxm-180g.yaml")).unwrap();
    for bad in ["0", "1.5", "-0.2"] {
        let text = profile.replacen(
            "sustained_matmul_fraction: 0.823",
            &format!("sustained_matmul_fraction: {bad}"),
            1,
        );
        assert_ne!(text, profile);
        std::fs::write(dir.join("mine.yaml"), &text).unwrap();
        let r = run_in(
            &dir,
            &[
                "plan",
                "--params",
                "7B",
                "--nodes",
                "1",
                "--gpu",
                "mine.yaml",
            ],
        );
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.contains("sustained_matmul_fraction")
                && r.stderr.contains(bad)
                && r.stderr.contains("fraction"),
            "{}",
            r.stderr
        );
    }
}

/// The header says when a GPU's tensor cores run below their burst rate, and the JSON carries the
/// factor; a Hopper plan says nothing of it.
#[test]
fn the_header_and_the_json_say_the_sustained_share() {
    let args = |gpu: &'static str| {
        vec![
            "eval",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--gpu",
            gpu,
            "--tp",
            "1",
            "--pp",
            "1",
            "--global-batch",
            "64",
        ]
    };
    let r = run(&args("b200-sxm-180g"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("tensor-core kernels 7% slower than the fitted efficiencies give")
            && r.stdout.contains("0.823 against the reference 0.887"),
        "{}",
        r.stdout
    );
    let r = run(&args("h100-sxm-80g"));
    assert!(!r.stdout.contains("sustained/burst"), "{}", r.stdout);
    let out = json(&[&args("b200-sxm-180g")[..], &["--format", "json"]].concat());
    let factor = out["cluster"]["sustained_clock_factor"].as_f64().unwrap();
    assert!((factor - 0.823 / 0.887).abs() < 1e-9, "{factor}");
}
