//! The pure cost model: `evaluate(model, cluster, training, plan) -> Estimate`. No I/O, no globals,
//! no allocation, so the planner can call it millions of times a second from any thread.
//!
//! Overlap assumptions, stated once:
//! - TP collectives sit on the critical path (Megatron-LM issues them synchronously between GEMMs).
//! - PP sends and receives are synchronous in 1F1B: two per micro-batch per model chunk are exposed.
//! - DP gradient reduction overlaps with the backward pass of the micro-batch that produces it
//!   (PyTorch DDP buckets, Megatron `overlap_grad_reduce`); what does not fit in that window is
//!   exposed. ZeRO's parameter all-gathers after the optimizer step are exposed; ZeRO-3's forward
//!   gathers hide behind the forward. Hidden communication still costs 15% of its time
//!   ([`OVERLAP_COMPUTE_PENALTY`]).
//! - The optimizer step runs after all of that.

pub mod comm;
pub mod compute;
pub mod ledger;
pub mod memory;
pub mod pipeline;
pub mod schedule;
pub mod simulated;

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, Training};
use crate::units::{Bytes, Seconds};
use comm::{Collective, Comm, GroupComm};
use compute::{LayerTime, layer_time, optimizer_time, output_layer_time};
use memory::Memory;

/// Fraction of overlapped communication time that still lands on the step (see `evaluate`).
pub const OVERLAP_COMPUTE_PENALTY: f64 = 0.15;

/// Where the time of one step goes; the parts add up to `step_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    pub step_s: Seconds,
    pub compute_s: Seconds,
    pub tp_comm_exposed_s: Seconds,
    pub pp_comm_exposed_s: Seconds,
    pub dp_comm_exposed_s: Seconds,
    pub bubble_s: Seconds,
    pub optimizer_s: Seconds,
}

/// Why a plan cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Infeasible {
    OutOfMemory {
        need_bytes: Bytes,
        have_bytes: Bytes,
    },
}

impl Infeasible {
    pub fn key(&self) -> &'static str {
        match self {
            Infeasible::OutOfMemory { .. } => "out_of_memory",
        }
    }
}

/// Everything tpsim predicts for one plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    #[serde(flatten)]
    pub plan: ParallelPlan,
    pub memory: Memory,
    pub comm: Comm,
    pub bubble_fraction: f64,
    pub time: StepTime,
    pub model_tflops_per_gpu: f64,
    pub hardware_tflops_per_gpu: f64,
    pub mfu: f64,
    pub tokens_per_s: f64,
    pub time_to_train_s: Option<f64>,
    pub infeasible: Option<Infeasible>,
}

impl Estimate {
    pub fn fits(&self) -> bool {
        self.infeasible.is_none()
    }
}

/// Per-micro-batch time of one pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StageTime {
    compute: f64,
    forward: f64,
    backward: f64,
    tp: f64,
    pp: f64,
}

impl StageTime {
    fn total(&self) -> f64 {
        self.compute + self.tp + self.pp
    }
}

/// The per-micro-batch costs both the closed form (`evaluate`) and the schedule simulation
/// (`simulated::stage_costs`) build on, computed in one place so the two cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UnitCosts {
    /// One transformer layer: forward, backward, recompute.
    pub layer: LayerTime,
    /// The output layer and loss (last stage only).
    pub output: LayerTime,
    /// One TP all-reduce of the b·s·h activations (or its AG + RS pair with SP).
    pub tp_allreduce_s: f64,
    /// One stage-boundary send of a micro-batch's activations (0 without pipeline parallelism).
    pub pp_send_s: f64,
    /// Where the TP, DP and PP groups sit.
    pub placements: (comm::Placement, comm::Placement, comm::Placement),
}

#[inline]
pub(crate) fn unit_costs(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> UnitCosts {
    let seq_len = training.seq_len;
    let placements = comm::group_placements(cluster, plan);
    let speed = |p: comm::Placement| cluster.group_speed(p.link, p.members_per_node);
    let (tp_speed, pp_speed) = (speed(placements.0), speed(placements.2));
    UnitCosts {
        layer: layer_time(
            model,
            cluster,
            plan.micro_batch,
            seq_len,
            plan.tp,
            plan.sequence_parallel,
            plan.recompute,
            training.attention,
        ),
        output: output_layer_time(model, cluster, plan.micro_batch, seq_len, plan.tp),
        tp_allreduce_s: Collective::AllReduce.time(
            comm::tp_tensor_bytes(model, training, plan),
            plan.tp,
            tp_speed,
        ),
        pp_send_s: if plan.pp > 1 {
            Collective::SendRecv.time(comm::pp_message_bytes(model, training, plan), 2, pp_speed)
        } else {
            0.0
        },
        placements,
    }
}

/// Evaluates one plan.
pub fn evaluate(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Estimate {
    let seq_len = training.seq_len;
    let memory = memory::memory(model, cluster, training, plan);
    let UnitCosts {
        layer,
        output,
        tp_allreduce_s,
        pp_send_s,
        placements: (tp_place, dp_place, pp_place),
    } = unit_costs(model, cluster, training, plan);
    let (tp_link, dp_link, pp_link) = (tp_place.link, dp_place.link, pp_place.link);
    let m = f64::from(plan.num_microbatches);
    let v = f64::from(plan.vpp);
    let p = f64::from(plan.pp);

    // TP: all-reduce-equivalents per layer per micro-batch.
    let tp_tensor = comm::tp_tensor_bytes(model, training, plan);
    let tp_per_layer_count = comm::tp_collectives_per_layer(plan.recompute);
    let tp_per_layer_s = tp_per_layer_count * tp_allreduce_s;
    let tp_per_layer_wire =
        tp_per_layer_count * Collective::AllReduce.wire_factor(plan.tp) * tp_tensor;

    // PP: forward activation and backward gradient per micro-batch per model chunk.
    let (pp_per_mb_s, pp_per_mb_wire) = if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        (2.0 * v * pp_send_s, 2.0 * v * message)
    } else {
        (0.0, 0.0)
    };

    let stage_time = |layers: u32, with_output: bool| {
        let n = f64::from(layers);
        let out = if with_output {
            output
        } else {
            LayerTime::default()
        };
        StageTime {
            compute: n * layer.total() + out.total(),
            forward: n * layer.forward + out.forward,
            backward: n * (layer.backward + layer.recompute) + out.backward,
            tp: n * tp_per_layer_s,
            pp: pp_per_mb_s,
        }
    };
    let (slowest, mean_total, max_layers) = if plan.pp == 1 {
        let only = stage_time(model.layers, true);
        (only, only.total(), model.layers)
    } else {
        let first = stage_time(plan.stages.first, false);
        let last = stage_time(plan.stages.last, true);
        let middle = stage_time(plan.stages.middle_max, false);
        let mut slowest = first;
        for candidate in [middle, last] {
            if (plan.pp > 2 || candidate == last) && candidate.total() > slowest.total() {
                slowest = candidate;
            }
        }
        let mean = (first.total() + (p - 2.0) * middle.total() + last.total()) / p;
        (slowest, mean, plan.stages.max_layers())
    };

    // Bubble: (p − 1)/v idle slots of one micro-batch's stage time (Narayanan et al. 2021 §2.2).
    let bubble_fraction = pipeline::bubble_fraction(plan.pp, plan.vpp, plan.num_microbatches);
    let bubble_s = if plan.pp > 1 {
        (p - 1.0) / v * mean_total
    } else {
        0.0
    };

    // DP on the stage with the most parameters.
    let params = memory::max_stage_params(model, plan);
    let dp = comm::dp_traffic(cluster, training, plan, params, dp_place);
    let dp_not_hidden = dp.overlap_windows
        * (dp.reduce_per_overlap_window_s - slowest.backward).max(0.0)
        + m * (dp.forward_gather_per_mb_s - slowest.forward).max(0.0)
        + dp.exposed_s;
    // Overlap is not free: NCCL's kernels occupy SMs and HBM bandwidth while compute runs, so each
    // second of communication hidden behind compute still slows it (Calculon, Isaev et al. 2023,
    // `systems/a100_80g.json` "processor_usage": 0.15 for the network).
    let dp_hidden = (dp.total_s - dp_not_hidden).max(0.0);
    let dp_exposed = dp_not_hidden + OVERLAP_COMPUTE_PENALTY * dp_hidden;

    let params_updated = if plan.zero >= 1 {
        params / f64::from(plan.dp)
    } else {
        params
    };
    let optimizer_s = optimizer_time(cluster, params_updated, training.grad_dtype.bytes()).0;

    let compute_s = m * slowest.compute;
    let tp_exposed = m * slowest.tp;
    let pp_exposed = m * slowest.pp;
    let step_s = compute_s + tp_exposed + pp_exposed + bubble_s + dp_exposed + optimizer_s;

    let gpus = f64::from(cluster.total_gpus());
    let model_flops = model.model_flops_per_step(plan.global_batch, seq_len).0;
    let attention_core = model
        .attention_core_forward_flops(plan.global_batch, seq_len)
        .0
        * f64::from(model.layers);
    let recompute_flops = match (plan.recompute, training.attention) {
        (Recompute::None, _) | (Recompute::Selective, AttentionKernel::Flash) => 0.0,
        (Recompute::Selective, AttentionKernel::Unfused) => attention_core,
        (Recompute::Full, _) => {
            model.layer_forward_flops(plan.global_batch, seq_len).0 * f64::from(model.layers)
        }
    };
    // FlashAttention's backward recomputes QKᵀ: half the attention core's forward FLOPs again.
    let flash_flops = match training.attention {
        AttentionKernel::Flash => 0.5 * attention_core,
        AttentionKernel::Unfused => 0.0,
    };
    let recompute_flops = recompute_flops + flash_flops;
    let peak = cluster.gpu.peak_flops().0;
    let tokens_per_s = f64::from(plan.global_batch) * f64::from(seq_len) / step_s;

    Estimate {
        plan: *plan,
        memory,
        comm: Comm {
            tp: GroupComm {
                wire_bytes: Bytes(tp_per_layer_wire * f64::from(max_layers) * m),
                time_s: Seconds(tp_per_layer_s * f64::from(max_layers) * m),
                link: tp_link,
            },
            pp: GroupComm {
                wire_bytes: Bytes(pp_per_mb_wire * m),
                time_s: Seconds(pp_exposed),
                link: pp_link,
            },
            dp: GroupComm {
                wire_bytes: Bytes(dp.wire_bytes),
                time_s: Seconds(dp.total_s),
                link: dp_link,
            },
        },
        bubble_fraction,
        time: StepTime {
            step_s: Seconds(step_s),
            compute_s: Seconds(compute_s),
            tp_comm_exposed_s: Seconds(tp_exposed),
            pp_comm_exposed_s: Seconds(pp_exposed),
            dp_comm_exposed_s: Seconds(dp_exposed),
            bubble_s: Seconds(bubble_s),
            optimizer_s: Seconds(optimizer_s),
        },
        model_tflops_per_gpu: model_flops / step_s / gpus / 1e12,
        hardware_tflops_per_gpu: (model_flops + recompute_flops) / step_s / gpus / 1e12,
        mfu: model_flops / (step_s * gpus * peak),
        tokens_per_s,
        time_to_train_s: training.tokens.map(|tokens| tokens / tokens_per_s),
        infeasible: if memory.fits {
            None
        } else {
            Some(Infeasible::OutOfMemory {
                need_bytes: memory.total_bytes,
                have_bytes: memory.capacity_bytes,
            })
        },
    }
}
