//! Per-module precision overrides inside low-precision layers: what a Transformer Engine
//! quantization recipe file gives Megatron-Core (`--te-precision-config-file`,
//! megatron/core/extensions/TransformerEngineMixedPrecision.md at Megatron-LM d98e8a64: ordered
//! glob matchers on module names pick a config per linear; an override applies only to a module
//! that would otherwise run quantized, so layers kept in bf16 stay bf16).
//!
//! tpsim models the modules NVIDIA's Nemotron 3 Super NVFP4 recipe names (Megatron-Bridge
//! `te_quant.cfg`, v0.4.0 to v0.6.0): the attention linears (`*.linear_qkv`, `*.linear_proj`) and
//! LatentMoE's projections (`*mlp.fc[12]_latent_proj`) in bf16, the Mamba `out_proj`
//! (`*mixer.out_proj`) in MXFP8; its `mtp.*` matcher is `Bf16Layers::mtp`. Not on the command line
//! yet (tpsim reads no recipe file): the accuracy runner sets it from the recipes.

use serde::Serialize;

use crate::plan::Precision;

/// A linear module a quantization recipe can run at its own precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantModule {
    /// An attention block's QKV and output projections.
    AttentionLinears,
    /// LatentMoE's down and up projections around the experts.
    LatentProjections,
    /// A Mamba mixer's output projection.
    MambaOutProj,
}

/// Each module's precision where a recipe overrides it (None: the plan's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ModulePrecision {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_linears: Option<Precision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latent_projections: Option<Precision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mamba_out_proj: Option<Precision>,
}

impl ModulePrecision {
    pub const NONE: ModulePrecision = ModulePrecision {
        attention_linears: None,
        latent_projections: None,
        mamba_out_proj: None,
    };

    pub fn is_none(&self) -> bool {
        *self == ModulePrecision::NONE
    }

    /// The precision `module` runs at inside a layer at `precision`: the override, where the layer
    /// runs quantized at all (a bf16 layer keeps every module bf16).
    pub fn of(&self, module: QuantModule, precision: Precision) -> Precision {
        if precision == Precision::Bf16 {
            return precision;
        }
        let over = match module {
            QuantModule::AttentionLinears => self.attention_linears,
            QuantModule::LatentProjections => self.latent_projections,
            QuantModule::MambaOutProj => self.mamba_out_proj,
        };
        over.unwrap_or(precision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_applies_inside_quantized_layers_only() {
        let recipe = ModulePrecision {
            attention_linears: Some(Precision::Bf16),
            mamba_out_proj: Some(Precision::Mxfp8),
            ..ModulePrecision::NONE
        };
        assert_eq!(
            recipe.of(QuantModule::AttentionLinears, Precision::Nvfp4),
            Precision::Bf16
        );
        assert_eq!(
            recipe.of(QuantModule::MambaOutProj, Precision::Nvfp4),
            Precision::Mxfp8
        );
        assert_eq!(
            recipe.of(QuantModule::LatentProjections, Precision::Nvfp4),
            Precision::Nvfp4
        );
        assert_eq!(
            recipe.of(QuantModule::MambaOutProj, Precision::Bf16),
            Precision::Bf16
        );
    }
}
