//! The pipeline stages' per-micro-batch times as the closed form sees them: the slowest stage,
//! which sets the step, the mean stage (the bubble's unit) and, under a V schedule, one model
//! chunk's split; the MoE layers each stage holds.

use super::compute::LayerTime;
use super::pipeline;
use super::v_schedule;
use super::{MixCosts, UnitCosts};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::model::{BlockCounts, HybridRun};
use crate::plan::ParallelPlan;
use crate::training::Training;

/// Per-micro-batch time of one pipeline stage: its compute and the exposed communication that
/// happens inside its forward and backward blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StageTime {
    pub(super) compute: f64,
    pub(super) forward: f64,
    pub(super) backward: f64,
    /// Of `backward`, the weight-gradient GEMMs (`LayerTime::weight_grad`).
    pub(super) weight: f64,
    /// Stage-boundary sends per micro-batch, both directions (`Ends::boundary_sends`).
    pub(super) sends: f64,
    pub(super) tp: f64,
    pub(super) cp: f64,
    pub(super) ep: f64,
    pub(super) pp: f64,
}

impl StageTime {
    pub(super) fn total(&self) -> f64 {
        self.compute + self.tp + self.cp + self.ep + self.pp
    }

    /// One micro-batch's forward, input gradient and weight gradient with their exposed
    /// communication, the communication shared in proportion to compute: the blocks a split
    /// backward schedules (`v_schedule`).
    pub(super) fn split(&self) -> [f64; 3] {
        let total = self.total();
        let forward = if self.compute > 0.0 {
            total * self.forward / self.compute
        } else {
            0.0
        };
        [
            forward,
            (total - forward - self.weight).max(0.0),
            self.weight,
        ]
    }
}

/// MoE layers of pipeline stage `stage` over all its model chunks, the last stage's MTP layers
/// included where they are MoE layers (`pipeline::ChunkLayout::stage_mix_with_mtp`).
pub(crate) fn stage_moe_layers(model: &Model, plan: &ParallelPlan, stage: u32) -> u32 {
    if model.moe.is_none() {
        return 0;
    }
    pipeline::ChunkLayout::of(model, plan)
        .stage_mix_with_mtp(model, plan.pp.max(1), stage)
        .1
}

/// The pipeline stages' per-micro-batch times as the closed form sees them.
pub(super) struct StageTimes {
    /// The stage with the longest per-micro-batch time (compute and exposed communication).
    pub(super) slowest: StageTime,
    /// Its transformer layers (MTP layers included on the last stage): its layers' communication
    /// is what the step pays, whichever stage holds the most layers (a last stage with few layers
    /// but the output layer can be the slowest).
    pub(super) slowest_layers: u32,
    /// The mean stage's per-micro-batch time (the bubble's unit).
    pub(super) mean_total: f64,
    /// Under a V schedule with a pipeline only: one model chunk's forward, input gradient and
    /// weight gradient ([`StageTime::split`] of the mean stage over its chunks, less the output
    /// layer), and the output layer's and loss's, which the first GPU's second chunk adds.
    pub(super) v_chunks: Option<[[f64; 3]; 2]>,
    /// Its MoE layers: the ones whose all-to-alls it pays.
    pub(super) slowest_moe_layers: u32,
    /// Whether it runs the embedding and the output layer, whose TP collectives it pays
    /// (`UnitCosts::ends`).
    pub(super) slowest_ends: Ends,
    /// Its MTP layers (the model's, where the slowest stage is the last): part of `slowest_layers`.
    pub(super) slowest_mtp_layers: u32,
    /// Where [`MixCosts`] keeps the unit costs of its layer mix.
    pub(super) slowest_costs: usize,
    /// A hybrid stack's run of layers on it.
    pub(super) slowest_run: Option<HybridRun>,
    /// Its layers kept in bf16 (`pipeline::Bf16Keep`).
    pub(super) slowest_bf16: Option<pipeline::Bf16Run>,
    /// Transformer layers of the stage that holds the most.
    pub(super) max_layers: u32,
}

/// Which of the model's ends a stage runs: the embedding (the first stage; under a V schedule the
/// first GPU, which runs the output layer too) and the output layer (the last stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ends {
    pub embedding: bool,
    pub output: bool,
}

impl Ends {
    /// The ends of the stage that runs the output layer when `with_output`, else of stage
    /// `stage`: a V schedule's first GPU runs both (`v_schedule`), a pipeline's only stage too.
    pub(super) fn of(plan: &ParallelPlan, v_shaped: bool, stage: u32, with_output: bool) -> Ends {
        let pp = plan.pp.max(1);
        Ends {
            embedding: if v_shaped && pp > 1 {
                with_output
            } else {
                stage == 0 || pp == 1
            },
            output: with_output,
        }
    }

    /// Its stage-boundary sends per micro-batch, [forward activations, backward gradients], with
    /// `chunks` model chunks: one each per chunk, less the forward send of the chunk that ends the
    /// model (it runs the output layer) and the backward send of the chunk that starts it (the
    /// embedding). Megatron-Core `P2PCommunicator.send_forward` sends only `if not
    /// is_last_stage` and `send_backward` only `if not is_first_stage`
    /// (pipeline_parallel/p2p_communication.py:494 and :516 at d98e8a64), the interleaved
    /// schedule per virtual stage; PyTorch's pipelining gives the first and last stages no
    /// previous and next peer. A V's first GPU (virtual stages 0 and 2p − 1) sends chunk 0's
    /// activations and chunk 1's gradients: one of each.
    pub fn boundary_sends(self, chunks: f64) -> [f64; 2] {
        let at = |end: bool| if end { 1.0 } else { 0.0 };
        [
            (chunks - at(self.output)).max(0.0),
            (chunks - at(self.embedding)).max(0.0),
        ]
    }
}

pub(super) fn stage_times(model: &Model, plan: &ParallelPlan, mix: &mut MixCosts) -> StageTimes {
    let v = f64::from(plan.vpp);
    let p = f64::from(plan.pp);
    let v_shaped = mix.training.pp_schedule.v_kind().is_some();
    // A stage's time at its own layer mix: its layers' compute and exposed TP (the model's ends'
    // included where it runs them), CP and EP.
    let stage_time = |costs: &UnitCosts, layers: u32, moe_layers: u32, ends: Ends| {
        let with_output = ends.output;
        let n = f64::from(layers);
        let out = if with_output {
            costs.output
        } else {
            LayerTime::default()
        };
        let layer = costs.layer;
        // Each chunk sends its activations forward and its gradients back, but the model's
        // ends' chunks one of them only (`Ends::boundary_sends`).
        let [forward_sends, backward_sends] = ends.boundary_sends(v);
        let sends = forward_sends + backward_sends;
        StageTime {
            compute: n * layer.total() + out.total(),
            forward: n * layer.forward + out.forward,
            backward: n * (layer.backward + layer.recompute) + out.backward,
            weight: n * layer.weight_grad + out.weight_grad,
            tp: n * costs.tp.exposed_s() + costs.ends.held(ends).exposed_s(),
            cp: n * (costs.cp.exposed_s() + costs.mamba_cp.exposed_s()),
            ep: costs.ep_layers(moe_layers) * costs.ep.exposed_s(),
            sends,
            pp: sends * costs.pp_send_exposed_s,
        }
    };
    let last_layers = pipeline::last_stage_layers(model, plan);
    let last_stage = plan.pp.max(1) - 1;
    // One layout for every stage's MoE count, hybrid blocks and bf16 layers (dense transformers
    // at one precision need none).
    let keep = mix.keep;
    let layout = (model.moe.is_some() || model.is_hybrid() || !keep.is_none())
        .then(|| pipeline::ChunkLayout::of(model, plan));
    let moe_of = |stage: u32| {
        layout
            .filter(|_| model.moe.is_some())
            .map_or(0, |l| l.stage_mix_with_mtp(model, plan.pp.max(1), stage).1)
    };
    let bf16_of =
        |stage: u32| layout.and_then(|l| l.stage_bf16(model, keep, plan.pp.max(1), stage));
    let last_moe = moe_of(last_stage);
    let last_run = layout.and_then(|l| l.stage_run(model, plan.pp.max(1), last_stage));
    if plan.pp == 1 {
        let at = mix.stage(last_layers, last_moe, last_run, bf16_of(0));
        let ends = Ends::of(plan, v_shaped, 0, true);
        let only = stage_time(mix.costs(at), last_layers, last_moe, ends);
        return StageTimes {
            slowest: only,
            slowest_layers: last_layers,
            slowest_moe_layers: last_moe,
            slowest_ends: ends,
            slowest_mtp_layers: model.mtp_layers,
            slowest_costs: at,
            slowest_run: last_run,
            slowest_bf16: bf16_of(0),
            mean_total: only.total(),
            v_chunks: None,
            max_layers: last_layers,
        };
    }
    // Under a V schedule GPU g holds virtual stages g and 2p − 1 − g (`v_schedule::virtual_stage`,
    // torchtitan's `pipeline_parallel_schedule = "DualPipeV"` / `"ZBVZeroBubble"`), the first GPU
    // the last one, with the output layer, the loss and the MTP depths: the looped stages below
    // would count other layers than any GPU holds (DeepSeek-V3 at pp 16: the looped last stage's 2
    // layers and the MTP depth, where the V puts 1 dense layer and the MTP depth on the first GPU
    // and 2 to 4 MoE layers on each other), so every GPU is priced at its own layers, as the
    // simulated schedule prices its chunks (`simulated::v_chunk_costs`).
    if v_shaped {
        let layout = layout.unwrap_or_else(|| pipeline::ChunkLayout::of(model, plan));
        let p = plan.pp;
        let gpu_of = |gpu: u32| {
            let holds_last = gpu == 0;
            let depths = if holds_last { model.mtp_layers } else { 0 };
            let ranges = [0, 1].map(|chunk| layout.range(v_schedule::virtual_stage(gpu, chunk, p)));
            let layers = ranges.iter().map(|(start, end)| end - start).sum::<u32>() + depths;
            let mtp_moe = if model.mtp_layer_is_moe() { depths } else { 0 };
            let moe_layers = ranges
                .iter()
                .map(|&(start, end)| model.moe_layers_between(start, end))
                .sum::<u32>()
                + mtp_moe;
            let run = model.is_hybrid().then(|| crate::model::HybridRun {
                counts: ranges.iter().fold(
                    Default::default(),
                    |counts: BlockCounts, &(start, end)| {
                        counts.plus(model.blocks_between(start, end))
                    },
                ),
                mtp_depths: depths,
            });
            let bf16 = (!keep.is_none())
                .then(|| {
                    let [(s0, e0), (s1, e1)] = ranges;
                    pipeline::Bf16Run::of_range(model, keep, s0, e0, 0)
                        .plus(pipeline::Bf16Run::of_range(model, keep, s1, e1, depths))
                        .nonempty()
                })
                .flatten();
            GpuMix {
                layers,
                moe_layers,
                run,
                bf16,
                with_output: holds_last,
            }
        };
        return per_stage_times(model, plan, mix, gpu_of, stage_time);
    }
    // Every stage priced on its own where the stages differ in more than the closed form's four
    // representatives tell apart: a hybrid stack's slices, or bf16 layers on a middle stage.
    let bf16_in_middle = !keep.layers.is_none() && (1..last_stage).any(|s| bf16_of(s).is_some());
    if let (true, Some(layout)) = (model.is_hybrid() || bf16_in_middle, layout) {
        let stage_of = |stage: u32| {
            let (layers, moe_layers) = layout.stage_mix_with_mtp(model, plan.pp, stage);
            GpuMix {
                layers,
                moe_layers,
                run: layout.stage_run(model, plan.pp, stage),
                bf16: layout.stage_bf16(model, keep, plan.pp, stage),
                with_output: stage == last_stage,
            }
        };
        return per_stage_times(model, plan, mix, stage_of, stage_time);
    }
    // The middle stage with the most layers, and of those the most MoE layers: all of them when
    // every layer is MoE, or when the dense prefix ends on the first stage of a pipeline without
    // interleaving (DeepSeek-V3's three dense layers); else counted stage by stage.
    let middle_all_moe = model.every_layer_moe()
        || model.moe.is_some_and(|moe| {
            moe.layer_freq == 1 && plan.vpp == 1 && moe.first_dense_layers <= plan.stages.first
        });
    // Of the middle stages with the most layers, the one with the most MoE layers and the one
    // with the fewest: which is slower depends on whether a model's MoE layers cost more than
    // its dense ones (small experts can cost less).
    let (middle_most_moe, middle_fewest_moe) = if middle_all_moe {
        (plan.stages.middle_max, plan.stages.middle_max)
    } else if let (true, Some(layout)) = (plan.pp > 2, layout) {
        let mixes = (1..last_stage).map(|stage| layout.stage_mix(model, plan.pp, stage));
        let most = mixes.clone().max().map_or(0, |(_, moe)| moe);
        let fewest = mixes
            .filter(|(layers, _)| *layers == plan.stages.middle_max)
            .map(|(_, moe)| moe)
            .min()
            .unwrap_or(most);
        (most, fewest)
    } else {
        (0, 0)
    };
    let first_moe = moe_of(0);
    let stages = [
        (
            plan.stages.first,
            first_moe,
            Ends::of(plan, v_shaped, 0, false),
        ),
        (
            plan.stages.middle_max,
            middle_most_moe,
            Ends::of(plan, v_shaped, 1, false),
        ),
        (
            last_layers,
            last_moe,
            Ends::of(plan, v_shaped, last_stage, true),
        ),
        (
            plan.stages.middle_max,
            middle_fewest_moe,
            Ends::of(plan, v_shaped, 1, false),
        ),
    ];
    // Only the first and last stages hold bf16 layers here (`bf16_in_middle` above).
    let bf16_at = [Some(0), None, Some(last_stage), None];
    let at = [0, 1, 2, 3].map(|i| {
        let (layers, moe_layers, _) = stages[i];
        mix.stage(layers, moe_layers, None, bf16_at[i].and_then(bf16_of))
    });
    let [first, most, last, fewest] = [0, 1, 2, 3].map(|i| {
        let (layers, moe_layers, ends) = stages[i];
        stage_time(mix.costs(at[i]), layers, moe_layers, ends)
    });
    let middle_at = if fewest.total() > most.total() { 3 } else { 1 };
    let middle = if middle_at == 3 { fewest } else { most };
    let mut slowest = 0;
    let times = [first, most, last, fewest];
    for candidate in [middle_at, 2] {
        if (plan.pp > 2 || candidate == 2) && times[candidate].total() > times[slowest].total() {
            slowest = candidate;
        }
    }
    StageTimes {
        slowest: times[slowest],
        slowest_layers: stages[slowest].0,
        slowest_moe_layers: stages[slowest].1,
        slowest_ends: stages[slowest].2,
        slowest_mtp_layers: if slowest == 2 { model.mtp_layers } else { 0 },
        slowest_costs: at[slowest],
        slowest_run: None,
        slowest_bf16: bf16_at[slowest].and_then(bf16_of),
        mean_total: (first.total() + (p - 2.0) * middle.total() + last.total()) / p,
        // Only the V schedules' closed form reads the split (`v_schedule::v_bubble_s`).
        v_chunks: v_shaped.then(|| {
            let [a, b, c] = [first.split(), middle.split(), last.split()];
            let mean = [0, 1, 2].map(|k| (a[k] + (p - 2.0) * b[k] + c[k]) / p);
            v_chunk_split(mean, mix.costs(at[2]).output, p, v)
        }),
        max_layers: pipeline::max_stage_layers(model, plan),
    }
}

/// One model chunk's forward, input gradient and weight gradient under a V schedule, from the mean
/// stage's `mean` split less the output layer's share, and the output layer's and loss's own
/// (`StageTimes::v_chunks`).
fn v_chunk_split(mean: [f64; 3], out: LayerTime, p: f64, v: f64) -> [[f64; 3]; 2] {
    let output = [
        out.forward,
        (out.backward + out.recompute - out.weight_grad).max(0.0),
        out.weight_grad,
    ];
    let chunk = [0, 1, 2].map(|k| ((mean[k] - output[k] / p) / v).max(0.0));
    [chunk, output]
}

/// What one GPU of the pipeline holds over all its model chunks: its transformer layers (the MTP
/// depths included where it runs them), the MoE layers among them, a hybrid stack's run, its
/// layers kept in bf16, and whether it runs the output layer and the loss.
struct GpuMix {
    layers: u32,
    moe_layers: u32,
    run: Option<HybridRun>,
    bf16: Option<pipeline::Bf16Run>,
    with_output: bool,
}

/// [`stage_times`] GPU by GPU (`gpu_of` says what each holds): a hybrid stack with a pipeline,
/// where Megatron-Core gives each stage its own slice of the pattern (`select_pipeline_segment`),
/// bf16 layers reaching a middle stage, or a V schedule's two chunks a GPU; every GPU is priced at
/// its own layers and the slowest sets the step; the mean is over all of them.
fn per_stage_times(
    model: &Model,
    plan: &ParallelPlan,
    mix: &mut MixCosts,
    gpu_of: impl Fn(u32) -> GpuMix,
    stage_time: impl Fn(&UnitCosts, u32, u32, Ends) -> StageTime,
) -> StageTimes {
    let p = plan.pp.max(1);
    let v_shaped = mix.training.pp_schedule.v_kind().is_some();
    let mut sum = 0.0;
    let mut split_sum = [0.0; 3];
    let mut output = LayerTime::default();
    let mut slowest = (0, f64::NEG_INFINITY);
    for stage in 0..p {
        let g = gpu_of(stage);
        let at = mix.stage(g.layers, g.moe_layers, g.run, g.bf16);
        let ends = Ends::of(plan, v_shaped, stage, g.with_output);
        let time = stage_time(mix.costs(at), g.layers, g.moe_layers, ends);
        sum += time.total();
        let split = time.split();
        split_sum = [0, 1, 2].map(|k| split_sum[k] + split[k]);
        if g.with_output {
            output = mix.costs(at).output;
        }
        if time.total() > slowest.1 {
            slowest = (stage, time.total());
        }
    }
    let pf = f64::from(p);
    // Its slot: the one that still holds its mix, or, where the loop reused the last slot for a
    // later stage, the last slot again (filled anew).
    let (stage, g) = (slowest.0, gpu_of(slowest.0));
    let at = mix.stage(g.layers, g.moe_layers, g.run, g.bf16);
    let ends = Ends::of(plan, v_shaped, stage, g.with_output);
    let time = stage_time(mix.costs(at), g.layers, g.moe_layers, ends);
    StageTimes {
        slowest: time,
        slowest_layers: g.layers,
        slowest_moe_layers: g.moe_layers,
        slowest_ends: ends,
        slowest_mtp_layers: if g.with_output { model.mtp_layers } else { 0 },
        slowest_costs: at,
        slowest_run: g.run,
        slowest_bf16: g.bf16,
        mean_total: sum / pf,
        v_chunks: v_shaped
            .then(|| v_chunk_split(split_sum.map(|x| x / pf), output, pf, f64::from(plan.vpp))),
        max_layers: pipeline::max_stage_layers(model, plan),
    }
}

/// Transformer layers of the stage whose per-micro-batch time sets the step (`evaluate`'s slowest
/// stage): the layers whose communication the step's terms, and the ledger, count.
pub fn slowest_stage(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> SlowestStage {
    let times = stage_times(
        model,
        plan,
        &mut MixCosts::new(model, cluster, training, plan),
    );
    SlowestStage {
        layers: times.slowest_layers,
        moe_layers: times.slowest_moe_layers,
        run: times.slowest_run,
        bf16: times.slowest_bf16,
        sends: times.slowest.sends as u32,
        ends: times.slowest_ends,
    }
}

/// The transformer layers, and the MoE layers among them, of the stage that sets the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowestStage {
    pub layers: u32,
    pub moe_layers: u32,
    /// A hybrid stack's run of layers on it (`pipeline::ChunkLayout::stage_run`).
    pub run: Option<HybridRun>,
    /// Its layers kept in bf16 (`pipeline::Bf16Keep`).
    pub bf16: Option<pipeline::Bf16Run>,
    /// Its stage-boundary sends per micro-batch, both directions (`Ends::boundary_sends`).
    pub sends: u32,
    /// The model's ends it runs, whose TP collectives it pays (`embedding_output_tp`).
    pub ends: Ends,
}
