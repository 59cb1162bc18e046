//! Mixture-of-experts layers: what one GPU holds, computes and sends for the routed experts.
//!
//! Megatron-Core's parallel folding (Liu et al. 2025, "MoE Parallel Folding", and
//! megatron/core/parallel_state.py `expert_tensor_and_model_parallel` groups): attention and dense
//! layers use TP×CP×DP, the experts use ETP×EP×expert-DP over the same tp·cp·dp GPUs of a pipeline
//! stage (rank order etp-ep-edp). Each GPU holds experts/ep experts, each split over etp.
//!
//! Per MoE layer and micro-batch, the alltoall token dispatcher (Megatron-Core
//! `MoEAlltoAllTokenDispatcher`) sends every routed copy of a token to the GPU holding its expert
//! and brings it back (dispatch and combine), in forward and again for the gradients in backward:
//! bytes per GPU = routed tokens × top-k × hidden × 2 bytes × (ep − 1)/ep. Every pair of the EP
//! group talks, so across nodes the time is set by each GPU's own NIC, not by a ring's bus
//! bandwidth, for the share that leaves its NVLink domain (`alltoall_network_speed`). DeepEP
//! (`--moe-dispatcher deepep`) sends a token once per GPU holding any of its experts
//! (`remote_copies_per_token`) and, across NVLink domains, once per other domain reached, which
//! forwards it over NVLink (`deepep_network_speed`).
//!
//! Experts run as grouped GEMMs at the tokens each one actually gets (tokens × top-k × ep /
//! experts, times the routing imbalance for the busiest GPU): few tokens per expert put the GEMMs on
//! the memory roof (the expert weights are read for a handful of rows).

use super::cast::{self, CastSetting, LinearInput};
use super::comm::ACTIVATION_BYTES;
use super::compute::{Gemm, linear_gemm_time, wgrad_accumulation_s};
use crate::cluster::{Cluster, Link, LinkSpeed};
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{MoeDispatch, MoeDispatcher, MoeRouting, Training};
use crate::units::BytesPerSec;
use statrs::function::factorial::ln_binomial;

/// GPUs of one pipeline stage (tp·cp·dp), over which attention and experts are both folded.
pub fn stage_gpus(plan: &ParallelPlan) -> u32 {
    plan.tp * plan.cp * plan.dp
}

/// Expert data-parallel degree: the stage's GPUs over etp·ep.
pub fn expert_dp(plan: &ParallelPlan) -> u32 {
    (stage_gpus(plan) / (plan.etp * plan.ep).max(1)).max(1)
}

/// Ranks over which one copy of the ZeRO-sharded expert states is sharded: the expert-DP ranks,
/// or their share in each of the plan's `dp_replicas` copies (Megatron-Core splits the expert
/// data-parallel group into as many instances as the dense one, parallel_state.py).
pub fn expert_shard_ranks(plan: &ParallelPlan) -> u32 {
    (expert_dp(plan) / plan.dp_replicas.max(1)).max(1)
}

/// Tokens of one micro-batch entering one GPU's MoE layer: the rank's s/cp tokens, split over TP
/// (sequence parallelism, or Megatron's TP-sharded dispatch when etp = 1).
pub fn local_tokens(plan: &ParallelPlan, seq_len: u32) -> f64 {
    f64::from(plan.micro_batch) * f64::from(seq_len) / f64::from(plan.cp) / f64::from(plan.tp)
}

/// Rows each expert's token count is padded to under low-precision expert GEMMs, wherever the
/// padding happens (`MoeDispatch::router_padding`): 16 for per-tensor FP8, 32 for MXFP8
/// (`fp8_utils.get_fp8_align_size`), 32 for NVFP4 (`fp4_utils.get_fp4_align_size`'s derivation:
/// 16 bytes of 4-bit values; a later Megatron-LM, 60e039626, returns 128 there: 32 is kept as the
/// Megatron-Core the published NVFP4-era recipes pin). None in bf16.
pub fn expert_row_alignment(precision: Precision) -> Option<f64> {
    match precision {
        Precision::Bf16 => None,
        Precision::Fp8 => Some(16.0),
        Precision::Mxfp8 | Precision::Nvfp4 => Some(32.0),
    }
}

/// Routed copies per real one after each expert's count is padded to the alignment: with counts
/// spread over several multiples, (a − 1)/2 padding rows per expert on average; 1 in bf16. Where
/// the padding happens decides how many experts' counts grow per GPU. With the all-to-all
/// dispatcher and `--moe-router-padding-for-fp8` (`dispatch.router_padding`) the sending rank pads
/// its routing map's column of every expert before the dispatch (`pad_routing_map` in
/// `dispatch_preprocess`), so all experts' padding rows travel the all-to-all. Without it
/// (Megatron-Core's default) `TEGroupedMLP` pads each of the GPU's local experts after the
/// dispatch (`Fp8Padding(self.num_local_experts)`), and DeepEP pads its local experts after its
/// dispatch either way (`_DeepepManager`): experts/ep counts grow, none on the wire. Either way
/// the padded rows fill the grouped GEMMs and are saved for the backward like real ones.
pub fn padded_copies_factor(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    dispatch: MoeDispatch,
) -> f64 {
    let (Some(moe), Some(align)) = (model.moe, expert_row_alignment(plan.precision)) else {
        return 1.0;
    };
    let copies = local_tokens(plan, seq_len) * f64::from(moe.router_topk);
    if copies <= 0.0 {
        return 1.0;
    }
    let padded_experts = if pads_before_dispatch(dispatch, plan) {
        f64::from(moe.experts)
    } else {
        f64::from(moe.experts) / f64::from(plan.ep)
    };
    1.0 + padded_experts * (align - 1.0) / 2.0 / copies
}

/// Whether the low-precision padding rows are added to the routing map before the dispatch (and
/// so travel the all-to-all): the all-to-all dispatcher with router padding on.
pub fn pads_before_dispatch(dispatch: MoeDispatch, plan: &ParallelPlan) -> bool {
    dispatch.router_padding && dispatch.dispatcher.written_for(plan.ep) == MoeDispatcher::Alltoall
}

/// The load factor every routed-copy count a GPU computes and keeps carries: the user's routing
/// imbalance (the busiest expert's load over the balanced one) times the low-precision padding.
pub fn routed_load(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    training.moe_imbalance
        * padded_copies_factor(model, plan, training.seq_len, training.moe_dispatch)
}

/// The load factor of the copies the all-to-all carries: the imbalance, and the padding where it
/// is added before the dispatch (router padding under the all-to-all dispatcher; otherwise the
/// experts pad after it).
pub fn wire_load(model: &Model, training: &Training, plan: &ParallelPlan) -> f64 {
    if pads_before_dispatch(training.moe_dispatch, plan) {
        routed_load(model, training, plan)
    } else {
        training.moe_imbalance
    }
}

/// Parameters of one MoE layer's routed experts one GPU holds (before ZeRO).
pub fn expert_params_per_gpu(model: &Model, plan: &ParallelPlan) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    f64::from(moe.experts) / f64::from(plan.ep) * model.expert_params() / f64::from(plan.etp)
}

/// Share of the transformer layers that are MoE layers.
pub fn moe_layer_share(model: &Model) -> f64 {
    f64::from(model.moe_layers()) / f64::from(model.layers.max(1))
}

/// Whether an MoE layer's MLP side has the TP all-gather / reduce-scatter pair the dense MLP has:
/// with shared experts it does (Megatron-Core's `SharedExpertMLP` is a tensor-parallel MLP on the
/// gathered sequence); without them, under a framework whose MoE layer takes the sequence shard
/// straight into the dispatcher (`TrainingFramework::moe_takes_sequence_shard`), it does not.
pub fn moe_mlp_has_tp_pair(model: &Model, training: &Training) -> bool {
    model.has_shared_experts() || !training.framework.moe_takes_sequence_shard()
}

/// Share of a stage's layers, of which `moe_share` are MoE layers, whose MLP side runs the TP
/// pair: its dense layers, and its MoE layers where they have one (`moe_mlp_has_tp_pair`). 1 for
/// a dense model.
pub fn mlp_tp_pair_share_at(model: &Model, training: &Training, moe_share: f64) -> f64 {
    if moe_mlp_has_tp_pair(model, training) {
        1.0
    } else {
        1.0 - moe_share
    }
}

/// Share of MoE layers on the busiest pipeline stage, whose per-layer time the step is built
/// from: of the stages with the most transformer layers (MTP layers counted on the last), the one
/// with the most MoE layers, counted layer by layer where the stage layout places them
/// (`pipeline::stage_moe_layers`): the dense prefix (DeepSeek-V3's first three layers) sits on the
/// first stage, and with `--moe-layer-freq` 2 on 3 layers per stage some stages hold two MoE
/// layers and others one. Without a pipeline, or with every layer an MoE layer, the model's share.
pub fn busiest_stage_moe_share(model: &Model, plan: &ParallelPlan) -> f64 {
    if model.moe.is_none() {
        return 0.0;
    }
    if plan.pp <= 1 || model.every_layer_moe() {
        return moe_layer_share(model);
    }
    let p = plan.pp;
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    // No stage holds more than this many layers, nor more MoE layers than layers: a stage with
    // that many, all MoE, is the busiest, and the search can stop there.
    let most_layers = super::pipeline::max_stage_layers(model, plan);
    let mut busiest = (0, 0);
    for stage in 0..p {
        busiest = busiest.max(layout.stage_mix_with_mtp(model, p, stage));
        if busiest == (most_layers, most_layers) {
            break;
        }
    }
    match busiest {
        (0, _) => 0.0,
        (layers, moe_layers) => f64::from(moe_layers) / f64::from(layers),
    }
}

/// Forward time of one MoE layer's MLP part on one GPU for one micro-batch: router GEMM,
/// permute/unpermute traffic, the grouped expert GEMMs at their real token counts, and the shared
/// experts.
///
/// The expert and shared-expert GEMMs run at the plan's precision: Megatron-Core's `TEGroupedMLP`
/// (megatron/core/transformer/moe/experts.py) builds them from Transformer Engine's `GroupedLinear`
/// inside the same FP8 autocast as the dense linears, which is why FP8 MoE training pads each
/// expert's tokens to the FP8 GEMM alignment (`--moe-router-padding-for-fp8`, Megatron-Core
/// moe/README.md "FP8 Training"). Their inputs pay the same cast traffic as the dense linears
/// (`cost::cast`). The router stays in bf16 (its GEMM is not a TE linear).
#[allow(clippy::too_many_arguments)]
pub fn moe_mlp_forward_s(
    model: &Model,
    cluster: &Cluster,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
    dispatcher: MoeDispatcher,
    cast: CastSetting,
    epilogue: ExpertEpilogue,
) -> f64 {
    moe_mlp_time(
        model, cluster, plan, seq_len, imbalance, dispatcher, cast, epilogue,
    )
    .forward_s
}

/// Eager kernels the framework runs around the routed experts' grouped GEMMs that a generic MoE
/// of the same shape does not, read from Megatron-Core's `TEGroupedMLP` (moe/experts.py,
/// core_v0.15.0 and after) and torchtitan's `GptOssGroupedExperts` (torchtitan/models/gpt_oss/
/// moe.py at b5bcd76c66d0). Other frameworks: none modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpertEpilogue {
    /// Experts with biases (`--add-bias-linear`): the second GEMM returns its bias apart
    /// (`skip_bias_add`) and `_apply_bias` adds it weighted by the routing probability, expert by
    /// expert: `torch.cat([t + b * p for t, b, p in zip(torch.split(output, tokens_per_expert), ...)])`.
    pub eager_output_bias: bool,
    /// A clamped GLU (`Moe::glu_clamp_limit`) clamps as kernels of its own before the fused activation
    /// (`weighted_bias_quick_geglu_impl`: `input.chunk(2, -1)`, two `clamp`s and `torch.cat`)
    /// until Megatron-LM #5940 (2026-08-13) folded the clamp into the fused kernel
    /// (`Training::eager_glu_clamp`).
    pub eager_glu_clamp: bool,
    /// torchtitan's GPT-OSS experts run eager (`Training::torchtitan_gpt_oss_experts`, compile
    /// off): `GptOssGroupedExperts.forward` gathers each bias to the routed rows
    /// (`repeat_interleave`) and adds it, and its `swiglu` clamps, gates and adds the +1 as
    /// separate kernels, where tpsim's generic expert runs one activation kernel. Under
    /// `torch.compile` Inductor fuses them per block into about that one kernel: nothing more.
    pub torchtitan_eager_experts: bool,
    /// Megatron-Core pads each local expert's received rows to the low-precision GEMM alignment
    /// inside `TEGroupedMLP` when the router did not (`MoeDispatch::router_padding` off): under
    /// `config.fp8`/`config.fp4` it runs Transformer Engine's `Fp8Padding` on the permuted input
    /// before the first GEMM and `Fp8Unpadding` on the second GEMM's output (moe/experts.py,
    /// `Fp8Padding(self.num_local_experts)`; later `_use_explicit_quantization_padding`: "fp8 or
    /// fp4 and not moe_router_padding_for_quantization"). Costed only under low precision
    /// ([`explicit_padding_bytes_per_routed_copy`]).
    pub explicit_quantization_padding: bool,
}

/// HBM bytes per routed token copy, (forward, backward), of Megatron-Core's explicit expert
/// padding ([`ExpertEpilogue::explicit_quantization_padding`]) for experts whose input and output
/// rows are `row_width` wide: Transformer Engine's `Fp8Padding` copies the received rows into the
/// padded buffer (reads and writes each row) and `Fp8Unpadding` copies the output back (reads and
/// writes each row), 4 rows forward; the backward runs the same two copies on the gradients
/// (`_Fp8Padding.backward` unpads, `_Fp8Unpadding.backward` pads), 4 rows. bf16 elements.
pub fn explicit_padding_bytes_per_routed_copy(row_width: f64) -> (f64, f64) {
    let bytes = 4.0 * row_width * ACTIVATION_BYTES;
    (bytes, bytes)
}

impl ExpertEpilogue {
    /// What `training`'s framework runs for `model`'s experts.
    pub fn of(model: &Model, training: &Training) -> ExpertEpilogue {
        let Some(moe) = model.moe else {
            return ExpertEpilogue::default();
        };
        let megatron_core = training.framework == crate::training::TrainingFramework::MegatronCore;
        let torchtitan = training.framework == crate::training::TrainingFramework::Torchtitan;
        ExpertEpilogue {
            eager_output_bias: megatron_core && model.linear_bias,
            eager_glu_clamp: megatron_core
                && moe.glu_clamp_limit.is_some()
                && training.eager_glu_clamp,
            // A clamped GLU is GPT-OSS's, the only experts torchtitan's gpt_oss module builds.
            torchtitan_eager_experts: torchtitan
                && training.torchtitan_gpt_oss_experts
                && moe.glu_clamp_limit.is_some()
                && training.kernel_fusion == crate::training::KernelFusion::Eager,
            explicit_quantization_padding: megatron_core && !training.moe_dispatch.router_padding,
        }
    }

    /// HBM bytes per routed token copy, (forward, backward), for an expert whose GLU half is
    /// `inner` wide and whose output is `hidden` wide (bf16 elements, each read or written once
    /// per kernel):
    /// - the bias: `b * p` writes h, the add reads 2h and writes h, `torch.cat` reads and writes h
    ///   (6h); backward, the gradients of `b` and `p` each multiply (read h, write h) and sum
    ///   (read h) (6h);
    /// - the clamp: two clamps read and write a half each, `torch.cat` reads and writes both
    ///   (8 × inner); backward, each clamp's gradient reads the gradient and the input and writes
    ///   one half (6 × inner); the cat's gradient is two views;
    /// - torchtitan's eager GPT-OSS experts ([`TORCHTITAN_EAGER_EXPERT_ELEMENTS`]).
    pub fn bytes_per_routed_copy(self, inner: f64, hidden: f64) -> (f64, f64) {
        let mut forward = 0.0;
        let mut backward = 0.0;
        if self.eager_output_bias {
            forward += 6.0 * hidden;
            backward += 6.0 * hidden;
        }
        if self.eager_glu_clamp {
            forward += 8.0 * inner;
            backward += 6.0 * inner;
        }
        if self.torchtitan_eager_experts {
            let [(fwd_inner, fwd_hidden), (bwd_inner, bwd_hidden)] =
                TORCHTITAN_EAGER_EXPERT_ELEMENTS;
            forward += fwd_inner * inner + fwd_hidden * hidden;
            backward += bwd_inner * inner + bwd_hidden * hidden;
        }
        (forward * ACTIVATION_BYTES, backward * ACTIVATION_BYTES)
    }
}

/// Elements read and written per routed token copy by torchtitan's eager GPT-OSS experts beyond
/// the one activation kernel tpsim prices for every expert (reads the 2F-wide up projection,
/// writes F; its backward twice that): (× F, × D) forward, then backward, for the expert's
/// inner width F and output width D. Counted from `GptOssGroupedExperts.forward` and `swiglu`
/// (torchtitan/models/gpt_oss/moe.py at b5bcd76c66d0), one read or write of each element per
/// kernel, bf16; a strided half (`x[..., ::2]`, `x[..., 1::2]`) reads the whole interleaved 2F row,
/// since every 32-byte sector holds both halves.
///
/// Forward, 25F + 4D in all, less the priced 3F:
/// - `b1.repeat_interleave(...)` writes 2F and `h_RG + b1_RG` reads 4F and writes 2F (8F);
/// - `swiglu`: two `clamp`s each read 2F and write F (6F), `alpha * x_glu` 2F, `torch.sigmoid` 2F,
///   `x_glu * sigmoid` 3F, `torch.addcmul(out_glu, out_glu, x_linear)` reads 3F and writes F (17F);
/// - `b2.repeat_interleave(...)` writes D and `h_RD + b2_RD` reads 2D and writes D (4D). With
///   tp_degree > 1 `ScaleBiasForward` also divides b2_RD (2D), left out: which mesh sets tp_degree
///   depends on the SPMD backend.
///
/// Backward (PyTorch's derivatives.yaml), 53F + D in all, less the priced 6F:
/// - the bias adds and `ScaleBiasForward` pass the gradient through; each `repeat_interleave`
///   (an `index_select`) sums it back with `index_add_`, reading D and 2F;
/// - `addcmul`: `grad * (x_linear * 1)` and `grad * (out_glu * 1)` (5F each) and out_glu's two
///   gradients summed (3F): 13F; `x_glu * sigmoid`: two products (6F); `sigmoid_backward` 3F;
///   `* alpha` 2F; x_glu's two gradients summed 3F;
/// - each `clamp`'s backward reads the gradient (F) and its strided input (2F) and writes F (8F);
/// - each strided view's backward zero-fills a 2F gradient and writes its half into it (5F), and
///   the two are summed (reads 4F, writes 2F): 16F.
pub const TORCHTITAN_EAGER_EXPERT_ELEMENTS: [(f64, f64); 2] =
    [(25.0 - 3.0, 4.0), (53.0 - 6.0, 1.0)];

/// One MoE layer's MLP part on one GPU for one micro-batch, forward and backward.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MoeMlpTime {
    pub forward_s: f64,
    /// Twice the forward's GEMMs and element-wise kernels (input and weight gradients), but the
    /// token permutations once: the backward of a permutation is its inverse, the same bytes
    /// (Transformer Engine's `_permute_kernel`/`_unpermute_kernel` swap in the backward;
    /// `sort_chunks_by_idxs` runs the inverse sort).
    pub backward_s: f64,
    /// Of `backward_s`, the weight-gradient GEMMs (experts, shared experts, router) with their
    /// in-place accumulation (`compute::LayerTime::weight_grad`).
    pub weight_grad_s: f64,
}

/// [`moe_mlp_forward_s`] with its backward.
#[allow(clippy::too_many_arguments)]
pub fn moe_mlp_time(
    model: &Model,
    cluster: &Cluster,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
    dispatcher: MoeDispatcher,
    cast: CastSetting,
    epilogue: ExpertEpilogue,
) -> MoeMlpTime {
    let Some(moe) = model.moe else {
        return MoeMlpTime::default();
    };
    // The experts' rows: the latent width under LatentMoE, else the hidden width.
    let width = model.expert_width();
    let tokens = local_tokens(plan, seq_len);
    let topk = f64::from(moe.router_topk);
    let experts = f64::from(moe.experts);
    let local_experts = experts / f64::from(plan.ep);
    let etp = f64::from(plan.etp);
    let precision = plan.precision;
    let linear = |g: &Gemm| linear_gemm_time(g, cluster, precision, 1);
    // Tokens one local expert processes: the EP group's routed copies spread over its experts; an
    // expert split over etp GPUs sees the tokens of all etp of them (each computes its 1/etp slice
    // of the expert for every one, as the dense MLP does under TP).
    let per_expert = tokens * topk * f64::from(plan.ep) / experts * imbalance * etp;
    let up = Gemm {
        m: per_expert,
        k: width,
        n: model.expert_up_width() / etp,
        batch: local_experts,
    };
    let down = Gemm {
        m: per_expert,
        k: f64::from(moe.ffn_hidden) / etp,
        n: width,
        batch: local_experts,
    };
    let router = Gemm {
        m: tokens,
        k: f64::from(model.hidden),
        n: experts,
        batch: 1.0,
    };
    // Expert inputs are dispatched tokens and activations, cast whole (`cost::cast`); the shared
    // expert's up projection is a column-parallel linear that quantizes its sequence shard under
    // sequence parallelism.
    let cast_per_element =
        |gathered: u32| cast::input_cast_bytes(cast, &cluster.gpu, LinearInput::Other, gathered);
    let mut cast_bytes =
        cast_per_element(1) * (up.m * up.k * up.batch + down.m * down.k * down.batch);
    // The transposed copies the backward makes once of the shared expert's gathered tensors: its
    // re-gathered input and its down projection's gathered output gradient.
    let mut transposed_bytes = 0.0;
    // The weight-gradient GEMMs' in-place accumulation (TE's `GroupedLinear` and the shared
    // expert's linears fuse it as the dense linears do): an expert's few rows make it
    // memory-bound on its fp32 gradient buffer.
    let mut wgrad_extra_s =
        wgrad_accumulation_s(&up, cluster, cast) + wgrad_accumulation_s(&down, cluster, cast);
    // LatentMoE's two projections, on this rank's tokens with the whole weight (duplicated over
    // TP): linears as any other, quantizing their inputs.
    // At a quantization recipe's precision for them, where it sets one (`training::
    // ModulePrecision`).
    let latent = match latent_projection_gemms(model, plan, seq_len) {
        Some([down_proj, up_proj]) => {
            let latent_cast = cast.for_module(crate::training::QuantModule::LatentProjections);
            cast_bytes += cast::input_cast_bytes(latent_cast, &cluster.gpu, LinearInput::Other, 1)
                * (down_proj.m * down_proj.k + up_proj.m * up_proj.k);
            wgrad_extra_s += wgrad_accumulation_s(&down_proj, cluster, latent_cast)
                + wgrad_accumulation_s(&up_proj, cluster, latent_cast);
            let at = |g: &Gemm| linear_gemm_time(g, cluster, latent_cast.precision, 1);
            at(&down_proj) + at(&up_proj)
        }
        None => 0.0,
    };
    let shared = match shared_expert_gemms(model, plan, seq_len) {
        Some([shared_up, shared_down]) => {
            // Cast on the sequence shard where the gather carries the quantized copy, as the
            // dense linears (`compute::layer_time_sharded`).
            let gathered = cast.gathered_from(plan.sequence_parallel, plan.tp);
            cast_bytes += cast_per_element(gathered) * shared_up.m * shared_up.k
                + cast_per_element(1) * shared_down.m * shared_down.k;
            transposed_bytes = cast::backward_transpose_bytes(cast, &cluster.gpu, gathered)
                * (shared_up.m * shared_up.k + shared_down.m * shared_down.n);
            wgrad_extra_s += wgrad_accumulation_s(&shared_up, cluster, cast)
                + wgrad_accumulation_s(&shared_down, cluster, cast);
            linear(&shared_up) + linear(&shared_down)
        }
        None => 0.0,
    };
    // The activation reads the up projection and writes the expert's inner width.
    let routed = tokens * topk * imbalance * etp;
    let permute_bytes = permutation_bytes(model, plan, seq_len, imbalance, dispatcher);
    let activation_bytes =
        routed * (model.expert_up_width() + f64::from(moe.ffn_hidden)) / etp * ACTIVATION_BYTES;
    let gpu = &cluster.gpu;
    let bandwidth = gpu.achieved_hbm_bandwidth().0;
    let permute_s = permute_bytes / bandwidth / gpu.framework_efficiency;
    let (epilogue_forward, epilogue_backward) =
        epilogue.bytes_per_routed_copy(f64::from(moe.ffn_hidden) / etp, width / etp);
    let (padding_forward, padding_backward) = if epilogue.explicit_quantization_padding
        && expert_row_alignment(plan.precision).is_some()
    {
        explicit_padding_bytes_per_routed_copy(width)
    } else {
        (0.0, 0.0)
    };
    let epilogue_forward_s =
        routed * (epilogue_forward + padding_forward) / bandwidth / gpu.framework_efficiency;
    let epilogue_backward_s =
        routed * (epilogue_backward + padding_backward) / bandwidth / gpu.framework_efficiency;
    let rest_s = (linear(&up)
        + linear(&down)
        + router.time(cluster)
        + shared
        + latent
        + (activation_bytes + cast_bytes) / bandwidth)
        / gpu.framework_efficiency;
    MoeMlpTime {
        forward_s: rest_s + permute_s + epilogue_forward_s,
        backward_s: 2.0 * rest_s
            + permute_s
            + epilogue_backward_s
            + (wgrad_extra_s + transposed_bytes / bandwidth) / gpu.framework_efficiency,
        weight_grad_s: (linear(&up)
            + linear(&down)
            + router.time(cluster)
            + shared
            + latent
            + wgrad_extra_s)
            / gpu.framework_efficiency,
    }
}

/// LatentMoE's two GEMMs on one TP rank (h → latent, latent → h) over the rank's tokens, each
/// with the whole weight (`fc1_latent_proj`/`fc2_latent_proj` are `parallel_mode="duplicated"`
/// `TELinear`s, megatron/core/transformer/moe/moe_layer.py); `None` without a latent width.
pub fn latent_projection_gemms(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
) -> Option<[Gemm; 2]> {
    let latent = f64::from(model.moe?.latent_size?);
    let h = f64::from(model.hidden);
    let rows = local_tokens(plan, seq_len);
    Some([
        Gemm {
            m: rows,
            k: h,
            n: latent,
            batch: 1.0,
        },
        Gemm {
            m: rows,
            k: latent,
            n: h,
            batch: 1.0,
        },
    ])
}

/// The shared experts' two GEMMs on one TP rank (up, down), at the dense MLP's TP split; `None`
/// without shared experts.
pub fn shared_expert_gemms(model: &Model, plan: &ParallelPlan, seq_len: u32) -> Option<[Gemm; 2]> {
    let moe = model.moe?;
    if moe.shared_expert_ffn_hidden == 0 {
        return None;
    }
    let h = f64::from(model.hidden);
    let t = f64::from(plan.tp);
    let gated = if model.gated_mlp { 2.0 } else { 1.0 };
    let width = f64::from(moe.shared_expert_ffn_hidden);
    let rows = local_tokens(plan, seq_len) * t;
    Some([
        Gemm {
            m: rows,
            k: h,
            n: gated * width / t,
            batch: 1.0,
        },
        Gemm {
            m: rows,
            k: width / t,
            n: h,
            batch: 1.0,
        },
    ])
}

/// HBM bytes of one MoE layer's token permutations on one GPU per micro-batch forward:
/// - the alltoall dispatcher permutes the rank's own tokens into routed copies before the
///   dispatch and back after the combine ("Permutation 1", `permute`/`unpermute` in
///   megatron/core/transformer/moe/moe_utils.py, Transformer Engine's `_permute_kernel` and
///   `_unpermute_kernel`: the permute reads each token once and writes its top-k copies, the
///   unpermute reads the copies and writes one token), on the tokens before any expert-TP
///   gather; with more than one local expert it also sorts the received copies by local expert
///   after the dispatch and back before the combine ("Permutation 2", `sort_chunks_by_idxs` in
///   `MoEAlltoAllTokenDispatcher`, token_dispatcher.py), a read and a write of every received
///   copy each way;
/// - DeepEP sends the tokens themselves, so the only permutation is the one after the dispatch,
///   from the received tokens to routed copies grouped by local expert, and its inverse before
///   the combine (`_DeepepManager.get_permuted_hidden_states_by_experts` /
///   `get_restored_hidden_states_by_experts`, same file), counted as a read and a write of every
///   copy each way (its reads of the received tokens and the buffer copies DeepEP makes around
///   them, about as many bytes).
pub fn permutation_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
    dispatcher: MoeDispatcher,
) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let tokens = local_tokens(plan, seq_len);
    let topk = f64::from(moe.router_topk);
    // Copies this GPU's experts receive (the busiest's load, every expert-TP rank's tokens).
    let received = tokens * topk * imbalance * f64::from(plan.etp);
    let row = model.expert_width() * ACTIVATION_BYTES;
    match dispatcher {
        MoeDispatcher::Alltoall => {
            // Permute (read tokens, write copies) and unpermute (read copies, write tokens).
            // Under low-precision expert GEMMs the copies are the padded routing map's: the
            // dispatcher pads the rank's own map before "Permutation 1" (`dispatch_preprocess`:
            // `pad_routing_map`, then `preprocess` counts `num_out_tokens` from it, :545-551, and
            // `permute` writes that many rows; megatron/core/transformer/moe/token_dispatcher.py:649-677
            // at d98e8a64), so the own copies carry `padded_copies_factor` as the received ones
            // do. The user's imbalance does not enter: a rank's own tokens make top-k copies each
            // however the experts share them. (Counted as under router padding whatever
            // `MoeDispatch::router_padding` says: without it `TEGroupedMLP` copies the received
            // rows into padded ones instead, about as many bytes; not told apart here.)
            let router_padded = MoeDispatch {
                dispatcher: MoeDispatcher::Alltoall,
                router_padding: true,
                ..MoeDispatch::default()
            };
            let own_copies =
                tokens * topk * padded_copies_factor(model, plan, seq_len, router_padded);
            let first = 2.0 * (tokens + own_copies);
            let second = if moe.experts > plan.ep {
                4.0 * received
            } else {
                0.0
            };
            (first + second) * row
        }
        MoeDispatcher::Deepep => 4.0 * received * row,
    }
}

/// Bytes one GPU sends in one all-to-all (dispatch or combine) of one MoE layer and micro-batch:
/// its tokens times the copies of each that leave the GPU ([`remote_copies_per_token`]).
pub fn alltoall_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
    dispatch: MoeDispatch,
) -> f64 {
    if plan.ep <= 1 || model.moe.is_none() {
        return 0.0;
    }
    local_tokens(plan, seq_len)
        * remote_copies_per_token(model, plan.ep, dispatch)
        * imbalance
        * model.expert_width()
        * ACTIVATION_BYTES
}

/// Copies of one token a GPU sends to the other `ep − 1` GPUs of its EP group in one dispatch
/// (and gets back in the combine), on average over its tokens.
/// - All-to-all: one per routed copy, top-k of them, of which (ep − 1)/ep go elsewhere.
/// - DeepEP: one per destination GPU holding any of the token's experts. With random routing
///   each of the ep − 1 other GPUs, holding L = experts/ep experts, is hit unless all k choices
///   miss its L: 1 − C(E − L, k)/C(E, k) (draws without replacement, as top-k picks distinct
///   experts). With round-robin routing token t's experts are t·k … t·k + k − 1 mod E, so the GPUs
///   it reaches are counted over one period of the pattern; (ep − 1)/ep of them are elsewhere,
///   as every GPU is a destination equally often.
pub fn remote_copies_per_token(model: &Model, ep: u32, dispatch: MoeDispatch) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    if ep <= 1 {
        return 0.0;
    }
    match dispatch.dispatcher {
        MoeDispatcher::Alltoall => {
            f64::from(moe.router_topk.min(moe.experts)) * f64::from(ep - 1) / f64::from(ep)
        }
        MoeDispatcher::Deepep => other_blocks_reached(model, ep, dispatch.routing),
    }
}

/// Of `blocks` equal blocks of consecutive experts (the GPUs of an EP group, or its members in
/// each NVLink domain), how many other than the token's own one token's top-k experts reach, on
/// average over its tokens ([`remote_copies_per_token`] gives the formulas).
fn other_blocks_reached(model: &Model, blocks: u32, routing: MoeRouting) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    if blocks <= 1 {
        return 0.0;
    }
    let (experts, topk) = (moe.experts, moe.router_topk.min(moe.experts));
    let elsewhere = f64::from(blocks - 1) / f64::from(blocks);
    match routing {
        MoeRouting::Random => f64::from(blocks - 1) * block_reach_probability(&moe, blocks),
        MoeRouting::RoundRobin => {
            let (ep, per_gpu) = (blocks, (experts / blocks).max(1));
            // Token t starts at t·k mod E; the starts repeat after E / gcd(k, E) tokens.
            let period =
                experts / (crate::integer::gcd(u64::from(topk), u64::from(experts)) as u32).max(1);
            let mut gpus_reached = 0u64;
            for t in 0..period {
                let start = (u64::from(t) * u64::from(topk) % u64::from(experts)) as u32;
                // Experts start … start + k − 1 sit on consecutive GPUs, wrapping past the last
                // expert to the first: count the GPUs each piece spans, at most all ep of them.
                let end = start + topk - 1;
                let spanned = if end < experts {
                    end / per_gpu - start / per_gpu + 1
                } else {
                    (experts - 1) / per_gpu - start / per_gpu + 1 + (end - experts) / per_gpu + 1
                };
                gpus_reached += u64::from(spanned.min(ep));
            }
            gpus_reached as f64 / f64::from(period) * elsewhere
        }
    }
}

/// Chance that k draws without replacement from `pool` items all miss `kept_out` of them:
/// C(pool − kept_out, k) / C(pool, k), in log space (statrs `ln_binomial`) so that pools of
/// thousands of experts neither overflow nor cost a product over k.
fn all_miss(pool: u32, kept_out: u32, k: u32) -> f64 {
    let left = pool.saturating_sub(kept_out);
    if k > left {
        return 0.0;
    }
    (ln_binomial(u64::from(left), u64::from(k)) - ln_binomial(u64::from(pool), u64::from(k))).exp()
}

/// Chance that a token's top-k experts, routed at random, include one of a given block's E/blocks
/// consecutive experts. Without group limits: 1 − C(E − E/blocks, k)/C(E, k) (k distinct experts
/// drawn at random). With group-limited routing (G groups of E/G consecutive experts, a token's
/// experts from T of them: Megatron-Core `moe_utils.group_limited_topk`) the T groups are a
/// uniform choice (random logits make the groups exchangeable), and each chosen group holds at
/// least one of the token's experts: a group is chosen for the sum of its best k/T scores, so its
/// best expert is almost always among the token's top k (simulating the rule for DeepSeek-V3,
/// 256 experts, 8 groups, top-4 groups, top-8: 3.97 of the 4 groups reached). The other k − T
/// experts are taken as uniform over the rest of the chosen groups' experts. So a block of whole
/// groups is reached when any of its groups is chosen, 1 − C(G − w, T)/C(G, T); a block inside
/// one group when the group is chosen and either its guaranteed expert or one of the k − T draws
/// lands in it. This tracks the simulated rule within 1% where drawing all k uniformly from the
/// chosen groups reads 7–9% low (`group_limited_routing_tracks_megatron_cores_rule`). Blocks that
/// cut across groups are counted without the limit. (k ≥ T: `model::check_router_groups`.)
fn block_reach_probability(moe: &crate::model::Moe, blocks: u32) -> f64 {
    let (experts, topk) = (moe.experts, moe.router_topk.min(moe.experts));
    let per_block = experts / blocks.max(1);
    let (groups, group_topk) = (moe.router_groups, moe.router_group_topk);
    let ungrouped = 1.0 - all_miss(experts, per_block, topk);
    if groups <= 1
        || group_topk == 0
        || group_topk >= groups
        || topk < group_topk
        || !experts.is_multiple_of(groups)
    {
        return ungrouped;
    }
    let per_group = experts / groups;
    let pool = group_topk * per_group;
    let chosen = f64::from(group_topk) / f64::from(groups);
    if per_group.is_multiple_of(per_block) {
        // The block lies inside one group.
        let guaranteed_misses = f64::from(per_group - per_block) / f64::from(per_group);
        let drawn_miss = all_miss(pool - group_topk, per_block, topk - group_topk);
        return chosen * (1.0 - guaranteed_misses * drawn_miss);
    }
    if per_block.is_multiple_of(per_group) {
        // The block is `whole` groups.
        let whole = per_block / per_group;
        return 1.0 - all_miss(groups, whole, group_topk);
    }
    ungrouped
}

/// Speed of one GPU's DeepEP dispatch or combine (per byte of [`alltoall_bytes`], which counts one
/// copy per GPU reached) when its EP group spans NVLink domains. DeepEP's internode kernels send a
/// token once to each other domain holding any of its experts, over RDMA to the GPU of the same
/// local rank there, which forwards it over NVLink to the GPUs that need it (deepseek-ai/DeepEP
/// README, "Normal kernels with NVLink and RDMA forwarding"; `get_dispatch_layout` returns
/// `num_tokens_per_rdma_rank` beside `num_tokens_per_rank` for this), so the NIC carries one copy
/// per other domain reached ([`other_blocks_reached`] over the group's domain blocks) while NVLink
/// carries the copies to GPUs in the own domain and the forwarding: at most one copy per GPU
/// reached, the bound taken here. Both run at once; the slower sets the time. DeepEP's first
/// README (now `docs/legacy.md`) measured the RDMA side at 43–58 GB/s of a 50 GB/s CX7 NIC at
/// EP 16–64, the NIC's achieved rate.
/// The forwarding is costed only where every domain holds the same number of the group's members
/// (whole domains' worth each: the stride divides the domain and that share divides ep); a group
/// whose domain blocks are unequal keeps the all-to-all's speed ([`alltoall_network_speed`]).
pub fn deepep_network_speed(
    model: &Model,
    cluster: &Cluster,
    stride: u32,
    ep: u32,
    routing: MoeRouting,
) -> LinkSpeed {
    let domain = cluster.nvlink_domain();
    let local = if stride > 0 && domain.is_multiple_of(stride) {
        domain / stride
    } else {
        1
    };
    if local <= 1 || local >= ep || !ep.is_multiple_of(local) {
        return alltoall_network_speed(cluster, stride, ep);
    }
    let dispatch = MoeDispatch {
        dispatcher: MoeDispatcher::Deepep,
        routing,
        ..MoeDispatch::default()
    };
    let gpu_copies = remote_copies_per_token(model, ep, dispatch);
    let rdma_copies = other_blocks_reached(model, ep / local, routing);
    if gpu_copies <= 0.0 {
        return alltoall_network_speed(cluster, stride, ep);
    }
    let nic = cluster.link_speed(Link::Network);
    let nvlink = cluster.link_speed(Link::Nvlink);
    let per_byte =
        (rdma_copies / nic.bandwidth.0).max(gpu_copies / nvlink.bandwidth.0) / gpu_copies;
    LinkSpeed {
        bandwidth: BytesPerSec(1.0 / per_byte),
        latency: nic.latency,
    }
}

/// The speed of the EP group's token all-to-alls on `plan`: the group's own (`groups::groups`:
/// NVLink inside one domain, the hierarchical all-to-all across domains), or DeepEP's forwarding
/// across domains ([`deepep_network_speed`]). The cost model and the ledger both take it from here.
pub fn ep_dispatch_speed(
    model: &Model,
    cluster: &Cluster,
    plan: &ParallelPlan,
    dispatch: MoeDispatch,
    group: &super::groups::Group,
) -> LinkSpeed {
    if dispatch.dispatcher == MoeDispatcher::Deepep && group.link == Link::Network {
        deepep_network_speed(model, cluster, group.stride, plan.ep, dispatch.routing)
    } else {
        group.speed
    }
}

/// Members of an EP group (`ep` ranks at `stride`) in the NVLink domain of its worst-placed
/// member: the members fill the domains in blocks of domain/stride (when the stride divides the
/// domain), and the smallest block of any group sets the pace (synchronous training waits for it).
fn domain_members(cluster: &Cluster, stride: u32, ep: u32) -> u32 {
    let domain = cluster.nvlink_domain();
    if stride > 0 && domain.is_multiple_of(stride) {
        let groups = cluster.total_gpus() / (stride * ep).max(1);
        super::groups::smallest_domain_block(ep, domain / stride, groups).clamp(1, ep.max(1))
    } else {
        1
    }
}

/// Bytes of the token tensor the expert-TP group all-gathers in one MoE layer's dispatch and
/// reduce-scatters back in its combine: every rank's received token copies, etp of them.
/// Megatron-Core's all-to-all dispatcher gathers the dispatched tokens over the expert-TP ranks
/// after the EP all-to-all when the expert TP size is above 1 (`MoEAlltoAllTokenDispatcher.
/// dispatch_postprocess`: `gather_from_sequence_parallel_region(global_input_tokens,
/// group=self.tp_group)`) and reduce-scatters the expert outputs before the return all-to-all
/// (`combine_preprocess`: `reduce_scatter_to_sequence_parallel_region`).
pub fn expert_tp_gather_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
) -> f64 {
    if plan.etp <= 1 || model.moe.is_none() {
        return 0.0;
    }
    local_tokens(plan, seq_len)
        * model.routed_tokens_per_token()
        * imbalance
        * model.expert_width()
        * ACTIVATION_BYTES
        * f64::from(plan.etp)
}

/// Why Megatron-Core's combined 1F1B schedule cannot pair the micro-batches of a plan so that
/// one's all-to-alls run under the other's compute (`--overlap-moe-expert-parallel-comm`): it
/// needs expert parallelism, no full recompute, virtual stages when there is a pipeline, and at
/// most one MTP layer (megatron/core/transformer/transformer_config.py `__post_init__`: "If
/// enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when
/// pipeline_model_parallel_size > 1", "disable full recomputation when enabling
/// overlap_moe_expert_parallel_comm", "MTP layernum only supports 1 when enabling
/// overlap_moe_expert_parallel_comm").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlltoallOverlapRefusal {
    NoExpertParallelism {
        ep: u32,
    },
    FullRecompute,
    PipelineWithoutVirtualStages {
        pp: u32,
    },
    MtpLayers {
        mtp_layers: u32,
    },
    /// `--recompute-modules moe`: "disable moe in recompute_modules when enabling
    /// overlap_moe_expert_parallel_comm" (Megatron-Core transformer_config.py).
    MoeModuleRecompute,
}

impl std::fmt::Display for AlltoallOverlapRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AlltoallOverlapRefusal::NoExpertParallelism { ep } => write!(
                f,
                "it needs expert parallelism (ep > 1), and the plan has ep {ep}"
            ),
            AlltoallOverlapRefusal::FullRecompute => write!(
                f,
                "it cannot run with full recompute; use --recompute selective or none"
            ),
            AlltoallOverlapRefusal::PipelineWithoutVirtualStages { pp } => write!(
                f,
                "with a pipeline (pp {pp}) it needs virtual stages; give --vpp 2 or more"
            ),
            AlltoallOverlapRefusal::MtpLayers { mtp_layers } => write!(
                f,
                "it supports at most 1 MTP layer, and the model has {mtp_layers}"
            ),
            AlltoallOverlapRefusal::MoeModuleRecompute => write!(
                f,
                "it cannot run while the MoE layer is recomputed (--recompute-modules moe); drop moe from the modules"
            ),
        }
    }
}

/// What Megatron-Core has against the MoE all-to-all overlap on `plan` ([`AlltoallOverlapRefusal`]).
pub fn alltoall_overlap_refusal(
    model: &Model,
    training: &crate::training::Training,
    plan: &ParallelPlan,
) -> Option<AlltoallOverlapRefusal> {
    alltoall_overlap_refusal_of(
        model.moe.is_some(),
        model.mtp_layers,
        recomputes_moe_layer(training.recompute_modules, plan),
        plan,
    )
}

/// Whether `plan` recomputes whole MoE layers by module (`--recompute-modules moe` with
/// selective recompute).
pub fn recomputes_moe_layer(
    modules: Option<crate::training::RecomputeModules>,
    plan: &ParallelPlan,
) -> bool {
    plan.recompute == Recompute::Selective
        && modules.is_some_and(|m| m.contains(crate::training::RecomputeModule::Moe))
}

/// [`alltoall_overlap_refusal`] from what it reads of the model: whether it has experts, and its
/// MTP layers; and whether the plan recomputes the MoE layers by module.
pub fn alltoall_overlap_refusal_of(
    has_experts: bool,
    mtp_layers: u32,
    moe_layer_recomputed: bool,
    plan: &ParallelPlan,
) -> Option<AlltoallOverlapRefusal> {
    if !has_experts || plan.ep <= 1 {
        Some(AlltoallOverlapRefusal::NoExpertParallelism { ep: plan.ep })
    } else if plan.recompute == Recompute::Full {
        Some(AlltoallOverlapRefusal::FullRecompute)
    } else if moe_layer_recomputed {
        Some(AlltoallOverlapRefusal::MoeModuleRecompute)
    } else if plan.pp > 1 && plan.vpp == 1 {
        Some(AlltoallOverlapRefusal::PipelineWithoutVirtualStages { pp: plan.pp })
    } else if mtp_layers > 1 {
        Some(AlltoallOverlapRefusal::MtpLayers { mtp_layers })
    } else {
        None
    }
}

/// Whether the combined 1F1B schedule applies ([`alltoall_overlap_refusal`] has nothing against).
pub fn alltoall_overlap_applies(
    model: &Model,
    training: &crate::training::Training,
    plan: &ParallelPlan,
) -> bool {
    alltoall_overlap_refusal(model, training, plan).is_none()
}

/// Compute of an MoE layer outside its MoE MLP: what Megatron-Core's fine-grained schedule runs
/// as the layer's "attn" node (attention, its norms and residual, the router), forward and
/// backward.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AttentionSide {
    pub forward_s: f64,
    pub backward_s: f64,
}

/// Exposed all-to-all time of one MoE layer run as a pair under Megatron-Core's combined 1F1B
/// schedule: the forward of one micro-batch beside the backward of another
/// (`TransformerLayerSchedulePlan.run`, megatron/core/models/common/model_chunk_schedule_plan.py,
/// `--overlap-moe-expert-parallel-comm`). The layer runs in three phases, each on a compute and a
/// communication stream, joined by events:
///
/// ```text
/// comm:    combine_bwd | dispatch_fwd -> dispatch_bwd        | combine_fwd
/// compute: attn_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd     | attn_bwd
/// ```
///
/// so each combine hides only behind the other pass's attention side, and the two dispatches
/// behind the three MLP pieces, where `dispatch_bwd` waits for `mlp_bwd` and `mlp_fwd` for
/// `dispatch_fwd`. `one_s` is one all-to-all with its expert-TP gather or scatter; the MLP's
/// backward is split evenly between its input-gradient and weight-gradient halves. The hidden
/// part still costs `penalty` of its time, as every overlap does (`exposed_under`).
pub fn paired_layer_exposed_s(
    one_s: f64,
    attention: AttentionSide,
    mlp: MoeMlpTime,
    penalty: f64,
) -> f64 {
    let (a_f, a_b) = (attention.forward_s.max(0.0), attention.backward_s.max(0.0));
    let (m_f, m_b) = (mlp.forward_s, mlp.backward_s);
    let (dgrad, wgrad) = (m_b / 2.0, m_b / 2.0);
    let first = one_s.max(a_f);
    let dispatch_bwd_end = one_s.max(dgrad) + one_s;
    let mlp_fwd_end = (dgrad + wgrad).max(one_s) + m_f;
    let second = dispatch_bwd_end.max(mlp_fwd_end);
    let third = one_s.max(a_b);
    let compute = a_f + a_b + m_f + m_b;
    let comm = 4.0 * one_s;
    let not_hidden = (first + second + third - compute).clamp(0.0, comm);
    not_hidden + penalty * (comm - not_hidden)
}

/// Share of a stage's forwards (and as many backwards) that the combined 1F1B schedule runs
/// without a partner: the warmup forwards before the first backward and the cooldown backwards
/// after the last forward. Without a pipeline that is one micro-batch of m; with the interleaved
/// schedule the first rank warms up with (pp − 1)·2 + (vpp − 1)·pp model chunks of its m·vpp
/// (Megatron-Core `schedules.py` `get_pp_rank_microbatches`, the most of any rank), plus the one
/// the overlap adds ("When enabling overlap_moe_expert_parallel_comm, we schedule one extra
/// micro-batch forward step before the 1f1b stages", same file).
pub fn unpaired_share(plan: &ParallelPlan) -> f64 {
    let m = f64::from(plan.num_microbatches.max(1));
    if plan.pp == 1 {
        return (1.0 / m).min(1.0);
    }
    let (pp, vpp) = (f64::from(plan.pp), f64::from(plan.vpp));
    let warmup = (pp - 1.0) * 2.0 + (vpp - 1.0) * pp + 1.0;
    (warmup / (m * vpp)).min(1.0)
}

/// Speed of one GPU's all-to-all when its EP group (`ep` ranks at `stride`) spans NVLink domains:
/// the share for the members inside its own domain moves over NVLink while the rest leaves through
/// the GPU's NIC, at the same time, so the whole (ep − 1)/ep of the bytes takes
/// max(remote share / NIC, local share / NVLink). This is the "logical bandwidth" DeepEP reports
/// for hierarchical EP (deepseek-ai/DeepEP README, "Performance": 90 GB/s at EP 8×2 and 61 GB/s at
/// EP 8×4 on 50 GB/s CX7 NICs, which "contains local rank traffic"): with the NIC at its achieved
/// 47 GB/s this gives 47·15/8 = 88 and 47·31/24 = 61 GB/s. One latency per peer as before.
pub fn alltoall_network_speed(cluster: &Cluster, stride: u32, ep: u32) -> LinkSpeed {
    let nic = cluster.link_speed(Link::Network);
    let nvlink = cluster.link_speed(Link::Nvlink);
    let local = domain_members(cluster, stride, ep);
    let peers = f64::from(ep.saturating_sub(1).max(1));
    let remote = f64::from(ep.saturating_sub(local));
    let local_peers = f64::from(local - 1);
    // Seconds per byte of the whole all-to-all: each share over its own link.
    let per_byte = (remote / peers / nic.bandwidth.0).max(local_peers / peers / nvlink.bandwidth.0);
    LinkSpeed {
        bandwidth: BytesPerSec(1.0 / per_byte),
        latency: nic.latency,
    }
}

/// Elements of the expert GEMMs' inputs one MoE layer saves per GPU and micro-batch: the permuted
/// hidden state each routed copy brings to FC1 and its activation output going into FC2 (1/etp of
/// it). Under FP8 Transformer Engine saves these quantized, one byte each instead of two.
pub fn expert_gemm_input_elements(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let etp = f64::from(plan.etp);
    let routed = local_tokens(plan, seq_len) * f64::from(moe.router_topk) * imbalance * etp;
    routed * (model.expert_width() + f64::from(moe.ffn_hidden) / etp)
}

/// Activation bytes one MoE layer's MLP keeps per GPU and micro-batch (instead of the dense MLP's):
/// the permuted input, the expert up projection and the activation output for every routed copy,
/// plus the router's logits, LatentMoE's projection inputs
/// ([`latent_projection_saved_bytes_per_token`]) and the shared experts' MLP at the dense shape.
pub fn moe_mlp_activation_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let tokens = local_tokens(plan, seq_len);
    let etp = f64::from(plan.etp);
    // An expert split over etp GPUs keeps activations for the tokens of all etp of them.
    let routed = tokens * f64::from(moe.router_topk) * imbalance * etp;
    let experts = routed
        * (model.expert_width() + (model.expert_up_width() + f64::from(moe.ffn_hidden)) / etp)
        * ACTIVATION_BYTES;
    let latent = tokens * latent_projection_saved_bytes_per_token(model, plan.precision);
    // The router's scores over every expert, kept in fp32 for the softmax/sigmoid and top-k
    // (Megatron-Core `TopKRouter`, `moe_router_dtype` fp32 in NVIDIA's MoE recipes).
    let router = tokens * f64::from(moe.experts) * 4.0;
    experts + router + latent + shared_expert_activation_bytes(model, plan, seq_len)
}

/// Activation bytes one MoE layer's experts keep per GPU and micro-batch beyond
/// [`moe_mlp_activation_bytes`] when a clamped GLU clamps with kernels of its own
/// (`ExpertEpilogue::eager_glu_clamp`): Megatron-Core's `weighted_bias_quick_geglu_impl`
/// (megatron/core/fusions/fused_bias_geglu.py, from 2e29a5e1e3 "Add quick geglu activation for
/// gpt-oss" through core_v0.15.0 and d98e8a64) chunks the up projection's output into its two
/// halves, clamps each (`x_glu.clamp(max=v)`, `x_linear.clamp(-v, v)`) and `torch.cat`s them
/// before `WeightedBiasQuickGeGLUFunction`, which saves the concatenated copy. Autograd's `clamp`
/// saves its input for `clamp_backward` (PyTorch tools/autograd/derivatives.yaml), and both inputs
/// are views of the up projection's output, so that output stays alive beside the saved copy: one
/// more up-projection-wide bf16 tensor per routed copy (2 × 2F bytes for GPT-OSS's F-wide halves).
/// Zero when the activation is recomputed (`moe_act`, `moe`: the clamps run inside the
/// checkpoint, whose input is that output) or the clamp is fused.
pub fn eager_glu_clamp_saved_bytes(
    model: &Model,
    plan: &ParallelPlan,
    seq_len: u32,
    imbalance: f64,
    epilogue: ExpertEpilogue,
) -> f64 {
    if !epilogue.eager_glu_clamp {
        return 0.0;
    }
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let etp = f64::from(plan.etp);
    let routed = local_tokens(plan, seq_len) * f64::from(moe.router_topk) * imbalance * etp;
    routed * model.expert_up_width() / etp * ACTIVATION_BYTES
}

/// Bytes per token LatentMoE's two projections keep for their weight gradients (0 without a
/// latent width). In bf16 the h → latent projection reads the layer's normed input, which the
/// router keeps already, and the latent → h projection keeps its latent-wide input. Under
/// low-precision GEMMs each `TELinear` saves its own quantized input instead (Transformer Engine
/// `_Linear.forward` keeps the quantized `inputmat` unless `save_original_input`, which
/// Megatron-Core sets only on the shared experts' fc1): one byte per element of h for the first,
/// beside the router's bf16 copy (as the shared experts' copy, `memory::norm_output_bytes`), and
/// one per latent element for the second.
pub fn latent_projection_saved_bytes_per_token(model: &Model, precision: Precision) -> f64 {
    let Some(latent) = model.moe.and_then(|moe| moe.latent_size) else {
        return 0.0;
    };
    let latent = f64::from(latent);
    if precision == Precision::Bf16 {
        latent * ACTIVATION_BYTES
    } else {
        f64::from(model.hidden) + latent
    }
}

/// Activation bytes the shared experts' MLP keeps per GPU and micro-batch, at the dense shape:
/// the up projection's output and the activation's.
pub fn shared_expert_activation_bytes(model: &Model, plan: &ParallelPlan, seq_len: u32) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    let gated = if model.gated_mlp { 2.0 } else { 1.0 };
    local_tokens(plan, seq_len)
        * (gated + 1.0)
        * f64::from(moe.shared_expert_ffn_hidden)
        * ACTIVATION_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, Precision};
    use crate::training::{AttentionKernel, Training, TrainingFramework};

    fn with_experts(experts: u32, topk: u32) -> Model {
        let mut model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let moe = model.moe.as_mut().unwrap();
        moe.experts = experts;
        moe.router_topk = topk;
        model
    }

    const DEEPEP_RANDOM: MoeDispatch = MoeDispatch {
        dispatcher: MoeDispatcher::Deepep,
        routing: MoeRouting::Random,
        router_padding: false,
    };
    const DEEPEP_ROUND_ROBIN: MoeDispatch = MoeDispatch {
        dispatcher: MoeDispatcher::Deepep,
        routing: MoeRouting::RoundRobin,
        router_padding: false,
    };

    #[test]
    fn deepep_with_random_routing_sends_one_copy_per_gpu_reached() {
        // 8 experts, top-2, ep 4 (2 experts per GPU): enumerate the 28 expert pairs a token on
        // GPU 0 can pick and count the other GPUs each reaches.
        let mut reached = 0u32;
        let mut pairs = 0u32;
        for a in 0..8u32 {
            for b in a + 1..8 {
                let (ga, gb) = (a / 2, b / 2);
                reached += u32::from(ga != 0) + u32::from(gb != 0 && gb != ga);
                pairs += 1;
            }
        }
        let enumerated = f64::from(reached) / f64::from(pairs);
        let model = with_experts(8, 2);
        let closed_form = remote_copies_per_token(&model, 4, DEEPEP_RANDOM);
        assert!(
            (closed_form - enumerated).abs() < 1e-12,
            "{closed_form} vs {enumerated}"
        );
        // The all-to-all sends both copies, 3/4 of them elsewhere.
        let alltoall = remote_copies_per_token(&model, 4, MoeDispatch::default());
        assert!((alltoall - 1.5).abs() < 1e-12);
        assert!(closed_form < alltoall);
    }

    #[test]
    fn group_limited_routing_reaches_the_blocks_its_groups_hold() {
        // 12 experts in 6 groups of 2, a token's top-3 from 2 of the groups: enumerate the draw
        // the closed form assumes (every pair of groups, one expert from each, the third from the
        // two left) and count the blocks other than block 0 each reaches, for blocks of 1 expert
        // (inside a group), 2 (one group), 4 (whole groups: 2) and 6 (3 groups).
        let mut model = with_experts(12, 3);
        let moe = model.moe.as_mut().unwrap();
        moe.router_groups = 6;
        moe.router_group_topk = 2;
        for blocks in [12u32, 6, 3, 2] {
            let per_block = 12 / blocks;
            let (mut reached, mut draws) = (0u32, 0u32);
            for g1 in 0..6u32 {
                for g2 in g1 + 1..6 {
                    for (a, b) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                        let (first, second) = (2 * g1 + a, 2 * g2 + b);
                        let rest = [2 * g1 + 1 - a, 2 * g2 + 1 - b];
                        for third in rest {
                            let mut hit: Vec<u32> = [first, second, third]
                                .iter()
                                .map(|e| e / per_block)
                                .collect();
                            hit.sort_unstable();
                            hit.dedup();
                            reached += hit.iter().filter(|b| **b != 0).count() as u32;
                            draws += 1;
                        }
                    }
                }
            }
            let enumerated = f64::from(reached) / f64::from(draws);
            let closed_form = other_blocks_reached(&model, blocks, MoeRouting::Random);
            assert!(
                (closed_form - enumerated).abs() < 1e-12,
                "{blocks} blocks: {closed_form} vs {enumerated}"
            );
        }
        // DeepSeek-V3 on EP 64 over 8 nodes (a node holds one of its 8 groups): its 4 groups, 7/8
        // of them on other nodes, fewer than the 4.63 other nodes its top-8 would reach without
        // the limit.
        let deepseek = crate::specs::load_model("deepseek-v3").unwrap();
        let limited = other_blocks_reached(&deepseek, 8, MoeRouting::Random);
        let mut free = deepseek.clone();
        free.moe.as_mut().unwrap().router_groups = 0;
        free.moe.as_mut().unwrap().router_group_topk = 0;
        let unlimited = other_blocks_reached(&free, 8, MoeRouting::Random);
        assert!((limited - 3.5).abs() < 1e-9, "{limited}");
        assert!((unlimited - 4.633).abs() < 0.01, "{unlimited}");
    }

    #[test]
    fn group_limited_routing_tracks_megatron_cores_rule() {
        // Megatron-Core `group_limited_topk` on DeepSeek-V3's shape (256 experts, 8 groups, a
        // token's top-8 from the 4 groups with the best sum of their top-2 sigmoid scores),
        // simulated on random logits, against the closed form, for blocks of 4 experts (a GPU
        // at EP 64), 16, 32 (a group: a node at EP 64) and 64. Drawing the 8 uniformly from the
        // 4 groups would read 3.18 nodes instead of about 3.47 and fail this.
        let model = crate::specs::load_model("deepseek-v3").unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut uniform = move || {
            // xorshift64*: a fixed stream, so the test is deterministic.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        };
        let tokens = 6000;
        let block_sizes = [4u32, 16, 32, 64];
        let mut reached = [0u64; 4];
        for _ in 0..tokens {
            let scores: Vec<f64> = (0..256)
                .map(|_| {
                    // Box–Muller normal logit through DeepSeek-V3's sigmoid score function.
                    let (u, v) = (uniform().max(1e-300), uniform());
                    let logit = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                    1.0 / (1.0 + (-logit).exp())
                })
                .collect();
            let mut group_scores: Vec<(f64, usize)> = (0..8)
                .map(|g| {
                    let mut group: Vec<f64> = scores[32 * g..32 * g + 32].to_vec();
                    group.sort_by(|a, b| b.total_cmp(a));
                    (group[0] + group[1], g)
                })
                .collect();
            group_scores.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut candidates: Vec<usize> = group_scores[..4]
                .iter()
                .flat_map(|&(_, g)| 32 * g..32 * g + 32)
                .collect();
            candidates.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
            for (i, size) in block_sizes.iter().enumerate() {
                let mut hit: Vec<usize> =
                    candidates[..8].iter().map(|e| e / *size as usize).collect();
                hit.sort_unstable();
                hit.dedup();
                reached[i] += hit.iter().filter(|b| **b != 0).count() as u64;
            }
        }
        for (i, size) in block_sizes.iter().enumerate() {
            let simulated = reached[i] as f64 / f64::from(tokens);
            let closed_form = other_blocks_reached(&model, 256 / size, MoeRouting::Random);
            assert!(
                (closed_form / simulated - 1.0).abs() < 0.025,
                "blocks of {size}: closed form {closed_form:.3}, simulated {simulated:.3}"
            );
        }
    }

    #[test]
    fn group_limited_routing_stays_finite_at_thousands_of_groups() {
        // One expert per group and a token taking top-k of k groups is the same draw as no
        // limit: k distinct experts of E. At 2,048 groups and top-1,024 the binomials reach
        // 10^600, past f64, so this holds only if the odds are computed without them.
        let mut model = with_experts(2048, 1024);
        let free = other_blocks_reached(&model, 2, MoeRouting::Random);
        let moe = model.moe.as_mut().unwrap();
        moe.router_groups = 2048;
        moe.router_group_topk = 1024;
        for blocks in [2u32, 16, 2048] {
            let limited = other_blocks_reached(&model, blocks, MoeRouting::Random);
            assert!(
                limited.is_finite() && limited >= 0.0 && limited <= f64::from(blocks - 1),
                "{blocks} blocks: {limited}"
            );
        }
        let limited = other_blocks_reached(&model, 2, MoeRouting::Random);
        assert!((limited - free).abs() < 1e-9, "{limited} vs {free}");
    }

    #[test]
    fn round_robin_routing_reaches_as_few_gpus_as_neighbouring_experts_span() {
        // Qwen3-30B-A3B, 128 experts top-8 on ep 8 (16 per GPU): token t's experts 8t..8t+7 sit
        // on one GPU, so DeepEP sends one copy, 7/8 of the time elsewhere (NeMo AutoModel's fake
        // balanced gate). GPT-OSS-120B, 128 experts top-4 on ep 64 (2 per GPU): two GPUs.
        let qwen = with_experts(128, 8);
        let one = remote_copies_per_token(&qwen, 8, DEEPEP_ROUND_ROBIN);
        assert!((one - 7.0 / 8.0).abs() < 1e-12, "{one}");
        let gpt_oss = with_experts(128, 4);
        let two = remote_copies_per_token(&gpt_oss, 64, DEEPEP_ROUND_ROBIN);
        assert!((two - 2.0 * 63.0 / 64.0).abs() < 1e-12, "{two}");
        // Top-3 of 8 experts on ep 4 (2 per GPU): each start (0, 3, 6, 1, 4, 7, 2, 5) covers three
        // neighbours on two GPUs (e.g. 6, 7, 0 on GPUs 3, 3, 0), 3/4 of them elsewhere.
        let odd = with_experts(8, 3);
        let reached = remote_copies_per_token(&odd, 4, DEEPEP_ROUND_ROBIN);
        assert!((reached - 2.0 * 3.0 / 4.0).abs() < 1e-12, "{reached}");
        // The all-to-all dispatcher sends every copy whatever the routing.
        let alltoall = MoeDispatch {
            dispatcher: MoeDispatcher::Alltoall,
            routing: MoeRouting::RoundRobin,
            router_padding: false,
        };
        assert!((remote_copies_per_token(&qwen, 8, alltoall) - 7.0).abs() < 1e-12);
    }

    #[test]
    fn expert_flops_do_not_depend_on_how_the_experts_are_split() {
        // The routed tokens' expert FLOPs per GPU are the same whether the 8 experts are spread
        // over 8 GPUs (ep 8) or each split over them (etp 8): tokens·top-k·expert FLOPs / GPUs.
        // (An etp plan once divided the tokens by etp twice and reported MFU over 100%.)
        let model = crate::specs::load_model("mixtral-8x7b").unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 2,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            256,
            AttentionKernel::Flash,
        );
        let flops = |ep, etp| {
            let request = PlanRequest {
                tp: 8,
                dp: 2,
                ep,
                etp,
                sequence_parallel: true,
                micro_batch: 1,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let moe = model.moe.unwrap();
            let tokens = local_tokens(&plan, 4096) * f64::from(moe.router_topk) * f64::from(etp);
            let per_expert = tokens * f64::from(ep) / f64::from(moe.experts);
            let local = f64::from(moe.experts) / f64::from(ep);
            // up + down GEMMs of the local experts' slices
            2.0 * per_expert
                * local
                * (model.hidden as f64)
                * (model.expert_up_width() + f64::from(moe.ffn_hidden))
                / f64::from(etp)
        };
        let (a, b) = (flops(8, 1), flops(1, 8));
        assert!((a / b - 1.0).abs() < 1e-12, "{a} vs {b}");
        // And the estimate's MFU stays below 1 for the etp plan.
        let request = PlanRequest {
            tp: 8,
            dp: 2,
            etp: 8,
            sequence_parallel: true,
            micro_batch: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let e = crate::cost::evaluate(&model, &cluster, &training, &plan);
        assert!(
            e.mfu < 1.0 && e.hardware_tflops_per_gpu < 989.5,
            "{} {}",
            e.mfu,
            e.hardware_tflops_per_gpu
        );
    }

    fn h100_nodes(nodes: u32) -> Cluster {
        Cluster {
            gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes,
            gpus_per_node: 8,
        }
    }

    #[test]
    fn hierarchical_alltoall_matches_deepep_logical_bandwidth() {
        // deepseek-ai/DeepEP README, "Performance" (SM90, CX7 400 Gb/s NICs): 90 GB/s dispatch at
        // EP 8x2 and 61 GB/s at EP 8x4, logical bandwidth including the NVLink-local share. Before
        // the local share moved over NVLink, tpsim charged every byte to the NIC (47 GB/s). These
        // are DeepEP's numbers; its one-copy-per-node forwarding reproduces them as well (94 and
        // 63 GB/s, `deepep_forwarding_reproduces_its_published_logical_bandwidth`), so they bound
        // the NIC-plus-NVLink split rather than tell the two dispatchers apart.
        for (nodes, published_gb_per_s) in [(2, 90.0), (4, 61.0)] {
            let cluster = h100_nodes(nodes);
            let speed = alltoall_network_speed(&cluster, 1, 8 * nodes);
            let gb_per_s = speed.bandwidth.0 / 1e9;
            assert!(
                (gb_per_s / published_gb_per_s - 1.0).abs() < 0.05,
                "EP 8x{nodes}: {gb_per_s:.1} GB/s vs DeepEP {published_gb_per_s}"
            );
        }
        // A group with one member per node (stride 8) has no local share, and 3 consecutive GPUs
        // straddle node boundaries unevenly (the group over ranks 6-8 has a lone member on the
        // next node): the NIC alone, as before.
        let nic = h100_nodes(4).link_speed(Link::Network).bandwidth.0;
        for (stride, ep) in [(8, 4), (1, 3)] {
            let speed = alltoall_network_speed(&h100_nodes(4), stride, ep)
                .bandwidth
                .0;
            assert!((speed / nic - 1.0).abs() < 1e-12, "stride {stride} ep {ep}");
        }
    }

    #[test]
    fn deepep_forwarding_reproduces_its_published_logical_bandwidth() {
        // DeepEP V2's README ("Performance", SM90 with CX7 400 Gb/s NICs, V3's configuration: 256
        // experts, top-8, balanced gate): 90 GB/s dispatch at EP 8x2 and 61 GB/s at EP 8x4, logical
        // bandwidth that "contains local rank traffic", i.e. every node a token reaches, its own
        // included, over the time its RDMA sends to the other nodes take. With one RDMA copy per
        // other node reached and the NIC at its achieved 47 GB/s: 94 and 63 GB/s.
        let model = crate::specs::load_model("deepseek-v3").unwrap();
        for (nodes, published_gb_per_s) in [(2u32, 90.0), (4, 61.0)] {
            let cluster = h100_nodes(nodes);
            let ep = 8 * nodes;
            let speed = deepep_network_speed(&model, &cluster, 1, ep, MoeRouting::Random);
            let gpu_copies = remote_copies_per_token(&model, ep, DEEPEP_RANDOM);
            let other_nodes = other_blocks_reached(&model, nodes, MoeRouting::Random);
            let nodes_reached = other_nodes * f64::from(nodes) / f64::from(nodes - 1);
            // Seconds per token-byte of the dispatch, then the logical rate over the nodes reached.
            let seconds = gpu_copies / speed.bandwidth.0;
            let logical_gb_per_s = nodes_reached / seconds / 1e9;
            assert!(
                (logical_gb_per_s / published_gb_per_s - 1.0).abs() < 0.06,
                "EP 8x{nodes}: {logical_gb_per_s:.1} GB/s vs DeepEP {published_gb_per_s}"
            );
            // The NIC sets the pace (one copy per node instead of one per GPU): several times the
            // all-to-all's speed per GPU copy.
            let alltoall = alltoall_network_speed(&cluster, 1, ep).bandwidth.0;
            assert!(speed.bandwidth.0 > 2.0 * alltoall, "EP 8x{nodes}");
        }
        // Inside one NVLink domain the group's own NVLink speed applies (no forwarding).
        let one_node = h100_nodes(1);
        let groups = crate::cost::groups::groups(
            &one_node,
            &ParallelPlan::build(
                &PlanRequest {
                    dp: 8,
                    ep: 8,
                    ..PlanRequest::default()
                },
                &model,
                &one_node,
                &Training::with_framework(
                    TrainingFramework::MegatronCore,
                    4096,
                    8,
                    AttentionKernel::Flash,
                ),
            )
            .unwrap(),
        );
        let group = groups.get(crate::cost::groups::GroupKind::Ep);
        assert_eq!(group.link, Link::Nvlink);
        // EP 12 over 8-GPU nodes puts 8 + 4 and 4 + 8 members in the nodes it spans: unequal
        // blocks, which the forwarding model does not cover, so the all-to-all's speed stands;
        // EP 24 (three whole nodes) is forwarded.
        let three_nodes = h100_nodes(3);
        for (ep, forwarded) in [(12u32, false), (24, true)] {
            let deepep = deepep_network_speed(&model, &three_nodes, 1, ep, MoeRouting::Random);
            let alltoall = alltoall_network_speed(&three_nodes, 1, ep);
            assert_eq!(
                deepep.bandwidth.0 != alltoall.bandwidth.0,
                forwarded,
                "EP {ep}"
            );
        }
    }

    #[test]
    fn straddling_groups_keep_their_smallest_domain_block_on_nvlink() {
        use crate::cost::groups::smallest_domain_block;
        // EP 128 over 72-GPU NVL72 domains: group 3 spans ranks 384-511, i.e. 48 GPUs of one rack,
        // 72 of the next and 8 of a third; its 8-GPU block is the worst of all groups.
        assert_eq!(smallest_domain_block(128, 72, 72), 8);
        // Groups that tile the domains keep whole domains local; ones inside a domain, all.
        assert_eq!(smallest_domain_block(16, 8, 8), 8);
        assert_eq!(smallest_domain_block(144, 72, 8), 72);
        assert_eq!(smallest_domain_block(4, 8, 8), 4);
        // EP 64 on NVL72: the group over ranks 64-127 has 8 GPUs in the first rack.
        assert_eq!(smallest_domain_block(64, 72, 8), 8);
        // Only the groups that exist count: one group of 64 over ranks 0-63 stays whole.
        assert_eq!(smallest_domain_block(64, 72, 1), 64);
        // No longer all on the NIC: faster than the NIC alone once a block stays on NVLink.
        let gb200 = Cluster {
            gpu: crate::specs::load_gpu("gb200-nvl72").unwrap(),
            nodes: 64,
            gpus_per_node: 4,
        };
        let nic = gb200.link_speed(Link::Network).bandwidth.0;
        let ep128 = alltoall_network_speed(&gb200, 1, 128).bandwidth.0;
        assert!(ep128 > nic, "{ep128} vs {nic}");
    }

    #[test]
    fn experts_and_shared_experts_pay_their_weight_gradient_buffers_in_the_backward() {
        // DeepSeek-V3 at ep 8, one 4K sequence: 32 local experts see 1,024 tokens each. With the
        // fused accumulation the backward grows by the routed and shared experts' wgrad extras
        // and nothing else; the forward does not move.
        let model = crate::specs::load_model("deepseek-v3").unwrap();
        let cluster = h100_nodes(1);
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            64,
            AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 1,
            dp: 8,
            ep: 8,
            micro_batch: 1,
            allow_uneven_pp: true,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let fused = CastSetting::of(&training, &plan);
        assert_eq!(
            fused.wgrad_accumulates_into,
            Some(crate::training::GradDtype::Fp32)
        );
        let fresh = CastSetting {
            wgrad_accumulates_into: None,
            ..fused
        };
        let time = |cast| {
            moe_mlp_time(
                &model,
                &cluster,
                &plan,
                4096,
                1.0,
                MoeDispatcher::Alltoall,
                cast,
                ExpertEpilogue::default(),
            )
        };
        let (with, without) = (time(fused), time(fresh));
        assert_eq!(with.forward_s, without.forward_s);
        let moe = model.moe.unwrap();
        let h = f64::from(model.hidden);
        let per_expert = 4096.0 * 8.0 * 8.0 / 256.0;
        let up = Gemm {
            m: per_expert,
            k: h,
            n: model.expert_up_width(),
            batch: 32.0,
        };
        let down = Gemm {
            m: per_expert,
            k: f64::from(moe.ffn_hidden),
            n: h,
            batch: 32.0,
        };
        let [shared_up, shared_down] = shared_expert_gemms(&model, &plan, 4096).unwrap();
        let extras: f64 = [up, down, shared_up, shared_down]
            .iter()
            .map(|g| wgrad_accumulation_s(g, &cluster, fused))
            .sum();
        assert!(
            extras > 0.0,
            "1,024 tokens against an fp32 buffer reach the memory roof"
        );
        let grown = with.backward_s - without.backward_s;
        let expected = extras / cluster.gpu.framework_efficiency;
        assert!(
            (grown - expected).abs() < 1e-12 + 1e-9 * expected,
            "{grown} vs {expected}"
        );
    }

    #[test]
    fn fp8_expert_gemms_run_at_the_fp8_rate() {
        // Megatron-Core's TEGroupedMLP runs the experts inside the FP8 autocast: Grok-1's large
        // experts (16K tokens x 6144 x 65536) must come out faster in FP8 than in bf16, by the
        // same GEMM-time ratio the dense linears get. (The experts were once timed in bf16 under
        // every precision, which predicted the dgxc Grok-1 FP8 runs 20-28% too slow.)
        let model = crate::specs::load_model("grok-1").unwrap();
        let cluster = h100_nodes(4);
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            8192,
            256,
            AttentionKernel::Flash,
        );
        let time = |precision| {
            let request = PlanRequest {
                tp: 4,
                dp: 8,
                ep: 8,
                etp: 4,
                sequence_parallel: true,
                micro_batch: 1,
                precision,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            moe_mlp_forward_s(
                &model,
                &cluster,
                &plan,
                8192,
                1.0,
                MoeDispatcher::Alltoall,
                CastSetting::of(&training, &plan),
                ExpertEpilogue::default(),
            )
        };
        let (bf16, fp8) = (time(Precision::Bf16), time(Precision::Fp8));
        let gpu = &cluster.gpu;
        let rate_ratio =
            gpu.linear_gemm_flops(Precision::Bf16).0 / gpu.linear_gemm_flops(Precision::Fp8).0;
        // The GEMMs dominate; casts and permutation keep the ratio above the pure rate ratio.
        assert!(fp8 / bf16 < 0.5 * (1.0 + rate_ratio), "{fp8} vs {bf16}");
        assert!(fp8 / bf16 > rate_ratio, "{fp8} vs {bf16}");
    }

    #[test]
    fn several_local_experts_pay_the_second_permutation() {
        // Mixtral 8x7B on 8 GPUs, the same tokens per GPU: at ep 8 each GPU holds one expert and
        // the received copies are already grouped; at ep 4 it holds two and the alltoall
        // dispatcher sorts them by local expert and back, doubling the permutation traffic.
        let model = crate::specs::load_model("mixtral-8x7b").unwrap();
        let cluster = h100_nodes(1);
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            64,
            AttentionKernel::Flash,
        );
        let bytes_with = |ep, dispatcher| {
            let request = PlanRequest {
                dp: 8,
                ep,
                micro_batch: 1,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            permutation_bytes(&model, &plan, 4096, 1.0, dispatcher)
        };
        let bytes = |ep| bytes_with(ep, MoeDispatcher::Alltoall);
        let (one, two) = (bytes(8), bytes(4));
        let row = 4096.0 * 2.0;
        let (tokens, copies) = (4096.0, 2.0 * 4096.0);
        // Permutation 1: the permute reads 4096 tokens and writes their top-2 copies, the
        // unpermute reads the copies and writes the tokens.
        let first = 2.0 * (tokens + copies) * row;
        assert!((one / first - 1.0).abs() < 1e-12, "{one} vs {first}");
        // Permutation 2 at ep 4 (two local experts): every received copy read and written each way.
        let second = 4.0 * copies * row;
        assert!((two / (first + second) - 1.0).abs() < 1e-12, "{two}");
        // DeepEP sends tokens, not copies: one permutation after the dispatch at any ep, from the
        // received tokens to copies and back.
        assert_eq!(bytes_with(4, MoeDispatcher::Deepep), second);
        assert_eq!(bytes_with(8, MoeDispatcher::Deepep), second);
    }

    /// FP8 pads each expert's rows to 16: the all-to-all dispatcher pads every expert's count on
    /// the sending rank, before the dispatch; DeepEP pads its own experts after it, off the wire.
    #[test]
    fn fp8_padding_rides_the_all_to_all_only_before_deepep_would_send() {
        let model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let cluster = h100_nodes(2);
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            64,
            AttentionKernel::Flash,
        );
        let request = PlanRequest {
            dp: 16,
            ep: 16,
            micro_batch: 1,
            precision: Precision::Fp8,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        // 4,096 tokens x top-8 copies a rank; 128 experts x 7.5 padding rows, or 8 local ones.
        let copies = 4096.0 * 8.0;
        let site = |dispatcher, router_padding| MoeDispatch {
            dispatcher,
            router_padding,
            ..MoeDispatch::default()
        };
        let router = site(MoeDispatcher::Alltoall, true);
        let alltoall = padded_copies_factor(&model, &plan, 4096, router);
        assert!((alltoall - (1.0 + 128.0 * 7.5 / copies)).abs() < 1e-12);
        let local = 1.0 + 8.0 * 7.5 / copies;
        for after in [
            site(MoeDispatcher::Alltoall, false),
            site(MoeDispatcher::Deepep, false),
            site(MoeDispatcher::Deepep, true),
        ] {
            assert!((padded_copies_factor(&model, &plan, 4096, after) - local).abs() < 1e-12);
            let training = Training {
                moe_dispatch: after,
                ..training
            };
            assert_eq!(wire_load(&model, &training, &plan), 1.0);
            assert_eq!(routed_load(&model, &training, &plan), local);
        }
        let with_router = Training {
            moe_dispatch: router,
            ..training
        };
        assert_eq!(wire_load(&model, &with_router, &plan), alltoall);
        // bf16 pads nothing.
        let bf16 = ParallelPlan {
            precision: Precision::Bf16,
            ..plan
        };
        assert_eq!(padded_copies_factor(&model, &bf16, 4096, router), 1.0);
    }

    /// The backward of a token permutation is its inverse, the same bytes: an MoE layer's
    /// backward is twice its forward less the permutations once.
    #[test]
    fn permutations_cost_the_backward_once() {
        let model = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let cluster = h100_nodes(1);
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            64,
            AttentionKernel::Flash,
        );
        let request = PlanRequest {
            dp: 8,
            ep: 8,
            micro_batch: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let t = moe_mlp_time(
            &model,
            &cluster,
            &plan,
            4096,
            1.0,
            MoeDispatcher::Alltoall,
            CastSetting::BF16,
            ExpertEpilogue::default(),
        );
        let gpu = &cluster.gpu;
        let permute_s = permutation_bytes(&model, &plan, 4096, 1.0, MoeDispatcher::Alltoall)
            / gpu.achieved_hbm_bandwidth().0
            / gpu.framework_efficiency;
        assert!(permute_s > 0.0);
        assert!((t.backward_s - (2.0 * t.forward_s - permute_s)).abs() < 1e-12 * t.forward_s);
    }

    #[test]
    fn megatron_core_pays_the_biased_and_clamped_experts_eager_epilogues() {
        // GPT-OSS-120B (biased experts, clamped GLU) under Megatron-Core: the output bias costs
        // 6h elements each way per routed copy; the 25.11 release's clamp 8 and 6 inner widths.
        let model = crate::specs::load_model("gpt-oss-120b").unwrap();
        let core = crate::training::TrainingFramework::MegatronCore;
        let mut training =
            Training::with_framework(core, 4096, 64, crate::training::AttentionKernel::Flash);
        let today = ExpertEpilogue::of(&model, &training);
        assert!(today.eager_output_bias && !today.eager_glu_clamp);
        training.eager_glu_clamp = true;
        let release_25_11 = ExpertEpilogue::of(&model, &training);
        assert!(release_25_11.eager_output_bias && release_25_11.eager_glu_clamp);
        let (h, f) = (2880.0, 2880.0);
        assert_eq!(today.bytes_per_routed_copy(f, h), (12.0 * h, 12.0 * h));
        assert_eq!(
            release_25_11.bytes_per_routed_copy(f, h),
            (12.0 * h + 16.0 * f, 12.0 * h + 12.0 * f)
        );
        // No biases (DeepSeek-V3), or a framework whose kernels tpsim does not list: nothing
        // but Megatron-Core's explicit low-precision padding, which router padding turns off.
        let deepseek = crate::specs::load_model("deepseek-v3").unwrap();
        assert_eq!(
            ExpertEpilogue::of(&deepseek, &training),
            ExpertEpilogue {
                explicit_quantization_padding: true,
                ..ExpertEpilogue::default()
            }
        );
        training.moe_dispatch.router_padding = true;
        assert_eq!(
            ExpertEpilogue::of(&deepseek, &training),
            ExpertEpilogue::default()
        );
        let titan = Training::with_framework(
            crate::training::TrainingFramework::Torchtitan,
            4096,
            64,
            crate::training::AttentionKernel::Flash,
        );
        assert_eq!(
            ExpertEpilogue::of(&model, &titan),
            ExpertEpilogue::default()
        );
        // torchtitan's own GPT-OSS experts, eager: 22F + 4D forward, 47F + D backward.
        let mut own_code = titan;
        own_code.torchtitan_gpt_oss_experts = true;
        let eager = ExpertEpilogue::of(&model, &own_code);
        assert!(eager.torchtitan_eager_experts && !eager.eager_output_bias);
        assert_eq!(
            eager.bytes_per_routed_copy(f, h),
            (2.0 * (22.0 * f + 4.0 * h), 2.0 * (47.0 * f + h))
        );
        own_code.kernel_fusion = crate::training::KernelFusion::Fused;
        assert_eq!(
            ExpertEpilogue::of(&model, &own_code),
            ExpertEpilogue::default()
        );
        // The bytes land on the layer: the same plan is slower by them at the achieved bandwidth.
        let cluster = h100_nodes(8);
        let request = crate::plan::PlanRequest {
            tp: 1,
            pp: 1,
            dp: 64,
            ep: 64,
            micro_batch: 1,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let time = |epilogue| {
            moe_mlp_time(
                &model,
                &cluster,
                &plan,
                4096,
                1.0,
                MoeDispatcher::Alltoall,
                CastSetting::BF16,
                epilogue,
            )
        };
        let (plain, with) = (time(ExpertEpilogue::default()), time(release_25_11));
        let routed = 4096.0 * 4.0;
        let per_byte =
            1.0 / cluster.gpu.achieved_hbm_bandwidth().0 / cluster.gpu.framework_efficiency;
        let (fwd, bwd) = release_25_11.bytes_per_routed_copy(f, h);
        assert!(
            ((with.forward_s - plain.forward_s) / (routed * fwd * per_byte) - 1.0).abs() < 1e-9
        );
        assert!(
            ((with.backward_s - plain.backward_s) / (routed * bwd * per_byte) - 1.0).abs() < 1e-9
        );
    }

    #[test]
    fn paired_all_to_alls_hide_only_behind_the_compute_beside_them() {
        let mlp = MoeMlpTime {
            forward_s: 4.0,
            backward_s: 8.0,
            weight_grad_s: 4.0,
        };
        let wide = AttentionSide {
            forward_s: 3.0,
            backward_s: 6.0,
        };
        // Every all-to-all shorter than the compute beside it: only the overlap's cost remains.
        let hidden = paired_layer_exposed_s(2.0, wide, mlp, 0.15);
        assert!((hidden - 0.15 * 8.0).abs() < 1e-12, "{hidden}");
        // A narrow attention side leaves the combines exposed although the layer's whole backward
        // (14 s) would cover the forward's two all-to-alls (4 s): the combine of the backward waits
        // beside the forward's attention alone (1 s), the forward's beside the backward's (2 s).
        let narrow = AttentionSide {
            forward_s: 1.0,
            backward_s: 2.0,
        };
        let exposed = paired_layer_exposed_s(2.0, narrow, mlp, 0.0);
        assert!((exposed - 1.0).abs() < 1e-12, "{exposed}");
        // All-to-alls longer than everything: the three phases run at the communication's pace.
        let slow = paired_layer_exposed_s(20.0, narrow, mlp, 0.0);
        let phases = 20.0 + (20.0_f64 + 20.0).max(20.0 + 4.0) + 20.0;
        assert!(
            (slow - (phases - (1.0 + 2.0 + 4.0 + 8.0))).abs() < 1e-9,
            "{slow}"
        );
    }
}
