//! What one training step processes, and the number formats it keeps.

use serde::{Deserialize, Serialize};

/// Default sequences per step when `--global-batch` is not given: GPT-3 175B's 1536 sequences of
/// 2048 tokens (Brown et al. 2020 Table 2.1 lists 3.2M tokens), the batch Megatron SC'21 used too.
pub const DEFAULT_GLOBAL_BATCH: u32 = 1536;

/// Bytes per parameter kept in training, mixed precision with Adam (Rajbhandari et al. 2020 §3.1:
/// 2Ψ fp16 weights, 2Ψ fp16 gradients, 12Ψ fp32 master weights, momentum and variance).
pub const WEIGHT_BYTES: f64 = 2.0;
pub const OPTIMIZER_BYTES: f64 = 12.0;

/// Gradient storage precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradDtype {
    /// 2 bytes per gradient (ZeRO paper, DeepSpeed's default).
    Bf16,
    /// 4 bytes: Megatron-LM's fp32 `main_grad` buffer (`--accumulate-allreduce-grads-in-fp32`).
    Fp32,
}

impl GradDtype {
    pub fn bytes(self) -> f64 {
        match self {
            GradDtype::Bf16 => 2.0,
            GradDtype::Fp32 => 4.0,
        }
    }
}

/// How the attention core (QKᵀ, softmax, AV) is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Fused kernel that never writes the s×s scores to memory and recomputes them in backward
    /// (Dao et al. 2022, FlashAttention; FlashAttention-2 §3: backward runs 5 matmuls to forward's 2).
    Flash,
    /// Megatron-LM's 2021 path: scores materialised, fused scale-mask-softmax, dropout
    /// (Korthikanti et al. 2022 Table 2 counts its activations).
    Unfused,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Training {
    pub seq_len: u32,
    /// Sequences per optimizer step across all replicas.
    pub global_batch: u32,
    pub grad_dtype: GradDtype,
    /// Tokens to train on, for the time-to-train estimate.
    pub tokens: Option<f64>,
    pub attention: AttentionKernel,
}
