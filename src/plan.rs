//! A 3D-parallel plan, validated when it is built.
//!
//! Abbreviations used everywhere in tpsim: `tp` tensor-parallel degree (Megatron column/row splits,
//! inside a node), `cp` context-parallel degree (the sequence split over ranks, ring attention),
//! `pp` pipeline stages, `dp` data-parallel replicas, `ep` expert-parallel degree and `etp` expert
//! tensor-parallel degree (mixture-of-experts layers, Megatron-Core's parallel folding), `vpp`
//! virtual pipeline stages per GPU (interleaved 1F1B), `micro_batch` sequences per micro-batch, `sp`
//! sequence parallelism, `zero` ZeRO stage (Rajbhandari et al. 2020; 3 = FSDP).
//! Megatron-Core's rank order is tp-cp-dp-pp for attention and dense layers (`RankGenerator`,
//! megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp").

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::model::Model;
use crate::training::Training;

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

/// Transformer layers on the first, most-loaded middle, and last pipeline stage. The embedding lives
/// on the first stage and the output layer on the last (Megatron-LM, DeepSpeed pipeline engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StageLayout {
    pub first: u32,
    pub middle_max: u32,
    pub last: u32,
    pub even: bool,
    /// Layers in each model chunk when the chunks are filled front to back and the last one takes
    /// the remainder ([`StageLayout::filled_chunks`]); 0 for the other layouts.
    pub chunk_layers: u32,
    /// Whether the first and last stage's layers were given (`PlanRequest::stage_split`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub given: bool,
}

impl StageLayout {
    /// Even split: every stage has layers/pp layers.
    fn even(layers: u32, pp: u32) -> StageLayout {
        let per = layers / pp;
        StageLayout {
            first: per,
            middle_max: per,
            last: per,
            even: true,
            chunk_layers: 0,
            given: false,
        }
    }

    /// Uneven split that counts the embedding and the output layer as one layer each and balances
    /// the `layers + 2` units: DeepSpeed's `--pp-partition-method type:transformer|embedding` as
    /// BLOOM used it (70 layers on 12 stages: 5, 6×10, 5) and Llama 3's 126 layers on 16 stages
    /// (Dubey et al. 2024 §3.3.2: one layer fewer on the first and the last stage: 7, 8×14, 7).
    /// A remainder goes to middle stages first. MTP layers count as units of the last stage,
    /// which runs them after its decoder layers (a DeepSeek-V3 MTP layer is an MoE layer plus
    /// another output pass), so that stage gets fewer decoder layers, as Megatron-Bridge's
    /// DeepSeek-V3 layouts do.
    fn balanced_units(layers: u32, pp: u32, mtp_layers: u32) -> StageLayout {
        let units = layers + 2 + mtp_layers;
        if mtp_layers > 0 && units / pp < 2 + mtp_layers && pp >= 2 && layers > pp {
            // The MTP layers alone outweigh a stage: one decoder layer on the last stage, the
            // other layers balanced over the other stages with the embedding counted on the first.
            let middles = pp - 2;
            let first = if middles == 0 {
                layers - 1
            } else {
                (layers / (pp - 1)).saturating_sub(1).max(1)
            };
            return StageLayout {
                first,
                middle_max: if middles == 0 {
                    0
                } else {
                    (layers - 1 - first).div_ceil(middles)
                },
                last: 1,
                even: false,
                chunk_layers: 0,
                given: false,
            };
        }
        let base = units / pp;
        let mut extra = units % pp;
        let middles = pp.saturating_sub(2);
        let middle_extra = extra.min(middles);
        extra -= middle_extra;
        let last_extra = u32::from(extra >= 1);
        let first_extra = u32::from(extra >= 2);
        let middle_max = if middles == 0 {
            0
        } else {
            base + u32::from(middle_extra > 0)
        };
        StageLayout {
            first: (base + first_extra).saturating_sub(1),
            middle_max,
            last: (base + last_extra).saturating_sub(1 + mtp_layers),
            even: false,
            chunk_layers: 0,
            given: false,
        }
    }

    /// Interleaved split of a layer count no even layout reaches: the pp·vpp model chunks take
    /// c = ⌈layers / (pp·vpp)⌉ layers each in depth order and the last chunk (on the last stage,
    /// with the loss) the remainder. This is the layout Megatron-Bridge gives DeepSeek-V3's 61
    /// layers (`set_deepseek_v3_pipeline_model_parallel_layout`: pp 4 × vp 4 is embedding + 4, 14
    /// chunks of 4, then 1 + MTP + loss). Stage 0 and the middle stages hold c·vpp layers, the last
    /// c·(vpp − 1) + remainder. None when the remainder would be empty.
    fn filled_chunks(layers: u32, pp: u32, vpp: u32) -> Option<StageLayout> {
        let chunks = pp.checked_mul(vpp)?;
        let per_chunk = layers.div_ceil(chunks);
        let remainder = layers.checked_sub(per_chunk * (chunks - 1))?;
        if remainder == 0 || pp < 2 || vpp < 2 {
            return None;
        }
        Some(StageLayout {
            first: per_chunk * vpp,
            middle_max: if pp > 2 { per_chunk * vpp } else { 0 },
            last: per_chunk * (vpp - 1) + remainder,
            even: false,
            chunk_layers: per_chunk,
            given: false,
        })
    }

    /// The split the user gave: `first` and `last` layers on the end stages, the rest spread
    /// evenly over the middle ones (Megatron-LM's `--decoder-first/last-pipeline-num-layers`,
    /// which requires the middle stages to split evenly). None when it does not add up.
    fn given(layers: u32, pp: u32, first: u32, last: u32) -> Option<StageLayout> {
        let rest = layers.checked_sub(first.checked_add(last)?)?;
        let middle_max = match pp {
            2 if rest == 0 => 0,
            p if p > 2 && rest.is_multiple_of(p - 2) && rest / (p - 2) > 0 => rest / (p - 2),
            _ => return None,
        };
        if first == 0 || last == 0 {
            return None;
        }
        Some(StageLayout {
            first,
            middle_max,
            last,
            even: (pp > 2 && first == middle_max && last == middle_max)
                || (pp == 2 && first == last),
            chunk_layers: 0,
            given: true,
        })
    }

    pub fn max_layers(&self) -> u32 {
        self.first.max(self.middle_max).max(self.last)
    }

    /// Whether an even split's stages hold layers that their `vpp` model chunks do not divide
    /// (80 layers on pp 4 x vpp 3: 20 per stage in chunks of 7, 7 and 6). Megatron-Core builds
    /// such chunks only from a `--pipeline-model-parallel-layout` (without one,
    /// `get_num_layers_to_build` asserts "num_layers_per_pipeline_rank should be divisible by
    /// vp_size"); tpsim gives the earliest `per_stage % vpp` virtual stages the extra layer
    /// (`cost::pipeline::ChunkLayout`) and writes that layout.
    pub fn balanced_chunks(&self, layers: u32, pp: u32, vpp: u32) -> bool {
        self.even && pp > 1 && vpp > 1 && !(layers / pp).is_multiple_of(vpp)
    }

    /// Whether the first and last stage hold their own layer counts and the middle stages share
    /// the rest, one model chunk per stage: a split given as first/last counts, or tpsim's own
    /// uneven split (`balanced_units`), which a launch line writes the same way. The plan tables
    /// show these in their `layers` column and `plan`'s explanation in a "layers per stage" line.
    pub fn is_first_last(&self, pp: u32, vpp: u32) -> bool {
        self.given || (pp >= 2 && vpp == 1 && !self.even && self.chunk_layers == 0)
    }

    /// Whether some stage of `pp` would hold no transformer layer: the first or the last (counting
    /// the embedding and the output layer as layers can leave them only those), or a middle one
    /// (the middle stages share what the end stages leave, `cost::simulated::layers_per_stage`).
    /// Megatron-Core builds such a stage, but no launch line tpsim writes places it, and a stage
    /// of nothing but the embedding is a pipeline one stage shorter.
    pub fn leaves_a_stage_empty(&self, layers: u32, pp: u32) -> bool {
        if self.even || pp < 2 {
            return false;
        }
        let middles = pp - 2;
        let rest = layers.saturating_sub(self.first + self.last);
        self.first == 0 || self.last == 0 || (self.chunk_layers == 0 && rest < middles)
    }
}

/// A checked plan. Built only through [`ParallelPlan::build`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParallelPlan {
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub dp: u32,
    pub ep: u32,
    pub etp: u32,
    pub vpp: u32,
    pub micro_batch: u32,
    pub num_microbatches: u32,
    /// Pipeline schedules run one after the other per step, `num_microbatches / schedule_runs`
    /// micro-batches each (torchtitan's gradient-accumulation steps, `Training::local_batch`); 1
    /// where one schedule covers the step.
    pub schedule_runs: u32,
    pub global_batch: u32,
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    pub zero: u8,
    pub reshard_after_forward: bool,
    pub precision: Precision,
    /// Layers of each model chunk recomputed under full recompute (0 = all).
    pub recompute_num_layers: u32,
    pub stages: StageLayout,
    /// Copies of the sharded states (`PlanRequest::dp_replicas`); 1 without ZeRO.
    pub dp_replicas: u32,
}

/// The expert degrees above 1 a dense model was given (`--ep 2`, `--etp 2`, or both joined by
/// `sep`), each with `value` in place of its own when `value` is not empty (the fix: `--ep 1`):
/// an expert degree left at 1 was not given, so the message does not name it.
fn experts_on_dense_degrees(ep: u32, etp: u32, sep: &str, value: &str) -> String {
    [("--ep", ep), ("--etp", etp)]
        .into_iter()
        .filter(|(_, degree)| *degree > 1)
        .map(|(flag, degree)| {
            if value.is_empty() {
                format!("{flag} {degree}")
            } else {
                format!("{flag} {value}")
            }
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// Why a requested plan is not a plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A plan a hybrid Mamba-Transformer stack cannot take, or that tpsim does not price for it
    /// (`check_hybrid`); the words name the value, the rule and a fix.
    #[error("{0}")]
    Hybrid(String),
    #[error(
        "{what} 0 is not a degree; every parallel degree and the micro-batch must be at least 1, so give {what} 1 or more"
    )]
    ZeroDegree { what: &'static str },
    #[error(
        "--tp {tp} x --cp {cp} x --pp {pp} x --dp {dp} = {product} GPUs, but the cluster has {gpus}; choose degrees whose product is {gpus} ({suggest_dp})"
    )]
    GpuCount {
        tp: u32,
        cp: u32,
        pp: u32,
        dp: u32,
        product: u64,
        gpus: u32,
        suggest_dp: String,
    },
    #[error("--tp {tp} does not divide {heads} attention heads; valid: {valid}")]
    TpHeads { tp: u32, heads: u32, valid: String },
    #[error(
        "{flag} {tp} does not divide the {what} {ffn} (Megatron and DeepSpeed split it evenly over the ranks, and tpsim models even splits); valid: {valid}"
    )]
    TpFfn {
        flag: &'static str,
        tp: u32,
        what: &'static str,
        ffn: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} neither divides nor is a multiple of the {kv_heads} KV heads (Megatron replicates KV heads only when tp is a multiple); valid: {valid}"
    )]
    TpKvHeads {
        tp: u32,
        kv_heads: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} does not divide the {gpus_per_node} GPUs of an NVLink domain; valid: {valid}"
    )]
    TpNode {
        tp: u32,
        gpus_per_node: u32,
        valid: String,
    },
    #[error(
        "--tp {tp} spans NVLink domains ({gpus_per_node} GPUs per domain): tensor-parallel all-reduces would cross the network every layer; use --tp {gpus_per_node} or less, or pass --allow-cross-node-tp"
    )]
    TpCrossNode { tp: u32, gpus_per_node: u32 },
    #[error(
        "--pp {pp} is larger than the model's {layers} layers; a stage needs at least one layer: give --pp {layers} or fewer (and more --dp for the GPUs it frees)"
    )]
    PpLayers { pp: u32, layers: u32 },
    #[error(
        "--pp {pp} does not split {layers} layers evenly; pass --allow-uneven-pp or use one of: {valid}"
    )]
    PpUneven { pp: u32, layers: u32, valid: String },
    #[error(
        "--pp {pp} leaves a stage without a transformer layer: the model's {layers} layers, with the embedding and the output layer counted as one each, spread over {pp} stages give one of them nothing but the embedding or the output layer; use a smaller --pp, valid here: {valid}"
    )]
    EmptyStage { pp: u32, layers: u32, valid: String },
    #[error(
        "a first/last stage split (--decoder-first/last-pipeline-num-layers) needs --pp 2 or more and --vpp 1 (here --pp {pp}, --vpp {vpp}); drop the split or the interleaving"
    )]
    StageSplitNeeds { pp: u32, vpp: u32 },
    #[error(
        "first stage {first} and last stage {last} layers do not split {layers} layers over --pp {pp}: the middle stages must get the rest in equal, non-empty parts (and the end stages at least one layer each); change the two counts"
    )]
    StageSplitUneven {
        first: u32,
        last: u32,
        layers: u32,
        pp: u32,
    },
    #[error("--vpp {vpp} needs pipeline parallelism (--pp > 1); use --vpp 1")]
    VppWithoutPp { vpp: u32 },
    #[error(
        "--pp-schedule {schedule} runs exactly two model chunks per GPU in a V (PyTorch refuses any other count), but --vpp is {vpp}; give --vpp 2"
    )]
    VScheduleChunks { schedule: &'static str, vpp: u32 },
    #[error(
        "--cpu-offload-layers {layers} with --pp {pp}: Megatron-Core offloads activations only without a pipeline (transformer_config.py: \"no support for Pipeline parallelism with CPU offloading\"); give --pp 1, or drop --cpu-offload-layers"
    )]
    CpuOffloadWithPipeline { layers: u32, pp: u32 },
    #[error(
        "--num-layers-at-{end}-in-bf16 {count} with --pp {pp}: Megatron-Core keeps at most one stage's layers ({max} of {layers}) in bf16 at each end under FP8 (transformer_config.py: \"must be between 0 and number of layers per pipeline stage\"); give --num-layers-at-{end}-in-bf16 {max} or fewer, or a smaller --pp"
    )]
    Bf16LayersPastStage {
        end: &'static str,
        count: u32,
        pp: u32,
        max: u32,
        layers: u32,
    },
    #[error(
        "--first-last-layers-bf16 with --fp8-scaling delayed: Megatron-Core refuses bf16 layers under delayed scaling (transformer_config.py: \"Delayed scaling does not support first / last layer in BF16\"); give --fp8-scaling current, or drop --first-last-layers-bf16"
    )]
    Bf16LayersWithDelayedScaling,
    #[error(
        "--cpu-offload-layers {layers} with --recompute {recompute}: Megatron-Core offloads activations only without recompute (transformer_config.py: \"CPU offloading does not work when activation recomputation is enabled\"); give --recompute none, or drop --cpu-offload-layers"
    )]
    CpuOffloadWithRecompute {
        layers: u32,
        recompute: &'static str,
    },
    #[error(
        "--pp-schedule dualpipev needs at least as many micro-batches per pipeline schedule as stages, 2 x --pp {pp} = {need} (PyTorch's ScheduleDualPipeV refuses fewer), but it runs {per_schedule}; raise --global-batch (or --local-batch), lower --micro-batch or --dp, or use --pp-schedule zbv"
    )]
    DualPipeVMicrobatches {
        per_schedule: u32,
        need: u32,
        pp: u32,
    },
    #[error(
        "--pp-schedule {schedule} runs two model chunks of whole layers per GPU (--vpp 2), but --pp {pp} {split}; give a --pp whose stages split in two, valid: {valid}"
    )]
    VScheduleLayers {
        schedule: &'static str,
        pp: u32,
        /// How the depth lays the layers out: "leaves 3 layers on each stage", or the uneven
        /// split that makes no equal chunks.
        split: String,
        valid: String,
    },
    #[error(
        "--vpp {vpp} does not divide the {per_stage} layers of each stage{unequal}; valid: {valid}"
    )]
    VppLayers {
        vpp: u32,
        per_stage: u32,
        valid: String,
        /// Why unequal chunks are not offered instead, where the framework is the reason.
        unequal: String,
    },
    /// More model chunks than a stage has layers, where the framework takes unequal chunks: the
    /// divisors of the stage are not the rule here (`VppLayers`), every count up to it is.
    #[error(
        "--vpp {vpp} cuts each stage's {per_stage} layers into {vpp} model chunks, more than it has layers (every chunk holds at least one; {framework} takes chunks of unequal size, so any count up to the stage's layers works); give --vpp {per_stage} or fewer, valid: 1 to {per_stage}"
    )]
    VppPastStageLayers {
        vpp: u32,
        per_stage: u32,
        framework: &'static str,
    },
    #[error(
        "--vpp {vpp} with an uneven split needs layers + 2 (embedding and loss counted as layers, MTP layers too or not) to split evenly into pp x vpp chunks, or pp x vpp chunks filled front to back with a non-empty last one; valid here: {valid}"
    )]
    VppUneven { vpp: u32, valid: String },
    #[error(
        "--vpp {vpp}: {num_microbatches} micro-batches are not a multiple of --pp {pp} (Megatron-Core's interleaved schedule requires it with its default --microbatch-group-size-per-virtual-pipeline-stage, pp, the schedule tpsim simulates); give a --global-batch that is a multiple of pp x dp x micro-batch = {multiple} sequences (e.g. {examples}), or another --micro-batch"
    )]
    VppMicrobatches {
        vpp: u32,
        num_microbatches: u32,
        pp: u32,
        multiple: u64,
        /// The nearest global batches that work, below and above.
        examples: String,
    },
    #[error(
        "--vpp {vpp}: each of the step's {runs} pipeline schedules (one per local batch) runs {per_schedule} micro-batches, not a multiple of --pp {pp} (tpsim's interleaved schedule requires it); give a --local-batch that is a multiple of --pp x --micro-batch = {multiple} sequences"
    )]
    VppScheduleMicrobatches {
        vpp: u32,
        per_schedule: u32,
        runs: u32,
        pp: u32,
        multiple: u32,
    },
    #[error("--local-batch {local_batch}: {rule}")]
    LocalBatch { local_batch: u32, rule: String },
    /// dp itself does not divide the batch: no micro-batch can help, so the rule is said once,
    /// with what can (a runs file's row said it twice, as `BatchSplit` and again in its list).
    #[error(
        "--global-batch {global_batch} is not divisible by --dp {dp}, so no micro-batch size splits it; give a multiple of {dp} (e.g. --global-batch {multiple}) or degrees whose dp divides {global_batch}"
    )]
    BatchNotDivisibleByDp {
        global_batch: u32,
        dp: u32,
        /// The next global batch dp divides.
        multiple: u64,
    },
    #[error(
        "--global-batch {global_batch} is not divisible by --dp {dp} x --micro-batch {micro_batch} = {product}; valid micro-batches for this dp: {valid}"
    )]
    BatchSplit {
        global_batch: u32,
        dp: u32,
        micro_batch: u32,
        product: u64,
        valid: String,
    },
    #[error(
        "--cp {cp} does not split the {seq_len}-token sequence into 2 x cp equal chunks (Megatron-Core's causal load balancing gives each rank chunks i and 2cp-1-i); valid: {valid}; pin one of those, or give a --seq-len that is a multiple of {chunks} (e.g. --seq-len {longer})"
    )]
    CpSequence {
        cp: u32,
        seq_len: u32,
        valid: String,
        /// 2·cp, the multiple the sequence must be.
        chunks: u64,
        /// The next sequence length that `cp` splits.
        longer: u64,
    },
    #[error(
        "--cp {cp} does not split the {seq_len}-token sequence into cp equal shards (DeepSpeed-Ulysses gives each sequence-parallel rank seq/cp contiguous tokens: Megatron-DeepSpeed's get_batch asserts seq_length % sequence_parallel_size == 0); valid: {valid}; pin one of those, or give a --seq-len that is a multiple of {cp} (e.g. --seq-len {longer})"
    )]
    UlyssesSequence {
        cp: u32,
        seq_len: u32,
        valid: String,
        /// The next sequence length that `cp` splits.
        longer: u64,
    },
    #[error(
        "--cp {cp} with sliding-window attention: the {exchange} exchange does not run sliding windows (Transformer Engine refuses them on its point-to-point ring, and PyTorch's ring takes none); use --cp-exchange kv-all-gather or head-all-to-all (Megatron-Core's --cp-comm-type all_gather / a2a, which run them), --cp 1, or --attention-window 0 for full attention"
    )]
    CpWithWindow { cp: u32, exchange: &'static str },
    #[error(
        "--cp {cp} with --cp-exchange head-all-to-all (Megatron-Core's --cp-comm-type a2a) splits each TP rank's heads over the CP ranks, but tp {tp} leaves {query_heads} query and {kv_heads} K/V heads per rank, not both multiples of {cp} (Transformer Engine's AttnFuncWithCPAndQKVOA2A requires it); valid cp: {valid}; or use --cp-exchange {other}"
    )]
    CpHeads {
        cp: u32,
        tp: u32,
        query_heads: u32,
        kv_heads: u32,
        valid: String,
        /// The exchanges without the rule that run this model: not the ring where it has
        /// sliding windows (`CpWithWindow`).
        other: &'static str,
    },
    #[error(
        "--cp {cp} with --attention unfused: context parallelism runs inside the fused attention kernels (Megatron-Core: the K/V ring of Transformer Engine's `AttnFuncWithCPAndKVP2P` calls the flash/cuDNN kernels; torchtitan: PyTorch's `context_parallel` over SDPA's flash, cuDNN and memory-efficient backends), which tpsim models; use --attention flash, or --cp 1"
    )]
    CpWithUnfusedAttention { cp: u32 },
    #[error(
        "--cp {cp} with --framework deepspeed (DeepSpeed-Ulysses, sequence_parallel_size {cp}) splits each TP rank's heads over the sequence-parallel ranks, but tp {tp} leaves {query_heads} query and {kv_heads} K/V heads per rank: the query heads must be a multiple of {cp}, and the K/V heads a multiple or a divisor of it (UlyssesSPAttentionHF repeats K/V heads up to {cp}); valid cp: {valid}"
    )]
    UlyssesHeads {
        cp: u32,
        tp: u32,
        query_heads: u32,
        kv_heads: u32,
        valid: String,
    },
    #[error(
        "--cp {cp} with {with_tp}--sequence-parallel under --framework deepspeed: Megatron-DeepSpeed refuses Megatron's sequence parallelism beside DeepSpeed's (\"not compatible with Megatron-LM's sequence parallel\"){tp_rule}; use {fix}--sequence-parallel false, or --cp 1"
    )]
    UlyssesWithSequenceParallel {
        cp: u32,
        /// "--tp 2 and " where a tp above 1 is given, else empty.
        with_tp: String,
        /// Why that tp goes too, else empty.
        tp_rule: String,
        /// "use --tp 1 and " where a tp above 1 is given, else empty.
        fix: String,
    },
    #[error(
        "--cp {cp} with {degrees} under --framework deepspeed: DeepSpeed-Ulysses runs without tensor or pipeline parallelism (Megatron-DeepSpeed's initialize_model_parallel asserts tp 1 and pp 1 when sequence_parallel_size > 1: \"does not work with tensor parallel or pipeline parallel\"; ALST's UlyssesSPAttentionHF wraps a Hugging Face model with neither); use {fix}, or --cp 1"
    )]
    UlyssesWithModelParallelism {
        cp: u32,
        /// "--tp 2", "--pp 4" or "--tp 2 and --pp 4".
        degrees: String,
        /// "--tp 1", "--pp 1" or "--tp 1 --pp 1".
        fix: String,
    },
    #[error(
        "--precision {precision} with --framework megatron-lm-2021: the 2021 Megatron-LM trains in fp16/bf16 only (FP8 came with Transformer Engine, in Megatron-Core); use --framework megatron-core, or --precision bf16"
    )]
    LowPrecisionIn2021 { precision: &'static str },
    #[error(
        "{}: expert parallelism needs a mixture-of-experts model ({model} is dense); use {}",
        experts_on_dense_degrees(*ep, *etp, " / ", ""),
        experts_on_dense_degrees(*ep, *etp, " ", "1")
    )]
    ExpertsOnDense { ep: u32, etp: u32, model: String },
    #[error(
        "--ep {ep} does not divide the model's {experts} experts (each expert-parallel rank holds experts/ep of them); valid: {valid}"
    )]
    EpExperts {
        ep: u32,
        experts: u32,
        valid: String,
    },
    #[error(
        "--ep {ep} x --etp {etp} does not divide the {stage_gpus} GPUs of a pipeline stage (tp x cp x dp), over which Megatron-Core folds the experts; choose ep x etp dividing {stage_gpus} (--etp defaults to --tp, as in Megatron-Core); with --etp {etp}, valid --ep: {valid_ep}"
    )]
    EpFolding {
        ep: u32,
        etp: u32,
        stage_gpus: u64,
        /// The --ep values that divide the experts and fold with this --etp ("1, 2, 4").
        valid_ep: String,
    },
    #[error(
        "--etp {etp} with --tp {tp} under --framework torchtitan: with --ep {ep} torchtitan {how}; use --etp {want}",
        how = if *ep > 1 {
            "keeps each routed expert whole on its expert-parallel ranks, drawn from dp_shard x cp x tp (no expert TP since #3167, \"deprecate expert tensor parallel (ETP)\", which removed expert_tensor_parallel_degree; before it parallel_dims.py said \"Currently we only support ETP=TP or ETP=1\")"
        } else {
            "splits every routed expert over the TP ranks as it splits a dense MLP (torchtitan/models/common/moe_sharding.py expert_param_placement_dense, \"EP disabled, TP > 1\")"
        }
    )]
    TorchtitanExpertTp {
        etp: u32,
        tp: u32,
        ep: u32,
        want: u32,
    },
    #[error(
        "--zero {zero} with --cp {cp} under --framework torchtitan: torchtitan shards the parameters, gradients and optimizer states with FSDP2 over the context-parallel ranks whenever cp > 1 (torchtitan/distributed/parallel_dims.py: `fsdp_enabled` is `dp_shard_enabled or cp_enabled`), so the states are not replicated there; use {fix}"
    )]
    TorchtitanReplicatedCp { zero: u8, cp: u32, fix: String },
    #[error(
        "--tp {tp} without --sequence-parallel on a mixture-of-experts model under --framework megatron-core: Megatron-Core refuses to train MoE layers under tensor parallelism without sequence parallelism (megatron/core/transformer/moe/moe_layer.py `MoELayer.forward` raises \"performance may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism\" in training); {fix}"
    )]
    MoeTpWithoutSequenceParallel { tp: u32, fix: String },
    #[error(
        "--ep {ep} under --framework torchtitan: torchtitan draws the expert-parallel ranks from the ranks FSDP2 shards over (data_parallel_shard_degree {dp_shard}: {shard_why}) x cp {cp} x tp {tp} = {ranks}, never from the replicas (torchtitan/distributed/parallel_dims.py: ep must divide dp_shard x cp x tp); {fix}"
    )]
    TorchtitanExpertRanks {
        ep: u32,
        dp_shard: u32,
        /// Where that shard degree comes from: "--zero 0 replicates every rank's states".
        shard_why: String,
        cp: u32,
        tp: u32,
        ranks: u64,
        fix: String,
    },
    #[error(
        "--etp {etp} with --moe-dispatcher deepep: Megatron-Core's flex dispatcher then sends each token to every expert-TP rank over the tp x ep group, which tpsim does not model; use --etp 1, or --moe-dispatcher alltoall"
    )]
    DeepepWithExpertTp { etp: u32 },
    #[error(
        "--etp {etp} on {model}, whose experts have biases: Megatron-Core splits biased experts over no expert-TP ranks (TransformerConfig.__post_init__ in megatron/core/transformer/transformer_config.py asserts \"Bias in Moe is only supported when ETP==1\"; --etp defaults to --tp, as in Megatron-Core); use --etp 1"
    )]
    BiasedExpertsWithExpertTp { etp: u32, model: String },
    #[error(
        "--precision {precision}: the {gpu} has no {precision} tensor cores ({why}); use {valid}"
    )]
    PrecisionGpu {
        precision: &'static str,
        gpu: String,
        why: &'static str,
        valid: String,
    },
    #[error("--zero {zero} is not a ZeRO stage; use 0, 1, 2 or 3")]
    ZeroStage { zero: u8 },
    #[error(
        "--dp-replicas {replicas} with --zero 0: without ZeRO every data-parallel rank already holds a whole copy of the parameters, gradients and optimizer states, so there is nothing to keep in fewer copies; give --zero 1, 2 or 3, or drop --dp-replicas"
    )]
    DpReplicasWithoutZero { replicas: u32 },
    #[error(
        "--dp-replicas {replicas} does not divide {what}: each copy of the sharded states is sharded over the same number of them; valid: {valid}"
    )]
    DpReplicasDp {
        replicas: u32,
        what: String,
        valid: String,
    },
    #[error(
        "--dp-replicas {replicas} leaves each copy of the sharded states on one rank ({what} = {ranks}): that is plain data parallelism, --zero 0; give a --dp-replicas that leaves each copy 2 or more ranks, valid: {valid}"
    )]
    DpReplicasSingleRank {
        replicas: u32,
        what: &'static str,
        ranks: u64,
        /// The copies that leave each 2 or more ranks (1: no copies, drop the flag).
        valid: String,
    },
    #[error(
        "--dp-replicas {replicas} does not divide the {expert_dp} expert data-parallel ranks (GPUs of a stage / (ep x etp)) that shard the experts' states: Megatron-Core splits them into the same number of copies (parallel_state.py asserts expert_data_parallel_size % num_distributed_optimizer_instances == 0); valid: {valid}"
    )]
    DpReplicasExpertDp {
        replicas: u32,
        expert_dp: u32,
        valid: String,
    },
    #[error("--dp-replicas {replicas}: {framework} {rule}; give --dp-replicas 1{fix}")]
    DpReplicasFramework {
        replicas: u32,
        framework: &'static str,
        rule: &'static str,
        fix: &'static str,
    },
    #[error(
        "--reshard-after-forward needs --zero 3 (only FSDP/ZeRO-3 gathers parameters to reshard), but the plan has ZeRO-{zero}; use --zero 3 or drop --reshard-after-forward"
    )]
    ReshardWithoutZero3 { zero: u8 },
    #[error(
        "--zero {zero} with --optimizer-states {states}: Megatron-Core keeps bf16 moments only in its distributed optimizer (ZeRO-1); use --zero 1 or --optimizer-states fp32"
    )]
    ZeroForOptimizerStates { zero: u8, states: &'static str },
    #[error(
        "--sequence-parallel needs --tp > 1 (it splits the tensor-parallel region's norms and dropouts over the TP group)"
    )]
    SpWithoutTp,
    #[error(
        "--sequence-parallel with --tp {tp} splits each {shard_of}{local}-token sequence{per_rank} into {tp} equal shards, and {local} is not a multiple of {tp} (Megatron-Core splits the sequence dimension evenly over the tensor-parallel ranks); give a --seq-len that is a multiple of {multiple} (e.g. --seq-len {longer}), or --sequence-parallel false"
    )]
    SpSequence {
        tp: u32,
        /// Tokens of a sequence on one CP rank (the whole sequence without CP).
        local: u32,
        /// "" without CP; else the words that say the share is one CP rank's.
        shard_of: &'static str,
        per_rank: String,
        /// What the sequence must be a multiple of, and the next such length.
        multiple: u64,
        longer: u64,
    },
}

impl PlanError {
    /// [`PlanError::UlyssesWithSequenceParallel`] for `cp` beside Megatron's sequence parallelism,
    /// with the `tp` given (if any): a tp above 1 is named with its own rule and fix, since
    /// dropping sequence parallelism alone leaves it refused
    /// ([`PlanError::UlyssesWithModelParallelism`]).
    pub fn ulysses_with_sequence_parallel(cp: u32, tp: Option<u32>) -> Self {
        match tp.filter(|&tp| tp > 1) {
            Some(tp) => PlanError::UlyssesWithSequenceParallel {
                cp,
                with_tp: format!("--tp {tp} and "),
                tp_rule: ", and DeepSpeed-Ulysses runs without tensor parallelism (Megatron-DeepSpeed's initialize_model_parallel asserts tp 1)".to_string(),
                fix: "--tp 1 with ".to_string(),
            },
            None => PlanError::UlyssesWithSequenceParallel {
                cp,
                with_tp: String::new(),
                tp_rule: String::new(),
                fix: String::new(),
            },
        }
    }

    /// The error for a sequence `cp` does not split as `framework` splits it
    /// (`cp_sequence_multiple`); `valid` lists the degrees that do.
    pub fn cp_sequence(
        cp: u32,
        seq_len: u32,
        valid: String,
        framework: crate::training::TrainingFramework,
    ) -> Self {
        let chunks = cp_sequence_multiple(cp, framework);
        if !framework.cp_balances_causal_chunks() {
            return PlanError::UlyssesSequence {
                cp,
                seq_len,
                valid,
                longer: seq_len_multiple_near(seq_len, chunks),
            };
        }
        PlanError::CpSequence {
            cp,
            seq_len,
            valid,
            chunks,
            longer: seq_len_multiple_near(seq_len, chunks),
        }
    }
}

/// The sequence length a fix offers as a multiple of `multiple`: the next one after `seq_len`,
/// or the one before where the next is past the longest sequence tpsim accepts (which would be
/// refused in turn).
fn seq_len_multiple_near(seq_len: u32, multiple: u64) -> u64 {
    let longer = u64::from(seq_len).div_ceil(multiple) * multiple;
    if longer <= u64::from(crate::model::MAX_SEQ_LEN) {
        longer
    } else {
        (u64::from(seq_len) / multiple * multiple).max(multiple)
    }
}

/// Whether sequence parallelism at `tp` (under `cp`) splits each rank's share of the sequence
/// into whole shards: Megatron-Core's `_split_along_first_dim` asserts the sequence dimension
/// divides by the TP size. torchtitan's DTensor shards unevenly, so it has no such rule.
pub fn sp_splits_sequence(tp: u32, cp: u32, training: &Training) -> bool {
    training.framework == crate::training::TrainingFramework::Torchtitan
        || (training.seq_len / cp.max(1)).is_multiple_of(tp.max(1))
}

/// [`PlanError::SpSequence`] where sequence parallelism does not split the sequence evenly.
fn sp_sequence_error(tp: u32, cp: u32, sp: bool, training: &Training) -> Option<PlanError> {
    if !sp || tp < 2 || sp_splits_sequence(tp, cp, training) {
        return None;
    }
    let cp = cp.max(1);
    let local = training.seq_len / cp;
    // A multiple of tp x cp, and of 2cp (CP's load-balancing chunks) under CP.
    let whole = u64::from(tp) * u64::from(cp);
    let multiple = if cp > 1 {
        let chunks = 2 * u64::from(cp);
        whole / crate::integer::gcd(whole, chunks) * chunks
    } else {
        whole
    };
    Some(PlanError::SpSequence {
        tp,
        local,
        shard_of: if cp > 1 { "CP rank's " } else { "" },
        per_rank: if cp > 1 {
            format!(" (the {}-token sequence over --cp {cp})", training.seq_len)
        } else {
            String::new()
        },
        multiple,
        longer: seq_len_multiple_near(training.seq_len, multiple),
    })
}

/// The multiple of the sequence length context parallelism at `cp` needs under `framework`: 2·cp
/// where it balances the causal mask over 2·cp chunks, cp under DeepSpeed-Ulysses
/// (`TrainingFramework::cp_balances_causal_chunks`).
pub fn cp_sequence_multiple(cp: u32, framework: crate::training::TrainingFramework) -> u64 {
    if framework.cp_balances_causal_chunks() {
        2 * u64::from(cp)
    } else {
        u64::from(cp)
    }
}

/// Whether `cp` splits a `seq_len`-token sequence as `framework` splits it (`cp_sequence_multiple`).
pub fn cp_splits_sequence(
    cp: u32,
    seq_len: u32,
    framework: crate::training::TrainingFramework,
) -> bool {
    cp <= 1 || u64::from(seq_len).is_multiple_of(cp_sequence_multiple(cp, framework))
}

/// The context-parallel degrees, listed for a message, that split a `seq_len`-token sequence as
/// `framework` splits it (2·cp equal chunks, or cp shards under DeepSpeed-Ulysses) on `gpus` GPUs.
/// cp 1 always splits; an odd length has no larger 2·cp-chunked cp, and divisors of seq_len / 2
/// alone would list some.
pub fn cp_degrees_splitting(
    seq_len: u32,
    gpus: u32,
    framework: crate::training::TrainingFramework,
) -> String {
    let valid = (1..=seq_len.clamp(1, 256))
        .filter(|c| cp_splits_sequence(*c, seq_len, framework))
        .filter(|c| gpus.is_multiple_of(*c));
    list(valid)
}

pub fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

fn list(values: impl IntoIterator<Item = u32>) -> String {
    let items: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
    if items.len() > 16 {
        format!(
            "{}, ..., {}",
            items[..12].join(", "),
            items[items.len() - 2..].join(", ")
        )
    } else {
        items.join(", ")
    }
}

impl ParallelPlan {
    /// Checks a request against the model, cluster and batch; the only way to make a plan.
    pub fn build(
        request: &PlanRequest,
        model: &Model,
        cluster: &Cluster,
        training: &Training,
    ) -> Result<ParallelPlan, PlanError> {
        let r = request;
        check_degrees(r, cluster, training.framework.copies_split_cp())?;
        // Before the framework's own rules: their fixes (torchtitan's expert ranks, say) would
        // only lead to the stack's refusal of the framework.
        check_hybrid(r, model, training)?;
        if !training.optimizer_states.allows_zero(r.zero) {
            return Err(PlanError::ZeroForOptimizerStates {
                zero: r.zero,
                states: training.optimizer_states.as_str(),
            });
        }
        check_heads(r, model, cluster, training)?;
        check_dp_replicas(r, model, training)?;
        check_torchtitan_cp_sharding(r, training)?;
        check_moe_sequence_parallel(r, model, training)?;
        check_context_experts_precision(r, model, cluster, training)?;
        check_tensor_placement(r, cluster)?;
        let stages = stage_layout_or_valid(r, model, cluster)?;
        let num_microbatches = micro_batches(r, training)?;
        let schedule_runs = schedule_runs(r, training, num_microbatches)?;
        check_v_schedule(r, training, num_microbatches / schedule_runs)?;
        check_cpu_offload(r, training)?;
        check_bf16_layers(r, model, training)?;
        check_interleaving(
            r,
            model,
            cluster,
            &stages,
            num_microbatches,
            schedule_runs,
            training,
        )?;
        Ok(ParallelPlan {
            tp: r.tp,
            pp: r.pp,
            dp: r.dp,
            vpp: r.vpp,
            micro_batch: r.micro_batch,
            num_microbatches,
            schedule_runs,
            global_batch: training.global_batch,
            sequence_parallel: r.sequence_parallel,
            recompute: r.recompute,
            zero: r.zero,
            reshard_after_forward: r.reshard_after_forward || r.zero < 3,
            precision: r.precision,
            recompute_num_layers: if r.recompute == Recompute::Full {
                r.recompute_num_layers
            } else {
                0
            },
            cp: r.cp,
            ep: r.ep,
            etp: r.etp,
            stages,
            dp_replicas: r.dp_replicas,
        })
    }

    /// Ranks over which one copy of the ZeRO-sharded dense states is sharded: the DP×CP ranks, or
    /// their share in each of `dp_replicas` copies.
    pub fn zero_shard_ranks(&self) -> u32 {
        self.dp * self.cp / self.dp_replicas.max(1)
    }

    /// Micro-batches one pipeline schedule runs (all of the step's but with a local batch).
    pub fn microbatches_per_schedule(&self) -> u32 {
        self.num_microbatches / self.schedule_runs
    }

    /// The m of the bubble ratio (p − 1)/(v·m), in words: "m=8", or "m=2 per schedule x 4
    /// schedules" where each gradient-accumulation step runs its own schedule.
    pub fn schedule_m_words(&self) -> String {
        if self.schedule_runs > 1 {
            format!(
                "m={} per schedule x {} schedules",
                self.microbatches_per_schedule(),
                self.schedule_runs
            )
        } else {
            format!("m={}", self.num_microbatches)
        }
    }

    /// Layers of one model chunk on the most loaded stage.
    pub fn layers_per_chunk(&self) -> u32 {
        if self.stages.chunk_layers > 0 {
            return self.stages.chunk_layers;
        }
        if self.stages.even {
            // Balanced chunks (`StageLayout::balanced_chunks`): the heavier ones.
            return self.stages.max_layers().div_ceil(self.vpp).max(1);
        }
        (self.stages.max_layers() / self.vpp).max(1)
    }

    /// An even split's stage in chunks of unequal size (`StageLayout::balanced_chunks`): the
    /// lighter chunks' layers and how many of the stage's `vpp` chunks (the earliest virtual
    /// stages, `cost::pipeline::ChunkLayout`) hold one layer more; None for equal chunks.
    pub fn balanced_chunk_layers(&self) -> Option<(u32, u32)> {
        let per_stage = self.stages.first;
        self.stages
            .balanced_chunks(per_stage * self.pp, self.pp, self.vpp)
            .then(|| (per_stage / self.vpp, per_stage % self.vpp))
    }

    /// Share of each stage's layers that full recompute repeats in backward: 1 for every layer,
    /// N/L for Megatron's block method with N of a chunk's L layers, 0 without full recompute.
    /// The block method recomputes the first N layers of every model chunk
    /// (megatron/core/recompute.py, `recompute_method == 'block'`, over the chunk's own layers),
    /// so chunks of unequal size (7, 7, 6 with N 6) recompute min(N, L) each: 18 of 20 layers.
    pub fn recompute_share(&self) -> f64 {
        let n = self.recompute_num_layers;
        match self.recompute {
            Recompute::Full if n == 0 => 1.0,
            Recompute::Full => match self.balanced_chunk_layers() {
                Some((light, heavier)) => {
                    let recomputed =
                        heavier * n.min(light + 1) + (self.vpp - heavier) * n.min(light);
                    f64::from(recomputed) / f64::from(light * self.vpp + heavier)
                }
                None => (f64::from(n) / f64::from(self.layers_per_chunk())).min(1.0),
            },
            Recompute::None | Recompute::Selective => 0.0,
        }
    }

    /// The request that rebuilds this plan (what `plan --save` writes).
    pub fn request(&self) -> PlanRequest {
        PlanRequest {
            tp: self.tp,
            pp: self.pp,
            dp: self.dp,
            vpp: self.vpp,
            micro_batch: self.micro_batch,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            zero: self.zero,
            allow_uneven_pp: !self.stages.even,
            allow_cross_node_tp: false,
            cp: self.cp,
            ep: self.ep,
            etp: self.etp,
            precision: self.precision,
            reshard_after_forward: self.reshard_after_forward,
            recompute_num_layers: self.recompute_num_layers,
            stage_split: self
                .stages
                .given
                .then_some((self.stages.first, self.stages.last)),
            dp_replicas: self.dp_replicas,
        }
    }
}

/// Several copies of the sharded states (`PlanRequest::dp_replicas`) where the framework keeps
/// them at this ZeRO stage, and, for an MoE model, as many copies of the experts' states, which
/// must split the expert data-parallel ranks too.
fn check_dp_replicas(r: &PlanRequest, model: &Model, training: &Training) -> Result<(), PlanError> {
    if r.dp_replicas <= 1 {
        return Ok(());
    }
    if let Some((rule, fix)) = training.framework.dp_replicas_refusal(r.zero) {
        return Err(PlanError::DpReplicasFramework {
            replicas: r.dp_replicas,
            framework: training.framework.as_str(),
            rule,
            fix,
        });
    }
    // Megatron-Core's rule; torchtitan's HSDP replicates the experts' mesh (`dp_replicate` x
    // efsdp x ep) over the same copies as the dense one, so its copies always divide the expert
    // data-parallel ranks once ep divides dp_shard x cp x tp, which `framework_expert_error`
    // checks in torchtitan's words.
    if model.moe.is_some() && training.framework == crate::training::TrainingFramework::MegatronCore
    {
        let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
        let expert_group = u64::from(r.ep) * u64::from(r.etp);
        if expert_group > 0 && stage_gpus.is_multiple_of(expert_group) {
            let expert_dp = (stage_gpus / expert_group) as u32;
            // A copy of the experts' states may sit on one rank (expert DP = copies, as with ep =
            // the GPUs of a node and one copy per node): Megatron-Core asserts only the division,
            // and that copy's experts are then all-reduced whole across the copies while the
            // dense states stay sharded.
            if !expert_dp.is_multiple_of(r.dp_replicas) {
                return Err(PlanError::DpReplicasExpertDp {
                    replicas: r.dp_replicas,
                    expert_dp,
                    valid: list(divisors(
                        crate::integer::gcd(u64::from(expert_dp), u64::from(r.dp)) as u32,
                    )),
                });
            }
        }
    }
    Ok(())
}

/// The copies (divisors of `divides`) that leave each of `ranks` copies' shards 2 or more ranks,
/// listed for a fix (`1 (no copies: drop --dp-replicas)` where none does).
fn copies_of_two_or_more(divides: u32, ranks: u64) -> String {
    let valid: Vec<u32> = divisors(divides)
        .into_iter()
        .filter(|&d| d == 1 || ranks / u64::from(d) >= 2)
        .collect();
    if valid == [1] {
        "1 (no copies: drop --dp-replicas)".to_string()
    } else {
        list(valid)
    }
}

/// Every degree at least 1, a real ZeRO stage, and degrees whose product is the cluster.
fn check_degrees(
    r: &PlanRequest,
    cluster: &Cluster,
    copies_split_cp: bool,
) -> Result<(), PlanError> {
    for (what, value) in [
        ("--tp", r.tp),
        ("--cp", r.cp),
        ("--ep", r.ep),
        ("--etp", r.etp),
        ("--pp", r.pp),
        ("--dp", r.dp),
        ("--vpp", r.vpp),
        ("--micro-batch", r.micro_batch),
    ] {
        if value == 0 {
            return Err(PlanError::ZeroDegree { what });
        }
    }
    if r.zero > 3 {
        return Err(PlanError::ZeroStage { zero: r.zero });
    }
    if !r.reshard_after_forward && r.zero < 3 {
        return Err(PlanError::ReshardWithoutZero3 { zero: r.zero });
    }
    if r.dp_replicas == 0 {
        return Err(PlanError::ZeroDegree {
            what: "--dp-replicas",
        });
    }
    if r.dp_replicas > 1 && r.zero == 0 {
        return Err(PlanError::DpReplicasWithoutZero {
            replicas: r.dp_replicas,
        });
    }
    // The copies split the data-parallel ranks, with or without the CP ranks among them
    // (`TrainingFramework::copies_split_cp`).
    let data_ranks = u64::from(r.dp) * u64::from(r.cp);
    let split = if copies_split_cp {
        data_ranks
    } else {
        u64::from(r.dp)
    };
    if !split.is_multiple_of(u64::from(r.dp_replicas)) {
        let divides = u32::try_from(split).unwrap_or(r.dp);
        return Err(PlanError::DpReplicasDp {
            replicas: r.dp_replicas,
            what: if copies_split_cp && r.cp > 1 {
                format!(
                    "the --dp {} x --cp {} = {split} data-parallel ranks (Megatron-Core splits them with their CP ranks)",
                    r.dp, r.cp
                )
            } else {
                format!("the --dp {} data-parallel ranks", r.dp)
            },
            valid: copies_of_two_or_more(divides, data_ranks),
        });
    }
    if r.dp_replicas > 1 && data_ranks / u64::from(r.dp_replicas) < 2 {
        return Err(PlanError::DpReplicasSingleRank {
            replicas: r.dp_replicas,
            what: "dp x cp",
            ranks: data_ranks,
            valid: copies_of_two_or_more(u32::try_from(split).unwrap_or(r.dp), data_ranks),
        });
    }
    let gpus = cluster.total_gpus();
    let product = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.pp) * u64::from(r.dp);
    if product != u64::from(gpus) {
        let tp_pp = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.pp);
        let suggest_dp = if u64::from(gpus) % tp_pp == 0 {
            format!("e.g. --dp {}", u64::from(gpus) / tp_pp)
        } else {
            format!(
                "no --dp works: {gpus} is not a multiple of tp x cp x pp = {tp_pp}; change --tp, --cp or --pp"
            )
        };
        return Err(PlanError::GpuCount {
            tp: r.tp,
            cp: r.cp,
            pp: r.pp,
            dp: r.dp,
            product,
            gpus,
            suggest_dp,
        });
    }
    Ok(())
}

/// The expert-TP degrees the rest of `r` accepts, for an `--etp` that does not divide the expert
/// MLP width: dividing it, within a node, folding with `--ep` into the tp x cp x dp GPUs of a
/// stage (`EpFolding`), and 1 alone where DeepEP runs over experts (`DeepepWithExpertTp`) or
/// Megatron-Core runs biased experts (`BiasedExpertsWithExpertTp`). None at all when `--ep` itself
/// does not fold, which is then what to change.
fn valid_etp(r: &PlanRequest, model: &Model, cluster: &Cluster, training: &Training) -> String {
    let expert_ffn = model.moe.map_or(model.ffn_hidden, |moe| moe.ffn_hidden);
    let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
    let unsplit_only = (r.ep > 1
        && training.moe_dispatch.dispatcher == crate::training::MoeDispatcher::Deepep)
        || megatron_core_refuses_biased_expert_tp(model, training);
    let valid: Vec<u32> = divisors(expert_ffn)
        .into_iter()
        .filter(|d| *d <= cluster.nvlink_domain())
        .filter(|d| stage_gpus.is_multiple_of(u64::from(r.ep) * u64::from(*d)))
        .filter(|d| !unsplit_only || *d == 1)
        .collect();
    if valid.is_empty() {
        format!(
            "none with --ep {} (ep x etp must divide the {stage_gpus} GPUs of a pipeline stage, tp x cp x dp, and --ep {} alone does not); change --ep",
            r.ep, r.ep
        )
    } else {
        list(valid)
    }
}

/// The TP degrees that the three rules of [`check_heads`] on the model's attention and MLP
/// (heads, KV heads, dense MLP width) all admit, inside one NVLink domain unless TP may cross
/// it: what each of their refusals offers, so that taking any degree it lists passes the other
/// two (Qwen2.5-7B's 28 heads over 4 KV heads: 1, 2, 4, where the heads alone gave 7 too).
fn valid_tp_degrees(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    list(divisors(model.heads).into_iter().filter(|d| {
        (model.kv_heads.is_multiple_of(*d) || d.is_multiple_of(model.kv_heads))
            && (model.dense_layers() == 0 || model.ffn_hidden.is_multiple_of(*d))
            && (*d <= cluster.nvlink_domain() || r.allow_cross_node_tp)
    }))
}

/// TP divides the attention heads, and divides or is a multiple of the KV heads.
fn check_heads(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    training: &Training,
) -> Result<(), PlanError> {
    if !model.heads.is_multiple_of(r.tp) {
        return Err(PlanError::TpHeads {
            tp: r.tp,
            heads: model.heads,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    // Megatron-Core replicates KV heads when tp is a multiple of them (`num_query_groups <
    // tp`: each rank holds one group), so either direction of divisibility is a valid split.
    if !model.kv_heads.is_multiple_of(r.tp) && !r.tp.is_multiple_of(model.kv_heads) {
        return Err(PlanError::TpKvHeads {
            tp: r.tp,
            kv_heads: model.kv_heads,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    // Megatron's column-parallel MLP splits its width over the TP ranks (`divide(output_size,
    // world_size)` in `ColumnParallelLinear` asserts it divides), and the grouped experts theirs
    // over the expert-TP ranks.
    if model.dense_layers() > 0 && !model.ffn_hidden.is_multiple_of(r.tp) {
        return Err(PlanError::TpFfn {
            flag: "--tp",
            tp: r.tp,
            what: "MLP width",
            ffn: model.ffn_hidden,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    if let Some(moe) = model.moe {
        let etp = r.etp.max(1);
        if !moe.ffn_hidden.is_multiple_of(etp) {
            return Err(PlanError::TpFfn {
                flag: "--etp",
                tp: etp,
                what: "expert MLP width",
                ffn: moe.ffn_hidden,
                valid: valid_etp(r, model, cluster, training),
            });
        }
        // The shared experts are a dense MLP split over the TP ranks.
        if moe.shared_expert_ffn_hidden > 0 && !moe.shared_expert_ffn_hidden.is_multiple_of(r.tp) {
            return Err(PlanError::TpFfn {
                flag: "--tp",
                tp: r.tp,
                what: "shared-expert MLP width",
                ffn: moe.shared_expert_ffn_hidden,
                valid: list(
                    divisors(moe.shared_expert_ffn_hidden)
                        .into_iter()
                        .filter(|d| {
                            model.heads.is_multiple_of(*d) && *d <= cluster.nvlink_domain()
                        }),
                ),
            });
        }
    }
    Ok(())
}

/// The all-to-all exchange splits each TP rank's query and K/V heads over the CP ranks
/// (`context_parallel::heads_per_tp_rank`); None where it does or another exchange runs.
pub fn cp_heads_error(cp: u32, tp: u32, model: &Model, training: &Training) -> Option<PlanError> {
    if cp <= 1 || training.cp_exchange != crate::training::CpExchange::HeadAllToAll {
        return None;
    }
    let (query_heads, kv_heads) = crate::cost::context_parallel::heads_per_tp_rank(model, tp);
    if training.framework.replicates_kv_heads_over_cp() {
        let splits = |cp: u32| {
            query_heads.is_multiple_of(cp)
                && (kv_heads.is_multiple_of(cp) || cp.is_multiple_of(kv_heads))
        };
        return (!splits(cp)).then(|| PlanError::UlyssesHeads {
            cp,
            tp,
            query_heads,
            kv_heads,
            valid: list(divisors(query_heads).into_iter().filter(|&d| splits(d))),
        });
    }
    if query_heads.is_multiple_of(cp) && kv_heads.is_multiple_of(cp) {
        return None;
    }
    Some(PlanError::CpHeads {
        cp,
        tp,
        query_heads,
        kv_heads,
        valid: list(
            divisors(kv_heads)
                .into_iter()
                .filter(|d| query_heads.is_multiple_of(*d)),
        ),
        other: if model
            .attention_window
            .is_some_and(|w| w.windows_some_layer())
        {
            "kv-all-gather"
        } else {
            "kv-ring or kv-all-gather"
        },
    })
}

/// Whether the framework runs context parallelism only without tensor and pipeline parallelism
/// (`TrainingFramework::runs_cp_beside_tp_or_pp`) and the plan has either beside cp: the search's
/// question, without the message.
pub fn ulysses_refuses_model_parallelism(cp: u32, tp: u32, pp: u32, training: &Training) -> bool {
    cp > 1 && !training.framework.runs_cp_beside_tp_or_pp() && (tp > 1 || pp > 1)
}

/// [`PlanError::UlyssesWithModelParallelism`] where the framework runs context parallelism only
/// without tensor and pipeline parallelism (`TrainingFramework::runs_cp_beside_tp_or_pp`) and the
/// plan has either beside cp.
pub fn ulysses_model_parallel_error(
    cp: u32,
    tp: u32,
    pp: u32,
    training: &Training,
) -> Option<PlanError> {
    if !ulysses_refuses_model_parallelism(cp, tp, pp, training) {
        return None;
    }
    let (degrees, fix) = match (tp > 1, pp > 1) {
        (true, true) => (format!("--tp {tp} and --pp {pp}"), "--tp 1 --pp 1"),
        (true, false) => (format!("--tp {tp}"), "--tp 1"),
        _ => (format!("--pp {pp}"), "--pp 1"),
    };
    Some(PlanError::UlyssesWithModelParallelism {
        cp,
        degrees,
        fix: fix.to_string(),
    })
}

/// Megatron-Core's `MoELayer.forward` raises in training when the attention's TP group has more
/// than one rank and sequence parallelism is off (megatron/core/transformer/moe/moe_layer.py, in
/// every release since core_v0.12): such a plan is not one it runs.
fn check_moe_sequence_parallel(
    r: &PlanRequest,
    model: &Model,
    training: &Training,
) -> Result<(), PlanError> {
    if moe_needs_sequence_parallel(model, training.framework, r.tp) && !r.sequence_parallel {
        // Where sequence parallelism would not split the sequence either, adding it is refused in
        // turn: the fix names the sequence length it needs.
        let fix = match sp_sequence_error(r.tp, r.cp, true, training) {
            Some(PlanError::SpSequence {
                local,
                shard_of,
                per_rank,
                multiple,
                longer,
                ..
            }) => format!(
                "sequence parallelism needs each {shard_of}{local}-token sequence{per_rank} to split evenly over the {} tensor-parallel ranks, which it does not; give a --seq-len that is a multiple of {multiple} (e.g. --seq-len {longer}) with --sequence-parallel, or use --tp 1",
                r.tp
            ),
            _ => "add --sequence-parallel, or use --tp 1".to_string(),
        };
        return Err(PlanError::MoeTpWithoutSequenceParallel { tp: r.tp, fix });
    }
    Ok(())
}

/// Whether a plan of `model` at `tp` must run sequence parallelism under `framework`: Megatron-Core
/// trains MoE layers under TP only with it ([`PlanError::MoeTpWithoutSequenceParallel`]).
pub fn moe_needs_sequence_parallel(
    model: &Model,
    framework: crate::training::TrainingFramework,
    tp: u32,
) -> bool {
    framework == crate::training::TrainingFramework::MegatronCore && model.moe.is_some() && tp > 1
}

/// torchtitan turns FSDP2 on over the dp-shard x cp mesh whenever cp > 1, so a plan with cp > 1
/// and its states unsharded (ZeRO below 3) is not one it runs: the nearest it runs is ZeRO-3 with
/// one copy of the states per data-parallel rank (HSDP, each copy sharded over the cp ranks).
fn check_torchtitan_cp_sharding(r: &PlanRequest, training: &Training) -> Result<(), PlanError> {
    if training.framework != crate::training::TrainingFramework::Torchtitan
        || r.cp <= 1
        || r.zero == 3
    {
        return Ok(());
    }
    let fix = if r.dp > 1 {
        format!(
            "--zero 3 --dp-replicas {} (one copy of the states per data-parallel rank, each sharded over the cp ranks, as torchtitan runs data_parallel_replicate_degree {} beside cp), or --zero 3",
            r.dp, r.dp
        )
    } else {
        "--zero 3".to_string()
    };
    Err(PlanError::TorchtitanReplicatedCp {
        zero: r.zero,
        cp: r.cp,
        fix,
    })
}

/// What a hybrid Mamba-Transformer stack refuses whatever the degrees (the framework, the combined
/// 1F1B schedule, layer offloading): every candidate of a search fails it, so the search's "no
/// valid plan" names it in `eval`'s words. None for another model or a run the stack can take.
pub fn hybrid_run_refusal(model: &Model, training: &Training) -> Option<String> {
    match check_hybrid(&PlanRequest::default(), model, training) {
        Err(PlanError::Hybrid(words)) => Some(words),
        _ => None,
    }
}

/// A hybrid Mamba-Transformer stack (`model::hybrid`) as Megatron-Core builds it, and as far as
/// tpsim prices it: its Mamba heads and groups split over TP (`MambaMixer` asserts `nheads %
/// tp_size == 0` and `ngroups % tp_size == 0`); any pipeline split with or without virtual
/// stages, each stage priced at its own slice of the pattern, since Megatron-Core 0.17 takes the
/// split from '|' separators in the pattern (`emit::MegatronSplit::PatternSegments`,
/// `select_pipeline_segment` in megatron/core/models/hybrid/hybrid_layer_allocation.py at
/// d98e8a64ddf3: one segment per model chunk, chunk `vp·pp + rank`); context parallelism where
/// `MambaContextParallel` can split the mixer's heads and groups (`mamba_cp_refusal`);
/// Megatron-Core's stack only (2021's Megatron-LM had no Mamba layers; torchtitan and
/// DeepSpeed have no hybrid stack); Megatron-Core's default selective recompute only; no combined
/// 1F1B schedule (`combined_1f1b.py` builds each micro-batch's plan with the model's
/// `build_schedule_plan`, which `GPTModel` has and the hybrid model does not).
fn check_hybrid(r: &PlanRequest, model: &Model, training: &Training) -> Result<(), PlanError> {
    let Some(hybrid) = &model.hybrid else {
        return Ok(());
    };
    let fail = |words: String| Err(PlanError::Hybrid(words));
    let framework = training.framework;
    if framework != crate::training::TrainingFramework::MegatronCore {
        return fail(format!(
            "--framework {} with the hybrid Mamba-Transformer model {}: tpsim prices Megatron-Core's hybrid stack (MambaStack) only; use --framework megatron-core",
            framework.as_str(),
            model.name
        ));
    }
    for (count, what) in [
        (hybrid.mamba_heads, "Mamba heads"),
        (hybrid.mamba_groups, "Mamba groups"),
    ] {
        if !count.is_multiple_of(r.tp) {
            return fail(format!(
                "--tp {} does not divide the {count} {what} of {} (rule: Megatron-Core's MambaMixer splits heads and groups evenly over TP); valid: {}",
                r.tp,
                model.name,
                list(
                    divisors(hybrid.mamba_groups.min(hybrid.mamba_heads))
                        .into_iter()
                        .filter(|d| hybrid.mamba_heads.is_multiple_of(*d)
                            && hybrid.mamba_groups.is_multiple_of(*d))
                )
            ));
        }
    }
    if let Some(words) = mamba_cp_refusal(r.tp, r.cp, model) {
        return fail(words);
    }
    if training.overlap.moe_a2a && model.moe.is_some() {
        return fail(format!(
            "--overlap-moe-expert-parallel-comm with the hybrid Mamba-Transformer model {}: Megatron-Core's combined 1F1B schedule builds each micro-batch's plan with GPTModel.build_schedule_plan, which its hybrid model does not have (rule: combined_1f1b.py); give --overlap-moe-expert-parallel-comm false",
            model.name
        ));
    }
    // Layer-level CPU offloading (`--cpu-offloading-num-layers`) is TransformerBlock's
    // (`get_cpu_offload_context` in transformer_block.py); the hybrid stack has none, only the
    // fine-grained activation offloading of hybrid_model.py, which tpsim does not price.
    if training.cpu_offload_layers > 0 {
        return fail(format!(
            "--cpu-offload-layers {} with the hybrid Mamba-Transformer model {}: Megatron-Core offloads whole layers only in its transformer block (transformer_block.py get_cpu_offload_context), not in the hybrid stack; drop --cpu-offload-layers",
            training.cpu_offload_layers, model.name
        ));
    }
    Ok(())
}

/// What `MambaContextParallel` (megatron/core/ssm/mamba_context_parallel.py at d98e8a64) asserts
/// of a TP rank's Mamba heads and groups under cp > 1, in `eval`'s words, or None: every CP rank
/// needs whole heads ("nheads must be evenly divisible by tp_size * cp_size"), and whole groups —
/// a TP rank's groups split over the CP ranks ("ngroups must be evenly divisible by tp_size *
/// cp_size") or, where it holds fewer groups than cp, each group repeated over cp / groups ranks
/// ("cp_size must be evenly divisible by ngroups/tp_size"). None for a transformer and at cp 1.
pub fn mamba_cp_refusal(tp: u32, cp: u32, model: &Model) -> Option<String> {
    let hybrid = model.hybrid.as_ref().filter(|_| cp > 1)?;
    let tp = tp.max(1);
    let heads = hybrid.mamba_heads / tp;
    let groups = hybrid.mamba_groups / tp;
    let splits = |c: u32| {
        heads.is_multiple_of(c)
            && if groups < c {
                groups > 0 && c.is_multiple_of(groups)
            } else {
                groups.is_multiple_of(c)
            }
    };
    if splits(cp) {
        return None;
    }
    let valid = list(divisors(heads).into_iter().filter(|&c| splits(c)));
    let rule = if !heads.is_multiple_of(cp) {
        format!(
            "its {} Mamba heads over tp {tp} leave {heads} per TP rank, and MambaContextParallel asserts \"nheads must be evenly divisible by tp_size * cp_size\"",
            hybrid.mamba_heads
        )
    } else if groups < cp {
        format!(
            "its {} Mamba groups over tp {tp} leave {groups} per TP rank, fewer than cp, and MambaContextParallel repeats each over cp / groups ranks only where that divides (\"cp_size must be evenly divisible by ngroups/tp_size\")",
            hybrid.mamba_groups
        )
    } else {
        format!(
            "its {} Mamba groups over tp {tp} leave {groups} per TP rank, and MambaContextParallel asserts \"ngroups must be evenly divisible by tp_size * cp_size\"",
            hybrid.mamba_groups
        )
    };
    Some(format!(
        "--cp {cp} with the hybrid Mamba-Transformer model {} at --tp {tp}: {rule} (megatron/core/ssm/mamba_context_parallel.py); valid cp at tp {tp}: {valid}",
        model.name
    ))
}

/// CP splits the sequence for load balancing, experts fold into the stage, the GPU runs the precision.
fn check_context_experts_precision(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    training: &Training,
) -> Result<(), PlanError> {
    let gpus = cluster.total_gpus();
    // Megatron-DeepSpeed refuses Megatron's sequence parallelism beside Ulysses first
    // (megatron/initialize.py), then tensor and pipeline parallelism (parallel_state.py).
    if r.cp > 1
        && r.tp > 1
        && r.sequence_parallel
        && !training.framework.runs_sequence_parallelism_beside_cp()
    {
        return Err(PlanError::ulysses_with_sequence_parallel(r.cp, Some(r.tp)));
    }
    if let Some(err) = ulysses_model_parallel_error(r.cp, r.tp, r.pp, training) {
        return Err(err);
    }
    if !cp_splits_sequence(r.cp, training.seq_len, training.framework) {
        return Err(PlanError::cp_sequence(
            r.cp,
            training.seq_len,
            cp_degrees_splitting(training.seq_len, gpus, training.framework),
            training.framework,
        ));
    }
    if let Some(err) = sp_sequence_error(r.tp, r.cp, r.sequence_parallel, training) {
        return Err(err);
    }
    if r.cp > 1 && training.attention == crate::training::AttentionKernel::Unfused {
        return Err(PlanError::CpWithUnfusedAttention { cp: r.cp });
    }
    check_precision_framework(training.framework, r.precision)?;
    if r.cp > 1
        && !training.cp_exchange.runs_sliding_windows()
        && model
            .attention_window
            .is_some_and(|w| w.windows_some_layer())
    {
        return Err(PlanError::CpWithWindow {
            cp: r.cp,
            exchange: training.cp_exchange.as_str(),
        });
    }
    if let Some(err) = cp_heads_error(r.cp, r.tp, model, training) {
        return Err(err);
    }
    match model.moe {
        None if r.ep > 1 || r.etp > 1 => {
            return Err(PlanError::ExpertsOnDense {
                ep: r.ep,
                etp: r.etp,
                model: model.name.clone(),
            });
        }
        Some(moe) => {
            if !moe.experts.is_multiple_of(r.ep) {
                return Err(PlanError::EpExperts {
                    ep: r.ep,
                    experts: moe.experts,
                    valid: list(divisors(moe.experts)),
                });
            }
            // The framework's own expert layout first: torchtitan draws its EP ranks from
            // dp_shard x cp x tp with the expert TP it fixes, which that check names with the
            // --ep values it takes; Megatron-Core's folding below would tell a torchtitan run
            // to "give --etp", which torchtitan refuses at ep > 1.
            if let Some(err) = framework_expert_error(r, moe.experts, training) {
                return Err(err);
            }
            // Parallel folding: the experts' etp x ep x expert-dp fill the same tp x cp x dp
            // GPUs of a pipeline stage as the attention's (Megatron-Core parallel_state.py).
            let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
            let expert_model = u64::from(r.ep) * u64::from(r.etp);
            if stage_gpus % expert_model != 0 {
                let folds: Vec<u32> = divisors(moe.experts)
                    .into_iter()
                    .filter(|&d| stage_gpus.is_multiple_of(u64::from(d) * u64::from(r.etp)))
                    .collect();
                return Err(PlanError::EpFolding {
                    ep: r.ep,
                    etp: r.etp,
                    stage_gpus,
                    valid_ep: list(folds),
                });
            }
            // MoEFlexTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py) runs
            // DeepEP over the expert-TP x EP group with top-k x etp destinations and no separate
            // expert-TP gather; tpsim's DeepEP copy count is the EP group's alone. At ep 1 the
            // all-to-all dispatcher is what runs (`MoeDispatcher::written_for`), so it stands.
            if r.etp > 1
                && r.ep > 1
                && training.moe_dispatch.dispatcher == crate::training::MoeDispatcher::Deepep
            {
                return Err(PlanError::DeepepWithExpertTp { etp: r.etp });
            }
            if r.etp > 1 && megatron_core_refuses_biased_expert_tp(model, training) {
                return Err(PlanError::BiasedExpertsWithExpertTp {
                    etp: r.etp,
                    model: model.name.clone(),
                });
            }
        }
        None => {}
    }
    check_precision(cluster, r.precision)
}

/// Expert degrees the framework cannot lay out although they fold into the stage: torchtitan
/// does not split experts over TP ranks (no expert TP since #3167), and draws its EP ranks from
/// the FSDP shard ranks, the CP ranks and the TP ranks
/// (`TrainingFramework::expert_parallel_ranks`), so that under ZeRO-0 (replication) or HSDP's
/// copies fewer ranks are left to it than a stage has.
fn framework_expert_error(r: &PlanRequest, experts: u32, training: &Training) -> Option<PlanError> {
    let framework = training.framework;
    if !framework.runs_expert_tp(r.etp, r.ep, r.tp) {
        return Some(PlanError::TorchtitanExpertTp {
            etp: r.etp,
            tp: r.tp,
            ep: r.ep,
            want: framework.default_etp(r.tp, r.ep, true),
        });
    }
    if r.ep <= 1 && r.etp <= 1 {
        return None;
    }
    let ranks_at =
        |zero: u8, replicas: u32| framework.expert_parallel_ranks(r.tp, r.cp, r.dp, zero, replicas);
    let (ranks, dp_shard) = ranks_at(r.zero, r.dp_replicas)?;
    if ranks.is_multiple_of(u64::from(r.ep)) {
        return None;
    }
    let shard_why = if r.zero != 3 {
        format!("--zero {} replicates every rank's states", r.zero)
    } else if r.dp_replicas > 1 {
        format!("dp {} / --dp-replicas {}", r.dp, r.dp_replicas)
    } else {
        format!("dp {} under --zero 3", r.dp)
    };
    let valid: Vec<u32> = divisors(experts)
        .into_iter()
        .filter(|d| ranks.is_multiple_of(u64::from(*d)))
        .collect();
    let mut fix = format!("valid --ep here: {}", list(valid));
    if let Some((sharded, _)) = ranks_at(3, 1)
        && (r.zero != 3 || r.dp_replicas > 1)
        && sharded.is_multiple_of(u64::from(r.ep))
    {
        fix.push_str(&format!(
            ", or keep --ep {} with {}",
            r.ep,
            if r.zero != 3 {
                "--zero 3 (FSDP2 over the data-parallel ranks, torchtitan's default)"
            } else {
                "one copy of the sharded states (drop --dp-replicas)"
            }
        ));
    }
    Some(PlanError::TorchtitanExpertRanks {
        ep: r.ep,
        dp_shard,
        shard_why,
        cp: r.cp,
        tp: r.tp,
        ranks,
        fix,
    })
}

/// Megatron-Core builds experts with biases (GPT-OSS: `add_bias_linear`, as Megatron-Bridge's
/// gpt_oss_bridge.py sets it) only unsplit: `TransformerConfig.__post_init__`
/// (megatron/core/transformer/transformer_config.py) asserts `expert_tensor_parallel_size == 1`
/// whenever `num_moe_experts` is set with `add_bias_linear`, so every expert-TP degree above 1 is
/// refused there (Megatron-LM, Megatron-Bridge and NeMo alike build that config).
fn megatron_core_refuses_biased_expert_tp(model: &Model, training: &Training) -> bool {
    model.moe.is_some()
        && model.linear_bias
        && training.framework == crate::training::TrainingFramework::MegatronCore
}

/// The framework can train at `precision`: the 2021 Megatron-LM has no low-precision GEMMs.
/// `eval` meets it building the plan, `plan` before its search.
pub fn check_precision_framework(
    framework: crate::training::TrainingFramework,
    precision: Precision,
) -> Result<(), PlanError> {
    if framework == crate::training::TrainingFramework::MegatronLm2021
        && precision != Precision::Bf16
    {
        return Err(PlanError::LowPrecisionIn2021 {
            precision: precision.as_str(),
        });
    }
    Ok(())
}

/// The GPU has tensor cores for `precision` (`GpuProfile::supports`), or the error that names the
/// formats it does have. `eval` meets it building the plan, `plan` before its search.
pub fn check_precision(cluster: &Cluster, precision: Precision) -> Result<(), PlanError> {
    if let Err(why) = cluster.gpu.supports(precision) {
        let valid: Vec<&str> = Precision::ALL
            .into_iter()
            .filter(|p| cluster.gpu.supports(*p).is_ok())
            .map(Precision::as_str)
            .collect();
        return Err(PlanError::PrecisionGpu {
            precision: precision.as_str(),
            gpu: cluster.gpu.name.clone(),
            why,
            valid: valid.join(", "),
        });
    }
    Ok(())
}

/// TP stays inside an NVLink domain (unless allowed) and divides it; SP needs TP.
fn check_tensor_placement(r: &PlanRequest, cluster: &Cluster) -> Result<(), PlanError> {
    let domain = cluster.nvlink_domain();
    if r.tp > domain {
        if !r.allow_cross_node_tp {
            return Err(PlanError::TpCrossNode {
                tp: r.tp,
                gpus_per_node: domain,
            });
        }
    } else if !domain.is_multiple_of(r.tp) {
        return Err(PlanError::TpNode {
            tp: r.tp,
            gpus_per_node: domain,
            valid: list(divisors(domain)),
        });
    }
    if r.sequence_parallel && r.tp == 1 {
        return Err(PlanError::SpWithoutTp);
    }
    Ok(())
}

/// Layers per stage: even, or balanced with the embedding and loss counted as layers.
fn stage_layout(r: &PlanRequest, model: &Model) -> Result<StageLayout, PlanError> {
    if r.pp > model.layers {
        return Err(PlanError::PpLayers {
            pp: r.pp,
            layers: model.layers,
        });
    }
    if let Some((first, last)) = r.stage_split {
        if r.pp < 2 || r.vpp > 1 {
            return Err(PlanError::StageSplitNeeds {
                pp: r.pp,
                vpp: r.vpp,
            });
        }
        return StageLayout::given(model.layers, r.pp, first, last).ok_or(
            PlanError::StageSplitUneven {
                first,
                last,
                layers: model.layers,
                pp: r.pp,
            },
        );
    }
    let unit_split = unit_chunks(model, r.pp, r.vpp);
    let stages = if model.layers.is_multiple_of(r.pp) {
        StageLayout::even(model.layers, r.pp)
    } else if r.allow_uneven_pp {
        // Megatron-Bridge's DeepSeek-V3 table fills the chunks with layers where that works
        // (pp 4 x vp 4, pp 8 x vp 2, with or without MTP) and counts the units where it does not
        // (pp 8 x vp 4); without MTP, units that split evenly are counted first.
        let units_even = unit_split.is_some_and(|u| u.last_chunk_units == u.per_chunk);
        match StageLayout::filled_chunks(model.layers, r.pp, r.vpp) {
            Some(filled) if r.vpp > 1 && (model.mtp_layers > 0 || !units_even) => filled,
            _ => match unit_split {
                Some(units) if r.vpp > 1 && units.last_chunk_units != units.per_chunk => {
                    units.stages(model.layers, r.pp, r.vpp, model.mtp_layers)
                }
                Some(UnitChunks {
                    mtp_counted: false, ..
                }) if r.vpp > 1 => StageLayout::balanced_units(model.layers, r.pp, 0),
                _ => StageLayout::balanced_units(model.layers, r.pp, model.mtp_layers),
            },
        }
    } else {
        return Err(PlanError::PpUneven {
            pp: r.pp,
            layers: model.layers,
            valid: list(divisors(model.layers)),
        });
    };
    if stages.leaves_a_stage_empty(model.layers, r.pp) {
        return Err(PlanError::EmptyStage {
            pp: r.pp,
            layers: model.layers,
            valid: String::new(),
        });
    }
    Ok(stages)
}

/// [`stage_layout`], with the pipeline depths that would lay out where one leaves a stage empty.
fn stage_layout_or_valid(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
) -> Result<StageLayout, PlanError> {
    match stage_layout(r, model) {
        Err(PlanError::EmptyStage { pp, layers, .. }) => Err(PlanError::EmptyStage {
            pp,
            layers,
            valid: valid_pp(r, model, cluster),
        }),
        other => other,
    }
}

/// The pipeline depths that give every stage a transformer layer with the rest of `r` kept (its
/// tp, cp, vpp and uneven split; dp taking the GPUs left), as `--pp` values: each leaves whole
/// data-parallel replicas (tp x cp x pp divides the GPUs) and lays the layers out.
fn valid_pp(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    let model_parallel = u64::from(r.tp) * u64::from(r.cp);
    let gpus = u64::from(cluster.total_gpus());
    let per_pipeline = u32::try_from(gpus / model_parallel.max(1)).unwrap_or(u32::MAX);
    let valid = (1..=per_pipeline.min(model.layers))
        .filter(|pp| per_pipeline.is_multiple_of(*pp))
        .filter(|pp| {
            let request = PlanRequest {
                pp: *pp,
                dp: per_pipeline / pp,
                ..*r
            };
            stage_layout(&request, model).is_ok()
        });
    list(valid)
}

/// An interleaved uneven split with the embedding and the loss counted as a layer each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnitChunks {
    /// Units per model chunk (every chunk but the last).
    pub per_chunk: u32,
    /// Units of the last chunk: `per_chunk` when the units split evenly, fewer when the chunks
    /// are filled front to back and the last takes the rest.
    pub last_chunk_units: u32,
    /// Whether the MTP layers count as units of the last chunk (else they ride on top of it).
    pub mtp_counted: bool,
}

impl UnitChunks {
    /// Transformer layers of the last chunk (beside its MTP layers and the loss).
    pub fn last_chunk_layers(&self, mtp_layers: u32) -> u32 {
        if self.mtp_counted {
            self.last_chunk_units - 1 - mtp_layers
        } else {
            self.last_chunk_units - 1
        }
    }

    /// The stage layout these chunks give on `pp` stages of `vpp` chunks each: the first stage
    /// holds the embedding's unit, the last the last chunk.
    fn stages(&self, layers: u32, pp: u32, vpp: u32, mtp_layers: u32) -> StageLayout {
        let first = self.per_chunk * vpp - 1;
        let last = self.per_chunk * (vpp - 1) + self.last_chunk_layers(mtp_layers);
        let middle_max = if pp > 2 { self.per_chunk * vpp } else { 0 };
        debug_assert_eq!(first + last + middle_max * pp.saturating_sub(2), layers);
        StageLayout {
            first,
            middle_max,
            last,
            even: false,
            chunk_layers: 0,
            given: false,
        }
    }
}

/// Units per model chunk when an uneven split interleaves with the embedding and the loss counted
/// as a layer each: the units split evenly into pp x vpp chunks, the first chunk holding the
/// embedding and one layer fewer, the last the loss and one layer fewer. Megatron-Core's
/// `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`; with MTP
/// layers counted as units too where they split so, as in the layout Megatron-Bridge gives
/// DeepSeek-V3 on H100 at pp 8 x vp 4, 'Et|(tt|)*30mL' (61 layers + E + m + L = 64 units in 32
/// chunks of 2; `perf_recipes/deepseek/h100/deepseek_v3.py`), else with the MTP layers on top of
/// the last chunk ('Et|(tt|)*14tmL' for 30 layers + MTP on 16 chunks). Where neither splits
/// evenly, the units fill the chunks front to back and the last chunk takes the rest, down to the
/// loss alone: DeepSeek-V3 without MTP at pp 8 x vp 4 is 'Et|(tt|)*30L' (63 units: 31 chunks of
/// 2, then the loss), the layout of Megatron-Core's DeepSeek-V3 GB200 guide ("the last stage is
/// Loss") and of Megatron-Bridge's Kimi-K2 and DeepSeek-V3 performance configs. None when the
/// last chunk cannot hold its MTP layers and the loss, or a chunk would hold no layer.
pub(crate) fn unit_chunks(model: &Model, pp: u32, vpp: u32) -> Option<UnitChunks> {
    let chunks = pp.checked_mul(vpp).filter(|&c| c > 0)?;
    let counted = model.layers + 2 + model.mtp_layers;
    if model.mtp_layers > 0 && counted.is_multiple_of(chunks) && counted / chunks > model.mtp_layers
    {
        return Some(UnitChunks {
            per_chunk: counted / chunks,
            last_chunk_units: counted / chunks,
            mtp_counted: true,
        });
    }
    let units = model.layers + 2;
    if units.is_multiple_of(chunks) {
        return Some(UnitChunks {
            per_chunk: units / chunks,
            last_chunk_units: units / chunks,
            mtp_counted: false,
        });
    }
    if vpp < 2 || pp < 2 {
        return None;
    }
    let per_chunk = counted.div_ceil(chunks);
    let last_chunk_units = counted.checked_sub(per_chunk * (chunks - 1))?;
    (per_chunk >= 2 && last_chunk_units > model.mtp_layers).then_some(UnitChunks {
        per_chunk,
        last_chunk_units,
        mtp_counted: true,
    })
}

/// First/last stage splits worth trying for `layers` on `pp` stages without interleaving: the
/// middle stages hold c − 1 or c layers each (c = ⌈layers/pp⌉), or c + 1 with MTP layers, whose
/// weight can call for a much lighter last stage; the first stage (with the light embedding) at
/// most one more than a middle stage, the last (with the output layer) at most as many, all adding
/// up to `layers`. Empty for fewer than two stages.
pub fn first_last_splits(layers: u32, pp: u32, mtp_layers: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    if pp < 2 {
        return out;
    }
    let c = layers.div_ceil(pp);
    let middles = pp - 2;
    let widest = if mtp_layers > 0 { c + 1 } else { c };
    let middle_choices = if middles == 0 {
        c..=c
    } else {
        c.saturating_sub(1).max(1)..=widest
    };
    for middle in middle_choices {
        let Some(ends) = layers.checked_sub(middle * middles) else {
            continue;
        };
        for first in 1..=(middle + 1).min(ends.saturating_sub(1)) {
            let last = ends - first;
            if (1..=middle).contains(&last) {
                out.push((first, last));
            }
        }
    }
    out
}

/// Micro-batches per step: the global batch over dp x micro-batch, which must divide it.
fn micro_batches(r: &PlanRequest, training: &Training) -> Result<u32, PlanError> {
    let replica_batch = u64::from(r.dp) * u64::from(r.micro_batch);
    if !training.global_batch.is_multiple_of(r.dp) {
        return Err(PlanError::BatchNotDivisibleByDp {
            global_batch: training.global_batch,
            dp: r.dp,
            multiple: u64::from(training.global_batch).div_ceil(u64::from(r.dp)) * u64::from(r.dp),
        });
    }
    if u64::from(training.global_batch) % replica_batch != 0 {
        return Err(PlanError::BatchSplit {
            global_batch: training.global_batch,
            dp: r.dp,
            micro_batch: r.micro_batch,
            product: replica_batch,
            valid: list(divisors(training.global_batch / r.dp)),
        });
    }
    let num_microbatches = (u64::from(training.global_batch) / replica_batch) as u32;
    Ok(num_microbatches)
}

/// Pipeline schedules per step: one, or with a local batch (torchtitan) the replica's batch over
/// it; the local batch must hold whole micro-batches and split the replica's batch evenly.
fn schedule_runs(
    r: &PlanRequest,
    training: &Training,
    num_microbatches: u32,
) -> Result<u32, PlanError> {
    let Some(local_batch) = training.local_batch else {
        return Ok(1);
    };
    let replica_batch = num_microbatches * r.micro_batch;
    // Without a pipeline there is no schedule to split the local batch: torchtitan's non-PP
    // forward_backward_step runs the whole local batch in one forward and backward (train.py).
    if r.pp == 1 && local_batch != r.micro_batch && replica_batch.is_multiple_of(local_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "without a pipeline torchtitan runs each data-parallel rank's local batch in one forward and backward (train.py forward_backward_step), so the micro-batch is the local batch, not {}; use --micro-batch {local_batch}, or a pipeline (--pp 2 or more) whose schedule splits it",
                r.micro_batch
            ),
        });
    }
    if local_batch == 0 || !local_batch.is_multiple_of(r.micro_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "a pipeline schedule runs whole micro-batches, and --micro-batch {} does not divide it; use a multiple of {}",
                r.micro_batch, r.micro_batch
            ),
        });
    }
    if !replica_batch.is_multiple_of(local_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "each data-parallel rank trains {replica_batch} sequences per step (--global-batch {} / --dp {}), which {local_batch} does not divide; valid: {}",
                training.global_batch,
                r.dp,
                list(
                    divisors(replica_batch)
                        .into_iter()
                        .filter(|d| d.is_multiple_of(r.micro_batch))
                )
            ),
        });
    }
    Ok(replica_batch / local_batch)
}

/// The V-shaped schedules (`cost::v_schedule`): a pipeline, exactly two equal model chunks per
/// GPU (PyTorch's `ScheduleZBVZeroBubble` and `ScheduleDualPipeV` raise "ZBV requires exactly 2
/// stages per rank"), and for DualPipeV at least as many micro-batches per schedule as stages,
/// 2·pp (its own `ValueError`). An uneven split takes the interleaved chunks (`check_interleaving`),
/// placed in a V.
fn check_v_schedule(
    r: &PlanRequest,
    training: &Training,
    per_schedule: u32,
) -> Result<(), PlanError> {
    let schedule = training.pp_schedule;
    let Some(kind) = schedule.v_kind() else {
        return Ok(());
    };
    let name = schedule.as_str();
    // Without a pipeline there is nothing to schedule: one stage runs every micro-batch (`eval`
    // says so; `plan` keeps such plans among the candidates).
    if r.pp < 2 {
        return Ok(());
    }
    if r.vpp != 2 {
        return Err(PlanError::VScheduleChunks {
            schedule: name,
            vpp: r.vpp,
        });
    }
    if kind == crate::cost::v_schedule::VKind::DualPipeV && per_schedule < 2 * r.pp {
        return Err(PlanError::DualPipeVMicrobatches {
            per_schedule,
            need: 2 * r.pp,
            pp: r.pp,
        });
    }
    Ok(())
}

/// Activation offloading to the CPU (`Training::cpu_offload_layers`): Megatron-Core refuses it
/// with a pipeline and with recompute (`TransformerConfig.__post_init__`).
fn check_cpu_offload(r: &PlanRequest, training: &Training) -> Result<(), PlanError> {
    let layers = training.cpu_offload_layers;
    if layers == 0 {
        return Ok(());
    }
    if r.pp > 1 {
        return Err(PlanError::CpuOffloadWithPipeline { layers, pp: r.pp });
    }
    if r.recompute != Recompute::None {
        return Err(PlanError::CpuOffloadWithRecompute {
            layers,
            recompute: r.recompute.as_str(),
        });
    }
    Ok(())
}

/// Layers kept in bf16 (`Training::bf16_layers`) as Megatron-Core allows them under FP8 (per-tensor
/// or MXFP8; `TransformerConfig.__post_init__` checks neither rule under NVFP4): not with delayed
/// scaling, and at most `num_layers // pp` at each end.
/// Why `--pp pp` admits no plan with `training`'s layers kept in bf16 at `precision` (Megatron-Core's
/// per-stage limit, [`check_bf16_layers`]), for a pinned search's explanation; None where it does.
pub fn bf16_layers_pp_refusal(
    pp: u32,
    precision: Precision,
    model: &Model,
    training: &Training,
) -> Option<String> {
    let r = PlanRequest {
        pp,
        precision,
        ..PlanRequest::default()
    };
    match check_bf16_layers(&r, model, training) {
        Err(e @ PlanError::Bf16LayersPastStage { .. }) => Some(e.to_string()),
        _ => None,
    }
}

fn check_bf16_layers(r: &PlanRequest, model: &Model, training: &Training) -> Result<(), PlanError> {
    let keep = training.bf16_layers;
    if keep.is_none() || !matches!(r.precision, Precision::Fp8 | Precision::Mxfp8) {
        return Ok(());
    }
    if r.precision == Precision::Fp8 && training.fp8_scaling == crate::training::Fp8Scaling::Delayed
    {
        return Err(PlanError::Bf16LayersWithDelayedScaling);
    }
    let max = model.layers / r.pp.max(1);
    match keep.count_past(max) {
        Some((end, count)) => Err(PlanError::Bf16LayersPastStage {
            end,
            count,
            pp: r.pp,
            max,
            layers: model.layers,
        }),
        None => Ok(()),
    }
}

/// The layers of each stage that `r.vpp` chunks split (`check_interleaving`): an even split's
/// share, or an uneven split's chunks (filled front to back, or the embedding, the loss and the
/// MTP layers counted as a layer each: [`unit_chunks`]); None where an uneven split has neither.
fn stage_chunk_layers(r: &PlanRequest, model: &Model, stages: &StageLayout) -> Option<u32> {
    if stages.even {
        return Some(model.layers / r.pp);
    }
    if stages.chunk_layers > 0 {
        return Some(stages.chunk_layers * r.vpp);
    }
    unit_chunks(model, r.pp, r.vpp).map(|u| u.per_chunk * r.vpp)
}

/// The pipeline depths on which a V's two chunks per GPU split every stage into whole layers,
/// the rest of `r` kept (tp, cp, the uneven split; dp taking the GPUs left), as `--pp` values.
fn valid_v_pp(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    let model_parallel = u64::from(r.tp) * u64::from(r.cp);
    let gpus = u64::from(cluster.total_gpus());
    let per_pipeline = u32::try_from(gpus / model_parallel.max(1)).unwrap_or(u32::MAX);
    let valid: Vec<u32> = (2..=per_pipeline.min(model.layers))
        .filter(|pp| per_pipeline.is_multiple_of(*pp))
        .filter(|pp| {
            let request = PlanRequest {
                pp: *pp,
                dp: per_pipeline / pp,
                vpp: 2,
                ..*r
            };
            stage_layout(&request, model).is_ok_and(|stages| {
                stage_chunk_layers(&request, model, &stages).is_some_and(|n| n.is_multiple_of(2))
            })
        })
        .collect();
    if valid.is_empty() {
        format!(
            "none on these {} GPUs with tp {} and cp {} (use --pp-schedule 1f1b, or another --tp or --cp)",
            cluster.total_gpus(),
            r.tp,
            r.cp
        )
    } else {
        list(valid)
    }
}

/// Interleaving: pipeline parallelism, chunks of whole layers, micro-batches a multiple of pp.
fn check_interleaving(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    stages: &StageLayout,
    num_microbatches: u32,
    schedule_runs: u32,
    training: &Training,
) -> Result<(), PlanError> {
    let v_schedule = training
        .pp_schedule
        .v_kind()
        .map(|_| training.pp_schedule.as_str());
    let framework = training.framework;
    if r.vpp > 1 {
        if r.pp == 1 {
            return Err(PlanError::VppWithoutPp { vpp: r.vpp });
        }
        let chunked = stage_chunk_layers(r, model, stages);
        // A V's chunk count is fixed (`check_v_schedule`): the vpp values that would split the
        // stages are refused in turn, so the fix is a depth whose stages split in two.
        if let Some(schedule) = v_schedule
            && chunked.is_none_or(|per_stage| per_stage % r.vpp != 0)
        {
            return Err(PlanError::VScheduleLayers {
                schedule,
                pp: r.pp,
                split: match chunked {
                    Some(1) => {
                        "leaves 1 layer on each stage, which two chunks do not divide".to_string()
                    }
                    Some(per_stage) => format!(
                        "leaves {per_stage} layers on each stage, which two chunks do not divide"
                    ),
                    None => format!(
                        "splits the {} layers unevenly, into stages that two equal chunks do not fill (with the embedding and the loss counted as layers, or chunks filled front to back)",
                        model.layers
                    ),
                },
                valid: valid_v_pp(r, model, cluster),
            });
        }
        // Uneven splits interleave only when the embedding, the loss and the MTP layers count as
        // a layer each and these units split evenly into pp x vpp model chunks
        // ([`unit_chunks`]), or as chunks filled front to back.
        let Some(per_stage) = chunked else {
            let valid: Vec<u32> = (1..=model.layers.min(64))
                .filter(|&v| {
                    v == 1
                        || unit_chunks(model, r.pp, v).is_some()
                        || StageLayout::filled_chunks(model.layers, r.pp, v).is_some()
                })
                .collect();
            return Err(PlanError::VppUneven {
                vpp: r.vpp,
                valid: list(valid),
            });
        };
        // An even split's stages in chunks of unequal size (`StageLayout::balanced_chunks`), for
        // the frameworks that take a per-chunk layout.
        let balanced = stages.balanced_chunks(model.layers, r.pp, r.vpp)
            && r.vpp <= per_stage
            && framework.takes_chunk_layouts();
        if per_stage % r.vpp != 0 && !balanced {
            // Where unequal chunks are taken, only a chunk without a layer stops the split: the
            // divisors are no list of what works (vpp 3 of 20 layers runs, 21 does not).
            if stages.even && r.vpp > per_stage && framework.takes_chunk_layouts() {
                return Err(PlanError::VppPastStageLayers {
                    vpp: r.vpp,
                    per_stage,
                    framework: framework.as_str(),
                });
            }
            return Err(PlanError::VppLayers {
                vpp: r.vpp,
                per_stage,
                valid: list(divisors(per_stage)),
                unequal: if stages.even && r.vpp <= per_stage && framework.interleaves_pipeline() {
                    format!(
                        " (under --framework {}, which cannot split a stage into unequal chunks; megatron-core and torchtitan can)",
                        framework.as_str()
                    )
                } else {
                    String::new()
                },
            });
        }
        // The micro-batch multiple below is Megatron's and PyTorch's interleaved 1F1B's; the V
        // schedules have their own rule (`check_v_schedule`).
        if v_schedule.is_some() {
            return Ok(());
        }
        let per_schedule = num_microbatches / schedule_runs;
        if schedule_runs > 1 && !per_schedule.is_multiple_of(r.pp) {
            return Err(PlanError::VppScheduleMicrobatches {
                vpp: r.vpp,
                per_schedule,
                runs: schedule_runs,
                pp: r.pp,
                multiple: r.pp * r.micro_batch,
            });
        }
        if !num_microbatches.is_multiple_of(r.pp) {
            // Megatron-Core (`forward_backward_pipelining_with_interleaving`): the micro-batches
            // run in groups of `microbatch_group_size_per_vp_stage` (default pp) per model chunk,
            // and a last group shorter than pp is refused.
            let replica = u64::from(r.dp) * u64::from(r.micro_batch);
            let multiple = replica * u64::from(r.pp);
            let global_batch = u64::from(num_microbatches) * replica;
            let below = global_batch / multiple * multiple;
            let above = below + multiple;
            let examples = if below > 0 {
                format!("--global-batch {below} or {above}")
            } else {
                format!("--global-batch {above}")
            };
            return Err(PlanError::VppMicrobatches {
                vpp: r.vpp,
                num_microbatches,
                pp: r.pp,
                multiple,
                examples,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_v3_interleaved_layouts_match_megatron_bridge() {
        // Megatron-Bridge `set_deepseek_v3_pipeline_model_parallel_layout`, 61 layers: pp 4 x vp 4
        // is embedding + 4, 14 chunks of 4, then 1 + loss; pp 8 x vp 2 the same 16 chunks.
        for (pp, vpp) in [(4, 4), (8, 2)] {
            let layout = StageLayout::filled_chunks(61, pp, vpp).unwrap();
            assert_eq!(layout.chunk_layers, 4);
            assert_eq!(layout.first, 4 * vpp);
            assert_eq!(layout.last, 4 * (vpp - 1) + 1);
            let middles = pp - 2;
            assert_eq!(layout.first + middles * layout.middle_max + layout.last, 61);
        }
        // pp 2 x vp 4: 8 chunks of 8, the last 5 (rank 0: 32 layers, rank 1: 29).
        let two = StageLayout::filled_chunks(61, 2, 4).unwrap();
        assert_eq!((two.first, two.last, two.chunk_layers), (32, 29, 8));
        // 32 chunks of 2 would need 62 layers: no such layout.
        assert_eq!(StageLayout::filled_chunks(61, 8, 4), None);
    }

    #[test]
    fn bloom_split_matches_deepspeed_partition() {
        // BLOOM tr11: rank 0 embed + 5 blocks, ranks 1-10 six blocks, rank 11 five blocks + embed.
        let layout = StageLayout::balanced_units(70, 12, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (5, 6, 5));
    }

    #[test]
    fn llama3_405b_split_matches_paper() {
        // Dubey et al. 2024 §3.3.2: 126 layers on 16 stages, one fewer on the first and last stage.
        let layout = StageLayout::balanced_units(126, 16, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (7, 8, 7));
        assert_eq!(layout.first + 14 * layout.middle_max + layout.last, 126);
    }

    #[test]
    fn remainder_goes_to_middle_stages() {
        // 10 layers + 2 = 12 units over 5 stages: base 2, remainder 2 on middles.
        // The first/last splits the search tries add up and keep the middle stages even.
        let splits = first_last_splits(61, 16, 0);
        assert!(
            splits.contains(&(4, 1)) && splits.contains(&(3, 2)),
            "{splits:?}"
        );
        for (first, last) in splits {
            let rest = 61 - first - last;
            assert_eq!(rest % 14, 0, "({first}, {last})");
            assert!(first <= rest / 14 + 1 && last <= rest / 14);
        }
        assert_eq!(first_last_splits(7, 2, 0), vec![(3, 4), (4, 3), (5, 2)]);
        assert!(first_last_splits(10, 1, 0).is_empty());
        // DeepSeek-V3 with its MTP layer on 16 stages: the MTP layer counts on the last stage.
        let mtp = StageLayout::balanced_units(61, 16, 1);
        assert_eq!((mtp.first, mtp.middle_max, mtp.last), (3, 4, 2));
        assert_eq!(mtp.first + 14 * mtp.middle_max + mtp.last, 61);
        let layout = StageLayout::balanced_units(10, 5, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (1, 3, 1));
    }
}
