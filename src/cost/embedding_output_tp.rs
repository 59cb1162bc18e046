//! The TP collectives of the model's two ends, beside the layers' own (`tp_collectives`): the
//! vocabulary-parallel embedding on the first pipeline stage, the vocabulary-parallel output layer
//! and its loss on the last, and each multi-token-prediction depth's embedding, projection and
//! output layer, again on the last. Each runs once per micro-batch on its stage; one list
//! ([`for_each_end_collective`]) feeds both the stage's time (`unit_costs`) and the ledger's rows.
//!
//! Sources (Megatron-LM at d98e8a64):
//! - Embedding: `VocabParallelEmbedding.forward` (`megatron/core/tensor_parallel/layers.py`) looks
//!   up the rank's vocabulary share and sums the shares with a reduce-scatter over the sequence
//!   when `reduce_scatter_embeddings` (sequence parallelism and no learned position table:
//!   `LanguageModelEmbedding`, `language_model_embedding.py`), else with an all-reduce, after which
//!   sequence parallelism splits the sum (no communication); the backward of either split is an
//!   all-gather of the gradient, of the all-reduce nothing. torchtitan's `tok_embeddings` is
//!   `RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))`
//!   (`parallelize_llama.py`): the same reduce-scatter and all-gather. Megatron-DeepSpeed always
//!   all-reduces and then splits (`TrainingFramework::embedding_reduce_scatters_under_sp`).
//! - Output layer: a column-parallel linear (`gpt_model.py`: `tensor_parallel.ColumnParallelLinear`,
//!   not a Transformer Engine module, so outside userbuffers' overlap; torchtitan's `ColwiseParallel`
//!   output sits outside the compiled blocks, so outside async TP). Under sequence parallelism it
//!   all-gathers its input in the forward, exposed; the backward re-gathers the input for the
//!   weight gradient under the dgrad GEMM and reduce-scatters the input gradient under the wgrad
//!   GEMM, asynchronously where the framework does (`TrainingFramework::
//!   output_layer_grad_collectives_async`); without sequence parallelism the input gradient is
//!   all-reduced instead. torchtitan keeps the gathered input (no re-gather).
//! - Loss: the vocabulary-parallel cross-entropy all-reduces three fp32 values per token over TP
//!   in its forward — the logits' maximum, the target's logit and the sum of exponentials
//!   (`tensor_parallel/cross_entropy.py` `VocabParallelCrossEntropy`; PyTorch's `loss_parallel`
//!   likewise) — small and latency-bound, exposed. The fused loss sends the same values in fewer
//!   collectives (Megatron-Core `--cross-entropy-loss-fusion`, on in Megatron-Bridge's model
//!   configs: `fused_cross_entropy.py` all-reduces the maximum, then the target's logit and the
//!   sum together; `--cross-entropy-fusion-impl te`, DeepSeek's bridges, all-gathers the three
//!   values, Transformer Engine `pytorch/triton/cross_entropy.py`): one or two latencies less per
//!   micro-batch, not told apart here.
//! - MTP depth (`multi_token_prediction.py`): the embedding again (`embedding(input_ids=...)`), the
//!   `eh_proj` column-parallel linear over the concatenated 2h-wide input (its input gathered as
//!   the output layer's is), the all-gather of its h/t-wide output
//!   (`gather_from_tensor_model_parallel_region`) and the split back to sequence shards, whose
//!   backward all-gathers; then the output layer and loss again.
//!
//! Every tensor is bf16 (the embedding, output layer and loss stay out of FP8 autocast) at
//! b·(s/cp) tokens, `comm::tp_tensor_bytes` wide h, the projection's input 2h — except the MTP
//! projection's input gathers under FP8 and MXFP8: `_proj_and_transformer_layer` runs
//! `_concat_embeddings` (and so `eh_proj`, a Transformer Engine linear) inside `get_fp8_context`
//! whenever `config.fp8` is set (FP4 is left out: "currently ignoring FP4 in MTP layers"), and
//! Transformer Engine gathers the quantized copy (`comm::sp_gather_scale`).

use super::comm::{self, Collective};
use super::ledger::Pass;
use super::overlap::{PassComm, exposed_under};
use super::stage_times::Ends;
use crate::model::{Model, PositionEmbedding};
use crate::plan::{ParallelPlan, Precision};
use crate::training::Training;

/// Bytes of one fp32 value the loss all-reduces per token.
const LOSS_VALUE_BYTES: f64 = 4.0;

/// Values per token the vocabulary-parallel cross-entropy all-reduces: max, target logit, sum of
/// exponentials.
const LOSS_ALL_REDUCES: f64 = 3.0;

/// Which stage's end a collective belongs to: the first stage's embedding, or the last stage's
/// output layer, loss and MTP depths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelEnd {
    Embedding,
    Output,
}

/// The GEMM an asynchronous backward collective hides under, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndWindow {
    Nothing,
    /// One of the output layer's GEMMs (dgrad or wgrad: `compute::OutputLayerTime::logits_gemm_s`).
    LogitsGemm,
    /// One of an MTP depth's `eh_proj` GEMMs (`compute::OutputLayerTime::projection_gemm_s`).
    ProjectionGemm,
}

/// One collective of the model's ends, per micro-batch on its stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndCollective {
    pub end: ModelEnd,
    pub collective: Collective,
    pub pass: Pass,
    pub site: &'static str,
    /// The full tensor (what an all-gather produces, what a reduce-scatter consumes).
    pub tensor_bytes: f64,
    /// Times per micro-batch (the MTP depths repeat theirs and the output layer's).
    pub count: f64,
    pub hidden_under: EndWindow,
}

/// Calls `f` with each collective of the model's ends under `plan` that runs (none without TP),
/// without gathering them: the evaluation prices them as they come ([`ends_comm`]), the ledger
/// lists them.
/// `tp_overlap` (`overlap::tp_overlap_on`): userbuffers overlap reaches the MTP projection, a
/// Transformer Engine linear with its own buffer (`tp_comm_buffer_name="mtp_eh_proj"`), whose
/// forward gather then hides under its GEMM; the output layer is not one.
#[inline(always)]
pub fn for_each_end_collective(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    tp_overlap: bool,
    mut f: impl FnMut(EndCollective),
) {
    if plan.tp <= 1 {
        return;
    }
    let mut push = |c: EndCollective| {
        if c.count > 0.0 {
            f(c);
        }
    };
    let tensor = comm::tp_tensor_bytes(model, training, plan);
    let sp = plan.sequence_parallel;
    // The MTP projection's input gathers carry Transformer Engine's quantized copy under FP8 and
    // MXFP8 (see the module's note); the output layer's stay bf16.
    let projection_gathers = if matches!(plan.precision, Precision::Fp8 | Precision::Mxfp8) {
        comm::sp_gather_scale(training, plan)
    } else {
        comm::SpGatherScale::BF16
    };
    let framework = training.framework;
    let asynchronous = framework.output_layer_grad_collectives_async();
    let regathers = sp && !framework.sp_keeps_gathered_inputs();
    let depths = f64::from(model.mtp_layers);
    let window = |w: EndWindow| if asynchronous { w } else { EndWindow::Nothing };
    // The embedding's sum of vocabulary shares, on the first stage and once per MTP depth.
    let reduce_scatters = sp
        && framework.embedding_reduce_scatters_under_sp(
            model.position_embedding == PositionEmbedding::LearnedAbsolute,
        );
    for (end, count, forward_site, backward_site) in [
        (
            ModelEnd::Embedding,
            1.0,
            if reduce_scatters {
                "embedding output (vocabulary split): sum the shards' lookups, split by sequence"
            } else {
                "embedding output (vocabulary split): sum the shards' lookups"
            },
            "embedding output gradient (conjugate of the split by sequence)",
        ),
        (
            ModelEnd::Output,
            depths,
            if reduce_scatters {
                "MTP depth's embedding output: sum the shards' lookups, split by sequence"
            } else {
                "MTP depth's embedding output: sum the shards' lookups"
            },
            "MTP depth's embedding output gradient (conjugate of the split by sequence)",
        ),
    ] {
        push(EndCollective {
            end,
            collective: if reduce_scatters {
                Collective::ReduceScatter
            } else {
                Collective::AllReduce
            },
            pass: Pass::Forward,
            site: forward_site,
            tensor_bytes: tensor,
            count,
            hidden_under: EndWindow::Nothing,
        });
        if sp {
            push(EndCollective {
                end,
                collective: Collective::AllGather,
                pass: Pass::Backward,
                site: backward_site,
                tensor_bytes: tensor,
                count,
                hidden_under: EndWindow::Nothing,
            });
        }
    }
    // A column-parallel linear's input collectives: the output layer's (h wide, once and per MTP
    // depth) and each MTP depth's projection (2h wide).
    for (width, count, gemm, gathers, sites) in [
        (
            1.0,
            1.0 + depths,
            EndWindow::LogitsGemm,
            comm::SpGatherScale::BF16,
            [
                "before the output layer (column split): gather the sequence-split input",
                "output layer input again, for its weight gradient (the forward kept the sequence shard)",
                "output layer input gradient (conjugate of the all-gather)",
                "output layer input gradient (column split, Megatron's f)",
            ],
        ),
        (
            2.0,
            depths,
            EndWindow::ProjectionGemm,
            projection_gathers,
            [
                "before an MTP depth's projection (column split): gather the sequence-split input",
                "MTP projection input again, for its weight gradient (the forward kept the sequence shard)",
                "MTP projection input gradient (conjugate of the all-gather)",
                "MTP projection input gradient (column split, Megatron's f)",
            ],
        ),
    ] {
        let bytes = width * tensor;
        let forward_window = if tp_overlap && gemm == EndWindow::ProjectionGemm {
            gemm
        } else {
            EndWindow::Nothing
        };
        if sp {
            push(EndCollective {
                end: ModelEnd::Output,
                collective: Collective::AllGather,
                pass: Pass::Forward,
                site: sites[0],
                tensor_bytes: bytes * gathers.forward,
                count,
                hidden_under: forward_window,
            });
            if regathers {
                push(EndCollective {
                    end: ModelEnd::Output,
                    collective: Collective::AllGather,
                    pass: Pass::Backward,
                    site: sites[1],
                    tensor_bytes: bytes * gathers.regather,
                    count,
                    hidden_under: window(gemm),
                });
            }
            push(EndCollective {
                end: ModelEnd::Output,
                collective: Collective::ReduceScatter,
                pass: Pass::Backward,
                site: sites[2],
                tensor_bytes: bytes,
                count,
                hidden_under: window(gemm),
            });
        } else {
            push(EndCollective {
                end: ModelEnd::Output,
                collective: Collective::AllReduce,
                pass: Pass::Backward,
                site: sites[3],
                tensor_bytes: bytes,
                count,
                hidden_under: window(gemm),
            });
        }
    }
    // The MTP projection's h/t-wide output gathered whole, then split back to sequence shards,
    // whose backward gathers the gradient.
    push(EndCollective {
        end: ModelEnd::Output,
        collective: Collective::AllGather,
        pass: Pass::Forward,
        site: "after an MTP depth's projection: gather its hidden-split output",
        tensor_bytes: tensor,
        count: depths,
        hidden_under: EndWindow::Nothing,
    });
    if sp {
        push(EndCollective {
            end: ModelEnd::Output,
            collective: Collective::AllGather,
            pass: Pass::Backward,
            site: "MTP projection output gradient (conjugate of the split by sequence)",
            tensor_bytes: tensor,
            count: depths,
            hidden_under: EndWindow::Nothing,
        });
    }
    let tokens = f64::from(plan.micro_batch) * f64::from(training.seq_len / plan.cp);
    push(EndCollective {
        end: ModelEnd::Output,
        collective: Collective::AllReduce,
        pass: Pass::Forward,
        site: "vocabulary-parallel cross-entropy: the logits' maximum, the target's logit, the sum of exponentials",
        tensor_bytes: tokens * LOSS_VALUE_BYTES,
        count: LOSS_ALL_REDUCES * (1.0 + depths),
        hidden_under: EndWindow::Nothing,
    });
}

/// One micro-batch's end collectives on a stage: the embedding's and the output layer's, each
/// with its time and what of it its GEMMs hide.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct EndsComm {
    pub embedding: PassComm,
    pub output: PassComm,
}

impl EndsComm {
    /// The ends a stage holds: the embedding on the first, the output layer on the last (both on
    /// a pipeline's only stage, and on a V schedule's first GPU).
    pub fn held(&self, ends: Ends) -> PassComm {
        let mut held = PassComm::default();
        for (holds, comm) in [
            (ends.embedding, &self.embedding),
            (ends.output, &self.output),
        ] {
            if holds {
                held.forward_s += comm.forward_s;
                held.backward_s += comm.backward_s;
                held.forward_exposed_s += comm.forward_exposed_s;
                held.backward_exposed_s += comm.backward_exposed_s;
                held.wire_bytes += comm.wire_bytes;
            }
        }
        held
    }
}

/// [`for_each_end_collective`]'s collectives priced on the TP group's `speed`: `logits_gemm_s` and `projection_gemm_s`
/// are the windows the asynchronous backward collectives hide under (each GEMM hides the
/// collectives issued before it: the re-gather under the dgrad GEMM, the input gradient's under
/// the wgrad GEMM, one each).
#[inline(always)]
pub(crate) fn ends_comm(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    tp_overlap: bool,
    speed: crate::cluster::LinkSpeed,
    logits_gemm_s: f64,
    projection_gemm_s: f64,
) -> EndsComm {
    let mut comm = EndsComm::default();
    for_each_end_collective(model, training, plan, tp_overlap, |c| {
        let one = c.collective.time(c.tensor_bytes, plan.tp, speed);
        let exposed = match c.hidden_under {
            EndWindow::Nothing => one,
            EndWindow::LogitsGemm => exposed_under(one, logits_gemm_s),
            EndWindow::ProjectionGemm => exposed_under(one, projection_gemm_s),
        };
        let side = match c.end {
            ModelEnd::Embedding => &mut comm.embedding,
            ModelEnd::Output => &mut comm.output,
        };
        match c.pass {
            Pass::Forward => {
                side.forward_s += c.count * one;
                side.forward_exposed_s += c.count * exposed;
            }
            _ => {
                side.backward_s += c.count * one;
                side.backward_exposed_s += c.count * exposed;
            }
        }
        side.wire_bytes += c.count * c.collective.wire_factor(plan.tp) * c.tensor_bytes;
    });
    comm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::plan::PlanRequest;
    use crate::specs;
    use crate::training::{AttentionKernel, TrainingFramework};

    fn plan_of(model: &Model, training: &Training, tp: u32, sp: bool) -> ParallelPlan {
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 1,
            gpus_per_node: 8,
        };
        let request = PlanRequest {
            tp,
            pp: 1,
            dp: 8 / tp,
            micro_batch: 1,
            sequence_parallel: sp,
            zero: 1,
            ..PlanRequest::default()
        };
        ParallelPlan::build(&request, model, &cluster, training).unwrap()
    }

    fn listed(model: &Model, training: &Training, plan: &ParallelPlan) -> Vec<EndCollective> {
        let mut all = Vec::new();
        for_each_end_collective(model, training, plan, false, |c| all.push(c));
        all
    }

    fn training(framework: TrainingFramework) -> Training {
        Training::with_framework(framework, 4096, 64, AttentionKernel::Flash)
    }

    #[test]
    fn megatron_core_under_sequence_parallelism_runs_the_sources_collectives() {
        let model = specs::load_model("llama3-8b").unwrap();
        let training = training(TrainingFramework::MegatronCore);
        let plan = plan_of(&model, &training, 8, true);
        let tensor = comm::tp_tensor_bytes(&model, &training, &plan);
        let got: Vec<_> = listed(&model, &training, &plan)
            .iter()
            .map(|c| (c.end, c.collective, c.pass, c.count, c.hidden_under))
            .collect();
        use Collective::*;
        use EndWindow::*;
        use ModelEnd::*;
        assert_eq!(
            got,
            [
                (Embedding, ReduceScatter, Pass::Forward, 1.0, Nothing),
                (Embedding, AllGather, Pass::Backward, 1.0, Nothing),
                (Output, AllGather, Pass::Forward, 1.0, Nothing),
                (Output, AllGather, Pass::Backward, 1.0, LogitsGemm),
                (Output, ReduceScatter, Pass::Backward, 1.0, LogitsGemm),
                (Output, AllReduce, Pass::Forward, 3.0, Nothing),
            ]
        );
        let all = listed(&model, &training, &plan);
        assert!(all[..5].iter().all(|c| c.tensor_bytes == tensor));
        // The loss's all-reduces carry one fp32 value per token: 4096 tokens.
        assert_eq!(all[5].tensor_bytes, 4096.0 * 4.0);
    }

    #[test]
    fn the_output_layers_backward_hides_under_its_gemms_only_where_it_is_asynchronous() {
        let model = specs::load_model("llama3-8b").unwrap();
        let speed = crate::cluster::LinkSpeed {
            bandwidth: crate::units::BytesPerSec(300e9),
            latency: crate::units::Seconds(5e-6),
        };
        let window = 1.0; // a GEMM far longer than any collective here
        let megatron = training(TrainingFramework::MegatronCore);
        let plan = plan_of(&model, &megatron, 8, true);
        let core = ends_comm(&model, &megatron, &plan, false, speed, window, window);
        // Forward: the gather before the output layer and the loss, exposed; backward: the
        // re-gather and the reduce-scatter under the GEMMs, exposed only by the overlap penalty.
        assert_eq!(core.output.forward_exposed_s, core.output.forward_s);
        assert!(
            (core.output.backward_exposed_s
                - crate::cost::OVERLAP_COMPUTE_PENALTY * core.output.backward_s)
                .abs()
                < 1e-15
        );
        // The embedding has no GEMM to hide under.
        assert_eq!(core.embedding.exposed_s(), core.embedding.total_s());
        assert!(core.embedding.total_s() > 0.0);
        // torchtitan keeps the gathered input (no re-gather) and redistributes the gradient in
        // eager autograd, after the GEMMs: one collective less, all of it exposed.
        let titan = training(TrainingFramework::Torchtitan);
        let plan = plan_of(&model, &titan, 8, true);
        let eager = ends_comm(&model, &titan, &plan, false, speed, window, window);
        assert_eq!(eager.output.backward_exposed_s, eager.output.backward_s);
        assert!(eager.output.backward_s < core.output.backward_s);
        // Without TP nothing.
        let plan = plan_of(&model, &megatron, 1, false);
        assert_eq!(
            ends_comm(&model, &megatron, &plan, false, speed, window, window),
            EndsComm::default()
        );
    }

    #[test]
    fn learned_positions_all_reduce_the_embedding_and_mtp_depths_repeat_the_ends() {
        let training = training(TrainingFramework::MegatronCore);
        // GPT-3's learned position table: Megatron all-reduces the lookup, then splits it.
        let gpt = crate::shape::derive_shape(20e9, 2048).unwrap();
        assert_eq!(gpt.position_embedding, PositionEmbedding::LearnedAbsolute);
        let plan = plan_of(&gpt, &training, 8, true);
        let embedding: Vec<_> = listed(&gpt, &training, &plan)
            .into_iter()
            .filter(|c| c.end == ModelEnd::Embedding)
            .map(|c| (c.collective, c.pass))
            .collect();
        assert_eq!(
            embedding,
            [
                (Collective::AllReduce, Pass::Forward),
                (Collective::AllGather, Pass::Backward)
            ]
        );
        // DeepSeek-V3 with one MTP depth (its recipes' `mtp_num_layers: 1`): its embedding, projection (2h wide) and output layer on
        // the last stage, the loss's three all-reduces twice.
        let mut deepseek = specs::load_model("deepseek-v3").unwrap();
        deepseek.mtp_layers = 1;
        let plan = plan_of(&deepseek, &training, 8, true);
        let all = listed(&deepseek, &training, &plan);
        let tensor = comm::tp_tensor_bytes(&deepseek, &training, &plan);
        let output_bytes: f64 = all
            .iter()
            .filter(|c| c.end == ModelEnd::Output && c.collective != Collective::AllReduce)
            .map(|c| c.count * c.tensor_bytes)
            .sum();
        // Embedding 2, output layer 3 × 2 (itself and the depth's), projection 3 × 2h, its
        // output gather and the split's conjugate 2: 16 tensors' worth.
        assert_eq!(output_bytes, 16.0 * tensor);
        let loss = all
            .iter()
            .find(|c| c.collective == Collective::AllReduce)
            .unwrap();
        assert_eq!(loss.count, 6.0);
    }
}
