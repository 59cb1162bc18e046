//! Checks that the layers split into the requested pipeline stages (even, balanced with the
//! embedding and loss counted as layers, or given), and the `--pp` values that do.

use crate::cluster::Cluster;
use crate::model::Model;

use super::error::PlanError;
use super::request::PlanRequest;
use super::stage_layout::{StageLayout, UnitChunks, unit_chunks};
use super::valid::{divisors, list};

/// Layers per stage: even, or balanced with the embedding and loss counted as layers.
pub(super) fn stage_layout(r: &PlanRequest, model: &Model) -> Result<StageLayout, PlanError> {
    if r.pp > model.layers {
        return Err(PlanError::PpLayers {
            pp: r.pp,
            layers: model.layers,
        });
    }
    if let Some((first, last)) = r.stage_split {
        if r.pp < 2 || r.vpp > 1 {
            return Err(PlanError::StageSplitNeeds {
                pp: r.pp,
                vpp: r.vpp,
            });
        }
        return StageLayout::given(model.layers, r.pp, first, last).ok_or(
            PlanError::StageSplitUneven {
                first,
                last,
                layers: model.layers,
                pp: r.pp,
            },
        );
    }
    let unit_split = unit_chunks(model, r.pp, r.vpp);
    let stages = if model.layers.is_multiple_of(r.pp) {
        StageLayout::even(model.layers, r.pp)
    } else if r.allow_uneven_pp {
        // Megatron-Bridge's DeepSeek-V3 table fills the chunks with layers where that works
        // (pp 4 x vp 4, pp 8 x vp 2, with or without MTP) and counts the units where it does not
        // (pp 8 x vp 4); without MTP, units that split evenly are counted first.
        let units_even = unit_split.is_some_and(|u| u.last_chunk_units == u.per_chunk);
        match StageLayout::filled_chunks(model.layers, r.pp, r.vpp) {
            Some(filled) if r.vpp > 1 && (model.mtp_layers > 0 || !units_even) => filled,
            _ => match unit_split {
                Some(units) if r.vpp > 1 && units.last_chunk_units != units.per_chunk => {
                    units.stages(model.layers, r.pp, r.vpp, model.mtp_layers)
                }
                Some(UnitChunks {
                    mtp_counted: false, ..
                }) if r.vpp > 1 => StageLayout::balanced_units(model.layers, r.pp, 0),
                _ => StageLayout::balanced_units(model.layers, r.pp, model.mtp_layers),
            },
        }
    } else {
        return Err(PlanError::PpUneven {
            pp: r.pp,
            layers: model.layers,
            valid: list(divisors(model.layers)),
        });
    };
    if stages.leaves_a_stage_empty(model.layers, r.pp) {
        return Err(PlanError::EmptyStage {
            pp: r.pp,
            layers: model.layers,
            valid: String::new(),
        });
    }
    Ok(stages)
}

/// [`stage_layout`], with the pipeline depths that would lay out where one leaves a stage empty.
pub(super) fn stage_layout_or_valid(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
) -> Result<StageLayout, PlanError> {
    match stage_layout(r, model) {
        Err(PlanError::EmptyStage { pp, layers, .. }) => Err(PlanError::EmptyStage {
            pp,
            layers,
            valid: valid_pp(r, model, cluster),
        }),
        other => other,
    }
}

/// The pipeline depths that give every stage a transformer layer with the rest of `r` kept (its
/// tp, cp, vpp and uneven split; dp taking the GPUs left), as `--pp` values: each leaves whole
/// data-parallel replicas (tp x cp x pp divides the GPUs) and lays the layers out.
fn valid_pp(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    let model_parallel = u64::from(r.tp) * u64::from(r.cp);
    let gpus = u64::from(cluster.total_gpus());
    let per_pipeline = u32::try_from(gpus / model_parallel.max(1)).unwrap_or(u32::MAX);
    let valid = (1..=per_pipeline.min(model.layers))
        .filter(|pp| per_pipeline.is_multiple_of(*pp))
        .filter(|pp| {
            let request = PlanRequest {
                pp: *pp,
                dp: per_pipeline / pp,
                ..*r
            };
            stage_layout(&request, model).is_ok()
        });
    list(valid)
}
