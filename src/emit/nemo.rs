//! NeMo 1.x out: a `megatron_gpt_config.yaml` fragment with the plan's parallel sizes, precision,
//! recompute, overlap and optimizer.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{AttentionKernel, GradDtype, Training};

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
    /// Megatron-Core's layers kept in bf16 (`training::Bf16Layers`), which NeMo 1.x's
    /// `build_transformer_config` copies from the model config by name (every `TransformerConfig`
    /// field the config names): written only where the plan keeps some.
    #[serde(skip_serializing_if = "Option::is_none")]
    first_last_layers_bf16: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_layers_at_start_in_bf16: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_layers_at_end_in_bf16: Option<u32>,
    /// TP communication overlap (userbuffers) and interleaved p2p overlap.
    ub_tp_comm_overlap: bool,
    overlap_p2p_comm: bool,
    /// Written out as `not overlap_p2p_comm`, as Megatron-LM derives it: megatron_gpt_config.yaml
    /// has `batch_p2p_comm: True`, which NeMo 1.x copies into Megatron-Core's ModelParallelConfig
    /// by name, and the interleaved schedule raises "Can not use both overlap_p2p_comm and
    /// batch_p2p_comm" (schedules.py `forward_backward_pipelining_with_interleaving`).
    batch_p2p_comm: bool,
    encoder_seq_length: u32,
    max_position_embeddings: u32,
    num_layers: u32,
    hidden_size: u32,
    ffn_hidden_size: u32,
    num_attention_heads: u32,
    num_query_groups: u32,
    /// One attention head's width, written out: megatron_gpt_config.yaml has `kv_channels: null`
    /// ("Set to hidden_size // num_attention_heads if null"), which a merge would otherwise keep
    /// for a model whose heads are wider or narrower than that (Gemma-7B, Qwen3-MoE).
    kv_channels: u32,
    activation: &'static str,
    normalization: &'static str,
    bias: bool,
    /// NeMo 1.x `build_transformer_config`: `add_qkv_bias = self.cfg.get('qkv_bias', False)`
    /// (megatron_base_model.py), the query/key/value biases of a model whose other linear layers
    /// have none (Qwen2); written out, since the YAML has no such key and `bias: false` alone
    /// trains without them.
    qkv_bias: bool,
    /// Megatron-Core `TransformerConfig.qk_layernorm`, which NeMo 1.x copies from the model config
    /// by field name (megatron_base_model.py `build_transformer_config`: "then config"), default
    /// False: the norm over each query and key head (Qwen3), written out for the same reason.
    qk_layernorm: bool,
    position_embedding_type: &'static str,
    /// NeMo 1.x megatron_gpt_config.yaml `rotary_percentage` (default 1.0: "the per head dim is
    /// multiplied by this"), written for rotary models.
    #[serde(skip_serializing_if = "Option::is_none")]
    rotary_percentage: Option<f64>,
    /// NeMo 1.x's `cfg.get('rotary_base', 10000)` (megatron_gpt_model.py, passed to GPTModel),
    /// written for rotary models: the YAML has no such key, so without it Llama 3 trains at 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    rotary_base: Option<u64>,
    share_embeddings_and_output_weights: bool,
    /// Written out: the YAML's default is 0.1, which a merge would otherwise keep.
    hidden_dropout: f64,
    attention_dropout: f64,
    activations_checkpoint_granularity: Option<&'static str>,
    activations_checkpoint_method: Option<&'static str>,
    activations_checkpoint_num_layers: Option<u32>,
    /// Written out: tpsim evaluates Megatron-Core's fused weight-gradient accumulation unless told
    /// otherwise or the plan shards gradients (ZeRO-2/3, which the cost model runs unfused:
    /// `Training::wgrad_accumulation_fused`, the rule the Megatron-LM line's
    /// `--no-gradient-accumulation-fusion` follows), and NeMo 1.x's YAML defaults it to False.
    gradient_accumulation_fusion: bool,
    /// NeMo 1.x `attention_backend = AttnBackend[self.cfg.get('attention_backend', "auto")]`
    /// (megatron_base_model.py `build_transformer_config`), written as the kernel tpsim priced,
    /// as the Megatron-LM line's `--attention-backend`: without it a plan priced with the s x s
    /// scores materialised (`--attention unfused`) runs Transformer Engine's fused attention.
    attention_backend: &'static str,
    /// Written for rotary models only: NeMo 1.x reads `cfg.get('apply_rope_fusion', False)`
    /// (megatron_base_model.py `build_transformer_config`), so a fragment without it runs the
    /// rotation unfused where tpsim priced the fused kernel (`Training::rope_fusion`).
    #[serde(skip_serializing_if = "Option::is_none")]
    apply_rope_fusion: Option<bool>,
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
    let bf16_layers =
        Some(training.bf16_layers).filter(|b| !b.is_none() && plan.precision != Precision::Bf16);
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
            fp8_params: plan.precision == Precision::Fp8 && training.fp8_param_gather,
            first_last_layers_bf16: bf16_layers.map(|_| true),
            num_layers_at_start_in_bf16: bf16_layers.map(|b| b.at_start),
            num_layers_at_end_in_bf16: bf16_layers.map(|b| b.at_end),
            ub_tp_comm_overlap: training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel,
            overlap_p2p_comm: training.overlap.p2p && plan.vpp > 1,
            batch_p2p_comm: !(training.overlap.p2p && plan.vpp > 1),
            encoder_seq_length: training.seq_len,
            max_position_embeddings: training.seq_len,
            num_layers: model.layers,
            hidden_size: model.hidden,
            ffn_hidden_size: model.ffn_hidden,
            num_attention_heads: model.heads,
            num_query_groups: model.kv_heads,
            kv_channels: model.head_dim,
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
            qkv_bias: model.qkv_bias,
            qk_layernorm: model.qk_norm,
            position_embedding_type: model.position_embedding.as_str(),
            rotary_percentage: model
                .position_embedding
                .is_rotary()
                .then(|| model.rotary_percent.unwrap_or(1.0)),
            rotary_base: model.position_embedding.is_rotary().then(|| {
                model
                    .rotary_base
                    .unwrap_or(crate::model::DEFAULT_ROTARY_BASE) as u64
            }),
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
            gradient_accumulation_fusion: !super::runs_unfused_in_megatron(training, plan),
            attention_backend: match training.attention {
                AttentionKernel::Flash => "flash",
                AttentionKernel::Unfused => "unfused",
            },
            apply_rope_fusion: model
                .position_embedding
                .is_rotary()
                .then_some(training.rope_fusion),
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
        "# NeMo megatron_gpt_config.yaml fragment written by tpsim for {}, evaluated as --framework {} runs it; merge into your config.\n{}",
        // The plan in eval's words, as `--emit`'s header names it (`report::plan_words`).
        crate::report::plan_words(plan),
        training.framework.as_str(),
        yaml_serde::to_string(&config).expect("the NeMo fragment serializes to YAML")
    )
}
