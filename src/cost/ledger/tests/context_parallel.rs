//! The ledger of context-parallel plans: each exchange's rows (P2P ring, all-gather, all-to-all,
//! PyTorch's gathers, a hybrid stack's Mamba all-to-alls) against `comm.cp`.

use super::*;

#[test]
fn context_parallel_ledger_lists_the_kv_ring_and_matches_the_estimate() {
    let (model, cluster) = llama3_8b_on_32_h100();
    let training = training(131072, 64, TrainingFramework::MegatronCore);
    let mut checked = 0;
    for (tp, cp, pp) in [(8, 2, 2), (4, 4, 1), (2, 8, 2), (1, 2, 1)] {
        for recompute in Recompute::ALL {
            for recompute_num_layers in [0, 2] {
                if recompute_num_layers > 0 && recompute != Recompute::Full {
                    continue;
                }
                for zero in [0, 1, 3u8] {
                    for reshard_after_forward in [true, false] {
                        if !reshard_after_forward && zero < 3 {
                            continue;
                        }
                        let request = PlanRequest {
                            tp,
                            cp,
                            pp,
                            dp: 32 / (tp * cp * pp),
                            sequence_parallel: tp > 1,
                            recompute,
                            recompute_num_layers,
                            zero,
                            reshard_after_forward,
                            ..PlanRequest::default()
                        };
                        let l =
                            assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                        let ring = cp_rows(&l);
                        // One forward K/V send, K/V and dK/dV in backward, the forward again
                        // under full recompute and under selective recompute, which re-runs
                        // Transformer Engine's attention with its ring; cp − 1 ring steps per
                        // layer per micro-batch.
                        let full = recompute != Recompute::None;
                        assert_eq!(ring.len(), 3 + usize::from(full), "{request:?}");
                        assert!(ring.iter().all(|e| e.op == Op::SendRecv && e.ranks == cp));
                        let forward = ring.iter().find(|e| e.pass == Pass::Forward).unwrap();
                        assert_eq!(forward.count % f64::from(cp - 1), 0.0);
                        assert!(l.cp_wire_bytes > 0.0);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 4 * 4);
}

/// A hybrid stack under context parallelism: the attention blocks' exchange rows at the
/// slowest stage's attention share, the Mamba mixers' twelve all-to-all rows (and six more
/// on full recompute) at its Mamba share, and the CP totals equal the estimate's, for every
/// exchange, recompute and pipeline split.
#[test]
fn hybrid_context_parallel_ledger_lists_the_mamba_all_to_alls_and_matches_the_estimate() {
    let model = crate::specs::load_model("nemotron-h-8b").unwrap();
    let (_, cluster) = llama3_8b_on_32_h100();
    let mut checked = 0;
    for exchange in [
        crate::training::CpExchange::KvRing,
        crate::training::CpExchange::KvAllGather,
        crate::training::CpExchange::HeadAllToAll,
    ] {
        let training = Training {
            cp_exchange: exchange,
            ..training(32768, 64, TrainingFramework::MegatronCore)
        };
        // tp 8 leaves one group per TP rank, which cp 2 copies; Transformer Engine's a2a
        // cannot split its one K/V head over cp 2.
        for (tp, cp, pp) in [(2, 2, 1), (4, 2, 2), (2, 4, 2), (1, 8, 1), (8, 2, 2)] {
            if tp == 8 && exchange == crate::training::CpExchange::HeadAllToAll {
                continue;
            }
            for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                let request = PlanRequest {
                    tp,
                    cp,
                    pp,
                    dp: 32 / (tp * cp * pp),
                    sequence_parallel: tp > 1,
                    recompute,
                    zero: 1,
                    ..PlanRequest::default()
                };
                let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                let mamba: Vec<_> = cp_rows(&l)
                    .into_iter()
                    .filter(|e| e.site.starts_with("Mamba"))
                    .collect();
                let full = recompute == Recompute::Full;
                assert_eq!(mamba.len(), 12 + 6 * usize::from(full), "{request:?}");
                assert!(mamba.iter().all(|e| e.op == Op::AllToAll && e.ranks == cp));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, (5 + 5 + 4) * 3);
}

#[test]
fn torch_context_parallel_ledger_lists_the_gathers_and_matches_the_estimate() {
    let (model, cluster) = llama3_8b_on_32_h100();
    let training = training(131072, 64, TrainingFramework::Torchtitan);
    assert_eq!(
        training.cp_exchange,
        crate::training::CpExchange::TorchAllGather
    );
    for (tp, cp) in [(1, 2), (1, 8), (8, 4)] {
        for recompute in [Recompute::None, Recompute::Full] {
            let request = PlanRequest {
                tp,
                cp,
                dp: 32 / (tp * cp),
                sequence_parallel: tp > 1,
                recompute,
                zero: 3,
                ..PlanRequest::default()
            };
            let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
            let ring = cp_rows(&l);
            // Gathers in forward and backward (and the recompute), the dK/dV hops in backward.
            let full = recompute == Recompute::Full;
            assert_eq!(ring.len(), 3 + usize::from(full), "{request:?}");
            let gathers = ring.iter().filter(|e| e.op == Op::AllGather).count();
            assert_eq!(gathers, 2 + usize::from(full));
            let hop = ring.iter().find(|e| e.op == Op::SendRecv).unwrap();
            let gather = ring.iter().find(|e| e.op == Op::AllGather).unwrap();
            assert_eq!(hop.count, gather.count * f64::from(cp));
            // The hop carries fp32 accumulators: twice one rank's bf16 K/V, and each rank's
            // K/V is 1/cp of the gathered tensor.
            assert!((hop.tensor_bytes - 2.0 * gather.tensor_bytes / f64::from(cp)).abs() < 1.0);
        }
    }
}

#[test]
fn transformer_engine_all_gather_and_all_to_all_ledgers_match_the_estimate() {
    use crate::training::CpExchange;
    let (model, cluster) = llama3_8b_on_32_h100();
    // The ring under every recompute: `context_parallel_ledger_lists_the_kv_ring_...`.
    for exchange in [CpExchange::KvAllGather, CpExchange::HeadAllToAll] {
        let training = Training {
            cp_exchange: exchange,
            ..training(131072, 64, TrainingFramework::MegatronCore)
        };
        // Llama 3 8B has 8 K/V heads: tp 2 leaves 4 per rank, which cp 2 and 4 split.
        for (tp, cp) in [(1, 2), (1, 8), (2, 4)] {
            // Selective recompute re-runs Transformer Engine's attention, exchange included.
            for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                let request = PlanRequest {
                    tp,
                    cp,
                    dp: 32 / (tp * cp),
                    sequence_parallel: tp > 1,
                    recompute,
                    zero: 1,
                    ..PlanRequest::default()
                };
                let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                let rows = cp_rows(&l);
                let full = usize::from(recompute != Recompute::None);
                match exchange {
                    // Gathers in forward, backward (and the recompute), one reduce-scatter.
                    CpExchange::KvAllGather => {
                        assert_eq!(rows.len(), 3 + full, "{request:?}");
                        let scatter = rows.iter().filter(|e| e.op == Op::ReduceScatter).count();
                        assert_eq!(scatter, 1);
                    }
                    // Q/K/V and the output in forward (and the recompute), their gradients
                    // in backward, every row an all-to-all.
                    _ => {
                        assert_eq!(rows.len(), 4 + 2 * full, "{request:?}");
                        assert!(rows.iter().all(|e| e.op == Op::AllToAll));
                    }
                }
            }
        }
    }
}
