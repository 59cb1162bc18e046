//! Muon's optimizer step as Megatron-Core runs it (`--optimizer muon`,
//! `OptimizerStates::Muon`): the update of each 2-D weight of the layers is orthogonalized by
//! Newton–Schulz iterations on the whole matrix before it is applied.
//!
//! - The iteration (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
//!   networks", `zeropower_via_newtonschulz5`; NVIDIA's emerging_optimizers `newton_schulz` that
//!   megatron/core/optimizer/emerging_optimizers.py calls): with X the m × n update, m ≤ n
//!   (transposed when taller than wide), each quintic step computes A = X Xᵀ (2m²n FLOPs),
//!   B = bA + cA² (2m³) and X ← aX + BX (2m²n); Megatron-Core runs 5 steps
//!   (`--muon-num-ns-steps`, default 5, `--muon-coefficient-type quintic`, arguments.py at
//!   d98e8a64). `--muon-fp32-matmul-prec medium` (the default) lets the fp32 products run on
//!   bf16 tensor cores (PyTorch's `set_float32_matmul_precision("medium")`), so the FLOPs are
//!   priced at the GPU's bf16 GEMM rate.
//! - Which matrices: every 2-D weight of the layers; the embedding, the output layer, norms and
//!   biases go to Adam (`_is_nonlinear_or_embedding`). Attention's fused QKV weight is split into
//!   three matrices before the iteration (`--muon-split-qkv`, on by default): `orthogonalize`
//!   views it as [groups, heads/groups·d + d + d, hidden], splits dim 1 by `qkv_split_shapes`
//!   and reshapes each part to (-1, hidden), so the query rows of every group make one
//!   heads·d × hidden matrix and the keys and values one groups·d × hidden matrix each
//!   (emerging_optimizers.py `TensorParallelMuon.orthogonalize`; the same in muon.py since
//!   a2381d8007); MLA's projections are whole matrices (its `linear_q*`/`linear_kv*` names are
//!   not tagged `is_qkv`, "TODO(deyuf): support MLA", optimizer/__init__.py at d98e8a64); the
//!   gated MLP's fused FC1 is one matrix; each
//!   routed expert's FC1 and FC2 are matrices of their own (Transformer Engine's `GroupedLinear`
//!   keeps one weight per expert).
//! - Where: under `--use-distributed-optimizer` Megatron-Core runs its layer-wise distributed
//!   optimizer (arguments.py turns it on for emerging optimizers): each data-parallel rank owns
//!   whole parameters, balanced by Newton–Schulz cost (`LayerWiseDistributedOptimizer`,
//!   layer_wise_optimizer.py), updates those and all-gathers them (the distributed optimizer's
//!   parameter gather, priced as ZeRO-1's). Without it every DP rank updates every parameter.
//!   A tensor-parallel weight is gathered whole over TP in fp32 and every TP rank runs the whole
//!   iteration (`--muon-tp-mode duplicated`, the default): TP does not divide the work.
//!
//! What is left out: hybrid Mamba stacks and LatentMoE (refused: their mixers' and latent
//! projections' matrix shapes are not listed here), `--muon-use-syrk` (a symmetric product for
//! X Xᵀ, half its FLOPs; off by default) and the `distributed` TP mode.

use crate::model::Model;

/// Newton–Schulz steps per update (`--muon-num-ns-steps`, Megatron-Core's default).
pub const NEWTON_SCHULZ_STEPS: f64 = 5.0;

/// Bytes per element of the update gathered over TP before the iteration (fp32, as the momentum
/// buffer it is read from).
const GATHER_BYTES_PER_ELEMENT: f64 = 4.0;

/// FLOPs of orthogonalizing one `rows` × `cols` matrix: [`NEWTON_SCHULZ_STEPS`] quintic steps of
/// 4m²n + 2m³ with m the smaller side.
pub fn newton_schulz_flops(rows: f64, cols: f64) -> f64 {
    let (m, n) = (rows.min(cols), rows.max(cols));
    NEWTON_SCHULZ_STEPS * (4.0 * m * m * n + 2.0 * m * m * m)
}

/// Newton–Schulz FLOPs and parameters of a set of whole (TP-unsplit) matrices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Work {
    flops: f64,
    params: f64,
}

impl Work {
    fn matrix(rows: f64, cols: f64) -> Work {
        Work {
            flops: newton_schulz_flops(rows, cols),
            params: rows * cols,
        }
    }
    fn times(self, count: f64) -> Work {
        Work {
            flops: self.flops * count,
            params: self.params * count,
        }
    }
    fn plus(self, other: Work) -> Work {
        Work {
            flops: self.flops + other.flops,
            params: self.params + other.params,
        }
    }
    fn per_param(self) -> f64 {
        if self.params > 0.0 {
            self.flops / self.params
        } else {
            0.0
        }
    }
}

/// One attention block's matrices: multi-latent attention's down and up projections, or the
/// QKV weight split into its query, key and value matrices (each spanning every query group) and
/// the output projection.
fn attention_work(model: &Model) -> Work {
    let h = f64::from(model.hidden);
    let heads = f64::from(model.heads);
    if let Some(mla) = model.mla {
        let qk = f64::from(mla.qk_head_dim + mla.qk_pos_emb_head_dim);
        let query = match mla.q_lora_rank {
            Some(rank) => {
                let r = f64::from(rank);
                Work::matrix(r, h).plus(Work::matrix(heads * qk, r))
            }
            None => Work::matrix(heads * qk, h),
        };
        let kv_rank = f64::from(mla.kv_lora_rank);
        let kv = Work::matrix(kv_rank + f64::from(mla.qk_pos_emb_head_dim), h).plus(Work::matrix(
            heads * f64::from(mla.qk_head_dim + mla.v_head_dim),
            kv_rank,
        ));
        return query
            .plus(kv)
            .plus(Work::matrix(h, heads * f64::from(mla.v_head_dim)));
    }
    let d = model.attention_head_dims().0;
    let groups = f64::from(model.kv_heads);
    let query = Work::matrix(heads * d, h);
    let key_value = Work::matrix(groups * d, h).times(2.0);
    query.plus(key_value).plus(Work::matrix(h, heads * d))
}

/// One MLP of FFN width `ffn`: FC1 (both halves of a gated MLP, one fused weight) and FC2.
fn mlp_work(model: &Model, ffn: u32) -> Work {
    let h = f64::from(model.hidden);
    let f = f64::from(ffn);
    let fc1_rows = if model.gated_mlp { 2.0 * f } else { f };
    Work::matrix(fc1_rows, h).plus(Work::matrix(h, f))
}

/// Newton–Schulz FLOPs per parameter of the layers' weights: the non-expert part averaged over
/// the model's layers (attention, dense MLPs, routers, shared experts), and one routed expert's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlopsPerParam {
    pub rest: f64,
    pub expert: f64,
}

/// [`FlopsPerParam`] of `model`'s layers.
pub fn flops_per_param(model: &Model) -> FlopsPerParam {
    let attention = attention_work(model);
    let Some(moe) = model.moe else {
        return FlopsPerParam {
            rest: attention
                .plus(mlp_work(model, model.ffn_hidden))
                .per_param(),
            expert: 0.0,
        };
    };
    let h = f64::from(model.hidden);
    let mut moe_rest = attention.plus(Work::matrix(f64::from(moe.experts), h));
    if moe.shared_expert_ffn_hidden > 0 {
        moe_rest = moe_rest.plus(mlp_work(model, moe.shared_expert_ffn_hidden));
    }
    let moe_layers = f64::from(model.moe_layers());
    let dense_layers = f64::from(model.dense_layers());
    let dense = attention.plus(mlp_work(model, model.ffn_hidden));
    let rest = moe_rest.times(moe_layers).plus(dense.times(dense_layers));
    FlopsPerParam {
        rest: rest.per_param(),
        expert: mlp_work(model, moe.ffn_hidden).per_param(),
    }
}

/// What Muon's step adds on one GPU: the Newton–Schulz FLOPs of the weights it owns, gathered
/// whole over (expert) TP, and the bytes each of those gathers brings in.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepWork {
    pub flops: f64,
    /// fp32 bytes received over the TP group (dense weights).
    pub tp_gather_bytes: f64,
    /// fp32 bytes received over the expert-TP group (routed experts).
    pub expert_tp_gather_bytes: f64,
}

/// Muon's work on one GPU holding `layer_params` of the layers' non-expert weights and
/// `expert_params` of routed experts (its TP and expert-TP shares), the optimizer owning
/// 1/`owners` of the former and 1/`expert_owners` of the latter (the DP×CP and expert-DP ranks
/// under the layer-wise distributed optimizer, 1 without it). Every TP rank orthogonalizes the
/// whole of what its DP rank owns (`--muon-tp-mode duplicated`).
pub fn step_work(
    model: &Model,
    tp: u32,
    etp: u32,
    layer_params: f64,
    expert_params: f64,
    owners: u32,
    expert_owners: u32,
) -> StepWork {
    let per_param = flops_per_param(model);
    let t = f64::from(tp);
    let et = f64::from(etp);
    let owned_whole = layer_params * t / f64::from(owners.max(1));
    let owned_experts_whole = expert_params * et / f64::from(expert_owners.max(1));
    StepWork {
        flops: owned_whole * per_param.rest + owned_experts_whole * per_param.expert,
        tp_gather_bytes: owned_whole * (t - 1.0) / t * GATHER_BYTES_PER_ELEMENT,
        expert_tp_gather_bytes: owned_experts_whole * (et - 1.0) / et * GATHER_BYTES_PER_ELEMENT,
    }
}

/// Why Muon's step cannot be priced for `model`, or `None`.
pub fn unpriced(model: &Model) -> Option<&'static str> {
    if model.is_hybrid() {
        Some("a hybrid Mamba-Transformer stack (its mixers' matrices are not listed)")
    } else if model.moe.is_some_and(|moe| moe.latent_size.is_some()) {
        Some("LatentMoE (its latent projections are not listed)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 5 quintic steps of a square 1024 matrix: 5 · 6 · 1024³; a tall matrix is transposed.
    #[test]
    fn newton_schulz_flops_count_the_smaller_side_cubed() {
        let n: f64 = 1024.0;
        assert_eq!(newton_schulz_flops(n, n), 5.0 * 6.0 * n.powi(3));
        assert_eq!(
            newton_schulz_flops(4096.0, 1024.0),
            newton_schulz_flops(1024.0, 4096.0)
        );
        assert_eq!(
            newton_schulz_flops(1024.0, 4096.0),
            5.0 * (4.0 * n * n * 4096.0 + 2.0 * n.powi(3))
        );
    }

    /// Llama 3 70B's layer: QKV split into the 8192-row query, 1024-row key and value matrices,
    /// the 8192² output projection, FC1 of 2 · 28672 rows and FC2; the fused FC1 dominates.
    #[test]
    fn a_dense_layer_is_dominated_by_its_mlp() {
        let model = crate::specs::load_model("llama3-70b").unwrap();
        let h: f64 = 8192.0;
        let qkv = newton_schulz_flops(h, h) + 2.0 * newton_schulz_flops(1024.0, h);
        let proj = newton_schulz_flops(h, h);
        let mlp = newton_schulz_flops(2.0 * 28672.0, h) + newton_schulz_flops(h, 28672.0);
        let params = h * (64.0 * 128.0 + 2.0 * 8.0 * 128.0) + h * h + 3.0 * 28672.0 * h;
        let want = (qkv + proj + mlp) / params;
        let got = flops_per_param(&model).rest;
        assert!((got / want - 1.0).abs() < 1e-12, "{got} vs {want}");
        assert!(mlp > 0.75 * (qkv + proj + mlp));
    }

    /// The layer-wise optimizer divides the work over its owners; TP does not (every TP rank runs
    /// the whole matrix), so at a fixed GPU count TP 8 costs 8× per GPU what DP alone does.
    #[test]
    fn tensor_parallelism_duplicates_the_iteration() {
        let model = crate::specs::load_model("llama3-8b").unwrap();
        let params = 7e9;
        let dp_only = step_work(&model, 1, 1, params, 0.0, 8, 1);
        let tp8 = step_work(&model, 8, 1, params / 8.0, 0.0, 1, 1);
        assert!((tp8.flops / dp_only.flops - 8.0).abs() < 1e-9);
        assert_eq!(dp_only.tp_gather_bytes, 0.0);
        assert!((tp8.tp_gather_bytes - params * 7.0 / 8.0 * 4.0).abs() < 1.0);
    }
}
