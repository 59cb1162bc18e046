//! Plans out, and Megatron-LM plans back in: the last stop of the data flow for users who launch
//! jobs. Writers for Megatron-LM arguments (`megatron/training/arguments.py` names), a NeMo
//! `megatron_gpt_config.yaml` fragment (NeMo 1.x `examples/nlp/language_modeling/conf` keys) and a
//! DeepSpeed config JSON (DeepSpeed "Configuration JSON" docs: `train_batch_size =
//! train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size`); a reader
//! for the Megatron arguments, so that a written plan reads back to the same plan.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, PlanRequest, Recompute};
use crate::training::{AttentionKernel, GradDtype, Training};

/// A framework `--emit` can write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Megatron,
    Nemo,
    DeepSpeed,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::Megatron => "Megatron-LM",
            Framework::Nemo => "NeMo",
            Framework::DeepSpeed => "DeepSpeed",
        }
    }

    /// Why this framework cannot run `plan` as tpsim models it, or `None` when it can.
    pub fn unsupported(self, plan: &ParallelPlan) -> Option<String> {
        match self {
            // Megatron-LM's distributed optimizer shards the optimizer states over dp (ZeRO-1);
            // it has no ZeRO-2/3 stage in the sense of Rajbhandari et al. 2020.
            Framework::Megatron | Framework::Nemo if plan.zero > 1 => Some(format!(
                "ZeRO-{} has no {} equivalent (--use-distributed-optimizer is ZeRO-1); use --zero 0 or 1",
                plan.zero,
                self.name()
            )),
            Framework::Nemo if !plan.stages.even => Some(
                "uneven pipeline stages are not expressible in a NeMo 1.x model config; use a pp that divides the layers".into(),
            ),
            // deepspeed/runtime/pipe/engine.py asserts the ZeRO stage is below 2 with pipelines,
            // and its schedule has no interleaving.
            Framework::DeepSpeed if plan.pp > 1 && plan.zero > 1 => Some(format!(
                "ZeRO-{} cannot run with pipeline parallelism in DeepSpeed (its pipeline engine allows ZeRO-0/1); use --zero 1 or --pp 1",
                plan.zero
            )),
            Framework::DeepSpeed if plan.vpp > 1 => Some(
                "DeepSpeed's pipeline engine has no interleaved schedule; use --vpp 1".into(),
            ),
            _ => None,
        }
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
    push("pipeline-model-parallel-size", n(plan.pp));
    if plan.vpp > 1 {
        push(
            "num-layers-per-virtual-pipeline-stage",
            n(model.layers / plan.pp / plan.vpp),
        );
    }
    if !plan.stages.even {
        push("decoder-first-pipeline-num-layers", n(plan.stages.first));
        push("decoder-last-pipeline-num-layers", n(plan.stages.last));
    }
    push("micro-batch-size", n(plan.micro_batch));
    push("global-batch-size", n(plan.global_batch));
    if plan.sequence_parallel {
        push("sequence-parallel", None);
    }
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => push("recompute-granularity", Some("selective".into())),
        Recompute::Full => {
            push("recompute-granularity", Some("full".into()));
            push("recompute-method", Some("uniform".into()));
            push("recompute-num-layers", n(1));
        }
    }
    if plan.zero == 1 {
        push("use-distributed-optimizer", None);
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
    // Megatron-LM's fp32 main_grad buffer (arguments.py `--accumulate-allreduce-grads-in-fp32`).
    if training.grad_dtype == GradDtype::Fp32 {
        push("accumulate-allreduce-grads-in-fp32", None);
    }
    args.join(" ")
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
    pipeline_model_parallel_size: u32,
    virtual_pipeline_model_parallel_size: Option<u32>,
    sequence_parallel: bool,
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
    activations_checkpoint_granularity: Option<&'static str>,
    activations_checkpoint_method: Option<&'static str>,
    activations_checkpoint_num_layers: Option<u32>,
    optim: NemoOptim,
}

#[derive(Serialize)]
struct NemoOptim {
    name: &'static str,
}

/// NeMo 1.x trainer/model YAML fragment, to merge into `megatron_gpt_config.yaml`.
pub fn nemo_yaml(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> String {
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
            pipeline_model_parallel_size: plan.pp,
            virtual_pipeline_model_parallel_size: (plan.vpp > 1).then_some(plan.vpp),
            sequence_parallel: plan.sequence_parallel,
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
            activations_checkpoint_granularity: match plan.recompute {
                Recompute::None => None,
                Recompute::Selective => Some("selective"),
                Recompute::Full => Some("full"),
            },
            activations_checkpoint_method: (plan.recompute == Recompute::Full).then_some("uniform"),
            activations_checkpoint_num_layers: (plan.recompute == Recompute::Full).then_some(1),
            optim: NemoOptim {
                name: if plan.zero == 1 {
                    "distributed_fused_adam"
                } else {
                    "fused_adam"
                },
            },
        },
    };
    format!(
        "# NeMo megatron_gpt_config.yaml fragment written by tpsim; merge into your config.\n{}",
        yaml_serde::to_string(&config).expect("the NeMo fragment serializes to YAML")
    )
}

#[derive(Serialize)]
struct DeepSpeedConfig {
    train_batch_size: u32,
    train_micro_batch_size_per_gpu: u32,
    gradient_accumulation_steps: u32,
    bf16: Enabled,
    zero_optimization: ZeroOptimization,
}

#[derive(Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Serialize)]
struct ZeroOptimization {
    stage: u8,
}

/// DeepSpeed config JSON. DeepSpeed checks `train_batch_size = micro × accumulation × dp`; tp and
/// pp are Megatron-DeepSpeed launcher arguments, not config keys.
pub fn deepspeed_json(plan: &ParallelPlan) -> String {
    let config = DeepSpeedConfig {
        train_batch_size: plan.global_batch,
        train_micro_batch_size_per_gpu: plan.micro_batch,
        gradient_accumulation_steps: plan.num_microbatches,
        bf16: Enabled { enabled: true },
        zero_optimization: ZeroOptimization { stage: plan.zero },
    };
    serde_json::to_string_pretty(&config).expect("the DeepSpeed config serializes to JSON")
}

/// What a Megatron-LM argument list says about the model, the batch and the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct MegatronLaunch {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: Option<u32>,
    pub ffn_hidden: Option<u32>,
    pub vocab: Option<u32>,
    pub seq_len: u32,
    pub global_batch: u32,
    pub gated_mlp: bool,
    pub linear_bias: bool,
    pub tied_embeddings: bool,
    pub learned_position_embeddings: bool,
    pub norm: Norm,
    /// Megatron's --hidden-dropout (default 0.1) is non-zero.
    pub dropout: bool,
    pub tp: u32,
    pub pp: u32,
    pub layers_per_virtual_stage: Option<u32>,
    pub uneven_pp: bool,
    pub micro_batch: u32,
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    pub distributed_optimizer: bool,
    /// `--num-virtual-stages-per-pipeline-rank N`: tpsim's vpp directly.
    pub virtual_stages: Option<u32>,
    /// `--accumulate-allreduce-grads-in-fp32`: fp32 gradients (`None` when the line is silent).
    pub grad_dtype: Option<GradDtype>,
    /// `--attention-backend` / `--use-flash-attn` (`None` when the line is silent).
    pub attention: Option<AttentionKernel>,
    /// Arguments the reader does not model (learning rate, data paths, ...), in order.
    pub ignored: Vec<String>,
    /// What the reader did with arguments that Megatron-LM itself ignores (for stderr).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MegatronArgsError {
    #[error("Megatron argument --{flag} needs a value (e.g. --{flag} {example})")]
    MissingValue { flag: String, example: &'static str },
    #[error(
        "Megatron argument --{flag} {value:?} is not a positive integer; expand shell variables first (e.g. --{flag} 8)"
    )]
    NotANumber { flag: String, value: String },
    #[error("Megatron argument --{flag} {value:?} is not one of: {valid}")]
    BadChoice {
        flag: String,
        value: String,
        valid: &'static str,
    },
    #[error(
        "Megatron arguments lack --{flag}; a launch line always has it (e.g. --{flag} {example})"
    )]
    Required {
        flag: &'static str,
        example: &'static str,
    },
    /// An argument that changes memory or time in a way tpsim does not model.
    #[error("Megatron argument {given}: {why}")]
    NotModelled { given: String, why: String },
    /// Two arguments that say opposite things.
    #[error("Megatron arguments {first} and {second} contradict each other; {fix}")]
    Contradiction {
        first: String,
        second: String,
        fix: &'static str,
    },
}

/// Reads Megatron-LM arguments (whitespace-separated, `\` line continuations allowed). Flags that
/// do not change memory or time are collected in `ignored`.
pub fn read_megatron_args(text: &str) -> Result<MegatronLaunch, MegatronArgsError> {
    // Shell comments (`# ...` to the end of a line) are not arguments.
    let tokens: Vec<&str> = text
        .lines()
        .flat_map(|line| line.split_whitespace().take_while(|t| !t.starts_with('#')))
        .filter(|t| *t != "\\")
        .collect();
    let mut values: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    let mut switches: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut ignored = Vec::new();
    const VALUED: &[&str] = &[
        "num-layers",
        "hidden-size",
        "num-attention-heads",
        "num-query-groups",
        "ffn-hidden-size",
        "vocab-size",
        "seq-length",
        "max-position-embeddings",
        "tensor-model-parallel-size",
        "pipeline-model-parallel-size",
        "num-layers-per-virtual-pipeline-stage",
        "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers",
        "micro-batch-size",
        "global-batch-size",
        "recompute-granularity",
        "recompute-method",
        "recompute-num-layers",
        "normalization",
        "position-embedding-type",
        "hidden-dropout",
        "attention-dropout",
        "num-virtual-stages-per-pipeline-rank",
        "attention-backend",
        "context-parallel-size",
        "expert-model-parallel-size",
        "num-experts",
    ];
    const SWITCHES: &[&str] = &[
        "group-query-attention",
        "swiglu",
        "disable-bias-linear",
        "untie-embeddings-and-output-weights",
        "sequence-parallel",
        "use-distributed-optimizer",
        "bf16",
        "fp16",
        "fp32",
        "recompute-activations",
        "accumulate-allreduce-grads-in-fp32",
        "use-flash-attn",
    ];
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        let Some(flag) = token.strip_prefix("--") else {
            ignored.push(token.to_string());
            i += 1;
            continue;
        };
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (flag, None),
        };
        if VALUED.contains(&flag) {
            let value = match inline {
                Some(v) => v,
                None => match tokens.get(i + 1) {
                    Some(v) if !v.starts_with("--") => {
                        i += 1;
                        v
                    }
                    _ => {
                        return Err(MegatronArgsError::MissingValue {
                            flag: flag.to_string(),
                            example: "8",
                        });
                    }
                },
            };
            values.insert(flag, value);
        } else if SWITCHES.contains(&flag) {
            switches.insert(flag);
        } else {
            ignored.push(token.to_string());
            // An unknown flag's value (if any) is not a flag: skip it with the flag.
            if let (None, Some(v)) = (inline, tokens.get(i + 1))
                && !v.starts_with("--")
            {
                ignored.push(v.to_string());
                i += 1;
            }
        }
        i += 1;
    }
    let number = |flag: &str| -> Result<Option<u32>, MegatronArgsError> {
        match values.get(flag) {
            None => Ok(None),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(MegatronArgsError::NotANumber {
                    flag: flag.to_string(),
                    value: v.to_string(),
                }),
            },
        }
    };
    let required = |flag: &'static str, example: &'static str| {
        number(flag)?.ok_or(MegatronArgsError::Required { flag, example })
    };
    // Precision: tpsim models bf16/fp16 mixed precision (2-byte weights and activations, fp32
    // master weights and Adam states), not pure fp32 training.
    if switches.contains("fp32") {
        return Err(MegatronArgsError::NotModelled {
            given: "--fp32".into(),
            why: "tpsim models bf16/fp16 mixed precision only; use --bf16 (or --fp16)".into(),
        });
    }
    // Context and expert parallelism change both the memory and the traffic; tpsim's plans are
    // tp x pp x dp of a dense model.
    for flag in ["context-parallel-size", "expert-model-parallel-size"] {
        if let Some(n) = number(flag)?
            && n > 1
        {
            return Err(MegatronArgsError::NotModelled {
                given: format!("--{flag} {n}"),
                why: format!(
                    "context/expert parallelism is not modelled yet; tpsim plans tp x pp x dp of a dense model (drop it, or use --{flag} 1)"
                ),
            });
        }
    }
    if let Some(n) = number("num-experts")? {
        return Err(MegatronArgsError::NotModelled {
            given: format!("--num-experts {n}"),
            why: "context/expert parallelism (mixture-of-experts layers) is not modelled yet; tpsim models dense models only (drop --num-experts)".into(),
        });
    }
    let mut notes = Vec::new();
    // Megatron-LM trains in fp32 unless --bf16 or --fp16 is given (arguments.py params_dtype).
    if !switches.contains("bf16") && !switches.contains("fp16") {
        notes.push(
            "the arguments have neither --bf16 nor --fp16, so Megatron-LM would train in fp32; tpsim evaluates bf16 mixed precision (add --bf16 to the launch)".to_string(),
        );
    }
    // Megatron-LM arguments.py: `if args.recompute_activations: args.recompute_granularity =
    // 'selective'` (the older shorthand for selective recompute).
    let recompute = match (
        values.get("recompute-granularity"),
        switches.contains("recompute-activations"),
    ) {
        (None, false) => Recompute::None,
        (None, true) | (Some(&"selective"), _) => Recompute::Selective,
        (Some(&"full"), false) => Recompute::Full,
        (Some(&"full"), true) => {
            return Err(MegatronArgsError::Contradiction {
                first: "--recompute-activations".into(),
                second: "--recompute-granularity full".into(),
                fix: "--recompute-activations means selective recompute (Megatron-LM overrides full with it); keep one of them",
            });
        }
        (Some(v), _) => {
            return Err(MegatronArgsError::BadChoice {
                flag: "recompute-granularity".into(),
                value: v.to_string(),
                valid: "full, selective",
            });
        }
    };
    // `--attention-backend` (see `attention_backend`); `--use-flash-attn` is Megatron-LM's older
    // switch for FlashAttention.
    let backend = match values.get("attention-backend") {
        None => None,
        Some(v) if attention_backend(v).is_some() => attention_backend(v),
        Some(v) => {
            return Err(MegatronArgsError::BadChoice {
                flag: "attention-backend".into(),
                value: v.to_string(),
                valid: "flash, fused, auto, unfused, local",
            });
        }
    };
    let attention = match (backend, switches.contains("use-flash-attn")) {
        (Some(AttentionKernel::Unfused), true) => {
            return Err(MegatronArgsError::Contradiction {
                first: "--use-flash-attn".into(),
                second: format!(
                    "--attention-backend {}",
                    values.get("attention-backend").copied().unwrap_or_default()
                ),
                fix: "keep --attention-backend flash, or drop --use-flash-attn for unfused attention",
            });
        }
        (Some(kernel), _) => Some(kernel),
        (None, true) => Some(AttentionKernel::Flash),
        (None, false) => None,
    };
    if values.contains_key("num-layers-per-virtual-pipeline-stage")
        && values.contains_key("num-virtual-stages-per-pipeline-rank")
    {
        // Megatron-LM arguments.py asserts that only one of the two is set.
        return Err(MegatronArgsError::Contradiction {
            first: "--num-layers-per-virtual-pipeline-stage".into(),
            second: "--num-virtual-stages-per-pipeline-rank".into(),
            fix: "Megatron-LM accepts only one of them; keep one",
        });
    }
    // Megatron-LM reads --num-query-groups only with --group-query-attention, whose default is 1
    // group (arguments.py `--num-query-groups` default=1; `core_transformer_config_from_args`
    // passes num_query_groups only when group_query_attention is set).
    let group_query_attention = switches.contains("group-query-attention");
    let kv_heads = match number("num-query-groups")? {
        Some(n) if !group_query_attention => {
            notes.push(format!(
                "--num-query-groups {n} is ignored without --group-query-attention (Megatron-LM ignores it too), so every head has its own key/value; add --group-query-attention for grouped-query attention"
            ));
            None
        }
        Some(n) => Some(n),
        None if group_query_attention => Some(1),
        None => None,
    };
    let norm = match values.get("normalization") {
        None | Some(&"LayerNorm") => Norm::Layernorm,
        Some(&"RMSNorm") => Norm::Rmsnorm,
        Some(v) => {
            return Err(MegatronArgsError::BadChoice {
                flag: "normalization".into(),
                value: v.to_string(),
                valid: "LayerNorm, RMSNorm",
            });
        }
    };
    Ok(MegatronLaunch {
        layers: required("num-layers", "96")?,
        hidden: required("hidden-size", "12288")?,
        heads: required("num-attention-heads", "96")?,
        kv_heads,
        ffn_hidden: number("ffn-hidden-size")?,
        vocab: number("vocab-size")?,
        seq_len: required("seq-length", "2048")?,
        global_batch: required("global-batch-size", "1536")?,
        gated_mlp: switches.contains("swiglu"),
        linear_bias: !switches.contains("disable-bias-linear"),
        tied_embeddings: !switches.contains("untie-embeddings-and-output-weights"),
        learned_position_embeddings: values
            .get("position-embedding-type")
            .is_none_or(|v| *v == "learned_absolute"),
        norm,
        dropout: ["hidden-dropout", "attention-dropout"].iter().all(|flag| {
            values
                .get(flag)
                .is_none_or(|v| v.parse::<f64>().map_or(true, |p| p > 0.0))
        }),
        tp: number("tensor-model-parallel-size")?.unwrap_or(1),
        pp: number("pipeline-model-parallel-size")?.unwrap_or(1),
        layers_per_virtual_stage: number("num-layers-per-virtual-pipeline-stage")?,
        uneven_pp: values.contains_key("decoder-first-pipeline-num-layers")
            || values.contains_key("decoder-last-pipeline-num-layers"),
        micro_batch: number("micro-batch-size")?.unwrap_or(1),
        sequence_parallel: switches.contains("sequence-parallel"),
        recompute,
        distributed_optimizer: switches.contains("use-distributed-optimizer"),
        virtual_stages: number("num-virtual-stages-per-pipeline-rank")?,
        grad_dtype: switches
            .contains("accumulate-allreduce-grads-in-fp32")
            .then_some(GradDtype::Fp32),
        attention,
        ignored,
        notes,
    })
}

/// Megatron-Core's `--attention-backend` (AttnBackend enum: flash, fused, unfused, local, auto) as
/// tpsim's kernel: flash and fused (cuDNN) never store the s x s scores and auto picks one of them;
/// unfused and local are the core attention that does. `None` for any other value.
pub fn attention_backend(value: &str) -> Option<AttentionKernel> {
    match value {
        "flash" | "fused" | "auto" => Some(AttentionKernel::Flash),
        "unfused" | "local" => Some(AttentionKernel::Unfused),
        _ => None,
    }
}

/// Megatron's `--num-layers-per-virtual-pipeline-stage N` as tpsim's vpp: layers / pp / N
/// (Megatron-LM `arguments.py` computes `virtual_pipeline_model_parallel_size` the same way).
pub fn vpp_from_layers_per_virtual_stage(
    layers: u32,
    pp: u32,
    per_virtual_stage: u32,
) -> Result<u32, String> {
    let per_stage = if pp > 0 && layers.is_multiple_of(pp) {
        layers / pp
    } else {
        return Err(format!(
            "--num-layers-per-virtual-pipeline-stage needs an even split, but --pp {pp} does not divide {layers} layers"
        ));
    };
    if per_virtual_stage == 0 || per_stage % per_virtual_stage != 0 {
        let valid: Vec<String> = crate::plan::divisors(per_stage)
            .iter()
            .map(u32::to_string)
            .collect();
        return Err(format!(
            "--num-layers-per-virtual-pipeline-stage {per_virtual_stage} does not divide the {per_stage} layers of each of the {pp} stages; valid: {}",
            valid.join(", ")
        ));
    }
    Ok(per_stage / per_virtual_stage)
}

impl MegatronLaunch {
    /// Megatron-LM arguments.py when `--ffn-hidden-size` is absent: 4h, or with `--swiglu`
    /// `int((4 * h * 2 / 3) / 64) * 64` (two-thirds of 4h for the gated pair, kept a multiple of
    /// 64). floor(8h/3/64) = floor(h/24), exactly, in integers.
    pub fn default_ffn_hidden(&self) -> u32 {
        crate::model::default_ffn_hidden(self.hidden, self.gated_mlp)
    }

    /// The model the arguments describe (Megatron's defaults: ffn 4h (swiglu: 8h/3 rounded down to
    /// 64), biases, tied, learned positions, LayerNorm; vocabulary from `--vocab-size` or
    /// `default_vocab`).
    pub fn model(&self, default_vocab: u32) -> Result<Model, crate::model::ModelError> {
        let model = Model {
            name: format!("megatron-l{}-h{}", self.layers, self.hidden),
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads.unwrap_or(self.heads),
            ffn_hidden: self.ffn_hidden.unwrap_or_else(|| self.default_ffn_hidden()),
            vocab: self.vocab.unwrap_or(default_vocab),
            seq_len: self.seq_len,
            gated_mlp: self.gated_mlp,
            linear_bias: self.linear_bias,
            tied_embeddings: self.tied_embeddings,
            learned_position_embeddings: self.learned_position_embeddings,
            norm: self.norm,
            dropout: self.dropout,
        };
        model.check()?;
        Ok(model)
    }

    /// The plan request on `gpus` GPUs: dp is what tp × pp leaves, as in Megatron.
    pub fn request(&self, gpus: u32) -> Result<PlanRequest, String> {
        let tp_pp = self.tp * self.pp;
        if !gpus.is_multiple_of(tp_pp) {
            return Err(format!(
                "--tensor-model-parallel-size {} x --pipeline-model-parallel-size {} = {tp_pp} does not divide the {gpus} GPUs; change --nodes or the degrees",
                self.tp, self.pp
            ));
        }
        let vpp = match (self.layers_per_virtual_stage, self.virtual_stages) {
            (Some(n), _) => vpp_from_layers_per_virtual_stage(self.layers, self.pp, n)?,
            (None, Some(v)) => v,
            (None, None) => 1,
        };
        Ok(PlanRequest {
            tp: self.tp,
            pp: self.pp,
            dp: gpus / tp_pp,
            vpp,
            micro_batch: self.micro_batch,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            zero: u8::from(self.distributed_optimizer),
            allow_uneven_pp: self.uneven_pp,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        ] {
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let text = megatron_args(&model, &training, &plan);
            let launch = read_megatron_args(&text).unwrap();
            assert!(launch.ignored.is_empty(), "{:?}", launch.ignored);
            let mut back_model = launch.model(0).unwrap();
            back_model.name = model.name.clone();
            assert_eq!(back_model, model, "{text}");
            let back = launch.request(cluster.total_gpus()).unwrap();
            assert_eq!(back, request, "{text}");
            assert_eq!(launch.global_batch, training.global_batch);
        }
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
        let json: serde_json::Value = serde_json::from_str(&deepspeed_json(&plan)).unwrap();
        let get = |k: &str| json[k].as_u64().unwrap();
        assert_eq!(
            get("train_batch_size"),
            get("train_micro_batch_size_per_gpu") * get("gradient_accumulation_steps") * 8
        );
        assert_eq!(json["zero_optimization"]["stage"], 1);
    }
}
