//! A model check's message said in a model file's words. `Model::check` names each count by the
//! flag that sets it (`--seq-len 0 must be at least 1; ... e.g. --seq-len 2048`), which is right
//! for shape flags; for a model file (or a plan file's inline `model:`) it names the file's key
//! (`seq_len: 0`), the key the user has to change.

/// Each shape flag `Model::check` names, and the model-file key that sets the same count.
const FLAG_KEYS: [(&str, &str); 25] = [
    ("--layers", "layers"),
    ("--hidden", "hidden"),
    ("--heads", "heads"),
    ("--kv-heads", "kv_heads"),
    ("--head-dim", "head_dim"),
    ("--ffn-hidden", "ffn_hidden"),
    ("--vocab", "vocab"),
    ("--seq-len", "seq_len"),
    ("--mtp-layers", "mtp_layers"),
    ("--attention-window", "attention_window.tokens"),
    ("--window-attn-skip-freq", "attention_window.full_every"),
    ("--num-experts", "moe.experts"),
    ("--moe-router-topk", "moe.router_topk"),
    ("--moe-ffn-hidden-size", "moe.ffn_hidden"),
    ("--moe-layer-freq", "moe.layer_freq"),
    (
        "--moe-shared-expert-intermediate-size",
        "moe.shared_expert_ffn_hidden",
    ),
    ("--moe-first-k-dense-replace", "moe.first_dense_layers"),
    ("--moe-router-num-groups", "moe.router_groups"),
    ("--moe-router-group-topk", "moe.router_group_topk"),
    ("--moe-latent-size", "moe.latent_size"),
    ("--kv-lora-rank", "mla.kv_lora_rank"),
    ("--q-lora-rank", "mla.q_lora_rank"),
    ("--qk-head-dim", "mla.qk_head_dim"),
    ("--qk-pos-emb-head-dim", "mla.qk_pos_emb_head_dim"),
    ("--v-head-dim", "mla.v_head_dim"),
];

/// The shape flag that sets a model-file key (`moe.experts` → `--num-experts`).
pub fn flag_of_key(key: &str) -> Option<&'static str> {
    FLAG_KEYS
        .iter()
        .find(|(_, k)| *k == key)
        .map(|(flag, _)| *flag)
}

/// `message` with every shape flag said as its key under `prefix` (`""` for a model file,
/// `"model."` for a plan file's inline model): `--seq-len = 0` and `--seq-len 0` become
/// `seq_len: 0`, a flag alone (`drop --kv-heads`) its key.
pub fn in_model_file_words(message: &str, prefix: &str) -> String {
    in_file_keys(message, prefix, &FLAG_KEYS)
}

/// A model check's message said in a runs file's words (`model.hidden`, `model.heads`): a runs
/// file gives no head width that tpsim reads (the published-runs file has no `head_dim` key; the
/// current-stack file carries one for people and ignores it), so the check's "or give it with
/// --head-dim" is left out rather than said as a key that does nothing.
pub fn in_runs_file_model_words(message: &str) -> String {
    in_model_file_words(message, "model.").replace(", or give it with model.head_dim)", ")")
}

/// `message` with every flag of `keys` said as its key under `prefix`, as
/// [`in_model_file_words`] says the shape flags (a runs file names its plan's keys so too).
pub fn in_file_keys(message: &str, prefix: &str, keys: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        // The longest flag that ends where a word ends (`--heads` is not `--head-dim`'s start).
        let found = keys
            .iter()
            .filter(|(flag, _)| {
                tail.starts_with(flag)
                    && !tail[flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
            })
            .max_by_key(|(flag, _)| flag.len());
        let Some((flag, key)) = found else {
            out.push_str("--");
            rest = &tail[2..];
            continue;
        };
        out.push_str(prefix);
        out.push_str(key);
        let after = &tail[flag.len()..];
        let value_at = if after.starts_with(" = ") {
            Some(3)
        } else if after.starts_with(' ') {
            Some(1)
        } else {
            None
        };
        match value_at {
            Some(skip) if after[skip..].starts_with(|c: char| c.is_ascii_digit()) => {
                out.push_str(": ");
                rest = &after[skip..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_keys_with_their_values() {
        assert_eq!(
            in_model_file_words(
                "--seq-len 0 must be at least 1; give the sequence length, e.g. --seq-len 2048",
                ""
            ),
            "seq_len: 0 must be at least 1; give the sequence length, e.g. seq_len: 2048"
        );
        assert_eq!(
            in_model_file_words("--kv-heads 5 must divide --heads 32 (rule)", "model."),
            "model.kv_heads: 5 must divide model.heads: 32 (rule)"
        );
        assert_eq!(
            in_model_file_words("drop --kv-heads (or --head-dim), not --tp 8", ""),
            "drop kv_heads (or head_dim), not --tp 8"
        );
    }
}
