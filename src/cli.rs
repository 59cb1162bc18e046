//! Command-line flags (clap derive). No I/O and no domain logic: `app.rs` turns these into
//! validated domain values.

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tpsim",
    version,
    about = "Plans parallel training (tensor, context, pipeline, data, expert) of a transformer on a GPU cluster",
    long_about = "Plans parallel training (tensor, context, pipeline, data with ZeRO/FSDP, and expert for \
                  mixture-of-experts models) of a transformer on a GPU cluster: per-GPU memory, the traffic and \
                  exposed time of every collective, pipeline bubble and step time for every plan.",
    after_help = "Examples:\n  tpsim plan --params 512B --nodes 32\n  tpsim eval --model gpt3-175b --nodes 128 --gpu a100-sxm-80g --tp 8 --pp 16 --global-batch 1536\n  tpsim eval --plan plans/seed-512b-32nodes.yaml\n  tpsim accuracy\n  tpsim plan --hf-config models/hf/llama-3-70b.json --nodes 16 --global-batch 512 --emit megatron\n  tpsim eval --nodes 16 --megatron-args @examples/megatron/llama3-70b.sh\n  tpsim sweep --params 175B --axis nodes --values 16,32,64 --tokens 300B --price-per-gpu-hour 2.5\n  tpsim compare --params 512B --nodes 32\n  tpsim completions bash"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Search every valid plan and print the fastest that fit in memory.
    #[command(
        allow_negative_numbers = true,
        after_help = "The table's columns: tp, cp, pp, dp, ep the tensor-, context-, pipeline-, data- and expert-parallel degrees (ep: the experts spread over ep GPUs, each token sent to its experts' GPUs and back by all-to-all; etp: expert tensor-parallel, each expert split over etp GPUs; expert-DP, named under the table: the copies of each expert, tp x cp x dp / (ep x etp), which reduce its gradients among them); vpp virtual pipeline stages per GPU (interleaved 1F1B: each GPU holds vpp chunks of its layers, which shortens the bubble); mb sequences per micro-batch, m micro-batches per step; sp sequence parallelism; recomp activation recompute (full N/L: N of each chunk's L layers); zero the ZeRO stage (1 shards the optimizer states over dp, 2 the gradients too, 3 the weights too = FSDP; `3 keep`: weights gathered in the forward kept for the backward, FSDP2's reshard_after_forward=False; xN: the sharded states kept in N copies, hybrid sharding); prec the GEMM precision; mem GiB the most loaded GPU against its capacity; step s seconds per optimizer step; MFU % model FLOPs (of the active parameters, for a mixture-of-experts model) over the bf16 peak; bubble % the share of the step the slowest pipeline stage sits idle (fill and drain); TP s, CP s, PP s, DP s, EP s each group's communication seconds per step left exposed, i.e. not hidden under compute by the framework's overlap; train the time to train --tokens. README.md, \"What the output means\", says more.\n\nExamples:\n  tpsim plan --params 512B --nodes 32\n  tpsim plan --model llama3-405b --nodes 2048 --gpu h100-sxm-80g --global-batch 2048 --allow-uneven-pp\n  tpsim plan --params 70B --nodes 8 --top 5 --format json\n  tpsim plan --params 512B --nodes 32 --save plans/best.yaml\n  tpsim plan --hf-config models/hf/llama-3-70b.json --nodes 8 --global-batch 512\n  tpsim plan --params 175B --nodes 64 --emit megatron    # Megatron-LM arguments of the best plan it can run\n  tpsim plan --params 70B --nodes 8 --emit deepspeed > ds_config.json"
    )]
    Plan(Box<PlanArgs>),
    /// Evaluate one plan and print its full breakdown (also when it does not fit).
    #[command(
        allow_negative_numbers = true,
        after_help = "Terms: exposed is the part of a communication's time not hidden under compute by the framework's overlap (the time per step adds the exposed parts); bubble is pipeline fill and drain, the time the slowest stage sits idle; vpp the virtual pipeline stages per GPU (interleaved 1F1B); ep the expert-parallel degree (the experts spread over ep GPUs, tokens moved to them and back by all-to-all), etp the expert tensor-parallel degree (each expert split over etp GPUs), expert-dp the copies of each expert, tp x cp x dp / (ep x etp), which reduce its gradients among them; ZeRO 1 shards the optimizer states over dp, 2 the gradients too, 3 the weights too (FSDP), and --reshard-after-forward false keeps the gathered weights from forward to backward. README.md, \"What the output means\", says more.\n\nExamples:\n  tpsim eval --plan plans/seed-512b-32nodes.yaml\n  tpsim eval --model gpt3-175b --nodes 128 --gpu a100-sxm-80g --tp 8 --pp 16 --micro-batch 1 --recompute full\n  tpsim eval --layers 96 --hidden 12288 --heads 96 --nodes 64 --tp 8 --pp 8 --sequence-parallel --zero 1 --format json\n  # a Megatron-LM launch line, pasted (tpsim's own flag names work too):\n  tpsim eval --nodes 16 --num-layers 80 --hidden-size 8192 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --ffn-hidden-size 28672 --swiglu --seq-length 4096 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 5 --micro-batch-size 1 --global-batch-size 512 --sequence-parallel --recompute-granularity selective --use-distributed-optimizer --bf16\n  tpsim eval --plan plans/seed-512b-32nodes.yaml --emit nemo\n  # a whole launch script, with arguments tpsim does not model (skipped and listed on stderr):\n  tpsim eval --nodes 16 --megatron-args @examples/megatron/llama3-70b.sh"
    )]
    Eval(Box<EvalArgs>),
    /// Write an HTML report with SVG figures for a saved plan (like `eval --plan FILE --report DIR`).
    #[command(
        allow_negative_numbers = true,
        // Both are required; clap is not told so (the plan may come as the hidden `--plan FILE`),
        // and `report_command` names whichever is missing in one line with the fix, so the usage
        // says it here instead of clap's "[PLAN_FILE]".
        override_usage = "tpsim report <PLAN_FILE> --out <DIR> [OPTIONS]",
        after_help = "Example:\n  tpsim report plans/seed-512b-32nodes.yaml --out reports/seed-512b-32nodes\n  (then open reports/seed-512b-32nodes/index.html in a browser)"
    )]
    Report(ReportArgs),
    /// Compare predictions with published training runs (validation/published_runs.yaml).
    #[command(
        allow_negative_numbers = true,
        after_help = "Example:\n  tpsim accuracy\n  tpsim accuracy --runs validation/published_runs.yaml --format json"
    )]
    Accuracy(AccuracyArgs),
    /// Measure this machine (GEMMs at the model's shard shapes, a size sweep, memory bandwidth,
    /// collectives) and write a calibrated hardware profile for `--calibration`.
    #[command(
        allow_negative_numbers = true,
        after_help = "Examples:\n  tpsim calibrate --model gpt3-175b --output clusters/calibrated-h100.yaml\n  tpsim calibrate --backend cpu --layers 2 --hidden 256 --heads 8 --seq-len 128 --ranks 4 --output cpu.yaml"
    )]
    Calibrate(CalibrateArgs),
    /// Run one real tensor-parallel layer (forward and backward) of the top plans and compare it
    /// with the prediction: layer time, communication time, wire bytes, numerics.
    #[command(
        allow_negative_numbers = true,
        after_help = "Examples:\n  tpsim validate --model llama3-8b --calibration clusters/calibrated-h100.yaml --tp 8\n  tpsim validate --backend cpu --layers 2 --hidden 256 --heads 8 --seq-len 128 --tp 4 --sequence-parallel"
    )]
    Validate(ValidateArgs),
    /// Best plan at each point of one axis (nodes, model size, GPU, network, sequence, batch, layers
    /// offloaded to the CPU).
    #[command(after_help = SWEEP_EXAMPLES, allow_negative_numbers = true)]
    Sweep(SweepArgs),
    /// Two plans side by side, term by term, with the term that decides between them.
    #[command(after_help = COMPARE_EXAMPLES, allow_negative_numbers = true)]
    Compare(CompareArgs),
    /// Print a shell completion script (bash, zsh, fish) on stdout.
    #[command(
        allow_negative_numbers = true,
        after_help = "Examples:\n  tpsim completions bash > ~/.local/share/bash-completion/completions/tpsim\n  tpsim completions zsh > ~/.zfunc/_tpsim      # with fpath+=(~/.zfunc) in ~/.zshrc\n  tpsim completions fish > ~/.config/fish/completions/tpsim.fish"
    )]
    Completions(CompletionsArgs),
}

const SWEEP_EXAMPLES: &str = "Axes and their values:\n  --axis nodes --values 16,32,64                     nodes of --gpus-per-node GPUs\n  --axis params --values 70B,175B,512B               model size (GPT-style shape derived per point)\n  --axis gpu --values a100-sxm-80g,h100-sxm-80g      bundled GPU profiles or profile files\n  --axis network-bandwidth --values 12.5,25,50       inter-node GB/s per GPU (400 Gb/s NIC = 50)\n  --axis seq-len --values 2048,4096,8192             tokens per sequence\n  --axis global-batch --values 512,1024,2048         sequences per step\n  --axis cpu-offload-layers --values 0,20,40         layers whose activations go to host memory (0: none)\n\nExamples:\n  tpsim sweep --params 175B --axis nodes --values 16,32,64,128 --tokens 300B --price-per-gpu-hour 2.5\n  tpsim sweep --model llama3-70b --nodes 16 --axis gpu --values a100-sxm-80g,h100-sxm-80g,h200-sxm-141g --format csv > gpus.csv\n  tpsim sweep --params 512B --nodes 32 --axis network-bandwidth --values 12.5,25,50,100 --chart network.svg\n\nThe table goes to stdout; the progress bar (long sweeps, terminals only) and notes to stderr.";

const COMPARE_EXAMPLES: &str = "Examples:\n  tpsim compare --params 512B --nodes 32      # the two best distinct plans of a search\n  tpsim compare --plan plans/seed-512b-32nodes.yaml --plan plans/best-512b-32nodes.yaml --format json\n      # two saved plans (these two are bundled; save your own with `tpsim plan ... --save FILE`)\n\nPlans that differ only in their ZeRO stage are not distinct for the search: the runner-up differs in layout.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecomputeArg {
    None,
    Selective,
    Full,
}

impl From<RecomputeArg> for crate::plan::Recompute {
    fn from(arg: RecomputeArg) -> Self {
        match arg {
            RecomputeArg::None => crate::plan::Recompute::None,
            RecomputeArg::Selective => crate::plan::Recompute::Selective,
            RecomputeArg::Full => crate::plan::Recompute::Full,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StyleArg {
    Gpt,
    Llama,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionArg {
    Flash,
    Unfused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GradDtypeArg {
    Bf16,
    Fp32,
}

/// `--optimizer-states`: how parameters and Adam's states are stored (`training::OptimizerStates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerStatesArg {
    /// 16-bit weights, fp32 master weights and moments: 2 + 12 bytes per parameter (Megatron, DeepSpeed).
    Fp32,
    /// fp32 parameters that are the master, fp32 moments: 4 + 8 bytes (FSDP2 as torchtitan runs it).
    Fp32Params,
    /// bf16 weights, fp32 master as 16-bit remainders, bf16 moments: 2 + 6 bytes (Megatron-Core's
    /// precision-aware optimizer with bf16 exp_avg/exp_avg_sq).
    Bf16Moments,
    /// bf16 weights, fp32 master as 16-bit remainders, fp32 moments: 2 + 10 bytes (Megatron-Core's
    /// precision-aware optimizer at its default dtypes, --use-precision-aware-optimizer alone).
    PrecisionAware,
    /// bf16 weights, fp32 master and Muon's fp32 momentum: 2 + 8 bytes for the layers' weights,
    /// Adam's 2 + 12 for the embedding and output layer (Megatron-Core's --optimizer muon).
    Muon,
    /// bf16 parameters and moments, no master: 2 + 4 bytes (a bf16 model with torch.optim.Adam, NeMo AutoModel).
    Bf16,
}

impl OptimizerStatesArg {
    pub fn states(self) -> crate::training::OptimizerStates {
        use crate::training::OptimizerStates;
        match self {
            OptimizerStatesArg::Fp32 => OptimizerStates::Fp32,
            OptimizerStatesArg::Fp32Params => OptimizerStates::Fp32Params,
            OptimizerStatesArg::Bf16Moments => OptimizerStates::Bf16Moments,
            OptimizerStatesArg::PrecisionAware => OptimizerStates::PrecisionAware,
            OptimizerStatesArg::Muon => OptimizerStates::Muon,
            OptimizerStatesArg::Bf16 => OptimizerStates::Bf16,
        }
    }
}

/// `--moe-dispatcher` (`training::MoeDispatcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MoeDispatcherArg {
    /// One copy per routed (token, expert) pair.
    Alltoall,
    /// One copy per destination GPU (DeepEP).
    Deepep,
}

impl MoeDispatcherArg {
    pub fn dispatcher(self) -> crate::training::MoeDispatcher {
        match self {
            MoeDispatcherArg::Alltoall => crate::training::MoeDispatcher::Alltoall,
            MoeDispatcherArg::Deepep => crate::training::MoeDispatcher::Deepep,
        }
    }
}

/// `--moe-routing` (`training::MoeRouting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MoeRoutingArg {
    /// Independent of where the experts live (a trained router, forced balancing).
    Random,
    /// Token t takes experts t*k .. t*k+k-1 (NeMo AutoModel's fake balanced gate).
    RoundRobin,
}

impl MoeRoutingArg {
    pub fn routing(self) -> crate::training::MoeRouting {
        match self {
            MoeRoutingArg::Random => crate::training::MoeRouting::Random,
            MoeRoutingArg::RoundRobin => crate::training::MoeRouting::RoundRobin,
        }
    }
}

/// What to train: one of a size, a spec, or a shape.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Parameter count (512B, 1.5T, 70000M, 175e9); a GPT-style shape is derived and printed.
    #[arg(long, value_name = "COUNT", allow_hyphen_values = true, conflicts_with_all = ["model", "layers"])]
    pub params: Option<String>,
    /// Bundled model name (gpt3-175b, llama3-70b, deepseek-v3, qwen3-30b-a3b, mixtral-8x7b, ...) or a
    /// model YAML file. Shape flags override its values (--model grok-1 --layers 8).
    #[arg(long, value_name = "NAME|FILE")]
    pub model: Option<String>,
    /// Transformer layers (with --hidden and --heads; or over --model / --hf-config).
    #[arg(long, visible_alias = "num-layers")]
    pub layers: Option<u32>,
    /// Hidden size.
    #[arg(long, visible_alias = "hidden-size")]
    pub hidden: Option<u32>,
    /// Attention heads.
    #[arg(long, visible_alias = "num-attention-heads")]
    pub heads: Option<u32>,
    /// Key/value heads for grouped-query attention. Default: the model's; --heads with shape flags.
    #[arg(long, visible_alias = "num-query-groups")]
    pub kv_heads: Option<u32>,
    /// MLP hidden size. Default: the model's; with shape flags 4 x --hidden (with --gated-mlp,
    /// Megatron-LM's 8 x --hidden / 3 rounded down to a multiple of 64).
    #[arg(long, visible_alias = "ffn-hidden-size")]
    pub ffn_hidden: Option<u32>,
    /// Vocabulary size (default 51200 with shape flags).
    #[arg(long, visible_alias = "vocab-size")]
    pub vocab: Option<u32>,
    /// Gated MLP (SwiGLU: gate, up and down matrices).
    #[arg(long, visible_alias = "swiglu")]
    pub gated_mlp: bool,
    /// Block style for shape flags: gpt (biases, tied embeddings, learned positions, layernorm,
    /// dropout) or llama (none of those: RMSNorm, RoPE, untied output layer). Default: gpt.
    #[arg(long, value_enum)]
    pub style: Option<StyleArg>,
    /// A Hugging Face config.json (model_type llama, mistral, qwen2, qwen3, gemma, gpt2, gpt_neox,
    /// falcon, mixtral, qwen2_moe, qwen3_moe, deepseek_v3, kimi_k2, gpt_oss, glm4_moe, nemotron_h).
    /// Default --seq-len:
    /// 4096, a training length, or the config's position limit where that is shorter (GPT-2 1024, GPT-NeoX
    /// 2048); a longer max_position_embeddings is not used; shape flags override it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["params", "model"])]
    pub hf_config: Option<String>,
    /// Megatron-LM's switch that enables --num-query-groups (accepted so a launch line pastes).
    #[arg(long, hide = true)]
    pub group_query_attention: bool,
    /// Megatron-LM: linear layers without biases (Llama-style).
    #[arg(long, hide = true)]
    pub disable_bias_linear: bool,
    /// Megatron-LM: output layer not tied to the input embedding.
    #[arg(long, hide = true)]
    pub untie_embeddings_and_output_weights: bool,
    /// Megatron-LM: LayerNorm or RMSNorm.
    #[arg(long, hide = true, value_name = "NORM")]
    pub normalization: Option<String>,
    /// Megatron-LM: a norm over each query and key head (Qwen3).
    #[arg(long, hide = true)]
    pub qk_layernorm: bool,
    /// Megatron-LM: biases on the query/key/value projection with --disable-bias-linear (Qwen2).
    #[arg(long, hide = true)]
    pub add_qkv_bias: bool,
    /// Megatron-LM: dropout after attention and MLP (0 = none; default 0.1).
    #[arg(long, value_parser = crate::units::parse_finite_f64, hide = true, value_name = "P")]
    pub hidden_dropout: Option<f64>,
    /// Megatron-LM: attention dropout (accepted with --hidden-dropout; tpsim models both as one switch).
    #[arg(long, value_parser = crate::units::parse_finite_f64, hide = true, value_name = "P")]
    pub attention_dropout: Option<f64>,
    /// Megatron-LM: learned_absolute (default; --style llama: rope), rope, yarn, mrope, none, or
    /// BigScience's alibi. The rotary kinds run a kernel on Q and K in every layer (yarn and mrope
    /// unfused, as Megatron-LM runs them); learned_absolute adds an s·h table; alibi and none cost
    /// nothing.
    #[arg(long, hide = true, value_name = "KIND")]
    pub position_embedding_type: Option<String>,
    /// Megatron-LM: share of each head the rotary embedding rotates, in (0, 1] (default 1).
    #[arg(long, value_parser = crate::units::parse_finite_f64, hide = true, value_name = "SHARE")]
    pub rotary_percent: Option<f64>,
    /// Megatron-LM: base of the rotary frequencies, an integer (default 10000; Llama 3 500000).
    /// Prices nothing; `--emit` writes it back.
    #[arg(long, hide = true, value_name = "N")]
    pub rotary_base: Option<u64>,
    // --- Head dimension, mixture of experts, multi-head latent attention (Megatron-LM names). ---
    /// Width of one attention head where heads x head_dim != hidden (Qwen3, Gemma). Default: the
    /// model's; hidden / heads with shape flags.
    #[arg(long, visible_alias = "kv-channels", value_name = "N")]
    pub head_dim: Option<u32>,
    /// Routed experts per MoE layer (makes the model a mixture of experts).
    #[arg(long, value_name = "N")]
    pub num_experts: Option<u32>,
    /// Experts each token is routed to. Default: the model's; 2 (Megatron-LM's) with shape flags.
    #[arg(long, value_name = "K")]
    pub moe_router_topk: Option<u32>,
    /// MLP width of one routed expert. Default: the model's; --ffn-hidden-size with shape flags.
    #[arg(long, value_name = "N")]
    pub moe_ffn_hidden_size: Option<u32>,
    /// MLP width of the shared experts together (DeepSeek: shared experts x expert width); 0 = none.
    /// Default: the model's; 0 with shape flags.
    #[arg(long, value_name = "N")]
    pub moe_shared_expert_intermediate_size: Option<u32>,
    /// Which layers are MoE: N (every N-th layer) or a list such as "[0]*3+[1]*58". Default: the
    /// model's; 1 (every layer) with shape flags, as Megatron-LM's.
    #[arg(long, value_name = "N|LIST")]
    pub moe_layer_freq: Option<String>,
    /// Megatron-LM: a sigmoid gate on the shared experts' output (Qwen1.5-MoE, Qwen2-MoE).
    #[arg(long, hide = true)]
    pub moe_shared_expert_gate: bool,
    /// Megatron-LM: the experts' gated activation clamped at this limit (GPT-OSS: 7.0), as an
    /// emitted launch line pastes it.
    #[arg(long, hide = true, value_name = "LIMIT", allow_hyphen_values = true)]
    pub activation_func_clamp_value: Option<f64>,
    /// Dense layers before the first MoE layer (DeepSeek's first_k_dense_replace). Default: the
    /// model's; 0 with shape flags.
    #[arg(long, value_name = "K")]
    pub moe_first_k_dense_replace: Option<u32>,
    /// Group-limited routing: the experts split into this many groups (DeepSeek-V3: 8); give it
    /// with --moe-router-group-topk. 0 = no group limit.
    #[arg(long, value_name = "G")]
    pub moe_router_num_groups: Option<u32>,
    /// Groups a token's experts may come from under group-limited routing (DeepSeek-V3: 4).
    /// 0 = no group limit.
    #[arg(long, value_name = "T")]
    pub moe_router_group_topk: Option<u32>,
    /// Sliding-window attention: each query sees itself and the TOKENS − 1 keys before it
    /// (Megatron `--window-size (TOKENS-1,0)`; HF `sliding_window`); 0 = full attention.
    #[arg(long, value_name = "TOKENS")]
    pub attention_window: Option<u32>,
    /// Megatron-LM's spelling of the sliding window, "(TOKENS-1,0)" (accepted so an emitted
    /// launch line pastes; --attention-window is tpsim's).
    #[arg(
        long,
        hide = true,
        value_name = "(LEFT,0)",
        conflicts_with = "attention_window"
    )]
    pub window_size: Option<String>,
    /// With a sliding window, every N-th layer keeps full attention (Megatron's name; GPT-OSS: 2);
    /// 0 = every layer is local.
    #[arg(long, value_name = "N")]
    pub window_attn_skip_freq: Option<u32>,
    /// Multi-token prediction depths after the last layer (DeepSeek-V3 trains with 1; default:
    /// the model's, 0 for bundled models).
    #[arg(long, visible_alias = "mtp-num-layers", value_name = "N")]
    pub mtp_layers: Option<u32>,
    /// Multi-head latent attention: rank of the query down-projection (omit for none).
    #[arg(long, value_name = "N")]
    pub q_lora_rank: Option<u32>,
    /// Multi-head latent attention: rank of the shared key/value latent (enables MLA).
    #[arg(long, value_name = "N")]
    pub kv_lora_rank: Option<u32>,
    /// Multi-head latent attention: per-head query/key width without RoPE (default 128).
    #[arg(long, value_name = "N")]
    pub qk_head_dim: Option<u32>,
    /// Multi-head latent attention: per-head RoPE query/key width (default 64).
    #[arg(long, value_name = "N")]
    pub qk_pos_emb_head_dim: Option<u32>,
    /// Multi-head latent attention: per-head value width (default 128).
    #[arg(long, value_name = "N")]
    pub v_head_dim: Option<u32>,
}

/// Where to train.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Number of nodes (required; their GPUs: --gpus-per-node).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// GPUs per node (default: the GPU profile's: 8 for the bundled HGX/DGX profiles, 4 for
    /// gb200-nvl72 and gb300-nvl72, one compute tray).
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    /// A total GPU count as torchrun and Slurm users give it (`--gpus`, `--num-gpus`,
    /// `--world-size`): not a flag of tpsim's, which sizes a cluster as --nodes of
    /// --gpus-per-node; accepted only to be refused with the --nodes that gives that many GPUs
    /// (`scenario::refuse_gpu_count`), where clap would suggest `--gpu`, the GPU type.
    #[arg(long, hide = true, value_name = "N")]
    pub gpus: Option<String>,
    /// `--num-gpus N`: as `--gpus`, refused with the --nodes that gives N GPUs.
    #[arg(long, hide = true, value_name = "N")]
    pub num_gpus: Option<String>,
    /// `--world-size N`: as `--gpus`, refused with the --nodes that gives N GPUs.
    #[arg(long, hide = true, value_name = "N")]
    pub world_size: Option<String>,
    /// Bundled GPU profile (a100-sxm-80g, a100-sxm-40g, h100-sxm-80g, h100-sxm-96g-500w, h200-sxm-141g, h800-sxm-80g,
    /// b200-sxm-180g, b300-sxm-288g, gb200-nvl72, gb300-nvl72, jean-zay-a100-80g) or a profile
    /// YAML file. Default: h100-sxm-80g. A bundled profile's numbers (peaks, memory, links,
    /// efficiencies) are in clusters/NAME.yaml, each with its source there.
    #[arg(long, value_name = "NAME|FILE")]
    pub gpu: Option<String>,
    /// A calibrated profile written by `tpsim calibrate`, used instead of --gpu (it already carries
    /// the numbers of the --gpu profile it was measured against, so the two are not given together).
    #[arg(long, value_name = "FILE", conflicts_with = "gpu")]
    pub calibration: Option<String>,
    /// Hold every plan below this much memory per GPU, in GiB: room for what runs beside the
    /// training (a profiler, CUDA graphs, another process) or for tpsim's memory error. Plans are
    /// checked, and memory is printed, against it; at least 1 (the least a GPU profile has).
    /// Default: the GPU's capacity.
    #[arg(long, value_parser = crate::units::parse_finite_f64, value_name = "GIB", allow_negative_numbers = true)]
    pub max_memory_gib: Option<f64>,
}

/// How to train.
#[derive(Debug, Clone, Args)]
pub struct TrainingArgs {
    /// Megatron-Core's gradient-accumulation fusion as a pasted Megatron flag set it (`eval
    /// --no-gradient-accumulation-fusion`); not a flag of its own.
    #[arg(skip)]
    pub gradient_accumulation_fusion: Option<bool>,
    /// Megatron-Core's RoPE fusion as a pasted Megatron flag set it (`eval --no-rope-fusion`); not
    /// a flag of its own.
    #[arg(skip)]
    pub rope_fusion: Option<bool>,
    /// Tokens per sequence (default: the model's training length; 2048 for --params and shape flags).
    #[arg(long, visible_alias = "seq-length")]
    pub seq_len: Option<u32>,
    /// Sequences per optimizer step across all replicas (default GPT-3 175B's 3.1M tokens per step,
    /// Brown et al. 2020: 1536 sequences at its 2048 tokens each, 24 at --seq-len 131072; a note
    /// names the sequences and tokens per step).
    #[arg(long, visible_alias = "global-batch-size")]
    pub global_batch: Option<u32>,
    /// torchtitan's (and NeMo AutoModel's) local_batch_size: sequences per data-parallel rank in
    /// one pipeline schedule; the step runs global-batch / (dp x local-batch) schedules one after
    /// the other, each with its own fill and drain; without a pipeline (pp 1) each is one forward
    /// and backward of the whole local batch, the micro-batch. Default: one schedule per step.
    #[arg(long, value_name = "SEQUENCES", visible_alias = "local-batch-size")]
    pub local_batch: Option<u32>,
    /// Gradient precision: bf16 (2 bytes) or fp32 (4 bytes, Megatron's main_grad). Default: the
    /// framework's (fp32 for megatron-core and torchtitan, bf16 for deepspeed and megatron-lm-2021).
    #[arg(long, value_enum)]
    pub grad_dtype: Option<GradDtypeArg>,
    /// How parameters and Adam's states are stored. Default: the framework's (fp32-params for
    /// torchtitan, fp32 for the others).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub optimizer_states: Option<OptimizerStatesArg>,
    /// Attention kernel: flash (FlashAttention: scores never stored, recomputed in backward) or unfused
    /// (Megatron-LM 2021: s x s scores materialised; what the published A100 runs used).
    /// Default: flash.
    #[arg(long, value_enum)]
    pub attention: Option<AttentionArg>,
    /// Tokens to train on (e.g. 300B), to print the time to train.
    // A negative count reaches the range check in `parse_count`, as --params does, rather than
    // clap's "unexpected argument".
    #[arg(long, value_name = "COUNT", allow_hyphen_values = true)]
    pub tokens: Option<String>,
    /// Price of one GPU for one hour (e.g. 2.5 for $2.50), for the cost to train --tokens: the
    /// time to train x the GPUs x this price, in the price's currency.
    // A negative price reaches the range check in `price_per_gpu_hour_of`, rather than clap's
    // "unexpected argument".
    #[arg(long, value_parser = crate::units::parse_finite_f64, value_name = "PRICE", allow_negative_numbers = true)]
    pub price_per_gpu_hour: Option<f64>,
    /// Training framework whose behaviour to model: its communication overlap, gradient dtype and
    /// which ZeRO/FSDP shapes it runs with pipelines. Default: megatron-core.
    #[arg(long, value_enum)]
    pub framework: Option<FrameworkArg>,
    /// GEMM precision: bf16, fp8 (per-tensor scaling), mxfp8 or nvfp4 (Blackwell only). Attention,
    /// norms and element-wise kernels stay bf16. Default: bf16.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
    /// How --precision fp8 scales its tensors: current (each tensor's own amax, computed before the
    /// cast: Transformer Engine's Float8CurrentScaling, Megatron-LM --fp8-recipe tensorwise,
    /// torchao) or delayed (the amax history of earlier steps: Megatron-LM --fp8-recipe delayed,
    /// NeMo 2's FP8 recipes). Changes the casts' memory traffic. Default: current.
    #[arg(long, value_enum, value_name = "RECIPE")]
    pub fp8_scaling: Option<Fp8ScalingArg>,
    /// Keep the first and last transformer layers' GEMMs in bf16 under --precision fp8, mxfp8 or
    /// nvfp4 (Megatron-Core's --first-last-layers-bf16, as NVIDIA's NVFP4 recipes run: Nemotron 3
    /// Super its last 14 layers). How many at each end: --num-layers-at-start-in-bf16 and
    /// --num-layers-at-end-in-bf16, 1 each by default (Megatron-Core's).
    #[arg(long)]
    pub first_last_layers_bf16: bool,
    /// With --first-last-layers-bf16: the first N transformer layers in bf16. Default: 1.
    #[arg(long, value_name = "N")]
    pub num_layers_at_start_in_bf16: Option<u32>,
    /// With --first-last-layers-bf16: the last N transformer layers in bf16. Default: 1.
    #[arg(long, value_name = "N")]
    pub num_layers_at_end_in_bf16: Option<u32>,
    /// TP communication overlap (Megatron-Core userbuffers / torchtitan async TP; needs
    /// --sequence-parallel). Default: the framework's (on for megatron-core).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub tp_comm_overlap: Option<bool>,
    /// Bucketed gradient reduction during backward. Default: the framework's (on, except under
    /// megatron-lm-2021, whose DDP all-reduces the gradients after the last backward).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub overlap_grad_reduce: Option<bool>,
    /// Distributed-optimizer parameter all-gather under the next forward. Default: the framework's
    /// (on for megatron-core and torchtitan).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub overlap_param_gather: Option<bool>,
    /// MoE routing imbalance: tokens of the busiest expert over the balanced share (>= 1; default
    /// 1.0, balanced, as the published MoE benchmarks force).
    #[arg(long, value_parser = crate::units::parse_finite_f64, value_name = "F")]
    pub moe_imbalance: Option<f64>,
    /// MoE expert capacity factor (Megatron `--moe-expert-capacity-factor`): tokens over
    /// F x the balanced share of an expert are dropped, so the busiest expert's load is capped at F.
    /// Default: none (dropless).
    #[arg(long, value_parser = crate::units::parse_finite_f64, value_name = "F", visible_alias = "moe-expert-capacity-factor")]
    pub moe_capacity_factor: Option<f64>,
    /// MoE token dispatcher: alltoall (one copy per routed token and expert; Megatron-Core's
    /// alltoall dispatcher) or deepep (one copy per destination GPU; Megatron-Core's flex
    /// dispatcher with DeepEP, NeMo AutoModel's `dispatcher: deepep`). Default: alltoall.
    #[arg(long, value_enum, value_name = "KIND")]
    pub moe_dispatcher: Option<MoeDispatcherArg>,
    /// Which experts a token's top-k land on: random (a trained router; Megatron-Core's forced
    /// balancing) or round-robin (neighbouring experts, NeMo AutoModel's fake balanced gate in its
    /// benchmarks). Changes what deepep sends. Default: random.
    #[arg(long, value_enum, value_name = "PATTERN")]
    pub moe_routing: Option<MoeRoutingArg>,
    /// Pipeline sends overlapped with compute in the interleaved schedule. Default: the
    /// framework's (on for megatron-core).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", visible_alias = "overlap-p2p-communication")]
    pub overlap_p2p_comm: Option<bool>,
    /// MoE all-to-alls of one micro-batch hidden under another's compute (Megatron-Core's combined
    /// 1F1B schedule; needs --vpp > 1 when --pp > 1, and no full recompute; plans without that
    /// run the all-to-alls exposed). Default: off, as Megatron-Core's.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", visible_alias = "moe-a2a-overlap")]
    pub overlap_moe_expert_parallel_comm: Option<bool>,
    /// torchtitan only: whether torch.compile fuses each block's element-wise kernels
    /// (torchtitan's `compile` setting). Default: false, as torchtitan's: eager PyTorch runs norms,
    /// rotary embedding and activation as one kernel per operator with fp32 upcasts.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub torch_compile: Option<bool>,
    /// How context parallelism exchanges K/V: kv-ring (Transformer Engine's point-to-point ring,
    /// Megatron-Core's cp_comm_type p2p; also NeMo AutoModel's TE attention), kv-all-gather
    /// (cp_comm_type all_gather: K/V gathered, exposed; runs sliding windows), head-all-to-all
    /// (cp_comm_type a2a, Ulysses: heads split over the CP ranks, which must divide each TP rank's
    /// query and K/V heads; DeepSpeed's only exchange, its Ulysses repeating K/V heads where there
    /// are fewer than CP ranks), or torch-all-gather (PyTorch's context_parallel as torchtitan runs
    /// it: K/V repeated to every query head and all-gathered, fp32 merges; torchtitan only).
    /// Default: the framework's.
    #[arg(long, value_enum, value_name = "KIND")]
    pub cp_exchange: Option<CpExchangeArg>,
    /// The pipeline schedule: 1f1b (PipeDream-Flush, interleaved over --vpp chunks when --vpp > 1;
    /// every framework's), zbv (zero-bubble ZB-V, torchtitan's ZBVZeroBubble: two chunks per GPU
    /// in a V, the weight gradients split from the backward to fill the bubble; needs --vpp 2) or
    /// dualpipev (torchtitan's DualPipeV: the same V, DeepSeek's DualPipe order; needs --vpp 2 and
    /// at least 2 x --pp micro-batches per schedule). zbv and dualpipev are torchtitan's only
    /// (--framework torchtitan), eager only (PyTorch splits the backward without torch.compile);
    /// `plan` then searches pipelined plans with vpp 2, beside plans without a pipeline (pp 1,
    /// which run no schedule; `eval` says so). Torchtitan's names (ZBVZeroBubble, DualPipeV,
    /// Interleaved1F1B) are read too. Default: 1f1b
    #[arg(long, value_name = "SCHEDULE", value_parser = crate::training::PipelineSchedule::parse)]
    pub pp_schedule: Option<crate::training::PipelineSchedule>,
    /// Offload the activations of the first N transformer layers to host memory during the
    /// forward and copy them back for the backward (Megatron-LM's --cpu-offloading-num-layers N,
    /// which turns Megatron-Core's cpu_offloading on; Transformer Engine's CPU offload context):
    /// at its peak the GPU keeps the other layers' activations (Transformer Engine's default
    /// synchronizer), the host the N offloaded ones, within the profile's
    /// host_memory_gib_per_gpu; each copy runs beside the next layers' compute over the GPU's
    /// host link (PCIe, NVLink-C2C on GB200/GB300) and what it cannot hide is exposed.
    /// Megatron-Core only, below the model's layer count, without a pipeline (pp 1) and without
    /// recompute; `plan` then searches only such plans. Default: 0
    #[arg(long, visible_alias = "cpu-offloading-num-layers", value_name = "N")]
    pub cpu_offload_layers: Option<u32>,
    /// What selective recompute recomputes under Megatron-Core (its --recompute-modules, with
    /// --recompute-granularity selective): one or more of core_attn, moe_act, layernorm,
    /// mla_up_proj, mlp, moe, shared_experts, separated by spaces or commas. Default: the
    /// output-discarding modules the model has (layernorm, mla_up_proj with latent attention,
    /// moe_act with experts), as the training line names them; core_attn, Megatron-Core's own
    /// default, for a dense model without latent attention, and for a plan file or pasted launch
    /// line that names no modules. `eval` then recomputes selectively
    /// unless --recompute says otherwise; `plan` searches selective recompute as these modules.
    #[arg(long, value_name = "MODULE", num_args = 1..)]
    pub recompute_modules: Option<Vec<String>>,
}

/// `--fp8-scaling` (`training::Fp8Scaling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fp8ScalingArg {
    Delayed,
    Current,
}

impl Fp8ScalingArg {
    pub fn scaling(self) -> crate::training::Fp8Scaling {
        match self {
            Fp8ScalingArg::Delayed => crate::training::Fp8Scaling::Delayed,
            Fp8ScalingArg::Current => crate::training::Fp8Scaling::Current,
        }
    }
}

/// `--cp-exchange` (`training::CpExchange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpExchangeArg {
    KvRing,
    TorchAllGather,
    KvAllGather,
    HeadAllToAll,
}

impl CpExchangeArg {
    /// The exchange the flag names.
    pub fn exchange(self) -> crate::training::CpExchange {
        use crate::training::CpExchange;
        match self {
            CpExchangeArg::KvRing => CpExchange::KvRing,
            CpExchangeArg::TorchAllGather => CpExchange::TorchAllGather,
            CpExchangeArg::KvAllGather => CpExchange::KvAllGather,
            CpExchangeArg::HeadAllToAll => CpExchange::HeadAllToAll,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FrameworkArg {
    #[value(name = "megatron-lm-2021")]
    MegatronLm2021,
    MegatronCore,
    Torchtitan,
    Deepspeed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    Bf16,
    Fp8,
    Mxfp8,
    Nvfp4,
}

/// Dimensions a user has already chosen: `plan` searches only plans with these values.
#[derive(Debug, Clone, Args)]
pub struct PinArgs {
    /// Pin the tensor-parallel degree. Default: searched.
    #[arg(long, visible_alias = "tensor-model-parallel-size")]
    pub tp: Option<u32>,
    /// Pin the pipeline-parallel degree. Default: searched.
    #[arg(long, visible_alias = "pipeline-model-parallel-size")]
    pub pp: Option<u32>,
    /// Pin the context-parallel degree. Default: searched.
    #[arg(long, visible_alias = "context-parallel-size")]
    pub cp: Option<u32>,
    /// Pin the data-parallel degree. Default: searched.
    #[arg(long)]
    pub dp: Option<u32>,
    /// Pin the virtual pipeline stages per GPU. Default: searched.
    #[arg(long)]
    pub vpp: Option<u32>,
    /// Pin the micro-batch size (the table's `mb` column, also accepted as `--mb`). Default: searched.
    #[arg(long, visible_aliases = ["micro-batch-size", "mb"])]
    pub micro_batch: Option<u32>,
    /// Pin activation recomputation. Default: searched.
    #[arg(long, value_enum)]
    pub recompute: Option<RecomputeArg>,
    /// Pin full recompute of N layers of each model chunk (Megatron's --recompute-method block
    /// --recompute-num-layers N; the table's `full N/L`); implies --recompute full. Default:
    /// searched.
    #[arg(long, value_name = "N")]
    pub recompute_num_layers: Option<u32>,
    /// Pin the ZeRO stage (3 = FSDP). Default: searched.
    #[arg(long)]
    pub zero: Option<u8>,
    /// Pin sequence parallelism on (`--sequence-parallel`, or `true`) or off (`false`); the
    /// table's `sp` column, also accepted as `--sp`. Default: searched.
    #[arg(
        long,
        visible_alias = "sp",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub sequence_parallel: Option<bool>,
    /// Pin the expert-parallel degree (MoE models). Default: searched.
    #[arg(long, visible_alias = "expert-model-parallel-size")]
    pub ep: Option<u32>,
    /// Pin the expert tensor-parallel degree (MoE models). Default: searched.
    #[arg(long, visible_alias = "expert-tensor-parallel-size")]
    pub etp: Option<u32>,
    /// Pin ZeRO-3/FSDP resharding after forward (FSDP2 reshard_after_forward) to true or false;
    /// implies --zero 3. Default: searched.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub reshard_after_forward: Option<bool>,
    /// Pin the copies of the ZeRO-sharded states (hybrid sharding: each copy sharded over
    /// dp x cp / N ranks, the copies all-reducing their gradient shards); Megatron-Core's
    /// --num-distributed-optimizer-instances, torchtitan's HSDP replicate degree. Default: searched.
    #[arg(
        long,
        value_name = "N",
        visible_alias = "num-distributed-optimizer-instances"
    )]
    pub dp_replicas: Option<u32>,
}

/// The plans `plan` prints without `--top`; a report numbers its bars as that list does.
pub const PLAN_TOP_DEFAULT: usize = 10;

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// How many plans to print (at most 1000).
    #[arg(long, default_value_t = PLAN_TOP_DEFAULT)]
    pub top: usize,
    /// Also consider pipeline splits with unequal layers per stage; without interleaving, each
    /// such plan keeps the first/last stage split with the fastest step.
    #[arg(long)]
    pub allow_uneven_pp: bool,
    /// Also consider tensor parallelism across nodes (slow: every layer's all-reduce crosses the network).
    #[arg(long)]
    pub allow_cross_node_tp: bool,
    /// Write the best plan to FILE (the format `eval --plan` reads).
    #[arg(long, value_name = "FILE")]
    pub save: Option<String>,
    /// Worker threads (default: all cores; at most 1024).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write DIR/index.html and one SVG per figure (created if missing).
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// Output: table (for reading), json or yaml (for a program: every field named with its unit,
    /// `time.step_s` seconds, `memory.total_bytes` bytes, `tokens_per_s`; ratios such as `mfu` and
    /// `bubble_share` are fractions of 1, the table's % over 100; `cost_to_train` is in the currency
    /// of --price-per-gpu-hour). README.md, "JSON output", lists the fields.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Print the best plan this framework can run as its launch configuration, instead of the table.
    #[arg(long, value_enum, value_name = "FRAMEWORK", conflicts_with_all = ["report", "format", "top"])]
    pub emit: Option<EmitTarget>,
    #[command(flatten)]
    pub pins: PinArgs,
}

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// A saved plan (plans/*.yaml); flags given here override its values, scenario (--nodes, --gpu, ...)
    /// and plan (--tp, --pp, --dp, --vpp, --micro-batch, --sequence-parallel, --recompute, --zero) alike.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<String>,
    /// Tensor-parallel degree. Default: 1 (give at least one of --tp, --pp, --dp, --cp and --ep, or --plan).
    #[arg(long, visible_alias = "tensor-model-parallel-size")]
    pub tp: Option<u32>,
    /// Pipeline-parallel degree. Default: 1 (give at least one of --tp, --pp, --dp, --cp and --ep, or --plan).
    #[arg(long, visible_alias = "pipeline-model-parallel-size")]
    pub pp: Option<u32>,
    /// Context-parallel degree: the sequence split over cp ranks (DeepSpeed-Ulysses's
    /// sequence_parallel_size in the deepspeed framework). Default: 1 (how they exchange K/V:
    /// --cp-exchange).
    #[arg(long, visible_alias = "context-parallel-size")]
    pub cp: Option<u32>,
    /// Expert-parallel degree (MoE models): experts spread over ep GPUs of a stage. Default: 1.
    #[arg(long, visible_alias = "expert-model-parallel-size")]
    pub ep: Option<u32>,
    /// Expert tensor-parallel degree (MoE models): each expert split over etp GPUs. Default: the
    /// tensor-parallel degree, as Megatron-Core's --expert-tensor-parallel-size; under
    /// --framework torchtitan 1 when --ep > 1 (its experts stay whole on the EP ranks).
    #[arg(long, visible_alias = "expert-tensor-parallel-size")]
    pub etp: Option<u32>,
    /// ZeRO-3/FSDP: free gathered parameters after each forward and gather them again for the
    /// backward (FSDP2 reshard_after_forward). Implies --zero 3 when no ZeRO stage is given.
    /// Default: true.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub reshard_after_forward: Option<bool>,
    /// Copies of the ZeRO-sharded states (hybrid sharding): each copy sharded over dp x cp / N
    /// ranks, the copies all-reducing their gradient shards (Megatron-Core's
    /// --num-distributed-optimizer-instances, torchtitan's HSDP data_parallel_replicate_degree).
    /// Needs --zero 1, 2 or 3. Default: 1.
    #[arg(
        long,
        value_name = "N",
        visible_alias = "num-distributed-optimizer-instances"
    )]
    pub dp_replicas: Option<u32>,
    /// Data-parallel degree (default: GPUs / (tp x cp x pp)).
    #[arg(long)]
    pub dp: Option<u32>,
    /// Virtual pipeline stages per GPU (interleaved 1F1B). Default: 1 (no interleaving).
    #[arg(long)]
    pub vpp: Option<u32>,
    /// Sequences per micro-batch (a `tpsim plan` row's `mb`, also accepted as `--mb`). Default: 1.
    #[arg(long, visible_aliases = ["micro-batch-size", "mb"])]
    pub micro_batch: Option<u32>,
    /// Sequence parallelism (needs --tp > 1): `--sequence-parallel` or `true` on, `false` off
    /// (over a plan file's). Default: off, but on for a mixture-of-experts model at --tp > 1
    /// under megatron-core, which trains MoE layers under TP only with it. A `tpsim plan` row's
    /// `sp`, also accepted as `--sp`.
    #[arg(
        long,
        visible_alias = "sp",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub sequence_parallel: Option<bool>,
    /// Activation recomputation. Default: none (selective with --recompute-modules, full with
    /// --recompute-num-layers), as Megatron-LM without --recompute-granularity.
    #[arg(long, visible_alias = "recompute-granularity", value_enum)]
    pub recompute: Option<RecomputeArg>,
    /// ZeRO stage 0-3. Default: 0 (1 with --use-distributed-optimizer), as Megatron-LM.
    #[arg(long)]
    pub zero: Option<u8>,
    /// Allow unequal layers per pipeline stage.
    #[arg(long)]
    pub allow_uneven_pp: bool,
    /// Allow tensor parallelism across nodes.
    #[arg(long)]
    pub allow_cross_node_tp: bool,
    /// Also write DIR/index.html and one SVG per figure (created if missing).
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// Output: table (for reading), json or yaml (for a program: every field named with its unit,
    /// `time.step_s` seconds, `memory.total_bytes` bytes, `tokens_per_s`; ratios such as `mfu` and
    /// `bubble_share` are fractions of 1, the table's % over 100; `cost_to_train` is in the currency
    /// of --price-per-gpu-hour). README.md, "JSON output", lists the fields.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Megatron-LM's layers per virtual stage; tpsim's --vpp = layers / pp / this.
    #[arg(long, value_name = "N", value_parser = layers_per_virtual_stage, conflicts_with_all = ["vpp", "plan"])]
    pub num_layers_per_virtual_pipeline_stage: Option<u32>,
    /// Megatron-LM's distributed optimizer (optimizer states sharded over dp): ZeRO-1.
    #[arg(long, conflicts_with_all = ["zero", "plan"])]
    pub use_distributed_optimizer: bool,
    /// Megatron-LM's recompute method with --recompute full: uniform (with
    /// --recompute-num-layers 1) recomputes every layer, block recomputes --recompute-num-layers of each model chunk;
    /// uniform with more than one layer per chunk is refused.
    #[arg(long, hide = true, value_name = "METHOD")]
    pub recompute_method: Option<String>,
    /// Full recompute of N layers of each model chunk (Megatron's block method; the table's
    /// `full N/L`); implies --recompute full. With Megatron-LM's --recompute-method (uniform: the
    /// layers per recompute chunk) it implies nothing, as in Megatron-LM: give --recompute full too.
    #[arg(long, value_name = "N")]
    pub recompute_num_layers: Option<u32>,
    /// Megatron-LM's --max-position-embeddings: accepted; --seq-length sets the sequence.
    #[arg(long, hide = true, value_name = "N")]
    pub max_position_embeddings: Option<u32>,
    /// Megatron-LM's --bf16: bf16 mixed precision, with fp32 gradients unless --grad-reduce-in-bf16
    /// (Megatron-LM arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16).
    #[arg(long, hide = true)]
    pub bf16: bool,
    /// Megatron-LM's --grad-reduce-in-bf16: --grad-dtype bf16 (what `--emit megatron` writes).
    #[arg(long, hide = true, conflicts_with_all = ["grad_dtype", "accumulate_allreduce_grads_in_fp32"])]
    pub grad_reduce_in_bf16: bool,
    /// Megatron-Core's attention backend: flash|fused|auto = --attention flash, unfused|local =
    /// --attention unfused (what `--emit megatron` writes).
    #[arg(
        long,
        hide = true,
        value_name = "BACKEND",
        conflicts_with = "attention"
    )]
    pub attention_backend: Option<String>,
    /// Megatron-LM's fp32 gradient buffer: --grad-dtype fp32 (what `--emit megatron` writes).
    #[arg(long, hide = true, conflicts_with = "grad_dtype")]
    pub accumulate_allreduce_grads_in_fp32: bool,
    /// Megatron-LM's Megatron-FSDP: ZeRO by --data-parallel-sharding-strategy (default
    /// optim_grads_params = ZeRO-3, optim_grads = ZeRO-2), what `--emit megatron` writes.
    #[arg(long, hide = true, conflicts_with_all = ["zero", "plan", "use_distributed_optimizer"])]
    pub use_megatron_fsdp: bool,
    /// Megatron-LM's Megatron-FSDP sharding strategy (no_shard, optim, optim_grads, optim_grads_params).
    #[arg(
        long,
        hide = true,
        value_name = "STRATEGY",
        requires = "use_megatron_fsdp"
    )]
    pub data_parallel_sharding_strategy: Option<String>,
    /// Megatron-LM's torch FSDP2: ZeRO-3 (without pipeline parallelism).
    #[arg(long, hide = true, conflicts_with_all = ["zero", "plan", "use_distributed_optimizer", "use_megatron_fsdp"])]
    pub use_torch_fsdp2: bool,
    /// Megatron-LM: the embedding counts as a layer in the pipeline split (what `--emit megatron`
    /// writes for tpsim's uneven split).
    #[arg(long, hide = true, conflicts_with = "plan")]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Megatron-LM: the loss counts as a layer in the pipeline split.
    #[arg(long, hide = true, conflicts_with = "plan")]
    pub account_for_loss_in_pipeline_split: bool,
    /// Transformer layers on the first pipeline stage, the middle stages sharing the rest
    /// (Megatron-LM's flag; with --decoder-last-pipeline-num-layers, the split a `plan` row's
    /// `layers` column and its "layers per stage" line show).
    #[arg(long, value_name = "N", conflicts_with = "plan")]
    pub decoder_first_pipeline_num_layers: Option<u32>,
    /// Transformer layers on the last pipeline stage (Megatron-LM's flag; see
    /// --decoder-first-pipeline-num-layers).
    #[arg(long, value_name = "N", conflicts_with = "plan")]
    pub decoder_last_pipeline_num_layers: Option<u32>,
    /// Megatron-Core: the layers of each model chunk, e.g. 'Et*4|t*4|t*1mL' (its chunks over
    /// --pp set the virtual stages).
    #[arg(long, hide = true, value_name = "LAYOUT", conflicts_with_all = ["plan", "num_layers_per_virtual_pipeline_stage", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"])]
    pub pipeline_model_parallel_layout: Option<String>,
    /// Megatron-Core: the weight-gradient GEMMs delayed for the MoE all-to-all overlap (written
    /// with --overlap-moe-expert-parallel-comm, which it requires).
    #[arg(long, hide = true, conflicts_with = "plan")]
    pub delay_wgrad_compute: bool,
    /// Megatron-LM's --no-gradient-accumulation-fusion: the weight gradients are added into
    /// main_grad by a backward hook instead of inside the GEMMs (what `--emit megatron` writes;
    /// Megatron-FSDP lines carry it, as its user guide requires, and run unfused either way).
    #[arg(long, hide = true, conflicts_with = "plan")]
    pub no_gradient_accumulation_fusion: bool,
    /// Megatron-LM's --no-rope-fusion: rotary embeddings by separate PyTorch operators instead of
    /// Transformer Engine's fused kernel (what `--emit megatron` writes when the plan runs so).
    #[arg(long, hide = true, conflicts_with = "plan")]
    pub no_rope_fusion: bool,
    // ---- Megatron-LM precision and overlap arguments pasted on eval (what `--emit megatron`
    // writes); read like the --megatron-args reader reads them.
    /// Megatron-LM's --fp8-format (e4m3|hybrid): FP8 GEMMs, recipe from --fp8-recipe.
    #[arg(long, hide = true, value_name = "FORMAT", conflicts_with_all = ["precision", "megatron_args"])]
    pub fp8_format: Option<String>,
    /// Megatron-LM's --fp8-recipe (tensorwise|delayed = --precision fp8, mxfp8 = mxfp8).
    #[arg(
        long,
        hide = true,
        value_name = "RECIPE",
        conflicts_with = "megatron_args"
    )]
    pub fp8_recipe: Option<String>,
    /// Megatron-LM's --fp8-param-gather: FP8 weights are the parameters the all-gather moves.
    #[arg(long, hide = true, conflicts_with = "megatron_args")]
    pub fp8_param_gather: bool,
    /// Megatron-LM's --fp4-format (e2m1): NVFP4 GEMMs.
    #[arg(long, hide = true, value_name = "FORMAT", conflicts_with_all = ["precision", "megatron_args"])]
    pub fp4_format: Option<String>,
    /// Megatron-LM's --fp4-recipe (nvfp4).
    #[arg(
        long,
        hide = true,
        value_name = "RECIPE",
        conflicts_with = "megatron_args"
    )]
    pub fp4_recipe: Option<String>,
    /// Megatron-LM's --fp4-param-gather.
    #[arg(long, hide = true, conflicts_with = "megatron_args")]
    pub fp4_param_gather: bool,
    /// Megatron-LM's --no-overlap-p2p-communication: --overlap-p2p-comm false.
    #[arg(long, hide = true, conflicts_with_all = ["overlap_p2p_comm", "megatron_args"])]
    pub no_overlap_p2p_communication: bool,
    /// Megatron-LM's --ckpt-format (Megatron-FSDP needs fsdp_dtensor): accepted; checkpoint files
    /// change neither memory nor step time.
    #[arg(
        long,
        hide = true,
        value_name = "FORMAT",
        conflicts_with = "megatron_args"
    )]
    pub ckpt_format: Option<String>,
    // ---- pasted Megatron-LM mixture-of-experts and latent-attention switches (what `--emit
    // megatron` writes next to --num-experts and --kv-lora-rank; checked in the eval command).
    /// Megatron-LM's --moe-grouped-gemm: the grouped expert GEMMs tpsim models.
    #[arg(long, hide = true, conflicts_with = "megatron_args")]
    pub moe_grouped_gemm: bool,
    /// Megatron-LM's --moe-router-padding-for-fp8 (alias --moe-router-padding-for-quantization):
    /// each expert's rows padded to the low-precision GEMM alignment in the routing map before the
    /// all-to-all (`training::MoeDispatch::router_padding`); without it the experts pad after it.
    #[arg(
        long,
        hide = true,
        alias = "moe-router-padding-for-quantization",
        conflicts_with = "megatron_args"
    )]
    pub moe_router_padding_for_fp8: bool,
    /// Megatron-LM's --moe-token-dispatcher-type: tpsim models alltoall.
    #[arg(
        long,
        hide = true,
        value_name = "KIND",
        conflicts_with = "megatron_args"
    )]
    pub moe_token_dispatcher_type: Option<String>,
    /// Megatron-LM's --moe-flex-dispatcher-backend: refused when pasted (tpsim's --moe-dispatcher
    /// deepep says it; --megatron-args reads it).
    #[arg(
        long,
        hide = true,
        value_name = "BACKEND",
        conflicts_with = "megatron_args"
    )]
    pub moe_flex_dispatcher_backend: Option<String>,
    /// Megatron-LM's --multi-latent-attention: MLA, whose widths are --kv-lora-rank and the others.
    #[arg(long, hide = true, conflicts_with = "megatron_args")]
    pub multi_latent_attention: bool,
    // ---- end of the pasted Megatron-LM precision and overlap arguments.
    /// Print the plan as this framework's launch configuration, instead of the breakdown.
    #[arg(long, value_enum, value_name = "FRAMEWORK", conflicts_with_all = ["report", "format"])]
    pub emit: Option<EmitTarget>,
    /// A whole Megatron-LM launch line in quotes, or @FILE holding one: model, batch and plan are
    /// read from it; arguments tpsim does not model (--lr, --data-path, ...) are skipped and listed.
    #[arg(long, value_name = "\"ARGS\"|@FILE", allow_hyphen_values = true, conflicts_with_all = ["plan", "tp", "pp", "cp", "ep", "etp", "reshard_after_forward", "dp", "vpp", "micro_batch", "sequence_parallel", "recompute", "zero", "params", "model", "layers", "hf_config", "num_layers_per_virtual_pipeline_stage", "use_distributed_optimizer", "attention_backend", "accumulate_allreduce_grads_in_fp32", "grad_reduce_in_bf16", "use_megatron_fsdp", "use_torch_fsdp2", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "pipeline_model_parallel_layout", "delay_wgrad_compute", "recompute_num_layers", "recompute_method", "data_parallel_sharding_strategy"])]
    pub megatron_args: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Required: a saved plan (plans/*.yaml, from `tpsim plan ... --save FILE`); `--plan FILE`, as
    /// `eval` takes it, works too. Without one, `tpsim plan ... --report DIR` plans and reports in
    /// one go.
    #[arg(value_name = "PLAN_FILE", conflicts_with = "plan_flag")]
    pub plan: Option<String>,
    /// The saved plan given as `eval` takes it (`report --plan FILE --out DIR`).
    #[arg(long = "plan", id = "plan_flag", value_name = "PLAN_FILE", hide = true)]
    pub plan_flag: Option<String>,
    /// Required: the directory to write index.html and the SVG figures into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
}

#[derive(Debug, Clone, Args)]
pub struct AccuracyArgs {
    /// Published runs to compare against (default: the copy of validation/published_runs.yaml built
    /// into tpsim).
    #[arg(long, value_name = "FILE")]
    pub runs: Option<String>,
    /// One run of a current-stack runs file (its id): how tpsim planned it, in full — the
    /// scenario, the plan with the settings the search chose, memory, traffic and step time —
    /// beside the published tokens/s per GPU.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Output: table (for reading), json or yaml (for a program: one row per run, every field
    /// named with its unit, `published_step_s` and `predicted_step_s` seconds (a runs file's
    /// `published_tokens_per_s_per_gpu` tokens/s), `predicted_memory_bytes` bytes; `error_of`
    /// names what `error` compares, and `error` is predicted / published − 1, a fraction of 1,
    /// the table's % over 100). README.md, "JSON output", lists the fields.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// Frameworks whose launch configuration `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmitTarget {
    /// Megatron-LM pretrain_gpt.py arguments, one line.
    Megatron,
    /// Megatron-Bridge ConfigContainer overrides (KEY=VALUE, one a line) for run_recipe.py.
    MegatronBridge,
    /// NeMo trainer/model YAML fragment (megatron_gpt_config.yaml keys).
    Nemo,
    /// DeepSpeed config JSON (ZeRO stage, micro-batch, gradient accumulation, bf16).
    Deepspeed,
    /// torchtitan recipe: a Python function returning Trainer.Config (parallel degrees, token
    /// batches, activation checkpointing, compile, MXFP8) for a plan evaluated with --framework
    /// torchtitan.
    Torchtitan,
}

/// The axis a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SweepAxis {
    /// Number of nodes (values: 16,32,64).
    Nodes,
    /// Model size (also `size`), a GPT-style shape derived per point (values: 70B,175B,512B).
    #[value(alias = "size", alias = "model-size")]
    Params,
    /// GPU profile (values: a100-sxm-80g,h100-sxm-80g,h200-sxm-141g).
    Gpu,
    /// Inter-node bandwidth per GPU in GB/s (values: 12.5,25,50,100).
    NetworkBandwidth,
    /// Tokens per sequence (values: 2048,4096,8192).
    SeqLen,
    /// Sequences per step (values: 512,1024,2048).
    GlobalBatch,
    /// Layers whose activations are offloaded to host memory, as --cpu-offload-layers (values:
    /// 0,20,40,60; 0 searches every plan, a count only Megatron-Core plans at pp 1 without
    /// recompute).
    CpuOffloadLayers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SweepFormat {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// What to vary.
    #[arg(long, value_enum)]
    pub axis: SweepAxis,
    /// The points, comma-separated, in the axis's unit (see --axis).
    #[arg(
        long,
        value_name = "A,B,C",
        value_delimiter = ',',
        required = true,
        allow_hyphen_values = true
    )]
    pub values: Vec<String>,
    /// Write an SVG line chart (throughput, MFU, free memory, time and cost to train).
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<String>,
    /// Also consider pipeline splits with unequal layers per stage.
    #[arg(long)]
    pub allow_uneven_pp: bool,
    /// Also consider tensor parallelism across nodes.
    #[arg(long)]
    pub allow_cross_node_tp: bool,
    /// Worker threads (default: all cores; at most 1024).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Output: table (for reading), json or csv (for a program: one row per axis point, its
    /// `value` as given and the best plan there, every field named with its unit, `time.step_s`
    /// seconds, `memory.total_bytes` bytes, `tokens_per_s`, `time_to_train_s`; `mfu` is a fraction
    /// of 1, the table's % over 100; `cost_to_train` is in the currency of --price-per-gpu-hour;
    /// they are null at a point where no plan fits). README.md, "JSON output", lists the fields.
    #[arg(long, value_enum, default_value = "table")]
    pub format: SweepFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareFormat {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// A saved plan; give it twice (A then B). Without --plan, the two best distinct plans of a search.
    #[arg(long, value_name = "FILE", num_args = 1, action = clap::ArgAction::Append)]
    pub plan: Vec<String>,
    /// Also consider pipeline splits with unequal layers per stage (search only).
    #[arg(long, conflicts_with = "plan")]
    pub allow_uneven_pp: bool,
    /// Also consider tensor parallelism across nodes (search only).
    #[arg(long, conflicts_with = "plan")]
    pub allow_cross_node_tp: bool,
    /// Output: table (for reading) or json (for a program: `terms` holds each row of the table
    /// with its `group`, `name`, `unit` (GiB, s, GB, ...) and the two plans' values `a` and `b` in
    /// that unit; `a` and `b` hold each plan whole, fields named with their units as
    /// `eval --format json` writes them; `verdict` is the table's closing sentence).
    #[arg(long, value_enum, default_value = "table")]
    pub format: CompareFormat,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// cuda when a GPU is usable, else cpu (says which on stderr).
    Auto,
    /// The CPU twin: one thread per rank, shared-memory ring collectives.
    Cpu,
    /// NVIDIA GPUs through cuBLAS and NCCL, loaded at run time.
    Cuda,
}

/// How to measure (shared by calibrate and validate).
#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    /// Which hardware to measure.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    /// CPU backend: ranks (threads), each standing for one GPU, 1 to 64 (default: the core count,
    /// clamped to 2 to 8).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Untimed runs before each measurement (at most 1000).
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Timed repetitions of each measurement (the median is kept; at most 1000).
    #[arg(long, default_value_t = 7)]
    pub reps: u32,
}

#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Tokens per sequence of the shard shapes (default: the model's).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Sequences per micro-batch of the shard shapes.
    #[arg(long, default_value_t = 1)]
    pub micro_batch: u32,
    /// TP degrees whose shard shapes to measure, e.g. 1,2,4,8 (default: powers of two dividing the heads, up to 8).
    #[arg(long, value_delimiter = ',', value_parser = crate::units::parse_list_item::<u32>)]
    pub tp: Vec<u32>,
    /// Datasheet profile for what cannot be measured here (network, framework constants; the peak on GPUs). Default: the bundled h100-sxm-80g.
    #[arg(long, value_name = "NAME|FILE")]
    pub gpu: Option<String>,
    /// Edge lengths of the GEMM sweep, e.g. 256,1024,4096 (default: cuda 256,1024,4096,8192,16384; cpu 32,64,128,256).
    #[arg(long, value_delimiter = ',', value_parser = crate::units::parse_list_item::<usize>)]
    pub sweep: Vec<usize>,
    /// Smallest collective message.
    // allow_hyphen_values: a size such as `-1B` is read (and refused) as a size, not as a flag
    // `-1` (clap's allow_negative_numbers takes only numbers).
    #[arg(long, default_value = "8KiB", allow_hyphen_values = true)]
    pub min_message: String,
    /// Largest collective message (default: cuda 1GiB, cpu 4MiB).
    #[arg(long, allow_hyphen_values = true)]
    pub max_message: Option<String>,
    /// Bytes of the device copy (default: cuda 1GiB, cpu 64MiB).
    #[arg(long, allow_hyphen_values = true)]
    pub copy_bytes: Option<String>,
    /// Where to write the calibrated profile (YAML, the `clusters/` schema).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: String,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Run this TP degree (default: the TP degrees of the --top best plans).
    #[arg(long)]
    pub tp: Option<u32>,
    /// With --tp: sequence parallelism on (`--sequence-parallel`, or `true`: all-gather /
    /// reduce-scatter instead of all-reduce) or off (`false`, the default); also `--sp`, as in
    /// plan and eval, whose table's `sp` column and `pinned:` line it takes as written.
    // Without --tp these are refused in `app` (clap's `requires` let them pass beside --top, which
    // conflicts with --tp, and they were dropped without a word).
    #[arg(
        long,
        visible_alias = "sp",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub sequence_parallel: Option<bool>,
    /// With --tp: sequences per micro-batch (also `--mb`, as in plan and eval).
    #[arg(long, visible_aliases = ["micro-batch-size", "mb"])]
    pub micro_batch: Option<u32>,
    /// How many of the best plans to validate when --tp is not given (default 3).
    #[arg(long, conflicts_with = "tp")]
    pub top: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// `--num-layers-per-virtual-pipeline-stage`, at least 1 as `--megatron-args` reads it: 0 was
/// said not to divide the stage's layers, as if another count could. Other text keeps Rust's
/// parse error, which `cli_errors` says in words.
fn layers_per_virtual_stage(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("must be at least 1 (rule: a virtual pipeline stage holds at least one layer; tpsim's --vpp = layers / pp / N); give the layers per virtual stage, e.g. --num-layers-per-virtual-pipeline-stage 4, or drop the flag for no interleaving".into()),
        Ok(n) => Ok(n),
        Err(err) => Err(err.to_string()),
    }
}
