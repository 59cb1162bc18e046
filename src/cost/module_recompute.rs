//! What Megatron-Core's selective recompute by module (`--recompute-modules`,
//! `training::RecomputeModules`) keeps and runs again, per layer, one micro-batch, one GPU.
//!
//! Megatron-Core megatron/core/transformer (transformer_layer.py, multi_latent_attention.py,
//! moe/experts.py, moe/moe_layer.py):
//! - `core_attn`: Transformer Engine checkpoints the fused attention, whose forward runs again
//!   before its backward; it keeps what no recompute keeps (`compute::layer_time_sharded`,
//!   `SelectiveRecompute::CheckpointedAttention`), so it is priced there, not here.
//! - `layernorm`: `CheckpointWithoutOutput` around each norm that is its own module and
//!   `discard_output_and_register_recompute` once the next module has used it: the norm's output
//!   (the next GEMM's saved input) is freed and the norm runs again in backward. Transformer
//!   Engine fuses the input norm into the QKV GEMM (`TELayerNormColumnParallelLinear`) and the
//!   dense MLP's norm into its first GEMM, so the norms that are modules are the input norm of
//!   multi-latent attention (its down projections are separate linears) and the pre-MLP norm of
//!   MoE layers (router, experts and shared experts all read it).
//! - `mla_up_proj`: the query and key-value up projections and the RoPE on their outputs, the
//!   same output-discarding checkpoint: Q, K and V, which the attention kernel keeps, are freed,
//!   and so are the normed latents the layer-norm-fused up projections would save (they run under
//!   the checkpoint without saving); the up projections run again before the attention backward.
//! - `moe_act`: the experts' activation, output-discarding: the second expert GEMM's input is
//!   freed, the activation runs again.
//! - `mlp`: the dense MLP (dense layers only; MoE layers have `moe`), normal checkpointing: only
//!   its input is kept, the MLP forward (and, with TP, its collectives) runs again.
//! - `moe`: the whole MoE layer, normal checkpointing: only its input is kept; router, dispatch
//!   and combine all-to-alls, experts and shared experts run again.
//! - `shared_experts`: the shared experts' MLP, normal checkpointing.
//!
//! In a hybrid Mamba-Transformer stack each layer is one block (`model::hybrid`): the attention
//! blocks are `TransformerLayer`s without an MLP (input norm fused into QKV), the MLP and MoE
//! blocks `TransformerLayer`s without attention (the MoE block's pre-MLP norm a `TENorm` module,
//! the MLP block's fused into its first GEMM), and the Mamba blocks `MambaLayer`s, which
//! recompute nothing (megatron/core/ssm/mamba_layer.py has no recompute; Megatron-Core
//! hybrid_layer_specs.py). So each module applies to its blocks' share of the stage's layers
//! (`cost::LayerMix`): `mlp` to the MLP blocks, `moe`, `moe_act`, `layernorm` and
//! `shared_experts` to the MoE blocks, `core_attn` to the attention blocks.
//!
//! A module that is freed keeps nothing it would have saved; what the output-discarding modules'
//! neighbours save (the raw latents before `mla_up_proj`, the expert up projection before
//! `moe_act`) stays. Element sizes follow `cost::memory`: a GEMM input is saved quantized (1 byte) under
//! low-precision training, an attention input in bf16.

use super::comm::ACTIVATION_BYTES;
use super::compute::{Gemm, linear_gemm_time};
use super::{LayerMix, moe};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision};
use crate::training::{RecomputeModule, RecomputeModules};

/// Bytes per element a GEMM's input is saved in for its backward (`cost::memory`: Transformer
/// Engine saves the quantized input under low precision).
fn saved_gemm_input_bytes(precision: Precision) -> f64 {
    match precision {
        Precision::Bf16 => ACTIVATION_BYTES,
        _ => 1.0,
    }
}

/// Tokens of one micro-batch on one TP×CP rank's full sequence shard (before the SP split).
fn rank_tokens(plan: &ParallelPlan, seq_len: u32) -> f64 {
    f64::from(plan.micro_batch) * f64::from(seq_len) / f64::from(plan.cp)
}

/// Norms that are modules of their own, per layer: the input norm of multi-latent attention and
/// the pre-MLP norm of the MoE layers (`moe_share` of the layers).
fn separate_norms(model: &Model, moe_share: f64) -> f64 {
    let input_norm = if model.mla.is_some() { 1.0 } else { 0.0 };
    input_norm + moe_share
}

/// The up projections `mla_up_proj` runs again, on one TP rank: the key-value's (to K without
/// RoPE and V) and, with a query LoRA rank, the query's, column-parallel. Their summed time.
fn mla_up_projection_s(model: &Model, cluster: &Cluster, plan: &ParallelPlan, seq_len: u32) -> f64 {
    let Some(mla) = model.mla else {
        return 0.0;
    };
    let tokens = rank_tokens(plan, seq_len);
    let t = f64::from(plan.tp);
    let heads = f64::from(model.heads);
    let kv = Gemm {
        m: tokens,
        k: f64::from(mla.kv_lora_rank),
        n: heads * f64::from(mla.qk_head_dim + mla.v_head_dim) / t,
        batch: 1.0,
    };
    let q = mla.q_lora_rank.map_or(0.0, |q_lora| {
        let gemm = Gemm {
            m: tokens,
            k: f64::from(q_lora),
            n: model.q_width() / t,
            batch: 1.0,
        };
        linear_gemm_time(&gemm, cluster, plan.precision, 1)
    });
    linear_gemm_time(&kv, cluster, plan.precision, 1) + q
}

/// Routed copies one GPU's experts process per micro-batch (as `moe.rs` counts them).
fn routed_copies(model: &Model, plan: &ParallelPlan, seq_len: u32, imbalance: f64) -> f64 {
    model.moe.map_or(0.0, |m| {
        moe::local_tokens(plan, seq_len)
            * f64::from(m.router_topk)
            * imbalance
            * f64::from(plan.etp)
    })
}

/// The MoE pieces a layer runs again under `modules`: the whole layer with `moe`, else the
/// shared experts and the activation as listed.
fn recomputes_moe(modules: RecomputeModules) -> bool {
    modules.contains(RecomputeModule::Moe)
}

/// Forward time the listed modules (all but `core_attn`) run again in one average layer of a
/// stage of `mix`, one micro-batch: `mix.moe_share` of its layers are MoE layers, whose MLP
/// forward takes `moe_mlp_forward_s`; `dense_mlp_forward_s` is a dense MLP's forward, which the
/// dense MLP blocks (`LayerMix::dense_mlp_share`) run. Element-wise
/// kernels at the achieved HBM bandwidth, GEMMs on the roofline, all over the framework
/// efficiency as every kernel of the layer.
#[allow(clippy::too_many_arguments)]
pub fn forward_s(
    model: &Model,
    cluster: &Cluster,
    plan: &ParallelPlan,
    seq_len: u32,
    modules: RecomputeModules,
    imbalance: f64,
    mix: LayerMix,
    dense_mlp_forward_s: f64,
    moe_mlp_forward_s: f64,
    rope_fusion: bool,
) -> f64 {
    let gpu = &cluster.gpu;
    let bandwidth = gpu.achieved_hbm_bandwidth().0;
    let tokens = rank_tokens(plan, seq_len);
    let sp_split = if plan.sequence_parallel {
        f64::from(plan.tp)
    } else {
        1.0
    };
    let h = f64::from(model.hidden);
    let moe_share = mix.moe_share;
    let mut seconds = 0.0;
    if modules.contains(RecomputeModule::Layernorm) {
        // Each norm reads its input and writes its output again.
        let bytes =
            separate_norms(model, moe_share) * 2.0 * ACTIVATION_BYTES * tokens * h / sp_split;
        seconds += bytes / bandwidth / gpu.framework_efficiency;
    }
    if modules.contains(RecomputeModule::MlaUpProj) {
        let gemms = mla_up_projection_s(model, cluster, plan, seq_len);
        // The RoPE kernels on the up projections' outputs run again (`rope_bytes_per_token`).
        let rope = model.mla.map_or(0.0, |_| {
            tokens * super::compute::rope_bytes_per_token(model, rope_fusion) / f64::from(plan.tp)
        });
        seconds += (gemms + rope / bandwidth) / gpu.framework_efficiency;
    }
    if modules.contains(RecomputeModule::Mlp) {
        seconds += mix.dense_mlp_share() * dense_mlp_forward_s;
    }
    if recomputes_moe(modules) {
        seconds += moe_share * moe_mlp_forward_s;
    } else {
        if modules.contains(RecomputeModule::SharedExperts)
            && let Some(gemms) = moe::shared_expert_gemms(model, plan, seq_len)
        {
            let time: f64 = gemms
                .iter()
                .map(|g| linear_gemm_time(g, cluster, plan.precision, 1))
                .sum();
            seconds += moe_share * time / gpu.framework_efficiency;
        }
        if modules.contains(RecomputeModule::MoeAct)
            && let Some(m) = model.moe
        {
            // The activation reads the expert up projection and writes the expert's inner width.
            let bytes = routed_copies(model, plan, seq_len, imbalance)
                * (model.expert_up_width() + f64::from(m.ffn_hidden))
                / f64::from(plan.etp)
                * ACTIVATION_BYTES;
            seconds += moe_share * bytes / bandwidth / gpu.framework_efficiency;
        }
    }
    seconds
}

/// Activation bytes the listed modules do not keep, per layer of `mix` (one stage's), one
/// micro-batch, one GPU — what `cost::memory` subtracts from no recompute's count (with `core_attn`
/// absent) or from Megatron-Core's selective count.
pub fn freed_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    modules: RecomputeModules,
    imbalance: f64,
    mix: LayerMix,
) -> f64 {
    let moe_share = mix.moe_share;
    let tokens = rank_tokens(plan, seq_len);
    let t = f64::from(plan.tp);
    let sp_split = if plan.sequence_parallel { t } else { 1.0 };
    let h = f64::from(model.hidden);
    let saved = saved_gemm_input_bytes(plan.precision);
    let mut bytes = 0.0;
    let norm_output = super::memory::norm_output_bytes(model, plan.precision);
    if modules.contains(RecomputeModule::Layernorm) {
        // What each norm that is a module keeps of its output (`memory::norm_output_bytes`):
        // MLA's input norm, and the MoE layers' pre-MLP norm.
        let input_norm = if model.mla.is_some() {
            norm_output.attention
        } else {
            0.0
        };
        bytes += (input_norm + moe_share * norm_output.moe_mlp) * tokens * h / sp_split;
    }
    if modules.contains(RecomputeModule::MlaUpProj) {
        bytes += ACTIVATION_BYTES * tokens * (model.q_width() + 2.0 * model.kv_width()) / t;
        // The up projections run inside the checkpoint without saving: their normed inputs
        // (`memory::layer_activation_bytes`' second copy of the latents) go too.
        if let Some(mla) = model.mla {
            bytes += ACTIVATION_BYTES
                * tokens
                * f64::from(mla.q_lora_rank.unwrap_or(0) + mla.kv_lora_rank)
                / sp_split;
        }
    }
    if modules.contains(RecomputeModule::Mlp) {
        // The dense MLP keeps its normed input, the up projection's output and the activation's.
        let ffn = f64::from(model.ffn_hidden);
        bytes += mix.dense_mlp_share()
            * tokens
            * (saved * h / sp_split + (ACTIVATION_BYTES * model.mlp_up_width() + saved * ffn) / t);
    }
    if recomputes_moe(modules) {
        let all = moe::moe_mlp_activation_bytes(model, plan, seq_len, imbalance);
        let quantized = if plan.precision == Precision::Bf16 {
            0.0
        } else {
            moe::expert_gemm_input_elements(model, plan, seq_len, imbalance)
        };
        bytes += moe_share * (all - quantized);
    } else {
        if modules.contains(RecomputeModule::SharedExperts) {
            bytes += moe_share * moe::shared_expert_activation_bytes(model, plan, seq_len);
        }
        if modules.contains(RecomputeModule::MoeAct)
            && let Some(m) = model.moe
        {
            bytes += moe_share
                * routed_copies(model, plan, seq_len, imbalance)
                * f64::from(m.ffn_hidden)
                / f64::from(plan.etp)
                * saved;
        }
    }
    // The shared experts' own copy of the pre-MLP norm output (what `memory::norm_output_bytes`
    // keeps beyond the router's bf16) goes with them when they are recomputed and the norm is not.
    let shared_recomputed =
        recomputes_moe(modules) || modules.contains(RecomputeModule::SharedExperts);
    if shared_recomputed && !modules.contains(RecomputeModule::Layernorm) {
        bytes += moe_share * (norm_output.moe_mlp - ACTIVATION_BYTES) * tokens * h / sp_split;
    }
    bytes
}

/// Forward FLOPs per token the listed modules (all but `core_attn`) run again, summed over the
/// model's layers and its MTP depths (each a transformer layer of the last layer's kind, built
/// with the same config, so its modules recompute too): the MLA up projections, the dense MLPs of
/// the dense layers, the MoE layers' active experts, router and shared experts (or the shared
/// experts alone).
pub fn forward_flops_per_token(model: &Model, modules: RecomputeModules) -> f64 {
    let depths = model.mtp_layers;
    let (dense_depths, moe_depths) = if model.mtp_layer_is_moe() {
        (0, depths)
    } else {
        (depths, 0)
    };
    let layers = f64::from(model.layers + depths);
    let mut flops = 0.0;
    if modules.contains(RecomputeModule::MlaUpProj)
        && let Some(mla) = model.mla
    {
        let kv = f64::from(mla.kv_lora_rank)
            * f64::from(model.heads)
            * f64::from(mla.qk_head_dim + mla.v_head_dim);
        let q = mla
            .q_lora_rank
            .map_or(0.0, |rank| f64::from(rank) * model.q_width());
        flops += 2.0 * (kv + q) * layers;
    }
    // The dense MLPs: every dense layer's in a transformer, the MLP blocks in a hybrid stack.
    if modules.contains(RecomputeModule::Mlp) {
        flops +=
            2.0 * model.dense_mlp_params() * f64::from(model.block_counts().mlp + dense_depths);
    }
    let moe_layers = f64::from(model.moe_layers() + moe_depths);
    if recomputes_moe(modules) {
        let topk = model.moe.map_or(0.0, |m| f64::from(m.router_topk));
        let active = model.router_params()
            + model.latent_projection_params()
            + topk * model.expert_params()
            + model.shared_expert_params();
        flops += 2.0 * active * moe_layers;
    } else if modules.contains(RecomputeModule::SharedExperts) {
        flops += 2.0 * model.shared_expert_params() * moe_layers;
    }
    flops
}

/// How many times over the MoE layers' forward all-to-alls run again: once under `moe`.
pub fn moe_alltoall_repeats(modules: Option<RecomputeModules>) -> f64 {
    match modules {
        Some(m) if recomputes_moe(m) => 1.0,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, Recompute};
    use crate::training::{AttentionKernel, Training, TrainingFramework};

    fn deepseek_plan() -> (Model, ParallelPlan) {
        let model = crate::specs::load_model("deepseek-v3").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("b200-sxm-180g").unwrap(),
            nodes: 32,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            2048,
            AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 1,
            pp: 16,
            dp: 16,
            ep: 8,
            micro_batch: 1,
            recompute: Recompute::Selective,
            allow_uneven_pp: true,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        (model, plan)
    }

    #[test]
    fn mla_up_proj_frees_q_k_and_v_and_reruns_the_up_projections() {
        let (model, plan) = deepseek_plan();
        let modules = RecomputeModules::of(&[RecomputeModule::MlaUpProj]);
        // DeepSeek-V3: Q 128 × 192, K 128 × 192, V 128 × 128 per token, 2 bytes, 4096 tokens.
        let freed = freed_bytes(
            &model,
            &plan,
            4096,
            modules,
            1.0,
            LayerMix::transformer(0.0),
        );
        // Q, K and V, and the normed latents (1536 + 512).
        assert_eq!(
            freed,
            2.0 * 4096.0 * (24576.0 + 24576.0 + 16384.0) + 2.0 * 4096.0 * (1536.0 + 512.0)
        );
        // 2 × (512 × 128 × 256 + 1536 × 24576) FLOPs per token per layer, 61 layers.
        let flops = forward_flops_per_token(&model, modules);
        assert_eq!(flops, 2.0 * (512.0 * 32768.0 + 1536.0 * 24576.0) * 61.0);
    }

    /// The MTP depths run their modules again too (the review of 2026-12-06, seventeenth
    /// session: the hardware FLOPs left them out while the step time counted them): one depth of
    /// DeepSeek-V3 (an MoE layer with MLA) adds one MoE layer's active parameters and one set of
    /// up projections.
    #[test]
    fn mtp_depths_recompute_their_modules() {
        let (mut model, _) = deepseek_plan();
        let modules = RecomputeModules::of(&[RecomputeModule::Moe, RecomputeModule::MlaUpProj]);
        model.mtp_layers = 0;
        let without = forward_flops_per_token(&model, modules);
        model.mtp_layers = 1;
        let with = forward_flops_per_token(&model, modules);
        let mla = model.mla.unwrap();
        let up = 2.0
            * (f64::from(mla.kv_lora_rank)
                * f64::from(model.heads)
                * f64::from(mla.qk_head_dim + mla.v_head_dim)
                + f64::from(mla.q_lora_rank.unwrap()) * model.q_width());
        let topk = f64::from(model.moe.unwrap().router_topk);
        let moe = 2.0
            * (model.router_params() + topk * model.expert_params() + model.shared_expert_params());
        assert!(
            ((with - without) / (up + moe) - 1.0).abs() < 1e-12,
            "{with} {without}"
        );
    }

    #[test]
    fn moe_covers_its_parts_once() {
        let (model, plan) = deepseek_plan();
        let whole = RecomputeModules::of(&[RecomputeModule::Moe]);
        let with_parts = RecomputeModules::of(&[
            RecomputeModule::Moe,
            RecomputeModule::MoeAct,
            RecomputeModule::SharedExperts,
        ]);
        let share = LayerMix::whole_model(&model);
        assert_eq!(
            freed_bytes(&model, &plan, 4096, whole, 1.0, share),
            freed_bytes(&model, &plan, 4096, with_parts, 1.0, share)
        );
        let act = RecomputeModules::of(&[RecomputeModule::MoeAct]);
        assert!(
            freed_bytes(&model, &plan, 4096, act, 1.0, share)
                < freed_bytes(&model, &plan, 4096, whole, 1.0, share)
        );
        assert_eq!(moe_alltoall_repeats(Some(whole)), 1.0);
        assert_eq!(moe_alltoall_repeats(Some(act)), 0.0);
    }
}
