//! A plan error said in the words of the input that caused it: `eval` builds its plan from flags,
//! a flag's default (the expert TP follows `--tp`), a plan file, or a Megatron-LM launch line, and
//! the core's `PlanError` knows only the degrees. This module names what the user gave.

use anyhow::{Error, anyhow};

use crate::plan::PlanError;
use crate::specs::PlanFile;

/// `err` of a plan whose expert-TP degree the user never gave: Megatron-Core's
/// `--expert-tensor-parallel-size` defaults to the tensor-parallel size, so an expert MLP width or
/// a stage the expert TP does not fit, or biased experts it splits, is the user's `--tp` (`TpFfn`,
/// `EpFolding` and `BiasedExpertsWithExpertTp` name `--etp`).
pub(super) fn with_etp_from_tp(err: PlanError, tp: u32) -> Error {
    match err {
        PlanError::TpFfn {
            flag: "--etp",
            tp: etp,
            ffn,
            valid,
            ..
        } if etp == tp => anyhow!(
            "--tp {tp} does not divide the expert MLP width {ffn}, which the expert TP splits too (--etp defaults to --tp, as in Megatron-Core; Megatron and DeepSpeed split it evenly over the ranks, and tpsim models even splits); keep --tp {tp} and give --etp, valid: {valid}"
        ),
        // An --ep that does not divide the stage alone leaves no --etp to give: only another --ep.
        PlanError::EpFolding {
            ep,
            etp,
            stage_gpus,
            valid_ep,
        } if etp == tp && !stage_gpus.is_multiple_of(u64::from(ep)) => anyhow!(
            "--ep {ep} does not divide the {stage_gpus} GPUs of a pipeline stage (tp x cp x dp), over which Megatron-Core folds the experts, so no --etp fits it beside them; give another --ep, valid with the expert TP at --tp {tp} (--etp defaults to --tp, as in Megatron-Core): {valid_ep}"
        ),
        PlanError::EpFolding {
            ep,
            etp,
            stage_gpus,
            valid_ep,
        } if etp == tp => anyhow!(
            "--ep {ep} x --tp {tp} does not divide the {stage_gpus} GPUs of a pipeline stage (tp x cp x dp), over which Megatron-Core folds the experts (--etp defaults to --tp, as in Megatron-Core); give --etp with ep x etp dividing {stage_gpus}, or another --ep (valid with the expert TP at --tp {tp}: {valid_ep})"
        ),
        PlanError::BiasedExpertsWithExpertTp { etp, model } if etp == tp => anyhow!(
            "--tp {tp} on {model}, whose experts have biases: the expert TP follows it (--etp defaults to --tp, as in Megatron-Core), and Megatron-Core splits biased experts over no expert-TP ranks (TransformerConfig.__post_init__ in megatron/core/transformer/transformer_config.py asserts \"Bias in Moe is only supported when ETP==1\"); keep --tp {tp} and give --etp 1"
        ),
        other => other.into(),
    }
}

/// A flag the user typed next to a plan file, with its value where it is a count (`--tp 8`):
/// such a flag sets its value over the file's key, and one equal to the file's value changes
/// nothing, so a message names it with the file's key (`tp: 8 (also --tp 8)`) and offers no
/// dropping it.
pub(super) type Typed = (&'static str, Option<u32>);

/// Whether `flag` is among the flags the user typed.
fn typed(given: &[Typed], flag: &str) -> bool {
    given.iter().any(|(f, _)| *f == flag)
}

/// A value the plan file gave and no flag overrode: its flag, the file's key, the value as the
/// messages print it.
struct FileValue {
    flag: &'static str,
    key: &'static str,
    value: String,
}

/// A plan's degrees and counts: the `eval` flag that sets each, and its key in a plan file.
const PLAN_KEYS: [(&str, &str); 11] = [
    ("--tp", "tp"),
    ("--pp", "pp"),
    ("--dp", "dp"),
    ("--vpp", "vpp"),
    ("--micro-batch", "micro_batch"),
    ("--cp", "cp"),
    ("--ep", "ep"),
    ("--etp", "etp"),
    ("--zero", "zero"),
    ("--recompute-num-layers", "recompute_num_layers"),
    ("--dp-replicas", "dp_replicas"),
];

/// The scenario's counts: the flag that sets each (over a plan file's key), and the file's key.
const SCENARIO_KEYS: [(&str, &str); 5] = [
    ("--nodes", "nodes"),
    ("--gpus-per-node", "gpus_per_node"),
    ("--seq-len", "seq_len"),
    ("--global-batch", "global_batch"),
    ("--local-batch", "local_batch"),
];

/// The value of a [`PLAN_KEYS`] key in `plan`.
fn plan_value(plan: &crate::plan::PlanRequest, key: &str) -> u32 {
    match key {
        "tp" => plan.tp,
        "pp" => plan.pp,
        "dp" => plan.dp,
        "vpp" => plan.vpp,
        "micro_batch" => plan.micro_batch,
        "cp" => plan.cp,
        "ep" => plan.ep,
        "etp" => plan.etp,
        "zero" => u32::from(plan.zero),
        "dp_replicas" => plan.dp_replicas,
        _ => plan.recompute_num_layers,
    }
}

/// The counts and degrees of `file` that no flag in `given` replaced with another value, each
/// with the flag when one was typed with the file's own value.
fn file_values(file: &PlanFile, given: &[Typed]) -> Vec<(FileValue, Option<&'static str>)> {
    let scenario = SCENARIO_KEYS.into_iter().zip([
        file.nodes,
        file.gpus_per_node,
        file.seq_len,
        file.global_batch,
        file.local_batch,
    ]);
    let scenario = scenario.map(|((flag, key), value)| (flag, key, value));
    let plan = PLAN_KEYS
        .into_iter()
        // A file without `etp:` runs the framework's default (`PlanFile::etp_for`), not the
        // value its plan was read with: that one is no value of the file's to quote.
        // Nor is ZeRO-0 from a file without `zero:` ([`defaulted_key_words`]).
        .filter(|&(_, key)| key != "etp" || file.given.etp)
        .filter(|&(_, key)| key != "zero" || file.given.zero)
        .map(|(flag, key)| (flag, key, Some(plan_value(&file.plan, key))))
        .chain(scenario);
    let mut values: Vec<_> = plan
        .filter_map(|(flag, key, value)| {
            let value = value?;
            let echo = match given.iter().find(|(f, _)| *f == flag) {
                None => None,
                Some((_, typed)) if *typed == Some(value) => Some(flag),
                Some(_) => return None,
            };
            Some((
                FileValue {
                    flag,
                    key,
                    value: value.to_string(),
                },
                echo,
            ))
        })
        .collect();
    // The pipeline schedule, a word (`--pp-schedule dualpipev needs ...` is the file's
    // `pp_schedule: dualpipev` unless the flag was typed).
    if let Some(schedule) = file.pp_schedule
        && !typed(given, SCHEDULE_FLAG)
    {
        values.push((
            FileValue {
                flag: SCHEDULE_FLAG,
                key: SCHEDULE_KEY,
                value: schedule.as_str().to_string(),
            },
            None,
        ));
    }
    // The GEMM precision and the framework, words (`--precision nvfp4: the h100-sxm-80g has no
    // nvfp4 tensor cores`, `--framework megatron-lm-2021: model ... has experts` are the file's
    // `precision: nvfp4` and `framework: megatron-lm-2021` unless the flag was typed).
    // `precision:` left out is bf16, which every GPU and framework runs, so no error quotes it.
    for (flag, key, value) in [
        (
            PRECISION_FLAG,
            PRECISION_KEY,
            Some(file.plan.precision.as_str()).filter(|p| *p != "bf16"),
        ),
        (
            FRAMEWORK_FLAG,
            FRAMEWORK_KEY,
            file.framework
                .map(crate::training::TrainingFramework::as_str),
        ),
        // The training words an emitter refuses (`--optimizer-states fp32 is not how this recipe
        // keeps its states` was the file's `optimizer_states: fp32`, a flag never typed).
        (
            GRAD_DTYPE_FLAG,
            "grad_dtype",
            file.grad_dtype.map(crate::training::GradDtype::as_str),
        ),
        (
            OPTIMIZER_STATES_FLAG,
            "optimizer_states",
            file.optimizer_states
                .map(crate::training::OptimizerStates::as_str),
        ),
        (
            ATTENTION_FLAG,
            "attention",
            file.attention.map(crate::training::AttentionKernel::as_str),
        ),
        (
            CP_EXCHANGE_FLAG,
            "cp_exchange",
            file.cp_exchange.map(crate::training::CpExchange::as_str),
        ),
    ] {
        if let Some(value) = value
            && !typed(given, flag)
        {
            values.push((
                FileValue {
                    flag,
                    key,
                    value: value.to_string(),
                },
                None,
            ));
        }
    }
    // Activation offloading, a count of the scenario's (`--cpu-offload-layers 8 with --pp 2` is
    // the file's `cpu_offload_layers: 8` unless the flag set another), and the recompute, a word
    // (`with --recompute full` is the file's `recompute: full` unless the flag was typed).
    if let Some(layers) = file.cpu_offload_layers.filter(|&n| n > 0) {
        let echo = match given.iter().find(|(f, _)| *f == OFFLOAD_FLAG) {
            None => Some(None),
            Some((_, typed)) if *typed == Some(layers) => Some(Some(OFFLOAD_FLAG)),
            Some(_) => None,
        };
        if let Some(echo) = echo {
            values.push((
                FileValue {
                    flag: OFFLOAD_FLAG,
                    key: OFFLOAD_KEY,
                    value: layers.to_string(),
                },
                echo,
            ));
        }
    }
    // A file without `recompute:` ran eval's default, none: no line of the file's to quote
    // ([`defaulted_key_words`]).
    if !typed(given, RECOMPUTE_FLAG) && file.given.recompute {
        values.push((
            FileValue {
                flag: RECOMPUTE_FLAG,
                key: RECOMPUTE_KEY,
                value: file.plan.recompute.as_str().to_string(),
            },
            None,
        ));
    }
    // The one switch a plan error quotes: `--sequence-parallel with --tp 8 splits ...` is the
    // file's `sequence_parallel: true` (quoted bare, as the flag is typed), unless a flag set it;
    // a file without the line ran eval's default ([`defaulted_key_words`]).
    if file.plan.sequence_parallel && file.given.sequence_parallel {
        let echo = match given.iter().find(|(f, _)| *f == SP_FLAG) {
            None => None,
            Some((_, Some(1))) => Some(SP_FLAG),
            Some(_) => return values,
        };
        values.push((
            FileValue {
                flag: SP_FLAG,
                key: SP_KEY,
                value: "true".into(),
            },
            echo,
        ));
    }
    values
}

/// The pipeline schedule's flag (typed next to `--plan` as `None`) and its plan-file key.
const SCHEDULE_FLAG: &str = "--pp-schedule";
const SCHEDULE_KEY: &str = "pp_schedule";

/// The GEMM precision's and the framework's flags (words, typed next to `--plan` as `None`) and
/// their plan-file keys.
const PRECISION_FLAG: &str = "--precision";
const PRECISION_KEY: &str = "precision";
const FRAMEWORK_FLAG: &str = "--framework";
const FRAMEWORK_KEY: &str = "framework";

/// The training words' flags (typed next to `--plan` as `None`); their plan-file keys are the
/// flags' names in snake case.
const GRAD_DTYPE_FLAG: &str = "--grad-dtype";
const OPTIMIZER_STATES_FLAG: &str = "--optimizer-states";
const ATTENTION_FLAG: &str = "--attention";
const CP_EXCHANGE_FLAG: &str = "--cp-exchange";

/// Activation offloading's flag (typed next to `--plan` with its count) and its plan-file key.
const OFFLOAD_FLAG: &str = "--cpu-offload-layers";
const OFFLOAD_KEY: &str = "cpu_offload_layers";

/// The recompute's flag (a word, typed next to `--plan` as `None`) and its plan-file key.
const RECOMPUTE_FLAG: &str = "--recompute";
const RECOMPUTE_KEY: &str = "recompute";

/// Sequence parallelism's flag (`--sequence-parallel true|false`, typed next to `--plan` as
/// `Some(1)` or `Some(0)`) and its plan-file key.
const SP_FLAG: &str = "--sequence-parallel";
const SP_KEY: &str = "sequence_parallel";

/// Where `pattern` stands in `text` as a whole token quoting the input: not inside a longer flag
/// or number, and before the fix (a message is "value and rule; fix", and "use --ep 1 --etp 1"
/// or "e.g. --dp 2" offers a value, it does not quote one).
fn token_starts(text: &str, pattern: &str) -> Vec<usize> {
    let quoted = text.find("; ").unwrap_or(text.len());
    text.match_indices(pattern)
        .map(|(at, _)| at)
        .filter(|&at| at < quoted)
        .filter(|&at| {
            let before = text[..at].chars().next_back();
            let rest = &text[at + pattern.len()..];
            let after = rest.chars().next();
            // "--optimizer-states fp32" is no quote of "--optimizer-states fp32-params".
            let longer_word = rest.starts_with('-') && rest[1..].starts_with(char::is_alphanumeric);
            !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '.')
                && !longer_word
                && !text[..at].ends_with("e.g. ")
        })
        .collect()
}

/// Where `pattern` stands in `text` as a whole token (not inside a longer flag or word), the fix
/// included.
fn token_starts_anywhere(text: &str, pattern: &str) -> Vec<usize> {
    text.match_indices(pattern)
        .map(|(at, _)| at)
        .filter(|&at| {
            let after = text[at + pattern.len()..].chars().next();
            !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '-')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '-')
        })
        .collect()
}

/// `message` with each value it quotes as a flag (`--tp 3`) that came from the plan file at
/// `path` said as the file's key (`tp: 3`), and the file named: after the key where one value is
/// the file's (`tp: 3 in plans/x.yaml does not divide ...`), in front where several are. Values
/// the user gave as flags keep their flags; a flag typed with the file's own value is named after
/// the key (`tp: 8 (also --tp 8)`), as it overrode nothing.
pub(super) fn in_file_words(message: &str, path: &str, file: &PlanFile, given: &[Typed]) -> String {
    let mut text = defaulted_key_words(message, path, file, given);
    let mut replaced: Vec<(usize, usize)> = Vec::new();
    for (v, echo) in file_values(file, given) {
        let patterns = if v.flag == SP_FLAG {
            vec![(SP_FLAG.to_string(), ": ")]
        } else if v.flag == SCHEDULE_FLAG {
            vec![(format!("{} {}", v.flag, v.value), ": ")]
        } else {
            vec![
                (format!("{} {}", v.flag, v.value), ": "),
                (format!("{} = {}", v.flag, v.value), ": "),
                // "but --vpp is 3" (a V schedule's two chunks) says "but vpp is 3".
                (format!("{} is {}", v.flag, v.value), " is "),
            ]
        };
        for (pattern, between) in patterns {
            let with = match echo {
                Some(flag) => format!("{}{between}{} (also {flag} {})", v.key, v.value, v.value),
                None => format!("{}{between}{}", v.key, v.value),
            };
            for at in token_starts(&text, &pattern).into_iter().rev() {
                text.replace_range(at..at + pattern.len(), &with);
                // Earlier marks after this one shift by the length change.
                let shift = with.len() as isize - pattern.len() as isize;
                for mark in &mut replaced {
                    if mark.0 > at {
                        mark.0 = (mark.0 as isize + shift) as usize;
                    }
                }
                // The file is named right after the key and value, before `(also --tp 8)`.
                replaced.push((at, format!("{}{between}{}", v.key, v.value).len()));
            }
        }
    }
    match replaced.as_slice() {
        [] => text,
        [(at, len)] => {
            text.insert_str(at + len, &format!(" in {path}"));
            text
        }
        _ => format!("{path}: {text}"),
    }
}

/// `message` with each value it quotes from a flag the user did not type and a key the plan file
/// at `path` does not write said as defaulted ([`defaulted_etp_words`], and the same for `zero:`
/// and `sequence_parallel:`): "--dp-replicas 2 with --zero 0" named a flag never typed, and once
/// in the file's words a `zero: 0` line the file does not have.
fn defaulted_key_words(message: &str, path: &str, file: &PlanFile, given: &[Typed]) -> String {
    let mut text = message.to_string();
    if !file.given.etp && !typed(given, "--etp") {
        text = defaulted_etp_words(&text, path);
    }
    if !file.given.zero && !typed(given, "--zero") {
        // Every ZeRO-less default eval takes is stage 0 (`defaults_unlike_plan_rows`).
        for at in token_starts(&text, "--zero 0").into_iter().rev() {
            text.replace_range(
                at.."--zero 0".len() + at,
                &format!(
                    "ZeRO-0 (defaulted: {path} has no zero: line under plan:, so eval took stage 0, and a zero: line there sets another)"
                ),
            );
        }
    }
    if !file.given.sequence_parallel && !typed(given, SP_FLAG) {
        text = defaulted_sp_words(&text, path);
    }
    if !file.given.recompute && !typed(given, RECOMPUTE_FLAG) {
        let quoted = "--recompute none";
        for at in token_starts(&text, quoted).into_iter().rev() {
            text.replace_range(
                at..at + quoted.len(),
                &format!(
                    "no recompute (defaulted: {path} has no recompute: line under plan:, so eval took none, and a recompute: line there sets another)"
                ),
            );
        }
    }
    text
}

/// [`defaulted_key_words`] for sequence parallelism: each `--sequence-parallel` the rule quotes
/// (`without --sequence-parallel`, `--sequence-parallel with --tp 2`, `--sequence-parallel
/// false`) becomes the switch as eval defaulted it, on or off.
fn defaulted_sp_words(message: &str, path: &str) -> String {
    let mut text = message.to_string();
    for at in token_starts(&text, SP_FLAG).into_iter().rev() {
        let after = &text[at + SP_FLAG.len()..];
        let (on, len) = if let Some(rest) = after.strip_prefix(" false")
            && !rest.starts_with(char::is_alphanumeric)
        {
            (false, SP_FLAG.len() + " false".len())
        } else if let Some(rest) = after.strip_prefix(" true")
            && !rest.starts_with(char::is_alphanumeric)
        {
            (true, SP_FLAG.len() + " true".len())
        } else {
            (!text[..at].ends_with("without "), SP_FLAG.len())
        };
        let words = format!(
            "sequence parallelism (defaulted {}: {path} has no sequence_parallel: line under plan:, and a sequence_parallel: line there sets it)",
            if on { "on" } else { "off" }
        );
        text.replace_range(at..at + len, &words);
    }
    text
}

/// `message` with each expert-TP degree it quotes as `--etp N` said as defaulted, for a plan file
/// at `path` without an `etp:` line and no `--etp` typed: the degree is the framework's default
/// (`PlanFile::etp_for`, the tp under Megatron-Core), which the user neither typed nor wrote, so
/// the message says so and how to write it, where it said `--etp N` (a flag never typed) or
/// `etp: N in FILE` (a line the file does not have). No `; ` is written: it starts the fix.
fn defaulted_etp_words(message: &str, path: &str) -> String {
    let mut text = message.to_string();
    let mut from = 0;
    while let Some(found) = text[from..].find("--etp ") {
        let at = from + found;
        let digits: String = text[at + 6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let pattern = format!("--etp {digits}");
        if digits.is_empty() || !token_starts(&text, &pattern).contains(&at) {
            from = at + 6;
            continue;
        }
        let words = format!(
            "etp {digits} (defaulted: {path} has no etp: line under plan:, so the framework's default applies, the tp under Megatron-Core, and an etp: line there sets another)"
        );
        text.replace_range(at..at + pattern.len(), &words);
        from = at + words.len();
    }
    text
}

/// `message` about a plan file's values: the fix it offers names the file's keys, the lines the
/// user edits, not flags ("e.g. --dp 2" becomes "e.g. dp: 2", "change --tp, --cp or --pp"
/// becomes "change tp, cp or pp", "e.g. --global-batch 10" "e.g. global_batch: 10"). The flags
/// in `given`, which the user typed over the file's keys, keep their flags, and a scenario flag
/// offered without a value ("or pass --nodes") stays the flag it offers.
pub(super) fn fix_in_file_keys(message: &str, given: &[Typed]) -> String {
    let Some(at) = message.find("; ") else {
        return message.to_string();
    };
    let (rule, fix) = message.split_at(at);
    let mut fix = fix.to_string();
    let keys = PLAN_KEYS
        .into_iter()
        .map(|(flag, key)| (flag, key, true))
        .chain(
            SCENARIO_KEYS
                .into_iter()
                .map(|(flag, key)| (flag, key, false)),
        );
    for (flag, key, bare_too) in keys.filter(|(flag, _, _)| !typed(given, flag)) {
        let mut out = String::with_capacity(fix.len());
        let mut rest = fix.as_str();
        while let Some(i) = rest.find(flag) {
            let after = &rest[i + flag.len()..];
            let valued =
                after.starts_with(' ') && after[1..].starts_with(|c: char| c.is_ascii_digit());
            // "give a --seq-len that is a multiple of 8" (or "raise --global-batch (or
            // --local-batch)") asks for a value of the key, as a valued flag does ("or pass
            // --nodes" offers the flag itself).
            let asks_value = [" a ", "raise ", "(or "]
                .iter()
                .any(|before| rest[..i].ends_with(before));
            // A whole flag only (`--tp` in `--tp-comm-overlap` is another flag).
            if after.starts_with(|c: char| c.is_alphanumeric() || c == '-')
                || !(valued || bare_too || asks_value)
            {
                out.push_str(&rest[..i + flag.len()]);
                rest = after;
                continue;
            }
            out.push_str(&rest[..i]);
            out.push_str(key);
            if valued {
                out.push(':');
            }
            rest = after;
        }
        out.push_str(rest);
        fix = out;
    }
    // "give --recompute none" offers the file's word, and "drop --cpu-offload-layers" its line,
    // unless a flag set them.
    if !typed(given, RECOMPUTE_FLAG) {
        for word in ["none", "selective", "full"] {
            fix = fix.replace(
                &format!("{RECOMPUTE_FLAG} {word}"),
                &format!("{RECOMPUTE_KEY}: {word}"),
            );
        }
    }
    if !typed(given, OFFLOAD_FLAG) {
        fix = fix.replace(
            &format!("drop {OFFLOAD_FLAG}"),
            &format!("drop {OFFLOAD_KEY}"),
        );
    }
    // "or --sequence-parallel false" offers the file's switch, and "with --sequence-parallel"
    // (or "add --sequence-parallel") its line set on, unless a flag set it.
    if !typed(given, SP_FLAG) {
        for value in ["true", "false"] {
            fix = fix.replace(&format!("{SP_FLAG} {value}"), &format!("{SP_KEY}: {value}"));
        }
        for at in token_starts_anywhere(&fix, SP_FLAG).into_iter().rev() {
            fix.replace_range(at..at + SP_FLAG.len(), &format!("{SP_KEY}: true"));
        }
    }
    format!("{rule}{fix}")
}

/// The flags of the scenario (cluster and batch) the user typed, with their values: these
/// override a plan file's keys, so an error quoting them quotes the flag.
pub(super) fn scenario_flags_given(
    cluster: &crate::cli::ClusterArgs,
    training: &crate::cli::TrainingArgs,
) -> Vec<Typed> {
    let mut given: Vec<Typed> = [
        ("--nodes", cluster.nodes),
        ("--gpus-per-node", cluster.gpus_per_node),
        ("--seq-len", training.seq_len),
        ("--global-batch", training.global_batch),
        ("--local-batch", training.local_batch),
        (OFFLOAD_FLAG, training.cpu_offload_layers),
    ]
    .into_iter()
    .filter(|(_, value)| value.is_some())
    .collect();
    // The schedule, the precision and the framework are words, not counts: typed or not.
    for (flag, typed) in [
        (SCHEDULE_FLAG, training.pp_schedule.is_some()),
        (PRECISION_FLAG, training.precision.is_some()),
        (FRAMEWORK_FLAG, training.framework.is_some()),
        (GRAD_DTYPE_FLAG, training.grad_dtype.is_some()),
        (OPTIMIZER_STATES_FLAG, training.optimizer_states.is_some()),
        (ATTENTION_FLAG, training.attention.is_some()),
        (CP_EXCHANGE_FLAG, training.cp_exchange.is_some()),
    ] {
        if typed {
            given.push((flag, None));
        }
    }
    given
}

/// [`in_file_words`] for an error of a command that read the plan file at `path`, its fix in
/// the file's keys ([`fix_in_file_keys`]); an error that quotes none of the file's values (or a
/// file that cannot be read again) is kept as it is.
pub(super) fn with_file_words(
    err: Error,
    path: &str,
    given: &[Typed],
    cluster: &crate::cli::ClusterArgs,
) -> Error {
    let Ok(file) = crate::specs::load_plan(path) else {
        return err;
    };
    let message = format!("{err:#}");
    let worded = in_file_words(&message, path, &file, given);
    if worded == message {
        err
    } else {
        anyhow!(cluster_size_overridden(
            &fix_in_file_keys(&worded, given),
            &file,
            given,
            super::scenario::file_gpus_per_node(cluster, &file, path),
        ))
    }
}

/// A GPU-count mismatch whose cluster size the user's --nodes or --gpus-per-node set over the
/// plan file's: the message says so and offers dropping the flag (`report PLAN --nodes 1` said
/// only "the cluster has 8", and its fixes were all degree changes). A flag equal to the file's
/// value set nothing over it, so it is not named (dropping it would change nothing); a file
/// without `gpus_per_node:` has the node size of its GPU (`gpus_per_node`, from
/// [`super::scenario::file_gpus_per_node`]).
pub(super) fn cluster_size_overridden(
    message: &str,
    file: &PlanFile,
    given: &[Typed],
    gpus_per_node: Option<u32>,
) -> String {
    const HAS: &str = "but the cluster has ";
    let Some(at) = message.find(HAS) else {
        return message.to_string();
    };
    let (flags, overrides): (Vec<&str>, Vec<String>) = [
        ("--nodes", "nodes", file.nodes),
        ("--gpus-per-node", "gpus_per_node", file.gpus_per_node),
    ]
    .into_iter()
    .filter(|&(flag, _, value)| {
        let default = match flag {
            "--gpus-per-node" => value.or(gpus_per_node),
            _ => value,
        };
        given
            .iter()
            .any(|&(f, typed)| f == flag && (default.is_none() || typed != default))
    })
    .map(|(flag, key, value)| match value {
        Some(value) => (flag, format!("{flag} over the file's {key}: {value}")),
        None => (flag, flag.to_string()),
    })
    .unzip();
    if flags.is_empty() {
        return message.to_string();
    }
    let count_end = at
        + HAS.len()
        + message[at + HAS.len()..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(message.len() - at - HAS.len());
    format!(
        "{} (set by {}){}; or drop {} to plan on the file's cluster",
        &message[..count_end],
        overrides.join(" and "),
        &message[count_end..],
        flags.join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> PlanFile {
        crate::specs::parse_plan(
            "x.yaml",
            "params: 7B\nnodes: 2\nglobal_batch: 64\nplan:\n  tp: 3\n  pp: 1\n  dp: 2\n",
        )
        .unwrap()
    }

    #[test]
    fn a_file_value_is_named_by_its_key_and_the_file() {
        let words = in_file_words(
            "--tp 3 does not divide 32 heads; valid: 1, 2",
            "x.yaml",
            &file(),
            &[],
        );
        assert_eq!(
            words,
            "tp: 3 in x.yaml does not divide 32 heads; valid: 1, 2"
        );
    }

    #[test]
    fn several_file_values_name_the_file_once_in_front() {
        let words = in_file_words(
            "--tp 3 x --cp 1 x --pp 1 x --dp 2 = 6 GPUs, but the cluster has 16; e.g. --dp 2",
            "x.yaml",
            &file(),
            &[("--cp", None)],
        );
        assert_eq!(
            words,
            "x.yaml: tp: 3 x --cp 1 x pp: 1 x dp: 2 = 6 GPUs, but the cluster has 16; e.g. --dp 2"
        );
    }

    #[test]
    fn flags_the_user_gave_and_longer_tokens_keep_their_words() {
        // `--etp 3` typed: the file has no etp: line, whose default a message says is defaulted
        // (`defaulted_etp_words`).
        let message = "--tp 3 does not divide, nor --etp 3 or --tp 32; use --tp 3 elsewhere";
        let etp = ("--etp", Some(3));
        assert_eq!(
            in_file_words(message, "x.yaml", &file(), &[("--tp", Some(4)), etp]),
            message
        );
        assert_eq!(
            in_file_words(message, "x.yaml", &file(), &[etp]),
            "tp: 3 in x.yaml does not divide, nor --etp 3 or --tp 32; use --tp 3 elsewhere"
        );
    }

    #[test]
    fn a_fix_for_files_names_their_keys() {
        assert_eq!(
            fix_in_file_keys(
                "x.yaml: tp: 8 x cp: 1 x pp: 5 x dp: 2 = 80 GPUs, but the cluster has 256; choose degrees whose product is 256 (no --dp works: 256 is not a multiple of tp x cp x pp = 40; change --tp, --cp or --pp)",
                &[]
            ),
            "x.yaml: tp: 8 x cp: 1 x pp: 5 x dp: 2 = 80 GPUs, but the cluster has 256; choose degrees whose product is 256 (no dp works: 256 is not a multiple of tp x cp x pp = 40; change tp, cp or pp)"
        );
        assert_eq!(
            fix_in_file_keys(
                "dp: 3 in x.yaml gives 384 GPUs; e.g. --dp 2, or --tp-comm-overlap false",
                &[]
            ),
            "dp: 3 in x.yaml gives 384 GPUs; e.g. dp: 2, or --tp-comm-overlap false"
        );
        // A flag the user typed over the file keeps its flag; a scenario count is a key too.
        assert_eq!(
            fix_in_file_keys(
                "global_batch: 9 in x.yaml is not divisible by dp: 2; e.g. --global-batch 10 or --dp 1",
                &[("--dp", Some(1))]
            ),
            "global_batch: 9 in x.yaml is not divisible by dp: 2; e.g. global_batch: 10 or --dp 1"
        );
        assert_eq!(
            fix_in_file_keys("x.yaml gives no nodes; add nodes: 32, or pass --nodes", &[]),
            "x.yaml gives no nodes; add nodes: 32, or pass --nodes"
        );
    }
}
