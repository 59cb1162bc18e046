//! What-if sweeps: the planner run once per point of one axis (nodes, model size, GPU, network
//! bandwidth, sequence length, global batch), points in parallel (rayon; each search is itself
//! parallel and deterministic, and `collect` keeps the points' order), one row per point with the
//! best plan. Time to train = whole steps (tokens over tokens per step, rounded up) × step time; cost =
//! time × GPUs × price per GPU-hour.

use serde::Serialize;

use rayon::prelude::*;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision};
use crate::planner::{SearchOptions, search};
use crate::training::Training;
use crate::units::GIB;

/// The axis, as the domain sees it (the CLI maps its flag onto this).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    Nodes,
    Params,
    Gpu,
    NetworkBandwidth,
    SeqLen,
    GlobalBatch,
    /// Layers whose activations are offloaded to the CPU (`--cpu-offload-layers`): the
    /// memory-for-host-link trade at each count, 0 (none, every plan searched) among them.
    CpuOffloadLayers,
}

impl Axis {
    pub fn name(self) -> &'static str {
        match self {
            Axis::Nodes => "nodes",
            Axis::Params => "params",
            Axis::Gpu => "gpu",
            Axis::NetworkBandwidth => "network-bandwidth",
            Axis::SeqLen => "seq-len",
            Axis::GlobalBatch => "global-batch",
            Axis::CpuOffloadLayers => "cpu-offload-layers",
        }
    }

    /// Axis title with its unit, for tables and charts.
    pub fn title(self) -> &'static str {
        match self {
            Axis::Nodes => "nodes",
            Axis::Params => "parameters",
            Axis::Gpu => "GPU",
            Axis::NetworkBandwidth => "network GB/s per GPU",
            Axis::SeqLen => "sequence length",
            Axis::GlobalBatch => "global batch (sequences)",
            Axis::CpuOffloadLayers => "layers offloaded to the CPU",
        }
    }
}

/// One scenario to plan.
#[derive(Debug, Clone)]
pub struct Point {
    pub value: String,
    pub model: Model,
    pub cluster: Cluster,
    pub training: Training,
}

/// The best plan at one point (plan fields empty when nothing fits).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub value: String,
    pub gpus: u32,
    pub params: f64,
    /// The GPU, sequence length and global batch of this point, as `plan`'s JSON names them
    /// (`cluster.gpu`, `training.seq_len`, `training.global_batch`): a default the user did not
    /// give is in the export, not only in the note on stderr.
    pub gpu: String,
    pub seq_len: u32,
    pub global_batch: u32,
    /// The search at this point, named as `plan`'s JSON `search` names it.
    pub search: RowSearch,
    pub tp: Option<u32>,
    pub cp: Option<u32>,
    pub pp: Option<u32>,
    pub dp: Option<u32>,
    pub ep: Option<u32>,
    pub etp: Option<u32>,
    pub vpp: Option<u32>,
    pub micro_batch: Option<u32>,
    pub sequence_parallel: Option<bool>,
    pub recompute: Option<&'static str>,
    pub zero: Option<u8>,
    /// Whether ZeRO-3 regathers the parameters for the backward (`false`: kept from the
    /// forward, the table's `ZeRO-3 keep`), as `plan --format json` writes it.
    pub reshard_after_forward: Option<bool>,
    /// Copies of the ZeRO-sharded states (`plan --format json`'s `dp_replicas`).
    pub dp_replicas: Option<u32>,
    /// Number format of the GEMMs (`plan --format json`'s `precision`).
    pub precision: Option<&'static str>,
    /// Layers of each chunk recomputed whole under Megatron's block method (0: every layer, or
    /// recompute is not full), as `plan --format json` writes it.
    pub recompute_num_layers: Option<u32>,
    /// Layers whose activations this point offloads to host memory (`--cpu-offload-layers`, or
    /// the point's value under `--axis cpu-offload-layers`); 0 when none, as the CSV's column.
    pub cpu_offload_layers: u32,
    /// The best plan's step time and its range, named as `plan`'s and `eval`'s JSON `time` names
    /// them (`time.step_s`, `time.step_s_low`, `time.step_s_high`).
    pub time: RowTime,
    pub tokens_per_s: Option<f64>,
    pub tokens_per_s_low: Option<f64>,
    pub tokens_per_s_high: Option<f64>,
    pub mfu: Option<f64>,
    /// The best plan's memory per GPU, named as `plan`'s JSON `memory` names it (bytes).
    pub memory: RowMemory,
    /// Seconds to train on `--tokens`, as `plan`'s JSON `time_to_train_s` (the table prints days).
    pub time_to_train_s: Option<f64>,
    pub cost_to_train: Option<f64>,
    /// Why no split of this point is valid at all (`plan`'s "no valid plan exists" reason), when
    /// none is; the plan fields are then empty. A point whose valid plans miss memory has none.
    pub no_valid_plan: Option<String>,
    /// The best plan as the table's cell reads it (the fields above, with the recompute label).
    #[serde(skip)]
    pub label: Option<PlanLabel>,
    /// Whether the point's search priced any plan with context parallelism (cp > 1): where no
    /// point's did, `--cp-exchange` changed no number of the sweep.
    #[serde(skip)]
    pub searched_cp: bool,
    /// Whether the point's search evaluated any plan, fitting or not: a local batch that no split
    /// admits leaves candidates counted but none (`plan`'s "no valid plan exists").
    #[serde(skip)]
    pub has_plans: bool,
    /// Where the point's GPU has too few published runs for a band of its own, what its range
    /// rests on instead (the pooled band, as `plan`'s `range:` line says it): under `--axis gpu`
    /// a range drawn from no run on that GPU read as alike to its neighbours' measured ones.
    #[serde(skip)]
    pub range_pooled_basis: Option<String>,
}

/// A point's search, as `plan`'s JSON `search` says it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RowSearch {
    pub candidates: u64,
    pub feasible: u64,
}

/// The best plan's step time, as `plan`'s JSON `time` says it; empty where nothing fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowTime {
    pub step_s: Option<f64>,
    /// The range of tpsim's own error on runs like it (`uncertainty::interval`), as `plan` prints
    /// beside every step time.
    pub step_s_low: Option<f64>,
    pub step_s_high: Option<f64>,
    /// What the range rests on (the 5th–95th percentile of tpsim's error on these runs), as
    /// `plan`'s JSON `time.step_s_range_basis` says it (`uncertainty::range_basis`); the text
    /// output says it under the table only where points' bases differ.
    pub step_s_range_basis: Option<String>,
}

/// The best plan's memory on its most loaded GPU, as `plan`'s JSON `memory` says it (bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowMemory {
    pub total_bytes: Option<f64>,
    pub capacity_bytes: f64,
    /// Capacity less total: what `eval` prints as "GiB free" and the table as `free GiB`.
    pub free_bytes: Option<f64>,
    /// Where valid plans exist but none fits: the memory per GPU of the one that misses by least
    /// (`plan`'s "closest"), so the row says why nothing fits and by how much.
    pub closest_miss_bytes: Option<f64>,
    /// Where that closest plan fits the GPU but misses the host memory its offloaded activations
    /// need (`--cpu-offload-layers`): what they take per GPU there (`Memory::host_bytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closest_miss_host_bytes: Option<f64>,
    /// The host memory the profile gives each GPU, beside `closest_miss_host_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_capacity_bytes: Option<f64>,
    /// The best plan's peak memory at the high end of tpsim's measured memory error, as `plan`'s
    /// JSON `memory.total_bytes_high` (`memory_margin::point_margin`); none where nothing fits
    /// or no run states its peak memory.
    pub total_bytes_high: Option<f64>,
    /// Where that high end passes the GPU's memory: the `--max-memory-gib` that keeps the margin,
    /// as the table's `memory range:` line names it; none where the margin is kept.
    pub max_memory_gib_for_margin: Option<f64>,
    /// What `total_bytes_high` rests on, as `plan`'s JSON `memory.total_bytes_range_basis`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes_range_basis: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    pub axis: Axis,
    /// The framework every point is evaluated as, and its kernels (as `plan`'s JSON `training`).
    pub framework: Option<crate::training::TrainingFramework>,
    pub kernel_fusion: Option<crate::training::KernelFusion>,
    /// The local batch per pipeline schedule (`--local-batch`, torchtitan) and the CP exchange,
    /// as `plan`'s JSON `training` says them.
    pub local_batch: Option<u32>,
    pub cp_exchange: Option<crate::training::CpExchange>,
    /// The pipeline schedule every pipelined point runs (`--pp-schedule`), as `plan`'s JSON
    /// `training.pp_schedule` and the CSV's column say it (`1f1b` unless a V schedule is given).
    pub pp_schedule: Option<crate::training::PipelineSchedule>,
    /// Layers whose activations every point offloads to host memory (`--cpu-offload-layers`, as
    /// `plan`'s JSON `training.cpu_offload_layers`); absent when none, and under
    /// `--axis cpu-offload-layers`, whose rows each say their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_offload_layers: Option<u32>,
    /// What selective recompute recomputes under Megatron-Core (`--recompute-modules`, or the
    /// output-discarding modules the model has), as `plan`'s JSON `training` says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recompute_modules: Option<crate::training::RecomputeModules>,
    pub tokens: Option<f64>,
    pub price_per_gpu_hour: Option<f64>,
    pub rows: Vec<Row>,
    /// Whether any point's model has experts: its labels then show ep and etp (`LabelDims`).
    #[serde(skip)]
    pub experts: bool,
    /// The model's name when every point plans one named model (bundled, a model file or a
    /// Hugging Face config), for the chart's title; `None` for a shape derived from a parameter
    /// count or given by shape flags, which has no name worth printing.
    #[serde(skip)]
    pub model_name: Option<String>,
}

impl RowMemory {
    /// The free memory in GiB, as the table and the chart print it: as `eval` prints it, the
    /// printed capacity less the printed total (`units::shown_gib_left`).
    pub fn free_gib(&self) -> Option<f64> {
        self.total_bytes
            .filter(|_| self.free_bytes.is_some())
            .map(|total| crate::units::shown_gib_left(self.capacity_bytes, total))
    }
}

impl Row {
    /// The time to train in days, as the chart draws it.
    pub fn time_to_train_days(&self) -> Option<f64> {
        self.time_to_train_s.map(|s| s / 86400.0)
    }
}

/// Plans every point; `tick` is called once per finished point (the progress bar).
pub fn run(
    axis: Axis,
    points: &[Point],
    options: SearchOptions,
    tick: &(dyn Fn() + Sync),
) -> Sweep {
    let rows = points
        .par_iter()
        .map(|point| {
            let row = best_row(point, options);
            tick();
            row
        })
        .collect();
    Sweep {
        axis,
        framework: points.first().map(|p| p.training.framework),
        kernel_fusion: points.first().map(|p| p.training.kernel_fusion),
        local_batch: points.first().and_then(|p| p.training.local_batch),
        cp_exchange: points.first().map(|p| p.training.cp_exchange),
        pp_schedule: points.first().map(|p| p.training.pp_schedule),
        cpu_offload_layers: points
            .first()
            .map(|p| p.training.cpu_offload_layers)
            .filter(|n| *n > 0 && points.iter().all(|p| p.training.cpu_offload_layers == *n)),
        recompute_modules: points.first().and_then(|p| p.training.recompute_modules),
        tokens: points.first().and_then(|p| p.training.tokens),
        price_per_gpu_hour: points.first().and_then(|p| p.training.price_per_gpu_hour),
        rows,
        experts: points.iter().any(|p| p.model.moe.is_some()),
        model_name: None,
    }
}

fn best_row(point: &Point, options: SearchOptions) -> Row {
    let result = search(&point.model, &point.cluster, &point.training, options);
    let gpus = point.cluster.total_gpus();
    // Like `tpsim plan`: rank on the closed form, then simulate the schedule of the top plans
    // (10, plan's default --top) and take the fastest of those.
    let top: Vec<_> = result.feasible().iter().take(10).copied().collect();
    let refined = crate::planner::refine_top(&point.model, &point.cluster, &point.training, &top);
    let best = refined.plans.first();
    let capacity_bytes = point.cluster.gpu.memory_capacity().0;
    // Raised against the device's memory, as the table's `memory range:` line is (a
    // `--max-memory-gib` limit is the user's own margin).
    let margin = best.and_then(|e| {
        crate::memory_margin::point_margin(
            e.memory.total_bytes.0,
            point.cluster.gpu.device_memory().0,
            point.training.framework,
        )
    });
    let time_to_train_s = best.and_then(|e| e.time_to_train_s);
    let kind = crate::uncertainty::ModelKind::of(point.model.moe.is_some());
    let (band, own_band) =
        crate::uncertainty::band_for(&point.cluster.gpu.name, point.training.framework, kind);
    let range = best.map(|e| crate::uncertainty::interval(e, band));
    let range_pooled_basis = (best.is_some() && !own_band).then(|| {
        format!(
            "{} runs, {}{}",
            band.runs,
            band.basis,
            crate::uncertainty::too_few_note(&point.cluster.gpu.name)
        )
    });
    // Where nothing fits and the closest plan misses only the host memory its offloaded
    // activations need.
    let host_miss = best
        .is_none()
        .then(|| result.closest_miss())
        .flatten()
        .map(|e| e.memory)
        .filter(|m| m.misses_only_host());
    Row {
        value: point.value.clone(),
        gpus,
        params: point.model.params(),
        gpu: point.cluster.gpu.name.clone(),
        seq_len: point.training.seq_len,
        global_batch: point.training.global_batch,
        search: RowSearch {
            candidates: result.stats.candidates,
            feasible: result.stats.feasible,
        },
        tp: best.map(|e| e.plan.tp),
        cp: best.map(|e| e.plan.cp),
        pp: best.map(|e| e.plan.pp),
        dp: best.map(|e| e.plan.dp),
        ep: best.map(|e| e.plan.ep),
        etp: best.map(|e| e.plan.etp),
        vpp: best.map(|e| e.plan.vpp),
        micro_batch: best.map(|e| e.plan.micro_batch),
        sequence_parallel: best.map(|e| e.plan.sequence_parallel),
        recompute: best.map(|e| e.plan.recompute.as_str()),
        zero: best.map(|e| e.plan.zero),
        reshard_after_forward: best.map(|e| e.plan.reshard_after_forward),
        dp_replicas: best.map(|e| e.plan.dp_replicas),
        precision: best.map(|e| e.plan.precision.as_str()),
        recompute_num_layers: best.map(|e| e.plan.recompute_num_layers),
        cpu_offload_layers: point.training.cpu_offload_layers,
        label: best.map(|e| PlanLabel::of(&e.plan)),
        time: RowTime {
            step_s: best.map(|e| e.time.step_s.0),
            step_s_low: range.map(|r| r.step_s_low),
            step_s_high: range.map(|r| r.step_s_high),
            step_s_range_basis: best.map(|e| {
                crate::uncertainty::range_basis(
                    e,
                    &point.cluster.gpu.name,
                    point.training.framework,
                    kind,
                )
            }),
        },
        tokens_per_s: best.map(|e| e.tokens_per_s),
        tokens_per_s_low: range.map(|r| r.tokens_per_s_low),
        tokens_per_s_high: range.map(|r| r.tokens_per_s_high),
        mfu: best.map(|e| e.mfu),
        memory: RowMemory {
            total_bytes: best.map(|e| e.memory.total_bytes.0),
            capacity_bytes,
            free_bytes: best.map(|e| capacity_bytes - e.memory.total_bytes.0),
            closest_miss_bytes: match best {
                Some(_) => None,
                None => result.closest_miss().map(|e| e.memory.total_bytes.0),
            },
            closest_miss_host_bytes: host_miss.map(|m| m.host_bytes.0),
            host_capacity_bytes: host_miss.map(|m| m.host_capacity_bytes.0),
            total_bytes_high: margin.map(|m| m.total_bytes_high),
            max_memory_gib_for_margin: margin.and_then(|m| m.max_memory_gib_for_margin),
            total_bytes_range_basis: margin
                .and_then(|_| crate::memory_margin::range_basis(point.training.framework)),
        },
        time_to_train_s,
        // The plan's own, as `plan` and `eval` print it (`cost::cost_to_train`); the price is the
        // point's (`Training::price_per_gpu_hour`).
        cost_to_train: best.and_then(|e| e.cost_to_train),
        // Filled in by the caller, which knows how `plan` words the reason.
        no_valid_plan: None,
        searched_cp: result.ranked.iter().any(|e| e.plan.cp > 1),
        has_plans: !result.ranked.is_empty(),
        range_pooled_basis,
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_default()
}

/// A rate as [`fixed`] prints it, except that a positive one that would round to 0 keeps three
/// significant digits (`units::show_measured`), as `eval`'s throughput line shows it.
fn measured(v: Option<f64>, digits: usize) -> String {
    v.map(|x| crate::units::show_measured(x, digits))
        .unwrap_or_default()
}

/// One CSV cell: quoted (RFC 4180, quotes doubled) when it holds a comma, quote or line break.
fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// CSV with a header line; empty cells where nothing fits, and the reason in the last column where
/// no plan is valid. Where the closest miss fits the GPU but not the host memory its offloaded
/// activations need, the two host cells say so, as the JSON's `closest_miss_host_bytes` and
/// `host_capacity_bytes` and the table's cell do (its `closest_miss_bytes` alone, under the
/// capacity, would not say why). The framework, CP exchange, kernels, local batch and pipeline
/// schedule, one per sweep in the JSON, are on every row, beside each row's offloaded layers (its
/// JSON row's `cpu_offload_layers`). A cell holding a comma, quote or line break (the range's
/// basis, a custom GPU's name) is quoted as RFC 4180 has it (`csv_cell`), so a CSV
/// reader gets each cell's JSON text back.
pub fn to_csv(sweep: &Sweep) -> String {
    let mut out = String::from(
        "axis,value,gpus,params,gpu,seq_len,global_batch,framework,cp_exchange,kernel_fusion,local_batch,pp_schedule,cpu_offload_layers,search.candidates,search.feasible,tp,cp,pp,dp,ep,etp,vpp,micro_batch,sequence_parallel,recompute,recompute_num_layers,zero,reshard_after_forward,dp_replicas,precision,time.step_s,time.step_s_low,time.step_s_high,time.step_s_range_basis,tokens_per_s,tokens_per_s_low,tokens_per_s_high,mfu,memory.total_bytes,memory.capacity_bytes,memory.free_bytes,memory.closest_miss_bytes,memory.closest_miss_host_bytes,memory.host_capacity_bytes,memory.total_bytes_high,memory.max_memory_gib_for_margin,memory.total_bytes_range_basis,time_to_train_s,cost_to_train,no_valid_plan\n",
    );
    for r in &sweep.rows {
        let cells = [
            sweep.axis.name().to_string(),
            csv_cell(&r.value),
            r.gpus.to_string(),
            format!("{:.0}", r.params),
            csv_cell(&r.gpu),
            r.seq_len.to_string(),
            r.global_batch.to_string(),
            // The sweep's, as its JSON says them, on every row.
            sweep.framework.map_or("", |f| f.as_str()).to_string(),
            sweep.cp_exchange.map_or("", |e| e.as_str()).to_string(),
            sweep.kernel_fusion.map_or("", |k| k.as_str()).to_string(),
            // Empty where the framework runs one schedule on the whole batch (JSON null).
            opt(sweep.local_batch),
            // 1F1B is interleaved where a row's vpp is above 1.
            sweep.pp_schedule.map_or("1f1b", |s| s.as_str()).to_string(),
            r.cpu_offload_layers.to_string(),
            r.search.candidates.to_string(),
            r.search.feasible.to_string(),
            opt(r.tp),
            opt(r.cp),
            opt(r.pp),
            opt(r.dp),
            opt(r.ep),
            opt(r.etp),
            opt(r.vpp),
            opt(r.micro_batch),
            opt(r.sequence_parallel),
            opt(r.recompute),
            opt(r.recompute_num_layers),
            opt(r.zero),
            opt(r.reshard_after_forward),
            opt(r.dp_replicas),
            opt(r.precision),
            fixed(r.time.step_s, 4),
            fixed(r.time.step_s_low, 4),
            fixed(r.time.step_s_high, 4),
            csv_cell(r.time.step_s_range_basis.as_deref().unwrap_or_default()),
            measured(r.tokens_per_s, 1),
            measured(r.tokens_per_s_low, 1),
            measured(r.tokens_per_s_high, 1),
            measured(r.mfu, 4),
            fixed(r.memory.total_bytes, 0),
            format!("{:.0}", r.memory.capacity_bytes),
            fixed(r.memory.free_bytes, 0),
            fixed(r.memory.closest_miss_bytes, 0),
            fixed(r.memory.closest_miss_host_bytes, 0),
            fixed(r.memory.host_capacity_bytes, 0),
            fixed(r.memory.total_bytes_high, 0),
            fixed(r.memory.max_memory_gib_for_margin, 1),
            // What the memory range rests on, as the JSON's `memory.total_bytes_range_basis`.
            csv_cell(
                r.memory
                    .total_bytes_range_basis
                    .as_deref()
                    .unwrap_or_default(),
            ),
            // Whole seconds and cents, as the table's cost cell keeps cents; a positive time or
            // cost never rounds to 0 (`--tokens 1 --price-per-gpu-hour 0.001` cost $0.000329 in
            // the table and "0" here).
            measured(r.time_to_train_s, 0),
            measured(r.cost_to_train, 2),
            csv_cell(r.no_valid_plan.as_deref().unwrap_or_default()),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// A plan in one cell, in `plan`'s column order: `tp4 cp2 pp1 dp8 ep8 etp1 vpp1 mb1 sp
/// recompute none ZeRO-1 fp8`. The recompute mode follows its name, so that "sp" (sequence
/// parallelism on) is never read as "sp none" (off); its value is the plan table's
/// (`report::recompute_label`), as `eval` and `accuracy` write it: `recompute full 1/4`. cp, ep,
/// etp and the precision show as [`LabelDims`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanLabel {
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub dp: u32,
    pub ep: u32,
    pub etp: u32,
    pub vpp: u32,
    pub micro_batch: u32,
    pub sequence_parallel: bool,
    pub recompute: String,
    pub zero: u8,
    /// ZeRO-3 resharding after forward (FSDP2 `reshard_after_forward`); `false` reads
    /// `ZeRO-3 keep`, as `plan`'s table writes `3 keep`.
    pub reshard_after_forward: bool,
    /// Copies of the sharded states; above 1 the label reads `xN`, as `plan`'s table does.
    pub dp_replicas: u32,
    pub precision: Precision,
}

impl PlanLabel {
    pub fn of(p: &ParallelPlan) -> Self {
        PlanLabel {
            tp: p.tp,
            cp: p.cp,
            pp: p.pp,
            dp: p.dp,
            ep: p.ep,
            etp: p.etp,
            vpp: p.vpp,
            micro_batch: p.micro_batch,
            sequence_parallel: p.sequence_parallel,
            recompute: crate::report::recompute_label(p),
            zero: p.zero,
            reshard_after_forward: p.reshard_after_forward,
            dp_replicas: p.dp_replicas,
            precision: p.precision,
        }
    }
}

/// Which of the optional degrees a set of labels shows, by the rule of `plan`'s table
/// (`report::plans_table_fitted`: a column shows when any shown plan uses it), and ep and etp for
/// every plan of a model with experts, where ep 1 is a choice worth reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LabelDims {
    pub cp: bool,
    pub ep: bool,
    pub etp: bool,
    pub precision: bool,
}

impl LabelDims {
    pub fn of<'a>(labels: impl IntoIterator<Item = &'a PlanLabel>, experts: bool) -> Self {
        let mut dims = LabelDims {
            ep: experts,
            etp: experts,
            ..LabelDims::default()
        };
        for l in labels {
            dims.cp |= l.cp > 1;
            dims.ep |= l.ep > 1;
            dims.etp |= l.etp > 1;
            dims.precision |= l.precision != Precision::Bf16;
        }
        dims
    }
}

pub fn plan_label(l: &PlanLabel, dims: LabelDims) -> String {
    let mut out = format!("tp{}", l.tp);
    if dims.cp {
        out += &format!(" cp{}", l.cp);
    }
    out += &format!(" pp{} dp{}", l.pp, l.dp);
    if dims.ep {
        out += &format!(" ep{}", l.ep);
    }
    if dims.etp {
        out += &format!(" etp{}", l.etp);
    }
    // ZeRO as `eval`'s plan line and `plan`'s notes name it, with `plan`'s zero column after
    // the dash (`report::zero_label`): "ZeRO-1", "ZeRO-3 keep", "ZeRO-1 x4".
    out += &format!(
        " vpp{} mb{} {}recompute {} ZeRO-{}",
        l.vpp,
        l.micro_batch,
        if l.sequence_parallel { "sp " } else { "" },
        l.recompute,
        crate::report::zero_stage_label(l.zero, l.reshard_after_forward, l.dp_replicas)
    );
    if dims.precision {
        out += &format!(" {}", l.precision.as_str());
    }
    out
}

/// The sweep as a terminal table.
pub fn table(sweep: &Sweep) -> String {
    use comfy_table::{CellAlignment, Table, presets::UTF8_FULL_CONDENSED};
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED);
    let mut header = vec![
        sweep.axis.title().to_string(),
        "GPUs".into(),
        "params".into(),
        "best plan".into(),
        "step s".into(),
        "range s".into(),
        "tokens/s".into(),
        "MFU %".into(),
        "free GiB".into(),
    ];
    if sweep.tokens.is_some() {
        // `plan`'s column: its name and its cells (`report::duration`, as eval's time to train).
        header.push("train".into());
        if sweep.price_per_gpu_hour.is_some() {
            header.push("cost".into());
        }
    }
    table.set_header(header.clone());
    let dims = LabelDims::of(
        sweep.rows.iter().filter_map(|r| r.label.as_ref()),
        sweep.experts,
    );
    for r in &sweep.rows {
        let plan = match (&r.label, &r.no_valid_plan) {
            (Some(label), _) => plan_label(label, dims),
            (None, Some(_)) => "no valid plan (see below)".to_string(),
            (None, None) => match r.memory.closest_miss_bytes {
                Some(_) if r.memory.closest_miss_host_bytes.is_some() => format!(
                    "nothing fits: the closest fits the GPU but its offloaded activations need {:.1} GiB of host memory per GPU, which has {:.1} GiB ({} candidates)",
                    r.memory.closest_miss_host_bytes.unwrap_or(0.0) / GIB,
                    r.memory.host_capacity_bytes.unwrap_or(0.0) / GIB,
                    r.search.candidates
                ),
                Some(need) => format!(
                    "nothing fits: the closest needs {:.1} GiB of {:.1} GiB ({} candidates)",
                    need / GIB,
                    r.memory.capacity_bytes / GIB,
                    r.search.candidates
                ),
                None => format!("nothing fits ({} candidates)", r.search.candidates),
            },
        };
        let mut row = vec![
            r.value.clone(),
            r.gpus.to_string(),
            crate::units::format_count(r.params),
            plan,
            r.time
                .step_s
                .map(crate::units::show_step_s)
                .unwrap_or_default(),
            match (r.time.step_s_low, r.time.step_s_high) {
                (Some(low), Some(high)) => format!(
                    "{}–{}",
                    crate::units::show_step_s(low),
                    crate::units::show_step_s(high)
                ),
                _ => String::new(),
            },
            // As `eval`'s throughput line: a positive rate is never shown as 0.
            measured(r.tokens_per_s, 0),
            measured(r.mfu.map(|m| 100.0 * m), 1),
            // As `eval`'s memory line: where the printed total and capacity are the same tenths,
            // it says "under 0.1" GiB free, which the column writes "<0.1" (0.0 would read as
            // full). The CSV and JSON carry the bytes.
            match r.memory.free_gib() {
                Some(gib) if gib < 0.05 => "<0.1".to_string(),
                free => fixed(free, 1),
            },
        ];
        if sweep.tokens.is_some() {
            row.push(
                r.time_to_train_s
                    .map(crate::report::duration)
                    .unwrap_or_default(),
            );
            if sweep.price_per_gpu_hour.is_some() {
                row.push(
                    r.cost_to_train
                        .map(|c| format!("${}", cost_text(c)))
                        .unwrap_or_default(),
                );
            }
        }
        table.add_row(row);
    }
    for column in 1..header.len() {
        if column == 3 {
            continue;
        }
        if let Some(col) = table.column_mut(column) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    // As under `plan`'s table (`report::table::mfu_note`): MFU is over the bf16 peak, so a
    // low-precision plan can pass 100%.
    let mut low: Vec<&str> = sweep
        .rows
        .iter()
        .filter_map(|r| r.precision)
        .filter(|&p| p != "bf16")
        .collect();
    low.sort_unstable();
    low.dedup();
    let mut out = format!("{table}\n");
    if !low.is_empty() {
        out += &format!(
            "MFU % is model FLOPs over each GPU's bf16 peak, so {} plans can pass 100%\n",
            low.join(" and ")
        );
    }
    // What the train column rests on, as `plan`'s "train:" line says it: the token budget in
    // whole steps of each point's tokens per step (one count where every point's is the same,
    // else each point's, as under `--axis global-batch` or `--axis seq-len`).
    if let Some(tokens) = sweep.tokens {
        let trained: Vec<&Row> = sweep
            .rows
            .iter()
            .filter(|r| r.time_to_train_s.is_some())
            .collect();
        let per_step = |r: &Row| f64::from(r.global_batch) * f64::from(r.seq_len);
        if let Some(first) = trained.first() {
            let steps = if trained.iter().all(|r| per_step(r) == per_step(first)) {
                format!(
                    "in {}",
                    crate::report::steps_of_tokens(tokens, per_step(first))
                )
            } else {
                format!(
                    "in whole steps of each point's global batch x sequence length: {}",
                    trained
                        .iter()
                        .map(|r| format!(
                            "{} at {}",
                            crate::report::steps_of_tokens(tokens, per_step(r)),
                            r.value
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            out += &format!(
                "train: {} {steps}, at each point's step time\n",
                crate::units::token_count_words(tokens)
            );
        }
    }
    // A range wholly on one side of its step reads as contradicting it: said as `plan` says it,
    // once for the table where every point's range lies on the same side (the same band's
    // shift), else for each point whose does.
    let sided: Vec<(&Row, f64, f64, f64)> = sweep
        .rows
        .iter()
        .filter_map(
            |r| match (r.time.step_s, r.time.step_s_low, r.time.step_s_high) {
                (Some(step), Some(low), Some(high)) => Some((r, step, low, high)),
                _ => None,
            },
        )
        .collect();
    let above = |&(_, step, low, _): &(&Row, f64, f64, f64)| step < low;
    let below = |&(_, step, _, high): &(&Row, f64, f64, f64)| step > high;
    if sided.len() > 1 && (sided.iter().all(above) || sided.iter().all(below)) {
        let (side, way) = if sided.iter().all(above) {
            ("above", "too fast")
        } else {
            ("below", "too slow")
        };
        out += &format!(
            "range s: every point's range lies {side} its step estimate: on the runs behind it tpsim's step time has been {way}\n"
        );
    } else {
        for &(r, step, low, high) in &sided {
            if let Some(note) = crate::uncertainty::one_sided_note(step, low, high) {
                out += &format!(
                    "--axis {} at {}: range {}–{} s{note}\n",
                    sweep.axis.name(),
                    r.value,
                    crate::units::show_step_s(low),
                    crate::units::show_step_s(high)
                );
            }
        }
    }
    // A range from the pooled band, where the point's GPU has too few runs for its own, said as
    // `plan`'s `range:` line says it (only when some other point's GPU has a band of its own, so
    // the table mixes the two; else every range is alike and `plan` says the basis).
    if sweep
        .rows
        .iter()
        .any(|r| r.range_pooled_basis.is_none() && r.time.step_s.is_some())
    {
        for r in &sweep.rows {
            if let Some(basis) = &r.range_pooled_basis {
                out += &format!(
                    "--axis {} at {}: range s is the 5th–95th percentile of tpsim's error on {basis}\n",
                    sweep.axis.name(),
                    r.value
                );
            }
        }
    }
    // The reasons are too long for a cell: one line under the table per point without a plan.
    for r in &sweep.rows {
        if let Some(why) = &r.no_valid_plan {
            out += &format!(
                "--axis {} at {}: no valid plan exists: {why}\n",
                sweep.axis.name(),
                r.value
            );
        }
    }
    out
}

/// 1234567.8 → "1,234,568".
/// A cost in dollars as the table prints it: whole dollars with thousands separators, or, below
/// ten dollars, cents (three significant digits where cents would show nothing).
pub fn cost_text(dollars: f64) -> String {
    if dollars.abs() < 10.0 {
        crate::units::show_measured(dollars, 2)
    } else {
        thousands(dollars)
    }
}

pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

/// Whether a count is zero (serde's `skip_serializing_if` for an absent offload).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::derive_shape;
    use crate::specs;

    fn point(nodes: u32) -> Point {
        Point {
            value: nodes.to_string(),
            model: derive_shape(175e9, 2048).unwrap(),
            cluster: Cluster {
                gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
                nodes,
                gpus_per_node: 8,
            },
            training: Training {
                price_per_gpu_hour: Some(2.0),
                tokens: Some(300e9),
                ..Training::megatron_lm_2021(2048, 1536)
            },
        }
    }

    #[test]
    fn more_nodes_train_faster_and_cost_follows_gpu_hours() {
        let options = SearchOptions {
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..SearchOptions::default()
        };
        let sweep = run(Axis::Nodes, &[point(16), point(64)], options, &|| {});
        let (small, large) = (&sweep.rows[0], &sweep.rows[1]);
        assert!(large.tokens_per_s.unwrap() > small.tokens_per_s.unwrap());
        for r in &sweep.rows {
            // cost = days × 24 × GPUs × price
            let expected = r.time_to_train_days().unwrap() * 24.0 * f64::from(r.gpus) * 2.0;
            assert!((r.cost_to_train.unwrap() / expected - 1.0).abs() < 1e-9);
        }
        let csv = to_csv(&sweep);
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.lines().nth(1).unwrap().starts_with("nodes,16,128,"));
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(999.0), "999");
    }

    #[test]
    fn plan_label_keys_the_recompute_mode() {
        let mut label = PlanLabel {
            tp: 4,
            cp: 1,
            pp: 16,
            dp: 2,
            ep: 1,
            etp: 1,
            vpp: 1,
            micro_batch: 2,
            sequence_parallel: true,
            recompute: "none".into(),
            zero: 1,
            reshard_after_forward: true,
            dp_replicas: 1,
            precision: Precision::Bf16,
        };
        let dense = LabelDims::of([&label], false);
        let on = plan_label(&label, dense);
        assert_eq!(on, "tp4 pp16 dp2 vpp1 mb2 sp recompute none ZeRO-1");
        assert!(!on.contains("sp none"), "{on}");
        label.sequence_parallel = false;
        label.recompute = "selective".into();
        let off = plan_label(&label, dense);
        assert_eq!(off, "tp4 pp16 dp2 vpp1 mb2 recompute selective ZeRO-1");
        // ZeRO-3 keeping the gathered parameters reads as `plan`'s `3 keep`.
        label.zero = 3;
        assert_eq!(
            plan_label(&label, dense),
            "tp4 pp16 dp2 vpp1 mb2 recompute selective ZeRO-3"
        );
        label.reshard_after_forward = false;
        assert_eq!(
            plan_label(&label, dense),
            "tp4 pp16 dp2 vpp1 mb2 recompute selective ZeRO-3 keep"
        );
    }

    #[test]
    fn plan_label_shows_the_degrees_a_plan_uses() {
        let label = PlanLabel {
            tp: 4,
            cp: 2,
            pp: 1,
            dp: 8,
            ep: 8,
            etp: 1,
            vpp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: "full 1/4".into(),
            zero: 1,
            reshard_after_forward: true,
            dp_replicas: 1,
            precision: Precision::Fp8,
        };
        let text = plan_label(&label, LabelDims::of([&label], false));
        assert_eq!(
            text,
            "tp4 cp2 pp1 dp8 ep8 vpp1 mb1 sp recompute full 1/4 ZeRO-1 fp8"
        );
        // A model with experts shows ep and etp even at 1.
        let one = PlanLabel {
            cp: 1,
            ep: 1,
            precision: Precision::Bf16,
            ..label
        };
        assert_eq!(
            plan_label(&one, LabelDims::of([&one], true)),
            "tp4 pp1 dp8 ep1 etp1 vpp1 mb1 sp recompute full 1/4 ZeRO-1"
        );
    }
}
