//! torchtitan out, GPT-OSS part: which torchtitan/models/gpt_oss flavor builds a tpsim GPT-OSS
//! model, what of a GPT-OSS plan that module does not run as tpsim priced it, and what tpsim's
//! price leaves out of what it runs (`torchtitan_moe.rs` writes the MoE recipe lines). The
//! experts' eager bias adds and clamped SwiGLU are priced (`cost::moe::ExpertEpilogue`), the
//! attention sinks' rescale is not.
//!
//! Read at pytorch/torchtitan b5bcd76c66d0 (no PyTorch run here). torchtitan/models/gpt_oss/
//! __init__.py registers `gptoss_configs` "debugmodel", "20b" and "120b": dim 2880, per-expert
//! hidden_dim 2880, 64 query heads, 8 K/V heads of 64 (`_make_gptoss_attn_config` defaults), vocab
//! 201088, top_k 4, RMSNorm, biases on every linear (`bias=True`, router gate included), a
//! 128-token causal window on the even layers (`_build_gptoss_layers`: `sliding_window_size=128 if
//! layer_id % 2 == 0`), learned per-head attention sinks, experts clamped at `swiglu_limit` 7.0
//! (moe.py `GptOssGroupedExperts`), YaRN RoPE (`CosSinRoPE.Config(theta=150000.0, scaling="yarn",
//! rope_factor=32, original_seq_len=4096, max_context_length=131072)`), untied output. Its recipes
//! `gpt_oss_20b` / `gpt_oss_120b` (config_registry.py) set data, tokenizer and optimizer.
//! `parallelize_gptoss` (parallelize.py) runs TP, EP, FSDP/HSDP, activation checkpointing and
//! per-block compile; `model_registry` pipelines with `pipeline_llm`; the integration tests run
//! FSDP+TP+EP+compile and PP+FSDP+EP+SAC with varlen attention, CP only with FlexAttention
//! (torchtitan_recipes/tests/models.py).

use super::torchtitan::TORCHTITAN_COMMIT;
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, Precision};
use crate::training::{KernelFusion, Training};

/// The shape every gpt_oss flavor but the debug model shares (`_20b`, `_120b`).
const DIM: u32 = 2880;
const EXPERT_FFN: u32 = 2880;
const HEADS: u32 = 64;
const KV_HEADS: u32 = 8;
const HEAD_DIM: u32 = 64;
const VOCAB: u32 = 201088;
const TOP_K: u32 = 4;
/// `sliding_window_size=128` on the even layers; tpsim's `full_every` 2 windows layer 0, as
/// torchtitan does (the bundled models' `attention_window`).
const WINDOW_TOKENS: u32 = 128;
/// `GptOssGroupedExperts.Config.swiglu_limit`.
const SWIGLU_LIMIT: f64 = 7.0;
/// `CosSinRoPE.Config(theta=150000.0)` in both flavors.
pub(super) const ROPE_THETA: f64 = 150000.0;
/// `max_context_length=131072`: decoder.py raises "Training sequence length ... exceeds attention
/// RoPE maximum" past it.
pub(super) const MAX_CONTEXT: u32 = 131072;

/// A shipped gpt_oss flavor: its name in `gptoss_configs`, its recipe, and what sets it apart.
pub(super) struct Flavor {
    pub(super) name: &'static str,
    pub(super) recipe: &'static str,
    layers: u32,
    experts: u32,
}

const FLAVORS: [Flavor; 2] = [
    // `_20b`: n_layers 24, num_experts 32.
    Flavor {
        name: "20b",
        recipe: "gpt_oss_20b",
        layers: 24,
        experts: 32,
    },
    // `_120b`: n_layers 36, num_experts 128.
    Flavor {
        name: "120b",
        recipe: "gpt_oss_120b",
        layers: 36,
        experts: 128,
    },
];

/// Whether `model` is GPT-OSS-like: experts that clamp their GLU, as only GPT-OSS's do (the rule
/// `Framework::unsaid_gpt_oss_details` reads too). Such a model is torchtitan's gpt_oss module's
/// or none.
pub(super) fn is_gpt_oss(model: &Model) -> bool {
    model
        .moe
        .as_ref()
        .is_some_and(|moe| moe.glu_clamp_limit.is_some())
}

/// The shipped flavor `model` is (a GPT-OSS model [`model_unsupported`] passes; the RoPE base
/// aside, which the recipe overrides).
pub(super) fn flavor_of(model: &Model) -> Option<&'static Flavor> {
    let moe = model.moe.as_ref()?;
    if !is_gpt_oss(model) || model_unsupported(model).is_some() {
        return None;
    }
    FLAVORS
        .iter()
        .find(|f| (f.layers, f.experts) == (model.layers, moe.experts))
}

/// What of a GPT-OSS-like `model` torchtitan's gpt_oss module does not build, or None: its block
/// (biases, clamped SwiGLU experts, windows on the even layers) and a flavor's shape.
pub(super) fn model_unsupported(model: &Model) -> Option<String> {
    let moe = model.moe.as_ref()?;
    let name = &model.name;
    let part = if model.norm != Norm::Rmsnorm {
        "LayerNorm".to_string()
    } else if !model.gated_mlp {
        "two-matrix experts".to_string()
    } else if !model.linear_bias {
        "linear layers without biases".to_string()
    } else if model.qk_norm || model.mla.is_some() {
        "query/key norms or latent attention".to_string()
    } else if model.shared_layer_norm || model.dropout || model.tied_embeddings {
        "a shared norm, dropout or a tied output layer".to_string()
    } else if !matches!(
        model.position_embedding,
        PositionEmbedding::Rope | PositionEmbedding::Yarn
    ) || model.rotary_percent.is_some_and(|share| share != 1.0)
    {
        format!(
            "{} positions on {} of each head's width",
            model.position_embedding.as_str(),
            model.rotary_percent.unwrap_or(1.0)
        )
    } else if moe.shared_expert_ffn_hidden > 0
        || moe.first_dense_layers > 0
        || moe.layer_freq != 1
        || moe.router_groups > 0
        || moe.latent_size.is_some()
        || moe.shared_expert_gate
    {
        "shared experts, dense layers, group-limited routing or latent-width experts".to_string()
    } else if moe.glu_clamp_limit.map(|l| l.get()) != Some(SWIGLU_LIMIT) {
        format!(
            "its experts' GLU clamped at {} (gpt_oss's swiglu_limit is {SWIGLU_LIMIT})",
            moe.glu_clamp_limit.map_or(0.0, |l| l.get())
        )
    } else if model
        .attention_window
        .is_none_or(|w| (w.tokens, w.full_every) != (WINDOW_TOKENS, 2))
    {
        let window = model.attention_window.map_or("none".to_string(), |w| {
            format!("{} tokens, full attention every {}", w.tokens, w.full_every)
        });
        format!("a sliding window other than gpt_oss's 128 tokens on every other layer ({window})")
    } else if model.mtp_layers > 0 {
        format!("multi-token prediction (--mtp-layers {})", model.mtp_layers)
    } else {
        let shape = (
            model.hidden,
            model.heads,
            model.kv_heads,
            model.head_dim,
            model.vocab,
            moe.router_topk,
            moe.ffn_hidden,
        );
        if shape == (DIM, HEADS, KV_HEADS, HEAD_DIM, VOCAB, TOP_K, EXPERT_FFN)
            && FLAVORS
                .iter()
                .any(|f| (f.layers, f.experts) == (model.layers, moe.experts))
        {
            return None;
        }
        return Some(format!(
            "{name}'s shape ({} layers, hidden {}, {} heads of {} with {} K/V heads, {} experts of {} top-{}, vocab {}) is no gpt_oss flavor torchtitan ships (20b: 24 layers, 32 experts; 120b: 36 layers, 128 experts; both hidden 2880, 64 heads of 64, 8 K/V heads, top-4, vocab 201088: torchtitan/models/gpt_oss/__init__.py at {TORCHTITAN_COMMIT}), and tpsim writes GPT-OSS only as those flavors; use --model gpt-oss-20b or gpt-oss-120b, or --framework megatron-core with --emit megatron",
            model.layers,
            model.hidden,
            model.heads,
            model.head_dim,
            model.kv_heads,
            moe.experts,
            moe.ffn_hidden,
            moe.router_topk,
            model.vocab
        ));
    };
    Some(format!(
        "{name} clamps its experts' GLU as GPT-OSS does but has {part}, and torchtitan's gpt_oss blocks (torchtitan/models/gpt_oss at {TORCHTITAN_COMMIT}) are GPT-OSS's own: RMSNorm, biased linears, SwiGLU experts clamped at 7.0, a 128-token window on every other layer, RoPE; use --framework megatron-core with --emit megatron, or run without --emit"
    ))
}

/// Why torchtitan's gpt_oss cannot run this plan as tpsim priced it, or None. Context parallelism
/// never reaches here: the plan check refuses it beside windows under torchtitan's exchange
/// (`CpExchange::runs_sliding_windows`), and torchtitan's gpt_oss could not run it as priced
/// either (its default varlen attention takes the windows, and `cp_shard` shards FlexAttention
/// block masks only: "Context parallelism can only shard BlockMask attention masks",
/// torchtitan/distributed/context_parallel/api.py).
pub(super) fn plan_unsupported(plan: &ParallelPlan) -> Option<String> {
    // mx.py `MXFP8LinearConverter.convert` swaps every `Linear.Config` the fqns match, subclasses
    // included (`traverse` is isinstance), for a plain `MXFP8Linear.Config`: the attention's
    // output projection, a `ScaledBiasRowwiseLinear` that divides its bias by the TP degree before
    // the partial sums are reduced (common/linear.py), would add its bias on every TP rank.
    if plan.precision == Precision::Mxfp8 && plan.tp > 1 {
        return Some(format!(
            "--precision mxfp8 with --tp {} on GPT-OSS: torchtitan's MXFP8LinearConverter replaces the attention output projection (a ScaledBiasRowwiseLinear, which scales its bias by 1/tp before the TP reduction) with a plain MXFP8Linear that adds the bias on every TP rank (torchtitan/components/quantization/mx.py, models/common/linear.py at {TORCHTITAN_COMMIT}); use --tp 1, or --precision bf16",
            plan.tp
        ));
    }
    None
}

/// What the user must know beside a GPT-OSS recipe: what torchtitan runs that tpsim prices
/// otherwise (stderr notes, without the prefix).
pub(super) fn notes(training: &Training) -> Vec<String> {
    let mut out = vec![format!(
        "tpsim prices torchtitan's attention as PyTorch SDPA's FlashAttention-2 kernel with K/V repeated to every query head, the windowed layers at the blocks a sliding-window kernel visits; torchtitan's gpt_oss runs varlen_attn (attn_backend \"varlen\", FlashAttention-3 on Hopper and 4 on Blackwell: get_cuda_flash_attention_impl) with grouped K/V and window_size (127, 0) on its even layers, and rescales each head's output by its learned sink, out * sigmoid(lse - sink), in eager kernels tpsim does not price (torchtitan/models/gpt_oss/model.py at {TORCHTITAN_COMMIT}); its attention time and memory can differ from tpsim's"
    )];
    // Eager, tpsim prices those kernels as `GptOssGroupedExperts` runs them
    // (`cost::moe::ExpertEpilogue::torchtitan_eager_experts`); compiled, Inductor's fusion of them
    // is priced as the one activation kernel, and the note says so.
    if training.kernel_fusion == KernelFusion::Fused {
        out.push(
            "tpsim prices each expert's clamped SwiGLU as one activation kernel; torchtitan's GptOssGroupedExperts broadcasts both biases to the routed tokens (repeat_interleave) and adds them, and clamps, gates and adds its +1 in separate element-wise kernels (torchtitan/models/gpt_oss/moe.py), which torch.compile fuses per block in kernels tpsim does not price one by one".into(),
        );
    }
    out
}
