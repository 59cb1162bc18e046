//! Megatron-LM arguments that change memory or time in ways tpsim does not model yet: refused by
//! name with the reason (issue 13: never listed as harmless). Where tpsim models the argument, its
//! value is read in [`super::megatron_args`] instead.

use super::megatron_args::{MegatronArgsError, Parsed};

/// Switches that change memory or time in ways tpsim does not model yet, and why.
const REFUSED_SWITCHES: &[(&str, &str)] = &[
    (
        "cpu-offloading",
        "offloading activations or weights to CPU memory is not modelled yet",
    ),
    (
        "distribute-saved-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
    (
        "distribute-checkpointed-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
];

/// Valued arguments that tpsim does not model yet whatever their value, and why.
const REFUSED_VALUED: &[(&str, &str)] = &[
    (
        "cpu-offloading-num-layers",
        "offloading activations or weights to CPU memory is not modelled yet",
    ),
    (
        "hybrid-layer-pattern",
        "hybrid (Mamba) layer patterns are not modelled; tpsim models transformer layers",
    ),
    (
        "hybrid-override-pattern",
        "hybrid (Mamba) layer patterns are not modelled; tpsim models transformer layers",
    ),
    (
        "encoder-num-layers",
        "encoder-decoder models are not modelled; tpsim models decoder-only transformers",
    ),
    (
        "decoder-num-layers",
        "encoder-decoder models are not modelled; tpsim models decoder-only transformers (use --num-layers)",
    ),
];

impl Parsed<'_> {
    /// Item by item, the arguments tpsim cannot model: refused by name.
    pub(super) fn refuse_unmodelled(&self) -> Result<(), MegatronArgsError> {
        let not_modelled = |given: String, why: &str| MegatronArgsError::NotModelled {
            given,
            why: why.to_string(),
        };
        if self.switch("fp32") {
            return Err(not_modelled(
                "--fp32".into(),
                "tpsim models bf16/fp16 mixed precision only; use --bf16 (or --fp16)",
            ));
        }
        for (flag, why) in REFUSED_SWITCHES {
            if self.switch(flag) {
                return Err(not_modelled(format!("--{flag}"), why));
            }
        }
        for (flag, why) in REFUSED_VALUED {
            if let Some(v) = self.value(flag) {
                return Err(not_modelled(format!("--{flag} {v}"), why));
            }
        }
        self.refuse_unknown_moe()?;
        // Megatron-Core's `cp_comm_type` (TransformerConfig; arguments.py `--cp-comm-type`,
        // default ["p2p"]): p2p is Transformer Engine's K/V ring, what tpsim models
        // (`CpExchange::KvRing`); all_gather, a2a (Ulysses) and a2a+p2p move other tensors over
        // other groups. Without context parallelism none of them runs.
        if self.number("context-parallel-size")?.unwrap_or(1) > 1
            && let Some(other) = self.cp_comm_type.iter().find(|t| **t != "p2p")
        {
            return Err(not_modelled(
                format!("--cp-comm-type {}", self.cp_comm_type.join(" ")),
                &format!(
                    "context parallelism exchanging K/V by {other} is not modelled; tpsim models Transformer Engine's point-to-point ring, --cp-comm-type p2p (Megatron-LM's default)"
                ),
            ));
        }
        if let Some(v) = self.value("optimizer")
            && v != "adam"
        {
            return Err(not_modelled(
                format!("--optimizer {v}"),
                "tpsim models Adam's optimizer states (12 bytes per parameter, Rajbhandari et al. 2020 §3.1); use --optimizer adam",
            ));
        }
        Ok(())
    }
}
