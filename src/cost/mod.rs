//! The pure cost model: `evaluate(model, cluster, training, plan) -> Estimate`. No I/O, no globals,
//! no allocation, so the planner can call it millions of times a second from any thread.
//!
//! A plan is a set of communication groups (`groups.rs`: kind, size, stride, link) and a step is a
//! sum of terms (`terms.rs`: compute, each group's communication, bubble, optimizer), each with its
//! bytes, its full time, its exposed time and what hides the rest. What overlaps is the framework's
//! (`TrainingFramework::default_overlap`, each setting overridable):
//! - TP collectives sit on the critical path unless TP communication overlap is on (Megatron-Core
//!   userbuffers, torchtitan async TP, sequence parallelism required): then each all-gather and
//!   reduce-scatter runs in chunks under its neighbouring linear GEMM, which is cut into tp pieces
//!   (so it runs at the smaller pieces' efficiency); what the GEMMs cannot cover stays exposed.
//! - CP's K/V ring exchange runs under the attention blocks of the step it feeds (Transformer
//!   Engine's P2P ring attention); a send longer than its step's attention is exposed.
//! - PP sends and receives are synchronous (two per micro-batch per model chunk exposed) unless the
//!   interleaved schedule overlaps them (`--overlap-p2p-communication`, vpp > 1).
//! - Gradient reduction overlaps with the backward pass of the micro-batch that produces it when the
//!   framework buckets it (PyTorch DDP, Megatron `overlap_grad_reduce`, FSDP); what does not fit in
//!   that window is exposed, and so is the last bucket. The distributed optimizer's parameter
//!   all-gather after the step is exposed unless `overlap_param_gather` hides it under the next
//!   forward; ZeRO-3's forward gathers hide behind the forward.
//! - Hidden communication still costs 15% of its time ([`OVERLAP_COMPUTE_PENALTY`]).
//! - The optimizer step runs after all of that.

pub mod cast;
pub mod comm;
pub mod compute;
pub mod context_parallel;
pub mod groups;
pub mod hybrid;
pub mod ledger;
pub mod memory;
pub mod module_recompute;
pub mod moe;
pub mod moe_router;
pub mod pipeline;
pub mod schedule;
pub mod simulated;
pub mod terms;
pub mod torch_ring;
pub mod v_schedule;

use serde::Serialize;

use crate::cluster::{Cluster, Link};
use crate::model::Model;
use crate::model::{BlockShares, HybridRun};
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, CpExchange, SelectiveRecompute, Training};
use crate::units::{Bytes, Seconds};
use comm::{Collective, Comm, GroupComm};
use compute::{LayerShard, LayerTime, layer_time_sharded, optimizer_time, output_layer_time};
use groups::{GroupKind, Groups};
use memory::Memory;
use terms::{HiddenBy, StepTerms, Term, TermKind};

/// Share of the bf16 peak the framework's fused attention kernel reaches on this model's heads:
/// the profile's rate at head width 128 (`TrainingFramework::attention_efficiency`) times the
/// kernel's rate at the model's query/key width relative to 128
/// (`TrainingFramework::attention_head_width_factor`).
fn attention_efficiency(model: &Model, cluster: &Cluster, training: &Training) -> f64 {
    let framework = training.framework;
    framework.attention_efficiency(&cluster.gpu)
        * framework.attention_head_width_factor(model.attention_head_dims().0)
}

/// Fraction of overlapped communication time that still lands on the step (see `evaluate`):
/// communication kernels take SMs from the compute they hide under. Calculon (Isaev et al. 2023,
/// `systems/a100_80g.json`) gives `processor_usage` 0.15 for NVLink and 0.02 for InfiniBand, the
/// share of the processor a transfer occupies; tpsim charges 0.15 on every link, because NCCL's
/// network collectives also run on SMs (the reduction and the copies into the proxy's buffers)
/// and the MoE report measures DeepEP, whose traffic is mostly on the NIC, taking about 20% of
/// the GEMMs' rate while it runs ("Scalable Training of MoE Models with Megatron Core", 2026,
/// §4.2.3: 20 SMs). Not fitted.
pub const OVERLAP_COMPUTE_PENALTY: f64 = 0.15;

/// Where the time of one step goes; the parts add up to `step_s`. Each field is the exposed time of
/// one term of `Estimate::terms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    pub step_s: Seconds,
    pub compute_s: Seconds,
    pub tp_comm_exposed_s: Seconds,
    /// The attention's exchange and a hybrid stack's Mamba mixers' together (both over the CP
    /// group).
    pub cp_comm_exposed_s: Seconds,
    pub ep_comm_exposed_s: Seconds,
    pub pp_comm_exposed_s: Seconds,
    /// Gradient reduction and parameter gathers together.
    pub dp_comm_exposed_s: Seconds,
    pub dp_grad_reduce_exposed_s: Seconds,
    pub dp_param_gather_exposed_s: Seconds,
    pub bubble_s: Seconds,
    pub optimizer_s: Seconds,
    /// Activation offloading's copies left on the critical path (`--cpu-offload-layers`).
    pub offload_exposed_s: Seconds,
}

impl StepTime {
    /// Reads the step time off its terms.
    pub fn from_terms(terms: &StepTerms) -> StepTime {
        let e = |kind| Seconds(terms.exposed(kind));
        StepTime {
            step_s: Seconds(terms.step_s()),
            compute_s: e(TermKind::Compute),
            tp_comm_exposed_s: e(TermKind::TpComm),
            cp_comm_exposed_s: Seconds(
                terms.exposed(TermKind::CpComm) + terms.exposed(TermKind::MambaCpComm),
            ),
            ep_comm_exposed_s: e(TermKind::EpComm),
            pp_comm_exposed_s: e(TermKind::PpComm),
            dp_comm_exposed_s: Seconds(
                terms.exposed(TermKind::DpGradReduce) + terms.exposed(TermKind::DpParamGather),
            ),
            dp_grad_reduce_exposed_s: e(TermKind::DpGradReduce),
            dp_param_gather_exposed_s: e(TermKind::DpParamGather),
            bubble_s: e(TermKind::Bubble),
            optimizer_s: e(TermKind::Optimizer),
            offload_exposed_s: e(TermKind::HostOffload),
        }
    }
}

/// Why a plan cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Infeasible {
    OutOfMemory {
        need_bytes: Bytes,
        have_bytes: Bytes,
    },
    /// The activations offloaded to the CPU (`--cpu-offload-layers`) fit the GPU but not the
    /// host memory the profile gives each GPU (`GpuProfile::host_memory_gib_per_gpu`).
    OutOfHostMemory {
        need_bytes: Bytes,
        have_bytes: Bytes,
    },
}

impl Infeasible {
    pub fn key(&self) -> &'static str {
        match self {
            Infeasible::OutOfMemory { .. } => "out_of_memory",
            Infeasible::OutOfHostMemory { .. } => "out_of_host_memory",
        }
    }
}

/// What renting `gpus` GPUs for `seconds` costs at `price_per_gpu_hour`.
pub fn cost_to_train(seconds: f64, gpus: f64, price_per_gpu_hour: f64) -> f64 {
    seconds / 3600.0 * gpus * price_per_gpu_hour
}

/// Everything tpsim predicts for one plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    #[serde(flatten)]
    pub plan: ParallelPlan,
    pub memory: Memory,
    pub comm: Comm,
    /// The closed-form pipeline bubble ratio (p − 1)/(v·m) of Narayanan et al. 2021 §2.2: idle time
    /// over one stage's busy time, a ratio that can exceed 1 (deep pipelines, few micro-batches).
    pub bubble_ratio: f64,
    /// Share of the step the pipeline sits idle, bubble_s / step_s, in [0, 1): what the table's
    /// "bubble %" shows.
    pub bubble_share: f64,
    pub time: StepTime,
    /// The step's terms: what each costs, what of it is exposed and what hides the rest.
    pub terms: StepTerms,
    pub model_tflops_per_gpu: f64,
    pub hardware_tflops_per_gpu: f64,
    pub mfu: f64,
    pub tokens_per_s: f64,
    pub time_to_train_s: Option<f64>,
    /// The time to train x the GPUs x `--price-per-gpu-hour`, in the price's currency: what
    /// renting the cluster for the training costs (`cost_to_train`).
    pub cost_to_train: Option<f64>,
    pub infeasible: Option<Infeasible>,
    /// Transformer layers of the stage whose time sets the step: the per-layer communication in
    /// `comm` and the terms is this stage's (with pp 1, every layer).
    pub slowest_stage_layers: u32,
    /// The MoE layers among them: the ones whose all-to-alls the EP term counts.
    pub slowest_stage_moe_layers: u32,
    /// The MTP layers among them (the last stage's, or with pp 1 the only stage's): the rest of
    /// `slowest_stage_layers` are decoder layers.
    pub slowest_stage_mtp_layers: u32,
    /// A hybrid stack's run of layers on it (its own slice of the pattern,
    /// `pipeline::ChunkLayout::stage_run`): its blocks and MTP depths, in the JSON as
    /// `slowest_stage_blocks`; None (and absent) for a transformer.
    #[serde(
        rename = "slowest_stage_blocks",
        skip_serializing_if = "Option::is_none"
    )]
    pub slowest_stage_run: Option<HybridRun>,
}

/// What the average layer of a run of layers (one pipeline stage's) holds: its MoE layers' share
/// and each block's share. A transformer's layers hold one attention and one MLP each wherever
/// they sit; a hybrid stack's stage holds its slice of the pattern (Megatron-Core slices it per
/// pipeline stage, `select_pipeline_segment` in megatron/core/models/hybrid/
/// hybrid_layer_allocation.py), so its stages can differ in their blocks as well as in their MoE
/// layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerMix {
    /// Share of the layers with an MoE MLP (0 for a dense model).
    pub moe_share: f64,
    /// Each block's share of the layers (`Model::block_shares_of`).
    pub blocks: BlockShares,
    /// A hybrid stack's run of layers these are (what its parameters are counted from); None for
    /// a transformer.
    pub run: Option<HybridRun>,
    /// The layers among these that run their GEMMs in bf16 under a low-precision plan
    /// (`pipeline::Bf16Keep`); None where all run at the plan's precision.
    pub bf16: Option<Bf16Part>,
}

/// The bf16 layers of a [`LayerMix`]: their share of its layers, and their own mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bf16Part {
    pub share: f64,
    pub moe_share: f64,
    pub blocks: BlockShares,
    pub run: Option<HybridRun>,
}

impl Bf16Part {
    /// The bf16 layers as a mix of their own.
    pub fn mix(&self) -> LayerMix {
        LayerMix {
            moe_share: self.moe_share,
            blocks: self.blocks,
            run: self.run,
            bf16: None,
        }
    }
}

impl LayerMix {
    /// Layers of a transformer (one attention and one MLP each), `moe_share` of them MoE layers.
    pub fn transformer(moe_share: f64) -> LayerMix {
        LayerMix {
            moe_share,
            blocks: BlockShares::TRANSFORMER,
            run: None,
            bf16: None,
        }
    }

    /// The average layer of the whole stack, its MTP depths included.
    pub fn whole_model(model: &Model) -> LayerMix {
        LayerMix {
            moe_share: moe::moe_layer_share(model),
            blocks: model.block_shares(),
            run: model.whole_hybrid_run(),
            bf16: None,
        }
    }

    /// Share of the layers with a dense MLP: every layer but the MoE layers in a transformer, the
    /// MLP blocks in a hybrid stack.
    pub fn dense_mlp_share(&self) -> f64 {
        (self.blocks.mlp - self.moe_share).max(0.0)
    }

    /// `layers` layers of which `moe_layers` are MoE layers, a hybrid stack's `run` of them.
    pub fn of(model: &Model, layers: u32, moe_layers: u32, run: Option<HybridRun>) -> LayerMix {
        let moe_share = if model.moe.is_none() || layers == 0 {
            0.0
        } else {
            f64::from(moe_layers.min(layers)) / f64::from(layers)
        };
        LayerMix {
            moe_share,
            blocks: run.map_or(BlockShares::TRANSFORMER, |run| model.block_shares_of(run)),
            run,
            bf16: None,
        }
    }

    /// This mix of `layers` layers with `bf16` of them running their GEMMs in bf16.
    pub fn with_bf16(
        self,
        model: &Model,
        layers: u32,
        bf16: Option<pipeline::Bf16Run>,
    ) -> LayerMix {
        let bf16 = bf16.filter(|b| b.layers > 0 && layers > 0).map(|b| {
            let part = LayerMix::of(model, b.layers, b.moe_layers, b.run);
            Bf16Part {
                share: f64::from(b.layers.min(layers)) / f64::from(layers),
                moe_share: part.moe_share,
                blocks: part.blocks,
                run: part.run,
            }
        });
        LayerMix { bf16, ..self }
    }
}

impl Estimate {
    pub fn fits(&self) -> bool {
        self.infeasible.is_none()
    }
}

/// Per-micro-batch time of one pipeline stage: its compute and the exposed communication that
/// happens inside its forward and backward blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StageTime {
    compute: f64,
    forward: f64,
    backward: f64,
    /// Of `backward`, the weight-gradient GEMMs (`LayerTime::weight_grad`).
    weight: f64,
    /// Stage-boundary sends per micro-batch (2·v; 2 on the first GPU of a V).
    sends: f64,
    tp: f64,
    cp: f64,
    ep: f64,
    pp: f64,
}

impl StageTime {
    fn total(&self) -> f64 {
        self.compute + self.tp + self.cp + self.ep + self.pp
    }

    /// One micro-batch's forward, input gradient and weight gradient with their exposed
    /// communication, the communication shared in proportion to compute: the blocks a split
    /// backward schedules (`v_schedule`).
    fn split(&self) -> [f64; 3] {
        let total = self.total();
        let forward = if self.compute > 0.0 {
            total * self.forward / self.compute
        } else {
            0.0
        };
        [
            forward,
            (total - forward - self.weight).max(0.0),
            self.weight,
        ]
    }
}

/// Exposed part of `comm_s` run under `window_s` of compute: what the window cannot cover, plus the
/// slowdown the hidden part still causes.
pub(crate) fn exposed_under(comm_s: f64, window_s: f64) -> f64 {
    let not_hidden = (comm_s - window_s).max(0.0);
    not_hidden + OVERLAP_COMPUTE_PENALTY * (comm_s - not_hidden)
}

/// A group's communication per layer (TP, CP) or per model chunk (PP) per micro-batch, before and
/// after overlap, split by the pass it runs in. Backward includes the recompute forward's share.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct PassComm {
    pub forward_s: f64,
    pub backward_s: f64,
    pub forward_exposed_s: f64,
    pub backward_exposed_s: f64,
    /// Bytes one GPU sends, forward and backward together.
    pub wire_bytes: f64,
}

impl PassComm {
    /// `self` at `share`, field by field: one block's communication at a hybrid stack's average
    /// layer's share of that block (1 leaves it unchanged).
    pub fn scaled(&self, share: f64) -> PassComm {
        PassComm {
            forward_s: share * self.forward_s,
            backward_s: share * self.backward_s,
            forward_exposed_s: share * self.forward_exposed_s,
            backward_exposed_s: share * self.backward_exposed_s,
            wire_bytes: share * self.wire_bytes,
        }
    }

    /// `self` plus `share` of the difference `a − b`, field by field.
    pub fn plus_scaled_difference(&self, share: f64, a: &PassComm, b: &PassComm) -> PassComm {
        let at = |x: f64, ya: f64, yb: f64| x + share * (ya - yb);
        PassComm {
            forward_s: at(self.forward_s, a.forward_s, b.forward_s),
            backward_s: at(self.backward_s, a.backward_s, b.backward_s),
            forward_exposed_s: at(
                self.forward_exposed_s,
                a.forward_exposed_s,
                b.forward_exposed_s,
            ),
            backward_exposed_s: at(
                self.backward_exposed_s,
                a.backward_exposed_s,
                b.backward_exposed_s,
            ),
            wire_bytes: at(self.wire_bytes, a.wire_bytes, b.wire_bytes),
        }
    }

    pub fn total_s(&self) -> f64 {
        self.forward_s + self.backward_s
    }
    pub fn exposed_s(&self) -> f64 {
        self.forward_exposed_s + self.backward_exposed_s
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
    /// TP collectives of one layer.
    pub tp: PassComm,
    /// CP exchange of one layer's attention (a hybrid stack's average layer: its attention
    /// blocks' share).
    pub cp: PassComm,
    /// CP exchange of a hybrid stack's average layer's Mamba mixers (`hybrid::MambaExchange`);
    /// zero for a transformer.
    pub mamba_cp: PassComm,
    /// EP all-to-alls of the average layer of the busiest stage (its MoE layers' share,
    /// `moe_share`); a stage with k MoE layers pays `ep` × k / `moe_share` ([`UnitCosts::ep_layers`]).
    pub ep: PassComm,
    /// The busiest stage's MoE layer share the average layer is built at
    /// (`moe::busiest_stage_moe_share`).
    pub moe_share: f64,
    /// One stage-boundary send of a micro-batch's activations, and what of it is exposed (0
    /// without pipeline parallelism).
    pub pp_send_s: f64,
    pub pp_send_exposed_s: f64,
    pub groups: Groups,
}

/// Whether TP communication overlap applies: asked for, TP > 1, and sequence parallelism (which
/// Megatron-Core's `--tp-comm-overlap` requires, arguments.py).
fn tp_overlap_on(training: &Training, plan: &ParallelPlan) -> bool {
    training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel
}

/// The overlap switches that take effect for `plan`, by the rules the estimate follows: TP comm
/// overlap needs tp > 1 with sequence parallelism (`tp_overlap_on`); gradients are reduced, and
/// the distributed optimizer gathers parameters (ZeRO ≥ 1), only over more than one data-parallel
/// rank (dp × cp); pipeline sends overlap only in the interleaved schedule; the MoE all-to-all
/// overlap only where Megatron-Core's combined 1F1B schedule can pair micro-batches
/// (`moe::alltoall_overlap_applies`). What `training.overlap` asks for and this gives can differ:
/// the report's header and JSON (`overlap_applied`) say which.
/// The model enters by whether it has experts and how many MTP layers it has, which is all the
/// MoE rule reads (so a report's model summary serves as well as the model).
pub fn overlap_applied(
    has_experts: bool,
    mtp_layers: u32,
    training: &Training,
    plan: &ParallelPlan,
) -> crate::training::Overlap {
    let o = training.overlap;
    let data_ranks = plan.dp * plan.cp;
    let moe_layer_recomputed = moe::recomputes_moe_layer(training.recompute_modules, plan);
    crate::training::Overlap {
        tp_comm: tp_overlap_on(training, plan),
        grad_reduce: o.grad_reduce && data_ranks > 1,
        param_gather: o.param_gather && plan.zero >= 1 && data_ranks > 1,
        p2p: o.p2p && plan.pp > 1 && plan.vpp > 1,
        moe_a2a: o.moe_a2a
            && moe::alltoall_overlap_refusal_of(
                has_experts,
                mtp_layers,
                moe_layer_recomputed,
                plan,
            )
            .is_none(),
    }
}

/// Whether the backward all-gathers the column-parallel inputs again for the weight gradients:
/// Megatron's sequence parallelism keeps only the sequence shard (`unit_costs`); torchtitan keeps
/// the gathered inputs.
pub fn sp_regathers_in_backward(training: &Training, plan: &ParallelPlan) -> bool {
    plan.tp > 1 && plan.sequence_parallel && !training.framework.sp_keeps_gathered_inputs()
}

/// TP all-reduce equivalents of one layer's forward on the stage that sets the step (the one the
/// estimate's TP traffic and the ledger count): the attention's, and the MLP's on the layers whose
/// MLP has one (`moe::mlp_tp_pair_share_at`; 2 for a dense layer, Shoeybi et al. 2019 §3).
pub fn tp_pairs_per_layer(model: &Model, training: &Training, estimate: &Estimate) -> f64 {
    tp_pairs_at(model, training, slowest_stage_mix(model, estimate))
}

/// [`LayerMix`] of the stage that sets the step.
pub fn slowest_stage_mix(model: &Model, estimate: &Estimate) -> LayerMix {
    LayerMix::of(
        model,
        estimate.slowest_stage_layers,
        estimate.slowest_stage_moe_layers,
        estimate.slowest_stage_run,
    )
}

/// TP all-reduce equivalents of the forward of one layer of `mix`: one per block that runs a
/// column- then row-parallel pair — the attention, the MLP where it has one
/// (`moe::mlp_tp_pair_share_at`), a hybrid stack's Mamba mixer (`in_proj`, `out_proj`) — by the
/// average layer's share of each block (`LayerMix::blocks`; 2 for a dense transformer layer).
pub(crate) fn tp_pairs_at(model: &Model, training: &Training, mix: LayerMix) -> f64 {
    let shares = mix.blocks;
    let mlp_pairs = shares.mlp - 1.0 + moe::mlp_tp_pair_share_at(model, training, mix.moe_share);
    shares.attention + shares.mamba + mlp_pairs
}

/// Whether the plan's recompute runs any TP collective again on the stage that sets the step
/// (`tp_recompute_share` above zero), so a reading of the TP traffic can say it includes them.
pub fn tp_recompute_repeats_collectives(
    model: &Model,
    training: &Training,
    estimate: &Estimate,
) -> bool {
    let mix = slowest_stage_mix(model, estimate);
    tp_recompute_share(model, training, &estimate.plan, mix) > 0.0
}

/// Share of a layer's forward TP collectives, counted in units of a dense layer's two all-reduce
/// equivalents, that its recompute runs again: the recomputed layers' own collectives under full
/// recompute, the framework's selective kind otherwise.
/// Layers of `mix` (one stage's).
pub(crate) fn tp_recompute_share(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    mix: LayerMix,
) -> f64 {
    match plan.recompute {
        Recompute::Full => plan.recompute_share() * tp_pairs_at(model, training, mix) / 2.0,
        Recompute::Selective => training.selective_recompute().tp_forward_share(
            plan.sequence_parallel,
            mix.dense_mlp_share(),
            mix.moe_share,
            moe::moe_mlp_has_tp_pair(model, training),
        ),
        Recompute::None => 0.0,
    }
}

/// The modules Megatron-Core recomputes in this plan, when the user listed them.
pub(crate) fn recomputed_modules(
    training: &Training,
    plan: &ParallelPlan,
) -> Option<crate::training::RecomputeModules> {
    match (plan.recompute, training.selective_recompute()) {
        (Recompute::Selective, SelectiveRecompute::Modules(modules)) => Some(modules),
        _ => None,
    }
}

/// [`unit_costs_at`] for the average layer of the busiest stage (`moe::busiest_stage_moe_share`).
#[cfg(test)]
pub(crate) fn unit_costs(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> UnitCosts {
    unit_costs_at(
        model,
        cluster,
        training,
        plan,
        LayerMix {
            moe_share: moe::busiest_stage_moe_share(model, plan),
            ..LayerMix::whole_model(model)
        },
    )
}

/// HBM bytes per parameter and micro-batch of accumulating gradients outside the weight-gradient
/// GEMMs: under PyTorch's pipelining FSDP2 accumulates them unsharded across a schedule
/// (`comm::reduces_after_pipeline_schedule`; across the whole step where the framework syncs once
/// per step, `Training::fsdp_syncs_once_per_step`), and Megatron-Core without its
/// gradient-accumulation fusion adds each into `main_grad` in a backward hook (Megatron-FSDP,
/// which runs unfused, copies each into the bucket it reduce-scatters). Nothing where the
/// GEMM accumulates (`compute::wgrad_accumulation_s`) or the framework's pass is not modelled
/// (DeepSpeed, 2021 Megatron-LM: their A100 fit holds it).
fn gradient_pass_bytes_per_param(training: &Training, plan: &ParallelPlan) -> f64 {
    if comm::reduces_after_pipeline_schedule(training, plan) {
        let micro_batches = if training.fsdp_syncs_once_per_step {
            plan.num_microbatches
        } else {
            plan.microbatches_per_schedule()
        };
        return compute::unsharded_grad_accumulation_bytes(training.grad_dtype, micro_batches);
    }
    if training.framework != crate::training::TrainingFramework::MegatronCore {
        return 0.0;
    }
    // Megatron-FSDP (unfused, as its guide requires) copies each micro-batch's bf16 gradient
    // into its unsharded gradient bucket, which the micro-batch's reduce-scatter then empties.
    if plan.zero >= 2 {
        return compute::gradient_copy_bytes(training.grad_dtype);
    }
    // The distributed optimizer's `main_grad` accumulates across micro-batches: without the
    // fusion a backward hook adds each gradient into it.
    if !training.wgrad_accumulation_fused(plan.zero) {
        return compute::gradient_add_bytes(training.grad_dtype);
    }
    0.0
}

/// The per-micro-batch costs of the average layer of a stage of `mix`, whose layers are
/// `mix.moe_share` MoE layers (0 for a dense model or an all-dense stage, 1 for an all-MoE one)
/// and, in a hybrid stack, its own slice of the pattern's blocks: a stage pays its own mix, so a
/// stage of DeepSeek-V3's three dense layers and one MoE layer is costed as that, not as four MoE
/// layers.
// Inlined into `MixCosts::stage`, its one caller in the hot path: out of line, an evaluation ran
// 30% slower (criterion `evaluate/512b_tp8_pp16_dp2`, 2026-12-03).
#[inline(always)]
pub(crate) fn unit_costs_at(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    mix: LayerMix,
) -> UnitCosts {
    let costs = unit_costs_at_plan_precision(model, cluster, training, plan, mix);
    match mix.bf16 {
        Some(part) if plan.precision != crate::plan::Precision::Bf16 => {
            with_bf16_layers(model, cluster, training, plan, costs, part)
        }
        _ => costs,
    }
}

/// `costs`, the average layer of a mix priced at the plan's precision, with its bf16 layers
/// (`part`, `pipeline::Bf16Keep`) priced as Megatron-Core runs them: the whole layer — GEMMs,
/// casts, sequence-parallel gathers, saved inputs — as a bf16 plan runs it. Each cost is a share-
/// weighted average over the mix's layers, so swapping the part's layers from one precision to
/// the other moves the average by the part's share of the difference.
#[inline(never)]
fn with_bf16_layers(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    costs: UnitCosts,
    part: Bf16Part,
) -> UnitCosts {
    let bf16_plan = ParallelPlan {
        precision: crate::plan::Precision::Bf16,
        ..*plan
    };
    let at_bf16 = unit_costs_at_plan_precision(model, cluster, training, &bf16_plan, part.mix());
    let at_plan = unit_costs_at_plan_precision(model, cluster, training, plan, part.mix());
    let share = part.share;
    UnitCosts {
        layer: costs
            .layer
            .plus_scaled_difference(share, &at_bf16.layer, &at_plan.layer),
        tp: costs
            .tp
            .plus_scaled_difference(share, &at_bf16.tp, &at_plan.tp),
        cp: costs
            .cp
            .plus_scaled_difference(share, &at_bf16.cp, &at_plan.cp),
        mamba_cp: costs.mamba_cp.plus_scaled_difference(
            share,
            &at_bf16.mamba_cp,
            &at_plan.mamba_cp,
        ),
        ep: costs
            .ep
            .plus_scaled_difference(share, &at_bf16.ep, &at_plan.ep),
        ..costs
    }
}

/// [`unit_costs_at`] with every layer of `mix` at the plan's precision.
#[inline(always)]
fn unit_costs_at_plan_precision(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    mix: LayerMix,
) -> UnitCosts {
    let moe_share = mix.moe_share;
    let seq_len = training.seq_len;
    let groups = groups::groups(cluster, plan);
    let tp_overlap = tp_overlap_on(training, plan);
    // Under sequence parallelism with low-precision training the all-gathers carry the quantized
    // copies (`comm::sp_gather_scale`), cast on the sequence shard; the reduce-scatters bf16.
    let gather_scale = comm::sp_gather_scale(training, plan);
    // How the linear inputs are quantized, for the dense layer and the MoE MLP alike.
    let cast_setting = cast::CastSetting::of(training, plan);
    let shard = LayerShard {
        micro_batch: plan.micro_batch,
        seq_len,
        tp: plan.tp,
        cp: plan.cp,
        sp: plan.sequence_parallel,
        recompute: plan.recompute,
        selective: training.selective_recompute(),
        attention: training.attention,
        gemm_chunks: if tp_overlap { plan.tp } else { 1 },
        attention_efficiency: attention_efficiency(model, cluster, training),
        kernel_fusion: training.kernel_fusion,
        sdpa_repeats_kv: training.sdpa_repeats_kv,
        rope_fusion: training.rope_fusion,
        cast: cast_setting,
    };
    let transformer_layer = layer_time_sharded(model, cluster, &shard);
    // One dense MLP's times, which an MoE layer's MLP replaces.
    let (dense_mlp_forward, dense_mlp_backward, dense_mlp_weight_grad) = (
        transformer_layer.mlp_forward,
        transformer_layer.mlp_backward,
        transformer_layer.mlp_weight_grad,
    );
    // A hybrid stack's average layer holds each block's share (`hybrid`); a transformer's is the
    // layer itself.
    let mut layer = hybrid::average_layer(model, cluster, &shard, transformer_layer, mix.blocks);
    let recompute_share = plan.recompute_share();
    // MoE layers replace the dense MLP by router, permutation, grouped expert GEMMs and shared
    // experts (`moe.rs`); the stage's average layer carries its MoE layers' share of the
    // difference.
    // Routed copies per balanced one (imbalance and low-precision padding), once per evaluation.
    let routed_load = moe::routed_load(model, training, plan);
    let moe_time = if moe_share > 0.0 {
        let mut time = moe::moe_mlp_time(
            model,
            cluster,
            plan,
            seq_len,
            routed_load,
            // At ep 1 DeepEP is written (and run) as the all-to-all dispatcher: cost what runs.
            training.moe_dispatch.dispatcher.written_for(plan.ep),
            cast_setting,
            moe::ExpertEpilogue::of(model, training),
        );
        // The router's score kernels beside its GEMM (`moe_router`).
        let router =
            moe_router::RouterKernels::of(model, training).time(model, cluster, plan, seq_len);
        time.forward_s += router.forward_s;
        time.backward_s += router.backward_s;
        time
    } else {
        moe::MoeMlpTime::default()
    };
    let moe_mlp = moe_time.forward_s;
    // What an MoE layer keeps of the dense layer: attention, norms, residuals and the rest that
    // Megatron-Core's fine-grained schedule runs as its "attn" node (`moe::AttentionSide`).
    let attention_side = moe::AttentionSide {
        forward_s: layer.forward - layer.mlp_forward,
        backward_s: layer.backward - layer.mlp_backward,
    };
    // Megatron-Core's listed modules run again in backward (`module_recompute`).
    if let Some(modules) = recomputed_modules(training, plan) {
        layer.recompute += module_recompute::forward_s(
            model,
            cluster,
            plan,
            seq_len,
            modules,
            routed_load,
            mix,
            dense_mlp_forward,
            moe_mlp,
            training.rope_fusion,
        );
    }
    if moe_share > 0.0 {
        let delta = moe_share * (moe_mlp - dense_mlp_forward);
        layer.forward += delta;
        layer.backward += moe_share * (moe_time.backward_s - dense_mlp_backward);
        layer.weight_grad += moe_share * (moe_time.weight_grad_s - dense_mlp_weight_grad);
        if plan.recompute == Recompute::Full {
            layer.recompute += delta;
        }
    }
    // Gradients accumulated outside the GEMMs: an element-wise pass over the layer's parameters
    // after every micro-batch's backward (`gradient_pass_bytes_per_param`).
    let pass_bytes = gradient_pass_bytes_per_param(training, plan);
    if pass_bytes > 0.0 {
        let (rest, expert) = memory::layer_params_per_gpu_at(model, plan, mix);
        layer.backward += (rest + expert) * pass_bytes
            / cluster.gpu.achieved_hbm_bandwidth().0
            / cluster.gpu.framework_efficiency;
    }
    // Sharded DP's copies around its gathers and reduce-scatters on the compute stream's path
    // (FSDP2's both, DeepSpeed ZeRO-3's gathers: `compute::sharded_dp_copy_bytes_per_param`).
    let gathered_bytes = if comm::fp8_parameter_gather(training, plan) {
        1.0
    } else {
        crate::training::WEIGHT_BYTES
    };
    let (copy_forward, copy_backward) =
        compute::sharded_dp_copy_bytes_per_param(training, plan, gathered_bytes);
    let copy_s_per_byte =
        1.0 / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency;
    if copy_forward + copy_backward > 0.0 {
        let (rest, expert) = memory::layer_params_per_gpu_at(model, plan, mix);
        let copied = compute::sharded_dp_copied_params(plan, rest, expert);
        layer.forward += copied * copy_forward * copy_s_per_byte;
        layer.backward += copied * copy_backward * copy_s_per_byte;
    }
    layer.recompute *= if plan.recompute == Recompute::Full {
        recompute_share
    } else {
        1.0
    };

    // TP: two all-reduce equivalents per layer forward and two in backward (Shoeybi et al. 2019
    // §3), the forward pair again under full recompute (`comm::tp_collectives_per_layer`).
    let tp_group = groups.get(GroupKind::Tp);
    let tp_tensor = comm::tp_tensor_bytes(model, training, plan);
    let one = Collective::AllReduce.time(tp_tensor, plan.tp, tp_group.speed);
    // The forward's all-reduce equivalents (2 for a dense layer; MoE layers without shared experts
    // have only the attention's under Megatron-Core).
    let pairs = tp_pairs_at(model, training, mix);
    let tp_recompute_share = tp_recompute_share(model, training, plan, mix);
    // Whether TP overlap covers the backward graph too (Megatron-Core) or the forward only (torchtitan).
    let overlap_reaches_backward = training.framework.tp_overlap_in_backward();
    // torchtitan's functional collectives copy the full tensor around each all-gather and
    // reduce-scatter (`TrainingFramework::tp_collectives_copy_their_tensor`): a read and a write
    // per collective, two collectives per all-reduce equivalent and two equivalents per layer
    // pass. Each copy is the size of what its collective carries: under float8 the all-gathers
    // move torchao's FP8 copies (`gather_scale`), the reduce-scatters bf16. The copies are
    // memory-bound kernels on the compute stream, so they are compute time, not communication.
    // Async TP fuses the forward's into its matmuls; the backward's stay vanilla
    // (`tp_overlap_in_backward`), and so do the recomputed forward's: under activation
    // checkpointing the recomputation is part of the backward graph (AOTAutograd's partitioner
    // places recomputed nodes there).
    if plan.tp > 1 && training.framework.tp_collectives_copy_their_tensor() {
        let copies = |gathered_scale: f64| {
            2.0 * 2.0 * (gathered_scale + 1.0) * tp_tensor / cluster.gpu.achieved_hbm_bandwidth().0
        };
        let (forward_copies, backward_copies) =
            (copies(gather_scale.forward), copies(gather_scale.grad));
        if tp_overlap {
            // The recomputed forward runs in the backward graph, where the collectives stay vanilla.
            let unfused_recompute = if overlap_reaches_backward {
                0.0
            } else {
                tp_recompute_share
            };
            layer.backward += backward_copies + forward_copies * unfused_recompute;
        } else {
            layer.forward += forward_copies;
            layer.backward += backward_copies + forward_copies * tp_recompute_share;
        }
    }
    // A forward pair and a backward pair in one all-reduce's time, at `gather_scale`.
    let gather_and_scatter = |gather_scale: f64| {
        if gather_scale == 1.0 {
            one
        } else {
            Collective::AllGather.time(gather_scale * tp_tensor, plan.tp, tp_group.speed)
                + Collective::ReduceScatter.time(tp_tensor, plan.tp, tp_group.speed)
        }
    };
    let forward_one = gather_and_scatter(gather_scale.forward);
    let backward_one = gather_and_scatter(gather_scale.grad);
    let recompute_pair = 2.0 * forward_one * tp_recompute_share;
    // Megatron's column-parallel linears under sequence parallelism keep only the sequence shard
    // of their input and all-gather it again in the backward for the weight gradient, issued
    // before the dgrad GEMM and waited after it (Megatron-Core `tensor_parallel/layers.py`
    // `LinearWithGradAccumulationAndAsyncCommunication.backward`; Transformer Engine
    // `linear.py`/`layernorm_linear.py`, with userbuffers `ub_bulk_dgrad`): one more all-gather
    // per pair, under the column-parallel dgrad GEMMs. torchtitan keeps the gathered inputs
    // instead (`TrainingFramework::sp_keeps_gathered_inputs`, counted in memory).
    let regathers = sp_regathers_in_backward(training, plan);
    let regather_s = if regathers {
        pairs
            * Collective::AllGather.time(gather_scale.regather * tp_tensor, plan.tp, tp_group.speed)
    } else {
        0.0
    };
    // Without userbuffers the re-gather still hides under its own dgrad GEMMs (async in both paths).
    let regather_exposed_s = exposed_under(regather_s, layer.column_gemm_forward);
    let tp = if plan.tp > 1 {
        let (forward_s, backward_s) = (
            pairs * forward_one,
            pairs * backward_one + recompute_pair + regather_s,
        );
        let (forward_exposed_s, backward_exposed_s) = if tp_overlap {
            // Forward collectives under the forward linear GEMMs; backward ones under the dgrad and
            // wgrad GEMMs (twice the forward FLOPs), the recompute pair under its own forward —
            // where the overlap reaches the backward at all (Megatron-Core's userbuffers); where it
            // does not (torchtitan), the recompute pair runs in the backward and stays exposed.
            let recompute_exposed = if overlap_reaches_backward {
                2.0 * tp_recompute_share / pairs
                    * exposed_under(pairs * forward_one, layer.linear_gemm_forward)
            } else {
                recompute_pair
            };
            let backward_exposed_s = if overlap_reaches_backward {
                exposed_under(
                    pairs * backward_one + regather_s,
                    2.0 * layer.linear_gemm_forward,
                )
            } else {
                pairs * backward_one + regather_exposed_s
            };
            (
                exposed_under(pairs * forward_one, layer.linear_gemm_forward),
                backward_exposed_s + recompute_exposed,
            )
        } else {
            // Synchronous collectives, but for the re-gather under its dgrad GEMM.
            (
                forward_s,
                pairs * backward_one + recompute_pair + regather_exposed_s,
            )
        };
        let gather_wire = Collective::AllGather.wire_factor(plan.tp) * tp_tensor;
        let regather_wire = if regathers {
            pairs * gather_scale.regather * gather_wire
        } else {
            0.0
        };
        // An all-gather and a reduce-scatter per forward pair (each half an all-reduce's wire).
        let forward_wire = (gather_scale.forward + 1.0) * gather_wire;
        let backward_wire = (1.0 + gather_scale.grad) * gather_wire;
        PassComm {
            forward_s,
            backward_s,
            forward_exposed_s,
            backward_exposed_s,
            wire_bytes: (pairs + 2.0 * tp_recompute_share) * forward_wire
                + pairs * backward_wire
                + regather_wire,
        }
    } else {
        PassComm::default()
    };

    // CP: cp − 1 ring steps per layer forward, each passing a K/V chunk under one step's attention
    // blocks; backward passes K/V and their gradients (twice the bytes) under the backward's
    // attention blocks (`compute::flash_backward_time_over_forward`); full recompute repeats the
    // forward ring.
    // Full recompute's share of the layers, or every layer where selective recompute re-runs
    // Transformer Engine's attention with its exchange (`context_parallel::exchange_repeats`).
    let cp_repeats = context_parallel::exchange_repeats(training, plan);
    // A hybrid stack's average layer holds `attention_share` attention blocks (1 in a
    // transformer): the attention exchange and its copies are theirs, each at one block's
    // attention time (`transformer_layer`'s, before the average).
    let attention_share = mix.blocks.attention;
    let cp = if plan.cp > 1 && training.cp_exchange == CpExchange::TorchAllGather {
        let step_attention = transformer_layer.attention_forward / f64::from(plan.cp);
        let comm = torch_ring::pass_comm(
            torch_ring::repeated_kv_bytes(model, training, plan),
            plan.cp,
            groups.get(GroupKind::Cp).speed,
            step_attention,
            compute::flash_backward_time_over_forward() * step_attention,
            cp_repeats,
        );
        // The eager fp32 merges and accumulators run on the compute stream.
        let (query, output) = torch_ring::elements(model, training, plan);
        let (merge_forward, merge_backward) = torch_ring::merge_times_s(
            query,
            output,
            plan.cp,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += attention_share * merge_forward;
        layer.backward += attention_share * merge_backward;
        layer.recompute += attention_share * cp_repeats * merge_forward;
        comm.scaled(attention_share)
    } else if plan.cp > 1 && training.cp_exchange != CpExchange::KvRing {
        // Transformer Engine's all-gather and all-to-all exchanges: their copies run on the
        // compute stream, their collectives on the critical path.
        let (copy_forward, copy_backward) = context_parallel::copy_times_s(
            model,
            training,
            plan,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += attention_share * copy_forward;
        layer.backward += attention_share * copy_backward;
        layer.recompute += attention_share * cp_repeats * copy_forward;
        let speed = groups.get(GroupKind::Cp).speed;
        let comm = if training.cp_exchange == CpExchange::KvAllGather {
            context_parallel::kv_all_gather_pass_comm(
                comm::cp_kv_chunk_bytes(model, training, plan),
                plan.cp,
                speed,
                cp_repeats,
            )
        } else {
            let (qkv, output) = context_parallel::all_to_all_tensor_bytes(model, training, plan);
            context_parallel::head_all_to_all_pass_comm(qkv, output, plan.cp, speed, cp_repeats)
        };
        comm.scaled(attention_share)
    } else if plan.cp > 1 {
        let step_attention = transformer_layer.attention_forward / f64::from(plan.cp);
        context_parallel::kv_ring_pass_comm(
            comm::cp_kv_chunk_bytes(model, training, plan),
            plan.cp,
            groups.get(GroupKind::Cp).speed,
            step_attention,
            compute::flash_backward_time_over_forward() * step_attention,
            cp_repeats,
        )
        .scaled(attention_share)
    } else {
        PassComm::default()
    };
    // A hybrid stack's Mamba mixers trade sequence shards for head shards around the conv and the
    // scan (`hybrid::MambaExchange`): six synchronous all-to-alls per mixer forward, their
    // gradients' in backward, the forward's again on full recompute's share (Megatron-Core's
    // hybrid block checkpoints whole layers, `hybrid_block.py`; selective recompute runs no Mamba
    // layer again), and the copies around them on the compute stream, at the stage's Mamba share.
    let mamba_share = mix.blocks.mamba;
    let mamba_cp = if plan.cp > 1 && mamba_share > 0.0 {
        let exchange = hybrid::mamba_exchange(model, seq_len, plan);
        let (copies_forward, copies_backward) = hybrid::mamba_exchange_copy_s(
            model,
            plan,
            &exchange,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += mamba_share * copies_forward;
        layer.backward += mamba_share * copies_backward;
        layer.recompute += mamba_share * recompute_share * copies_forward;
        context_parallel::tensor_all_to_all_pass_comm(
            &exchange.tensors(),
            plan.cp,
            groups.get(GroupKind::Cp).speed,
            recompute_share,
        )
        .scaled(mamba_share)
    } else {
        PassComm::default()
    };

    // EP: a dispatch and a combine all-to-all per MoE layer in forward, their gradients in
    // backward, the forward pair again under full recompute; with expert TP, an all-gather of the
    // dispatched tokens and a reduce-scatter of the expert outputs beside each pair (`moe.rs`).
    // Megatron-Core runs them on the critical path unless the combined 1F1B schedule pairs the
    // micro-batches (`moe::alltoall_overlap_applies`).
    let ep = if (plan.ep > 1 || plan.etp > 1) && moe_share > 0.0 {
        let bytes = moe::alltoall_bytes(
            model,
            plan,
            seq_len,
            moe::wire_load(model, training, plan),
            training.moe_dispatch,
        );
        let speed = moe::ep_dispatch_speed(
            model,
            cluster,
            plan,
            training.moe_dispatch,
            groups.get(GroupKind::Ep),
        );
        let alltoall = comm::alltoall_s(bytes, plan.ep, speed);
        let gathered = moe::expert_tp_gather_bytes(model, plan, seq_len, routed_load);
        let etp_speed = groups.get(GroupKind::ExpertTp).speed;
        let expert_tp = Collective::AllGather.time(gathered, plan.etp, etp_speed)
            + Collective::ReduceScatter.time(gathered, plan.etp, etp_speed);
        let expert_tp_wire = (Collective::AllGather.wire_factor(plan.etp)
            + Collective::ReduceScatter.wire_factor(plan.etp))
            * gathered;
        let one_pair = 2.0 * alltoall + expert_tp;
        // Full recompute's share of the layers, or the whole MoE layer under `--recompute-modules moe`.
        let moe_repeats = recompute_share
            + module_recompute::moe_alltoall_repeats(recomputed_modules(training, plan));
        let forward_s = one_pair * moe_share;
        let backward_s = (1.0 + moe_repeats) * one_pair * moe_share;
        let (forward_exposed_s, backward_exposed_s) =
            if training.overlap.moe_a2a && moe::alltoall_overlap_applies(model, training, plan) {
                // A paired MoE layer runs its four all-to-alls beside the compute Megatron-Core's
                // fine-grained schedule puts next to each (`moe::paired_layer_exposed_s`); the warmup
                // forwards and cooldown backwards have no partner.
                let unpaired = moe::unpaired_share(plan);
                let paired_exposed = moe_share
                    * moe::paired_layer_exposed_s(
                        one_pair / 2.0,
                        attention_side,
                        moe_time,
                        OVERLAP_COMPUTE_PENALTY,
                    );
                (
                    unpaired * forward_s + (1.0 - unpaired) * paired_exposed / 2.0,
                    unpaired * backward_s + (1.0 - unpaired) * paired_exposed / 2.0,
                )
            } else {
                (forward_s, backward_s)
            };
        PassComm {
            forward_s,
            backward_s,
            forward_exposed_s,
            backward_exposed_s,
            wire_bytes: (2.0 + moe_repeats) * (2.0 * bytes + expert_tp_wire) * moe_share,
        }
    } else {
        PassComm::default()
    };

    let (pp_send_s, pp_send_exposed_s) = if plan.pp > 1 {
        let pp_group = groups.get(GroupKind::Pp);
        let send = Collective::SendRecv.time(
            comm::pp_message_bytes(model, training, plan),
            2,
            pp_group.speed,
        );
        // The interleaved schedule posts its sends and receives asynchronously and runs another
        // chunk's compute meanwhile (Megatron-Core `overlap_p2p_comm`, only with vpp > 1).
        let exposed = if training.overlap.p2p && plan.vpp > 1 {
            OVERLAP_COMPUTE_PENALTY * send
        } else {
            send
        };
        (send, exposed)
    } else {
        (0.0, 0.0)
    };
    // The output layer is an FSDP unit of its own (and, on a pipeline's only stage, so is the
    // token embedding unless the two are tied): its copies go with its time.
    let mut output =
        output_layer_time(model, cluster, plan.micro_batch, seq_len / plan.cp, plan.tp);
    if copy_forward + copy_backward > 0.0 {
        let table = compute::sharded_dp_copied_params(
            plan,
            f64::from(model.vocab) * f64::from(model.hidden) / f64::from(plan.tp),
            0.0,
        );
        let tables = if plan.pp == 1 && !model.tied_embeddings {
            2.0
        } else {
            1.0
        };
        // The embedding and output layer are gathered in bf16 even under FP8 parameter gather
        // (`comm::gather_bytes_per_param`): their copy-outs move two bytes a parameter.
        let (table_forward, table_backward) =
            compute::sharded_dp_copy_bytes_per_param(training, plan, crate::training::WEIGHT_BYTES);
        output.forward += tables * table * table_forward * copy_s_per_byte;
        output.backward += tables * table * table_backward * copy_s_per_byte;
    }
    UnitCosts {
        layer,
        output,
        tp,
        cp,
        mamba_cp,
        ep,
        moe_share,
        pp_send_s,
        pp_send_exposed_s,
        groups,
    }
}

impl UnitCosts {
    /// Average layers' worth of `ep` that `moe_layers` MoE layers pay: the all-to-alls are the
    /// MoE layers' own, so a stage pays for the MoE layers it holds, not for its layer count at
    /// the busiest stage's share.
    pub fn ep_layers(&self, moe_layers: u32) -> f64 {
        if self.moe_share > 0.0 {
            f64::from(moe_layers) / self.moe_share
        } else {
            0.0
        }
    }
}

/// MoE layers of pipeline stage `stage` over all its model chunks, the last stage's MTP layers
/// included where they are MoE layers (`pipeline::ChunkLayout::stage_mix_with_mtp`).
pub(crate) fn stage_moe_layers(model: &Model, plan: &ParallelPlan, stage: u32) -> u32 {
    if model.moe.is_none() {
        return 0;
    }
    pipeline::ChunkLayout::of(model, plan)
        .stage_mix_with_mtp(model, plan.pp.max(1), stage)
        .1
}

/// Unit costs at each mix of dense and MoE layers the plan's stages hold, each computed once (a
/// dense model, or one whose stages are all MoE layers, has one mix).
pub(crate) struct MixCosts<'a> {
    model: &'a Model,
    cluster: &'a Cluster,
    training: &'a Training,
    plan: &'a ParallelPlan,
    /// The mixes met so far (a fixed array: evaluation allocates nothing, and the costs are lent,
    /// not copied). Past `MIXES` distinct mixes, which a long `--moe-layer-freq` pattern or a
    /// hybrid stack over many stages meets, the last slot is recomputed.
    mixes: [Option<LayerMix>; MIXES],
    costs: [Option<UnitCosts>; MIXES],
    filled: usize,
    /// What of the plan runs in bf16 although its precision is lower.
    pub(crate) keep: pipeline::Bf16Keep,
}

/// Distinct stage mixes `MixCosts` keeps: the closed form needs four (first, the middle stages'
/// most- and fewest-MoE mixes, last).
const MIXES: usize = 4;

impl<'a> MixCosts<'a> {
    pub(crate) fn new(
        model: &'a Model,
        cluster: &'a Cluster,
        training: &'a Training,
        plan: &'a ParallelPlan,
    ) -> MixCosts<'a> {
        MixCosts {
            model,
            cluster,
            training,
            plan,
            mixes: [None; MIXES],
            costs: [None; MIXES],
            filled: 0,
            keep: pipeline::Bf16Keep::of(model, training, plan),
        }
    }

    /// Where the average layer's costs of a stage of `layers` layers, `moe_layers` of them MoE
    /// layers, a hybrid stack's `run` of them (`pipeline::ChunkLayout::stage_run`), `bf16` of them
    /// in bf16 (`pipeline::ChunkLayout::stage_bf16`), are kept ([`MixCosts::costs`]): valid while
    /// at most `MIXES` distinct mixes have been asked (after that the last slot is reused by every
    /// new mix).
    pub(crate) fn stage(
        &mut self,
        layers: u32,
        moe_layers: u32,
        run: Option<HybridRun>,
        bf16: Option<pipeline::Bf16Run>,
    ) -> usize {
        let mix =
            LayerMix::of(self.model, layers, moe_layers, run).with_bf16(self.model, layers, bf16);
        if let Some(at) = self.mixes[..self.filled]
            .iter()
            .position(|kept| *kept == Some(mix))
        {
            return at;
        }
        let at = self.filled.min(MIXES - 1);
        self.filled = (self.filled + 1).min(MIXES);
        self.mixes[at] = Some(mix);
        self.costs[at] = Some(unit_costs_at(
            self.model,
            self.cluster,
            self.training,
            self.plan,
            mix,
        ));
        at
    }

    pub(crate) fn costs(&self, at: usize) -> &UnitCosts {
        self.costs[at]
            .as_ref()
            .expect("MixCosts::stage fills the slot it returns")
    }
}

/// The pipeline stages' per-micro-batch times as the closed form sees them.
struct StageTimes {
    /// The stage with the longest per-micro-batch time (compute and exposed communication).
    slowest: StageTime,
    /// Its transformer layers (MTP layers included on the last stage): its layers' communication
    /// is what the step pays, whichever stage holds the most layers (a last stage with few layers
    /// but the output layer can be the slowest).
    slowest_layers: u32,
    /// The mean stage's per-micro-batch time (the bubble's unit).
    mean_total: f64,
    /// Under a V schedule with a pipeline only: one model chunk's forward, input gradient and
    /// weight gradient ([`StageTime::split`] of the mean stage over its chunks, less the output
    /// layer), and the output layer's and loss's, which the first GPU's second chunk adds.
    v_chunks: Option<[[f64; 3]; 2]>,
    /// Its MoE layers: the ones whose all-to-alls it pays.
    slowest_moe_layers: u32,
    /// Its MTP layers (the model's, where the slowest stage is the last): part of `slowest_layers`.
    slowest_mtp_layers: u32,
    /// Where [`MixCosts`] keeps the unit costs of its layer mix.
    slowest_costs: usize,
    /// A hybrid stack's run of layers on it.
    slowest_run: Option<HybridRun>,
    /// Its layers kept in bf16 (`pipeline::Bf16Keep`).
    slowest_bf16: Option<pipeline::Bf16Run>,
    /// Transformer layers of the stage that holds the most.
    max_layers: u32,
}

fn stage_times(model: &Model, plan: &ParallelPlan, mix: &mut MixCosts) -> StageTimes {
    let v = f64::from(plan.vpp);
    let p = f64::from(plan.pp);
    let v_shaped = mix.training.pp_schedule.v_kind().is_some();
    // A stage's time at its own layer mix: its layers' compute and exposed TP, CP and EP.
    let stage_time = |costs: &UnitCosts, layers: u32, moe_layers: u32, with_output: bool| {
        let n = f64::from(layers);
        let out = if with_output {
            costs.output
        } else {
            LayerTime::default()
        };
        let layer = costs.layer;
        // Under a V the first GPU, which runs the output layer, sends twice per micro-batch
        // (chunk 0's activations, chunk 1's gradients; `v_schedule`); the others 2·v times.
        let sends = if v_shaped && with_output {
            2.0
        } else {
            2.0 * v
        };
        StageTime {
            compute: n * layer.total() + out.total(),
            forward: n * layer.forward + out.forward,
            backward: n * (layer.backward + layer.recompute) + out.backward,
            weight: n * layer.weight_grad + out.weight_grad,
            tp: n * costs.tp.exposed_s(),
            cp: n * (costs.cp.exposed_s() + costs.mamba_cp.exposed_s()),
            ep: costs.ep_layers(moe_layers) * costs.ep.exposed_s(),
            sends,
            pp: sends * costs.pp_send_exposed_s,
        }
    };
    let last_layers = pipeline::last_stage_layers(model, plan);
    let last_stage = plan.pp.max(1) - 1;
    // One layout for every stage's MoE count, hybrid blocks and bf16 layers (dense transformers
    // at one precision need none).
    let keep = mix.keep;
    let layout = (model.moe.is_some() || model.is_hybrid() || !keep.is_none())
        .then(|| pipeline::ChunkLayout::of(model, plan));
    let moe_of = |stage: u32| {
        layout
            .filter(|_| model.moe.is_some())
            .map_or(0, |l| l.stage_mix_with_mtp(model, plan.pp.max(1), stage).1)
    };
    let bf16_of =
        |stage: u32| layout.and_then(|l| l.stage_bf16(model, keep, plan.pp.max(1), stage));
    let last_moe = moe_of(last_stage);
    let last_run = layout.and_then(|l| l.stage_run(model, plan.pp.max(1), last_stage));
    if plan.pp == 1 {
        let at = mix.stage(last_layers, last_moe, last_run, bf16_of(0));
        let only = stage_time(mix.costs(at), last_layers, last_moe, true);
        return StageTimes {
            slowest: only,
            slowest_layers: last_layers,
            slowest_moe_layers: last_moe,
            slowest_mtp_layers: model.mtp_layers,
            slowest_costs: at,
            slowest_run: last_run,
            slowest_bf16: bf16_of(0),
            mean_total: only.total(),
            v_chunks: None,
            max_layers: last_layers,
        };
    }
    // Every stage priced on its own where the stages differ in more than the closed form's four
    // representatives tell apart: a hybrid stack's slices, or bf16 layers on a middle stage.
    let bf16_in_middle = !keep.layers.is_none() && (1..last_stage).any(|s| bf16_of(s).is_some());
    if let (true, Some(layout)) = (model.is_hybrid() || bf16_in_middle, layout) {
        return per_stage_times(model, plan, mix, &layout, stage_time);
    }
    // The middle stage with the most layers, and of those the most MoE layers: all of them when
    // every layer is MoE, or when the dense prefix ends on the first stage of a pipeline without
    // interleaving (DeepSeek-V3's three dense layers); else counted stage by stage.
    let middle_all_moe = model.every_layer_moe()
        || model.moe.is_some_and(|moe| {
            moe.layer_freq == 1 && plan.vpp == 1 && moe.first_dense_layers <= plan.stages.first
        });
    // Of the middle stages with the most layers, the one with the most MoE layers and the one
    // with the fewest: which is slower depends on whether a model's MoE layers cost more than
    // its dense ones (small experts can cost less).
    let (middle_most_moe, middle_fewest_moe) = if middle_all_moe {
        (plan.stages.middle_max, plan.stages.middle_max)
    } else if let (true, Some(layout)) = (plan.pp > 2, layout) {
        let mixes = (1..last_stage).map(|stage| layout.stage_mix(model, plan.pp, stage));
        let most = mixes.clone().max().map_or(0, |(_, moe)| moe);
        let fewest = mixes
            .filter(|(layers, _)| *layers == plan.stages.middle_max)
            .map(|(_, moe)| moe)
            .min()
            .unwrap_or(most);
        (most, fewest)
    } else {
        (0, 0)
    };
    let first_moe = moe_of(0);
    let stages = [
        (plan.stages.first, first_moe, false),
        (plan.stages.middle_max, middle_most_moe, false),
        (last_layers, last_moe, true),
        (plan.stages.middle_max, middle_fewest_moe, false),
    ];
    // Only the first and last stages hold bf16 layers here (`bf16_in_middle` above).
    let bf16_at = [Some(0), None, Some(last_stage), None];
    let at = [0, 1, 2, 3].map(|i| {
        let (layers, moe_layers, _) = stages[i];
        mix.stage(layers, moe_layers, None, bf16_at[i].and_then(bf16_of))
    });
    let [first, most, last, fewest] = [0, 1, 2, 3].map(|i| {
        let (layers, moe_layers, with_output) = stages[i];
        stage_time(mix.costs(at[i]), layers, moe_layers, with_output)
    });
    let middle_at = if fewest.total() > most.total() { 3 } else { 1 };
    let middle = if middle_at == 3 { fewest } else { most };
    let mut slowest = 0;
    let times = [first, most, last, fewest];
    for candidate in [middle_at, 2] {
        if (plan.pp > 2 || candidate == 2) && times[candidate].total() > times[slowest].total() {
            slowest = candidate;
        }
    }
    StageTimes {
        slowest: times[slowest],
        slowest_layers: stages[slowest].0,
        slowest_moe_layers: stages[slowest].1,
        slowest_mtp_layers: if slowest == 2 { model.mtp_layers } else { 0 },
        slowest_costs: at[slowest],
        slowest_run: None,
        slowest_bf16: bf16_at[slowest].and_then(bf16_of),
        mean_total: (first.total() + (p - 2.0) * middle.total() + last.total()) / p,
        // Only the V schedules' closed form reads the split (`v_schedule::v_bubble_s`).
        v_chunks: v_shaped.then(|| {
            let [a, b, c] = [first.split(), middle.split(), last.split()];
            let mean = [0, 1, 2].map(|k| (a[k] + (p - 2.0) * b[k] + c[k]) / p);
            v_chunk_split(mean, mix.costs(at[2]).output, p, v)
        }),
        max_layers: pipeline::max_stage_layers(model, plan),
    }
}

/// One model chunk's forward, input gradient and weight gradient under a V schedule, from the mean
/// stage's `mean` split less the output layer's share, and the output layer's and loss's own
/// (`StageTimes::v_chunks`).
fn v_chunk_split(mean: [f64; 3], out: LayerTime, p: f64, v: f64) -> [[f64; 3]; 2] {
    let output = [
        out.forward,
        (out.backward + out.recompute - out.weight_grad).max(0.0),
        out.weight_grad,
    ];
    let chunk = [0, 1, 2].map(|k| ((mean[k] - output[k] / p) / v).max(0.0));
    [chunk, output]
}

/// [`stage_times`] stage by stage: a hybrid stack with a pipeline, where Megatron-Core gives each
/// stage its own slice of the pattern (`select_pipeline_segment`), or bf16 layers reaching a
/// middle stage; every stage is priced at its own layers and the slowest sets the step; the mean
/// is over all of them.
fn per_stage_times(
    model: &Model,
    plan: &ParallelPlan,
    mix: &mut MixCosts,
    layout: &pipeline::ChunkLayout,
    stage_time: impl Fn(&UnitCosts, u32, u32, bool) -> StageTime,
) -> StageTimes {
    let p = plan.pp.max(1);
    let last = p - 1;
    let keep = mix.keep;
    let stage_of = |stage: u32| {
        let (layers, moe_layers) = layout.stage_mix_with_mtp(model, p, stage);
        let run = layout.stage_run(model, p, stage);
        (
            layers,
            moe_layers,
            run,
            layout.stage_bf16(model, keep, p, stage),
        )
    };
    let mut sum = 0.0;
    let mut split_sum = [0.0; 3];
    let mut output = LayerTime::default();
    let mut slowest = (0, f64::NEG_INFINITY);
    for stage in 0..p {
        let (layers, moe_layers, run, bf16) = stage_of(stage);
        let at = mix.stage(layers, moe_layers, run, bf16);
        let time = stage_time(mix.costs(at), layers, moe_layers, stage == last);
        sum += time.total();
        let split = time.split();
        split_sum = [0, 1, 2].map(|k| split_sum[k] + split[k]);
        if stage == last {
            output = mix.costs(at).output;
        }
        if time.total() > slowest.1 {
            slowest = (stage, time.total());
        }
    }
    let v_shaped = mix.training.pp_schedule.v_kind().is_some();
    let pf = f64::from(p);
    // Its slot: the one that still holds its mix, or, where the loop reused the last slot for a
    // later stage, the last slot again (filled anew).
    let (stage, (layers, moe_layers, run, bf16)) = (slowest.0, stage_of(slowest.0));
    let at = mix.stage(layers, moe_layers, run, bf16);
    let time = stage_time(mix.costs(at), layers, moe_layers, stage == last);
    StageTimes {
        slowest: time,
        slowest_layers: layers,
        slowest_moe_layers: moe_layers,
        slowest_mtp_layers: if stage == last { model.mtp_layers } else { 0 },
        slowest_costs: at,
        slowest_run: run,
        slowest_bf16: bf16,
        mean_total: sum / pf,
        v_chunks: v_shaped
            .then(|| v_chunk_split(split_sum.map(|x| x / pf), output, pf, f64::from(plan.vpp))),
        max_layers: pipeline::max_stage_layers(model, plan),
    }
}

/// Transformer layers of the stage whose per-micro-batch time sets the step (`evaluate`'s slowest
/// stage): the layers whose communication the step's terms, and the ledger, count.
pub fn slowest_stage(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> SlowestStage {
    let times = stage_times(
        model,
        plan,
        &mut MixCosts::new(model, cluster, training, plan),
    );
    SlowestStage {
        layers: times.slowest_layers,
        moe_layers: times.slowest_moe_layers,
        run: times.slowest_run,
        bf16: times.slowest_bf16,
        sends: times.slowest.sends as u32,
    }
}

/// The transformer layers, and the MoE layers among them, of the stage that sets the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowestStage {
    pub layers: u32,
    pub moe_layers: u32,
    /// A hybrid stack's run of layers on it (`pipeline::ChunkLayout::stage_run`).
    pub run: Option<HybridRun>,
    /// Its layers kept in bf16 (`pipeline::Bf16Keep`).
    pub bf16: Option<pipeline::Bf16Run>,
    /// Its stage-boundary sends per micro-batch, both directions (2·v; 2 on a V's first GPU).
    pub sends: u32,
}

/// Activation offloading's copies (`Training::cpu_offload_layers`, pp 1), as Transformer Engine's
/// v1 handler runs them (`AsyncDoubleBufferGroupOffloadHandler`, `cpu_offload_v1.py`): N of the
/// model's L decoder layers each copy their saved tensors to host memory on a D2H stream beside
/// the next layers' forward (`layer_window_map`: copy k starts at the end of layer window(k − 1)'s
/// forward, the first at the end of layer 0's, and the compute stream waits for it at the end of
/// layer window(k)'s), and back on an H2D stream beside the backward of the layers before they are
/// needed. Between the end of layer 0 and the end of layer L − 1 the N windows cover L − 1
/// layers, (L − 1)/N each on average (exactly 1 at N = L − 1, where TE warns that nothing
/// overlaps); MTP layers run after the last window and cover none. What a copy takes beyond its
/// window's compute is exposed, per offloaded layer and micro-batch, in each direction; the copies
/// run at the host link's achieved rate (`GpuProfile::achieved_host_link_bandwidth`). TE 2.10's
/// default synchronizer (`cpu_offload.py`) queues the copies on one stream with a deadline
/// L − N − 1 layers later, which in sum also leaves about L − 1 layers to hide them behind. The
/// traffic's bytes count both directions.
fn host_offload_term(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    memory: &Memory,
    layer: &LayerTime,
    micro_batches: f64,
) -> Option<Term> {
    let decoder_layers = model.layers;
    let offloaded = training.offloaded_layers(decoder_layers);
    let bytes = memory.offloaded_layer_bytes.0;
    let bandwidth = cluster.gpu.achieved_host_link_bandwidth()?.0;
    if offloaded == 0 || bytes <= 0.0 || bandwidth <= 0.0 {
        return None;
    }
    let n = f64::from(offloaded);
    let window_layers = f64::from(decoder_layers - 1) / n;
    let copy_s = bytes / bandwidth;
    let forward_exposed = (copy_s - window_layers * layer.forward).max(0.0);
    let backward_exposed = (copy_s - window_layers * layer.backward).max(0.0);
    let exposed_s = n * micro_batches * (forward_exposed + backward_exposed);
    let time_s = n * micro_batches * 2.0 * copy_s;
    Some(Term {
        wire_bytes: Bytes(n * micro_batches * 2.0 * bytes),
        time_s: Seconds(time_s),
        exposed_s: Seconds(exposed_s),
        hidden_by: if exposed_s < time_s {
            HiddenBy::LayerCompute
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::HostOffload)
    })
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
    let mut mix = MixCosts::new(model, cluster, training, plan);
    let StageTimes {
        slowest,
        slowest_layers,
        slowest_moe_layers,
        slowest_mtp_layers,
        slowest_costs,
        slowest_run,
        slowest_bf16: _,
        mean_total,
        v_chunks,
        max_layers,
    } = stage_times(model, plan, &mut mix);
    let costs = mix.costs(slowest_costs);
    let ep_layers_on_slowest = costs.ep_layers(slowest_moe_layers);
    let UnitCosts {
        tp,
        cp,
        mamba_cp,
        ep,
        pp_send_s,
        pp_send_exposed_s,
        groups,
        ..
    } = *costs;
    let m = f64::from(plan.num_microbatches);
    let v = f64::from(plan.vpp);
    let p = f64::from(plan.pp);
    let layers_on_slowest = f64::from(slowest_layers);

    let mut terms = StepTerms::default();
    terms.set(Term::exposed(TermKind::Compute, 0.0, m * slowest.compute));
    let layer_comm_term = |kind: TermKind, per_layer: &PassComm, hidden_by: HiddenBy| {
        let layers = if kind == TermKind::EpComm {
            ep_layers_on_slowest
        } else {
            layers_on_slowest
        };
        Term {
            wire_bytes: Bytes(per_layer.wire_bytes * layers * m),
            time_s: Seconds(per_layer.total_s() * layers * m),
            exposed_s: Seconds(per_layer.exposed_s() * layers * m),
            hidden_by: if per_layer.exposed_s() < per_layer.total_s() {
                hidden_by
            } else {
                HiddenBy::Nothing
            },
            ..Term::new(kind)
        }
    };
    // Without TP comm overlap only the backward's asynchronous re-gather of the sequence-parallel
    // inputs hides (under its dgrad GEMMs), so the term names that, not the overlap that is off.
    terms.set(layer_comm_term(
        TermKind::TpComm,
        &tp,
        if tp_overlap_on(training, plan) {
            HiddenBy::NeighbouringGemms
        } else {
            HiddenBy::DgradGemms
        },
    ));
    terms.set(layer_comm_term(
        TermKind::CpComm,
        &cp,
        match training.cp_exchange {
            CpExchange::KvRing => HiddenBy::AttentionBlocks,
            CpExchange::TorchAllGather => HiddenBy::DiagonalAttentionStep,
            CpExchange::KvAllGather | CpExchange::HeadAllToAll => HiddenBy::Nothing,
        },
    ));
    terms.set(layer_comm_term(
        TermKind::MambaCpComm,
        &mamba_cp,
        HiddenBy::Nothing,
    ));
    terms.set(layer_comm_term(
        TermKind::EpComm,
        &ep,
        HiddenBy::OtherMicroBatch,
    ));
    if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        terms.set(Term {
            wire_bytes: Bytes(slowest.sends * message * m),
            time_s: Seconds(slowest.sends * pp_send_s * m),
            exposed_s: Seconds(m * slowest.pp),
            hidden_by: if pp_send_exposed_s < pp_send_s {
                HiddenBy::PipelineCompute
            } else {
                HiddenBy::Nothing
            },
            ..Term::new(TermKind::PpComm)
        });
    }

    // Bubble: (p − 1)/v idle slots of one micro-batch's stage time (Narayanan et al. 2021 §2.2),
    // once per pipeline schedule the step runs (torchtitan's gradient-accumulation steps).
    // The V schedules (two chunks per GPU, a split backward) leave the idle time of
    // `v_schedule::v_bubble_s`, from one chunk's forward, input and weight gradient.
    let bubble_s = match (plan.pp > 1, training.pp_schedule.v_kind(), v_chunks) {
        (false, _, _) => 0.0,
        (true, Some(kind), Some([chunk, output])) => {
            f64::from(plan.schedule_runs)
                * v_schedule::v_bubble_s(
                    kind,
                    plan.pp,
                    plan.microbatches_per_schedule(),
                    chunk,
                    output,
                )
        }
        (true, _, _) => f64::from(plan.schedule_runs) * (p - 1.0) / v * mean_total,
    };
    // Idle over one stage's busy time: (p − 1)/(v·m) for the looped schedules.
    let bubble_ratio = match training.pp_schedule.v_kind() {
        Some(_) if plan.pp > 1 && mean_total > 0.0 => bubble_s / (m * mean_total),
        _ => pipeline::bubble_ratio(plan.pp, plan.vpp, plan.microbatches_per_schedule()),
    };
    terms.set(Term::exposed(TermKind::Bubble, 0.0, bubble_s));

    // DP (with CP) on the stage with the most parameters.
    let memory::StageParams {
        total: params,
        expert: expert_params,
    } = memory::max_stage_params(model, training, plan);
    let dp_group = groups.get(GroupKind::Dp);
    let gather_bytes_per_param =
        comm::gather_bytes_per_param(model, training, plan, params, max_layers);
    // Expert parameters are reduced and sharded over expert-DP, the rest over DP×CP.
    let expert_group = groups.get(GroupKind::ExpertDp);
    let dp_replicas = groups.get(GroupKind::DpReplica);
    let expert_replicas = groups.get(GroupKind::ExpertDpReplica);
    let dp = comm::dp_traffic(
        training,
        plan,
        params - expert_params,
        dp_group.size,
        dp_group.speed,
        dp_replicas.size,
        dp_replicas.speed,
        gather_bytes_per_param,
    )
    .plus(&comm::dp_traffic(
        training,
        plan,
        expert_params,
        expert_group.size,
        expert_group.speed,
        expert_replicas.size,
        expert_replicas.speed,
        gather_bytes_per_param,
    ));
    let overlap = training.overlap;
    let backward_gathers_s = dp.reduce_per_overlap_window_s * dp.overlap_windows - dp.grad_total_s;
    let grad_per_window = dp.grad_total_s / dp.overlap_windows.max(1.0);
    let (grad_not_hidden, backward_gathers_not_hidden) = if overlap.grad_reduce {
        // Each window's reduction runs under that micro-batch's backward; the last bucket is
        // reduced after the backward has finished.
        let window = slowest.backward;
        let grad = dp.overlap_windows * (grad_per_window - window).max(0.0);
        let with_gathers = dp.overlap_windows * (dp.reduce_per_overlap_window_s - window).max(0.0);
        let last_bucket = dp.last_bucket_s.min(dp.grad_total_s - grad).max(0.0);
        (grad + last_bucket, with_gathers - grad)
    } else {
        (dp.grad_total_s, backward_gathers_s)
    };
    let with_penalty =
        |total: f64, not_hidden: f64| not_hidden + OVERLAP_COMPUTE_PENALTY * (total - not_hidden);
    let grad_exposed = with_penalty(dp.grad_total_s, grad_not_hidden.min(dp.grad_total_s));
    terms.set(Term {
        wire_bytes: Bytes(dp.grad_wire_bytes),
        time_s: Seconds(dp.grad_total_s),
        exposed_s: Seconds(grad_exposed),
        hidden_by: if grad_not_hidden < dp.grad_total_s {
            HiddenBy::Backward
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::DpGradReduce)
    });
    let forward_gathers_s = m * dp.forward_gather_per_mb_s;
    // ZeRO-3's gathers before each forward hide behind it only when prefetched (FSDP's forward
    // prefetch, DeepSpeed's `overlap_comm`): `--overlap-param-gather false` exposes them.
    let forward_gathers_not_hidden = if overlap.param_gather {
        m * (dp.forward_gather_per_mb_s - slowest.forward).max(0.0)
    } else {
        forward_gathers_s
    };
    // Weights FSDP keeps across micro-batches are gathered before each pipeline schedule's first
    // forward (`comm::fsdp_syncs_per_step` of them a step), each under that forward.
    let step_gathers = f64::from(comm::fsdp_syncs_per_step(training, plan));
    let step_gather_not_hidden = if overlap.param_gather {
        (dp.step_gather_s - step_gathers * slowest.forward).max(0.0)
    } else {
        dp.step_gather_s
    };
    let gathers_s = backward_gathers_s + forward_gathers_s + dp.step_gather_s;
    let gathers_not_hidden =
        backward_gathers_not_hidden + forward_gathers_not_hidden + step_gather_not_hidden;
    terms.set(Term {
        wire_bytes: Bytes(dp.wire_bytes - dp.grad_wire_bytes),
        time_s: Seconds(gathers_s),
        exposed_s: Seconds(with_penalty(gathers_s, gathers_not_hidden.min(gathers_s))),
        hidden_by: if gathers_not_hidden < gathers_s {
            HiddenBy::Forward
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::DpParamGather)
    });

    let params_updated = if plan.zero >= 1 {
        (params - expert_params) / f64::from(dp_group.size)
            + expert_params / f64::from(expert_group.size)
    } else {
        params
    };
    let optimizer_s = optimizer_time(
        cluster,
        params_updated,
        training.grad_dtype.bytes(),
        training.optimizer_states,
        comm::fp8_parameter_gather(training, plan),
    )
    .0;
    terms.set(Term::exposed(TermKind::Optimizer, 0.0, optimizer_s));
    if let Some(offload) = host_offload_term(model, cluster, training, &memory, &costs.layer, m) {
        terms.set(offload);
    }

    let time = StepTime::from_terms(&terms);
    let step_s = time.step_s.0;

    let gpus = f64::from(cluster.total_gpus());
    let model_flops = model.model_flops_per_step(plan.global_batch, seq_len).0;
    // Transformer layers every sequence passes through, the MTP layers included.
    let all_layers = f64::from(model.layers + model.mtp_layers);
    // The attention cores among them: every layer's in a transformer, the attention blocks' alone
    // in a hybrid stack (`Model::block_shares`: its Mamba and MLP layers hold none).
    let attention_core = model
        .attention_core_forward_flops(plan.global_batch, seq_len)
        .0
        * all_layers
        * model.block_shares().attention;
    let selective = training.selective_recompute();
    let recompute_flops = match (plan.recompute, selective, training.attention) {
        // The attention core where listed, and the other modules' GEMMs.
        (Recompute::Selective, SelectiveRecompute::Modules(modules), _) => {
            let core = if modules.contains(crate::training::RecomputeModule::CoreAttn) {
                attention_core
            } else {
                0.0
            };
            core + module_recompute::forward_flops_per_token(model, modules)
                * f64::from(plan.global_batch)
                * f64::from(seq_len)
        }
        (Recompute::None, _, _)
        | (Recompute::Selective, SelectiveRecompute::AttentionCore, AttentionKernel::Flash) => 0.0,
        (
            Recompute::Selective,
            SelectiveRecompute::AttentionCore | SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Unfused,
        ) => attention_core,
        // The fused kernel's forward again: the causal pairs (and windowed ones) it executes.
        (
            Recompute::Selective,
            SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Flash,
        ) => attention_core,
        (Recompute::Selective, SelectiveRecompute::AlternateMatmuls, _) => {
            model
                .alternate_matmul_recompute_flops(plan.global_batch, seq_len)
                .0
                * all_layers
        }
        // The recomputed forward runs the kernels of the first: the fused kernel only the causal
        // (and windowed) pairs, the unfused path all of them.
        (Recompute::Full, _, attention) => {
            let forward = match attention {
                AttentionKernel::Flash => {
                    model.layer_causal_forward_flops(plan.global_batch, seq_len)
                }
                AttentionKernel::Unfused => model.layer_forward_flops(plan.global_batch, seq_len),
            };
            plan.recompute_share() * forward.0 * all_layers
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
    let group_comm = |kinds: &[TermKind]| GroupComm {
        wire_bytes: Bytes(kinds.iter().map(|k| terms.get(*k).wire_bytes.0).sum()),
        time_s: Seconds(kinds.iter().map(|k| terms.get(*k).time_s.0).sum()),
        link: {
            let group = groups.get(kinds[0].group().unwrap_or(GroupKind::Tp));
            (group.size > 1).then_some(group.link)
        },
    };
    // Training runs whole steps: a token budget that is not a multiple of the step's tokens
    // takes one more step (and a budget below one step, one step).
    let time_to_train_s = training.tokens.map(|tokens| {
        let tokens_per_step = f64::from(plan.global_batch) * f64::from(seq_len);
        (tokens / tokens_per_step).ceil() * step_s
    });

    Estimate {
        plan: *plan,
        memory,
        comm: Comm {
            tp: group_comm(&[TermKind::TpComm]),
            cp: group_comm(&[TermKind::CpComm, TermKind::MambaCpComm]),
            // With ep 1 the MoE token traffic is expert TP's gathers and scatters: their link.
            ep: GroupComm {
                link: if plan.ep == 1 && plan.etp > 1 {
                    Some(groups.get(GroupKind::ExpertTp).link)
                } else {
                    group_comm(&[TermKind::EpComm]).link
                },
                ..group_comm(&[TermKind::EpComm])
            },
            pp: group_comm(&[TermKind::PpComm]),
            // With several copies of the sharded states the all-reduce across them may leave the
            // NVLink domain one copy sits in: the traffic's link is the slower of the two.
            // An MoE model's expert gradients go over expert-DP, which has ranks (and traffic)
            // where DP×CP has one (tp 8, ep 2 on 16 GPUs: DP 1, expert-DP 4): the traffic's link
            // is the slower of the groups that carry some.
            dp: {
                let dp = group_comm(&[TermKind::DpGradReduce, TermKind::DpParamGather]);
                let replicas = groups.get(GroupKind::DpReplica);
                // No collection: `evaluate` runs once per candidate and allocates nothing.
                let expert_links = || {
                    [GroupKind::ExpertDp, GroupKind::ExpertDpReplica]
                        .into_iter()
                        .map(|kind| groups.get(kind))
                        .filter(|group| model.moe.is_some() && group.size > 1)
                        .map(|group| group.link)
                };
                GroupComm {
                    link: match dp.link.or_else(|| expert_links().next()) {
                        Some(_)
                            if (replicas.size > 1 && replicas.link == Link::Network)
                                || expert_links().any(|link| link == Link::Network) =>
                        {
                            Some(Link::Network)
                        }
                        link => link,
                    },
                    ..dp
                }
            },
        },
        bubble_ratio,
        bubble_share: if step_s > 0.0 {
            time.bubble_s.0 / step_s
        } else {
            0.0
        },
        time,
        terms,
        model_tflops_per_gpu: model_flops / step_s / gpus / 1e12,
        hardware_tflops_per_gpu: (model_flops + recompute_flops) / step_s / gpus / 1e12,
        mfu: model_flops / (step_s * gpus * peak),
        tokens_per_s,
        time_to_train_s,
        cost_to_train: time_to_train_s
            .zip(training.price_per_gpu_hour)
            .map(|(seconds, price)| cost_to_train(seconds, gpus, price)),
        infeasible: if !memory.fits {
            Some(Infeasible::OutOfMemory {
                need_bytes: memory.total_bytes,
                have_bytes: memory.capacity_bytes,
            })
        } else if !memory.host_fits {
            Some(Infeasible::OutOfHostMemory {
                need_bytes: memory.host_bytes,
                have_bytes: memory.host_capacity_bytes,
            })
        } else {
            None
        },
        slowest_stage_layers: slowest_layers,
        slowest_stage_moe_layers: slowest_moe_layers,
        slowest_stage_mtp_layers: slowest_mtp_layers,
        slowest_stage_run: slowest_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::{AttentionKernel, TrainingFramework};

    #[test]
    fn torchtitan_tp_collectives_add_a_copy_of_their_tensor_to_compute() {
        // Llama 3 8B on tp 8, nothing recomputed: each of the forward's and the backward's two
        // all-gather/reduce-scatter pairs reads and writes the full b·s·h bf16 tensor once more
        // (PyTorch's functional collectives chunk and cat along the sequence dim). Async TP fuses
        // the forward's; Megatron-Core copies nothing.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let plan_for = |training: &Training| {
            let request = crate::plan::PlanRequest {
                tp: 8,
                pp: 1,
                dp: 1,
                micro_batch: 2,
                sequence_parallel: true,
                recompute: Recompute::None,
                ..crate::plan::PlanRequest::default()
            };
            ParallelPlan::build(&request, &model, &cluster, training).unwrap()
        };
        let layer_of = |training: &Training| {
            let plan = plan_for(training);
            let units = unit_costs(&model, &cluster, training, &plan);
            let bare = layer_time_sharded(
                &model,
                &cluster,
                &LayerShard {
                    micro_batch: 2,
                    seq_len: 8192,
                    tp: 8,
                    cp: 1,
                    sp: true,
                    recompute: Recompute::None,
                    selective: training.selective_recompute(),
                    attention: training.attention,
                    gemm_chunks: if tp_overlap_on(training, &plan) { 8 } else { 1 },
                    attention_efficiency: attention_efficiency(&model, &cluster, training),
                    kernel_fusion: training.kernel_fusion,
                    sdpa_repeats_kv: training.sdpa_repeats_kv,
                    rope_fusion: training.rope_fusion,
                    cast: cast::CastSetting::of(training, &plan),
                },
            );
            (
                units.layer.forward - bare.forward,
                units.layer.backward - bare.backward,
            )
        };
        let pair = 8.0 * 2.0 * 8192.0 * 4096.0 * 2.0 / cluster.gpu.achieved_hbm_bandwidth().0;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 + 1e-9 * b.abs();
        let titan = Training::with_framework(
            TrainingFramework::Torchtitan,
            8192,
            8,
            AttentionKernel::Flash,
        );
        let (forward, backward) = layer_of(&titan);
        assert!(
            close(forward, pair) && close(backward, pair),
            "{forward} {backward}"
        );
        let mut async_tp = titan;
        async_tp.overlap.tp_comm = true;
        let (forward, backward) = layer_of(&async_tp);
        assert!(
            close(forward, 0.0) && close(backward, pair),
            "{forward} {backward}"
        );
        let megatron = Training::with_framework(
            TrainingFramework::MegatronCore,
            8192,
            8,
            AttentionKernel::Flash,
        );
        assert_eq!(layer_of(&megatron), (0.0, 0.0));
    }

    /// How much a Llama 3 8B layer's backward (tp 2 on one H100 node, 8K tokens, nothing
    /// recomputed) grows from ZeRO-1 to ZeRO-3 under `framework` at `pp` × `dp` and `micro_batch`,
    /// against `bytes_per_param` moved over the layer's TP-split parameters; with the micro-batches
    /// each pipeline schedule runs.
    fn zero3_backward_growth(
        framework: TrainingFramework,
        pp: u32,
        dp: u32,
        micro_batch: u32,
        bytes_per_param: f64,
    ) -> (f64, f64, u32) {
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(framework, 8192, 32, AttentionKernel::Flash);
        let backward_at = |zero: u8| {
            let request = crate::plan::PlanRequest {
                tp: 2,
                pp,
                dp,
                micro_batch,
                zero,
                recompute: Recompute::None,
                ..crate::plan::PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let backward = unit_costs(&model, &cluster, &training, &plan)
                .layer
                .backward;
            (backward, plan.microbatches_per_schedule())
        };
        let expected = model.layer_params() / 2.0 * bytes_per_param
            / cluster.gpu.achieved_hbm_bandwidth().0
            / cluster.gpu.framework_efficiency;
        let ((sharded, micro_batches), (replicated, _)) = (backward_at(3), backward_at(1));
        (sharded - replicated, expected, micro_batches)
    }

    #[test]
    fn fp8_parameter_gather_leaves_the_output_layers_copies_in_bf16() {
        // torchtitan ZeRO-3 in FP8 on tp 2 x dp 4: with the FP8 parameter gather the layers'
        // copy-outs move one byte a parameter, but the embedding and output layer are gathered in
        // bf16 either way (`comm::gather_bytes_per_param`), so their copies do not shrink.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let request = crate::plan::PlanRequest {
            tp: 2,
            dp: 4,
            zero: 3,
            precision: crate::plan::Precision::Fp8,
            ..crate::plan::PlanRequest::default()
        };
        let costs = |fp8_param_gather: bool| {
            let mut training = Training::with_framework(
                TrainingFramework::Torchtitan,
                8192,
                32,
                AttentionKernel::Flash,
            );
            training.fp8_param_gather = fp8_param_gather;
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            assert!(comm::fp8_parameter_gather(&training, &plan) == fp8_param_gather);
            unit_costs(&model, &cluster, &training, &plan)
        };
        let (bf16, fp8) = (costs(false), costs(true));
        assert!(fp8.layer.forward < bf16.layer.forward);
        assert_eq!(fp8.output.forward, bf16.output.forward);
        assert_eq!(fp8.output.backward, bf16.output.backward);
    }

    #[test]
    fn megatron_fsdp_copies_each_gradient_into_its_bucket_outside_the_gemms() {
        // tp 2 × dp 4 under Megatron-Core (the fused weight-gradient GEMMs stay compute-bound at
        // 8K tokens, so ZeRO-1 pays nothing beyond them). Megatron-FSDP runs unfused: each bf16
        // gradient is copied into its fp32 bucket, 6 bytes per parameter.
        let (extra, expected, _) =
            zero3_backward_growth(TrainingFramework::MegatronCore, 1, 4, 1, 6.0);
        assert!(
            (extra - expected).abs() < 1e-9 * expected,
            "{extra} vs {expected}"
        );
    }

    #[test]
    fn pipelined_fsdp_pays_an_accumulation_pass_over_the_stage_per_micro_batch() {
        // tp 2 × pp 2 × FSDP 2 (ZeRO-3) under torchtitan, 32 sequences of 2: 8 micro-batches in
        // one schedule, whose unsharded fp32 accumulators take every micro-batch's bf16 gradient
        // (6 bytes for the first, 10 for each later one), and whose one reduce-scatter copies the
        // accumulated fp32 gradients into its input (4 + 4 bytes over the 8 micro-batches). ZeRO-1
        // accumulates nothing unsharded across the schedule; the rest of the layer is the same.
        let (extra, expected, micro_batches) = zero3_backward_growth(
            TrainingFramework::Torchtitan,
            2,
            2,
            2,
            (6.0 + 7.0 * 10.0) / 8.0 + (4.0 + 4.0) / 8.0,
        );
        assert_eq!(micro_batches, 8);
        assert!(
            (extra - expected).abs() < 1e-9 * expected,
            "{extra} vs {expected}"
        );
    }
}
