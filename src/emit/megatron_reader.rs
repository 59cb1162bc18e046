//! Megatron-LM launch lines in: what a `pretrain_gpt.py` argument list (and the `torchrun` line
//! around it) says about the model, the batch, the cluster and the plan. Megatron's defaults and
//! refusals are followed (Megatron-LM `megatron/training/arguments.py` `validate_args`,
//! Megatron-Core `transformer_config.py`); an argument that changes memory or time in a way tpsim
//! does not model is refused by name, never skipped.

use std::collections::{HashMap, HashSet};

use super::pipeline_split::SplitArgs;
use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, PlanRequest, Recompute};
use crate::training::{AttentionKernel, GradDtype};

/// How `--recompute-granularity full` checkpoints the layers (`--recompute-method` with
/// `--recompute-num-layers`; the 2021 `--activations-checkpoint-method` with
/// `--activations-checkpoint-num-layers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullRecompute {
    /// `uniform N`: the input of every N-layer chunk is kept. N = 1 is tpsim's full recompute.
    Uniform(u32),
    /// `block N`: the first N layers of each model chunk are recomputed, the rest keep their
    /// activations (Megatron-Core `recompute.py`).
    Block(u32),
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
    /// `--global-batch-size`; Megatron's default when absent is micro-batch x dp
    /// (arguments.py: `args.global_batch_size = args.micro_batch_size * args.data_parallel_size`).
    pub global_batch: Option<u32>,
    /// `--swiglu`: gated, and the default ffn is 8h/3 rounded down to 64.
    pub swiglu: bool,
    /// `--quick-geglu`: gated too (argument_utils.py sets gated_linear_unit), default ffn 4h.
    pub quick_geglu: bool,
    pub linear_bias: bool,
    pub tied_embeddings: bool,
    pub learned_position_embeddings: bool,
    pub norm: Norm,
    /// Megatron's --hidden-dropout (default 0.1) is non-zero.
    pub dropout: bool,
    pub tp: u32,
    pub pp: u32,
    pub layers_per_virtual_stage: Option<u32>,
    /// `--num-virtual-stages-per-pipeline-rank N`: tpsim's vpp directly.
    pub virtual_stages: Option<u32>,
    /// `--decoder-first/last-pipeline-num-layers`, `--account-for-*-in-pipeline-split`.
    pub split: SplitArgs,
    pub micro_batch: u32,
    /// Sequence parallelism as Megatron runs it (off with TP 1, whatever the line says).
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    /// How full recompute checkpoints, when the line says (`None` for selective or none).
    pub full_recompute: Option<FullRecompute>,
    /// ZeRO stage: 1 for `--use-distributed-optimizer`, 2/3 for Megatron-FSDP or torch FSDP2.
    pub zero: u8,
    /// `--microbatch-group-size-per-virtual-pipeline-stage`.
    pub microbatch_group: Option<u32>,
    /// The gradient precision Megatron-LM keeps and reduces in.
    pub grad_dtype: GradDtype,
    /// `--attention-backend` / `--use-flash-attn` (`None` when the line is silent).
    pub attention: Option<AttentionKernel>,
    /// torchrun's `--nnodes` and `--nproc_per_node` (`None` when absent or not a number).
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    /// Arguments the reader does not model (learning rate, data paths, ...), in order.
    pub ignored: Vec<String>,
    /// What the reader did with arguments that Megatron-LM itself ignores or overrides (stderr).
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
    /// A line Megatron-LM itself refuses.
    #[error("Megatron arguments {given}: {why}")]
    Refused { given: String, why: String },
}

/// Arguments that take a value.
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
    "activations-checkpoint-method",
    "activations-checkpoint-num-layers",
    "checkpoint-num-layers",
    "normalization",
    "position-embedding-type",
    "hidden-dropout",
    "attention-dropout",
    "num-virtual-stages-per-pipeline-rank",
    "microbatch-group-size-per-virtual-pipeline-stage",
    "attention-backend",
    "context-parallel-size",
    "expert-model-parallel-size",
    "expert-tensor-parallel-size",
    "num-experts",
    "kv-channels",
    "main-grads-dtype",
    "main-params-dtype",
    "exp-avg-dtype",
    "exp-avg-sq-dtype",
    "data-parallel-sharding-strategy",
    "fp8-format",
    "fp4-format",
    "cpu-offloading-num-layers",
    "pipeline-model-parallel-layout",
    "mtp-num-layers",
    "hybrid-layer-pattern",
    "hybrid-override-pattern",
    "optimizer",
    "encoder-num-layers",
    "decoder-num-layers",
];

/// Switches (no value).
const SWITCHES: &[&str] = &[
    "group-query-attention",
    "swiglu",
    "quick-geglu",
    "disable-bias-linear",
    "untie-embeddings-and-output-weights",
    "sequence-parallel",
    "use-distributed-optimizer",
    "use-megatron-fsdp",
    "use-torch-fsdp2",
    "bf16",
    "fp16",
    "fp32",
    "grad-reduce-in-bf16",
    "accumulate-allreduce-grads-in-fp32",
    "recompute-activations",
    "checkpoint-activations",
    "account-for-embedding-in-pipeline-split",
    "account-for-loss-in-pipeline-split",
    "use-flash-attn",
    "multi-latent-attention",
    "tp-comm-overlap",
    "cpu-offloading",
    "distribute-saved-activations",
    "distribute-checkpointed-activations",
];

/// torchrun's arguments for the cluster (torchrun accepts `_` and `-` spellings).
const LAUNCHER: &[&str] = &["nnodes", "nproc_per_node", "nproc-per-node"];

/// Switches that change memory or time in ways tpsim does not model yet, and why.
const REFUSED_SWITCHES: &[(&str, &str)] = &[
    (
        "multi-latent-attention",
        "multi-latent attention (compressed key/value projections) changes the attention weights and activations; tpsim models multi-head and grouped-query attention only",
    ),
    (
        "tp-comm-overlap",
        "overlapping tensor-parallel communication with GEMMs is not modelled yet; tpsim exposes all TP traffic (drop it to evaluate the line without overlap)",
    ),
    (
        "cpu-offloading",
        "offloading activations or weights to CPU memory is not modelled yet",
    ),
    (
        "distribute-saved-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
    (
        "distribute-checkpointed-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
];

/// Valued arguments that tpsim does not model yet whatever their value, and why.
const REFUSED_VALUED: &[(&str, &str)] = &[
    (
        "fp8-format",
        "FP8 training is not modelled yet; tpsim models bf16 mixed precision (drop --fp8-format)",
    ),
    (
        "fp4-format",
        "FP4 training is not modelled yet; tpsim models bf16 mixed precision",
    ),
    (
        "cpu-offloading-num-layers",
        "offloading activations or weights to CPU memory is not modelled yet",
    ),
    (
        "pipeline-model-parallel-layout",
        "an explicit pipeline layout is not modelled yet; tpsim splits the layers evenly, or with --decoder-first/last-pipeline-num-layers or --account-for-*-in-pipeline-split",
    ),
    (
        "mtp-num-layers",
        "multi-token prediction layers are not modelled yet",
    ),
    (
        "hybrid-layer-pattern",
        "hybrid (Mamba) layer patterns are not modelled; tpsim models transformer layers",
    ),
    (
        "hybrid-override-pattern",
        "hybrid (Mamba) layer patterns are not modelled; tpsim models transformer layers",
    ),
    (
        "encoder-num-layers",
        "encoder-decoder models are not modelled; tpsim models decoder-only transformers",
    ),
    (
        "decoder-num-layers",
        "encoder-decoder models are not modelled; tpsim models decoder-only transformers (use --num-layers)",
    ),
];

/// The tokens of a launch line, sorted by kind.
struct Parsed<'a> {
    values: HashMap<&'a str, &'a str>,
    switches: HashSet<&'a str>,
    /// `--recompute-modules a b c` (nargs='*').
    recompute_modules: Option<Vec<&'a str>>,
    launcher: HashMap<&'a str, &'a str>,
    ignored: Vec<String>,
}

impl<'a> Parsed<'a> {
    /// Whitespace-separated tokens, `\` line continuations and `# ...` comments dropped,
    /// `--flag=value` and `--flag value` both read.
    fn tokenize(text: &'a str) -> Result<Parsed<'a>, MegatronArgsError> {
        let tokens: Vec<&str> = text
            .lines()
            .flat_map(|line| line.split_whitespace().take_while(|t| !t.starts_with('#')))
            .filter(|t| *t != "\\")
            .collect();
        let mut parsed = Parsed {
            values: HashMap::new(),
            switches: HashSet::new(),
            recompute_modules: None,
            launcher: HashMap::new(),
            ignored: Vec::new(),
        };
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i];
            i += 1;
            let Some(flag) = token.strip_prefix("--") else {
                parsed.ignored.push(token.to_string());
                continue;
            };
            let (flag, inline) = match flag.split_once('=') {
                Some((f, v)) => (f, Some(v)),
                None => (flag, None),
            };
            let next_value = |i: &mut usize| match inline {
                Some(v) => Some(v),
                None => match tokens.get(*i) {
                    Some(v) if !v.starts_with("--") => {
                        *i += 1;
                        Some(*v)
                    }
                    _ => None,
                },
            };
            if VALUED.contains(&flag) {
                let value = next_value(&mut i).ok_or_else(|| MegatronArgsError::MissingValue {
                    flag: flag.to_string(),
                    example: "8",
                })?;
                parsed.values.insert(flag, value);
            } else if SWITCHES.contains(&flag) {
                parsed.switches.insert(flag);
            } else if LAUNCHER.contains(&flag) {
                if let Some(v) = next_value(&mut i) {
                    parsed.launcher.insert(flag, v);
                }
            } else if flag == "recompute-modules" {
                let mut modules: Vec<&str> = inline.into_iter().collect();
                while let Some(v) = tokens.get(i).filter(|v| !v.starts_with("--")) {
                    modules.push(v);
                    i += 1;
                }
                parsed.recompute_modules = Some(modules);
            } else {
                parsed.ignored.push(token.to_string());
                // An unknown flag's value (if any) is not a flag: skip it with the flag.
                if let (None, Some(v)) = (inline, tokens.get(i))
                    && !v.starts_with("--")
                {
                    parsed.ignored.push(v.to_string());
                    i += 1;
                }
            }
        }
        Ok(parsed)
    }

    fn switch(&self, flag: &str) -> bool {
        self.switches.contains(flag)
    }

    fn value(&self, flag: &str) -> Option<&'a str> {
        self.values.get(flag).copied()
    }

    fn number(&self, flag: &str) -> Result<Option<u32>, MegatronArgsError> {
        match self.value(flag) {
            None => Ok(None),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(MegatronArgsError::NotANumber {
                    flag: flag.to_string(),
                    value: v.to_string(),
                }),
            },
        }
    }

    fn required(
        &self,
        flag: &'static str,
        example: &'static str,
    ) -> Result<u32, MegatronArgsError> {
        self.number(flag)?
            .ok_or(MegatronArgsError::Required { flag, example })
    }

    /// Item by item, the arguments tpsim cannot model: refused by name.
    fn refuse_unmodelled(&self, hidden: u32, heads: u32) -> Result<(), MegatronArgsError> {
        let not_modelled = |given: String, why: &str| MegatronArgsError::NotModelled {
            given,
            why: why.to_string(),
        };
        if self.switch("fp32") {
            return Err(not_modelled(
                "--fp32".into(),
                "tpsim models bf16/fp16 mixed precision only; use --bf16 (or --fp16)",
            ));
        }
        for (flag, why) in REFUSED_SWITCHES {
            if self.switch(flag) {
                return Err(not_modelled(format!("--{flag}"), why));
            }
        }
        for (flag, why) in REFUSED_VALUED {
            if let Some(v) = self.value(flag) {
                return Err(not_modelled(format!("--{flag} {v}"), why));
            }
        }
        // Context and expert parallelism change both the memory and the traffic; tpsim's plans
        // are tp x pp x dp of a dense model.
        for flag in [
            "context-parallel-size",
            "expert-model-parallel-size",
            "expert-tensor-parallel-size",
        ] {
            if let Some(n) = self.number(flag)?
                && n > 1
            {
                return Err(not_modelled(
                    format!("--{flag} {n}"),
                    &format!(
                        "context/expert parallelism is not modelled yet; tpsim plans tp x pp x dp of a dense model (drop it, or use --{flag} 1)"
                    ),
                ));
            }
        }
        if let Some(n) = self.number("num-experts")? {
            return Err(not_modelled(
                format!("--num-experts {n}"),
                "context/expert parallelism (mixture-of-experts layers) is not modelled yet; tpsim models dense models only (drop --num-experts)",
            ));
        }
        // arguments.py: `args.kv_channels = args.hidden_size // args.num_attention_heads` when
        // absent; any other head size changes the attention weights.
        if let Some(n) = self.number("kv-channels")?
            && n != hidden / heads.max(1)
        {
            return Err(not_modelled(
                format!("--kv-channels {n}"),
                &format!(
                    "a head size other than hidden / heads = {} is not modelled yet (drop it, or use --kv-channels {})",
                    hidden / heads.max(1),
                    hidden / heads.max(1)
                ),
            ));
        }
        if let Some(v) = self.value("optimizer")
            && v != "adam"
        {
            return Err(not_modelled(
                format!("--optimizer {v}"),
                "tpsim models Adam's optimizer states (12 bytes per parameter, Rajbhandari et al. 2020 §3.1); use --optimizer adam",
            ));
        }
        for flag in ["main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype"] {
            if let Some(v) = self.value(flag)
                && v != "fp32"
            {
                return Err(not_modelled(
                    format!("--{flag} {v}"),
                    "optimizer states in less than fp32 are not modelled yet; tpsim keeps fp32 master weights and Adam moments (use fp32)",
                ));
            }
        }
        // Megatron-Core's default recompute_modules is ["core_attn"], tpsim's selective recompute.
        if let Some(modules) = &self.recompute_modules
            && modules.as_slice() != ["core_attn"]
        {
            return Err(not_modelled(
                format!("--recompute-modules {}", modules.join(" ")),
                "selective recompute of modules other than core_attn is not modelled yet; tpsim's selective recompute is the attention core (use --recompute-modules core_attn, or drop it)",
            ));
        }
        Ok(())
    }

    /// The gradient precision as Megatron-LM sets it (arguments.py `validate_args`): with `--bf16`,
    /// `accumulate_allreduce_grads_in_fp32` becomes true unless `--grad-reduce-in-bf16` (or
    /// `--main-grads-dtype bf16`) is given; with `--fp16` it stays as given (default false: fp16
    /// gradients); without either, Megatron trains in fp32.
    fn grad_dtype(&self, notes: &mut Vec<String>) -> Result<GradDtype, MegatronArgsError> {
        let accumulate = self.switch("accumulate-allreduce-grads-in-fp32");
        let main_grads = self.value("main-grads-dtype");
        if let Some(v) = main_grads
            && v != "fp32"
            && v != "bf16"
        {
            return Err(MegatronArgsError::BadChoice {
                flag: "main-grads-dtype".into(),
                value: v.to_string(),
                valid: "fp32, bf16",
            });
        }
        let bf16_requested = self.switch("grad-reduce-in-bf16") || main_grads == Some("bf16");
        if accumulate && bf16_requested {
            return Err(MegatronArgsError::Contradiction {
                first: "--accumulate-allreduce-grads-in-fp32".into(),
                second: if self.switch("grad-reduce-in-bf16") {
                    "--grad-reduce-in-bf16".into()
                } else {
                    "--main-grads-dtype bf16".into()
                },
                fix: "keep --accumulate-allreduce-grads-in-fp32 for fp32 gradients or --grad-reduce-in-bf16 for bf16 ones",
            });
        }
        if !self.switch("bf16") && !self.switch("fp16") {
            notes.push(
                "the arguments have neither --bf16 nor --fp16, so Megatron-LM would train in fp32; tpsim evaluates bf16 mixed precision with fp32 gradients (add --bf16 to the launch)".to_string(),
            );
            return Ok(GradDtype::Fp32);
        }
        if self.switch("fp16") {
            if accumulate {
                return Ok(GradDtype::Fp32);
            }
            notes.push(
                "--fp16 without --accumulate-allreduce-grads-in-fp32 keeps 2-byte fp16 gradients, evaluated as tpsim's 2-byte (bf16) gradients".to_string(),
            );
            return Ok(GradDtype::Bf16);
        }
        Ok(if bf16_requested {
            GradDtype::Bf16
        } else {
            GradDtype::Fp32
        })
    }

    /// Recompute: `--recompute-granularity` (with `--recompute-activations`, the older shorthand
    /// for selective), `--recompute-method`/`--recompute-num-layers`, and the 2021 forms
    /// `--activations-checkpoint-method` (with `--activations-checkpoint-num-layers`, default 1)
    /// and `--checkpoint-activations` (uniform, `--checkpoint-num-layers`, default 1), which the
    /// SC'21 scripts use.
    fn recompute(
        &self,
        notes: &mut Vec<String>,
    ) -> Result<(Recompute, Option<FullRecompute>), MegatronArgsError> {
        let granularity = self.value("recompute-granularity");
        // arguments.py: `if args.recompute_activations: args.recompute_granularity = 'selective'`.
        let recompute = match (granularity, self.switch("recompute-activations")) {
            (None, false) => Recompute::None,
            (None, true) | (Some("selective"), _) => Recompute::Selective,
            (Some("full"), false) => Recompute::Full,
            (Some("full"), true) => {
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
        let method_of = |flag: &str, layers_flag: &str| -> Result<_, MegatronArgsError> {
            let Some(method) = self.value(flag) else {
                return Ok(None);
            };
            let layers = self.number(layers_flag)?.unwrap_or(1);
            match method {
                "uniform" => Ok(Some((flag.to_string(), FullRecompute::Uniform(layers)))),
                "block" => Ok(Some((flag.to_string(), FullRecompute::Block(layers)))),
                v => Err(MegatronArgsError::BadChoice {
                    flag: flag.to_string(),
                    value: v.to_string(),
                    valid: "uniform, block",
                }),
            }
        };
        let modern = method_of("recompute-method", "recompute-num-layers")?;
        let legacy = match method_of(
            "activations-checkpoint-method",
            "activations-checkpoint-num-layers",
        )? {
            Some(m) => Some(m),
            // Aug 2021 arguments.py: "--checkpoint-activations is no longer valid ... Defaulting
            // to activation-checkpoint-method=uniform"; before that it checkpointed
            // --checkpoint-num-layers (default 1) layers per chunk.
            None if self.switch("checkpoint-activations") => Some((
                "checkpoint-activations".to_string(),
                FullRecompute::Uniform(self.number("checkpoint-num-layers")?.unwrap_or(1)),
            )),
            None => None,
        };
        let (recompute, method) = match (recompute, modern, legacy) {
            (_, Some((a, _)), Some((b, _))) => {
                return Err(MegatronArgsError::Contradiction {
                    first: format!("--{a}"),
                    second: format!("--{b}"),
                    fix: "the 2021 activation-checkpointing arguments and --recompute-method describe the same thing; keep one",
                });
            }
            (Recompute::Full, Some((_, m)), None) => (Recompute::Full, Some(m)),
            // Megatron-Core transformer_config.py refuses full granularity without a method;
            // tpsim reads it as every layer recomputed and says so.
            (Recompute::Full, None, None) => {
                notes.push("--recompute-granularity full without --recompute-method (Megatron-Core requires one) is read as --recompute-method uniform --recompute-num-layers 1".to_string());
                (Recompute::Full, Some(FullRecompute::Uniform(1)))
            }
            (Recompute::None, None, Some((_, m))) => (Recompute::Full, Some(m)),
            (other, None, Some((flag, _))) => {
                return Err(MegatronArgsError::Contradiction {
                    first: format!("--{flag}"),
                    second: format!("--recompute-granularity {}", other.as_str()),
                    fix: "the 2021 activation-checkpointing arguments mean full recompute; keep one of them",
                });
            }
            (Recompute::Selective, Some(_), None) => {
                // arguments.py: "recompute method is not yet supported for selective recomputing
                // granularity".
                return Err(MegatronArgsError::Refused {
                    given: "--recompute-method with selective recompute".into(),
                    why: "Megatron-LM refuses a recompute method for selective recomputing granularity; drop --recompute-method".into(),
                });
            }
            (Recompute::None, Some((flag, _)), None) => {
                notes.push(format!(
                    "--{flag} is ignored without --recompute-granularity full (Megatron-Core recomputes nothing then)"
                ));
                (Recompute::None, None)
            }
            (r, None, None) => (r, None),
        };
        if let Some(FullRecompute::Uniform(n)) = method
            && n > 1
        {
            return Err(MegatronArgsError::NotModelled {
                given: format!("uniform recompute with {n} layers per chunk"),
                why: format!(
                    "keeping the input of every {n}-layer chunk means {n} layers of activations at once in backward, which tpsim does not model yet; use --recompute-num-layers 1"
                ),
            });
        }
        Ok((recompute, method))
    }

    /// `--attention-backend` (see [`attention_backend`]); `--use-flash-attn` is Megatron-LM's
    /// older switch for FlashAttention.
    fn attention(&self) -> Result<Option<AttentionKernel>, MegatronArgsError> {
        let backend = match self.value("attention-backend") {
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
        match (backend, self.switch("use-flash-attn")) {
            (Some(AttentionKernel::Unfused), true) => Err(MegatronArgsError::Contradiction {
                first: "--use-flash-attn".into(),
                second: format!(
                    "--attention-backend {}",
                    self.value("attention-backend").unwrap_or_default()
                ),
                fix: "keep --attention-backend flash, or drop --use-flash-attn for unfused attention",
            }),
            (Some(kernel), _) => Ok(Some(kernel)),
            (None, true) => Ok(Some(AttentionKernel::Flash)),
            (None, false) => Ok(None),
        }
    }

    /// The ZeRO stage the line asks for (see [`megatron_zero`]).
    fn zero(&self, pp: u32, notes: &mut Vec<String>) -> Result<u8, MegatronArgsError> {
        let strategy = self.value("data-parallel-sharding-strategy");
        if let Some(s) = strategy
            && !self.switch("use-megatron-fsdp")
        {
            notes.push(format!(
                "--data-parallel-sharding-strategy {s} is ignored without --use-megatron-fsdp (Megatron-LM ignores it too)"
            ));
        }
        megatron_zero(
            self.switch("use-distributed-optimizer"),
            self.switch("use-megatron-fsdp"),
            self.switch("use-torch-fsdp2"),
            strategy,
            pp,
        )
    }

    /// torchrun's `--nnodes` / `--nproc_per_node`: a number is read, anything else (a shell
    /// variable, an elastic `MIN:MAX` range, `gpu`) is left to `--nodes` / `--gpus-per-node`.
    fn launcher(&self, notes: &mut Vec<String>) -> (Option<u32>, Option<u32>) {
        let mut read = |flags: &[&str], tpsim_flag: &str| {
            let (flag, value) = flags
                .iter()
                .find_map(|f| self.launcher.get(f).map(|v| (*f, *v)))?;
            match value.parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    notes.push(format!(
                        "torchrun --{flag} {value} is not a number tpsim can read; give {tpsim_flag}"
                    ));
                    None
                }
            }
        };
        (
            read(&["nnodes"], "--nodes"),
            read(&["nproc_per_node", "nproc-per-node"], "--gpus-per-node"),
        )
    }
}

/// Reads Megatron-LM arguments (whitespace-separated, `\` line continuations allowed). Flags that
/// do not change memory or time are collected in `ignored`.
pub fn read_megatron_args(text: &str) -> Result<MegatronLaunch, MegatronArgsError> {
    let p = Parsed::tokenize(text)?;
    let layers = p.required("num-layers", "96")?;
    let hidden = p.required("hidden-size", "12288")?;
    let heads = p.required("num-attention-heads", "96")?;
    p.refuse_unmodelled(hidden, heads)?;
    let mut notes = Vec::new();
    let grad_dtype = p.grad_dtype(&mut notes)?;
    let (recompute, full_recompute) = p.recompute(&mut notes)?;
    let attention = p.attention()?;
    if p.value("num-layers-per-virtual-pipeline-stage").is_some()
        && p.value("num-virtual-stages-per-pipeline-rank").is_some()
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
    let group_query_attention = p.switch("group-query-attention");
    let kv_heads = match p.number("num-query-groups")? {
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
    let norm = match p.value("normalization") {
        None | Some("LayerNorm") => Norm::Layernorm,
        Some("RMSNorm") => Norm::Rmsnorm,
        Some(v) => {
            return Err(MegatronArgsError::BadChoice {
                flag: "normalization".into(),
                value: v.to_string(),
                valid: "LayerNorm, RMSNorm",
            });
        }
    };
    if p.switch("swiglu") && p.switch("quick-geglu") {
        // argument_utils.py: `elif args.quick_geglu: assert not args.swiglu`.
        return Err(MegatronArgsError::Contradiction {
            first: "--swiglu".into(),
            second: "--quick-geglu".into(),
            fix: "Megatron-LM accepts only one gated activation; keep one",
        });
    }
    let tp = p.number("tensor-model-parallel-size")?.unwrap_or(1);
    let pp = p.number("pipeline-model-parallel-size")?.unwrap_or(1);
    // arguments.py: "Disabling sequence parallelism because tensor model parallelism is disabled".
    let sequence_parallel = p.switch("sequence-parallel") && tp > 1;
    if p.switch("sequence-parallel") && tp == 1 {
        notes.push("--sequence-parallel with --tensor-model-parallel-size 1: Megatron-LM turns sequence parallelism off (it splits over the TP group), and so does tpsim".to_string());
    }
    let zero = p.zero(pp, &mut notes)?;
    let (nodes, gpus_per_node) = p.launcher(&mut notes);
    let split = SplitArgs {
        embedding_counted: p.switch("account-for-embedding-in-pipeline-split"),
        loss_counted: p.switch("account-for-loss-in-pipeline-split"),
        first: p.number("decoder-first-pipeline-num-layers")?,
        last: p.number("decoder-last-pipeline-num-layers")?,
    };
    if (split.first.is_some() || split.last.is_some())
        && p.value("num-layers-per-virtual-pipeline-stage").is_some()
    {
        // arguments.py: "please use --num-virtual-stages-per-pipeline-rank to specify virtual
        // pipeline parallel degree when enable uneven pipeline parallelism".
        return Err(MegatronArgsError::Refused {
            given: "--decoder-first/last-pipeline-num-layers with --num-layers-per-virtual-pipeline-stage".into(),
            why: "Megatron-LM refuses them together; use --num-virtual-stages-per-pipeline-rank, or --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split".into(),
        });
    }
    Ok(MegatronLaunch {
        layers,
        hidden,
        heads,
        kv_heads,
        ffn_hidden: p.number("ffn-hidden-size")?,
        vocab: p.number("vocab-size")?,
        seq_len: p.required("seq-length", "2048")?,
        global_batch: p.number("global-batch-size")?,
        swiglu: p.switch("swiglu"),
        quick_geglu: p.switch("quick-geglu"),
        linear_bias: !p.switch("disable-bias-linear"),
        tied_embeddings: !p.switch("untie-embeddings-and-output-weights"),
        learned_position_embeddings: p
            .value("position-embedding-type")
            .is_none_or(|v| v == "learned_absolute"),
        norm,
        dropout: ["hidden-dropout", "attention-dropout"].iter().all(|flag| {
            p.value(flag)
                .is_none_or(|v| v.parse::<f64>().map_or(true, |x| x > 0.0))
        }),
        tp,
        pp,
        layers_per_virtual_stage: p.number("num-layers-per-virtual-pipeline-stage")?,
        virtual_stages: p.number("num-virtual-stages-per-pipeline-rank")?,
        split,
        micro_batch: p.number("micro-batch-size")?.unwrap_or(1),
        sequence_parallel,
        recompute,
        full_recompute,
        zero,
        microbatch_group: p.number("microbatch-group-size-per-virtual-pipeline-stage")?,
        grad_dtype,
        attention,
        nodes,
        gpus_per_node,
        ignored: p.ignored,
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
/// (Megatron-LM `arguments.py` computes `virtual_pipeline_model_parallel_size` the same way, with
/// the embedding and the loss counted as layers under `--account-for-*-in-pipeline-split`; pass
/// those in `layers`).
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
    if per_virtual_stage == 0 || !per_stage.is_multiple_of(per_virtual_stage) {
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
    /// 64). `--quick-geglu` is gated but keeps 4h (the reduction is under `if args.swiglu`).
    pub fn default_ffn_hidden(&self) -> u32 {
        crate::model::default_ffn_hidden(self.hidden, self.swiglu)
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
            gated_mlp: self.swiglu || self.quick_geglu,
            linear_bias: self.linear_bias,
            tied_embeddings: self.tied_embeddings,
            learned_position_embeddings: self.learned_position_embeddings,
            norm: self.norm,
            dropout: self.dropout,
        };
        model.check()?;
        Ok(model)
    }

    /// Virtual stages per pipeline rank, as Megatron-LM derives them.
    pub fn vpp(&self) -> Result<u32, String> {
        match (self.layers_per_virtual_stage, self.virtual_stages) {
            (Some(n), _) => vpp_from_layers_per_virtual_stage(
                self.split.counted_layers(self.layers),
                self.pp,
                n,
            ),
            (None, Some(v)) => Ok(v),
            (None, None) => Ok(1),
        }
    }

    /// Megatron's global batch: the line's, or micro-batch x dp when it has none.
    pub fn global_batch_on(&self, gpus: u32) -> Option<u32> {
        self.global_batch
            .or_else(|| Some(self.micro_batch * gpus / (self.tp * self.pp).max(1)))
    }

    /// The plan request on `gpus` GPUs with `global_batch` sequences per step: dp is what tp x pp
    /// leaves, as in Megatron. Checks what Megatron checks before the plan exists.
    pub fn request(&self, gpus: u32, global_batch: u32) -> Result<PlanRequest, String> {
        let tp_pp = self.tp * self.pp;
        if !gpus.is_multiple_of(tp_pp) {
            return Err(format!(
                "--tensor-model-parallel-size {} x --pipeline-model-parallel-size {} = {tp_pp} does not divide the {gpus} GPUs; change --nodes or the degrees",
                self.tp, self.pp
            ));
        }
        let dp = gpus / tp_pp;
        let vpp = self.vpp()?;
        // Megatron's own placement is checked here; whether tpsim's split is the same is checked
        // on the built plan (`check_plan`).
        if self.split.any() || !self.layers.is_multiple_of(self.pp) {
            self.split.stage_layers(self.layers, self.pp)?;
        }
        if let Some(group) = self.microbatch_group {
            let m = global_batch / (self.micro_batch * dp).max(1);
            if vpp == 1 {
                // Only the interleaved schedule reads it (schedules.py).
            } else if group < self.pp || group > m || (m % group != 0 && m % group < self.pp) {
                // schedules.py forward_backward_pipelining_with_interleaving: the group must be in
                // [pp, m], and the last group empty or at least pp micro-batches.
                return Err(format!(
                    "--microbatch-group-size-per-virtual-pipeline-stage {group} with {m} micro-batches on --pipeline-model-parallel-size {}: Megatron-Core needs a group between pp and the micro-batches, with a remainder of 0 or at least pp; use {}",
                    self.pp, self.pp
                ));
            } else if group != self.pp {
                // get_pp_rank_microbatches: warm-up runs (vpp - 1) x group micro-batches, so a
                // group other than pp changes the activations in flight.
                return Err(format!(
                    "--microbatch-group-size-per-virtual-pipeline-stage {group} is not modelled yet: a group other than pp ({}) changes how many micro-batches are in flight in the interleaved schedule; drop it (Megatron's default is pp)",
                    self.pp
                ));
            }
        }
        Ok(PlanRequest {
            tp: self.tp,
            pp: self.pp,
            dp,
            vpp,
            micro_batch: self.micro_batch,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            zero: self.zero,
            allow_uneven_pp: self.split.any() || !self.layers.is_multiple_of(self.pp),
            allow_cross_node_tp: false,
        })
    }

    /// Checks that the plan tpsim built is the one Megatron would run: the same layers on each
    /// stage, and full recompute of every layer.
    pub fn check_plan(&self, plan: &ParallelPlan) -> Result<(), String> {
        if self.split.any() || !plan.stages.even {
            check_split(&self.split, self.layers, plan)?;
        }
        if let Some(full) = self.full_recompute {
            check_full_recompute(full, plan)?;
        }
        Ok(())
    }
}

/// Whether Megatron's full-recompute method recomputes every layer, as tpsim's full recompute
/// does: uniform with one layer per chunk, or block covering every layer of a model chunk
/// (Megatron-Core `recompute.py`: block recomputes the first N layers of each chunk).
pub fn check_full_recompute(full: FullRecompute, plan: &ParallelPlan) -> Result<(), String> {
    match full {
        FullRecompute::Uniform(1) => Ok(()),
        FullRecompute::Uniform(n) => Err(format!(
            "--recompute-method uniform --recompute-num-layers {n} keeps the input of every {n}-layer chunk and {n} layers of activations at once in backward, which tpsim does not model yet; use --recompute-num-layers 1"
        )),
        FullRecompute::Block(n) => {
            let chunk = plan.stages.max_layers().div_ceil(plan.vpp);
            if n < chunk {
                Err(format!(
                    "--recompute-method block --recompute-num-layers {n} recomputes {n} of the {chunk} layers of each model chunk, and tpsim does not model partial recompute yet; use --recompute-num-layers {chunk} (every layer) or --recompute-method uniform --recompute-num-layers 1"
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// The ZeRO stage of Megatron-LM's data-parallel arguments: `--use-distributed-optimizer` (ZeRO-1),
/// Megatron-FSDP with `--data-parallel-sharding-strategy` (arguments.py default
/// optim_grads_params: ZeRO-3; optim_grads: ZeRO-2; optim: ZeRO-1; no_shard: none), and torch FSDP2
/// (full sharding: ZeRO-3; arguments.py asserts it runs without pipelines).
pub fn megatron_zero(
    distributed_optimizer: bool,
    megatron_fsdp: bool,
    torch_fsdp2: bool,
    strategy: Option<&str>,
    pp: u32,
) -> Result<u8, MegatronArgsError> {
    if torch_fsdp2 {
        if pp > 1 {
            return Err(MegatronArgsError::Refused {
                given: format!("--use-torch-fsdp2 with --pipeline-model-parallel-size {pp}"),
                why: "Megatron-LM refuses torch FSDP2 with pipeline parallelism; drop one".into(),
            });
        }
        return Ok(3);
    }
    if !megatron_fsdp {
        return Ok(u8::from(distributed_optimizer));
    }
    let zero = match strategy.unwrap_or("optim_grads_params") {
        "no_shard" => 0,
        "optim" => 1,
        "optim_grads" => 2,
        "optim_grads_params" => 3,
        v => {
            return Err(MegatronArgsError::BadChoice {
                flag: "data-parallel-sharding-strategy".into(),
                value: v.to_string(),
                valid: "no_shard, optim, optim_grads, optim_grads_params",
            });
        }
    };
    if pp > 1 && zero > 1 {
        return Err(MegatronArgsError::NotModelled {
            given: format!("--use-megatron-fsdp with --pipeline-model-parallel-size {pp}"),
            why: "Megatron-FSDP sharding gradients or parameters together with pipeline parallelism is not modelled yet; use --use-distributed-optimizer (ZeRO-1) or --pipeline-model-parallel-size 1".into(),
        });
    }
    Ok(zero)
}

/// Whether tpsim's stage layout of `plan` is where Megatron puts the `layers` under `split`:
/// tpsim cannot model another split, so a different one is refused rather than replaced.
pub fn check_split(split: &SplitArgs, layers: u32, plan: &ParallelPlan) -> Result<(), String> {
    let megatron = split.stage_layers(layers, plan.pp)?;
    let s = &plan.stages;
    let middles = plan.pp.saturating_sub(2);
    let middle_equal =
        middles == 0 || layers.saturating_sub(s.first + s.last) == s.middle_max * middles;
    let middle_matches = middles == 0 || s.middle_max == megatron.middle;
    if (megatron.first, megatron.last) == (s.first, s.last) && middle_matches && middle_equal {
        return Ok(());
    }
    Err(format!(
        "the pipeline split of these arguments (first stage {}, middle stages {}, last stage {} layers) is not tpsim's (first {}, middle up to {}, last {}: the embedding and the loss counted as a layer each), and tpsim cannot model other splits yet; use --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split or --decoder-first-pipeline-num-layers {} --decoder-last-pipeline-num-layers {}",
        megatron.first,
        megatron.middle,
        megatron.last,
        s.first,
        s.middle_max,
        s.last,
        s.first,
        s.last
    ))
}
