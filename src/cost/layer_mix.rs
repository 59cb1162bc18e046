//! What the average layer of a run of layers (one pipeline stage's) holds, `LayerMix`: its MoE
//! layers' share, each block's share (a hybrid stack's slice of the pattern, Megatron-Core's
//! `select_pipeline_segment` in megatron/core/models/hybrid/hybrid_layer_allocation.py), its bf16
//! layers (`Bf16Part`), and the mix of the stage that sets the step.

use super::Estimate;
use super::{moe, pipeline};
use crate::model::Model;
use crate::model::{BlockShares, HybridRun};

/// What the average layer of a run of layers (one pipeline stage's) holds: its MoE layers' share
/// and each block's share. A transformer's layers hold one attention and one MLP each wherever
/// they sit; a hybrid stack's stage holds its slice of the pattern (Megatron-Core slices it per
/// pipeline stage, `select_pipeline_segment` in megatron/core/models/hybrid/
/// hybrid_layer_allocation.py), so its stages can differ in their blocks as well as in their MoE
/// layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerMix {
    /// Share of the layers with an MoE MLP (0 for a dense model).
    pub moe_share: f64,
    /// Each block's share of the layers (`Model::block_shares_of`).
    pub blocks: BlockShares,
    /// A hybrid stack's run of layers these are (what its parameters are counted from); None for
    /// a transformer.
    pub run: Option<HybridRun>,
    /// The layers among these that run their GEMMs in bf16 under a low-precision plan
    /// (`pipeline::Bf16Keep`); None where all run at the plan's precision.
    pub bf16: Option<Bf16Part>,
}

/// The bf16 layers of a [`LayerMix`]: their share of its layers, and their own mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bf16Part {
    pub share: f64,
    pub moe_share: f64,
    pub blocks: BlockShares,
    pub run: Option<HybridRun>,
}

impl Bf16Part {
    /// The bf16 layers as a mix of their own.
    pub fn mix(&self) -> LayerMix {
        LayerMix {
            moe_share: self.moe_share,
            blocks: self.blocks,
            run: self.run,
            bf16: None,
        }
    }
}

impl LayerMix {
    /// Layers of a transformer (one attention and one MLP each), `moe_share` of them MoE layers.
    pub fn transformer(moe_share: f64) -> LayerMix {
        LayerMix {
            moe_share,
            blocks: BlockShares::TRANSFORMER,
            run: None,
            bf16: None,
        }
    }

    /// The average layer of the whole stack, its MTP depths included.
    pub fn whole_model(model: &Model) -> LayerMix {
        LayerMix {
            moe_share: moe::moe_layer_share(model),
            blocks: model.block_shares(),
            run: model.whole_hybrid_run(),
            bf16: None,
        }
    }

    /// Share of the layers with a dense MLP: every layer but the MoE layers in a transformer, the
    /// MLP blocks in a hybrid stack.
    pub fn dense_mlp_share(&self) -> f64 {
        (self.blocks.mlp - self.moe_share).max(0.0)
    }

    /// `layers` layers of which `moe_layers` are MoE layers, a hybrid stack's `run` of them.
    pub fn of(model: &Model, layers: u32, moe_layers: u32, run: Option<HybridRun>) -> LayerMix {
        let moe_share = if model.moe.is_none() || layers == 0 {
            0.0
        } else {
            f64::from(moe_layers.min(layers)) / f64::from(layers)
        };
        LayerMix {
            moe_share,
            blocks: run.map_or(BlockShares::TRANSFORMER, |run| model.block_shares_of(run)),
            run,
            bf16: None,
        }
    }

    /// This mix of `layers` layers with `bf16` of them running their GEMMs in bf16.
    pub fn with_bf16(
        self,
        model: &Model,
        layers: u32,
        bf16: Option<pipeline::Bf16Run>,
    ) -> LayerMix {
        let bf16 = bf16.filter(|b| b.layers > 0 && layers > 0).map(|b| {
            let part = LayerMix::of(model, b.layers, b.moe_layers, b.run);
            Bf16Part {
                share: f64::from(b.layers.min(layers)) / f64::from(layers),
                moe_share: part.moe_share,
                blocks: part.blocks,
                run: part.run,
            }
        });
        LayerMix { bf16, ..self }
    }
}

/// [`LayerMix`] of the stage that sets the step.
pub fn slowest_stage_mix(model: &Model, estimate: &Estimate) -> LayerMix {
    LayerMix::of(
        model,
        estimate.slowest_stage_layers,
        estimate.slowest_stage_moe_layers,
        estimate.slowest_stage_run,
    )
}
