//! Megatron-LM launch lines in: what a `pretrain_gpt.py` argument list (and the `torchrun` line
//! around it) says about the model, the batch, the cluster and the plan. Megatron's defaults and
//! refusals are followed (Megatron-LM `megatron/training/arguments.py` `validate_args`,
//! Megatron-Core `transformer_config.py`); an argument that changes memory or time in a way tpsim
//! does not model is refused by name, never skipped.

use super::megatron_args::Parsed;
pub use super::megatron_args::{
    FullRecompute, MegatronArgsError, attention_backend, megatron_zero,
};
use super::megatron_moe::ExpertArgs;
pub use super::megatron_precision::{
    MegatronPrecision, PrecisionArgs, megatron_overlap, megatron_precision,
};
use super::pipeline_split::{ChunkLayout, SplitArgs};
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, PlanRequest, Recompute};
use crate::training::{AttentionKernel, GradDtype, Overlap};

/// What a Megatron-LM argument list says about the model, the batch and the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct MegatronLaunch {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: Option<u32>,
    pub ffn_hidden: Option<u32>,
    /// `--kv-channels`: the width of one attention head (arguments.py default hidden / heads).
    pub head_dim: Option<u32>,
    pub vocab: Option<u32>,
    /// `--make-vocab-size-divisible-by` (arguments.py default 128): the tokenizer's vocabulary is
    /// padded to a multiple of it x tp (`vocab_size_with_padding`,
    /// megatron/core/tokenizers/utils/build_tokenizer.py at d98e8a64).
    pub vocab_divisible_by: Option<u32>,
    pub seq_len: u32,
    /// `--global-batch-size`; Megatron's default when absent is micro-batch x dp
    /// (arguments.py: `args.global_batch_size = args.micro_batch_size * args.data_parallel_size`).
    pub global_batch: Option<u32>,
    /// `--swiglu`: gated, and the default ffn is 8h/3 rounded down to 64.
    pub swiglu: bool,
    /// `--quick-geglu`: gated too (argument_utils.py sets gated_linear_unit), default ffn 4h.
    pub quick_geglu: bool,
    pub linear_bias: bool,
    /// `--add-qkv-bias`: biases on the query/key/value projections only (Qwen2).
    pub qkv_bias: bool,
    /// `--qk-layernorm`: a norm over each query and key head (Qwen3, OLMo 2).
    pub qk_norm: bool,
    pub tied_embeddings: bool,
    pub position_embedding: PositionEmbedding,
    /// `--rotary-percent` below 1 under a rotary position type (`None`: the whole head).
    pub rotary_percent: Option<f64>,
    /// `--rotary-base` other than its default 10000 under a rotary position type.
    pub rotary_base: Option<f64>,
    pub norm: Norm,
    /// Megatron's --hidden-dropout (default 0.1) is non-zero.
    pub dropout: bool,
    /// `--mtp-num-layers` (default none).
    pub mtp_layers: u32,
    /// `--window-size (LEFT,0)` and `--window-attn-skip-freq N`: LEFT + 1 tokens per query.
    pub attention_window: Option<crate::model::AttentionWindow>,
    /// `--hybrid-layer-pattern` (or the deprecated `--hybrid-override-pattern`) and the
    /// `--mamba-*` shape of `pretrain_mamba.py`'s hybrid stack ([`hybrid_of_line`]).
    pub hybrid: Option<crate::model::Hybrid>,
    /// The hybrid pattern's main part as given, when '|' cuts it into pipeline segments (one per
    /// model chunk, Megatron-Core 0.17 on): the plan tpsim builds must cut it alike (`check_plan`).
    pub hybrid_segments: Option<String>,
    pub tp: u32,
    /// Experts, latent attention and expert parallelism (`--num-experts`, `--moe-*`,
    /// `--multi-latent-attention`, `--expert-model/tensor-parallel-size`).
    pub experts: ExpertArgs,
    /// `--context-parallel-size` (default 1).
    pub cp: u32,
    /// `--cp-comm-type` (`None` when the line is silent: Megatron-LM's p2p ring).
    pub cp_exchange: Option<crate::training::CpExchange>,
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
    /// `--recompute-modules` under selective granularity (Megatron-Core's default, the attention
    /// core, when `None`).
    pub recompute_modules: Option<crate::training::RecomputeModules>,
    /// ZeRO stage: 1 for `--use-distributed-optimizer`, 2/3 for Megatron-FSDP or torch FSDP2.
    pub zero: u8,
    /// Whether the stage came from Megatron-DeepSpeed's `--zero-stage` (DeepSpeed's ZeRO, priced
    /// only under `--framework deepspeed`; `Parsed::deepspeed_zero_stage`).
    pub deepspeed_zero_stage: bool,
    /// Whether `cp` is Megatron-DeepSpeed's `--ds-sequence-parallel-size` (DeepSpeed-Ulysses,
    /// priced only under `--framework deepspeed`; `Parsed::ulysses_degree`).
    pub deepspeed_ulysses: bool,
    /// `--num-distributed-optimizer-instances` (default 1): copies of the sharded states.
    pub dp_replicas: u32,
    /// `--cpu-offloading-num-layers N` (N > 0 turns Megatron-Core's CPU offloading on,
    /// `arguments.py`): layers whose activations go to host memory.
    pub cpu_offload_layers: u32,
    /// `--first-last-layers-bf16` with `--num-layers-at-start-in-bf16` / `--num-layers-at-end-in-bf16`
    /// (Megatron-Core's defaults 1 and 1): the layers kept in bf16 under low-precision GEMMs.
    pub bf16_layers: crate::training::Bf16Layers,
    /// False with `--torch-fsdp2-no-reshard-after-forward`: torch FSDP2 keeps the gathered
    /// parameters from the forward through the backward (ZeRO-3 "keep").
    pub reshard_after_forward: bool,
    /// GEMM precision (`--fp8-format`/`--fp8-recipe`, `--fp4-format`/`--fp4-recipe`) and whether
    /// the low-precision weights are gathered as the parameters (`--fp8/fp4-param-gather`).
    pub precision: MegatronPrecision,
    /// The communication Megatron-LM overlaps with these arguments (its defaults: only p2p).
    pub overlap: Overlap,
    /// `--microbatch-group-size-per-virtual-pipeline-stage`.
    pub microbatch_group: Option<u32>,
    /// The gradient precision Megatron-LM keeps and reduces in.
    pub grad_dtype: GradDtype,
    /// `--no-gradient-accumulation-fusion` absent (Megatron-LM's default: fused), or a
    /// Megatron-FSDP line, which carries it as required.
    pub gradient_accumulation_fusion: bool,
    /// `--delay-wgrad-compute` (`Training::delay_wgrad_compute`).
    pub delay_wgrad_compute: bool,
    /// `--no-rope-fusion` absent (Megatron-LM's default: Transformer Engine's fused RoPE).
    pub rope_fusion: bool,
    /// How the optimizer stores its states (`--use-precision-aware-optimizer` and its dtypes).
    pub optimizer_states: crate::training::OptimizerStates,
    /// `--attention-backend` / `--use-flash-attn` (`None` when the line is silent).
    pub attention: Option<AttentionKernel>,
    /// torchrun's `--nnodes` and `--nproc_per_node` (`None` when absent or not a number).
    pub nodes: Option<u32>,
    /// `nodes` is torchrun's default, 1: the line gives `--nproc_per_node` but no `--nnodes`.
    pub nodes_by_default: bool,
    pub gpus_per_node: Option<u32>,
    /// Arguments the reader does not model (learning rate, data paths, ...), in order.
    pub ignored: Vec<String>,
    /// What the reader did with arguments that Megatron-LM itself ignores or overrides (stderr,
    /// once the input is known to be valid).
    pub notes: Vec<String>,
    /// Launcher values the reader could not take (`torchrun --nnodes $NNODES`): said at once, as
    /// they explain the error that follows ("--nodes is required").
    pub unread: Vec<String>,
}

/// Reads Megatron-LM arguments (whitespace-separated, `\` line continuations allowed). Flags that
/// do not change memory or time are collected in `ignored`.
pub fn read_megatron_args(text: &str) -> Result<MegatronLaunch, MegatronArgsError> {
    let words = super::megatron_args::launch_words(text)?;
    let p = Parsed::tokenize(&words)?;
    let hybrid_pattern = hybrid_pattern_of_line(&p)?;
    // A unified pattern's MTP depths ('/' segments), which the main pattern's count leaves out.
    let (hybrid_pattern, hybrid_mtp_depths) = match hybrid_pattern {
        Some(pattern) => {
            // No symbol before the MTP depths: no layers, which was said as a `--num-layers 0`
            // the line never gave (or, for '/*E', as depths to write that were written). Pipeline
            // cuts alone ('|', '|/*E') are no layers either.
            if pattern
                .split('/')
                .next()
                .is_none_or(|main| main.chars().all(|c| c == '|'))
            {
                return Err(MegatronArgsError::Refused {
                    given: format!("--hybrid-layer-pattern {pattern:?}"),
                    why: "its main pattern (before any '/' MTP depth) is empty, and Megatron-LM takes the layer count from it (one symbol per layer: M Mamba-2, * attention, - MLP, E MoE); write one symbol per layer, e.g. --hybrid-layer-pattern 'M-M*'".into(),
                });
            }
            let (main, depths) = split_hybrid_mtp(&pattern)?;
            // A symbol no block prices first: the layer count and the '|' segments below would
            // count it as a layer and refuse --num-layers or the cut for it, naming neither the
            // symbol nor its fix.
            if let Some(words) = crate::model::unpriced_symbol(&main, &['|']) {
                return Err(MegatronArgsError::Refused {
                    given: format!("--hybrid-layer-pattern {pattern:?}"),
                    why: words,
                });
            }
            (Some(main), depths)
        }
        None => (None, 0),
    };
    // '|' cuts the main pattern into pipeline segments; the model is the pattern without them.
    let hybrid_segments = hybrid_pattern
        .as_ref()
        .filter(|main| main.contains('|'))
        .cloned();
    let hybrid_pattern = hybrid_pattern.map(|main| main.replace('|', ""));
    // arguments.py derives --num-layers from a hybrid pattern (and ignores another with a
    // warning): the pattern's count, and a contradicting --num-layers refused, not overridden.
    let layers = match &hybrid_pattern {
        Some(pattern) => {
            let count = u32::try_from(pattern.chars().count()).unwrap_or(u32::MAX);
            if let Some(given) = p.number("num-layers")?
                && given != count
            {
                return Err(MegatronArgsError::Contradiction {
                    first: format!("--num-layers {given}"),
                    second: format!("the hybrid pattern's {count} layers"),
                    fix: "Megatron-LM takes the layer count from --hybrid-layer-pattern (one symbol per layer) and ignores --num-layers with a warning; drop --num-layers or make it the pattern's length",
                });
            }
            count
        }
        None => p.required("num-layers", "96")?,
    };
    let hidden = p.required("hidden-size", "12288")?;
    let heads = p.required("num-attention-heads", "96")?;
    p.refuse_unmodelled()?;
    let mut notes = Vec::new();
    let grad_dtype = p.grad_dtype(&mut notes)?;
    let optimizer_states = p.optimizer_states()?;
    let (recompute, full_recompute) = p.recompute(&mut notes)?;
    // Megatron-Core reads --recompute-modules only under selective granularity
    // (`TransformerConfig.__post_init__`); its names are checked as it checks them.
    let recompute_modules = match &p.recompute_modules {
        Some(words) if recompute == Recompute::Selective => {
            // argparse's nargs='*' keeps "a,b" as one word, which Megatron-Core's check refuses.
            if let Some(word) = words.iter().find(|w| w.contains(',')) {
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--recompute-modules {word:?}: Megatron-LM takes the module names as separate words (nargs='*'), so this is one unknown name; write them with spaces"
                    ),
                });
            }
            let modules = crate::training::RecomputeModules::parse(words).map_err(|why| {
                MegatronArgsError::BadValue {
                    message: format!("--recompute-modules {}: {why}", words.join(" ")),
                }
            })?;
            check_recompute_modules(&p, modules)?;
            Some(modules)
        }
        Some(words) => {
            notes.push(format!(
                "--recompute-modules {} is read by Megatron-LM only with --recompute-granularity selective, so it changes nothing here; add that or drop it",
                words.join(" ")
            ));
            None
        }
        None => None,
    };
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
    p.check_optimizer_sharding(optimizer_states, zero)?;
    let precision = p.precision(zero, &mut notes)?;
    let bf16_layers = p.bf16_layers(precision.precision, &mut notes)?;
    let overlap = p.overlap()?;
    if overlap.tp_comm && !sequence_parallel {
        // arguments.py: "Tensor parallel communication/GEMM overlap can happen only when sequence
        // parallelism is enabled".
        return Err(MegatronArgsError::Refused {
            given: "--tp-comm-overlap without sequence parallelism".into(),
            why: "Megatron-LM requires --sequence-parallel (and tensor parallelism) for it; add --sequence-parallel or drop --tp-comm-overlap".into(),
        });
    }
    let ulysses = p.ulysses_degree()?;
    let cp = match ulysses {
        Some(n) => n,
        None => p.number("context-parallel-size")?.unwrap_or(1),
    };
    // Megatron-Core's partial distributed optimizer: copies of the sharded states
    // (megatron/core/parallel_state.py; meaningful with --use-distributed-optimizer or
    // Megatron-FSDP, which `ParallelPlan::build` checks through the ZeRO stage read above).
    let mut dp_replicas = p
        .number("num-distributed-optimizer-instances")?
        .unwrap_or(1);
    // torch FSDP2 in Megatron-LM shards over the whole dp-cp group whatever the instances say
    // (megatron/core/distributed/torch_fully_sharded_data_parallel.py builds its DeviceMesh from
    // `get_data_parallel_group(with_context_parallel=True)`; only the distributed optimizer and
    // Megatron-FSDP read `num_distributed_optimizer_instances`): one copy, said in a note.
    if dp_replicas > 1 && p.switch("use-torch-fsdp2") {
        notes.push(format!(
            "--num-distributed-optimizer-instances {dp_replicas} is ignored under --use-torch-fsdp2 (Megatron-LM's torch FSDP2 shards over the whole data-parallel group; only the distributed optimizer and --use-megatron-fsdp keep several copies): priced as one copy"
        ));
        dp_replicas = 1;
    }
    // megatron/training/arguments.py `--torch-fsdp2-no-reshard-after-forward` (dest
    // torch_fsdp2_reshard_after_forward, store_false), read by training.py only for torch FSDP2.
    let keeps_gathered = p.switch("torch-fsdp2-no-reshard-after-forward");
    if keeps_gathered && !p.switch("use-torch-fsdp2") {
        return Err(MegatronArgsError::Refused {
            given: "--torch-fsdp2-no-reshard-after-forward without --use-torch-fsdp2".into(),
            why: "Megatron-LM passes it only to torch FSDP2 (Megatron-FSDP releases the gathered parameters after every forward whatever it says); add --use-torch-fsdp2 or drop it".into(),
        });
    }
    let reshard_after_forward = !keeps_gathered;
    let cp_exchange = match ulysses {
        Some(_) => Some(crate::training::CpExchange::HeadAllToAll),
        None => p.cp_exchange(cp, layers)?,
    };
    let mut unread = Vec::new();
    let (nodes, gpus_per_node, nodes_by_default) = p.launcher(&mut unread);
    let split = SplitArgs {
        embedding_counted: p.switch("account-for-embedding-in-pipeline-split"),
        loss_counted: p.switch("account-for-loss-in-pipeline-split"),
        first: p.number("decoder-first-pipeline-num-layers")?,
        last: p.number("decoder-last-pipeline-num-layers")?,
        layout: match p.value("pipeline-model-parallel-layout") {
            Some(text) => Some(
                ChunkLayout::parse(text)
                    .map_err(|message| MegatronArgsError::BadValue { message })?,
            ),
            None => None,
        },
    };
    let split = match &hybrid_pattern {
        Some(_) => hybrid_split(&p, split, hybrid_segments.as_deref(), pp, hybrid_mtp_depths)?,
        None => split,
    };
    if split.layout.is_some()
        && (p.value("num-layers-per-virtual-pipeline-stage").is_some()
            || p.value("num-virtual-stages-per-pipeline-rank").is_some())
    {
        // arguments.py derives the virtual stages from the layout.
        return Err(MegatronArgsError::Refused {
            given: "--pipeline-model-parallel-layout with a virtual-stage argument".into(),
            why: "the layout already sets the virtual stages (its chunks over the pipeline size); drop --num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank".into(),
        });
    }
    let mtp_layers = p.number("mtp-num-layers")?.unwrap_or(hybrid_mtp_depths);
    if let Some(layout) = split.layout
        && layout.mtp_layers != mtp_layers
    {
        // Megatron-Core `validate_layer_layout`: "Number of mtp layers in layout must match
        // mtp_num_layers".
        return Err(MegatronArgsError::Refused {
            given: format!(
                "--pipeline-model-parallel-layout with {} MTP layer(s) (m) and --mtp-num-layers {mtp_layers}",
                layout.mtp_layers
            ),
            why: "Megatron-Core requires the layout to place exactly --mtp-num-layers m entries (before the loss L); make them agree".into(),
        });
    }
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
    // arguments.py: --position-embedding-type chooses among these (default learned_absolute).
    // arguments.py's "Legacy RoPE arguments": `--use-rotary-position-embeddings` sets the type
    // to rope whatever else the line says.
    let position_embedding = match p.value("position-embedding-type") {
        _ if p.switch("use-rotary-position-embeddings") => PositionEmbedding::Rope,
        None => PositionEmbedding::LearnedAbsolute,
        Some("relative") => {
            return Err(MegatronArgsError::Refused {
                given: "--position-embedding-type relative".into(),
                why: "relative position buckets are T5's, not a GPT model's; give learned_absolute, rope or none".into(),
            });
        }
        Some(kind) => PositionEmbedding::from_megatron(kind).ok_or_else(|| {
            MegatronArgsError::Refused {
                given: format!("--position-embedding-type {kind}"),
                why: "Megatron-LM takes learned_absolute, rope, mrope or none (and yarn in recent releases), BigScience's Megatron-DeepSpeed alibi; give one of those".into(),
            }
        })?,
    };
    // arguments.py: "--no-position-embedding is deprecated, use --position-embedding-type",
    // raised unless the type is rope (which has no table to leave out).
    if p.switch("no-position-embedding") && position_embedding != PositionEmbedding::Rope {
        return Err(MegatronArgsError::Refused {
            given: "--no-position-embedding".into(),
            why: format!(
                "Megatron-LM raises '--no-position-embedding is deprecated, use --position-embedding-type' with --position-embedding-type {}; give --position-embedding-type none (or rope) instead",
                position_embedding.as_str()
            ),
        });
    }
    // `--rotary-percent` (arguments.py: float, default 1.0): the rotated share of each head,
    // read by the rotary position types only; Megatron-Core's `RotaryEmbedding` takes
    // `rotary_percent` of `kv_channels`.
    let rotary_percent = match p.value("rotary-percent") {
        None => None,
        Some(text) => match text.parse::<f64>() {
            // Latent attention rotates only each head's `--qk-pos-emb-head-dim` part. Megatron-Core
            // builds its rotary embedding there with YaRN by default (`--rope-type`, default yarn
            // for MLA), which takes no rotary percent; only `--rope-type rope` passes it on
            // (multi_latent_attention.py: `RotaryEmbedding(qk_pos_emb_head_dim, rotary_percent=...)`),
            // rotating part of that part, which tpsim does not price.
            Ok(value)
                if value > 0.0
                    && value < 1.0
                    && position_embedding.is_rotary()
                    && p.switch("multi-latent-attention") =>
            {
                let pos_dim = p.number("qk-pos-emb-head-dim")?.unwrap_or(64);
                if rope_type(&p.ignored) == Some("rope") {
                    return Err(MegatronArgsError::BadValue {
                        message: format!(
                            "--rotary-percent {text} with --multi-latent-attention --rope-type rope: Megatron-Core then rotates {} of the {pos_dim} rotary dimensions of each head (--qk-pos-emb-head-dim) and leaves the rest unrotated, which tpsim does not price; drop --rotary-percent (the rotary part is --qk-pos-emb-head-dim wide), or drop --rope-type rope (YaRN ignores it)",
                            (value * f64::from(pos_dim)).floor()
                        ),
                    });
                }
                notes.push(format!(
                    "--rotary-percent {text}: latent attention rotates each head's {pos_dim} rotary dimensions (--qk-pos-emb-head-dim) with YaRN, Megatron-Core's default --rope-type for --multi-latent-attention, which takes no rotary percent; it changes nothing"
                ));
                None
            }
            Ok(value) if value > 0.0 && value <= 1.0 => {
                if !position_embedding.is_rotary() {
                    notes.push(format!(
                        "--rotary-percent {text}: Megatron-LM reads it for rotary positions only, and this line's are {}; it changes nothing",
                        position_embedding.as_str()
                    ));
                }
                // RotaryEmbedding rotates `int(kv_channels * rotary_percent)` dimensions, in
                // pairs: fewer than two rotates nothing.
                let kv_channels = p.number("kv-channels")?.unwrap_or(hidden / heads.max(1));
                if position_embedding.is_rotary()
                    && kv_channels > 0
                    && (value * f64::from(kv_channels)).floor() < 2.0
                {
                    return Err(MegatronArgsError::BadValue {
                        message: format!(
                            "--rotary-percent {text} rotates {} of the {kv_channels} dimensions of each head (Megatron-Core's RotaryEmbedding rotates int(rotary_percent x kv_channels) of them, in pairs); give at least --rotary-percent {}, or drop it to rotate the whole head",
                            (value * f64::from(kv_channels)).floor(),
                            crate::units::show_number(2.0 / f64::from(kv_channels))
                        ),
                    });
                }
                (position_embedding.is_rotary() && value < 1.0).then_some(value)
            }
            _ => {
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--rotary-percent {text:?} is not a share of each head in (0, 1] (Megatron-Core rotates rotary_percent x kv_channels dimensions); e.g. --rotary-percent 0.5"
                    ),
                });
            }
        },
    };
    // `--rotary-base` (arguments.py: int, default 10000): the base of the rotary frequencies,
    // read by the rotary position types only (Megatron-Core's RotaryEmbedding and YaRN take
    // `rotary_base`). It prices nothing; `--emit` carries it back out.
    let rotary_base = match p.value("rotary-base") {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(base) if (1..=1_000_000_000_000_000).contains(&base) => {
                let base = base as f64;
                (position_embedding.is_rotary() && base != crate::model::DEFAULT_ROTARY_BASE)
                    .then_some(base)
            }
            _ => {
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--rotary-base {text:?} is not a whole number from 1 up (Megatron-LM reads it as an integer, default 10000); e.g. --rotary-base 500000, Llama 3's"
                    ),
                });
            }
        },
    };
    let ffn_hidden = p.number("ffn-hidden-size")?;
    let dense_ffn =
        ffn_hidden.unwrap_or_else(|| crate::model::default_ffn_hidden(hidden, p.switch("swiglu")));
    let experts = p.experts(layers, tp, dense_ffn)?;
    if experts.moe.is_some()
        && p.value("moe-router-num-groups").is_some()
        && p.value("moe-router-group-topk").is_none()
    {
        notes.push("--moe-router-num-groups without --moe-router-group-topk: Megatron-Core limits a token's groups only when the group top-k is set, so routing is read as unlimited".to_string());
    }
    // arguments.py: --hidden-dropout and --attention-dropout default 0.1. tpsim's model has one
    // dropout switch for both (the masks of `cost::memory`), on when both are.
    let (hidden_dropout, attention_dropout) = (
        p.probability("hidden-dropout")?,
        p.probability("attention-dropout")?,
    );
    let on = |given: Option<f64>| given.is_none_or(|x| x > 0.0);
    let dropout = on(hidden_dropout) && on(attention_dropout);
    if on(hidden_dropout) != on(attention_dropout) {
        let said = |flag: &str, given: Option<f64>| match given {
            Some(x) => format!("--{flag} {x}"),
            None => format!("--{flag} 0.1 (Megatron-LM's default)"),
        };
        notes.push(format!(
            "{} with {}: tpsim models dropout as one switch for both, so the line is read as no dropout (no masks kept, no dropout kernels), and an emitted line writes both as 0; give both the same",
            said("hidden-dropout", hidden_dropout),
            said("attention-dropout", attention_dropout)
        ));
    }
    Ok(MegatronLaunch {
        layers,
        hidden,
        heads,
        kv_heads,
        ffn_hidden,
        head_dim: p.number("kv-channels")?,
        vocab: p.number("vocab-size")?,
        vocab_divisible_by: p.number("make-vocab-size-divisible-by")?,
        seq_len: p.required("seq-length", "2048")?,
        global_batch: p.number("global-batch-size")?,
        swiglu: p.switch("swiglu"),
        quick_geglu: p.switch("quick-geglu"),
        linear_bias: !p.switch("disable-bias-linear"),
        qkv_bias: p.switch("add-qkv-bias"),
        qk_norm: p.switch("qk-layernorm"),
        tied_embeddings: !p.switch("untie-embeddings-and-output-weights"),
        position_embedding,
        rotary_percent,
        rotary_base,
        norm,
        dropout,
        mtp_layers,
        attention_window: p.attention_window()?,
        hybrid: hybrid_of_line(&p, hybrid_pattern, hidden, hybrid_mtp_depths)?,
        hybrid_segments,
        tp,
        experts,
        cp,
        cp_exchange,
        pp,
        layers_per_virtual_stage: p.number("num-layers-per-virtual-pipeline-stage")?,
        virtual_stages: p.number("num-virtual-stages-per-pipeline-rank")?,
        split,
        micro_batch: p.number("micro-batch-size")?.unwrap_or(1),
        sequence_parallel,
        recompute,
        full_recompute,
        recompute_modules,
        zero,
        deepspeed_zero_stage: p.value("zero-stage").is_some(),
        deepspeed_ulysses: ulysses.is_some(),
        dp_replicas,
        // 0 is Megatron-LM's default, offloading nothing (arguments.py turns `cpu_offloading` on
        // only for N > 0): a line may spell it out.
        cpu_offload_layers: match p.value("cpu-offloading-num-layers") {
            Some(v) if v.parse::<u32>() == Ok(0) => 0,
            // The count's own rule: 0 (none) or more; the shared count message said "a positive
            // integer (at least 1)" of -1, 2.5 and of words (`abc`, `0x10`, `nan`), refusing the 0
            // the line above reads. A count past u32 and a shell variable keep its words.
            Some(v) if !v.starts_with('$') && v.parse::<i128>().map_or(true, |n| n < 0) => {
                let why = if v.parse::<i128>().is_ok() {
                    "is negative"
                } else if v.parse::<f64>().is_ok_and(f64::is_finite) {
                    "is not a whole number (Megatron-LM reads it as an integer)"
                } else {
                    "is not a whole number in decimal digits (Megatron-LM reads it as an integer)"
                };
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--cpu-offloading-num-layers {v:?} {why}: it counts the layers whose activations go to the CPU, 0 (none, Megatron-LM's default) or more, fewer than --num-layers (e.g. --cpu-offloading-num-layers 8, or 0 for none)"
                    ),
                });
            }
            _ => p.number("cpu-offloading-num-layers")?.unwrap_or(0),
        },
        reshard_after_forward,
        bf16_layers,
        precision,
        overlap,
        delay_wgrad_compute: p.switch("delay-wgrad-compute"),
        microbatch_group: p.number("microbatch-group-size-per-virtual-pipeline-stage")?,
        grad_dtype,
        // Megatron-FSDP requires the flag and runs unfused whatever it says
        // (`TrainingFramework::fuses_wgrad_accumulation`): there it changes nothing.
        // arguments.py turns the fusion off for every position type but `rope`.
        rope_fusion: !p.switch("no-rope-fusion")
            && crate::training::TrainingFramework::MegatronCore
                .fuses_rope_by_default(position_embedding),
        gradient_accumulation_fusion: !p.switch("no-gradient-accumulation-fusion")
            || p.switch("use-megatron-fsdp"),
        optimizer_states,
        attention,
        nodes,
        nodes_by_default,
        gpus_per_node,
        ignored: p.ignored,
        unread,
        notes: {
            let mut notes = notes;
            if !p.repeated.is_empty() {
                // Each flag once, its values in the order given: `--global-batch-size 2048, then
                // 4096, then 2048`.
                let flags: Vec<String> = p
                    .repeated
                    .iter()
                    .map(|(flag, values)| {
                        let values: Vec<String> =
                            values.iter().map(|v| crate::input_file::quote(v)).collect();
                        format!("--{flag} {}", values.join(", then "))
                    })
                    .collect();
                notes.push(format!(
                    "{} given {} with different values; the last is used, as Megatron-LM's argparse uses it: {}",
                    if flags.len() == 1 { "a flag is" } else { "flags are" },
                    if p.repeated.iter().all(|(_, values)| values.len() == 2) {
                        "twice"
                    } else {
                        "more than once"
                    },
                    flags.join("; ")
                ));
            }
            if !p.strays.is_empty() {
                notes.push(format!(
                    "skipped {} after a flag that {} no value of it (Megatron-LM's argparse would refuse it as written; a shell variable is not expanded here, paste the expanded line): {}",
                    if p.strays.len() == 1 { "a word" } else { "words" },
                    if p.strays.len() == 1 { "is" } else { "are" },
                    p.strays.join(", ")
                ));
            }
            notes
        },
    })
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
    let vpp = per_stage / per_virtual_stage;
    if vpp > 1 && pp < 2 {
        return Err(no_pipeline_to_interleave(
            &format!("--num-layers-per-virtual-pipeline-stage {per_virtual_stage}"),
            vpp,
        ));
    }
    Ok(vpp)
}

/// The layer counts of a '|'-cut pattern's segments, as "a/b/c".
fn segment_lengths(pattern: &str) -> String {
    pattern
        .split('|')
        .map(|segment| segment.chars().count().to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// A hybrid line's pipeline split, with Megatron-LM's rules for a `--hybrid-layer-pattern`
/// (arguments.py at d98e8a64ddf3): no `--num-layers-per-virtual-pipeline-stage`,
/// `--num-virtual-stages-per-pipeline-rank`, `--pipeline-model-parallel-layout` or
/// `--account-for-*-in-pipeline-split` beside it ("Pipeline stage layout is defined by |
/// separators in the pattern"), and with '|' segments no first/last stage counts either. The
/// segments, a multiple of the pipeline size (the virtual stages are segments / pp), become the
/// layout of one chunk per segment that the transformer reader checks the same way; whether
/// tpsim prices the same chunks is checked on the built plan (`MegatronLaunch::check_plan`).
fn hybrid_split(
    p: &Parsed,
    split: SplitArgs,
    segments: Option<&str>,
    pp: u32,
    mtp_layers: u32,
) -> Result<SplitArgs, MegatronArgsError> {
    let refused = |given: &str, why: &str| MegatronArgsError::Refused {
        given: format!("{given} with --hybrid-layer-pattern"),
        why: why.into(),
    };
    for flag in [
        "num-layers-per-virtual-pipeline-stage",
        "num-virtual-stages-per-pipeline-rank",
        "pipeline-model-parallel-layout",
    ] {
        if p.value(flag).is_some() {
            return Err(refused(
                &format!("--{flag}"),
                "Megatron-LM refuses it (arguments.py: the pipeline stages and virtual stages of a hybrid stack come from '|' separators in its pattern); cut the pattern into pp x virtual-stages segments with '|' instead, e.g. 'M*M*|M*M*' for two stages",
            ));
        }
    }
    if split.embedding_counted || split.loss_counted {
        return Err(refused(
            "--account-for-embedding/loss-in-pipeline-split",
            "Megatron-LM refuses it (arguments.py: \"Pipeline stage layout is defined by | separators in the pattern\"); drop it, and cut the pattern with '|' for an uneven split",
        ));
    }
    let Some(segments) = segments else {
        return Ok(split);
    };
    if split.first.is_some() || split.last.is_some() {
        return Err(refused(
            "'|' segments and --decoder-first/last-pipeline-num-layers",
            "Megatron-LM refuses both (arguments.py: \"the pipeline layout is explicitly defined\" by the separators); drop the first/last counts",
        ));
    }
    let counts: Vec<u32> = segments
        .split('|')
        .map(|segment| u32::try_from(segment.chars().count()).unwrap_or(u32::MAX))
        .collect();
    let chunks = u32::try_from(counts.len()).unwrap_or(u32::MAX);
    let given = format!("--hybrid-layer-pattern with {chunks} '|' segments");
    // An empty segment first: the pipeline sizes offered below count it, and following them
    // would meet this refusal.
    if counts.contains(&0) {
        return Err(MegatronArgsError::Refused {
            given: format!("{given} ({})", segment_lengths(segments)),
            why: "a segment holds no layer, and tpsim plans at least one layer per model chunk; move a layer into it or drop that '|'".into(),
        });
    }
    if pp < 2 {
        return Err(MegatronArgsError::Refused {
            given: format!("{given} and --pipeline-model-parallel-size {pp}"),
            why: format!(
                "the segments are pipeline stages (and virtual stages); give --pipeline-model-parallel-size {chunks} (or a divisor of {chunks} from 2 for virtual stages), or drop the '|' separators"
            ),
        });
    }
    if !chunks.is_multiple_of(pp) {
        return Err(MegatronArgsError::Refused {
            given: format!("{given} and --pipeline-model-parallel-size {pp}"),
            why: format!(
                "Megatron-LM needs the segments to be a multiple of the pipeline size (arguments.py: \"must be evenly divisible by --pipeline-model-parallel-size\"); cut the pattern into a multiple of {pp} segments, or give a pipeline size dividing {chunks}"
            ),
        });
    }
    let first_chunk = counts[0];
    let last_chunk = counts[counts.len() - 1];
    let middle = &counts[1..counts.len() - 1];
    let per_chunk = middle.first().copied().unwrap_or(first_chunk);
    if middle.iter().any(|&c| c != per_chunk) {
        if let Some(balanced) = ChunkLayout::balanced(&counts, mtp_layers) {
            return Ok(SplitArgs {
                layout: Some(balanced),
                ..split
            });
        }
        return Err(MegatronArgsError::Refused {
            given: format!("{given} ({})", segment_lengths(segments)),
            why: "the segments between the first and the last hold different numbers of layers, which tpsim does not price (its pipelines give every middle model chunk the same layers); cut the pattern as `tpsim eval ... --emit megatron` writes it for this plan".into(),
        });
    }
    Ok(SplitArgs {
        layout: Some(ChunkLayout {
            chunks,
            first_chunk,
            per_chunk,
            last_chunk,
            mtp_layers,
            heavier_leading: 0,
        }),
        ..split
    })
}

/// The line's hybrid layer pattern: `--hybrid-layer-pattern`, or the deprecated
/// `--hybrid-override-pattern` it replaces (arguments.py asserts that only one is given).
fn hybrid_pattern_of_line(p: &Parsed) -> Result<Option<String>, MegatronArgsError> {
    match (
        p.value("hybrid-layer-pattern"),
        p.value("hybrid-override-pattern"),
    ) {
        (Some(_), Some(_)) => Err(MegatronArgsError::Contradiction {
            first: "--hybrid-layer-pattern".into(),
            second: "--hybrid-override-pattern".into(),
            fix: "Megatron-LM refuses both (arguments.py: \"cannot both be specified\"); keep --hybrid-layer-pattern",
        }),
        (Some(pattern), None) | (None, Some(pattern)) => Ok(Some(
            pattern.trim_matches(|c| c == '\'' || c == '"').to_string(),
        )),
        (None, None) => Ok(None),
    }
}

/// A unified `--hybrid-layer-pattern` split into its main pattern and its MTP depths
/// (megatron/core/models/hybrid/hybrid_layer_allocation.py `ParsedHybridPattern`: "<main>/<mtp>/
/// <mtp>/...", one '/' segment per depth, all alike). tpsim prices a depth as an attention block
/// and one of the last layer's MLP kind (`Model::check_hybrid`), NVIDIA's "*E": other MTP
/// patterns are refused in one line.
fn split_hybrid_mtp(pattern: &str) -> Result<(String, u32), MegatronArgsError> {
    let mut segments = pattern.split('/');
    let main = segments.next().unwrap_or_default().to_string();
    let mtp: Vec<&str> = segments.collect();
    let depths = u32::try_from(mtp.len()).unwrap_or(u32::MAX);
    if depths == 0 {
        return Ok((main, 0));
    }
    // The last layer, past any trailing '|' cut. A pattern ending in a Mamba or attention layer
    // has no MLP kind for the depths (`Model::check_hybrid` refuses it), so there are no depths to
    // offer; a symbol tpsim does not read is named by that check.
    let last_layer = main.chars().rev().find(|c| *c != '|');
    let priced = match last_layer {
        Some(c @ ('E' | '-')) => format!("*{c}"),
        Some(c @ ('M' | '*')) => {
            return Err(MegatronArgsError::Refused {
                given: format!(
                    "--hybrid-layer-pattern {pattern:?} (MTP segments {:?})",
                    mtp.join("/")
                ),
                why: format!(
                    "its main pattern ends in {}, and tpsim prices a hybrid MTP depth as an attention block and one of the last layer's MLP kind ('*E' or '*-' after a pattern ending in E or -, NVIDIA's Nemotron 3 '*E'), which a stack ending in a Mamba or attention layer does not have; end the main pattern in an MLP (- or E), or drop the '/' depths",
                    if c == 'M' {
                        "a Mamba layer (M)"
                    } else {
                        "an attention layer (*)"
                    }
                ),
            });
        }
        _ => return Ok((main, depths)),
    };
    if mtp.iter().any(|s| *s != priced) {
        return Err(MegatronArgsError::Refused {
            given: format!(
                "--hybrid-layer-pattern with MTP segments {:?}",
                mtp.join("/")
            ),
            why: format!(
                "tpsim prices a hybrid MTP depth as an attention block and one of the last layer's MLP kind, every depth alike ('*E' or '*-' after a pattern ending in E or -, NVIDIA's Nemotron 3 '*E'), here {priced}; write the depths as /{priced} or give the model file and --mtp-layers"
            ),
        });
    }
    Ok((main, depths))
}

/// `pretrain_mamba.py`'s hybrid stack from the line: the pattern and the Mamba-2 mixer's shape
/// with Megatron-Core's `TransformerConfig` defaults (`mamba_state_dim` 128, `mamba_head_dim`
/// 64, `mamba_num_groups` 8, and without `--mamba-num-heads` hidden x expand / head_dim heads,
/// `MambaMixer`'s expand 2). The shape flags without a pattern change nothing Megatron-LM builds
/// for a transformer, so they are refused rather than dropped; `--is-hybrid-model` needs the
/// pattern.
fn hybrid_of_line(
    p: &Parsed,
    pattern: Option<String>,
    hidden: u32,
    mtp_depths: u32,
) -> Result<Option<crate::model::Hybrid>, MegatronArgsError> {
    let shape_flags = [
        "mamba-num-heads",
        "mamba-head-dim",
        "mamba-state-dim",
        "mamba-num-groups",
    ];
    let Some(pattern) = pattern else {
        let given = shape_flags
            .iter()
            .find_map(|flag| p.value(flag).map(|v| format!("--{flag} {v}")))
            .or_else(|| {
                p.switch("is-hybrid-model")
                    .then(|| "--is-hybrid-model".to_string())
            });
        return match given {
            Some(given) => Err(MegatronArgsError::Refused {
                given,
                why: "the line has no --hybrid-layer-pattern, and tpsim reads a hybrid Mamba-Transformer stack from its pattern (one symbol per layer: M Mamba-2, * attention, - MLP, E MoE); add the pattern, or give --model nemotron-h-8b (or a model file with a hybrid: section) and the line's degrees as flags".into(),
            }),
            None => Ok(None),
        };
    };
    let head_dim = p.number("mamba-head-dim")?.unwrap_or(64);
    let heads = match p.number("mamba-num-heads")? {
        Some(heads) => heads,
        None => {
            let inner = 2 * u64::from(hidden);
            if head_dim == 0 || !inner.is_multiple_of(u64::from(head_dim)) {
                return Err(MegatronArgsError::Refused {
                    given: format!("--mamba-head-dim {head_dim}"),
                    why: format!(
                        "without --mamba-num-heads the mixer is 2 x --hidden-size {hidden} = {inner} wide (MambaMixer expand 2), which heads of {head_dim} do not divide (MambaMixer asserts d_inner % headdim == 0); give --mamba-num-heads or a head width dividing {inner}"
                    ),
                });
            }
            u32::try_from(inner / u64::from(head_dim)).unwrap_or(u32::MAX)
        }
    };
    let groups = p.number("mamba-num-groups")?.unwrap_or(8);
    mamba_shape_in_line_words(p, hidden, heads, groups)?;
    // Megatron-LM builds a hybrid stack's MTP depths from the unified pattern's `/` segments
    // (arguments.py: "Use unified --hybrid-layer-pattern with '/' separator", `split_hybrid_mtp`);
    // the count alone leaves the blocks unsaid.
    if let Some(depths) = p.value("mtp-num-layers") {
        return Err(MegatronArgsError::Refused {
            given: format!("--mtp-num-layers {depths} on a hybrid stack"),
            why: "Megatron-LM takes a hybrid stack's MTP blocks from the pattern's '/' segments; drop it and write the depths in --hybrid-layer-pattern (e.g. 'MEME*E/*E/*E' for two depths of an attention and an MoE block, NVIDIA's), or give --mtp-layers N to eval or plan".into(),
        });
    }
    // Megatron-Core `mtp_use_repeated_layer`: every depth runs one MTP block's weights.
    let shared = p.switch("mtp-use-repeated-layer");
    if shared && mtp_depths == 0 {
        return Err(MegatronArgsError::Refused {
            given: "--mtp-use-repeated-layer".into(),
            why: "the hybrid pattern has no MTP depths ('/' segments) to repeat a layer over; drop it or write the depths in --hybrid-layer-pattern".into(),
        });
    }
    Ok(Some(crate::model::Hybrid {
        pattern,
        mamba_heads: heads,
        mamba_head_dim: head_dim,
        mamba_state_dim: p.number("mamba-state-dim")?.unwrap_or(128),
        mamba_groups: groups,
        mamba_conv_kernel: 4,
        mtp_shared_weights: shared,
    }))
}

/// The Mamba-2 mixer's rules that `Model::check_hybrid` would state in a model file's keys
/// (`mamba_heads`, `mamba_groups`), said in the line's flags and values: each width within
/// tpsim's typo guard, and the heads (given, or derived from `--mamba-head-dim` and
/// `--hidden-size`) a multiple of the groups (`MambaMixer` asserts `nheads % ngroups == 0`).
fn mamba_shape_in_line_words(
    p: &Parsed,
    hidden: u32,
    heads: u32,
    groups: u32,
) -> Result<(), MegatronArgsError> {
    let most = crate::model::MAX_MAMBA_WIDTH;
    for flag in [
        "mamba-num-heads",
        "mamba-head-dim",
        "mamba-state-dim",
        "mamba-num-groups",
    ] {
        if let Some(value) = p.number(flag)?.filter(|v| *v > most) {
            return Err(MegatronArgsError::Refused {
                given: format!("--{flag} {value}"),
                why: format!(
                    "tpsim takes 1 to {most} (a typo guard; Nemotron-H 8B: --mamba-num-heads 128 --mamba-head-dim 64 --mamba-state-dim 128 --mamba-num-groups 8); give the model's value"
                ),
            });
        }
    }
    let groups_said = match p.value("mamba-num-groups") {
        Some(_) => format!("--mamba-num-groups {groups}"),
        None => format!("Megatron-Core's default --mamba-num-groups {groups}"),
    };
    // Without --mamba-num-heads the heads come from the head width: say how.
    let (heads_said, derived) = match p.value("mamba-num-heads") {
        Some(_) => (
            format!("--mamba-num-heads {heads}"),
            format!("{heads} heads, "),
        ),
        None => {
            let head_dim = p.value("mamba-head-dim").unwrap_or("64");
            let said = match p.value("mamba-head-dim") {
                Some(_) => format!("--mamba-head-dim {head_dim} without --mamba-num-heads"),
                None => "no --mamba-num-heads or --mamba-head-dim (default 64)".to_string(),
            };
            let derived = format!(
                "the mixer has 2 x --hidden-size {hidden} / head width {head_dim} = {heads} heads (MambaMixer expand 2), "
            );
            (said, derived)
        }
    };
    if heads > most {
        return Err(MegatronArgsError::Refused {
            given: heads_said,
            why: format!(
                "{derived}more than tpsim's {most} Mamba heads (a typo guard); give --mamba-num-heads or a wider --mamba-head-dim"
            ),
        });
    }
    if !heads.is_multiple_of(groups) {
        let example = crate::model::divisor_at_most(&heads, &groups);
        let fix = match p.value("mamba-num-heads") {
            Some(_) => format!(
                "give a --mamba-num-heads that is a multiple of {groups} (e.g. {}), or a --mamba-num-groups dividing {heads} (e.g. {example})",
                heads.next_multiple_of(groups)
            ),
            None => format!(
                "give --mamba-num-heads as a multiple of {groups}, a --mamba-head-dim that leaves a multiple of {groups} heads, or a --mamba-num-groups dividing {heads} (e.g. {example})"
            ),
        };
        return Err(MegatronArgsError::Refused {
            given: format!("{heads_said}, {groups_said}"),
            why: format!(
                "{derived}which {groups} groups do not divide (rule: Megatron-Core's MambaMixer asserts nheads % ngroups == 0); {fix}"
            ),
        });
    }
    Ok(())
}

/// A flag that makes `vpp` > 1 virtual stages on a plan without a pipeline, named as given (not as
/// the --vpp it becomes). Megatron-LM arguments.py: "When interleaved schedule is used,
/// pipeline-model-parallel size should be greater than 1".
fn no_pipeline_to_interleave(given: &str, vpp: u32) -> String {
    format!(
        "{given} makes {vpp} virtual stages per pipeline rank, but the plan has no pipeline (pipeline size 1), and the interleaved schedule needs one (Megatron-LM refuses it); give a pipeline size of 2 or more, or drop {}",
        given.split(' ').next().unwrap_or(given)
    )
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
            rotary_base: self.rotary_base,
            name: format!("megatron-l{}-h{}", self.layers, self.hidden),
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads.unwrap_or(self.heads),
            head_dim: self
                .head_dim
                .unwrap_or_else(|| self.hidden.checked_div(self.heads).unwrap_or(0)),
            ffn_hidden: self.ffn_hidden.unwrap_or_else(|| self.default_ffn_hidden()),
            vocab: self.vocab.unwrap_or(default_vocab),
            seq_len: self.seq_len,
            gated_mlp: self.swiglu || self.quick_geglu,
            linear_bias: self.linear_bias,
            qkv_bias: self.qkv_bias,
            qk_norm: self.qk_norm,
            shared_layer_norm: false,
            tied_embeddings: self.tied_embeddings,
            position_embedding: self.position_embedding,
            rotary_percent: self.rotary_percent,
            norm: self.norm,
            dropout: self.dropout,
            mla: self.experts.mla,
            moe: self.experts.moe,
            mtp_layers: self.mtp_layers,
            attention_window: self.attention_window,
            hybrid: self.hybrid.clone(),
        };
        model.check()?;
        Ok(model)
    }

    /// Virtual stages per pipeline rank, as Megatron-LM derives them.
    pub fn vpp(&self) -> Result<u32, String> {
        let vpp = self.virtual_stages_of_line()?;
        // arguments.py: "When interleaved schedule is used and p2p communication overlap is
        // disabled, pipeline-model-parallel size should be greater than 2".
        if vpp > 1 && self.pp == 2 && !self.overlap.p2p {
            return Err(format!(
                "--no-overlap-p2p-communication with {vpp} virtual stages on --pipeline-model-parallel-size 2: Megatron-LM refuses the interleaved schedule without p2p overlap on two pipeline ranks (\"pipeline-model-parallel size should be greater than 2\"); drop --no-overlap-p2p-communication, or use a pipeline size of 3 or more"
            ));
        }
        Ok(vpp)
    }

    fn virtual_stages_of_line(&self) -> Result<u32, String> {
        if let Some(layout) = self.split.layout {
            if self.pp < 2 {
                return Err(format!(
                    "--pipeline-model-parallel-layout ({} chunks) needs --pipeline-model-parallel-size 2 or more; give the pipeline size, or drop the layout",
                    layout.chunks
                ));
            }
            return Ok(layout.chunks / self.pp);
        }
        match (self.layers_per_virtual_stage, self.virtual_stages) {
            (Some(n), _) => vpp_from_layers_per_virtual_stage(
                self.split.counted_layers(self.layers),
                self.pp,
                n,
            ),
            (None, Some(v)) if v > 1 && self.pp < 2 => Err(no_pipeline_to_interleave(
                &format!("--num-virtual-stages-per-pipeline-rank {v}"),
                v,
            )),
            (None, Some(v)) => {
                // Without a layout Megatron-Core cuts every stage into v equal chunks and asserts
                // that v divides it (transformer_block.py `get_num_layers_to_build`:
                // "num_layers_per_pipeline_rank ... should be divisible by vp_size"); tpsim's
                // unequal chunks need the layout that says them.
                let layers = self.split.counted_layers(self.layers);
                let even = self.split.first.is_none() && self.split.last.is_none();
                if v > 1 && even && self.pp > 1 && layers.is_multiple_of(self.pp) {
                    let per_stage = layers / self.pp;
                    if !per_stage.is_multiple_of(v) {
                        let valid: Vec<String> = crate::plan::divisors(per_stage)
                            .iter()
                            .map(u32::to_string)
                            .collect();
                        // Unequal chunks need a layer each: past the stage's layers no layout
                        // cuts it, and `tpsim eval --vpp {v}` that would write one refuses it.
                        let layout = if v <= per_stage {
                            format!(
                                ", or the unequal chunks as a --pipeline-model-parallel-layout, which `tpsim eval ... --vpp {v} --emit megatron` writes"
                            )
                        } else {
                            format!(
                                " (no layout cuts a stage of {per_stage} layers into {v} chunks: every chunk holds at least one layer)"
                            )
                        };
                        return Err(format!(
                            "--num-virtual-stages-per-pipeline-rank {v} does not divide the {per_stage} layers of each of the {} stages, and without a layout Megatron-Core cuts each stage into equal chunks (transformer_block.py get_num_layers_to_build asserts \"num_layers_per_pipeline_rank ... should be divisible by vp_size\"); give one of {}{layout}",
                            self.pp,
                            valid.join(", ")
                        ));
                    }
                }
                Ok(v)
            }
            (None, None) => Ok(1),
        }
    }

    /// The flag that gave the line's context-parallel degree.
    pub fn cp_flag(&self) -> &'static str {
        if self.deepspeed_ulysses {
            "--ds-sequence-parallel-size"
        } else {
            "--context-parallel-size"
        }
    }

    /// Megatron's global batch: the line's, or micro-batch x dp when it has none.
    pub fn global_batch_on(&self, gpus: u32) -> Option<u32> {
        self.global_batch
            .or_else(|| Some(self.micro_batch * gpus / (self.tp * self.cp * self.pp).max(1)))
    }

    /// The plan request on `gpus` GPUs with `global_batch` sequences per step: dp is what
    /// tp x cp x pp leaves, as in Megatron (arguments.py: `data_parallel_size = world_size //
    /// (tp * pp * cp)`). Checks what Megatron checks before the plan exists.
    pub fn request(&self, gpus: u32, global_batch: u32) -> Result<PlanRequest, String> {
        let model_parallel = self.tp * self.cp * self.pp;
        if !gpus.is_multiple_of(model_parallel) {
            return Err(format!(
                "--tensor-model-parallel-size {} x {} {} x --pipeline-model-parallel-size {} = {model_parallel} does not divide the {gpus} GPUs; change --nodes or the degrees",
                self.tp,
                self.cp_flag(),
                self.cp,
                self.pp
            ));
        }
        let dp = gpus / model_parallel;
        // A stage holds at least one layer (as `eval --pp` says it): past the layer count, the
        // fixes the split messages offer ('|' segments, first/last counts, the --account-for-*
        // flags) each leave a stage empty and are refused in turn.
        if self.pp > self.layers {
            let fits = (1..=self.layers)
                .rev()
                .find(|&p| {
                    self.layers.is_multiple_of(p) && gpus.is_multiple_of(self.tp * self.cp * p)
                })
                .unwrap_or(1);
            return Err(format!(
                "--pipeline-model-parallel-size {} is more than the model's {} layers; a stage needs at least one layer: give {} or fewer, e.g. --pipeline-model-parallel-size {fits} (the GPUs it frees go to data parallelism)",
                self.pp, self.layers, self.layers
            ));
        }
        let vpp = self.vpp()?;
        // A hybrid pattern without '|' is sliced evenly unless first/last counts are given
        // (`select_pipeline_segment`); arguments.py refuses the --account-for-* flags beside it.
        if self.hybrid.is_some() && !self.split.any() && !self.layers.is_multiple_of(self.pp) {
            return Err(format!(
                "--pipeline-model-parallel-size {} does not divide the {} layers of --hybrid-layer-pattern, which has no '|' separators (Megatron-Core then slices it evenly and refuses this, hybrid_layer_allocation.py select_pipeline_segment); cut the pattern into {} segments with '|', as `tpsim eval ... --emit megatron` writes it, or add --decoder-first/last-pipeline-num-layers",
                self.pp, self.layers, self.pp
            ));
        }
        // Megatron's own placement is checked here; whether tpsim's split is the same is checked
        // on the built plan (`check_plan`).
        if self.split.any() || !self.layers.is_multiple_of(self.pp) {
            self.split.stage_layers(self.layers, self.pp)?;
        }
        // A first/last split without interleaving is taken as given (tpsim models any such
        // split); the other kinds must match tpsim's own layout (`check_plan`).
        let given_split = self.split.given_first_last(self.layers, self.pp, vpp);
        if let Some(group) = self.microbatch_group {
            let m = global_batch / (self.micro_batch * dp).max(1);
            if vpp == 1 {
                // Only the interleaved schedule reads it (schedules.py).
            } else if group < self.pp
                || group > m
                || (!m.is_multiple_of(group) && m % group < self.pp)
            {
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
            ep: self.experts.ep,
            etp: self.experts.etp,
            vpp,
            micro_batch: self.micro_batch,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            zero: self.zero,
            allow_uneven_pp: self.split.any() || !self.layers.is_multiple_of(self.pp),
            allow_cross_node_tp: false,
            cp: self.cp,
            precision: self.precision.precision,
            recompute_num_layers: match self.full_recompute {
                Some(FullRecompute::Block(n)) => n,
                _ => 0,
            },
            stage_split: given_split,
            dp_replicas: self.dp_replicas,
            reshard_after_forward: self.reshard_after_forward,
        })
    }

    /// Checks that the plan tpsim built is the one Megatron would run: the same layers on each
    /// stage, and full recompute of every layer.
    pub fn check_plan(&self, model: &Model, plan: &ParallelPlan) -> Result<(), String> {
        // A cut pattern is checked as the pattern tpsim would write (before the generic split
        // check, whose fixes name flags Megatron-LM refuses beside a hybrid pattern).
        if let (Some(given), Some(hybrid)) = (&self.hybrid_segments, &model.hybrid) {
            let priced = super::hybrid_main_pattern(model, hybrid, plan);
            if &priced != given {
                return Err(format!(
                    "--hybrid-layer-pattern cuts its layers into pipeline segments of {} layers, but tpsim prices this plan's model chunks as {} layers; give the pattern as tpsim cuts it ('{priced}'), as `tpsim eval ... --emit megatron` writes it",
                    segment_lengths(given),
                    segment_lengths(&priced)
                ));
            }
        }
        if self.split.any() || !plan.stages.even {
            check_split(&self.split, self.layers, plan)?;
        }
        if let Some(full) = self.full_recompute {
            check_full_recompute(full, plan)?;
        }
        if self.overlap.moe_a2a
            && let Some(why) = crate::cost::moe::alltoall_overlap_refusal_of(
                self.experts.moe.is_some(),
                self.mtp_layers,
                crate::cost::moe::recomputes_moe_layer(self.recompute_modules, plan),
                plan,
            )
        {
            return Err(format!(
                "--overlap-moe-expert-parallel-comm: {why} (Megatron-Core transformer_config.py refuses it otherwise); change the line or drop the flag"
            ));
        }
        Ok(())
    }
}

/// Whether tpsim models Megatron's full-recompute method on `plan`: uniform with one layer per
/// chunk is every layer recomputed, block N is tpsim's `recompute_num_layers` (Megatron-Core
/// `recompute.py`, `recompute_method == 'block'`: block recomputes the first N layers of each model
/// chunk and keeps the rest); uniform with N > 1 keeps N layers of activations at once in backward,
/// which tpsim does not model.
pub fn check_full_recompute(full: FullRecompute, _plan: &ParallelPlan) -> Result<(), String> {
    match full {
        FullRecompute::Uniform(1) | FullRecompute::Block(_) => Ok(()),
        FullRecompute::Uniform(n) => Err(format!(
            "--recompute-method uniform --recompute-num-layers {n} keeps the input of every {n}-layer chunk and {n} layers of activations at once in backward, which tpsim does not model yet; use --recompute-num-layers 1, or --recompute-method block"
        )),
    }
}

/// Megatron's `--recompute-method block --recompute-num-layers N` as tpsim's `recompute_num_layers`
/// on `plan`: N of each chunk's layers, and 0 (every layer) when N covers the whole chunk, so that
/// block over every layer is the same plan as uniform with one layer.
pub fn block_recompute_layers(n: u32, plan: &ParallelPlan) -> u32 {
    if n >= plan.layers_per_chunk() { 0 } else { n }
}

/// Whether tpsim's stage layout of `plan` is where Megatron puts the `layers` under `split`: a
/// first/last split without interleaving is taken as given (`request`); under interleaving tpsim
/// models its own split and equal-chunk layouts only, so a different one is refused rather than
/// replaced.
pub fn check_split(split: &SplitArgs, layers: u32, plan: &ParallelPlan) -> Result<(), String> {
    if plan.pp < 2 && split.any() {
        return Err(super::pipeline_split::SPLIT_NEEDS_PIPELINE.into());
    }
    let megatron = split.stage_layers(layers, plan.pp)?;
    let s = &plan.stages;
    let middles = plan.pp.saturating_sub(2);
    let middle_equal =
        middles == 0 || layers.saturating_sub(s.first + s.last) == s.middle_max * middles;
    let middle_matches = middles == 0 || s.middle_max == megatron.middle;
    if (megatron.first, megatron.last) == (s.first, s.last) && middle_matches && middle_equal {
        return Ok(());
    }
    let middle = if middles == 0 {
        String::new()
    } else {
        format!("middle {}, ", s.middle_max)
    };
    Err(format!(
        "the pipeline split of these arguments (first stage {}, {}last stage {} layers) is not tpsim's for this plan (first {}, {middle}last {}); tpsim models its own split here: drop the split arguments, give those `tpsim eval ... --emit megatron` writes for this plan (with interleaving, its --pipeline-model-parallel-layout), or drop the interleaving",
        megatron.first,
        if middles == 0 {
            String::new()
        } else {
            format!("middle stages {}, ", megatron.middle)
        },
        megatron.last,
        s.first,
        s.last,
    ))
}

/// What Megatron-Core refuses of the listed modules (`TransformerConfig.__post_init__`): `moe_act`
/// without grouped GEMMs ("moe_act in recompute_modules is only supported with moe_grouped_gemm"),
/// and `moe_act` or `layernorm` under FP8 delayed scaling, the default `--fp8-recipe` ("Delayed
/// scaling does not support moe_act and layernorm recompute for fp8").
fn check_recompute_modules(
    p: &Parsed<'_>,
    modules: crate::training::RecomputeModules,
) -> Result<(), MegatronArgsError> {
    use crate::training::RecomputeModule;
    let words = modules.megatron_words();
    if modules.contains(RecomputeModule::MoeAct) && !p.switch("moe-grouped-gemm") {
        return Err(MegatronArgsError::Refused {
            given: format!("--recompute-modules {words} without --moe-grouped-gemm"),
            why: "Megatron-Core recomputes moe_act only with grouped GEMMs; add --moe-grouped-gemm"
                .into(),
        });
    }
    let discards_in_fp8 =
        modules.contains(RecomputeModule::MoeAct) || modules.contains(RecomputeModule::Layernorm);
    if discards_in_fp8
        && p.value("fp8-format").is_some()
        && p.value("fp8-recipe").unwrap_or("delayed") == "delayed"
    {
        return Err(MegatronArgsError::Refused {
            given: format!("--recompute-modules {words} with FP8 delayed scaling"),
            why: "Megatron-Core refuses moe_act and layernorm recompute under delayed scaling (the default --fp8-recipe); use --fp8-recipe tensorwise (or mxfp8) or drop those modules".into(),
        });
    }
    Ok(())
}

/// `--rope-type` of a Megatron line (arguments.py: rope or yarn; absent, latent attention takes
/// yarn and other attention rope), which tpsim does not price and so skips with the flags it does
/// not read (`ignored`): read from there for what `--rotary-percent` means beside latent attention.
fn rope_type(ignored: &[String]) -> Option<&str> {
    ignored.iter().enumerate().find_map(|(i, token)| {
        if token == "--rope-type" {
            ignored.get(i + 1).map(String::as_str)
        } else {
            token.strip_prefix("--rope-type=")
        }
    })
}
