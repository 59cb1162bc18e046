//! Shape values from the command line over a model from any source (`--model grok-1 --layers 8`),
//! and Megatron-LM's `--moe-layer-freq` syntax.

use super::{AttentionWindow, MAX_LAYERS, Mla, Model, ModelError, Moe};

/// Shape values given on the command line over a model from any source (`--model grok-1
/// --layers 8`), in Megatron-LM's names. `None` keeps the model's value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShapeOverrides {
    pub layers: Option<u32>,
    pub hidden: Option<u32>,
    pub heads: Option<u32>,
    pub kv_heads: Option<u32>,
    pub head_dim: Option<u32>,
    pub ffn_hidden: Option<u32>,
    pub vocab: Option<u32>,
    pub num_experts: Option<u32>,
    pub moe_router_topk: Option<u32>,
    pub moe_ffn_hidden: Option<u32>,
    pub moe_shared_expert_ffn_hidden: Option<u32>,
    pub moe_layer_freq: Option<u32>,
    pub moe_first_dense_layers: Option<u32>,
    pub moe_router_groups: Option<u32>,
    pub moe_router_group_topk: Option<u32>,
    pub q_lora_rank: Option<u32>,
    pub kv_lora_rank: Option<u32>,
    pub qk_head_dim: Option<u32>,
    pub qk_pos_emb_head_dim: Option<u32>,
    pub v_head_dim: Option<u32>,
    pub mtp_layers: Option<u32>,
    /// Sliding-window tokens (0 = none: full attention).
    pub attention_window: Option<u32>,
    /// Every N-th layer keeps full attention under a window (0 = none does).
    pub window_attn_skip_freq: Option<u32>,
}

/// Megatron-LM's `--moe-layer-freq` value: an integer N (every N-th layer is MoE), or a Python list
/// expression such as `[0]*3+[1]*58` (`moe_freq_type` in arguments.py). tpsim represents patterns
/// made of K dense layers followed by every-N-th MoE layers; returns (K, N, the list's length when a
/// list was given: Megatron requires it to equal the layer count).
pub fn parse_moe_layer_freq(text: &str) -> Result<(u32, u32, Option<u32>), String> {
    let trimmed = text.trim().trim_matches(|c| c == '"' || c == '\'');
    if let Ok(n) = trimmed.parse::<u32>() {
        if n == 0 {
            return Err(format!(
                "--moe-layer-freq {text}: 0 would make no layer an MoE layer; use 1 for every layer"
            ));
        }
        return Ok((0, n, None));
    }
    let fail = || {
        format!(
            "--moe-layer-freq {text:?} is not an integer nor a list tpsim can represent; give N (every N-th layer is MoE) or \"[0]*K+[1]*M\" (K dense layers, then MoE), optionally with --moe-first-k-dense-replace K"
        )
    };
    let mut pattern: Vec<bool> = Vec::new();
    let body = trimmed
        .strip_prefix('(')
        .and_then(|b| b.strip_suffix(')'))
        .unwrap_or(trimmed);
    for term in body.split('+') {
        let term = term.trim();
        let (list, times) = match term.rsplit_once('*') {
            Some((list, times)) => (
                list.trim(),
                times.trim().parse::<usize>().map_err(|_| fail())?,
            ),
            None => (term, 1),
        };
        let inner = list
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .ok_or_else(fail)?;
        let items: Vec<bool> = inner
            .split(',')
            .map(crate::units::list_item)
            .filter(|s| !s.is_empty())
            .map(|s| match s {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(fail()),
            })
            .collect::<Result<_, _>>()?;
        if times > MAX_LAYERS as usize || pattern.len() + items.len() * times > MAX_LAYERS as usize
        {
            return Err(fail());
        }
        for _ in 0..times {
            pattern.extend_from_slice(&items);
        }
    }
    if pattern.is_empty() {
        return Err(fail());
    }
    let first_dense = pattern.iter().take_while(|moe| !**moe).count();
    let rest = &pattern[first_dense..];
    if rest.is_empty() {
        // Every entry 0: the list is readable, but it makes the MoE model dense.
        let layers = pattern.len();
        let first_dense = if layers > 1 {
            format!(" or \"[0]*1+[1]*{}\" (the first dense)", layers - 1)
        } else {
            String::new()
        };
        return Err(format!(
            "--moe-layer-freq {text:?} leaves no MoE layer: all {layers} entries are 0 (dense); mark the MoE layers with 1, e.g. \"[1]*{layers}\" (every layer){first_dense}, or drop --num-experts for a dense model"
        ));
    }
    // The smallest N for which the rest is "MoE every N-th layer".
    let freq = (1..=rest.len())
        .find(|n| rest.iter().enumerate().all(|(i, moe)| *moe == (i % n == 0)))
        .ok_or_else(fail)?;
    Ok((first_dense as u32, freq as u32, Some(pattern.len() as u32)))
}

impl Model {
    /// This model with the command line's shape values in place of its own, checked again. The
    /// head dimension follows hidden/heads when the model had it so, and is kept when the model sets
    /// it apart (Qwen3); KV heads follow the heads for multi-head attention. `--num-experts` on a
    /// dense model makes it an MoE model with Megatron-LM's defaults (arguments.py: top-k 2, expert
    /// width `--ffn-hidden-size`); `--kv-lora-rank` on a model without MLA adds it with
    /// arguments.py's defaults (no query bottleneck, qk 128, rope 64, v 128).
    pub fn with_overrides(&self, o: &ShapeOverrides) -> Result<Model, ModelError> {
        let mut m = self.clone();
        let implicit_head_dim = self.heads > 0
            && self.hidden.is_multiple_of(self.heads)
            && self.head_dim == self.hidden / self.heads;
        m.layers = o.layers.unwrap_or(m.layers);
        m.hidden = o.hidden.unwrap_or(m.hidden);
        if let Some(heads) = o.heads {
            if self.kv_heads == self.heads {
                m.kv_heads = heads;
            }
            m.heads = heads;
        }
        m.kv_heads = o.kv_heads.unwrap_or(m.kv_heads);
        m.head_dim = match o.head_dim {
            Some(d) => d,
            None if implicit_head_dim => m.hidden.checked_div(m.heads).unwrap_or(0),
            None => m.head_dim,
        };
        m.ffn_hidden = o.ffn_hidden.unwrap_or(m.ffn_hidden);
        m.vocab = o.vocab.unwrap_or(m.vocab);
        m.mtp_layers = o.mtp_layers.unwrap_or(m.mtp_layers);
        m.attention_window = match (o.attention_window, o.window_attn_skip_freq) {
            (Some(0), None) => None,
            (Some(0), Some(_)) => return Err(ModelError::WindowFlagWithoutWindow),
            (Some(tokens), freq) => Some(AttentionWindow {
                tokens,
                full_every: freq
                    .or(m.attention_window.map(|w| w.full_every))
                    .unwrap_or(0),
            }),
            (None, Some(full_every)) => match m.attention_window {
                Some(w) => Some(AttentionWindow { full_every, ..w }),
                None => return Err(ModelError::WindowFlagWithoutWindow),
            },
            (None, None) => m.attention_window,
        };

        let moe_flags = [
            ("--moe-router-topk", o.moe_router_topk),
            ("--moe-ffn-hidden-size", o.moe_ffn_hidden),
            (
                "--moe-shared-expert-intermediate-size",
                o.moe_shared_expert_ffn_hidden,
            ),
            ("--moe-layer-freq", o.moe_layer_freq),
            ("--moe-first-k-dense-replace", o.moe_first_dense_layers),
            ("--moe-router-num-groups", o.moe_router_groups),
            ("--moe-router-group-topk", o.moe_router_group_topk),
        ];
        let had_experts = m.moe.is_some();
        m.moe = match (m.moe, o.num_experts) {
            (Some(moe), experts) => Some(Moe {
                experts: experts.unwrap_or(moe.experts),
                ..moe
            }),
            (None, Some(experts)) => Some(Moe {
                experts,
                // Megatron-LM arguments.py: --moe-router-topk default 2; --moe-ffn-hidden-size
                // defaults to --ffn-hidden-size.
                router_topk: 2,
                ffn_hidden: m.ffn_hidden,
                shared_expert_ffn_hidden: 0,
                shared_expert_gate: false,
                layer_freq: 1,
                first_dense_layers: 0,
                router_groups: 0,
                router_group_topk: 0,
                glu_clamp_limit: None,
                latent_size: None,
            }),
            (None, None) => {
                if let Some((flag, _)) = moe_flags.iter().find(|(_, v)| v.is_some()) {
                    return Err(ModelError::MoeFlagWithoutExperts { flag });
                }
                None
            }
        };
        if let (Some(moe), Some(experts), None) = (m.moe, o.num_experts, o.moe_router_topk)
            && moe.router_topk > experts
            && experts > 0
        {
            // (0 experts is refused as a count, below.)
            // The top-k the user did not give is named as such, not as a flag they typed.
            return Err(ModelError::ExpertsBelowTopk {
                experts,
                topk: moe.router_topk,
                whose: if had_experts {
                    "the model's"
                } else {
                    "Megatron's default"
                },
            });
        }
        if let Some(moe) = m.moe.as_mut() {
            moe.router_topk = o.moe_router_topk.unwrap_or(moe.router_topk);
            moe.ffn_hidden = o.moe_ffn_hidden.unwrap_or(moe.ffn_hidden);
            moe.shared_expert_ffn_hidden = o
                .moe_shared_expert_ffn_hidden
                .unwrap_or(moe.shared_expert_ffn_hidden);
            moe.layer_freq = o.moe_layer_freq.unwrap_or(moe.layer_freq);
            moe.first_dense_layers = o.moe_first_dense_layers.unwrap_or(moe.first_dense_layers);
            // --moe-router-num-groups 0 or --moe-router-group-topk 0, given alone, lifts the
            // model's group limit (both of its numbers).
            match (o.moe_router_groups, o.moe_router_group_topk) {
                (Some(0), None) | (None, Some(0)) => {
                    (moe.router_groups, moe.router_group_topk) = (0, 0)
                }
                (groups, group_topk) => {
                    moe.router_groups = groups.unwrap_or(moe.router_groups);
                    moe.router_group_topk = group_topk.unwrap_or(moe.router_group_topk);
                }
            }
        }

        let mla_flags = [
            ("--q-lora-rank", o.q_lora_rank),
            ("--qk-head-dim", o.qk_head_dim),
            ("--qk-pos-emb-head-dim", o.qk_pos_emb_head_dim),
            ("--v-head-dim", o.v_head_dim),
        ];
        m.mla = match (m.mla, o.kv_lora_rank) {
            (Some(mla), rank) => Some(Mla {
                kv_lora_rank: rank.unwrap_or(mla.kv_lora_rank),
                ..mla
            }),
            // Megatron-LM arguments.py defaults for the MLA flags.
            (None, Some(kv_lora_rank)) => Some(Mla {
                q_lora_rank: None,
                kv_lora_rank,
                qk_head_dim: 128,
                qk_pos_emb_head_dim: 64,
                v_head_dim: 128,
            }),
            (None, None) => {
                if let Some((flag, _)) = mla_flags.iter().find(|(_, v)| v.is_some()) {
                    return Err(ModelError::MlaFlagWithoutKvLoraRank { flag });
                }
                None
            }
        };
        if let Some(mla) = m.mla.as_mut() {
            if o.q_lora_rank.is_some() {
                mla.q_lora_rank = o.q_lora_rank;
            }
            mla.qk_head_dim = o.qk_head_dim.unwrap_or(mla.qk_head_dim);
            mla.qk_pos_emb_head_dim = o.qk_pos_emb_head_dim.unwrap_or(mla.qk_pos_emb_head_dim);
            mla.v_head_dim = o.v_head_dim.unwrap_or(mla.v_head_dim);
            // Latent attention has one K and V per head (Megatron-Core's MLASelfAttention
            // ignores --num-query-groups); a grouping asked for would be dropped silently.
            if let Some(kv_heads) = o.kv_heads
                && kv_heads != m.heads
            {
                return Err(ModelError::KvHeadsWithLatentAttention {
                    kv_heads,
                    heads: m.heads,
                    kv_lora_rank: mla.kv_lora_rank,
                });
            }
            m.kv_heads = m.heads;
            // Its heads' widths are the MLA widths (Megatron-Core's MLASelfAttention reads no
            // --kv-channels): a head width asked for would change nothing, silently.
            if let Some(head_dim) = o.head_dim
                && head_dim != self.head_dim
            {
                return Err(ModelError::HeadDimWithLatentAttention {
                    head_dim,
                    qk_head_dim: mla.qk_head_dim,
                    qk_pos_emb_head_dim: mla.qk_pos_emb_head_dim,
                    v_head_dim: mla.v_head_dim,
                });
            }
        }
        match m.check() {
            // The model's rotary share turned a pair of its own heads; the head width given over
            // it is what leaves none, so that is what is named (the share's key may be one the
            // user never wrote: HF `rotary_pct`, a launch line's `--rotary-percent`).
            Err(ModelError::RotaryPercentBelowOnePair {
                value,
                rotated,
                head_dim,
            }) if head_dim != self.head_dim => Err(ModelError::HeadDimBelowRotaryPair {
                value,
                rotated,
                head_dim,
                by: if o.head_dim.is_some() {
                    format!("--head-dim {head_dim}")
                } else {
                    format!(
                        "--hidden {} / --heads {} ({head_dim}-wide heads)",
                        m.hidden, m.heads
                    )
                },
            }),
            Err(e) => Err(e),
            Ok(()) => Ok(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moe_layer_freq_reads_megatrons_forms() {
        assert_eq!(parse_moe_layer_freq("1"), Ok((0, 1, None)));
        assert_eq!(parse_moe_layer_freq("2"), Ok((0, 2, None)));
        // DeepSeek-V3 in Megatron-Bridge / slime scripts.
        assert_eq!(parse_moe_layer_freq("[0]*3+[1]*58"), Ok((3, 1, Some(61))));
        assert_eq!(parse_moe_layer_freq("'([1]*48)'"), Ok((0, 1, Some(48))));
        assert_eq!(parse_moe_layer_freq("([1,0]*4)"), Ok((0, 2, Some(8))));
        for bad in ["0", "[1,1,0]*20", "[0]*4", "[2]*3", "x", "[1]*99999999"] {
            let err = parse_moe_layer_freq(bad).unwrap_err();
            assert!(err.starts_with("--moe-layer-freq"), "{bad}: {err}");
        }
        let all_dense = parse_moe_layer_freq("[0]*4").unwrap_err();
        assert!(all_dense.contains("leaves no MoE layer"), "{all_dense}");
    }

    #[test]
    fn overrides_keep_a_head_dim_set_apart_and_follow_an_implicit_one() {
        let qwen3 = crate::specs::load_model("qwen3-30b-a3b").unwrap();
        let fewer_heads = qwen3
            .with_overrides(&ShapeOverrides {
                heads: Some(16),
                ..ShapeOverrides::default()
            })
            .unwrap();
        assert_eq!((fewer_heads.head_dim, fewer_heads.kv_heads), (128, 4));
        let llama = crate::specs::load_model("llama3-8b").unwrap();
        let wider = llama
            .with_overrides(&ShapeOverrides {
                hidden: Some(8192),
                ..ShapeOverrides::default()
            })
            .unwrap();
        assert_eq!(wider.head_dim, 256);
        // --num-experts on a dense model: Megatron's defaults (top-2, expert width = ffn).
        let moe = llama
            .with_overrides(&ShapeOverrides {
                num_experts: Some(8),
                ..ShapeOverrides::default()
            })
            .unwrap()
            .moe
            .unwrap();
        assert_eq!((moe.router_topk, moe.ffn_hidden), (2, 14336));
    }
}
