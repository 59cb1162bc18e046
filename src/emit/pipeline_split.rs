//! How a tpsim pipeline split is said in Megatron-LM arguments, and how Megatron's split
//! arguments place layers on stages (Megatron-Core `transformer_config.py` `__post_init__`, the
//! "Uneven PP" and `account_for_*_in_pipeline_split` checks; Megatron-LM `arguments.py`
//! `validate_args` for the virtual stages).

use crate::model::Model;
use crate::plan::ParallelPlan;

/// The Megatron-LM arguments that reproduce a plan's stage layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MegatronSplit {
    /// layers / pp on every stage: no argument needed.
    Even,
    /// tpsim's uneven split (embedding and loss counted as a layer each, `layers + 2` units split
    /// evenly): `--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`.
    EmbeddingAndLossCounted,
    /// `--decoder-first-pipeline-num-layers F --decoder-last-pipeline-num-layers L`, the middle
    /// stages sharing the rest equally.
    FirstLast { first: u32, last: u32 },
    /// Middle stages with different layer counts: Megatron's first/last arguments cannot say it.
    Inexpressible { why: String },
}

impl MegatronSplit {
    pub fn of(model: &Model, plan: &ParallelPlan) -> MegatronSplit {
        let s = &plan.stages;
        if s.even {
            return MegatronSplit::Even;
        }
        let units = model.layers + 2;
        if units.is_multiple_of(plan.pp) {
            return MegatronSplit::EmbeddingAndLossCounted;
        }
        let middles = plan.pp.saturating_sub(2);
        let middle_layers = model.layers.saturating_sub(s.first + s.last);
        let middles_equal = middles == 0 || middle_layers == s.middle_max * middles;
        if s.first > 0 && s.last > 0 && middles_equal {
            MegatronSplit::FirstLast {
                first: s.first,
                last: s.last,
            }
        } else {
            MegatronSplit::Inexpressible {
                why: format!(
                    "its uneven split of {} layers on {} stages (first {}, middle up to {}, last {}) gives the middle stages different layer counts, which --decoder-first/last-pipeline-num-layers cannot express; use a --pp that divides {} or {} (layers + 2)",
                    model.layers, plan.pp, s.first, s.middle_max, s.last, model.layers, units
                ),
            }
        }
    }

    /// Megatron's `--num-layers-per-virtual-pipeline-stage` for an interleaved plan: the layers
    /// (plus the embedding and the loss when they are counted) over pp x vpp model chunks.
    pub fn layers_per_virtual_stage(model: &Model, plan: &ParallelPlan) -> u32 {
        let counted = match MegatronSplit::of(model, plan) {
            MegatronSplit::EmbeddingAndLossCounted => model.layers + 2,
            _ => model.layers,
        };
        counted / (plan.pp * plan.vpp)
    }
}

/// Megatron's split arguments as given on a launch line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitArgs {
    pub embedding_counted: bool,
    pub loss_counted: bool,
    pub first: Option<u32>,
    pub last: Option<u32>,
}

/// Transformer layers per stage as Megatron places them: first, each middle, last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageLayers {
    pub first: u32,
    pub middle: u32,
    pub last: u32,
}

impl SplitArgs {
    pub fn any(&self) -> bool {
        self.embedding_counted || self.loss_counted || self.first.is_some() || self.last.is_some()
    }

    /// The layers Megatron counts when it splits: the transformer layers, plus one for the
    /// embedding and one for the loss when the `--account-for-*` switches are on.
    pub fn counted_layers(&self, layers: u32) -> u32 {
        layers + u32::from(self.embedding_counted) + u32::from(self.loss_counted)
    }

    /// Where Megatron puts the layers on `pp` stages, with Megatron's own refusals (as one-line
    /// messages naming the arguments).
    pub fn stage_layers(&self, layers: u32, pp: u32) -> Result<StageLayers, String> {
        if (self.first.is_some() || self.last.is_some())
            && (self.embedding_counted || self.loss_counted)
        {
            // transformer_config.py: "num_layers_in_first_pipeline_stage and
            // num_layers_in_last_pipeline_stage cannot be set at the same time with
            // account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split".
            return Err("--decoder-first/last-pipeline-num-layers and --account-for-embedding/loss-in-pipeline-split cannot be used together (Megatron-Core refuses it); keep one kind".into());
        }
        if self.first.is_some() || self.last.is_some() {
            let mut rest = layers;
            let mut stages = pp;
            for (flag, value) in [
                ("decoder-first-pipeline-num-layers", self.first),
                ("decoder-last-pipeline-num-layers", self.last),
            ] {
                if let Some(v) = value {
                    if v > rest || stages == 0 {
                        return Err(format!(
                            "--{flag} {v} leaves too few of the {layers} layers for the other stages of --pipeline-model-parallel-size {pp}"
                        ));
                    }
                    rest -= v;
                    stages -= 1;
                }
            }
            if (rest == 0) != (stages == 0) || (stages > 0 && !rest.is_multiple_of(stages)) {
                return Err(format!(
                    "--decoder-first/last-pipeline-num-layers leave {rest} layers for {stages} other stages, which Megatron-Core needs to split evenly; change the first/last values"
                ));
            }
            let each = rest.checked_div(stages).unwrap_or(0);
            return Ok(StageLayers {
                first: self.first.unwrap_or(each),
                middle: each,
                last: self.last.unwrap_or(each),
            });
        }
        let counted = self.counted_layers(layers);
        if !counted.is_multiple_of(pp) {
            return Err(if self.any() {
                format!(
                    "{counted} layers (with the embedding and/or loss counted by --account-for-*-in-pipeline-split) do not split evenly on --pipeline-model-parallel-size {pp} (Megatron-Core refuses it); use a pp that divides {counted}"
                )
            } else {
                format!(
                    "--pipeline-model-parallel-size {pp} does not divide {layers} layers (Megatron-LM refuses it); add --decoder-first/last-pipeline-num-layers or --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
                )
            });
        }
        let per = counted / pp;
        Ok(StageLayers {
            first: per - u32::from(self.embedding_counted),
            middle: per,
            last: per - u32::from(self.loss_counted),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_places_llama3_405b_like_the_paper() {
        // Dubey et al. 2024 §3.3.2: 126 layers on 16 stages, one fewer on the first and last.
        let both = SplitArgs {
            embedding_counted: true,
            loss_counted: true,
            ..SplitArgs::default()
        };
        assert_eq!(
            both.stage_layers(126, 16),
            Ok(StageLayers {
                first: 7,
                middle: 8,
                last: 7
            })
        );
        let first_last = SplitArgs {
            first: Some(7),
            last: Some(7),
            ..SplitArgs::default()
        };
        assert_eq!(both.stage_layers(126, 16), first_last.stage_layers(126, 16));
        let uneven_middles = SplitArgs {
            first: Some(6),
            last: Some(7),
            ..SplitArgs::default()
        };
        assert!(uneven_middles.stage_layers(126, 16).is_err());
    }
}
