//! The words of a Megatron-LM launch line one at a time, for [`super::megatron_args`]'s tokenizer
//! and its messages: a word that is a flag mistyped (a look-alike dash, one dash, none), what is
//! wrong with a count that does not parse, and a value that fits each flag for the examples.
//! Megatron-LM's argparse (`megatron/training/arguments.py`) refuses such words; tpsim would
//! otherwise skip them.

use super::megatron_args::{SWITCHES, VALUED};

/// What is wrong with `value` as the positive integer `--flag` takes, and an example; the shell
/// variable hint only for a value that is one (`$NL`, `${NL}`).
pub(super) fn not_a_count(flag: &str, value: &str) -> String {
    let default = shell_default(value);
    let example = default.unwrap_or(example_value(flag));
    let why = if let Some(default) = default {
        format!(
            "is a shell variable, not a positive integer (bash gives its default, {default}, where the variable is unset or empty); write the number the run uses"
        )
    } else if value.starts_with('$') {
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

/// The default a shell expansion names (`${TP:-4}`, `${TP-4}`, `${TP:=4}`: bash's parameter
/// expansion gives 4 where TP is unset, bash(1) "Parameter Expansion"), when it is a number.
pub(super) fn shell_default(value: &str) -> Option<&str> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    let at = inner.find(['-', '='])?;
    let name = inner[..at].strip_suffix(':').unwrap_or(&inner[..at]);
    let default = &inner[at + 1..];
    (!name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !default.is_empty()
        && default.chars().all(|c| c.is_ascii_digit()))
    .then_some(default)
}

/// A value that fits `--flag`, for the examples in messages.
pub(super) fn example_value(flag: &str) -> &'static str {
    match flag {
        "pipeline-model-parallel-layout" => "'Et*4|t*4|t*1L'",
        "window-size" => "'(127,0)'",
        "moe-layer-freq" => "'[0]*3+[1]*58'",
        "hidden-dropout" | "attention-dropout" => "0.0",
        "moe-expert-capacity-factor" => "1.25",
        "activation-func-clamp-value" => "7.0",
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
        "ckpt-format" => "torch_dist",
        "hybrid-layer-pattern" | "hybrid-override-pattern" => "'M-M*'",
        "hybrid-attention-ratio" | "hybrid-mlp-ratio" => "0.08",
        "mamba-num-heads" | "mamba-state-dim" => "128",
        "mamba-head-dim" => "64",
        "mamba-num-groups" => "8",
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

/// Other spellings of a Megatron-LM argument tpsim reads: tpsim's own flag names and the names
/// of other launchers (NeMo's config keys, vLLM), which Megatron-LM's argparse refuses
/// (`allow_abbrev=False`), and the Megatron-LM spelling to write instead.
const OTHER_SPELLINGS: &[(&str, &str)] = &[
    ("tp", "--tensor-model-parallel-size"),
    ("tensor-parallel-size", "--tensor-model-parallel-size"),
    ("pp", "--pipeline-model-parallel-size"),
    ("pipeline-parallel-size", "--pipeline-model-parallel-size"),
    ("cp", "--context-parallel-size"),
    ("ep", "--expert-model-parallel-size"),
    ("expert-parallel-size", "--expert-model-parallel-size"),
    ("etp", "--expert-tensor-parallel-size"),
    ("vpp", "--num-virtual-stages-per-pipeline-rank"),
    (
        "virtual-pipeline-model-parallel-size",
        "--num-virtual-stages-per-pipeline-rank",
    ),
    ("micro-batch", "--micro-batch-size"),
    ("global-batch", "--global-batch-size"),
    ("seq-len", "--seq-length"),
    ("layers", "--num-layers"),
    ("hidden", "--hidden-size"),
    ("heads", "--num-attention-heads"),
    ("kv-heads", "--num-query-groups"),
    ("ffn-hidden", "--ffn-hidden-size"),
    ("vocab", "--vocab-size"),
];

/// Optimal string alignment distance (edits, with adjacent swaps) between two flag names (or two
/// spec keys: `specs` names the key an unknown one misspells).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// Why `--name`, an argument tpsim does not read, is a misspelling of one it reads (one edit
/// away, two for long names: no Megatron-LM argument is that close to another tpsim reads) or
/// another program's name for one, or Megatron-LM's retired `--model-parallel-size`; `None` for
/// an argument tpsim may skip (`--lr`, `--data-path`, a launcher's `--nodes`). Skipping a
/// misspelt `--tensor-model-paralel-size 8` would evaluate tp 1 where Megatron-LM refuses the line.
pub(super) fn misnamed_flag(name: &str) -> Option<String> {
    if let Some((_, megatron)) = OTHER_SPELLINGS.iter().find(|(other, _)| *other == name) {
        return Some(format!(
            "is not a Megatron-LM argument (Megatron-LM's argparse refuses it, and tpsim would skip it); write {megatron}"
        ));
    }
    // `--no-sequence-parallel`: the switches tpsim reads are argparse `store_true` flags (the
    // `--no-*` / `--disable-*` forms exist only for `store_false` ones: Megatron-LM
    // `argument_utils.py` ArgumentGroupFactory, and the hand-written flags in arguments.py), so
    // Megatron-LM refuses the negation, and skipping it would keep the switch on where the line
    // asks for it off.
    if let Some(switch) = ["no-", "disable-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .filter(|rest| SWITCHES.contains(rest))
    {
        return Some(format!(
            "is not a Megatron-LM argument (Megatron-LM's argparse refuses it, and tpsim would skip it and read --{switch} as the rest of the line says); Megatron-LM turns --{switch} off by leaving it out: drop both"
        ));
    }
    // `--tensor_model_parallel_size`: argparse matches a flag as written (Megatron-LM's are all
    // spelled with dashes; only torchrun's own flags take either), so it refuses the underscores,
    // and the long names are more than two edits from the dashed ones that the nearest-name
    // check below reaches.
    let dashed = name.replace('_', "-");
    if dashed != name
        && (VALUED.contains(&dashed.as_str())
            || SWITCHES.contains(&dashed.as_str())
            || ["recompute-modules", "moe-router-load-balancing-type"].contains(&dashed.as_str()))
    {
        return Some(format!(
            "is not a Megatron-LM argument (Megatron-LM's argparse reads flags as written, with dashes, and refuses it; tpsim would skip it); write --{dashed}"
        ));
    }
    if name == "model-parallel-size" {
        return Some(
            "is Megatron-LM's retired name, which its arguments.py refuses (\"--model-parallel-size is no longer valid\"); write --tensor-model-parallel-size".to_string(),
        );
    }
    let reach = if name.chars().count() <= 10 { 1 } else { 2 };
    let nearest = VALUED
        .iter()
        .chain(SWITCHES)
        .chain(&["recompute-modules", "moe-router-load-balancing-type"])
        .map(|known| (edit_distance(name, known), *known))
        .filter(|(distance, _)| (1..=reach).contains(distance))
        .min();
    // A near miss (`--num-layer`) reads as the typo it most likely is.
    if let Some((_, known)) = nearest {
        return Some(format!(
            "is not a Megatron-LM argument (Megatron-LM's argparse refuses it, and tpsim would skip it); did you mean --{known}?"
        ));
    }
    // `--tensor-model-parallel 2`: Megatron-LM's parser takes no abbreviations (arguments.py,
    // `argparse.ArgumentParser(..., allow_abbrev=False)`), so the start of a flag tpsim reads is
    // refused there, and skipping it would evaluate that flag's default. Megatron-LM's own
    // arguments that are such a start are read as themselves: `--fp8`, `--fp4`, `--fp8-param`,
    // `--fp4-param` and `--activation-func` (TransformerConfig fields that
    // `argument_utils.py`'s ArgumentGroupFactory exposes; every other argument of arguments.py and
    // of those configs at Megatron-LM d98e8a64 is no such start, nor is a torchrun flag). At
    // d98e8a64 arguments.py leaves these five fields out of its factory (`exclude`), so
    // [`unknown_flag`] refuses them, naming the nearest flag Megatron-LM has.
    const MEGATRON_ARGUMENTS_THAT_START_OTHERS: [&str; 5] =
        ["fp8", "fp4", "fp8-param", "fp4-param", "activation-func"];
    // Nor are a launcher's own flags on the line that starts the program: Slurm's
    // `srun --account=<account>` and `srun --overlap` (srun(1), Slurm 20.11 and later) begin
    // --account-for-embedding-in-pipeline-split and --overlap-grad-reduce, and a Slurm script's
    // `srun --account=proj --overlap python pretrain_gpt.py ...` runs.
    const LAUNCHER_ARGUMENTS_THAT_START_OTHERS: [&str; 2] = ["account", "overlap"];
    if !MEGATRON_ARGUMENTS_THAT_START_OTHERS.contains(&name)
        && !LAUNCHER_ARGUMENTS_THAT_START_OTHERS.contains(&name)
    {
        let longer: Vec<&str> = VALUED
            .iter()
            .chain(SWITCHES)
            .chain(&["recompute-modules", "moe-router-load-balancing-type"])
            .filter(|known| known.len() > name.len() && known.starts_with(name))
            .copied()
            .collect();
        if !longer.is_empty() {
            let names: Vec<String> = longer.iter().map(|known| format!("--{known}")).collect();
            return Some(format!(
                "is not a Megatron-LM argument (Megatron-LM's argparse takes no abbreviations, allow_abbrev=False, and refuses it; tpsim would skip it); write the whole name: {}",
                names.join(" or ")
            ));
        }
    }
    None
}

/// Every flag Megatron-LM's argparse defines at d98e8a64 (megatron/training/arguments.py's
/// `add_argument` names, the pretrain scripts' own, and the ones argument_utils.py's
/// ArgumentGroupFactory makes from the config dataclasses), one a line. Regenerate with
/// `python3 scripts/megatron_flags.py /work/.mirror/NVIDIA+Megatron-LM/repo COMMIT >
/// src/emit/megatron_flags.txt`.
const MEGATRON_FLAGS: &str = include_str!("megatron_flags.txt");

/// The flags earlier Megatron-LM releases (v1.0 to core_v0.19.0) and Megatron-DeepSpeed define and
/// d98e8a64 does not (2021's `--DDP-impl`, Megatron-DeepSpeed's `--zero-stage`): a launch line for
/// one of those versions is valid there, so tpsim skips these as it skips any flag it does not
/// read, instead of refusing them as misspellings. Regenerate with `python3
/// scripts/megatron_flags_older.py` (its docstring gives the command and the tags).
const OLDER_MEGATRON_FLAGS: &str = include_str!("megatron_flags_older.txt");

/// torchrun's own flags (PyTorch `torch/distributed/run.py` `get_args_parser`, which takes both
/// the `_` and the `-` spelling), found on launch lines in the `DISTRIBUTED_ARGS` array that is
/// expanded before the script rather than after `torchrun` itself.
const TORCHRUN_FLAGS: &[&str] = &[
    "nnodes",
    "nproc-per-node",
    "rdzv-backend",
    "rdzv-endpoint",
    "rdzv-id",
    "rdzv-conf",
    "standalone",
    "max-restarts",
    "monitor-interval",
    "start-method",
    "role",
    "module",
    "no-python",
    "run-path",
    "log-dir",
    "redirects",
    "tee",
    "local-ranks-filter",
    "node-rank",
    "master-addr",
    "master-port",
    "local-addr",
    "logs-specs",
];

/// Whether `name` (without its dashes) is a flag Megatron-LM defines, defined in an earlier
/// release or in Megatron-DeepSpeed, one tpsim reads, or torchrun's.
fn is_known_flag(name: &str) -> bool {
    MEGATRON_FLAGS
        .lines()
        .chain(OLDER_MEGATRON_FLAGS.lines())
        .filter(|l| !l.starts_with('#'))
        .any(|l| l == name)
        || VALUED.contains(&name)
        || SWITCHES.contains(&name)
        || [
            "recompute-modules",
            "cp-comm-type",
            "moe-router-load-balancing-type",
        ]
        .contains(&name)
        || TORCHRUN_FLAGS.contains(&name.replace('_', "-").as_str())
}

/// Why `--name`, a flag of the arguments after the script, is none Megatron-LM has (its
/// argparse, `parse_args` in arguments.py, refuses an unknown flag unless `ignore_unknown_args`,
/// which the pretrain scripts do not set): the nearest real spelling and the fix. `None` for a
/// flag it has, which tpsim may skip.
pub(super) fn unknown_flag(name: &str) -> Option<String> {
    if is_known_flag(name) {
        return None;
    }
    let nearest = MEGATRON_FLAGS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|known| (words_missed(name, known), edit_distance(name, known), known))
        .min()
        .map(|(_, _, known)| known)?;
    Some(format!(
        "is not a Megatron-LM argument (Megatron-LM's argparse, parse_args in megatron/training/arguments.py at d98e8a64, refuses a flag it does not define, and tpsim would skip it); the nearest it has is --{nearest}: write that if you meant it, or drop --{name}"
    ))
}

/// How many of `name`'s dash-separated words have no word in `known` within one edit: whole
/// words first, so `--tensor-paralel-size` is nearest to `--tensor-model-parallel-size` (every
/// word there) rather than to `--context-parallel-size` (fewer letters apart).
fn words_missed(name: &str, known: &str) -> usize {
    name.split(['-', '_'])
        .filter(|word| !known.split('-').any(|k| edit_distance(word, k) <= 1))
        .count()
}
