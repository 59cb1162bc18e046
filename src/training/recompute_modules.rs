//! Megatron-Core's selective recompute by module (`--recompute-granularity selective
//! --recompute-modules ...`, `TransformerConfig.recompute_modules`, megatron/core/transformer/
//! transformer_config.py). Its documented choices:
//! - `core_attn`: the core attention (the default, `["core_attn"]`);
//! - `moe_act`: the MoE MLP activation function;
//! - `layernorm`: input_layernorm and pre_mlp_layernorm;
//! - `mla_up_proj`: the MLA up projection and the RoPE applied to its output;
//! - `mlp`: the dense MLP submodule;
//! - `moe`: the MoE layer;
//! - `shared_experts`: the shared experts of the MoE layer.
//!
//! "moe_act, layernorm and mla_up_proj use output-discarding checkpointing; core_attn, mlp, moe and
//! shared_experts use normal checkpointing" (same docstring). Megatron-Core refuses `mla_up_proj`
//! without multi-latent attention and `moe_act` without grouped GEMMs (`__post_init__`); tpsim
//! also refuses the MoE modules on a dense model, where they would recompute nothing.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::Model;

/// One submodule Megatron-Core can recompute under selective granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecomputeModule {
    CoreAttn,
    MoeAct,
    Layernorm,
    MlaUpProj,
    Mlp,
    Moe,
    SharedExperts,
}

impl RecomputeModule {
    /// In Megatron-Core's documented order.
    pub const ALL: [RecomputeModule; 7] = [
        RecomputeModule::CoreAttn,
        RecomputeModule::MoeAct,
        RecomputeModule::Layernorm,
        RecomputeModule::MlaUpProj,
        RecomputeModule::Mlp,
        RecomputeModule::Moe,
        RecomputeModule::SharedExperts,
    ];

    /// The name Megatron-Core's `--recompute-modules` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            RecomputeModule::CoreAttn => "core_attn",
            RecomputeModule::MoeAct => "moe_act",
            RecomputeModule::Layernorm => "layernorm",
            RecomputeModule::MlaUpProj => "mla_up_proj",
            RecomputeModule::Mlp => "mlp",
            RecomputeModule::Moe => "moe",
            RecomputeModule::SharedExperts => "shared_experts",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    fn from_name(name: &str) -> Option<RecomputeModule> {
        RecomputeModule::ALL
            .into_iter()
            .find(|m| m.as_str() == name)
    }
}

/// A set of `RecomputeModule`s (at least one: an empty list is no selective recompute at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecomputeModules(u8);

/// The valid names, for error messages.
pub const VALID_NAMES: &str =
    "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts";

impl RecomputeModules {
    pub fn contains(self, module: RecomputeModule) -> bool {
        self.0 & module.bit() != 0
    }

    pub fn of(modules: &[RecomputeModule]) -> RecomputeModules {
        RecomputeModules(modules.iter().fold(0, |bits, m| bits | m.bit()))
    }

    /// Only the attention core: Megatron-Core's default, tpsim's `CheckpointedAttention`.
    pub fn is_core_attn_only(self) -> bool {
        self == RecomputeModules::of(&[RecomputeModule::CoreAttn])
    }

    pub fn iter(self) -> impl Iterator<Item = RecomputeModule> {
        RecomputeModule::ALL
            .into_iter()
            .filter(move |m| self.contains(*m))
    }

    /// Megatron's spelling: the names separated by spaces (`--recompute-modules a b`).
    pub fn megatron_words(self) -> String {
        self.iter()
            .map(RecomputeModule::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// For headers and tables: the names separated by commas.
    pub fn describe(self) -> String {
        self.iter()
            .map(RecomputeModule::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Reads names given as separate words, comma-separated, or both ("moe_act layernorm",
    /// "moe_act,layernorm"). `Err` names the word and the rule.
    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<RecomputeModules, String> {
        let mut bits = 0u8;
        for word in words {
            for name in word
                .as_ref()
                .split(',')
                .map(crate::units::list_item)
                .filter(|n| !n.is_empty())
            {
                let module = RecomputeModule::from_name(name).ok_or_else(|| {
                    format!("'{name}' is not a module Megatron-Core recomputes (choose from {VALID_NAMES})")
                })?;
                // A repeat (`core_attn,core_attn`) was merged without a word: most likely another
                // module was meant in its place.
                if bits & module.bit() != 0 {
                    return Err(format!(
                        "'{name}' is named twice (rule: each module is recomputed once, so it is listed once; choose from {VALID_NAMES}); drop the repeat or name the module meant there"
                    ));
                }
                bits |= module.bit();
            }
        }
        if bits == 0 {
            return Err(format!(
                "names no module (choose one or more of {VALID_NAMES}; for no recompute use --recompute none)"
            ));
        }
        Ok(RecomputeModules(bits))
    }

    /// Share of a layer's MLP-side TP collective pair (the all-gather and reduce-scatter around the
    /// MLP, or its all-reduce) these modules run again: the dense MLPs' under `mlp` (`dense_share`
    /// of the layers: the dense layers of a transformer, the MLP blocks of a hybrid stack), the
    /// MoE layers' under `moe` (`moe_share` of the layers are MoE layers, and `moe_pair` says
    /// whether their MLP has such a pair at all: `cost::moe::moe_mlp_has_tp_pair`).
    pub fn mlp_pair_repeats(self, dense_share: f64, moe_share: f64, moe_pair: bool) -> f64 {
        let dense = if self.contains(RecomputeModule::Mlp) {
            dense_share
        } else {
            0.0
        };
        let moe = if self.contains(RecomputeModule::Moe) && moe_pair {
            moe_share
        } else {
            0.0
        };
        dense + moe
    }

    /// The output-discarding modules this model has something for — `layernorm` where a norm is a
    /// module of its own (multi-latent attention's input norm, MoE layers' pre-MLP norm),
    /// `mla_up_proj` with multi-latent attention, `moe_act` with experts — or `None` (a dense
    /// model without MLA, whose norms Transformer Engine fuses into the GEMMs). Each frees a whole
    /// activation for a memory-bound kernel or a small GEMM run again; NVIDIA's recipes pick from
    /// them (Megatron-Bridge DeepSeek-V3 `["mla_up_proj"]`, GPT-OSS `["layernorm", "moe_act"]`).
    /// `None` for a hybrid Mamba-Transformer stack: its selective recompute stays Megatron-Core's
    /// default (`core_attn`) unless the modules are listed (NVIDIA's Nemotron 3 recipes list
    /// theirs, `cost::module_recompute` prices them on the stack's blocks).
    pub fn output_discarding_for(model: &Model) -> Option<RecomputeModules> {
        if model.hybrid.is_some() {
            return None;
        }
        let mut bits = 0u8;
        if model.mla.is_some() {
            bits |= RecomputeModule::MlaUpProj.bit();
        }
        if model.moe.is_some() {
            bits |= RecomputeModule::MoeAct.bit();
        }
        if model.mla.is_some() || model.moe.is_some() {
            bits |= RecomputeModule::Layernorm.bit();
        }
        (bits != 0).then_some(RecomputeModules(bits))
    }

    /// The modules this model has nothing for, as Megatron-Core refuses them (or, for the MoE
    /// modules on a dense model, as they would do nothing). `Err` says which and why.
    pub fn check_model(self, model: &Model) -> Result<(), String> {
        if self.contains(RecomputeModule::MlaUpProj) && model.mla.is_none() {
            return Err(
                "mla_up_proj needs multi-latent attention (Megatron-Core: \"mla_up_proj in recompute_modules is only supported with multi_latent_attention\"); this model has none".into(),
            );
        }
        let moe_modules = [
            RecomputeModule::MoeAct,
            RecomputeModule::Moe,
            RecomputeModule::SharedExperts,
        ];
        if model.moe.is_none()
            && let Some(module) = moe_modules.into_iter().find(|m| self.contains(*m))
        {
            return Err(format!(
                "{} recomputes part of an MoE layer; this model is dense",
                module.as_str()
            ));
        }
        if self.contains(RecomputeModule::SharedExperts)
            && model.moe.is_some()
            && !model.has_shared_experts()
        {
            return Err("shared_experts recomputes the shared experts; this model has none".into());
        }
        Ok(())
    }
}

impl Serialize for RecomputeModules {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(RecomputeModule::as_str))
    }
}

/// One entry of a file's `recompute_modules` list, checked as it is read, so that a name no
/// module has is reported at its own line of the file, not at the file's first key.
struct ModuleEntry(String);

impl<'de> Deserialize<'de> for ModuleEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entry = String::deserialize(deserializer)?;
        // The reader names the key and the position (`p.yaml:21:20: recompute_modules: ...`).
        RecomputeModules::parse(std::slice::from_ref(&entry)).map_err(serde::de::Error::custom)?;
        Ok(ModuleEntry(entry))
    }
}

impl<'de> Deserialize<'de> for RecomputeModules {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<ModuleEntry>::deserialize(deserializer)?;
        let names: Vec<String> = entries.into_iter().map(|ModuleEntry(name)| name).collect();
        RecomputeModules::parse(&names)
            .map_err(|why| serde::de::Error::custom(format!("recompute_modules: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_megatron_order() {
        let modules = RecomputeModules::parse(&["layernorm,moe_act", "mla_up_proj"]).unwrap();
        assert_eq!(modules.megatron_words(), "moe_act layernorm mla_up_proj");
        let json = serde_json::to_string(&modules).unwrap();
        assert_eq!(json, r#"["moe_act","layernorm","mla_up_proj"]"#);
        let back: RecomputeModules = serde_json::from_str(&json).unwrap();
        assert_eq!(back, modules);
        assert!(
            RecomputeModules::parse(&["core_attn"])
                .unwrap()
                .is_core_attn_only()
        );
    }

    #[test]
    fn unknown_and_empty_lists_are_refused() {
        let err = RecomputeModules::parse(&["moe_act", "attention"]).unwrap_err();
        assert!(
            err.contains("'attention'") && err.contains("core_attn"),
            "{err}"
        );
        assert!(RecomputeModules::parse(&[","]).is_err());
        assert!(serde_json::from_str::<RecomputeModules>(r#"["mlp2"]"#).is_err());
    }
}
