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
        schedule,
    }
}
