//! The transformer being trained: its shape, parameter count and FLOP count.
//!
//! Specs come from `models/*.yaml`, from shape flags, or from a bare parameter count (`shape.rs`).
//! Counts handle grouped-query attention (kv_heads < heads) and gated MLPs (SwiGLU: three matrices).

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
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    /// Default: `heads` (multi-head attention).
    #[serde(default)]
    pub kv_heads: Option<u32>,
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
    pub ffn_hidden: u32,
    pub vocab: u32,
    pub seq_len: u32,
    pub gated_mlp: bool,
    pub linear_bias: bool,
    pub tied_embeddings: bool,
    pub learned_position_embeddings: bool,
    pub norm: Norm,
    pub dropout: bool,
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
        "--hidden {hidden} is not divisible by --heads {heads}; the head dimension must be whole (e.g. --heads {suggest})"
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
}

/// Upper bounds that catch typos (and keep the search's divisor loops short). The largest published
/// dense models are far inside them: Megatron 1T has 128 layers, hidden 25600, vocab 51200.
const MAX_LAYERS: u32 = 10_000;
const MAX_WIDTH: u32 = 1 << 20;
const MAX_SEQ_LEN: u32 = 1 << 24;

impl Model {
    /// Resolves a spec file's defaults and checks the shape.
    pub fn from_file(file: &ModelFile) -> Result<Model, ModelError> {
        let model = Model {
            name: file.name.clone(),
            layers: file.layers,
            hidden: file.hidden,
            heads: file.heads,
            kv_heads: file.kv_heads.unwrap_or(file.heads),
            ffn_hidden: file
                .ffn_hidden
                .unwrap_or_else(|| default_ffn_hidden(file.hidden, file.gated_mlp)),
            vocab: file.vocab,
            seq_len: file.seq_len,
            gated_mlp: file.gated_mlp,
            linear_bias: file.linear_bias,
            tied_embeddings: file.tied_embeddings,
            learned_position_embeddings: file.learned_position_embeddings,
            norm: file.norm.unwrap_or(Norm::Layernorm),
            dropout: file.dropout,
        };
        model.check()?;
        Ok(model)
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
        if !self.hidden.is_multiple_of(self.heads) {
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
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ModelError::KvHeadsNotDivisor {
                kv_heads: self.kv_heads,
                heads: self.heads,
            });
        }
        Ok(())
    }

    pub fn head_dim(&self) -> u32 {
        self.hidden / self.heads
    }

    /// Width of the K (or V) projection: kv_heads × head_dim. Equals `hidden` without GQA.
    pub fn kv_width(&self) -> f64 {
        f64::from(self.kv_heads) * f64::from(self.head_dim())
    }

    /// Columns of the first MLP matrix: ffn for GeLU, 2·ffn for gated units (gate and up fused),
    /// as the seeds describe for Qwen3's MLP.
    pub fn mlp_up_width(&self) -> f64 {
        let f = f64::from(self.ffn_hidden);
        if self.gated_mlp { 2.0 * f } else { f }
    }

    /// Weight-matrix parameters of one layer (no biases, no norms): QKV h·(h+2·kv_width),
    /// output h², MLP h·up_width + ffn·h. With h = hidden, ffn = 4h and MHA this is 12h²,
    /// Megatron's count (Narayanan et al. 2021, §3 / eq. 2).
    pub fn layer_matrix_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let f = f64::from(self.ffn_hidden);
        h * (h + 2.0 * self.kv_width()) + h * h + h * self.mlp_up_width() + f * h
    }

    /// All parameters of one transformer layer: matrices, biases and the two norms.
    /// For GPT (layernorm, biases, MHA, 4h) this is 12h² + 13h, Narayanan et al. 2021 eq. 2's per-layer term.
    pub fn layer_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let norm_params = match self.norm {
            Norm::Layernorm => 2.0 * h,
            Norm::Rmsnorm => h,
        };
        let biases = if self.linear_bias {
            (h + 2.0 * self.kv_width()) + h + self.mlp_up_width() + h
        } else {
            0.0
        };
        self.layer_matrix_params() + biases + 2.0 * norm_params
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
        let final_norm = match self.norm {
            Norm::Layernorm => 2.0 * h,
            Norm::Rmsnorm => h,
        };
        let projection = if self.tied_embeddings {
            0.0
        } else {
            f64::from(self.vocab) * h
        };
        projection + final_norm
    }

    /// Total parameter count.
    pub fn params(&self) -> f64 {
        f64::from(self.layers) * self.layer_params()
            + self.embedding_params()
            + self.output_params()
    }

    /// Forward FLOPs of one layer for `micro_batch` sequences of `seq_len` tokens:
    /// 2 FLOPs per weight per token for the matrices, plus 2·2·b·s²·(heads·head_dim) for QKᵀ and
    /// attention-times-V (Narayanan et al. 2021 §3: 24bsh² + 4bs²h for GPT; causal masking not
    /// credited, as in Megatron's formula).
    pub fn layer_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        let attention_width = f64::from(self.heads) * f64::from(self.head_dim());
        Flops(2.0 * b * s * self.layer_matrix_params() + 4.0 * b * s * s * attention_width)
    }

    /// Forward FLOPs of the attention core alone (QKᵀ and AV): what selective recompute repeats
    /// (Korthikanti et al. 2022 §5).
    pub fn attention_core_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(4.0 * b * s * s * f64::from(self.heads) * f64::from(self.head_dim()))
    }

    /// Forward FLOPs of the output (logit) layer: 2·b·s·h·V (Narayanan et al. 2021 eq. 3's V/(16lh) term).
    pub fn logits_forward_flops(&self, micro_batch: u32, seq_len: u32) -> Flops {
        let b = f64::from(micro_batch);
        let s = f64::from(seq_len);
        Flops(2.0 * b * s * f64::from(self.hidden) * f64::from(self.vocab))
    }

    /// Model FLOPs of one training step over `sequences` sequences, without recompute:
    /// 3 × forward (backward is twice the forward). For GPT this is Narayanan et al. 2021 eq. 3 with
    /// 72 in place of 96 (the 96 counts the recompute forward).
    pub fn model_flops_per_step(&self, sequences: u32, seq_len: u32) -> Flops {
        let forward = self.layer_forward_flops(sequences, seq_len) * f64::from(self.layers)
            + self.logits_forward_flops(sequences, seq_len);
        forward * 3.0
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
            ffn_hidden: 4 * 12288,
            vocab: 50257,
            seq_len: 2048,
            gated_mlp: false,
            linear_bias: true,
            tied_embeddings: true,
            learned_position_embeddings: true,
            norm: Norm::Layernorm,
            dropout: true,
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
            ffn_hidden: 14336,
            vocab: 128256,
            seq_len: 8192,
            gated_mlp: true,
            linear_bias: false,
            tied_embeddings: false,
            learned_position_embeddings: false,
            norm: Norm::Rmsnorm,
            dropout: false,
        };
        assert!((m.params() / 1e9 - 8.030).abs() < 0.005, "{}", m.params());
    }

    #[test]
    fn step_flops_match_megatron_eq3_without_recompute() {
        // Narayanan et al. 2021 eq. 3 (96 form counts recompute); model FLOPs use 72.
        let m = gpt3_175b();
        let (b, s, l, h, v) = (1536.0, 2048.0, 96.0, 12288.0, 50257.0);
        let eq3 = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
        let ours = m.model_flops_per_step(1536, 2048).0;
        assert!((ours / eq3 - 1.0).abs() < 1e-12, "{ours} vs {eq3}");
    }

    #[test]
    fn rejects_bad_shapes() {
        let mut m = gpt3_175b();
        m.heads = 100;
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
