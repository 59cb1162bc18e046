//! The fix offered for a `model_type` tpsim does not read: the shape flags with this config's own
//! values ([`shape_flags`]), so the user is not left to find and copy each number by hand.

use serde_json::{Map, Value};

/// `--flag value` for each shape key the config gives as a positive whole number, under the key
/// names transformers' config classes use (`num_hidden_layers`, `hidden_size`, ...; GPT-2's
/// `n_layer`/`n_embd`/`n_head`; the MoE keys of MixtralConfig `num_local_experts`, Qwen2MoeConfig
/// / Qwen3NextConfig `num_experts` and `shared_expert_intermediate_size`, DeepseekV3Config
/// `n_routed_experts`, `n_shared_experts` (shared experts of `moe_intermediate_size` each,
/// `DeepseekV3MoE`) and `first_k_dense_replace`, Ernie4_5_MoeConfig `moe_num_experts`, `moe_k`,
/// `moe_num_shared_experts` and `moe_layer_start_index` (its dense layers in front), Llama4TextConfig
/// `intermediate_size_mlp` (the dense layers' width, its `intermediate_size` then the experts' and
/// the one shared expert's, `Llama4TextMoe`) and `interleave_moe_layer_step`, HunYuanMoEV1Config
/// `moe_topk` (and its Hub config's `num_shared_expert` shared experts), a per-layer list taken
/// when its values agree ([`whole_count`]); experts `intermediate_size` wide, Mixtral's convention,
/// where no `moe_intermediate_size` is given. Where the config has
/// `rms_norm_eps`, the mark of the RMSNorm/RoPE/SwiGLU block: `--style llama --gated-mlp` (untied
/// output), or with `tie_word_embeddings` true Megatron-LM's switches for the same block with the
/// output tied to the embedding, so the flags count the config's parameters. None when the config
/// gives no layer count, hidden size or head count.
pub(super) fn shape_flags(obj: &Map<String, Value>) -> Option<String> {
    // The first key that holds a count, or a per-layer list of one: a list whose values differ
    // gives no flag (said by [`per_layer_lists_that_differ`]) rather than the next key's value
    // (Hunyuan's `moe_intermediate_size` list then offered `intermediate_size`, the dense width).
    let count = |keys: &[&str]| {
        keys.iter()
            .filter_map(|k| obj.get(*k))
            .find(|v| v.is_array() || whole_count(v).is_some())
            .and_then(whole_count)
    };
    let mut flags = Vec::new();
    if obj.contains_key("rms_norm_eps") {
        let tied = obj.get("tie_word_embeddings").and_then(Value::as_bool) == Some(true);
        flags.push(
            if tied {
                // `--style llama` unties the output layer (`scenario::resolve_shaped_model`).
                "--gated-mlp --disable-bias-linear --normalization RMSNorm --position-embedding-type rope --hidden-dropout 0 --attention-dropout 0"
            } else {
                "--style llama --gated-mlp"
            }
            .to_string(),
        );
    }
    let mut push = |flag: &str, n: Option<u64>| -> bool {
        match n {
            Some(n) => {
                flags.push(format!("{flag} {n}"));
                true
            }
            None => false,
        }
    };
    let shape = push(
        "--layers",
        count(&["num_hidden_layers", "n_layer", "num_layers"]),
    ) & push("--hidden", count(&["hidden_size", "n_embd", "d_model"]))
        & push("--heads", count(&["num_attention_heads", "n_head"]));
    if !shape {
        return None;
    }
    // Llama 4: `intermediate_size_mlp` is the dense layers' MLP, `intermediate_size` each expert's.
    let llama4 = count(&["intermediate_size_mlp"]).is_some();
    push("--kv-heads", count(&["num_key_value_heads"]));
    push("--head-dim", count(&["head_dim"]));
    push(
        "--ffn-hidden",
        count(&[
            "intermediate_size_mlp",
            "intermediate_size",
            "n_inner",
            "ffn_hidden_size",
        ]),
    );
    push("--vocab", count(&["vocab_size"]));
    let experts = push(
        "--num-experts",
        count(&[
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
        ]),
    );
    let mut notes = Vec::new();
    if experts {
        // A top-k past the expert count is refused by the flags' own check (`Model::check`: a
        // token is routed to at most every expert), so it is said rather than offered.
        let topk = count(&["num_experts_per_tok", "moe_k", "moe_topk"]);
        let expert_count = count(&[
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
        ]);
        match (topk, expert_count) {
            (Some(k), Some(e)) if k > e => notes.push(format!(
                "its top-k {k} is more than its {e} experts, which a token is routed to at most, so no --moe-router-topk is offered: give the one to price"
            )),
            _ => {
                push("--moe-router-topk", topk);
            }
        }
        // Mixtral's and Hunyuan's experts are `intermediate_size` wide (`MixtralExperts`, which
        // `HunYuanMoEV1Experts` reuses) where no `moe_intermediate_size` is given.
        let expert_width = if llama4 {
            count(&["intermediate_size"])
        } else {
            count(&["moe_intermediate_size", "intermediate_size"])
        };
        push("--moe-ffn-hidden-size", expert_width);
        let shared = count(&["shared_expert_intermediate_size"])
            .or_else(|| {
                Some(
                    count(&[
                        "n_shared_experts",
                        "moe_num_shared_experts",
                        "num_shared_expert",
                    ])? * expert_width?,
                )
            })
            // Llama 4's one shared expert, as wide as a routed one (`Llama4TextMoe`).
            .or(expert_width.filter(|_| llama4));
        push("--moe-shared-expert-intermediate-size", shared);
        // The dense layers in front: DeepseekV3Config's `first_k_dense_replace`,
        // Ernie4_5_MoeConfig's `moe_layer_start_index`.
        push(
            "--moe-first-k-dense-replace",
            count(&["first_k_dense_replace", "moe_layer_start_index"]),
        );
        if llama4 {
            push("--moe-layer-freq", count(&["interleave_moe_layer_step"]));
        }
    }
    let mut words = flags.join(" ");
    notes.extend(per_layer_lists_that_differ(obj));
    notes.extend(per_layer_lists_unread(obj));
    if !notes.is_empty() {
        words.push_str(&format!(" ({})", notes.join("; and ")));
    }
    Some(words)
}

/// The per-layer lists of one count that differ between layers (HunYuanMoEV1Config's `moe_topk`
/// "List form enables layer-wise customization"), which [`whole_count`] leaves out because one flag
/// holds one value: said, so the flag's default is not taken for the config's value unawares.
fn per_layer_lists_that_differ(obj: &Map<String, Value>) -> Option<String> {
    let differing: Vec<String> = PER_LAYER_COUNTS
        .iter()
        .filter_map(|key| {
            let items = obj.get(*key)?.as_array()?;
            let counts: Vec<u64> = items.iter().map(Value::as_u64).collect::<Option<_>>()?;
            let least = *counts.iter().min()?;
            let most = *counts.iter().max()?;
            (least != most).then(|| format!("{key} runs from {least} to {most}"))
        })
        .collect();
    (!differing.is_empty()).then(|| {
        format!(
            "its per-layer {}: one flag holds one value, so give the one to price",
            differing.join(", ")
        )
    })
}

/// The counts a per-layer list may hold (HunYuan's Hub configs list `moe_topk`,
/// `moe_intermediate_size` and `num_shared_expert`); a list under another key (`eos_token_id`'s
/// token ids) is not one.
const PER_LAYER_COUNTS: [&str; 6] = [
    "moe_topk",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "num_shared_expert",
    "num_experts",
    "intermediate_size",
];

/// The per-layer lists of one count that hold no count to offer: empty, or with an item that is
/// not a positive whole number (`[0]`, `["8"]`, `[8.0]`, `[1e3]`, `[[8]]`, `[null]`).
/// [`whole_count`] leaves them out as it does lists that differ, so they are said likewise: the
/// flag's default was taken for the config's value unawares (`moe_topk: []` gave flags without
/// `--moe-router-topk`, which then ran at tpsim's default top-k). A list of no shared experts
/// (`num_shared_expert` all 0) is the flag's default, none, and needs no word.
fn per_layer_lists_unread(obj: &Map<String, Value>) -> Option<String> {
    let unread: Vec<String> = PER_LAYER_COUNTS
        .iter()
        .filter_map(|key| {
            let items = obj.get(*key)?.as_array()?;
            if *key == "num_shared_expert" && items.iter().all(|v| v.as_u64() == Some(0)) {
                return None;
            }
            if items.is_empty() {
                return Some(format!("{key} is an empty list"));
            }
            let (layer, item) = items
                .iter()
                .enumerate()
                .find(|(_, v)| v.as_u64().is_none_or(|n| n == 0))?;
            let mut shown: String = item.to_string().chars().take(40).collect();
            if shown.len() < item.to_string().len() {
                shown.push_str("...");
            }
            Some(format!(
                "{key}[{layer}] is {shown}, not a positive whole number"
            ))
        })
        .collect();
    (!unread.is_empty()).then(|| {
        format!(
            "its per-layer {}: tpsim reads no count there, so no flag is offered for it: give the one to price",
            unread.join(", ")
        )
    })
}

/// A positive whole number, or a per-layer list of one positive whole number (HunYuanMoEV1Config's
/// `moe_topk` "List form enables layer-wise customization", and its Hub config's
/// `moe_intermediate_size` and `num_shared_expert`): one flag holds it only when every layer has the
/// same value, so a list of differing values gives none.
fn whole_count(value: &Value) -> Option<u64> {
    let positive = |v: &Value| v.as_u64().filter(|n| *n > 0);
    match value {
        Value::Array(items) => {
            let first = positive(items.first()?)?;
            items
                .iter()
                .all(|item| positive(item) == Some(first))
                .then_some(first)
        }
        _ => positive(value),
    }
}
