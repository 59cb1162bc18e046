//! Micro-batches and pipeline schedules: the global batch over dp x micro-batch, torchtitan's local
//! batch, the V-shaped schedules (PyTorch `ScheduleZBVZeroBubble`, `ScheduleDualPipeV`) and
//! interleaving (Narayanan et al. 2021, interleaved 1F1B).

use crate::cluster::Cluster;
use crate::model::Model;
use crate::training::Training;

use super::check_stages::stage_layout;
use super::error::PlanError;
use super::request::PlanRequest;
use super::stage_layout::{StageLayout, unit_chunks};
use super::valid::{divisors, list};

/// Micro-batches per step: the global batch over dp x micro-batch, which must divide it.
pub(super) fn micro_batches(r: &PlanRequest, training: &Training) -> Result<u32, PlanError> {
    check_batch_split(training.global_batch, r.dp, r.micro_batch)?;
    let replica_batch = u64::from(r.dp) * u64::from(r.micro_batch);
    let num_microbatches = (u64::from(training.global_batch) / replica_batch) as u32;
    Ok(num_microbatches)
}

/// The rule every plan's batch follows: dp x micro-batch divides the global batch (so a
/// micro-batch larger than the global batch never does). `eval` and `plan` check it when a plan
/// is built; `validate --tp` checks it for the layer it runs, at its fewest replicas.
pub fn check_batch_split(global_batch: u32, dp: u32, micro_batch: u32) -> Result<(), PlanError> {
    let replica_batch = u64::from(dp) * u64::from(micro_batch);
    if !global_batch.is_multiple_of(dp) {
        return Err(PlanError::BatchNotDivisibleByDp {
            global_batch,
            dp,
            multiple: u64::from(global_batch).div_ceil(u64::from(dp)) * u64::from(dp),
        });
    }
    if u64::from(global_batch) % replica_batch != 0 {
        return Err(PlanError::BatchSplit {
            global_batch,
            dp,
            micro_batch,
            product: replica_batch,
            valid: list(divisors(global_batch / dp)),
        });
    }
    Ok(())
}

/// Pipeline schedules per step: one, or with a local batch (torchtitan) the replica's batch over
/// it; the local batch must hold whole micro-batches and split the replica's batch evenly.
pub(super) fn schedule_runs(
    r: &PlanRequest,
    training: &Training,
    num_microbatches: u32,
) -> Result<u32, PlanError> {
    let Some(local_batch) = training.local_batch else {
        return Ok(1);
    };
    let replica_batch = num_microbatches * r.micro_batch;
    // Without a pipeline there is no schedule to split the local batch: torchtitan's non-PP
    // forward_backward_step runs the whole local batch in one forward and backward (train.py).
    if r.pp == 1 && local_batch != r.micro_batch && replica_batch.is_multiple_of(local_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "without a pipeline torchtitan runs each data-parallel rank's local batch in one forward and backward (train.py forward_backward_step), so the micro-batch is the local batch, not {}; use --micro-batch {local_batch}, or a pipeline (--pp 2 or more) whose schedule splits it",
                r.micro_batch
            ),
        });
    }
    if local_batch == 0 || !local_batch.is_multiple_of(r.micro_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "a pipeline schedule runs whole micro-batches, and --micro-batch {} does not divide it; use a multiple of {}",
                r.micro_batch, r.micro_batch
            ),
        });
    }
    if !replica_batch.is_multiple_of(local_batch) {
        return Err(PlanError::LocalBatch {
            local_batch,
            rule: format!(
                "each data-parallel rank trains {replica_batch} sequences per step (--global-batch {} / --dp {}), which {local_batch} does not divide; valid: {}",
                training.global_batch,
                r.dp,
                list(
                    divisors(replica_batch)
                        .into_iter()
                        .filter(|d| d.is_multiple_of(r.micro_batch))
                )
            ),
        });
    }
    Ok(replica_batch / local_batch)
}

/// The V-shaped schedules (`cost::v_schedule`): a pipeline, exactly two equal model chunks per
/// GPU (PyTorch's `ScheduleZBVZeroBubble` and `ScheduleDualPipeV` raise "ZBV requires exactly 2
/// stages per rank"), and for DualPipeV at least as many micro-batches per schedule as stages,
/// 2·pp (its own `ValueError`). An uneven split takes the interleaved chunks (`check_interleaving`),
/// placed in a V.
pub(super) fn check_v_schedule(
    r: &PlanRequest,
    training: &Training,
    per_schedule: u32,
) -> Result<(), PlanError> {
    let schedule = training.pp_schedule;
    let Some(kind) = schedule.v_kind() else {
        return Ok(());
    };
    let name = schedule.as_str();
    // Without a pipeline there is nothing to schedule: one stage runs every micro-batch (`eval`
    // says so; `plan` keeps such plans among the candidates).
    if r.pp < 2 {
        return Ok(());
    }
    if r.vpp != 2 {
        return Err(PlanError::VScheduleChunks {
            schedule: name,
            vpp: r.vpp,
        });
    }
    if kind == crate::cost::v_schedule::VKind::DualPipeV && per_schedule < 2 * r.pp {
        return Err(PlanError::DualPipeVMicrobatches {
            per_schedule,
            need: 2 * r.pp,
            pp: r.pp,
        });
    }
    Ok(())
}

/// The layers of each stage that `r.vpp` chunks split (`check_interleaving`): an even split's
/// share, or an uneven split's chunks (filled front to back, or the embedding, the loss and the
/// MTP layers counted as a layer each: [`unit_chunks`]); None where an uneven split has neither.
fn stage_chunk_layers(r: &PlanRequest, model: &Model, stages: &StageLayout) -> Option<u32> {
    if stages.even {
        return Some(model.layers / r.pp);
    }
    if stages.chunk_layers > 0 {
        return Some(stages.chunk_layers * r.vpp);
    }
    unit_chunks(model, r.pp, r.vpp).map(|u| u.per_chunk * r.vpp)
}

/// The pipeline depths on which a V's two chunks per GPU split every stage into whole layers,
/// the rest of `r` kept (tp, cp, the uneven split; dp taking the GPUs left), as `--pp` values.
fn valid_v_pp(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    let model_parallel = u64::from(r.tp) * u64::from(r.cp);
    let gpus = u64::from(cluster.total_gpus());
    let per_pipeline = u32::try_from(gpus / model_parallel.max(1)).unwrap_or(u32::MAX);
    let valid: Vec<u32> = (2..=per_pipeline.min(model.layers))
        .filter(|pp| per_pipeline.is_multiple_of(*pp))
        .filter(|pp| {
            let request = PlanRequest {
                pp: *pp,
                dp: per_pipeline / pp,
                vpp: 2,
                ..*r
            };
            stage_layout(&request, model).is_ok_and(|stages| {
                stage_chunk_layers(&request, model, &stages).is_some_and(|n| n.is_multiple_of(2))
            })
        })
        .collect();
    if valid.is_empty() {
        format!(
            "none on these {} GPUs with tp {} and cp {} (use --pp-schedule 1f1b, or another --tp or --cp)",
            cluster.total_gpus(),
            r.tp,
            r.cp
        )
    } else {
        list(valid)
    }
}

/// Interleaving: pipeline parallelism, chunks of whole layers, micro-batches a multiple of pp.
pub(super) fn check_interleaving(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    stages: &StageLayout,
    num_microbatches: u32,
    schedule_runs: u32,
    training: &Training,
) -> Result<(), PlanError> {
    let v_schedule = training
        .pp_schedule
        .v_kind()
        .map(|_| training.pp_schedule.as_str());
    let framework = training.framework;
    if r.vpp > 1 {
        if r.pp == 1 {
            return Err(PlanError::VppWithoutPp { vpp: r.vpp });
        }
        let chunked = stage_chunk_layers(r, model, stages);
        // A V's chunk count is fixed (`check_v_schedule`): the vpp values that would split the
        // stages are refused in turn, so the fix is a depth whose stages split in two.
        if let Some(schedule) = v_schedule
            && chunked.is_none_or(|per_stage| per_stage % r.vpp != 0)
        {
            return Err(PlanError::VScheduleLayers {
                schedule,
                pp: r.pp,
                split: match chunked {
                    Some(1) => {
                        "leaves 1 layer on each stage, which two chunks do not divide".to_string()
                    }
                    Some(per_stage) => format!(
                        "leaves {per_stage} layers on each stage, which two chunks do not divide"
                    ),
                    None => format!(
                        "splits the {} layers unevenly, into stages that two equal chunks do not fill (with the embedding and the loss counted as layers, or chunks filled front to back)",
                        model.layers
                    ),
                },
                valid: valid_v_pp(r, model, cluster),
            });
        }
        // Uneven splits interleave only when the embedding, the loss and the MTP layers count as
        // a layer each and these units split evenly into pp x vpp model chunks
        // ([`unit_chunks`]), or as chunks filled front to back.
        let Some(per_stage) = chunked else {
            let valid: Vec<u32> = (1..=model.layers.min(64))
                .filter(|&v| {
                    v == 1
                        || unit_chunks(model, r.pp, v).is_some()
                        || StageLayout::filled_chunks(model.layers, r.pp, v).is_some()
                })
                .collect();
            return Err(PlanError::VppUneven {
                vpp: r.vpp,
                valid: list(valid),
            });
        };
        // An even split's stages in chunks of unequal size (`StageLayout::balanced_chunks`), for
        // the frameworks that take a per-chunk layout.
        let balanced = stages.balanced_chunks(model.layers, r.pp, r.vpp)
            && r.vpp <= per_stage
            && framework.takes_chunk_layouts();
        if per_stage % r.vpp != 0 && !balanced {
            // Where unequal chunks are taken, only a chunk without a layer stops the split: the
            // divisors are no list of what works (vpp 3 of 20 layers runs, 21 does not).
            if stages.even && r.vpp > per_stage && framework.takes_chunk_layouts() {
                return Err(PlanError::VppPastStageLayers {
                    vpp: r.vpp,
                    per_stage,
                    framework: framework.as_str(),
                });
            }
            return Err(PlanError::VppLayers {
                vpp: r.vpp,
                per_stage,
                valid: list(divisors(per_stage)),
                unequal: if stages.even && r.vpp <= per_stage && framework.interleaves_pipeline() {
                    format!(
                        " (under --framework {}, which cannot split a stage into unequal chunks; megatron-core and torchtitan can)",
                        framework.as_str()
                    )
                } else {
                    String::new()
                },
            });
        }
        // The micro-batch multiple below is Megatron's and PyTorch's interleaved 1F1B's; the V
        // schedules have their own rule (`check_v_schedule`).
        if v_schedule.is_some() {
            return Ok(());
        }
        let per_schedule = num_microbatches / schedule_runs;
        if schedule_runs > 1 && !per_schedule.is_multiple_of(r.pp) {
            return Err(PlanError::VppScheduleMicrobatches {
                vpp: r.vpp,
                per_schedule,
                runs: schedule_runs,
                pp: r.pp,
                multiple: r.pp * r.micro_batch,
            });
        }
        if !num_microbatches.is_multiple_of(r.pp) {
            // Megatron-Core (`forward_backward_pipelining_with_interleaving`): the micro-batches
            // run in groups of `microbatch_group_size_per_vp_stage` (default pp) per model chunk,
            // and a last group shorter than pp is refused.
            let replica = u64::from(r.dp) * u64::from(r.micro_batch);
            let multiple = replica * u64::from(r.pp);
            let global_batch = u64::from(num_microbatches) * replica;
            let below = global_batch / multiple * multiple;
            let above = below + multiple;
            let examples = if below > 0 {
                format!("--global-batch {below} or {above}")
            } else {
                format!("--global-batch {above}")
            };
            return Err(PlanError::VppMicrobatches {
                vpp: r.vpp,
                num_microbatches,
                pp: r.pp,
                multiple,
                examples,
            });
        }
    }
    Ok(())
}
