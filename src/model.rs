//! The transformer being trained: its shape, parameter count and FLOP count.
//!
//! Specs come from `models/*.yaml`, from shape flags, from a Hugging Face `config.json`
//! (`hf_config.rs`) or from a bare parameter count (`shape.rs`). Counts handle grouped-query
//! attention (kv_heads < heads), a head dimension set apart from hidden/heads (Qwen3, Gemma),
//! gated MLPs (SwiGLU: three matrices), multi-head latent attention (DeepSeek-V2/V3) and
//! mixture-of-experts layers (routed experts, shared experts, dense layers before the first MoE
//! layer). Parameters are counted twice: all of them ([`Model::params`]) and those one token
//! touches ([`Model::active_params`]); model FLOPs use the active ones.

use serde::{Deserialize, Serialize};

use crate::units::Flops;

/// Normalisation layer kind; decides how many parameters each norm carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// weight and bias (GPT, BLOOM)
    Layernorm,
    /// weight only (Llama)
    Rmsnorm,
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
}

/// Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1), in Megatron-Core's
/// `MLATransformerConfig` names: queries through an optional low-rank bottleneck, keys and values
/// through a shared `kv_lora_rank` latent, plus a decoupled RoPE key of `qk_pos_emb_head_dim`
/// shared by all heads. `qk_head_dim` is the non-rotary part (HF `qk_nope_head_dim`).
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
    /// Learned absolute position embeddings (GPT-3: yes; RoPE/ALiBi models: no). Default: false.
    #[serde(default)]
    pub learned_position_embeddings: bool,
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
}

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
    pub learned_position_embeddings: bool,
    pub norm: Norm,
    pub dropout: bool,
    pub mla: Option<Mla>,
    pub moe: Option<Moe>,
}

/// Why a model shape is not usable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("{what} = {value} must be at least 1; {fix}")]
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
        "--kv-heads {kv_heads} must divide --heads {heads} (grouped-query attention shares each KV head among heads/kv_heads query heads)"
    )]
    KvHeadsNotDivisor { kv_heads: u32, heads: u32 },
    #[error("{what} {value} is larger than {max}, beyond any model trained; check the value")]
    TooLarge {
        what: &'static str,
        value: u32,
        max: u32,
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
}

/// Upper bounds that catch typos (and keep the search's divisor loops short). The largest published
/// dense models are far inside them: Megatron 1T has 128 layers, hidden 25600, vocab 51200; the
/// most experts in a published model are DeepSeek-V3's 256 and Kimi K2's 384.
const MAX_LAYERS: u32 = 10_000;
const MAX_WIDTH: u32 = 1 << 20;
const MAX_SEQ_LEN: u32 = 1 << 24;
const MAX_EXPERTS: u32 = 1 << 14;

/// Shape values given on the command line over a model from any source (`--model grok-1
/// --layers 8`), in Megatron-LM's names. `None` keeps the model's value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShapeOverrides {
    pub layers: Option<u32>,
    pub hidden: Option<u32>,
    pub heads: Option<u32>,
    pub kv_heads: Option<u32>,
    pub head_dim: Option<u32>,
    pub ffn_hidden: Option<u32>,
    pub vocab: Option<u32>,
    pub num_experts: Option<u32>,
    pub moe_router_topk: Option<u32>,
    pub moe_ffn_hidden: Option<u32>,
    pub moe_shared_expert_ffn_hidden: Option<u32>,
    pub moe_layer_freq: Option<u32>,
    pub moe_first_dense_layers: Option<u32>,
    pub q_lora_rank: Option<u32>,
    pub kv_lora_rank: Option<u32>,
    pub qk_head_dim: Option<u32>,
    pub qk_pos_emb_head_dim: Option<u32>,
    pub v_head_dim: Option<u32>,
}

/// Megatron-LM's `--moe-layer-freq` value: an integer N (every N-th layer is MoE), or a Python list
/// expression such as `[0]*3+[1]*58` (`moe_freq_type` in arguments.py). tpsim represents patterns
/// made of K dense layers followed by every-N-th MoE layers; returns (K, N, the list's length when a
/// list was given: Megatron requires it to equal the layer count).
pub fn parse_moe_layer_freq(text: &str) -> Result<(u32, u32, Option<u32>), String> {
    let trimmed = text.trim().trim_matches(|c| c == '"' || c == '\'');
    if let Ok(n) = trimmed.parse::<u32>() {
        if n == 0 {
            return Err(format!(
                "--moe-layer-freq {text}: 0 would make no layer an MoE layer; use 1 for every layer"
            ));
        }
        return Ok((0, n, None));
    }
    let fail = || {
        format!(
            "--moe-layer-freq {text:?} is not an integer nor a list tpsim can represent; give N (every N-th layer is MoE) or \"[0]*K+[1]*M\" (K dense layers, then MoE), optionally with --moe-first-k-dense-replace K"
        )
    };
    let mut pattern: Vec<bool> = Vec::new();
    let body = trimmed
        .strip_prefix('(')
        .and_then(|b| b.strip_suffix(')'))
        .unwrap_or(trimmed);
    for term in body.split('+') {
        let term = term.trim();
        let (list, times) = match term.rsplit_once('*') {
            Some((list, times)) => (
                list.trim(),
                times.trim().parse::<usize>().map_err(|_| fail())?,
            ),
            None => (term, 1),
        };
        let inner = list
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .ok_or_else(fail)?;
        let items: Vec<bool> = inner
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| match s.trim() {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(fail()),
            })
            .collect::<Result<_, _>>()?;
        if times > MAX_LAYERS as usize || pattern.len() + items.len() * times > MAX_LAYERS as usize
        {
            return Err(fail());
        }
        for _ in 0..times {
            pattern.extend_from_slice(&items);
        }
    }
    let first_dense = pattern.iter().take_while(|moe| !**moe).count();
    let rest = &pattern[first_dense..];
    if rest.is_empty() {
        return Err(fail());
    }
    // The smallest N for which the rest is "MoE every N-th layer".
    let freq = (1..=rest.len())
        .find(|n| rest.iter().enumerate().all(|(i, moe)| *moe == (i % n == 0)))
        .ok_or_else(fail)?;
    Ok((first_dense as u32, freq as u32, Some(pattern.len() as u32)))
}

impl Model {
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
            learned_position_embeddings: file.learned_position_embeddings,
            norm: file.norm.unwrap_or(Norm::Layernorm),
            dropout: file.dropout,
            mla: file.mla,
            moe: file.moe,
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
            gated_mlp: self.gated_mlp,
            linear_bias: self.linear_bias,
            qkv_bias: self.qkv_bias,
            qk_norm: self.qk_norm,
            shared_layer_norm: self.shared_layer_norm,
            tied_embeddings: self.tied_embeddings,
            learned_position_embeddings: self.learned_position_embeddings,
            norm: Some(self.norm),
            dropout: self.dropout,
            mla: self.mla,
            moe: self.moe,
        }
    }

    /// This model with the command line's shape values in place of its own, checked again. The
    /// head dimension follows hidden/heads when the model had it so, and is kept when the model sets
    /// it apart (Qwen3); KV heads follow the heads for multi-head attention. `--num-experts` on a
    /// dense model makes it an MoE model with Megatron-LM's defaults (arguments.py: top-k 2, expert
    /// width `--ffn-hidden-size`); `--kv-lora-rank` on a model without MLA adds it with
    /// arguments.py's defaults (no query bottleneck, qk 128, rope 64, v 128).
    pub fn with_overrides(&self, o: &ShapeOverrides) -> Result<Model, ModelError> {
        let mut m = self.clone();
        let implicit_head_dim = self.heads > 0
            && self.hidden.is_multiple_of(self.heads)
            && self.head_dim == self.hidden / self.heads;
        m.layers = o.layers.unwrap_or(m.layers);
        m.hidden = o.hidden.unwrap_or(m.hidden);
        if let Some(heads) = o.heads {
            if self.kv_heads == self.heads {
                m.kv_heads = heads;
            }
            m.heads = heads;
        }
        m.kv_heads = o.kv_heads.unwrap_or(m.kv_heads);
        m.head_dim = match o.head_dim {
            Some(d) => d,
            None if implicit_head_dim => m.hidden.checked_div(m.heads).unwrap_or(0),
            None => m.head_dim,
        };
        m.ffn_hidden = o.ffn_hidden.unwrap_or(m.ffn_hidden);
        m.vocab = o.vocab.unwrap_or(m.vocab);

        let moe_flags = [
            ("--moe-router-topk", o.moe_router_topk),
            ("--moe-ffn-hidden-size", o.moe_ffn_hidden),
            (
                "--moe-shared-expert-intermediate-size",
                o.moe_shared_expert_ffn_hidden,
            ),
            ("--moe-layer-freq", o.moe_layer_freq),
            ("--moe-first-k-dense-replace", o.moe_first_dense_layers),
        ];
        m.moe = match (m.moe, o.num_experts) {
            (Some(moe), experts) => Some(Moe {
                experts: experts.unwrap_or(moe.experts),
                ..moe
            }),
            (None, Some(experts)) => Some(Moe {
                experts,
                // Megatron-LM arguments.py: --moe-router-topk default 2; --moe-ffn-hidden-size
                // defaults to --ffn-hidden-size.
                router_topk: 2,
                ffn_hidden: m.ffn_hidden,
                shared_expert_ffn_hidden: 0,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: 0,
            }),
            (None, None) => {
                if let Some((flag, _)) = moe_flags.iter().find(|(_, v)| v.is_some()) {
                    return Err(ModelError::MoeFlagWithoutExperts { flag });
                }
                None
            }
        };
        if let Some(moe) = m.moe.as_mut() {
            moe.router_topk = o.moe_router_topk.unwrap_or(moe.router_topk);
            moe.ffn_hidden = o.moe_ffn_hidden.unwrap_or(moe.ffn_hidden);
            moe.shared_expert_ffn_hidden = o
                .moe_shared_expert_ffn_hidden
                .unwrap_or(moe.shared_expert_ffn_hidden);
            moe.layer_freq = o.moe_layer_freq.unwrap_or(moe.layer_freq);
            moe.first_dense_layers = o.moe_first_dense_layers.unwrap_or(moe.first_dense_layers);
        }

        let mla_flags = [
            ("--q-lora-rank", o.q_lora_rank),
            ("--qk-head-dim", o.qk_head_dim),
            ("--qk-pos-emb-head-dim", o.qk_pos_emb_head_dim),
            ("--v-head-dim", o.v_head_dim),
        ];
        m.mla = match (m.mla, o.kv_lora_rank) {
            (Some(mla), rank) => Some(Mla {
                kv_lora_rank: rank.unwrap_or(mla.kv_lora_rank),
                ..mla
            }),
            // Megatron-LM arguments.py defaults for the MLA flags.
            (None, Some(kv_lora_rank)) => Some(Mla {
                q_lora_rank: None,
                kv_lora_rank,
                qk_head_dim: 128,
                qk_pos_emb_head_dim: 64,
                v_head_dim: 128,
            }),
            (None, None) => {
                if let Some((flag, _)) = mla_flags.iter().find(|(_, v)| v.is_some()) {
                    return Err(ModelError::MlaFlagWithoutKvLoraRank { flag });
                }
                None
            }
        };
        if let Some(mla) = m.mla.as_mut() {
            if o.q_lora_rank.is_some() {
                mla.q_lora_rank = o.q_lora_rank;
            }
            mla.qk_head_dim = o.qk_head_dim.unwrap_or(mla.qk_head_dim);
            mla.qk_pos_emb_head_dim = o.qk_pos_emb_head_dim.unwrap_or(mla.qk_pos_emb_head_dim);
            mla.v_head_dim = o.v_head_dim.unwrap_or(mla.v_head_dim);
        }
        m.check()?;
        Ok(m)
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
        let bounded = [
            ("--layers", self.layers, MAX_LAYERS),
            ("--hidden", self.hidden, MAX_WIDTH),
            ("--ffn-hidden", self.ffn_hidden, 4 * MAX_WIDTH),
            ("--vocab", self.vocab, 4 * MAX_WIDTH),
            ("--seq-len", self.seq_len, MAX_SEQ_LEN),
        ];
        for (what, value, max) in bounded {
            if value > max {
                return Err(ModelError::TooLarge { what, value, max });
            }
        }
        let head_dim_from_hidden = self.head_dim == self.hidden / self.heads;
        if !self.hidden.is_multiple_of(self.heads) && head_dim_from_hidden {
            let suggest = (1..=self.heads)
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
        if self.head_dim > MAX_WIDTH / 8 {
            return Err(ModelError::TooLarge {
                what: "--head-dim",
                value: self.head_dim,
                max: MAX_WIDTH / 8,
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
            let bounded = [
                ("--num-experts", moe.experts, MAX_EXPERTS),
                ("--moe-ffn-hidden-size", moe.ffn_hidden, 4 * MAX_WIDTH),
                (
                    "--moe-shared-expert-intermediate-size",
                    moe.shared_expert_ffn_hidden,
                    4 * MAX_WIDTH,
                ),
            ];
            for (what, value, max) in bounded {
                if value > max {
                    return Err(ModelError::TooLarge { what, value, max });
                }
            }
            if moe.router_topk > moe.experts {
                return Err(ModelError::TopkAboveExperts {
                    topk: moe.router_topk,
                    experts: moe.experts,
                    suggest: moe.experts.min(2),
                });
            }
            if self.moe_layers() == 0 {
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
                if value > MAX_WIDTH {
                    return Err(ModelError::TooLarge {
                        what,
                        value,
                        max: MAX_WIDTH,
                    });
                }
            }
        }
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

    /// Per-head widths of the score product QKᵀ and of the value product AV: head_dim both, or with
    /// MLA qk_head_dim + qk_pos_emb_head_dim and v_head_dim (DeepSeek-V3 §2.1.1, eq. 1–11).
    fn score_and_value_head_dims(&self) -> (f64, f64) {
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
        f64::from(self.heads) * self.score_and_value_head_dims().0
    }

    /// Width of the K (or V) projection: kv_heads × head_dim. Equals `hidden` without GQA. With MLA
    /// the mean of the up-projected K width heads·(qk+rope) and V width heads·v, so that
    /// 2·kv_width is what K and V hold per token.
    pub fn kv_width(&self) -> f64 {
        match &self.mla {
            Some(_) => {
                let (qk, v) = self.score_and_value_head_dims();
                f64::from(self.heads) * (qk + v) / 2.0
            }
            None => f64::from(self.kv_heads) * f64::from(self.head_dim),
        }
    }

    /// Input width of the attention output projection: heads × head_dim, or heads × v_head_dim.
    pub fn attention_out_width(&self) -> f64 {
        f64::from(self.heads) * self.score_and_value_head_dims().1
    }

    /// Columns of the first MLP matrix of a dense layer: ffn for GeLU, 2·ffn for gated units (gate
    /// and up fused), as the seeds describe for Qwen3's MLP.
    pub fn mlp_up_width(&self) -> f64 {
        self.up_width(self.ffn_hidden)
    }

    /// Columns of one routed expert's first matrix (0 for a dense model).
    pub fn expert_up_width(&self) -> f64 {
        self.moe.map_or(0.0, |moe| self.up_width(moe.ffn_hidden))
    }

    fn up_width(&self, ffn: u32) -> f64 {
        let f = f64::from(ffn);
        if self.gated_mlp { 2.0 * f } else { f }
    }

    /// Weight-matrix parameters of one layer's attention. Standard: h·(q + 2·kv_width) + out·h.
    /// MLA (DeepSeek-V3 config names): q_a h·q_lora + q_b q_lora·heads·(qk+rope) (or one h·q
    /// projection without a query bottleneck), kv_a h·(kv_lora + rope), kv_b
    /// kv_lora·heads·(qk + v), o heads·v·h.
    pub fn attention_matrix_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        match &self.mla {
            None => h * (self.q_width() + 2.0 * self.kv_width()) + self.attention_out_width() * h,
            Some(mla) => {
                let heads = f64::from(self.heads);
                let (qk, v) = (f64::from(mla.qk_head_dim), f64::from(mla.v_head_dim));
                let rope = f64::from(mla.qk_pos_emb_head_dim);
                let kv_lora = f64::from(mla.kv_lora_rank);
                let q = match mla.q_lora_rank {
                    Some(r) => h * f64::from(r) + f64::from(r) * self.q_width(),
                    None => h * self.q_width(),
                };
                q + h * (kv_lora + rope)
                    + kv_lora * heads * (qk + v)
                    + self.attention_out_width() * h
            }
        }
    }

    /// Bias vectors of the attention projections: Q, K, V and output with `linear_bias`; Q, K, V
    /// only with `qkv_bias` (Qwen2). With MLA, one per projection output.
    fn attention_bias_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let qkv = match &self.mla {
            None => self.q_width() + 2.0 * self.kv_width(),
            Some(mla) => {
                let heads = f64::from(self.heads);
                let rope = f64::from(mla.qk_pos_emb_head_dim);
                let kv_lora = f64::from(mla.kv_lora_rank);
                mla.q_lora_rank.map_or(0.0, f64::from)
                    + self.q_width()
                    + kv_lora
                    + rope
                    + heads * (f64::from(mla.qk_head_dim) + f64::from(mla.v_head_dim))
            }
        };
        if self.linear_bias {
            qkv + h
        } else if self.qkv_bias {
            qkv
        } else {
            0.0
        }
    }

    /// All parameters of one layer's attention: matrices, biases, Qwen3's per-head q/k norms
    /// (`Qwen3Attention.q_norm`/`k_norm`, RMSNorm over head_dim, shared by the heads) or MLA's
    /// latent norms (`q_a_layernorm`, `kv_a_layernorm`, which are what Megatron's `--qk-layernorm`
    /// means under MLA). The input norm is in [`Model::layer_norm_params`].
    pub fn attention_params(&self) -> f64 {
        let norms = match &self.mla {
            Some(mla) => {
                self.norm_params(mla.q_lora_rank.map_or(0.0, f64::from))
                    + self.norm_params(f64::from(mla.kv_lora_rank))
            }
            None if self.qk_norm => 2.0 * self.norm_params(f64::from(self.head_dim)),
            None => 0.0,
        };
        self.attention_matrix_params() + self.attention_bias_params() + norms
    }

    /// Parameters of one MLP of inner width `ffn`: h·up + ffn·h, plus biases up + h.
    fn mlp_params_of(&self, ffn: u32) -> f64 {
        let h = f64::from(self.hidden);
        let up = self.up_width(ffn);
        let biases = if self.linear_bias { up + h } else { 0.0 };
        h * up + f64::from(ffn) * h + biases
    }

    /// Parameters of a dense layer's MLP.
    pub fn dense_mlp_params(&self) -> f64 {
        self.mlp_params_of(self.ffn_hidden)
    }

    /// Parameters of one routed expert (an MLP of `moe.ffn_hidden`); 0 for a dense model.
    pub fn expert_params(&self) -> f64 {
        self.moe
            .map_or(0.0, |moe| self.mlp_params_of(moe.ffn_hidden))
    }

    /// Parameters of an MoE layer's shared experts (all of them, plus Qwen2-MoE's h → 1 gate).
    pub fn shared_expert_params(&self) -> f64 {
        match self.moe {
            Some(moe) if moe.shared_expert_ffn_hidden > 0 => {
                let gate = if moe.shared_expert_gate {
                    f64::from(self.hidden)
                } else {
                    0.0
                };
                self.mlp_params_of(moe.shared_expert_ffn_hidden) + gate
            }
            _ => 0.0,
        }
    }

    /// Router of one MoE layer: an h × experts matrix (Megatron `TopKRouter.weight`), plus a bias
    /// with `linear_bias` (GPT-OSS `router.bias`).
    pub fn router_params(&self) -> f64 {
        self.moe.map_or(0.0, |moe| {
            let e = f64::from(moe.experts);
            e * f64::from(self.hidden) + if self.linear_bias { e } else { 0.0 }
        })
    }

    /// The norms in front of attention and MLP: two per layer, or one when they share it.
    pub fn layer_norm_params(&self) -> f64 {
        let count = if self.shared_layer_norm { 1.0 } else { 2.0 };
        count * self.norm_params(f64::from(self.hidden))
    }

    /// Whether layer `layer` (0-based) has an MoE MLP: after the first dense layers, every
    /// `layer_freq`-th layer (Megatron's integer `--moe-layer-freq`; DeepSeek's
    /// `first_k_dense_replace`).
    pub fn is_moe_layer(&self, layer: u32) -> bool {
        self.moe.is_some_and(|moe| {
            layer < self.layers
                && layer >= moe.first_dense_layers
                && (layer - moe.first_dense_layers).is_multiple_of(moe.layer_freq)
        })
    }

    /// Layers with an MoE MLP.
    pub fn moe_layers(&self) -> u32 {
        match self.moe {
            Some(moe) if self.layers > moe.first_dense_layers && moe.layer_freq > 0 => {
                (self.layers - moe.first_dense_layers).div_ceil(moe.layer_freq)
            }
            _ => 0,
        }
    }

    /// Layers with a dense MLP (all of them in a dense model).
    pub fn dense_layers(&self) -> u32 {
        self.layers - self.moe_layers()
    }

    /// All parameters of one dense layer: attention, MLP, norms. For GPT (layernorm, biases, MHA,
    /// 4h) this is 12h² + 13h, Narayanan et al. 2021 eq. 2's per-layer term.
    pub fn dense_layer_params(&self) -> f64 {
        self.attention_params() + self.dense_mlp_params() + self.layer_norm_params()
    }

    /// All parameters of one MoE layer: attention, router, every routed expert, shared experts, norms.
    pub fn moe_layer_params(&self) -> f64 {
        let experts = self.moe.map_or(0.0, |moe| f64::from(moe.experts));
        self.attention_params()
            + self.router_params()
            + experts * self.expert_params()
            + self.shared_expert_params()
            + self.layer_norm_params()
    }

    /// Parameters of one MoE layer that one token uses: as [`Model::moe_layer_params`] with only
    /// its top-k routed experts.
    pub fn moe_layer_active_params(&self) -> f64 {
        let topk = self.moe.map_or(0.0, |moe| f64::from(moe.router_topk));
        self.attention_params()
            + self.router_params()
            + topk * self.expert_params()
            + self.shared_expert_params()
            + self.layer_norm_params()
    }

    /// Parameters of one transformer layer, averaged over the layers: every layer's count for a
    /// dense model; for an MoE model (dense layers + MoE layers) / layers, so that
    /// layers × layer_params is still the blocks' total.
    pub fn layer_params(&self) -> f64 {
        if self.moe.is_none() {
            return self.dense_layer_params();
        }
        (f64::from(self.dense_layers()) * self.dense_layer_params()
            + f64::from(self.moe_layers()) * self.moe_layer_params())
            / f64::from(self.layers)
    }

    /// Routed copies of each token in an MoE layer: top-k (0 for a dense model). The EP all-to-all
    /// moves this many hidden vectors per token each way (dispatch and combine).
    pub fn routed_tokens_per_token(&self) -> f64 {
        self.moe.map_or(0.0, |moe| f64::from(moe.router_topk))
    }

    /// Input embedding (plus learned positions) parameters.
    pub fn embedding_params(&self) -> f64 {
        self.word_embedding_params() + self.position_embedding_params()
    }

    /// The vocabulary embedding, V·h: split over TP ranks by Megatron's `VocabParallelEmbedding`.
    pub fn word_embedding_params(&self) -> f64 {
        f64::from(self.vocab) * f64::from(self.hidden)
    }

    /// Learned absolute positions, s·h: a plain embedding replicated on every TP rank (Megatron-LM
    /// `language_model.py` `position_embeddings`).
    pub fn position_embedding_params(&self) -> f64 {
        if self.learned_position_embeddings {
            f64::from(self.seq_len) * f64::from(self.hidden)
        } else {
            0.0
        }
    }

    /// Output projection parameters (zero when tied to the input embedding), plus the final norm.
    pub fn output_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let projection = if self.tied_embeddings {
            0.0
        } else {
            f64::from(self.vocab) * h
        };
        projection + self.norm_params(h)
    }

    /// Total parameter count (every expert).
    pub fn params(&self) -> f64 {
        f64::from(self.layers) * self.layer_params()
            + self.embedding_params()
            + self.output_params()
    }

    /// Parameters one token uses: every dense part, the router, top-k routed experts and the shared
    /// experts, the embedding and the output layer. Equals [`Model::params`] for a dense model.
    /// (OpenAI's GPT-OSS model card quotes active parameters without the embedding table; see the
    /// tests in `tests/models.rs`.)
    pub fn active_params(&self) -> f64 {
        if self.moe.is_none() {
            return self.params();
        }
        f64::from(self.dense_layers()) * self.dense_layer_params()
            + f64::from(self.moe_layers()) * self.moe_layer_active_params()
            + self.embedding_params()
            + self.output_params()
    }

    /// Weight-matrix parameters a token multiplies in a dense layer (no biases, no norms).
    fn dense_layer_matrix_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let f = f64::from(self.ffn_hidden);
        self.attention_matrix_params() + h * self.mlp_up_width() + f * h
    }

    /// Weight-matrix parameters a token multiplies in an MoE layer: attention, router, its top-k
    /// experts, the shared experts (and their gate).
    fn moe_layer_active_matrix_params(&self) -> f64 {
        let Some(moe) = self.moe else {
            return 0.0;
        };
        let h = f64::from(self.hidden);
        let expert = h * self.expert_up_width() + f64::from(moe.ffn_hidden) * h;
        let shared = if moe.shared_expert_ffn_hidden > 0 {
            let gate = if moe.shared_expert_gate { h } else { 0.0 };
            h * self.up_width(moe.shared_expert_ffn_hidden)
                + f64::from(moe.shared_expert_ffn_hidden) * h
                + gate
        } else {
            0.0
        };
        self.attention_matrix_params()
            + f64::from(moe.experts) * h
            + f64::from(moe.router_topk) * expert
            + shared
    }

    /// Forward FLOPs of QKᵀ and AV over every (query, key) pair, for b sequences of s tokens:
    /// 2·b·s²·heads·(d_qk + d_v) (Narayanan et al. 2021 §3: 4bs²h for GPT).
    fn attention_core_all_pairs_flops(&self, b: f64, s: f64) -> f64 {
        let (qk, v) = self.score_and_value_head_dims();
        2.0 * b * s * s * f64::from(self.heads) * (qk + v)
    }

    /// Forward FLOPs of one layer, averaged over the layers (MoE layers count their active
    /// experts), for `micro_batch` sequences of `seq_len` tokens: 2 FLOPs per weight per token for
    /// the matrices, plus QKᵀ and AV over EVERY (query, key) pair — Narayanan et al. 2021 §3:
    /// 24bsh² + 4bs²h for GPT. This is what an unfused kernel executes (it computes the masked
    /// half too); model FLOPs count the causal half only ([`Model::layer_causal_forward_flops`]).
    pub fn layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.average_layer_matrix_params()
                + self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Active weight-matrix parameters per layer, averaged over dense and MoE layers.
    fn average_layer_matrix_params(&self) -> f64 {
        if self.moe.is_none() {
            return self.dense_layer_matrix_params();
        }
        (f64::from(self.dense_layers()) * self.dense_layer_matrix_params()
            + f64::from(self.moe_layers()) * self.moe_layer_active_matrix_params())
            / f64::from(self.layers)
    }

    /// Forward model FLOPs of one layer (averaged over the layers) with causal attention counted
    /// once: each query attends to the keys before it, so QKᵀ and AV cost half of
    /// [`Model::layer_forward_flops`]'s all-pairs term. This is what FlashAttention executes with a
    /// causal mask (Dao 2023, FlashAttention-2 §3.1.1) and what Megatron-Bridge 25.09+ counts
    /// (`src/megatron/bridge/training/utils/flop_utils.py` halves core attention; see
    /// validation/modern_runs.md caveat 1).
    pub fn layer_causal_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.average_layer_matrix_params()
                + 0.5 * self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Causal forward model FLOPs of one dense layer (attention + dense MLP).
    pub fn dense_layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.dense_layer_matrix_params()
                + 0.5 * self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Causal forward model FLOPs of one MoE layer (attention, router, top-k experts, shared
    /// experts); 0 for a dense model.
    pub fn moe_layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        if self.moe.is_none() {
            return Flops(0.0);
        }
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(
            2.0 * b * s * self.moe_layer_active_matrix_params()
                + 0.5 * self.attention_core_all_pairs_flops(b, s),
        )
    }

    /// Forward FLOPs of the attention core alone (QKᵀ and AV) with the causal mask: each query
    /// against the keys up to it, half of all pairs — what FlashAttention executes and what
    /// selective recompute repeats (Korthikanti et al. 2022 §5).
    pub fn attention_core_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        Flops(0.5 * self.attention_core_all_pairs_flops(f64::from(micro_batch), f64::from(seq_len)))
    }

    /// Forward FLOPs of the output (logit) layer: 2·b·s·h·V (Narayanan et al. 2021 eq. 3's V/(16lh) term).
    pub fn logits_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(2.0 * b * s * f64::from(self.hidden) * f64::from(self.vocab))
    }

    /// Model FLOPs of one training step over `sequences` sequences, without recompute: 3 × forward
    /// (backward is twice the forward), with active parameters only and causal attention counted
    /// once. For GPT this is Narayanan et al. 2021 eq. 3 with 72 in place of 96 (the 96 counts the
    /// recompute forward) and s/(12h) in place of s/(6h) (the causal half), which is
    /// Megatron-Bridge 25.09+ `flop_utils.py`.
    pub fn model_flops_per_step(&self, sequences: u32, seq_len: u32) -> Flops {
        let forward = self.layer_causal_forward_flops(sequences, seq_len) * f64::from(self.layers)
            + self.logits_forward_flops(sequences, seq_len);
        forward * 3.0
    }

    /// Model FLOPs per trained token (6 × active parameters in the matrices, plus causal attention
    /// and the logits): what MFU divides by.
    pub fn model_flops_per_token(&self, seq_len: u32) -> Flops {
        self.model_flops_per_step(1, seq_len) * (1.0 / f64::from(seq_len))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn gpt3_175b() -> Model {
        Model {
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
            learned_position_embeddings: true,
            norm: Norm::Layernorm,
            dropout: true,
            mla: None,
            moe: None,
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
            learned_position_embeddings: false,
            norm: Norm::Rmsnorm,
            dropout: false,
            mla: None,
            moe: None,
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
}
