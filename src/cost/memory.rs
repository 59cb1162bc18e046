//! Memory per GPU: model states (Rajbhandari et al. 2020) and activations (Korthikanti et al. 2022).

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::{BlockShares, HybridRun, Model};
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{AttentionKernel, KernelFusion, OptimizerStates, Training, WEIGHT_BYTES};
use crate::units::{Bytes, GIB};

use super::LayerMix;

/// CUDA context, cuBLAS/NCCL workspaces and communication buffers, per GPU. A documented constant:
/// PyTorch's CUDA context alone takes 0.5–1 GiB on Ampere/Hopper, NCCL reserves buffers per
/// communicator (NCCL_BUFFSIZE 4 MiB × channels × peers), Megatron's gradient buckets and the
/// cuBLAS workspace add more. 2 GiB is our assumption; `tpsim calibrate` can measure it.
pub const RESERVED_GIB: f64 = 2.0;
/// Caching-allocator fragmentation, as a fraction of the memory the model uses (assumption: PyTorch's
/// allocator typically reserves 5–10% more than it allocates in long LLM runs).
pub const FRAGMENTATION_FRACTION: f64 = 0.05;

/// Which stage a memory breakdown belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    First,
    Middle,
    Last,
    /// pp = 1: one stage holds everything.
    Only,
    /// The first GPU of a V-shaped schedule (`cost::v_schedule`): it runs the first model chunk
    /// and the last, so it holds the embedding, the output layer and the loss.
    Ends,
    /// The most loaded of the other GPUs of a V-shaped schedule: rank r of p runs model chunks r
    /// and 2p − 1 − r (`v_schedule::virtual_stage`), neither end of the model. With uneven chunks
    /// (the last one short, or the first lighter for the embedding) it holds more layers than the
    /// first GPU.
    VMiddle,
}

impl Stage {
    /// The stage in words, as the breakdowns print it: "first stage", "a middle stage", "last
    /// stage", "the only stage".
    pub fn words(self) -> &'static str {
        match self {
            Stage::First => "first stage",
            Stage::Middle => "a middle stage",
            Stage::Last => "last stage",
            Stage::Only => "the only stage",
            Stage::Ends => "first GPU, holding the first and last chunks of the V",
            Stage::VMiddle => "a GPU past the first, holding two middle chunks of the V",
        }
    }
}

/// Memory of the most loaded GPU, broken down.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Memory {
    pub weights_bytes: Bytes,
    pub gradients_bytes: Bytes,
    pub optimizer_bytes: Bytes,
    pub activations_bytes: Bytes,
    pub other_bytes: Bytes,
    pub total_bytes: Bytes,
    pub capacity_bytes: Bytes,
    pub fits: bool,
    /// The pipeline stage this breakdown is for (the one with the largest total).
    pub stage: Stage,
    /// Its pipeline rank where it is a middle stage of a hybrid stack, whose middle stages each
    /// hold their own slice of the pattern (`stage_ranks`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub middle_rank: Option<u32>,
    /// Parameters held by one GPU of that stage before ZeRO sharding.
    /// Parameters this GPU holds before ZeRO shards them (the name says so: ZeRO-3 stores fewer).
    pub params_per_gpu_before_zero: f64,
    /// Activations of one offloaded layer for one micro-batch (`Training::cpu_offload_layers`), on
    /// average over the offloaded layers (dense and MoE ones differ): what each offload copies to
    /// host memory and back, N of them the host's share; 0 without offloading.
    pub offloaded_layer_bytes: Bytes,
    /// Host memory the offloaded activations take per GPU: the offloaded layers of every
    /// micro-batch in flight (one at pp 1, the only layout offloading allows); 0 without
    /// offloading. Transformer Engine's default handler (`OffloadableLayerState` in
    /// `transformer_engine/pytorch/cpu_offload.py`) copies each offloaded layer into its own pinned
    /// buffers and frees them only after that layer's backward (`release_all_memory`), so all N
    /// are on the host from the end of the forward until the backward reaches layer N − 1; the v1
    /// handler drops each copy at its reload, the same N at the peak. Freed pinned memory stays in
    /// PyTorch's caching host allocator for the next micro-batch. That allocator rounds every
    /// block up to a power of two (`CachingHostAllocator.h`: `c10::llvm::PowerOf2Ceil(size)`),
    /// which is not counted: tensors of non-power-of-two sizes pin up to twice their bytes, so
    /// this is a lower bound, as `host_capacity_bytes` is an upper one.
    pub host_bytes: Bytes,
    /// The profile's host memory per GPU (`GpuProfile::host_memory_gib_per_gpu`); 0 where the
    /// profile gives none (offloading is then refused before any plan is costed).
    pub host_capacity_bytes: Bytes,
    /// Whether `host_bytes` fits `host_capacity_bytes` (true without offloading).
    pub host_fits: bool,
}

impl Memory {
    /// Whether the GPU holds the plan but the host memory its offloaded activations need does
    /// not: the one misfit `eval`, `plan`, `sweep`, `compare` and the report name as the host's.
    pub fn misses_only_host(&self) -> bool {
        self.fits && !self.host_fits
    }
}

/// Activation bytes of one transformer layer for one micro-batch, Korthikanti et al. 2022 §4
/// (Table 2), generalised to grouped-query attention, gated MLPs, models without dropout and
/// FlashAttention.
///
/// For a GPT layer without parallelism the paper's count is sbh(34 + 5as/h):
/// attention 11sbh + 5as²b, MLP 19sbh, two layernorms 4sbh. Our terms, per piece:
/// - attention: QKV input 2sbh, Q 2sbh, K and V 4sb·kv_width, softmax output 2as²b, its dropout mask
///   as²b and output 2as²b, projection input 2sbh, dropout mask sbh ⇒ 7sbh + 4sb·kv_width + 5as²b;
///   where the heads are not `hidden` wide (Qwen3, GPT-OSS, multi-head latent attention) Q is
///   2sb·q_width and the projection input 2sb·(heads × v head dim) instead of 2sbh each;
/// - multi-head latent attention also keeps its compressed query and key-value latents twice each,
///   as the input and the normed output of the layer-norm-fused up projections (Megatron-Core
///   `MLASelfAttention`: `linear_q_up_proj` / `linear_kv_up_proj` are `TELayerNormColumnParallelLinear`,
///   which saves both), 4sb·(q_lora_rank + kv_lora_rank): the down projections are replicated over
///   TP, so only sequence parallelism splits them (they run on the rank's sequence shard and the
///   up projections gather it again in backward; multi_latent_attention.py: "q_compressed:
///   [s / TP, b, q_lora_rank]");
/// - MLP: input 2sbh, up-projection output 2sb·up_width, activation output 2sb·ffn, dropout mask sbh
///   (GeLU with ffn = 4h: 19sbh; SwiGLU keeps gate, up and their product);
/// - layernorms: 4sbh.
///
/// Tensor parallelism divides everything inside the column/row-split region by t and leaves the
/// 10sbh outside it (layernorm inputs, the two block inputs and dropout masks) replicated (eq. 2);
/// sequence parallelism divides those too (eq. 4). Selective recompute drops the as²b terms (§5);
/// full recompute keeps only the 2sbh layer input (§4.1, eq. 5). Without dropout the masks (2sbh and
/// as²b) and the dropout output (2as²b) are not stored. FlashAttention never stores the scores; it
/// keeps one fp32 log-sum-exp per row per head (4·a·s·b bytes; Dao et al. 2022 Alg. 2).
pub fn layer_activation_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
    attention: AttentionKernel,
) -> f64 {
    let blocks = model.block_shares();
    layer_activation_bytes_of(
        model,
        micro_batch,
        seq_len,
        (tp, 1, sp),
        recompute,
        attention,
        blocks,
    )
}

/// [`layer_activation_bytes`] of a layer holding `shares` of each block (one pipeline stage's
/// average layer, `cost::LayerMix::blocks`), at TP degree, CP degree and sequence parallelism
/// `split` (`seq_len` is the CP rank's share; cp enters only through the Mamba mixers' group
/// copies, `hybrid::mamba_saved_bytes_per_token`).
pub fn layer_activation_bytes_of(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    split: (u32, u32, bool),
    recompute: Recompute,
    attention: AttentionKernel,
    shares: BlockShares,
) -> f64 {
    let (tp, cp, sp) = split;
    let (s, b, h) = (
        f64::from(seq_len),
        f64::from(micro_batch),
        f64::from(model.hidden),
    );
    let a = f64::from(model.heads);
    let t = f64::from(tp);
    let sbh = s * b * h;
    let replicated_split = if sp { t } else { 1.0 };
    if recompute == Recompute::Full {
        return 2.0 * sbh / replicated_split;
    }
    let masks = if model.dropout { 1.0 } else { 0.0 };
    let sb = s * b;
    let attention_split = 2.0 * sb * model.q_width()
        + 2.0 * sb * model.attention_out_width()
        + 4.0 * sb * model.kv_width();
    // QK-norm keeps its inputs, Q and K before the norm, for its backward (the normed copies are
    // what RoPE and the attention keep, counted above).
    let qk_norm_inputs = if model.qk_norm {
        2.0 * sb * (model.q_width() + model.kv_width())
    } else {
        0.0
    };
    let attention_split = attention_split + qk_norm_inputs;
    let latents = model.mla.map_or(0.0, |mla| {
        4.0 * sb * f64::from(mla.q_lora_rank.unwrap_or(0) + mla.kv_lora_rank)
    });
    let mlp_split = 2.0 * s * b * model.mlp_up_width() + 2.0 * s * b * f64::from(model.ffn_hidden);
    // A transformer layer's blocks: one attention and one MLP, two norms; a hybrid stack's layer
    // each block's share and one norm (`Model::block_shares_of`), plus its Mamba mixers' tensors.
    let mamba_split = shares.mamba * sb * super::hybrid::mamba_saved_bytes_per_token(model, tp, cp);
    // Per block: the norm's input and output and the residual's dropout mask.
    let outside_tp = shares.norms * (4.0 + masks) * sbh;
    let scores = match (attention, recompute) {
        (AttentionKernel::Flash, _) => 4.0 * a * s * b,
        (AttentionKernel::Unfused, Recompute::Selective) => 0.0,
        (AttentionKernel::Unfused, _) => (2.0 + 3.0 * masks) * a * s * s * b,
    };
    (outside_tp + shares.attention * latents) / replicated_split
        + (shares.attention * (attention_split + scores) + shares.mlp * mlp_split + mamba_split) / t
}

/// Bytes per element a layer keeps of each of its norm outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormOutputBytes {
    /// The attention side's (QKV input).
    pub attention: f64,
    /// A dense layer's MLP side.
    pub dense_mlp: f64,
    /// An MoE layer's MLP side (router, experts, shared experts).
    pub moe_mlp: f64,
}

/// What a layer keeps of its norm outputs under `precision`: bf16, two bytes each. Under low
/// precision one byte where the norm is fused into the GEMM that reads it (Transformer Engine's
/// `LayerNormLinear` / `LayerNormMLP` keep only the quantized `ln_out`); two for multi-latent
/// attention's input norm, whose output two separate down projections each quantize; for an MoE
/// layer's pre-MLP norm the router's bf16 two (`RouterGatingLinearFunction` saves `inp`,
/// Megatron-Core moe/moe_utils.py) and the shared experts' quantized copy beside them.
pub fn norm_output_bytes(model: &Model, precision: Precision) -> NormOutputBytes {
    const BF16: f64 = 2.0;
    if precision == Precision::Bf16 {
        return NormOutputBytes {
            attention: BF16,
            dense_mlp: BF16,
            moe_mlp: BF16,
        };
    }
    NormOutputBytes {
        attention: if model.mla.is_some() { 2.0 } else { 1.0 },
        dense_mlp: 1.0,
        moe_mlp: BF16 + if model.has_shared_experts() { 1.0 } else { 0.0 },
    }
}

/// Bytes per element of the two norm outputs (attention side, MLP side) low-precision training
/// saves over bf16's, per layer on average (`norm_output_bytes`; negative where it keeps more).
pub fn norm_output_fp8_saving(model: &Model) -> f64 {
    norm_output_fp8_saving_at(model, LayerMix::whole_model(model))
}

/// [`norm_output_fp8_saving`] for layers of `mix` (one stage's).
pub fn norm_output_fp8_saving_at(model: &Model, mix: LayerMix) -> f64 {
    let kept = norm_output_bytes(model, Precision::Fp8);
    let bf16 = 2.0;
    let moe_share = mix.moe_share;
    // A hybrid layer's blocks by share (`LayerMix::blocks`); a Mamba block's norm is fused into
    // `in_proj`, which keeps its quantized copy alone, as a dense MLP's.
    let shares = mix.blocks;
    shares.attention * (bf16 - kept.attention)
        + (shares.mlp - moe_share) * (bf16 - kept.dense_mlp)
        + moe_share * (bf16 - kept.moe_mlp)
        + shares.mamba * (bf16 - kept.dense_mlp)
}

/// Activation bytes per token one layer's autograd keeps under PyTorch eager beyond what
/// `layer_activation_bytes` counts for the fused kernels, per TP rank, when nothing is recomputed
/// (torchtitan's Llama without `torch.compile`, torchtitan/models/norms.py and models/llama/model.py
/// at its 2024-12 benchmark commit 9dec370):
/// - each `RMSNorm` keeps the fp32 upcast of its input (`pow` and the multiply save it) beside the
///   bf16 normalized output the weight multiply saves, where a fused norm keeps its bf16 input:
///   4 bytes per element more, for both norms (outside the TP region, split by SP);
/// - SwiGLU's product saves silu's output beside w1's and w3's outputs: 2 bytes per ffn element more
///   in dense layers (the experts of MoE layers are counted as Megatron's);
/// - with QK-norm, its two RMSNorms keep the fp32 upcasts of Q and K, 4 bytes per element.
pub fn eager_saved_bytes_per_token(model: &Model, tp: u32, sp: bool, moe_share: f64) -> f64 {
    let t = f64::from(tp);
    let sp_split = if sp { t } else { 1.0 };
    let norms = 2.0 * 4.0 * f64::from(model.hidden) / sp_split;
    let silu_output = if model.gated_mlp {
        (1.0 - moe_share) * 2.0 * f64::from(model.ffn_hidden) / t
    } else {
        0.0
    };
    // QK-norm's eager RMSNorms keep the fp32 upcast of Q and K as the block norms keep theirs.
    let qk_norms = if model.qk_norm {
        4.0 * (model.q_width() + model.kv_width()) / t
    } else {
        0.0
    };
    norms + silu_output + qk_norms
}

/// Activation bytes per token one layer keeps, per TP rank, when K and V are expanded to every
/// query head before attention (`Training::sdpa_repeats_kv`) and nothing is recomputed: SDPA
/// saves K and V as `repeat_kv` expanded them, 2 bytes × 2 × (q − kv width) more under
/// grouped-query attention, eager or compiled (the expanded tensors are SDPA's inputs).
pub fn expanded_kv_saved_bytes_per_token(model: &Model, tp: u32) -> f64 {
    if model.kv_heads < model.heads {
        2.0 * 2.0 * (model.q_width() - model.kv_width()) / f64::from(tp)
    } else {
        0.0
    }
}

/// Activation bytes one layer keeps under torchtitan's per-op selective AC
/// (`SelectiveRecompute::AlternateMatmuls`), per TP rank: the block input (the checkpoint's
/// input, 2sbh, split by sequence parallelism), the saved matmul outputs — Q (wq), V (wv) and the
/// first MLP matmul w1 (2sb × width / t each), and, with a gate, the down projection w2's local
/// output (2sbh: a row-parallel matmul's full-size partial sum) — SDPA's output and fp32
/// log-sum-exp, and under TP with sequence parallelism the two reduce-scatter outputs (2sbh/t
/// each). Everything else (norms, RoPE, the activation, wk, wo, w3) is recomputed.
pub fn alternate_matmul_activation_bytes(
    model: &Model,
    micro_batch: u32,
    seq_len: u32,
    tp: u32,
    sp: bool,
) -> f64 {
    let (sb, h, t) = (
        f64::from(seq_len) * f64::from(micro_batch),
        f64::from(model.hidden),
        f64::from(tp),
    );
    let sp_split = if sp { t } else { 1.0 };
    let block_input = 2.0 * sb * h / sp_split;
    let sharded =
        2.0 * sb * (model.q_width() + model.attention_out_width() + f64::from(model.ffn_hidden))
            / t
            + 2.0 * sb * super::compute::kv_width_per_rank(model, tp)
            + 4.0 * f64::from(model.heads) * sb / t;
    let down_output = if model.gated_mlp { 2.0 * sb * h } else { 0.0 };
    let reduce_scatter_outputs = if tp > 1 && sp {
        2.0 * 2.0 * sb * h / t
    } else {
        0.0
    };
    block_input + sharded + down_output + reduce_scatter_outputs
}

/// Parameters one GPU holds on each kind of stage (before ZeRO), Megatron-LM's placement: word
/// embedding on the first stage, output layer on the last; with tied embeddings and pp > 1 the last
/// stage keeps its own copy of the embedding matrix (Megatron `shared_embedding`).
/// `middle_rank` picks a hybrid stack's middle stage (`stage_ranks`).
fn stage_params(model: &Model, plan: &ParallelPlan, stage: Stage, middle_rank: u32) -> f64 {
    stage_params_at(
        model,
        plan,
        stage,
        stage_mix(model, plan, stage, middle_rank),
    )
}

/// [`stage_params`] with the stage's layer mix already known (`stage_mix`).
fn stage_params_at(model: &Model, plan: &ParallelPlan, stage: Stage, mix: LayerMix) -> f64 {
    let t = f64::from(plan.tp);
    let (dense, expert) = layer_params_per_gpu_at(model, plan, mix);
    let layer = dense + expert;
    let word_embedding = model.word_embedding_params() / t;
    let output = if model.tied_embeddings {
        word_embedding
    } else {
        model.output_params() / t
    };
    let layers = |n: u32| f64::from(n) * layer;
    // MTP depths (on the last stage): their layers count with the stage's layers below; their
    // projection and norms split over TP. They read the next token's embedding, so with pp > 1 the
    // last stage keeps its own copy of the word embedding (Megatron-Core `GPTModel` builds
    // `embedding` when `pre_process or mtp_process`), which tied embeddings already hold.
    let mtp = f64::from(model.mtp_weight_copies()) * model.mtp_extra_params() / t;
    let mtp_embedding = if keeps_mtp_embedding_copy(model) {
        word_embedding
    } else {
        0.0
    };
    let last_layers = super::pipeline::last_stage_layers(model, plan);
    match stage {
        // The first GPU of a V holds chunk 0 and the last chunk, not the last stage's layers.
        Stage::Ends => {
            layers(v_ends_mix(model, plan).0)
                + mtp
                + model.word_embedding_params() / t
                + model.position_embedding_params()
                + model.output_params() / t
        }
        Stage::VMiddle => layers(v_middle_mix(model, plan).0),
        Stage::Only => {
            layers(last_layers)
                + mtp
                + model.word_embedding_params() / t
                + model.position_embedding_params()
                + model.output_params() / t
        }
        Stage::First => {
            layers(plan.stages.first)
                + model.word_embedding_params() / t
                + model.position_embedding_params()
        }
        Stage::Middle => layers(plan.stages.middle_max),
        Stage::Last => layers(last_layers) + mtp + output + mtp_embedding,
    }
}

/// Whether the last stage holds a word-embedding copy of its own for the MTP layers (untied
/// embeddings; tied ones are already there as the output layer).
fn keeps_mtp_embedding_copy(model: &Model) -> bool {
    model.mtp_layers > 0 && !model.tied_embeddings
}

/// Parameters of the average transformer layer one GPU holds: the part split over TP (attention,
/// dense MLPs, router, shared experts, norms) and the routed experts' part (experts/ep experts,
/// each over etp; `moe.rs`), which ZeRO shards over expert-DP instead of DP.
pub fn layer_params_per_gpu(model: &Model, plan: &ParallelPlan) -> (f64, f64) {
    layer_params_per_gpu_at(model, plan, LayerMix::whole_model(model))
}

/// [`layer_params_per_gpu`] over layers of `mix` (one stage's: the dense prefix of DeepSeek-V3
/// sits on the first stage; a hybrid stack's stage holds its slice of the pattern): dense layers
/// hold their dense MLP, MoE layers their router, shared experts and this GPU's routed experts.
pub fn layer_params_per_gpu_at(model: &Model, plan: &ParallelPlan, mix: LayerMix) -> (f64, f64) {
    let t = f64::from(plan.tp);
    if let Some(run) = mix.run.or_else(|| model.whole_hybrid_run()) {
        return hybrid_layer_params_per_gpu(model, plan, run);
    }
    if model.moe.is_none() {
        return (model.layer_params() / t, 0.0);
    }
    let moe_share = mix.moe_share;
    let rest = (1.0 - moe_share) * model.dense_layer_params() / t
        + moe_share * moe_layer_rest_per_gpu(model, t);
    let expert = moe_share * super::moe::expert_params_per_gpu(model, plan);
    (rest, expert)
}

/// What one GPU holds of an MoE layer beside its routed experts: attention, router, shared experts
/// and norms split over the `t` TP ranks, LatentMoE's projections whole on each
/// (`Model::latent_projection_params`).
fn moe_layer_rest_per_gpu(model: &Model, t: f64) -> f64 {
    let experts = model.moe.map_or(0.0, |moe| f64::from(moe.experts));
    (model.moe_layer_params() - experts * model.expert_params()) / t
        + model.latent_projection_params() * (1.0 - 1.0 / t)
}

/// [`layer_params_per_gpu_at`] of a hybrid stack's `run` of layers (one stage's): the average over
/// the layers that stage runs — its slice of the pattern (`Model::hybrid_blocks_params_of`) and
/// the d MTP depths the last stage runs (each a transformer layer of the last layer's kind,
/// `Model::block_shares`), whose weights the depths hold once or once each
/// (`Model::mtp_weight_copies`).
fn hybrid_layer_params_per_gpu(model: &Model, plan: &ParallelPlan, run: HybridRun) -> (f64, f64) {
    let t = f64::from(plan.tp);
    let (experts, expert_params) = model.moe.map_or((0.0, 0.0), |moe| {
        (f64::from(moe.experts), model.expert_params())
    });
    let expert_per_gpu = super::moe::expert_params_per_gpu(model, plan);
    // LatentMoE's projections are whole on every TP rank (`Model::latent_projection_params`).
    let duplicated = model.latent_projection_params() * (1.0 - 1.0 / t);
    let moe_layers = f64::from(run.counts.moe);
    let main_rest =
        (model.hybrid_blocks_params_of(run.counts) - moe_layers * experts * expert_params) / t
            + moe_layers * duplicated;
    let main_expert = moe_layers * expert_per_gpu;
    let (mtp_rest, mtp_expert) = if model.mtp_layer_is_moe() {
        (moe_layer_rest_per_gpu(model, t), expert_per_gpu)
    } else {
        (model.dense_layer_params() / t, 0.0)
    };
    let copies = if run.mtp_depths > 0 {
        f64::from(model.mtp_weight_copies())
    } else {
        0.0
    };
    let stage_layers = f64::from(run.layers().max(1));
    (
        (main_rest + copies * mtp_rest) / stage_layers,
        (main_expert + copies * mtp_expert) / stage_layers,
    )
}

/// The pipeline ranks `stage` stands for, as `stage_memory`'s `middle_rank`: for a
/// [`Stage::Middle`] every middle stage of a hybrid stack, whose stages each hold their own slice
/// of the pattern (each is priced); for a transformer's one, the middle stage `stage_layer_mix`
/// makes of the most layers and MoE layers; one for any other stage.
fn stage_ranks(model: &Model, plan: &ParallelPlan, stage: Stage) -> std::ops::Range<u32> {
    if stage == Stage::Middle && model.is_hybrid() && plan.pp > 2 {
        1..plan.pp - 1
    } else {
        1..2
    }
}

/// [`stage_ranks`] for memory: every middle stage as well where layers kept in bf16 reach one
/// (`stage_bf16`; an interleaved plan's bf16 count past the last chunk), each its own.
fn memory_stage_ranks(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
) -> std::ops::Range<u32> {
    let middles = 1..plan.pp.saturating_sub(1).max(1);
    if stage == Stage::Middle
        && plan.pp > 2
        && middles
            .clone()
            .any(|rank| stage_bf16(model, training, plan, Stage::Middle, rank).is_some())
    {
        middles
    } else {
        stage_ranks(model, plan, stage)
    }
}

/// The layer mix of `stage` (`stage_layer_mix`), a hybrid stack's middle stage at pipeline rank
/// `middle_rank` (`stage_ranks`).
fn stage_mix(model: &Model, plan: &ParallelPlan, stage: Stage, middle_rank: u32) -> LayerMix {
    let (layers, moe_layers) = stage_layer_mix(model, plan, stage, middle_rank);
    let run = model.is_hybrid().then(|| {
        let rank = pipeline_rank(plan, stage, middle_rank);
        super::pipeline::ChunkLayout::of(model, plan).stage_run(model, plan.pp.max(1), rank)
    });
    LayerMix::of(model, layers, moe_layers, run.flatten())
}

/// The pipeline rank `stage` is (a middle one at `middle_rank`; a V's middle rank `middle_rank`).
fn pipeline_rank(plan: &ParallelPlan, stage: Stage, middle_rank: u32) -> u32 {
    match stage {
        Stage::First | Stage::Only | Stage::Ends => 0,
        Stage::Middle | Stage::VMiddle => middle_rank,
        Stage::Last => plan.pp.max(1) - 1,
    }
}

/// Transformer layers (MTP layers included) on `stage` and how many of them are MoE layers
/// (`pipeline::stage_moe_layers`); for the middle stages, the one with the most MoE layers (its
/// experts and routed tokens weigh most), or a hybrid stack's at `middle_rank`.
fn stage_layer_mix(
    model: &Model,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> (u32, u32) {
    let layers = stage_layers(plan, model, stage);
    if model.moe.is_none() {
        return (layers, 0);
    }
    // Every layer an MoE layer: no need to place them.
    if model.every_layer_moe() {
        return (layers, layers);
    }
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let on = |s: u32| layout.stage_mix_with_mtp(model, plan.pp, s).1;
    let moe_layers = match stage {
        Stage::First | Stage::Only => on(0),
        Stage::Ends => v_ends_mix(model, plan).1,
        Stage::VMiddle => v_middle_mix(model, plan).1,
        Stage::Last => on(plan.pp - 1),
        Stage::Middle if model.is_hybrid() => on(middle_rank),
        Stage::Middle => {
            // Most middle stages past a dense prefix are all MoE: stop at the first that is.
            let mut most = 0;
            for s in 1..plan.pp.saturating_sub(1) {
                most = most.max(on(s));
                if most >= layers {
                    break;
                }
            }
            most
        }
    };
    (layers, moe_layers.min(layers))
}

/// Share of `stage`'s transformer layers with an MoE MLP (0 for a dense model).
pub fn stage_moe_share(model: &Model, plan: &ParallelPlan, stage: Stage) -> f64 {
    match stage_layer_mix(model, plan, stage, 1) {
        (0, _) => 0.0,
        (layers, moe) => f64::from(moe) / f64::from(layers),
    }
}

/// The stage whose GPUs hold the most parameters (before ZeRO sharding), and those parameters;
/// under a V schedule (`v_shaped`) the GPUs as the V places the chunks.
/// With it, the middle rank it is (`stage_ranks`).
fn heaviest_stage(model: &Model, plan: &ParallelPlan, v_shaped: bool) -> (Stage, u32, f64) {
    if plan.pp == 1 {
        return (Stage::Only, 1, stage_params(model, plan, Stage::Only, 1));
    }
    let candidates: &[Stage] = match (v_shaped, plan.pp > 2) {
        (true, _) => &[Stage::Ends, Stage::VMiddle],
        (false, true) => &[Stage::First, Stage::Last, Stage::Middle],
        (false, false) => &[Stage::First, Stage::Last],
    };
    let mut best = (
        candidates[0],
        1,
        stage_params(model, plan, candidates[0], 1),
    );
    for &stage in &candidates[1..] {
        for rank in stage_ranks(model, plan, stage) {
            let params = stage_params(model, plan, stage, rank);
            if params > best.2 {
                best = (stage, rank, params);
            }
        }
    }
    best
}

/// The most parameters any GPU of the plan holds (before ZeRO sharding), and the routed-expert
/// parameters among them: those DP and expert-DP reduce and shard. Under a V schedule the first
/// GPU holds both the embedding and the output layer (`Stage::Ends`).
pub fn max_stage_params(model: &Model, training: &Training, plan: &ParallelPlan) -> StageParams {
    let v_shaped = training.pp_schedule.v_kind().is_some();
    let (stage, rank, total) = heaviest_stage(model, plan, v_shaped);
    if model.moe.is_none() {
        return StageParams { total, expert: 0.0 };
    }
    let layers = f64::from(stage_layers(plan, model, stage));
    let mix = stage_mix(model, plan, stage, rank);
    StageParams {
        total,
        expert: layers * layer_params_per_gpu_at(model, plan, mix).1,
    }
}

/// Parameters of one GPU of a stage (before ZeRO sharding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageParams {
    pub total: f64,
    /// The routed experts' part of `total`.
    pub expert: f64,
}

/// Transformer layers on `stage`.
fn stage_layers(plan: &ParallelPlan, model: &Model, stage: Stage) -> u32 {
    match stage {
        Stage::Only | Stage::Last => super::pipeline::last_stage_layers(model, plan),
        Stage::Ends => v_ends_mix(model, plan).0,
        Stage::VMiddle => v_middle_mix(model, plan).0,
        Stage::First => plan.stages.first,
        Stage::Middle => plan.stages.middle_max,
    }
}

/// Transformer layers, and MoE layers among them, of rank `rank` of a V: its model chunks
/// `rank` and 2p − 1 − rank (`v_schedule::virtual_stage`; torchtitan
/// `_get_pp_rank_to_stage_indices_mapping`, style "v"), as `layout` splits the layers.
fn v_rank_mix(
    model: &Model,
    layout: &super::pipeline::ChunkLayout,
    p: u32,
    rank: u32,
) -> (u32, u32) {
    [0, 1]
        .map(|chunk| layout.range(super::v_schedule::virtual_stage(rank, chunk, p)))
        .iter()
        .fold((0, 0), |(layers, moe), &(start, end)| {
            (
                layers + end - start,
                moe + model.moe_layers_between(start, end),
            )
        })
}

/// [`v_rank_mix`] of the first GPU, with the MTP layers the last chunk runs.
fn v_ends_mix(model: &Model, plan: &ParallelPlan) -> (u32, u32) {
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let (layers, moe) = v_rank_mix(model, &layout, plan.pp.max(1), 0);
    let mtp_moe = if model.mtp_layer_is_moe() {
        model.mtp_layers
    } else {
        0
    };
    (layers + model.mtp_layers, moe + mtp_moe)
}

/// [`v_rank_mix`] of the most loaded other GPU of a V: the most layers, then the most MoE layers.
/// (0, 0) without a pipeline.
fn v_middle_mix(model: &Model, plan: &ParallelPlan) -> (u32, u32) {
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let p = plan.pp.max(1);
    (1..p)
        .map(|rank| v_rank_mix(model, &layout, p, rank))
        .max()
        .unwrap_or((0, 0))
}

/// Micro-batches' worth of activations a stage holds at the peak of its schedule: the warm-up
/// forwards plus the first steady-state one, each a model chunk of 1/v of the stage's layers.
/// Megatron-Core's `get_pp_rank_microbatches` (schedules.py) warms up 2·(p − rank − 1) +
/// (v − 1)·p chunks when interleaved (`microbatch_group_size_per_vp_stage` defaults to p; PyTorch's
/// `ScheduleInterleaved1F1B._get_warmup_ops` counts the same with m a multiple of p) and p − rank − 1
/// micro-batches otherwise, both at most every chunk of the m micro-batches: min(m, p − rank) for
/// 1F1B (Narayanan et al. 2021 §2.2.1) and, on the first stage, p + (p − 1)/v when interleaved
/// (Korthikanti et al. 2022 §4.2.3's factor 1 + (p − 1)/(p·v) times p), never more than m. m is
/// one pipeline schedule's where the step runs several (`ParallelPlan::schedule_runs`).
fn in_flight(model: &Model, training: &Training, plan: &ParallelPlan, rank: u32) -> f64 {
    // The V schedules hold the same on every rank (`v_schedule::peak_chunks_in_flight`: 2p chunks
    // for ZB-V, 2p + 1 for DualPipeV, fewer with fewer micro-batches), each chunk half a stage.
    if let (Some(kind), true) = (training.pp_schedule.v_kind(), plan.pp > 1) {
        let chunks = match kind {
            super::v_schedule::VKind::ZeroBubbleV => 2 * plan.pp,
            super::v_schedule::VKind::DualPipeV => 2 * plan.pp + 1,
        };
        let m = plan.microbatches_per_schedule();
        return f64::from(chunks.min(2 * m)) / 2.0;
    }
    let (v, m) = (
        f64::from(plan.vpp),
        f64::from(plan.microbatches_per_schedule()),
    );
    let scheduled = f64::from(looped_chunks_in_flight(plan, rank)) / v;
    // The MoE all-to-all overlap schedules one extra model chunk's forward before the 1F1B
    // stages (Megatron-Core `schedules.py`), and without a pipeline runs the next micro-batch's
    // forward while the current one's activations wait for their backward.
    let overlap_extra = if training.overlap.moe_a2a
        && super::moe::alltoall_overlap_applies(model, training, plan)
    {
        1.0 / v
    } else {
        0.0
    };
    scheduled + overlap_extra.min((m - scheduled).max(0.0))
}

/// Model chunks rank `rank` of the looped (1F1B, interleaved) schedule holds at its peak: the
/// warm-up forwards, 2·(p − rank − 1) + (v − 1)·p interleaved and p − rank − 1 otherwise, plus the
/// first steady-state one, at most every chunk of the m micro-batches ([`in_flight`]).
fn looped_chunks_in_flight(plan: &ParallelPlan, rank: u32) -> u32 {
    let (p, v) = (plan.pp.max(1), plan.vpp.max(1));
    let behind = p.saturating_sub(rank + 1);
    let warmup = if v > 1 {
        2 * behind + (v - 1) * p
    } else {
        behind
    };
    (warmup + 1).min(plan.microbatches_per_schedule().saturating_mul(v))
}

/// The layers of the chunks a stage holds in flight over as many chunks of its mean size: 1 with
/// equal chunks. With unequal ones (`ParallelPlan::balanced_chunk_layers`) forward k of a rank runs
/// virtual stage (k / p) mod v (Megatron-Core's `get_model_chunk_id` over micro-batch groups of p,
/// schedules.py; PyTorch's `ScheduleInterleaved1F1B` alike), so the heavier chunks, the earliest
/// virtual stages, are the first in flight and the ones past a whole round: 80 layers on pp 4 x
/// vpp 3 hold 4 x 20 + 3 x 7 = 101 layers on the first stage, not 15/3 x 20 = 100.
fn in_flight_layer_weight(training: &Training, plan: &ParallelPlan, rank: u32) -> f64 {
    let Some((light, heavier)) = plan
        .balanced_chunk_layers()
        .filter(|_| training.pp_schedule.v_kind().is_none())
    else {
        return 1.0;
    };
    let chunks = looped_chunks_in_flight(plan, rank);
    let layers: u32 = (0..chunks)
        .map(|k| light + u32::from((k / plan.pp) % plan.vpp < heavier))
        .sum();
    let stage = light * plan.vpp + heavier;
    f64::from(layers) * f64::from(plan.vpp) / (f64::from(chunks) * f64::from(stage))
}

/// Boundary tensors PyTorch's pipelining keeps on one stage beyond its layers' activations
/// (`TrainingFramework::keeps_pipeline_buffers_per_microbatch`): the output of every in-flight
/// model chunk that sends one (all but the model's last chunk), a receive buffer per micro-batch
/// for each chunk that receives activations (all but the model's first; an in-flight chunk's is
/// its first layer's saved input, already counted) and one per micro-batch for each chunk that
/// receives gradients (the chunks that send). `in_flight` is the stage's [`in_flight`].
fn pipeline_buffer_bytes(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    in_flight: f64,
    stage: Stage,
) -> f64 {
    let v = f64::from(plan.vpp);
    let m = f64::from(plan.microbatches_per_schedule());
    let sending_chunks = v - if matches!(stage, Stage::Last | Stage::Ends) {
        1.0
    } else {
        0.0
    };
    let receiving_chunks = v - if matches!(stage, Stage::First | Stage::Ends) {
        1.0
    } else {
        0.0
    };
    let held_outputs = in_flight * sending_chunks;
    let idle_activation_buffers = (m - in_flight).max(0.0) * receiving_chunks;
    let gradient_buffers = m * sending_chunks;
    super::comm::pp_message_bytes(model, training, plan)
        * (held_outputs + idle_activation_buffers + gradient_buffers)
}

/// The layers of `stage` (a middle one at `middle_rank`) kept in bf16 (`pipeline::Bf16Keep`).
fn stage_bf16(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    stage: Stage,
    middle_rank: u32,
) -> Option<super::pipeline::Bf16Run> {
    let keep = super::pipeline::Bf16Keep::of(model, training, plan);
    if keep.is_none() {
        return None;
    }
    let p = plan.pp.max(1);
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let rank = pipeline_rank(plan, stage, middle_rank);
    if matches!(stage, Stage::Ends | Stage::VMiddle) {
        // A V's rank holds chunks r and 2p − 1 − r (`v_rank_mix`); the last runs the MTP layers.
        let last = 2 * p - 1;
        let [first, second] = [rank, last - rank].map(|chunk| {
            let (start, end) = layout.range(chunk);
            let depths = if chunk == last { model.mtp_layers } else { 0 };
            super::pipeline::Bf16Run::of_range(model, keep, start, end, depths)
        });
        return first.plus(second).nonempty();
    }
    layout.stage_bf16(model, keep, p, rank)
}

/// [`stage_memory_at_precision`] with the stage's layers kept in bf16 (`pipeline::Bf16Keep`): what
/// differs with the precision — the quantized weight copies and low-precision parameters, the
/// quantized saved inputs, and the fragmentation over them — is per layer, so the bf16 layers' share
/// of the stage's layers moves it that share of the way to the same stage at bf16 (the composition
/// of the bf16 layers taken as the stage's average).
fn stage_memory(
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
    let routed_load = super::moe::routed_load(model, training, plan);
    let params = stage_params_at(model, plan, stage, mix);
    // Gradients are reduced and ZeRO shards over the DP and CP ranks together (Megatron's
    // distributed optimizer uses the data-parallel group with context parallelism); routed experts
    // over expert-DP.
    let shard_ranks = plan.zero_shard_ranks();
    let dp = f64::from(shard_ranks);
    let (dense_layer, expert_layer) = layer_params_per_gpu_at(model, plan, mix);
    let layers = f64::from(stage_layers(plan, model, stage));
    let expert_params = layers * expert_layer;
    let after_schedule = super::comm::reduces_after_pipeline_schedule(training, plan);
    let dense_params = params - expert_params;
    let expert_dp = f64::from(super::moe::expert_shard_ranks(plan));
    // ZeRO §5.1: stage 1 shards optimizer states, 2 also gradients, 3 also parameters, over dp.
    let shard = |from_stage: u8| if plan.zero >= from_stage { dp } else { 1.0 };
    let expert_shard = |from_stage: u8| {
        if plan.zero >= from_stage {
            expert_dp
        } else {
            1.0
        }
    };
    let sharded = |bytes: f64, from_stage: u8| {
        dense_params * bytes / shard(from_stage) + expert_params * bytes / expert_shard(from_stage)
    };
    // The parameters at rest in their stored format (fp32 under FSDP2 with fp32 parameters); what
    // the layers compute with is the 16-bit copy ZeRO-3 gathers, counted below.
    let states = training.optimizer_states;
    let mut weights = sharded(states.param_bytes(), 3);
    let mut gradients = sharded(training.grad_dtype.bytes(), 2);
    let low_precision_params = super::comm::fp8_parameter_gather(training, plan);
    let optimizer = sharded(
        states.optimizer_bytes_with_low_precision_params(low_precision_params),
        1,
    );
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
        // what is sharded (the sharded gradients they become are counted too, a 1/dp
        // overestimate). Each model chunk reduce-scatters and frees its own after its last
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
            super::recomputed_modules(training, plan).filter(|_| recompute == plan.recompute);
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
        let replication = super::context_parallel::kv_head_replication(model, training, plan);
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
            let moe_mlp =
                super::moe::moe_mlp_activation_bytes(model, plan, training.seq_len, routed_load);
            // Low-precision expert GEMMs save their inputs quantized too (one byte instead of two).
            let moe_mlp = if plan.precision != Precision::Bf16 && !per_op_sac {
                moe_mlp
                    - super::moe::expert_gemm_input_elements(
                        model,
                        plan,
                        training.seq_len,
                        routed_load,
                    )
            } else {
                moe_mlp
            };
            per_layer + share * (moe_mlp - dense_mlp)
        } else {
            per_layer
        };
        // Megatron-Core's listed modules free what they recompute (`module_recompute`).
        let per_layer = match modules {
            Some(m) => {
                per_layer
                    - super::module_recompute::freed_bytes(
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
        super::context_parallel::working_bytes(model, training, plan)
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

/// Memory of the most loaded GPU of the plan.
pub fn memory(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Memory {
    if plan.pp == 1 {
        return stage_memory(model, cluster, training, plan, Stage::Only, 1);
    }
    // Under a V schedule every rank holds as many chunks in flight; the first also holds both
    // ends of the model, the others may hold more layers (uneven chunks).
    if training.pp_schedule.v_kind().is_some() {
        let ends = stage_memory(model, cluster, training, plan, Stage::Ends, 1);
        let rest = stage_memory(model, cluster, training, plan, Stage::VMiddle, 1);
        return if rest.total_bytes.0 > ends.total_bytes.0 {
            rest
        } else {
            ends
        };
    }
    let mut worst = stage_memory(model, cluster, training, plan, Stage::First, 1);
    let stages: &[Stage] = if plan.pp > 2 {
        &[Stage::Middle, Stage::Last]
    } else {
        &[Stage::Last]
    };
    for &stage in stages {
        for rank in memory_stage_ranks(model, training, plan, stage) {
            let candidate = stage_memory(model, cluster, training, plan, stage, rank);
            if candidate.total_bytes.0 > worst.total_bytes.0 {
                worst = candidate;
            }
        }
    }
    worst
}

/// ZeRO §5.1's model-state bytes per GPU for Ψ parameters on N_d replicas with K = 12
/// (used by the paper's 7.5B example and our tests).
pub fn zero_model_state_bytes(params: f64, dp: u32, zero: u8, grad_bytes: f64) -> f64 {
    let dp = f64::from(dp);
    let shard = |from_stage: u8| if zero >= from_stage { dp } else { 1.0 };
    let k = OptimizerStates::Fp32.optimizer_bytes();
    params * (WEIGHT_BYTES / shard(3) + grad_bytes / shard(2) + k / shard(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::gpt3_175b;
    use crate::training::CpExchange;

    /// A hybrid stack's stages each hold their own slice of the pattern: over the stages of a
    /// pipeline (tp 1, ep 1, so each GPU holds its stage whole) the parameters add up to the
    /// model's, for a dense hybrid (Nemotron-H 56B, 118 layers at pp 2) and an MoE one with
    /// LatentMoE (Nemotron 3 Super, 88 layers at pp 4 and at pp 8 with 4 layers on the last
    /// stage), and the stages differ where their slices do.
    #[test]
    fn hybrid_stages_hold_their_own_slices_of_the_pattern() {
        let cases = [
            ("nemotron-h-56b", 2, None),
            ("nemotron-3-super-120b-a12b", 4, None),
            ("nemotron-3-super-120b-a12b", 8, Some((12, 4))),
        ];
        for (name, pp, split) in cases {
            let model = crate::specs::load_model(name).unwrap();
            let cluster = Cluster {
                gpu: crate::specs::load_gpu("b200-sxm-180g").unwrap(),
                nodes: pp,
                gpus_per_node: 1,
            };
            let training = Training::with_framework(
                crate::training::TrainingFramework::MegatronCore,
                4096,
                pp * 8,
                AttentionKernel::Flash,
            );
            let request = crate::plan::PlanRequest {
                tp: 1,
                pp,
                dp: 1,
                micro_batch: 1,
                stage_split: split,
                ..crate::plan::PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training)
                .unwrap_or_else(|e| panic!("{name} pp {pp}: {e}"));
            let mut stages = vec![stage_params(&model, &plan, Stage::First, 1)];
            for rank in stage_ranks(&model, &plan, Stage::Middle).filter(|_| pp > 2) {
                stages.push(stage_params(&model, &plan, Stage::Middle, rank));
            }
            stages.push(stage_params(&model, &plan, Stage::Last, 1));
            let total: f64 = stages.iter().sum();
            let what = format!("{name} pp {pp} {split:?}: {stages:?}");
            assert!((total / model.params() - 1.0).abs() < 1e-12, "{what}");
            assert!(
                stages.windows(2).any(|w| w[0] != w[1]),
                "slices differ: {what}"
            );
        }
    }

    /// Each stage holds the layers the layout puts on it: DeepSeek-V3's first stage of 4 layers
    /// holds the 3 dense layers (their dense MLPs, no experts) and 1 MoE layer; it was charged 4
    /// layers at the model's average, 58/61 MoE, about 2.8 layers' worth of experts too many.
    #[test]
    fn stages_hold_their_own_dense_and_moe_layers() {
        let model = crate::specs::load_model("deepseek-v3").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("b200-sxm-180g").unwrap(),
            nodes: 32,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            2048,
            AttentionKernel::Flash,
        );
        let request = crate::plan::PlanRequest {
            tp: 1,
            pp: 16,
            dp: 16,
            ep: 8,
            micro_batch: 1,
            allow_uneven_pp: true,
            stage_split: Some((4, 1)),
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        assert_eq!(stage_moe_share(&model, &plan, Stage::First), 0.25);
        assert_eq!(stage_moe_share(&model, &plan, Stage::Middle), 1.0);
        // The last stage: 1 decoder layer (and the MTP layers, when trained), all MoE.
        assert_eq!(stage_moe_share(&model, &plan, Stage::Last), 1.0);
        let experts = super::super::moe::expert_params_per_gpu(&model, &plan);
        let moe_rest = model.moe_layer_params() - 256.0 * model.expert_params();
        let first =
            model.word_embedding_params() + 3.0 * model.dense_layer_params() + moe_rest + experts;
        assert!((stage_params(&model, &plan, Stage::First, 1) / first - 1.0).abs() < 1e-12);
        let middle = 4.0 * (moe_rest + experts);
        assert!((stage_params(&model, &plan, Stage::Middle, 1) / middle - 1.0).abs() < 1e-12);
        let heaviest = max_stage_params(&model, &training, &plan);
        assert!((heaviest.total / middle - 1.0).abs() < 1e-12);
        assert!((heaviest.expert / (4.0 * experts) - 1.0).abs() < 1e-12);
        // Every layer of the whole model on one stage: the model's own mix.
        let whole = crate::plan::PlanRequest {
            pp: 1,
            dp: 256,
            allow_uneven_pp: false,
            stage_split: None,
            ..request
        };
        let one = ParallelPlan::build(&whole, &model, &cluster, &training).unwrap();
        let mtp = model.mtp_layers;
        assert_eq!(
            stage_moe_share(&model, &one, Stage::Only),
            f64::from(58 + mtp) / f64::from(61 + mtp)
        );
    }

    /// torchtitan's sequence parallelism keeps the gathered, full-length QKV and MLP inputs for the
    /// backward (DTensor's column-parallel linears save what they were given); Megatron keeps the
    /// sequence shard and gathers it again. Same training in every other respect: 2 inputs × 2
    /// bytes × s·b·h·(1 − 1/t) more per layer.
    #[test]
    fn torchtitan_sequence_parallelism_keeps_the_gathered_inputs() {
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        // One loss kernel for both, whose bytes loss_parallel does not change, so that only the
        // kept inputs differ.
        let titan = Training {
            loss: crate::training::LossKernel::Compiled,
            ..Training::with_framework(
                crate::training::TrainingFramework::Torchtitan,
                8192,
                8,
                AttentionKernel::Flash,
            )
        };
        let megatron_layout = Training {
            framework: crate::training::TrainingFramework::MegatronCore,
            ..titan
        };
        let request = crate::plan::PlanRequest {
            tp: 8,
            pp: 1,
            dp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &titan).unwrap();
        let acts = |t: &Training| memory(&model, &cluster, t, &plan).activations_bytes.0;
        let want = 2.0 * 2.0 * 8192.0 * 4096.0 * (1.0 - 1.0 / 8.0) * 32.0;
        assert!(((acts(&titan) - acts(&megatron_layout)) / want - 1.0).abs() < 1e-9);
    }

    /// torchtitan's all-gather ring holds every rank's K/V chunk (repeated to the query heads), the
    /// fp32 dQ/dK/dV accumulators and two fp32 dK/dV hops while a layer's attention backward runs;
    /// on a stage without the loss that adds to the kept activations, on the only stage of Llama 3
    /// 8B the larger fp32 logits peak already covers it.
    #[test]
    fn torchtitan_cp_ring_working_set_is_a_transient_peak() {
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 2,
            gpus_per_node: 8,
        };
        let titan = Training::with_framework(
            crate::training::TrainingFramework::Torchtitan,
            262_144,
            8,
            AttentionKernel::Flash,
        );
        assert_eq!(titan.cp_exchange, CpExchange::TorchAllGather);
        let te_ring = Training {
            cp_exchange: CpExchange::KvRing,
            ..titan
        };
        let request = |pp: u32| crate::plan::PlanRequest {
            tp: 1,
            pp,
            cp: 8,
            dp: 2 / pp,
            micro_batch: 1,
            recompute: Recompute::Full,
            // torchtitan shards the states over the cp ranks whenever cp > 1 (FSDP2 over the
            // dp-shard x cp mesh), each data-parallel rank a copy.
            zero: 3,
            dp_replicas: 2 / pp,
            ..crate::plan::PlanRequest::default()
        };
        let acts = |t: &Training, plan: &ParallelPlan, stage: Stage| {
            stage_memory(&model, &cluster, t, plan, stage, 1)
                .activations_bytes
                .0
        };
        // 32,768 tokens a rank, 4,096 query and output columns: K/V 32768 x 8192 x 2 bytes a chunk.
        let kv = 32768.0 * 8192.0 * 2.0;
        let want = 8.0 * kv + 4.0 * 32768.0 * 3.0 * 4096.0 + 2.0 * 2.0 * kv;
        let piped = ParallelPlan::build(&request(2), &model, &cluster, &titan).unwrap();
        let added = acts(&titan, &piped, Stage::First) - acts(&te_ring, &piped, Stage::First);
        assert!((added / want - 1.0).abs() < 1e-9, "{added} vs {want}");
        let single = ParallelPlan::build(&request(1), &model, &cluster, &titan).unwrap();
        assert_eq!(
            acts(&titan, &single, Stage::Only),
            acts(&te_ring, &single, Stage::Only)
        );
    }

    /// The busiest stage's MoE share counts its own layers: Mixtral with `--moe-layer-freq 2` on
    /// 3 layers a stage has stages with 2 MoE layers and stages with 1; the step is paced by the
    /// former (2/3), not the model's average (1/2).
    #[test]
    fn the_busiest_stage_runs_its_own_moe_layers() {
        let mut model = crate::specs::load_model("mixtral-8x7b").unwrap();
        model.layers = 48;
        model.moe.as_mut().unwrap().layer_freq = 2;
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            256,
            AttentionKernel::Flash,
        );
        let request = crate::plan::PlanRequest {
            tp: 8,
            pp: 16,
            dp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        assert_eq!(
            super::super::moe::busiest_stage_moe_share(&model, &plan),
            2.0 / 3.0
        );
        assert_eq!(super::super::moe::moe_layer_share(&model), 0.5);
        assert_eq!(stage_moe_share(&model, &plan, Stage::First), 2.0 / 3.0);
        assert_eq!(stage_moe_share(&model, &plan, Stage::Last), 1.0 / 3.0);
        assert_eq!(stage_moe_share(&model, &plan, Stage::Middle), 2.0 / 3.0);
    }

    #[test]
    fn per_op_sac_keeps_the_saved_matmul_outputs() {
        // Llama 3 8B (h 4096, 32 heads, kv 1024, ffn 14336, gated), s = 8192, b = 1, no TP:
        // input 2sbh + Q 2sbh + V 2sb·1024 + SDPA output 2sbh + lse 4·32·sb + w1 output 2sb·14336
        // + w2 output 2sbh = sb·(8·4096 + 2·1024 + 128 + 2·14336).
        let m = crate::specs::load_model("llama3-8b").unwrap();
        let sb = 8192.0;
        let sac = alternate_matmul_activation_bytes(&m, 1, 8192, 1, false);
        let want = sb * (8.0 * 4096.0 + 2.0 * 1024.0 + 128.0 + 2.0 * 14336.0);
        assert!((sac / want - 1.0).abs() < 1e-12, "{sac} vs {want}");
        let none = layer_activation_bytes(
            &m,
            1,
            8192,
            1,
            false,
            Recompute::None,
            AttentionKernel::Flash,
        );
        let full = layer_activation_bytes(
            &m,
            1,
            8192,
            1,
            false,
            Recompute::Full,
            AttentionKernel::Flash,
        );
        assert!(full < sac && sac < none, "{full} < {sac} < {none}");
        // TP 8 with sequence parallelism: the block input is split, the two reduce-scatter
        // outputs are kept, the w2 partial sum stays full size.
        let tp8 = alternate_matmul_activation_bytes(&m, 1, 8192, 8, true);
        let want8 = sb
            * (2.0 * 4096.0 / 8.0
                + 2.0 * (4096.0 + 4096.0 + 14336.0) / 8.0
                + 2.0 * 128.0
                + 4.0 * 32.0 / 8.0
                + 2.0 * 4096.0
                + 4.0 * 4096.0 / 8.0);
        assert!((tp8 / want8 - 1.0).abs() < 1e-12, "{tp8} vs {want8}");
    }

    #[test]
    fn zero_paper_example() {
        // Rajbhandari et al. 2020 Figure 1: Ψ = 7.5B, N_d = 64: 120, 31.4, 16.6, 1.9 GB.
        let gb = |zero| zero_model_state_bytes(7.5e9, 64, zero, 2.0) / 1e9;
        assert!((gb(0) - 120.0).abs() < 0.05);
        assert!((gb(1) - 31.4).abs() < 0.05);
        assert!((gb(2) - 16.6).abs() < 0.05);
        assert!((gb(3) - 1.9).abs() < 0.05);
    }

    #[test]
    fn korthikanti_per_layer_expressions() {
        // Korthikanti et al. 2022 Table 2, GPT-3 175B shape, s = 2048, b = 1, t = 8.
        let m = gpt3_175b();
        let (s, b, h, a, t) = (2048.0, 1.0, 12288.0, 96.0, 8.0);
        let sbh = s * b * h;
        let close = |ours: f64, paper: f64| {
            assert!((ours / paper - 1.0).abs() < 1e-12, "{ours} vs {paper}")
        };
        // no parallelism: sbh(34 + 5as/h)
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                1,
                false,
                Recompute::None,
                AttentionKernel::Unfused,
            ),
            sbh * (34.0 + 5.0 * a * s / h),
        );
        // tensor parallel: sbh(10 + 24/t + 5as/(ht))
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                false,
                Recompute::None,
                AttentionKernel::Unfused,
            ),
            sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
        );
        // tensor + sequence parallel: sbh/t (34 + 5as/h)
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                true,
                Recompute::None,
                AttentionKernel::Unfused,
            ),
            sbh / t * (34.0 + 5.0 * a * s / h),
        );
        // tensor + sequence parallel + selective recompute: 34 sbh/t
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                true,
                Recompute::Selective,
                AttentionKernel::Unfused,
            ),
            34.0 * sbh / t,
        );
        // tensor parallel + selective recompute: sbh(10 + 24/t)
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                false,
                Recompute::Selective,
                AttentionKernel::Unfused,
            ),
            sbh * (10.0 + 24.0 / t),
        );
        // full recompute: 2sbh (÷t with sequence parallelism)
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                false,
                Recompute::Full,
                AttentionKernel::Unfused,
            ),
            2.0 * sbh,
        );
        close(
            layer_activation_bytes(
                &m,
                1,
                2048,
                8,
                true,
                Recompute::Full,
                AttentionKernel::Unfused,
            ),
            2.0 * sbh / t,
        );
        // b scales linearly
        close(
            layer_activation_bytes(
                &m,
                4,
                2048,
                8,
                false,
                Recompute::None,
                AttentionKernel::Unfused,
            ),
            4.0 * sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
        );
    }

    #[test]
    fn wide_heads_keep_q_and_the_projection_input_at_their_width() {
        // Qwen3-30B-A3B: 32 heads × 128 = 4096 wide on a 2048 hidden; DeepSeek-V3's latent
        // attention: Q 128 × 192, the projection input 128 × 128, and its latents (1536 + 512)
        // twice each.
        let (s, b, t) = (4096.0, 1.0, 2.0);
        let kept = |m: &Model| {
            layer_activation_bytes(
                m,
                1,
                4096,
                2,
                false,
                Recompute::None,
                AttentionKernel::Flash,
            )
        };
        let qwen = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let mut narrow = qwen.clone();
        narrow.head_dim = 64;
        narrow.kv_heads = 2;
        narrow.heads = 32;
        let extra = kept(&qwen) - kept(&narrow);
        // Q and the projection input 4096 instead of 2048; K and V 4 × 128 instead of 2 × 64; and
        // QK-norm's inputs, Q and K, at those widths.
        let expected = (2.0 * s * b * 2048.0 * 2.0
            + 4.0 * s * b * (512.0 - 128.0)
            + 2.0 * s * b * ((4096.0 + 512.0) - (2048.0 + 128.0)))
            / t;
        assert!((extra - expected).abs() < 1.0, "{extra} vs {expected}");
        let dsv3 = crate::specs::load_model("deepseek-v3").unwrap();
        let mut no_latents = dsv3.clone();
        no_latents.mla = None;
        no_latents.head_dim = 192;
        let with_latents = kept(&dsv3);
        let latents = 4.0 * s * b * (1536.0 + 512.0);
        let attention =
            (2.0 * s * b * (24576.0 + 16384.0) + 4.0 * s * b * 128.0 * (192.0 + 128.0) / 2.0) / t;
        let others = kept(&no_latents)
            - (2.0 * s * b * (24576.0 + 24576.0) + 4.0 * s * b * 128.0 * 192.0) / t;
        assert!(
            (with_latents - (others + attention + latents)).abs() < 1.0,
            "{with_latents} vs {}",
            others + attention + latents
        );
    }

    #[test]
    fn no_dropout_and_flash_attention_drop_masks_and_scores() {
        // Without dropout: masks (2sbh outside TP, as²b) and the dropout output (2as²b) go; the
        // softmax output 2as²b stays. FlashAttention keeps only a 4-byte log-sum-exp per row per head.
        let mut m = gpt3_175b();
        m.dropout = false;
        let (s, h, a, t) = (2048.0, 12288.0, 96.0, 8.0);
        let sbh = s * h;
        let unfused = layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Unfused,
        );
        assert!((unfused / (sbh * (8.0 + 24.0 / t) + 2.0 * a * s * s / t) - 1.0).abs() < 1e-12);
        let flash = layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            false,
            Recompute::None,
            AttentionKernel::Flash,
        );
        assert!((flash / (sbh * (8.0 + 24.0 / t) + 4.0 * a * s / t) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn korthikanti_175b_selective_sp_fits_table() {
        // Korthikanti et al. 2022 §6.1: with SP + selective recompute the 175B per-layer activations
        // are 34·sbh/t; for s=2048, b=1, h=12288, t=8: 107 MB per layer.
        let m = gpt3_175b();
        let bytes = layer_activation_bytes(
            &m,
            1,
            2048,
            8,
            true,
            Recompute::Selective,
            AttentionKernel::Unfused,
        );
        assert!((bytes / 1e6 - 107.0).abs() < 0.5, "{bytes}");
    }

    #[test]
    fn qk_norm_keeps_q_and_k_before_the_norm() {
        let model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let mut plain = model.clone();
        plain.qk_norm = false;
        let kept = |m: &Model| {
            layer_activation_bytes(m, 1, 4096, 2, true, Recompute::None, AttentionKernel::Flash)
        };
        // Q (4096 wide) and K (512) in bf16, split over tp 2.
        assert_eq!(
            kept(&model) - kept(&plain),
            2.0 * 4096.0 * (4096.0 + 512.0) / 2.0
        );
    }

    #[test]
    fn fp8_norm_outputs_save_a_byte_only_where_a_fused_gemm_quantizes_them() {
        // Llama: both norms fused into their GEMMs. Qwen3-30B-A3B (every layer MoE, no shared
        // experts): the router keeps the pre-MLP norm output in bf16. DeepSeek-V3: MLA's input
        // norm feeds two quantizing down projections; 58 of 61 MoE layers whose shared experts add
        // a quantized copy beside the router's bf16 one.
        let saving = |name: &str| norm_output_fp8_saving(&crate::specs::load_model(name).unwrap());
        assert_eq!(saving("llama3-8b"), 2.0);
        assert_eq!(saving("qwen3-30b-a3b"), 1.0);
        assert!((saving("deepseek-v3") - (3.0 - 58.0) / 61.0).abs() < 1e-12);
    }

    #[test]
    fn fp8_saves_its_gemm_inputs_in_one_byte() {
        // Transformer Engine saves the quantized inputs of QKV and the two MLP GEMMs: one byte less
        // per element of each than bf16; the output projection's input is the attention output,
        // which the attention keeps in bf16; nothing else changes.
        let model = crate::model::tests::gpt3_175b();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            2048,
            256,
            AttentionKernel::Flash,
        );
        let plan = |precision| {
            let request = crate::plan::PlanRequest {
                tp: 8,
                pp: 8,
                dp: 2,
                micro_batch: 1,
                sequence_parallel: true,
                precision,
                ..crate::plan::PlanRequest::default()
            };
            ParallelPlan::build(&request, &model, &cluster, &training).unwrap()
        };
        let bf16 = memory(&model, &cluster, &training, &plan(Precision::Bf16));
        let fp8 = memory(&model, &cluster, &training, &plan(Precision::Fp8));
        let (s, h, f, t) = (2048.0, 12288.0, 49152.0, 8.0);
        // The two norm outputs (split by SP) and the MLP down projection's input.
        let per_layer = (2.0 * s * h + s * f) / t;
        let layers_in_flight = 12.0 * 8.0; // 96/8 layers on the first stage, p = 8 micro-batches in flight
        let saved = bf16.activations_bytes.0 - fp8.activations_bytes.0;
        assert!(
            (saved / (per_layer * layers_in_flight) - 1.0).abs() < 1e-9,
            "{saved}"
        );
    }

    /// GPT-3 175B on 16 nodes, TP 8 x PP 8 x DP 2, one sequence per micro-batch, under
    /// `framework`: `global_batch` / 2 micro-batches per step.
    fn gpt3_pp8(
        framework: crate::training::TrainingFramework,
        vpp: u32,
        global_batch: u32,
        zero: u8,
    ) -> (Model, Cluster, Training, ParallelPlan) {
        let model = gpt3_175b();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training =
            Training::with_framework(framework, 2048, global_batch, AttentionKernel::Flash);
        let request = crate::plan::PlanRequest {
            tp: 8,
            pp: 8,
            dp: 2,
            vpp,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        (model, cluster, training, plan)
    }

    #[test]
    fn stages_hold_the_warm_up_megatron_schedules_and_never_more_than_every_micro_batch() {
        let core = crate::training::TrainingFramework::MegatronCore;
        // 1F1B with 64 micro-batches: p − rank (Narayanan et al. 2021 §2.2.1).
        let (model, _, training, plan) = gpt3_pp8(core, 1, 128, 1);
        assert_eq!(in_flight(&model, &training, &plan, 0), 8.0);
        assert_eq!(in_flight(&model, &training, &plan, 1), 7.0);
        assert_eq!(in_flight(&model, &training, &plan, 7), 1.0);
        // Interleaved (v = 2) with 64: (2(p − rank − 1) + (v − 1)p + 1) / v chunks' worth, which on
        // the first stage is Korthikanti's p(1 + (p − 1)/(p·v)) = 11.5.
        let (model, _, training, plan) = gpt3_pp8(core, 2, 128, 1);
        assert_eq!(in_flight(&model, &training, &plan, 0), 11.5);
        assert_eq!(in_flight(&model, &training, &plan, 1), 10.5);
        assert_eq!(in_flight(&model, &training, &plan, 7), 4.5);
        // With m = p = 8 the warm-up is every chunk of every micro-batch: 8, not 11.5.
        let (model, _, training, plan) = gpt3_pp8(core, 2, 16, 1);
        assert_eq!(in_flight(&model, &training, &plan, 0), 8.0);
        assert_eq!(in_flight(&model, &training, &plan, 7), 4.5);
    }

    #[test]
    fn torch_pipelining_keeps_boundary_tensors_per_micro_batch() {
        // 1F1B, 8 micro-batches on 8 stages: the first stage holds its 8 in-flight outputs and 8
        // gradient receive buffers; the last stage its 7 idle activation receive buffers (the
        // in-flight one is its first layer's input) and no output buffers (it outputs logits).
        let titan = crate::training::TrainingFramework::Torchtitan;
        let (model, _, training, plan) = gpt3_pp8(titan, 1, 16, 3);
        let message = super::super::comm::pp_message_bytes(&model, &training, &plan);
        let held = |rank| in_flight(&model, &training, &plan, rank);
        let first = pipeline_buffer_bytes(&model, &training, &plan, held(0), Stage::First);
        let last = pipeline_buffer_bytes(&model, &training, &plan, held(7), Stage::Last);
        assert!((first / message - 16.0).abs() < 1e-9, "{}", first / message);
        assert!((last / message - 7.0).abs() < 1e-9, "{}", last / message);
        // Megatron-Core frees what it sends and receives into fresh tensors: no such term.
        let core = crate::training::TrainingFramework::MegatronCore;
        assert!(!core.keeps_pipeline_buffers_per_microbatch());
    }

    #[test]
    fn torch_pipelining_frees_each_chunks_gradients_after_its_last_backward() {
        // torchtitan, ZeRO-3 with PP 8 and two chunks per rank: with one round of micro-batches
        // (m = p = 8) one chunk's unsharded gradients live at a time; with two rounds (m = 16)
        // the chunks alternate and both live.
        let titan = crate::training::TrainingFramework::Torchtitan;
        let (model, cluster, training, one_round) = gpt3_pp8(titan, 2, 16, 3);
        let (_, _, _, two_rounds) = gpt3_pp8(titan, 2, 32, 3);
        let grads = |plan: &ParallelPlan| {
            stage_memory(&model, &cluster, &training, plan, Stage::Middle, 1)
                .gradients_bytes
                .0
        };
        let params = stage_params_at(
            &model,
            &one_round,
            Stage::Middle,
            LayerMix::transformer(0.0),
        );
        let unsharded = params * training.grad_dtype.bytes();
        let sharded = unsharded / 2.0;
        assert!((grads(&two_rounds) - (sharded + unsharded)).abs() < 1e-6 * unsharded);
        assert!((grads(&one_round) - (sharded + unsharded / 2.0)).abs() < 1e-6 * unsharded);
    }

    #[test]
    fn torchtitan_before_return_outputs_keeps_every_micro_batchs_logits() {
        // The last stage of 8 micro-batches keeps the other 7's bf16 logits (split over TP by
        // the loss-parallel output layer) until the step ends; only the activations and the
        // fragmentation that scales with them move.
        let titan = crate::training::TrainingFramework::Torchtitan;
        let (model, cluster, mut training, plan) = gpt3_pp8(titan, 1, 16, 3);
        let without = stage_memory(&model, &cluster, &training, &plan, Stage::Last, 1);
        training.pipeline_keeps_outputs = true;
        let with = stage_memory(&model, &cluster, &training, &plan, Stage::Last, 1);
        let logits = 7.0 * 2.0 * 2048.0 * f64::from(model.vocab) / 8.0;
        let kept = with.activations_bytes.0 - without.activations_bytes.0;
        assert!((kept / logits - 1.0).abs() < 1e-9, "{kept} vs {logits}");
        let total = with.total_bytes.0 - without.total_bytes.0;
        assert!((total / (logits * (1.0 + FRAGMENTATION_FRACTION)) - 1.0).abs() < 1e-9);
        assert_eq!(with.weights_bytes, without.weights_bytes);
        assert_eq!(with.gradients_bytes, without.gradients_bytes);
    }

    #[test]
    fn fragmentation_grows_with_what_a_step_allocates_and_frees() {
        // Megatron-Core ZeRO-1 keeps its parameters, gradient buffer and optimizer states from the
        // start: only the activations fragment.
        let core = crate::training::TrainingFramework::MegatronCore;
        let (model, cluster, training, plan) = gpt3_pp8(core, 1, 128, 1);
        let m = stage_memory(&model, &cluster, &training, &plan, Stage::First, 1);
        let want = RESERVED_GIB * GIB + FRAGMENTATION_FRACTION * m.activations_bytes.0;
        assert!((m.other_bytes.0 / want - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_loss_kernel_sets_the_logit_bytes_on_the_last_stage() {
        // Llama 3 8B on one GPU of 8 (FSDP, no TP, one stage): eager PyTorch's cross-entropy on
        // upcast logits holds three fp32 copies of the b·s·V logits, the compiled loss and
        // Megatron's vocab-parallel one 4 bytes per element; nothing else moves.
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let framework = crate::training::TrainingFramework::Torchtitan;
        let mut training = Training::with_framework(framework, 8192, 16, AttentionKernel::Flash);
        let request = crate::plan::PlanRequest {
            tp: 1,
            pp: 1,
            dp: 8,
            micro_batch: 2,
            zero: 3,
            recompute: Recompute::Full,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        assert_eq!(training.loss, crate::training::LossKernel::EagerFp32);
        let eager = memory(&model, &cluster, &training, &plan);
        training.loss = crate::training::LossKernel::Compiled;
        let compiled = memory(&model, &cluster, &training, &plan);
        let logits = 2.0 * 8192.0 * 128256.0;
        let freed = eager.activations_bytes.0 - compiled.activations_bytes.0;
        assert!((freed / (8.0 * logits) - 1.0).abs() < 1e-9, "{freed}");
        assert_eq!(eager.weights_bytes, compiled.weights_bytes);
        // Under TP torchtitan shards the logits with `loss_parallel()`, whose eager backward holds
        // four fp32 tensors per logit of the TP shard (16 bytes), not the kernel's three.
        let tp_request = crate::plan::PlanRequest {
            tp: 8,
            dp: 1,
            sequence_parallel: true,
            ..request
        };
        let tp_plan = ParallelPlan::build(&tp_request, &model, &cluster, &training).unwrap();
        training.loss = crate::training::LossKernel::EagerFp32;
        let eager_tp = memory(&model, &cluster, &training, &tp_plan);
        training.loss = crate::training::LossKernel::Compiled;
        let compiled_tp = memory(&model, &cluster, &training, &tp_plan);
        let freed = eager_tp.activations_bytes.0 - compiled_tp.activations_bytes.0;
        assert!(
            (freed / (12.0 * logits / 8.0) - 1.0).abs() < 1e-9,
            "{freed}"
        );
    }

    #[test]
    fn eager_kernels_keep_the_upcast_norm_inputs_expanded_kv_and_silu_output() {
        // Llama 3 8B, one GPU: two norms' fp32 inputs (4 bytes × 4096 each), silu's output (2 bytes
        // × 14336); and, compiled or eager, K and V expanded from 1024 to 4096 wide (2 bytes × 2 ×
        // 3072).
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let eager_only = eager_saved_bytes_per_token(&model, 1, false, 0.0);
        assert_eq!(eager_only, 2.0 * 4.0 * 4096.0 + 2.0 * 14336.0);
        let expanded_kv = expanded_kv_saved_bytes_per_token(&model, 1);
        assert_eq!(expanded_kv, 4.0 * 3072.0);
        let per_token = eager_only + expanded_kv;
        // In a plan: added per layer when nothing is recomputed, not under per-op SAC.
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-96g-500w").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let framework = crate::training::TrainingFramework::Torchtitan;
        let eager = Training::with_framework(framework, 8192, 8, AttentionKernel::Flash);
        let mut fused = eager;
        fused.kernel_fusion = crate::training::KernelFusion::Fused;
        let plan = |recompute| {
            let request = crate::plan::PlanRequest {
                tp: 1,
                pp: 1,
                dp: 8,
                micro_batch: 1,
                zero: 3,
                recompute,
                ..crate::plan::PlanRequest::default()
            };
            ParallelPlan::build(&request, &model, &cluster, &eager).unwrap()
        };
        let kept = |training: &Training, recompute| {
            memory(&model, &cluster, training, &plan(recompute))
                .activations_bytes
                .0
        };
        let mut megatron_kernels = fused;
        megatron_kernels.sdpa_repeats_kv = false;
        let extra = kept(&eager, Recompute::None) - kept(&megatron_kernels, Recompute::None);
        assert!(
            (extra / (8192.0 * 32.0 * per_token) - 1.0).abs() < 1e-9,
            "{extra}"
        );
        // Compiled torchtitan still keeps the expanded K and V.
        let compiled = kept(&fused, Recompute::None) - kept(&megatron_kernels, Recompute::None);
        assert!(
            (compiled / (8192.0 * 32.0 * expanded_kv) - 1.0).abs() < 1e-9,
            "{compiled}"
        );
        assert_eq!(
            kept(&eager, Recompute::Selective),
            kept(&fused, Recompute::Selective)
        );
    }
}
