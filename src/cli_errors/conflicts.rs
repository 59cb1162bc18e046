//! A flag given twice (by any of its spellings), or two flags that do not go together: clap's
//! "cannot be used multiple times" / "cannot be used with" said as the flags and values typed,
//! with the fix.

/// `--tp 8 --tensor-model-parallel-size 4` (or `--nodes 1 --nodes=2`, or `report a.yaml --plan
/// b.yaml`): clap's "the argument '--tp <TP>' cannot be used multiple times" (and "'[PLAN_FILE]'
/// cannot be used with '--plan <PLAN_FILE>'") named neither the values nor the spelling that
/// repeated it (an alias, `-o` for `--output`), and no fix. Said with every spelling and value as
/// typed, which tpsim does not choose between, and the fix: keep one.
pub(super) fn given_twice(err: &clap::Error, command: &str) -> Option<String> {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::ArgumentConflict {
        return None;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(prior))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::PriorArg),
    ) else {
        return None;
    };
    // The same flag twice, or report's plan file given both as its argument and as --plan.
    let plan_file_twice = command == "report"
        && [arg, prior]
            .iter()
            .all(|a| a.ends_with("PLAN_FILE]") || a.ends_with("<PLAN_FILE>"));
    if arg != prior && !plan_file_twice {
        return None;
    }
    let mut cli = crate::cli::Cli::command();
    // Built, so that every flag says how many values it takes (`get_num_args`).
    cli.build();
    let sub = cli.find_subcommand(command)?;
    let args: Vec<String> = std::env::args_os()
        .skip(2)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (flag, uses) = if plan_file_twice {
        let mut uses = given_words(sub, &args);
        uses.retain(|(long, _, _)| long.is_none() || long.as_deref() == Some("plan"));
        ("the plan file".to_string(), uses)
    } else {
        let long = arg.split(' ').next()?.strip_prefix("--")?;
        let mut uses = given_words(sub, &args);
        uses.retain(|(l, _, _)| l.as_deref() == Some(long));
        (format!("--{long}"), uses)
    };
    if uses.len() < 2 {
        return None;
    }
    let aliased = !plan_file_twice && uses.iter().any(|(_, typed, _)| *typed != flag);
    Some(format!(
        "{flag} is given {} ({}){}; tpsim takes each setting once and does not pick one of them for you, so keep one",
        match uses.len() {
            2 => "twice".to_string(),
            n => format!("{n} times"),
        },
        uses.iter()
            .map(|(_, typed, value)| match value {
                Some(v) if typed.is_empty() => v.clone(),
                Some(v) => format!("{typed} {v}"),
                None => typed.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        if aliased {
            format!(", every spelling naming the same {flag}")
        } else {
            String::new()
        }
    ))
}

/// `plan --emit megatron --report DIR` (or `--calibration FILE --gpu NAME`): clap's "the argument
/// '--emit <FRAMEWORK>' cannot be used with '--report <DIR>'" named neither the values nor the
/// spellings typed, and no fix. Said with both as typed (a value too long to quote, such as a
/// launch line, by its flag alone) and the fix: drop one.
pub(super) fn given_together(err: &clap::Error, command: &str) -> Option<String> {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != clap::error::ErrorKind::ArgumentConflict {
        return None;
    }
    let arg = match err.get(ContextKind::InvalidArg)? {
        ContextValue::String(arg) => arg.clone(),
        _ => return None,
    };
    let prior = match err.get(ContextKind::PriorArg)? {
        ContextValue::String(prior) => prior.clone(),
        ContextValue::Strings(priors) => priors.first()?.clone(),
        _ => return None,
    };
    let long = |rendered: &str| {
        rendered
            .split(' ')
            .next()
            .and_then(|f| f.strip_prefix("--"))
            .map(str::to_string)
    };
    let (a, b) = (long(&arg)?, long(&prior)?);
    if a == b {
        return None;
    }
    let mut cli = crate::cli::Cli::command();
    // Built, so that every flag says how many values it takes (`get_num_args`).
    cli.build();
    let sub = cli.find_subcommand(command)?;
    let args: Vec<String> = std::env::args_os()
        .skip(2)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let words = given_words(sub, &args);
    // Where each was typed first, and how.
    let shown = |long: &str| {
        let (at, (_, typed, value)) = words
            .iter()
            .enumerate()
            .find(|(_, (l, _, _))| l.as_deref() == Some(long))?;
        Some((
            at,
            match value {
                Some(v) if v.chars().count() <= 60 && !v.contains(char::is_whitespace) => {
                    format!("{typed} {v}")
                }
                _ => typed.clone(),
            },
        ))
    };
    // The flag typed first is named first, as the user wrote them.
    let (mut first, mut second) = (shown(&a)?, shown(&b)?);
    if second.0 < first.0 {
        std::mem::swap(&mut first, &mut second);
    }
    let (first, second) = (first.1, second.1);
    Some(format!(
        "{first} cannot be used with {second}: tpsim {command} takes one or the other, not both (`tpsim {command} --help` says what each does); drop one of them"
    ))
}

/// The words of `args` (a command's arguments, after its name) as `sub` reads them: for a flag,
/// its long name, the spelling as typed (the long name, an alias, its short letter) and its value
/// (`None` for a switch without one); for a word that is no flag's value, no name, an empty
/// spelling and the word. The values of flags are consumed with them, so a value that reads like
/// a flag is not taken for one.
type GivenWord = (Option<String>, String, Option<String>);

fn given_words(sub: &clap::Command, args: &[String]) -> Vec<GivenWord> {
    let find = |token: &str| {
        sub.get_arguments().find(|a| {
            if let Some(short) = token.strip_prefix('-').filter(|t| !t.starts_with('-')) {
                return a.get_short().is_some_and(|c| short == c.to_string());
            }
            token.strip_prefix("--").is_some_and(|name| {
                a.get_long() == Some(name)
                    || a.get_all_aliases()
                        .is_some_and(|aliases| aliases.contains(&name))
            })
        })
    };
    let mut words = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let token = &args[i];
        i += 1;
        if token == "--" {
            break;
        }
        let (name, joined) = match token.split_once('=') {
            Some((name, value)) if name.starts_with('-') => (name, Some(value.to_string())),
            _ => (token.as_str(), None),
        };
        let Some(arg) = find(name) else {
            if !token.starts_with('-') {
                words.push((None, String::new(), Some(token.clone())));
            }
            continue;
        };
        let range = arg.get_num_args().unwrap_or_default();
        let value = match joined {
            Some(v) => Some(v),
            None if range.max_values() == 0 => None,
            // An optional value (`--sequence-parallel [<BOOL>]`) is taken as clap takes it: the
            // next word unless it is a flag.
            None if range.min_values() == 0
                && args.get(i).is_none_or(|next| next.starts_with('-')) =>
            {
                None
            }
            None => {
                i += 1;
                args.get(i - 1).cloned()
            }
        };
        words.push((arg.get_long().map(str::to_string), name.to_string(), value));
    }
    words
}
