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
    /// Compare predictions with published training runs (validation/published_runs.yaml).
    #[command(
        after_help = "Example:\n  tpsim accuracy\n  tpsim accuracy --runs validation/published_runs.yaml --format json"
    )]
    Accuracy(AccuracyArgs),
    /// Measure this machine (GEMMs at the model's shard shapes, a size sweep, memory bandwidth,
    /// collectives) and write a calibrated hardware profile for `--calibration`.
    #[command(
        after_help = "Examples:\n  tpsim calibrate --model gpt3-175b --output clusters/calibrated-h100.yaml\n  tpsim calibrate --backend cpu --layers 2 --hidden 256 --heads 8 --seq-len 128 --ranks 4 --output cpu.yaml"
    )]
    Calibrate(CalibrateArgs),
    /// Run one real tensor-parallel layer (forward and backward) of the top plans and compare it
    /// with the prediction: layer time, communication time, wire bytes, numerics.
    #[command(
        after_help = "Examples:\n  tpsim validate --model llama3-8b --calibration clusters/calibrated-h100.yaml --tp 8\n  tpsim validate --backend cpu --layers 2 --hidden 256 --heads 8 --seq-len 128 --tp 4 --sequence-parallel"
    )]
    Validate(ValidateArgs),
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
    /// A calibrated profile written by `tpsim calibrate`; replaces the datasheet numbers of --gpu.
    #[arg(long, value_name = "FILE", conflicts_with = "gpu")]
    pub calibration: Option<String>,
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
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Debug, Clone, Args)]
pub struct AccuracyArgs {
    /// Published runs to compare against.
    #[arg(long, default_value = "validation/published_runs.yaml")]
    pub runs: String,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
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
    /// CPU backend: ranks (threads), each standing for one GPU (default: cores, 2 to 8).
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Untimed runs before each measurement.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Timed repetitions of each measurement (the median is kept).
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
    #[arg(long, value_delimiter = ',')]
    pub tp: Vec<u32>,
    /// Datasheet profile for what cannot be measured here (network, framework constants; the peak on GPUs).
    #[arg(long, value_name = "NAME|FILE", default_value = "h100-sxm-80g")]
    pub gpu: String,
    /// Edge lengths of the GEMM sweep, e.g. 256,1024,4096 (default: cuda 256,1024,4096,8192,16384; cpu 32,64,128,256).
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<usize>,
    /// Smallest collective message.
    #[arg(long, default_value = "8KiB")]
    pub min_message: String,
    /// Largest collective message (default: cuda 1GiB, cpu 4MiB).
    #[arg(long)]
    pub max_message: Option<String>,
    /// Bytes of the device copy (default: cuda 1GiB, cpu 64MiB).
    #[arg(long)]
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
    /// With --tp: sequence parallelism (all-gather / reduce-scatter instead of all-reduce).
    #[arg(long, requires = "tp")]
    pub sequence_parallel: bool,
    /// With --tp: sequences per micro-batch.
    #[arg(long, requires = "tp")]
    pub micro_batch: Option<u32>,
    /// How many of the best plans to validate when --tp is not given.
    #[arg(long, default_value_t = 3)]
    pub top: usize,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}
