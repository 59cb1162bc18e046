//! Clap's usage errors as one line a user can act on: number-parsing messages in words, ranges
//! said as the bound broken, and Megatron-LM switches pasted on tpsim's command line named with
//! tpsim's spelling.

mod conflicts;

/// The one-line message for a clap usage error (what `main` prints after `error: `).
pub fn usage_error_line(err: &clap::Error) -> String {
    if let Some(message) = megatron_spelling(err) {
        return message;
    }
    // args_os: `args` panics on an argument that is not UTF-8 (such a word is no module name).
    let words: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(message) = dashed_recompute_module(err, &words) {
        return message;
    }
    // args_os: `args` panics on an argument that is not UTF-8.
    let command = std::env::args_os()
        .nth(1)
        .and_then(|c| c.into_string().ok())
        .unwrap_or_default();
    if let Some(message) = plan_degree_elsewhere(err, &command) {
        return message;
    }
    if let Some(message) = plan_degree_as_sweep_axis(err) {
        return message;
    }
    if let Some(message) = conflicts::given_twice(err, &command) {
        return message;
    }
    if let Some(message) = conflicts::given_together(err, &command) {
        return message;
    }
    if let Some(message) = flag_of_other_commands(err, &command) {
        return message;
    }
    if let Some(message) = file_without_its_flag(err, &command) {
        return message;
    }
    if let Some(message) = gpu_count_elsewhere(err, &command) {
        return message;
    }
    if let Some(message) = precision_spelling(err) {
        return message;
    }
    if let Some(message) = token_count_with_unit(err) {
        return message;
    }
    // Clap says only that some argument was not UTF-8; name it, from the arguments themselves.
    if err.kind() == clap::error::ErrorKind::InvalidUtf8
        && let Some(message) = invalid_utf8_line(&std::env::args_os().skip(1).collect::<Vec<_>>())
    {
        return message;
    }
    // Clap's usage error, made one line: the message up to its "Usage:" block.
    let rendered = err.render().to_string();
    let lines: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = lines.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    format!("{} (see --help)", plain_number_rules(line))
}

/// `--precision` with a value tpsim does not take: clap's nearest spelling offered `fp8` for
/// `fp4` (a 4-bit format asked for, an 8-bit one suggested). The valid values are listed, and a
/// spelling of a 4-bit float (`fp4`, `nv-fp4`, `FP4`) is pointed at nvfp4, of a microscaled
/// 8-bit one (`mx-fp8`, `mxfp-8`) at mxfp8; the value is never taken as either.
fn precision_spelling(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::InvalidValue {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    if !arg.starts_with("--precision") {
        return None;
    }
    let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidValue) else {
        return None;
    };
    let squeezed: String = value
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    let meant = if squeezed.contains("fp4") || squeezed.contains("float4") || squeezed == "e2m1" {
        Some("nvfp4 (NVIDIA's 4-bit float with per-block scales, Blackwell only)")
    } else if squeezed.starts_with("mx") && squeezed.contains('8') {
        Some("mxfp8 (8-bit floats with per-block microscaling, Blackwell only)")
    } else if squeezed.contains("fp8") || squeezed.contains("float8") || squeezed == "e4m3" {
        Some("fp8 (8-bit floats with per-tensor scaling)")
    } else if squeezed.contains("bf16") || squeezed.contains("bfloat16") {
        Some("bf16")
    } else {
        None
    };
    let fix = match meant {
        Some(name) => format!(
            "did you mean {name}? write --precision {}",
            name.split(' ').next().unwrap_or(name)
        ),
        None => "e.g. --precision bf16".to_string(),
    };
    Some(format!(
        "--precision {}: not a GEMM precision tpsim prices (rule: one of bf16, fp8, mxfp8, nvfp4); {fix}",
        crate::input_file::quote(value)
    ))
}

/// `--seq-len 128K` or `--global-batch 16M`: a count written with a K or M suffix, as context
/// lengths and batch sizes are said ("128K context", "16M tokens per batch"), got clap's "expected
/// a whole number such as 8", which names no number to write. The message names the digits: a
/// context length's K is 1024 tokens (Llama 3.1's 128K context is max_position_embeddings 131072,
/// meta-llama/Llama-3.1-8B config.json), and the global batch counts sequences, not tokens, so its
/// fix divides the tokens (M = 2^20: Llama 3 405B's "16M tokens" are 2,048 sequences of 8,192
/// tokens, Dubey et al. 2024 Table 4) by the sequence length given on the same command line.
fn token_count_with_unit(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if !matches!(
        err.kind(),
        clap::error::ErrorKind::InvalidValue | clap::error::ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split(' ').next().unwrap_or(arg);
    if flag != "--seq-len" && flag != "--global-batch" {
        return None;
    }
    let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidValue) else {
        return None;
    };
    let value = value.trim();
    let (last, _) = value.char_indices().last()?;
    let (digits, unit) = value.split_at(last);
    // Binary as context lengths count (128K = 131072), with the decimal reading beside it.
    let (scale, decimal): (u64, u64) = match unit {
        "k" | "K" => (1 << 10, 1_000),
        "m" | "M" => (1 << 20, 1_000_000),
        _ => return None,
    };
    let count: u64 = digits.parse().ok().filter(|n| *n > 0)?;
    // Past u32 the flag refuses the digits too: the generic message says that.
    let tokens = count
        .checked_mul(scale)
        .filter(|t| *t <= u64::from(u32::MAX))?;
    let unit = unit.to_ascii_uppercase();
    let shown = crate::input_file::quote(value);
    if flag == "--seq-len" {
        return Some(format!(
            "--seq-len {shown}: tokens per sequence are written in digits, with no unit; a {count}{unit} context is {count} x {scale} tokens: write --seq-len {tokens} (or {} for {count}{unit} read as {count} x {decimal})",
            count * decimal
        ));
    }
    let seq_len = seq_len_on_command_line();
    let fix = match seq_len {
        Some(len) if tokens % u64::from(len) == 0 => format!(
            "{count}{unit} tokens ({count} x {scale}) of {len}-token sequences is --global-batch {}",
            tokens / u64::from(len)
        ),
        Some(len) => format!(
            "{count}{unit} tokens ({count} x {scale}) of {len}-token sequences is about --global-batch {}",
            (tokens as f64 / f64::from(len)).round().max(1.0)
        ),
        None => format!(
            "divide the tokens per step by the tokens per sequence (--seq-len): {count}{unit} tokens ({count} x {scale}) of 8192-token sequences is --global-batch {}",
            (tokens / 8192).max(1)
        ),
    };
    Some(format!(
        "--global-batch {shown}: the global batch counts sequences per step, in digits, not tokens; {fix}"
    ))
}

/// The `--seq-len` (or `--seq-length`) value on the command line, where it is plain digits.
fn seq_len_on_command_line() -> Option<u32> {
    let args: Vec<String> = std::env::args_os()
        .filter_map(|a| a.into_string().ok())
        .collect();
    args.iter().enumerate().find_map(|(i, a)| {
        let value = match a.split_once('=') {
            Some((flag, value)) if flag == "--seq-len" || flag == "--seq-length" => value,
            None if a == "--seq-len" || a == "--seq-length" => args.get(i + 1)?,
            _ => return None,
        };
        value.parse::<u32>().ok().filter(|n| *n > 0)
    })
}

/// Clap's number-parsing messages in words a user can act on: Rust's "invalid digit found in
/// string" means the flag takes a whole number, "invalid float literal" a number, "number too
/// large to fit in target type" a number too large for it, and "N is not in A..=B" (any range
/// clap checks, not only those from 0) a number outside the range it takes.
fn plain_number_rules(line: &str) -> String {
    let line = line
        .replace(
            "invalid digit found in string",
            "expected a whole number such as 8 (digits only: no decimal point, exponent or unit)",
        )
        .replace(
            "invalid float literal",
            "expected a number such as 0.5 or 2e-3",
        )
        .replace(
            "number too large to fit in target type",
            "too large for this flag; give a smaller whole number",
        )
        .replace(
            "cannot parse integer from empty string",
            "expected a whole number, got nothing",
        );
    match outside_range(&line) {
        Some(plain) => plain,
        None => line,
    }
}

/// Clap's "VALUE is not in MIN..=MAX" (or "MIN..MAX") tail, said as which bound VALUE breaks;
/// `None` when the line has no such range.
fn outside_range(line: &str) -> Option<String> {
    let at = line.find(" is not in ")?;
    let (head, tail) = line.split_at(at);
    let range = tail.trim_start_matches(" is not in ");
    let range_end = range
        .find(|c: char| c.is_whitespace())
        .unwrap_or(range.len());
    let (range, rest) = range.split_at(range_end);
    let (min, max, inclusive) = match range.split_once("..=") {
        Some((min, max)) => (min, max, true),
        None => {
            let (min, max) = range.split_once("..")?;
            (min, max, false)
        }
    };
    let value = head.rsplit(' ').next().unwrap_or("");
    let below = match (value.parse::<i128>(), min.parse::<i128>()) {
        (Ok(v), Ok(lo)) => v < lo,
        _ => value.starts_with('-'),
    };
    let bound = |max: &str| {
        if inclusive || max.is_empty() {
            max.to_string()
        } else {
            max.parse::<i128>()
                .map_or(max.to_string(), |m| (m - 1).to_string())
        }
    };
    Some(if below && min == "0" {
        format!(
            "{head} is negative; it takes a whole number up to {}{rest}",
            bound(max)
        )
    } else if below {
        format!("{head} is less than {min}, the least it takes{rest}")
    } else {
        format!(
            "{head} is larger than {}, the most it takes{rest}",
            bound(max)
        )
    })
}

/// A whole number spelled other than in plain digits, which clap's parsers read without a word:
/// `--nodes -0` is read as 0 (clap reads a whole-number flag through a signed parser), `--tp +8`
/// as 8 and `--tp 007` as 7, so every later message would quote a value the user never wrote.
/// `Some` is the one-line error, quoting the value as typed and the plain digits to write;
/// `command` is the one `matches` came from. List items are checked one by one.
pub fn whole_number_spelling_line(
    command: &clap::Command,
    matches: &clap::ArgMatches,
) -> Option<String> {
    fn is_whole_number(matches: &clap::ArgMatches, id: &str) -> bool {
        matches.try_get_many::<u32>(id).is_ok()
            || matches.try_get_many::<u64>(id).is_ok()
            || matches.try_get_many::<usize>(id).is_ok()
            || matches.try_get_many::<u16>(id).is_ok()
            || matches.try_get_many::<u8>(id).is_ok()
    }
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        let Ok(Some(raw)) = matches.try_get_raw(id) else {
            continue;
        };
        for value in raw {
            let lossy = value.to_string_lossy();
            let text = crate::units::list_item(&lossy);
            let Some(plain) = crate::units::plain_digits_for(text) else {
                continue;
            };
            if !is_whole_number(matches, id) {
                continue;
            }
            let flag = arg
                .get_long()
                .map_or_else(|| id.to_string(), |long| format!("--{long}"));
            // `--nodes 00` (or `+0`, `-0`) is zero, which a count refuses: offering `--nodes 0`
            // only moved the error. The counts are the spec keys that start at 1, by the same
            // name (`--global-batch` is `global_batch:`), as for a plan file's `nodes: -0`.
            let counts_from_one = plain == "0"
                && (crate::specs::POSITIVE_KEYS
                    .contains(&flag.trim_start_matches('-').replace('-', "_").as_str())
                    || FLAGS_COUNTING_FROM_ONE.contains(&flag.as_str()));
            let fix = if counts_from_one {
                format!("write a whole number of 1 or more, e.g. {flag} 1")
            } else if text.starts_with('-') {
                "write the number without it (digits only)".to_string()
            } else {
                format!("write {flag} {plain}")
            };
            return Some(if text.starts_with('-') {
                format!("{flag} {text} has a minus sign, which a whole number does not take; {fix}")
            } else {
                format!(
                    "{flag} {text} is not written in plain digits (a plus sign or leading zeros); a whole number is digits only, so {fix}"
                )
            });
        }
    }
    let (name, sub) = matches.subcommand()?;
    whole_number_spelling_line(command.find_subcommand(name)?, sub)
}

/// Whole-number flags that refuse 0 and are named unlike their spec key
/// ([`crate::specs::POSITIVE_KEYS`]: `--num-experts` is a model file's `experts:`), or have none:
/// the MoE and MLA widths (`Model::check`), full recompute's layer count, the end stages' layer
/// counts and the thread count; `calibrate`'s and `validate`'s rank and repetition counts and
/// `calibrate --sweep`'s edge lengths. `--num-experts 00` is told to write 1 or more, not
/// `--num-experts 0`, which is refused next (`tests/leftovers_round36.rs` tries every flag of
/// plan and eval, `tests/review_round29.rs` those of the other commands).
const FLAGS_COUNTING_FROM_ONE: [&str; 13] = [
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--num-experts",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--q-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--recompute-num-layers",
    "--threads",
    "--ranks",
    "--reps",
    "--sweep",
];

/// The degrees `plan` pins and `eval` sets; `sweep`, `compare` and `report` take none of them.
const PLAN_DEGREE_FLAGS: [&str; 10] = [
    "--tp",
    "--pp",
    "--dp",
    "--cp",
    "--ep",
    "--etp",
    "--vpp",
    "--micro-batch",
    "--zero",
    "--dp-replicas",
];

/// `sweep --tp 8` (or `compare`, `report`): clap's "unexpected argument" offered a look-alike
/// (`--mtp-layers`), another flag entirely. The message says why the command takes no degree and
/// which command does.
fn plan_degree_elsewhere(err: &clap::Error, command: &str) -> Option<String> {
    let typed = unknown_flag(err)?;
    let flag = tpsim_flag(&typed);
    if !PLAN_DEGREE_FLAGS.contains(&flag.as_str()) {
        return None;
    }
    let shown = shown_flag(&typed, &flag);
    let why = match command {
        "sweep" => format!(
            "sweep searches every plan at each point, so it takes no {shown}; to pin it, search one point with tpsim plan ... {flag} N (or evaluate one plan with tpsim eval)"
        ),
        "compare" => format!(
            "compare takes no {shown}: it compares two saved plans (--plan a.yaml --plan b.yaml) or the two best plans of a search; save a plan with that degree with tpsim plan ... {flag} N --save a.yaml"
        ),
        "report" => format!(
            "report takes no {shown}: it reports the plan file's own degrees; change the file's {}: line, or report other degrees with tpsim eval --plan FILE {flag} N --report DIR",
            flag.trim_start_matches("--").replace('-', "_")
        ),
        _ => return None,
    };
    Some(why)
}

/// `sweep --axis cp` (or `ep`, `tp`, ...): clap's nearest spelling offered `cpu-offload-layers`
/// for `cp`, the host-memory offload for context parallelism. A plan degree is no sweep axis (the
/// search at each point already tries every degree); said so, with the axes sweep has (read from
/// `SweepAxis`, so the list cannot go stale) and the command that pins the degree.
fn plan_degree_as_sweep_axis(err: &clap::Error) -> Option<String> {
    use clap::ValueEnum;
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::InvalidValue {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    if !arg.starts_with("--axis") {
        return None;
    }
    let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidValue) else {
        return None;
    };
    let degree = value.trim().trim_start_matches('-').to_ascii_lowercase();
    let flag = match degree.as_str() {
        "mb" | "micro-batch" | "micro_batch" | "micro-batch-size" => "--micro-batch".to_string(),
        "zero" | "zero-stage" => "--zero".to_string(),
        d if PLAN_DEGREE_FLAGS.contains(&format!("--{d}").as_str()) => format!("--{d}"),
        _ => return None,
    };
    let axes: Vec<String> = crate::cli::SweepAxis::value_variants()
        .iter()
        .filter_map(|a| a.to_possible_value().map(|v| v.get_name().to_string()))
        .collect();
    Some(format!(
        "--axis {}: {flag} is a degree of the plan, which sweep's search chooses at each point, not an input it varies (rule: --axis is one of {}); for the best plan at each value of {}, run tpsim plan ... {flag} N once per value (the search: line counts what the pin ruled out), or tpsim plan ... --top 20 to see the fastest plans of several degrees side by side",
        crate::input_file::quote(value),
        axes.join(", "),
        flag,
    ))
}

/// `report FILE --format json`: clap's "unexpected argument" offered a look-alike of report's own
/// (`--normalization`), another flag entirely. A flag that other tpsim commands take is named as
/// theirs, with where to find this command's flags.
fn flag_of_other_commands(err: &clap::Error, command: &str) -> Option<String> {
    use clap::CommandFactory;
    let typed = unknown_flag(err)?;
    let flag = tpsim_flag(&typed);
    let long = flag.strip_prefix("--")?;
    let cli = crate::cli::Cli::command();
    let takes = |sub: &clap::Command| {
        sub.get_arguments()
            .any(|a| !a.is_hide_set() && a.get_long() == Some(long))
    };
    let current = cli.find_subcommand(command)?;
    if takes(current) {
        return None;
    }
    let others: Vec<&str> = cli
        .get_subcommands()
        .filter(|sub| takes(sub))
        .map(|sub| sub.get_name())
        .collect();
    let named = shown_flag(&typed, &flag);
    (!others.is_empty()).then(|| {
        format!(
            "{command} takes no {named}: it is a flag of tpsim {}; `tpsim {command} --help` lists the flags {command} takes",
            others.join(", tpsim ")
        )
    })
}

/// `compare a.yaml b.yaml`, `eval a.yaml`, `plan model.yaml`: a file given without the flag that
/// reads it, which clap said as "unexpected argument 'a.yaml' found" with no fix. Said with the
/// flag each command reads such a file with (`report` takes its one plan file bare).
fn file_without_its_flag(err: &clap::Error, command: &str) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(word)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    if word.starts_with('-') {
        return None;
    }
    let extension = std::path::Path::new(word)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    if !["yaml", "yml", "json"].contains(&extension) {
        return None;
    }
    let fix = match command {
        "compare" => format!(
            "compare reads saved plans as --plan {word} --plan OTHER.yaml (a model file as --model {word})"
        ),
        "eval" => format!(
            "eval reads a saved plan as --plan {word} (a model file as --model {word}, a Hugging Face config.json as --hf-config {word})"
        ),
        "report" => format!(
            "report writes the report of one saved plan: tpsim report PLAN_FILE --out DIR; give {word} in its own run"
        ),
        "plan" | "sweep" => format!(
            "{command} reads a model file as --model {word}, a Hugging Face config.json as --hf-config {word} and a GPU profile as --gpu {word}; a saved plan is read by tpsim eval --plan {word}"
        ),
        _ => return None,
    };
    Some(format!("{command} takes no bare file {word}: {fix}"))
}

/// `calibrate --gpus 8` (or `--num-gpus`, `--world-size`; calibrate has none of the cluster flags
/// that refuse a total GPU count with its --nodes): clap's tip offered `--gpu`, the GPU type, for a
/// count. Said as the count it is, with what calibrate takes instead.
fn gpu_count_elsewhere(err: &clap::Error, command: &str) -> Option<String> {
    let typed = unknown_flag(err)?;
    if !["--gpus", "--num-gpus", "--world-size"].contains(&typed.as_str()) {
        return None;
    }
    (command == "calibrate").then(|| {
        format!(
            "calibrate takes no {typed}, a total GPU count: the CPU backend's --ranks sets how many GPUs it stands for (a GPU backend measures the GPUs it sees); --gpu names a GPU profile, a type, not a count (`tpsim calibrate --help` lists the flags calibrate takes)"
        )
    })
}

/// The flag (`--name`, without a `=value`) of a clap "unexpected argument" error.
fn unknown_flag(err: &clap::Error) -> Option<String> {
    if err.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    match err.get(clap::error::ContextKind::InvalidArg)? {
        clap::error::ContextValue::String(arg) => {
            Some(arg.split('=').next().unwrap_or(arg).to_string())
        }
        _ => None,
    }
}

/// tpsim's name for a flag the user typed: a Megatron-style alias (`--tensor-model-parallel-size`)
/// is the flag it names (`--tp`); any other flag is itself.
fn tpsim_flag(typed: &str) -> String {
    typed
        .strip_prefix("--")
        .and_then(primary_long)
        .map_or_else(|| typed.to_string(), |long| format!("--{long}"))
}

/// A flag as the user typed it, with tpsim's name for it when that was an alias.
fn shown_flag(typed: &str, flag: &str) -> String {
    if flag == typed {
        flag.to_string()
    } else {
        format!("{typed} ({flag})")
    }
}

/// The long name of the tpsim flag that `long` is an alias of (`tensor-model-parallel-size` is
/// `tp`), in any command; `None` when no flag has that alias.
fn primary_long(long: &str) -> Option<String> {
    use clap::CommandFactory;
    let cli = crate::cli::Cli::command();
    cli.get_subcommands()
        .flat_map(|sub| sub.get_arguments())
        .find(|a| {
            a.get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&long))
        })
        .and_then(|a| a.get_long().map(str::to_string))
}

/// Megatron-LM switches someone pastes from a launch line that tpsim spells otherwise: clap's
/// "unexpected argument" for them names tpsim's flag instead of a look-alike.
const MEGATRON_SPELLINGS: &[(&str, &str)] = &[(
    "--moe-enable-deepep",
    "is Megatron-LM's switch for DeepEP dispatch; tpsim spells it --moe-dispatcher deepep (or read the whole launch line with `tpsim eval --megatron-args`)",
)];

fn megatron_spelling(err: &clap::Error) -> Option<String> {
    let flag = unknown_flag(err)?;
    MEGATRON_SPELLINGS
        .iter()
        .find(|(megatron, _)| *megatron == flag)
        .map(|(megatron, rule)| format!("{megatron} {rule}"))
}

/// `--recompute-modules -core_attn`: clap reads the dashed name as short flags and says
/// "unexpected argument '-c'", naming neither the flag nor the rule. Said when the word clap
/// stopped at comes among `--recompute-modules`' values and is module names once its dashes go.
fn dashed_recompute_module(err: &clap::Error, args: &[String]) -> Option<String> {
    let stopped_at = unknown_flag(err)?;
    let flag = args.iter().position(|a| a == "--recompute-modules")?;
    let word = args[flag + 1..]
        .iter()
        .find(|a| a.starts_with('-'))
        .filter(|a| a.starts_with(&stopped_at))?;
    let names: Vec<&str> = word
        .split(',')
        .map(|name| name.trim_start_matches('-'))
        .collect();
    crate::training::RecomputeModules::parse(&names).ok()?;
    Some(format!(
        "--recompute-modules {word}: module names take no dash (rule: the flag's values are Megatron-Core's module names); write --recompute-modules {} (choose from {})",
        names.join(","),
        crate::training::RECOMPUTE_MODULE_NAMES
    ))
}

/// The bytes of `arg` as text, each byte that is not UTF-8 written `\xNN`.
fn escaped(arg: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in arg.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// The first argument that is not UTF-8, said with the flag it belongs to: `--params \xff` (a
/// value after its flag), `--model=\xff` (a value joined to it) or a word on its own.
fn invalid_utf8_line(args: &[std::ffi::OsString]) -> Option<String> {
    let at = args.iter().position(|a| a.to_str().is_none())?;
    let bad = escaped(&args[at]);
    let rule = "tpsim reads every argument as UTF-8 text";
    let fix = "retype it, or give a path by a UTF-8 name (rename or link the file)";
    if let Some((flag, value)) = bad.split_once('=').filter(|(f, _)| f.starts_with("--")) {
        return Some(format!(
            "{flag} {value}: the value is not valid UTF-8 ({rule}); {fix}"
        ));
    }
    let flag = at
        .checked_sub(1)
        .and_then(|i| args[i].to_str())
        .filter(|prev| prev.starts_with('-') && !bad.starts_with('-'));
    Some(match flag {
        Some(flag) => format!("{flag} {bad}: the value is not valid UTF-8 ({rule}); {fix}"),
        None => format!("argument {bad} is not valid UTF-8 ({rule}); {fix}"),
    })
}

#[cfg(test)]
mod tests {
    use super::plain_number_rules;

    #[test]
    fn a_non_utf8_argument_is_named_with_its_flag() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let args = |list: &[&[u8]]| -> Vec<OsString> {
            list.iter()
                .map(|a| OsString::from_vec(a.to_vec()))
                .collect()
        };
        let line = super::invalid_utf8_line(&args(&[b"plan", b"--params", b"7\xffB"])).unwrap();
        assert!(
            line.starts_with("--params 7\\xffB: the value is not valid UTF-8"),
            "{line}"
        );
        let line = super::invalid_utf8_line(&args(&[b"plan", b"--model=a\xfe"])).unwrap();
        assert!(line.starts_with("--model a\\xfe: the value"), "{line}");
        let line = super::invalid_utf8_line(&args(&[b"\xff"])).unwrap();
        assert!(
            line.starts_with("argument \\xff is not valid UTF-8"),
            "{line}"
        );
        assert!(super::invalid_utf8_line(&args(&[b"plan"])).is_none());
    }

    #[test]
    fn every_range_clap_checks_is_said_in_words() {
        let line = "invalid value '300' for '--zero <ZERO>': 300 is not in 0..=255";
        assert!(plain_number_rules(line).ends_with("300 is larger than 255, the most it takes"));
        let line = "invalid value '-1' for '--zero <ZERO>': -1 is not in 0..=255";
        assert!(
            plain_number_rules(line).contains("-1 is negative; it takes a whole number up to 255")
        );
        let line = "invalid value '0' for '--n <N>': 0 is not in 1..=64";
        assert!(plain_number_rules(line).ends_with("0 is less than 1, the least it takes"));
        let line = "invalid value '70' for '--n <N>': 70 is not in 1..=64";
        assert!(plain_number_rules(line).ends_with("70 is larger than 64, the most it takes"));
        let line = "invalid value '9' for '--n <N>': 9 is not in 2..9";
        assert!(plain_number_rules(line).ends_with("9 is larger than 8, the most it takes"));
        let line = "invalid value '99999999999999999999' for '--top <TOP>': number too large to fit in target type";
        assert!(plain_number_rules(line).contains("too large for this flag"));
    }
}
