//! What a rendered plan carries beyond its `Estimate`: its communication ledger and, when the
//! schedule simulation refined it, how. Built only for the plans a report shows.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::cost::ledger::{Ledger, ledger};
use crate::cost::simulated::ScheduleSummary;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

#[derive(Debug, Clone, Serialize)]
pub struct PlanDetail {
    pub ledger: Ledger,
    /// Decoder layers of each model chunk, per pipeline GPU: one list per GPU of a pipeline (0 to
    /// pp − 1), its chunks in the order it holds them, as the cost model places them
    /// (`cost::pipeline::ChunkLayout`; unequal interleaved chunks are
    /// `ParallelPlan::balanced_chunk_layers`'). Interleaved, GPU g holds chunks `round · pp + g`;
    /// under a V schedule (`--pp-schedule zbv|dualpipev`) its two chunks, virtual stages g and
    /// 2pp − 1 − g (`cost::v_schedule::virtual_stage`), as the breakdown and ledger count a GPU of
    /// the V (`cost::stage_times`). MTP layers, which ride on the last stage (the first GPU under
    /// a V), are not counted.
    pub stage_chunk_layers: Vec<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleSummary>,
}

pub fn detail_for(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    schedule: Option<ScheduleSummary>,
) -> PlanDetail {
    PlanDetail {
        ledger: ledger(model, cluster, training, plan),
        stage_chunk_layers: stage_chunk_layers(model, training, plan),
        schedule,
    }
}

/// [`PlanDetail::stage_chunk_layers`].
fn stage_chunk_layers(model: &Model, training: &Training, plan: &ParallelPlan) -> Vec<Vec<u32>> {
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let (pp, vpp) = (plan.pp.max(1), plan.vpp.max(1));
    let v_shaped = training.pp_schedule.v_kind().is_some() && vpp == 2;
    (0..pp)
        .map(|gpu| {
            (0..vpp)
                .map(|round| {
                    let chunk = if v_shaped {
                        crate::cost::v_schedule::virtual_stage(gpu, round, pp)
                    } else {
                        round * pp + gpu
                    };
                    let (start, end) = layout.range(chunk);
                    end - start
                })
                .collect()
        })
        .collect()
}
