//! The `model_type` families tpsim reads ([`SUPPORTED`], [`Family`]), the architecture names that
//! imply them, and the default training length ([`DEFAULT_TRAINING_SEQ_LEN`]).

use super::error::HfConfigError;

/// `model_type` values we read, in the order the error message lists them.
pub const SUPPORTED: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gpt2",
    "gpt_neox",
    "falcon",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
    "kimi_k2",
    "gpt_oss",
    "glm4_moe",
    "nemotron_h",
];

/// The training sequence length tpsim uses when `--seq-len` is not given: 4,096 tokens, the
/// pre-training length of Qwen3 (Qwen3 technical report §3.2, stages 1–2), DeepSeek-V3 (report §4.2)
/// and GPT-OSS (config `initial_context_length` 4096), and of the Megatron-Bridge MoE recipes in
/// validation/modern_runs.yaml. A config's `max_position_embeddings` is the longest context the
/// model serves after long-context extension (Qwen3 40,960, Mistral 32,768), not a training length.
pub const DEFAULT_TRAINING_SEQ_LEN: u32 = 4096;

/// Architecture families with their parameter layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama, Mistral, Qwen2, Qwen3 and their MoE variants (Mixtral, Qwen2-MoE, Qwen3-MoE): RMSNorm,
    /// gated MLP (SwiGLU), RoPE; biases per model type (Qwen2: q/k/v; Llama: `attention_bias`,
    /// `mlp_bias`), Qwen3's per-head q/k norms.
    LlamaLike,
    /// Gemma: as Llama with a GeLU-gated MLP (GeGLU: gate, up, down — the same three matrices as
    /// SwiGLU, so the same count), head_dim 256 and tied embeddings by default.
    Gemma,
    /// GPT-2: LayerNorm, biases, GeLU MLP of 4h (`n_inner` null), learned positions, tied output.
    Gpt2,
    /// GPT-NeoX / Pythia: LayerNorm, biases, GeLU MLP, rotary, separate `embed_out` (untied).
    GptNeox,
    /// Falcon: LayerNorm, no biases (`bias: false`), GeLU MLP of 4h, rotary, tied output;
    /// multi-query attention unless `new_decoder_architecture` gives `num_kv_heads`. The 7B
    /// parallel block has one LayerNorm per layer (`input_layernorm`), the new architecture
    /// (40B, 180B) two (`ln_attn`, `ln_mlp`).
    Falcon,
    /// DeepSeek-V3: multi-head latent attention and MoE with a shared expert after
    /// `first_k_dense_replace` dense layers (`DeepseekV3Config`), and its multi-token-prediction
    /// module (`num_nextn_predict_layers`, 1 in the published config) as `mtp_layers`.
    DeepseekV3,
    /// GPT-OSS: MoE in every layer with biases on every linear layer and on the router
    /// (`GptOssConfig`, `attention_bias` true), and the 128-token sliding window of every other
    /// layer. The per-head attention sinks (64 numbers per layer) are left out.
    GptOss,
    /// GLM-4.5 / GLM-4.6 (`Glm4MoeConfig`): grouped-query attention with q/k/v biases and, in
    /// GLM-4.5, per-head q/k norms; DeepSeek-V3's MoE block (routed and shared experts after
    /// `first_k_dense_replace` dense layers) and its multi-token-prediction layers.
    Glm4Moe,
    /// Nemotron-H and Nemotron 3 (NVIDIA's `NemotronHConfig`): a hybrid Mamba-Transformer stack
    /// whose `hybrid_override_pattern` gives each layer one block (`model::hybrid`).
    NemotronH,
}

pub(super) fn family_of(model_type: &str) -> Option<Family> {
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe" => {
            Some(Family::LlamaLike)
        }
        "gemma" => Some(Family::Gemma),
        "gpt2" => Some(Family::Gpt2),
        "gpt_neox" => Some(Family::GptNeox),
        // Falcon's first Hub uploads used the remote-code names.
        "falcon" | "RefinedWeb" | "RefinedWebModel" => Some(Family::Falcon),
        // Kimi K2 ships DeepSeek-V3's architecture under its own name (`architectures`
        // DeepseekV3ForCausalLM, remote code `configuration_deepseek.py`).
        "deepseek_v3" | "kimi_k2" => Some(Family::DeepseekV3),
        "gpt_oss" => Some(Family::GptOss),
        "glm4_moe" => Some(Family::Glm4Moe),
        "nemotron_h" => Some(Family::NemotronH),
        _ => None,
    }
}

/// `architectures[0]` → `model_type`, for configs written without `model_type`.
pub(super) fn model_type_of_architecture(architecture: &str) -> Option<&'static str> {
    Some(match architecture {
        "LlamaForCausalLM" => "llama",
        "MistralForCausalLM" => "mistral",
        "Qwen2ForCausalLM" => "qwen2",
        "Qwen3ForCausalLM" => "qwen3",
        "GemmaForCausalLM" => "gemma",
        "GPT2LMHeadModel" => "gpt2",
        "GPTNeoXForCausalLM" => "gpt_neox",
        "FalconForCausalLM" | "RWForCausalLM" => "falcon",
        "MixtralForCausalLM" => "mixtral",
        "Qwen2MoeForCausalLM" => "qwen2_moe",
        "Qwen3MoeForCausalLM" => "qwen3_moe",
        "DeepseekV3ForCausalLM" => "deepseek_v3",
        "GptOssForCausalLM" => "gpt_oss",
        "Glm4MoeForCausalLM" => "glm4_moe",
        "NemotronHForCausalLM" => "nemotron_h",
        _ => return None,
    })
}

/// A config whose `architectures[0]` is another supported model type than its `model_type`
/// (`"model_type": "llama"` over `["MixtralForCausalLM"]`) is refused: the keys are read as
/// `model_type` says (transformers' `AutoConfig` does too), so the other architecture's keys (the
/// experts, a sliding window) would be dropped without a word. Names of one architecture agree
/// (Kimi K2's `kimi_k2` is DeepseekV3ForCausalLM; Falcon's remote-code names are falcon).
pub(super) fn check_architecture_agrees(
    path: &str,
    architecture: &str,
    model_type: Option<&String>,
) -> Result<(), HfConfigError> {
    let (Some(model_type), Some(named)) = (model_type, model_type_of_architecture(architecture))
    else {
        return Ok(());
    };
    let agree = named == model_type.as_str()
        || matches!(
            (named, model_type.as_str()),
            ("deepseek_v3", "kimi_k2") | ("falcon", "RefinedWeb" | "RefinedWebModel")
        );
    if agree {
        return Ok(());
    }
    Err(HfConfigError::Unsupported {
        path: path.to_string(),
        message: format!(
            "\"model_type\": {model_type:?} and \"architectures\": [{architecture:?}] name different models ({architecture} is model_type {named:?}), and tpsim would read the keys as {model_type:?} and drop what only {named:?} has; correct one of them so they agree"
        ),
    })
}

pub(super) fn family_name(family: Family) -> &'static str {
    match family {
        Family::LlamaLike => "Llama/Mistral/Qwen",
        Family::Gemma => "Gemma",
        Family::Gpt2 => "GPT-2",
        Family::GptNeox => "GPT-NeoX",
        Family::Falcon => "Falcon",
        Family::DeepseekV3 => "DeepSeek-V3",
        Family::GptOss => "GPT-OSS",
        Family::Glm4Moe => "GLM-4.5",
        Family::NemotronH => "Nemotron-H",
    }
}

/// Why a known `model_type` is not read, and the fix its message gives.
pub(super) struct NotRead {
    pub message: &'static str,
    pub fix: NotReadFix,
}

/// The fix a [`NotRead`] message offers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum NotReadFix {
    /// Drop --hf-config and describe the model with shape flags, which the refusal fills in with
    /// the config's own values ([`super::unknown::shape_flags`]).
    ShapeFlags,
    /// Save a copy under a `model_type` tpsim reads (DeepSeek-V3.2 as `deepseek_v3`).
    CopyAsReadType,
}

/// `model_type` values tpsim knows but does not read: what their cost terms need that the model
/// lacks, and the shape flags that come nearest. Refused by name (exit 2) rather than read as the
/// nearest family without a word. Sources: transformers `configuration_gemma2.py` (Gemma2Config:
/// `attn_logit_softcapping` 50.0, `final_logit_softcapping` 30.0, `sliding_window` 4096 on every
/// other layer, `query_pre_attn_scalar`, norms before and after attention and MLP),
/// `configuration_gemma3.py` (Gemma3TextConfig: `sliding_window_pattern` 6, five local layers to
/// one global, q/k norms) and `configuration_llama4.py` (Llama4TextConfig: `attention_chunk_size`
/// 8192 on three layers of four, the fourth global without RoPE; `interleave_moe_layer_step`,
/// `num_local_experts`, `num_experts_per_tok` 1 and a shared expert of `intermediate_size`;
/// `intermediate_size_mlp` for the dense layers; MoE layers `range(step - 1, layers, step)`).
pub(super) fn known_not_read(model_type: &str) -> Option<NotRead> {
    let describe = |message: &'static str| NotRead {
        message,
        fix: NotReadFix::ShapeFlags,
    };
    Some(match model_type {
        "gemma2" => describe(
            "Gemma 2 is not read: tpsim does not model its attention-logit and final-logit soft-capping (tanh, attn_logit_softcapping / final_logit_softcapping) nor its extra norms after attention and MLP; drop --hf-config and describe it with --layers --hidden --heads --kv-heads --head-dim --ffn-hidden --vocab --gated-mlp --style llama (an output layer apart from the embedding, which Gemma ties), and its alternating local/global attention with --attention-window <sliding_window> --window-attn-skip-freq 2 (soft-capping then left out)",
        ),
        "gemma3" | "gemma3_text" => describe(
            "Gemma 3 is not read: tpsim does not model its q/k norms with norms after attention and MLP, nor the vision tower of model_type gemma3; drop --hf-config and describe the text model (text_config) with --layers --hidden --heads --kv-heads --head-dim --ffn-hidden --vocab --gated-mlp --style llama (an output layer apart from the embedding, which Gemma ties), and its five local layers to one global with --attention-window <sliding_window> --window-attn-skip-freq 6",
        ),
        "llama4" | "llama4_text" => describe(
            "Llama 4 is not read: tpsim does not model its chunked attention (attention_chunk_size on three layers of four; a sliding window of that size prices up to twice their attention-score work), nor the vision tower of model_type llama4; drop --hf-config and describe the text model (text_config) with --layers --hidden --heads --kv-heads --head-dim --vocab --gated-mlp --style llama, the dense layers with --ffn-hidden <intermediate_size_mlp>, the experts with --num-experts <num_local_experts> --moe-router-topk 1 --moe-ffn-hidden-size <intermediate_size> --moe-shared-expert-intermediate-size <intermediate_size>, their interleave with --moe-layer-freq <interleave_moe_layer_step> (as many MoE layers; Llama 4 puts each at the end of its step, Megatron-LM at the start), and the local layers with --attention-window <attention_chunk_size> --window-attn-skip-freq 4",
        ),
        // transformers `configuration_qwen3_next.py` (Qwen3NextConfig): `layer_types` of
        // "linear_attention" (Gated DeltaNet, keys `linear_num_key_heads`,
        // `linear_num_value_heads`, `linear_key_head_dim`, `linear_value_head_dim`,
        // `linear_conv_kernel_dim`) on every layer but each `full_attention_interval`-th (4),
        // whose attention gates its output (q_proj twice the width); MoE of `num_experts` with a
        // gated shared expert of `shared_expert_intermediate_size`.
        "qwen3_next" => describe(
            "Qwen3-Next is not read: tpsim does not model its Gated DeltaNet linear attention (the \"linear_attention\" layers of \"layer_types\", three of every four) nor the output gate of its full-attention layers; drop --hf-config and describe it with --layers --hidden --heads --kv-heads --head-dim --vocab --style llama --gated-mlp and its experts with --num-experts --moe-router-topk --moe-ffn-hidden-size --moe-shared-expert-intermediate-size (full attention then priced on every layer, more attention work than the model does)",
        ),
        // deepseek-ai/DeepSeek-V3.2-Exp config.json: DeepseekV3's keys plus the lightning
        // indexer's `index_n_heads` 64, `index_head_dim` 128 and `index_topk` 2048 (DeepSeek
        // Sparse Attention: each query attends to the 2048 keys the indexer picks).
        "deepseek_v32" => NotRead {
            fix: NotReadFix::CopyAsReadType,
            message: "DeepSeek-V3.2 is not read: tpsim does not model its sparse attention (the lightning indexer, \"index_n_heads\" / \"index_head_dim\", choosing \"index_topk\" keys per query); save a copy with \"model_type\": \"deepseek_v3\" to read the same latent attention and experts as DeepSeek-V3.1, which V3.2 continues, priced with attention over every earlier token and without the indexer's weights",
        },
        _ => return None,
    })
}
