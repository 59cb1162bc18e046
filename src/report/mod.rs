//! Renderers: one `Report` value, shown as a terminal table, JSON, YAML, or a directory of SVG
//! figures with an `index.html` (`render_files`). JSON is the contract
//! scripts and later features build on; its field names carry their units.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::model::Model;
use crate::planner::SearchStats;
use crate::training::Training;

pub mod chart_sweep;
mod detail;
mod html;
mod ledger_html;
mod svg;
mod svg_gantt;
mod svg_layout;
mod svg_memory;
mod svg_search;
mod svg_step;
mod table;

pub use detail::{PlanDetail, detail_for};
pub use html::{FILE_NAMES, ReportFiles, ReportInputs, render_files};
pub use svg::{degrees_label, plan_label};
pub use svg_gantt::{MAX_BLOCKS as GANTT_MAX_BLOCKS, block_colour};
pub use svg_layout::{MAX_NODES as LAYOUT_MAX_NODES, coordinates};
pub use svg_search::MAX_POINTS as SCATTER_MAX_POINTS;
pub use table::{
    breakdown, cost_words, explain_best, mfu_note, misfit_words, plan_words, plans_table,
    plans_table_fitted, recompute_label, scenario_line, sequences, stats_line, steps_of_tokens,
    train_basis, train_steps, zero_keep_note, zero_label, zero_stage_label,
};
pub(crate) use table::{counted, duration, shown_memory_parts};

#[derive(Debug, Clone, Serialize)]
pub struct ModelSummary {
    pub name: String,
    pub params: f64,
    /// Parameters one token uses (top-k routed experts of an MoE model; = params when dense).
    pub active_params: f64,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub ffn_hidden: u32,
    pub vocab: u32,
    pub seq_len: u32,
    pub gated_mlp: bool,
    pub linear_bias: bool,
    /// Biases on the Q, K and V projections only (Qwen2, GLM-4.5); absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub qkv_bias: bool,
    /// A norm over each query and key head (Qwen3, GLM-4.5); absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm: bool,
    pub tied_embeddings: bool,
    pub learned_position_embeddings: bool,
    /// learned_absolute, rope, alibi or none (`model::PositionEmbedding`).
    pub position_embedding_type: crate::model::PositionEmbedding,
    /// Share of each head the rotary embedding rotates, where it is not the whole head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotary_percent: Option<f64>,
    /// The rotary embedding's base θ, where it is not the frameworks' default 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotary_base: Option<f64>,
    pub norm: crate::model::Norm,
    pub dropout: bool,
    /// Width of one attention head.
    pub head_dim: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe: Option<crate::model::Moe>,
    /// Layers with an MoE MLP (`Model::moe_layers`), for the header; the JSON has `moe.layer_freq`
    /// and `moe.first_dense_layers` it follows from.
    #[serde(skip)]
    pub moe_layers: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mla: Option<crate::model::Mla>,
    /// Multi-token prediction depths after the last layer, on the last stage (0 = none).
    pub mtp_layers: u32,
    /// Sliding-window attention, when the model has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_window: Option<crate::model::AttentionWindow>,
    /// A hybrid Mamba-Transformer stack's pattern and Mamba-2 mixer (`model::hybrid`), when the
    /// model is one: its layers are each one block, not attention and an MLP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<crate::model::Hybrid>,
    /// How the shape was obtained: "bundled", "file", "flags" or "derived from --params".
    pub origin: String,
}

impl ModelSummary {
    pub fn new(model: &Model, origin: &str) -> ModelSummary {
        ModelSummary {
            name: model.name.clone(),
            params: model.params(),
            active_params: model.active_params(),
            layers: model.layers,
            hidden: model.hidden,
            heads: model.heads,
            kv_heads: model.kv_heads,
            ffn_hidden: model.ffn_hidden,
            vocab: model.vocab,
            seq_len: model.seq_len,
            gated_mlp: model.gated_mlp,
            linear_bias: model.linear_bias,
            qkv_bias: model.qkv_bias,
            qk_norm: model.qk_norm,
            tied_embeddings: model.tied_embeddings,
            learned_position_embeddings: model.learned_position_embeddings(),
            position_embedding_type: model.position_embedding,
            rotary_percent: model.rotary_percent,
            rotary_base: model.rotary_base,
            norm: model.norm,
            dropout: model.dropout,
            head_dim: model.head_dim,
            moe: model.moe,
            moe_layers: model.moe_layers(),
            mla: model.mla,
            mtp_layers: model.mtp_layers,
            attention_window: model.attention_window,
            hybrid: model.hybrid.clone(),
            origin: origin.to_string(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterSummary {
    pub gpu: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub total_gpus: u32,
    /// The device's memory (`GpuProfile::device_memory`).
    pub gpu_memory_bytes: u64,
    /// The memory per GPU the plans were held to where the user set one below the device's
    /// (`--max-memory-gib`); each plan's `memory.capacity_bytes` is this, else the device's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<u64>,
    pub peak_flops: f64,
    /// GPUs that share NVLink as this job is placed (`Cluster::nvlink_domain`).
    pub nvlink_domain_gpus: u32,
    /// The profile's NVLink domain (72 on NVL72 racks), before job placement.
    pub rack_nvlink_gpus: u32,
    /// Share of their burst rate the GPU's tensor-core kernels run at in training, beyond what the
    /// fitted framework efficiency holds (`GpuProfile::sustained_clock_factor`; 1 on Hopper).
    pub sustained_clock_factor: f64,
    /// The `--gpu` file whose profile runs under a bundled GPU's name with numbers of its own (a
    /// file naming itself `h100-sxm-80g` with GB200 numbers), with the keys that differ: the
    /// cluster line names the file, so the profile is not read as the bundled one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_file: Option<(String, Vec<String>)>,
}

impl ClusterSummary {
    pub fn new(cluster: &Cluster) -> ClusterSummary {
        ClusterSummary {
            gpu: cluster.gpu.name.clone(),
            nodes: cluster.nodes,
            gpus_per_node: cluster.gpus_per_node,
            total_gpus: cluster.total_gpus(),
            // Whole bytes already (`GpuProfile::device_memory`, `memory_capacity`).
            gpu_memory_bytes: cluster.gpu.device_memory().0 as u64,
            max_memory_bytes: cluster
                .gpu
                .memory_limit_gib
                .map(|_| cluster.gpu.memory_capacity().0 as u64),
            peak_flops: cluster.gpu.peak_flops().0,
            nvlink_domain_gpus: cluster.nvlink_domain(),
            rack_nvlink_gpus: cluster.gpu.nvlink_domain(),
            sustained_clock_factor: cluster.gpu.sustained_clock_factor(),
            gpu_file: None,
        }
    }
}

/// Everything a command reports. `details[i]`, when present, belongs to `plans[i]` and is written
/// into that plan's JSON/YAML object (`ledger`, `schedule`).
#[derive(Debug, Clone)]
pub struct Report {
    pub model: ModelSummary,
    pub cluster: ClusterSummary,
    pub training: Training,
    pub search: Option<SearchStats>,
    pub plans: Vec<Estimate>,
    pub details: Vec<PlanDetail>,
}

#[derive(Serialize)]
struct PlanOut<'a> {
    /// The estimate with its error range written in (`crate::uncertainty::annotate`).
    #[serde(flatten)]
    estimate: serde_json::Value,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    detail: Option<&'a PlanDetail>,
}

#[derive(Serialize)]
struct ReportOut<'a> {
    model: &'a ModelSummary,
    cluster: &'a ClusterSummary,
    training: &'a Training,
    #[serde(skip_serializing_if = "Option::is_none")]
    search: Option<&'a SearchStats>,
    plans: Vec<PlanOut<'a>>,
}

impl Serialize for Report {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ReportOut {
            model: &self.model,
            cluster: &self.cluster,
            training: &self.training,
            search: self.search.as_ref(),
            plans: self
                .plans
                .iter()
                .enumerate()
                .map(|(i, estimate)| {
                    let mut value = serde_json::to_value(estimate)
                        .map_err(<S::Error as serde::ser::Error>::custom)?;
                    crate::uncertainty::annotate(
                        &mut value,
                        estimate,
                        &self.cluster.gpu,
                        self.training.framework,
                        crate::uncertainty::ModelKind::of(self.model.moe.is_some()),
                    );
                    crate::memory_margin::annotate(&mut value, estimate, self.training.framework);
                    // What of `training.overlap` takes effect for this plan, as the estimate
                    // counts it (the header says the same in words).
                    value["overlap_applied"] = serde_json::to_value(crate::cost::overlap_applied(
                        self.model.moe.is_some(),
                        self.model.mtp_layers,
                        &self.training,
                        &estimate.plan,
                    ))
                    .map_err(<S::Error as serde::ser::Error>::custom)?;
                    Ok(PlanOut {
                        estimate: value,
                        detail: self.details.get(i),
                    })
                })
                .collect::<Result<_, S::Error>>()?,
        }
        .serialize(serializer)
    }
}

pub fn to_json(report: &Report) -> String {
    positive_zeros(
        &serde_json::to_string_pretty(report)
            .expect("reports contain only finite numbers and strings"),
    )
}

/// Writes every number `-0.0` as `0.0`: a product with a zero factor (no TP traffic at tp 1) can
/// come out negative zero, which means nothing to a reader. Text-level, so field order is kept; a
/// number is a `-0.0` standing alone after a space or `[` and before `,`, `]`, `}` or a line end.
fn positive_zeros(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("-0.0") {
        let before = rest[..at].chars().next_back();
        let after = rest[at + 4..].chars().next();
        let alone = matches!(before, Some(' ' | '[' | ':'))
            && matches!(after, None | Some(',' | ']' | '}' | '\n' | '\r'));
        out.push_str(&rest[..at]);
        out.push_str(if alone { "0.0" } else { "-0.0" });
        rest = &rest[at + 4..];
    }
    out.push_str(rest);
    out
}

pub fn to_yaml(report: &Report) -> String {
    positive_zeros(&yaml_serde::to_string(report).expect("reports serialize to YAML"))
}
