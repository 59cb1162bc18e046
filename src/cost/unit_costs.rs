//! The per-micro-batch costs of a stage's average layer (`UnitCosts`: its compute, its TP, CP and
//! EP communication, the pipeline send), which the closed form (`evaluate`) and the schedule
//! simulation (`simulated::stage_costs`) both build on.

use super::comm::Collective;
use super::compute::{LayerShard, LayerTime, layer_time_sharded, output_layer_time};
use super::groups::{GroupKind, Groups};
use super::overlap::tp_overlap_on;
use super::{
    Bf16Part, LayerMix, OVERLAP_COMPUTE_PENALTY, PassComm, exposed_under, recomputed_modules,
    sp_regathers_in_backward, tp_pairs_at, tp_recompute_share,
};
use super::{
    cast, comm, compute, context_parallel, groups, hybrid, memory, module_recompute, moe,
    moe_router, torch_ring,
};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{CpExchange, Training};

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
