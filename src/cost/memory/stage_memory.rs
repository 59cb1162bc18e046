//! One stage's memory breakdown: model states (Rajbhandari et al. 2020), activations at the
//! pipeline peak, low-precision copies, the loss's logits, the reserve (`RESERVED_GIB`) and
//! fragmentation (`FRAGMENTATION_FRACTION`), against the GPU's capacity.

use super::activations::{
    alternate_matmul_activation_bytes, eager_saved_bytes_per_token,
    expanded_kv_saved_bytes_per_token, layer_activation_bytes_of, norm_output_fp8_saving_at,
};
use super::in_flight::{in_flight, in_flight_layer_weight, pipeline_buffer_bytes};
use super::params::{keeps_mtp_embedding_copy, layer_params_per_gpu_at, stage_params_at};
use super::stage_layers::{stage_bf16, stage_layers, stage_mix};
use super::{FRAGMENTATION_FRACTION, Memory, RESERVED_GIB, Stage};
use crate::cluster::Cluster;
use crate::cost::LayerMix;
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{KernelFusion, Training, WEIGHT_BYTES};
use crate::units::{Bytes, GIB};

/// [`stage_memory_at_precision`] with the stage's layers kept in bf16 (`pipeline::Bf16Keep`): what
/// differs with the precision — the quantized weight copies and low-precision parameters, the
/// quantized saved inputs, and the fragmentation over them — is per layer, so the bf16 layers' share
/// of the stage's layers moves it that share of the way to the same stage at bf16 (the composition
/// of the bf16 layers taken as the stage's average).
pub(super) fn stage_memory(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> Memory {
    let at_plan = stage_memory_at_precision(model, cluster, training, plan, stage, middle_rank);
    let layers = stage_layers(plan, model, stage);
    let Some(bf16) = stage_bf16(model, training, plan, stage, middle_rank).filter(|_| layers > 0)
    else {
        return at_plan;
    };
    let bf16_plan = ParallelPlan {
        precision: Precision::Bf16,
        ..*plan
    };
    let at_bf16 =
        stage_memory_at_precision(model, cluster, training, &bf16_plan, stage, middle_rank);
    let share = f64::from(bf16.layers.min(layers)) / f64::from(layers);
    let toward = |a: Bytes, b: Bytes| Bytes(a.0 + share * (b.0 - a.0));
    let weights_bytes = toward(at_plan.weights_bytes, at_bf16.weights_bytes);
    let optimizer_bytes = toward(at_plan.optimizer_bytes, at_bf16.optimizer_bytes);
    let activations_bytes = toward(at_plan.activations_bytes, at_bf16.activations_bytes);
    let other_bytes = toward(at_plan.other_bytes, at_bf16.other_bytes);
    let total = weights_bytes.0
        + at_plan.gradients_bytes.0
        + optimizer_bytes.0
        + activations_bytes.0
        + other_bytes.0;
    Memory {
        weights_bytes,
        optimizer_bytes,
        activations_bytes,
        other_bytes,
        total_bytes: Bytes(total),
        fits: total <= at_plan.capacity_bytes.0,
        ..at_plan
    }
}

fn stage_memory_at_precision(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> Memory {
    // One layer as this GPU holds it, on average over this stage's layers: its TP share of the
    // dense part and its own experts.
    let mix = stage_mix(model, plan, stage, middle_rank);
    let moe_share = mix.moe_share;
    // Routed copies per balanced one (imbalance and low-precision padding).
    let routed_load = crate::cost::moe::routed_load(model, training, plan);
    let params = stage_params_at(model, plan, stage, mix);
    // Gradients are reduced and ZeRO shards over the DP and CP ranks together (Megatron's
    // distributed optimizer uses the data-parallel group with context parallelism); routed experts
    // over expert-DP.
    let shard_ranks = plan.zero_shard_ranks();
    let dp = f64::from(shard_ranks);
    let (dense_layer, expert_layer) = layer_params_per_gpu_at(model, plan, mix);
    let layers = f64::from(stage_layers(plan, model, stage));
    let expert_params = layers * expert_layer;
    let after_schedule = crate::cost::comm::reduces_after_pipeline_schedule(training, plan);
    let dense_params = params - expert_params;
    let expert_dp = f64::from(crate::cost::moe::expert_shard_ranks(plan));
    // ZeRO §5.1: stage 1 shards optimizer states, 2 also gradients, 3 also parameters, over dp.
    // DeepSpeed's `BF16_Optimizer` shards its states at ZeRO-0 too (its own ZeRO-1,
    // `bf16_optimizer::shards_states_at_zero0`).
    let zero = if crate::cost::bf16_optimizer::shards_states_at_zero0(training, plan) {
        1
    } else {
        plan.zero
    };
    let shard = |from_stage: u8| if zero >= from_stage { dp } else { 1.0 };
    let expert_shard = |from_stage: u8| {
        if zero >= from_stage { expert_dp } else { 1.0 }
    };
    let sharded = |bytes: f64, from_stage: u8| {
        dense_params * bytes / shard(from_stage) + expert_params * bytes / expert_shard(from_stage)
    };
    // The parameters at rest in their stored format (fp32 under FSDP2 with fp32 parameters); what
    // the layers compute with is the 16-bit copy ZeRO-3 gathers, counted below.
    let states = training.optimizer_states;
    let mut weights = sharded(states.param_bytes(), 3);
    // DeepSpeed's `BF16_Optimizer` keeps the bf16 `.grad`s beside its unsharded buffer
    // (`bf16_optimizer::gradient_bytes_per_param`); it runs at ZeRO-0 and 1 only.
    let mut gradients = match crate::cost::bf16_optimizer::accumulates_in(training, plan) {
        Some(buffer) => sharded(
            crate::cost::bf16_optimizer::gradient_bytes_per_param(buffer),
            2,
        ),
        None => sharded(training.grad_dtype.bytes(), 2),
    };
    let low_precision_params = crate::cost::comm::fp8_parameter_gather(training, plan);
    let mut optimizer = sharded(
        states.optimizer_bytes_with_low_precision_params(low_precision_params),
        1,
    );
    // Muon keeps one moment for the layers' weights; the embedding and output layer (what the
    // stage holds beyond its layers) keep Adam's two (`OptimizerStates::adam_moment_bytes`).
    let beyond_layers = (params - layers * (dense_layer + expert_layer)).max(0.0);
    optimizer += beyond_layers * (states.adam_moment_bytes() - states.moment_bytes()) / shard(1);
    // ZeRO-3 gathers one unit at a time: a layer as this GPU holds it unsharded (its TP share of
    // the dense part and its own experts, not every expert of the layer), or the word embedding /
    // output layer on the stages that hold them — counting only what is sharded at all: the dense
    // part over DP×CP, the experts over expert-DP (with expert-DP 1 they stay whole on their GPU).
    let dense_sharded = shard_ranks > 1;
    let layer_unit = (if dense_sharded { dense_layer } else { 0.0 })
        + (if expert_dp > 1.0 { expert_layer } else { 0.0 });
    let t = f64::from(plan.tp);
    let embedding_unit = match stage {
        Stage::First | Stage::Only | Stage::Ends if dense_sharded => {
            model.word_embedding_params() / t
        }
        // The last stage's own embedding copy for the MTP layers (`stage_params`).
        Stage::Last if dense_sharded && keeps_mtp_embedding_copy(model) => {
            model.word_embedding_params() / t
        }
        _ => 0.0,
    };
    let output_unit = match stage {
        Stage::Last | Stage::Only | Stage::Ends if dense_sharded && !model.tied_embeddings => {
            model.output_params() / t
        }
        _ => 0.0,
    };
    let mut units = [layer_unit, embedding_unit, output_unit];
    units.sort_by(|a, b| b.total_cmp(a));
    let largest_unit = units[0];
    // The unit in use and the next one prefetched (FSDP's `limit_all_gathers` rate limiter,
    // DeepSpeed's `stage3_prefetch_bucket_size`): the two largest, or two layers.
    let two_units = units[0] + units[1].max(layer_unit);
    // The stage's parameters that data parallelism shards at all (as `layer_unit` counts them).
    let sharded_params = (if dense_sharded { dense_params } else { 0.0 })
        + (if expert_dp > 1.0 { expert_params } else { 0.0 });
    // Memory allocated and freed within a step (`FRAGMENTATION_FRACTION`), beyond the activations.
    let mut transient = 0.0;
    if plan.zero >= 3 && sharded_params > 0.0 {
        // Under PyTorch's pipelining the backward never reshards (`set_reshard_after_backward(
        // False)`, `comm::reduces_after_pipeline_schedule`): after the first micro-batch's backward
        // the whole stage is gathered whether or not the forward reshards.
        if plan.reshard_after_forward && !after_schedule {
            // ZeRO-3 gathers each unit's parameters before use and keeps the next one prefetched.
            transient += two_units * WEIGHT_BYTES;
        } else {
            // FSDP2 `reshard_after_forward=False`: the stage's gathered parameters stay from the
            // forward until the backward has used them.
            transient += sharded_params * WEIGHT_BYTES;
        }
    }
    weights += transient;
    // With sharded gradients (ZeRO-2 and 3) a unit's full gradient exists until it is
    // reduce-scattered (DeepSpeed's `reduce_bucket_size`, FSDP's per-unit reduce-scatter).
    let gradients_at_rest = gradients;
    if plan.zero >= 2 && !after_schedule {
        gradients += largest_unit * training.grad_dtype.bytes();
    }
    if after_schedule {
        // Under PyTorch's pipelining every micro-batch's gradients accumulate unsharded, in the
        // reduce dtype, until the reduce-scatter after the schedule: the whole stage's worth of
        // what is sharded. Each model chunk reduce-scatters and frees its own after its last
        // backward (stage.py `backward_maybe_with_nosync(last_backward=True)` runs FSDP's
        // `post_backward` for that stage's module). An interleaved schedule with a single round
        // of micro-batches (m ≤ p) runs every backward of one chunk before the next chunk's first
        // (`ScheduleInterleaved1F1B`'s backward order by rounds of p), so one chunk's worth lives
        // at the peak; with more rounds the chunks alternate and all of them live. NeMo
        // AutoModel's MoE models defer every chunk's reduce-scatter to the step's end
        // (`fsdp_syncs_once_per_step`).
        let one_chunk_at_a_time = plan.vpp > 1
            && plan.microbatches_per_schedule() <= plan.pp
            && !training.fsdp_syncs_once_per_step;
        let live_share = if one_chunk_at_a_time {
            1.0 / f64::from(plan.vpp)
        } else {
            1.0
        };
        gradients += live_share * sharded_params * training.grad_dtype.bytes();
        // The sharded gradients do not exist beside all of them. FSDP2's `foreach_reduce`
        // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) copies a unit's unsharded
        // gradients into the reduce-scatter input, frees them ("Only after the copy-in finishes
        // can we free the gradients": `unsharded_grads.clear()`) and makes the sharded gradient
        // from the reduce-scatter output (`sharded_param.grad = new_sharded_dtensor_grad`, or
        // `+=` onto an earlier schedule's); torchtitan's `OptimizersContainer.zero_grad` sets
        // them to None each step (`set_to_none=True`). So at the schedule's peak a sharded
        // gradient lives only where an earlier reduce-scatter of the step made it: every one
        // after an earlier schedule run (`comm::fsdp_syncs_per_step` > 1), the chunks already
        // reduced when one chunk lives at a time, none otherwise.
        let sharded_at_rest = (if dense_sharded {
            dense_params / dp
        } else {
            0.0
        } + if expert_dp > 1.0 {
            expert_params / expert_dp
        } else {
            0.0
        }) * training.grad_dtype.bytes();
        let sharded_live = if crate::cost::comm::fsdp_syncs_per_step(training, plan) > 1 {
            1.0
        } else {
            1.0 - live_share
        };
        gradients -= (1.0 - sharded_live) * sharded_at_rest;
    }
    transient += gradients - gradients_at_rest;
    // Low-precision GEMMs keep a quantized copy of every linear weight and, for the weight-gradient
    // GEMM, its transpose (Transformer Engine `Float8Tensor` with `_transpose`; MXFP8 keeps row- and
    // column-wise scaled copies instead): two copies of the layer weights at the format's size.
    let quantized_copies = match plan.precision {
        Precision::Bf16 => 0.0,
        // torchao casts per use (`TrainingFramework::keeps_quantized_weight_copies`).
        _ if !training.framework.keeps_quantized_weight_copies() => 0.0,
        // Blackwell reads a per-tensor FP8 tensor column-wise natively, so no transpose is kept
        // (TE `is_non_tn_fp8_gemm_supported()` true on SM 10.x, `Float8TensorStorage.update_usage`).
        Precision::Fp8 if cluster.gpu.microscaling => 1.0,
        Precision::Fp8 => 2.0,
        Precision::Mxfp8 => 2.0 * (1.0 + 1.0 / 32.0),
        Precision::Nvfp4 => 2.0 * (0.5 + 1.0 / 16.0),
    };
    // The layer weights this GPU holds (a routed expert lives on one EP rank only), each as
    // ZeRO-3 shards it.
    let layer_weights = layers * (dense_layer / shard(3) + expert_layer / expert_shard(3));
    // With FP8 parameter gather the quantized copies are the layer weights: their bf16 copy goes.
    let replaced = if low_precision_params {
        WEIGHT_BYTES
    } else {
        0.0
    };
    weights += (quantized_copies - replaced) * layer_weights;

    let (s, b, h, t) = (
        training.seq_len / plan.cp,
        plan.micro_batch,
        f64::from(model.hidden),
        f64::from(plan.tp),
    );
    let sbh = f64::from(s) * f64::from(b) * h;
    let sp_split = if plan.sequence_parallel { t } else { 1.0 };
    let rank = match stage {
        Stage::Only | Stage::First | Stage::Ends => 0,
        Stage::Middle => middle_rank,
        Stage::VMiddle => 1,
        Stage::Last => plan.pp - 1,
    };
    let layers = stage_layers(plan, model, stage);
    // One layer's activation bytes as `recompute` keeps them, with every adjustment below: the
    // plan's own recompute, and no recompute for the layers Megatron's block method leaves alone
    // and the one being recomputed.
    // At `share`, the MoE layers' share of the layers it averages over (`moe_share` for the
    // stage's; 0 or 1 for one dense or MoE layer, which activation offloading needs).
    let kept_per_layer_at = |recompute: Recompute, share: f64| -> f64 {
        let per_op_sac = training.per_op_sac(recompute);
        let modules =
            crate::cost::recomputed_modules(training, plan).filter(|_| recompute == plan.recompute);
        // Listed modules without the attention core keep what no recompute keeps, less what each
        // module frees (below).
        let layer_recompute = match modules {
            Some(m) if !m.contains(crate::training::RecomputeModule::CoreAttn) => Recompute::None,
            _ => recompute,
        };
        let per_layer = if per_op_sac {
            alternate_matmul_activation_bytes(model, b, s, plan.tp, plan.sequence_parallel)
        } else {
            layer_activation_bytes_of(
                model,
                b,
                s,
                (plan.tp, plan.cp, plan.sequence_parallel),
                layer_recompute,
                training.attention,
                mix.blocks,
            )
        };
        // torchtitan's sequence parallelism gathers the QKV and MLP inputs once (DTensor
        // `PrepareModuleInput(Shard(1) -> Replicate())`) and its column-parallel linears save those
        // gathered, full-length inputs for their weight gradients; Megatron's save the sequence
        // shard and gather it again in the backward (`layer_activation_bytes`). Two inputs, each
        // (1 - 1/t) of s·b·h more, at the bytes the linear saves them in (torchao's float8
        // linears gather and keep the float8 cast).
        let per_layer = if layer_recompute != Recompute::Full
            && !per_op_sac
            && plan.sequence_parallel
            && plan.tp > 1
            && training.framework.sp_keeps_gathered_inputs()
        {
            let bytes = if plan.precision == Precision::Bf16 {
                2.0
            } else {
                1.0
            };
            let t = f64::from(plan.tp);
            per_layer
                + 2.0
                    * bytes
                    * f64::from(s)
                    * f64::from(b)
                    * f64::from(model.hidden)
                    * (1.0 - 1.0 / t)
        } else {
            per_layer
        };
        // Low-precision GEMMs save their quantized inputs for the backward instead of the bf16 ones
        // (Transformer Engine keeps the FP8 `inputmat`; its docs' worked example: "FP8 input saved"):
        // the inputs of QKV and the two MLP GEMMs drop from 2 to 1 byte (MXFP8 and NVFP4 add their
        // scales and keep about as much). The output projection's input does not: it is the fused
        // attention's output O, which the attention keeps in bf16 for its own backward (FlashAttention-2
        // Alg. 2 computes D = rowsum(dO ∘ O); Transformer Engine's fused attention saves `out`), and
        // Megatron-Core has the projection save that same bf16 tensor rather than a second, quantized
        // copy (attention.py / multi_latent_attention.py under current scaling, the recipe tpsim's fp8
        // is written as, `--fp8-recipe tensorwise`; under delayed scaling the projection keeps an FP8
        // copy too, one byte more, not modelled). Per-op SAC saves matmul outputs, not their inputs,
        // so nothing changes there.
        let per_layer = if plan.precision != Precision::Bf16
            && recompute != Recompute::Full
            && !per_op_sac
            && training.framework.saves_quantized_inputs(plan.tp)
        {
            let (sf, bf, h) = (f64::from(s), f64::from(b), f64::from(model.hidden));
            // The norm outputs feeding QKV and the first MLP GEMM (split over TP only with SP)
            // save a byte where a layer-norm-fused GEMM keeps its quantized copy alone
            // (`norm_output_fp8_saving`).
            let at = LayerMix {
                moe_share: share,
                ..mix
            };
            let norm_outputs = sf * bf * h / sp_split * norm_output_fp8_saving_at(model, at);
            // The dense MLP's down-projection input exists in dense layers only; MoE layers save
            // their expert GEMM inputs in FP8 below.
            let shares = mix.blocks;
            let dense_share = shares.mlp - share;
            // A Mamba block's `out_proj` saves its quantized input (the gated norm's output) too.
            let mamba_inputs =
                shares.mamba * model.hybrid.as_ref().map_or(0.0, |h| h.inner_width());
            let sharded_inputs =
                sf * bf * (dense_share * f64::from(model.ffn_hidden) + mamba_inputs) / t;
            per_layer - (norm_outputs + sharded_inputs)
        } else {
            per_layer
        };
        // DeepSpeed-Ulysses repeats a rank's K/V heads up to cp before the all-to-all
        // (`kv_replication_factor`, `repeat_interleave`, UlyssesSPAttentionHF in
        // deepspeed/runtime/sequence_parallel/ulysses_sp.py), so the attention saves K and V at r
        // times their size: the whole sequence of one repeated head where the layer count has s/cp
        // tokens of every K/V head, 4·s·b·kv_width·(r − 1)/t bytes more.
        let replication = crate::cost::context_parallel::kv_head_replication(model, training, plan);
        let per_layer = if replication > 1.0 && recompute != Recompute::Full {
            per_layer
                + 4.0 * f64::from(s) * f64::from(b) * model.kv_width() * (replication - 1.0) / t
        } else {
            per_layer
        };
        // MoE layers keep their routed tokens' activations instead of the dense MLP's.
        let per_layer = if share > 0.0 && recompute != Recompute::Full {
            let sb = f64::from(s) * f64::from(b);
            let dense_mlp = if per_op_sac {
                2.0 * sb * f64::from(model.ffn_hidden) / t
                    + if model.gated_mlp { 2.0 * sb * h } else { 0.0 }
            } else {
                (2.0 * sb * model.mlp_up_width() + 2.0 * sb * f64::from(model.ffn_hidden)) / t
            };
            let moe_mlp = crate::cost::moe::moe_mlp_activation_bytes(
                model,
                plan,
                training.seq_len,
                routed_load,
            );
            // Low-precision expert GEMMs save their inputs quantized too (one byte instead of two).
            let moe_mlp = if plan.precision != Precision::Bf16 && !per_op_sac {
                moe_mlp
                    - crate::cost::moe::expert_gemm_input_elements(
                        model,
                        plan,
                        training.seq_len,
                        routed_load,
                    )
            } else {
                moe_mlp
            };
            // An eager clamp keeps the up projection's output beside the activation's saved
            // copy, unless the activation is recomputed (`moe::eager_glu_clamp_saved_bytes`).
            let activation_recomputed = modules.is_some_and(|m| {
                m.contains(crate::training::RecomputeModule::MoeAct)
                    || m.contains(crate::training::RecomputeModule::Moe)
            });
            let clamp = if activation_recomputed {
                0.0
            } else {
                crate::cost::moe::eager_glu_clamp_saved_bytes(
                    model,
                    plan,
                    training.seq_len,
                    routed_load,
                    crate::cost::moe::ExpertEpilogue::of(model, training),
                )
            };
            per_layer + share * (moe_mlp + clamp - dense_mlp)
        } else {
            per_layer
        };
        // Megatron-Core's listed modules free what they recompute (`module_recompute`).
        let per_layer = match modules {
            Some(m) => {
                per_layer
                    - crate::cost::module_recompute::freed_bytes(
                        model,
                        plan,
                        training.seq_len,
                        m,
                        routed_load,
                        LayerMix {
                            moe_share: share,
                            ..mix
                        },
                    )
            }
            None => per_layer,
        };
        // PyTorch eager keeps more than the fused kernels when nothing is recomputed
        // (`eager_saved_bytes_per_token`); per-op SAC and full AC recompute those tensors instead.
        if recompute != Recompute::None {
            return per_layer;
        }
        let eager = if training.kernel_fusion == KernelFusion::Eager {
            eager_saved_bytes_per_token(model, plan.tp, plan.sequence_parallel, share)
        } else {
            0.0
        };
        let expanded_kv = if training.sdpa_repeats_kv {
            expanded_kv_saved_bytes_per_token(model, plan.tp)
        } else {
            0.0
        };
        per_layer + f64::from(s) * f64::from(b) * (eager + expanded_kv)
    };
    let kept_per_layer = |recompute: Recompute| kept_per_layer_at(recompute, moe_share);
    let per_layer = kept_per_layer(plan.recompute);
    // Under full recompute, what a layer keeps without it: Megatron's block method leaves all but
    // N layers of each chunk alone, and the layer being recomputed holds that much meanwhile.
    let unrecomputed = (plan.recompute == Recompute::Full).then(|| kept_per_layer(Recompute::None));
    let share = plan.recompute_share();
    let per_layer = match unrecomputed {
        Some(kept) if share < 1.0 => share * per_layer + (1.0 - share) * kept,
        _ => per_layer,
    };
    // Micro-batches' worth the stage holds (rank 0 on the first and only stage).
    let held = in_flight(model, training, plan, rank);
    // Offloading to the CPU (pp 1, no recompute: `ParallelPlan::build`) of the first N of the
    // model's L decoder layers (MTP layers run outside the offload context, `nullcontext()` in
    // multi_token_prediction.py, and stay). Transformer Engine's default handler since 2.10,
    // `DefaultOffloadSynchronizer` (`transformer_engine/pytorch/cpu_offload.py`; NVIDIA's
    // Megatron-Bridge recipes run TE 2.18), frees offloaded layer i before layer L − N + i runs
    // and reloads it one layer ahead of its backward: "(num_layers - num_offloaded_layers) * T"
    // at the peak, its docstring says. The v1 handler (`AsyncDoubleBufferGroupOffloadHandler`,
    // TE before 2.10 or `NVTE_CPU_OFFLOAD_V1=1`) holds one layer more until the last layer's
    // forward ends (validation/FIT.md).
    let offloaded = training.offloaded_layers(model.layers.min(layers));
    // What the offloaded layers hold. A dense prefix (DeepSeek-V3's first three layers) or
    // interleaved MoE layers make the first N layers differ from the stage's average layer: each
    // is counted as what it is.
    let offloaded_bytes = if offloaded == 0 {
        0.0
    } else if model.moe.is_none() || model.every_layer_moe() {
        per_layer * f64::from(offloaded)
    } else {
        let moe_offloaded = model.moe_layers_between(0, offloaded);
        f64::from(offloaded - moe_offloaded) * kept_per_layer_at(plan.recompute, 0.0)
            + f64::from(moe_offloaded) * kept_per_layer_at(plan.recompute, 1.0)
    };
    let offloaded_layer_bytes = if offloaded > 0 {
        offloaded_bytes / f64::from(offloaded)
    } else {
        0.0
    };
    let mut activations = (per_layer * f64::from(layers) - offloaded_bytes)
        * held
        * in_flight_layer_weight(training, plan, rank);
    if let Some(kept) = unrecomputed.filter(|_| layers > 0) {
        // The layer being recomputed holds its full activations during its backward.
        activations += kept;
    }
    if matches!(stage, Stage::First | Stage::Only | Stage::Ends) {
        // Embedding dropout mask, sbh per micro-batch in flight (Korthikanti et al. 2022 §4.3).
        if model.dropout {
            activations += sbh / sp_split * held;
        }
    }
    if plan.pp > 1 && training.framework.keeps_pipeline_buffers_per_microbatch() {
        activations += pipeline_buffer_bytes(model, training, plan, held, stage);
    }
    // Two transient peaks that never coincide: the loss on the last stage, and one layer's
    // attention backward under PyTorch's context-parallel ring; the larger one counts.
    let loss_peak = if matches!(stage, Stage::Last | Stage::Only | Stage::Ends) {
        // Final norm and output-layer input 4sbh (Korthikanti et al. 2022 §4.3, whose 4sbh/t
        // assumes sequence parallelism: without it every TP rank holds the whole s·b·h), and the
        // logits the loss kernel holds at its peak (fp32 4sbV/t for Megatron's, §4.3;
        // `LossKernel::bytes_per_logit`); one micro-batch at a time on the last stage.
        // Each MTP depth computes its own logits and loss (`process_mtp_loss`) after the main one.
        let loss_parallel = plan.tp > 1 && training.framework.runs_loss_parallel();
        let logits = training.loss.bytes_per_logit(loss_parallel)
            * f64::from(s)
            * f64::from(b)
            * f64::from(model.vocab)
            * f64::from(1 + model.mtp_layers);
        // PyTorch's pipelining before `return_outputs=False` keeps the other micro-batches'
        // outputs, the model's 16-bit logits, until the step ends (`pipeline_keeps_outputs`).
        let kept_outputs = if training.pipeline_keeps_outputs && plan.pp > 1 {
            let vocab_split = if loss_parallel { t } else { 1.0 };
            f64::from(plan.microbatches_per_schedule().saturating_sub(1))
                * WEIGHT_BYTES
                * f64::from(s)
                * f64::from(b)
                * f64::from(model.vocab)
                / vocab_split
        } else {
            0.0
        };
        4.0 * sbh / sp_split + logits / t + kept_outputs
    } else {
        0.0
    };
    // What the context-parallel exchange holds while a layer's attention runs
    // (`context_parallel::working_bytes`: PyTorch's gathered ring, Transformer Engine's all-gather
    // and all-to-all; its point-to-point ring's two chunks are left out).
    let ring_peak = if layers > 0 {
        crate::cost::context_parallel::working_bytes(model, training, plan)
    } else {
        0.0
    };
    activations += loss_peak.max(ring_peak);

    let used = weights + gradients + optimizer + activations;
    let other = RESERVED_GIB * GIB + FRAGMENTATION_FRACTION * (activations + transient);
    let total = used + other;
    let capacity = cluster.gpu.memory_capacity();
    let host = offloaded_bytes * held;
    let host_capacity = cluster.gpu.host_memory_capacity().unwrap_or(Bytes(0.0));
    Memory {
        weights_bytes: Bytes(weights),
        gradients_bytes: Bytes(gradients),
        optimizer_bytes: Bytes(optimizer),
        activations_bytes: Bytes(activations),
        other_bytes: Bytes(other),
        total_bytes: Bytes(total),
        capacity_bytes: capacity,
        fits: total <= capacity.0,
        stage,
        middle_rank: (stage == Stage::Middle && model.is_hybrid()).then_some(middle_rank),
        params_per_gpu_before_zero: params,
        offloaded_layer_bytes: Bytes(offloaded_layer_bytes),
        host_bytes: Bytes(host),
        host_capacity_bytes: host_capacity,
        host_fits: host == 0.0 || host <= host_capacity.0,
    }
}
