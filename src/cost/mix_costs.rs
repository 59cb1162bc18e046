//! The unit costs of each mix of dense and MoE layers (and bf16 layers, and hybrid blocks) the
//! plan's stages hold, each computed once and kept without allocating (`MixCosts`).

use super::pipeline;
use super::{LayerMix, UnitCosts, unit_costs_at};
use crate::cluster::Cluster;
use crate::model::HybridRun;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Unit costs at each mix of dense and MoE layers the plan's stages hold, each computed once (a
/// dense model, or one whose stages are all MoE layers, has one mix).
pub(crate) struct MixCosts<'a> {
    model: &'a Model,
    cluster: &'a Cluster,
    pub(super) training: &'a Training,
    plan: &'a ParallelPlan,
    /// The mixes met so far (a fixed array: evaluation allocates nothing, and the costs are lent,
    /// not copied). Past `MIXES` distinct mixes, which a long `--moe-layer-freq` pattern or a
    /// hybrid stack over many stages meets, the last slot is recomputed.
    mixes: [Option<LayerMix>; MIXES],
    costs: [Option<UnitCosts>; MIXES],
    filled: usize,
    /// What of the plan runs in bf16 although its precision is lower.
    pub(crate) keep: pipeline::Bf16Keep,
}

/// Distinct stage mixes `MixCosts` keeps: the closed form needs four (first, the middle stages'
/// most- and fewest-MoE mixes, last).
const MIXES: usize = 4;

impl<'a> MixCosts<'a> {
    pub(crate) fn new(
        model: &'a Model,
        cluster: &'a Cluster,
        training: &'a Training,
        plan: &'a ParallelPlan,
    ) -> MixCosts<'a> {
        MixCosts {
            model,
            cluster,
            training,
            plan,
            mixes: [None; MIXES],
            costs: [None; MIXES],
            filled: 0,
            keep: pipeline::Bf16Keep::of(model, training, plan),
        }
    }

    /// Where the average layer's costs of a stage of `layers` layers, `moe_layers` of them MoE
    /// layers, a hybrid stack's `run` of them (`pipeline::ChunkLayout::stage_run`), `bf16` of them
    /// in bf16 (`pipeline::ChunkLayout::stage_bf16`), are kept ([`MixCosts::costs`]): valid while
    /// at most `MIXES` distinct mixes have been asked (after that the last slot is reused by every
    /// new mix).
    pub(crate) fn stage(
        &mut self,
        layers: u32,
        moe_layers: u32,
        run: Option<HybridRun>,
        bf16: Option<pipeline::Bf16Run>,
    ) -> usize {
        let mix =
            LayerMix::of(self.model, layers, moe_layers, run).with_bf16(self.model, layers, bf16);
        if let Some(at) = self.mixes[..self.filled]
            .iter()
            .position(|kept| *kept == Some(mix))
        {
            return at;
        }
        let at = self.filled.min(MIXES - 1);
        self.filled = (self.filled + 1).min(MIXES);
        self.mixes[at] = Some(mix);
        self.costs[at] = Some(unit_costs_at(
            self.model,
            self.cluster,
            self.training,
            self.plan,
            mix,
        ));
        at
    }

    pub(crate) fn costs(&self, at: usize) -> &UnitCosts {
        self.costs[at]
            .as_ref()
            .expect("MixCosts::stage fills the slot it returns")
    }
}
