//! Regressions from the twenty-fifth review: the TP collectives of the model's ends
//! (`cost::embedding_output_tp`, landed in decc0d5, fedc384 and c419680), read against
//! Megatron-LM (d98e8a64), Megatron-DeepSpeed (f4157bea), torchtitan (b5bcd76c6) and Transformer
//! Engine. Each test names the defect it guards; the review's list of what it checked and found
//! sound is in the commit that adds this file.
//!
//! Defects found and fixed:
//! 1. Under sequence parallelism the embedding of a Megatron-DeepSpeed plan was priced as
//!    Megatron-Core's reduce-scatter. Megatron-DeepSpeed's `VocabParallelEmbedding.forward`
//!    always all-reduces the shards' lookups (`reduce_from_tensor_model_parallel_region`,
//!    megatron/core/tensor_parallel/layers.py at f4157bea) and `Embedding.forward` splits the sum
//!    afterwards (`scatter_to_sequence_parallel_region`, megatron/model/language_model.py): an
//!    all-reduce, twice a reduce-scatter's wire bytes (`TrainingFramework::
//!    embedding_reduce_scatters_under_sp`).
//! 2. An MTP depth's projection gathered its 2h-wide input in bf16 under FP8 and MXFP8. Megatron-
//!    Core runs `_concat_embeddings` (and so `eh_proj`, a Transformer Engine column-parallel
//!    linear) inside `get_fp8_context(self.config)` whenever `config.fp8` is set
//!    (megatron/core/transformer/multi_token_prediction.py `_proj_and_transformer_layer`;
//!    `layer_no = -1` keeps it FP8 whatever `first_last_layers_bf16` says, fp8_utils.py), and
//!    Transformer Engine gathers the quantized copy (`comm::sp_gather_scale`); FP4 is left out
//!    ("currently ignoring FP4 in MTP layers").

use tpsim::cluster::Cluster;
use tpsim::cost::comm::{self, Collective};
use tpsim::cost::embedding_output_tp::{EndCollective, ModelEnd, for_each_end_collective};
use tpsim::cost::ledger::Pass;
use tpsim::model::Model;
use tpsim::plan::{ParallelPlan, PlanRequest, Precision};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};

fn one_node(gpu: &str) -> Cluster {
    Cluster {
        gpu: tpsim::specs::load_gpu(gpu).unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    }
}

fn training(framework: TrainingFramework) -> Training {
    Training::with_framework(framework, 4096, 64, AttentionKernel::Flash)
}

/// tp 8 with sequence parallelism on one node of `gpu`, at `precision`.
fn tp8_sp(model: &Model, training: &Training, gpu: &str, precision: Precision) -> ParallelPlan {
    let request = PlanRequest {
        tp: 8,
        pp: 1,
        dp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        zero: 1,
        precision,
        ..PlanRequest::default()
    };
    ParallelPlan::build(&request, model, &one_node(gpu), training).unwrap()
}

fn listed(model: &Model, training: &Training, plan: &ParallelPlan) -> Vec<EndCollective> {
    let mut all = Vec::new();
    for_each_end_collective(model, training, plan, false, |c| all.push(c));
    all
}

fn embedding_ops(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<(Collective, Pass)> {
    listed(model, training, plan)
        .into_iter()
        .filter(|c| c.end == ModelEnd::Embedding)
        .map(|c| (c.collective, c.pass))
        .collect()
}

/// Defect 1: Llama 3 8B (rotary positions) at tp 8 with sequence parallelism. Megatron-Core and
/// torchtitan reduce-scatter the embedding's lookups; Megatron-DeepSpeed all-reduces them and
/// splits the sum, and the split's backward all-gathers the gradient in both.
#[test]
fn deepspeed_all_reduces_the_embedding_under_sequence_parallelism() {
    let model = tpsim::specs::load_model("llama3-8b").unwrap();
    for framework in [
        TrainingFramework::MegatronCore,
        TrainingFramework::Torchtitan,
    ] {
        let training = training(framework);
        let plan = tp8_sp(&model, &training, "h100-sxm-80g", Precision::Bf16);
        assert_eq!(
            embedding_ops(&model, &training, &plan),
            [
                (Collective::ReduceScatter, Pass::Forward),
                (Collective::AllGather, Pass::Backward)
            ],
            "{framework:?}"
        );
    }
    let training = training(TrainingFramework::Deepspeed);
    let plan = tp8_sp(&model, &training, "h100-sxm-80g", Precision::Bf16);
    assert!(plan.sequence_parallel);
    assert_eq!(
        embedding_ops(&model, &training, &plan),
        [
            (Collective::AllReduce, Pass::Forward),
            (Collective::AllGather, Pass::Backward)
        ]
    );
}

/// The bytes of the MTP projection's forward input gather and of its backward re-gather, and of
/// the output layer's forward gather.
fn gathers(model: &Model, training: &Training, plan: &ParallelPlan) -> (f64, f64, f64) {
    let all = listed(model, training, plan);
    let bytes = |site: &str| {
        all.iter()
            .find(|c| c.site.starts_with(site))
            .unwrap_or_else(|| panic!("no collective at {site}"))
            .tensor_bytes
    };
    (
        bytes("before an MTP depth's projection"),
        bytes("MTP projection input again"),
        bytes("before the output layer"),
    )
}

/// Defect 2: DeepSeek-V3 with one MTP depth at tp 8 with sequence parallelism under Megatron-Core.
/// In bf16 the projection's input gathers carry 2h bf16 values per token; under FP8 (H100) and
/// MXFP8 (B200) they carry Transformer Engine's quantized copy, as the layers' column-parallel
/// gathers do; under NVFP4 the MTP depth runs outside the FP8 context, so bf16 again. The output
/// layer is not a Transformer Engine module and gathers bf16 throughout.
#[test]
fn the_mtp_projection_gathers_its_input_quantized_under_fp8() {
    let mut model = tpsim::specs::load_model("deepseek-v3").unwrap();
    model.mtp_layers = 1;
    let training = training(TrainingFramework::MegatronCore);
    let bf16 = tp8_sp(&model, &training, "h100-sxm-80g", Precision::Bf16);
    let tensor = comm::tp_tensor_bytes(&model, &training, &bf16);
    assert_eq!(
        gathers(&model, &training, &bf16),
        (2.0 * tensor, 2.0 * tensor, tensor)
    );
    for (gpu, precision) in [
        ("h100-sxm-80g", Precision::Fp8),
        ("b200-sxm-180g", Precision::Mxfp8),
    ] {
        let plan = tp8_sp(&model, &training, gpu, precision);
        let scale = comm::sp_gather_scale(&training, &plan);
        assert!(
            scale.forward < 1.0,
            "{precision:?} gathers quantized copies"
        );
        let (forward, regather, output) = gathers(&model, &training, &plan);
        assert_eq!(forward, 2.0 * tensor * scale.forward, "{precision:?}");
        assert_eq!(regather, 2.0 * tensor * scale.regather, "{precision:?}");
        assert_eq!(output, tensor, "{precision:?}");
    }
    let nvfp4 = tp8_sp(&model, &training, "b200-sxm-180g", Precision::Nvfp4);
    assert_eq!(
        gathers(&model, &training, &nvfp4),
        (2.0 * tensor, 2.0 * tensor, tensor)
    );
}
