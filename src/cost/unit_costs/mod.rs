//! The per-micro-batch costs of a stage's average layer (`UnitCosts`: its compute, its TP, CP and
//! EP communication, the pipeline send), which the closed form (`evaluate`) and the schedule
//! simulation (`simulated::stage_costs`) both build on.

use super::compute::{
    LayerShard, LayerTime, OutputLayerTime, layer_time_sharded, output_layer_time,
};
use super::embedding_output_tp::EndsComm;
use super::groups::Groups;
use super::overlap::tp_overlap_on;
use super::{Bf16Part, LayerMix, PassComm, recomputed_modules};
use super::{cast, comm, compute, groups, hybrid, memory, module_recompute, moe, moe_router};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::Training;

mod collectives;
use collectives::{
    TpSetting, add_tp_collective_copies, cp_comm, ends_tp, ep_comm, mamba_cp_comm, pp_send, tp_comm,
};

/// Share of the bf16 peak the framework's fused attention kernel reaches on this model's heads:
/// the profile's rate at head width 128 (`TrainingFramework::attention_efficiency`) times the
/// kernel's rate at the model's query/key width relative to 128
/// (`TrainingFramework::attention_head_width_factor`).
pub(super) fn attention_efficiency(model: &Model, cluster: &Cluster, training: &Training) -> f64 {
    let framework = training.framework;
    framework.attention_efficiency(&cluster.gpu)
        * framework.attention_head_width_factor(model.attention_head_dims().0)
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
    /// TP collectives of the model's ends per micro-batch: the embedding's (first stage) and the
    /// output layer's, loss's and MTP depths' (last stage; `embedding_output_tp`).
    pub ends: EndsComm,
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
/// (DeepSpeed's ZeRO optimizers, 2021 Megatron-LM: their A100 fit holds it). DeepSpeed's
/// `BF16_Optimizer` casts and adds every micro-batch's bf16 gradients into its buffer
/// (`bf16_optimizer::accumulation_pass_bytes`), which the fit's fp16 runs never did.
fn gradient_pass_bytes_per_param(training: &Training, plan: &ParallelPlan) -> f64 {
    if let Some(buffer) = crate::cost::bf16_optimizer::accumulates_in(training, plan) {
        return crate::cost::bf16_optimizer::accumulation_pass_bytes(buffer);
    }
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

/// What every step of [`unit_costs_at_plan_precision`] reads: the evaluation's inputs, the mix
/// the average layer is built at and the plan's communication groups.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    model: &'a Model,
    cluster: &'a Cluster,
    training: &'a Training,
    plan: &'a ParallelPlan,
    mix: LayerMix,
    groups: &'a Groups,
}

/// [`unit_costs_at`] with every layer of `mix` at the plan's precision, one step a job: the
/// layer's compute, then TP, CP, the Mamba mixers' CP and EP communication (each adding the copies
/// it runs on the compute stream to the layer, in this order, so that the sums round as they
/// always have), the model's ends' TP collectives, the pipeline send and the output layer.
// Every step is `#[inline(always)]` so that the whole stays one body inlined where
// `unit_costs_at` is (see the note there): criterion `evaluate/512b_tp8_pp16_dp2` ran as fast
// after the split as before it (2026-12-07).
#[inline(always)]
fn unit_costs_at_plan_precision(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    mix: LayerMix,
) -> UnitCosts {
    let groups = groups::groups(cluster, plan);
    let inputs = Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        groups: &groups,
    };
    let tp_overlap = tp_overlap_on(training, plan);
    let shard = layer_shard(&inputs, tp_overlap);
    let transformer_layer = layer_time_sharded(model, cluster, &shard);
    let compute = layer_compute(&inputs, &shard, transformer_layer);
    let mut layer = compute.layer;
    let tp_setting = TpSetting::of(&inputs, tp_overlap);
    add_tp_collective_copies(&inputs, &tp_setting, &mut layer);
    let tp = tp_comm(&inputs, &tp_setting, &layer);
    let cp = cp_comm(&inputs, transformer_layer.attention_forward, &mut layer);
    let mamba_cp = mamba_cp_comm(&inputs, &mut layer);
    let ep = ep_comm(&inputs, &compute);
    let (pp_send_s, pp_send_exposed_s) = pp_send(&inputs);
    let (output, windows) = output_layer(&inputs, compute.sharded_dp_copies);
    let ends = ends_tp(&inputs, tp_overlap, windows);
    UnitCosts {
        layer,
        output,
        tp,
        ends,
        cp,
        mamba_cp,
        ep,
        moe_share: mix.moe_share,
        pp_send_s,
        pp_send_exposed_s,
        groups,
    }
}

/// How one GPU's share of a layer runs: the plan's sharding and recompute, the framework's
/// kernels, GEMMs split into `tp` chunks where TP overlap pipelines them with their collectives.
#[inline(always)]
fn layer_shard(inputs: &Inputs, tp_overlap: bool) -> LayerShard {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        ..
    } = *inputs;
    LayerShard {
        micro_batch: plan.micro_batch,
        seq_len: training.seq_len,
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
        // How the linear inputs are quantized, for the dense layer and the MoE MLP alike.
        cast: cast::CastSetting::of(training, plan),
    }
}

/// The average layer's compute before any parallelism's own copies ([`layer_compute`]), and what
/// of it the EP step and the output layer read.
struct LayerCompute {
    layer: LayerTime,
    /// One MoE layer's MLP, router kernels included (zero for an all-dense mix).
    moe_time: moe::MoeMlpTime,
    /// What an MoE layer keeps of the dense layer (`moe::AttentionSide`).
    attention_side: moe::AttentionSide,
    /// Routed copies per balanced one (`moe::routed_load`).
    routed_load: f64,
    /// Whether sharded DP copies parameters around its collectives on the compute stream
    /// ([`add_sharded_dp_copies`]), which the output layer pays too.
    sharded_dp_copies: bool,
}

/// The average layer's compute: the transformer layer (or a hybrid stack's blocks at their
/// shares), its MoE layers' MLPs in place of the dense one at `mix.moe_share`, the listed modules'
/// recompute, the gradient pass outside the GEMMs and sharded DP's copies.
#[inline(always)]
fn layer_compute(
    inputs: &Inputs,
    shard: &LayerShard,
    transformer_layer: LayerTime,
) -> LayerCompute {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        ..
    } = *inputs;
    let moe_share = mix.moe_share;
    // One dense MLP's times, which an MoE layer's MLP replaces.
    let (dense_mlp_forward, dense_mlp_backward, dense_mlp_weight_grad) = (
        transformer_layer.mlp_forward,
        transformer_layer.mlp_backward,
        transformer_layer.mlp_weight_grad,
    );
    // A hybrid stack's average layer holds each block's share (`hybrid`); a transformer's is the
    // layer itself.
    let mut layer = hybrid::average_layer(model, cluster, shard, transformer_layer, mix.blocks);
    // Routed copies per balanced one (imbalance and low-precision padding), once per evaluation.
    let routed_load = moe::routed_load(model, training, plan);
    let moe_time = moe_mlp_time(inputs, routed_load, shard.cast);
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
            training.seq_len,
            modules,
            routed_load,
            mix,
            dense_mlp_forward,
            moe_mlp,
            training.rope_fusion,
        );
    }
    // MoE layers replace the dense MLP by router, permutation, grouped expert GEMMs and shared
    // experts (`moe.rs`); the stage's average layer carries its MoE layers' share of the
    // difference.
    if moe_share > 0.0 {
        let delta = moe_share * (moe_mlp - dense_mlp_forward);
        layer.forward += delta;
        layer.backward += moe_share * (moe_time.backward_s - dense_mlp_backward);
        layer.weight_grad += moe_share * (moe_time.weight_grad_s - dense_mlp_weight_grad);
        if plan.recompute == Recompute::Full {
            layer.recompute += delta;
        }
    }
    add_gradient_pass(inputs, &mut layer);
    let sharded_dp_copies = add_sharded_dp_copies(inputs, &mut layer);
    layer.recompute *= if plan.recompute == Recompute::Full {
        plan.recompute_share()
    } else {
        1.0
    };
    LayerCompute {
        layer,
        moe_time,
        attention_side,
        routed_load,
        sharded_dp_copies,
    }
}

/// One MoE layer's MLP (`moe::moe_mlp_time`) with the router's score kernels beside its GEMM
/// (`moe_router`); zero where the mix has no MoE layer.
#[inline(always)]
fn moe_mlp_time(
    inputs: &Inputs,
    routed_load: f64,
    cast_setting: cast::CastSetting,
) -> moe::MoeMlpTime {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        ..
    } = *inputs;
    if mix.moe_share > 0.0 {
        let seq_len = training.seq_len;
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
        let router =
            moe_router::RouterKernels::of(model, training).time(model, cluster, plan, seq_len);
        time.forward_s += router.forward_s;
        time.backward_s += router.backward_s;
        time
    } else {
        moe::MoeMlpTime::default()
    }
}

/// Seconds per byte of a memory-bound copy on the compute stream.
#[inline(always)]
fn copy_s_per_byte(cluster: &Cluster) -> f64 {
    1.0 / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency
}

/// Gradients accumulated outside the GEMMs: an element-wise pass over the layer's parameters
/// after every micro-batch's backward (`gradient_pass_bytes_per_param`).
#[inline(always)]
fn add_gradient_pass(inputs: &Inputs, layer: &mut LayerTime) {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        ..
    } = *inputs;
    let pass_bytes = gradient_pass_bytes_per_param(training, plan);
    if pass_bytes > 0.0 {
        let (rest, expert) = memory::layer_params_per_gpu_at(model, plan, mix);
        layer.backward += (rest + expert) * pass_bytes
            / cluster.gpu.achieved_hbm_bandwidth().0
            / cluster.gpu.framework_efficiency;
    }
}

/// Sharded DP's copies around its gathers and reduce-scatters on the compute stream's path
/// (FSDP2's both, DeepSpeed ZeRO-3's gathers: `compute::sharded_dp_copy_bytes_per_param`);
/// whether there are any.
#[inline(always)]
fn add_sharded_dp_copies(inputs: &Inputs, layer: &mut LayerTime) -> bool {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        ..
    } = *inputs;
    let gathered_bytes = if comm::fp8_parameter_gather(training, plan) {
        1.0
    } else {
        crate::training::WEIGHT_BYTES
    };
    let (copy_forward, copy_backward) =
        compute::sharded_dp_copy_bytes_per_param(training, plan, gathered_bytes);
    let copies = copy_forward + copy_backward > 0.0;
    if copies {
        let copy_s_per_byte = copy_s_per_byte(cluster);
        let (rest, expert) = memory::layer_params_per_gpu_at(model, plan, mix);
        let copied = compute::sharded_dp_copied_params(plan, rest, expert);
        layer.forward += copied * copy_forward * copy_s_per_byte;
        layer.backward += copied * copy_backward * copy_s_per_byte;
    }
    copies
}

/// The output layer and loss, and the GEMM windows of its TP collectives (`ends_tp`). It is an
/// FSDP unit of its own (and, on a pipeline's only stage, so
/// is the token embedding unless the two are tied): where sharded DP copies parameters
/// (`sharded_dp_copies`), its copies go with its time.
#[inline(always)]
fn output_layer(inputs: &Inputs, sharded_dp_copies: bool) -> (LayerTime, OutputLayerTime) {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        ..
    } = *inputs;
    let windows = output_layer_time(
        model,
        cluster,
        plan.micro_batch,
        training.seq_len / plan.cp,
        plan.tp,
    );
    let mut output = windows.time;
    if sharded_dp_copies {
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
        let copy_s_per_byte = copy_s_per_byte(cluster);
        output.forward += tables * table * table_forward * copy_s_per_byte;
        output.backward += tables * table * table_backward * copy_s_per_byte;
    }
    (output, windows)
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
