//! What a torchtitan recipe cannot carry as tpsim priced the plan: the model blocks torchtitan's
//! Llama 3 and MoE modules do not build, the precisions, gradient dtypes and optimizers it does not
//! run, and the plan shapes it does not lay out, each refused in one line naming the torchtitan
//! file at [`TORCHTITAN_COMMIT`] (`emit::torchtitan` writes the recipe of a plan that passes).

use super::torchtitan::{TORCHTITAN_COMMIT, async_tp, chunk_layers, token_divisor};
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{
    AttentionKernel, CpExchange, GradDtype, KernelFusion, OptimizerStates, Training,
    TrainingFramework,
};

/// What of `model` torchtitan's Llama 3 block (RMSNorm, SwiGLU, RoPE over the whole head, no
/// biases, no dropout: `_build_llama3_layers`, torchtitan/models/llama3/__init__.py) does not
/// build, or None. Experts, latent attention, MTP and windows are refused before this
/// (`Framework::unsupported`).
fn non_llama_part(model: &Model) -> Option<String> {
    let part = if model.norm != Norm::Rmsnorm {
        "LayerNorm (torchtitan's Llama 3 uses RMSNorm)".to_string()
    } else if !model.gated_mlp {
        "a two-matrix MLP (torchtitan's Llama 3 uses SwiGLU)".to_string()
    } else if model.linear_bias || model.qkv_bias {
        "biases on its linear layers (torchtitan's Llama 3 has none)".to_string()
    } else if model.qk_norm {
        "query/key norms (torchtitan's Llama 3 has none)".to_string()
    } else if model.shared_layer_norm {
        "one norm shared by attention and MLP (torchtitan's Llama 3 has one each)".to_string()
    } else if model.position_embedding != PositionEmbedding::Rope {
        format!(
            "{} positions (torchtitan's Llama 3 uses RoPE)",
            model.position_embedding.as_str()
        )
    } else if model.rotary_percent.is_some_and(|share| share != 1.0) {
        "RoPE over part of each head (torchtitan's Llama 3 rotates the whole head)".to_string()
    } else if model.heads == 0 || model.head_dim != model.hidden / model.heads {
        format!(
            "a head width of {} apart from hidden / heads (torchtitan's Llama 3 takes dim / n_heads)",
            model.head_dim
        )
    } else if model.dropout {
        "dropout (torchtitan's Llama 3 has none)".to_string()
    } else {
        return None;
    };
    Some(format!(
        "{} has {part}, and tpsim writes torchtitan recipes for its Llama 3 model only (torchtitan/models/llama3 at {TORCHTITAN_COMMIT}); use --emit megatron with --framework megatron-core, or run without --emit",
        model.name
    ))
}

/// What of `model` no torchtitan model the recipe writes builds, or None: its MoE flavors
/// (`torchtitan_moe::model_unsupported`) or its Llama 3 block ([`non_llama_part`]).
pub(super) fn model_unsupported(model: &Model) -> Option<String> {
    if model.moe.is_some() {
        super::torchtitan_moe::model_unsupported(model)
    } else {
        non_llama_part(model)
    }
}

/// Why the recipe cannot run `plan` as tpsim evaluated it, or None. Called by
/// `Framework::unsupported` after the framework match and the model refusals all emitters share.
pub(super) fn unsupported(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> Option<String> {
    if let Some(why) = run_unsupported(model, training, plan.precision) {
        return Some(why);
    }
    plan_unsupported(model, training, plan)
}

/// Why no plan of this model, training and precision can be written, whatever its degrees:
/// `plan --emit torchtitan` says it before the search, as an input error.
pub(super) fn run_unsupported(
    model: &Model,
    training: &Training,
    precision: Precision,
) -> Option<String> {
    if let Some(why) = model_unsupported(model) {
        return Some(why);
    }
    // A capacity factor drops tokens in every plan; torchtitan's dispatchers are dropless.
    if model.moe.is_some()
        && let Some(why) = super::torchtitan_moe::capacity_factor_unsupported(training)
    {
        return Some(why);
    }
    // Settings only the accuracy runner gives, for torchtitan releases before this one.
    if training.pipeline_keeps_outputs || training.fsdp_syncs_once_per_step {
        return Some(format!(
            "this plan was evaluated for an earlier torchtitan (pipeline_keeps_outputs {}, fsdp_syncs_once_per_step {}), which a recipe for {TORCHTITAN_COMMIT} cannot reproduce; evaluate it with --framework torchtitan from the command line",
            training.pipeline_keeps_outputs, training.fsdp_syncs_once_per_step
        ));
    }
    // torchao's float8 in torchtitan: `Float8LinearConverter.Config.recipe_name: Literal["rowwise",
    // "rowwise_with_gw_hp"]` (torchtitan/components/quantization/float8.py since 6348d93d1,
    // #3127); tpsim's fp8 under torchtitan is per-tensor current scaling (torchao tensorwise).
    match precision {
        Precision::Fp8 => {
            return Some(format!(
                "--precision fp8 is per-tensor (tensorwise) scaling in tpsim, which torchtitan no longer offers: its Float8LinearConverter takes recipe_name rowwise or rowwise_with_gw_hp only (torchtitan/components/quantization/float8.py at {TORCHTITAN_COMMIT}), which tpsim does not price; use --precision mxfp8 (MXFP8LinearConverter, Blackwell) or bf16, or --framework megatron-core with --emit megatron"
            ));
        }
        Precision::Nvfp4 => {
            return Some(
                "--precision nvfp4 is priced as Transformer Engine's NVFP4 recipe, not torchao's NVFP4LinearConverter that torchtitan runs; use --precision mxfp8 or bf16, or --framework megatron-core with --emit megatron".into(),
            );
        }
        Precision::Bf16 | Precision::Mxfp8 => {}
    }
    if precision != Precision::Bf16 && training.fp8_param_gather {
        return Some(
            "the low-precision parameter all-gather (fp8_param_gather) has no torchtitan setting (FSDP2 gathers the bf16 cast of the fp32 parameters); evaluate without it".into(),
        );
    }
    if !training.bf16_layers.is_none() || !training.module_precision.is_none() {
        return Some(
            "layers or modules kept in bf16 inside a low-precision model (--first-last-layers-bf16) are Megatron-Core's; this recipe converts every transformer layer's linears; drop --first-last-layers-bf16".into(),
        );
    }
    // `mixed_precision_reduce: Literal["float32"]` (configs.py `TrainingConfig`).
    if training.grad_dtype != GradDtype::Fp32 {
        return Some(format!(
            "--grad-dtype {} has no torchtitan setting: FSDP2 reduces gradients in float32 only (TrainingConfig.mixed_precision_reduce: Literal[\"float32\"]); use --grad-dtype fp32",
            training.grad_dtype.as_str()
        ));
    }
    // The model is built in `training.dtype = "float32"` and FSDP2 casts the gathered copy to
    // `mixed_precision_param = "bfloat16"`: fp32 parameters are the optimizer's.
    if training.optimizer_states != OptimizerStates::Fp32Params {
        return Some(format!(
            "--optimizer-states {} is not how this recipe keeps its states (torchtitan builds the model in training.dtype float32 and FSDP2 gathers bf16 casts: fp32-params); use --optimizer-states fp32-params",
            training.optimizer_states.as_str()
        ));
    }
    // `get_attention_config` (torchtitan/models/common/config_utils.py) has flex, flex_flash and
    // varlen for language models, all fused kernels.
    if training.attention != AttentionKernel::Flash {
        return Some(format!(
            "--attention {} has no torchtitan backend (language models run FlexAttention or varlen flash attention); use --attention flash",
            training.attention.as_str()
        ));
    }
    if training.loss != TrainingFramework::Torchtitan.default_loss_kernel(training.kernel_fusion) {
        return Some(
            "the plan's loss kernel is not torchtitan's for its compile setting (the recipe's CrossEntropyLoss is compiled with the model, eager without); evaluate it with --framework torchtitan from the command line".into(),
        );
    }
    None
}

/// Why this plan's degrees, batch, recompute or overlap cannot be written (`unsupported` after
/// `run_unsupported`).
fn plan_unsupported(model: &Model, training: &Training, plan: &ParallelPlan) -> Option<String> {
    if let Some(why) = super::torchtitan_moe::plan_unsupported(model, training, plan) {
        return Some(why);
    }
    if plan.cp > 1 && training.cp_exchange != CpExchange::TorchAllGather {
        return Some(format!(
            "--cp {} with --cp-exchange {}: torchtitan's context parallelism is PyTorch's context_parallel (context_parallel_degree); use --cp-exchange torch-all-gather",
            plan.cp,
            training.cp_exchange.as_str()
        ));
    }
    match plan.recompute {
        // `FullAC` wraps every transformer block (torchtitan/distributed/activation_checkpoint.py).
        Recompute::Full if plan.recompute_num_layers > 0 => {
            return Some(format!(
                "--recompute-num-layers {}: torchtitan's FullAC recomputes every transformer block, not some of each chunk's; drop --recompute-num-layers",
                plan.recompute_num_layers
            ));
        }
        Recompute::Selective if training.recompute_modules.is_some() => {
            return Some(
                "--recompute-modules is Megatron-Core's; torchtitan's selective recompute is SelectiveAC's per-op policy; drop --recompute-modules".into(),
            );
        }
        _ => {}
    }
    // `ParallelismConfig`: data_parallel_replicate_degree (ZeRO-0) or data_parallel_shard_degree
    // (FSDP2, ZeRO-3); no stage in between.
    if !matches!(plan.zero, 0 | 3) {
        return Some(format!(
            "--zero {} has no torchtitan setting (it replicates, data_parallel_replicate_degree, or shards everything with FSDP2, data_parallel_shard_degree); use --zero 0 or --zero 3",
            plan.zero
        ));
    }
    if plan.zero == 3 && plan.dp > 1 && plan.dp_replicas == plan.dp && plan.cp == 1 {
        return Some(format!(
            "--zero 3 with --dp-replicas {} on --dp {} shards over one rank per copy, which torchtitan runs as replication (data_parallel_shard_degree 1 leaves FSDP2 nothing to shard over); use --zero 0, or fewer --dp-replicas",
            plan.dp_replicas, plan.dp
        ));
    }
    // `CompileConfig.__post_init__`: "Async TP requires 'model' in --compile.components and
    // --compile.enable".
    if async_tp(training, plan) && training.kernel_fusion != KernelFusion::Fused {
        return Some(format!(
            "--tp-comm-overlap true on --tp {} is torchtitan's async TP, which needs torch.compile (CompileConfig: \"Async TP requires 'model' in --compile.components and --compile.enable\"); add --torch-compile true, or --tp-comm-overlap false",
            plan.tp
        ));
    }
    // FSDP2 always prefetches its all-gathers and reduce-scatters in the backward; PyTorch's
    // pipelining has no p2p overlap setting.
    let dp_ranks = plan.dp * plan.cp;
    if dp_ranks > 1 && !training.overlap.grad_reduce {
        return Some(
            "--overlap-grad-reduce false has no torchtitan setting (FSDP2 reduces gradients during the backward); use --overlap-grad-reduce true".into(),
        );
    }
    if plan.zero == 3 && dp_ranks > 1 && !training.overlap.param_gather {
        return Some(
            "--overlap-param-gather false has no torchtitan setting (FSDP2 prefetches the next all-gather); use --overlap-param-gather true".into(),
        );
    }
    if plan.pp > 1 && training.overlap.p2p {
        return Some(
            "--overlap-p2p-comm true has no torchtitan setting (PyTorch's pipelining schedules, which tpsim prices without p2p overlap); use --overlap-p2p-comm false".into(),
        );
    }
    // trainer.py: "The number of tokens per pipeline microbatch (...) must be divisible by
    // {seq_len_divisor}", tp under sequence parallelism times 2·cp under context parallelism.
    let divisor = token_divisor(plan);
    if !(u64::from(plan.micro_batch) * u64::from(training.seq_len)).is_multiple_of(divisor) {
        return Some(format!(
            "--micro-batch {} x --seq-len {} tokens is not a multiple of {divisor}, which torchtitan's trainer requires of the tokens per micro-batch (tp under sequence parallelism x 2 cp); give a --seq-len that is",
            plan.micro_batch, training.seq_len
        ));
    }
    if plan.pp > 1 && chunk_layers(model, plan).is_none() {
        return Some(format!(
            "the uneven split of {} layers over --pp {} x --vpp {} model chunks is not one tpsim can list as torchtitan's module_fqns_per_model_part; use a pp x vpp that divides the layers",
            model.layers, plan.pp, plan.vpp
        ));
    }
    None
}
