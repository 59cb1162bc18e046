//! Refines one evaluated plan with the event-driven pipeline schedule of `schedule.rs`, for the few
//! plans a person looks at (`eval`, the top plans of `plan`, the Gantt chart). The search itself
//! ranks on `evaluate`'s closed form, which stays allocation-free.
//!
//! Per-stage block times use the same pieces as `evaluate`: a forward block of one model chunk is
//! its layers' forward GEMM time plus their forward (and recompute) TP collectives plus one p2p send;
//! a backward block is backward + recompute compute plus the backward TP collectives plus one send
//! (none forward from the model's last chunk, none backward from its first: `Ends::boundary_sends`).
//! Over a micro-batch a stage's blocks add up to `evaluate`'s per-stage time (compute + TP + PP), so
//! with equal stages the simulated step equals the closed form's m·t_stage + (p − 1)/v·t_stage
//! (Narayanan et al. 2021 §2.2), and with unequal stages (uneven split, output layer on the last
//! stage) it shows the real bubble: every faster stage waits for the slowest each micro-batch, so
//! the pipeline's idle share (`pipeline_idle_share`) exceeds the closed form's. The step itself is
//! m blocks of the slowest stage plus the fill and drain of the others, which can be a little
//! shorter than the closed form's (p − 1)/v of the *mean* stage.
//! The embedding's lookup is a gather with no GEMM, so the first stage carries no extra compute
//! for it (its memory is counted in `cost::memory`).

use serde::Serialize;

use super::schedule::{
    MAX_SIMULATED_BLOCKS, Schedule, StageCost, schedule_blocks, simulate, simulate_chunks,
};
use super::{Estimate, evaluate};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::training::Training;

/// How the shown step time was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScheduleSummary {
    /// The schedule simulated (`--pp-schedule`); `None` (JSON null) without a pipeline, where
    /// `eval` says "pipeline schedule: none".
    pub schedule: Option<crate::training::PipelineSchedule>,
    /// True when the simulated step replaced the closed form (they differ by more than 1e-9 s·step).
    pub simulated_step_used: bool,
    pub closed_form_step_s: f64,
    pub simulated_step_s: f64,
    /// (p − 1)/(v·m): idle over one stage's busy time (a ratio, may exceed 1).
    pub closed_form_bubble_ratio: f64,
    /// The simulated slowest stage's idle over its busy time (a ratio).
    pub simulated_bubble_ratio: f64,
    /// Idle time of all stages over their whole time, Σ(step − busy_s)/(p·step), in [0, 1): what the GPUs of the
    /// pipeline really wait, including the faster stages waiting for the slowest every micro-batch.
    /// Equals (p − 1)/(v·m) for equal stages; larger otherwise.
    pub pipeline_idle_share: f64,
    /// Transformer layers on each pipeline stage, first to last.
    pub layers_per_stage_first: u32,
    pub layers_per_stage_last: u32,
    /// MTP layers the last stage runs after its decoder layers.
    pub mtp_layers_on_last: u32,
    pub equal_stages: bool,
    /// Blocks of a schedule too large to simulate ([`super::schedule::MAX_SIMULATED_BLOCKS`]):
    /// the closed form's step time is kept and `schedule` is empty. None when simulated.
    pub not_simulated_blocks: Option<u64>,
}

impl ScheduleSummary {
    /// The schedule the renderers name for a pipelined plan (1F1B where there is no pipeline:
    /// they say "none" before asking).
    pub fn pipeline_schedule(&self) -> crate::training::PipelineSchedule {
        self.schedule
            .unwrap_or(crate::training::PipelineSchedule::OneFOneB)
    }
}

/// A plan refined by the schedule simulation.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub estimate: Estimate,
    pub schedule: Schedule,
    /// Each stage's block costs per model chunk and micro-batch: the mean of its `chunks`.
    pub stages: Vec<StageCost>,
    /// Every model chunk's block costs with the exposed TP and EP seconds its forward and
    /// backward hold ([`ChunkComm`]), stage by stage: `[s·n + c]` is chunk c of stage s, n =
    /// `chunks.len() / stages.len()` (v under an interleaved looped schedule, 2 under a V, else
    /// 1). What the schedule's blocks ran with; `stages` are their means per stage.
    /// A block's strips read its own chunk: DeepSeek-V3's dense first layers can fill a chunk
    /// that holds no all-to-all beside MoE chunks on the same stage, and a chunk holding the
    /// output layer has a smaller TP share than one of layers alone.
    pub chunks: Vec<(StageCost, ChunkComm)>,
    pub summary: ScheduleSummary,
    /// Exposed DP gradient reduction, the pipeline-block terms' time spent after the last backward
    /// (`StepTerms::after_pipeline_s`: the word embedding's gradient all-reduce between the first
    /// and the last stage, part of the PP term), optimizer step and DP parameter gather after the
    /// pipeline drains: the step's `DpGradReduce`, that part of `PpComm`, `Optimizer` and
    /// `DpParamGather`, each its own (the timeline draws them in their terms' colours,
    /// `svg::term_colour`).
    pub tail_dp_grad_reduce_s: f64,
    pub tail_after_pipeline_s: f64,
    pub tail_optimizer_s: f64,
    pub tail_dp_param_gather_s: f64,
}

/// The exposed communication one model chunk's blocks hold per micro-batch, (forward, backward)
/// seconds by group: its layers' TP collectives and MoE layers' EP all-to-alls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChunkComm {
    pub tp: (f64, f64),
    pub ep: (f64, f64),
}

/// Transformer layers on every stage, first to last. Even split: layers/pp each. Uneven:
/// `plan.stages` gives the first and last stage; the middle ones share the rest, the extra layers
/// going to the earliest middle stages (as `StageLayout::balanced_units` assigns them).
pub fn layers_per_stage(model: &Model, plan: &ParallelPlan) -> Vec<u32> {
    let p = plan.pp as usize;
    if p == 1 {
        return vec![model.layers];
    }
    if plan.stages.even {
        return vec![model.layers / plan.pp; p];
    }
    let middles = plan.pp - 2;
    let mut out = vec![plan.stages.first];
    let rest = model
        .layers
        .saturating_sub(plan.stages.first + plan.stages.last);
    if let Some(base) = rest.checked_div(middles) {
        let extra = rest % middles;
        out.extend((0..middles).map(|i| base + u32::from(i < extra)));
    }
    out.push(plan.stages.last);
    out
}

/// Per-stage block costs of `plan` (one model chunk, one micro-batch) and the PP send time: each
/// stage's mean over the model chunks the schedule runs ([`chunk_costs_and_ep`]).
pub fn stage_costs(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<StageCost> {
    stage_costs_of(
        &chunk_costs_and_ep(model, cluster, training, plan),
        chunks_per_stage(training, plan),
    )
}

/// Each stage's mean block over its `per_stage` chunks (`chunks` stage by stage), without the
/// communication times.
fn stage_costs_of(chunks: &[(StageCost, ChunkComm)], per_stage: u32) -> Vec<StageCost> {
    stage_means(chunks, per_stage)
        .into_iter()
        .map(|(cost, _)| cost)
        .collect()
}

/// One block pair of `layers` transformer layers (`moe_layers` of them MoE) at `costs`, with the
/// output layer and the embedding where it runs them (`ends`; their TP collectives with them),
/// per micro-batch, divided over `chunks` model chunks: its
/// forward, backward and weight-gradient time with the exposed communication and one send each
/// way (`Ends::boundary_sends`; `sends_s`, the exposed time of one forward and one backward send
/// across the boundaries the block's stage sends over, `stage_sends_s`), and the exposed TP and EP
/// time the forward and backward hold.
fn block_cost(
    costs: &super::UnitCosts,
    layers: u32,
    moe_layers: u32,
    ends: super::Ends,
    chunks: f64,
    sends_s: [f64; 2],
) -> (StageCost, ChunkComm) {
    let super::UnitCosts {
        layer,
        output,
        tp,
        cp,
        mamba_cp,
        ep,
        ..
    } = *costs;
    let [forward_send, backward_send] = sends_s;
    let comm_forward = tp.forward_exposed_s + cp.forward_exposed_s + mamba_cp.forward_exposed_s;
    let comm_backward = tp.backward_exposed_s + cp.backward_exposed_s + mamba_cp.backward_exposed_s;
    let end_tp = costs.ends.held(ends);
    let with_output = ends.output;
    let n = f64::from(layers);
    let ep_layers = costs.ep_layers(moe_layers);
    // The chunks' sends as the stage time counts them (`Ends::boundary_sends`): none forward from
    // the model's last chunk, none backward from its first.
    let [forward_sends, backward_sends] = ends.boundary_sends(chunks);
    let (out_f, out_b, out_w) = if with_output {
        (
            output.forward,
            output.backward + output.recompute,
            output.weight_grad,
        )
    } else {
        (0.0, 0.0, 0.0)
    };
    (
        StageCost {
            forward_s: (n * (layer.forward + comm_forward)
                + ep_layers * ep.forward_exposed_s
                + out_f
                + end_tp.forward_exposed_s)
                / chunks
                + forward_send * forward_sends / chunks,
            backward_s: (n * (layer.backward + layer.recompute + comm_backward)
                + ep_layers * ep.backward_exposed_s
                + out_b
                + end_tp.backward_exposed_s)
                / chunks
                + backward_send * backward_sends / chunks,
            weight_s: (n * layer.weight_grad + out_w) / chunks,
        },
        ChunkComm {
            tp: (
                (n * tp.forward_exposed_s + end_tp.forward_exposed_s) / chunks,
                (n * tp.backward_exposed_s + end_tp.backward_exposed_s) / chunks,
            ),
            ep: (
                ep_layers * ep.forward_exposed_s / chunks,
                ep_layers * ep.backward_exposed_s / chunks,
            ),
        },
    )
}

/// Each stage boundary's send time as a multiple of the PP group's, boundary b from stage b to
/// b + 1 and boundary p − 1 the wrap from the last stage to the first: below 1 where the boundary
/// stays inside one NVLink domain while the group crosses the network (`groups::pp_boundary_link`,
/// `evaluate::nvlink_send_ratio`). Each block carries its own sends, so the schedule needs no one
/// time per hop: a stage whose boundaries are on NVLink runs shorter blocks, and the slowest
/// stage, network sends included, still sets the steady state.
fn boundary_scales(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<f64> {
    let groups = super::groups::groups(cluster, plan);
    let ratio = super::evaluate::nvlink_send_ratio(
        model,
        cluster,
        training,
        plan,
        groups.get(super::groups::GroupKind::Pp),
    );
    (0..plan.pp.max(1))
        .map(|boundary| {
            if super::groups::pp_boundary_link(cluster, plan, boundary)
                == crate::cluster::Link::Nvlink
            {
                ratio
            } else {
                1.0
            }
        })
        .collect()
}

/// The exposed time of one send each way from physical stage `stage`, [forward, backward], at
/// `send` (the PP group's link) scaled per boundary. 1F1B pairs each send with a receive across
/// the same boundary (`send_forward_recv_backward` to the next stage, boundary `stage`;
/// `send_backward_recv_forward` to the previous, boundary `stage − 1`; schedules.py at d98e8a64),
/// so each direction pays its own boundary. The interleaved schedule pairs a send to the next stage
/// with a receive from the previous (`send_forward_recv_forward`, `send_backward_recv_backward`,
/// or all four at once in `send_forward_backward_recv_forward_backward`), so every op of a stage
/// waits for the slower of its two boundaries (`looped`).
fn stage_sends_s(scales: &[f64], send: f64, stage: u32, looped: bool) -> [f64; 2] {
    let p = scales.len().max(1) as u32;
    let at = |boundary: u32| scales.get(boundary as usize).copied().unwrap_or(1.0) * send;
    let (next, previous) = (at(stage % p), at((stage + p - 1) % p));
    if looped {
        let slower = next.max(previous);
        [slower, slower]
    } else {
        [next, previous]
    }
}

/// Model chunks per stage the schedule runs as blocks of their own costs: two under a V schedule,
/// v under an interleaved looped one, else one (a stage's cost, its layers over `vpp`).
fn chunks_per_stage(training: &Training, plan: &ParallelPlan) -> u32 {
    if training.pp_schedule.v_kind().is_some() && plan.pp > 1 {
        2
    } else if runs_looped_chunks(training, plan) {
        plan.vpp
    } else {
        1
    }
}

/// Every model chunk's block costs and exposed EP all-to-all time, stage by stage
/// ([`Simulated::chunks`]): a V schedule's two per rank (`v_chunk_costs`), an interleaved looped
/// schedule's v per stage (`looped_chunk_costs`), else one per stage.
fn chunk_costs_and_ep(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<(StageCost, ChunkComm)> {
    if training.pp_schedule.v_kind().is_some() && plan.pp > 1 {
        return v_chunk_costs(model, cluster, training, plan)
            .into_iter()
            .flatten()
            .collect();
    }
    if runs_looped_chunks(training, plan) {
        return looped_chunk_costs(model, cluster, training, plan);
    }
    // Each stage at its own mix of dense and MoE layers (`MixCosts`).
    let mut mix = super::MixCosts::new(model, cluster, training, plan);
    let v = f64::from(plan.vpp);
    let layers = layers_per_stage(model, plan);
    let last = layers.len() - 1;
    let scales = boundary_scales(model, cluster, training, plan);
    // A hybrid stack's stages each hold their own slice of the pattern.
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    layers
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            // The last stage also runs the MTP layers (`pipeline::last_stage_layers`).
            let n = if s == last { n + model.mtp_layers } else { n };
            let moe_layers = super::stage_moe_layers(model, plan, s as u32);
            let run = layout.stage_run(model, plan.pp.max(1), s as u32);
            let bf16 = layout.stage_bf16(model, mix.keep, plan.pp.max(1), s as u32);
            let at = mix.stage(n, moe_layers, run, bf16);
            let ends = super::Ends::of(plan, false, s as u32, s == last);
            let costs = mix.costs(at);
            let sends = stage_sends_s(&scales, costs.pp_send_exposed_s, s as u32, false);
            block_cost(costs, n, moe_layers, ends, v, sends)
        })
        .collect()
}

/// Whether `plan` runs an interleaved looped schedule (v > 1 model chunks per stage, not a V):
/// its chunks are priced one by one ([`looped_chunk_costs`]).
fn runs_looped_chunks(training: &Training, plan: &ParallelPlan) -> bool {
    plan.pp > 1 && plan.vpp > 1 && training.pp_schedule.v_kind().is_none()
}

/// Each stage's mean block over its `v` chunks (`chunks` stage by stage), with the mean exposed
/// TP and EP time.
fn stage_means(chunks: &[(StageCost, ChunkComm)], v: u32) -> Vec<(StageCost, ChunkComm)> {
    let n = f64::from(v);
    chunks
        .chunks(v as usize)
        .map(|stage| {
            let sum = |f: fn(&(StageCost, ChunkComm)) -> f64| stage.iter().map(f).sum::<f64>() / n;
            (
                StageCost {
                    forward_s: sum(|c| c.0.forward_s),
                    backward_s: sum(|c| c.0.backward_s),
                    weight_s: sum(|c| c.0.weight_s),
                },
                ChunkComm {
                    tp: (sum(|c| c.1.tp.0), sum(|c| c.1.tp.1)),
                    ep: (sum(|c| c.1.ep.0), sum(|c| c.1.ep.1)),
                },
            )
        })
        .collect()
}

/// Virtual stage `vs` of a plan (depth order) at its own layers and mix: its decoder layers as the
/// plan's layout cuts them (`ChunkLayout::range`), the MTP layers and the output layer when it is
/// the `last` virtual stage, one send each way at `send_scale` [forward, backward] times the PP
/// group's send (`boundary_scales`: the boundaries it sends over); and the exposed TP and EP time
/// its forward and backward hold.
fn virtual_stage_cost(
    mix: &mut super::MixCosts,
    layout: &super::pipeline::ChunkLayout,
    model: &Model,
    vs: u32,
    last: u32,
    send_scale: [f64; 2],
) -> (StageCost, ChunkComm) {
    let (start, end) = layout.range(vs);
    let (mut layers, mut moe_layers) = (end - start, model.moe_layers_between(start, end));
    let depths = if vs == last { model.mtp_layers } else { 0 };
    layers += depths;
    if model.mtp_layer_is_moe() {
        moe_layers += depths;
    }
    let run = model.is_hybrid().then(|| crate::model::HybridRun {
        counts: model.blocks_between(start, end),
        mtp_depths: depths,
    });
    let bf16 = super::pipeline::Bf16Run::of_range(model, mix.keep, start, end, depths).nonempty();
    let at = mix.stage(layers, moe_layers, run, bf16);
    let costs = mix.costs(at);
    let sends = send_scale.map(|scale| scale * costs.pp_send_exposed_s);
    block_cost(
        costs,
        layers,
        moe_layers,
        super::Ends {
            embedding: vs == 0,
            output: vs == last,
        },
        1.0,
        sends,
    )
}

/// Under an interleaved looped schedule (v > 1), every model chunk of every stage at its own
/// layers, stage by stage (`[s·v + c]` is chunk c of stage s, virtual stage c·p + s, as
/// `schedule::simulate_chunks` reads them): Megatron-Core builds each model chunk from its own
/// slice of the layers (`get_transformer_layer_offset`, `--pipeline-model-parallel-layout`) and
/// runs the output layer and the loss in the last model chunk of the last stage only
/// (`post_process` of `get_model`, megatron/training/training.py), so chunks of one stage differ
/// where the layout cuts them unequally, where the dense first layers or the bf16-kept layers
/// fall, and on the last stage by the output layer.
fn looped_chunk_costs(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<(StageCost, ChunkComm)> {
    let mut mix = super::MixCosts::new(model, cluster, training, plan);
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let (p, v) = (plan.pp.max(1), plan.vpp.max(1));
    let last = p * v - 1;
    let scales = boundary_scales(model, cluster, training, plan);
    (0..p)
        .flat_map(|stage| (0..v).map(move |chunk| chunk * p + stage))
        .map(|vs| {
            // Virtual stage vs runs on stage vs mod p and sends over that stage's boundaries.
            let scale = stage_sends_s(&scales, 1.0, vs % p, true);
            virtual_stage_cost(&mut mix, &layout, model, vs, last, scale)
        })
        .collect()
}

/// Under a V schedule, the two chunks of every rank: rank r runs virtual stage r (chunk 0) and
/// 2p − 1 − r (chunk 1, `v_schedule::virtual_stage`), each at its own layers and mix; the last
/// virtual stage (rank 0's chunk 1) runs the MTP layers and the output layer. Each send crosses
/// its own boundary (`boundary_scales`): chunk 0 sends its activations to rank r + 1 and its
/// gradients to rank r − 1, chunk 1 its activations to rank r − 1 and its gradients to rank r + 1
/// — boundary r and r − 1, as 1F1B's stage r; PyTorch's runtime posts each SEND on its own
/// (`_batch_p2p(stage.get_fwd_send_ops(mb))`, torch/distributed/pipelining/schedules.py), so no send
/// waits on the other boundary.
fn v_chunk_costs(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Vec<[(StageCost, ChunkComm); 2]> {
    let mut mix = super::MixCosts::new(model, cluster, training, plan);
    let layout = super::pipeline::ChunkLayout::of(model, plan);
    let p = plan.pp;
    let last = 2 * p - 1;
    let scales = boundary_scales(model, cluster, training, plan);
    (0..p)
        .map(|rank| {
            let [next, previous] = stage_sends_s(&scales, 1.0, rank, false);
            [0, 1].map(|chunk| {
                let vs = super::v_schedule::virtual_stage(rank, chunk, p);
                // No send where the V has no neighbour on another GPU: the last virtual stage's
                // forward ends in the loss and the first's backward in the embedding
                // (`Ends::boundary_sends`); the last rank hands chunk 0's output to its own chunk 1
                // and chunk 1's gradient back.
                let forward = if vs == p - 1 {
                    0.0
                } else if chunk == 0 {
                    next
                } else {
                    previous
                };
                let backward = if vs == p {
                    0.0
                } else if chunk == 0 {
                    previous
                } else {
                    next
                };
                virtual_stage_cost(&mut mix, &layout, model, vs, last, [forward, backward])
            })
        })
        .collect()
}

pub fn simulate_plan(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Result<Simulated, String> {
    let closed = evaluate(model, cluster, training, plan);
    // A V or an interleaved looped schedule runs every chunk at its own cost; the stages' means
    // are what the summary reads.
    let chunks = chunk_costs_and_ep(model, cluster, training, plan);
    let per_stage = chunks_per_stage(training, plan);
    let stages = stage_costs_of(&chunks, per_stage);
    let chunk_costs: Vec<StageCost> = chunks.iter().map(|(cost, _)| *cost).collect();
    // One schedule per local batch (torchtitan's gradient-accumulation steps), run back to back.
    let per_run = plan.microbatches_per_schedule();
    let looped_blocks = schedule_blocks(plan.pp, plan.vpp, per_run, plan.schedule_runs.max(1));
    // A split backward runs up to three blocks per chunk and micro-batch where 1F1B runs two.
    let blocks = match training.pp_schedule.v_kind() {
        Some(_) if plan.pp > 1 => looped_blocks / 2 * 3,
        _ => looped_blocks,
    };
    if blocks > MAX_SIMULATED_BLOCKS {
        return Ok(closed_form_only(
            model, training, plan, closed, stages, chunks, blocks,
        ));
    }
    let schedule = match training.pp_schedule.v_kind() {
        Some(kind) if plan.pp > 1 => {
            let pairs: Vec<[StageCost; 2]> = chunk_costs
                .chunks_exact(2)
                .map(|pair| [pair[0], pair[1]])
                .collect();
            super::v_schedule::simulate_v(&pairs, kind, per_run, 0.0)?
        }
        _ if per_stage > 1 => simulate_chunks(&chunk_costs, stages.len(), plan.vpp, per_run, 0.0)?,
        _ => simulate(&stages, plan.vpp, per_run, 0.0)?,
    }
    .repeated(plan.schedule_runs, per_run);
    let t = closed.time;
    let tail = t.dp_comm_exposed_s.0 + t.optimizer_s.0 + closed.terms.after_pipeline_s();
    let busy = closed.terms.pipeline_busy_s();
    let closed_pipeline = busy + t.bubble_s.0;
    let simulated_step = schedule.step_s + tail;
    let differs = (schedule.step_s - closed_pipeline).abs() > 1e-9 * closed_pipeline.max(1e-12);
    let mut estimate = closed;
    if differs {
        // The slowest stage's own work stays as `evaluate` splits it; what the simulation adds is idle.
        let bubble = (schedule.step_s - busy).max(0.0);
        estimate
            .terms
            .set_exposed(super::terms::TermKind::Bubble, bubble);
        estimate.time = super::StepTime::from_terms(&estimate.terms);
        let scale = t.step_s.0 / estimate.time.step_s.0;
        estimate.bubble_share = estimate.time.bubble_s.0 / estimate.time.step_s.0;
        estimate.tokens_per_s *= scale;
        estimate.mfu *= scale;
        estimate.model_tflops_per_gpu *= scale;
        estimate.hardware_tflops_per_gpu *= scale;
        estimate.time_to_train_s = estimate.time_to_train_s.map(|s| s / scale);
        estimate.cost_to_train = estimate.cost_to_train.map(|c| c / scale);
    }
    let layers = layers_per_stage(model, plan);
    Ok(Simulated {
        summary: ScheduleSummary {
            schedule: (plan.pp > 1).then_some(training.pp_schedule),
            simulated_step_used: differs,
            closed_form_step_s: t.step_s.0,
            simulated_step_s: if differs {
                estimate.time.step_s.0
            } else {
                simulated_step
            },
            closed_form_bubble_ratio: closed.bubble_ratio,
            simulated_bubble_ratio: schedule.bubble_ratio,
            pipeline_idle_share: {
                let busy: f64 = schedule.busy_s.iter().sum();
                let p = schedule.busy_s.len() as f64;
                if schedule.step_s > 0.0 {
                    (p * schedule.step_s - busy) / (p * schedule.step_s)
                } else {
                    0.0
                }
            },
            layers_per_stage_first: layers[0],
            layers_per_stage_last: layers[layers.len() - 1],
            mtp_layers_on_last: model.mtp_layers,
            equal_stages: stages.windows(2).all(|w| w[0] == w[1]),
            not_simulated_blocks: None,
        },
        estimate,
        schedule,
        stages,
        chunks,
        tail_dp_grad_reduce_s: t.dp_grad_reduce_exposed_s.0,
        tail_after_pipeline_s: estimate.terms.after_pipeline_s(),
        tail_optimizer_s: t.optimizer_s.0,
        tail_dp_param_gather_s: t.dp_param_gather_exposed_s.0,
    })
}

/// A schedule of `blocks` blocks, too many to simulate: the closed form's estimate, an empty
/// schedule, and a summary that says so.
fn closed_form_only(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    closed: Estimate,
    stages: Vec<StageCost>,
    chunks: Vec<(StageCost, ChunkComm)>,
    blocks: u64,
) -> Simulated {
    let t = closed.time;
    let layers = layers_per_stage(model, plan);
    Simulated {
        summary: ScheduleSummary {
            schedule: (plan.pp > 1).then_some(training.pp_schedule),
            simulated_step_used: false,
            closed_form_step_s: t.step_s.0,
            simulated_step_s: t.step_s.0,
            closed_form_bubble_ratio: closed.bubble_ratio,
            simulated_bubble_ratio: closed.bubble_ratio,
            pipeline_idle_share: t.bubble_s.0 / t.step_s.0.max(f64::MIN_POSITIVE),
            layers_per_stage_first: layers[0],
            layers_per_stage_last: layers[layers.len() - 1],
            mtp_layers_on_last: model.mtp_layers,
            equal_stages: stages.windows(2).all(|w| w[0] == w[1]),
            not_simulated_blocks: Some(blocks),
        },
        estimate: closed,
        schedule: Schedule {
            blocks: Vec::new(),
            step_s: t.step_s.0 - t.dp_comm_exposed_s.0 - t.optimizer_s.0,
            busy_s: Vec::new(),
            bubble_ratio: closed.bubble_ratio,
        },
        stages,
        chunks,
        tail_dp_grad_reduce_s: t.dp_grad_reduce_exposed_s.0,
        tail_after_pipeline_s: closed.terms.after_pipeline_s(),
        tail_optimizer_s: t.optimizer_s.0,
        tail_dp_param_gather_s: t.dp_param_gather_exposed_s.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, Recompute};
    use crate::shape::derive_shape;
    use crate::specs;

    fn setup(nodes: u32) -> (Model, Cluster, Training) {
        let model = derive_shape(20e9, 2048).unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes,
            gpus_per_node: 8,
        };
        let training = Training::megatron_lm_2021(2048, 64);
        (model, cluster, training)
    }

    fn request(tp: u32, pp: u32, dp: u32, vpp: u32, uneven: bool) -> PlanRequest {
        PlanRequest {
            tp,
            pp,
            dp,
            vpp,
            micro_batch: 1,
            sequence_parallel: tp > 1,
            recompute: Recompute::Selective,
            zero: 1,
            allow_uneven_pp: uneven,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        }
    }

    #[test]
    fn stage_blocks_add_up_to_closed_form_stage_time() {
        // Equal stages except the output layer on the last one: with the output layer removed the
        // simulated pipeline equals compute + TP + PP + (p − 1)/v of a stage.
        let (model, cluster, training) = setup(4);
        let plan =
            ParallelPlan::build(&request(4, 2, 4, 1, false), &model, &cluster, &training).unwrap();
        let stages = stage_costs(&model, &cluster, &training, &plan);
        let e = evaluate(&model, &cluster, &training, &plan);
        let m = f64::from(plan.num_microbatches);
        let last = stages[1].forward_s + stages[1].backward_s;
        // The PP term's embedding gradient all-reduce (tied embeddings) runs after the blocks.
        let work = e.time.compute_s.0 + e.time.tp_comm_exposed_s.0 + e.time.pp_comm_exposed_s.0
            - e.terms.after_pipeline_s();
        assert!(e.terms.after_pipeline_s() > 0.0);
        assert!(
            (m * last - work).abs() < 1e-9 * work,
            "{} vs {work}",
            m * last
        );
    }

    #[test]
    fn layers_per_stage_adds_up() {
        let (model, cluster, training) = setup(4);
        for pp in [2u32, 3, 4, 8] {
            let Ok(plan) = ParallelPlan::build(
                &request(1, pp, 32 / pp, 1, true),
                &model,
                &cluster,
                &training,
            ) else {
                continue;
            };
            let layers = layers_per_stage(&model, &plan);
            assert_eq!(layers.len(), pp as usize);
            assert_eq!(layers.iter().sum::<u32>(), model.layers, "pp {pp}");
            assert_eq!(*layers.iter().max().unwrap(), plan.stages.max_layers());
        }
    }

    #[test]
    fn unequal_stages_use_the_simulated_step() {
        // The output layer makes the last stage the slowest: the step is at least m of its blocks
        // plus the fill and drain of the others, and differs from the closed form, which charges
        // (p − 1)/v of the *mean* stage.
        let (model, cluster, training) = setup(4);
        let plan =
            ParallelPlan::build(&request(8, 4, 1, 1, false), &model, &cluster, &training).unwrap();
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        assert!(!s.summary.equal_stages);
        assert!(s.summary.simulated_step_used);
        let per = |c: &StageCost| c.forward_s + c.backward_s;
        let slowest = s.stages.iter().map(per).fold(0.0, f64::max);
        let fastest = s.stages.iter().map(per).fold(f64::INFINITY, f64::min);
        let m = f64::from(plan.num_microbatches);
        let bound = m * slowest + f64::from(plan.pp - 1) * fastest;
        assert!(
            s.schedule.step_s >= bound - 1e-9 * bound,
            "{} < {bound}",
            s.schedule.step_s
        );
        assert!(
            s.schedule.step_s <= bound * 1.01,
            "{} vs {bound}",
            s.schedule.step_s
        );
        // The refined estimate is consistent with itself.
        let t = s.estimate.time;
        let parts = t.compute_s.0
            + t.tp_comm_exposed_s.0
            + t.pp_comm_exposed_s.0
            + t.dp_comm_exposed_s.0
            + t.bubble_s.0
            + t.optimizer_s.0;
        assert!((parts - t.step_s.0).abs() < 1e-9 * t.step_s.0);
        let tokens = f64::from(plan.global_batch) * f64::from(training.seq_len) / t.step_s.0;
        assert!((tokens - s.estimate.tokens_per_s).abs() < 1e-6 * tokens);
    }

    /// Forward block durations of `s`'s stage `stage`, by model chunk (micro-batch 0).
    fn forward_of_chunks(s: &Simulated, stage: u32, v: u32) -> Vec<f64> {
        (0..v)
            .map(|chunk| {
                let b = s
                    .schedule
                    .blocks
                    .iter()
                    .find(|b| {
                        b.stage == stage
                            && b.chunk == chunk
                            && b.microbatch == 0
                            && b.direction == super::super::schedule::Direction::Forward
                    })
                    .unwrap();
                b.end_s - b.start_s
            })
            .collect()
    }

    #[test]
    fn interleaved_chunks_run_at_their_own_layers_and_the_output_layer_in_the_last() {
        // Llama 3 70B's 80 layers on pp 4 x vpp 3: 20 per stage in chunks of 7, 7 and 6
        // (`StageLayout::balanced_chunks`). Each chunk's forward is its own layers' time plus one
        // send, so on a middle stage the chunks differ by one layer in the ratio the layers say; the
        // output layer runs in the last stage's last chunk only, not spread over its three.
        let model = specs::load_model("llama3-70b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            8192,
            512,
            crate::training::AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 8,
            pp: 4,
            dp: 4,
            vpp: 3,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Full,
            zero: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        let send = super::super::unit_costs(&model, &cluster, &training, &plan).pp_send_exposed_s;
        let middle = forward_of_chunks(&s, 1, 3);
        let per_layer = (middle[0] - send) / 7.0;
        assert!((middle[1] - middle[0]).abs() < 1e-12, "{middle:?}");
        assert!(
            ((middle[2] - send) / 6.0 / per_layer - 1.0).abs() < 1e-9,
            "{middle:?}"
        );
        // The last stage: chunks 0 and 1 as a middle stage's, chunk 2 six layers and the output.
        let last = forward_of_chunks(&s, 3, 3);
        assert!((last[0] - middle[0]).abs() < 1e-12, "{last:?} {middle:?}");
        assert!(last[2] > middle[2] + 1e-6, "{last:?} {middle:?}");
        // The stages' means (the timeline's strips) are their chunks' mean.
        let mean = middle.iter().sum::<f64>() / 3.0;
        assert!((s.stages[1].forward_s - mean).abs() < 1e-12);
    }

    #[test]
    fn refined_step_is_the_schedule_plus_the_tail_with_every_term() {
        // Whatever the plan's terms (here an MoE plan with EP all-to-alls), the refined step is the
        // simulated pipeline plus what runs after it; no term may be left out of the pipeline's
        // busy time (it once was: the EP all-to-all was counted twice).
        let mut model = specs::load_model("mixtral-8x7b").unwrap();
        model.seq_len = 4096;
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            256,
            crate::training::AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 2,
            pp: 4,
            dp: 8,
            ep: 8,
            micro_batch: 1,
            sequence_parallel: true,
            zero: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        assert!(s.estimate.time.ep_comm_exposed_s.0 > 0.0);
        let want = s.schedule.step_s
            + s.tail_dp_grad_reduce_s
            + s.tail_after_pipeline_s
            + s.tail_optimizer_s
            + s.tail_dp_param_gather_s;
        let got = s.estimate.time.step_s.0;
        assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
    }

    /// DeepSeek-V3 on 256 GPUs of `gpu` as Megatron-Bridge's recipe splits it: tp 1, pp 16 with a
    /// 4-layer first and 1-layer last stage, ep 8, with `mtp` MTP layers.
    fn deepseek_v3_recipe_pp16(gpu: &str, mtp: u32) -> (Model, Cluster, Training, ParallelPlan) {
        let mut model = specs::load_model("deepseek-v3").unwrap();
        model.mtp_layers = mtp;
        let cluster = Cluster {
            gpu: specs::load_gpu(gpu).unwrap(),
            nodes: 32,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            2048,
            crate::training::AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 1,
            pp: 16,
            dp: 16,
            ep: 8,
            micro_batch: 1,
            zero: 1,
            allow_uneven_pp: true,
            stage_split: Some((4, 1)),
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        (model, cluster, training, plan)
    }

    #[test]
    fn closed_form_busy_time_is_the_slowest_stages_own() {
        // DeepSeek-V3 on pp 16 with the recipe's 4-layer first stage and 1-layer last stage (plus
        // its MTP layer and two output passes): the last stage is the slowest though it holds the
        // fewest layers. The closed form once charged that stage's compute with the all-to-alls of
        // a 4-layer stage; its busy time must be the slowest simulated stage's m blocks.
        let (model, cluster, training, plan) = deepseek_v3_recipe_pp16("b200-sxm-180g", 1);
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        let per = |c: &StageCost| c.forward_s + c.backward_s;
        let last = per(s.stages.last().unwrap());
        assert!(s.stages.iter().all(|c| per(c) <= last), "{:?}", s.stages);
        assert!(s.estimate.time.ep_comm_exposed_s.0 > 0.0);
        let m = f64::from(plan.num_microbatches);
        let busy = evaluate(&model, &cluster, &training, &plan)
            .terms
            .pipeline_busy_s();
        assert!(
            (busy / (m * last) - 1.0).abs() < 1e-9,
            "{busy} vs {}",
            m * last
        );
    }

    #[test]
    fn a_stage_is_costed_at_its_own_mix_of_dense_and_moe_layers() {
        // DeepSeek-V3's first three layers are dense; on pp 16 with a 4-layer first stage, that
        // stage holds 3 dense layers and 1 MoE layer, the middle ones 4 MoE layers each. Each
        // stage's blocks are its own layers': the first stage's forward is 3 dense layers' and one
        // MoE layer's, not 4 MoE layers' (what the busiest stage's mix once gave every stage).
        let (model, cluster, training, plan) = deepseek_v3_recipe_pp16("h100-sxm-80g", 0);
        assert_eq!(super::super::stage_moe_layers(&model, &plan, 0), 1);
        assert_eq!(super::super::stage_moe_layers(&model, &plan, 1), 4);
        let stages = stage_costs(&model, &cluster, &training, &plan);
        let at = |share: f64| {
            let mix = crate::cost::LayerMix::transformer(share);
            super::super::unit_costs_at(&model, &cluster, &training, &plan, mix)
        };
        let (dense, moe) = (at(0.0), at(1.0));
        let forward = |c: &super::super::UnitCosts, layers: f64, moe_layers: f64| {
            layers * (c.layer.forward + c.tp.forward_exposed_s + c.cp.forward_exposed_s)
                + c.ep_layers(moe_layers as u32) * c.ep.forward_exposed_s
                + c.pp_send_exposed_s
        };
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
        // The middle stages: 4 MoE layers.
        assert!(close(stages[1].forward_s, forward(&moe, 4.0, 4.0)));
        // The first: the average of its own mix, i.e. 3 dense layers and 1 MoE layer.
        let first_mix = at(0.25);
        assert!(close(stages[0].forward_s, forward(&first_mix, 4.0, 1.0)));
        let by_kind = 3.0 * dense.layer.forward + moe.layer.forward;
        assert!(
            (4.0 * first_mix.layer.forward / by_kind - 1.0).abs() < 1e-9,
            "{} vs {by_kind}",
            4.0 * first_mix.layer.forward
        );
        // And it is lighter than four MoE layers (DeepSeek-V3's dense MLP, 18,432 wide, costs
        // less than its MoE layer's experts, shared expert and all-to-alls at EP 8).
        assert!(stages[0].forward_s < forward(&moe, 4.0, 4.0));
    }

    #[test]
    fn the_closed_form_finds_a_middle_stage_slowed_by_its_dense_layers() {
        // A review's case: Mixtral-shaped with tiny experts (ffn 256), an MoE layer every third
        // layer, 40 layers on pp 5: the middle stages hold 3, 2 and 3 MoE layers of 8, and here a
        // dense layer costs more than an MoE one, so the middle stage with the fewest MoE layers
        // is the slowest. The closed form once costed only the one with the most.
        let mut model = specs::load_model("mixtral-8x7b").unwrap();
        model.layers = 40;
        model.vocab = 1024;
        let moe = model.moe.as_mut().unwrap();
        moe.ffn_hidden = 256;
        moe.layer_freq = 3;
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 5,
            gpus_per_node: 8,
        };
        let training = Training::with_framework(
            crate::training::TrainingFramework::MegatronCore,
            4096,
            64,
            crate::training::AttentionKernel::Flash,
        );
        let request = PlanRequest {
            tp: 2,
            pp: 5,
            dp: 4,
            ep: 4,
            micro_batch: 1,
            sequence_parallel: true,
            zero: 1,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        let per = |c: &StageCost| c.forward_s + c.backward_s;
        let slowest = s.stages.iter().map(per).fold(0.0, f64::max);
        let m = f64::from(plan.num_microbatches);
        let busy = evaluate(&model, &cluster, &training, &plan)
            .terms
            .pipeline_busy_s();
        assert!(
            (busy / (m * slowest) - 1.0).abs() < 1e-9,
            "{busy} vs {} ({:?})",
            m * slowest,
            s.stages
        );
    }

    #[test]
    fn unequal_stages_idle_more_than_the_closed_form() {
        // Uneven split: 20B's layers + embedding + output balanced over 3 stages puts the most
        // layers on the middle stage; the others wait for it every micro-batch, so the pipeline's
        // idle time exceeds the closed form's (p − 1)/(v·m).
        let (model, cluster, training) = setup(3);
        let plan =
            ParallelPlan::build(&request(8, 3, 1, 1, true), &model, &cluster, &training).unwrap();
        let s = simulate_plan(&model, &cluster, &training, &plan).unwrap();
        // 32 layers + 2 units over 3 stages: 10, 12, 10 (StageLayout::balanced_units).
        assert_eq!(layers_per_stage(&model, &plan), vec![10, 12, 10]);
        // Equal stages would idle (p − 1)/(m + p − 1) = r/(1 + r) of the pipeline's time.
        let r = s.summary.closed_form_bubble_ratio;
        assert!(
            s.summary.pipeline_idle_share > r / (1.0 + r),
            "{:?}",
            s.summary
        );
        // The slowest stage is the middle one and bounds the step from below.
        let per = |c: &StageCost| c.forward_s + c.backward_s;
        assert!(per(&s.stages[1]) > per(&s.stages[0]) && per(&s.stages[1]) > per(&s.stages[2]));
        let m = f64::from(plan.num_microbatches);
        let bound = m * per(&s.stages[1]) + per(&s.stages[0]) + per(&s.stages[2]) / 2.0;
        assert!(s.schedule.step_s >= m * per(&s.stages[1]) && s.schedule.step_s <= bound * 1.01);
    }

    #[test]
    fn equal_stages_reproduce_the_closed_form() {
        // Equal stage costs fed straight to the simulator: bubble (p − 1)/(v·m) and
        // step = (m + (p − 1)/v)·(F + B)·v per chunk.
        let stage = StageCost {
            forward_s: 0.3,
            backward_s: 0.7,
            weight_s: 0.3,
        };
        for (p, v, m) in [(4u32, 1u32, 8u32), (4, 2, 8), (8, 4, 16)] {
            let s = simulate(&vec![stage; p as usize], v, m, 0.0).unwrap();
            let want = (f64::from(m * v) + f64::from(p - 1)) * 1.0;
            assert!((s.step_s - want).abs() < 1e-9, "{p} {v} {m}: {}", s.step_s);
        }
    }
}
