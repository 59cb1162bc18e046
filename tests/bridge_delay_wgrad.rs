//! Megatron-Bridge turns on delayed weight gradients with the MoE all-to-all overlap
//! (`_set_moe_a2a_overlap_overrides`: `delay_wgrad_compute = True`, scripts/performance/utils/
//! overrides.py:196 at 067f987d; run_script.py:89 at 9a5e79865 for 25.09), so a published run of
//! such a recipe is planned with `--delay-wgrad-compute`: its column-parallel input gradients are
//! waited at once instead of hiding under their wgrad GEMMs. Before, the recipe rule set the
//! overlap and not the delay, and the audit's async hiding (`column_grad_collective_async`) made
//! those rows 0.3–0.8 points faster than the code they ran.

mod common;

use common::run;

fn tp_comm_line(runs: &str, id: &str) -> String {
    let r = run(&["accuracy", "--runs", runs, "--run", id]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("TP comm"))
        .unwrap_or_else(|| panic!("no TP comm line: {}", r.stdout))
        .to_string()
}

#[test]
fn a_bridge_row_with_the_moe_alltoall_overlap_runs_delayed_wgrad() {
    // DeepSeek-V3 on 1,024 H100 (25.09): A2A_1F1B on H100, TP 2, TP comm overlap off.
    let line = tp_comm_line(
        "validation/modern_runs.yaml",
        "mbridge-25.09-pretrain-deepseek_v3-h100-1024g-fp8-gbs8192",
    );
    assert!(line.contains("--delay-wgrad-compute"), "{line}");
}

#[test]
fn a_bridge_row_without_the_overlap_keeps_wgrad_in_place() {
    // Qwen3-235B on 64 GB200 (25.09): no MoE all-to-all overlap in that release's script.
    let line = tp_comm_line(
        "validation/modern_runs.yaml",
        "mbridge-25.09-pretrain-qwen3_235b_a22b-gb200-64g-fp8-gbs1024",
    );
    assert!(!line.contains("--delay-wgrad-compute"), "{line}");
}
