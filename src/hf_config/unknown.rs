//! The fix offered for a `model_type` tpsim does not read: the shape flags with this config's own
//! values ([`shape_flags`]), so the user is not left to find and copy each number by hand.

use serde_json::{Map, Value};

/// `--flag value` for each shape key the config gives as a positive whole number, under the key
/// names transformers' config classes use (`num_hidden_layers`, `hidden_size`, ...; GPT-2's
/// `n_layer`/`n_embd`/`n_head`; the MoE keys of MixtralConfig `num_local_experts`, Qwen2MoeConfig
/// / Qwen3NextConfig `num_experts` and `shared_expert_intermediate_size`, DeepseekV3Config
/// `n_routed_experts`, `n_shared_experts` (shared experts of `moe_intermediate_size` each,
/// `DeepseekV3MoE`) and `first_k_dense_replace`, Ernie4_5_MoeConfig `moe_num_experts` / `moe_k`). `--style llama
/// --gated-mlp` (RMSNorm, RoPE, SwiGLU, untied output) where the config has `rms_norm_eps`, the
/// mark of that block (an untied output layer said as such where the config ties it). None when the config gives no layer count, hidden size or head count.
pub(super) fn shape_flags(obj: &Map<String, Value>) -> Option<String> {
    let count = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_u64).filter(|n| *n > 0))
    };
    let mut flags = Vec::new();
    if obj.contains_key("rms_norm_eps") {
        flags.push("--style llama --gated-mlp".to_string());
    }
    let mut push = |flag: &str, keys: &[&str]| -> bool {
        match count(keys) {
            Some(n) => {
                flags.push(format!("{flag} {n}"));
                true
            }
            None => false,
        }
    };
    let shape = push("--layers", &["num_hidden_layers", "n_layer", "num_layers"])
        & push("--hidden", &["hidden_size", "n_embd", "d_model"])
        & push("--heads", &["num_attention_heads", "n_head"]);
    if !shape {
        return None;
    }
    push("--kv-heads", &["num_key_value_heads"]);
    push("--head-dim", &["head_dim"]);
    push(
        "--ffn-hidden",
        &["intermediate_size", "n_inner", "ffn_hidden_size"],
    );
    push("--vocab", &["vocab_size"]);
    let experts = push(
        "--num-experts",
        &[
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
        ],
    );
    if experts {
        push("--moe-router-topk", &["num_experts_per_tok", "moe_k"]);
        push("--moe-ffn-hidden-size", &["moe_intermediate_size"]);
        let shared = count(&["shared_expert_intermediate_size"])
            .or_else(|| Some(count(&["n_shared_experts"])? * count(&["moe_intermediate_size"])?));
        if let Some(n) = shared {
            flags.push(format!("--moe-shared-expert-intermediate-size {n}"));
        }
        // DeepseekV3Config's dense layers in front (`first_k_dense_replace`).
        if let Some(k) = count(&["first_k_dense_replace"]) {
            flags.push(format!("--moe-first-k-dense-replace {k}"));
        }
    }
    let mut flags = flags.join(" ");
    if obj.contains_key("rms_norm_eps")
        && obj.get("tie_word_embeddings").and_then(Value::as_bool) == Some(true)
    {
        // `--style llama` counts an output layer apart from the embedding.
        flags.push_str(" (an output layer apart from the embedding, which this config ties)");
    }
    Some(flags)
}
