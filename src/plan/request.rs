//! What a plan asks for before it is checked: [`PlanRequest`] with its [`Recompute`] (activation
//! recomputation, Korthikanti et al. 2022) and [`Precision`] (the GEMMs' number format).

use serde::Deserialize;
use serde::Serialize;

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recompute {
    None,
    /// Recompute only the attention core (QKᵀ, softmax, dropout, AV) — §5 of the paper.
    Selective,
    /// Keep only each layer's input; recompute the whole layer forward in backward.
    Full,
}

impl Recompute {
    pub const ALL: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];
    pub fn as_str(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }
}

/// What the user (or the search) asks for; `ParallelPlan::build` checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    #[serde(default = "one")]
    pub vpp: u32,
    #[serde(default = "one")]
    pub micro_batch: u32,
    #[serde(default)]
    pub sequence_parallel: bool,
    #[serde(default = "no_recompute")]
    pub recompute: Recompute,
    #[serde(default)]
    pub zero: u8,
    #[serde(default)]
    pub allow_uneven_pp: bool,
    #[serde(default)]
    pub allow_cross_node_tp: bool,
    #[serde(default = "one")]
    pub cp: u32,
    #[serde(default = "one")]
    pub ep: u32,
    #[serde(default = "one")]
    pub etp: u32,
    #[serde(default)]
    pub precision: Precision,
    /// ZeRO-3/FSDP: free the gathered parameters after each micro-batch's forward and gather them
    /// again for its backward (FSDP2 `reshard_after_forward=True`), or keep them until the backward.
    #[serde(default = "yes")]
    pub reshard_after_forward: bool,
    /// With full recompute: how many layers of each model chunk are recomputed (Megatron's
    /// `--recompute-method block --recompute-num-layers N`); 0 = every layer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recompute_num_layers: u32,
    /// Decoder layers of the first and the last stage, the middle stages splitting the rest evenly
    /// (Megatron `--decoder-first-pipeline-num-layers F --decoder-last-pipeline-num-layers L`);
    /// none = tpsim's own split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_split: Option<(u32, u32)>,
    /// Copies of the ZeRO-sharded states across the data-parallel ranks: each copy is sharded over
    /// dp·cp / dp_replicas ranks and the copies reduce their gradient shards with one all-reduce
    /// (hybrid sharding: Megatron-Core's `--num-distributed-optimizer-instances`, torchtitan's
    /// `data_parallel_replicate_degree` under HSDP); 1 = one copy sharded over every rank.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dp_replicas: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Default for PlanRequest {
    /// One GPU, no parallelism, bf16, no recompute: the base that literal requests override.
    fn default() -> PlanRequest {
        PlanRequest {
            tp: 1,
            pp: 1,
            dp: 1,
            vpp: 1,
            micro_batch: 1,
            sequence_parallel: false,
            recompute: Recompute::None,
            zero: 0,
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            cp: 1,
            ep: 1,
            etp: 1,
            precision: Precision::Bf16,
            reshard_after_forward: true,
            recompute_num_layers: 0,
            stage_split: None,
            dp_replicas: 1,
        }
    }
}

/// Number format of the GEMMs (attention, norms and element-wise kernels stay in bf16, as
/// Transformer Engine and torchao run them).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Bf16,
    /// FP8 with per-tensor scaling (Transformer Engine delayed or current scaling, torchao float8).
    Fp8,
    /// FP8 with one E8M0 scale per 32 elements (OCP MX; Blackwell tensor cores only).
    Mxfp8,
    /// FP4 with one E4M3 scale per 16 elements and a per-tensor scale (Blackwell only).
    Nvfp4,
}

impl Precision {
    pub const ALL: [Precision; 4] = [
        Precision::Bf16,
        Precision::Fp8,
        Precision::Mxfp8,
        Precision::Nvfp4,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Mxfp8 => "mxfp8",
            Precision::Nvfp4 => "nvfp4",
        }
    }
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}
fn no_recompute() -> Recompute {
    Recompute::None
}
