//! The transformer being trained: its shape, parameter count and FLOP count.
//!
//! Specs come from `models/*.yaml`, from shape flags, from a Hugging Face `config.json`
//! (`hf_config`) or from a bare parameter count (`shape.rs`). Counts handle grouped-query
//! attention (kv_heads < heads), a head dimension set apart from hidden/heads (Qwen3, Gemma),
//! gated MLPs (SwiGLU: three matrices), multi-head latent attention (DeepSeek-V2/V3) and
//! mixture-of-experts layers (routed experts, shared experts, dense layers before the first MoE
//! layer). Parameters are counted twice: all of them ([`Model::params`]) and those one token
//! touches ([`Model::active_params`]); model FLOPs use the active ones.

use serde::{Deserialize, Serialize};

mod flops;
mod hybrid;
mod overrides;
mod params;

pub(crate) use hybrid::MAX_MAMBA_WIDTH;
pub(crate) use hybrid::unpriced_symbol;
pub use hybrid::{Block, BlockCounts, BlockShares, Hybrid, HybridRun};

pub use overrides::{ShapeOverrides, parse_moe_layer_freq};

/// Normalisation layer kind; decides how many parameters each norm carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// weight and bias (GPT, BLOOM)
    Layernorm,
    /// weight only (Llama)
    Rmsnorm,
}

/// How a model tells positions apart (Megatron-LM's `--position-embedding-type` names). Only learned
/// positions carry parameters (an s·h table); only rotary embeddings run a kernel of their own in
/// every layer (`cost::compute::rope_bytes_per_token`); ALiBi's bias is added inside the fused
/// attention kernel and moves no extra bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionEmbedding {
    /// A learned s·h table added to the token embeddings (GPT-2/GPT-3, Megatron `learned_absolute`).
    LearnedAbsolute,
    /// Rotary embeddings applied to each layer's queries and keys (Su et al. 2021; Llama, Qwen,
    /// DeepSeek, GPT-NeoX; Megatron `rope`).
    Rope,
    /// Rotary embeddings with YaRN's frequencies (Megatron `yarn`; GPT-OSS in Megatron-Bridge):
    /// the same kernels as `rope`.
    Yarn,
    /// Multimodal rotary embeddings (Megatron `mrope`, Qwen2-VL): the same kernels as `rope`.
    Mrope,
    /// Attention-score biases by distance (Press et al. 2022; BLOOM, MPT, Falcon with `alibi`).
    Alibi,
    /// No position signal at all (Megatron `none`).
    None,
}

impl PositionEmbedding {
    /// The spelling of model files, JSON and Megatron-LM's flag.
    pub fn as_str(self) -> &'static str {
        match self {
            PositionEmbedding::LearnedAbsolute => "learned_absolute",
            PositionEmbedding::Rope => "rope",
            PositionEmbedding::Yarn => "yarn",
            PositionEmbedding::Mrope => "mrope",
            PositionEmbedding::Alibi => "alibi",
            PositionEmbedding::None => "none",
        }
    }

    /// Whether each layer rotates its queries and keys (rope and its variants).
    pub fn is_rotary(self) -> bool {
        matches!(
            self,
            PositionEmbedding::Rope | PositionEmbedding::Yarn | PositionEmbedding::Mrope
        )
    }

    /// A `--position-embedding-type` value: Megatron-LM's (arguments.py: learned_absolute, rope,
    /// mrope, yarn, none) and `alibi`, which BigScience's Megatron-DeepSpeed takes for BLOOM
    /// (bigscience-workshop/Megatron-DeepSpeed `PositionEmbeddingType.alibi`); `None` for others.
    pub fn from_megatron(value: &str) -> Option<PositionEmbedding> {
        match value {
            "learned_absolute" => Some(PositionEmbedding::LearnedAbsolute),
            "rope" => Some(PositionEmbedding::Rope),
            "yarn" => Some(PositionEmbedding::Yarn),
            "mrope" => Some(PositionEmbedding::Mrope),
            "alibi" => Some(PositionEmbedding::Alibi),
            "none" => Some(PositionEmbedding::None),
            _ => None,
        }
    }

    /// The words the model line prints, with the rotated share of each head where it is partial.
    pub fn describe_with(self, rotary_percent: Option<f64>) -> String {
        match rotary_percent {
            Some(p) if self.is_rotary() => {
                let percent = 100.0 * p;
                let places = if (percent - percent.round()).abs() < 1e-9 {
                    0
                } else {
                    1
                };
                format!(
                    "{} on {}% of each head",
                    self.describe(),
                    crate::units::show_measured(percent, places)
                )
            }
            _ => self.describe().to_string(),
        }
    }

    /// Whether a Megatron-LM launch line with this type can run Transformer Engine's fused RoPE:
    /// arguments.py turns `apply_rope_fusion` off for every type but `rope` ("Legacy RoPE
    /// arguments": `if args.position_embedding_type != 'rope': args.apply_rope_fusion = False`).
    pub fn megatron_lm_fuses_rope(self) -> bool {
        self == PositionEmbedding::Rope
    }

    /// The words the model line prints.
    pub fn describe(self) -> &'static str {
        match self {
            PositionEmbedding::LearnedAbsolute => "learned positions",
            PositionEmbedding::Rope => "rotary positions",
            PositionEmbedding::Yarn => "rotary positions (YaRN)",
            PositionEmbedding::Mrope => "rotary positions (M-RoPE)",
            PositionEmbedding::Alibi => "ALiBi positions",
            PositionEmbedding::None => "no position embedding",
        }
    }
}

/// Mixture-of-experts layers, in Megatron-LM's terms (`megatron/training/arguments.py`,
/// `_add_moe_args`): `--num-experts`, `--moe-router-topk`, `--moe-ffn-hidden-size`,
/// `--moe-shared-expert-intermediate-size`, `--moe-layer-freq`; the dense layers in front are
/// DeepSeek's `first_k_dense_replace` (Pai-Megatron-Patch `--moe-first-k-dense-replace`).
/// Experts have the model's MLP kind (gated or not) and its bias setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Experts each token is routed to.
    pub router_topk: u32,
    /// Inner width of one routed expert's MLP.
    pub ffn_hidden: u32,
    /// Inner width of the shared experts together (DeepSeek: n_shared_experts × moe_intermediate_size);
    /// 0 = none. Every token goes through them.
    #[serde(default)]
    pub shared_expert_ffn_hidden: u32,
    /// A sigmoid gate of width h → 1 on the shared expert's output (Qwen2-MoE; Megatron
    /// `--moe-shared-expert-gate`).
    #[serde(default)]
    pub shared_expert_gate: bool,
    /// Megatron's integer `--moe-layer-freq N`: layer i (0-based) is an MoE layer when i % N == 0.
    #[serde(default = "one")]
    pub layer_freq: u32,
    /// The first K layers keep a dense MLP (DeepSeek-V3: 3).
    #[serde(default)]
    pub first_dense_layers: u32,
    /// Group-limited routing (DeepSeek-V3 §2.1.2 "node-limited routing"; Megatron-Core
    /// `--moe-router-num-groups`, HF `n_group`): the experts split into this many groups of
    /// consecutive experts, and a token's top-k come from `router_group_topk` of them. 0 = no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub router_groups: u32,
    /// Groups a token's experts may come from (Megatron-Core `--moe-router-group-topk`, HF
    /// `topk_group`; DeepSeek-V3: 4 of 8).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub router_group_topk: u32,
    /// The limit at which the experts' gated activation clamps its two halves before combining
    /// them, none when it does not (GPT-OSS: transformers `GptOssExperts`,
    /// `gate.clamp(max=limit)`, `up.clamp(-limit, limit)` with `swiglu_limit` 7.0; Megatron-Core
    /// `activation_func_clamp_value`). Only the kernels that run it cost anything
    /// (`cost::moe::ExpertEpilogue`); the FLOP count does not move. The limit is kept so that a
    /// written launch line (`--activation-func-clamp-value`) gives the same model back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glu_clamp_limit: Option<GluClampLimit>,
    /// LatentMoE (Nemotron 3 Super and Ultra; Megatron-Core `--moe-latent-size`, HF
    /// `moe_latent_size`): the routed experts work on a narrower width than the model's. Each MoE
    /// layer projects its tokens h → latent before the dispatch (`fc1_latent_proj`) and latent →
    /// h after the combine (`fc2_latent_proj`), two linears replicated on every TP rank
    /// (`parallel_mode="duplicated"`); the all-to-all, the token permutations and the experts'
    /// GEMMs carry latent-wide rows. The router and the shared experts stay on the full width
    /// (`MoELayer.preprocess`/`postprocess` in megatron/core/transformer/moe/moe_layer.py). None:
    /// the experts work on the model's width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_size: Option<u32>,
}

/// A clamped GLU's limit (Megatron-Core `activation_func_clamp_value`, transformers
/// `swiglu_limit`): a positive, finite number, as Megatron-Core's `TransformerConfig` requires
/// ("must be finite and greater than zero"), so equality between two limits is an equivalence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct GluClampLimit(f64);

impl Eq for GluClampLimit {}

impl GluClampLimit {
    /// GPT-OSS's limit (config.json `swiglu_limit`, `GptOssConfig` default).
    pub const GPT_OSS: GluClampLimit = GluClampLimit(7.0);

    pub fn new(limit: f64) -> Option<GluClampLimit> {
        (limit.is_finite() && limit > 0.0).then_some(GluClampLimit(limit))
    }

    pub fn get(self) -> f64 {
        self.0
    }

    /// The limit as Megatron-LM's `--activation-func-clamp-value` takes it: Rust's shortest
    /// text that reads back as the same number (`7.0`, `6.5`).
    pub fn arg(self) -> String {
        format!("{:?}", self.0)
    }
}

impl TryFrom<f64> for GluClampLimit {
    type Error = String;

    fn try_from(limit: f64) -> Result<GluClampLimit, String> {
        GluClampLimit::new(limit).ok_or_else(|| {
            format!(
                "glu_clamp_limit: {} is not a positive, finite clamp limit (the gate is clamped from above and the linear half to [-limit, limit]); e.g. glu_clamp_limit: 7.0 (GPT-OSS's swiglu_limit), or drop the key for no clamp",
                crate::units::show_number(limit)
            )
        })
    }
}

impl From<GluClampLimit> for f64 {
    fn from(limit: GluClampLimit) -> f64 {
        limit.0
    }
}

/// Megatron-Core's rules for group-limited routing (`moe_utils.group_limited_topk`,
/// transformer_config.py): both values or neither, the groups divide the experts, the token's
/// groups are among them, and its top-k experts fit in the groups it may use.
fn check_router_groups(moe: &Moe) -> Result<(), ModelError> {
    let (groups, group_topk) = (moe.router_groups, moe.router_group_topk);
    let fail = |rule| {
        Err(ModelError::RouterGroups {
            groups,
            group_topk,
            experts: moe.experts,
            topk: moe.router_topk,
            rule,
        })
    };
    match (groups, group_topk) {
        (0, 0) => Ok(()),
        (0, _) | (_, 0) => fail(
            "give both (group-limited routing needs the groups and how many a token uses) or neither",
        ),
        _ if !moe.experts.is_multiple_of(groups) => {
            fail("the groups must divide the experts evenly; give a divisor of the expert count")
        }
        _ if group_topk > groups => fail(
            "a token cannot use more groups than there are; give a group top-k up to the group count",
        ),
        _ if moe.router_topk < group_topk => fail(
            "Megatron-Core scores a group by its best top-k / group-top-k experts, none when the top-k is smaller; give a group top-k up to the top-k",
        ),
        _ if u64::from(moe.router_topk)
            > u64::from(group_topk) * u64::from(moe.experts / groups) =>
        {
            fail(
                "the token's top-k experts do not fit in the groups it may use; raise the group top-k",
            )
        }
        _ => Ok(()),
    }
}

/// Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1), in Megatron-Core's
/// `MLATransformerConfig` names: queries through an optional low-rank bottleneck, keys and values
/// through a shared `kv_lora_rank` latent, plus a decoupled RoPE key of `qk_pos_emb_head_dim`
/// shared by all heads. `qk_head_dim` is the non-rotary part (HF `qk_nope_head_dim`).
/// Sliding-window (local) attention: a query attends to itself and the `tokens` − 1 keys before it
/// (Megatron-Core `window_size = (tokens − 1, 0)`; HF `sliding_window`). With `full_every` N > 0
/// every N-th layer (1-based, Megatron-Core `window_attn_skip_freq`) keeps full causal attention —
/// GPT-OSS alternates (N = 2, 128 tokens) — and with 0 every layer is local (Mistral 7B v0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionWindow {
    pub tokens: u32,
    #[serde(default)]
    pub full_every: u32,
}

impl AttentionWindow {
    /// Whether this window changes attention for `seq_len`-token sequences: it does not when it
    /// spans the whole sequence or more (every query sees every key before it: full causal
    /// attention) or when `full_every` 1 keeps full attention on every layer. The one rule behind
    /// [`Self::no_effect`]'s note and [`Model::effective_attention_window`].
    pub fn has_effect(self, seq_len: u32) -> bool {
        self.full_every != 1 && self.tokens < seq_len
    }

    /// Whether some layer is given the window (Megatron-Core passes `window_size` to every layer
    /// but each `window_attn_skip_freq`-th; with 1, to none), whatever the sequence length:
    /// Transformer Engine's context-parallel attention refuses any window it is given.
    pub fn windows_some_layer(self) -> bool {
        self.full_every != 1
    }

    /// Why this window changes nothing for `seq_len`-token sequences, when it does not
    /// ([`Self::has_effect`]). Valid input, so a note, not an error.
    pub fn no_effect(self, seq_len: u32) -> Option<String> {
        if self.has_effect(seq_len) {
            return None;
        }
        if self.full_every == 1 {
            return Some(format!(
                "--window-attn-skip-freq 1 keeps full attention on every layer, so no layer is windowed (the {}-token window has no effect); use N > 1 to window all but every N-th layer, or 0 to window every layer",
                self.tokens
            ));
        }
        if self.tokens >= seq_len {
            return Some(format!(
                "the sliding window of {} tokens is at least the {seq_len}-token sequence, so every query sees all the keys before it: the same as full attention; give --attention-window below --seq-len for a window that matters",
                self.tokens
            ));
        }
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mla {
    /// Rank of the query down-projection; none = a plain hidden → heads·(qk+rope) projection.
    #[serde(default)]
    pub q_lora_rank: Option<u32>,
    pub kv_lora_rank: u32,
    pub qk_head_dim: u32,
    pub qk_pos_emb_head_dim: u32,
    pub v_head_dim: u32,
}

fn one() -> u32 {
    1
}

/// A model spec file (`models/*.yaml`). Optional keys get the defaults documented beside them.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    /// Parameter count quoted by the source, in billions, kept for comparison with our count.
    #[serde(default)]
    pub published_params_b: Option<f64>,
    /// Parameters per token quoted by the source (MoE models), in billions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_active_params_b: Option<f64>,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    /// Default: `heads` (multi-head attention).
    #[serde(default)]
    pub kv_heads: Option<u32>,
    /// Width of one attention head (Megatron `--kv-channels`). Default: hidden / heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u32>,
    /// Default: 4 × hidden, or int(8h/3/64)·64 with a gated MLP ([`default_ffn_hidden`]).
    #[serde(default)]
    pub ffn_hidden: Option<u32>,
    pub vocab: u32,
    /// Sequence length the model was trained with; `--seq-len` overrides it.
    pub seq_len: u32,
    /// `seq_len` is an assumption, not a published training length (Mixtral 8x22B and Kimi K2
    /// publish none): the model line says so where `--seq-len` was not given. Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seq_len_assumed: bool,
    #[serde(default)]
    pub gated_mlp: bool,
    /// Biases on every linear layer (GPT-3, BLOOM: yes; Llama: no). Default: true.
    #[serde(default = "default_true")]
    pub linear_bias: bool,
    /// Biases on the Q, K and V projections only (Qwen2; Megatron `--add-qkv-bias`). Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qkv_bias: bool,
    /// A norm over each query and key head (Qwen3; Megatron `--qk-layernorm`). Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm: bool,
    /// Attention and MLP read one shared input norm (Falcon-7B's parallel block, GPT-J) instead of
    /// one norm each. Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_layer_norm: bool,
    /// Output layer shares the input embedding matrix. Default: true (GPT-3, BLOOM).
    #[serde(default = "default_true")]
    pub tied_embeddings: bool,
    /// How positions are encoded: `learned_absolute` (GPT-3), `rope` (Llama and most models since),
    /// `alibi` (BLOOM) or `none`. Default: `learned_absolute` when `learned_position_embeddings`
    /// is true, else `rope`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<PositionEmbedding>,
    /// The older key: true means `position_embedding_type: learned_absolute`. Both may be given
    /// when they agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_position_embeddings: Option<bool>,
    /// Share of each head's dimensions the rotary embedding rotates (Megatron-LM
    /// `--rotary-percent`; HF `partial_rotary_factor`, GPT-NeoX `rotary_pct`), in (0, 1]; the rest
    /// passes through unrotated. Rotary position types only. Default: 1, the whole head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_percent: Option<f64>,
    /// The base θ of the rotary embedding's frequencies (Megatron-LM `--rotary-base`, an integer;
    /// HF `rope_theta`): Llama 3 500000. Rotary position types only. It changes no memory or time;
    /// `--emit` writes it, since the frameworks otherwise train with their default
    /// (`DEFAULT_ROTARY_BASE`). Default: 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_base: Option<f64>,
    /// Default: layernorm.
    #[serde(default)]
    pub norm: Option<Norm>,
    /// Dropout layers in the blocks (GPT-3, Megatron: yes; Llama: none). Default: true. Decides
    /// whether dropout masks are stored and dropout kernels run.
    #[serde(default = "default_true")]
    pub dropout: bool,
    /// Multi-head latent attention; none = standard (grouped-query) attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// Mixture-of-experts layers; none = a dense model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<Moe>,
    /// Multi-token prediction depths (DeepSeek-V3 §2.2; Megatron `--mtp-num-layers`; HF
    /// `num_nextn_predict_layers`). Default: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtp_layers: u32,
    /// Sliding-window attention; none = full causal attention in every layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_window: Option<AttentionWindow>,
    /// A hybrid Mamba-Transformer stack (Nemotron-H); none = every layer attention and MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<Hybrid>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The rotary embedding's base θ when a model gives none: Megatron-LM's `--rotary-base` default
/// (megatron/training/arguments.py: `default=10000`), Megatron-Bridge's
/// (`GPTModelProvider.rotary_base: int = 10000`, gpt_provider.py), NeMo 1.x's
/// (`cfg.get('rotary_base', 10000)`, megatron_gpt_model.py) and RoFormer's (Su et al. 2021, §3.2.2).
pub const DEFAULT_ROTARY_BASE: f64 = 10000.0;

/// MLP width when none is given: 4h (GPT), or for gated MLPs Megatron-LM's SwiGLU default
/// int(4h · 2/3 / 64) · 64, which keeps the parameter count of a 4h GeLU MLP
/// (megatron/training/arguments.py, `--swiglu`).
pub fn default_ffn_hidden(hidden: u32, gated_mlp: bool) -> u32 {
    if gated_mlp {
        ((u64::from(hidden) * 8 / 3 / 64) * 64) as u32
    } else {
        hidden.saturating_mul(4)
    }
}

fn default_true() -> bool {
    true
}

/// A resolved transformer shape: every field concrete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    /// Width of one attention head; hidden / heads unless the model sets it apart (Qwen3, Gemma).
    /// With MLA the per-head widths are in `mla` and this is Megatron's `--kv-channels`.
    pub head_dim: u32,
    /// MLP inner width of the dense layers (all layers of a dense model).
    pub ffn_hidden: u32,
    pub vocab: u32,
    pub seq_len: u32,
    pub gated_mlp: bool,
    pub linear_bias: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub shared_layer_norm: bool,
    pub tied_embeddings: bool,
    pub position_embedding: PositionEmbedding,
    /// Share of each head the rotary embedding rotates (`ModelFile::rotary_percent`); None: all.
    pub rotary_percent: Option<f64>,
    /// The rotary embedding's base θ (`ModelFile::rotary_base`); None: `DEFAULT_ROTARY_BASE`.
    /// Priced by nothing; carried to the emitted configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_base: Option<f64>,
    pub norm: Norm,
    pub dropout: bool,
    pub mla: Option<Mla>,
    pub moe: Option<Moe>,
    /// Multi-token prediction depths after the last layer (DeepSeek-V3 §2.2, Megatron-Core
    /// `multi_token_prediction.py`): each one is a transformer layer of the last layer's kind fed by
    /// an h·2h projection of the normed hidden state and the next token's embedding, then the
    /// shared output layer and its own loss. They sit on the last pipeline stage.
    pub mtp_layers: u32,
    /// Sliding-window attention (GPT-OSS, Mistral 7B v0.1); none = full causal attention.
    pub attention_window: Option<AttentionWindow>,
    /// A hybrid Mamba-Transformer stack (`model::hybrid`): each layer is one block of its pattern.
    pub hybrid: Option<Hybrid>,
}

/// Why a model shape is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("{what} {value} must be at least 1; {fix}")]
    Zero {
        what: &'static str,
        value: u32,
        fix: &'static str,
    },
    #[error(
        "--hidden {hidden} is not divisible by --heads {heads}; the head dimension must be whole (e.g. --heads {suggest}, or give it with --head-dim)"
    )]
    HiddenNotDivisibleByHeads {
        hidden: u32,
        heads: u32,
        suggest: u32,
    },
    #[error(
        "--kv-heads {kv_heads} must divide --heads {heads} (grouped-query attention shares each KV head among heads/kv_heads query heads); give a divisor of {heads}, e.g. --kv-heads {}",
        divisor_at_most(.heads, .kv_heads)
    )]
    KvHeadsNotDivisor { kv_heads: u32, heads: u32 },
    #[error(
        "--kv-heads {kv_heads} with multi-head latent attention: every one of the {heads} heads gets its own K and V, expanded from the shared latent (--kv-lora-rank {kv_lora_rank}), so there are no KV groups to set; drop --kv-heads (or give --kv-heads {heads})"
    )]
    KvHeadsWithLatentAttention {
        kv_heads: u32,
        heads: u32,
        kv_lora_rank: u32,
    },
    #[error(
        "--head-dim {head_dim} with multi-head latent attention: each head is --qk-head-dim {qk_head_dim} + --qk-pos-emb-head-dim {qk_pos_emb_head_dim} wide in Q and K and --v-head-dim {v_head_dim} in V (Megatron-Core's MLA reads no --kv-channels), so --head-dim changes nothing; give those widths instead, or drop --head-dim"
    )]
    HeadDimWithLatentAttention {
        head_dim: u32,
        qk_head_dim: u32,
        qk_pos_emb_head_dim: u32,
        v_head_dim: u32,
    },
    #[error("{}", too_large_words(what, &value.to_string(), *max))]
    TooLarge {
        what: &'static str,
        value: u32,
        max: u32,
    },
    #[error(
        "--moe-router-num-groups {groups} / --moe-router-group-topk {group_topk} with {experts} experts, top-{topk}: {rule}"
    )]
    RouterGroups {
        groups: u32,
        group_topk: u32,
        experts: u32,
        topk: u32,
        rule: &'static str,
    },
    #[error(
        "--moe-router-topk {topk} is more than --num-experts {experts}; a token is routed to at most every expert (e.g. --moe-router-topk {suggest})"
    )]
    TopkAboveExperts {
        topk: u32,
        experts: u32,
        suggest: u32,
    },
    #[error(
        "--num-experts {experts} is fewer than {whose} --moe-router-topk {topk}; a token is routed to at most every expert: give --moe-router-topk {experts} or less with it, or more experts"
    )]
    ExpertsBelowTopk {
        experts: u32,
        topk: u32,
        /// Where the top-k came from: Megatron's default or the model's own.
        whose: &'static str,
    },
    #[error(
        "--moe-latent-size {latent} is wider than --hidden {hidden} (rule: LatentMoE projects each token down from the model's width to a narrower latent width for the routed experts, Nemotron 3 Super: hidden 4096, latent 1024); give a latent width below {hidden}, e.g. --moe-latent-size {}, or drop it for experts on the model's width",
        (.hidden / 4).max(1)
    )]
    LatentWiderThanHidden { latent: u32, hidden: u32 },
    #[error(
        "--moe-first-k-dense-replace {first_dense} leaves no MoE layer among the {layers} layers (with --moe-layer-freq {freq}); use fewer dense layers, or drop --num-experts for a dense model"
    )]
    NoMoeLayer {
        first_dense: u32,
        layers: u32,
        freq: u32,
    },
    #[error(
        "{flag} is given without --num-experts; MoE settings need the expert count (e.g. --num-experts 8)"
    )]
    MoeFlagWithoutExperts { flag: &'static str },
    #[error(
        "{flag} is given without --kv-lora-rank; multi-head latent attention needs its latent width (e.g. --kv-lora-rank 512)"
    )]
    MlaFlagWithoutKvLoraRank { flag: &'static str },
    #[error(
        "--window-attn-skip-freq is given without a sliding window; add --attention-window TOKENS (GPT-OSS: 128) or drop it"
    )]
    WindowFlagWithoutWindow,
    #[error(
        "position_embedding_type: {kind} and learned_position_embeddings: {learned} disagree (learned positions are position_embedding_type: learned_absolute); drop learned_position_embeddings, or make them agree"
    )]
    PositionKeysDisagree { kind: &'static str, learned: bool },
    #[error(
        "learned_position_embeddings: false does not say how the model encodes positions, and rotary embeddings (a kernel on Q and K in every layer) cost what ALiBi and none do not; replace it with position_embedding_type: rope (or alibi, or none)"
    )]
    PositionUnsaid,
    #[error(
        "rotary_percent {} must be a share of each head in (0, 1] (Megatron-LM --rotary-percent, HF partial_rotary_factor: 0.25 for GPT-NeoX, 0.5 for GLM); give one, or drop it to rotate the whole head",
        crate::units::show_number(*value)
    )]
    RotaryPercentRange { value: f64 },
    #[error(
        "rotary_percent {} rotates {rotated} of the {head_dim} dimensions of each head, and a rotary embedding turns them in pairs (Megatron-Core and Hugging Face rotate int(rotary_percent x head width) of them); give at least {}, or drop it to rotate the whole head",
        crate::units::show_number(*value),
        crate::units::show_number(2.0 / f64::from(*head_dim))
    )]
    RotaryPercentBelowOnePair {
        value: f64,
        rotated: u64,
        head_dim: u32,
    },
    #[error(
        "{by} leaves the model's rotary share {} turning {rotated} of the {head_dim} dimensions of each head, and a rotary embedding turns them in pairs (Megatron-Core and Hugging Face rotate int(share x head width) of them); give heads at least {} wide{}",
        crate::units::show_number(*value),
        least_rotary_head_dim(*value),
        if by.starts_with("--head-dim") { format!(" (--head-dim {})", least_rotary_head_dim(*value)) } else { " (--hidden over --heads, or --head-dim)".to_string() }
    )]
    HeadDimBelowRotaryPair {
        value: f64,
        rotated: u64,
        head_dim: u32,
        by: String,
    },
    #[error(
        "rotary_percent {} is given for {kind}, which rotates nothing; drop it, or use position_embedding_type: rope",
        crate::units::show_number(*value)
    )]
    RotaryPercentWithoutRope { value: f64, kind: &'static str },
    #[error(
        "rotary_percent {} with latent attention: its heads already rotate only their qk_pos_emb_head_dim part (--qk-pos-emb-head-dim); drop rotary_percent",
        crate::units::show_number(*value)
    )]
    RotaryPercentWithLatentAttention { value: f64 },
    #[error(
        "rotary_base {} must be a whole number from 1 up (the base of the rotary frequencies: Megatron-LM --rotary-base takes an integer, HF rope_theta; Llama 3 500000), or drop it for the frameworks' default 10000",
        crate::units::show_number(*value)
    )]
    RotaryBaseRange { value: f64 },
    #[error(
        "rotary_base {} is given for {kind}, which rotates nothing; drop it, or use position_embedding_type: rope",
        crate::units::show_number(*value)
    )]
    RotaryBaseWithoutRope { value: f64, kind: &'static str },
    /// A hybrid Mamba-Transformer stack that Megatron-Core would not build, or that tpsim does not
    /// price; the words name the value, the rule and a fix (`Model::check_hybrid`).
    #[error("{0}")]
    Hybrid(String),
}

/// The narrowest head in which a rotary share turns one pair of dimensions (`int(share x width)
/// >= 2`).
fn least_rotary_head_dim(share: f64) -> u32 {
    let mut width = (2.0 / share).ceil().min(f64::from(u32::MAX)) as u32;
    while (share * f64::from(width)).floor() < 2.0 && width < u32::MAX {
        width += 1;
    }
    width
}

/// A published model's value of a count [`ModelError::TooLarge`] refuses, as the flag and value
/// to give (a model file says it as its key).
fn trained_example(what: &str) -> &'static str {
    match what {
        "--layers" => "--layers 126 (Llama 3 405B)",
        "--hidden" => "--hidden 16384 (Llama 3 405B)",
        "--heads" => "--heads 128 (Llama 3 405B)",
        "--ffn-hidden" => "--ffn-hidden 53248 (Llama 3 405B)",
        "--vocab" => "--vocab 128256 (Llama 3)",
        "--seq-len" => "--seq-len 8192",
        "--mtp-layers" => "--mtp-layers 1 (DeepSeek-V3), or 0 for none",
        "--attention-window" => "--attention-window 4096 (Mistral 7B), or 0 for full attention",
        "--window-attn-skip-freq" => "--window-attn-skip-freq 2 (GPT-OSS)",
        "--head-dim" => "--head-dim 128",
        "--num-experts" => "--num-experts 256 (DeepSeek-V3)",
        "--moe-ffn-hidden-size" => "--moe-ffn-hidden-size 2048 (DeepSeek-V3)",
        "--moe-shared-expert-intermediate-size" => {
            "--moe-shared-expert-intermediate-size 2048 (DeepSeek-V3)"
        }
        "--moe-latent-size" => "--moe-latent-size 1024 (Nemotron 3 Super)",
        "--kv-lora-rank" => "--kv-lora-rank 512 (DeepSeek-V3)",
        "--q-lora-rank" => "--q-lora-rank 1536 (DeepSeek-V3)",
        "--qk-head-dim" => "--qk-head-dim 128 (DeepSeek-V3)",
        "--qk-pos-emb-head-dim" => "--qk-pos-emb-head-dim 64 (DeepSeek-V3)",
        "--v-head-dim" => "--v-head-dim 128 (DeepSeek-V3)",
        _ => "the model's published value",
    }
}

/// The largest divisor of `n` that is at most `most` (1 at least): the nearest valid KV head
/// count to offer for one that does not divide the heads.
pub(crate) fn divisor_at_most(n: &u32, most: &u32) -> u32 {
    (1..=(*most).min(*n))
        .rev()
        .find(|d| n.is_multiple_of(*d))
        .unwrap_or(1)
}

/// Upper bounds that catch typos (and keep the search's divisor loops short). The largest published
/// dense models are far inside them: Megatron 1T has 128 layers, hidden 25600, vocab 51200; the
/// most experts in a published model are DeepSeek-V3's 256 and Kimi K2's 384.
const MAX_LAYERS: u32 = 10_000;
const MAX_WIDTH: u32 = 1 << 20;
/// The widest MLP (dense, one expert's or the shared experts' together) the model check takes.
pub(crate) const MAX_FFN_WIDTH: u32 = 4 * MAX_WIDTH;
/// Attention heads: heads may pass hidden / head_dim when the head width is given (`--head-dim`,
/// MLA), so they are bounded on their own; 65,536 is 512 times the most a bundled model has
/// (DeepSeek-V3 and Llama 3 405B: 128; GPT-3 175B: 96).
const MAX_HEADS: u32 = 1 << 16;
pub(crate) const MAX_SEQ_LEN: u32 = 1 << 24;
const MAX_EXPERTS: u32 = 1 << 14;
/// DeepSeek-V3 and MiMo train with one MTP depth, and DeepSeek's ablations go to 2 (§4.5.1).
const MAX_MTP_LAYERS: u32 = 16;

/// The largest value `Model::check` takes for the count a shape flag sets, one bound for each
/// flag it bounds (None for a flag it bounds otherwise, e.g. top-k by the experts): the check
/// reads its bounds here, and a model file's count past its number type (`moe.experts:
/// 4294967296`) is told this bound rather than the type's (`specs::too_large_count`).
pub(crate) fn shape_bound(flag: &str) -> Option<u32> {
    Some(match flag {
        "--layers" | "--window-attn-skip-freq" => MAX_LAYERS,
        "--hidden" | "--moe-latent-size" => MAX_WIDTH,
        "--kv-lora-rank"
        | "--q-lora-rank"
        | "--qk-head-dim"
        | "--qk-pos-emb-head-dim"
        | "--v-head-dim" => MAX_WIDTH,
        "--heads" => MAX_HEADS,
        "--ffn-hidden"
        | "--vocab"
        | "--moe-ffn-hidden-size"
        | "--moe-shared-expert-intermediate-size" => 4 * MAX_WIDTH,
        "--seq-len" | "--attention-window" => MAX_SEQ_LEN,
        "--mtp-layers" => MAX_MTP_LAYERS,
        "--head-dim" => MAX_WIDTH / 8,
        "--num-experts" => MAX_EXPERTS,
        _ => return None,
    })
}

/// [`shape_bound`] of a flag the check bounds.
fn bound(flag: &str) -> u32 {
    shape_bound(flag).unwrap_or(u32::MAX)
}

/// What `Model::check` says of a count past its bound (`ModelError::TooLarge`); `value` as
/// written, so a value past the count's number type is said the same way.
pub(crate) fn too_large_words(what: &str, value: &str, max: u32) -> String {
    format!(
        "{what} {value} is larger than {max}, beyond any model trained; give at most {max}, e.g. {}",
        trained_example(what)
    )
}

impl ModelFile {
    /// The position encoding the file's two keys give: `position_embedding_type` when set (the
    /// older `learned_position_embeddings` must then agree with it), learned positions when only
    /// `learned_position_embeddings: true` is set, rotary embeddings when neither is; an error for
    /// `learned_position_embeddings: false` alone, which said "rotary or ALiBi".
    pub fn position_embedding(&self) -> Result<PositionEmbedding, ModelError> {
        match (
            self.position_embedding_type,
            self.learned_position_embeddings,
        ) {
            (Some(kind), Some(learned))
                if learned != (kind == PositionEmbedding::LearnedAbsolute) =>
            {
                Err(ModelError::PositionKeysDisagree {
                    kind: kind.as_str(),
                    learned,
                })
            }
            (Some(kind), _) => Ok(kind),
            (None, Some(true)) => Ok(PositionEmbedding::LearnedAbsolute),
            // It used to mean "rotary or ALiBi", which now cost differently: not guessed.
            (None, Some(false)) => Err(ModelError::PositionUnsaid),
            (None, None) => Ok(PositionEmbedding::Rope),
        }
    }
}

impl Model {
    /// Whether the model carries a learned position table (s·h parameters on the first stage).
    pub fn learned_position_embeddings(&self) -> bool {
        self.position_embedding == PositionEmbedding::LearnedAbsolute
    }

    /// The sliding window when it changes attention at the model's sequence length
    /// ([`AttentionWindow::has_effect`]); `None` without a window or with one that is full
    /// attention in effect, which a configuration without the window runs the same.
    pub fn effective_attention_window(&self) -> Option<AttentionWindow> {
        self.attention_window
            .filter(|window| window.has_effect(self.seq_len))
    }

    /// Resolves a spec file's defaults and checks the shape.
    pub fn from_file(file: &ModelFile) -> Result<Model, ModelError> {
        let model = Model {
            name: file.name.clone(),
            layers: file.layers,
            hidden: file.hidden,
            heads: file.heads,
            kv_heads: file.kv_heads.unwrap_or(file.heads),
            head_dim: file
                .head_dim
                .unwrap_or_else(|| file.hidden.checked_div(file.heads).unwrap_or(0)),
            ffn_hidden: file
                .ffn_hidden
                .unwrap_or_else(|| default_ffn_hidden(file.hidden, file.gated_mlp)),
            vocab: file.vocab,
            seq_len: file.seq_len,
            gated_mlp: file.gated_mlp,
            linear_bias: file.linear_bias,
            qkv_bias: file.qkv_bias,
            qk_norm: file.qk_norm,
            shared_layer_norm: file.shared_layer_norm,
            tied_embeddings: file.tied_embeddings,
            position_embedding: file.position_embedding()?,
            // A whole-head rotary is the default, said as nothing.
            rotary_percent: file.rotary_percent.filter(|p| *p != 1.0),
            // The frameworks' default base is said as nothing, as a whole-head rotary is.
            rotary_base: file.rotary_base.filter(|b| *b != DEFAULT_ROTARY_BASE),
            norm: file.norm.unwrap_or(Norm::Layernorm),
            dropout: file.dropout,
            mla: file.mla,
            moe: file.moe,
            mtp_layers: file.mtp_layers,
            attention_window: file.attention_window,
            hybrid: file.hybrid.clone(),
        };
        model.check()?;
        Ok(model)
    }

    /// The spec file that resolves back to this model (every default written out).
    pub fn to_file(&self) -> ModelFile {
        ModelFile {
            name: self.name.clone(),
            description: None,
            source: None,
            published_params_b: None,
            published_active_params_b: None,
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: Some(self.kv_heads),
            head_dim: (self.hidden.checked_div(self.heads) != Some(self.head_dim)
                || !self.hidden.is_multiple_of(self.heads.max(1)))
            .then_some(self.head_dim),
            ffn_hidden: Some(self.ffn_hidden),
            vocab: self.vocab,
            seq_len: self.seq_len,
            seq_len_assumed: false,
            gated_mlp: self.gated_mlp,
            linear_bias: self.linear_bias,
            qkv_bias: self.qkv_bias,
            qk_norm: self.qk_norm,
            shared_layer_norm: self.shared_layer_norm,
            tied_embeddings: self.tied_embeddings,
            position_embedding_type: Some(self.position_embedding),
            learned_position_embeddings: None,
            rotary_percent: self.rotary_percent,
            rotary_base: self.rotary_base,
            norm: Some(self.norm),
            dropout: self.dropout,
            mla: self.mla,
            moe: self.moe,
            mtp_layers: self.mtp_layers,
            attention_window: self.attention_window,
            hybrid: self.hybrid.clone(),
        }
    }

    /// Checks the invariants every cost formula relies on.
    pub fn check(&self) -> Result<(), ModelError> {
        let positive = [
            (
                "--layers",
                self.layers,
                "a transformer has at least one layer",
            ),
            (
                "--hidden",
                self.hidden,
                "give the model width, e.g. --hidden 12288",
            ),
            (
                "--heads",
                self.heads,
                "give the attention head count, e.g. --heads 96",
            ),
            (
                "--kv-heads",
                self.kv_heads,
                "omit it for multi-head attention",
            ),
            (
                "--ffn-hidden",
                self.ffn_hidden,
                "omit it for the default 4 x hidden",
            ),
            (
                "--vocab",
                self.vocab,
                "give the vocabulary size, e.g. --vocab 51200",
            ),
            (
                "--seq-len",
                self.seq_len,
                "give the sequence length, e.g. --seq-len 2048",
            ),
        ];
        for (what, value, fix) in positive {
            if value == 0 {
                return Err(ModelError::Zero { what, value, fix });
            }
        }
        if let Some(value) = self.rotary_base {
            // Megatron-LM's `--rotary-base` and Megatron-Bridge's `rotary_base` are integers.
            if !(value.is_finite() && value >= 1.0 && value.fract() == 0.0 && value <= 1e15) {
                return Err(ModelError::RotaryBaseRange { value });
            }
            if !self.position_embedding.is_rotary() {
                return Err(ModelError::RotaryBaseWithoutRope {
                    value,
                    kind: self.position_embedding.describe(),
                });
            }
        }
        if let Some(value) = self.rotary_percent {
            if !(value > 0.0 && value <= 1.0) {
                return Err(ModelError::RotaryPercentRange { value });
            }
            if !self.position_embedding.is_rotary() {
                return Err(ModelError::RotaryPercentWithoutRope {
                    value,
                    kind: self.position_embedding.describe(),
                });
            }
            if self.mla.is_some() {
                return Err(ModelError::RotaryPercentWithLatentAttention { value });
            }
            // Megatron-Core RotaryEmbedding: `dim = int(kv_channels * rotary_percent)`, frequencies
            // over `arange(0, dim, 2)`; HF `rotary_ndims = int(head_dim * partial_rotary_factor)`.
            // Fewer than two dimensions is no rotation at all.
            let rotated = (value * f64::from(self.head_dim)).floor() as u64;
            if rotated < 2 && self.head_dim > 0 {
                return Err(ModelError::RotaryPercentBelowOnePair {
                    value,
                    rotated,
                    head_dim: self.head_dim,
                });
            }
        }
        if let Some(window) = self.attention_window
            && window.tokens == 0
        {
            return Err(ModelError::Zero {
                what: "--attention-window",
                value: 0,
                fix: "a window holds at least the query itself; give its tokens, or drop the window for full attention",
            });
        }
        let bounded = [
            ("--layers", self.layers, bound("--layers")),
            ("--hidden", self.hidden, bound("--hidden")),
            ("--heads", self.heads, bound("--heads")),
            ("--ffn-hidden", self.ffn_hidden, bound("--ffn-hidden")),
            ("--vocab", self.vocab, bound("--vocab")),
            ("--seq-len", self.seq_len, bound("--seq-len")),
            ("--mtp-layers", self.mtp_layers, bound("--mtp-layers")),
            (
                "--attention-window",
                self.attention_window.map_or(0, |w| w.tokens),
                bound("--attention-window"),
            ),
            (
                "--window-attn-skip-freq",
                self.attention_window.map_or(0, |w| w.full_every),
                bound("--window-attn-skip-freq"),
            ),
        ];
        for (what, value, max) in bounded {
            if value > max {
                return Err(ModelError::TooLarge { what, value, max });
            }
        }
        let head_dim_from_hidden = self.head_dim == self.hidden / self.heads;
        if !self.hidden.is_multiple_of(self.heads) && head_dim_from_hidden {
            // Bounded by the hidden size, so a huge head count cannot spin this loop.
            let suggest = (1..=self.heads.min(self.hidden))
                .rev()
                .find(|h| self.hidden.is_multiple_of(*h))
                .unwrap_or(1);
            return Err(ModelError::HiddenNotDivisibleByHeads {
                hidden: self.hidden,
                heads: self.heads,
                suggest,
            });
        }
        if self.head_dim == 0 {
            return Err(ModelError::Zero {
                what: "--head-dim",
                value: 0,
                fix: "omit it for hidden / heads",
            });
        }
        if self.head_dim > bound("--head-dim") {
            return Err(ModelError::TooLarge {
                what: "--head-dim",
                value: self.head_dim,
                max: bound("--head-dim"),
            });
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ModelError::KvHeadsNotDivisor {
                kv_heads: self.kv_heads,
                heads: self.heads,
            });
        }
        if let Some(moe) = &self.moe {
            let positive = [
                ("--num-experts", moe.experts, "e.g. --num-experts 8"),
                (
                    "--moe-router-topk",
                    moe.router_topk,
                    "e.g. --moe-router-topk 2",
                ),
                (
                    "--moe-ffn-hidden-size",
                    moe.ffn_hidden,
                    "give one expert's MLP width, e.g. --moe-ffn-hidden-size 2048",
                ),
                (
                    "--moe-layer-freq",
                    moe.layer_freq,
                    "use 1 for an MoE layer everywhere",
                ),
            ];
            for (what, value, fix) in positive {
                if value == 0 {
                    return Err(ModelError::Zero { what, value, fix });
                }
            }
            if moe.latent_size == Some(0) {
                return Err(ModelError::Zero {
                    what: "--moe-latent-size",
                    value: 0,
                    fix: "give the experts' latent width (Nemotron 3 Super: 1024), or omit it for experts on the model's width",
                });
            }
            let bounded = [
                ("--num-experts", moe.experts, bound("--num-experts")),
                (
                    "--moe-ffn-hidden-size",
                    moe.ffn_hidden,
                    bound("--moe-ffn-hidden-size"),
                ),
                (
                    "--moe-shared-expert-intermediate-size",
                    moe.shared_expert_ffn_hidden,
                    bound("--moe-shared-expert-intermediate-size"),
                ),
                (
                    "--moe-latent-size",
                    moe.latent_size.unwrap_or(0),
                    bound("--moe-latent-size"),
                ),
            ];
            for (what, value, max) in bounded {
                if value > max {
                    return Err(ModelError::TooLarge { what, value, max });
                }
            }
            // `Moe::latent_size`: the experts' width is the model's, projected down.
            if let Some(latent) = moe.latent_size.filter(|l| *l > self.hidden) {
                return Err(ModelError::LatentWiderThanHidden {
                    latent,
                    hidden: self.hidden,
                });
            }
            if moe.router_topk > moe.experts {
                return Err(ModelError::TopkAboveExperts {
                    topk: moe.router_topk,
                    experts: moe.experts,
                    suggest: moe.experts.min(2),
                });
            }
            check_router_groups(moe)?;
            // A hybrid stack's E symbols place its MoE layers (`Model::check_hybrid` names them).
            if self.moe_layers() == 0 && !self.is_hybrid() {
                return Err(ModelError::NoMoeLayer {
                    first_dense: moe.first_dense_layers,
                    layers: self.layers,
                    freq: moe.layer_freq,
                });
            }
        }
        if let Some(mla) = &self.mla {
            let widths = [
                ("--kv-lora-rank", mla.kv_lora_rank),
                ("--qk-head-dim", mla.qk_head_dim),
                ("--qk-pos-emb-head-dim", mla.qk_pos_emb_head_dim),
                ("--v-head-dim", mla.v_head_dim),
                ("--q-lora-rank", mla.q_lora_rank.unwrap_or(1)),
            ];
            for (what, value) in widths {
                if value == 0 {
                    return Err(ModelError::Zero {
                        what,
                        value,
                        fix: "MLA widths are positive (DeepSeek-V3: q 1536, kv 512, qk 128, rope 64, v 128)",
                    });
                }
                if value > bound(what) {
                    return Err(ModelError::TooLarge {
                        what,
                        value,
                        max: bound(what),
                    });
                }
            }
        }
        self.check_hybrid()?;
        Ok(())
    }

    pub fn head_dim(&self) -> u32 {
        self.head_dim
    }

    /// Parameters of one norm over `width` features: weight and bias (LayerNorm) or weight (RMSNorm).
    fn norm_params(&self, width: f64) -> f64 {
        match self.norm {
            Norm::Layernorm => 2.0 * width,
            Norm::Rmsnorm => width,
        }
    }

    /// Per-head widths (d_qk, d_v) of the score product QKᵀ and of the value product AV: head_dim
    /// both, or with MLA qk_head_dim + qk_pos_emb_head_dim and v_head_dim (DeepSeek-V3 §2.1.1,
    /// eq. 1–11). The attention GEMMs of one head are s × d_qk × s and s × s × d_v.
    pub fn attention_head_dims(&self) -> (f64, f64) {
        match &self.mla {
            Some(mla) => (
                f64::from(mla.qk_head_dim) + f64::from(mla.qk_pos_emb_head_dim),
                f64::from(mla.v_head_dim),
            ),
            None => (f64::from(self.head_dim), f64::from(self.head_dim)),
        }
    }

    /// Query width: heads × head_dim (equals `hidden` unless the head dimension is set apart), or
    /// heads × (qk_head_dim + qk_pos_emb_head_dim) with MLA.
    pub fn q_width(&self) -> f64 {
        f64::from(self.heads) * self.attention_head_dims().0
    }

    /// Width of the K (or V) projection: kv_heads × head_dim. Equals `hidden` without GQA. With MLA
    /// the mean of the up-projected K width heads·(qk+rope) and V width heads·v, so that
    /// 2·kv_width is what K and V hold per token.
    pub fn kv_width(&self) -> f64 {
        match &self.mla {
            Some(_) => {
                let (qk, v) = self.attention_head_dims();
                f64::from(self.heads) * (qk + v) / 2.0
            }
            None => f64::from(self.kv_heads) * f64::from(self.head_dim),
        }
    }

    /// Input width of the attention output projection: heads × head_dim, or heads × v_head_dim.
    pub fn attention_out_width(&self) -> f64 {
        f64::from(self.heads) * self.attention_head_dims().1
    }

    /// Columns of the first MLP matrix of a dense layer: ffn for GeLU, 2·ffn for gated units (gate
    /// and up fused), as the seeds describe for Qwen3's MLP.
    pub fn mlp_up_width(&self) -> f64 {
        self.up_width(self.ffn_hidden)
    }

    /// The width of the rows the routed experts read and write, and that the all-to-all and the
    /// token permutations move: the latent width under LatentMoE (`Moe::latent_size`), else the
    /// model's hidden width.
    pub fn expert_width(&self) -> f64 {
        f64::from(
            self.moe
                .and_then(|moe| moe.latent_size)
                .unwrap_or(self.hidden),
        )
    }

    /// Columns of one routed expert's first matrix (0 for a dense model).
    pub fn expert_up_width(&self) -> f64 {
        self.moe.map_or(0.0, |moe| self.up_width(moe.ffn_hidden))
    }

    fn up_width(&self, ffn: u32) -> f64 {
        let f = f64::from(ffn);
        if self.gated_mlp { 2.0 * f } else { f }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn gpt3_175b() -> Model {
        Model {
            hybrid: None,
            name: "gpt3-175b".into(),
            layers: 96,
            hidden: 12288,
            heads: 96,
            kv_heads: 96,
            head_dim: 128,
            ffn_hidden: 4 * 12288,
            vocab: 50257,
            seq_len: 2048,
            gated_mlp: false,
            linear_bias: true,
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: true,
            position_embedding: PositionEmbedding::LearnedAbsolute,
            rotary_percent: None,
            rotary_base: None,
            norm: Norm::Layernorm,
            dropout: true,
            mla: None,
            moe: None,
            mtp_layers: 0,
            attention_window: None,
        }
    }

    #[test]
    fn gpt_params_match_megatron_formula() {
        // Narayanan et al. 2021 eq. 2: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)); the final layernorm adds 2h.
        let m = gpt3_175b();
        let (l, h, v, s) = (96.0, 12288.0, 50257.0, 2048.0);
        let megatron = 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
        assert!(
            (m.params() - megatron - 2.0 * h).abs() < 1.0,
            "{} vs {}",
            m.params(),
            megatron
        );
        assert!((m.params() / 1e9 - 174.6).abs() < 0.1);
    }

    #[test]
    fn llama3_8b_counts_gqa_and_swiglu() {
        // Llama-3-8B: 32 layers, h 4096, 32 heads, 8 KV heads, ffn 14336, vocab 128256, untied,
        // RMSNorm, no biases: 8.03B parameters (Meta model card).
        let m = Model {
            rotary_base: None,
            hybrid: None,
            name: "llama3-8b".into(),
            layers: 32,
            hidden: 4096,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            ffn_hidden: 14336,
            vocab: 128256,
            seq_len: 8192,
            gated_mlp: true,
            linear_bias: false,
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            tied_embeddings: false,
            position_embedding: PositionEmbedding::Rope,
            rotary_percent: None,
            norm: Norm::Rmsnorm,
            dropout: false,
            mla: None,
            moe: None,
            mtp_layers: 0,
            attention_window: None,
        };
        assert!((m.params() / 1e9 - 8.030).abs() < 0.005, "{}", m.params());
    }

    #[test]
    fn step_flops_match_megatron_eq3_with_causal_attention() {
        // Narayanan et al. 2021 eq. 3 (96 form counts recompute); model FLOPs use 72, and the
        // attention term s/(6h) is halved to s/(12h) because causal attention computes half of the
        // (query, key) pairs (Megatron-Bridge 25.09+ flop_utils.py). Before the fix tpsim counted
        // s/(6h) while the time model ran half of it, so hardware FLOP/s could pass the peak.
        let m = gpt3_175b();
        let (b, s, l, h, v) = (1536.0, 2048.0, 96.0, 12288.0, 50257.0);
        let eq3 = 72.0 * b * s * l * h * h * (1.0 + s / (12.0 * h) + v / (12.0 * l * h));
        let ours = m.model_flops_per_step(1536, 2048).0;
        assert!((ours / eq3 - 1.0).abs() < 1e-12, "{ours} vs {eq3}");
        // The all-pairs layer count (what an unfused kernel executes) keeps Megatron's 4bs²h.
        let all_pairs = 24.0 * 2.0 * s * h * h + 4.0 * 2.0 * s * s * h;
        let layer = m.layer_forward_flops(2, 2048).0;
        let bias_free = layer - all_pairs;
        assert!(
            bias_free.abs() / all_pairs < 1e-12,
            "{layer} vs {all_pairs}"
        );
    }

    #[test]
    fn rejects_bad_shapes() {
        // As `from_file` resolves `--heads 100` without --head-dim: head_dim = hidden / heads.
        let mut m = gpt3_175b();
        m.heads = 100;
        m.head_dim = m.hidden / m.heads;
        assert!(matches!(
            m.check(),
            Err(ModelError::HiddenNotDivisibleByHeads { .. })
        ));
        let mut m = gpt3_175b();
        m.kv_heads = 7;
        assert!(matches!(
            m.check(),
            Err(ModelError::KvHeadsNotDivisor { .. })
        ));
    }

    #[test]
    fn a_huge_head_count_is_refused_at_once() {
        // An HF config with num_attention_heads 4294967295 once spun ~7 s of CPU in the divisor
        // suggestion; the loop is now bounded by the hidden size.
        let mut m = gpt3_175b();
        m.heads = u32::MAX;
        let message = m.check().unwrap_err().to_string();
        assert!(message.contains("4294967295"), "{message}");
    }
}
