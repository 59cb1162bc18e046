//! The ledger of MoE plans: the all-to-alls, expert TP and expert gradients, at the slowest
//! stage's MoE share, against `comm.ep` and `comm.dp`.

use super::*;

/// The ledger's EP (all-to-all and expert-TP) totals equal `comm.ep`'s in bytes and time to
/// 1e-9.
fn assert_ep_matches(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    request: &PlanRequest,
) -> Ledger {
    let l = assert_ledger_matches_estimate(model, cluster, training, request);
    let plan = ParallelPlan::build(request, model, cluster, training).unwrap();
    let e = evaluate(model, cluster, training, &plan);
    let (bytes, time_s) = (e.comm.ep.wire_bytes.0, e.comm.ep.time_s.0);
    // The slowest stage pays its own MoE layers' all-to-alls: none if it holds none.
    assert_eq!(bytes > 0.0, e.slowest_stage_moe_layers > 0, "{request:?}");
    assert!(close(l.ep_wire_bytes, bytes), "{request:?}");
    assert!(close(l.comm_time_s(GroupKind::Ep), time_s), "{request:?}");
    l
}

#[test]
fn moe_patterns_and_shares_ledger_matches_the_estimate() {
    // A review found the ledger rounding the busiest stage's MoE layers times micro-batches
    // where `evaluate` kept the model's average share: Mixtral with `--moe-layer-freq 3` on 16
    // stages (2 layers a stage, 11 of 32 MoE) counted 1 pair per micro-batch against 0.6875,
    // and at `--moe-layer-freq 8` no EP rows at all. Both now count the busiest stage's own
    // MoE layers (1 of its 2 in both cases); the ledger must keep matching.
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 4,
        gpus_per_node: 8,
    };
    let training_of = |global_batch| training(4096, global_batch, TrainingFramework::MegatronCore);
    let mut mixtral = specs::load_model("mixtral-8x7b").unwrap();
    let mut checked = 0;
    for freq in [3, 8] {
        mixtral.moe.as_mut().unwrap().layer_freq = freq;
        for (tp, ep, etp, dp) in [(1, 2, 1, 2), (1, 1, 2, 2), (2, 1, 2, 1)] {
            for recompute in [Recompute::None, Recompute::Full] {
                let request = PlanRequest {
                    tp,
                    pp: 16,
                    dp,
                    ep,
                    etp,
                    sequence_parallel: tp > 1,
                    recompute,
                    zero: 1,
                    ..PlanRequest::default()
                };
                let training = training_of(2 * dp);
                let l = assert_ep_matches(&mixtral, &cluster, &training, &request);
                // Whole counts: 2 micro-batches × the slowest stage's own MoE layers (at
                // freq 8 layers 0, 8, 16 and 24 are MoE, one on each of stages 0, 4, 8 and
                // 12; the last stage, slowest with the output layer, holds none).
                let plan = ParallelPlan::build(&request, &mixtral, &cluster, &training).unwrap();
                let slowest = crate::cost::slowest_stage(&mixtral, &cluster, &training, &plan);
                for entry in l
                    .entries
                    .iter()
                    .filter(|x| comm_group(x.group) == GroupKind::Ep)
                {
                    assert_eq!(entry.count.fract(), 0.0, "{request:?}");
                    // Once per micro-batch and MoE layer of the slowest stage; the recompute
                    // pass on the recomputed layers' share of them.
                    let per_step = f64::from(plan.num_microbatches) * f64::from(slowest.moe_layers);
                    if entry.pass == Pass::Recompute {
                        assert!(entry.count <= per_step, "{request:?} {entry:?}");
                    } else {
                        assert_eq!(entry.count, per_step, "{request:?} {entry:?}");
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 3 * 2);

    // Block recompute of 3 of DeepSeek-V3's 61 layers at pp 1: the recomputed all-to-alls
    // are 58 MoE layers × 5 micro-batches × 3/61 = 14.26 a step (the ledger counted 14).
    let small = Cluster {
        gpus_per_node: 4,
        nodes: 1,
        ..cluster.clone()
    };
    let deepseek = specs::load_model("deepseek-v3").unwrap();
    let request = PlanRequest {
        tp: 1,
        pp: 1,
        cp: 2,
        dp: 2,
        ep: 4,
        recompute: Recompute::Full,
        recompute_num_layers: 3,
        zero: 1,
        ..PlanRequest::default()
    };
    let l = assert_ep_matches(
        &deepseek,
        &small,
        &training(2048, 10, TrainingFramework::MegatronCore),
        &request,
    );
    let recomputed = l
        .entries
        .iter()
        .find(|x| x.group == GroupKind::Ep && x.pass == Pass::Recompute)
        .unwrap();
    assert!(close(recomputed.count, 58.0 * 5.0 * 3.0 / 61.0));

    // `--recompute-modules mlp` / `moe` repeat the MLP's TP pair (and under `moe` the
    // all-to-alls) on the busiest stage's dense / MoE layers: Qwen3-30B-A3B with
    // `--moe-layer-freq 2`, 3 layers a stage (2 MoE on the busiest); Mixtral with
    // `--moe-layer-freq 3`, 16 layers a stage (6 MoE on the first).
    let mut qwen = specs::load_model("qwen3-30b-a3b").unwrap();
    qwen.moe.as_mut().unwrap().layer_freq = 2;
    mixtral.moe.as_mut().unwrap().layer_freq = 3;
    for (model, modules, pp, ep, dp) in [
        (&qwen, RecomputeModule::Mlp, 16, 1, 1),
        (&qwen, RecomputeModule::Moe, 16, 1, 1),
        (&mixtral, RecomputeModule::Moe, 2, 2, 8),
        (&mixtral, RecomputeModule::Mlp, 2, 2, 8),
    ] {
        let mut training = training(4096, dp, TrainingFramework::MegatronCore);
        training.recompute_modules = Some(RecomputeModules::of(&[modules]));
        let request = PlanRequest {
            tp: 2,
            pp,
            dp,
            ep,
            sequence_parallel: true,
            recompute: Recompute::Selective,
            zero: 1,
            ..PlanRequest::default()
        };
        let l = assert_ledger_matches_estimate(model, &cluster, &training, &request);
        let plan = ParallelPlan::build(&request, model, &cluster, &training).unwrap();
        let e = evaluate(model, &cluster, &training, &plan);
        assert!(
            close(l.tp_wire_bytes, e.comm.tp.wire_bytes.0),
            "{request:?}"
        );
        assert!(
            close(l.comm_time_s(GroupKind::Tp), e.comm.tp.time_s.0),
            "{request:?}"
        );
        if ep > 1 && modules == RecomputeModule::Moe {
            assert_ep_matches(model, &cluster, &training, &request);
        }
    }
}

/// Megatron-Core's MoE layers hand the sequence shard straight to the dispatcher: with every
/// layer an MoE layer and no shared experts (Qwen3-30B-A3B) only the attention's TP pair runs;
/// with shared experts (DeepSeek-V3's middle stages) the MLP side gathers and scatters too.
#[test]
fn moe_layers_without_shared_experts_run_only_the_attention_tp_pair() {
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 8,
        gpus_per_node: 8,
    };
    let training = training(4096, 64, TrainingFramework::MegatronCore);
    let forward_sites = |name: &str, ep: u32| {
        let model = specs::load_model(name).unwrap();
        let request = PlanRequest {
            tp: 2,
            pp: 1,
            dp: 32,
            ep,
            micro_batch: 1,
            sequence_parallel: true,
            zero: 1,
            ..PlanRequest::default()
        };
        let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request);
        l.entries
            .iter()
            .filter(|x| {
                x.group == GroupKind::Tp
                    && x.pass == Pass::Forward
                    && x.scope == crate::cost::ledger::Scope::PerLayerPerMicrobatch
            })
            .map(|x| x.site)
            .collect::<Vec<_>>()
    };
    let qwen = forward_sites("qwen3-30b-a3b", 8);
    assert_eq!(qwen.len(), 2, "{qwen:?}");
    assert!(qwen.iter().all(|s| s.contains("attention")), "{qwen:?}");
    let mixtral = forward_sites("mixtral-8x7b", 8);
    assert_eq!(mixtral.len(), 2, "{mixtral:?}");
    let deepseek = forward_sites("deepseek-v3", 64);
    assert_eq!(deepseek.len(), 4, "{deepseek:?}");
}

#[test]
fn moe_ledger_lists_the_all_to_alls_and_expert_gradients() {
    let model = specs::load_model("mixtral-8x7b").unwrap();
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 8,
        gpus_per_node: 8,
    };
    let mut checked = 0;
    for framework in [
        TrainingFramework::MegatronLm2021,
        TrainingFramework::MegatronCore,
    ] {
        let training = training(4096, 256, framework);
        for (tp, cp, pp, ep, etp) in [
            (2, 1, 1, 8, 1),
            (1, 1, 2, 8, 1),
            (2, 2, 1, 4, 2),
            (4, 1, 2, 2, 1),
        ] {
            for recompute in [Recompute::None, Recompute::Full] {
                for zero in 0..=3u8 {
                    for precision in [Precision::Bf16, Precision::Fp8] {
                        // ZeRO-0 keeps no fp32 master for FP8's parameter gather; the 2021
                        // Megatron-LM has no FP8 at all.
                        if precision != Precision::Bf16
                            && (zero < 1 || framework == TrainingFramework::MegatronLm2021)
                        {
                            continue;
                        }
                        let request = PlanRequest {
                            tp,
                            cp,
                            pp,
                            ep,
                            etp,
                            dp: 64 / (tp * cp * pp),
                            sequence_parallel: tp > 1,
                            recompute,
                            zero,
                            precision,
                            ..PlanRequest::default()
                        };
                        let l =
                            assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                        let a2a: Vec<_> = l
                            .entries
                            .iter()
                            .filter(|e| e.group == GroupKind::Ep)
                            .collect();
                        // Dispatch and combine in forward and backward, and again under full
                        // recompute; every MoE layer of the stage (all of Mixtral's) per
                        // micro-batch.
                        let full = recompute == Recompute::Full;
                        assert_eq!(a2a.len(), 4 + 2 * usize::from(full), "{request:?}");
                        let plan =
                            ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
                        let layers = if pp == 1 {
                            model.layers
                        } else {
                            plan.stages.max_layers()
                        };
                        for e in &a2a {
                            assert_eq!(e.op, Op::AllToAll);
                            assert_eq!(e.ranks, ep);
                            if e.pass != Pass::Recompute {
                                assert_eq!(
                                    e.count,
                                    f64::from(layers) * f64::from(plan.num_microbatches)
                                );
                            }
                        }
                        // Expert gradients over expert-DP, dense ones over DP×CP.
                        let expert_dp = moe::expert_dp(&plan);
                        let expert_rows: Vec<_> = l
                            .entries
                            .iter()
                            .filter(|e| e.group == GroupKind::ExpertDp)
                            .collect();
                        assert_eq!(!expert_rows.is_empty(), expert_dp > 1, "{request:?}");
                        assert!(expert_rows.iter().all(|e| e.ranks == expert_dp));
                        assert!(
                            l.entries
                                .iter()
                                .filter(|e| e.group == GroupKind::Dp)
                                .all(|e| e.ranks == plan.dp * plan.cp)
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    // Per framework, layout and recompute: 4 bf16 ZeRO stages, and 3 FP8 ones under
    // Megatron-Core only.
    assert_eq!(checked, 4 * 2 * (4 + (4 + 3)));
}
