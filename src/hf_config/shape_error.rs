//! A shape [`Model`] refuses, told in the config's own keys (`key_of`, `shape_error`), and the
//! activation check.

use crate::model::ModelError;

use super::error::HfConfigError;
use super::family::Family;
use super::reader::Reader;

impl Reader<'_> {
    /// `Model::check_hybrid`'s words, which name a model file's `hybrid:` keys (`mamba_heads`,
    /// `mamba_groups`, ...), in the Nemotron-H config's keys (`mamba_num_heads`, `n_groups` or
    /// `mamba_n_groups`, ...; `Reader::nemotron_h` reads them): the message named keys the config
    /// does not have.
    fn hybrid_words_in_config_keys(&self, words: &str) -> String {
        let present = |keys: &[&'static str]| {
            keys.iter()
                .copied()
                .find(|k| self.obj.contains_key(*k))
                .unwrap_or(keys[0])
        };
        let mut said = words.to_string();
        for (file_key, config_keys) in [
            ("mamba_heads", &["mamba_num_heads"][..]),
            ("mamba_head_dim", &["mamba_head_dim"][..]),
            ("mamba_state_dim", &["ssm_state_size"][..]),
            ("mamba_groups", &["n_groups", "mamba_n_groups"][..]),
            ("mamba_conv_kernel", &["conv_kernel", "mamba_d_conv"][..]),
        ] {
            let key = present(config_keys);
            said = said
                .replace(&format!("hybrid {file_key} "), &format!("key \"{key}\" "))
                .replace(
                    &format!("multiple of {file_key} "),
                    &format!("multiple of \"{key}\" "),
                );
        }
        // The pattern is named by the key it came from (`Reader::hybrid_pattern`): the string, the
        // per-layer list, or the class's default where the config gives neither; the rule by
        // what that key holds, not by Megatron-Core's `--hybrid-override-pattern` flag.
        let given = |key: &str| self.obj.get(key).is_some_and(|v| !v.is_null());
        let (named, written_as, units) = if given("hybrid_override_pattern") {
            (
                "key \"hybrid_override_pattern\" ".to_string(),
                "a \"hybrid_override_pattern\" of",
                "symbols",
            )
        } else if given("layers_block_type") {
            (
                "key \"layers_block_type\" (as a pattern: ".to_string(),
                "a \"layers_block_type\" of",
                "entries",
            )
        } else {
            (
                "NemotronHConfig's default \"hybrid_override_pattern\" (the config gives none) "
                    .to_string(),
                "a \"hybrid_override_pattern\" of",
                "symbols",
            )
        };
        if let Some(rest) = said.strip_prefix("hybrid pattern ") {
            said = if units == "entries" {
                // `"ME*" has ...` -> `(as a pattern: "ME*") has ...`.
                match rest.find("\" ") {
                    Some(end) => format!("{named}{}){}", &rest[..=end], &rest[end + 1..]),
                    None => format!("{named}{rest})"),
                }
            } else {
                format!("{named}{rest}")
            };
        }
        // The pattern's length against the layer count names the flag and the model file's word
        // (`give --layers N or a pattern of L symbols`): said as the config's two keys.
        said.replace(
            " (rule: one symbol per layer, as Megatron-Core's --hybrid-override-pattern)",
            " (rule: one block per layer)",
        )
        .replace(
            "; give --layers ",
            &format!(
                "; give \"{}\": ",
                self.key_of("--layers", Family::NemotronH)
            ),
        )
        .replace(" or a pattern of ", &format!(" or {written_as} "))
        .replace("; write a pattern of ", &format!("; write {written_as} "))
        .replace(" symbols", &format!(" {units}"))
        .replace(
            " (M Mamba-2, * attention, - MLP, E MoE)",
            if units == "entries" {
                " (\"mamba\", \"attention\", \"mlp\", \"moe\")"
            } else {
                " (M Mamba-2, * attention, - MLP, E MoE)"
            },
        )
    }

    /// The config key a shape field came from (the first of the family's names present).
    fn key_of(&self, field: &str, family: Family) -> &'static str {
        let candidates: &[&'static str] = match (field, family) {
            ("--layers", Family::Gpt2) => &["n_layer", "num_hidden_layers"],
            ("--layers", Family::Falcon) => &["num_hidden_layers", "n_layer"],
            ("--layers", _) => &["num_hidden_layers"],
            ("--hidden", Family::Gpt2) => &["n_embd", "hidden_size"],
            ("--hidden", _) => &["hidden_size"],
            ("--heads", Family::Gpt2) => &["n_head", "num_attention_heads"],
            ("--heads", Family::Falcon) => &["num_attention_heads", "n_head"],
            ("--heads", _) => &["num_attention_heads"],
            ("--kv-heads", Family::Falcon) => &["num_kv_heads"],
            ("--kv-heads", _) => &["num_key_value_heads"],
            ("--ffn-hidden", Family::Gpt2) => &["n_inner"],
            ("--ffn-hidden", Family::Falcon) => &["ffn_hidden_size"],
            ("--ffn-hidden", _) => &["intermediate_size"],
            ("--vocab", _) => &["vocab_size"],
            ("--head-dim", _) => &["head_dim"],
            ("--num-experts", Family::DeepseekV3 | Family::NemotronH) => &["n_routed_experts"],
            ("--num-experts", Family::Glm4Moe) => &["n_routed_experts", "num_experts"],
            ("--num-experts", _) => &["num_experts", "num_local_experts"],
            ("--moe-router-topk", _) => &["num_experts_per_tok"],
            ("--moe-ffn-hidden-size", Family::LlamaLike | Family::GptOss) => {
                &["moe_intermediate_size", "intermediate_size"]
            }
            ("--moe-ffn-hidden-size", _) => &["moe_intermediate_size"],
            // The shared experts' width: Nemotron-H's n_shared_experts x
            // moe_shared_expert_intermediate_size, DeepSeek's and GLM's n_shared_experts x
            // moe_intermediate_size, Qwen2-MoE's shared_expert_intermediate_size.
            ("--moe-shared-expert-intermediate-size", Family::NemotronH) => {
                &["moe_shared_expert_intermediate_size", "n_shared_experts"]
            }
            ("--moe-shared-expert-intermediate-size", Family::DeepseekV3 | Family::Glm4Moe) => {
                &["n_shared_experts", "moe_intermediate_size"]
            }
            ("--moe-shared-expert-intermediate-size", _) => &["shared_expert_intermediate_size"],
            ("--moe-layer-freq", _) => &["moe_layer_freq"],
            ("--moe-latent-size", _) => &["moe_latent_size"],
            ("--kv-lora-rank", _) => &["kv_lora_rank"],
            ("--q-lora-rank", _) => &["q_lora_rank"],
            ("--qk-head-dim", _) => &["qk_nope_head_dim"],
            ("--qk-pos-emb-head-dim", _) => &["qk_rope_head_dim"],
            ("--v-head-dim", _) => &["v_head_dim"],
            ("--mtp-layers", _) => &["num_nextn_predict_layers"],
            (_, Family::Gpt2) => &["n_positions"],
            _ => &["max_position_embeddings"],
        };
        candidates
            .iter()
            .copied()
            .find(|k| self.obj.contains_key(*k))
            .unwrap_or(candidates[0])
    }

    /// A shape the model check refuses, told in the config's keys (the user wrote no flags).
    pub(super) fn shape_error(
        &self,
        e: ModelError,
        family: Family,
        seq_from_user: bool,
    ) -> HfConfigError {
        let message = match e {
            // The sequence came from --seq-len: the flag's own message quotes the user's value.
            ModelError::TooLarge { what, .. } | ModelError::Zero { what, .. }
                if what == "--seq-len" && seq_from_user =>
            {
                e.to_string()
            }
            ModelError::TooLarge { what, value, max } => {
                let key = self.key_of(what, family);
                let fix = if what == "--seq-len" {
                    "pass --seq-len to train on shorter sequences"
                } else {
                    "check the config"
                };
                format!(
                    "key \"{key}\" is {value}, larger than {max}, beyond any model trained; {fix}"
                )
            }
            ModelError::Zero { what, .. } => format!(
                "key \"{}\" is 0; it must be a positive integer",
                self.key_of(what, family)
            ),
            ModelError::HiddenNotDivisibleByHeads {
                hidden,
                heads,
                suggest,
            } => {
                let key = self.key_of("--heads", family);
                format!(
                    "key \"{}\" {hidden} is not divisible by \"{key}\" {heads}; the head dimension must be whole (e.g. \"{key}\": {suggest})",
                    self.key_of("--hidden", family),
                )
            }
            // An absent key is the config class's default, not a value the config gives.
            ModelError::KvHeadsNotDivisor { kv_heads, heads }
                if !self.obj.contains_key(self.key_of("--kv-heads", family)) =>
            {
                let key = self.key_of("--kv-heads", family);
                format!(
                    "the config has no \"{key}\", and transformers' config class then uses its default of {kv_heads}, which does not divide \"{}\" {heads} (grouped-query attention shares each key/value head among heads/kv_heads query heads); add \"{key}\" with a divisor of {heads}, e.g. \"{key}\": {}",
                    self.key_of("--heads", family),
                    crate::model::divisor_at_most(&heads, &kv_heads)
                )
            }
            ModelError::KvHeadsNotDivisor { kv_heads, heads } => {
                let key = self.key_of("--kv-heads", family);
                format!(
                    "key \"{key}\" {kv_heads} must divide \"{}\" {heads} (grouped-query attention shares each key/value head among heads/kv_heads query heads); give a divisor of {heads}, e.g. \"{key}\": {}",
                    self.key_of("--heads", family),
                    crate::model::divisor_at_most(&heads, &kv_heads)
                )
            }
            // Only a flag over the config can ask for KV groups on latent attention.
            ModelError::KvHeadsWithLatentAttention { .. }
            | ModelError::HeadDimWithLatentAttention { .. }
            | ModelError::HeadDimBelowRotaryPair { .. } => e.to_string(),
            // The reader checks partial_rotary_factor / rotary_pct itself, in the config's words.
            ModelError::RotaryPercentRange { .. }
            | ModelError::RotaryPercentWithoutRope { .. }
            | ModelError::RotaryPercentWithLatentAttention { .. } => e.to_string(),
            // The reader checks rope_theta itself (`Reader::rope_theta`), in the config's words.
            ModelError::RotaryBaseRange { .. } | ModelError::RotaryBaseWithoutRope { .. } => {
                e.to_string()
            }
            // The hybrid check names a model file's keys; said in the config's.
            ModelError::Hybrid(words) => self.hybrid_words_in_config_keys(&words),
            ModelError::RotaryPercentBelowOnePair {
                value,
                rotated,
                head_dim,
            } => {
                let key = ["partial_rotary_factor", "rotary_pct"]
                    .into_iter()
                    .find(|k| self.obj.contains_key(*k))
                    .unwrap_or("partial_rotary_factor");
                format!(
                    "key \"{key}\" is {}, which rotates {rotated} of the {head_dim} dimensions of each head (transformers rotates int({key} x head_dim) of them, in pairs); give at least {}, or drop it to rotate the whole head",
                    crate::units::show_number(value),
                    crate::units::show_number(2.0 / f64::from(head_dim))
                )
            }
            ModelError::RouterGroups {
                groups,
                group_topk,
                experts,
                topk,
                rule,
            } => {
                // A key the config leaves out holds the config class's default (`class_default`),
                // which the fix then has to write into the config.
                let said = |key: &str, value: u32| {
                    if self.obj.contains_key(key) {
                        format!("\"{key}\" {value}")
                    } else {
                        format!(
                            "\"{key}\" {value} (not in the config: transformers' default, so add the key to change it)"
                        )
                    }
                };
                format!(
                    "keys {} / {} with {experts} experts, top-{topk}: {rule}",
                    said("n_group", groups),
                    said("topk_group", group_topk)
                )
            }
            ModelError::TopkAboveExperts { topk, experts, .. } => format!(
                "key \"{}\" {topk} is more than \"{}\" {experts}; a token is routed to at most every expert",
                self.key_of("--moe-router-topk", family),
                self.key_of("--num-experts", family)
            ),
            ModelError::NoMoeLayer {
                first_dense,
                layers,
                ..
            } => format!(
                "{first_dense} dense layers (\"first_k_dense_replace\" / \"mlp_only_layers\") leave no MoE layer among the {layers} layers; check the config"
            ),
            ModelError::LatentWiderThanHidden { latent, hidden } => format!(
                "key \"{}\" {latent} is wider than \"{}\" {hidden} (rule: LatentMoE projects each token down from the model's width to a narrower latent width for the routed experts, Nemotron 3 Super: hidden_size 4096, moe_latent_size 1024); give a latent width below {hidden}, e.g. {}, or null for experts on the model's width",
                self.key_of("--moe-latent-size", family),
                self.key_of("--hidden", family),
                (hidden / 4).max(1)
            ),
            // Only flags and model files raise these; a config never does.
            ModelError::MoeFlagWithoutExperts { .. }
            | ModelError::ExpertsBelowTopk { .. }
            | ModelError::MlaFlagWithoutKvLoraRank { .. }
            | ModelError::WindowFlagWithoutWindow
            | ModelError::PositionKeysDisagree { .. }
            | ModelError::PositionUnsaid => e.to_string(),
        };
        HfConfigError::Unsupported {
            path: self.path.to_string(),
            message,
        }
    }

    /// The activation decides nothing in the count once the gating is known, but an activation we
    /// do not recognise probably means a layout we do not either.
    pub(super) fn check_activation(&self) -> Result<(), HfConfigError> {
        const KNOWN: &[&str] = &[
            "silu",
            "swish",
            "gelu",
            "gelu_new",
            "gelu_fast",
            "gelu_pytorch_tanh",
            "gelu_python",
            "relu",
        ];
        for key in ["hidden_act", "hidden_activation", "activation_function"] {
            // A value that names no function (`5`, `["silu"]`) builds no model in transformers
            // (`ACT2FN[config.hidden_act]`): refused, not skipped. `null` is the class's None
            // (GemmaConfig's `hidden_activation`: its legacy default).
            let Some(value) = self.obj.get(key).filter(|v| !v.is_null()) else {
                continue;
            };
            let Some(act) = value.as_str() else {
                return Err(self.bad(key, value, "a string naming the activation (e.g. \"silu\")"));
            };
            if !KNOWN.contains(&act) {
                return Err(HfConfigError::Unsupported {
                    path: self.path.to_string(),
                    message: format!(
                        "{key} {act:?} is not one tpsim knows; known: {}",
                        KNOWN.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}
