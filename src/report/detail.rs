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
    /// Decoder layers of each model chunk, per pipeline stage: one list per stage (0 to pp − 1),
    /// its chunks in virtual-stage order (chunk `round · pp + stage`), as the cost model places
    /// them (`cost::pipeline::ChunkLayout`; unequal interleaved chunks are
    /// `ParallelPlan::balanced_chunk_layers`'). MTP layers, which ride on the last stage, are not
    /// counted.
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
        stage_chunk_layers: stage_chunk_layers(model, plan),
        schedule,
    }
}

/// [`PlanDetail::stage_chunk_layers`].
fn stage_chunk_layers(model: &Model, plan: &ParallelPlan) -> Vec<Vec<u32>> {
    let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
    let (pp, vpp) = (plan.pp.max(1), plan.vpp.max(1));
    (0..pp)
        .map(|stage| {
            (0..vpp)
                .map(|round| {
                    let (start, end) = layout.range(round * pp + stage);
                    end - start
                })
                .collect()
        })
        .collect()
}
