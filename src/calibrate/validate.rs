//! `tpsim validate`: run one real transformer layer with a plan's TP split, forward and backward,
//! and hold the cost model to it — predicted vs measured layer time and TP communication time, the
//! bytes each rank put on the wire vs the model's count, and the numerics of the sharded layer vs
//! the unsharded one.

use serde::Serialize;

use super::{CalibrationError, KernelTimer, LayerSpec, Reps};
use crate::cluster::{Cluster, GpuProfile, Link};
use crate::cost::comm::{ACTIVATION_BYTES, Collective, tp_collectives_per_layer};
use crate::cost::compute::layer_time;
use crate::model::Model;
use crate::plan::Recompute;

/// One TP configuration to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    pub tp: u32,
    pub sequence_parallel: bool,
    pub micro_batch: u32,
}

/// Predicted vs measured for one case. Times are one layer's forward + backward.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationRow {
    pub tp: u32,
    pub sequence_parallel: bool,
    pub micro_batch: u32,
    pub ranks_run: u32,
    pub predicted_layer_ms: f64,
    pub measured_layer_ms: f64,
    /// (predicted − measured) / measured; None (null) where nothing was measured.
    pub layer_error: Option<f64>,
    pub predicted_comm_ms: f64,
    pub measured_comm_ms: f64,
    /// None (null in JSON and YAML) at tp 1, where there is no TP communication, or where nothing
    /// was measured: never a NaN, which YAML would write as `.nan`.
    pub comm_error: Option<f64>,
    pub wire_bytes_per_rank: u64,
    pub model_wire_bytes_per_rank: u64,
    /// Wire bytes equal the model's (true without a comparison when fewer than tp ranks ran).
    pub bytes_match: bool,
    pub max_relative_error: Option<f64>,
    pub tolerance: f64,
    pub numerics_ok: Option<bool>,
    pub tensor_errors: Vec<(String, f64)>,
    pub notes: Vec<String>,
}

impl ValidationRow {
    /// Numerics within tolerance (or not checked) and byte count as modelled.
    pub fn passed(&self) -> bool {
        self.numerics_ok != Some(false) && self.bytes_match
    }
}

/// The layer of `model` with case `case`'s split; errors name the rule a degree breaks.
pub fn layer_spec(model: &Model, case: Case) -> Result<LayerSpec, CalibrationError> {
    let t = case.tp;
    if t == 0 {
        return Err(CalibrationError::Input(
            "--tp 0 must be at least 1 (one GPU holds the whole layer); e.g. --tp 2".into(),
        ));
    }
    // The layer run is dense, with standard attention of hidden / heads per head over the whole
    // sequence (`LayerSpec`); the prediction it is compared with prices the model's own layer.
    // A part of the model the run leaves out would compare two different layers, without a word.
    let mut unrun = Vec::new();
    if model.hybrid.is_some() {
        unrun.push("a hybrid Mamba-Transformer stack (Mamba-2 mixers, attention and MLPs in layers of their own)");
    }
    if model.moe.is_some() {
        unrun.push("routed experts (--num-experts)");
    }
    if model.mla.is_some() {
        unrun.push("multi-head latent attention (--kv-lora-rank)");
    } else if u64::from(model.head_dim) * u64::from(model.heads) != u64::from(model.hidden) {
        unrun.push("a head width other than hidden / heads (--head-dim)");
    }
    if model
        .attention_window
        .is_some_and(|w| w.has_effect(model.seq_len))
    {
        unrun.push("sliding-window attention (--attention-window)");
    }
    if !unrun.is_empty() {
        return Err(CalibrationError::Input(format!(
            "{} has {}, which validate's layer does not run (one dense layer, standard attention of hidden / heads per head over the whole sequence), so it would compare another layer with this model's prediction; validate a dense model of the same hidden size, heads and MLP width (e.g. --layers 2 --hidden {} --heads {} --ffn-hidden {})",
            model.name,
            unrun.join(" and "),
            model.hidden,
            model.heads,
            model.ffn_hidden
        )));
    }
    if !model.heads.is_multiple_of(t) || !model.kv_heads.is_multiple_of(t) {
        let common = crate::integer::gcd(u64::from(model.heads), u64::from(model.kv_heads));
        let valid = crate::plan::divisors(u32::try_from(common).unwrap_or(1))
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(CalibrationError::Input(format!(
            "--tp {t} must divide the {} attention heads and {} KV heads of {}; choose a common divisor (valid: {valid})",
            model.heads, model.kv_heads, model.name
        )));
    }
    if !model.ffn_hidden.is_multiple_of(t) {
        return Err(CalibrationError::Input(format!(
            "--tp {t} must divide the MLP width {} of {}",
            model.ffn_hidden, model.name
        )));
    }
    if case.micro_batch == 0 {
        return Err(CalibrationError::Input(
            "--micro-batch 0 must be at least 1; e.g. --micro-batch 1".into(),
        ));
    }
    let tokens = u64::from(model.seq_len) * u64::from(case.micro_batch);
    if case.sequence_parallel && t == 1 {
        return Err(CalibrationError::Input(
            "--sequence-parallel needs --tp 2 or more: at --tp 1 there are no TP collectives to split; drop --sequence-parallel or use e.g. --tp 2".into(),
        ));
    }
    if case.sequence_parallel && tokens % u64::from(t) != 0 {
        return Err(CalibrationError::Input(format!(
            "--sequence-parallel splits {tokens} tokens over --tp {t}, which does not divide them; change --seq-len or --micro-batch"
        )));
    }
    Ok(LayerSpec {
        hidden: model.hidden as usize,
        heads: model.heads as usize,
        kv_heads: model.kv_heads as usize,
        ffn_hidden: model.ffn_hidden as usize,
        gated_mlp: model.gated_mlp,
        seq_len: model.seq_len as usize,
        micro_batch: case.micro_batch as usize,
        tp: t as usize,
        sequence_parallel: case.sequence_parallel,
    })
}

/// The cost model's TP wire bytes per rank for one layer's forward + backward (no recompute):
/// `tp_collectives_per_layer` all-reduce equivalents of the b·s·h activation, each sending
/// `wire_factor` of it (`cost::comm`), and with sequence parallelism the backward's two
/// all-gathers of the column-parallel inputs again (`cost::unit_costs`, `regathers`).
pub fn model_wire_bytes(model: &Model, case: Case) -> f64 {
    let tensor = f64::from(case.micro_batch)
        * f64::from(model.seq_len)
        * f64::from(model.hidden)
        * ACTIVATION_BYTES;
    layer_wire_bytes(tensor, case.tp, case.sequence_parallel)
}

/// TP wire bytes per rank of one layer's forward + backward on `ranks` ranks, for a b·s·h
/// activation of `tensor_bytes`: what both calibration layers (CPU twin and CUDA) send.
pub fn layer_wire_bytes(tensor_bytes: f64, ranks: u32, sequence_parallel: bool) -> f64 {
    tp_collectives_per_layer(Recompute::None)
        * Collective::AllReduce.wire_factor(ranks)
        * tensor_bytes
        + regathers(sequence_parallel) * Collective::AllGather.wire_factor(ranks) * tensor_bytes
}

/// All-gathers the sequence-parallel backward runs again per layer: one per column-parallel GEMM.
fn regathers(sequence_parallel: bool) -> f64 {
    if sequence_parallel { 2.0 } else { 0.0 }
}

/// Predicted (layer compute, TP communication) seconds of one layer's forward + backward for the
/// bare kernels: the profile's framework efficiency set to 1 and its per-layer overhead to 0, since
/// the validation runs kernels, not a training framework; and its tensor cores at their burst rate
/// (no `sustained_matmul_fraction`), since a validation's few iterations are a burst.
pub fn predict(model: &Model, profile: &GpuProfile, case: Case) -> (f64, f64) {
    let mut bare = profile.clone();
    bare.framework_efficiency = 1.0;
    bare.layer_overhead_us = 0.0;
    bare.sustained_matmul_fraction = None;
    let cluster = Cluster {
        gpus_per_node: bare.gpus_per_node,
        gpu: bare,
        nodes: 1,
    };
    // The measured layer (`calibrate::layer`) rotates nothing: priced without the RoPE kernel.
    let unrotated = Model {
        position_embedding: crate::model::PositionEmbedding::None,
        ..model.clone()
    };
    let model = &unrotated;
    let t = layer_time(
        model,
        &cluster,
        case.micro_batch,
        model.seq_len,
        case.tp,
        case.sequence_parallel,
        Recompute::None,
        // The validated layer materialises the attention scores (no fused attention kernel).
        crate::training::AttentionKernel::Unfused,
    );
    let tensor = f64::from(case.micro_batch)
        * f64::from(model.seq_len)
        * f64::from(model.hidden)
        * ACTIVATION_BYTES;
    let nvlink = cluster.link_speed(Link::Nvlink);
    let comm = tp_collectives_per_layer(Recompute::None)
        * Collective::AllReduce.time(tensor, case.tp, nvlink)
        + regathers(case.sequence_parallel) * Collective::AllGather.time(tensor, case.tp, nvlink);
    (t.forward + t.backward, comm)
}

fn rel(predicted: f64, measured: f64) -> Option<f64> {
    let error = (predicted - measured) / measured;
    (measured > 0.0 && error.is_finite()).then_some(error)
}

/// Runs one case on the backend and compares it with the cost model under `profile`.
pub fn validate_case(
    timer: &mut dyn KernelTimer,
    model: &Model,
    profile: &GpuProfile,
    case: Case,
    reps: Reps,
) -> Result<ValidationRow, CalibrationError> {
    let spec = layer_spec(model, case)?;
    let run = timer.run_layer(&spec, reps)?;
    let (predicted_compute, predicted_comm) = predict(model, profile, case);
    let predicted_layer = predicted_compute + predicted_comm;
    let model_bytes = model_wire_bytes(model, case);
    let numerics_ok = run.max_relative_error.map(|e| e <= run.tolerance);
    Ok(ValidationRow {
        tp: case.tp,
        sequence_parallel: case.sequence_parallel,
        micro_batch: case.micro_batch,
        ranks_run: run.ranks_run as u32,
        predicted_layer_ms: predicted_layer * 1e3,
        measured_layer_ms: run.layer.median_s * 1e3,
        layer_error: rel(predicted_layer, run.layer.median_s),
        predicted_comm_ms: predicted_comm * 1e3,
        measured_comm_ms: run.comm.median_s * 1e3,
        // No TP communication at tp 1: an error against nothing is not a number.
        comm_error: if case.tp > 1 {
            rel(predicted_comm, run.comm.median_s)
        } else {
            None
        },
        wire_bytes_per_rank: run.wire_bytes_per_rank,
        model_wire_bytes_per_rank: model_bytes.round() as u64,
        // Comparable only when all t ranks ran; otherwise the notes say what was scaled.
        bytes_match: run.ranks_run as u32 != case.tp
            || (run.wire_bytes_per_rank as f64 - model_bytes).abs() < 0.5,
        max_relative_error: run.max_relative_error,
        tolerance: run.tolerance,
        numerics_ok,
        tensor_errors: run.errors,
        notes: run.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::evaluate;
    use crate::plan::{ParallelPlan, PlanRequest};
    use crate::training::Training;

    #[test]
    fn layer_wire_bytes_are_the_estimates_tp_bytes_per_layer_and_micro_batch() {
        let model = crate::model::tests::gpt3_175b();
        let gpu: GpuProfile = yaml_serde::from_str(crate::specs::BUNDLED_GPUS[0].1).unwrap();
        let cluster = Cluster {
            gpus_per_node: 8,
            gpu,
            nodes: 1,
        };
        let training = Training::megatron_lm_2021(model.seq_len, 8);
        for (tp, sp) in [(2, false), (8, false), (8, true)] {
            let request = PlanRequest {
                tp,
                pp: 1,
                dp: 8 / tp,
                vpp: 1,
                micro_batch: 1,
                sequence_parallel: sp,
                recompute: Recompute::None,
                zero: 0,
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let estimate = evaluate(&model, &cluster, &training, &plan);
            let case = Case {
                tp,
                sequence_parallel: sp,
                micro_batch: 1,
            };
            // The layers' TP bytes: the estimate's less the model's ends' (the embedding and the
            // output layer, once per micro-batch: `embedding_output_tp`), which the ledger lists apart.
            let ledger = crate::cost::ledger::ledger(&model, &cluster, &training, &plan);
            let ends: f64 = ledger
                .entries
                .iter()
                .filter(|e| e.scope == crate::cost::ledger::Scope::PerMicrobatch)
                .map(|e| e.count * e.wire_bytes)
                .sum();
            assert!(ends > 0.0);
            let per_layer = (estimate.comm.tp.wire_bytes.0 - ends)
                / f64::from(model.layers)
                / f64::from(plan.num_microbatches);
            assert!((model_wire_bytes(&model, case) / per_layer - 1.0).abs() < 1e-12);
        }
    }
}
