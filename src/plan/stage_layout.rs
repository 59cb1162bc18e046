//! Transformer layers per pipeline stage: [`StageLayout`], the interleaved unit chunks
//! ([`unit_chunks`], Megatron-Core's `account_for_embedding_in_pipeline_split` /
//! `account_for_loss_in_pipeline_split`; Megatron-Bridge's DeepSeek-V3 layouts) and the first/last
//! splits the search tries ([`first_last_splits`]).

use serde::Serialize;

use crate::model::Model;

/// Transformer layers on the first, most-loaded middle, and last pipeline stage. The embedding lives
/// on the first stage and the output layer on the last (Megatron-LM, DeepSpeed pipeline engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StageLayout {
    pub first: u32,
    pub middle_max: u32,
    pub last: u32,
    pub even: bool,
    /// Layers in each model chunk when the chunks are filled front to back and the last one takes
    /// the remainder ([`StageLayout::filled_chunks`]); 0 for the other layouts.
    pub chunk_layers: u32,
    /// Whether the first and last stage's layers were given (`PlanRequest::stage_split`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub given: bool,
}

impl StageLayout {
    /// Even split: every stage has layers/pp layers.
    pub(super) fn even(layers: u32, pp: u32) -> StageLayout {
        let per = layers / pp;
        StageLayout {
            first: per,
            middle_max: per,
            last: per,
            even: true,
            chunk_layers: 0,
            given: false,
        }
    }

    /// Uneven split that counts the embedding and the output layer as one layer each and balances
    /// the `layers + 2` units: DeepSpeed's `--pp-partition-method type:transformer|embedding` as
    /// BLOOM used it (70 layers on 12 stages: 5, 6×10, 5) and Llama 3's 126 layers on 16 stages
    /// (Dubey et al. 2024 §3.3.2: one layer fewer on the first and the last stage: 7, 8×14, 7).
    /// A remainder goes to middle stages first. MTP layers count as units of the last stage,
    /// which runs them after its decoder layers (a DeepSeek-V3 MTP layer is an MoE layer plus
    /// another output pass), so that stage gets fewer decoder layers, as Megatron-Bridge's
    /// DeepSeek-V3 layouts do.
    pub(super) fn balanced_units(layers: u32, pp: u32, mtp_layers: u32) -> StageLayout {
        let units = layers + 2 + mtp_layers;
        if mtp_layers > 0 && units / pp < 2 + mtp_layers && pp >= 2 && layers > pp {
            // The MTP layers alone outweigh a stage: one decoder layer on the last stage, the
            // other layers balanced over the other stages with the embedding counted on the first.
            let middles = pp - 2;
            let first = if middles == 0 {
                layers - 1
            } else {
                (layers / (pp - 1)).saturating_sub(1).max(1)
            };
            return StageLayout {
                first,
                middle_max: if middles == 0 {
                    0
                } else {
                    (layers - 1 - first).div_ceil(middles)
                },
                last: 1,
                even: false,
                chunk_layers: 0,
                given: false,
            };
        }
        let base = units / pp;
        let mut extra = units % pp;
        let middles = pp.saturating_sub(2);
        let middle_extra = extra.min(middles);
        extra -= middle_extra;
        let last_extra = u32::from(extra >= 1);
        let first_extra = u32::from(extra >= 2);
        let middle_max = if middles == 0 {
            0
        } else {
            base + u32::from(middle_extra > 0)
        };
        StageLayout {
            first: (base + first_extra).saturating_sub(1),
            middle_max,
            last: (base + last_extra).saturating_sub(1 + mtp_layers),
            even: false,
            chunk_layers: 0,
            given: false,
        }
    }

    /// Interleaved split of a layer count no even layout reaches: the pp·vpp model chunks take
    /// c = ⌈layers / (pp·vpp)⌉ layers each in depth order and the last chunk (on the last stage,
    /// with the loss) the remainder. This is the layout Megatron-Bridge gives DeepSeek-V3's 61
    /// layers (`set_deepseek_v3_pipeline_model_parallel_layout`: pp 4 × vp 4 is embedding + 4, 14
    /// chunks of 4, then 1 + MTP + loss). Stage 0 and the middle stages hold c·vpp layers, the last
    /// c·(vpp − 1) + remainder. None when the remainder would be empty.
    pub(super) fn filled_chunks(layers: u32, pp: u32, vpp: u32) -> Option<StageLayout> {
        let chunks = pp.checked_mul(vpp)?;
        let per_chunk = layers.div_ceil(chunks);
        let remainder = layers.checked_sub(per_chunk * (chunks - 1))?;
        if remainder == 0 || pp < 2 || vpp < 2 {
            return None;
        }
        Some(StageLayout {
            first: per_chunk * vpp,
            middle_max: if pp > 2 { per_chunk * vpp } else { 0 },
            last: per_chunk * (vpp - 1) + remainder,
            even: false,
            chunk_layers: per_chunk,
            given: false,
        })
    }

    /// The split the user gave: `first` and `last` layers on the end stages, the rest spread
    /// evenly over the middle ones (Megatron-LM's `--decoder-first/last-pipeline-num-layers`,
    /// which requires the middle stages to split evenly). None when it does not add up.
    pub(super) fn given(layers: u32, pp: u32, first: u32, last: u32) -> Option<StageLayout> {
        let rest = layers.checked_sub(first.checked_add(last)?)?;
        let middle_max = match pp {
            2 if rest == 0 => 0,
            p if p > 2 && rest.is_multiple_of(p - 2) && rest / (p - 2) > 0 => rest / (p - 2),
            _ => return None,
        };
        if first == 0 || last == 0 {
            return None;
        }
        Some(StageLayout {
            first,
            middle_max,
            last,
            even: (pp > 2 && first == middle_max && last == middle_max)
                || (pp == 2 && first == last),
            chunk_layers: 0,
            given: true,
        })
    }

    pub fn max_layers(&self) -> u32 {
        self.first.max(self.middle_max).max(self.last)
    }

    /// Whether an even split's stages hold layers that their `vpp` model chunks do not divide
    /// (80 layers on pp 4 x vpp 3: 20 per stage in chunks of 7, 7 and 6). Megatron-Core builds
    /// such chunks only from a `--pipeline-model-parallel-layout` (without one,
    /// `get_num_layers_to_build` asserts "num_layers_per_pipeline_rank should be divisible by
    /// vp_size"); tpsim gives the earliest `per_stage % vpp` virtual stages the extra layer
    /// (`cost::pipeline::ChunkLayout`) and writes that layout.
    pub fn balanced_chunks(&self, layers: u32, pp: u32, vpp: u32) -> bool {
        self.even && pp > 1 && vpp > 1 && !(layers / pp).is_multiple_of(vpp)
    }

    /// Whether the first and last stage hold their own layer counts and the middle stages share
    /// the rest, one model chunk per stage: a split given as first/last counts, or tpsim's own
    /// uneven split (`balanced_units`), which a launch line writes the same way. The plan tables
    /// show these in their `layers` column and `plan`'s explanation in a "layers per stage" line.
    pub fn is_first_last(&self, pp: u32, vpp: u32) -> bool {
        self.given || (pp >= 2 && vpp == 1 && !self.even && self.chunk_layers == 0)
    }

    /// Whether some stage of `pp` would hold no transformer layer: the first or the last (counting
    /// the embedding and the output layer as layers can leave them only those), or a middle one
    /// (the middle stages share what the end stages leave, `cost::simulated::layers_per_stage`).
    /// Megatron-Core builds such a stage, but no launch line tpsim writes places it, and a stage
    /// of nothing but the embedding is a pipeline one stage shorter.
    pub fn leaves_a_stage_empty(&self, layers: u32, pp: u32) -> bool {
        if self.even || pp < 2 {
            return false;
        }
        let middles = pp - 2;
        let rest = layers.saturating_sub(self.first + self.last);
        self.first == 0 || self.last == 0 || (self.chunk_layers == 0 && rest < middles)
    }
}

/// An interleaved uneven split with the embedding and the loss counted as a layer each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnitChunks {
    /// Units per model chunk (every chunk but the last).
    pub per_chunk: u32,
    /// Units of the last chunk: `per_chunk` when the units split evenly, fewer when the chunks
    /// are filled front to back and the last takes the rest.
    pub last_chunk_units: u32,
    /// Whether the MTP layers count as units of the last chunk (else they ride on top of it).
    pub mtp_counted: bool,
}

impl UnitChunks {
    /// Transformer layers of the last chunk (beside its MTP layers and the loss).
    pub fn last_chunk_layers(&self, mtp_layers: u32) -> u32 {
        if self.mtp_counted {
            self.last_chunk_units - 1 - mtp_layers
        } else {
            self.last_chunk_units - 1
        }
    }

    /// The stage layout these chunks give on `pp` stages of `vpp` chunks each: the first stage
    /// holds the embedding's unit, the last the last chunk.
    pub(super) fn stages(&self, layers: u32, pp: u32, vpp: u32, mtp_layers: u32) -> StageLayout {
        let first = self.per_chunk * vpp - 1;
        let last = self.per_chunk * (vpp - 1) + self.last_chunk_layers(mtp_layers);
        let middle_max = if pp > 2 { self.per_chunk * vpp } else { 0 };
        debug_assert_eq!(first + last + middle_max * pp.saturating_sub(2), layers);
        StageLayout {
            first,
            middle_max,
            last,
            even: false,
            chunk_layers: 0,
            given: false,
        }
    }
}

/// Units per model chunk when an uneven split interleaves with the embedding and the loss counted
/// as a layer each: the units split evenly into pp x vpp chunks, the first chunk holding the
/// embedding and one layer fewer, the last the loss and one layer fewer. Megatron-Core's
/// `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`; with MTP
/// layers counted as units too where they split so, as in the layout Megatron-Bridge gives
/// DeepSeek-V3 on H100 at pp 8 x vp 4, 'Et|(tt|)*30mL' (61 layers + E + m + L = 64 units in 32
/// chunks of 2; `perf_recipes/deepseek/h100/deepseek_v3.py`), else with the MTP layers on top of
/// the last chunk ('Et|(tt|)*14tmL' for 30 layers + MTP on 16 chunks). Where neither splits
/// evenly, the units fill the chunks front to back and the last chunk takes the rest, down to the
/// loss alone: DeepSeek-V3 without MTP at pp 8 x vp 4 is 'Et|(tt|)*30L' (63 units: 31 chunks of
/// 2, then the loss), the layout of Megatron-Core's DeepSeek-V3 GB200 guide ("the last stage is
/// Loss") and of Megatron-Bridge's Kimi-K2 and DeepSeek-V3 performance configs. None when the
/// last chunk cannot hold its MTP layers and the loss, or a chunk would hold no layer.
pub(crate) fn unit_chunks(model: &Model, pp: u32, vpp: u32) -> Option<UnitChunks> {
    let chunks = pp.checked_mul(vpp).filter(|&c| c > 0)?;
    let counted = model.layers + 2 + model.mtp_layers;
    if model.mtp_layers > 0 && counted.is_multiple_of(chunks) && counted / chunks > model.mtp_layers
    {
        return Some(UnitChunks {
            per_chunk: counted / chunks,
            last_chunk_units: counted / chunks,
            mtp_counted: true,
        });
    }
    let units = model.layers + 2;
    if units.is_multiple_of(chunks) {
        return Some(UnitChunks {
            per_chunk: units / chunks,
            last_chunk_units: units / chunks,
            mtp_counted: false,
        });
    }
    if vpp < 2 || pp < 2 {
        return None;
    }
    let per_chunk = counted.div_ceil(chunks);
    let last_chunk_units = counted.checked_sub(per_chunk * (chunks - 1))?;
    (per_chunk >= 2 && last_chunk_units > model.mtp_layers).then_some(UnitChunks {
        per_chunk,
        last_chunk_units,
        mtp_counted: true,
    })
}

/// First/last stage splits worth trying for `layers` on `pp` stages without interleaving: the
/// middle stages hold c − 1 or c layers each (c = ⌈layers/pp⌉), or c + 1 with MTP layers, whose
/// weight can call for a much lighter last stage; the first stage (with the light embedding) at
/// most one more than a middle stage, the last (with the output layer) at most as many, all adding
/// up to `layers`. Empty for fewer than two stages.
pub fn first_last_splits(layers: u32, pp: u32, mtp_layers: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    if pp < 2 {
        return out;
    }
    let c = layers.div_ceil(pp);
    let middles = pp - 2;
    let widest = if mtp_layers > 0 { c + 1 } else { c };
    let middle_choices = if middles == 0 {
        c..=c
    } else {
        c.saturating_sub(1).max(1)..=widest
    };
    for middle in middle_choices {
        let Some(ends) = layers.checked_sub(middle * middles) else {
            continue;
        };
        for first in 1..=(middle + 1).min(ends.saturating_sub(1)) {
            let last = ends - first;
            if (1..=middle).contains(&last) {
                out.push((first, last));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_v3_interleaved_layouts_match_megatron_bridge() {
        // Megatron-Bridge `set_deepseek_v3_pipeline_model_parallel_layout`, 61 layers: pp 4 x vp 4
        // is embedding + 4, 14 chunks of 4, then 1 + loss; pp 8 x vp 2 the same 16 chunks.
        for (pp, vpp) in [(4, 4), (8, 2)] {
            let layout = StageLayout::filled_chunks(61, pp, vpp).unwrap();
            assert_eq!(layout.chunk_layers, 4);
            assert_eq!(layout.first, 4 * vpp);
            assert_eq!(layout.last, 4 * (vpp - 1) + 1);
            let middles = pp - 2;
            assert_eq!(layout.first + middles * layout.middle_max + layout.last, 61);
        }
        // pp 2 x vp 4: 8 chunks of 8, the last 5 (rank 0: 32 layers, rank 1: 29).
        let two = StageLayout::filled_chunks(61, 2, 4).unwrap();
        assert_eq!((two.first, two.last, two.chunk_layers), (32, 29, 8));
        // 32 chunks of 2 would need 62 layers: no such layout.
        assert_eq!(StageLayout::filled_chunks(61, 8, 4), None);
    }

    #[test]
    fn bloom_split_matches_deepspeed_partition() {
        // BLOOM tr11: rank 0 embed + 5 blocks, ranks 1-10 six blocks, rank 11 five blocks + embed.
        let layout = StageLayout::balanced_units(70, 12, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (5, 6, 5));
    }

    #[test]
    fn llama3_405b_split_matches_paper() {
        // Dubey et al. 2024 §3.3.2: 126 layers on 16 stages, one fewer on the first and last stage.
        let layout = StageLayout::balanced_units(126, 16, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (7, 8, 7));
        assert_eq!(layout.first + 14 * layout.middle_max + layout.last, 126);
    }

    #[test]
    fn remainder_goes_to_middle_stages() {
        // 10 layers + 2 = 12 units over 5 stages: base 2, remainder 2 on middles.
        // The first/last splits the search tries add up and keep the middle stages even.
        let splits = first_last_splits(61, 16, 0);
        assert!(
            splits.contains(&(4, 1)) && splits.contains(&(3, 2)),
            "{splits:?}"
        );
        for (first, last) in splits {
            let rest = 61 - first - last;
            assert_eq!(rest % 14, 0, "({first}, {last})");
            assert!(first <= rest / 14 + 1 && last <= rest / 14);
        }
        assert_eq!(first_last_splits(7, 2, 0), vec![(3, 4), (4, 3), (5, 2)]);
        assert!(first_last_splits(10, 1, 0).is_empty());
        // DeepSeek-V3 with its MTP layer on 16 stages: the MTP layer counts on the last stage.
        let mtp = StageLayout::balanced_units(61, 16, 1);
        assert_eq!((mtp.first, mtp.middle_max, mtp.last), (3, 4, 2));
        assert_eq!(mtp.first + 14 * mtp.middle_max + mtp.last, 61);
        let layout = StageLayout::balanced_units(10, 5, 0);
        assert_eq!((layout.first, layout.middle_max, layout.last), (1, 3, 1));
    }
}
