//! Invariants of the cost model and the planner, checked on random plans (proptest).

use proptest::prelude::*;
use tpsim::cluster::Cluster;
use tpsim::cost::evaluate;
use tpsim::cost::pipeline::bubble_ratio;
use tpsim::model::Model;
use tpsim::plan::{ParallelPlan, PlanRequest, Recompute};
use tpsim::planner::{SearchOptions, search};
use tpsim::specs::{load_gpu, load_model};
use tpsim::training::Training;

fn cluster(nodes: u32) -> Cluster {
    Cluster {
        gpu: load_gpu("h100-sxm-80g").unwrap(),
        nodes,
        gpus_per_node: 8,
    }
}

fn training(global_batch: u32) -> Training {
    Training::with_framework(
        tpsim::training::TrainingFramework::MegatronLm2021,
        2048,
        global_batch,
        tpsim::training::AttentionKernel::Flash,
    )
}

fn gpt3() -> Model {
    load_model("gpt3-175b").unwrap()
}

fn recompute() -> impl Strategy<Value = Recompute> {
    prop_oneof![
        Just(Recompute::None),
        Just(Recompute::Selective),
        Just(Recompute::Full)
    ]
}

fn request(
    tp: u32,
    pp: u32,
    dp: u32,
    micro_batch: u32,
    sp: bool,
    recompute: Recompute,
    zero: u8,
) -> PlanRequest {
    PlanRequest {
        tp,
        pp,
        dp,
        vpp: 1,
        micro_batch,
        sequence_parallel: sp && tp > 1,
        recompute,
        zero,
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        ..PlanRequest::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_tp_means_no_tp_traffic(pp in prop::sample::select(vec![1u32, 2, 4, 8]), mb in prop::sample::select(vec![1u32, 2, 4]), rc in recompute(), zero in 0u8..=3) {
        let model = gpt3();
        let c = cluster(8);
        let dp = 64 / pp;
        let t = training(dp * mb * 4);
        let plan = ParallelPlan::build(&request(1, pp, dp, mb, false, rc, zero), &model, &c, &t).unwrap();
        let e = evaluate(&model, &c, &t, &plan);
        prop_assert_eq!(e.comm.tp.wire_bytes.0, 0.0);
        prop_assert_eq!(e.time.tp_comm_exposed_s.0, 0.0);
    }

    #[test]
    fn weights_per_gpu_never_grow_with_tp_or_pp(tp_step in 0u32..3, pp_step in 0u32..3, rc in recompute(), zero in 0u8..=3) {
        // Weights per GPU for tp and 2·tp, pp and 2·pp at the same dp (8 replicas): the model-parallel
        // split only ever divides the weights further.
        let model = gpt3();
        let t = training(1536);
        let tp = 1 << tp_step;
        let pp = 1 << pp_step;
        let weights = |tp: u32, pp: u32| {
            let dp = 8;
            let c = cluster(tp * pp);
            let plan = ParallelPlan::build(&request(tp, pp, dp, 1, false, rc, zero), &model, &c, &t).unwrap();
            evaluate(&model, &c, &t, &plan).memory.weights_bytes.0
        };
        prop_assert!(weights(tp * 2, pp) <= weights(tp, pp) * (1.0 + 1e-12));
        prop_assert!(weights(tp, pp * 2) <= weights(tp, pp) * (1.0 + 1e-12));
    }

    #[test]
    fn bubble_matches_narayanan(p in 1u32..64, v in 1u32..8, m in 1u32..512) {
        let expected = if p == 1 { 0.0 } else { f64::from(p - 1) / (f64::from(v) * f64::from(m)) };
        prop_assert_eq!(bubble_ratio(p, v, m), expected);
    }

    #[test]
    fn estimate_parts_add_up(tp in prop::sample::select(vec![1u32, 2, 4, 8]), pp in prop::sample::select(vec![1u32, 2, 4, 8]), mb in prop::sample::select(vec![1u32, 2]), sp in any::<bool>(), rc in recompute(), zero in 0u8..=3) {
        let model = gpt3();
        let c = cluster(16);
        let dp = 128 / (tp * pp);
        let t = training(dp * mb * 8);
        let plan = ParallelPlan::build(&request(tp, pp, dp, mb, sp, rc, zero), &model, &c, &t).unwrap();
        let e = evaluate(&model, &c, &t, &plan);
        let m = &e.memory;
        let parts = m.weights_bytes.0 + m.gradients_bytes.0 + m.optimizer_bytes.0 + m.activations_bytes.0 + m.other_bytes.0;
        prop_assert!((parts / m.total_bytes.0 - 1.0).abs() < 1e-9);
        let s = &e.time;
        let time = s.compute_s.0 + s.tp_comm_exposed_s.0 + s.pp_comm_exposed_s.0 + s.dp_comm_exposed_s.0 + s.bubble_s.0 + s.optimizer_s.0;
        prop_assert!((time / s.step_s.0 - 1.0).abs() < 1e-9);
        prop_assert!(e.mfu > 0.0 && e.mfu < 1.0, "mfu {}", e.mfu);
        prop_assert!(e.hardware_tflops_per_gpu >= e.model_tflops_per_gpu);
    }

    #[test]
    fn more_recompute_never_needs_more_activation_memory(tp in prop::sample::select(vec![1u32, 2, 8]), sp in any::<bool>()) {
        let model = gpt3();
        let c = cluster(16);
        let dp = 128 / (tp * 8);
        let t = training(dp * 16);
        let act = |rc| {
            let plan = ParallelPlan::build(&request(tp, 8, dp, 1, sp, rc, 1), &model, &c, &t).unwrap();
            evaluate(&model, &c, &t, &plan).memory.activations_bytes.0
        };
        prop_assert!(act(Recompute::Full) <= act(Recompute::Selective));
        prop_assert!(act(Recompute::Selective) <= act(Recompute::None));
    }
}

#[test]
fn ranking_is_identical_on_one_and_many_threads() {
    let model = load_model("llama3-70b").unwrap();
    let c = cluster(16);
    let t = training(512);
    let options = SearchOptions {
        allow_uneven_pp: true,
        allow_cross_node_tp: false,
        ..SearchOptions::default()
    };
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let one = pool(1).install(|| search(&model, &c, &t, options));
    let many = pool(4).install(|| search(&model, &c, &t, options));
    assert!(one.stats.feasible > 0);
    assert_eq!(one.stats.candidates, many.stats.candidates);
    assert_eq!(one.ranked, many.ranked);
}

/// The ranking the search documents: every feasible plan before every infeasible one, feasible
/// plans by throughput (highest first, ties by memory), infeasible ones by memory (lowest first);
/// and the infeasibility counts add up to the candidates that do not fit.
#[test]
fn search_ranks_feasible_by_throughput_then_infeasible_by_memory() {
    let model = load_model("gpt3-175b").unwrap();
    let c = cluster(16);
    let t = training(512);
    let options = SearchOptions {
        allow_uneven_pp: true,
        ..SearchOptions::default()
    };
    let result = search(&model, &c, &t, options);
    let feasible = result.stats.feasible as usize;
    assert!(feasible > 0 && feasible < result.ranked.len());
    assert!(result.ranked[..feasible].iter().all(|e| e.fits()));
    assert!(result.ranked[feasible..].iter().all(|e| !e.fits()));
    for pair in result.ranked[..feasible].windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.tokens_per_s > b.tokens_per_s
                || (a.tokens_per_s == b.tokens_per_s
                    && a.memory.total_bytes.0 <= b.memory.total_bytes.0)
        );
    }
    for pair in result.ranked[feasible..].windows(2) {
        assert!(pair[0].memory.total_bytes.0 <= pair[1].memory.total_bytes.0);
    }
    let counted: u64 = result.stats.infeasible_by_reason.values().sum();
    assert_eq!(counted + result.stats.feasible, result.stats.candidates);
}

#[test]
fn search_never_proposes_zero_2_or_3_with_pipeline_parallelism() {
    let model = load_model("gpt3-175b").unwrap();
    let c = cluster(16);
    let t = training(512);
    let options = SearchOptions {
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        ..SearchOptions::default()
    };
    let result = search(&model, &c, &t, options);
    assert!(result.ranked.iter().any(|e| e.plan.pp > 1));
    assert!(
        result.ranked.iter().any(|e| e.plan.zero == 3),
        "ZeRO-3 stays in the space without PP"
    );
    for e in &result.ranked {
        assert!(e.plan.pp == 1 || e.plan.zero <= 1, "{:?}", e.plan);
    }
}

#[test]
fn zero3_holds_two_gathered_layers_and_one_layer_of_gradients() {
    // FSDP / DeepSpeed ZeRO-3 keep the current and the prefetched layer unsharded.
    let model = gpt3();
    let c = cluster(16);
    let t = training(128);
    let plan = |zero| {
        ParallelPlan::build(
            &request(1, 1, 128, 1, false, Recompute::Full, zero),
            &model,
            &c,
            &t,
        )
        .unwrap()
    };
    let z3 = evaluate(&model, &c, &t, &plan(3)).memory;
    let params = z3.params_per_gpu_before_zero;
    let unit = model.layer_params().max(model.word_embedding_params());
    assert!((z3.weights_bytes.0 - (params * 2.0 / 128.0 + 2.0 * unit * 2.0)).abs() < 1.0);
    assert!((z3.gradients_bytes.0 - (params * 2.0 / 128.0 + unit * 2.0)).abs() < 1.0);
}

/// No evaluated plan of any bundled model runs more FLOPs than the GPU's bf16 peak: hardware
/// TFLOP/s (model FLOPs plus recompute) per GPU stays under it, so MFU stays under 100% (an expert
/// split over etp GPUs once broke this for MoE models).
#[test]
fn no_plan_runs_faster_than_the_peak() {
    use tpsim::training::{AttentionKernel, TrainingFramework};
    let cluster = Cluster {
        gpu: load_gpu("h100-sxm-80g").unwrap(),
        nodes: 2,
        gpus_per_node: 8,
    };
    let peak_tflops = cluster.gpu.peak_bf16_tflops;
    for name in [
        "llama3-8b",
        "gpt3-175b",
        "mixtral-8x7b",
        "qwen3-30b-a3b",
        "gpt-oss-20b",
    ] {
        let model = tpsim::specs::load_model(name).unwrap();
        let training = Training::with_framework(
            TrainingFramework::MegatronCore,
            4096,
            256,
            AttentionKernel::Flash,
        );
        let result = search(&model, &cluster, &training, SearchOptions::default());
        assert!(!result.ranked.is_empty(), "{name}");
        for e in &result.ranked {
            assert!(
                e.hardware_tflops_per_gpu < peak_tflops && e.mfu < 1.0,
                "{name}: {:?} runs {:.0} TFLOP/s per GPU (MFU {:.2})",
                e.plan,
                e.hardware_tflops_per_gpu,
                e.mfu
            );
        }
    }
}

/// torchtitan's async TP hides the forward pass's TP collectives only (its authors: ~29% forward,
/// ~8% end-to-end); Megatron-Core's userbuffers overlap hides the backward's too.
#[test]
fn async_tp_hides_the_forward_collectives_only() {
    use tpsim::cost::terms::TermKind;
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-8b").unwrap();
    let cluster = cluster(8);
    let exposed_tp = |framework: TrainingFramework, overlap: bool| {
        let mut training =
            Training::with_framework(framework, 8192, 96, tpsim::training::AttentionKernel::Flash);
        training.overlap.tp_comm = overlap;
        let request = PlanRequest {
            tp: 8,
            pp: 1,
            dp: 8,
            micro_batch: 12,
            sequence_parallel: true,
            recompute: Recompute::None,
            zero: 3,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let e = evaluate(&model, &cluster, &training, &plan);
        let term = e.terms.get(TermKind::TpComm);
        (term.time_s.0, term.exposed_s.0)
    };
    let (total, vanilla) = exposed_tp(TrainingFramework::Torchtitan, false);
    assert!((vanilla / total - 1.0).abs() < 1e-12);
    let (_, async_tp) = exposed_tp(TrainingFramework::Torchtitan, true);
    // The backward's pair of all-reduce equivalents (half the collectives without recompute)
    // stays exposed.
    assert!(
        async_tp >= 0.5 * total * (1.0 - 1e-12),
        "{async_tp} of {total}"
    );
    assert!(async_tp < total);
    let (_, userbuffers) = exposed_tp(TrainingFramework::MegatronCore, true);
    assert!(userbuffers < 0.5 * async_tp, "{userbuffers} vs {async_tp}");
}

/// torchtitan's eager loss (PyTorch `cross_entropy` on fp32 logits) holds three fp32 copies of
/// the logits on one GPU; under TP it runs `loss_parallel()`'s decomposition, whose backward holds
/// four (the saved log-softmax output, the zeroed gradient, the exponential and their sum);
/// Megatron's fused cross-entropy writes the gradient in place: three more fp32 copies of the
/// b·s·V/t logits on the last stage here (tp 2).
#[test]
fn torchtitan_eager_loss_parallel_holds_four_fp32_logit_copies() {
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-8b").unwrap();
    let cluster = cluster(1);
    let activations = |framework: TrainingFramework| {
        let training =
            Training::with_framework(framework, 8192, 16, tpsim::training::AttentionKernel::Flash);
        let request = PlanRequest {
            tp: 2,
            pp: 1,
            dp: 4,
            micro_batch: 2,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan)
            .memory
            .activations_bytes
            .0
    };
    let extra =
        activations(TrainingFramework::Torchtitan) - activations(TrainingFramework::MegatronCore);
    // The logit copies, and what eager autograd keeps beyond the fused kernels in the one layer
    // being recomputed (`eager_saved_bytes_per_token`, and the K and V `repeat_kv` expands for
    // SDPA, `expanded_kv_saved_bytes_per_token`), with the full-length QKV and MLP inputs
    // torchtitan's sequence parallelism keeps (2 × 2 bytes × s·b·h·(1 − 1/t)).
    let eager_layer = 2.0
        * 8192.0
        * (tpsim::cost::memory::eager_saved_bytes_per_token(&model, 2, true, 0.0)
            + tpsim::cost::memory::expanded_kv_saved_bytes_per_token(&model, 2));
    let gathered_inputs = 2.0 * 2.0 * 8192.0 * 2.0 * 4096.0 * (1.0 - 1.0 / 2.0);
    let want = 12.0 * 8192.0 * 2.0 * 128256.0 / 2.0 + eager_layer + gathered_inputs;
    assert!((extra / want - 1.0).abs() < 1e-9, "{extra} vs {want}");
}

/// FP8 saves the GEMM inputs quantized: on Mixtral (every layer MoE) the QKV norm output and the
/// experts' FC1 and FC2 inputs for every routed copy — not the pre-MLP norm output, which the
/// router keeps in bf16, not the output projection's input, the attention output the attention
/// keeps in bf16, and not a dense down-projection input the MoE layers do not have.
#[test]
fn fp8_saves_the_expert_gemm_inputs_of_moe_layers() {
    let model = load_model("mixtral-8x7b").unwrap();
    let cluster = cluster(1);
    let activations = |precision| {
        let training = Training::with_framework(
            tpsim::training::TrainingFramework::MegatronCore,
            4096,
            8,
            tpsim::training::AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 1,
            pp: 1,
            dp: 8,
            ep: 8,
            micro_batch: 1,
            recompute: Recompute::None,
            zero: 3,
            precision,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan)
            .memory
            .activations_bytes
            .0
    };
    let saved =
        activations(tpsim::plan::Precision::Bf16) - activations(tpsim::plan::Precision::Fp8);
    // Per layer: s·h (the QKV norm output) + s·top-2·(h + ffn), the routed copies' inputs at one
    // byte instead of two; but FP8 pads each expert's rows to 16 — without Megatron-Core's
    // --moe-router-padding-for-fp8 (the default) the GPU's own experts after the dispatch
    // (TEGroupedMLP's Fp8Padding: 8 experts / ep 8 = 1 local expert × 7.5 more copies on the
    // 8,192 of a rank; physics round 32) — and those keep the routed-copy activations of bf16 less
    // the byte saved: h at 1 byte + (gated up 2·ffn + ffn) at 2 bytes each.
    let (s, h, ffn) = (4096.0, 4096.0, 14336.0);
    let pad = 8.0 / 8.0 * 7.5;
    let per_copy_fp8 = h + 2.0 * (2.0 * ffn + ffn);
    let want = 32.0 * (s * h + s * 2.0 * (h + ffn) - pad * (per_copy_fp8 - ffn));
    assert!((saved / want - 1.0).abs() < 1e-9, "{saved} vs {want}");
}

/// Low-precision weight copies count the GPU's own experts, not every expert of the layer: with
/// experts spread over EP ranks, FP8 weights on Blackwell (one quantized copy replacing the bf16
/// one under FP8 parameter gather) take between one and two bytes per parameter the GPU holds,
/// never less than one and never a negative amount.
#[test]
fn fp8_weights_of_moe_models_count_only_the_gpus_own_experts() {
    use tpsim::plan::Precision;
    for name in ["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b"] {
        let model = load_model(name).unwrap();
        let cluster = Cluster {
            gpu: load_gpu("b200-sxm-180g").unwrap(),
            nodes: 4,
            gpus_per_node: 8,
        };
        let weights = |precision| {
            let training = Training::with_framework(
                tpsim::training::TrainingFramework::MegatronCore,
                4096,
                256,
                tpsim::training::AttentionKernel::Flash,
            );
            let request = PlanRequest {
                tp: 1,
                pp: 4,
                dp: 8,
                ep: 8,
                micro_batch: 1,
                recompute: Recompute::None,
                zero: 1,
                precision,
                allow_uneven_pp: true,
                ..PlanRequest::default()
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            evaluate(&model, &cluster, &training, &plan)
                .memory
                .weights_bytes
                .0
        };
        let (bf16, fp8) = (weights(Precision::Bf16), weights(Precision::Fp8));
        assert!(
            fp8 >= 0.5 * bf16 && fp8 < bf16,
            "{name}: fp8 weights {fp8} B vs bf16 {bf16} B"
        );
    }
}

/// torchtitan's FSDP under pipeline parallelism (PyTorch's pipelining: gradient sync and
/// post-backward resharding off for every micro-batch, one reduce-scatter after the schedule)
/// holds the stage's unsharded fp32 gradients, reduces them once per step with nothing to hide
/// it, and gathers the kept weights once per step; Megatron-Core's ZeRO-3 on the same plan reduces
/// every micro-batch and holds no such gradients.
#[test]
fn torchtitan_fsdp_with_pp_reduces_once_after_the_schedule() {
    use tpsim::cost::ledger::{Op, Scope, ledger};
    use tpsim::cost::terms::TermKind;
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(8);
    let run = |framework: TrainingFramework| {
        let training =
            Training::with_framework(framework, 8192, 64, tpsim::training::AttentionKernel::Flash);
        let request = PlanRequest {
            tp: 8,
            pp: 4,
            dp: 2,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero: 3,
            reshard_after_forward: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let estimate = evaluate(&model, &cluster, &training, &plan);
        let entries = ledger(&model, &cluster, &training, &plan).entries;
        (plan, estimate, entries)
    };
    let (plan, titan, titan_ledger) = run(TrainingFramework::Torchtitan);
    let (_, mcore, mcore_ledger) = run(TrainingFramework::MegatronCore);
    // The whole stage's fp32 gradients (its TP share), unsharded: the sharded ones do not exist
    // yet (FSDP2's `foreach_reduce` makes each as it frees the unsharded one, and `zero_grad`
    // set them to None); Megatron-Core holds the shard and one layer's full gradient.
    let stage_params = titan.memory.params_per_gpu_before_zero;
    let gradients = titan.memory.gradients_bytes.0;
    assert!(
        (gradients / (stage_params * 4.0) - 1.0).abs() < 1e-9,
        "gradients {gradients} B vs stage {stage_params} params"
    );
    let mcore_stage = mcore.memory.params_per_gpu_before_zero;
    let unit = model.layer_params().max(model.word_embedding_params()) / 8.0 * 4.0;
    assert!((mcore.memory.gradients_bytes.0 / (mcore_stage * 4.0 / 2.0 + unit) - 1.0).abs() < 1e-9);
    let reduce_scatters = |entries: &[tpsim::cost::ledger::LedgerEntry]| {
        entries
            .iter()
            .filter(|e| e.op == Op::ReduceScatter && e.group == tpsim::cost::groups::GroupKind::Dp)
            .map(|e| (e.scope, e.count))
            .collect::<Vec<_>>()
    };
    assert_eq!(reduce_scatters(&titan_ledger), vec![(Scope::PerStep, 1.0)]);
    assert_eq!(
        reduce_scatters(&mcore_ledger),
        vec![(Scope::PerMicrobatch, f64::from(plan.num_microbatches))]
    );
    let grad = titan.terms.get(TermKind::DpGradReduce);
    assert!(grad.time_s.0 > 0.0);
    assert!((grad.exposed_s.0 / grad.time_s.0 - 1.0).abs() < 1e-12);
}

/// torchtitan's full activation checkpointing wraps every block: the search offers no
/// Megatron-style block recompute of some layers under it.
#[test]
fn torchtitan_full_recompute_covers_every_layer() {
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(8);
    for (framework, partial_expected) in [
        (TrainingFramework::Torchtitan, false),
        (TrainingFramework::MegatronCore, true),
    ] {
        let training =
            Training::with_framework(framework, 8192, 64, tpsim::training::AttentionKernel::Flash);
        let options = SearchOptions {
            pins: tpsim::planner::Pins {
                recompute: Some(Recompute::Full),
                ..Default::default()
            },
            ..SearchOptions::default()
        };
        let result = search(&model, &cluster, &training, options);
        let partial = result
            .feasible()
            .iter()
            .any(|e| e.plan.recompute_num_layers > 0);
        assert_eq!(partial, partial_expected, "{framework:?}");
    }
}

/// ZeRO-3 gathers one unit at a time as the GPU holds it, and only what is sharded. Mixtral on 8
/// GPUs with ep 8 (expert-DP 1): the experts stay whole on their GPU, so the resident weights are
/// the sharded dense part, the GPU's experts and the two largest gathered units (the word
/// embedding and the output layer), not two layers holding all 8 experts. With ep 2 (expert-DP 4)
/// the experts are sharded too and a layer's share of them is gathered with it.
#[test]
fn zero3_gathers_a_moe_layer_as_the_gpu_holds_it() {
    use tpsim::cost::memory::layer_params_per_gpu;
    let model = load_model("mixtral-8x7b").unwrap();
    let cluster = cluster(1);
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::Torchtitan,
        4096,
        8,
        tpsim::training::AttentionKernel::Flash,
    );
    let weights = |ep: u32| {
        let request = PlanRequest {
            tp: 1,
            pp: 1,
            dp: 8,
            ep,
            micro_batch: 1,
            recompute: Recompute::Full,
            zero: 3,
            reshard_after_forward: true,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let estimate = evaluate(&model, &cluster, &training, &plan);
        let (dense_layer, expert_layer) = layer_params_per_gpu(&model, &plan);
        let params = estimate.memory.params_per_gpu_before_zero;
        let experts = f64::from(model.layers) * expert_layer;
        (
            estimate.memory.weights_bytes.0,
            params,
            experts,
            dense_layer,
            expert_layer,
        )
    };
    let embedding = model.word_embedding_params();
    // torchtitan's FSDP2 keeps the shards as fp32 parameters and gathers bf16 copies.
    let stored = training.optimizer_states.param_bytes();
    assert_eq!(stored, 4.0);
    let (w8, params, experts, _, _) = weights(8);
    let want =
        stored * ((params - experts) / 8.0 + experts) + 2.0 * (embedding + model.output_params());
    assert!((w8 / want - 1.0).abs() < 1e-9, "ep 8: {w8} B vs {want} B");
    let (w2, params, experts, dense_layer, expert_layer) = weights(2);
    let layer = dense_layer + expert_layer;
    assert!(layer > embedding);
    let want = stored * ((params - experts) / 8.0 + experts / 4.0) + 2.0 * (2.0 * layer);
    assert!((w2 / want - 1.0).abs() < 1e-9, "ep 2: {w2} B vs {want} B");
}

/// More sharding never costs memory when the experts are not sharded at all: Qwen3-30B-A3B on 64
/// GPUs with pp 4 and ep 16 has expert-DP 1, so ZeRO-3 may only shard the dense part (a review
/// found ZeRO-3 reporting more than ZeRO-2 here, from gathering experts that are never sharded).
#[test]
fn zero3_needs_no_more_memory_than_zero2_with_whole_experts() {
    let model = load_model("qwen3-30b-a3b").unwrap();
    let cluster = cluster(8);
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::MegatronCore,
        4096,
        512,
        tpsim::training::AttentionKernel::Flash,
    );
    let total = |zero: u8| {
        let request = PlanRequest {
            tp: 1,
            pp: 4,
            dp: 16,
            ep: 16,
            micro_batch: 1,
            recompute: Recompute::Full,
            zero,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan).memory
    };
    let (two, three) = (total(2), total(3));
    assert!(
        three.weights_bytes.0 <= two.weights_bytes.0,
        "{three:?} vs {two:?}"
    );
    assert!(
        three.total_bytes.0 <= two.total_bytes.0,
        "{three:?} vs {two:?}"
    );
}

/// `comm.*.time_s` is each group's total time before overlap, for PP too: an interleaved plan that
/// hides its pipeline sends reports the sends' whole time there (as its PP term does) and only the
/// exposed part in the step time (a review found PP alone printing its exposed time).
#[test]
fn pipeline_comm_time_is_the_total_like_every_group() {
    use tpsim::cost::terms::TermKind;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(8);
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::MegatronCore,
        8192,
        64,
        tpsim::training::AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 8,
        pp: 4,
        dp: 2,
        vpp: 5,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::None,
        zero: 1,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let e = evaluate(&model, &cluster, &training, &plan);
    let term = e.terms.get(TermKind::PpComm);
    assert_eq!(e.comm.pp.time_s.0, term.time_s.0);
    assert!(e.time.pp_comm_exposed_s.0 < e.comm.pp.time_s.0, "{e:?}");
}

/// DeepSeek-V3's three dense layers sit on the first pipeline stage; the busiest stage holds only
/// MoE layers, so its all-to-alls run once per layer per micro-batch (a review found 243 dispatches
/// for 8 MoE layers × 32 micro-batches: the model-wide MoE share applied to a stage past the
/// dense prefix).
#[test]
fn busiest_stage_of_deepseek_v3_dispatches_in_every_layer() {
    use tpsim::cost::ledger::{Op, ledger};
    let model = load_model("deepseek-v3").unwrap();
    let cluster = Cluster {
        gpu: load_gpu("b200-sxm-180g").unwrap(),
        nodes: 32,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::MegatronCore,
        4096,
        1024,
        tpsim::training::AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 1,
        pp: 8,
        dp: 32,
        ep: 32,
        micro_batch: 1,
        recompute: Recompute::None,
        zero: 1,
        allow_uneven_pp: true,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let layers = plan.stages.max_layers();
    let dispatches: Vec<f64> = ledger(&model, &cluster, &training, &plan)
        .entries
        .iter()
        .filter(|e| e.op == Op::AllToAll)
        .map(|e| e.count)
        .collect();
    assert!(!dispatches.is_empty());
    let want = f64::from(layers) * f64::from(plan.num_microbatches);
    assert!(
        dispatches.iter().all(|&c| c == want),
        "{dispatches:?} vs {want}"
    );
}

/// ZeRO-3's gathers before each forward hide only when prefetched: turning the parameter-gather
/// overlap off exposes them (a review found `--overlap-param-gather false` changing nothing for
/// ZeRO-3 plans).
#[test]
fn zero3_forward_gathers_hide_only_when_prefetched() {
    use tpsim::cost::terms::TermKind;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(8);
    let exposed = |param_gather: bool| {
        let mut training = Training::with_framework(
            tpsim::training::TrainingFramework::MegatronCore,
            8192,
            64,
            tpsim::training::AttentionKernel::Flash,
        );
        training.overlap.param_gather = param_gather;
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
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let e = evaluate(&model, &cluster, &training, &plan);
        e.terms.get(TermKind::DpParamGather).exposed_s.0
    };
    assert!(
        exposed(false) > exposed(true),
        "{} vs {}",
        exposed(false),
        exposed(true)
    );
}

/// Expert tensor parallelism moves tokens too: the dispatched tokens are all-gathered among the
/// ranks that split each expert and the expert outputs reduce-scattered back (Megatron-Core's
/// all-to-all dispatcher), twice per MoE layer per micro-batch forward and again in backward. A
/// review found etp 1, 2 and 4 moving the same bytes.
#[test]
fn expert_tensor_parallelism_gathers_and_scatters_the_dispatched_tokens() {
    use tpsim::cost::groups::GroupKind;
    use tpsim::cost::ledger::{Op, ledger};
    let model = load_model("grok-1").unwrap();
    let cluster = cluster(16);
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::MegatronCore,
        8192,
        256,
        tpsim::training::AttentionKernel::Flash,
    );
    let run = |etp: u32| {
        let request = PlanRequest {
            tp: 4,
            pp: 4,
            dp: 8,
            ep: 8,
            etp,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::None,
            zero: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let e = evaluate(&model, &cluster, &training, &plan);
        let entries = ledger(&model, &cluster, &training, &plan).entries;
        (e, entries)
    };
    let (one, one_ledger) = run(1);
    let (four, four_ledger) = run(4);
    assert!(!one_ledger.iter().any(|x| x.group == GroupKind::ExpertTp));
    let gathers: Vec<_> = four_ledger
        .iter()
        .filter(|x| x.group == GroupKind::ExpertTp)
        .map(|x| (x.op, x.ranks))
        .collect();
    assert_eq!(gathers.len(), 4, "{gathers:?}");
    assert!(
        gathers
            .iter()
            .all(|&(op, ranks)| ranks == 4 && (op == Op::AllGather || op == Op::ReduceScatter))
    );
    assert!(four.comm.ep.wire_bytes.0 > one.comm.ep.wire_bytes.0);
    assert!(four.time.ep_comm_exposed_s.0 > one.time.ep_comm_exposed_s.0);
}

/// Under PyTorch's pipelining the backward never reshards, so after the first micro-batch the
/// whole stage is gathered whether or not the forward reshards: torchtitan's FSDP with PP holds
/// the same weights either way, and resharding after the forward only adds gathers (a review
/// found the search picking reshard-after-forward for the 1.5 GiB it seemed to save).
#[test]
fn torchtitan_pipeline_keeps_the_stage_gathered_either_way() {
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(8);
    let training = Training::with_framework(
        TrainingFramework::Torchtitan,
        8192,
        256,
        tpsim::training::AttentionKernel::Flash,
    );
    let run = |reshard_after_forward: bool| {
        let request = PlanRequest {
            tp: 8,
            pp: 4,
            dp: 2,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero: 3,
            reshard_after_forward,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan)
    };
    let (kept, resharded) = (run(false), run(true));
    assert_eq!(
        kept.memory.weights_bytes.0,
        resharded.memory.weights_bytes.0
    );
    assert!(resharded.time.step_s.0 > kept.time.step_s.0);
}

/// The search proposes only what the framework runs: DeepSpeed's context parallelism only as
/// Ulysses (head all-to-all, no Megatron sequence parallelism beside it) and no interleaved
/// pipeline, 2021 Megatron-LM no context parallelism (a review found 18 of DeepSpeed's top 19
/// plans using cp or vpp, which `--emit deepspeed` then had to skip).
#[test]
fn the_search_proposes_only_what_the_framework_runs() {
    use tpsim::training::TrainingFramework;
    let model = load_model("llama3-70b").unwrap();
    let cluster = cluster(16);
    let plans = |framework: TrainingFramework| {
        let training = Training::with_framework(
            framework,
            8192,
            512,
            tpsim::training::AttentionKernel::Flash,
        );
        search(&model, &cluster, &training, SearchOptions::default()).ranked
    };
    let deepspeed = plans(TrainingFramework::Deepspeed);
    assert!(!deepspeed.is_empty());
    assert!(deepspeed.iter().all(|e| e.plan.vpp == 1));
    assert!(
        deepspeed
            .iter()
            .all(|e| e.plan.cp == 1 || !e.plan.sequence_parallel)
    );
    // Megatron-DeepSpeed asserts tp 1 and pp 1 beside Ulysses (megatron/core/parallel_state.py).
    assert!(
        deepspeed
            .iter()
            .all(|e| e.plan.cp == 1 || (e.plan.tp == 1 && e.plan.pp == 1))
    );
    let megatron_2021 = plans(TrainingFramework::MegatronLm2021);
    assert!(megatron_2021.iter().all(|e| e.plan.cp == 1));
    assert!(megatron_2021.iter().any(|e| e.plan.vpp > 1));
    let core = plans(TrainingFramework::MegatronCore);
    assert!(core.iter().any(|e| e.plan.cp > 1) && core.iter().any(|e| e.plan.vpp > 1));
}

/// With ep 1 and expert TP above 1 the MoE token traffic is the expert-TP gathers and scatters:
/// the EP group's figures carry their link rather than none (a review found 606 GB with
/// `comm.ep.link` null).
#[test]
fn expert_tp_traffic_without_ep_names_its_link() {
    let model = load_model("qwen3-235b-a22b").unwrap();
    let cluster = cluster(32);
    let training = Training::with_framework(
        tpsim::training::TrainingFramework::MegatronCore,
        4096,
        1024,
        tpsim::training::AttentionKernel::Flash,
    );
    let request = PlanRequest {
        tp: 2,
        pp: 1,
        dp: 128,
        ep: 1,
        etp: 2,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::Full,
        zero: 3,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let e = evaluate(&model, &cluster, &training, &plan);
    assert!(e.comm.ep.wire_bytes.0 > 0.0);
    assert_eq!(e.comm.ep.link, Some(tpsim::cluster::Link::Nvlink));
}
