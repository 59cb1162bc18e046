//! Which bundled GPU profile and model a run is planned on: its `hardware.gpu` and model keys
//! mapped to tpsim's specs, with the run's shape overrides applied.

use super::recipes;
use super::recipes::mtp_layers_of;
use super::{ModernRun, RunHardware};
use crate::model::{Model, ModelFile, ShapeOverrides};
use crate::plan::Precision;
use crate::specs;

/// Bundled profile of a GPU name as the runs spell it.
pub fn gpu_profile(name: &str) -> Option<&'static str> {
    RUN_GPUS
        .iter()
        .find(|(gpu, _)| *gpu == name)
        .map(|(_, profile)| *profile)
}

/// Bundled profiles of the GPUs whose published runs offload activations to the CPU
/// (Megatron-Bridge's recipes, `recipes::OFFLOAD_RECIPE_GPUS`): where `plan`'s offload note rests
/// on runs it is compared with.
pub fn offload_validated_profiles() -> impl Iterator<Item = &'static str> {
    recipes::OFFLOAD_RECIPE_GPUS
        .iter()
        .filter_map(|gpu| gpu_profile(gpu))
}

/// A runs file's `hardware.gpu` names, as written, and the bundled profile of each.
pub(super) const RUN_GPUS: [(&str, &str); 7] = [
    ("H100", "h100-sxm-80g"),
    ("H200", "h200-sxm-141g"),
    ("H800", "h800-sxm-80g"),
    ("B200", "b200-sxm-180g"),
    ("B300", "b300-sxm-288g"),
    ("GB200", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
];

/// Bundled profile of a run's hardware: its GPU name, except where the host is a known variant of
/// that GPU. An H100 with HBM2e is the 96 GB SXM part Meta runs at a 500 W power limit (torchtitan's
/// benchmark hosts: "96GB HBM2e", "the default 500W power limit", 2024-12 and 2025-06; "lower-TDP
/// HBM2e 95GB H100s", 2024-08), not the 700 W, 80 GB HBM3 DGX H100; `hardware.system` says which.
pub fn hardware_profile(hardware: &RunHardware) -> Option<&'static str> {
    let hbm2e = hardware
        .system
        .as_deref()
        .is_some_and(|system| system.contains("HBM2e"));
    match hardware.gpu.as_str() {
        "H100" if hbm2e => Some("h100-sxm-96g-500w"),
        name => gpu_profile(name),
    }
}

/// Bundled MoE model of a catalog key.
pub(super) fn bundled_moe(key: &str) -> Option<&'static str> {
    Some(match key {
        "deepseek_v3" => "deepseek-v3",
        "kimi_k2" => "kimi-k2",
        "qwen3_30b_a3b" => "qwen3-30b-a3b",
        "qwen3_235b_a22b" => "qwen3-235b-a22b",
        "gpt_oss_120b" => "gpt-oss-120b",
        "gpt_oss_20b" => "gpt-oss-20b",
        "grok1_314b" => "grok-1",
        _ => return None,
    })
}

/// Bundled hybrid Mamba-Transformer model of a catalog key (the runs files state no shape for
/// these: Megatron-Bridge loads them from their HF configs at run time).
pub(super) fn bundled_hybrid(key: &str) -> Option<&'static str> {
    Some(match key {
        "nemotron3_nano" => "nemotron-3-nano-30b-a3b",
        "nemotron3_super" => "nemotron-3-super-120b-a12b",
        "nemotron3_ultra" => "nemotron-3-ultra-550b-a55b",
        _ => return None,
    })
}

/// The model a run trains: a bundled hybrid model (its shape unstated in the runs file), a bundled MoE model (with the run's layer count, for the truncated
/// weak-scaling proxies), or a dense shape from the run's fields in the block style of its family
/// (Llama: SwiGLU, RMSNorm, RoPE, untied; GPT-3: GeLU, LayerNorm, biases, learned positions, tied;
/// Nemotron-4: squared-ReLU MLP, LayerNorm, RoPE, untied, no biases).
pub(super) fn model_of(run: &ModernRun) -> Result<Model, String> {
    let m = &run.model;
    if let Some(name) = run.model_key.as_deref().and_then(bundled_hybrid) {
        let mut model = specs::load_bundled_model(name).map_err(|e| e.to_string())?;
        model.seq_len = m.seq_len.unwrap_or(model.seq_len);
        model.mtp_layers = mtp_layers_of(run, &model);
        // The run's own fields (`model.seq_len: 0`) checked as a dense run's are: a bundled
        // model with seq_len 0 was priced at 0 tokens/s, a -100% error in the summary.
        model
            .check()
            .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))?;
        return Ok(model);
    }
    if m.moe.as_ref().is_some_and(|v| !v.is_null()) {
        let key = run.model_key.as_deref().unwrap_or("");
        let name = bundled_moe(key).ok_or_else(|| format!("MoE model {key} is not bundled"))?;
        let model = match &run.bundled_moe_model {
            Some(model) => model.clone(),
            None => specs::load_bundled_model(name).map_err(|e| e.to_string())?,
        };
        let layers = m.layers.unwrap_or(model.layers);
        let overrides = ShapeOverrides {
            layers: (layers != model.layers).then_some(layers),
            ..ShapeOverrides::default()
        };
        let mut model = if overrides == ShapeOverrides::default() {
            model
        } else {
            model
                .with_overrides(&overrides)
                .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))?
        };
        model.seq_len = m.seq_len.unwrap_or(model.seq_len);
        model.mtp_layers = mtp_layers_of(run, &model);
        // The run's own fields (`model.seq_len: 0`) checked as a dense run's are: a bundled
        // model with seq_len 0 was priced at 0 tokens/s, a -100% error in the summary.
        model
            .check()
            .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))?;
        return Ok(model);
    }
    if m.name.contains("Mamba") || m.name.contains("LatentMoE") {
        return Err("hybrid Mamba/LatentMoE model".into());
    }
    let llama = m.name.contains("Llama") || m.name.contains("Mistral");
    let gpt = m.name.starts_with("GPT");
    let file = ModelFile {
        rotary_base: None,
        name: m.name.clone(),
        description: None,
        source: None,
        published_params_b: None,
        published_active_params_b: None,
        layers: m.layers.unwrap_or(0),
        hidden: m.hidden.unwrap_or(0),
        heads: m.heads.unwrap_or(0),
        kv_heads: m.kv_heads,
        head_dim: m.head_dim,
        ffn_hidden: m.ffn_hidden,
        vocab: m.vocab.unwrap_or(256_000),
        seq_len: m.seq_len.unwrap_or(0),
        seq_len_assumed: false,
        gated_mlp: llama,
        linear_bias: gpt,
        qkv_bias: false,
        qk_norm: false,
        shared_layer_norm: false,
        tied_embeddings: gpt,
        position_embedding_type: Some(if gpt {
            crate::model::PositionEmbedding::LearnedAbsolute
        } else {
            crate::model::PositionEmbedding::Rope
        }),
        learned_position_embeddings: None,
        rotary_percent: None,
        norm: Some(if llama {
            crate::model::Norm::Rmsnorm
        } else {
            crate::model::Norm::Layernorm
        }),
        dropout: false,
        mla: None,
        moe: None,
        mtp_layers: 0,
        attention_window: None,
        hybrid: None,
    };
    Model::from_file(&file)
        .map_err(|e| crate::model_file_words::in_runs_file_model_words(&e.to_string()))
}

pub(super) fn precision_of(text: &str) -> Result<Precision, String> {
    Precision::ALL
        .into_iter()
        .find(|p| p.as_str() == text)
        .ok_or_else(|| format!("precision {text}"))
}
