//! The ledger against the cost model: each group's step total equals `Estimate::comm`'s, in wire
//! bytes and in time, across plans; the shared setups of the tests in this directory.

mod context_parallel;
mod mixture_of_experts;

use super::*;
use crate::cost::evaluate;
use crate::cost::terms::TermKind;
use crate::plan::PlanRequest;
use crate::plan::Precision;
use crate::plan::Recompute;
use crate::shape::derive_shape;
use crate::specs;
use crate::training::{GradDtype, RecomputeModule, RecomputeModules, TrainingFramework};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Llama 3 8B on 4 nodes of 8 H100s: the context-parallel ledger tests' setup.
fn llama3_8b_on_32_h100() -> (Model, Cluster) {
    let model = specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 4,
        gpus_per_node: 8,
    };
    (model, cluster)
}

/// The ledger's context-parallel rows.
fn cp_rows(l: &Ledger) -> Vec<&LedgerEntry> {
    l.entries
        .iter()
        .filter(|e| e.group == GroupKind::Cp)
        .collect()
}

fn training(seq_len: u32, global_batch: u32, framework: TrainingFramework) -> Training {
    Training {
        // The framework's defaults but for these three, kept whatever the framework: fp32
        // gradients, 16-bit weights beside fp32 states (not torchtitan's fp32 parameters) and no
        // FP8 parameter gather (Megatron-Core's default has one).
        grad_dtype: GradDtype::Fp32,
        optimizer_states: crate::training::OptimizerStates::Fp32,
        fp8_param_gather: false,
        ..Training::with_framework(
            framework,
            seq_len,
            global_batch,
            crate::training::AttentionKernel::Flash,
        )
    }
}

/// The ledger's step totals per group equal the estimate's, in wire bytes and in time.
fn assert_ledger_matches_estimate(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    request: &PlanRequest,
) -> Ledger {
    let plan = ParallelPlan::build(request, model, cluster, training).unwrap();
    let e = evaluate(model, cluster, training, &plan);
    let l = ledger(model, cluster, training, &plan);
    let what = format!("{request:?}");
    for (name, got, want) in [
        ("TP", l.tp_wire_bytes, e.comm.tp.wire_bytes.0),
        ("CP", l.cp_wire_bytes, e.comm.cp.wire_bytes.0),
        ("EP", l.ep_wire_bytes, e.comm.ep.wire_bytes.0),
        ("PP", l.pp_wire_bytes, e.comm.pp.wire_bytes.0),
        ("DP", l.dp_wire_bytes, e.comm.dp.wire_bytes.0),
    ] {
        assert!(close(got, want), "{name} bytes {what}: {got} vs {want}");
    }
    // Times add up too, before overlap: each group's rows against its terms.
    let term_s =
        |kinds: &[TermKind]| -> f64 { kinds.iter().map(|k| e.terms.get(*k).time_s.0).sum() };
    for (kind, want) in [
        (GroupKind::Tp, term_s(&[TermKind::TpComm])),
        (
            GroupKind::Cp,
            term_s(&[TermKind::CpComm, TermKind::MambaCpComm]),
        ),
        (GroupKind::Pp, term_s(&[TermKind::PpComm])),
    ] {
        let got = l.step_time_s(kind);
        assert!(
            (got - want).abs() <= 1e-6 * want.max(1e-9),
            "{} time {what}: {got} vs {want}",
            kind.as_str()
        );
    }
    // The EP term holds the all-to-alls and the expert-TP gathers and scatters beside them.
    let ep_got = l.comm_time_s(GroupKind::Ep);
    let ep_want = term_s(&[TermKind::EpComm]);
    assert!(
        (ep_got - ep_want).abs() <= 1e-6 * ep_want.max(1e-9),
        "EP time {what}: {ep_got} vs {ep_want}"
    );
    let dp_got = l.comm_time_s(GroupKind::Dp);
    let dp_want = term_s(&[TermKind::DpGradReduce, TermKind::DpParamGather]);
    assert!(
        (dp_got - dp_want).abs() <= 1e-6 * dp_want.max(1e-9),
        "DP time {what}: {dp_got} vs {dp_want}"
    );
    assert!(
        l.entries
            .iter()
            .all(|x| x.wire_bytes >= 0.0 && x.count > 0.0)
    );
    // The totals the report prints are `comm.*`'s, and their parts add up to them.
    let comm_bytes = |g: GroupKind| match g {
        GroupKind::Tp => e.comm.tp.wire_bytes.0,
        GroupKind::Cp => e.comm.cp.wire_bytes.0,
        GroupKind::Ep => e.comm.ep.wire_bytes.0,
        GroupKind::Pp => e.comm.pp.wire_bytes.0,
        GroupKind::Dp => e.comm.dp.wire_bytes.0,
        other => panic!("{other:?} is no comm.* group"),
    };
    for t in l.totals() {
        assert!(close(t.wire_bytes, comm_bytes(t.group)), "{t:?} {what}");
        let parts: f64 = t.parts.iter().map(|(_, b)| b).sum();
        assert!(close(parts, t.wire_bytes), "{t:?} {what}");
    }
    // Every row sits on its group's link.
    let g = groups::groups(cluster, &plan);
    assert!(l.entries.iter().all(|x| x.link == g.get(x.group).link));
    l
}

#[test]
fn ledger_sums_equal_cost_model_wire_bytes() {
    let model = derive_shape(20e9, 2048).unwrap();
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 4,
        gpus_per_node: 8,
    };
    let mut checked = 0;
    // torchtitan: its selective recompute (per-op SAC) repeats the all-gathers, not the
    // reduce-scatters.
    for framework in [
        TrainingFramework::MegatronLm2021,
        TrainingFramework::Torchtitan,
    ] {
        let training = training(2048, 64, framework);
        // torchtitan runs a pipeline only untied (`TrainingFramework::runs_tied_embeddings_with_pp`).
        let mut model = model.clone();
        model.tied_embeddings &= framework.runs_tied_embeddings_with_pp();
        for (tp, pp) in [(1, 1), (1, 4), (2, 2), (8, 2), (4, 4)] {
            for sequence_parallel in [false, true] {
                if sequence_parallel && tp == 1 {
                    continue;
                }
                for recompute in Recompute::ALL {
                    for zero in 0..=3u8 {
                        let request = PlanRequest {
                            tp,
                            pp,
                            dp: 32 / (tp * pp),
                            vpp: if pp == 2 && model.layers.is_multiple_of(4) {
                                2
                            } else {
                                1
                            },
                            micro_batch: 1,
                            sequence_parallel,
                            recompute,
                            zero,
                            allow_uneven_pp: false,
                            allow_cross_node_tp: false,
                            ..PlanRequest::default()
                        };
                        assert_ledger_matches_estimate(&model, &cluster, &training, &request);
                        checked += 1;
                    }
                }
            }
        }
    }
    // 24 plans with tp = 1, 72 with tp > 1, per framework.
    assert_eq!(checked, 192);
}

#[test]
fn module_recompute_ledger_matches_the_estimate() {
    // Megatron-Core's module recompute on an all-MoE model and on DeepSeek-V3 (a dense
    // prefix): `mlp` repeats the dense layers' MLP pair, `moe` the MoE layers' pair and the
    // token all-to-alls (fractional shares: `fractional_shares_ledger_matches_the_estimate`).
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 8,
        gpus_per_node: 8,
    };
    let mut checked = 0;
    for (name, modules) in [
        ("qwen3-30b-a3b", &[RecomputeModule::Moe][..]),
        (
            "qwen3-30b-a3b",
            &[RecomputeModule::MoeAct, RecomputeModule::Layernorm][..],
        ),
        (
            "deepseek-v3",
            &[RecomputeModule::Mlp, RecomputeModule::Moe][..],
        ),
        (
            "deepseek-v3",
            &[RecomputeModule::MlaUpProj, RecomputeModule::Mlp][..],
        ),
    ] {
        let model = specs::load_model(name).unwrap();
        let mut training = training(4096, 64, TrainingFramework::MegatronCore);
        training.recompute_modules = Some(RecomputeModules::of(modules));
        for (tp, sequence_parallel) in [(1, false), (2, true), (4, true)] {
            let request = PlanRequest {
                tp,
                pp: 1,
                dp: 64 / tp,
                ep: 8,
                micro_batch: 1,
                sequence_parallel,
                recompute: Recompute::Selective,
                zero: 1,
                ..PlanRequest::default()
            };
            assert_ledger_matches_estimate(&model, &cluster, &training, &request);
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

/// ZeRO-3 under full recompute: FSDP2 (torchtitan) recomputes on the weights its pre-backward
/// hook gathered and Megatron-FSDP's backward reuses the recomputed forward's gather (bf16), so a
/// micro-batch gathers twice (forward, backward); DeepSpeed gathers once more for the recomputed
/// forward. The ledger and `comm.dp` agree either way.
#[test]
fn fsdp2_recomputes_on_the_weights_it_gathered_for_the_backward() {
    let model = specs::load_model("llama3-70b").unwrap();
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 8,
        gpus_per_node: 8,
    };
    let request = PlanRequest {
        tp: 8,
        pp: 1,
        dp: 8,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::Full,
        zero: 3,
        ..PlanRequest::default()
    };
    let gathers = |framework| {
        let l = assert_ledger_matches_estimate(
            &model,
            &cluster,
            &training(8192, 64, framework),
            &request,
        );
        l.entries
            .iter()
            .filter(|x| x.group == GroupKind::Dp && x.op == Op::AllGather)
            .map(|x| x.pass)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        gathers(TrainingFramework::Torchtitan),
        vec![Pass::Forward, Pass::Backward]
    );
    // Megatron-FSDP gathers once for the recomputed forward and its backward (bf16), DeepSpeed's
    // ZeRO-3 once more (comm::zero3_regathers_for_recompute).
    assert_eq!(
        gathers(TrainingFramework::MegatronCore),
        vec![Pass::Forward, Pass::Backward]
    );
    assert_eq!(
        gathers(TrainingFramework::Deepspeed),
        vec![Pass::Forward, Pass::Backward, Pass::Recompute]
    );
}

/// Copies of the sharded states: the ledger lists one all-reduce of each reduced shard across
/// the copies per reduce-scatter, over as many ranks as there are copies, at the shard's size,
/// and its DP total still equals the estimate's (dense and MoE, ZeRO 1 to 3, pipelined or not).
#[test]
fn dp_replica_ledger_lists_the_shard_all_reduces_and_matches_the_estimate() {
    let (model, cluster) = llama3_8b_on_32_h100();
    let mixtral = crate::specs::load_model("mixtral-8x7b").unwrap();
    for (name, model, framework) in [
        ("llama3-8b", &model, TrainingFramework::MegatronCore),
        ("llama3-8b", &model, TrainingFramework::Torchtitan),
        ("mixtral-8x7b", &mixtral, TrainingFramework::MegatronCore),
    ] {
        let training = training(8192, 64, framework);
        // (1, 1, 8) with 4 copies: each copy of the experts' states is one rank.
        for (tp, pp, ep) in [(1, 1, 1), (2, 2, 1), (1, 2, 2), (1, 1, 8)] {
            if ep > 1 && model.moe.is_none() {
                continue;
            }
            for zero in [1u8, 2, 3] {
                if framework.dp_replicas_refusal(zero).is_some() {
                    continue;
                }
                let dp = 32 / (tp * pp);
                for replicas in [1, 2, 4] {
                    let request = PlanRequest {
                        tp,
                        pp,
                        dp,
                        ep,
                        zero,
                        sequence_parallel: tp > 1,
                        dp_replicas: replicas,
                        ..PlanRequest::default()
                    };
                    let l = assert_ledger_matches_estimate(model, &cluster, &training, &request);
                    let rows: Vec<_> = l
                        .entries
                        .iter()
                        .filter(|e| {
                            matches!(e.group, GroupKind::DpReplica | GroupKind::ExpertDpReplica)
                        })
                        .collect();
                    if replicas == 1 {
                        assert!(rows.is_empty(), "{name} {request:?}");
                        continue;
                    }
                    assert!(!rows.is_empty(), "{name} {request:?}");
                    assert!(
                        rows.iter()
                            .all(|e| e.op == Op::AllReduce && e.ranks == replicas),
                        "{name} {request:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn sequence_parallel_swaps_all_reduce_for_gather_and_scatter() {
    let model = derive_shape(20e9, 2048).unwrap();
    let cluster = Cluster {
        gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let training = Training::megatron_lm_2021(2048, 8);
    let mut request = PlanRequest {
        tp: 8,
        pp: 1,
        dp: 1,
        vpp: 1,
        micro_batch: 1,
        sequence_parallel: false,
        recompute: Recompute::Full,
        zero: 0,
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let mut l = ledger(&model, &cluster, &training, &plan);
    // The model's ends on the only stage: the embedding's forward all-reduce, the output layer's
    // input-gradient all-reduce (synchronous in the 2021 code) and the loss's, once per
    // micro-batch (`embedding_output_tp`); the layers' rows are what this test counts.
    let ends: Vec<_> = l
        .entries
        .iter()
        .filter(|e| e.scope == Scope::PerMicrobatch)
        .map(|e| (e.op, e.pass))
        .collect();
    assert_eq!(
        ends,
        [
            (Op::AllReduce, Pass::Forward),
            (Op::AllReduce, Pass::Backward),
            (Op::AllReduce, Pass::Forward)
        ]
    );
    l.entries
        .retain(|e| e.scope == Scope::PerLayerPerMicrobatch);
    // 2 forward + 2 recompute + 2 backward all-reduces per layer (Shoeybi et al. Fig. 4).
    assert_eq!(l.entries.len(), 6);
    assert!(l.entries.iter().all(|e| e.op == Op::AllReduce));
    assert_eq!(
        l.entries
            .iter()
            .filter(|e| e.pass == Pass::Recompute)
            .count(),
        2
    );
    request.sequence_parallel = true;
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let mut sp = ledger(&model, &cluster, &training, &plan);
    sp.entries
        .retain(|e| e.scope == Scope::PerLayerPerMicrobatch);
    // Megatron's backward gathers the two column-parallel inputs again for the weight
    // gradients: 14 collectives, the 12 of the same volume and two all-gathers (half an
    // all-reduce's wire bytes each).
    assert_eq!(sp.entries.len(), 14);
    assert!(sp.entries.iter().all(|e| e.op != Op::AllReduce));
    let wire = |l: &Ledger| {
        l.entries
            .iter()
            .map(|e| e.count * e.wire_bytes)
            .sum::<f64>()
    };
    assert!(close(wire(&sp), wire(&l) * 14.0 / 12.0));
}
#[test]
fn low_precision_sequence_parallelism_gathers_quantized_copies() {
    // Llama-shaped 20B, tp 8 with sequence parallelism, full recompute, Megatron-Core: every
    // all-gather carries the quantized copy (FP8: half the bf16 bytes; MXFP8 on Blackwell: the
    // row-wise copy forward and for the weight gradient, both copies of the output gradient),
    // every reduce-scatter bf16; the ledger and the estimate agree row by row.
    let model = derive_shape(20e9, 2048).unwrap();
    let training = Training::with_framework(
        crate::training::TrainingFramework::MegatronCore,
        2048,
        8,
        crate::training::AttentionKernel::Flash,
    );
    let request = |precision| PlanRequest {
        tp: 8,
        dp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::Full,
        precision,
        ..PlanRequest::default()
    };
    let gathers = |gpu: &str, precision| {
        let cluster = Cluster {
            gpu: specs::load_gpu(gpu).unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let l = assert_ledger_matches_estimate(&model, &cluster, &training, &request(precision));
        let bf16 = ledger(
            &model,
            &cluster,
            &training,
            &ParallelPlan::build(&request(Precision::Bf16), &model, &cluster, &training).unwrap(),
        );
        // Rows pair up in order: same site, same count; bytes per row over bf16's. The model's
        // ends (per micro-batch) stay bf16 at every precision: the output layer is outside the
        // low-precision autocast.
        for (low, high) in l.entries.iter().zip(&bf16.entries) {
            if low.scope == Scope::PerMicrobatch {
                assert!(close(low.tensor_bytes, high.tensor_bytes), "{}", low.site);
            }
        }
        let per_layer = |l: &Ledger| {
            l.entries
                .iter()
                .filter(|e| e.scope == Scope::PerLayerPerMicrobatch)
                .cloned()
                .collect::<Vec<_>>()
        };
        let (l, bf16) = (per_layer(&l), per_layer(&bf16));
        assert_eq!(l.len(), bf16.len());
        l.iter()
            .zip(&bf16)
            .map(|(low, high)| {
                assert_eq!(
                    (low.op, low.pass, low.site),
                    (high.op, high.pass, high.site)
                );
                (
                    low.op,
                    low.pass,
                    low.site,
                    low.tensor_bytes / high.tensor_bytes,
                )
            })
            .collect::<Vec<_>>()
    };
    for (op, pass, site, ratio) in gathers("h100-sxm-80g", Precision::Fp8) {
        let want = if op == Op::AllGather { 0.5 } else { 1.0 };
        assert!(close(ratio, want), "{pass:?} {site}: {ratio}");
    }
    let mx = 1.0 + 1.0 / 32.0;
    for (op, pass, site, ratio) in gathers("b200-sxm-180g", Precision::Mxfp8) {
        let want = match (op, pass) {
            (Op::AllGather, Pass::Backward) if site.contains("output gradient") => mx,
            (Op::AllGather, _) => mx / 2.0,
            _ => 1.0,
        };
        assert!(close(ratio, want), "{pass:?} {site}: {ratio}");
    }
}
