//! A realistic transformer shape from a bare parameter count (`--params 512B`).
//!
//! The rule, fitted to published dense models: GPT-style blocks (multi-head attention, 4h GeLU MLP,
//! biases, layernorm, tied 51,200-token vocabulary as in Megatron-LM's GPT), head dimension 128,
//! hidden a multiple of 1024, layers preferably a multiple of 8 (so common pipeline degrees split
//! evenly), and the hidden/layers aspect ratio closest to 143 — the geometric mean of GPT-3 175B (12288/96 = 128),
//! MT-NLG 530B (20480/105 = 195), Megatron 1T (25600/128 = 200), Llama-3 8B (4096/32 = 128),
//! 70B (8192/80 = 102) and 405B (16384/126 = 130). Among shapes within 2% of the requested count
//! the one with the smallest score wins: |ln(aspect / 143)| plus a penalty when the layer count is
//! not a multiple of 8 (0.5 for a multiple of 4, 0.75 of 2, 1 otherwise); ties go to the smaller
//! count error. Small models need the finer layer counts to land within 2%.

use crate::model::{Model, Norm};

/// Published hidden/layers ratios the rule is fitted to (see the module comment).
const PUBLISHED_ASPECT_RATIOS: [f64; 6] = [128.0, 195.0, 200.0, 128.0, 102.4, 130.0];
pub const HEAD_DIM: u32 = 128;
pub const HIDDEN_MULTIPLE: u32 = 1024;
pub const LAYER_MULTIPLE: u32 = 8;
pub const DERIVED_VOCAB: u32 = 51200;
pub const MAX_RELATIVE_ERROR: f64 = 0.02;

/// Target aspect ratio: geometric mean of the published ratios.
pub fn target_aspect_ratio() -> f64 {
    let log_sum: f64 = PUBLISHED_ASPECT_RATIOS.iter().map(|r| r.ln()).sum();
    (log_sum / PUBLISHED_ASPECT_RATIOS.len() as f64).exp()
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}; {}give the shape instead (--layers --hidden --heads)", self.rule(), if self.too_long.is_some() { "or " } else { "" })]
pub struct ShapeError {
    pub requested: f64,
    /// Set when the sequence length is what leaves no shape: the derived shape learns one
    /// position embedding per token, and at this length that table outweighs the count (a shape
    /// exists at the default 2048 tokens).
    pub too_long: Option<TooLongSequence>,
}

/// A sequence too long for a derived shape of the count, and the longest that has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TooLongSequence {
    pub seq_len: u32,
    /// The longest multiple of 1024 tokens (at least 2048) with a shape of the count; every
    /// multiple of 1024 from 2048 up to it has one.
    pub longest: u32,
}

impl ShapeError {
    /// What has no shape, and why, with the fix for a `--seq-len` too long (other fixes depend on
    /// where the count came from: `--params` takes shape flags instead, `sweep --axis params` only
    /// a larger size).
    pub fn rule(&self) -> String {
        self.rule_with(|longest| {
            format!("give a shorter --seq-len, at most {longest} (e.g. --seq-len 2048)")
        })
    }

    /// [`Self::rule`] with the fix for a too-long sequence said by `fix`, given the longest
    /// sequence with a shape: a plan file's `seq_len:` key, or a sweep's `--values` point.
    pub fn rule_with(&self, fix: impl FnOnce(u32) -> String) -> String {
        if let Some(too_long) = self.too_long {
            let table = gpt_shape(1, HIDDEN_MULTIPLE, too_long.seq_len).position_embedding_params();
            return format!(
                "no GPT-style shape of {} parameters fits a sequence of {} tokens: the derived shape learns one position embedding per token, and that table alone holds {} parameters at the smallest hidden size ({HIDDEN_MULTIPLE}); {}",
                quoted_count(self.requested),
                too_long.seq_len,
                quoted_count(table),
                fix(too_long.longest)
            );
        }
        format!(
            "no GPT-style shape of {} parameters with hidden a multiple of 1024 and head dimension 128 lands within 2% of it (below ~1B parameters the steps are too coarse)",
            quoted_count(self.requested)
        )
    }
}

/// A count as counts are quoted, to three decimals of its unit (1.5M, 300M, 7B); below a million,
/// as typed (7, 0.5).
fn quoted_count(value: f64) -> String {
    for (unit, scale) in [("T", 1e12), ("B", 1e9), ("M", 1e6)] {
        if value >= scale {
            let digits = format!("{:.3}", value / scale);
            return format!(
                "{}{unit}",
                digits.trim_end_matches('0').trim_end_matches('.')
            );
        }
    }
    crate::units::show_number(value)
}

fn gpt_shape(layers: u32, hidden: u32, seq_len: u32) -> Model {
    Model {
        rotary_base: None,
        name: String::new(),
        layers,
        hidden,
        heads: hidden / HEAD_DIM,
        kv_heads: hidden / HEAD_DIM,
        head_dim: HEAD_DIM,
        ffn_hidden: 4 * hidden,
        vocab: DERIVED_VOCAB,
        seq_len,
        gated_mlp: false,
        linear_bias: true,
        qkv_bias: false,
        qk_norm: false,
        shared_layer_norm: false,
        tied_embeddings: true,
        position_embedding: crate::model::PositionEmbedding::LearnedAbsolute,
        rotary_percent: None,
        norm: Norm::Layernorm,
        dropout: true,
        mla: None,
        moe: None,
        mtp_layers: 0,
        attention_window: None,
        hybrid: None,
    }
}

/// Derives a shape for `params` parameters at sequence length `seq_len`.
pub fn derive_shape(params: f64, seq_len: u32) -> Result<Model, ShapeError> {
    let mut model = best_shape(params, seq_len).ok_or_else(|| ShapeError {
        requested: params,
        too_long: (seq_len > 2048 && best_shape(params, 2048).is_some()).then(|| TooLongSequence {
            seq_len,
            longest: longest_seq_len(params, seq_len),
        }),
    })?;
    model.name = format!(
        "derived-{}",
        crate::units::format_count(params).to_lowercase()
    );
    Ok(model)
}

/// The longest multiple of 1024 tokens below `too_long` at which `params` has a shape, given one
/// at 2048: a bisection, as a longer sequence only grows the position table (and so leaves fewer
/// layers to the count).
fn longest_seq_len(params: f64, too_long: u32) -> u32 {
    let (mut fits, mut fails) = (2u32, too_long.div_ceil(1024));
    while fails - fits > 1 {
        let mid = fits + (fails - fits) / 2;
        if best_shape(params, mid * 1024).is_some() {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    fits * 1024
}

/// The best-scoring shape of `params` parameters at `seq_len` tokens (see the module comment),
/// unnamed; None when no shape lands within 2%.
fn best_shape(params: f64, seq_len: u32) -> Option<Model> {
    let target = target_aspect_ratio().ln();
    let mut best: Option<(f64, f64, Model)> = None;
    for hidden in (1..=128u32).map(|i| i * HIDDEN_MULTIPLE) {
        let probe = gpt_shape(1, hidden, seq_len);
        let fixed = probe.embedding_params() + probe.output_params();
        let per_layer = probe.layer_params();
        let ideal_layers = (params - fixed) / per_layer;
        if ideal_layers < 1.0 {
            continue;
        }
        let floor = ideal_layers.floor() as u32;
        let near = [
            floor.saturating_sub(3),
            floor.saturating_sub(2),
            floor.saturating_sub(1),
            floor,
            floor + 1,
            floor + 2,
            floor + 3,
            floor + 4,
        ];
        for layers in near {
            if layers == 0 {
                continue;
            }
            let penalty = match layers {
                l if l % LAYER_MULTIPLE == 0 => 0.0,
                l if l % 4 == 0 => 0.5,
                l if l % 2 == 0 => 0.75,
                _ => 1.0,
            };
            let model = gpt_shape(layers, hidden, seq_len);
            let error = (model.params() / params - 1.0).abs();
            if error > MAX_RELATIVE_ERROR {
                continue;
            }
            let aspect_distance = (f64::from(hidden) / f64::from(layers)).ln() - target;
            let key = (aspect_distance.abs() + penalty, error);
            if best.as_ref().is_none_or(|(d, e, _)| key < (*d, *e)) {
                best = Some((key.0, key.1, model));
            }
        }
    }
    best.map(|(_, _, model)| model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lands_within_two_percent_across_sizes() {
        for params in [1.3e9, 7e9, 13e9, 70e9, 175e9, 512e9, 1e12, 1.5e12] {
            let m = derive_shape(params, 2048).unwrap();
            let error = (m.params() / params - 1.0).abs();
            assert!(error <= 0.02, "{params}: {error}");
            assert_eq!(m.hidden % 1024, 0);
            assert_eq!(m.head_dim(), 128);
            if params >= 175e9 {
                assert_eq!(m.layers % 8, 0, "{params}: {m:?}");
            }
            let aspect = f64::from(m.hidden) / f64::from(m.layers);
            assert!((50.0..400.0).contains(&aspect), "{params}: aspect {aspect}");
        }
    }

    #[test]
    fn seeds_512b_splits_into_16_stages_and_8_way_tp() {
        let m = derive_shape(512e9, 2048).unwrap();
        assert_eq!(m.layers % 16, 0, "{m:?}");
        assert_eq!(m.heads % 8, 0, "{m:?}");
    }

    /// The longest sequence a too-long error offers has a shape, and so does every multiple of
    /// 1024 below it (the message says "at most"), while the one after it has none.
    #[test]
    fn the_longest_sequence_offered_has_a_shape_and_so_do_shorter_ones() {
        for params in [1.3e9, 2e9, 7e9, 13e9] {
            let err = derive_shape(params, 16_777_216).unwrap_err();
            let longest = err.too_long.unwrap().longest;
            assert!(derive_shape(params, longest + 1024).is_err(), "{params}");
            for seq_len in (2048..=longest).step_by(1024) {
                assert!(
                    derive_shape(params, seq_len).is_ok(),
                    "{params} at {seq_len}"
                );
            }
        }
    }

    #[test]
    fn target_is_geometric_mean() {
        assert!(
            (target_aspect_ratio() - 143.0).abs() < 1.0,
            "{}",
            target_aspect_ratio()
        );
    }
}
