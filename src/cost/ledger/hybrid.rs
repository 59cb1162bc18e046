//! A hybrid stack's rows: its Mamba mixers' six all-to-alls each way under CP
//! (`MambaContextParallel`, `cost::hybrid::MambaExchange`), and the names of the TP sites its
//! Mamba mixers share with the attention block.

use super::{Op, Pass, Rows, Scope, Step, recomputed};
use crate::cost::groups::GroupKind;

/// Pushes the CP all-to-all rows of the slowest stage's Mamba mixers.
pub(super) fn mamba_cp_rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_layers,
        slowest_mix,
        ..
    } = *step;
    // A hybrid stack's Mamba mixers under CP: z, x, B, C and dt traded for head shards before the
    // conv, each by its own all-to-all, and the scan's output traded back; the gradients' reverse
    // all-to-alls in backward; the forward's again on full recompute's share
    // (`cost::hybrid::MambaExchange`, megatron/core/ssm/mamba_context_parallel.py).
    let mamba_count = f64::from(slowest_layers) * m * slowest_mix.blocks.mamba;
    if plan.cp > 1 && mamba_count > 0.0 {
        let exchange = crate::cost::hybrid::mamba_exchange(model, training.seq_len, plan);
        let [z, x, b, c_state, dt] = exchange.before_scan;
        let y = exchange.after_scan;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward = [
            ("Mamba mixer: z, sequence shards for head shards", z),
            ("Mamba mixer: x, sequence shards for head shards", x),
            (
                "Mamba mixer: B (with CP's group copies), sequence shards for head shards",
                b,
            ),
            (
                "Mamba mixer: C (with CP's group copies), sequence shards for head shards",
                c_state,
            ),
            ("Mamba mixer: dt, sequence shards for head shards", dt),
            (
                "Mamba mixer: scan output y, head shards back to sequence shards",
                y,
            ),
        ];
        let backward = [
            (
                "Mamba backward: gradient of y, sequence shards for head shards",
                y,
            ),
            (
                "Mamba backward: gradient of z, head shards back to sequence shards",
                z,
            ),
            (
                "Mamba backward: gradient of x, head shards back to sequence shards",
                x,
            ),
            (
                "Mamba backward: gradient of B, head shards back to sequence shards",
                b,
            ),
            (
                "Mamba backward: gradient of C, head shards back to sequence shards",
                c_state,
            ),
            (
                "Mamba backward: gradient of dt, head shards back to sequence shards",
                dt,
            ),
        ];
        for (site, tensor) in forward {
            rows.push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Forward,
                site,
                scope,
                mamba_count,
                c,
                tensor,
            );
            rows.push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Recompute,
                site,
                scope,
                recomputed(mamba_count, plan),
                c,
                tensor,
            );
        }
        for (site, tensor) in backward {
            rows.push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Backward,
                site,
                scope,
                mamba_count,
                c,
                tensor,
            );
        }
    }
}

/// A TP site of the attention block as a hybrid stack's ledger names it: its Mamba mixers run the
/// same pair of collectives at the same places (`in_proj` column split, `out_proj` row split).
pub(super) fn hybrid_site(site: &'static str) -> &'static str {
    match site {
        "before attention QKV (column split): gather the sequence-split input" => {
            "before attention QKV or Mamba in_proj (column split): gather the sequence-split input"
        }
        "after attention output projection (row split): sum partial outputs, split by sequence" => {
            "after attention output projection or Mamba out_proj (row split): sum partial outputs, split by sequence"
        }
        "after attention output projection (row split): sum partial outputs" => {
            "after attention output projection or Mamba out_proj (row split): sum partial outputs"
        }
        "attention QKV input gradient (conjugate of the all-gather)" => {
            "attention QKV or Mamba in_proj input gradient (conjugate of the all-gather)"
        }
        "attention output gradient (conjugate of the reduce-scatter)" => {
            "attention or Mamba output gradient (conjugate of the reduce-scatter)"
        }
        "attention QKV input again, for its weight gradient (the forward kept the sequence shard)" => {
            "attention QKV or Mamba in_proj input again, for its weight gradient (the forward kept the sequence shard)"
        }
        "attention QKV input gradient (column split, Megatron's f)" => {
            "attention QKV or Mamba in_proj input gradient (column split, Megatron's f)"
        }
        other => other,
    }
}
