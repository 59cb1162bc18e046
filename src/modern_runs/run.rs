//! One published run as the runs file states it (`ModernRunsFile`, `ModernRun` and its source,
//! model, hardware, plan and results): the types serde reads `validation/modern_runs.yaml` into.

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::finite_moe;
use crate::model::Model;

// Every struct below refuses keys it does not know (a typo such as `num_gpu:` would otherwise be
// dropped and the run planned on a default), as every other input file does. Keys the file
// carries for people and that tpsim does not read are listed as `IgnoredAny`: known, so
// accepted, and never read.

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModernRunsFile {
    pub schema_version: u32,
    pub runs: Vec<ModernRun>,
    #[serde(default)]
    pub generated: IgnoredAny,
    #[serde(default)]
    pub description: IgnoredAny,
    #[serde(default)]
    pub conventions: IgnoredAny,
    /// The models the runs come from; each run carries its own shape, which is what tpsim reads.
    #[serde(default)]
    pub model_catalog: IgnoredAny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModernRun {
    pub id: String,
    /// Where the run was published.
    #[serde(default)]
    pub source: RunSource,
    pub task: String,
    #[serde(default)]
    pub model_key: Option<String>,
    pub model: RunModel,
    pub hardware: RunHardware,
    pub plan: RunPlan,
    pub results: RunResults,
    #[serde(default)]
    pub flags: Vec<String>,
    /// What the source says beside the table (settings read from the run's config, caveats).
    #[serde(default)]
    pub notes: Vec<String>,
    #[serde(default)]
    pub model_source: IgnoredAny,
    /// The bundled MoE model of `model_key`, loaded once by [`parse_runs_file`]'s check of
    /// `model.moe` and priced by [`plan_run`] (`None` for a dense run, or a run read otherwise:
    /// [`plan_run`] loads it then).
    #[serde(skip)]
    pub(super) bundled_moe_model: Option<Model>,
}

/// The publication a run comes from, as the runs file cites it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSource {
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    #[serde(default)]
    pub table: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub repo: IgnoredAny,
    /// The file in `repo` the table is in, and the version it was read at: with `ref`, what names
    /// one published document (`pair_order` compares runs of one document). Any YAML value.
    #[serde(default)]
    pub path: Option<serde_json::Value>,
    #[serde(default)]
    pub commit_or_version: Option<serde_json::Value>,
}

impl RunSource {
    /// "reference, table, url" with what the file gives.
    pub fn describe(&self) -> String {
        let parts: Vec<&str> = [&self.reference, &self.table, &self.url]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if parts.is_empty() {
            "source not stated".into()
        } else {
            parts.join("; ")
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunModel {
    pub name: String,
    #[serde(default)]
    pub layers: Option<u32>,
    #[serde(default)]
    pub hidden: Option<u32>,
    #[serde(default)]
    pub heads: Option<u32>,
    #[serde(default)]
    pub kv_heads: Option<u32>,
    #[serde(default)]
    pub ffn_hidden: Option<u32>,
    #[serde(default)]
    pub vocab: Option<u32>,
    #[serde(default, deserialize_with = "finite_moe")]
    pub moe: Option<serde_json::Value>,
    #[serde(default)]
    pub seq_len: Option<u32>,
    #[serde(default)]
    pub params_b: IgnoredAny,
    #[serde(default)]
    pub active_params_b: IgnoredAny,
    /// The width of one attention head (null: hidden / heads); a dense run is built with it, an
    /// MoE run's must be its bundled model's.
    #[serde(default)]
    pub head_dim: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunHardware {
    pub gpu: String,
    /// The host as the source describes it ("Grand Teton, 8x H100 96GB HBM2e per host, 500W power limit, ...").
    #[serde(default)]
    pub system: Option<String>,
    pub num_gpus: u32,
    pub gpus_per_node: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunPlan {
    #[serde(default)]
    pub tp: Option<u32>,
    #[serde(default)]
    pub pp: Option<u32>,
    #[serde(default)]
    pub cp: Option<u32>,
    #[serde(default)]
    pub vp: Option<u32>,
    #[serde(default)]
    pub ep: Option<u32>,
    #[serde(default)]
    pub etp: Option<u32>,
    #[serde(default)]
    pub dp: Option<u32>,
    #[serde(default)]
    pub mbs: Option<u32>,
    #[serde(default)]
    pub gbs: Option<u32>,
    /// Gradient-accumulation steps (local batches per optimizer step, as AutoModel's table
    /// states them).
    #[serde(default)]
    pub ga: Option<u32>,
    #[serde(default)]
    pub precision: Option<String>,
    /// The precision as the source spells it ("float8 rowwise", "Float8 (torchao)", ...).
    #[serde(default)]
    pub precision_raw: Option<String>,
    #[serde(default)]
    pub recompute: Option<String>,
    /// Whether the run shards with FSDP (ZeRO-3); null when the source does not say. A boolean:
    /// read as any value, `fsdp: yes` or `fsdp: 1` was silently no FSDP.
    #[serde(default)]
    pub fsdp: Option<bool>,
    /// Overlap and compile settings the source states ("torch.compile, async TP", ...).
    #[serde(default)]
    pub overlap: Option<String>,
    #[serde(default)]
    pub dp_derived: IgnoredAny,
    #[serde(default)]
    pub ga_derived: IgnoredAny,
    #[serde(default)]
    pub fsdp_raw: IgnoredAny,
    /// The ZeRO stage or sharding the source states, for people (`FSDP2 (fully_shard)`; what
    /// tpsim reads is `fsdp`): read as any value, `zero: 7` passed without a word
    /// ([`check_run_zero`]).
    #[serde(default)]
    pub zero: Option<yaml_serde::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResults {
    #[serde(default)]
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Peak memory per GPU the source reports, in GiB (torchtitan logs the caching allocator's
    /// peak reserved memory, the largest over the GPUs).
    #[serde(default)]
    pub peak_memory_gib: Option<f64>,
    /// Model FLOPs per token by the source's own count (its TFLOP/s over its tokens/s).
    #[serde(default)]
    pub implied_model_flops_per_token: Option<f64>,
    // The source's other numbers, for people: tpsim compares tokens/s per GPU only. Read as
    // any value, an MFU of 1.5 or NaN, a step of 0 s or a negative TFLOP/s passed without a
    // word; each is checked against its range (`PUBLISHED_OTHER_NUMBERS`).
    #[serde(default)]
    pub tokens_per_s_total: Option<f64>,
    #[serde(default)]
    pub model_tflops_per_gpu: Option<f64>,
    #[serde(default)]
    pub mfu: Option<f64>,
    #[serde(default)]
    pub mfu_peak_tflops: Option<f64>,
    #[serde(default)]
    pub step_time_s: Option<f64>,
    /// The same peak in GB (1e9 bytes), the unit the file's conventions name: used where no
    /// `peak_memory_gib` is given (it was ignored, so a run stating its peak in GB only was
    /// compared on speed alone without a word).
    #[serde(default)]
    pub peak_memory_gb: Option<f64>,
    #[serde(default)]
    pub flop_accounting: IgnoredAny,
    #[serde(default)]
    pub derived_fields: IgnoredAny,
}
