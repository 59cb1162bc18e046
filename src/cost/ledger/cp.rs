//! The CP rows of the attention blocks, per exchange: Transformer Engine's P2P ring attention
//! (`AttnFuncWithCPAndKVP2P`): cp − 1 ring steps per layer in forward, each passing the rank's
//! K/V chunk (`comm::cp_kv_chunk_bytes`) to the next CP rank; backward passes K/V and the
//! accumulated dK/dV around the ring; full recompute repeats the forward ring. Transformer
//! Engine's all_gather and a2a (Ulysses) exchanges (`context_parallel`) and PyTorch's
//! context_parallel (`torch_ring`) beside it. A hybrid stack's Mamba mixers' all-to-alls are
//! `hybrid.rs`'s.

use super::{Op, Pass, Rows, Scope, Step};
use crate::cost::comm;
use crate::cost::groups::GroupKind;

/// Pushes the CP rows of the slowest stage's attention blocks.
pub(super) fn rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_layers,
        slowest_mix,
        ..
    } = *step;
    // How often each layer's forward exchange runs again: full recompute's share, or every layer
    // where selective recompute re-runs Transformer Engine's attention with its exchange.
    let cp_repeats = crate::cost::context_parallel::exchange_repeats(training, plan);
    // The attention blocks of the slowest stage's layers (all of them in a transformer): a hybrid
    // stack's exchange rows count its attention and Mamba blocks apart, at the stage's shares, as
    // `cost::unit_costs_at` prices them.
    let attention_layers = f64::from(slowest_layers) * slowest_mix.blocks.attention;
    // CP as PyTorch's context_parallel runs it: a K/V all-gather per layer in forward (again under
    // full recompute) and backward, and the fp32 dK/dV accumulators one hop per CP rank.
    if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::TorchAllGather {
        let kv = crate::cost::torch_ring::repeated_kv_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let gather = f64::from(c) * kv;
        let forward_site = "attention: all-gather every rank's K/V, repeated to every query head";
        rows.push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            gather,
        );
        if cp_repeats > 0.0 {
            rows.push(
                GroupKind::Cp,
                Op::AllGather,
                Pass::Recompute,
                forward_site,
                scope,
                count * cp_repeats,
                c,
                gather,
            );
        }
        rows.push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Backward,
            "attention backward: all-gather every rank's K/V again",
            scope,
            count,
            c,
            gather,
        );
        rows.push(
            GroupKind::Cp,
            Op::SendRecv,
            Pass::Backward,
            "attention backward: fp32 dK/dV accumulators to the next CP rank",
            Scope::PerCpRankPerLayerPerMicrobatch,
            count * f64::from(c),
            2,
            crate::cost::torch_ring::dkv_hop_bytes(kv),
        );
    } else if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::KvAllGather {
        // CP as Transformer Engine's all_gather: every rank's K/V gathered in forward (again under
        // full recompute) and backward, dK/dV reduce-scattered back (`context_parallel`).
        let gathered = f64::from(plan.cp) * comm::cp_kv_chunk_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward_site = "attention: all-gather every rank's K and V";
        rows.push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            gathered,
        );
        if cp_repeats > 0.0 {
            rows.push(
                GroupKind::Cp,
                Op::AllGather,
                Pass::Recompute,
                forward_site,
                scope,
                count * cp_repeats,
                c,
                gathered,
            );
        }
        rows.push(
            GroupKind::Cp,
            Op::AllGather,
            Pass::Backward,
            "attention backward: all-gather every rank's K and V again",
            scope,
            count,
            c,
            gathered,
        );
        rows.push(
            GroupKind::Cp,
            Op::ReduceScatter,
            Pass::Backward,
            "attention backward: dK and dV reduce-scattered to their owners",
            scope,
            count,
            c,
            gathered,
        );
    } else if plan.cp > 1 && training.cp_exchange == crate::training::CpExchange::HeadAllToAll {
        // CP as Transformer Engine's a2a (Ulysses): Q/K/V in and the output back per layer per
        // micro-batch, their gradients in backward (`context_parallel`).
        let (qkv, output) =
            crate::cost::context_parallel::all_to_all_tensor_bytes(model, training, plan);
        let count = attention_layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let c = plan.cp;
        let forward = [
            (
                "attention: Q, K and V, sequence shards for head shards",
                qkv,
            ),
            (
                "attention: output, head shards back to sequence shards",
                output,
            ),
        ];
        for (site, tensor) in forward {
            rows.push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Forward,
                site,
                scope,
                count,
                c,
                tensor,
            );
            if cp_repeats > 0.0 {
                rows.push(
                    GroupKind::Cp,
                    Op::AllToAll,
                    Pass::Recompute,
                    site,
                    scope,
                    count * cp_repeats,
                    c,
                    tensor,
                );
            }
        }
        for (site, tensor) in [
            (
                "attention backward: output gradient, sequence shards for head shards",
                output,
            ),
            (
                "attention backward: dQ, dK and dV, head shards back to sequence shards",
                qkv,
            ),
        ] {
            rows.push(
                GroupKind::Cp,
                Op::AllToAll,
                Pass::Backward,
                site,
                scope,
                count,
                c,
                tensor,
            );
        }
    } else if plan.cp > 1 {
        // CP, cp − 1 ring steps per layer per micro-batch.
        let chunk = comm::cp_kv_chunk_bytes(model, training, plan);
        let count = f64::from(plan.cp - 1) * attention_layers * m;
        let scope = Scope::PerRingStepPerLayerPerMicrobatch;
        let c = plan.cp;
        let forward_site = "attention: this rank's K/V chunk to the next CP rank";
        rows.push(
            GroupKind::Cp,
            Op::SendRecv,
            Pass::Forward,
            forward_site,
            scope,
            count,
            c,
            chunk,
        );
        if cp_repeats > 0.0 {
            let recompute = count * cp_repeats;
            rows.push(
                GroupKind::Cp,
                Op::SendRecv,
                Pass::Recompute,
                forward_site,
                scope,
                recompute,
                c,
                chunk,
            );
        }
        for site in [
            "attention backward: K/V chunk to the next CP rank",
            "attention backward: accumulated dK/dV to the next CP rank",
        ] {
            rows.push(
                GroupKind::Cp,
                Op::SendRecv,
                Pass::Backward,
                site,
                scope,
                count,
                c,
                chunk,
            );
        }
    }
}
