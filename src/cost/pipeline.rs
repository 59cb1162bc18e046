//! Pipeline bubble of (interleaved) 1F1B, and the transformer layers the stages run.

use crate::model::Model;
use crate::model::{BlockCounts, HybridRun};
use crate::plan::ParallelPlan;

/// Transformer layers the last stage (the only one without pipelining) runs: its decoder layers
/// and the model's MTP layers, which Megatron-Core builds on the last stage with the loss
/// (`GPTModel.mtp_process` = `post_process` by default).
pub fn last_stage_layers(model: &Model, plan: &ParallelPlan) -> u32 {
    if plan.pp == 1 {
        model.layers + model.mtp_layers
    } else {
        plan.stages.last + model.mtp_layers
    }
}

/// Transformer layers of the stage that runs the most, MTP layers included.
pub fn max_stage_layers(model: &Model, plan: &ParallelPlan) -> u32 {
    let last = last_stage_layers(model, plan);
    if plan.pp == 1 {
        last
    } else {
        plan.stages.first.max(plan.stages.middle_max).max(last)
    }
}

/// How a plan's decoder layers fall into its pp·vpp model chunks (depth order; chunk c runs on
/// stage c % pp), as the plan's stage layout places them (`plan::StageLayout`), worked out once
/// so that each chunk's range is a few integer operations.
#[derive(Debug, Clone, Copy)]
pub struct ChunkLayout {
    layers: u32,
    chunks: u32,
    kind: ChunkKind,
}

#[derive(Debug, Clone, Copy)]
enum ChunkKind {
    /// Every chunk `per` layers, the last the remainder: equal chunks, or chunks filled front to
    /// back (`StageLayout::filled_chunks`).
    FrontToBack { per: u32 },
    /// Interleaved chunks of embedding-and-loss-counted units (`plan::unit_chunks`): the first
    /// one layer lighter for the embedding, the last holding what remains.
    Units { per: u32 },
    /// One chunk per stage: the first and last as given (or tpsim's), the middle stages sharing
    /// the rest, the extra layers on the earliest ones (`cost::simulated::layers_per_stage`).
    Stages { first: u32, last: u32 },
    /// Every stage `per_stage` layers (an even split) that its `vpp` chunks do not divide: the
    /// chunks of the earliest `per_stage % vpp` virtual stages hold one layer more, as the
    /// `--pipeline-model-parallel-layout` tpsim writes says it (`StageLayout::balanced_chunks`);
    /// each stage holds the same layers.
    Balanced { pp: u32, vpp: u32, per_stage: u32 },
}

impl ChunkLayout {
    pub fn of(model: &Model, plan: &ParallelPlan) -> ChunkLayout {
        let layers = model.layers;
        let (p, v) = (plan.pp.max(1), plan.vpp.max(1));
        let chunks = p * v;
        let s = &plan.stages;
        let kind = if s.balanced_chunks(layers, p, v) {
            ChunkKind::Balanced {
                pp: p,
                vpp: v,
                per_stage: layers / p,
            }
        } else if chunks == 1 || s.even {
            ChunkKind::FrontToBack {
                per: layers / chunks,
            }
        } else if s.chunk_layers > 0 {
            ChunkKind::FrontToBack {
                per: s.chunk_layers,
            }
        } else if v > 1 {
            match crate::plan::unit_chunks(model, p, v) {
                Some(units) => ChunkKind::Units {
                    per: units.per_chunk,
                },
                None => ChunkKind::FrontToBack {
                    per: layers.div_ceil(chunks),
                },
            }
        } else {
            ChunkKind::Stages {
                first: s.first,
                last: s.last,
            }
        };
        ChunkLayout {
            layers,
            chunks,
            kind,
        }
    }

    /// Decoder layers [start, end) of model chunk `chunk` (MTP layers are not decoder layers: they
    /// ride on the last stage, `last_stage_layers`).
    pub fn range(&self, chunk: u32) -> (u32, u32) {
        let (layers, chunks) = (self.layers, self.chunks);
        let last = chunk + 1 == chunks;
        match self.kind {
            ChunkKind::FrontToBack { per } => {
                let start = (chunk * per).min(layers);
                let end = if last {
                    layers
                } else {
                    ((chunk + 1) * per).min(layers)
                };
                (start, end)
            }
            ChunkKind::Units { per } => {
                let start = if chunk == 0 {
                    0
                } else {
                    (per - 1 + (chunk - 1) * per).min(layers)
                };
                let end = if last {
                    layers
                } else {
                    (per - 1 + chunk * per).min(layers)
                };
                (start, end)
            }
            ChunkKind::Stages {
                first,
                last: last_layers,
            } => {
                if chunk == 0 {
                    return (0, first.min(layers));
                }
                if last {
                    return (layers.saturating_sub(last_layers), layers);
                }
                let middles = chunks - 2;
                let rest = layers.saturating_sub(first + last_layers);
                let (base, extra) = (rest / middles, rest % middles);
                let i = chunk - 1;
                let start = first + i * base + i.min(extra);
                (start, start + base + u32::from(i < extra))
            }
            ChunkKind::Balanced { pp, vpp, per_stage } => {
                let (base, extra) = (per_stage / vpp, per_stage % vpp);
                let (round, stage) = (chunk / pp, chunk % pp);
                let size = base + u32::from(round < extra);
                let start = pp * (round * base + round.min(extra)) + stage * size;
                (start, start + size)
            }
        }
    }

    /// Decoder layers and MoE layers among them (`Model::moe_layers_between`) on pipeline stage
    /// `stage` of `pp`, over all its model chunks.
    pub fn stage_mix(&self, model: &Model, pp: u32, stage: u32) -> (u32, u32) {
        let pp = pp.max(1);
        (0..self.chunks / pp).fold((0, 0), |(layers, moe), round| {
            let (start, end) = self.range(round * pp + stage);
            (
                layers + end - start,
                moe + model.moe_layers_between(start, end),
            )
        })
    }

    /// The run of a hybrid stack's layers pipeline stage `stage` of `pp` holds over all its model
    /// chunks, the MTP depths included on the last stage (Megatron-Core's
    /// `select_pipeline_segment` slices the pattern by stage); None for a transformer.
    pub fn stage_run(&self, model: &Model, pp: u32, stage: u32) -> Option<HybridRun> {
        if !model.is_hybrid() {
            return None;
        }
        let pp = pp.max(1);
        let counts = (0..self.chunks / pp).fold(BlockCounts::default(), |counts, round| {
            let (start, end) = self.range(round * pp + stage);
            counts.plus(model.blocks_between(start, end))
        });
        let mtp_depths = if stage + 1 == pp { model.mtp_layers } else { 0 };
        Some(HybridRun { counts, mtp_depths })
    }

    /// The layers of pipeline stage `stage` of `pp` that run their GEMMs in bf16 under a
    /// low-precision plan ([`Bf16Run::of_range`] over its chunks, the MTP depths on the last).
    pub fn stage_bf16(
        &self,
        model: &Model,
        keep: Bf16Keep,
        pp: u32,
        stage: u32,
    ) -> Option<Bf16Run> {
        if keep.is_none() {
            return None;
        }
        let pp = pp.max(1);
        let depths = if stage + 1 == pp { model.mtp_layers } else { 0 };
        (0..self.chunks / pp)
            .map(|round| {
                let (start, end) = self.range(round * pp + stage);
                Bf16Run::of_range(model, keep, start, end, 0)
            })
            .fold(Bf16Run::of_range(model, keep, 0, 0, depths), |sum, one| {
                sum.plus(one)
            })
            .nonempty()
    }

    /// [`ChunkLayout::stage_mix`] with the MTP layers the last stage runs after its decoder layers
    /// (`last_stage_layers`), MoE layers where the last decoder layer is one.
    pub fn stage_mix_with_mtp(&self, model: &Model, pp: u32, stage: u32) -> (u32, u32) {
        let (layers, moe) = self.stage_mix(model, pp, stage);
        if stage + 1 < pp.max(1) {
            return (layers, moe);
        }
        let mtp_moe = if model.mtp_layer_is_moe() {
            model.mtp_layers
        } else {
            0
        };
        (layers + model.mtp_layers, moe + mtp_moe)
    }
}

/// What of a plan runs its GEMMs in bf16 although the plan's precision is lower: the layers
/// kept at the ends of the stack (`training::Bf16Layers`) and whether the MTP layers are
/// (`training::mtp_runs_bf16`). Nothing at bf16 precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bf16Keep {
    pub layers: crate::training::Bf16Layers,
    pub mtp: bool,
}

impl Bf16Keep {
    pub fn of(
        model: &Model,
        training: &crate::training::Training,
        plan: &ParallelPlan,
    ) -> Bf16Keep {
        if plan.precision == crate::plan::Precision::Bf16 {
            return Bf16Keep::default();
        }
        Bf16Keep {
            layers: training.bf16_layers,
            mtp: crate::training::mtp_runs_bf16(
                model.layers,
                model.is_hybrid(),
                training.bf16_layers,
                training.framework,
                plan.precision,
            ),
        }
    }

    pub fn is_none(&self) -> bool {
        self.layers.is_none() && !self.mtp
    }
}

/// Layers of one stage (or model chunk) that run in bf16 under a low-precision plan
/// ([`Bf16Keep`]): how many (MTP layers included), how many of them are MoE layers, and a hybrid
/// stack's run of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bf16Run {
    pub layers: u32,
    pub moe_layers: u32,
    pub run: Option<HybridRun>,
}

impl Bf16Run {
    /// The bf16 layers among decoder layers [start, end), and `mtp_depths` MTP layers after them
    /// where the MTP layers run in bf16.
    pub fn of_range(
        model: &Model,
        keep: Bf16Keep,
        start: u32,
        end: u32,
        mtp_depths: u32,
    ) -> Bf16Run {
        let depths = if keep.mtp { mtp_depths } else { 0 };
        let within = keep.layers.within(model.layers, start, end);
        let layers = within.iter().map(|(a, b)| b - a).sum::<u32>() + depths;
        let mtp_moe = if model.mtp_layer_is_moe() { depths } else { 0 };
        let moe_layers = if model.moe.is_some() {
            within
                .iter()
                .map(|&(a, b)| model.moe_layers_between(a, b))
                .sum::<u32>()
                + mtp_moe
        } else {
            0
        };
        let run = model.is_hybrid().then(|| HybridRun {
            counts: within.iter().fold(BlockCounts::default(), |c, &(a, b)| {
                c.plus(model.blocks_between(a, b))
            }),
            mtp_depths: depths,
        });
        Bf16Run {
            layers,
            moe_layers,
            run,
        }
    }

    /// The two runs together (a V's two chunks on one GPU, a stage's chunks).
    pub fn plus(self, other: Bf16Run) -> Bf16Run {
        Bf16Run {
            layers: self.layers + other.layers,
            moe_layers: self.moe_layers + other.moe_layers,
            run: match (self.run, other.run) {
                (Some(a), Some(b)) => Some(HybridRun {
                    counts: a.counts.plus(b.counts),
                    mtp_depths: a.mtp_depths + b.mtp_depths,
                }),
                (a, b) => a.or(b),
            },
        }
    }

    /// Itself where it holds a layer.
    pub fn nonempty(self) -> Option<Bf16Run> {
        (self.layers > 0).then_some(self)
    }
}

/// Decoder layers (MTP layers excluded) on each GPU of a V-shaped schedule (`v_schedule`): GPU r
/// of p runs model chunks r and 2p − 1 − r (torchtitan `_get_pp_rank_to_stage_indices_mapping`,
/// style "v"), as the plan's layout cuts them.
pub fn v_rank_layers(model: &Model, plan: &ParallelPlan) -> Vec<u32> {
    let layout = ChunkLayout::of(model, plan);
    let p = plan.pp.max(1);
    (0..p)
        .map(|rank| {
            let (a, b) = layout.range(rank);
            let (c, d) = layout.range(2 * p - 1 - rank);
            b - a + d - c
        })
        .collect()
}

/// Decoder layers [start, end) of model chunk `chunk` of `plan` ([`ChunkLayout::range`]).
pub fn chunk_layer_range(model: &Model, plan: &ParallelPlan, chunk: u32) -> (u32, u32) {
    ChunkLayout::of(model, plan).range(chunk)
}

/// MoE layers among the decoder layers of pipeline stage `stage` (0..pp), over all its model
/// chunks; MTP layers excluded.
pub fn stage_moe_layers(model: &Model, plan: &ParallelPlan, stage: u32) -> u32 {
    ChunkLayout::of(model, plan)
        .stage_mix(model, plan.pp, stage)
        .1
}

/// Fraction of ideal compute time the pipeline sits idle: (p − 1)/(v·m), Narayanan et al. 2021 §2.2
/// (1F1B: (p − 1)/m; interleaved with v model chunks per GPU: divided by v).
pub fn bubble_ratio(pp: u32, vpp: u32, num_microbatches: u32) -> f64 {
    if pp <= 1 {
        return 0.0;
    }
    f64::from(pp - 1) / (f64::from(vpp) * f64::from(num_microbatches))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout the plans use: the chunks tile the layers in depth order, each stage's chunks
    /// add up to the layout's stage sizes, and the MoE count per stage matches layer-by-layer.
    #[test]
    fn chunks_tile_the_layers_and_count_moe_layers_per_stage() {
        use crate::cluster::Cluster;
        use crate::plan::PlanRequest;
        use crate::training::{AttentionKernel, Training, TrainingFramework};
        let mut dsv3 = crate::specs::load_model("deepseek-v3").unwrap();
        let mut freq3 = crate::specs::load_model("mixtral-8x7b").unwrap();
        if let Some(moe) = freq3.moe.as_mut() {
            moe.layer_freq = 3;
            moe.first_dense_layers = 2;
        }
        let llama405 = crate::specs::load_model("llama3-405b").unwrap();
        let no_mtp = {
            dsv3.mtp_layers = 1;
            let mut m = dsv3.clone();
            m.mtp_layers = 0;
            m
        };
        // (model, pp, vpp, first/last given)
        type Case<'a> = (&'a crate::model::Model, u32, u32, Option<(u32, u32)>);
        let cases: Vec<Case> = vec![
            (&dsv3, 16, 1, Some((4, 1))),
            (&dsv3, 8, 4, None),
            (&no_mtp, 8, 4, None),
            (&dsv3, 4, 4, None),
            (&dsv3, 16, 1, None),
            (&freq3, 4, 2, None),
            (&freq3, 8, 1, None),
            (&freq3, 3, 1, None),
            (&freq3, 1, 1, None),
            (&llama405, 16, 1, None),
            (&llama405, 8, 1, Some((15, 15))),
        ];
        for (model, pp, vpp, split) in cases {
            let cluster = Cluster {
                gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
                nodes: pp,
                gpus_per_node: 8,
            };
            let training = Training::with_framework(
                TrainingFramework::MegatronCore,
                4096,
                pp * 64,
                AttentionKernel::Flash,
            );
            let request = PlanRequest {
                tp: 8,
                pp,
                dp: 1,
                vpp,
                micro_batch: 1,
                sequence_parallel: true,
                allow_uneven_pp: true,
                stage_split: split,
                ..PlanRequest::default()
            };
            let Ok(plan) = crate::plan::ParallelPlan::build(&request, model, &cluster, &training)
            else {
                panic!("{} pp {pp} vpp {vpp} {split:?} does not build", model.name);
            };
            let what = format!("{} pp {pp} vpp {vpp} {split:?}", model.name);
            let mut next = 0;
            for chunk in 0..pp * vpp {
                let (start, end) = chunk_layer_range(model, &plan, chunk);
                assert_eq!(start, next, "{what}: chunk {chunk}");
                assert!(end >= start, "{what}: chunk {chunk}");
                next = end;
            }
            assert_eq!(next, model.layers, "{what}");
            let per_stage = crate::cost::simulated::layers_per_stage(model, &plan);
            for stage in 0..pp {
                let (layers, moe): (u32, u32) = (0..vpp)
                    .map(|round| chunk_layer_range(model, &plan, round * pp + stage))
                    .map(|(a, b)| {
                        (
                            b - a,
                            (a..b).filter(|&l| model.is_moe_layer(l)).count() as u32,
                        )
                    })
                    .fold((0, 0), |acc, x| (acc.0 + x.0, acc.1 + x.1));
                if vpp == 1 {
                    assert_eq!(layers, per_stage[stage as usize], "{what}: stage {stage}");
                } else if stage == 0 {
                    assert_eq!(layers, plan.stages.first, "{what}");
                } else if stage + 1 == pp {
                    assert_eq!(layers, plan.stages.last, "{what}");
                } else {
                    assert!(layers <= plan.stages.middle_max, "{what}: stage {stage}");
                }
                assert_eq!(
                    stage_moe_layers(model, &plan, stage),
                    moe,
                    "{what}: stage {stage}"
                );
            }
        }
    }

    #[test]
    fn narayanan_bubble() {
        assert_eq!(bubble_ratio(1, 1, 8), 0.0);
        assert_eq!(bubble_ratio(8, 1, 64), 7.0 / 64.0);
        assert_eq!(bubble_ratio(8, 2, 64), 7.0 / 128.0);
        // Megatron SC'21 1T run: p = 64, m = 512.
        assert!((bubble_ratio(64, 1, 512) - 0.123).abs() < 1e-3);
    }
}
