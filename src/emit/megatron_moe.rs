//! Mixture of experts and multi-head latent attention in Megatron-LM arguments, both ways: what
//! `--emit megatron` writes for an MoE or MLA model and its expert parallelism, and what the reader
//! makes of those arguments (Megatron-LM `megatron/training/arguments.py` names and defaults).
//! MoE arguments that change memory or time in ways tpsim does not model are refused by name.

use super::megatron_args::{MegatronArgsError, Parsed};
use crate::model::{GluClampLimit, Mla, Model, Moe};
use crate::plan::ParallelPlan;
use crate::training::MoeDispatcher;

/// What the MoE and MLA arguments of a launch line say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertArgs {
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// `--expert-model-parallel-size` (default 1).
    pub ep: u32,
    /// `--expert-tensor-parallel-size`; Megatron-LM's default is the TP size (arguments.py
    /// `validate_args`: `if args.expert_tensor_parallel_size is None:
    /// args.expert_tensor_parallel_size = args.tensor_model_parallel_size`).
    pub etp: u32,
    /// `--moe-expert-capacity-factor` (arguments.py type=float, default None: dropless routing).
    pub capacity_factor: Option<f64>,
    /// The token dispatcher (`--moe-token-dispatcher-type`, `--moe-flex-dispatcher-backend`).
    pub dispatcher: MoeDispatcher,
    /// `--moe-router-padding-for-fp8` (alias `--moe-router-padding-for-quantization`; default
    /// off): low-precision expert rows padded in the routing map before the dispatch
    /// (`MoeDispatch::router_padding`).
    pub router_padding: bool,
}

/// `--moe-*` arguments that only change the numerics of routing (losses, score function, router
/// dtype, logging) or fuse kernels tpsim already counts as permute traffic, not the memory or the
/// time tpsim models with balanced, dropless routing. Any other `--moe-*` argument is refused.
const HARMLESS_MOE: &[&str] = &[
    "moe-router-load-balancing-type",
    "moe-aux-loss-coeff",
    "moe-z-loss-coeff",
    "moe-router-score-function",
    "moe-router-enable-expert-bias",
    "moe-router-bias-update-rate",
    "moe-router-topk-scaling-factor",
    "moe-router-pre-softmax",
    "moe-router-dtype",
    "moe-input-jitter-eps",
    "moe-per-layer-logging",
    "moe-permute-fusion",
    "moe-router-fusion",
];

/// Why a `--moe-*` argument tpsim does not model is refused (named reasons for the common ones).
fn moe_refusal(flag: &str) -> String {
    match flag {
        "moe-pad-expert-input-to-capacity" => {
            "padding every expert's input to its full capacity is not modelled (tpsim models a capacity factor as a cap on the busiest expert's tokens, --moe-expert-capacity-factor alone); drop it".into()
        }
        "moe-layer-recompute" => {
            "Megatron-LM deprecates it for --recompute-granularity selective --recompute-modules moe, which tpsim models; write that instead".into()
        }
        "moe-shared-expert-overlap" => {
            "overlapping the shared expert with the token dispatch is not modelled yet; drop it".into()
        }
        _ => format!(
            "--{flag} is a mixture-of-experts argument tpsim does not model (it models balanced, dropless routing with grouped GEMMs and the all-to-all or DeepEP dispatcher); drop it"
        ),
    }
}

impl Parsed<'_> {
    /// `--moe-*` arguments that tpsim neither reads nor knows to be harmless: refused by name.
    pub(super) fn refuse_unknown_moe(&self) -> Result<(), MegatronArgsError> {
        for (i, token) in self.ignored.iter().enumerate() {
            let Some(flag) = token.strip_prefix("--") else {
                continue;
            };
            let flag = flag.split_once('=').map_or(flag, |(f, _)| f);
            if flag.starts_with("moe-") && !HARMLESS_MOE.contains(&flag) {
                // The tokenizer keeps an unknown flag's value right after it.
                let given = match self.ignored.get(i + 1) {
                    Some(value) if !token.contains('=') && !value.starts_with("--") => {
                        format!("{token} {value}")
                    }
                    _ => token.clone(),
                };
                return Err(MegatronArgsError::NotModelled {
                    given,
                    why: moe_refusal(flag),
                });
            }
        }
        Ok(())
    }

    /// The experts, the latent attention and the expert parallelism of the line; `ffn_hidden` is
    /// the dense MLP width (Megatron-LM's default for `--moe-ffn-hidden-size`).
    pub(super) fn experts(
        &self,
        layers: u32,
        tp: u32,
        ffn_hidden: u32,
    ) -> Result<ExpertArgs, MegatronArgsError> {
        let ep = self.number("expert-model-parallel-size")?.unwrap_or(1);
        let etp = self.number("expert-tensor-parallel-size")?.unwrap_or(tp);
        let moe = match self.number("num-experts")? {
            None => {
                let moe_flags = [
                    "moe-expert-capacity-factor",
                    "moe-token-drop-policy",
                    "moe-router-topk",
                    "moe-router-num-groups",
                    "moe-router-group-topk",
                    "moe-ffn-hidden-size",
                    "moe-shared-expert-intermediate-size",
                    "moe-latent-size",
                    "moe-layer-freq",
                    "moe-token-dispatcher-type",
                    "moe-flex-dispatcher-backend",
                ];
                // `--moe-shared-expert-gate` is a switch (no value): a gate on shared experts
                // that a dense model does not have.
                let switch = self
                    .switch("moe-shared-expert-gate")
                    .then_some("moe-shared-expert-gate");
                if let Some(flag) = moe_flags
                    .into_iter()
                    .find(|f| self.value(f).is_some())
                    .or(switch)
                {
                    return Err(MegatronArgsError::Refused {
                        given: format!("--{flag} without --num-experts"),
                        why: "a dense model has no experts; add --num-experts N or drop it".into(),
                    });
                }
                if let Some(limit) = self.value("activation-func-clamp-value") {
                    // Megatron-Core clamps a dense gated MLP too, but tpsim's model of the clamp
                    // (`Moe::glu_clamp_limit`) is the experts' (GPT-OSS), so it is not dropped unsaid.
                    return Err(MegatronArgsError::NotModelled {
                        given: format!("--activation-func-clamp-value {limit} without --num-experts"),
                        why: "tpsim models a clamped gated activation on mixture-of-experts layers only (GPT-OSS); drop it for a dense model, or add --num-experts N".into(),
                    });
                }
                for (flag, n) in [
                    ("expert-model-parallel-size", ep),
                    ("expert-tensor-parallel-size", etp),
                ] {
                    if self.value(flag).is_some() && n > 1 {
                        return Err(MegatronArgsError::Refused {
                            given: format!("--{flag} {n} without --num-experts"),
                            why: format!(
                                "expert parallelism needs experts; add --num-experts N or use --{flag} 1"
                            ),
                        });
                    }
                }
                None
            }
            Some(experts) => Some(self.moe(experts, layers, ffn_hidden)?),
        };
        Ok(ExpertArgs {
            moe,
            mla: self.mla()?,
            ep: if moe.is_some() { ep } else { 1 },
            etp: if moe.is_some() { etp } else { 1 },
            capacity_factor: if moe.is_some() {
                self.capacity_factor()?
            } else {
                None
            },
            dispatcher: if moe.is_some() {
                self.dispatcher(ep)?
            } else {
                MoeDispatcher::Alltoall
            },
            router_padding: moe.is_some()
                && (self.switch("moe-router-padding-for-fp8")
                    || self.switch("moe-router-padding-for-quantization")),
        })
    }

    /// The token dispatcher: `--moe-token-dispatcher-type` (arguments.py default 'allgather') and,
    /// for `flex`, `--moe-flex-dispatcher-backend` (Megatron-Core `TransformerConfig.
    /// moe_flex_dispatcher_backend`, default "deepep"; "hybridep" the other choice). tpsim models
    /// the all-to-all and DeepEP; without expert parallelism every dispatcher moves nothing.
    pub(super) fn dispatcher(&self, ep: u32) -> Result<MoeDispatcher, MegatronArgsError> {
        const BACKEND: &str = "moe-flex-dispatcher-backend";
        // Megatron-Core 0.14 and earlier chose DeepEP with the switch `--moe-enable-deepep`
        // beside `--moe-token-dispatcher-type flex` (later arguments.py: "DEPRECATED: Please use
        // --moe-flex-dispatcher-backend=deepep instead").
        let enable_deepep = self.switch("moe-enable-deepep");
        if enable_deepep && self.value(BACKEND).is_some_and(|b| b != "deepep") {
            return Err(MegatronArgsError::Refused {
                given: format!(
                    "--moe-enable-deepep with --{BACKEND} {}",
                    self.value(BACKEND).unwrap_or("")
                ),
                why: "the two name different flex backends; keep one of them".into(),
            });
        }
        if enable_deepep && self.value("moe-token-dispatcher-type") != Some("flex") {
            return Err(MegatronArgsError::Refused {
                given: "--moe-enable-deepep without --moe-token-dispatcher-type flex".into(),
                why: "Megatron-Core runs DeepEP only in the flex dispatcher (\"DeepEP only works with flex token dispatcher\"); add --moe-token-dispatcher-type flex".into(),
            });
        }
        let backend = self.value(BACKEND).or(enable_deepep.then_some("deepep"));
        if let Some(b) = backend
            && !["deepep", "hybridep"].contains(&b)
        {
            return Err(MegatronArgsError::BadChoice {
                flag: BACKEND.into(),
                value: b.to_string(),
                valid: "deepep, hybridep",
            });
        }
        match self.value("moe-token-dispatcher-type") {
            Some("alltoall") => Ok(MoeDispatcher::Alltoall),
            Some(v) if !["allgather", "flex"].contains(&v) => Err(MegatronArgsError::BadChoice {
                flag: "moe-token-dispatcher-type".into(),
                value: v.to_string(),
                valid: "allgather, alltoall, flex",
            }),
            _ if ep == 1 => Ok(MoeDispatcher::Alltoall),
            Some("flex") => match backend.unwrap_or("deepep") {
                "deepep" => Ok(MoeDispatcher::Deepep),
                other => Err(MegatronArgsError::NotModelled {
                    given: format!("--{BACKEND} {other}"),
                    why: format!(
                        "tpsim models the all-to-all and DeepEP dispatchers, not {other}; use --{BACKEND} deepep or --moe-token-dispatcher-type alltoall"
                    ),
                }),
            },
            v => Err(MegatronArgsError::NotModelled {
                given: format!(
                    "--moe-token-dispatcher-type {}",
                    v.unwrap_or("allgather (Megatron-LM's default)")
                ),
                why: "tpsim models the all-to-all token dispatch over the expert-parallel group (or DeepEP's); use --moe-token-dispatcher-type alltoall".into(),
            }),
        }
    }

    /// `--moe-expert-capacity-factor F` with `--moe-token-drop-policy` (arguments.py choices probs,
    /// position; which tokens are dropped, not how many). The factor is checked as tpsim's own
    /// `--moe-capacity-factor` is; Megatron-Core's rules for it are followed
    /// (transformer_config.py: a negative factor means none, i.e. dropless, and every load
    /// balancing type given must be aux_loss, seq_aux_loss, global_aux_loss or none).
    fn capacity_factor(&self) -> Result<Option<f64>, MegatronArgsError> {
        const FLAG: &str = "moe-expert-capacity-factor";
        if let Some(policy) = self.value("moe-token-drop-policy")
            && !["probs", "position"].contains(&policy)
        {
            return Err(MegatronArgsError::BadChoice {
                flag: "moe-token-drop-policy".into(),
                value: policy.to_string(),
                valid: "probs, position",
            });
        }
        let Some(text) = self.value(FLAG) else {
            return Ok(None);
        };
        let factor = match text.parse::<f64>() {
            // Python's float() reads -inf too: negative, so dropless like -1.
            Ok(f) if f.is_finite() || f == f64::NEG_INFINITY => f,
            _ => {
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--{FLAG} {text:?} is not a number (Megatron-LM reads it as a float); e.g. --{FLAG} 1.25, or drop it for dropless routing"
                    ),
                });
            }
        };
        if factor >= 0.0
            && let Err(rule) = crate::training::check_moe_capacity_factor(factor)
        {
            return Err(MegatronArgsError::BadValue {
                message: format!(
                    "--{FLAG} {text}: {}",
                    rule.replace("--moe-capacity-factor", &format!("--{FLAG}"))
                ),
            });
        }
        if let Some(balancing) = self
            .load_balancing
            .iter()
            .find(|b| !["aux_loss", "seq_aux_loss", "global_aux_loss", "none"].contains(b))
        {
            return Err(MegatronArgsError::Refused {
                given: format!("--{FLAG} {text} with --moe-router-load-balancing-type {balancing}"),
                why: "Megatron-Core accepts a capacity factor only with aux_loss, seq_aux_loss, global_aux_loss or none load balancing (transformer_config.py); change one of them".into(),
            });
        }
        // transformer_config.py: "if self.moe_expert_capacity_factor < 0:
        // self.moe_expert_capacity_factor = None", i.e. dropless routing, as without the flag; the
        // load-balancing check above runs first there too.
        Ok((factor >= 0.0).then_some(factor))
    }

    fn moe(&self, experts: u32, layers: u32, ffn_hidden: u32) -> Result<Moe, MegatronArgsError> {
        let (first_dense_layers, layer_freq) = match self.value("moe-layer-freq") {
            None => (0, 1),
            Some(text) => {
                let (first_dense, freq, listed) = crate::model::parse_moe_layer_freq(text)
                    .map_err(|message| MegatronArgsError::BadValue { message })?;
                if let Some(listed) = listed
                    && listed != layers
                {
                    return Err(MegatronArgsError::Refused {
                        given: format!("--moe-layer-freq {text} with --num-layers {layers}"),
                        why: format!(
                            "the list has {listed} entries; Megatron-LM requires one per layer"
                        ),
                    });
                }
                (first_dense, freq)
            }
        };
        let shared_expert_ffn_hidden = match self.value("moe-shared-expert-intermediate-size") {
            Some("0") => 0,
            _ => self
                .number("moe-shared-expert-intermediate-size")?
                .unwrap_or(0),
        };
        let shared_expert_gate = self.switch("moe-shared-expert-gate");
        if shared_expert_gate && shared_expert_ffn_hidden == 0 {
            return Err(MegatronArgsError::Refused {
                given: "--moe-shared-expert-gate without --moe-shared-expert-intermediate-size"
                    .into(),
                why: "the gate scales the shared expert's output, and there is none; add --moe-shared-expert-intermediate-size N or drop it".into(),
            });
        }
        // arguments.py: --moe-router-num-groups and --moe-router-group-topk, default None (no
        // group limit). Megatron-Core's `topk_routing_with_score_function` limits the groups only
        // `if group_topk:`, so the group count alone changes nothing (the reader notes it).
        let router_group_topk = self.number("moe-router-group-topk")?.unwrap_or(0);
        let router_groups = match self.number("moe-router-num-groups")? {
            Some(groups) if router_group_topk > 0 => groups,
            _ => 0,
        };
        Ok(Moe {
            experts,
            // arguments.py: --moe-router-topk default 2; --moe-ffn-hidden-size defaults to
            // --ffn-hidden-size.
            router_topk: self.number("moe-router-topk")?.unwrap_or(2),
            ffn_hidden: self.number("moe-ffn-hidden-size")?.unwrap_or(ffn_hidden),
            shared_expert_ffn_hidden,
            shared_expert_gate,
            layer_freq,
            first_dense_layers,
            router_groups,
            router_group_topk,
            glu_clamp_limit: self.glu_clamp_limit()?,
            // `--moe-latent-size` (Megatron-Core `TransformerConfig.moe_latent_size`): the
            // experts' latent width; absent, the experts work on the hidden width.
            latent_size: self.number("moe-latent-size")?,
        })
    }

    /// `--activation-func-clamp-value X` (Megatron-Core `activation_func_clamp_value`, a float;
    /// GPT-OSS: 7.0) clamps the two halves of the gated activation: tpsim's
    /// `Moe::glu_clamp_limit`, kept as given so that the line tpsim writes back carries it. The
    /// limit itself changes no memory or time, but it must be a positive, finite number, and the
    /// activation must be gated (`--swiglu` or `--quick-geglu`) for it to clamp anything.
    fn glu_clamp_limit(&self) -> Result<Option<GluClampLimit>, MegatronArgsError> {
        const FLAG: &str = "activation-func-clamp-value";
        let Some(text) = self.value(FLAG) else {
            return Ok(None);
        };
        let limit = match text.parse::<f64>().ok().and_then(GluClampLimit::new) {
            Some(limit) => limit,
            None => {
                return Err(MegatronArgsError::BadValue {
                    message: format!(
                        "--{FLAG} {text:?} is not a positive, finite number (the gate is clamped from above and the linear half to [-X, X]); e.g. --{FLAG} 7.0 (GPT-OSS), or drop it"
                    ),
                });
            }
        };
        if !self.switch("swiglu") && !self.switch("quick-geglu") {
            return Err(MegatronArgsError::Refused {
                given: format!("--{FLAG} {text} without --swiglu or --quick-geglu"),
                why: "the clamp acts on the two halves of a gated activation, and this line's MLP is not gated; add --swiglu or drop it".into(),
            });
        }
        Ok(Some(limit))
    }

    /// `--multi-latent-attention` with its widths (arguments.py defaults: --q-lora-rank None,
    /// --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128). `--kv-lora-rank` is
    /// required: a model trained with MLA always states it (DeepSeek-V3: 512).
    fn mla(&self) -> Result<Option<Mla>, MegatronArgsError> {
        let widths = [
            "q-lora-rank",
            "kv-lora-rank",
            "qk-head-dim",
            "qk-pos-emb-head-dim",
            "v-head-dim",
        ];
        if !self.switch("multi-latent-attention") {
            if let Some(flag) = widths.iter().find(|f| self.value(f).is_some()) {
                return Err(MegatronArgsError::Refused {
                    given: format!("--{flag} without --multi-latent-attention"),
                    why: "Megatron-LM reads it only for multi-latent attention; add --multi-latent-attention or drop it".into(),
                });
            }
            return Ok(None);
        }
        Ok(Some(Mla {
            q_lora_rank: self.number("q-lora-rank")?,
            kv_lora_rank: self.number("kv-lora-rank")?.ok_or_else(|| {
                MegatronArgsError::Refused {
                    given: "--multi-latent-attention without --kv-lora-rank".into(),
                    why: "tpsim needs the width of the key/value latent; add --kv-lora-rank N (DeepSeek-V3: 512)".into(),
                }
            })?,
            qk_head_dim: self.number("qk-head-dim")?.unwrap_or(128),
            qk_pos_emb_head_dim: self.number("qk-pos-emb-head-dim")?.unwrap_or(64),
            v_head_dim: self.number("v-head-dim")?.unwrap_or(128),
        }))
    }
}

/// Megatron-LM's `--moe-layer-freq` for K dense layers then an MoE layer every N-th layer of
/// `layers`: the integer N when K = 0 (arguments.py: layer i is MoE when i % N == 0), else a
/// Python list expression with one entry per layer (`moe_freq_type` evaluates it), written
/// without spaces or parentheses; the emitter quotes it for the shell.
pub fn moe_layer_freq_arg(layers: u32, first_dense: u32, freq: u32) -> String {
    if first_dense == 0 {
        return freq.to_string();
    }
    let rest = layers.saturating_sub(first_dense);
    let period = |len: u32| {
        let mut items = vec!["1"];
        items.extend(std::iter::repeat_n("0", len.saturating_sub(1) as usize));
        format!("[{}]", items.join(","))
    };
    let mut terms = vec![format!("[0]*{first_dense}")];
    if freq == 1 {
        terms.push(format!("[1]*{rest}"));
    } else {
        if rest / freq > 0 {
            terms.push(format!("{}*{}", period(freq), rest / freq));
        }
        if !rest.is_multiple_of(freq) {
            terms.push(period(rest % freq));
        }
    }
    terms.join("+")
}

/// The MoE and MLA arguments `--emit megatron` writes for `model` under `plan`, in order, with the
/// expert capacity factor the plan was evaluated with (`None`: dropless, Megatron-LM's default)
/// and its token dispatcher.
pub fn megatron_expert_args(
    model: &Model,
    plan: &ParallelPlan,
    capacity_factor: Option<f64>,
    dispatch: crate::training::MoeDispatch,
) -> Vec<(&'static str, Option<String>)> {
    let dispatcher = dispatch.dispatcher;
    let mut args = Vec::new();
    if let Some(mla) = &model.mla {
        args.push(("multi-latent-attention", None));
        if let Some(q) = mla.q_lora_rank {
            args.push(("q-lora-rank", Some(q.to_string())));
        }
        args.push(("kv-lora-rank", Some(mla.kv_lora_rank.to_string())));
        args.push(("qk-head-dim", Some(mla.qk_head_dim.to_string())));
        args.push((
            "qk-pos-emb-head-dim",
            Some(mla.qk_pos_emb_head_dim.to_string()),
        ));
        args.push(("v-head-dim", Some(mla.v_head_dim.to_string())));
    }
    let Some(moe) = &model.moe else {
        return args;
    };
    args.push(("num-experts", Some(moe.experts.to_string())));
    args.push(("moe-router-topk", Some(moe.router_topk.to_string())));
    if moe.router_groups > 0 {
        args.push(("moe-router-num-groups", Some(moe.router_groups.to_string())));
        args.push((
            "moe-router-group-topk",
            Some(moe.router_group_topk.to_string()),
        ));
    }
    args.push(("moe-ffn-hidden-size", Some(moe.ffn_hidden.to_string())));
    if moe.shared_expert_ffn_hidden > 0 {
        args.push((
            "moe-shared-expert-intermediate-size",
            Some(moe.shared_expert_ffn_hidden.to_string()),
        ));
        if moe.shared_expert_gate {
            args.push(("moe-shared-expert-gate", None));
        }
    }
    if let Some(latent) = moe.latent_size {
        args.push(("moe-latent-size", Some(latent.to_string())));
    }
    if moe.first_dense_layers > 0 || moe.layer_freq > 1 {
        // A list expression is a glob pattern to the shell (zsh refuses it unmatched), so it is
        // quoted as the pipeline layout is; a bare integer is not.
        let freq = moe_layer_freq_arg(model.layers, moe.first_dense_layers, moe.layer_freq);
        let freq = if freq.bytes().all(|b| b.is_ascii_digit()) {
            freq
        } else {
            format!("'{freq}'")
        };
        args.push(("moe-layer-freq", Some(freq)));
    }
    // tpsim models grouped GEMMs and the all-to-all or DeepEP dispatch (Megatron-LM's defaults
    // are sequential expert GEMMs and the allgather dispatcher), so both are written out; DeepEP
    // is the flex dispatcher with its deepep backend.
    args.push(("moe-grouped-gemm", None));
    match dispatcher.written_for(plan.ep) {
        MoeDispatcher::Alltoall => {
            args.push(("moe-token-dispatcher-type", Some("alltoall".into())));
        }
        MoeDispatcher::Deepep => {
            args.push(("moe-token-dispatcher-type", Some("flex".into())));
            args.push(("moe-flex-dispatcher-backend", Some("deepep".into())));
        }
    }
    // arguments.py `--moe-expert-capacity-factor` (type=float, default None: dropless). Its
    // companions keep Megatron-LM's defaults, which are what tpsim models: `--moe-token-drop-policy
    // probs` (which tokens are dropped, not how many) and no `--moe-pad-expert-input-to-capacity`
    // (each expert computes the tokens it keeps, not its full capacity). transformer_config.py
    // accepts a factor with the all-to-all dispatcher written above and the default aux_loss
    // load balancing.
    if let Some(factor) = capacity_factor {
        args.push(("moe-expert-capacity-factor", Some(factor.to_string())));
    }
    // Low-precision expert GEMMs: each expert's rows padded to the GEMM alignment in the routing
    // map before the dispatch when the plan was evaluated so (`MoeDispatch::router_padding`,
    // `cost::moe::padded_copies_factor`); without the flag Megatron-Core pads each local expert's
    // rows inside `TEGroupedMLP` after the dispatch, which is what tpsim then costs.
    if plan.precision != crate::plan::Precision::Bf16 && dispatch.router_padding {
        args.push(("moe-router-padding-for-fp8", None));
    }
    args.push(("expert-model-parallel-size", Some(plan.ep.to_string())));
    args.push(("expert-tensor-parallel-size", Some(plan.etp.to_string())));
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_freq_reads_back_through_megatrons_parser() {
        for (layers, first_dense, freq) in [(61, 3, 1), (32, 0, 2), (40, 2, 3), (27, 1, 1)] {
            let text = moe_layer_freq_arg(layers, first_dense, freq);
            let (k, n, listed) = crate::model::parse_moe_layer_freq(&text).unwrap();
            assert_eq!((k, n), (first_dense, freq), "{text}");
            assert!(listed.is_none_or(|l| l == layers), "{text}");
        }
        assert_eq!(moe_layer_freq_arg(61, 3, 1), "[0]*3+[1]*58");
    }
}
