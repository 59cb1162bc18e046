//! Command-line flags (clap derive). No I/O and no domain logic: `app.rs` turns these into
//! validated domain values.

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "tpsim",
    version,
    about = "Plans 3D-parallel (tensor, pipeline, data) training of a transformer on a GPU cluster",
    long_about = "Plans 3D-parallel (tensor, pipeline, data) training of a transformer on a GPU cluster: \
                  per-GPU memory, TP/PP/DP communication, pipeline bubble and step time for every plan.",
    after_help = "Examples:\n  tpsim plan --params 512B --nodes 32\n  tpsim eval --model gpt3-175b --nodes 128 --gpu a100-sxm-80g --tp 8 --pp 16 --global-batch 1536\n  tpsim eval --plan plans/seed-512b-32nodes.yaml\n  tpsim accuracy"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Search every valid plan and print the fastest that fit in memory.
    #[command(
        after_help = "Examples:\n  tpsim plan --params 512B --nodes 32\n  tpsim plan --model llama3-405b --nodes 2048 --gpu h100-sxm-80g --global-batch 2048 --allow-uneven-pp\n  tpsim plan --params 70B --nodes 8 --top 5 --format json\n  tpsim plan --params 512B --nodes 32 --save plans/best.yaml"
    )]
    Plan(PlanArgs),
    /// Evaluate one plan and print its full breakdown (also when it does not fit).
    #[command(
        after_help = "Examples:\n  tpsim eval --plan plans/seed-512b-32nodes.yaml\n  tpsim eval --model gpt3-175b --nodes 128 --gpu a100-sxm-80g --tp 8 --pp 16 --micro-batch 1 --recompute full\n  tpsim eval --layers 96 --hidden 12288 --heads 96 --nodes 64 --tp 8 --pp 8 --format json"
    )]
    Eval(EvalArgs),
    /// Write an HTML report with SVG figures for a saved plan (like `eval --plan FILE --report DIR`).
    #[command(
        after_help = "Example:\n  tpsim report plans/seed-512b-32nodes.yaml --out reports/seed-512b-32nodes\n  (then open reports/seed-512b-32nodes/index.html in a browser)"
    )]
    Report(ReportArgs),
    /// Compare predictions with published training runs (validation/published_runs.yaml).
    #[command(
        after_help = "Example:\n  tpsim accuracy\n  tpsim accuracy --runs validation/published_runs.yaml --format json"
    )]
    Accuracy(AccuracyArgs),
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GradDtypeArg {
    Bf16,
    Fp32,
}

/// What to train: one of a size, a spec, or a shape.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Parameter count (512B, 1.5T, 70000M, 175e9); a GPT-style shape is derived and printed.
    #[arg(long, value_name = "COUNT", allow_hyphen_values = true, conflicts_with_all = ["model", "layers"])]
    pub params: Option<String>,
    /// Bundled model name (gpt3-175b, llama3-70b, ...) or a model YAML file.
    #[arg(long, value_name = "NAME|FILE", conflicts_with = "layers")]
    pub model: Option<String>,
    /// Transformer layers (with --hidden and --heads).
    #[arg(long, requires_all = ["hidden", "heads"])]
    pub layers: Option<u32>,
    /// Hidden size.
    #[arg(long, requires = "layers")]
    pub hidden: Option<u32>,
    /// Attention heads.
    #[arg(long, requires = "layers")]
    pub heads: Option<u32>,
    /// Key/value heads for grouped-query attention (default: --heads).
    #[arg(long, requires = "layers")]
    pub kv_heads: Option<u32>,
    /// MLP hidden size (default: 4 x --hidden).
    #[arg(long, requires = "layers")]
    pub ffn_hidden: Option<u32>,
    /// Vocabulary size (default 51200 with shape flags).
    #[arg(long, requires = "layers")]
    pub vocab: Option<u32>,
    /// Gated MLP (SwiGLU: gate, up and down matrices).
    #[arg(long, requires = "layers")]
    pub gated_mlp: bool,
}

/// Where to train.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Number of nodes.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// GPUs per node (default: the GPU profile's, 8 for the bundled ones).
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    /// Bundled GPU profile (a100-sxm-80g, h100-sxm-80g, h200-sxm-141g, b200-sxm-180g) or a profile YAML
    /// file. Default: h100-sxm-80g.
    #[arg(long, value_name = "NAME|FILE")]
    pub gpu: Option<String>,
}

/// How to train.
#[derive(Debug, Clone, Args)]
pub struct TrainingArgs {
    /// Tokens per sequence (default: the model's training length; 2048 for --params and shape flags).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Sequences per optimizer step across all replicas (default 1536, GPT-3's batch).
    #[arg(long)]
    pub global_batch: Option<u32>,
    /// Gradient precision: bf16 (2 bytes, DeepSpeed) or fp32 (4 bytes, Megatron's main_grad).
    #[arg(long, value_enum, default_value = "bf16")]
    pub grad_dtype: GradDtypeArg,
    /// Tokens to train on (e.g. 300B), to print the time to train.
    #[arg(long, value_name = "COUNT")]
    pub tokens: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// How many plans to print.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also consider pipeline splits with unequal layers per stage.
    #[arg(long)]
    pub allow_uneven_pp: bool,
    /// Also consider tensor parallelism across nodes (slow: every layer's all-reduce crosses the network).
    #[arg(long)]
    pub allow_cross_node_tp: bool,
    /// Write the best plan to FILE (the format `eval --plan` reads).
    #[arg(long, value_name = "FILE")]
    pub save: Option<String>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write DIR/index.html and one SVG per figure (created if missing).
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// A saved plan (plans/*.yaml); scenario flags given here override its values.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tp", "pp", "dp", "vpp", "micro_batch", "sequence_parallel", "recompute", "zero"])]
    pub plan: Option<String>,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u32>,
    /// Pipeline-parallel degree.
    #[arg(long)]
    pub pp: Option<u32>,
    /// Data-parallel degree (default: GPUs / (tp x pp)).
    #[arg(long)]
    pub dp: Option<u32>,
    /// Virtual pipeline stages per GPU (interleaved 1F1B).
    #[arg(long)]
    pub vpp: Option<u32>,
    /// Sequences per micro-batch.
    #[arg(long)]
    pub micro_batch: Option<u32>,
    /// Sequence parallelism (needs --tp > 1).
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Activation recomputation.
    #[arg(long, value_enum)]
    pub recompute: Option<RecomputeArg>,
    /// ZeRO stage 0-3.
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
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// A saved plan (plans/*.yaml).
    #[arg(value_name = "PLAN_FILE")]
    pub plan: String,
    /// Directory to write index.html and the SVG figures into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: String,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub training: TrainingArgs,
}

#[derive(Debug, Clone, Args)]
pub struct AccuracyArgs {
    /// Published runs to compare against.
    #[arg(long, default_value = "validation/published_runs.yaml")]
    pub runs: String,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}
