//! What-if sweeps: the planner run once per point of one axis (nodes, model size, GPU, network
//! bandwidth, sequence length, global batch), points in parallel (rayon; each search is itself
//! parallel and deterministic, and `collect` keeps the points' order), one row per point with the
//! best plan. Time to train = tokens / (tokens per second); cost = time × GPUs × price per GPU-hour.

use serde::Serialize;

use rayon::prelude::*;

use crate::cluster::Cluster;
use crate::model::Model;
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
    pub candidates: u64,
    pub feasible: u64,
    pub tp: Option<u32>,
    pub pp: Option<u32>,
    pub dp: Option<u32>,
    pub vpp: Option<u32>,
    pub micro_batch: Option<u32>,
    pub sequence_parallel: Option<bool>,
    pub recompute: Option<&'static str>,
    pub zero: Option<u8>,
    pub step_time_s: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub mfu: Option<f64>,
    pub memory_gib: Option<f64>,
    pub capacity_gib: f64,
    pub memory_headroom_gib: Option<f64>,
    pub time_to_train_days: Option<f64>,
    pub cost_to_train: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    pub axis: Axis,
    pub tokens: Option<f64>,
    pub price_per_gpu_hour: Option<f64>,
    pub rows: Vec<Row>,
}

/// Plans every point; `tick` is called once per finished point (the progress bar).
pub fn run(
    axis: Axis,
    points: &[Point],
    options: SearchOptions,
    price_per_gpu_hour: Option<f64>,
    tick: &(dyn Fn() + Sync),
) -> Sweep {
    let rows = points
        .par_iter()
        .map(|point| {
            let row = best_row(point, options, price_per_gpu_hour);
            tick();
            row
        })
        .collect();
    Sweep {
        axis,
        tokens: points.first().and_then(|p| p.training.tokens),
        price_per_gpu_hour,
        rows,
    }
}

fn best_row(point: &Point, options: SearchOptions, price: Option<f64>) -> Row {
    let result = search(&point.model, &point.cluster, &point.training, options);
    let gpus = point.cluster.total_gpus();
    // Like `tpsim plan`: rank on the closed form, then simulate the schedule of the top plans
    // (10, plan's default --top) and take the fastest of those.
    let top: Vec<_> = result.feasible().iter().take(10).copied().collect();
    let refined = crate::planner::refine_top(&point.model, &point.cluster, &point.training, &top);
    let best = refined.plans.first();
    let capacity_gib = point.cluster.gpu.memory_capacity().0 / GIB;
    let time_to_train_s = best.and_then(|e| e.time_to_train_s);
    Row {
        value: point.value.clone(),
        gpus,
        params: point.model.params(),
        candidates: result.stats.candidates,
        feasible: result.stats.feasible,
        tp: best.map(|e| e.plan.tp),
        pp: best.map(|e| e.plan.pp),
        dp: best.map(|e| e.plan.dp),
        vpp: best.map(|e| e.plan.vpp),
        micro_batch: best.map(|e| e.plan.micro_batch),
        sequence_parallel: best.map(|e| e.plan.sequence_parallel),
        recompute: best.map(|e| e.plan.recompute.as_str()),
        zero: best.map(|e| e.plan.zero),
        step_time_s: best.map(|e| e.time.step_s.0),
        tokens_per_s: best.map(|e| e.tokens_per_s),
        mfu: best.map(|e| e.mfu),
        memory_gib: best.map(|e| e.memory.total_bytes.0 / GIB),
        capacity_gib,
        memory_headroom_gib: best.map(|e| capacity_gib - e.memory.total_bytes.0 / GIB),
        time_to_train_days: time_to_train_s.map(|s| s / 86400.0),
        cost_to_train: match (time_to_train_s, price) {
            (Some(s), Some(p)) => Some(s / 3600.0 * f64::from(gpus) * p),
            _ => None,
        },
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_default()
}

/// CSV with a header line; empty cells where nothing fits. Values are numbers or bundled names,
/// so no quoting is needed except for a value containing a comma or quote, which is quoted.
pub fn to_csv(sweep: &Sweep) -> String {
    let mut out = String::from(
        "axis,value,gpus,params,candidates,feasible,tp,pp,dp,vpp,micro_batch,sequence_parallel,recompute,zero,step_time_s,tokens_per_s,mfu,memory_gib,capacity_gib,memory_headroom_gib,time_to_train_days,cost_to_train\n",
    );
    for r in &sweep.rows {
        let value = if r.value.contains([',', '"', '\n']) {
            format!("\"{}\"", r.value.replace('"', "\"\""))
        } else {
            r.value.clone()
        };
        let cells = [
            sweep.axis.name().to_string(),
            value,
            r.gpus.to_string(),
            format!("{:.0}", r.params),
            r.candidates.to_string(),
            r.feasible.to_string(),
            opt(r.tp),
            opt(r.pp),
            opt(r.dp),
            opt(r.vpp),
            opt(r.micro_batch),
            opt(r.sequence_parallel),
            opt(r.recompute),
            opt(r.zero),
            fixed(r.step_time_s, 4),
            fixed(r.tokens_per_s, 1),
            fixed(r.mfu, 4),
            fixed(r.memory_gib, 2),
            format!("{:.2}", r.capacity_gib),
            fixed(r.memory_headroom_gib, 2),
            fixed(r.time_to_train_days, 3),
            fixed(r.cost_to_train, 0),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// A plan in one cell: `tp4 pp16 dp2 vpp1 mb2 sp recompute=none zero1`. The recompute mode is
/// keyed, so that "sp" (sequence parallelism on) is never read as "sp none" (off).
pub fn plan_label(
    [tp, pp, dp]: [u32; 3],
    vpp: &str,
    micro_batch: &str,
    sequence_parallel: bool,
    recompute: &str,
    zero: &str,
) -> String {
    format!(
        "tp{tp} pp{pp} dp{dp} vpp{vpp} mb{micro_batch} {}recompute={recompute} zero{zero}",
        if sequence_parallel { "sp " } else { "" }
    )
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
        "tokens/s".into(),
        "MFU %".into(),
        "headroom GiB".into(),
    ];
    if sweep.tokens.is_some() {
        header.push("days to train".into());
        if sweep.price_per_gpu_hour.is_some() {
            header.push("cost".into());
        }
    }
    table.set_header(header.clone());
    for r in &sweep.rows {
        let plan = match (r.tp, r.pp, r.dp) {
            (Some(tp), Some(pp), Some(dp)) => plan_label(
                [tp, pp, dp],
                &opt(r.vpp),
                &opt(r.micro_batch),
                r.sequence_parallel == Some(true),
                &opt(r.recompute),
                &opt(r.zero),
            ),
            _ => format!("nothing fits ({} candidates)", r.candidates),
        };
        let mut row = vec![
            r.value.clone(),
            r.gpus.to_string(),
            crate::units::format_count(r.params),
            plan,
            fixed(r.step_time_s, 2),
            fixed(r.tokens_per_s, 0),
            fixed(r.mfu.map(|m| 100.0 * m), 1),
            fixed(r.memory_headroom_gib, 1),
        ];
        if sweep.tokens.is_some() {
            row.push(fixed(r.time_to_train_days, 1));
            if sweep.price_per_gpu_hour.is_some() {
                row.push(
                    r.cost_to_train
                        .map(|c| format!("${}", thousands(c)))
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
    format!("{table}\n")
}

/// 1234567.8 → "1,234,568".
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::derive_shape;
    use crate::specs;
    use crate::training::GradDtype;

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
                seq_len: 2048,
                global_batch: 1536,
                grad_dtype: GradDtype::Bf16,
                tokens: Some(300e9),
                attention: crate::training::AttentionKernel::Flash,
                framework: crate::training::TrainingFramework::MegatronLm2021,
                overlap: crate::training::TrainingFramework::MegatronLm2021.default_overlap(),
                moe_imbalance: 1.0,
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
        let sweep = run(
            Axis::Nodes,
            &[point(16), point(64)],
            options,
            Some(2.0),
            &|| {},
        );
        let (small, large) = (&sweep.rows[0], &sweep.rows[1]);
        assert!(large.tokens_per_s.unwrap() > small.tokens_per_s.unwrap());
        for r in &sweep.rows {
            // cost = days × 24 × GPUs × price
            let expected = r.time_to_train_days.unwrap() * 24.0 * f64::from(r.gpus) * 2.0;
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
        let on = plan_label([4, 16, 2], "1", "2", true, "none", "1");
        assert_eq!(on, "tp4 pp16 dp2 vpp1 mb2 sp recompute=none zero1");
        assert!(!on.contains("sp none"), "{on}");
        let off = plan_label([4, 16, 2], "1", "2", false, "selective", "1");
        assert_eq!(off, "tp4 pp16 dp2 vpp1 mb2 recompute=selective zero1");
    }
}
