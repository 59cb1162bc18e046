//! The words of a Megatron-LM launch line one at a time, for [`super::megatron_args`]'s tokenizer
//! and its messages: a word that is a flag mistyped (a look-alike dash, one dash, none), what is
//! wrong with a count that does not parse, and a value that fits each flag for the examples.
//! Megatron-LM's argparse (`megatron/training/arguments.py`) refuses such words; tpsim would
//! otherwise skip them.

use super::megatron_args::{SWITCHES, VALUED};

/// What is wrong with `value` as the positive integer `--flag` takes, and an example; the shell
/// variable hint only for a value that is one (`$NL`, `${NL}`).
pub(super) fn not_a_count(flag: &str, value: &str) -> String {
    let example = example_value(flag);
    let why = if value.starts_with('$') {
        "is a shell variable, not a positive integer; expand shell variables first".to_string()
    } else if let Ok(n) = value.parse::<i128>() {
        match n {
            0 => "is not allowed: it must be at least 1".to_string(),
            n if n < 0 => "is negative: it must be a positive integer (at least 1)".to_string(),
            _ => format!("is too large: tpsim reads counts up to {}", u32::MAX),
        }
    } else if value.parse::<f64>().is_ok_and(f64::is_finite) {
        "is not a whole number: Megatron-LM reads it as an integer (at least 1)".to_string()
    } else {
        "is not a positive integer".to_string()
    };
    format!("--{flag} {value:?} {why} (e.g. --{flag} {example})")
}

/// A value that fits `--flag`, for the examples in messages.
pub(super) fn example_value(flag: &str) -> &'static str {
    match flag {
        "pipeline-model-parallel-layout" => "'Et*4|t*4|t*1L'",
        "window-size" => "'(127,0)'",
        "moe-layer-freq" => "'[0]*3+[1]*58'",
        "hidden-dropout" | "attention-dropout" => "0.0",
        "moe-expert-capacity-factor" => "1.25",
        "moe-token-drop-policy" => "probs",
        "moe-token-dispatcher-type" => "alltoall",
        "recompute-granularity" => "selective",
        "recompute-method" | "activations-checkpoint-method" => "uniform",
        "normalization" => "RMSNorm",
        "position-embedding-type" => "rope",
        "attention-backend" => "flash",
        "main-grads-dtype" | "main-params-dtype" | "exp-avg-dtype" | "exp-avg-sq-dtype" => "fp32",
        "data-parallel-sharding-strategy" => "optim_grads_params",
        "fp8-format" => "hybrid",
        "fp8-recipe" => "delayed",
        "fp4-format" => "e2m1",
        "fp4-recipe" => "nvfp4",
        "optimizer" => "adam",
        "hybrid-layer-pattern" | "hybrid-override-pattern" => "'M-M*'",
        "decoder-first-pipeline-num-layers" | "decoder-last-pipeline-num-layers" => "4",
        "num-layers" => "96",
        "hidden-size" => "12288",
        "num-attention-heads" => "96",
        "seq-length" | "max-position-embeddings" => "4096",
        "global-batch-size" => "512",
        "micro-batch-size" => "1",
        _ => "8",
    }
}

/// Characters that look like a dash but are not the ASCII hyphen argparse needs (Unicode dashes,
/// the minus sign, box-drawing lines, full-width hyphens), as word processors and chat clients
/// write `--` when a launch line is pasted through them.
pub(super) fn is_lookalike_dash(c: char) -> bool {
    matches!(
        c,
        '\u{2010}'
            ..='\u{2015}'
                | '\u{2212}'
                | '\u{2500}'
                | '\u{2501}'
                | '\u{FE58}'
                | '\u{FE63}'
                | '\u{FF0D}'
    )
}

/// Why `token`, a word that is no flag and no flag's value, looks like a flag Megatron-LM's
/// argparse would refuse (a flag written with a look-alike dash, one ASCII dash, or none), or
/// `None` for a word of the launch script around the arguments (`torchrun`, `pretrain_gpt.py`,
/// `${MODEL_ARGS[@]}`, `)`), which is skipped.
pub(super) fn mistyped_flag(token: &str) -> Option<String> {
    let bare = token.trim_matches(|c| c == '\'' || c == '"');
    let name = bare.trim_start_matches(|c: char| c == '-' || is_lookalike_dash(c));
    let name = name.split_once('=').map_or(name, |(n, _)| n);
    let known = VALUED.contains(&name) || SWITCHES.contains(&name) || name == "recompute-modules";
    if let Some(dash) = bare.chars().next().filter(|c| is_lookalike_dash(*c)) {
        return Some(format!(
            "starts with '{dash}' (U+{:04X}), which is not the ASCII hyphen: Megatron-LM's argparse refuses it and tpsim would skip it; write --{name}",
            u32::from(dash)
        ));
    }
    if known && bare.starts_with('-') {
        return Some(format!(
            "has one dash: Megatron-LM's argparse refuses it and tpsim would skip it; write --{name}"
        ));
    }
    if known && name.contains('-') && bare == name {
        return Some(format!(
            "is a Megatron-LM flag without its dashes, so tpsim would skip it; write --{name}"
        ));
    }
    None
}
