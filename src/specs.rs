//! Spec files: bundled models, GPU profiles and plans, by name or by path.
//!
//! The bundled files under `models/` and `clusters/` are compiled into the binary, so a release
//! binary copied to another machine still knows them. Unknown keys are errors (deny_unknown_fields);
//! malformed YAML is reported with file, line and column.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::cluster::GpuProfile;
use crate::input_file::{
    InputError, check_depth, escape, quote, read_spec_file_text, read_spec_text, sanitize_message,
};
use crate::model::{Model, ModelFile};
use crate::plan::PlanRequest;
use crate::training::{AttentionKernel, GradDtype};

/// Bundled model specs: (name, YAML text).
pub const BUNDLED_MODELS: &[(&str, &str)] = &[
    ("bloom-176b", include_str!("../models/bloom-176b.yaml")),
    ("deepseek-v3", include_str!("../models/deepseek-v3.yaml")),
    ("gpt-oss-120b", include_str!("../models/gpt-oss-120b.yaml")),
    ("gpt-oss-20b", include_str!("../models/gpt-oss-20b.yaml")),
    ("gpt3-175b", include_str!("../models/gpt3-175b.yaml")),
    ("grok-1", include_str!("../models/grok-1.yaml")),
    ("kimi-k2", include_str!("../models/kimi-k2.yaml")),
    ("llama3-8b", include_str!("../models/llama3-8b.yaml")),
    ("llama3-70b", include_str!("../models/llama3-70b.yaml")),
    ("llama3-405b", include_str!("../models/llama3-405b.yaml")),
    ("megatron-1t", include_str!("../models/megatron-1t.yaml")),
    (
        "mixtral-8x22b",
        include_str!("../models/mixtral-8x22b.yaml"),
    ),
    ("mixtral-8x7b", include_str!("../models/mixtral-8x7b.yaml")),
    ("mt-nlg-530b", include_str!("../models/mt-nlg-530b.yaml")),
    (
        "nemotron-3-nano-30b-a3b",
        include_str!("../models/nemotron-3-nano-30b-a3b.yaml"),
    ),
    (
        "nemotron-3-super-120b-a12b",
        include_str!("../models/nemotron-3-super-120b-a12b.yaml"),
    ),
    (
        "nemotron-3-ultra-550b-a55b",
        include_str!("../models/nemotron-3-ultra-550b-a55b.yaml"),
    ),
    (
        "nemotron-h-56b",
        include_str!("../models/nemotron-h-56b.yaml"),
    ),
    (
        "nemotron-h-8b",
        include_str!("../models/nemotron-h-8b.yaml"),
    ),
    (
        "qwen3-235b-a22b",
        include_str!("../models/qwen3-235b-a22b.yaml"),
    ),
    (
        "qwen3-30b-a3b",
        include_str!("../models/qwen3-30b-a3b.yaml"),
    ),
];

/// Bundled GPU/node profiles: (name, YAML text).
pub const BUNDLED_GPUS: &[(&str, &str)] = &[
    (
        "a100-sxm-40g",
        include_str!("../clusters/a100-sxm-40g.yaml"),
    ),
    (
        "a100-sxm-80g",
        include_str!("../clusters/a100-sxm-80g.yaml"),
    ),
    (
        "b200-sxm-180g",
        include_str!("../clusters/b200-sxm-180g.yaml"),
    ),
    (
        "b300-sxm-288g",
        include_str!("../clusters/b300-sxm-288g.yaml"),
    ),
    ("gb200-nvl72", include_str!("../clusters/gb200-nvl72.yaml")),
    ("gb300-nvl72", include_str!("../clusters/gb300-nvl72.yaml")),
    (
        "h100-sxm-80g",
        include_str!("../clusters/h100-sxm-80g.yaml"),
    ),
    (
        "h100-sxm-96g-500w",
        include_str!("../clusters/h100-sxm-96g-500w.yaml"),
    ),
    (
        "h200-sxm-141g",
        include_str!("../clusters/h200-sxm-141g.yaml"),
    ),
    (
        "h800-sxm-80g",
        include_str!("../clusters/h800-sxm-80g.yaml"),
    ),
    (
        "jean-zay-a100-80g",
        include_str!("../clusters/jean-zay-a100-80g.yaml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("unknown {kind} {name}{suggestion}; known: {known} (or give a path to a .yaml file)")]
    UnknownName {
        kind: &'static str,
        name: String,
        /// ` (did you mean h100-sxm-80g?)`, or empty: `bundled_like`.
        suggestion: String,
        known: String,
    },
    #[error(
        "{flag} {name}: no such file, and tpsim reads no Hugging Face Hub id (it works offline){suggestion}; give a bundled name or a {kind} YAML file{}",
        if *kind == "model" { ", or --hf-config with the model's config.json" } else { "" }
    )]
    HubId {
        flag: String,
        kind: &'static str,
        name: String,
        /// ` (did you mean llama3-405b?)`: `bundled_like` on the part after the `/`.
        suggestion: String,
    },
    #[error(
        "{flag} {name}: names both the bundled {kind} and the file {name} in this folder; write ./{name} to read the file, or move the file to use the bundled {kind}"
    )]
    Ambiguous {
        flag: String,
        kind: &'static str,
        name: String,
    },
    #[error(
        "{plan}: {key} {name} names both the bundled {kind} and the file {name} beside the plan file; write ./{name} to read the file, or move it to use the bundled {kind}"
    )]
    AmbiguousInPlan {
        plan: String,
        key: &'static str,
        kind: &'static str,
        name: String,
    },
    #[error(transparent)]
    Read(#[from] InputError),
    #[error("{origin}:{line}:{column}: {message}")]
    Yaml {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// A parser's error as a [`SpecError::Yaml`]: location in front, the message made safe to print
/// (quotes cut, control characters escaped). `text` is what was parsed: a key given twice is
/// reported at the start of its mapping, so its copies are found in the text (`yaml_keys`), and
/// without them the message gives no location rather than one that points at neither.
pub fn yaml_error(origin: &str, text: &str, err: &yaml_serde::Error) -> SpecError {
    let error = located_yaml_error(origin, err);
    let SpecError::Yaml {
        origin,
        line,
        column,
        message,
    } = error
    else {
        return error;
    };
    let message = unquoted_leading_zeros(text, line, column, message);
    let message = too_large_count(text, line, column, message);
    let message = tab_indentation(text, line, column, message);
    let raw = err.to_string();
    let Some(key) = raw
        .split_once("duplicate field `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(key, _)| key)
    else {
        return SpecError::Yaml {
            origin,
            line,
            column,
            message,
        };
    };
    match crate::yaml_keys::repeated_key(text, line, column, key) {
        Some(at) => SpecError::Yaml {
            origin,
            line: at.line,
            column: at.column,
            message: format!(
                "{message} ({})",
                if at.first_line == at.line {
                    format!("line {} gives it twice", at.line)
                } else {
                    format!("lines {} and {} both give it", at.first_line, at.line)
                }
            ),
        },
        None => SpecError::Invalid { origin, message },
    }
}

/// `tp: 007`, unquoted: YAML reads it as the text "007", and [`plain_words`] says the number is
/// in quotes, which it is not. Said as what it is, leading zeros, with the digits to write (and
/// `tp: "007"` is offered `tp: 7`, not the zeros again).
fn unquoted_leading_zeros(text: &str, line: usize, column: usize, message: String) -> String {
    const QUOTED: &str =
        "; the number is in quotes, so YAML reads it as text: write it without quotes (";
    let Some(at) = message.find(QUOTED) else {
        return message;
    };
    let value_start = char_at(text, line, column);
    let (head, fix) = message.split_at(at);
    let Some((key, value)) = fix[QUOTED.len()..]
        .strip_suffix(')')
        .and_then(|f| f.split_once(": "))
    else {
        return message;
    };
    let Some(plain) = crate::units::plain_digits_for(value) else {
        return message;
    };
    match value_start {
        // `tp: "007"`: unquoted it would still have its zeros.
        Some('"' | '\'') => format!("{head}{QUOTED}{key}: {plain})"),
        None => message,
        // `nodes: 00` is zero, which a count refuses: offering `nodes: 0` only moved the error.
        Some(_) if plain == "0" && POSITIVE_KEYS.contains(&key_of_path(key)) => format!(
            "{head}; {value} has leading zeros, so YAML reads it as text, not the number 0; a whole number is digits only, and {key} is 1 or more, so write e.g. {key}: 1"
        ),
        Some(_) => format!(
            "{head}; {value} has leading zeros, so YAML reads it as text, not the number {plain}; a whole number is digits only, so write {key}: {plain}"
        ),
    }
}

/// `num_gpus: 1e12` or `tp: 99999999999`: past the largest value of the key's whole-number
/// type, where serde names the type's range and the value as it read it (`1000000000000.0`),
/// with no fix. Said with the value as written, the largest the key takes and the fix.
fn too_large_count(text: &str, line: usize, column: usize, message: String) -> String {
    const EXPECTED: &str = ", expected a whole number from 0 to ";
    const EXPECTED_COUNT: &str = ", expected a whole number from 1 to ";
    // A whole number past 128 bits where the parser reads any value first (a plan file's inline
    // model): serde says only that it "expected any value".
    if let Some((path, _)) = message
        .strip_suffix("`, expected any value")
        .and_then(|head| head.split_once(": invalid type: integer `"))
        && let Some(written) = scalar_at(text, line, column)
    {
        let key = key_of_path(path);
        return format!(
            "{path}: {written} is past the largest whole number {key} takes; check the value"
        );
    }
    // A count key's range is said from 1 (`plain_words`).
    let Some((head, tail)) = message
        .split_once(EXPECTED)
        .or_else(|| message.split_once(EXPECTED_COUNT))
    else {
        return message;
    };
    let most: String = tail.chars().take_while(char::is_ascii_digit).collect();
    let Some((path, read)) = [
        ": invalid value: integer `",
        ": invalid type: integer `",
        ": invalid type: floating point `",
    ]
    .into_iter()
    .find_map(|form| head.split_once(form)) else {
        return message;
    };
    // `tp: -1e300` or `tp: -1.5`: negative, which `negative_count` says of whole numbers only.
    if read.starts_with('-')
        && let Some(written) = scalar_at(text, line, column).filter(|w| w.starts_with('-'))
    {
        return format!("{path}: {written} is negative; {}", negative_rule(path));
    }
    // The value as written (`1e300` is cut short in serde's message, `1000000000000.0` spelled
    // otherwise), and only when it is past the range: a fractional number within it is said by
    // `fractional_count`.
    let Some(written) = scalar_at(text, line, column).filter(|w| {
        w.parse::<f64>()
            .is_ok_and(|v| most.parse::<f64>().is_ok_and(|m| v > m))
    }) else {
        return message;
    };
    // A model's count (a model file's `moe.experts`, a plan file's `model.moe.experts`): told
    // the bound `Model::check` holds it to, far below its number type's, with a value that
    // passes (`moe.experts: 4294967296` was told 4294967295, which the check refuses too).
    let (prefix, model_key) = path
        .rsplit_once("model.")
        .map_or(("", path), |(head, key)| (&path[..head.len() + 6], key));
    if let Some(flag) = crate::model_file_words::flag_of_key(model_key)
        && let Some(max) = crate::model::shape_bound(flag)
    {
        return crate::model_file_words::in_model_file_words(
            &crate::model::too_large_words(flag, &written, max),
            prefix,
        );
    }
    // `plan.tp` or `runs[0].hardware.num_gpus`: the key as the file writes it.
    let key = key_of_path(path);
    let fix = match key {
        "num_gpus" => "give the run's GPU count, e.g. num_gpus: 8 for one DGX node".to_string(),
        "nodes" => "give the cluster's node count, e.g. nodes: 32".to_string(),
        // vpp is no share of the GPUs: it cuts each pipeline stage's layers into model chunks
        // (Narayanan et al. 2021 §2.2.2), so its bound is the stage's layers. A plan file names
        // them through `vpp_fix_for_file`.
        "vpp" | "vp" => format!(
            "{key} cuts each pipeline stage's layers into model chunks of at least one layer, so it is at most the layers per stage (layers / pp); give {key}: 1 (no interleaving) or up to the layers per stage"
        ),
        "tp" | "pp" | "cp" | "ep" | "etp" | "dp" => {
            format!("give a parallel degree that divides the GPUs, e.g. {key}: 8")
        }
        _ => "check the value".to_string(),
    };
    format!("{path}: {written} is more than {most}, the largest whole number {key} takes; {fix}")
}

/// The key a serde path ends in (`plan.tp` → `tp`, `runs[0].hardware.num_gpus` → `num_gpus`),
/// as the file writes it.
fn key_of_path(path: &str) -> &str {
    path.rsplit([' ', '.']).next().unwrap_or(path)
}

/// The characters from the parser's 1-based `line` and `column` to the end of that line: lines
/// as YAML breaks them (a lone CR too), the column counted in characters.
fn chars_from(text: &str, line: usize, column: usize) -> Option<Vec<char>> {
    let line = text
        .replace("\r\n", "\n")
        .split(['\n', '\r'])
        .nth(line.checked_sub(1)?)?
        .chars()
        .skip(column.checked_sub(1)?)
        .collect();
    Some(line)
}

/// The plain scalar that starts at the parser's 1-based `line` and `column`, as written (up to a
/// space, comment, comma or closing bracket).
fn scalar_at(text: &str, line: usize, column: usize) -> Option<String> {
    let written: String = chars_from(text, line, column)?
        .into_iter()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '#' | ',' | ']' | '}'))
        .collect();
    (!written.is_empty()).then_some(written)
}

/// The character at the parser's 1-based `line` and `column`.
fn char_at(text: &str, line: usize, column: usize) -> Option<char> {
    chars_from(text, line, column)?.first().copied()
}

/// A tab where YAML wants indentation: the parser says "found character that cannot start any
/// token" or "found a tab character that violates indentation", neither naming the fix.
fn tab_indentation(text: &str, line: usize, column: usize, message: String) -> String {
    let tab_here = char_at(text, line, column) == Some('\t');
    if message.contains("tab character")
        || (tab_here && message.starts_with("found character that cannot start any token"))
    {
        format!(
            "line {line} is indented with a tab, and YAML indents with spaces only; replace the tab with spaces"
        )
    } else {
        message
    }
}

fn located_yaml_error(origin: &str, err: &yaml_serde::Error) -> SpecError {
    let message = err.to_string();
    // An error of the whole text (two documents) has no location: none is made up ("f.yaml:0:0").
    let Some((line, column)) = err.location().map(|l| (l.line(), l.column())) else {
        let message = if message.contains("more than one document") {
            "holds more than one YAML document (a `---` line starts another); keep one document per file".to_string()
        } else {
            sanitize_message(&message)
        };
        return SpecError::Invalid {
            origin: quote(origin),
            message,
        };
    };
    // yaml_serde appends " at line L column C"; the location is already in front.
    let message = match message.rfind(" at line ") {
        Some(i) if line > 0 => &message[..i],
        _ => &message,
    };
    SpecError::Yaml {
        origin: quote(origin),
        line,
        column,
        message: sanitize_message(&plain_words(message)),
    }
}

/// Serde's type words said as a user reads them (`expected u32` is "a whole number from 0 to
/// 4294967295", `unit value` an empty value), and a number written in quotes named as such: YAML
/// reads `layers: "80"` as text, and tpsim does not turn text into a number behind the user's back.
fn plain_words(message: &str) -> String {
    let mut out = message.to_string();
    // The type serde expected, kept to tell whether the quoted text would be read unquoted.
    let mut expected_type = None;
    for (rust, words) in [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u64", "a whole number from 0 to 18446744073709551615"),
        ("usize", "a whole number from 0 to 18446744073709551615"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        let from = format!("expected {rust}");
        if let Some(at) = out.find(&from)
            && out[at + from.len()..].is_empty()
        {
            out.replace_range(at.., &format!("expected {words}"));
            expected_type = Some(rust);
        }
    }
    // A count key (`tp`, `micro_batch`, `layers`: [`POSITIVE_KEYS`]) starts at 1, so its range is
    // said from 1, the same rule as the fix that follows (`tp: ~` once read "expected a whole
    // number from 0 to 4294967295; tp takes a whole number of 1 or more").
    if expected_type.is_some_and(|rust| rust.starts_with('u'))
        && let Some((path, _)) = out.split_once(": invalid ")
        && POSITIVE_KEYS.contains(&key_of_path(path))
    {
        out = out.replacen(
            "expected a whole number from 0 to ",
            "expected a whole number from 1 to ",
            1,
        );
    }
    out = out.replace(
        "invalid type: unit value",
        "invalid type: an empty value (null)",
    );
    // A whole number past 128 bits is named with serde's type (`99999999999999999999 as u128`).
    out = out.replace("` as u128,", "`,").replace("` as i128,", "`,");
    // `<<: *defaults` is YAML 1.1's merge key, which the parser leaves as a key named `<<`; a
    // spec names every key it reads, so it is refused as such, with the fix.
    if let Some(at) = out.find("unknown field `<<`") {
        out.replace_range(
            at..,
            "`<<` is a YAML merge key, which tpsim does not expand; write the merged keys out in full in this mapping",
        );
    }
    // tpsim before the clamp's limit was kept wrote `moe: clamped_glu: true`, which left the limit
    // out of every launch line it wrote; the key is refused with the one that replaces it.
    if let Some(at) = out.find("unknown field `clamped_glu`") {
        out.replace_range(
            at..,
            "clamped_glu (an older tpsim key) is no longer read, as it kept no limit for the clamp; write the limit instead, glu_clamp_limit: 7.0 for GPT-OSS (its config.json swiglu_limit), or drop the line for no clamp",
        );
    }
    // `unknown field `recompte`, expected one of ...`: the keys are listed, and the fix is said too,
    // removing the line, or renaming it to the valid key it is a misspelling of (the one nearest,
    // when one is within an edit per four letters).
    if let Some(at) = out.find("unknown field `")
        && let Some((key, valid)) = out[at + 15..].split_once('`')
    {
        let key = key.to_string();
        let nearest = valid
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|name| (crate::emit::edit_distance(&key, name), name))
            .filter(|&(edits, _)| edits <= (key.chars().count() / 4).max(1))
            .min();
        let fix = match nearest {
            Some((_, name)) => format!(
                "; rename it to {name}: (the valid key nearest it), or remove the {key}: line"
            ),
            None => format!(
                "; remove the {key}: line (tpsim reads only the keys listed, so a key it does not read is an error, not ignored)"
            ),
        };
        out.push_str(&fix);
    }
    // `duplicate field `nodes``: the parser stops at the second; which one is meant is unclear.
    if let Some(at) = out.find("duplicate field `")
        && let Some((key, _)) = out[at + 17..].split_once('`')
    {
        let words = format!(
            "{key} is given twice in this mapping, so which value is meant is unclear; keep one {key}: line"
        );
        out.replace_range(at.., &words);
    }
    // `plan: missing field `pp``: which mapping lacks which key, and the line to add.
    if let Some(at) = out.find("missing field `")
        && let Some((key, _)) = out[at + 15..].split_once('`')
    {
        let under = out[..at]
            .strip_suffix(": ")
            .map(|path| format!(" under {path}:"))
            .unwrap_or_default();
        let words = format!("missing key {key}, which has no default; add a {key}: line{under}");
        out.replace_range(at.., &words);
    }
    // A word key (`recompute:`, `framework:`, `pp_schedule:`) given a list or a mapping:
    // serde_yaml names what it would read an enum from there, a YAML tag (`!none`), which tpsim
    // refuses in turn. The rule is one name, written alone.
    for (found, what, marks) in [
        ("sequence", "a list", "brackets or dashes"),
        ("map", "a mapping", "braces or nested keys"),
    ] {
        let from = format!("invalid type: {found}, expected a YAML tag starting with '!'");
        if let Some(at) = out.find(&from) {
            let key = key_of_path(out[..at].trim_end_matches(": ")).to_string();
            out.replace_range(
                at..,
                &format!(
                    "{what} where one name goes; write the name alone after {key}: (on the same line, without {marks})"
                ),
            );
        }
    }
    // `sequence_parallel: yes`: YAML 1.2 reads yes, on and the like as text, and serde names the
    // type it wanted with no fix.
    if let Some((path, _)) = out
        .split_once(": invalid type: ")
        .filter(|(_, rest)| rest.ends_with(", expected a boolean"))
    {
        let key = key_of_path(path).to_string();
        if !key.is_empty() {
            out.push_str(&format!(
                "; {key} takes true or false (YAML reads yes, no, on and off as text): write {key}: true or {key}: false"
            ));
            return out;
        }
    }
    if let Some(at) = out.find("expected struct ") {
        out.replace_range(at.., "expected a mapping of keys (key: value lines)");
    }
    // `tp: -1`: the rule is the key's (a degree is at least 1), not the machine type's range.
    if expected_type.is_some_and(|rust| rust.starts_with('u'))
        && let Some(worded) = negative_count(&out)
    {
        return worded;
    }
    // `heads: 1e6`: a whole number past the bound `Model::check` holds the count to was told to
    // be written `heads: 1000000`, which the check then refused; the bound is said at once.
    if let Some(worded) = whole_float_past_shape_bound(&out) {
        return worded;
    }
    // `layers: 4.5` or `layers: 4.0`: serde names the type only; the fix is the whole number.
    if let Some(fix) = fractional_count(&out, expected_type) {
        let mut out = short_float(&out);
        out.push_str(&fix);
        return out;
    }
    // `KEY: invalid type: string "80", expected a ... number`: say why, and the fix, when the fix
    // works (`"-5"` for a count, `"1e3"` for a whole number or `"300"` for 0 to 255 would only be
    // refused again unquoted, so those keep the type error alone).
    let quoted_number = out
        .split_once(": invalid type: string \"")
        .and_then(|(key, rest)| Some((key, rest.split_once("\", expected a ")?)))
        .filter(|(_, (text, _))| expected_type.is_some_and(|rust| reads_unquoted(rust, text)))
        .map(|(path, (text, _))| {
            // `plan.tp` or `runs[0].layers`: the key as the file writes it.
            let key = key_of_path(path);
            (key.to_string(), text.to_string())
        });
    if let Some((key, text)) = quoted_number {
        out.push_str(&format!(
            "; the number is in quotes, so YAML reads it as text: write it without quotes ({key}: {})",
            escape(text.trim())
        ));
    } else if let Some(text) = out
        .split_once(": invalid type: string \"")
        .and_then(|(_, rest)| rest.split_once("\", expected a "))
        .map(|(text, _)| text.trim())
        .filter(|text| overflows_every_number(text))
    {
        // `nodes: 1e400`, unquoted: past f64, so YAML reads it as text, and serde calls it a
        // string the user never wrote.
        out.push_str(&format!(
            "; {} is too large for any number, so YAML reads it as text: give a value in range",
            escape(text)
        ));
    } else if let Some(fix) = number_type_fix(&out, expected_type) {
        out.push_str(&fix);
    }
    out
}

/// The fix for any other value where a number goes (`cp: true`, `cp: .nan`, `cp: [2]`, `cp: ~`,
/// `moe_imbalance: true`): serde names the type it read and the one it wanted, and nothing to
/// write instead.
fn number_type_fix(message: &str, expected_type: Option<&str>) -> Option<String> {
    let (path, _) = message.split_once(": invalid type: ")?;
    let key = key_of_path(path);
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    let whole = expected_type?.starts_with(['u', 'i']);
    Some(if !whole {
        format!("; {key} takes a number, written in digits without quotes or brackets")
    } else if key == "zero" {
        "; zero is a ZeRO stage: use 0, 1, 2 or 3".to_string()
    } else if POSITIVE_KEYS.contains(&key) {
        format!("; {key} takes a whole number of 1 or more, written in digits (e.g. {key}: 1)")
    } else {
        format!("; {key} takes a whole number, 0 or more, written in digits (e.g. {key}: 0)")
    })
}

/// The spec keys (in every spec file: plan, model, GPU profile) whose counts start at 1: the
/// parallel degrees, the cluster and batch counts and the model's shape. Other whole-number keys
/// (`zero`, `mtp_layers`, `recompute_num_layers`, ...) take 0.
pub(crate) const POSITIVE_KEYS: [&str; 42] = [
    // A published-runs file's plan and hardware (validation/modern_runs.yaml).
    "num_gpus",
    "vp",
    "mbs",
    "gbs",
    "ga",
    "tp",
    "pp",
    "dp",
    "vpp",
    "micro_batch",
    "cp",
    "ep",
    "etp",
    "dp_replicas",
    "nodes",
    "gpus_per_node",
    "nvlink_domain_gpus",
    "seq_len",
    "global_batch",
    "local_batch",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "ffn_hidden",
    "vocab",
    "experts",
    "router_topk",
    "layer_freq",
    // The SC'21-format published-runs file's plan (validation/published_runs.yaml): 0 is refused
    // there as not a count (`validation::vpp_of`, `check_positive`), so a negative one is not told
    // "e.g. micro_batch_size: 0".
    "micro_batch_size",
    "global_batch_size",
    "virtual_pipeline_stages",
    "layers_per_virtual_stage",
    // LatentMoE's width (`moe.latent_size`): absent for none, never 0 (`Model::check`).
    "latent_size",
    "kv_lora_rank",
    "v_head_dim",
    // A hybrid stack's Mamba-2 mixer (`Model::check_hybrid`: 1 up).
    "mamba_heads",
    "mamba_head_dim",
    "mamba_state_dim",
    "mamba_groups",
    "mamba_conv_kernel",
];

/// `PATH: invalid type: integer `-1`, expected a whole number from 0 to 4294967295` (a negative
/// number where a count goes) said as the key's rule and a fix: `plan.tp: -1 is negative; tp
/// must be a positive whole number (1 or more), e.g. tp: 1`.
fn negative_count(message: &str) -> Option<String> {
    let (path, rest) = message
        .split_once(": invalid type: integer `-")
        .or_else(|| message.split_once(": invalid value: integer `-"))?;
    let (digits, _) = rest.split_once('`')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // `plan.tp` or `runs[0].layers`: the key as the file writes it.
    Some(format!(
        "{path}: -{digits} is negative; {}",
        negative_rule(path)
    ))
}

/// The rule and fix for a negative number given to the whole-number key at `path`.
fn negative_rule(path: &str) -> String {
    let key = key_of_path(path);
    if key == "zero" {
        "zero is a ZeRO stage: use 0, 1, 2 or 3".to_string()
    } else if POSITIVE_KEYS.contains(&key) {
        format!("{key} must be a positive whole number (1 or more), e.g. {key}: 1")
    } else {
        format!("{key} must be a whole number, 0 or more (e.g. {key}: 0)")
    }
}

/// Serde's `invalid type: floating point `0.000…01``, where it spells a tiny number (`1e-300`) in
/// full, with the number as short as it reads (`1e-300`).
fn short_float(message: &str) -> String {
    const FORM: &str = ": invalid type: floating point `";
    let Some((head, rest)) = message.split_once(FORM) else {
        return message.to_string();
    };
    let Some((read, tail)) = rest.split_once('`') else {
        return message.to_string();
    };
    match read.parse::<f64>() {
        Ok(value) => format!("{head}{FORM}{}`{tail}", crate::units::show_number(value)),
        Err(_) => message.to_string(),
    }
}

/// A model count written as a whole float (`heads: 1e6`, `model.layers: 1e6`) past the bound
/// `Model::check` holds it to (`model::shape_bound`): the check's own words, as a count past its
/// number type's range is told (`past_range`). None for any other message.
fn whole_float_past_shape_bound(message: &str) -> Option<String> {
    let (path, rest) = message.split_once(": invalid type: floating point `")?;
    let value: f64 = rest.split_once('`')?.0.parse().ok()?;
    let (prefix, model_key) = path
        .rsplit_once("model.")
        .map_or(("", path), |(head, key)| (&path[..head.len() + 6], key));
    let flag = crate::model_file_words::flag_of_key(model_key)?;
    let max = crate::model::shape_bound(flag)?;
    (value.is_finite() && value.fract() == 0.0 && value > f64::from(max)).then(|| {
        let words = crate::model::too_large_words(flag, &crate::units::show_number(value), max);
        crate::model_file_words::in_model_file_words(&words, prefix)
    })
}

/// The fix for a whole-number key given a number with a decimal point or an exponent
/// (`layers: 4.5`, `layers: 4.0`, `hidden: 1e20`): the whole number to write, or the two nearest,
/// or that it is past the key's range. None for any other message.
fn fractional_count(message: &str, expected_type: Option<&str>) -> Option<String> {
    let most = match expected_type? {
        "u8" => f64::from(u8::MAX),
        "u16" => f64::from(u16::MAX),
        "u32" => f64::from(u32::MAX),
        "u64" | "usize" => u64::MAX as f64,
        _ => return None,
    };
    let (path, rest) = message.split_once(": invalid type: floating point `")?;
    let value: f64 = rest.split_once('`')?.0.parse().ok()?;
    let key = key_of_path(path);
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some(if value > most {
        format!("; {value:e} is past the largest whole number {key} takes: check the value")
    } else if value.fract() == 0.0 {
        format!(
            "; {key} takes a whole number: write it without a decimal point or exponent ({key}: {value:.0})"
        )
    } else if value < 1.0 && POSITIVE_KEYS.contains(&key) {
        format!("; {key} takes a whole number, 1 or more: write {key}: 1")
    } else {
        format!(
            "; {key} takes a whole number: write {key}: {:.0} or {key}: {:.0}",
            value.floor(),
            value.ceil()
        )
    })
}

/// Whether `text` is written as a number (`1e400`, `-1e400`) too large for any number type:
/// Rust reads it as an infinite f64, YAML as text. `inf` and `.inf` are not such numbers.
fn overflows_every_number(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE_".contains(&b))
        && text.parse::<f64>().is_ok_and(f64::is_infinite)
}

/// Whether `text`, written without quotes, is a value of the Rust number type `rust`: a whole
/// number within the type's range, or a finite number for a float.
fn reads_unquoted(rust: &str, text: &str) -> bool {
    let text = text.trim();
    match rust {
        "u8" => text.parse::<u8>().is_ok(),
        "u16" => text.parse::<u16>().is_ok(),
        "u32" => text.parse::<u32>().is_ok(),
        "u64" | "usize" => text.parse::<u64>().is_ok(),
        "i32" => text.parse::<i32>().is_ok(),
        "i64" => text.parse::<i64>().is_ok(),
        "f32" => text.parse::<f32>().is_ok_and(f32::is_finite),
        "f64" => text.parse::<f64>().is_ok_and(f64::is_finite),
        _ => false,
    }
}

/// Refuses a whole number written with a sign, leading zeros or a base prefix (`tp: +8`,
/// `tp: 007`, `tp: 0x8`), which the parser would read as another spelling without a word (see
/// `yaml_numbers`).
pub fn check_number_spellings(origin: &str, text: &str) -> Result<(), SpecError> {
    match crate::yaml_numbers::odd_whole_number(text) {
        None => Ok(()),
        Some(odd) => Err(SpecError::Yaml {
            origin: quote(origin),
            line: odd.line,
            column: odd.column,
            message: match odd.path.or(odd.key) {
                Some(key) => format!("{}: {} {}", escape(&key), escape(&odd.text), odd.rule),
                None => format!("{} {}", escape(&odd.text), odd.rule),
            },
        }),
    }
}

/// Parses the text of a spec after checking its nesting depth (see `input_file`) and how its
/// whole numbers are written.
fn parse_yaml<T: DeserializeOwned>(origin: &str, text: &str) -> Result<T, SpecError> {
    check_depth(&quote(origin), text)?;
    // Every key would be "missing" at line 1: the file is what is wrong.
    // Lines as YAML breaks them: a lone CR ends a line too (`str::lines` would not split it).
    let blank = text
        .trim_start_matches('\u{feff}')
        .split(['\n', '\r'])
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if blank {
        return Err(SpecError::Invalid {
            origin: quote(origin),
            message: "is empty (blank lines and comments only), so it gives none of its keys; check that this is the right file".into(),
        });
    }
    check_number_spellings(origin, text)?;
    yaml_serde::from_str(text).map_err(|err| yaml_error(origin, text, &err))
}

/// The bundled names an unknown one was likely meant as, said beside the error: those equal to it
/// or starting with it once case and separators are dropped (`h100` → h100-sxm-80g and
/// h100-sxm-96g-500w; `Llama-3-70B` → llama3-70b; `gb200` → gb200-nvl72), else those it starts
/// with (a Hub name with a suffix: `mixtral-8x7b-v0.1` → mixtral-8x7b, `deepseek-v3-671b` →
/// deepseek-v3), else those whose `description:` names it (`llama3.1-405b` → llama3-405b, "Meta
/// Llama 3.1 405B": `described_as`). Empty when none is, or when the name is too short to single
/// any out.
fn bundled_like(bundled: &[(&str, &str)], asked: &str) -> String {
    let original = asked;
    let plain = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let asked = plain(asked);
    if asked.len() < 3 {
        return String::new();
    }
    let named = |extends: fn(&str, &str) -> bool| -> Vec<&str> {
        bundled
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| extends(&plain(name), &asked))
            .collect()
    };
    let mut like = named(|name, asked| name.starts_with(asked));
    if like.is_empty() {
        like = named(|name, asked| name.len() >= 3 && asked.starts_with(name));
    }
    if like.is_empty() {
        like = described_as(bundled, original);
    }
    match like.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [rest @ .., last] => format!(" (did you mean {} or {last}?)", rest.join(", ")),
    }
}

/// The bundled specs whose `description:` line holds every word of `asked` in its order, words
/// split at anything but letters and digits and between letters and digits (`Llama-3.1-405B` is
/// llama 3 1 405 b, found in "Meta Llama 3.1 405B" and in "Meta Llama 3 / 3.1 70B" for 70b; the
/// order keeps `mistral-7b` from "Mixtral 8x7B (Mistral AI 2024)"). Needs two words or more, a
/// number among them, so a family name alone singles out no size.
fn described_as<'a>(bundled: &[(&'a str, &str)], asked: &str) -> Vec<&'a str> {
    fn words(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut last: Option<bool> = None;
        for c in text.chars() {
            if !c.is_ascii_alphanumeric() {
                last = None;
                continue;
            }
            let digit = c.is_ascii_digit();
            match out.last_mut() {
                Some(word) if last == Some(digit) => word.push(c.to_ascii_lowercase()),
                _ => out.push(c.to_ascii_lowercase().to_string()),
            }
            last = Some(digit);
        }
        out
    }
    let asked = words(asked);
    if asked.len() < 2
        || !asked
            .iter()
            .any(|w| w.starts_with(|c: char| c.is_ascii_digit()))
    {
        return Vec::new();
    }
    bundled
        .iter()
        .filter(|(_, text)| {
            let Some(description) = text.lines().find_map(|l| l.strip_prefix("description:"))
            else {
                return false;
            };
            let described = words(description);
            let mut rest = described.iter();
            asked.iter().all(|w| rest.any(|d| d == w))
        })
        .map(|(name, _)| *name)
        .collect()
}

/// Reads a spec named `name_or_path`: a bundled name, or a file path (anything with a path
/// separator or a .yaml/.yml ending, or an existing file).
fn read_spec<T: DeserializeOwned>(
    flag: &str,
    kind: &'static str,
    bundled: &[(&str, &str)],
    name_or_path: &str,
) -> Result<(String, T), SpecError> {
    // `-`, standard input to many tools, is taken as a path, so that the reader says tpsim reads
    // no standard input (it was an unknown bundled name "-").
    let looks_like_path = name_or_path.contains('/')
        || name_or_path == "-"
        || name_or_path.ends_with(".yaml")
        || name_or_path.ends_with(".yml");
    // A bare name that is also a folder (a Hub snapshot `llama3-8b/`) still means the bundled
    // spec; any other existing entry is read as a file (and refused if it is not a regular one).
    let is_entry = std::fs::metadata(Path::new(name_or_path)).is_ok_and(|m| !m.is_dir());
    // A bare bundled name that is also a file here could mean either: say so rather than pick one.
    if !looks_like_path && is_entry && bundled.iter().any(|(name, _)| *name == name_or_path) {
        return Err(SpecError::Ambiguous {
            flag: flag.to_string(),
            kind,
            name: quote(name_or_path),
        });
    }
    // No bundled names (a calibrated profile): whatever is given is a path.
    if bundled.is_empty() {
        let text = read_spec_file_text(flag, name_or_path)?;
        let parsed = parse_yaml(name_or_path, &text).map_err(|e| another_input(e, &text, kind))?;
        return Ok((quote(name_or_path), parsed));
    }
    // `meta-llama/Llama-3.1-405B`, a Hub id pasted as it is: no such file, but a bundled spec
    // may be that model.
    // An existing folder before the `/` makes it a path (`models/llama3-70b`), said as one.
    if let Some((org, hub_name)) = name_or_path.split_once('/')
        && !is_entry
        && !Path::new(org).is_dir()
        && !name_or_path.ends_with(".yaml")
        && !name_or_path.ends_with(".yml")
        && !name_or_path.starts_with(['.', '/', '~'])
        && !hub_name.contains('/')
        && !Path::new(name_or_path).exists()
    {
        let suggestion = bundled_like(bundled, hub_name);
        if !suggestion.is_empty() {
            return Err(SpecError::HubId {
                flag: flag.to_string(),
                kind,
                name: quote(name_or_path),
                suggestion,
            });
        }
    }
    if looks_like_path || is_entry {
        let text = read_spec_text(flag, name_or_path)?;
        let parsed = parse_yaml(name_or_path, &text).map_err(|e| another_input(e, &text, kind))?;
        return Ok((quote(name_or_path), parsed));
    }
    match bundled.iter().find(|(name, _)| *name == name_or_path) {
        Some((name, text)) => Ok((format!("bundled {kind} {name}"), parse_yaml(name, text)?)),
        None => Err(SpecError::UnknownName {
            kind,
            name: crate::input_file::in_quotes(name_or_path),
            suggestion: bundled_like(bundled, name_or_path),
            known: bundled
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Refuses shapes whose later checks would loop over a huge count (the suggestion for
/// `hidden % heads != 0` counts down from `heads`): a head has at least one channel, so heads ≤
/// hidden where the heads split the hidden size, and a KV head serves at least one query head, so
/// kv_heads ≤ heads. A model with its own head width (`head_dim`, or latent attention's head
/// dimensions) does not split the hidden size, as the flags over a bundled model do not either.
/// Messages name the shape flags; a model file's reader says them in its keys
/// (`model_file_words`).
pub fn check_model_counts(file: &ModelFile) -> Result<(), String> {
    // The published sizes only document the model, but a value there is still checked.
    for (key, value) in [
        ("published_params_b", file.published_params_b),
        ("published_active_params_b", file.published_active_params_b),
    ] {
        if let Some(v) = value
            && !(v.is_finite() && v > 0.0)
        {
            return Err(format!(
                "{key} {} is not a positive number of billions (it records the size the model's source publishes); fix it or drop the key",
                crate::units::show_number(v)
            ));
        }
    }
    // The active parameters are a part of all of them (a token touches some of the weights).
    if let (Some(all), Some(active)) = (file.published_params_b, file.published_active_params_b)
        && active > all
    {
        return Err(format!(
            "published_active_params_b {} is more than published_params_b {} (rule: the parameters one token touches are a part of all the model's parameters); check both against the model's source, e.g. GPT-OSS-120B publishes 116.83 in all and 5.13 active",
            crate::units::show_number(active),
            crate::units::show_number(all)
        ));
    }
    // A zero count is refused by `Model::check` as a count of at least 1; compared here it was
    // told as the other count's fault (`--kv-heads 8 is more than --heads 0`, `--heads 32 is
    // more than --hidden 0 ... e.g. --heads 1`), a fix the zero refuses in turn.
    let heads_split_hidden = file.head_dim.is_none() && file.mla.is_none();
    if heads_split_hidden && file.hidden > 0 && file.heads > file.hidden {
        return Err(format!(
            "--heads {} is more than --hidden {} (rule: each attention head has at least one channel); give --heads dividing --hidden, e.g. --heads {}",
            file.heads,
            file.hidden,
            [128, 64, 32, 16, 8, 4, 2, 1]
                .into_iter()
                .find(|h| file.hidden.is_multiple_of(*h) && *h <= file.hidden.max(1))
                .unwrap_or(1)
        ));
    }
    if let Some(kv) = file.kv_heads
        && file.heads > 0
        && kv > file.heads
    {
        return Err(format!(
            "--kv-heads {kv} is more than --heads {} (rule: each KV head serves at least one query head); give --kv-heads dividing --heads",
            file.heads
        ));
    }
    Ok(())
}

/// The MoE switches of a model file against the parts they act on (the flags and launch lines
/// refuse the same): a gate needs shared experts to gate, a clamped GLU a gated MLP to clamp.
fn check_moe_switches(file: &ModelFile, key_prefix: &str) -> Result<(), String> {
    let Some(moe) = &file.moe else {
        return Ok(());
    };
    if moe.shared_expert_gate && moe.shared_expert_ffn_hidden == 0 {
        return Err(format!(
            "{key_prefix}moe.shared_expert_gate: true gates the shared experts' output, and the model has no shared experts ({key_prefix}moe.shared_expert_ffn_hidden is 0 or not given); give the shared experts' width as moe.shared_expert_ffn_hidden (Qwen1.5-MoE-A2.7B: 5632), or drop shared_expert_gate"
        ));
    }
    if let Some(limit) = moe.glu_clamp_limit
        && !file.gated_mlp
    {
        return Err(format!(
            "{key_prefix}moe.glu_clamp_limit: {} clamps the two halves of a gated MLP's activation (GPT-OSS's SwiGLU), and {key_prefix}gated_mlp: false gives the experts no such halves; set gated_mlp: true, or drop glu_clamp_limit",
            limit.arg()
        ));
    }
    Ok(())
}

/// The model a spec describes; a shape error names the spec's keys under `key_prefix` (`""` for
/// a model file, `"model."` for a plan file's inline model), not the shape flags.
fn model_of_file(file: &ModelFile, origin: &str, key_prefix: &str) -> Result<Model, SpecError> {
    let invalid = |message: String| SpecError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let in_file_words = |message: &str| {
        sanitize_message(&crate::model_file_words::in_model_file_words(
            message, key_prefix,
        ))
    };
    crate::input_file::check_spec_name(&format!("{key_prefix}name"), &file.name, "my-model")
        .map_err(invalid)?;
    check_model_counts(file).map_err(|m| invalid(in_file_words(&m)))?;
    check_moe_switches(file, key_prefix).map_err(invalid)?;
    Model::from_file(file).map_err(|err| invalid(in_file_words(&err.to_string())))
}

/// Loads a model by bundled name or path, given with `--model` (named in errors).
pub fn load_model(name_or_path: &str) -> Result<Model, SpecError> {
    load_model_with_file(name_or_path).map(|(model, _)| model)
}

/// [`load_model`], with the spec file it was read from: what the resolved shape does not hold
/// (the description, the sources, the published counts, whether `seq_len` is assumed).
pub fn load_model_with_file(name_or_path: &str) -> Result<(Model, ModelFile), SpecError> {
    let (origin, file): (String, ModelFile) =
        read_spec("--model", "model", BUNDLED_MODELS, name_or_path)?;
    let model = model_of_file(&file, &origin, "")?;
    Ok((model, file))
}

/// Loads a GPU profile by bundled name or path, given with `flag` (`--gpu`, `--calibration`).
pub fn load_gpu_as(flag: &str, name_or_path: &str) -> Result<GpuProfile, SpecError> {
    let (origin, profile): (String, GpuProfile) =
        read_spec(flag, "GPU", BUNDLED_GPUS, name_or_path)?;
    profile
        .check()
        .map_err(|message| SpecError::Invalid { origin, message })?;
    Ok(profile)
}

/// Loads a GPU profile from the file `path` only, given with `flag` (`--calibration`: a profile
/// `tpsim calibrate` wrote, which no bundled name is).
pub fn load_gpu_file_as(flag: &str, path: &str) -> Result<GpuProfile, SpecError> {
    let (origin, profile): (String, GpuProfile) = read_spec(flag, "GPU", &[], path)?;
    profile
        .check()
        .map_err(|message| SpecError::Invalid { origin, message })?;
    Ok(profile)
}

pub fn load_gpu(name_or_path: &str) -> Result<GpuProfile, SpecError> {
    load_gpu_as("--gpu", name_or_path)
}

/// The bundled model `name`, whatever files the working folder holds: a model tpsim names itself
/// (a published run's bundled model) is tpsim's, never a file that happens to share its name.
pub fn load_bundled_model(name: &str) -> Result<Model, SpecError> {
    let Some((name, text)) = BUNDLED_MODELS.iter().find(|(n, _)| *n == name) else {
        return Err(SpecError::UnknownName {
            kind: "model",
            name: crate::input_file::in_quotes(name),
            suggestion: bundled_like(BUNDLED_MODELS, name),
            known: BUNDLED_MODELS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let file: ModelFile = parse_yaml(name, text)?;
    model_of_file(&file, &format!("bundled model {name}"), "")
}

/// The bundled GPU profile `name`, whatever files the working folder holds: the default GPU of a
/// command that names none is tpsim's, never a file that happens to share its name.
pub fn load_bundled_gpu(name: &str) -> Result<GpuProfile, SpecError> {
    let Some((name, text)) = BUNDLED_GPUS.iter().find(|(n, _)| *n == name) else {
        return Err(SpecError::UnknownName {
            kind: "GPU",
            name: crate::input_file::in_quotes(name),
            suggestion: bundled_like(BUNDLED_GPUS, name),
            known: BUNDLED_GPUS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let profile: GpuProfile = parse_yaml(name, text)?;
    profile.check().map_err(|message| SpecError::Invalid {
        origin: format!("bundled GPU {name}"),
        message,
    })?;
    Ok(profile)
}

/// The model a plan file refers to: a bundled name or path, or the whole shape inline.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ModelRef {
    Named(String),
    Inline(Box<ModelFile>),
}

/// A saved plan (`plans/*.yaml`): the scenario and the plan. `tpsim plan --save` writes it and
/// `tpsim eval --plan` reads it; command-line flags override the scenario keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// A bare parameter count such as "512B" (the shape is derived), instead of `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// The most memory per GPU the plan was held to (`--max-memory-gib`), in GiB; the GPU's whole
    /// memory when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_gib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<u32>,
    /// The token budget the plan was made for, as `--tokens` takes it (`300B`): the time to train
    /// and, with a price, the cost. None when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<String>,
    /// The price of one GPU for one hour the plan was costed at (`--price-per-gpu-hour`), so that
    /// `eval --plan` and `report` print the cost `plan` printed; with `tokens` only. None when not
    /// given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_gpu_hour: Option<f64>,
    /// Sequences per data-parallel rank per pipeline schedule (`--local-batch`, torchtitan);
    /// one schedule per step when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_batch: Option<u32>,
    /// How context parallelism exchanged K/V (`--cp-exchange`); the framework's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_exchange: Option<crate::training::CpExchange>,
    /// Per-tensor FP8's scaling recipe (`--fp8-scaling`); the framework's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_scaling: Option<crate::training::Fp8Scaling>,
    /// Transformer layers kept in bf16 at the ends of the stack (`--first-last-layers-bf16`):
    /// `{at_start: N, at_end: M}`; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_layers: Option<crate::training::Bf16Layers>,
    /// The pipeline schedule (`--pp-schedule`); 1F1B (interleaved with vpp > 1) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_schedule: Option<crate::training::PipelineSchedule>,
    /// Layers whose activations go to host memory (`--cpu-offload-layers`); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offload_layers: Option<u32>,
    /// Megatron-Core's selective recompute modules (`--recompute-modules`); the attention core
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_modules: Option<crate::training::RecomputeModules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_dtype: Option<GradDtype>,
    /// Megatron-Core's gradient-accumulation fusion; on when absent (written only when off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_accumulation_fusion: Option<bool>,
    /// Rotary embeddings as one fused kernel (Megatron-Core `apply_rope_fusion`); on when absent
    /// (written only when off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_fusion: Option<bool>,
    /// How parameters and Adam's states were stored; the framework's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_states: Option<crate::training::OptimizerStates>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionKernel>,
    /// The framework the plan was evaluated as (what `--recompute selective`, the loss memory
    /// and the overlap defaults mean); megatron-core when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<crate::training::TrainingFramework>,
    /// The communication overlap the plan was evaluated with; the framework's defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<crate::training::Overlap>,
    /// The busiest expert's load over the balanced share the plan was evaluated with
    /// (`--moe-imbalance`, capped by `--moe-capacity-factor`); balanced (1) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_imbalance: Option<f64>,
    /// The expert capacity factor the plan was evaluated with (`--moe-capacity-factor`), which
    /// the emitted configurations write; dropless when absent (and in files written before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_capacity_factor: Option<f64>,
    /// The MoE token dispatcher and routing pattern the plan was evaluated with
    /// (`--moe-dispatcher`, `--moe-routing`); all-to-all with random routing when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_dispatch: Option<crate::training::MoeDispatch>,
    /// Whether the low-precision weights are all-gathered as the parameters (Megatron-Core
    /// `--fp8-param-gather`); the framework's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_param_gather: Option<bool>,
    /// Fused or eager element-wise kernels (torchtitan's `torch.compile` or not); the framework's
    /// default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_fusion: Option<crate::training::KernelFusion>,
    pub plan: PlanRequest,
    /// Which of the settings whose default differs from a `plan` row's the file's `plan:` gives
    /// (set by [`parse_plan`]; tpsim's own files give them all). Without `etp:` the file runs the
    /// framework's default expert TP ([`PlanFile::etp_for`]); without `sequence_parallel:` or
    /// `zero:` it runs off and ZeRO-0, and `eval` says so as it does for flags not given.
    #[serde(skip)]
    pub given: PlanKeysGiven,
}

/// Which of a plan file's `plan:` keys with a default unlike a `plan` row's are written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanKeysGiven {
    pub etp: bool,
    pub sequence_parallel: bool,
    pub zero: bool,
    /// `recompute:` or `recompute_num_layers:` (which implies full recompute).
    pub recompute: bool,
    /// A file `plan --save` wrote (its `# Written by` line) without `framework:`, `attention:`
    /// or `overlap:`: saved before those keys existed (2026-11-29/30, commits 31381a1 and
    /// 0d897b5), so what it was evaluated with is not in it and `eval` says the value it takes.
    pub saved_without: SavedWithoutKeys,
}

/// Which of the keys added after plan files were first saved a tpsim-written file lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SavedWithoutKeys {
    pub framework: bool,
    pub attention: bool,
    pub overlap: bool,
}

impl SavedWithoutKeys {
    /// Nothing lacking: a file tpsim writes today, a hand-written one (its keys' defaults are
    /// documented), or no file.
    pub const NONE: Self = Self {
        framework: false,
        attention: false,
        overlap: false,
    };
}

impl PlanKeysGiven {
    /// Every key given: a plan tpsim wrote itself (`plan --save`, a pasted launch line's plan).
    pub const ALL: Self = Self {
        etp: true,
        sequence_parallel: true,
        zero: true,
        recompute: true,
        saved_without: SavedWithoutKeys::NONE,
    };

    /// No key given: no plan file, or flags none of which set these.
    pub const NONE: Self = Self {
        etp: false,
        sequence_parallel: false,
        zero: false,
        recompute: false,
        saved_without: SavedWithoutKeys::NONE,
    };

    /// The keys `text`'s `plan:` mapping holds (none where it cannot be read as one).
    fn of(text: &str) -> Self {
        let doc = yaml_serde::from_str::<yaml_serde::Value>(text).ok();
        let plan = doc.as_ref().and_then(|doc| doc.get("plan")?.as_mapping());
        let has = |key: &str| plan.as_ref().is_some_and(|m| m.contains_key(key));
        let saved_by_tpsim = text.trim_start().starts_with("# Written by `tpsim plan`");
        let lacks = |key: &str| {
            saved_by_tpsim
                && doc
                    .as_ref()
                    .and_then(|doc| doc.as_mapping())
                    .is_some_and(|m| !m.contains_key(key))
        };
        Self {
            etp: has("etp"),
            sequence_parallel: has("sequence_parallel"),
            zero: has("zero"),
            recompute: has("recompute") || has("recompute_num_layers"),
            saved_without: SavedWithoutKeys {
                framework: lacks("framework"),
                attention: lacks("attention"),
                overlap: lacks("overlap"),
            },
        }
    }
}

impl Default for PlanKeysGiven {
    fn default() -> Self {
        Self::ALL
    }
}

impl PlanFile {
    /// The expert-TP degree of this file's plan at `tp` and `ep` under `framework`: its `etp:`,
    /// or where the file gives none the framework's default, as `eval --tp --ep` without `--etp`
    /// runs it (`TrainingFramework::default_etp`: Megatron-Core's `expert_tensor_parallel_size`
    /// defaults to the TP size). It was taken as 1, so a hand-written MoE plan at tp 2 ran etp 1
    /// from the file and etp 2 from the same degrees as flags, 30 GiB apart on Mixtral 8x7B.
    pub fn etp_for(
        &self,
        framework: crate::training::TrainingFramework,
        tp: u32,
        ep: u32,
        has_experts: bool,
    ) -> u32 {
        if self.given.etp {
            self.plan.etp
        } else {
            framework.default_etp(tp, ep, has_experts)
        }
    }

    /// This file's sequence parallelism at `tp` and `cp`: its `sequence_parallel:`, or where the
    /// file gives none the value `eval --tp` without `--sequence-parallel` takes: Megatron-LM's
    /// default (off), on where Megatron-Core trains a mixture-of-experts model under TP only with
    /// it (`plan::moe_needs_sequence_parallel`, moe_layer.py) and the sequence splits. Without the
    /// key such a file was refused ("without --sequence-parallel") where the same degrees as flags
    /// ran with it on and a note.
    pub fn sequence_parallel_for(
        &self,
        model: &crate::model::Model,
        training: &crate::training::Training,
        tp: u32,
        cp: u32,
    ) -> bool {
        if self.given.sequence_parallel {
            self.plan.sequence_parallel
        } else {
            crate::plan::moe_needs_sequence_parallel(model, training.framework, tp)
                && crate::plan::sp_splits_sequence(tp, cp, training)
        }
    }
}

/// `model:` alone, as an inline shape: parsed again when a plan file's `model:` matched neither
/// form of [`ModelRef`], so that the error names the key and line that broke the inline shape
/// (serde's untagged enums report only "did not match any variant").
#[derive(Deserialize)]
struct InlineModelOnly {
    #[allow(dead_code)]
    model: ModelFile,
}

pub fn load_plan(path: &str) -> Result<PlanFile, SpecError> {
    let text = crate::input_file::read_yaml("--plan", path)?;
    parse_plan(path, &text).map_err(|e| another_input(e, &text, "plan"))
}

/// Which of tpsim's other inputs a file is, by the keys only that input has: what it is, the
/// reader's kind (`read_spec`'s, or "plan") and the flag that reads it.
fn input_kind(text: &str) -> Option<(&'static str, &'static str, &'static str)> {
    let doc: yaml_serde::Value = yaml_serde::from_str(text).ok()?;
    // A published-runs file (validation/published_runs.yaml) is a list of runs, each with an
    // `id:` and its `model:` and `plan:`; given as a plan, model or GPU file it was refused as
    // "invalid type: sequence, expected a mapping of keys", naming neither what it is nor the
    // command that reads it.
    if let Some(runs) = doc.as_sequence() {
        let run = runs.first()?.as_mapping()?;
        return (run.contains_key("id") && (run.contains_key("plan") || run.contains_key("model")))
            .then_some(("a published-runs file", "runs", "tpsim accuracy --runs"));
    }
    let map = doc.as_mapping()?;
    let has = |key: &str| map.contains_key(key);
    if has("model_type") || has("architectures") || has("hidden_size") {
        Some(("a Hugging Face config.json", "config", "--hf-config"))
    } else if has("plan") && (has("gpu") || has("nodes")) {
        Some(("a plan file", "plan", "eval --plan"))
    } else if has("calibration") && has("peak_bf16_tflops") {
        Some(("a calibrated GPU profile", "GPU", "--calibration"))
    } else if has("peak_bf16_tflops") || has("hbm_capacity_gib") {
        Some(("a GPU profile", "GPU", "--gpu"))
    } else if has("layers") && has("hidden") && has("heads") {
        Some(("a model file", "model", "--model"))
    } else if has("runs") && has("schema_version") {
        Some(("a runs file", "runs", "tpsim accuracy --runs"))
    } else {
        None
    }
}

/// A file of another of tpsim's inputs given where one `kind` is read (a Hugging Face
/// config.json to --model, a GPU profile to --model, a model file to --gpu or --plan) was refused
/// at its first key with the keys this reader takes, which say nothing of the mix-up: the error
/// names what the file is and the flag that reads it instead.
fn another_input(err: SpecError, text: &str, kind: &str) -> SpecError {
    let SpecError::Yaml {
        origin,
        line,
        column,
        message,
    } = err
    else {
        return err;
    };
    let wanted = match kind {
        "GPU" => "a GPU profile",
        "plan" => "a plan file",
        _ => "a model file",
    };
    let message = match (message.split_once(", expected one of"), input_kind(text)) {
        (Some((unknown, _)), Some((what, reads, flag)))
            if unknown.contains("unknown field") && reads != kind =>
        {
            format!(
                "{unknown}: the file is {what}, not {wanted} (rule: each of tpsim's inputs has its own keys); give it with {flag}"
            )
        }
        // A list where a mapping goes: a published-runs file (`input_kind`).
        (_, Some((what, reads, flag)))
            if message.starts_with("invalid type: sequence") && reads != kind =>
        {
            format!(
                "the file is {what} (a list of runs), not {wanted} (rule: each of tpsim's inputs has its own keys, and {wanted} is a mapping of them); give it with {flag}"
            )
        }
        _ => message,
    };
    SpecError::Yaml {
        origin,
        line,
        column,
        message,
    }
}

/// What [`too_large_count`] says of a `vpp:` past its whole-number type.
const VPP_TOO_LARGE: &str = "the largest whole number vpp takes; ";

/// `plan.vpp: 99999999999` in a plan file: [`too_large_count`]'s rule, with the layers per stage
/// of this file's model and pp, read by parsing the file again with `vpp: 1` at the same place.
/// The message as it was when the model cannot be read that way (the model's own error follows
/// once the vpp is fixed).
fn vpp_fix_for_file(text: &str, line: usize, column: usize, message: &str) -> String {
    let per_stage = || -> Option<(u32, u32, u32)> {
        let written = scalar_at(text, line, column)?;
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let at = lines.get_mut(line.checked_sub(1)?)?;
        let start = at.char_indices().nth(column.checked_sub(1)?)?.0;
        if !at[start..].starts_with(&written) {
            return None;
        }
        at.replace_range(start..start + written.len(), "1");
        let file: PlanFile = yaml_serde::from_str(&lines.join("\n")).ok()?;
        let layers = match (&file.model, &file.params) {
            (Some(reference), None) => resolve_model_ref(reference, "").ok()?.layers,
            (None, Some(params)) => {
                let params = crate::units::parse_count("params:", params).ok()?;
                // The sequence length a derived shape is made for: the file's, else the default
                // (app::scenario's DEFAULT_SEQ_LEN, 2048).
                crate::shape::derive_shape(params, file.seq_len.unwrap_or(2048))
                    .ok()?
                    .layers
            }
            _ => return None,
        };
        let pp = file.plan.pp.max(1);
        Some((layers, pp, (layers / pp).max(1)))
    };
    let Some((layers, pp, per_stage)) = per_stage() else {
        return message.to_string();
    };
    let Some(at) = message.find(VPP_TOO_LARGE) else {
        return message.to_string();
    };
    format!(
        "{}{VPP_TOO_LARGE}vpp cuts each pipeline stage's layers into model chunks of at least one layer, so it is at most the layers per stage: this file's {layers} layers over pp {pp} are {per_stage} per stage; give vpp: {per_stage} or fewer, valid: 1 to {per_stage}",
        &message[..at]
    )
}

/// A top-level key of a plan file written without a value (`optimizer_states:`, `seq_len: ~`)
/// reads as absent, and the file was evaluated with tpsim's default for it without a word: refused,
/// naming the key. Nested keys keep their nulls (saved plans write `description: null` in an
/// inline model).
fn refuse_empty_top_level_keys(path: &str, text: &str) -> Result<(), SpecError> {
    let Ok(yaml_serde::Value::Mapping(top)) = yaml_serde::from_str::<yaml_serde::Value>(text)
    else {
        return Ok(());
    };
    let empty = top.iter().find_map(|(key, value)| match (key, value) {
        (yaml_serde::Value::String(key), yaml_serde::Value::Null) => Some(key.clone()),
        _ => None,
    });
    match empty {
        Some(key) => Err(SpecError::Invalid {
            origin: quote(path),
            message: format!(
                "{key}: has no value, which would evaluate the file with tpsim's default for it without a word (rule: a key given in a plan file carries its value); give it a value, or delete the line to use the default"
            ),
        }),
        None => Ok(()),
    }
}

/// Parses the text of a plan file (`path` names it in messages).
pub fn parse_plan(path: &str, text: &str) -> Result<PlanFile, SpecError> {
    match parse_yaml::<PlanFile>(path, text) {
        Ok(mut file) => {
            refuse_empty_top_level_keys(path, text)?;
            file.given = PlanKeysGiven::of(text);
            Ok(file)
        }
        Err(SpecError::Yaml {
            origin,
            line,
            column,
            message,
        }) if message.contains(VPP_TOO_LARGE) => Err(SpecError::Yaml {
            message: vpp_fix_for_file(text, line, column, &message),
            origin,
            line,
            column,
        }),
        Err(SpecError::Yaml { message, .. }) if message.contains("untagged enum ModelRef") => {
            match yaml_serde::from_str::<InlineModelOnly>(text) {
                Err(err) => {
                    // yaml_serde names the path (`model.hidden: ...`); add it when it did not.
                    let under_model = |message: String| {
                        if message.starts_with("model") {
                            message
                        } else {
                            format!("model: {message}")
                        }
                    };
                    Err(match yaml_error(path, text, &err) {
                        SpecError::Yaml {
                            origin,
                            line,
                            column,
                            message,
                        } => SpecError::Yaml {
                            origin,
                            line,
                            column,
                            message: under_model(message),
                        },
                        SpecError::Invalid { origin, message } => SpecError::Invalid {
                            origin,
                            message: under_model(message),
                        },
                        other => other,
                    })
                }
                Ok(_) => Err(SpecError::Invalid {
                    origin: quote(path),
                    message: "model: give a bundled name or path (a string), or the whole shape as a mapping (layers, hidden, heads, vocab, seq_len)".into(),
                }),
            }
        }
        Err(other) => Err(other),
    }
}

pub fn resolve_model_ref(reference: &ModelRef, origin: &str) -> Result<Model, SpecError> {
    match reference {
        ModelRef::Named(name) => {
            match in_plan_folder(origin, "model:", "model", BUNDLED_MODELS, name)? {
                PlanReference::Bundled(name) => {
                    load_bundled_model(&name).map_err(|e| unknown_in_plan(e, origin, "model"))
                }
                PlanReference::File(path) => {
                    let flag = format!("{}: model:", quote(origin));
                    let (origin, file): (String, ModelFile) =
                        read_spec(&flag, "model", &[], &path)?;
                    model_of_file(&file, &origin, "")
                }
            }
        }
        ModelRef::Inline(file) => model_of_file(file, &quote(origin), "model."),
    }
}

/// An unknown bundled name read from a plan file's `key` (`gpu: h100`), said with the file and
/// key it came from (`plans/x.yaml: gpu: unknown GPU ...`), as a path there that cannot be read is.
fn unknown_in_plan(err: SpecError, plan_path: &str, key: &str) -> SpecError {
    match err {
        SpecError::UnknownName { .. } => SpecError::Invalid {
            origin: format!("{}: {key}", quote(plan_path)),
            message: err.to_string(),
        },
        other => other,
    }
}

/// What a plan file's `model:` or `gpu:` names: a bundled spec, or a file (its path from here).
#[derive(Debug, PartialEq)]
pub enum PlanReference {
    Bundled(String),
    File(String),
}

impl PlanReference {
    /// How the scenario names it: the bundled name, or the path read.
    pub fn shown(&self) -> &str {
        match self {
            PlanReference::Bundled(name) | PlanReference::File(name) => name,
        }
    }
}

/// Resolves `reference`, a plan file's `key` (`model:`, `gpu:`), as every tool that reads a config
/// file does: a relative path is relative to the plan file's folder, not to wherever tpsim runs,
/// so a plan and the specs beside it move together. A bare name is a file beside the plan when
/// one is there (refused as ambiguous when it is also a bundled name), else the bundled spec,
/// whatever files the current folder holds.
pub fn in_plan_folder(
    plan_path: &str,
    key: &'static str,
    kind: &'static str,
    bundled: &[(&str, &str)],
    reference: &str,
) -> Result<PlanReference, SpecError> {
    let folder = Path::new(plan_path).parent().unwrap_or(Path::new(""));
    let from_plan = || folder.join(reference).to_string_lossy().into_owned();
    let looks_like_path =
        reference.contains('/') || reference.ends_with(".yaml") || reference.ends_with(".yml");
    if Path::new(reference).is_absolute() {
        return Ok(PlanReference::File(reference.to_string()));
    }
    if looks_like_path {
        return Ok(PlanReference::File(from_plan()));
    }
    let beside = std::fs::metadata(folder.join(reference)).is_ok_and(|m| !m.is_dir());
    match (beside, bundled.iter().any(|(name, _)| *name == reference)) {
        (true, true) => Err(SpecError::AmbiguousInPlan {
            plan: quote(plan_path),
            key,
            kind,
            name: quote(reference),
        }),
        (true, false) => Ok(PlanReference::File(from_plan())),
        (false, _) => Ok(PlanReference::Bundled(reference.to_string())),
    }
}

/// The GPU profile a plan file's `gpu:` names ([`in_plan_folder`]), and how to name it.
pub fn load_plan_gpu(plan_path: &str, reference: &str) -> Result<(GpuProfile, String), SpecError> {
    let resolved = in_plan_folder(plan_path, "gpu:", "GPU", BUNDLED_GPUS, reference)?;
    let profile = match &resolved {
        PlanReference::Bundled(name) => {
            load_bundled_gpu(name).map_err(|e| unknown_in_plan(e, plan_path, "gpu"))?
        }
        PlanReference::File(path) => {
            let flag = format!("{}: gpu:", quote(plan_path));
            let (origin, profile): (String, GpuProfile) = read_spec(&flag, "GPU", &[], path)?;
            profile
                .check()
                .map_err(|message| SpecError::Invalid { origin, message })?;
            profile
        }
    };
    Ok((profile, resolved.shown().to_string()))
}

/// What a plan saved at `plan_path` writes for the spec the user named `reference` from the
/// current folder: a bundled name as it is; a file as its path from the plan's folder, which is
/// how [`in_plan_folder`] reads it back (from any folder).
pub fn reference_for_plan(plan_path: &str, reference: &str) -> String {
    let looks_like_path =
        reference.contains('/') || reference.ends_with(".yaml") || reference.ends_with(".yml");
    let is_file = std::fs::metadata(reference).is_ok_and(|m| !m.is_dir());
    if !(looks_like_path || is_file) {
        return reference.to_string();
    }
    // Both exist here (the profile was read, --save checked the folder): their canonical
    // paths, without `..` or links, give the shortest way from one to the other.
    let folder = Path::new(plan_path)
        .parent()
        .filter(|f| !f.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (Ok(target), Ok(folder)) = (
        std::fs::canonicalize(reference),
        std::fs::canonicalize(folder),
    ) else {
        return reference.to_string();
    };
    relative_path(&target, &folder)
        .to_string_lossy()
        .into_owned()
}

/// `target` from `folder`, both absolute: up to their common ancestor, then down.
fn relative_path(target: &Path, folder: &Path) -> std::path::PathBuf {
    let (t, f): (Vec<_>, Vec<_>) = (target.components().collect(), folder.components().collect());
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for part in &t[common..] {
        out.push(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_spec_loads() {
        for (name, _) in BUNDLED_MODELS {
            let model = load_model(name).unwrap();
            assert_eq!(&model.name, name);
        }
        for (name, _) in BUNDLED_GPUS {
            let gpu = load_gpu(name).unwrap();
            assert_eq!(&gpu.name, name);
        }
    }

    #[test]
    fn bundled_models_match_published_parameter_counts() {
        for (name, text) in BUNDLED_MODELS {
            let file: ModelFile = yaml_serde::from_str(text).unwrap();
            let published = file
                .published_params_b
                .expect("every bundled model quotes its size");
            let ours = Model::from_file(&file).unwrap().params() / 1e9;
            // Published sizes are rounded (175B, 8B); 3% covers the rounding, not a fudge.
            assert!(
                (ours / published - 1.0).abs() < 0.03,
                "{name}: ours {ours:.2}B vs published {published}B"
            );
        }
    }

    #[test]
    fn unknown_names_list_known_ones() {
        let err = load_model("gpt5").unwrap_err().to_string();
        assert!(
            err.contains("gpt3-175b") && err.contains("llama3-70b"),
            "{err}"
        );
        let err = load_gpu("tpu-v5").unwrap_err().to_string();
        assert!(err.contains("h100-sxm-80g"), "{err}");
    }

    #[test]
    fn malformed_yaml_names_line_and_column() {
        let err = parse_yaml::<ModelFile>("x.yaml", "name: a\nlayers: [\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("x.yaml:"), "{err}");
        let err = parse_yaml::<ModelFile>("x.yaml", "name: a\nlayerz: 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("layerz") && err.contains("x.yaml:2:"), "{err}");
    }
}
