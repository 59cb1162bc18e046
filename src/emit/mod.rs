//! Plans out, and Megatron-LM plans back in: the last stop of the data flow for users who launch
//! jobs. Writers for Megatron-LM arguments (`megatron/training/arguments.py` names), Megatron-Bridge
//! `ConfigContainer` overrides (`src/megatron/bridge/training/config.py`), a NeMo 1.x
//! `megatron_gpt_config.yaml` fragment and a DeepSpeed config JSON (DeepSpeed "Configuration JSON"
//! docs: `train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
//! data-parallel size`); the reader of Megatron arguments lives in [`megatron_reader`], so that a
//! written plan reads back to the same plan.

mod megatron_args;
mod megatron_reader;
mod megatron_refused;
mod pipeline_split;

pub use megatron_reader::{
    FullRecompute, MegatronArgsError, MegatronLaunch, MegatronPrecision, attention_backend,
    block_recompute_layers, check_full_recompute, check_split, megatron_overlap,
    megatron_precision, megatron_zero, read_megatron_args, vpp_from_layers_per_virtual_stage,
};
pub use pipeline_split::{MegatronSplit, SplitArgs};

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{AttentionKernel, GradDtype, Training};

/// A framework `--emit` can write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Megatron,
    MegatronBridge,
    Nemo,
    DeepSpeed,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::Megatron => "Megatron-LM",
            Framework::MegatronBridge => "Megatron-Bridge",
            Framework::Nemo => "NeMo",
            Framework::DeepSpeed => "DeepSpeed",
        }
    }

    /// Why this framework cannot run `plan` of `model` with `training` as tpsim models it, or
    /// `None` when it can.
    pub fn unsupported(
        self,
        model: &Model,
        training: &Training,
        plan: &ParallelPlan,
    ) -> Option<String> {
        let megatron_family = matches!(self, Framework::Megatron | Framework::MegatronBridge);
        let megatron_like = megatron_family || self == Framework::Nemo;
        let low_precision = plan.precision != Precision::Bf16;
        let param_gather = low_precision && training.framework.fp8_param_gather();
        let tp_overlap = training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel;
        if plan.ep > 1 || plan.etp > 1 {
            return Some(format!(
                "expert parallelism (--ep {} --etp {}) is not written for {} yet; use --ep 1 --etp 1",
                plan.ep,
                plan.etp,
                self.name()
            ));
        }
        match self {
            // Megatron-FSDP releases the gathered parameters after each module's forward and
            // gathers them again for its backward (megatron_fsdp.py `_post_forward`): FSDP2's
            // reshard_after_forward=True, always.
            _ if megatron_like && plan.zero == 3 && !plan.reshard_after_forward => Some(format!(
                "ZeRO-3 keeping the gathered parameters from forward to backward (reshard_after_forward false) has no {} setting (Megatron-FSDP reshards after every forward); use --reshard-after-forward true",
                self.name()
            )),
            // arguments.py: '--fp8-param-gather only supported with distributed optimizer, torch
            // fsdp2, megatron fsdp, or inference mode'.
            _ if megatron_like && param_gather && plan.zero == 0 => Some(format!(
                "{} FP8/FP4 training with the parameter all-gather in low precision ({} models --fp8-param-gather) needs the distributed optimizer, which ZeRO-0 lacks; use --zero 1 or more",
                self.name(),
                training.framework.as_str()
            )),
            // arguments.py: "When interleaved schedule is used and p2p communication overlap is
            // disabled, pipeline-model-parallel size should be greater than 2".
            _ if megatron_like && plan.vpp > 1 && !training.overlap.p2p && plan.pp <= 2 => Some(
                "the interleaved schedule without p2p overlap needs --pp 3 or more in Megatron-LM; use --overlap-p2p-comm or another pp".into(),
            ),
            // arguments.py: 'Must use --overlap-param-gather with --overlap-grad-reduce'.
            _ if megatron_like
                && plan.zero >= 1
                && training.overlap.param_gather
                && !training.overlap.grad_reduce =>
            {
                Some(format!(
                    "{} overlaps the parameter all-gather only together with the gradient reduction; use --overlap-grad-reduce or --overlap-param-gather false",
                    self.name()
                ))
            }
            Framework::MegatronBridge if plan.zero > 1 => Some(format!(
                "ZeRO-{} (Megatron-FSDP) is not written for {} yet (ddp.use_distributed_optimizer is ZeRO-1); use --zero 0 or 1",
                plan.zero,
                self.name()
            )),
            // NeMo 1.x: `mcore_distributed_optim` is Megatron-Core's distributed optimizer (ZeRO-1),
            // `distributed_fused_adam` Apex's DistributedFusedAdam, which shards gradients too (ZeRO-2).
            Framework::Nemo if plan.zero > 2 => Some(format!(
                "ZeRO-{} has no NeMo 1.x optimizer (mcore_distributed_optim is ZeRO-1, distributed_fused_adam ZeRO-2); use --zero 0, 1 or 2",
                plan.zero
            )),
            Framework::Nemo if !plan.stages.even => Some(
                "uneven pipeline stages are not expressible in a NeMo 1.x model config; use a pp that divides the layers".into(),
            ),
            // NeMo 1.x's megatron_gpt_config.yaml has `fp8`/`fp8_hybrid`/`fp8_params` (per-tensor
            // delayed scaling) and no MXFP8 or NVFP4 recipe.
            Framework::Nemo if matches!(plan.precision, Precision::Mxfp8 | Precision::Nvfp4) => {
                Some(format!(
                    "--precision {} has no NeMo 1.x setting (its config has per-tensor FP8 only); use --emit megatron-bridge or --emit megatron",
                    plan.precision.as_str()
                ))
            }
            _ if megatron_family => match MegatronSplit::of(model, plan) {
                MegatronSplit::Inexpressible { why } => Some(why),
                _ => None,
            },
            // DeepSpeed's sequence parallelism (Ulysses) is an all-to-all over heads, not
            // Megatron-Core's ring context parallelism that tpsim models.
            Framework::DeepSpeed if plan.cp > 1 => Some(format!(
                "--cp {}: DeepSpeed has no ring context parallelism (its Ulysses sequence parallelism is a different scheme); use --cp 1",
                plan.cp
            )),
            // The DeepSpeed config has no FP8/FP4 training key (Transformer Engine is wired in by
            // the model code, not by ds_config).
            Framework::DeepSpeed if low_precision => Some(format!(
                "--precision {} is not a DeepSpeed config setting; use --precision bf16",
                plan.precision.as_str()
            )),
            // deepspeed/runtime/pipe/engine.py asserts the ZeRO stage is below 2 with pipelines,
            // and its schedule has no interleaving.
            Framework::DeepSpeed if plan.pp > 1 && plan.zero > 1 => Some(format!(
                "ZeRO-{} cannot run with pipeline parallelism in DeepSpeed (its pipeline engine allows ZeRO-0/1); use --zero 1 or --pp 1",
                plan.zero
            )),
            Framework::DeepSpeed if plan.vpp > 1 => Some(
                "DeepSpeed's pipeline engine has no interleaved schedule; use --vpp 1".into(),
            ),
            Framework::DeepSpeed if tp_overlap => Some(format!(
                "TP communication overlap (modelled for --framework {}) does not exist in DeepSpeed / Megatron-DeepSpeed; use --framework deepspeed or --tp-comm-overlap false",
                training.framework.as_str()
            )),
            // ZeRO-1/2 gather the updated parameters after the optimizer step, not under the next
            // forward (ZeRO-3 prefetches them, stage3_prefetch_bucket_size).
            Framework::DeepSpeed
                if (plan.zero == 1 || plan.zero == 2) && training.overlap.param_gather =>
            {
                Some(format!(
                    "ZeRO-{} in DeepSpeed gathers the updated parameters after the optimizer step, not under the next forward as modelled for --framework {}; use --framework deepspeed or --overlap-param-gather false",
                    plan.zero,
                    training.framework.as_str()
                ))
            }
            _ => None,
        }
    }
}

/// Megatron-FSDP's `--data-parallel-sharding-strategy` for a ZeRO stage (arguments.py choices:
/// no_shard, optim, optim_grads, optim_grads_params).
pub fn sharding_strategy(zero: u8) -> &'static str {
    match zero {
        0 => "no_shard",
        1 => "optim",
        2 => "optim_grads",
        _ => "optim_grads_params",
    }
}

/// Megatron-LM `pretrain_gpt.py` arguments for the plan, on one line (so `$(...)` pastes it).
pub fn megatron_args(model: &Model, training: &Training, plan: &ParallelPlan) -> String {
    let mut args: Vec<String> = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        args.push(format!("--{flag}"));
        if let Some(v) = value {
            args.push(v);
        }
    };
    let n = |v: u32| Some(v.to_string());
    push("num-layers", n(model.layers));
    push("hidden-size", n(model.hidden));
    push("num-attention-heads", n(model.heads));
    if model.kv_heads != model.heads {
        push("group-query-attention", None);
        push("num-query-groups", n(model.kv_heads));
    }
    push("ffn-hidden-size", n(model.ffn_hidden));
    if model.gated_mlp {
        push("swiglu", None);
    }
    if !model.linear_bias {
        push("disable-bias-linear", None);
    }
    if !model.tied_embeddings {
        push("untie-embeddings-and-output-weights", None);
    }
    if model.norm == Norm::Rmsnorm {
        push("normalization", Some("RMSNorm".into()));
    }
    if !model.learned_position_embeddings {
        push("position-embedding-type", Some("rope".into()));
    }
    if !model.dropout {
        push("hidden-dropout", Some("0".into()));
        push("attention-dropout", Some("0".into()));
    }
    push("vocab-size", n(model.vocab));
    push("seq-length", n(training.seq_len));
    push("max-position-embeddings", n(training.seq_len));
    push("tensor-model-parallel-size", n(plan.tp));
    if plan.cp > 1 {
        push("context-parallel-size", n(plan.cp));
    }
    push("pipeline-model-parallel-size", n(plan.pp));
    match MegatronSplit::of(model, plan) {
        MegatronSplit::Even => {}
        MegatronSplit::EmbeddingAndLossCounted => {
            push("account-for-embedding-in-pipeline-split", None);
            push("account-for-loss-in-pipeline-split", None);
        }
        MegatronSplit::FirstLast { first, last } => {
            push("decoder-first-pipeline-num-layers", n(first));
            push("decoder-last-pipeline-num-layers", n(last));
        }
        // `Framework::unsupported` keeps such plans from being written (`eval --emit` refuses them,
        // `plan --emit` takes the next plan).
        MegatronSplit::Inexpressible { .. } => {}
    }
    if plan.vpp > 1 {
        push(
            "num-layers-per-virtual-pipeline-stage",
            n(MegatronSplit::layers_per_virtual_stage(model, plan)),
        );
    }
    push("micro-batch-size", n(plan.micro_batch));
    push("global-batch-size", n(plan.global_batch));
    if plan.sequence_parallel {
        push("sequence-parallel", None);
    }
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => push("recompute-granularity", Some("selective".into())),
        // Megatron-Core recompute.py: block recomputes the first N layers of each model chunk;
        // uniform with 1 recomputes every layer.
        Recompute::Full if plan.recompute_num_layers > 0 => {
            push("recompute-granularity", Some("full".into()));
            push("recompute-method", Some("block".into()));
            push("recompute-num-layers", n(plan.recompute_num_layers));
        }
        Recompute::Full => {
            push("recompute-granularity", Some("full".into()));
            push("recompute-method", Some("uniform".into()));
            push("recompute-num-layers", n(1));
        }
    }
    match plan.zero {
        0 => {}
        1 => push("use-distributed-optimizer", None),
        // Megatron-FSDP v1 (the default --megatron-fsdp-version) turns the distributed
        // optimizer on itself; v2 refuses it next to --use-megatron-fsdp, so it is not written.
        // v1 runs with pipeline parallelism (arguments.py has no pipeline check for it); v2 would
        // refuse tp, pp and cp > 1 (mcore_fsdp_adapter.py), so the version is left at 1.
        z => {
            push("use-megatron-fsdp", None);
            push(
                "data-parallel-sharding-strategy",
                Some(sharding_strategy(z).into()),
            );
            // arguments.py: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format."
            push("ckpt-format", Some("fsdp_dtensor".into()));
        }
    }
    // Megatron-Core's `--attention-backend` (AttnBackend: flash, fused, unfused, local, auto):
    // written out so that reading the line back models the same attention kernel.
    push(
        "attention-backend",
        Some(
            match training.attention {
                AttentionKernel::Flash => "flash",
                AttentionKernel::Unfused => "unfused",
            }
            .into(),
        ),
    );
    push("bf16", None);
    // With --bf16, Megatron-LM keeps fp32 main_grad buffers and reduces in fp32 unless
    // --grad-reduce-in-bf16 is given (arguments.py validate_args: `elif not
    // args.accumulate_allreduce_grads_in_fp32 and args.main_grads_dtype == torch.float32:
    // args.accumulate_allreduce_grads_in_fp32 = True`); the fp32 case is written out anyway so the
    // line says what it means.
    match training.grad_dtype {
        GradDtype::Bf16 => push("grad-reduce-in-bf16", None),
        GradDtype::Fp32 => push("accumulate-allreduce-grads-in-fp32", None),
    }
    // Transformer Engine recipes (Megatron-Core transformer_config.py `fp8`, `fp8_recipe`, `fp4`,
    // `fp4_recipe`): tpsim's fp8 is per-tensor current scaling (`tensorwise`, as Megatron-Bridge's
    // bf16_with_fp8_current_scaling_mixed), mxfp8 and nvfp4 as Megatron-Bridge's
    // bf16_with_mxfp8_mixed (format e4m3) and bf16_with_nvfp4_mixed write them.
    let (format, recipe) = megatron_precision_args(plan.precision);
    if let (Some((format_flag, format)), Some((recipe_flag, recipe))) = (format, recipe) {
        push(format_flag, Some(format.into()));
        push(recipe_flag, Some(recipe.into()));
        if training.framework.fp8_param_gather() {
            push(
                if plan.precision == Precision::Nvfp4 {
                    "fp4-param-gather"
                } else {
                    "fp8-param-gather"
                },
                None,
            );
        }
    }
    // Communication overlap (arguments.py: --overlap-grad-reduce, --overlap-param-gather and
    // --tp-comm-overlap are off unless given; p2p overlap is on unless
    // --no-overlap-p2p-communication). Megatron-LM refuses --tp-comm-overlap without sequence
    // parallelism and --overlap-param-gather without a sharded optimizer, so those are written only
    // where they apply.
    let overlap = &training.overlap;
    if overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel {
        push("tp-comm-overlap", None);
    }
    if overlap.grad_reduce {
        push("overlap-grad-reduce", None);
    }
    if overlap.param_gather && plan.zero >= 1 {
        push("overlap-param-gather", None);
    }
    if !overlap.p2p {
        push("no-overlap-p2p-communication", None);
    }
    args.join(" ")
}

/// Megatron-LM's (`--fp8-format`|`--fp4-format`, `--fp8-recipe`|`--fp4-recipe`) for a precision;
/// `None` for bf16.
#[allow(clippy::type_complexity)]
fn megatron_precision_args(
    precision: Precision,
) -> (
    Option<(&'static str, &'static str)>,
    Option<(&'static str, &'static str)>,
) {
    match precision {
        Precision::Bf16 => (None, None),
        Precision::Fp8 => (
            Some(("fp8-format", "hybrid")),
            Some(("fp8-recipe", "tensorwise")),
        ),
        Precision::Mxfp8 => (Some(("fp8-format", "e4m3")), Some(("fp8-recipe", "mxfp8"))),
        Precision::Nvfp4 => (Some(("fp4-format", "e2m1")), Some(("fp4-recipe", "nvfp4"))),
    }
}

/// The Megatron-DeepSpeed launcher arguments a DeepSpeed config needs beside it: the model-parallel
/// degrees, sequence parallelism and recompute (Megatron-DeepSpeed keeps Megatron-LM's names).
pub fn megatron_deepspeed_args(plan: &ParallelPlan) -> String {
    let mut args = format!(
        "--tensor-model-parallel-size {} --pipeline-model-parallel-size {}",
        plan.tp, plan.pp
    );
    if plan.sequence_parallel {
        args.push_str(" --sequence-parallel");
    }
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => args.push_str(" --recompute-granularity selective"),
        Recompute::Full if plan.recompute_num_layers > 0 => args.push_str(&format!(
            " --recompute-granularity full --recompute-method block --recompute-num-layers {}",
            plan.recompute_num_layers
        )),
        Recompute::Full => args.push_str(
            " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
        ),
    }
    args
}

/// Megatron-Bridge `ConfigContainer` overrides (`KEY=VALUE`, one a line) for
/// `scripts/training/run_recipe.py` on top of a recipe of the same model. Names from
/// NVIDIA-NeMo/Megatron-Bridge `src/megatron/bridge/training/config.py` (`ConfigContainer.model`,
/// `.train`, `.ddp`, `.optimizer`, `.mixed_precision`) and the Megatron-Core `TransformerConfig`
/// fields `cfg.model` carries (`scripts/translate_mlm_to_bridge.py` maps the Megatron-LM flags to
/// them).
pub fn bridge_overrides(model: &Model, training: &Training, plan: &ParallelPlan) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut set = |key: &str, value: String| lines.push(format!("{key}={value}"));
    set("model.num_layers", model.layers.to_string());
    set("model.hidden_size", model.hidden.to_string());
    set("model.ffn_hidden_size", model.ffn_hidden.to_string());
    set("model.num_attention_heads", model.heads.to_string());
    set("model.num_query_groups", model.kv_heads.to_string());
    // run_recipe.py: "The selected dataset owns the sequence length"; the runner copies it to
    // model.seq_length, which is written too so both agree.
    set("dataset.seq_length", training.seq_len.to_string());
    set("model.seq_length", training.seq_len.to_string());
    let dropout = if model.dropout { "0.1" } else { "0.0" };
    set("model.hidden_dropout", dropout.into());
    set("model.attention_dropout", dropout.into());
    set("model.tensor_model_parallel_size", plan.tp.to_string());
    set("model.context_parallel_size", plan.cp.to_string());
    set("model.pipeline_model_parallel_size", plan.pp.to_string());
    set(
        "model.virtual_pipeline_model_parallel_size",
        if plan.vpp > 1 {
            plan.vpp.to_string()
        } else {
            "null".into()
        },
    );
    let (embedding, loss, first, last) = match MegatronSplit::of(model, plan) {
        MegatronSplit::EmbeddingAndLossCounted => (true, true, None, None),
        MegatronSplit::FirstLast { first, last } => (false, false, Some(first), Some(last)),
        MegatronSplit::Even | MegatronSplit::Inexpressible { .. } => (false, false, None, None),
    };
    set(
        "model.account_for_embedding_in_pipeline_split",
        embedding.to_string(),
    );
    set("model.account_for_loss_in_pipeline_split", loss.to_string());
    let or_null = |v: Option<u32>| v.map_or("null".to_string(), |v| v.to_string());
    set("model.num_layers_in_first_pipeline_stage", or_null(first));
    set("model.num_layers_in_last_pipeline_stage", or_null(last));
    set(
        "model.sequence_parallel",
        plan.sequence_parallel.to_string(),
    );
    let (granularity, method, layers) = match plan.recompute {
        Recompute::None => ("null", "null", "null"),
        Recompute::Selective => ("selective", "null", "null"),
        Recompute::Full if plan.recompute_num_layers > 0 => ("full", "block", ""),
        Recompute::Full => ("full", "uniform", "1"),
    };
    set("model.recompute_granularity", granularity.into());
    set("model.recompute_method", method.into());
    set(
        "model.recompute_num_layers",
        if method == "block" {
            plan.recompute_num_layers.to_string()
        } else {
            layers.into()
        },
    );
    set("train.global_batch_size", plan.global_batch.to_string());
    set("train.micro_batch_size", plan.micro_batch.to_string());
    // config.py `_validate_and_sync_distributed_optimizer_settings` turns both on when either is
    // on, so ZeRO-0 must switch both off.
    let distributed = (plan.zero == 1).to_string();
    set("ddp.use_distributed_optimizer", distributed.clone());
    set("optimizer.use_distributed_optimizer", distributed);
    // `MixedPrecisionConfig.setup` copies its own grad_reduce_in_fp32 onto the DDP config, so the
    // mixed-precision value must say the same (perf_recipes/_common.py sets both).
    let fp32_grads = (training.grad_dtype == GradDtype::Fp32).to_string();
    set("mixed_precision.grad_reduce_in_fp32", fp32_grads.clone());
    set("ddp.grad_reduce_in_fp32", fp32_grads);
    // MixedPrecisionConfig fields (src/megatron/bridge/training/mixed_precision.py), written one by
    // one rather than as a recipe name: bf16_with_fp8_current_scaling_mixed also keeps the first and
    // last layer in bf16 (`first_last_layers_bf16=True`), which tpsim does not model.
    let (format, recipe) = megatron_precision_args(plan.precision);
    let or_null = |v: Option<(&str, &str)>| v.map_or("null".to_string(), |(_, v)| v.to_string());
    let fp4 = plan.precision == Precision::Nvfp4;
    let gather = plan.precision != Precision::Bf16 && training.framework.fp8_param_gather();
    set(
        "mixed_precision.fp8",
        if fp4 { "null".into() } else { or_null(format) },
    );
    if !fp4 && let Some((_, r)) = recipe {
        set("mixed_precision.fp8_recipe", r.into());
    }
    set(
        "mixed_precision.fp8_param_gather",
        (gather && !fp4).to_string(),
    );
    set("mixed_precision.first_last_layers_bf16", "false".into());
    set(
        "mixed_precision.fp4",
        if fp4 { or_null(format) } else { "null".into() },
    );
    if fp4 && let Some((_, r)) = recipe {
        set("mixed_precision.fp4_recipe", r.into());
    }
    set(
        "mixed_precision.fp4_param_gather",
        (gather && fp4).to_string(),
    );
    // Overlap: Megatron-Core's DistributedDataParallelConfig for the data-parallel side, Bridge's
    // CommOverlapConfig (comm_overlap.py) for TP and p2p, which it only turns on where Megatron-Core
    // allows (tp > 1 with sequence parallelism, interleaved pipelines).
    let overlap = &training.overlap;
    let tp_overlap = overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel;
    set("comm_overlap.tp_comm_overlap", tp_overlap.to_string());
    set("comm_overlap.overlap_p2p_comm", overlap.p2p.to_string());
    set("ddp.overlap_grad_reduce", overlap.grad_reduce.to_string());
    set(
        "ddp.overlap_param_gather",
        (overlap.param_gather && plan.zero >= 1).to_string(),
    );
    lines.join("\n")
}

#[derive(Serialize)]
struct NemoConfig {
    trainer: NemoTrainer,
    model: NemoModel,
}

#[derive(Serialize)]
struct NemoTrainer {
    num_nodes: u32,
    devices: u32,
    precision: &'static str,
}

#[derive(Serialize)]
struct NemoModel {
    micro_batch_size: u32,
    global_batch_size: u32,
    tensor_model_parallel_size: u32,
    context_parallel_size: u32,
    pipeline_model_parallel_size: u32,
    virtual_pipeline_model_parallel_size: Option<u32>,
    sequence_parallel: bool,
    /// Transformer Engine FP8 (NeMo 1.x megatron_gpt_config.yaml: `fp8`, `fp8_hybrid` for e4m3
    /// forward / e5m2 backward, `fp8_params` for FP8 weights gathered as the parameters).
    fp8: bool,
    fp8_hybrid: bool,
    fp8_params: bool,
    /// TP communication overlap (userbuffers) and interleaved p2p overlap.
    ub_tp_comm_overlap: bool,
    overlap_p2p_comm: bool,
    encoder_seq_length: u32,
    max_position_embeddings: u32,
    num_layers: u32,
    hidden_size: u32,
    ffn_hidden_size: u32,
    num_attention_heads: u32,
    num_query_groups: u32,
    activation: &'static str,
    normalization: &'static str,
    bias: bool,
    position_embedding_type: &'static str,
    share_embeddings_and_output_weights: bool,
    /// Written out: the YAML's default is 0.1, which a merge would otherwise keep.
    hidden_dropout: f64,
    attention_dropout: f64,
    activations_checkpoint_granularity: Option<&'static str>,
    activations_checkpoint_method: Option<&'static str>,
    activations_checkpoint_num_layers: Option<u32>,
    optim: NemoOptim,
}

#[derive(Serialize)]
struct NemoOptim {
    name: &'static str,
    /// NeMo 1.x `megatron_gpt_model.py` `setup_mcore_distributed_parallel`:
    /// `grad_reduce_in_fp32=(self.cfg.optim.get('grad_sync_dtype', 'fp32') == 'fp32')`.
    grad_sync_dtype: &'static str,
    /// The distributed optimizers' gradient reduce-scatter during backward and parameter
    /// all-gather under the next forward.
    overlap_grad_sync: bool,
    overlap_param_sync: bool,
}

/// NeMo 1.x trainer/model YAML fragment, to merge into `megatron_gpt_config.yaml`.
pub fn nemo_yaml(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> String {
    let dropout = if model.dropout { 0.1 } else { 0.0 };
    let config = NemoConfig {
        trainer: NemoTrainer {
            num_nodes: cluster.nodes,
            devices: cluster.gpus_per_node,
            precision: "bf16-mixed",
        },
        model: NemoModel {
            micro_batch_size: plan.micro_batch,
            global_batch_size: plan.global_batch,
            tensor_model_parallel_size: plan.tp,
            context_parallel_size: plan.cp,
            pipeline_model_parallel_size: plan.pp,
            virtual_pipeline_model_parallel_size: (plan.vpp > 1).then_some(plan.vpp),
            sequence_parallel: plan.sequence_parallel,
            fp8: plan.precision == Precision::Fp8,
            fp8_hybrid: plan.precision == Precision::Fp8,
            fp8_params: plan.precision == Precision::Fp8 && training.framework.fp8_param_gather(),
            ub_tp_comm_overlap: training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel,
            overlap_p2p_comm: training.overlap.p2p && plan.vpp > 1,
            encoder_seq_length: training.seq_len,
            max_position_embeddings: training.seq_len,
            num_layers: model.layers,
            hidden_size: model.hidden,
            ffn_hidden_size: model.ffn_hidden,
            num_attention_heads: model.heads,
            num_query_groups: model.kv_heads,
            activation: if model.gated_mlp {
                "fast-swiglu"
            } else {
                "gelu"
            },
            normalization: match model.norm {
                Norm::Layernorm => "layernorm",
                Norm::Rmsnorm => "rmsnorm",
            },
            bias: model.linear_bias,
            position_embedding_type: if model.learned_position_embeddings {
                "learned_absolute"
            } else {
                "rope"
            },
            share_embeddings_and_output_weights: model.tied_embeddings,
            hidden_dropout: dropout,
            attention_dropout: dropout,
            activations_checkpoint_granularity: match plan.recompute {
                Recompute::None => None,
                Recompute::Selective => Some("selective"),
                Recompute::Full => Some("full"),
            },
            activations_checkpoint_method: match plan.recompute {
                Recompute::Full if plan.recompute_num_layers > 0 => Some("block"),
                Recompute::Full => Some("uniform"),
                _ => None,
            },
            activations_checkpoint_num_layers: (plan.recompute == Recompute::Full)
                .then_some(plan.recompute_num_layers.max(1)),
            optim: NemoOptim {
                name: match plan.zero {
                    0 => "fused_adam",
                    1 => "mcore_distributed_optim",
                    _ => "distributed_fused_adam",
                },
                grad_sync_dtype: match training.grad_dtype {
                    GradDtype::Fp32 => "fp32",
                    GradDtype::Bf16 => "bf16",
                },
                overlap_grad_sync: training.overlap.grad_reduce,
                overlap_param_sync: training.overlap.param_gather && plan.zero >= 1,
            },
        },
    };
    format!(
        "# NeMo megatron_gpt_config.yaml fragment written by tpsim for a plan evaluated as --framework {} runs it; merge into your config.\n{}",
        training.framework.as_str(),
        yaml_serde::to_string(&config).expect("the NeMo fragment serializes to YAML")
    )
}

#[derive(Serialize)]
struct DeepSpeedConfig {
    train_batch_size: u32,
    train_micro_batch_size_per_gpu: u32,
    gradient_accumulation_steps: u32,
    bf16: Enabled,
    data_types: DataTypes,
    zero_optimization: ZeroOptimization,
}

/// DeepSpeed's `data_types.grad_accum_dtype` (fp32, fp16 or bf16): the gradient precision.
#[derive(Serialize)]
struct DataTypes {
    grad_accum_dtype: &'static str,
}

#[derive(Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Serialize)]
struct ZeroOptimization {
    stage: u8,
    /// DeepSpeed "overlap_comm": reduce gradients during backward.
    overlap_comm: bool,
}

/// DeepSpeed config JSON. DeepSpeed checks `train_batch_size = micro × accumulation × dp`; tp and
/// pp are Megatron-DeepSpeed launcher arguments, not config keys.
pub fn deepspeed_json(training: &Training, plan: &ParallelPlan) -> String {
    let config = DeepSpeedConfig {
        train_batch_size: plan.global_batch,
        train_micro_batch_size_per_gpu: plan.micro_batch,
        gradient_accumulation_steps: plan.num_microbatches,
        bf16: Enabled { enabled: true },
        data_types: DataTypes {
            grad_accum_dtype: match training.grad_dtype {
                GradDtype::Fp32 => "fp32",
                GradDtype::Bf16 => "bf16",
            },
        },
        zero_optimization: ZeroOptimization {
            stage: plan.zero,
            overlap_comm: training.overlap.grad_reduce,
        },
    };
    serde_json::to_string_pretty(&config).expect("the DeepSpeed config serializes to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, Recompute};
    use crate::specs;
    use crate::training::GradDtype;

    fn scenario() -> (Model, Cluster, Training) {
        let model = specs::load_model("llama3-70b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training = Training {
            seq_len: model.seq_len,
            global_batch: 512,
            grad_dtype: GradDtype::Bf16,
            tokens: None,
            attention: crate::training::AttentionKernel::Flash,
            framework: crate::training::TrainingFramework::MegatronLm2021,
            overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
            moe_imbalance: 1.0,
        };
        (model, cluster, training)
    }

    #[test]
    fn megatron_args_read_back_to_the_same_plan_and_model() {
        let (model, cluster, training) = scenario();
        for request in [
            PlanRequest {
                tp: 8,
                pp: 4,
                dp: 4,
                vpp: 5,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Selective,
                zero: 1,
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            },
            PlanRequest {
                tp: 4,
                pp: 8,
                dp: 4,
                vpp: 1,
                micro_batch: 2,
                sequence_parallel: false,
                recompute: Recompute::Full,
                zero: 0,
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            },
            // Context parallelism, FP8 and block recompute of 3 of each chunk's 10 layers.
            PlanRequest {
                tp: 4,
                cp: 2,
                pp: 4,
                dp: 4,
                vpp: 2,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Full,
                recompute_num_layers: 3,
                zero: 1,
                precision: crate::plan::Precision::Fp8,
                ..PlanRequest::default()
            },
        ] {
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let text = megatron_args(&model, &training, &plan);
            let launch = read_megatron_args(&text).unwrap();
            assert!(launch.ignored.is_empty(), "{:?}", launch.ignored);
            let mut back_model = launch.model(0).unwrap();
            back_model.name = model.name.clone();
            assert_eq!(back_model, model, "{text}");
            let back = launch
                .request(cluster.total_gpus(), training.global_batch)
                .unwrap();
            assert_eq!(back, request, "{text}");
            assert_eq!(launch.global_batch, Some(training.global_batch));
        }
    }

    #[test]
    fn megatron_precision_arguments_map_to_tpsim_precisions() {
        use crate::plan::Precision;
        let read = |fp8: Option<&str>, recipe: Option<&str>, fp4: Option<&str>, gather: bool| {
            megatron_precision(fp8, recipe, fp4, None, gather, false, 1, &mut Vec::new())
        };
        for (format, recipe, want) in [
            ("hybrid", None, Precision::Fp8),
            ("hybrid", Some("tensorwise"), Precision::Fp8),
            ("e4m3", Some("delayed"), Precision::Fp8),
            ("e4m3", Some("mxfp8"), Precision::Mxfp8),
        ] {
            assert_eq!(
                read(Some(format), recipe, None, true).unwrap(),
                MegatronPrecision {
                    precision: want,
                    param_gather: true
                }
            );
        }
        assert_eq!(
            read(None, None, Some("e2m1"), false).unwrap().precision,
            Precision::Nvfp4
        );
        assert_eq!(
            read(None, None, None, false).unwrap().precision,
            Precision::Bf16
        );
        let err = read(Some("hybrid"), Some("blockwise"), None, false).unwrap_err();
        assert!(err.to_string().contains("--fp8-recipe blockwise"), "{err}");
        let err = read(Some("hybrid"), None, Some("e2m1"), false).unwrap_err();
        assert!(err.to_string().contains("contradict"), "{err}");
        let err = megatron_precision(
            Some("hybrid"),
            None,
            None,
            None,
            true,
            false,
            0,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("--use-distributed-optimizer"),
            "{err}"
        );
    }

    #[test]
    fn reader_skips_what_it_does_not_model() {
        let launch = read_megatron_args(
            "torchrun pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \\\n --seq-length 2048 --global-batch-size 256 --lr 3e-4 --data-path /data/x --use-flash-attn",
        )
        .unwrap();
        assert_eq!((launch.layers, launch.tp, launch.pp), (24, 1, 1));
        assert!(launch.ignored.contains(&"--lr".to_string()));
        // --use-flash-attn changes the attention activations: modelled, not skipped.
        assert!(!launch.ignored.contains(&"--use-flash-attn".to_string()));
        assert_eq!(launch.attention, Some(AttentionKernel::Flash));
        let commented = read_megatron_args(
            "# --num-layers 2\n--num-layers 24 --hidden-size 2048 --num-attention-heads 16 # --tensor-model-parallel-size 4\n--seq-length 2048 --global-batch-size 256",
        )
        .unwrap();
        assert_eq!((commented.layers, commented.tp), (24, 1));
        let err = read_megatron_args("--num-layers $NLAYERS")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"$NLAYERS\"") && err.contains("expand shell variables"),
            "{err}"
        );
    }

    #[test]
    fn virtual_stage_layers_are_validated() {
        assert_eq!(vpp_from_layers_per_virtual_stage(80, 4, 5), Ok(4));
        let err = vpp_from_layers_per_virtual_stage(80, 4, 3).unwrap_err();
        assert!(err.contains("valid: 1, 2, 4, 5, 10, 20"), "{err}");
    }

    #[test]
    fn deepspeed_batch_identity_holds() {
        // DeepSpeed: train_batch_size = micro × accumulation × dp.
        let (model, cluster, training) = scenario();
        let request = PlanRequest {
            tp: 8,
            pp: 2,
            dp: 8,
            vpp: 1,
            micro_batch: 2,
            sequence_parallel: true,
            recompute: Recompute::None,
            zero: 1,
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&deepspeed_json(&training, &plan)).unwrap();
        let get = |k: &str| json[k].as_u64().unwrap();
        assert_eq!(
            get("train_batch_size"),
            get("train_micro_batch_size_per_gpu") * get("gradient_accumulation_steps") * 8
        );
        assert_eq!(json["zero_optimization"]["stage"], 1);
    }

    #[test]
    fn uneven_middle_stages_are_not_written_as_first_last() {
        // 80 layers on pp 9: tpsim's split of 82 units is 8, 10, 9 x 6, 8 (the remainder on one
        // middle stage), which --decoder-first/last-pipeline-num-layers cannot say
        // (Megatron-Core splits the middle layers evenly); 80 on pp 6 (12, 14 x 4, 12) it can.
        let (model, _, training) = scenario();
        let build = |pp: u32| {
            let cluster = Cluster {
                gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
                nodes: pp,
                gpus_per_node: 8,
            };
            let request = PlanRequest {
                tp: 8,
                pp,
                dp: 1,
                vpp: 1,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Selective,
                zero: 1,
                allow_uneven_pp: true,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            };
            ParallelPlan::build(&request, &model, &cluster, &training).unwrap()
        };
        let nine = build(9);
        let why = Framework::Megatron
            .unsupported(&model, &training, &nine)
            .unwrap();
        assert!(
            why.contains("--decoder-first/last-pipeline-num-layers"),
            "{why}"
        );
        assert!(
            Framework::MegatronBridge
                .unsupported(&model, &training, &nine)
                .is_some()
        );
        let six = build(6);
        assert_eq!(
            Framework::Megatron.unsupported(&model, &training, &six),
            None
        );
        assert_eq!(
            MegatronSplit::of(&model, &six),
            MegatronSplit::FirstLast {
                first: 12,
                last: 12
            }
        );
        let line = megatron_args(&model, &training, &six);
        assert!(
            line.contains(
                "--decoder-first-pipeline-num-layers 12 --decoder-last-pipeline-num-layers 12"
            ),
            "{line}"
        );
    }
}
