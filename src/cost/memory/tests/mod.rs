//! Memory tests across the module: stages' layers and parameters, the pipeline peak, ZeRO's
//! model states, fragmentation and the loss's logits, each against a paper's number or a
//! count worked out by hand.

mod saved_activations;

use super::activations::*;
use super::in_flight::*;
use super::params::*;
use super::stage_layers::*;
use super::stage_memory::*;
use super::*;
use crate::cost::LayerMix;
use crate::model::tests::gpt3_175b;
use crate::plan::{Precision, Recompute};
use crate::training::{AttentionKernel, CpExchange};
use crate::units::GIB;

/// A hybrid stack's stages each hold their own slice of the pattern: over the stages of a
/// pipeline (tp 1, ep 1, so each GPU holds its stage whole) the parameters add up to the
/// model's, for a dense hybrid (Nemotron-H 56B, 118 layers at pp 2) and an MoE one with
/// LatentMoE (Nemotron 3 Super, 88 layers at pp 4 and at pp 8 with 4 layers on the last
/// stage), and the stages differ where their slices do.
#[test]
fn hybrid_stages_hold_their_own_slices_of_the_pattern() {
    let cases = [
        ("nemotron-h-56b", 2, None),
        ("nemotron-3-super-120b-a12b", 4, None),
        ("nemotron-3-super-120b-a12b", 8, Some((12, 4))),
    ];
    for (name, pp, split) in cases {
        let model = crate::specs::load_model(name).unwrap();
        let cluster = Cluster {
            gpu: crate::specs::load_gpu("b200-sxm-180g").unwrap(),
            nodes: pp,
            gpus_per_node: 1,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            pp * 8,
            AttentionKernel::Flash,
        );
        let request = crate::plan::PlanRequest {
            tp: 1,
            pp,
            dp: 1,
            micro_batch: 1,
            stage_split: split,
            ..crate::plan::PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training)
            .unwrap_or_else(|e| panic!("{name} pp {pp}: {e}"));
        let mut stages = vec![stage_params(&model, &plan, Stage::First, 1)];
        for rank in stage_ranks(&model, &plan, Stage::Middle).filter(|_| pp > 2) {
            stages.push(stage_params(&model, &plan, Stage::Middle, rank));
        }
        stages.push(stage_params(&model, &plan, Stage::Last, 1));
        let total: f64 = stages.iter().sum();
        let what = format!("{name} pp {pp} {split:?}: {stages:?}");
        assert!((total / model.params() - 1.0).abs() < 1e-12, "{what}");
        assert!(
            stages.windows(2).any(|w| w[0] != w[1]),
            "slices differ: {what}"
        );
    }
}

/// Each stage holds the layers the layout puts on it: DeepSeek-V3's first stage of 4 layers
/// holds the 3 dense layers (their dense MLPs, no experts) and 1 MoE layer; it was charged 4
/// layers at the model's average, 58/61 MoE, about 2.8 layers' worth of experts too many.
#[test]
fn stages_hold_their_own_dense_and_moe_layers() {
    let model = crate::specs::load_model("deepseek-v3").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("b200-sxm-180g").unwrap(),
        nodes: 32,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        crate::training::TrainingFramework::MegatronCore,
        4096,
        2048,
        AttentionKernel::Flash,
    );
    let request = crate::plan::PlanRequest {
        tp: 1,
        pp: 16,
        dp: 16,
        ep: 8,
        micro_batch: 1,
        allow_uneven_pp: true,
        stage_split: Some((4, 1)),
        ..crate::plan::PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    assert_eq!(stage_moe_share(&model, &plan, Stage::First), 0.25);
    assert_eq!(stage_moe_share(&model, &plan, Stage::Middle), 1.0);
    // The last stage: 1 decoder layer (and the MTP layers, when trained), all MoE.
    assert_eq!(stage_moe_share(&model, &plan, Stage::Last), 1.0);
    let experts = super::super::moe::expert_params_per_gpu(&model, &plan);
    let moe_rest = model.moe_layer_params() - 256.0 * model.expert_params();
    let first =
        model.word_embedding_params() + 3.0 * model.dense_layer_params() + moe_rest + experts;
    assert!((stage_params(&model, &plan, Stage::First, 1) / first - 1.0).abs() < 1e-12);
    let middle = 4.0 * (moe_rest + experts);
    assert!((stage_params(&model, &plan, Stage::Middle, 1) / middle - 1.0).abs() < 1e-12);
    let heaviest = max_stage_params(&model, &training, &plan);
    assert!((heaviest.total / middle - 1.0).abs() < 1e-12);
    assert!((heaviest.expert / (4.0 * experts) - 1.0).abs() < 1e-12);
    // Every layer of the whole model on one stage: the model's own mix.
    let whole = crate::plan::PlanRequest {
        pp: 1,
        dp: 256,
        allow_uneven_pp: false,
        stage_split: None,
        ..request
    };
    let one = ParallelPlan::build(&whole, &model, &cluster, &training).unwrap();
    let mtp = model.mtp_layers;
    assert_eq!(
        stage_moe_share(&model, &one, Stage::Only),
        f64::from(58 + mtp) / f64::from(61 + mtp)
    );
}

/// The busiest stage's MoE share counts its own layers: Mixtral with `--moe-layer-freq 2` on
/// 3 layers a stage has stages with 2 MoE layers and stages with 1; the step is paced by the
/// former (2/3), not the model's average (1/2).
#[test]
fn the_busiest_stage_runs_its_own_moe_layers() {
    let mut model = crate::specs::load_model("mixtral-8x7b").unwrap();
    model.layers = 48;
    model.moe.as_mut().unwrap().layer_freq = 2;
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 16,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        crate::training::TrainingFramework::MegatronCore,
        4096,
        256,
        AttentionKernel::Flash,
    );
    let request = crate::plan::PlanRequest {
        tp: 8,
        pp: 16,
        dp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        ..crate::plan::PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    assert_eq!(
        super::super::moe::busiest_stage_moe_share(&model, &plan),
        2.0 / 3.0
    );
    assert_eq!(super::super::moe::moe_layer_share(&model), 0.5);
    assert_eq!(stage_moe_share(&model, &plan, Stage::First), 2.0 / 3.0);
    assert_eq!(stage_moe_share(&model, &plan, Stage::Last), 1.0 / 3.0);
    assert_eq!(stage_moe_share(&model, &plan, Stage::Middle), 2.0 / 3.0);
}

#[test]
fn zero_paper_example() {
    // Rajbhandari et al. 2020 Figure 1: Ψ = 7.5B, N_d = 64: 120, 31.4, 16.6, 1.9 GB.
    let gb = |zero| zero_model_state_bytes(7.5e9, 64, zero, 2.0) / 1e9;
    assert!((gb(0) - 120.0).abs() < 0.05);
    assert!((gb(1) - 31.4).abs() < 0.05);
    assert!((gb(2) - 16.6).abs() < 0.05);
    assert!((gb(3) - 1.9).abs() < 0.05);
}

/// GPT-3 175B on 16 nodes, TP 8 x PP 8 x DP 2, one sequence per micro-batch, under
/// `framework`: `global_batch` / 2 micro-batches per step.
fn gpt3_pp8(
    framework: crate::training::TrainingFramework,
    vpp: u32,
    global_batch: u32,
    zero: u8,
) -> (Model, Cluster, Training, ParallelPlan) {
    let mut model = gpt3_175b();
    // torchtitan runs a pipeline only untied (`TrainingFramework::runs_tied_embeddings_with_pp`).
    model.tied_embeddings &= framework.runs_tied_embeddings_with_pp();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 16,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(framework, 2048, global_batch, AttentionKernel::Flash);
    let request = crate::plan::PlanRequest {
        tp: 8,
        pp: 8,
        dp: 2,
        vpp,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::Full,
        zero,
        ..crate::plan::PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    (model, cluster, training, plan)
}

#[test]
fn stages_hold_the_warm_up_megatron_schedules_and_never_more_than_every_micro_batch() {
    let core = crate::training::TrainingFramework::MegatronCore;
    // 1F1B with 64 micro-batches: p − rank (Narayanan et al. 2021 §2.2.1).
    let (model, _, training, plan) = gpt3_pp8(core, 1, 128, 1);
    assert_eq!(in_flight(&model, &training, &plan, 0), 8.0);
    assert_eq!(in_flight(&model, &training, &plan, 1), 7.0);
    assert_eq!(in_flight(&model, &training, &plan, 7), 1.0);
    // Interleaved (v = 2) with 64: (2(p − rank − 1) + (v − 1)p + 1) / v chunks' worth, which on
    // the first stage is Korthikanti's p(1 + (p − 1)/(p·v)) = 11.5.
    let (model, _, training, plan) = gpt3_pp8(core, 2, 128, 1);
    assert_eq!(in_flight(&model, &training, &plan, 0), 11.5);
    assert_eq!(in_flight(&model, &training, &plan, 1), 10.5);
    assert_eq!(in_flight(&model, &training, &plan, 7), 4.5);
    // With m = p = 8 the warm-up is every chunk of every micro-batch: 8, not 11.5.
    let (model, _, training, plan) = gpt3_pp8(core, 2, 16, 1);
    assert_eq!(in_flight(&model, &training, &plan, 0), 8.0);
    assert_eq!(in_flight(&model, &training, &plan, 7), 4.5);
}

#[test]
fn torch_pipelining_keeps_boundary_tensors_per_micro_batch() {
    // 1F1B, 8 micro-batches on 8 stages: the first stage holds its 8 in-flight outputs and 8
    // gradient receive buffers; the last stage its 7 idle activation receive buffers (the
    // in-flight one is its first layer's input) and no output buffers (it outputs logits).
    let titan = crate::training::TrainingFramework::Torchtitan;
    let (model, _, training, plan) = gpt3_pp8(titan, 1, 16, 3);
    let message = super::super::comm::pp_message_bytes(&model, &training, &plan);
    let held = |rank| in_flight(&model, &training, &plan, rank);
    let first = pipeline_buffer_bytes(&model, &training, &plan, held(0), Stage::First);
    let last = pipeline_buffer_bytes(&model, &training, &plan, held(7), Stage::Last);
    assert!((first / message - 16.0).abs() < 1e-9, "{}", first / message);
    assert!((last / message - 7.0).abs() < 1e-9, "{}", last / message);
    // Megatron-Core frees what it sends and receives into fresh tensors: no such term.
    let core = crate::training::TrainingFramework::MegatronCore;
    assert!(!core.keeps_pipeline_buffers_per_microbatch());
}

#[test]
fn torch_pipelining_frees_each_chunks_gradients_after_its_last_backward() {
    // torchtitan, ZeRO-3 with PP 8 and two chunks per rank: with one round of micro-batches
    // (m = p = 8) one chunk's unsharded gradients live at a time, beside the sharded gradients of
    // the chunk already reduce-scattered; with two rounds (m = 16) the chunks alternate and both
    // live unsharded, and no sharded gradient exists yet (FSDP2's `foreach_reduce` makes it as it
    // frees the unsharded one; `zero_grad` set it to None).
    let titan = crate::training::TrainingFramework::Torchtitan;
    let (model, cluster, training, one_round) = gpt3_pp8(titan, 2, 16, 3);
    let (_, _, _, two_rounds) = gpt3_pp8(titan, 2, 32, 3);
    let grads = |plan: &ParallelPlan| {
        stage_memory(&model, &cluster, &training, plan, Stage::Middle, 1)
            .gradients_bytes
            .0
    };
    let params = stage_params_at(
        &model,
        &one_round,
        Stage::Middle,
        LayerMix::transformer(0.0),
    );
    let unsharded = params * training.grad_dtype.bytes();
    let sharded = unsharded / 2.0;
    assert_eq!(one_round.schedule_runs, 1);
    assert!((grads(&two_rounds) - unsharded).abs() < 1e-6 * unsharded);
    assert!((grads(&one_round) - (sharded / 2.0 + unsharded / 2.0)).abs() < 1e-6 * unsharded);
}

#[test]
fn torchtitan_before_return_outputs_keeps_every_micro_batchs_logits() {
    // The last stage of 8 micro-batches keeps the other 7's bf16 logits (split over TP by
    // the loss-parallel output layer) until the step ends; only the activations and the
    // fragmentation that scales with them move.
    let titan = crate::training::TrainingFramework::Torchtitan;
    let (model, cluster, mut training, plan) = gpt3_pp8(titan, 1, 16, 3);
    let without = stage_memory(&model, &cluster, &training, &plan, Stage::Last, 1);
    training.pipeline_keeps_outputs = true;
    let with = stage_memory(&model, &cluster, &training, &plan, Stage::Last, 1);
    let logits = 7.0 * 2.0 * 2048.0 * f64::from(model.vocab) / 8.0;
    let kept = with.activations_bytes.0 - without.activations_bytes.0;
    assert!((kept / logits - 1.0).abs() < 1e-9, "{kept} vs {logits}");
    let total = with.total_bytes.0 - without.total_bytes.0;
    assert!((total / (logits * (1.0 + FRAGMENTATION_FRACTION)) - 1.0).abs() < 1e-9);
    assert_eq!(with.weights_bytes, without.weights_bytes);
    assert_eq!(with.gradients_bytes, without.gradients_bytes);
}

#[test]
fn fragmentation_grows_with_what_a_step_allocates_and_frees() {
    // Megatron-Core ZeRO-1 keeps its parameters, gradient buffer and optimizer states from the
    // start: only the activations fragment.
    let core = crate::training::TrainingFramework::MegatronCore;
    let (model, cluster, training, plan) = gpt3_pp8(core, 1, 128, 1);
    let m = stage_memory(&model, &cluster, &training, &plan, Stage::First, 1);
    let want = RESERVED_GIB * GIB + FRAGMENTATION_FRACTION * m.activations_bytes.0;
    assert!((m.other_bytes.0 / want - 1.0).abs() < 1e-12);
}

#[test]
fn the_loss_kernel_sets_the_logit_bytes_on_the_last_stage() {
    // Llama 3 8B on one GPU of 8 (FSDP, no TP, one stage): eager PyTorch's cross-entropy on
    // upcast logits holds three fp32 copies of the b·s·V logits, the compiled loss and
    // Megatron's vocab-parallel one 4 bytes per element; nothing else moves.
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let framework = crate::training::TrainingFramework::Torchtitan;
    let mut training = Training::with_framework(framework, 8192, 16, AttentionKernel::Flash);
    let request = crate::plan::PlanRequest {
        tp: 1,
        pp: 1,
        dp: 8,
        micro_batch: 2,
        zero: 3,
        recompute: Recompute::Full,
        ..crate::plan::PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    assert_eq!(training.loss, crate::training::LossKernel::EagerFp32);
    let eager = memory(&model, &cluster, &training, &plan);
    training.loss = crate::training::LossKernel::Compiled;
    let compiled = memory(&model, &cluster, &training, &plan);
    let logits = 2.0 * 8192.0 * 128256.0;
    let freed = eager.activations_bytes.0 - compiled.activations_bytes.0;
    assert!((freed / (8.0 * logits) - 1.0).abs() < 1e-9, "{freed}");
    assert_eq!(eager.weights_bytes, compiled.weights_bytes);
    // Under TP torchtitan shards the logits with `loss_parallel()`, whose eager backward holds
    // four fp32 tensors per logit of the TP shard (16 bytes), not the kernel's three.
    let tp_request = crate::plan::PlanRequest {
        tp: 8,
        dp: 1,
        sequence_parallel: true,
        ..request
    };
    let tp_plan = ParallelPlan::build(&tp_request, &model, &cluster, &training).unwrap();
    training.loss = crate::training::LossKernel::EagerFp32;
    let eager_tp = memory(&model, &cluster, &training, &tp_plan);
    training.loss = crate::training::LossKernel::Compiled;
    let compiled_tp = memory(&model, &cluster, &training, &tp_plan);
    let freed = eager_tp.activations_bytes.0 - compiled_tp.activations_bytes.0;
    assert!(
        (freed / (12.0 * logits / 8.0) - 1.0).abs() < 1e-9,
        "{freed}"
    );
}
