//! Layers that run their GEMMs in bf16 under low-precision training.
//!
//! Megatron-Core keeps the first and last layers of the stack out of the quantization context
//! when asked (`--first-last-layers-bf16` with `--num-layers-at-start-in-bf16 N` and
//! `--num-layers-at-end-in-bf16 M`, both 1 by default; `fp8_utils.get_fp8_context` and
//! `fp4_utils.get_fp4_context` at Megatron-LM d98e8a64: a layer whose 0-based number is below N,
//! or at or past `num_layers − M`, runs under a null context, in bf16). The numbers are global
//! over the pipeline (`TransformerBlock` and `HybridStack` pass `layer_number − 1` with the
//! stage's offset), so the bf16 layers sit on the first and last stages' outer chunks.
//! Megatron-Bridge's recipes use it for NVFP4: Nemotron 3 Super keeps its last 14 of 88 layers in
//! bf16 (`nemotron_3_super_bf16_with_nvfp4_mixed`, `training/mixed_precision.py`), GPT-OSS 20B and
//! Llama 3 8B their last 4.
//!
//! Megatron-Core's MTP layers take only the FP8 context (`multi_token_prediction.py`,
//! `_proj_and_transformer_layer`: "currently ignoring FP4 in MTP layers"), so under NVFP4 a
//! transformer's MTP layer runs in bf16 whatever the flags say: [`mtp_runs_bf16`]. A hybrid
//! stack's MTP block is a `HybridStack` of its own (`pp_layer_offset=0`), whose forward gives each
//! of its layers `get_fp4_context(config, i)` with i from 0: they run at NVFP4 unless the first
//! layers kept in bf16 (or the last, reaching back to layer 0) cover them.

use serde::{Deserialize, Serialize};

use super::TrainingFramework;
use crate::plan::Precision;

/// The transformer layers kept in bf16 at each end of the stack (0 and 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bf16Layers {
    /// The first `at_start` decoder layers.
    pub at_start: u32,
    /// The last `at_end` decoder layers.
    pub at_end: u32,
    /// The MTP block too under NVFP4, whatever the counts: a quantization recipe's doing, not
    /// Megatron-Core's switch (Megatron-Bridge's Nemotron 3 NVFP4 recipe loads `te_quant.cfg`,
    /// whose `mtp_bf16` matcher runs `mtp.*` at its bf16 config).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mtp: bool,
}

impl Bf16Layers {
    pub const NONE: Bf16Layers = Bf16Layers {
        at_start: 0,
        at_end: 0,
        mtp: false,
    };

    pub fn is_none(&self) -> bool {
        self.at_start == 0 && self.at_end == 0 && !self.mtp
    }

    /// The first end (`"start"` or `"end"`) whose count exceeds a stack of `layers`, with it.
    pub fn count_past(&self, layers: u32) -> Option<(&'static str, u32)> {
        [("start", self.at_start), ("end", self.at_end)]
            .into_iter()
            .find(|(_, count)| *count > layers)
    }

    /// The decoder-layer ranges [start, end) in bf16 of a stack of `layers`: the first `at_start`
    /// and the last `at_end` (overlapping where the two cover the stack).
    pub fn ranges(&self, layers: u32) -> [(u32, u32); 2] {
        let start = (0, self.at_start.min(layers));
        let end = (layers.saturating_sub(self.at_end).max(start.1), layers);
        [start, end]
    }

    /// How many of decoder layers [start, end) of a stack of `layers` run in bf16, and where:
    /// the (at most two) sub-ranges of [start, end) they fill.
    pub fn within(&self, layers: u32, start: u32, end: u32) -> [(u32, u32); 2] {
        self.ranges(layers).map(|(a, b)| {
            let (lo, hi) = (a.max(start), b.min(end));
            if lo < hi { (lo, hi) } else { (0, 0) }
        })
    }
}

/// Whether Megatron-Core runs the MTP layers of a stack of `stack_layers` decoder layers (a hybrid
/// stack's where `hybrid`) in bf16 at `precision` with `layers` kept in bf16: under NVFP4, whose
/// context it does not give a transformer's MTP layer; a hybrid stack's MTP block (an attention
/// and an MLP layer, numbered 0 and 1 in its own `HybridStack`) only where `layers` keeps both
/// (module docs), or where a quantization recipe keeps the block (`Bf16Layers::mtp`). Other
/// frameworks in tpsim build no MTP layers.
pub fn mtp_runs_bf16(
    stack_layers: u32,
    hybrid: bool,
    layers: Bf16Layers,
    framework: TrainingFramework,
    precision: Precision,
) -> bool {
    if framework != TrainingFramework::MegatronCore || precision != Precision::Nvfp4 {
        return false;
    }
    if !hybrid || layers.mtp {
        return true;
    }
    const MTP_BLOCK_LAYERS: u32 = 2;
    let kept: u32 = layers
        .within(stack_layers, 0, MTP_BLOCK_LAYERS)
        .iter()
        .map(|(a, b)| b - a)
        .sum();
    kept >= MTP_BLOCK_LAYERS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_are_the_ends_of_the_stack_and_clip_to_a_slice() {
        let bf16 = Bf16Layers {
            at_start: 2,
            at_end: 14,
            mtp: false,
        };
        assert_eq!(bf16.ranges(88), [(0, 2), (74, 88)]);
        // A stage holding layers 44..88 has the last 14; one holding 0..44 the first 2.
        assert_eq!(bf16.within(88, 44, 88), [(0, 0), (74, 88)]);
        assert_eq!(bf16.within(88, 0, 44), [(0, 2), (0, 0)]);
        assert_eq!(bf16.within(88, 10, 70), [(0, 0), (0, 0)]);
        // Covering the whole stack counts no layer twice.
        let all = Bf16Layers {
            at_start: 5,
            at_end: 8,
            mtp: false,
        };
        assert_eq!(all.ranges(6), [(0, 5), (5, 6)]);
    }

    #[test]
    fn only_megatron_core_under_nvfp4_keeps_mtp_in_bf16() {
        let none = Bf16Layers::NONE;
        let mc = TrainingFramework::MegatronCore;
        assert!(mtp_runs_bf16(61, false, none, mc, Precision::Nvfp4));
        assert!(!mtp_runs_bf16(61, false, none, mc, Precision::Mxfp8));
        assert!(!mtp_runs_bf16(
            61,
            false,
            none,
            TrainingFramework::Torchtitan,
            Precision::Nvfp4
        ));
        // A hybrid stack's MTP block takes the FP4 context layer by layer, numbered from 0.
        let keep = |at_start, at_end| Bf16Layers {
            at_start,
            at_end,
            mtp: false,
        };
        let sup = |kept| mtp_runs_bf16(88, true, kept, mc, Precision::Nvfp4);
        assert!(!sup(none));
        assert!(!sup(keep(0, 14)));
        assert!(!sup(keep(1, 14)));
        assert!(sup(keep(2, 0)));
        assert!(sup(keep(0, 88)));
        // Megatron-Bridge's NVFP4 recipe keeps it by its quantization recipe.
        assert!(sup(Bf16Layers {
            mtp: true,
            ..keep(0, 14)
        }));
    }
}
