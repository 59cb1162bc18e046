//! Megatron-FSDP under full recompute gathers each layer's weights once for the recomputed
//! forward and its backward together (megatron_fsdp.py `_post_forward` releases them lazily in
//! the `PRE_BACKWARD` state; `all_gather_params` skips every bucket not `EMPTY`), except where the
//! backward reads another copy: quantized MXFP8 weights, whose column-wise `transpose_weight_buffer`
//! the backward gathers on its own. DeepSpeed's ZeRO-3 re-fetches around the recompute, FSDP2
//! never does. (`cost::comm::zero3_regathers_for_recompute`; validation/FIT.md "Megatron-FSDP's
//! gathers under full recompute".)

mod common;

/// DP wire bytes per GPU per step of Llama 3 8B on 2 nodes, tp 2, ZeRO-3, as `eval` prints them.
fn dp_wire_gb(framework: &str, precision: &str, recompute: &str) -> f64 {
    let gpu = if precision == "mxfp8" {
        "b200-sxm-180g"
    } else {
        "h100-sxm-80g"
    };
    let out = common::json(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        gpu,
        "--nodes",
        "2",
        "--tp",
        "2",
        "--zero",
        "3",
        "--recompute",
        recompute,
        "--precision",
        precision,
        "--framework",
        framework,
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    out["plans"][0]["comm"]["dp"]["wire_bytes"]
        .as_f64()
        .expect("comm.dp.wire_bytes")
        / 1e9
}

#[test]
fn megatron_fsdp_gathers_no_more_under_full_recompute_in_bf16() {
    // Before the fix: 224.85 GB without recompute, 281.06 GB with (one more gather a micro-batch).
    let none = dp_wire_gb("megatron-core", "bf16", "none");
    let full = dp_wire_gb("megatron-core", "bf16", "full");
    assert!(none > 0.0, "ZeRO-3 moves gradients and weights: {none} GB");
    assert!(
        (full - none).abs() < 1e-6 * none,
        "Megatron-FSDP's recomputed forward gathers for the backward too: {full} GB with full recompute, {none} GB without"
    );
}

#[test]
fn mxfp8_transpose_copies_and_deepspeed_still_gather_for_the_recompute() {
    let mx_none = dp_wire_gb("megatron-core", "mxfp8", "none");
    let mx_full = dp_wire_gb("megatron-core", "mxfp8", "full");
    assert!(
        mx_full > mx_none * 1.05,
        "MXFP8's backward gathers its column-wise copy apart from the recompute's row-wise one: {mx_full} vs {mx_none} GB"
    );
    let ds_none = dp_wire_gb("deepspeed", "bf16", "none");
    let ds_full = dp_wire_gb("deepspeed", "bf16", "full");
    assert!(
        ds_full > ds_none * 1.05,
        "DeepSpeed's ZeRO-3 re-fetches around the recompute: {ds_full} vs {ds_none} GB"
    );
    let tt_none = dp_wire_gb("torchtitan", "bf16", "none");
    let tt_full = dp_wire_gb("torchtitan", "bf16", "full");
    assert!(
        (tt_full - tt_none).abs() < 1e-6 * tt_none,
        "FSDP2 gathers once for the recompute and the backward: {tt_full} vs {tt_none} GB"
    );
}
