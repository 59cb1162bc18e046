//! Megatron-LM arguments that change memory or time in ways tpsim does not model yet: refused by
//! name with the reason (issue 13: never listed as harmless). Where tpsim models the argument, its
//! value is read in [`super::megatron_args`] instead.

use super::megatron_args::{MegatronArgsError, Parsed};

/// Switches that change memory or time in ways tpsim does not model yet, and why.
const REFUSED_SWITCHES: &[(&str, &str)] = &[
    (
        "distribute-saved-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
    (
        "distribute-checkpointed-activations",
        "splitting the checkpointed activations over the TP group is not modelled yet",
    ),
    // arguments.py at d98e8a64: "Offload optimizer state to CPU" (Megatron-Core's
    // HybridDeviceOptimizer, which it runs only with --use-precision-aware-optimizer): the states
    // leave the GPU, which tpsim counts on it, and the step runs on the host.
    (
        "optimizer-cpu-offload",
        "moving the optimizer states to host memory (Megatron-Core's hybrid device optimizer) is not modelled yet: tpsim counts them on the GPU and runs the step there; drop it",
    ),
];

/// Why a line's deprecated hybrid ratios are refused: Megatron-LM turns them into a pattern
/// (`pattern_from_ratios`), and tpsim reads the pattern itself (`megatron_reader::hybrid_of_line`).
const HYBRID_FROM_A_PATTERN: &str = "the attention and MLP ratios are deprecated in Megatron-LM, which turns them into a layer pattern; give that pattern as --hybrid-layer-pattern (one symbol per layer: M Mamba-2, * attention, - MLP, E MoE)";

/// Valued arguments that tpsim does not model yet whatever their value, and why.
const REFUSED_VALUED: &[(&str, &str)] = &[
    ("hybrid-attention-ratio", HYBRID_FROM_A_PATTERN),
    ("hybrid-mlp-ratio", HYBRID_FROM_A_PATTERN),
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
        // Megatron-LM has no `--cpu-offloading` switch: the generated arguments leave
        // TransformerConfig's `cpu_offloading` out, and arguments.py turns it on from
        // `--cpu-offloading-num-layers N` (N > 0). Its argparse refuses the word; read as nothing,
        // it would drop the offload its writer meant.
        if self.switch("cpu-offloading") {
            return Err(MegatronArgsError::Refused {
                given: "--cpu-offloading".into(),
                why: "Megatron-LM has no such switch (its argparse refuses it; arguments.py turns CPU offloading on from --cpu-offloading-num-layers N when N > 0); give --cpu-offloading-num-layers N instead".into(),
            });
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
        // Megatron-Core's `transformer_impl` (TransformerConfig, default "transformer_engine"):
        // "local" builds the layers from Megatron-Core's own modules (gpt_builders.py: `use_te`
        // false), without Transformer Engine's fused attention, FP8 or userbuffers TP overlap,
        // which is not what tpsim prices; "inference_optimized" is for inference.
        if let Some(v) = self.value("transformer-impl")
            && v != "transformer_engine"
        {
            let built = if v == "local" {
                "Megatron-Core's own modules, with other kernels"
            } else {
                "other layers"
            };
            return Err(not_modelled(
                format!("--transformer-impl {v}"),
                &format!(
                    "tpsim prices Transformer Engine's layers (--transformer-impl transformer_engine, Megatron-LM's default); {v} builds {built}, not modelled; drop it or use transformer_engine"
                ),
            ));
        }
        self.refuse_unknown_moe()?;
        if let Some(v) = self.value("optimizer")
            && !matches!(v, "adam" | "muon" | "dist_muon")
        {
            return Err(not_modelled(
                format!("--optimizer {v}"),
                "tpsim models Adam (12 bytes of states per parameter, Rajbhandari et al. 2020 §3.1) and Muon (Megatron-Core's --optimizer muon); use --optimizer adam or muon",
            ));
        }
        Ok(())
    }
}
