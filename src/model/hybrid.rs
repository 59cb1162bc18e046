//! Hybrid Mamba-Transformer stacks (Nemotron-H, Nemotron 3): Megatron-Core's `MambaStack`
//! (`megatron/core/ssm/mamba_block.py`), whose `--hybrid-override-pattern` gives every layer one
//! block — a Mamba-2 mixer (`M`), attention (`*`), a dense MLP (`-`) or an MoE MLP (`E`)
//! (`megatron/core/models/hybrid/hybrid_layer_allocation.py` `Symbols`) — each behind its own
//! pre-norm and residual. tpsim's "layer" of such a model is one symbol, so the per-layer counts
//! of params, FLOPs, time and memory are averages over the pattern's symbols.

use serde::{Deserialize, Serialize};

use super::Model;

/// The hybrid stack: its layer pattern and the Mamba-2 mixer's shape, in Megatron-Core's terms
/// (`TransformerConfig.mamba_*`, `MambaMixer.__init__` in `megatron/core/ssm/mamba_mixer.py`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hybrid {
    /// One symbol per layer (`--hybrid-override-pattern`; HF `hybrid_override_pattern`): `M`
    /// Mamba-2, `*` attention, `-` MLP, `E` MoE.
    pub pattern: String,
    /// Mamba heads (`--mamba-num-heads`; HF `mamba_num_heads`); the mixer's inner width is heads ×
    /// head_dim.
    pub mamba_heads: u32,
    /// Width of one Mamba head (`--mamba-head-dim`; HF `mamba_head_dim`).
    pub mamba_head_dim: u32,
    /// SSM state width (`--mamba-state-dim`; HF `ssm_state_size`).
    pub mamba_state_dim: u32,
    /// B/C groups (`--mamba-num-groups`; HF `n_groups`).
    pub mamba_groups: u32,
    /// Width of the depthwise causal convolution (`MambaMixer` `d_conv`, 4; HF `conv_kernel`).
    #[serde(default = "default_conv_kernel")]
    pub mamba_conv_kernel: u32,
    /// Every multi-token-prediction depth runs one MTP layer's weights (Megatron-Core
    /// `mtp_use_repeated_layer`; Megatron-Bridge's Nemotron 3 Super and Ultra recipes train one
    /// MTP block at depth 2 this way): the depths cost compute each, parameters once.
    #[serde(default, skip_serializing_if = "is_false")]
    pub mtp_shared_weights: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn default_conv_kernel() -> u32 {
    4
}

/// The block one symbol of the pattern stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Mamba,
    Attention,
    Mlp,
    Moe,
}

impl Block {
    /// The block of a pattern symbol, or None for a symbol tpsim does not price.
    pub fn of(symbol: char) -> Option<Block> {
        match symbol {
            'M' => Some(Block::Mamba),
            '*' => Some(Block::Attention),
            '-' => Some(Block::Mlp),
            'E' => Some(Block::Moe),
            _ => None,
        }
    }
}

/// How many layers of each block a pattern (or a slice of it) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct BlockCounts {
    pub mamba: u32,
    pub attention: u32,
    pub mlp: u32,
    pub moe: u32,
}

impl BlockCounts {
    pub fn of(pattern: &str) -> BlockCounts {
        let mut counts = BlockCounts::default();
        for block in pattern.chars().filter_map(Block::of) {
            match block {
                Block::Mamba => counts.mamba += 1,
                Block::Attention => counts.attention += 1,
                Block::Mlp => counts.mlp += 1,
                Block::Moe => counts.moe += 1,
            }
        }
        counts
    }

    pub fn layers(&self) -> u32 {
        self.mamba + self.attention + self.mlp + self.moe
    }

    /// The counts of two runs of layers together.
    pub fn plus(self, other: BlockCounts) -> BlockCounts {
        BlockCounts {
            mamba: self.mamba + other.mamba,
            attention: self.attention + other.attention,
            mlp: self.mlp + other.mlp,
            moe: self.moe + other.moe,
        }
    }
}

/// A run of a hybrid stack's layers (one pipeline stage's): the pattern's blocks in it and the MTP
/// depths that follow it (the last stage's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HybridRun {
    pub counts: BlockCounts,
    pub mtp_depths: u32,
}

impl HybridRun {
    /// Its layers, the MTP depths included.
    pub fn layers(&self) -> u32 {
        self.counts.layers() + self.mtp_depths
    }
}

/// What an average layer holds of each block: for a transformer layer one attention and one MLP
/// (dense or MoE), no Mamba; for a hybrid stack each block's share of the symbols.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockShares {
    pub attention: f64,
    /// MLPs of either kind (dense and MoE) per layer.
    pub mlp: f64,
    pub mamba: f64,
    /// Pre-norms and residual adds per layer: 2 in a transformer layer, 1 per hybrid symbol.
    pub norms: f64,
}

impl BlockShares {
    pub const TRANSFORMER: BlockShares = BlockShares {
        attention: 1.0,
        mlp: 1.0,
        mamba: 0.0,
        norms: 2.0,
    };
}

impl Hybrid {
    pub fn counts(&self) -> BlockCounts {
        BlockCounts::of(&self.pattern)
    }

    /// The mixer's inner width d_inner = heads × head_dim (`MambaMixer`: `self.d_inner =
    /// self.nheads * self.headdim` when `mamba_num_heads` is given).
    pub fn inner_width(&self) -> f64 {
        f64::from(self.mamba_heads) * f64::from(self.mamba_head_dim)
    }

    /// Width of the B and C projections together: 2 × groups × state.
    pub fn bc_width(&self) -> f64 {
        2.0 * f64::from(self.mamba_groups) * f64::from(self.mamba_state_dim)
    }

    /// Output width of `in_proj`: z, x, B, C and dt (`MambaMixer`: `d_inner * 2 + 2 * ngroups *
    /// d_state + nheads`).
    pub fn in_proj_width(&self) -> f64 {
        2.0 * self.inner_width() + self.bc_width() + f64::from(self.mamba_heads)
    }

    /// Channels of the depthwise convolution: x, B and C.
    pub fn conv_channels(&self) -> f64 {
        self.inner_width() + self.bc_width()
    }
}

impl Model {
    /// Whether the model is a hybrid Mamba-Transformer stack.
    pub fn is_hybrid(&self) -> bool {
        self.hybrid.is_some()
    }

    /// Each block's count over the whole stack: a transformer's layers each hold attention and an
    /// MLP (counted once per layer under `attention` and under `mlp`/`moe`).
    pub fn block_counts(&self) -> BlockCounts {
        match &self.hybrid {
            Some(hybrid) => hybrid.counts(),
            None => BlockCounts {
                mamba: 0,
                attention: self.layers,
                mlp: self.layers - self.moe_layers(),
                moe: self.moe_layers(),
            },
        }
    }

    /// What the average layer of the stack the GPUs run holds of each block ([`BlockShares`]):
    /// the pattern's symbols, and on a hybrid stack with multi-token prediction its MTP depths,
    /// each an attention block and an MLP block of the last layer's kind behind two norms
    /// ([`Model::check_hybrid`]), which the cost model counts as layers beside the decoder's
    /// (`pipeline::ChunkLayout::stage_mix_with_mtp`).
    pub fn block_shares(&self) -> BlockShares {
        match &self.hybrid {
            None => BlockShares::TRANSFORMER,
            Some(hybrid) => self.block_shares_of(HybridRun {
                counts: hybrid.counts(),
                mtp_depths: self.mtp_layers,
            }),
        }
    }

    /// The whole hybrid stack as one run (None for a transformer).
    pub fn whole_hybrid_run(&self) -> Option<HybridRun> {
        self.hybrid.as_ref().map(|hybrid| HybridRun {
            counts: hybrid.counts(),
            mtp_depths: self.mtp_layers,
        })
    }

    /// [`Model::block_shares`] of a run of the stack (one pipeline stage's slice of the pattern,
    /// `Model::blocks_between`, and the MTP depths after it on the last stage). A transformer's
    /// layers are [`BlockShares::TRANSFORMER`] wherever they sit.
    pub fn block_shares_of(&self, run: HybridRun) -> BlockShares {
        if !self.is_hybrid() {
            return BlockShares::TRANSFORMER;
        }
        let HybridRun { counts, mtp_depths } = run;
        let depths = f64::from(mtp_depths);
        let symbols = f64::from(counts.layers());
        let layers = (symbols + depths).max(1.0);
        BlockShares {
            attention: (f64::from(counts.attention) + depths) / layers,
            mlp: (f64::from(counts.mlp + counts.moe) + depths) / layers,
            mamba: f64::from(counts.mamba) / layers,
            norms: (symbols + 2.0 * depths) / layers,
        }
    }

    /// The blocks of decoder layers [start, end) of a hybrid stack (the pattern's symbols there);
    /// a transformer's layers each count as an attention block and an MLP block of their kind.
    pub fn blocks_between(&self, start: u32, end: u32) -> BlockCounts {
        let end = end.min(self.layers);
        let start = start.min(end);
        match &self.hybrid {
            Some(hybrid) => BlockCounts::of(&hybrid.pattern[start as usize..end as usize]),
            None => {
                let moe = self.moe_layers_between(start, end);
                BlockCounts {
                    mamba: 0,
                    attention: end - start,
                    mlp: end - start - moe,
                    moe,
                }
            }
        }
    }

    /// Copies of the MTP layer's weights: one when every depth runs the same layer
    /// (`Hybrid::mtp_shared_weights`), else one per depth.
    pub fn mtp_weight_copies(&self) -> u32 {
        match &self.hybrid {
            Some(hybrid) if hybrid.mtp_shared_weights => self.mtp_layers.min(1),
            _ => self.mtp_layers,
        }
    }

    /// Weight-matrix parameters of one Mamba-2 mixer: `in_proj` h × (2·d_inner + 2·G·N + heads)
    /// and `out_proj` d_inner × h (both bias-free in Nemotron-H; biases with `linear_bias`).
    pub fn mamba_matrix_params(&self) -> f64 {
        let Some(hybrid) = &self.hybrid else {
            return 0.0;
        };
        let h = f64::from(self.hidden);
        h * hybrid.in_proj_width() + hybrid.inner_width() * h
    }

    /// All parameters of one Mamba-2 mixer (`MambaMixer`): the two projections (with their biases
    /// under `linear_bias`), the depthwise conv's weights and biases over x, B and C
    /// (`conv1d_weight`, `conv1d_bias`), `dt_bias`, `A_log` and `D` (one per head) and the gated
    /// RMSNorm over d_inner (`norm`). The block's pre-norm is counted with the layer's norms.
    pub fn mamba_params(&self) -> f64 {
        let Some(hybrid) = &self.hybrid else {
            return 0.0;
        };
        let biases = if self.linear_bias {
            hybrid.in_proj_width() + f64::from(self.hidden)
        } else {
            0.0
        };
        let conv = hybrid.conv_channels() * (f64::from(hybrid.mamba_conv_kernel) + 1.0);
        self.mamba_matrix_params()
            + biases
            + conv
            + 3.0 * f64::from(hybrid.mamba_heads)
            + hybrid.inner_width()
    }

    /// Forward FLOPs of one Mamba-2 mixer per token beyond its matrices: the SSD scan as
    /// Megatron-LM counts it, 7 · d_inner · state (`megatron/training/training.py`
    /// `mamba_layer_flops`, "scan"), with the mixer's own inner width where Megatron-LM takes 2h.
    pub fn mamba_scan_flops_per_token(&self) -> f64 {
        self.hybrid.as_ref().map_or(0.0, |hybrid| {
            7.0 * hybrid.inner_width() * f64::from(hybrid.mamba_state_dim)
        })
    }
}

/// The first symbol of `pattern` that is no priced block (nor one of `also`, such as a launch
/// line's '|' cuts), in words: "has the symbol 'x' ..., which tpsim does not price (rule: ...);
/// write the pattern with those symbols only". A model's pattern and a launch line's '|'-cut one
/// are checked with the same words.
pub(crate) fn unpriced_symbol(pattern: &str, also: &[char]) -> Option<String> {
    let symbol = pattern
        .chars()
        .find(|c| Block::of(*c).is_none() && !also.contains(c))?;
    let what = match symbol {
        'G' => " (a gated DeltaNet layer)",
        'D' => " (DeepSeek sparse attention)",
        '+' => " (latent attention)",
        '|' => {
            " (a pipeline-stage boundary: the stages are the plan's, --pp and --vpp, which --emit megatron writes back as '|' segments)"
        }
        '/' => " (multi-token prediction layers: give their depth as --mtp-layers)",
        _ => "",
    };
    Some(format!(
        "has the symbol {symbol:?}{what}, which tpsim does not price (rule: M Mamba-2, * attention, - MLP, E MoE, one per layer); write the pattern with those symbols only"
    ))
}

/// Widest Mamba setting accepted: typo guard, far above Nemotron-H 56B's 256 heads of 64.
pub(crate) const MAX_MAMBA_WIDTH: u32 = 1 << 16;

impl Model {
    /// The hybrid stack's rules (Megatron-Core `MambaMixer.__init__` asserts and
    /// `hybrid_layer_allocation.py`), and what tpsim does not price in it.
    pub(crate) fn check_hybrid(&self) -> Result<(), super::ModelError> {
        let Some(hybrid) = &self.hybrid else {
            return Ok(());
        };
        let fail = |words: String| Err(super::ModelError::Hybrid(words));
        if let Some(words) = unpriced_symbol(&hybrid.pattern, &[]) {
            return fail(format!("hybrid pattern {:?} {words}", hybrid.pattern));
        }
        let counts = hybrid.counts();
        if counts.layers() == 0 {
            return fail(format!(
                "hybrid pattern {:?} is empty (rule: one symbol per layer, as Megatron-Core's --hybrid-override-pattern); write a pattern of {} symbols (M Mamba-2, * attention, - MLP, E MoE)",
                hybrid.pattern, self.layers
            ));
        }
        if counts.layers() != self.layers {
            return fail(format!(
                "hybrid pattern {:?} has {} symbols but the model has {} layers (rule: one symbol per layer, as Megatron-Core's --hybrid-override-pattern); give --layers {} or a pattern of {} symbols",
                hybrid.pattern,
                counts.layers(),
                self.layers,
                counts.layers(),
                self.layers
            ));
        }
        let widths = [
            ("mamba_heads", hybrid.mamba_heads),
            ("mamba_head_dim", hybrid.mamba_head_dim),
            ("mamba_state_dim", hybrid.mamba_state_dim),
            ("mamba_groups", hybrid.mamba_groups),
            ("mamba_conv_kernel", hybrid.mamba_conv_kernel),
        ];
        for (what, value) in widths {
            if value == 0 || value > MAX_MAMBA_WIDTH {
                return fail(format!(
                    "hybrid {what} {value} is out of range (rule: 1 to {MAX_MAMBA_WIDTH}; Nemotron-H 8B: 128 heads of 64, state 128, 8 groups, conv 4); give the model's value"
                ));
            }
        }
        if !hybrid.mamba_heads.is_multiple_of(hybrid.mamba_groups) {
            return fail(format!(
                "hybrid mamba_heads {} is not a multiple of mamba_groups {} (rule: Megatron-Core's MambaMixer asserts nheads % ngroups == 0); give a divisor of {} as the groups",
                hybrid.mamba_heads, hybrid.mamba_groups, hybrid.mamba_heads
            ));
        }
        match (counts.moe > 0, &self.moe) {
            (true, None) => {
                return fail(format!(
                    "hybrid pattern {:?} has {} MoE layers (E) but the model has no experts; give the moe settings (--num-experts, --moe-router-topk, --moe-ffn-hidden-size) or write - for dense MLPs",
                    hybrid.pattern, counts.moe
                ));
            }
            (false, Some(_)) => {
                return fail(format!(
                    "the model has experts but its hybrid pattern {:?} has no MoE layer (E) (rule: a hybrid stack's MoE layers are its pattern's E symbols); put E where the MoE layers are, or drop the expert settings (--num-experts and the other MoE flags, or the model file's moe: section)",
                    hybrid.pattern
                ));
            }
            (true, Some(moe)) if moe.layer_freq != 1 || moe.first_dense_layers != 0 => {
                // Only the settings given are named: "--moe-layer-freq 2 / first dense layers 0"
                // named a default the user never wrote, and "drop them" one of them.
                let given: Vec<String> = [
                    (moe.layer_freq != 1).then(|| format!("--moe-layer-freq {}", moe.layer_freq)),
                    (moe.first_dense_layers != 0).then(|| {
                        format!(
                            "{} dense first layers (--moe-first-k-dense-replace, or a [0]*K --moe-layer-freq list)",
                            moe.first_dense_layers
                        )
                    }),
                ]
                .into_iter()
                .flatten()
                .collect();
                return fail(format!(
                    "{} with a hybrid pattern: the pattern's E symbols place the MoE layers (rule: Megatron-Core's hybrid stack ignores the MoE layer frequency); drop {}, and write - for the dense layers in the pattern",
                    given.join(" and "),
                    if given.len() == 1 { "it" } else { "them" }
                ));
            }
            _ => {}
        }
        // An MTP depth is priced as an attention block and an MLP block of the last layer's kind
        // (`Model::block_shares`): Megatron-Core builds it from `mtp_hybrid_override_pattern`
        // (`*E` in NVIDIA's Nemotron 3 configs), so a stack ending in a Mamba or attention layer
        // would need a pattern tpsim does not take.
        if self.mtp_layers > 0 && !matches!(hybrid.pattern.chars().last(), Some('E' | '-')) {
            return fail(format!(
                "a hybrid stack whose pattern {:?} ends in a Mamba or attention layer with {} multi-token prediction depth(s) is not priced (rule: tpsim prices an MTP depth as an attention block and an MLP block of the last layer's kind, '*E' or '*-', as NVIDIA's Nemotron 3 configs build it); drop --mtp-layers",
                hybrid.pattern, self.mtp_layers
            ));
        }
        // The window is named by its flag and value (a model file's key, in its words, through
        // `model_file_words`), so the user sees which setting to drop.
        if let Some(window) = self.attention_window {
            return fail(format!(
                "a hybrid Mamba-Transformer stack with a sliding attention window (--attention-window {}) is not priced by tpsim (rule: its hybrid layers are Mamba-2, grouped-query attention, MLP and MoE blocks, each behind its own norm, with full attention); drop --attention-window",
                window.tokens
            ));
        }
        let unpriced = [
            (self.mla.is_some(), "latent attention (MLA)"),
            (self.shared_layer_norm, "a norm shared by attention and MLP"),
        ];
        if let Some((_, what)) = unpriced.iter().find(|(given, _)| *given) {
            return fail(format!(
                "a hybrid Mamba-Transformer stack with {what} is not priced by tpsim (rule: its hybrid layers are Mamba-2, grouped-query attention, MLP and MoE blocks, each behind its own norm); drop it"
            ));
        }
        Ok(())
    }
}
