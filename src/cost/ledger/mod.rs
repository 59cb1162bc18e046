//! The communication ledger: every collective one GPU issues in a step, row by row, with the same
//! volumes and times `evaluate` sums up in its terms (`Estimate::terms`, `Estimate::comm`). Pure
//! and allocating, so it is built only for the plans a report shows, never in the search's hot path.
//! Each row belongs to one of the plan's groups (`groups.rs`), whose link and speed it uses.
//!
//! One file per group's rows, each with its sources: `tp.rs`, `cp.rs` (the attention blocks'
//! exchanges), `hybrid.rs` (a hybrid stack's Mamba all-to-alls), `ep.rs` (all-to-alls and expert
//! TP), `pp.rs`, `dp.rs` (ZeRO); `entry.rs` holds the row type and the step totals.
//!
//! Counts are per GPU of the stage `evaluate` reports on: TP and CP rows repeat once per layer of
//! the slowest stage (the one whose time sets the step, `cost::slowest_stage`) and per
//! micro-batch (the TP rows of the model's ends, the embedding and the output layer, once per
//! micro-batch where that stage runs them), EP rows once per MoE layer of that stage; DP rows cover the stage with the most
//! parameters. A count follows `evaluate`'s shares without rounding, so it is fractional where a
//! share is: the recomputed layers (`ParallelPlan::recompute_share`), the MLPs
//! `--recompute-modules` runs again, and the TP pairs of MoE layers at the slowest stage's own MoE
//! share (`moe::mlp_tp_pair_share_at`); each group's step total is then exactly `Estimate::comm`'s.

mod cp;
mod dp;
mod entry;
mod ep;
mod hybrid;
mod pp;
#[cfg(test)]
mod tests;
mod tp;

pub use entry::{GroupTotal, Ledger, LedgerEntry, Op, Pass, Scope, comm_group};

use super::groups::{self, GroupKind};
use super::moe;
use crate::cluster::{Cluster, LinkSpeed};
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// `count` scaled by the recomputed share of the layers (Megatron's block recompute), unrounded
/// as `evaluate` scales it.
fn recomputed(count: f64, plan: &ParallelPlan) -> f64 {
    count * plan.recompute_share()
}

/// The rows pushed so far, with what each needs to price itself: its group's link and speed.
struct Rows {
    groups: groups::Groups,
    /// The EP group's all-to-alls run at the dispatcher's speed (DeepEP forwards across domains).
    ep_speed: LinkSpeed,
    entries: Vec<LedgerEntry>,
    /// Set while the entries of the slowest stage's layers kept in bf16 are pushed.
    on_bf16_layers: bool,
}

impl Rows {
    /// Pushes one row, unless it never happens (`count` 0).
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        kind: GroupKind,
        op: Op,
        pass: Pass,
        site: &'static str,
        scope: Scope,
        count: f64,
        ranks: u32,
        tensor: f64,
    ) {
        let group = self.groups.get(kind);
        if count <= 0.0 {
            return;
        }
        let speed = if kind == GroupKind::Ep {
            self.ep_speed
        } else {
            group.speed
        };
        self.entries.push(LedgerEntry {
            group: kind,
            op,
            pass,
            site,
            scope,
            count,
            ranks,
            tensor_bytes: tensor,
            wire_bytes: op.wire_factor(ranks) * tensor,
            link: group.link,
            time_s: op.time(tensor, ranks, speed),
            bf16_layers: self.on_bf16_layers,
        });
    }
}

/// The plan and the stage each group's rows count on, as the row builders read them.
#[derive(Clone, Copy)]
struct Step<'a> {
    model: &'a Model,
    training: &'a Training,
    plan: &'a ParallelPlan,
    /// Micro-batches per step.
    m: f64,
    /// Layers of the most loaded stage (`pipeline::max_stage_layers`), as DP's gathers count them.
    max_layers: u32,
    /// The stage whose time sets the step (`cost::slowest_stage`): its layers, MoE layers,
    /// block mix and layers kept in bf16.
    slowest_layers: u32,
    slowest_moe_layers: u32,
    slowest_mix: super::LayerMix,
    slowest_bf16: Option<super::pipeline::Bf16Run>,
    /// The model's ends it runs (the embedding, the output layer), whose TP collectives it pays
    /// and which set its stage-boundary sends (`Ends::boundary_sends`).
    slowest_ends: super::Ends,
}

/// Builds the ledger of `plan`.
pub fn ledger(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Ledger {
    let groups = groups::groups(cluster, plan);
    let m = f64::from(plan.num_microbatches);
    let max_layers = super::pipeline::max_stage_layers(model, plan);
    // Per-layer collectives are counted on the stage whose time sets the step, as `evaluate`'s
    // terms count them.
    let super::SlowestStage {
        layers: slowest_layers,
        moe_layers: slowest_moe_layers,
        sends: _,
        ends: slowest_ends,
        run: slowest_run,
        bf16: slowest_bf16,
    } = super::slowest_stage(model, cluster, training, plan);
    // What its average layer holds of each block (a hybrid stack's stage, its slice of the
    // pattern) and its mix of dense and MoE layers, as `evaluate` costs it (`cost::MixCosts`).
    let slowest_mix = super::LayerMix::of(model, slowest_layers, slowest_moe_layers, slowest_run);
    // The EP group's all-to-alls run at the dispatcher's speed (DeepEP forwards across domains).
    let ep_speed = moe::ep_dispatch_speed(
        model,
        cluster,
        plan,
        training.moe_dispatch,
        groups.get(GroupKind::Ep),
    );
    let mut rows = Rows {
        groups,
        ep_speed,
        entries: Vec::new(),
        on_bf16_layers: false,
    };
    let step = Step {
        model,
        training,
        plan,
        m,
        max_layers,
        slowest_layers,
        slowest_moe_layers,
        slowest_mix,
        slowest_bf16,
        slowest_ends,
    };
    tp::rows(&mut rows, &step);
    tp::end_rows(&mut rows, &step);
    cp::rows(&mut rows, &step);
    hybrid::mamba_cp_rows(&mut rows, &step);
    ep::rows(&mut rows, &step);
    pp::rows(&mut rows, &step);
    dp::rows(&mut rows, &step);
    let entries = rows.entries;

    Ledger {
        tp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Tp),
        cp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Cp),
        ep_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Ep),
        pp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Pp),
        dp_wire_bytes: Ledger::comm_wire_bytes(&entries, GroupKind::Dp),
        entries,
    }
}
