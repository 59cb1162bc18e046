//! What Megatron-LM's Transformer Engine precision arguments and communication-overlap switches
//! say, as tpsim's precision and overlap (issue 8 items 2-3): read from a launch line by
//! [`super::megatron_reader`] and from flags pasted on `eval`.

use super::megatron_args::{MegatronArgsError, Parsed};
use crate::plan::Precision;
use crate::training::{Fp8Scaling, Overlap};

/// A precision and whether the low-precision weights are the parameters that the data-parallel
/// all-gather moves (`--fp8-param-gather` / `--fp4-param-gather`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MegatronPrecision {
    pub precision: Precision,
    pub param_gather: bool,
    /// Per-tensor FP8's scaling: `--fp8-recipe tensorwise` is current scaling, `delayed` (the
    /// default) delayed; `None` for the other formats.
    pub fp8_scaling: Option<Fp8Scaling>,
}

/// Megatron-LM's Transformer Engine precision arguments, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrecisionArgs<'a> {
    pub fp8_format: Option<&'a str>,
    pub fp8_recipe: Option<&'a str>,
    pub fp4_format: Option<&'a str>,
    pub fp4_recipe: Option<&'a str>,
    pub fp8_param_gather: bool,
    pub fp4_param_gather: bool,
}

/// Megatron-LM's Transformer Engine precision arguments as tpsim's precision. Names and defaults
/// from Megatron-Core `transformer_config.py`: `--fp8-format {e4m3,hybrid}` with `--fp8-recipe
/// {tensorwise,delayed,mxfp8,blockwise,custom}` (default delayed), `--fp4-format e2m1` with
/// `--fp4-recipe {nvfp4,custom}` (default nvfp4); arguments.py refuses both formats together,
/// `--fp4-param-gather` without `--fp4-format`, and `--fp8-param-gather` without the distributed
/// optimizer or an FSDP (`zero` 0 here).
pub fn megatron_precision(
    args: PrecisionArgs,
    zero: u8,
    notes: &mut Vec<String>,
) -> Result<MegatronPrecision, MegatronArgsError> {
    let PrecisionArgs {
        fp8_format,
        fp8_recipe,
        fp4_format,
        fp4_recipe,
        fp8_param_gather,
        fp4_param_gather,
    } = args;
    let not_modelled = |given: String, why: &str| MegatronArgsError::NotModelled {
        given,
        why: why.to_string(),
    };
    if let (Some(a), Some(b)) = (fp8_format, fp4_format) {
        return Err(MegatronArgsError::Contradiction {
            first: format!("--fp8-format {a}"),
            second: format!("--fp4-format {b}"),
            fix: "Megatron-LM refuses FP8 and FP4 together; keep one",
        });
    }
    let (precision, param_gather, fp8_scaling) = match (fp8_format, fp4_format) {
        (Some(format), None) => {
            if format != "e4m3" && format != "hybrid" {
                return Err(MegatronArgsError::BadChoice {
                    flag: "fp8-format".into(),
                    value: format.to_string(),
                    valid: "e4m3, hybrid",
                });
            }
            let (precision, scaling) = match fp8_recipe.unwrap_or("delayed") {
                // Per-tensor scaling, current or delayed: tpsim's fp8 with its --fp8-scaling.
                "tensorwise" => (Precision::Fp8, Some(Fp8Scaling::Current)),
                "delayed" => (Precision::Fp8, Some(Fp8Scaling::Delayed)),
                "mxfp8" => (Precision::Mxfp8, None),
                v @ ("blockwise" | "custom") => {
                    return Err(not_modelled(
                        format!("--fp8-recipe {v}"),
                        "FP8 with 1x128 / 128x128 block scales or a custom quantizer is not modelled yet; tpsim models per-tensor FP8 (--fp8-recipe tensorwise or delayed), mxfp8 and nvfp4",
                    ));
                }
                v => {
                    return Err(MegatronArgsError::BadChoice {
                        flag: "fp8-recipe".into(),
                        value: v.to_string(),
                        valid: "tensorwise, delayed, mxfp8 (Megatron-LM also takes blockwise and custom, which tpsim does not model)",
                    });
                }
            };
            (precision, fp8_param_gather, scaling)
        }
        (None, Some(format)) => {
            if format != "e2m1" {
                return Err(MegatronArgsError::BadChoice {
                    flag: "fp4-format".into(),
                    value: format.to_string(),
                    valid: "e2m1",
                });
            }
            match fp4_recipe.unwrap_or("nvfp4") {
                "nvfp4" => {}
                "custom" => {
                    return Err(not_modelled(
                        "--fp4-recipe custom".into(),
                        "a custom FP4 quantizer is not modelled; tpsim models NVFP4 (--fp4-recipe nvfp4)",
                    ));
                }
                v => {
                    return Err(MegatronArgsError::BadChoice {
                        flag: "fp4-recipe".into(),
                        value: v.to_string(),
                        valid: "nvfp4 (Megatron-LM also takes custom, which tpsim does not model)",
                    });
                }
            }
            if fp8_param_gather {
                return Err(MegatronArgsError::Contradiction {
                    first: "--fp4-format".into(),
                    second: "--fp8-param-gather".into(),
                    fix: "FP4 weights are gathered with --fp4-param-gather; use that",
                });
            }
            (Precision::Nvfp4, fp4_param_gather, None)
        }
        (None, None) => {
            for (recipe, flag, format) in [
                (fp8_recipe, "fp8-recipe", "--fp8-format"),
                (fp4_recipe, "fp4-recipe", "--fp4-format"),
            ] {
                if let Some(v) = recipe {
                    notes.push(format!(
                        "--{flag} {v} is ignored without {format} (Megatron-LM trains in bf16 then)"
                    ));
                }
            }
            if fp8_param_gather || fp4_param_gather {
                return Err(MegatronArgsError::Refused {
                    given: if fp8_param_gather {
                        "--fp8-param-gather without --fp8-format".into()
                    } else {
                        "--fp4-param-gather without --fp4-format".into()
                    },
                    why: "Megatron-LM keeps low-precision parameters only while training in that precision; add the format or drop the flag".into(),
                });
            }
            (Precision::Bf16, false, None)
        }
        (Some(_), Some(_)) => unreachable!("refused above"),
    };
    if param_gather && zero == 0 {
        return Err(MegatronArgsError::Refused {
            given: if precision == Precision::Nvfp4 {
                "--fp4-param-gather without a sharded optimizer".into()
            } else {
                "--fp8-param-gather without a sharded optimizer".into()
            },
            why: "Megatron-LM supports it only with the distributed optimizer, torch FSDP2 or Megatron-FSDP; add --use-distributed-optimizer".into(),
        });
    }
    Ok(MegatronPrecision {
        precision,
        param_gather,
        fp8_scaling,
    })
}

/// Megatron-LM's communication-overlap switches as tpsim's overlap. Megatron's defaults
/// (arguments.py): `--overlap-grad-reduce`, `--overlap-param-gather` and `--tp-comm-overlap`
/// are off unless given; p2p overlap is on unless `--no-overlap-p2p-communication` (it applies
/// only to the interleaved schedule, as in tpsim); `--overlap-moe-expert-parallel-comm` is off unless
/// given.
pub fn megatron_overlap(
    tp_comm: bool,
    grad_reduce: bool,
    param_gather: bool,
    no_p2p: bool,
    moe_a2a: bool,
) -> Result<Overlap, MegatronArgsError> {
    if param_gather && !grad_reduce {
        // arguments.py: 'Must use --overlap-param-gather with --overlap-grad-reduce'.
        return Err(MegatronArgsError::Refused {
            given: "--overlap-param-gather without --overlap-grad-reduce".into(),
            why: "Megatron-LM requires --overlap-grad-reduce with it; add it".into(),
        });
    }
    Ok(Overlap {
        tp_comm,
        grad_reduce,
        param_gather,
        p2p: !no_p2p,
        moe_a2a,
    })
}

/// Megatron-Core's `--delay-wgrad-compute` is part of the MoE all-to-all overlap here
/// (transformer_config.py: "overlap_moe_expert_parallel_comm must be enabled when enabling
/// delay_wgrad_compute").
fn check_delay_wgrad(delay_wgrad: bool, moe_a2a: bool) -> Result<(), MegatronArgsError> {
    if delay_wgrad && !moe_a2a {
        return Err(MegatronArgsError::Refused {
            given: "--delay-wgrad-compute without --overlap-moe-expert-parallel-comm".into(),
            why: "Megatron-Core requires the MoE all-to-all overlap with it; add --overlap-moe-expert-parallel-comm or drop --delay-wgrad-compute".into(),
        });
    }
    Ok(())
}

impl Parsed<'_> {
    /// The precision the line trains in (see [`megatron_precision`]).
    pub(super) fn precision(
        &self,
        zero: u8,
        notes: &mut Vec<String>,
    ) -> Result<MegatronPrecision, MegatronArgsError> {
        megatron_precision(
            PrecisionArgs {
                fp8_format: self.value("fp8-format"),
                fp8_recipe: self.value("fp8-recipe"),
                fp4_format: self.value("fp4-format"),
                fp4_recipe: self.value("fp4-recipe"),
                fp8_param_gather: self.switch("fp8-param-gather"),
                fp4_param_gather: self.switch("fp4-param-gather"),
            },
            zero,
            notes,
        )
    }

    /// The layers the line keeps in bf16 (`--first-last-layers-bf16` with its counts, 1 and 1 by
    /// default as Megatron-Core's `TransformerConfig`). The counts alone, or the switch on a bf16
    /// line, change nothing in Megatron-Core: read as none, with a note.
    pub(super) fn bf16_layers(
        &self,
        precision: Precision,
        notes: &mut Vec<String>,
    ) -> Result<crate::training::Bf16Layers, MegatronArgsError> {
        let count = |flag: &str| -> Result<Option<u32>, MegatronArgsError> {
            match self.value(flag) {
                None => Ok(None),
                Some(v) => v.parse::<u32>().map(Some).map_err(|_| MegatronArgsError::BadValue {
                    message: format!(
                        "--{flag} {v:?} is not a whole number of layers, 0 or more (Megatron-LM reads it as an integer); e.g. --{flag} 1"
                    ),
                }),
            }
        };
        let (start, end) = (
            count("num-layers-at-start-in-bf16")?,
            count("num-layers-at-end-in-bf16")?,
        );
        if !self.switch("first-last-layers-bf16") {
            if start.is_some() || end.is_some() {
                notes.push("--num-layers-at-start/end-in-bf16 are ignored without --first-last-layers-bf16 (Megatron-Core keeps no layer in bf16 then)".to_string());
            }
            return Ok(crate::training::Bf16Layers::NONE);
        }
        if precision == Precision::Bf16 {
            notes.push("--first-last-layers-bf16 on a bf16 line changes nothing (every layer is bf16 already)".to_string());
            return Ok(crate::training::Bf16Layers::NONE);
        }
        Ok(crate::training::Bf16Layers {
            at_start: start.unwrap_or(1),
            at_end: end.unwrap_or(1),
            mtp: false,
        })
    }

    /// The communication the line overlaps (see [`megatron_overlap`]).
    pub(super) fn overlap(&self) -> Result<Overlap, MegatronArgsError> {
        check_delay_wgrad(
            self.switch("delay-wgrad-compute"),
            self.switch("overlap-moe-expert-parallel-comm"),
        )?;
        megatron_overlap(
            self.switch("tp-comm-overlap"),
            self.switch("overlap-grad-reduce"),
            self.switch("overlap-param-gather"),
            self.switch("no-overlap-p2p-communication"),
            self.switch("overlap-moe-expert-parallel-comm"),
        )
    }
}
