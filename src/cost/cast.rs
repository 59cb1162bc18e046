//! HBM traffic of quantizing a linear layer's bf16 input before a low-precision GEMM: where the
//! frameworks cast, and what each scaling recipe reads and writes.
//!
//! Read from Transformer Engine (NVIDIA/TransformerEngine d0067d0, 2026-08) and torchao as
//! torchtitan runs it:
//! - **Delayed scaling** (TE `Float8Quantizer`, Megatron-Core's default `--fp8-recipe delayed`)
//!   casts with the scale of earlier steps' amax history and records this tensor's amax in the same
//!   kernel: one read of the input, the copies written.
//! - **Current scaling** (TE `Float8CurrentScalingQuantizer`, `--fp8-recipe tensorwise`; torchao's
//!   tensorwise float8) needs this tensor's amax before the cast: a separate amax kernel reads the
//!   input first (`quantizer.cpp`: `nvte_compute_amax_with_config`, `nvte_compute_scale_from_amax`,
//!   then `nvte_quantize_v2`), 2 more bytes per element. NVFP4's per-tensor second-level scale
//!   needs the same pass. MXFP8's block scales come from the block itself: the cast alone.
//! - **The norm-fed linears** (QKV and MLP up, Megatron-Core's `TELayerNormColumnParallelLinear`)
//!   quantize inside the norm (`layernorm_linear.py` calls `apply_normalization` with the input
//!   quantizer; `extensions/normalization.cpp` picks the kernel): under delayed scaling the norm
//!   writes the FP8 output itself (`FULLY_FUSED`, one byte per element instead of the bf16 output's
//!   two, no separate cast); under current scaling the norm also emits the amax and the cast reads
//!   its bf16 output once (`FUSED_NORM_AMAX_FP8`); MXFP8 runs the norm, then the cast (`UNFUSED`);
//!   NVFP4 with its default Hadamard transform runs the norm, then its own amax pass and cast.
//!   torchtitan's norms are not
//!   fused with torchao's cast: its amax pass and cast run as for any other input.
//! - **Under sequence parallelism** a column-parallel linear quantizes its sequence shard and
//!   all-gathers the low-precision copy (`layernorm_linear.py`/`linear.py`: `gather_along_first_dim
//!   (..., quantizer=...)`; `distributed.py` `_all_gather_fp8`, `_all_gather_mxfp8`; torchao's
//!   `Float8ColwiseParallel` casts before its all-gather too), so the cast touches 1/t of the
//!   gathered input. Per-tensor FP8 gathers the row-wise copy only
//!   (`Float8Quantizer.supports_only_rowwise_all_gather`: the forward's quantizer is set to
//!   row-wise usage only when it gathers), and on Hopper the transpose the weight gradient reads
//!   is then made in the backward, from the tensor the backward gathers again, a read and a write
//!   of it, once (`update_usage(columnwise_usage=True)` on the re-gathered input, which calls
//!   `_create_transpose()`; Blackwell's tensor cores read FP8 column-wise and need none, TE
//!   `is_non_tn_fp8_gemm_supported`): [`backward_transpose_bytes`]. The block-scaled formats
//!   quantize both copies on the shard.
//!
//! Counts are per element of the GEMM's input as the GEMM sees it (gathered under sequence
//! parallelism). The backward's gradient casts are covered by the backward's 2× of the forward's
//! element-wise traffic (`compute::layer_time_sharded`); the gathered input's transpose is the
//! backward's alone and is charged there once, outside that 2×.

use crate::cluster::GpuProfile;
use crate::plan::Precision;
use crate::training::{Fp8Scaling, GradDtype};

/// Bytes of a bf16 element.
const BF16_BYTES: f64 = 2.0;

/// How a plan quantizes its linear inputs: the format, per-tensor FP8's scaling recipe, whether
/// the norm kernel does the norm-fed linears' quantization (Transformer Engine's
/// `LayerNormLinear`), whether sequence parallelism's all-gathers carry the quantized copy (so the
/// column-parallel inputs are cast on the sequence shard, `comm::sp_gather_scale`), and whether the
/// framework's FP8 GEMMs read column-wise operands where the GPU can
/// (`TrainingFramework::reads_columnwise_fp8_where_supported`); and the format of the
/// weight-gradient GEMMs' output (`wgrad_accumulates_into`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CastSetting {
    pub precision: Precision,
    pub fp8_scaling: Fp8Scaling,
    pub quantizes_in_the_norm: bool,
    pub casts_before_gather: bool,
    pub reads_columnwise_fp8_where_supported: bool,
    /// The gradient buffer the weight-gradient GEMMs accumulate into in place, read and written
    /// in its dtype (`TrainingFramework::fuses_wgrad_accumulation`); `None` where they write a
    /// fresh bf16 gradient (`compute::wgrad_accumulation_s`).
    pub wgrad_accumulates_into: Option<GradDtype>,
    /// Modules a quantization recipe runs at their own precision (`training::ModulePrecision`).
    pub modules: crate::training::ModulePrecision,
}

impl CastSetting {
    /// How `plan` casts under `training`'s framework and FP8 scaling.
    pub fn of(
        training: &crate::training::Training,
        plan: &crate::plan::ParallelPlan,
    ) -> CastSetting {
        CastSetting {
            precision: plan.precision,
            fp8_scaling: training.fp8_scaling,
            quantizes_in_the_norm: training.framework.quantizes_in_the_norm(),
            casts_before_gather: super::comm::sp_gather_scale(training, plan)
                .carries_quantized_copies(),
            reads_columnwise_fp8_where_supported: training
                .framework
                .reads_columnwise_fp8_where_supported(),
            wgrad_accumulates_into: training
                .wgrad_accumulation_fused(plan.zero)
                .then_some(training.grad_dtype),
            modules: training.module_precision,
        }
    }

    /// How `module`'s linears cast: at the recipe's precision for it, inside a quantized layer.
    pub fn for_module(self, module: crate::training::QuantModule) -> CastSetting {
        CastSetting {
            precision: self.modules.of(module, self.precision),
            ..self
        }
    }

    /// The number of sequence shards a column-parallel linear casts before its input is gathered:
    /// the TP degree where sequence parallelism's all-gather carries the quantized copy, else 1
    /// (the whole gathered input is cast).
    pub fn gathered_from(self, sequence_parallel: bool, tp: u32) -> u32 {
        if sequence_parallel && self.casts_before_gather {
            tp
        } else {
            1
        }
    }

    /// bf16 training: nothing is cast.
    pub const BF16: CastSetting = CastSetting {
        precision: Precision::Bf16,
        fp8_scaling: Fp8Scaling::Current,
        quantizes_in_the_norm: false,
        casts_before_gather: false,
        reads_columnwise_fp8_where_supported: true,
        wgrad_accumulates_into: None,
        modules: crate::training::ModulePrecision::NONE,
    };
}

/// Where a linear's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearInput {
    /// The output of the layer's norm (QKV, dense MLP up).
    NormOutput,
    /// Anything else: the attention output, the activation, dispatched tokens.
    Other,
}

/// Bytes of a low-precision operand element (the block formats' scales included: one E8M0 per 32
/// for MXFP8, OCP MX v1.0 §5; one E4M3 per 16 for NVFP4).
pub(crate) fn operand_bytes(precision: Precision) -> f64 {
    match precision {
        Precision::Bf16 => BF16_BYTES,
        Precision::Fp8 => 1.0,
        Precision::Mxfp8 => 1.0 + 1.0 / 32.0,
        Precision::Nvfp4 => 0.5 + 1.0 / 16.0,
    }
}

/// HBM bytes moved per element of a linear's input (as the GEMM sees it) to quantize it, beyond
/// what the unquantized layer already moves; `gathered_from` is the number of sequence shards the
/// input is all-gathered from (the TP degree under sequence parallelism, else 1). Negative where
/// the norm writes the one-byte copy instead of its bf16 output (delayed scaling in TE's norm).
pub fn input_cast_bytes(
    setting: CastSetting,
    gpu: &GpuProfile,
    input: LinearInput,
    gathered_from: u32,
) -> f64 {
    let shard = 1.0 / f64::from(gathered_from.max(1));
    let gathered = gathered_from > 1;
    let in_the_norm = input == LinearInput::NormOutput && setting.quantizes_in_the_norm;
    match setting.precision {
        Precision::Bf16 => 0.0,
        Precision::Fp8 => {
            // Hopper's FP8 GEMMs read only the TN layout: the weight gradient needs a transposed
            // copy, written beside the row-wise one by a whole-tensor cast (TE's cast_transpose);
            // after a sequence-parallel gather it is made in the backward instead
            // (`backward_transpose_bytes`).
            let transpose = if !makes_transposed_copy(setting, gpu) || gathered {
                0.0
            } else {
                1.0
            };
            if in_the_norm && setting.fp8_scaling == Fp8Scaling::Delayed {
                // The norm writes 1 byte per element in place of its 2-byte bf16 output, row-wise
                // only; on Hopper a transpose kernel then reads and writes it (read + write), in
                // the forward unless the input is gathered.
                let transpose = if !makes_transposed_copy(setting, gpu) || gathered {
                    0.0
                } else {
                    2.0
                };
                return -(BF16_BYTES - 1.0) * shard + transpose;
            }
            let amax = match setting.fp8_scaling {
                Fp8Scaling::Current if !in_the_norm => BF16_BYTES,
                _ => 0.0,
            };
            (amax + BF16_BYTES + 1.0) * shard + transpose
        }
        Precision::Mxfp8 => (BF16_BYTES + 2.0 * operand_bytes(Precision::Mxfp8)) * shard,
        // NVFP4's default recipe applies a random Hadamard transform to the inputs and takes the
        // amax after it (`NVFP4BlockScaling`: `random_hadamard_transform=not disable_rht`,
        // `with_post_rht_amax`), so the norm cannot supply it (`normalization.cpp` runs `UNFUSED`,
        // "Amax is handled within NVFP4 quantizer") and the quantizer reads the input once more
        // (`nvte_hadamard_transform_amax`), in the norm-fed linears too.
        Precision::Nvfp4 => {
            (BF16_BYTES + BF16_BYTES + 2.0 * operand_bytes(Precision::Nvfp4)) * shard
        }
    }
}

/// Whether per-tensor FP8 GEMMs need a transposed copy of an operand for the weight gradient:
/// on Hopper always (TN layout only); on Blackwell, whose tensor cores read FP8 column-wise, only
/// where the framework's GEMM call still wants the TN layout (torchao's `torch._scaled_mm`,
/// `TrainingFramework::reads_columnwise_fp8_where_supported`).
fn makes_transposed_copy(setting: CastSetting, gpu: &GpuProfile) -> bool {
    !(gpu.microscaling && setting.reads_columnwise_fp8_where_supported)
}

/// HBM bytes per element of a sequence-gathered tensor that a weight gradient reads in FP8 and the
/// backward alone transposes, once: a column-parallel linear's re-gathered input, and a
/// row-parallel linear's gathered output gradient. Per-tensor FP8 gathers the row-wise copy only,
/// so where the GEMMs want a transposed copy (`makes_transposed_copy`) it is made from the gathered
/// tensor (a read and a write of one byte; Transformer Engine `update_usage(columnwise_usage=True)`
/// on the input, `grad_output_preprocess` on the gradient; torchao `preprocess_addmm`). Zero
/// without a gather and for the block-scaled formats, which gather both copies.
pub fn backward_transpose_bytes(setting: CastSetting, gpu: &GpuProfile, gathered_from: u32) -> f64 {
    let per_tensor_fp8 = setting.precision == Precision::Fp8;
    if per_tensor_fp8 && makes_transposed_copy(setting, gpu) && gathered_from > 1 {
        2.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs;

    fn gpu(name: &str) -> GpuProfile {
        specs::load_gpu(name).unwrap()
    }

    fn setting(precision: Precision, fp8_scaling: Fp8Scaling, in_norm: bool) -> CastSetting {
        CastSetting {
            modules: crate::training::ModulePrecision::NONE,
            precision,
            fp8_scaling,
            quantizes_in_the_norm: in_norm,
            casts_before_gather: true,
            reads_columnwise_fp8_where_supported: true,
            wgrad_accumulates_into: None,
        }
    }

    #[test]
    fn a_whole_tensor_cast_reads_once_and_writes_its_copies() {
        let h100 = gpu("h100-sxm-80g");
        let b200 = gpu("b200-sxm-180g");
        let delayed = setting(Precision::Fp8, Fp8Scaling::Delayed, true);
        // cast_transpose: read 2, write the row-wise and the transposed byte.
        assert_eq!(input_cast_bytes(delayed, &h100, LinearInput::Other, 1), 4.0);
        // Blackwell keeps one copy under Transformer Engine; torchao's `torch._scaled_mm` wants
        // the transposed one there too.
        assert_eq!(input_cast_bytes(delayed, &b200, LinearInput::Other, 1), 3.0);
        let torchao = CastSetting {
            reads_columnwise_fp8_where_supported: false,
            ..delayed
        };
        assert_eq!(input_cast_bytes(torchao, &b200, LinearInput::Other, 1), 4.0);
        // Current scaling reads the input once more for its amax.
        let current = setting(Precision::Fp8, Fp8Scaling::Current, true);
        assert_eq!(input_cast_bytes(current, &h100, LinearInput::Other, 1), 6.0);
        // MXFP8: both block-scaled copies, no amax pass, whatever the FP8 recipe says.
        let mx = setting(Precision::Mxfp8, Fp8Scaling::Current, true);
        assert!(
            (input_cast_bytes(mx, &b200, LinearInput::Other, 1) - (2.0 + 2.0 * 33.0 / 32.0)).abs()
                < 1e-12
        );
        assert_eq!(
            input_cast_bytes(CastSetting::BF16, &h100, LinearInput::Other, 8),
            0.0
        );
    }

    #[test]
    fn the_norm_does_the_cast_where_transformer_engine_fuses_it() {
        let h100 = gpu("h100-sxm-80g");
        // Delayed: the norm writes one byte instead of two; the transpose stays.
        let delayed = setting(Precision::Fp8, Fp8Scaling::Delayed, true);
        assert_eq!(
            input_cast_bytes(delayed, &h100, LinearInput::NormOutput, 1),
            1.0
        );
        // Current: the amax comes from the norm, the cast reads its output once.
        let current = setting(Precision::Fp8, Fp8Scaling::Current, true);
        assert_eq!(
            input_cast_bytes(current, &h100, LinearInput::NormOutput, 1),
            4.0
        );
        // NVFP4's Hadamard-transformed amax is its quantizer's own pass, in the norm-fed linears
        // too.
        let nvfp4 = setting(Precision::Nvfp4, Fp8Scaling::Current, true);
        let b200 = gpu("b200-sxm-180g");
        assert_eq!(
            input_cast_bytes(nvfp4, &b200, LinearInput::NormOutput, 1),
            2.0 + 2.0 + 2.0 * (0.5 + 1.0 / 16.0)
        );
        // torchao's cast is not in the norm: the amax pass stays.
        let torchao = setting(Precision::Fp8, Fp8Scaling::Current, false);
        assert_eq!(
            input_cast_bytes(torchao, &h100, LinearInput::NormOutput, 1),
            6.0
        );
    }

    #[test]
    fn sequence_parallelism_casts_the_shard_and_transposes_the_gathered_input() {
        let h100 = gpu("h100-sxm-80g");
        let b200 = gpu("b200-sxm-180g");
        let current = setting(Precision::Fp8, Fp8Scaling::Current, true);
        // Shard cast (read 2, write 1) over 4 shards in the forward; the transposed copy is made
        // in the backward from the gathered input, a read and a write of it, once.
        assert_eq!(
            input_cast_bytes(current, &h100, LinearInput::NormOutput, 4),
            3.0 / 4.0
        );
        assert_eq!(backward_transpose_bytes(current, &h100, 4), 2.0);
        assert_eq!(
            input_cast_bytes(current, &b200, LinearInput::NormOutput, 4),
            3.0 / 4.0
        );
        assert_eq!(backward_transpose_bytes(current, &b200, 4), 0.0);
        let delayed = setting(Precision::Fp8, Fp8Scaling::Delayed, true);
        assert_eq!(
            input_cast_bytes(delayed, &h100, LinearInput::NormOutput, 4),
            -1.0 / 4.0
        );
        assert_eq!(backward_transpose_bytes(delayed, &h100, 4), 2.0);
        // Without a gather the forward's cast writes the transposed copy; the backward adds none.
        assert_eq!(backward_transpose_bytes(current, &h100, 1), 0.0);
        let mx = setting(Precision::Mxfp8, Fp8Scaling::Current, true);
        assert!(
            (input_cast_bytes(mx, &b200, LinearInput::NormOutput, 8)
                - (2.0 + 2.0 * 33.0 / 32.0) / 8.0)
                .abs()
                < 1e-12
        );
        assert_eq!(backward_transpose_bytes(mx, &b200, 8), 0.0);
    }
}
