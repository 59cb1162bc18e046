//! What each Megatron-LM argument says, one topic at a time: the tokens of a launch line, gradient
//! precision, recompute, attention kernel, ZeRO stage and torchrun's cluster size (the arguments
//! refused by name are in [`super::megatron_refused`], precision and overlap in
//! [`super::megatron_precision`]). [`super::megatron_reader`] puts the answers
//! together into a launch.

use std::collections::{HashMap, HashSet};

use super::megatron_words::{
    example_value, is_lookalike_dash, misnamed_flag, mistyped_flag, not_a_count, unknown_flag,
};

use crate::plan::Recompute;
use crate::training::{AttentionKernel, CpExchange, GradDtype, OptimizerStates};

/// How `--recompute-granularity full` checkpoints the layers (`--recompute-method` with
/// `--recompute-num-layers`; the 2021 `--activations-checkpoint-method` with
/// `--activations-checkpoint-num-layers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullRecompute {
    /// `uniform N`: the input of every N-layer chunk is kept. N = 1 is tpsim's full recompute.
    Uniform(u32),
    /// `block N`: the first N layers of each model chunk are recomputed, the rest keep their
    /// activations (Megatron-Core `recompute.py`).
    Block(u32),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MegatronArgsError {
    #[error("Megatron argument --{flag} needs a value (e.g. --{flag} {example})")]
    MissingValue { flag: String, example: &'static str },
    /// A count that is not a positive integer; the message says what is wrong with the value.
    #[error("Megatron argument {}", not_a_count(.flag, .value))]
    NotANumber { flag: String, value: String },
    /// A word of the line that is no flag and no flag's value (a mistyped dash, a value left
    /// over), which Megatron-LM's argparse refuses and tpsim would otherwise skip.
    #[error("Megatron arguments: {token:?} {why}")]
    Stray { token: String, why: String },
    #[error("Megatron argument --{flag} {value:?} is not one of: {valid}")]
    BadChoice {
        flag: String,
        value: String,
        valid: &'static str,
    },
    #[error(
        "Megatron arguments lack --{flag}; a launch line always has it (e.g. --{flag} {example})"
    )]
    Required {
        flag: &'static str,
        example: &'static str,
    },
    /// An argument that changes memory or time in a way tpsim does not model.
    #[error("Megatron argument {given}: {why}")]
    NotModelled { given: String, why: String },
    /// Two arguments that say opposite things.
    #[error("Megatron arguments {first} and {second} contradict each other; {fix}")]
    Contradiction {
        first: String,
        second: String,
        fix: &'static str,
    },
    /// A line Megatron-LM itself refuses.
    #[error("Megatron arguments {given}: {why}")]
    Refused { given: String, why: String },
    /// A value that does not parse, with the message of its parser (which quotes the flag).
    #[error("Megatron argument {message}")]
    BadValue { message: String },
}

/// Arguments that take a value.
pub(super) const VALUED: &[&str] = &[
    "transformer-impl",
    "rotary-percent",
    "rotary-base",
    "num-layers",
    "hidden-size",
    "num-attention-heads",
    "num-query-groups",
    "ffn-hidden-size",
    "vocab-size",
    "make-vocab-size-divisible-by",
    "seq-length",
    "max-position-embeddings",
    "tensor-model-parallel-size",
    "pipeline-model-parallel-size",
    "num-layers-per-virtual-pipeline-stage",
    "decoder-first-pipeline-num-layers",
    "decoder-last-pipeline-num-layers",
    "micro-batch-size",
    "global-batch-size",
    "recompute-granularity",
    "recompute-method",
    "recompute-num-layers",
    "activations-checkpoint-method",
    "activations-checkpoint-num-layers",
    "checkpoint-num-layers",
    "normalization",
    "position-embedding-type",
    "hidden-dropout",
    "attention-dropout",
    "num-virtual-stages-per-pipeline-rank",
    "microbatch-group-size-per-virtual-pipeline-stage",
    "attention-backend",
    "context-parallel-size",
    "expert-model-parallel-size",
    "expert-tensor-parallel-size",
    "num-experts",
    "moe-router-topk",
    "moe-router-num-groups",
    "moe-router-group-topk",
    "moe-ffn-hidden-size",
    "moe-shared-expert-intermediate-size",
    "moe-latent-size",
    "moe-layer-freq",
    "moe-token-dispatcher-type",
    "moe-flex-dispatcher-backend",
    "moe-expert-capacity-factor",
    "moe-token-drop-policy",
    "q-lora-rank",
    "kv-lora-rank",
    "qk-head-dim",
    "qk-pos-emb-head-dim",
    "v-head-dim",
    "kv-channels",
    "main-grads-dtype",
    "main-params-dtype",
    "exp-avg-dtype",
    "exp-avg-sq-dtype",
    "data-parallel-sharding-strategy",
    "fp8-format",
    "fp8-recipe",
    "num-layers-at-start-in-bf16",
    "num-layers-at-end-in-bf16",
    "fp4-format",
    "fp4-recipe",
    "cpu-offloading-num-layers",
    "pipeline-model-parallel-layout",
    "mtp-num-layers",
    "window-size",
    "window-attn-skip-freq",
    "hybrid-layer-pattern",
    "hybrid-override-pattern",
    "hybrid-attention-ratio",
    "hybrid-mlp-ratio",
    "mamba-num-heads",
    "mamba-head-dim",
    "mamba-state-dim",
    "mamba-num-groups",
    "optimizer",
    // Muon's settings that change its cost (`Parsed::optimizer_states`).
    "muon-num-ns-steps",
    "muon-tp-mode",
    "muon-scalar-optimizer",
    "muon-fp32-matmul-prec",
    "encoder-num-layers",
    "decoder-num-layers",
    "activation-func-clamp-value",
    "ds-sequence-parallel-size",
    "num-distributed-optimizer-instances",
    // Megatron-DeepSpeed's ZeRO stage (`Parsed::deepspeed_zero_stage`).
    "zero-stage",
    // Read and known to change nothing tpsim models (checkpoint files; `--emit megatron` writes
    // fsdp_dtensor, which Megatron-FSDP requires), so a round trip says nothing of it.
    "ckpt-format",
];

/// Switches (no value).
pub(super) const SWITCHES: &[&str] = &[
    "group-query-attention",
    "swiglu",
    "quick-geglu",
    "disable-bias-linear",
    "untie-embeddings-and-output-weights",
    "sequence-parallel",
    "use-distributed-optimizer",
    "use-precision-aware-optimizer",
    "muon-use-syrk",
    "muon-no-split-qkv",
    "use-megatron-fsdp",
    "use-torch-fsdp2",
    "torch-fsdp2-no-reshard-after-forward",
    "bf16",
    "fp16",
    "fp32",
    "grad-reduce-in-bf16",
    "accumulate-allreduce-grads-in-fp32",
    "no-gradient-accumulation-fusion",
    "no-rope-fusion",
    "use-rotary-position-embeddings",
    "no-position-embedding",
    "recompute-activations",
    "checkpoint-activations",
    "account-for-embedding-in-pipeline-split",
    "account-for-loss-in-pipeline-split",
    "use-flash-attn",
    "multi-latent-attention",
    "moe-grouped-gemm",
    // Read into `MoeDispatch::router_padding` (`megatron_moe::ExpertArgs::router_padding`).
    "moe-router-padding-for-fp8",
    "moe-router-padding-for-quantization",
    "moe-enable-deepep",
    "moe-shared-expert-gate",
    "qk-layernorm",
    "add-qkv-bias",
    "tp-comm-overlap",
    "overlap-grad-reduce",
    "overlap-param-gather",
    "no-overlap-p2p-communication",
    "overlap-moe-expert-parallel-comm",
    "delay-wgrad-compute",
    "fp8-param-gather",
    "fp4-param-gather",
    "first-last-layers-bf16",
    "cpu-offloading",
    "distribute-saved-activations",
    "optimizer-cpu-offload",
    "distribute-checkpointed-activations",
    "is-hybrid-model",
    "mtp-use-repeated-layer",
    // Megatron-DeepSpeed: the model without DeepSpeed's pipeline module (`deepspeed_zero_stage`).
    "no-pipeline-parallel",
];

/// torchrun's arguments for the cluster (torchrun accepts `_` and `-` spellings).
const LAUNCHER: &[&str] = &["nnodes", "nproc_per_node", "nproc-per-node"];

/// Programs that start the training script, whose own flags come before the script's name
/// (`srun --account=proj --overlap python pretrain_gpt.py ...`).
const LAUNCHERS: &[&str] = &[
    "torchrun",
    "srun",
    "mpirun",
    "mpiexec",
    "deepspeed",
    "accelerate",
    "torch.distributed.run",
    "torch.distributed.launch",
];

/// The tokens of a launch line, sorted by kind.
pub(super) struct Parsed<'a> {
    values: HashMap<&'a str, &'a str>,
    switches: HashSet<&'a str>,
    /// `--recompute-modules a b c` (nargs='*').
    pub(super) recompute_modules: Option<Vec<&'a str>>,
    /// `--cp-comm-type a [b ...]` (nargs='+': one type for every layer, or one per layer).
    cp_comm_types: Option<Vec<&'a str>>,
    /// `--moe-router-load-balancing-type a [b ...]` (nargs='+' in current Megatron-LM, one type per
    /// MoE layer group; it changes no memory or time, but a capacity factor needs each of them).
    pub(super) load_balancing: Vec<&'a str>,
    launcher: HashMap<&'a str, &'a str>,
    pub(super) ignored: Vec<String>,
    /// Words that follow a flag tpsim reads but are none of its values ("\"stray\" after --bf16").
    pub(super) strays: Vec<String>,
    /// Flags tpsim reads given more than once with different values, each with its values in the
    /// order given (`--num-layers 80, then 40`; a value equal to the one before is not repeated):
    /// the last is kept, as Megatron-LM's argparse keeps it.
    pub(super) repeated: Vec<(&'a str, Vec<&'a str>)>,
}

/// One word of a launch line as the shell hands it to the program.
struct ShellWord {
    text: String,
    /// Whether the word opened with a quote (an array item such as `"--fp8-format hybrid"`).
    quoted_whole: bool,
    /// Where a variable assignment's quoted value starts in `text` (`GPT_ARGS="--num-layers 24
    /// ..."`: the byte after `=`), or `None` for any other word.
    quoted_assignment: Option<usize>,
}

/// Whether `text`, the start of a word, is a shell variable name and `=` (`GPT_ARGS=`), or `+=`,
/// which appends to it (`GPT_ARGS+=" --sequence-parallel"`, `MODEL_ARGS+=(--bf16)`).
fn is_assignment_name(text: &str) -> bool {
    text.strip_suffix('=').is_some_and(|name| {
        let name = name.strip_suffix('+').unwrap_or(name);
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A script read as bash reads it, in one pass: whitespace outside quotes separates words, quotes
/// are removed (`'--num-layers'` is `--num-layers`, `--window-size="(127, 0)"` is
/// `--window-size=(127, 0)`) and may span lines (`GPT_ARGS="` on one line, its flags on the next,
/// the closing `"` below them, as Megatron-LM's examples/pretrain_gpt.sh writes them), a backslash
/// outside single quotes takes the next character literally (`"a \" b"` is `a " b`) and before a
/// line break joins the lines, and an unquoted `#` opening a word starts a comment to the end of
/// its line. Err with the line (counted from 1) where a quote opens that the script never closes,
/// and where bash would end the command before flags the script goes on to give
/// ([`BrokenContinuation`]).
fn shell_words(text: &str) -> Result<Vec<ShellWord>, ShellError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted_whole = false;
    let mut quoted_assignment = None;
    // Inside an array assignment (`MODEL_ARGS=(--num-layers 24 --bf16)`), the parentheses opened
    // in it since (`$(pwd)`): bash's `(` and `)` are words of their own, so its closing `)` is
    // no part of the last item (`--bf16)`).
    let mut array: Option<u32> = None;
    // The open quote and the line it opened on.
    let mut quote: Option<(char, usize)> = None;
    let mut line = 1;
    // Whether a backslash outside quotes and arrays joined this line to the one above: the
    // command goes on here, and a comment on this line ends it.
    let mut continued = false;
    // A script saved with Windows line ends reads as one with Unix ones.
    let text = text.replace("\r\n", "\n");
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            if quote.is_none() {
                continued = false;
            }
        }
        match quote {
            Some((q, _)) if c == q => quote = None,
            // In double quotes a backslash before a line break removes both (bash's line
            // continuation), before anything else it takes that character literally.
            Some(('"', _)) if c == '\\' => match chars.next() {
                Some('\n') => line += 1,
                Some(next) => word.push(next),
                None => {}
            },
            Some(_) => word.push(c),
            None if c.is_whitespace() => {
                if in_word {
                    words.push(ShellWord {
                        text: std::mem::take(&mut word),
                        quoted_whole,
                        quoted_assignment: quoted_assignment.take(),
                    });
                    in_word = false;
                }
            }
            None if c == '#' && !in_word => {
                while chars.next_if(|&c| c != '\n').is_some() {}
                // bash ends the command at the comment's line break (a backslash in the comment is
                // part of it): flags on the lines after it are a command of their own, which
                // Megatron-LM never gets. Inside an array the line break is only whitespace.
                if continued && array.is_none() {
                    let rest: String = chars.clone().collect();
                    if let Some(next) = rest
                        .lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty() && !l.starts_with('#'))
                        .filter(|l| l.starts_with('-'))
                    {
                        return Err(ShellError::Continuation(BrokenContinuation {
                            line,
                            next: next.to_string(),
                            cause: ContinuationCause::Comment,
                        }));
                    }
                }
            }
            None => {
                if !in_word {
                    in_word = true;
                    quoted_whole = c == '\'' || c == '"';
                }
                match c {
                    '(' if array.is_none() && is_assignment_name(&word) => {
                        word.push(c);
                        words.push(ShellWord {
                            text: std::mem::take(&mut word),
                            quoted_whole,
                            quoted_assignment: None,
                        });
                        in_word = false;
                        array = Some(0);
                    }
                    '(' => {
                        array = array.map(|depth| depth + 1);
                        word.push(c);
                    }
                    ')' if array == Some(0) => {
                        if !word.is_empty() {
                            words.push(ShellWord {
                                text: std::mem::take(&mut word),
                                quoted_whole,
                                quoted_assignment: quoted_assignment.take(),
                            });
                        }
                        words.push(ShellWord {
                            text: ")".to_string(),
                            quoted_whole: false,
                            quoted_assignment: None,
                        });
                        in_word = false;
                        array = None;
                    }
                    ')' => {
                        array = array.map(|depth| depth.saturating_sub(1));
                        word.push(c);
                    }
                    '\'' | '"' => {
                        if quoted_assignment.is_none() && is_assignment_name(&word) {
                            quoted_assignment = Some(word.len());
                        }
                        quote = Some((c, line));
                    }
                    // A backslash before a line break joins the lines (it is no word).
                    '\\' => match chars.next() {
                        Some('\n') => {
                            line += 1;
                            continued = array.is_none();
                        }
                        // `\` and then spaces to the line's end (or to a comment): bash reads an
                        // escaped space, a word " ", and the line break ends the command, so the
                        // flags on the lines after it never reach Megatron-LM (in an array, the
                        // " " is an argument its argparse refuses).
                        Some(' ' | '\t')
                            if chars
                                .clone()
                                .take_while(|&c| c != '\n')
                                .collect::<String>()
                                .trim_start()
                                .chars()
                                .next()
                                .is_none_or(|c| c == '#') =>
                        {
                            let rest: String = chars.clone().skip_while(|&c| c != '\n').collect();
                            return Err(ShellError::Continuation(BrokenContinuation {
                                line,
                                next: rest
                                    .lines()
                                    .map(str::trim)
                                    .find(|l| !l.is_empty() && !l.starts_with('#'))
                                    .unwrap_or_default()
                                    .to_string(),
                                cause: ContinuationCause::TrailingSpace,
                            }));
                        }
                        Some(next) => word.push(next),
                        None => {}
                    },
                    _ => word.push(c),
                }
            }
        }
    }
    if let Some((_, opened)) = quote {
        return Err(ShellError::OpenQuote(opened));
    }
    if in_word {
        words.push(ShellWord {
            text: word,
            quoted_whole,
            quoted_assignment,
        });
    }
    // A word that was only a line continuation (`\` at the end of a line) is no word.
    words.retain(|w| !(w.text.is_empty() && !w.quoted_whole && w.quoted_assignment.is_none()));
    Ok(words)
}

/// Why [`shell_words`] cannot read a script as bash would run it.
enum ShellError {
    /// The line (counted from 1) where a quote opens that the script never closes.
    OpenQuote(usize),
    /// A line continuation bash does not make.
    Continuation(BrokenContinuation),
}

/// A command that bash ends at a line break the script means to continue past: the line (counted
/// from 1), the first line after it (the flags Megatron-LM never gets), and why.
struct BrokenContinuation {
    line: usize,
    next: String,
    cause: ContinuationCause,
}

enum ContinuationCause {
    /// `\` followed by spaces or tabs, not by the line break.
    TrailingSpace,
    /// A comment on a line the command was continued onto.
    Comment,
}

/// The words of a launch script as the program receives them ([`shell_words`]). A quoted array
/// item that holds a flag and its value (`"--fp8-format hybrid"`, as Megatron-LM's example
/// scripts write their argument arrays, expanded unquoted as `${MODEL_ARGS[@]}`) splits into its
/// words, as the shell's word splitting does, and so does a variable assigned a quoted list of
/// arguments (`GPT_ARGS="--num-layers 24 ..."`, expanded unquoted as `$GPT_ARGS`); in
/// `--flag="a b"` the quotes hold the flag's value. A quote the script never closes is refused
/// (bash refuses it too; tpsim would read the rest of the script as one word).
pub(super) fn launch_words(text: &str) -> Result<Vec<String>, MegatronArgsError> {
    let shell = shell_words(text).map_err(|err| match err {
        ShellError::OpenQuote(opened) => open_quote(text, opened),
        ShellError::Continuation(broken) => broken_continuation(text, broken),
    })?;
    let mut words = Vec::new();
    for word in shell {
        let value = word.quoted_assignment.map(|at| &word.text[at..]);
        if let Some(value) = value.filter(|v| is_argument_list(v)) {
            words.extend(value.split_whitespace().map(str::to_string));
            // The closing quote ends the list as `)` ends an array: what follows it in the
            // script (`torchrun`) is no value of its last flag.
            words.push("\"".to_string());
        } else if word.quoted_whole
            && word.text.starts_with("--")
            && word.text.contains(char::is_whitespace)
        {
            words.extend(word.text.split_whitespace().map(str::to_string));
        } else {
            words.push(word.text);
        }
    }
    Ok(words)
}

/// A quote the script opens on line `opened` and never closes.
fn open_quote(text: &str, opened: usize) -> MegatronArgsError {
    MegatronArgsError::Stray {
        token: text
            .lines()
            .nth(opened - 1)
            .unwrap_or_default()
            .trim()
            .to_string(),
        why: format!(
            "{}leaves a quote open that the rest of the text never closes (bash refuses it: \"unexpected EOF while looking for matching quote\", and the rest would read as one word); close the quote or escape it with \\",
            if text.lines().nth(1).is_some() {
                format!("(line {opened}) ")
            } else {
                String::new()
            }
        ),
    }
}

/// A line the script means to continue that bash ends ([`BrokenContinuation`]): refused, as the
/// flags after it would be read here and never reach Megatron-LM.
fn broken_continuation(text: &str, broken: BrokenContinuation) -> MegatronArgsError {
    let BrokenContinuation { line, next, cause } = broken;
    let after = if next.is_empty() {
        String::new()
    } else {
        format!(" ({next:?} on)")
    };
    let (what, fix) = match cause {
        ContinuationCause::TrailingSpace => (
            "ends in a backslash followed by spaces, not by the line break: bash reads an escaped space (an argument \" \"), not a line continuation, and the line break ends the command",
            "delete the spaces after the backslash",
        ),
        ContinuationCause::Comment => (
            "has a comment inside a command continued with \\: the comment runs to the line's end (a backslash in it is part of it) and the line break ends the command",
            "delete the comment or move it above the command (or into an array, MODEL_ARGS=( ... ), where comments may sit between flags)",
        ),
    };
    MegatronArgsError::Stray {
        token: text
            .lines()
            .nth(line - 1)
            .unwrap_or_default()
            .trim()
            .to_string(),
        why: format!(
            "(line {line}) {what}, so bash runs the lines after it{after} as a command of their own and Megatron-LM never gets their flags; {fix}"
        ),
    }
}

/// Whether a quoted variable's value is a list of arguments: its first word a flag
/// (`GPT_ARGS="--num-layers 24 ..."`), or variables it extends and then a flag
/// (`EXTRA_ARGS="$EXTRA_ARGS --use-coordinator"`, `COMMON_OPTIONS="${COMMON_OPTIONS} --no-...`, as
/// Megatron-LM's examples/inference/run_offline_inference.sh and examples/rl/model_configs/common.sh
/// append to their lists).
fn is_argument_list(value: &str) -> bool {
    value
        .split_whitespace()
        .find(|w| !w.starts_with('$'))
        .is_some_and(|w| w.starts_with("--"))
}

/// Whether `word` closes a list of arguments in the script: the `)` of an array
/// (`MODEL_ARGS=( ... )`) or the closing quote [`launch_words`] keeps of a quoted variable. A
/// flag that takes several values (`--recompute-modules core_attn mlp`) takes none past it.
fn closes_list(word: &str) -> bool {
    word == ")" || word == "\""
}

impl<'a> Parsed<'a> {
    /// The words of [`launch_words`], `--flag=value` and `--flag value` both read.
    pub(super) fn tokenize(words: &'a [String]) -> Result<Parsed<'a>, MegatronArgsError> {
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut parsed = Parsed {
            values: HashMap::new(),
            switches: HashSet::new(),
            recompute_modules: None,
            cp_comm_types: None,
            load_balancing: Vec::new(),
            launcher: HashMap::new(),
            ignored: Vec::new(),
            strays: Vec::new(),
            repeated: Vec::new(),
        };
        let mut i = 0;
        // The known flag (with its value, if it takes one) the previous words completed: a number
        // after it is no flag's value.
        let mut after_known: Option<String> = None;
        // A Megatron-DeepSpeed line (its `--deepspeed` switches, the `deepspeed` launcher) is
        // parsed by Megatron-DeepSpeed's own arguments.py, not Megatron-LM's: its other flags are
        // not checked against Megatron-LM's list.
        let deepspeed_line = tokens.iter().any(|t| {
            *t == "deepspeed"
                || ["--deepspeed", "--deepscale"].iter().any(|d| {
                    t.strip_prefix(d)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '-', '=']))
                })
        });
        // Between a launcher (`torchrun`, `srun`, `python -m torch.distributed.run`) and the
        // script it starts (`pretrain_gpt.py`), flags are the launcher's, not Megatron-LM's.
        let mut in_launcher = false;
        while i < tokens.len() {
            let token = tokens[i];
            i += 1;
            let previous = after_known.take();
            let Some(flag) = token.strip_prefix("--") else {
                let program = token.rsplit('/').next().unwrap_or(token);
                if program.ends_with(".py") {
                    in_launcher = false;
                } else if LAUNCHERS.contains(&program) || program.starts_with("python") {
                    in_launcher = true;
                }
                if let Some(why) = mistyped_flag(token) {
                    return Err(MegatronArgsError::Stray {
                        token: token.to_string(),
                        why,
                    });
                }
                // `--tensor-model-parallel-size= 2` (a space after the '='): the flag's value is
                // the empty text after the '=', and the number its own word. Dropping the number,
                // as the rule below says, leaves the empty value, refused in turn.
                if let Some(flag) = previous.as_deref().and_then(|p| p.strip_suffix('='))
                    && token.parse::<f64>().is_ok()
                {
                    return Err(MegatronArgsError::Stray {
                        token: token.to_string(),
                        why: format!(
                            "follows {flag}=, whose value is the empty text after the '=', so it is no flag's value (Megatron-LM's argparse refuses both); join them: {flag}={token}"
                        ),
                    });
                }
                if let Some(previous) = &previous
                    && token.parse::<f64>().is_ok()
                {
                    return Err(MegatronArgsError::Stray {
                        token: token.to_string(),
                        why: format!(
                            "follows {previous}, which takes no further value, and is no flag's value (Megatron-LM's argparse refuses it); drop it or add the flag it belongs to"
                        ),
                    });
                }
                // A word right after a flag tpsim reads is no value of it; unless it is shell
                // syntax (a bracket, a line continuation), Megatron-LM's argparse would refuse it.
                if let Some(previous) = previous
                    && token.chars().any(|c| c.is_alphanumeric() || c == '$')
                {
                    parsed.strays.push(format!("{token:?} after {previous}"));
                }
                parsed.ignored.push(token.to_string());
                continue;
            };
            if let Some(name) = flag.strip_prefix('-') {
                return Err(MegatronArgsError::Stray {
                    token: token.to_string(),
                    why: format!(
                        "has three dashes: Megatron-LM's argparse refuses it and tpsim would skip it; write --{}",
                        name.trim_start_matches('-')
                    ),
                });
            }
            let (flag, inline) = match flag.split_once('=') {
                Some((f, v)) => (f, Some(v)),
                None => (flag, None),
            };
            let next_value = |i: &mut usize| match inline {
                Some(v) => Some(v),
                None => match tokens.get(*i) {
                    Some(v) if !v.starts_with("--") => {
                        *i += 1;
                        Some(*v)
                    }
                    _ => None,
                },
            };
            if VALUED.contains(&flag) {
                let value = next_value(&mut i).ok_or_else(|| MegatronArgsError::MissingValue {
                    flag: flag.to_string(),
                    example: example_value(flag),
                })?;
                if let Some(earlier) = parsed.values.insert(flag, value)
                    && !same_value(earlier, value)
                {
                    match parsed.repeated.iter_mut().find(|(f, _)| *f == flag) {
                        Some((_, values)) => values.push(value),
                        None => parsed.repeated.push((flag, vec![earlier, value])),
                    }
                }
                after_known = Some(match inline {
                    Some(_) => token.to_string(),
                    None => format!("{token} {value}"),
                });
            } else if SWITCHES.contains(&flag) {
                // argparse's store_true refuses a value ("ignored explicit argument"): read as
                // the bare switch, `--sequence-parallel=false` turned the setting on.
                if let Some(value) = inline {
                    return Err(MegatronArgsError::Stray {
                        token: token.to_string(),
                        why: format!(
                            "gives a value to --{flag}, a switch that takes none (Megatron-LM's argparse refuses it: \"ignored explicit argument '{value}'\"); write --{flag} to turn it on, or leave it out to keep it off"
                        ),
                    });
                }
                parsed.switches.insert(flag);
                after_known = Some(token.to_string());
            } else if LAUNCHER.contains(&flag) {
                if let Some(v) = next_value(&mut i) {
                    parsed.launcher.insert(flag, v);
                }
            } else if flag == "recompute-modules" {
                let mut modules: Vec<&str> = inline.into_iter().collect();
                while let Some(v) = tokens
                    .get(i)
                    .filter(|v| !v.starts_with("--") && !closes_list(v))
                {
                    modules.push(v);
                    i += 1;
                }
                parsed.recompute_modules = Some(modules);
            } else if flag == "cp-comm-type" {
                // argparse (nargs='+'): `--cp-comm-type=a2a` is the one value (a word after it is
                // a stray), `--cp-comm-type a b` takes the words up to the next one starting
                // with '-'; the last occurrence wins.
                let mut types: Vec<&str> = inline.into_iter().collect();
                while let Some(v) = tokens.get(i).filter(|v| {
                    inline.is_none()
                        && !v.starts_with('-')
                        && !v.starts_with(is_lookalike_dash)
                        && !closes_list(v)
                }) {
                    types.push(v);
                    i += 1;
                }
                parsed.cp_comm_types = Some(types);
                after_known = Some(token.to_string());
            } else if flag == "moe-router-load-balancing-type" {
                // argparse: nargs='+' takes the words up to the next one starting with '-', the
                // last occurrence of the flag wins, and at least one value is needed.
                parsed.ignored.push(token.to_string());
                parsed.load_balancing.clear();
                parsed.load_balancing.extend(inline);
                while let Some(v) = tokens.get(i).filter(|v| {
                    !v.starts_with('-') && !v.starts_with(is_lookalike_dash) && !closes_list(v)
                }) {
                    if let Some(why) = mistyped_flag(v) {
                        return Err(MegatronArgsError::Stray {
                            token: v.to_string(),
                            why,
                        });
                    }
                    parsed.load_balancing.push(v);
                    i += 1;
                }
                if parsed.load_balancing.is_empty() {
                    return Err(MegatronArgsError::MissingValue {
                        flag: flag.to_string(),
                        example: "aux_loss",
                    });
                }
            } else {
                if let Some(why) = misnamed_flag(flag).or_else(|| {
                    (!in_launcher && !deepspeed_line)
                        .then(|| unknown_flag(flag))
                        .flatten()
                }) {
                    return Err(MegatronArgsError::Stray {
                        token: token.to_string(),
                        why,
                    });
                }
                parsed.ignored.push(token.to_string());
                // An unknown flag's value (if any) is not a flag: skip it with the flag, unless it
                // is a flag written with a look-alike dash.
                if let (None, Some(v)) = (inline, tokens.get(i))
                    && !v.starts_with("--")
                {
                    // A known flag with one dash or a look-alike one is no value: Megatron-LM's
                    // argparse refuses it, and skipping it with the unknown flag would lose it.
                    // A bare word (`--wandb-exp-name sequence-parallel`) is a value.
                    if (v.starts_with('-') || v.starts_with(is_lookalike_dash))
                        && let Some(why) = mistyped_flag(v)
                    {
                        return Err(MegatronArgsError::Stray {
                            token: v.to_string(),
                            why,
                        });
                    }
                    parsed.ignored.push(v.to_string());
                    i += 1;
                }
            }
        }
        Ok(parsed)
    }

    pub(super) fn switch(&self, flag: &str) -> bool {
        self.switches.contains(flag)
    }

    pub(super) fn value(&self, flag: &str) -> Option<&'a str> {
        self.values.get(flag).copied()
    }

    /// A dropout probability (`--hidden-dropout`, `--attention-dropout`): arguments.py reads it as
    /// a float, and torch's dropout refuses one outside [0, 1], so anything else is an error.
    pub(super) fn probability(&self, flag: &str) -> Result<Option<f64>, MegatronArgsError> {
        let Some(text) = self.value(flag) else {
            return Ok(None);
        };
        match text.parse::<f64>() {
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
            _ => Err(MegatronArgsError::BadValue {
                message: format!(
                    "--{flag} {text:?} is not a probability between 0 and 1 (Megatron-LM reads it as a float and torch's dropout refuses any other); e.g. --{flag} {}",
                    example_value(flag)
                ),
            }),
        }
    }

    pub(super) fn number(&self, flag: &str) -> Result<Option<u32>, MegatronArgsError> {
        match self.value(flag) {
            None => Ok(None),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(MegatronArgsError::NotANumber {
                    flag: flag.to_string(),
                    value: v.to_string(),
                }),
            },
        }
    }

    /// Megatron-Core's sliding window: `--window-size "(LEFT,RIGHT)"` (arguments.py `tuple_type`;
    /// a query sees LEFT keys before it and RIGHT after) and `--window-attn-skip-freq N` (every
    /// N-th layer keeps full attention). tpsim models causal windows, RIGHT = 0.
    pub(super) fn attention_window(
        &self,
    ) -> Result<Option<crate::model::AttentionWindow>, MegatronArgsError> {
        let full_every = self.number("window-attn-skip-freq")?;
        let Some(text) = self.value("window-size") else {
            return match full_every {
                Some(_) => Err(MegatronArgsError::Refused {
                    given: "--window-attn-skip-freq without --window-size".into(),
                    why: "it says which layers skip the window, and there is none; add --window-size \"(127,0)\" or drop it".into(),
                }),
                None => Ok(None),
            };
        };
        Ok(Some(crate::model::AttentionWindow {
            tokens: window_size_keys_before(text)? + 1,
            full_every: full_every.unwrap_or(0),
        }))
    }

    pub(super) fn required(
        &self,
        flag: &'static str,
        example: &'static str,
    ) -> Result<u32, MegatronArgsError> {
        self.number(flag)?
            .ok_or(MegatronArgsError::Required { flag, example })
    }

    /// The gradient precision as Megatron-LM sets it (arguments.py `validate_args`): with `--bf16`,
    /// `accumulate_allreduce_grads_in_fp32` becomes true unless `--grad-reduce-in-bf16` (or
    /// `--main-grads-dtype bf16`) is given; with `--fp16` it stays as given (default false: fp16
    /// gradients); without either, Megatron trains in fp32.
    pub(super) fn grad_dtype(
        &self,
        notes: &mut Vec<String>,
    ) -> Result<GradDtype, MegatronArgsError> {
        let accumulate = self.switch("accumulate-allreduce-grads-in-fp32");
        let main_grads = self.value("main-grads-dtype");
        if let Some(v) = main_grads
            && v != "fp32"
            && v != "bf16"
        {
            return Err(MegatronArgsError::BadChoice {
                flag: "main-grads-dtype".into(),
                value: v.to_string(),
                valid: "fp32, bf16",
            });
        }
        let bf16_requested = self.switch("grad-reduce-in-bf16") || main_grads == Some("bf16");
        if accumulate && bf16_requested {
            return Err(MegatronArgsError::Contradiction {
                first: "--accumulate-allreduce-grads-in-fp32".into(),
                second: if self.switch("grad-reduce-in-bf16") {
                    "--grad-reduce-in-bf16".into()
                } else {
                    "--main-grads-dtype bf16".into()
                },
                fix: "keep --accumulate-allreduce-grads-in-fp32 for fp32 gradients or --grad-reduce-in-bf16 for bf16 ones",
            });
        }
        // arguments.py validate_args, "Parameters dtype": `if args.fp16: assert not args.bf16`.
        if self.switch("bf16") && self.switch("fp16") {
            return Err(MegatronArgsError::Refused {
                given: "--bf16 and --fp16".into(),
                why: "both are given, which Megatron-LM refuses (arguments.py validate_args asserts not both); keep one".into(),
            });
        }
        if !self.switch("bf16") && !self.switch("fp16") {
            notes.push(
                "the arguments have neither --bf16 nor --fp16, so Megatron-LM would train in fp32; tpsim evaluates bf16 mixed precision with fp32 gradients (add --bf16 to the launch)".to_string(),
            );
            return Ok(GradDtype::Fp32);
        }
        if self.switch("fp16") {
            if accumulate {
                return Ok(GradDtype::Fp32);
            }
            notes.push(
                "--fp16 without --accumulate-allreduce-grads-in-fp32 keeps 2-byte fp16 gradients, evaluated as tpsim's 2-byte (bf16) gradients".to_string(),
            );
            return Ok(GradDtype::Bf16);
        }
        Ok(if bf16_requested {
            GradDtype::Bf16
        } else {
            GradDtype::Fp32
        })
    }

    /// `--optimizer muon` (or the deprecated `dist_muon`) as tpsim prices it (`cost::muon`): the
    /// Newton–Schulz steps at Megatron-LM's default 5 and, with tensor parallelism, the whole
    /// matrix gathered and orthogonalized on every TP rank (`--muon-tp-mode duplicated`, the
    /// default); other step counts, the per-shard or distributed TP modes and the SYRK kernel change
    /// the step's cost and are refused by name. `None` for Adam (the default).
    fn muon(&self) -> Result<Option<&'a str>, MegatronArgsError> {
        let Some(name) = self
            .value("optimizer")
            .filter(|v| matches!(*v, "muon" | "dist_muon"))
        else {
            return Ok(None);
        };
        let not_modelled = |given: String, why: &str| MegatronArgsError::NotModelled {
            given,
            why: why.to_string(),
        };
        // argparse reads the count with int(), which takes "05" and "+5" as Megatron-LM's 5.
        if let Some(steps) = self
            .value("muon-num-ns-steps")
            .filter(|v| v.trim().parse::<i64>() != Ok(5))
        {
            return Err(not_modelled(
                format!("--muon-num-ns-steps {steps}"),
                "tpsim prices Muon's 5 Newton-Schulz steps (Megatron-LM's default); drop it or use 5",
            ));
        }
        // Megatron-LM's argparse choices for Muon's string settings (arguments.py at d98e8a64):
        // a value outside them never starts, whatever the TP size.
        // The list the error offers names first what tpsim prices, so no value it names is
        // refused in turn.
        for (flag, choices, offered) in [
            (
                "muon-tp-mode",
                &["blockwise", "duplicated", "distributed"][..],
                "duplicated (Megatron-LM also takes blockwise and distributed, which tpsim prices only at --tensor-model-parallel-size 1)",
            ),
            (
                "muon-scalar-optimizer",
                &["adam", "lion"][..],
                "adam (Megatron-LM also takes lion, which tpsim does not model)",
            ),
            (
                "muon-fp32-matmul-prec",
                &["low", "medium", "high"][..],
                "medium (Megatron-LM also takes low and high, which tpsim does not model)",
            ),
        ] {
            if let Some(v) = self.value(flag)
                && !choices.contains(&v)
            {
                return Err(MegatronArgsError::BadChoice {
                    flag: flag.into(),
                    value: v.to_string(),
                    valid: offered,
                });
            }
        }
        // Lion keeps one moment where Adam keeps two: the embedding's and output layer's states
        // would be 4 bytes fewer per parameter than `cost::muon` prices.
        if let Some(v) = self.value("muon-scalar-optimizer").filter(|v| *v != "adam") {
            return Err(not_modelled(
                format!("--muon-scalar-optimizer {v}"),
                "tpsim prices Adam's two fp32 moments for the parameters Muon leaves to its scalar optimizer (embedding, output layer, norms; Megatron-LM's default); Lion's one moment is not modelled; drop it or use adam",
            ));
        }
        // `cost::muon` runs the Newton-Schulz products at the bf16 tensor-core rate, which
        // PyTorch's "medium" float32 matmul precision allows; another precision runs them at
        // another rate.
        if let Some(v) = self
            .value("muon-fp32-matmul-prec")
            .filter(|v| *v != "medium")
        {
            return Err(not_modelled(
                format!("--muon-fp32-matmul-prec {v}"),
                "tpsim prices the Newton-Schulz products at medium (Megatron-LM's default: fp32 products on bf16 tensor cores); another precision runs them at another rate, not modelled; drop it or use medium",
            ));
        }
        let tp = self.value("tensor-model-parallel-size").unwrap_or("1");
        if let Some(mode) = self
            .value("muon-tp-mode")
            .filter(|v| *v != "duplicated" && tp != "1")
        {
            return Err(not_modelled(
                format!("--muon-tp-mode {mode}"),
                "tpsim prices --muon-tp-mode duplicated (Megatron-LM's default: each TP rank orthogonalizes the whole gathered matrix); drop it or use duplicated",
            ));
        }
        // Without the split (arguments.py `--muon-no-split-qkv`, dest muon_split_qkv) the fused
        // QKV weight is one (heads + 2·groups)·d × hidden matrix, not the three `cost::muon`
        // prices; MLA's projections are never split, so the switch changes nothing there.
        if self.switch("muon-no-split-qkv") && !self.switch("multi-latent-attention") {
            return Err(not_modelled(
                "--muon-no-split-qkv".to_string(),
                "tpsim prices Muon with the QKV weight split into its query, key and value matrices (Megatron-LM's default); drop it",
            ));
        }
        if self.switch("muon-use-syrk") {
            return Err(not_modelled(
                "--muon-use-syrk".to_string(),
                "tpsim prices Muon's X·Xᵀ as a general GEMM (Megatron-LM's default); drop it",
            ));
        }
        Ok(Some(name))
    }

    /// How the optimizer stores its states (Megatron-LM's `--use-precision-aware-optimizer` with
    /// `--main-params-dtype`, `--exp-avg-dtype`, `--exp-avg-sq-dtype`; without the switch the
    /// dtypes must stay fp32, as arguments.py requires). tpsim models the precision-aware optimizer
    /// with fp32 main params (kept as 16-bit remainders, `OptimizerConfig.store_param_remainders`
    /// default) and bf16 moments, what Megatron-Bridge's DeepSeek-V3 recipe runs, or fp32 moments,
    /// the switch alone; it needs the distributed optimizer (Transformer Engine's FusedAdam under
    /// `DistributedOptimizer`).
    pub(super) fn optimizer_states(&self) -> Result<OptimizerStates, MegatronArgsError> {
        // Megatron-LM's argparse takes fp32, fp16, bf16 and fp8 (fp8 for the moments only); the
        // list the error offers is what tpsim then prices, so no value it names is refused in
        // turn (fp16 and fp8 states are refused below by the combination they make).
        let dtype = |flag: &'static str| -> Result<&str, MegatronArgsError> {
            let v = self.value(flag).unwrap_or("fp32");
            if ["fp32", "fp16", "bf16", "fp8"].contains(&v) {
                Ok(v)
            } else {
                Err(MegatronArgsError::BadChoice {
                    flag: flag.into(),
                    value: v.to_string(),
                    valid: if flag == "main-params-dtype" {
                        "fp32 (Megatron-LM also takes fp16, which tpsim does not model)"
                    } else {
                        "fp32, bf16 (Megatron-LM also takes fp16 and fp8, which tpsim does not model)"
                    },
                })
            }
        };
        let (main, avg, avg_sq) = (
            dtype("main-params-dtype")?,
            dtype("exp-avg-dtype")?,
            dtype("exp-avg-sq-dtype")?,
        );
        let aware = self.switch("use-precision-aware-optimizer");
        if let Some(muon) = self.muon()? {
            if aware {
                return Err(MegatronArgsError::Refused {
                    given: format!("--optimizer {muon} with --use-precision-aware-optimizer"),
                    why: "Megatron-Core's precision-aware optimizer runs with Adam only (optimizer_config.py: \"--use-precision-aware-optimizer only supported with adam\"); drop one of them".into(),
                });
            }
            return Ok(OptimizerStates::Muon);
        }
        if !aware {
            if let Some((flag, v)) = [
                ("main-params-dtype", main),
                ("exp-avg-dtype", avg),
                ("exp-avg-sq-dtype", avg_sq),
            ]
            .into_iter()
            .find(|(_, v)| *v != "fp32")
            {
                return Err(MegatronArgsError::Refused {
                    given: format!("--{flag} {v}"),
                    why: "Megatron-LM takes optimizer state dtypes other than fp32 only with --use-precision-aware-optimizer; add it or use fp32".into(),
                });
            }
            return Ok(OptimizerStates::Fp32);
        }
        // Torch FSDP2 refuses --use-distributed-optimizer (`megatron_zero`): that fix would be
        // refused in turn, so the pair is said as the sharding it is.
        if self.switch("use-torch-fsdp2") {
            return Err(MegatronArgsError::Refused {
                given: "--use-precision-aware-optimizer with --use-torch-fsdp2".into(),
                why: "tpsim models the precision-aware optimizer only in Megatron-Core's distributed optimizer, where the states alone are sharded (Megatron-Bridge turns it off under FSDP: helpers.py, \"cannot work with FSDP together\"); drop --use-precision-aware-optimizer, or drop --use-torch-fsdp2 and add --use-distributed-optimizer".into(),
            });
        }
        if !self.switch("use-distributed-optimizer") {
            return Err(MegatronArgsError::Refused {
                given: "--use-precision-aware-optimizer".into(),
                why: "the precision-aware optimizer runs under Megatron-Core's distributed optimizer; add --use-distributed-optimizer".into(),
            });
        }
        match (main, avg, avg_sq) {
            ("fp32", "bf16", "bf16") => return Ok(OptimizerStates::Bf16Moments),
            ("fp32", "fp32", "fp32") => return Ok(OptimizerStates::PrecisionAware),
            _ => {}
        }
        Err(MegatronArgsError::NotModelled {
            given: format!(
                "--use-precision-aware-optimizer with --main-params-dtype {main} --exp-avg-dtype {avg} --exp-avg-sq-dtype {avg_sq}"
            ),
            why: "tpsim models the precision-aware optimizer with fp32 main params and either bf16 moments (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, Megatron-Bridge's DeepSeek-V3 recipe) or fp32 ones (the defaults)".into(),
        })
    }

    /// The line's optimizer under the line's sharding, refused in the line's words: the check
    /// behind `--optimizer-states` (`OptimizerStates::allows_zero`) names tpsim's `--zero` and
    /// `--optimizer-states`, which a launch line never gives. Megatron-LM asserts "Emerging
    /// optimizer does not support Torch-FSDP2 / Megatron-FSDP for now" of Muon whatever the
    /// sharding strategy (arguments.py at d98e8a64); tpsim prices the precision-aware optimizer
    /// under Megatron-Core's distributed optimizer only (ZeRO-1).
    pub(super) fn check_optimizer_sharding(
        &self,
        states: OptimizerStates,
        zero: u8,
    ) -> Result<(), MegatronArgsError> {
        let fsdp = ["use-megatron-fsdp", "use-torch-fsdp2"]
            .into_iter()
            .find(|s| self.switch(s));
        if states == OptimizerStates::Muon
            && let Some(fsdp) = fsdp
        {
            let muon = self.value("optimizer").unwrap_or("muon");
            let name = if fsdp == "use-torch-fsdp2" {
                "Torch-FSDP2"
            } else {
                "Megatron-FSDP"
            };
            return Err(MegatronArgsError::Refused {
                given: format!("--optimizer {muon} with --{fsdp}"),
                why: format!(
                    "Megatron-LM runs Muon with or without its distributed optimizer (layer-wise), not under {name} (arguments.py: \"Emerging optimizer does not support {name} for now\"); drop --{fsdp} (with --use-distributed-optimizer for the sharded states), or use --optimizer adam"
                ),
            });
        }
        if states.keeps_remainders()
            && !states.allows_zero(zero)
            && let Some(fsdp) = fsdp
        {
            let strategy = self
                .value("data-parallel-sharding-strategy")
                .map(|v| format!(" --data-parallel-sharding-strategy {v}"))
                .unwrap_or_default();
            return Err(MegatronArgsError::Refused {
                given: format!("--use-precision-aware-optimizer with --{fsdp}{strategy}"),
                why: format!(
                    "tpsim models the precision-aware optimizer only in Megatron-Core's distributed optimizer, where the states alone are sharded (Megatron-Bridge turns it off under FSDP: helpers.py, \"cannot work with FSDP together\"); drop --use-precision-aware-optimizer, or drop --{fsdp} and keep --use-distributed-optimizer"
                ),
            });
        }
        Ok(())
    }

    /// Recompute: `--recompute-granularity` (with `--recompute-activations`, the older shorthand
    /// for selective), `--recompute-method`/`--recompute-num-layers`, and the 2021 forms
    /// `--activations-checkpoint-method` (with `--activations-checkpoint-num-layers`, default 1)
    /// and `--checkpoint-activations` (uniform, `--checkpoint-num-layers`, default 1), which the
    /// SC'21 scripts use.
    pub(super) fn recompute(
        &self,
        notes: &mut Vec<String>,
    ) -> Result<(Recompute, Option<FullRecompute>), MegatronArgsError> {
        let granularity = self.value("recompute-granularity");
        // arguments.py: `if args.recompute_activations: args.recompute_granularity = 'selective'`.
        let recompute = match (granularity, self.switch("recompute-activations")) {
            (None, false) => Recompute::None,
            (None, true) | (Some("selective"), _) => Recompute::Selective,
            (Some("full"), false) => Recompute::Full,
            (Some("full"), true) => {
                return Err(MegatronArgsError::Contradiction {
                    first: "--recompute-activations".into(),
                    second: "--recompute-granularity full".into(),
                    fix: "--recompute-activations means selective recompute (Megatron-LM overrides full with it); keep one of them",
                });
            }
            (Some(v), _) => {
                return Err(MegatronArgsError::BadChoice {
                    flag: "recompute-granularity".into(),
                    value: v.to_string(),
                    valid: "full, selective",
                });
            }
        };
        let method_of = |flag: &str, layers_flag: &str| -> Result<_, MegatronArgsError> {
            let Some(method) = self.value(flag) else {
                return Ok(None);
            };
            let layers = self.number(layers_flag)?.unwrap_or(1);
            match method {
                "uniform" => Ok(Some((flag.to_string(), FullRecompute::Uniform(layers)))),
                "block" => Ok(Some((flag.to_string(), FullRecompute::Block(layers)))),
                v => Err(MegatronArgsError::BadChoice {
                    flag: flag.to_string(),
                    value: v.to_string(),
                    valid: "uniform, block",
                }),
            }
        };
        let modern = method_of("recompute-method", "recompute-num-layers")?;
        let legacy = match method_of(
            "activations-checkpoint-method",
            "activations-checkpoint-num-layers",
        )? {
            Some(m) => Some(m),
            // Aug 2021 arguments.py: "--checkpoint-activations is no longer valid ... Defaulting
            // to activation-checkpoint-method=uniform"; before that it checkpointed
            // --checkpoint-num-layers (default 1) layers per chunk.
            None if self.switch("checkpoint-activations") => Some((
                "checkpoint-activations".to_string(),
                FullRecompute::Uniform(self.number("checkpoint-num-layers")?.unwrap_or(1)),
            )),
            None => None,
        };
        let (recompute, method) = match (recompute, modern, legacy) {
            (_, Some((a, _)), Some((b, _))) => {
                return Err(MegatronArgsError::Contradiction {
                    first: format!("--{a}"),
                    second: format!("--{b}"),
                    fix: "the 2021 activation-checkpointing arguments and --recompute-method describe the same thing; keep one",
                });
            }
            (Recompute::Full, Some((_, m)), None) => (Recompute::Full, Some(m)),
            // Megatron-Core transformer_config.py refuses full granularity without a method;
            // tpsim reads it as every layer recomputed and says so.
            (Recompute::Full, None, None) if self.value("recompute-num-layers").is_some() => {
                return Err(MegatronArgsError::Refused {
                    given: "--recompute-num-layers without --recompute-method".into(),
                    why: "Megatron-Core needs --recompute-method uniform or block to know what the layer count means; add one".into(),
                });
            }
            (Recompute::Full, None, None) => {
                notes.push("--recompute-granularity full without --recompute-method (Megatron-Core requires one) is read as --recompute-method uniform --recompute-num-layers 1".to_string());
                (Recompute::Full, Some(FullRecompute::Uniform(1)))
            }
            (Recompute::None, None, Some((_, m))) => (Recompute::Full, Some(m)),
            (other, None, Some((flag, _))) => {
                return Err(MegatronArgsError::Contradiction {
                    first: format!("--{flag}"),
                    second: format!("--recompute-granularity {}", other.as_str()),
                    fix: "the 2021 activation-checkpointing arguments mean full recompute; keep one of them",
                });
            }
            (Recompute::Selective, Some(_), None) => {
                // arguments.py: "recompute method is not yet supported for selective recomputing
                // granularity".
                return Err(MegatronArgsError::Refused {
                    given: "--recompute-method with selective recompute".into(),
                    why: "Megatron-LM refuses a recompute method for selective recomputing granularity; drop --recompute-method".into(),
                });
            }
            (Recompute::None, Some((flag, _)), None) => {
                notes.push(format!(
                    "--{flag} is ignored without --recompute-granularity full (Megatron-Core recomputes nothing then)"
                ));
                (Recompute::None, None)
            }
            (r @ (Recompute::None | Recompute::Selective), None, None)
                if self.value("recompute-num-layers").is_some() =>
            {
                notes.push(
                    "--recompute-num-layers is ignored without --recompute-granularity full (it counts the layers full recompute covers)".to_string(),
                );
                (r, None)
            }
            (r, None, None) => (r, None),
        };
        if let Some(FullRecompute::Uniform(n)) = method
            && n > 1
        {
            return Err(MegatronArgsError::NotModelled {
                given: format!("uniform recompute with {n} layers per chunk"),
                why: format!(
                    "keeping the input of every {n}-layer chunk means {n} layers of activations at once in backward, which tpsim does not model yet; use --recompute-num-layers 1"
                ),
            });
        }
        Ok((recompute, method))
    }

    /// `--attention-backend` (see [`attention_backend`]); `--use-flash-attn` is Megatron-LM's
    /// older switch for FlashAttention.
    pub(super) fn attention(&self) -> Result<Option<AttentionKernel>, MegatronArgsError> {
        let backend = match self.value("attention-backend") {
            None => None,
            Some(v) if attention_backend(v).is_some() => attention_backend(v),
            Some(v) => {
                return Err(MegatronArgsError::BadChoice {
                    flag: "attention-backend".into(),
                    value: v.to_string(),
                    valid: "flash, fused, auto, unfused, local",
                });
            }
        };
        match (backend, self.switch("use-flash-attn")) {
            (Some(AttentionKernel::Unfused), true) => Err(MegatronArgsError::Contradiction {
                first: "--use-flash-attn".into(),
                second: format!(
                    "--attention-backend {}",
                    self.value("attention-backend").unwrap_or_default()
                ),
                fix: "keep --attention-backend flash, or drop --use-flash-attn for unfused attention",
            }),
            (Some(kernel), _) => Ok(Some(kernel)),
            (None, true) => Ok(Some(AttentionKernel::Flash)),
            (None, false) => Ok(None),
        }
    }

    /// `--cp-comm-type` (Megatron-LM's default p2p when absent): the context-parallel exchange,
    /// passed to Transformer Engine as written (Megatron-Core `TEDotProductAttention`), whose
    /// `attn_forward_func_with_cp` takes p2p, all_gather, a2a and a2a+p2p. One type per layer is
    /// read when every layer's is the same; hierarchical a2a+p2p is refused as not modelled.
    /// Without context parallelism (`cp` 1) Megatron-Core neither checks the value
    /// (`TransformerConfig.__post_init__` looks at it only with `context_parallel_size > 1`) nor
    /// hands it to Transformer Engine, so only a2a+p2p (whose `--hierarchical-context-parallel-sizes`
    /// arguments.py asserts whatever the CP size) is refused there. With it, a list is one type per
    /// layer: `TransformerConfig` asserts its length equals `--num-layers` (`layers`).
    pub(super) fn cp_exchange(
        &self,
        cp: u32,
        layers: u32,
    ) -> Result<Option<CpExchange>, MegatronArgsError> {
        let Some(types) = &self.cp_comm_types else {
            return Ok(None);
        };
        let Some(first) = types.first() else {
            return Err(MegatronArgsError::MissingValue {
                flag: "cp-comm-type".into(),
                example: "p2p",
            });
        };
        if cp <= 1 && !types.contains(&"a2a+p2p") {
            return Ok(types
                .iter()
                .all(|t| t == first)
                .then(|| CpExchange::from_megatron_cp_comm_type(first))
                .flatten());
        }
        if types.len() > 1 && types.len() != layers as usize {
            return Err(MegatronArgsError::Refused {
                given: format!("--cp-comm-type {}", types.join(" ")),
                why: format!(
                    "{} types for {layers} layers: Megatron-Core takes one type for every layer or one per layer, and TransformerConfig asserts that a list's length equals --num-layers ({layers}); give one of p2p, all_gather, a2a",
                    types.len()
                ),
            });
        }
        if let Some(other) = types.iter().find(|t| *t != first) {
            return Err(MegatronArgsError::Refused {
                given: format!("--cp-comm-type {}", types.join(" ")),
                why: format!(
                    "a communication type per layer ({first}, {other}, ...) is not modelled: tpsim prices every layer with one exchange; give one of p2p, all_gather, a2a"
                ),
            });
        }
        match *first {
            "allgather" => Err(MegatronArgsError::Refused {
                given: "--cp-comm-type allgather".into(),
                why: "Transformer Engine spells it all_gather and raises \"Unsupported communication type\" for allgather (Megatron-LM passes the value through as written, whatever its help text says); write --cp-comm-type all_gather".into(),
            }),
            "a2a+p2p" => Err(MegatronArgsError::Refused {
                given: "--cp-comm-type a2a+p2p".into(),
                why: "hierarchical context parallelism (a2a inside --hierarchical-context-parallel-sizes groups, p2p across them) is not modelled; use p2p, all_gather or a2a".into(),
            }),
            value => match CpExchange::from_megatron_cp_comm_type(value) {
                Some(exchange) => Ok(Some(exchange)),
                None => Err(MegatronArgsError::BadChoice {
                    flag: "cp-comm-type".into(),
                    value: value.to_string(),
                    valid: "p2p, all_gather, a2a, a2a+p2p",
                }),
            },
        }
    }

    /// Megatron-DeepSpeed's DeepSpeed-Ulysses degree, `--ds-sequence-parallel-size N` above 1
    /// (microsoft/Megatron-DeepSpeed@f4157be megatron/arguments.py; what `--emit deepspeed` writes
    /// for a plan's cp): the context-parallel degree, exchanging Q, K, V and the output over heads
    /// (`CpExchange::HeadAllToAll`). Megatron-LM has no such flag, so the line is priced so only
    /// under `--framework deepspeed` (the app checks that); Megatron-Core's own degree or exchange
    /// beside it is a second context parallelism the line cannot mean.
    pub(super) fn ulysses_degree(&self) -> Result<Option<u32>, MegatronArgsError> {
        let Some(n) = self.number("ds-sequence-parallel-size")?.filter(|&n| n > 1) else {
            return Ok(None);
        };
        let refused = |other: String| {
            MegatronArgsError::Refused {
            given: format!("--ds-sequence-parallel-size {n} with {other}"),
            why: "two context parallelisms: DeepSpeed-Ulysses (Megatron-DeepSpeed's) and Megatron-Core's ring, all-gather or all-to-all; keep --ds-sequence-parallel-size N for Ulysses under --framework deepspeed, or Megatron-Core's --context-parallel-size N with --cp-comm-type a2a".to_string(),
        }
        };
        if let Some(cp) = self.number("context-parallel-size")?.filter(|&cp| cp > 1) {
            return Err(refused(format!("--context-parallel-size {cp}")));
        }
        if let Some(types) = &self.cp_comm_types {
            return Err(refused(format!("--cp-comm-type {}", types.join(" "))));
        }
        Ok(Some(n))
    }

    /// The ZeRO stage the line asks for (see [`megatron_zero`]).
    pub(super) fn zero(&self, pp: u32, notes: &mut Vec<String>) -> Result<u8, MegatronArgsError> {
        if let Some(stage) = self.deepspeed_zero_stage(pp)? {
            return Ok(stage);
        }
        let strategy = self.value("data-parallel-sharding-strategy");
        if let Some(s) = strategy
            && !self.switch("use-megatron-fsdp")
        {
            notes.push(format!(
                "--data-parallel-sharding-strategy {s} is ignored without --use-megatron-fsdp (Megatron-LM ignores it too)"
            ));
        }
        // The pipeline and distributed-optimizer rules first: the flags the rest ask for would
        // not make such a line run.
        // arguments.py: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format."
        if let Some(format) = self.value("ckpt-format")
            && format != "fsdp_dtensor"
            && self.switch("use-megatron-fsdp")
        {
            return Err(MegatronArgsError::Refused {
                given: format!("--use-megatron-fsdp with --ckpt-format {format}"),
                why: "Megatron-LM refuses them together (arguments.py: \"Megatron-FSDP requires the `fsdp_dtensor` checkpointing format\"); write --ckpt-format fsdp_dtensor".into(),
            });
        }
        // arguments.py at d98e8a64: `--optimizer dist_muon` turns the layer-wise distributed
        // optimizer on by itself (`args.use_layer_wise_distributed_optimizer = True`), as
        // `--optimizer muon --use-distributed-optimizer` does: Muon's states sharded, ZeRO-1.
        // Beside an FSDP switch it is left to the FSDP rules (Muon refuses FSDP by name).
        let fsdp = self.switch("use-megatron-fsdp") || self.switch("use-torch-fsdp2");
        let layer_wise = self.value("optimizer") == Some("dist_muon") && !fsdp;
        let zero = megatron_zero(
            self.switch("use-distributed-optimizer") || layer_wise,
            self.switch("use-megatron-fsdp"),
            self.switch("use-torch-fsdp2"),
            strategy,
            pp,
        )?;
        if self.switch("use-torch-fsdp2") {
            self.check_torch_fsdp2()?;
        }
        Ok(zero)
    }

    /// Megatron-DeepSpeed's `--zero-stage N` (microsoft/Megatron-DeepSpeed@f4157be
    /// megatron/arguments.py `_add_zero_args`: an int, default 1): the stage its DeepSpeed config's
    /// `zero_optimization.stage` runs, which the launch line repeats for the model code
    /// (pretrain_gpt.py builds the model under `deepspeed.zero.Init(enabled=args.zero_stage == 3)`;
    /// `--emit deepspeed` writes both). Megatron-LM has no such flag, so the line is priced as
    /// Megatron-DeepSpeed runs it only under `--framework deepspeed` (the app checks that).
    /// Refused where the run would not start or would run another stage:
    /// - a stage above 3: DeepSpeed's `ZeroStageEnum` stops at `max_stage = 3`
    ///   (deepspeed/runtime/zero/config.py);
    /// - with Megatron's own sharding switches: under `--deepspeed`, megatron/optimizer/__init__.py
    ///   returns the bare optimizer ("if args.deepspeed: return optimizer") before any distributed
    ///   optimizer wraps it, so DeepSpeed's stage is the one that runs;
    /// - ZeRO-2/3 on DeepSpeed's pipeline engine: without `--no-pipeline-parallel` pretrain_gpt.py
    ///   builds `GPTModelPipe`, which `deepspeed.initialize` runs in its `PipelineEngine`, and that
    ///   asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    ///   (deepspeed/runtime/pipe/engine.py; `emit::deepspeed` says the same).
    fn deepspeed_zero_stage(&self, pp: u32) -> Result<Option<u8>, MegatronArgsError> {
        let Some(text) = self.value("zero-stage") else {
            return Ok(None);
        };
        let stage = match text.trim().parse::<u8>() {
            Ok(stage @ 0..=3) => stage,
            _ => {
                return Err(MegatronArgsError::BadChoice {
                    flag: "zero-stage".into(),
                    value: text.to_string(),
                    valid: "0, 1, 2, 3 (Megatron-DeepSpeed's ZeRO stage, as its DeepSpeed config's zero_optimization.stage)",
                });
            }
        };
        if let Some(switch) = [
            "use-distributed-optimizer",
            "use-megatron-fsdp",
            "use-torch-fsdp2",
        ]
        .into_iter()
        .find(|s| self.switch(s))
        {
            return Err(MegatronArgsError::Refused {
                given: format!("--zero-stage {stage} with --{switch}"),
                why: format!(
                    "two ways to shard the optimizer states: under DeepSpeed's engine Megatron-DeepSpeed hands DeepSpeed the bare optimizer (megatron/optimizer/__init__.py: \"if args.deepspeed: return optimizer\"), so ZeRO-{stage} runs and --{switch} does not; drop --{switch}"
                ),
            });
        }
        // Megatron-Core's optimizer settings, which Megatron-DeepSpeed's argparse does not have
        // (megatron/arguments.py@f4157be defines neither, and its --optimizer takes adam and sgd
        // only): their fixes would point back at Megatron-Core's distributed optimizer, or, for
        // Muon, at Megatron-Core, which refuses --zero-stage.
        let core_only = if self.switch("use-precision-aware-optimizer") {
            Some("--use-precision-aware-optimizer".to_string())
        } else if let Some(muon) = self
            .value("optimizer")
            .filter(|v| matches!(*v, "muon" | "dist_muon"))
        {
            Some(format!("--optimizer {muon}"))
        } else {
            self.value("num-distributed-optimizer-instances")
                .filter(|v| !same_value(v, "1"))
                .map(|v| format!("--num-distributed-optimizer-instances {v}"))
        };
        if let Some(flag) = core_only {
            let why = if flag.starts_with("--optimizer ") {
                // Named as the line has them: a line without --deepspeed was told to drop it.
                // `--deepspeed` is no switch tpsim reads; it stays among the ignored tokens (the
                // app reads it there too, eval_command.rs `deepspeed_on_line`).
                let drop = if self.ignored.iter().any(|t| t == "--deepspeed") {
                    "--deepspeed and --zero-stage"
                } else {
                    "--zero-stage"
                };
                format!(
                    "Muon is Megatron-Core's optimizer, which Megatron-DeepSpeed does not have (its --optimizer takes adam and sgd; DeepSpeed's ZeRO-{stage} keeps Adam's states); use --optimizer adam, or for Muon drop {drop} and run Megatron-Core (--use-distributed-optimizer for the sharded states)"
                )
            } else {
                format!(
                    "{flag} is Megatron-Core's distributed-optimizer setting, which Megatron-DeepSpeed does not have (its argparse refuses it; DeepSpeed's ZeRO-{stage} keeps the states); drop it"
                )
            };
            return Err(MegatronArgsError::Refused {
                given: format!("--zero-stage {stage} with {flag}"),
                why,
            });
        }
        if stage >= 2 && (pp > 1 || !self.switch("no-pipeline-parallel")) {
            let (given, fix) = if pp > 1 {
                (
                    format!("--zero-stage {stage} with --pipeline-model-parallel-size {pp}"),
                    "use --zero-stage 1, or --pipeline-model-parallel-size 1 with --no-pipeline-parallel",
                )
            } else {
                (
                    format!("--zero-stage {stage} without --no-pipeline-parallel"),
                    "add --no-pipeline-parallel (pipeline size 1), as --emit deepspeed writes it",
                )
            };
            return Err(MegatronArgsError::Refused {
                given,
                why: format!(
                    "Megatron-DeepSpeed builds the model as DeepSpeed's pipeline module unless --no-pipeline-parallel is given (pretrain_gpt.py), and DeepSpeed's pipeline engine asserts \"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\"; {fix}"
                ),
            });
        }
        Ok(Some(stage))
    }

    /// What Megatron-LM's `validate_args` asserts of a `--use-torch-fsdp2` line (arguments.py:
    /// "--use-torch-fsdp2 is not supported with expert parallelism", "... is not supported with
    /// gradient accumulation fusion", "... requires --untie-embeddings-and-output-weights", "...
    /// not supported with fp16 yet"); the pipeline and distributed-optimizer rules are
    /// [`megatron_zero`]'s. Megatron-LM sets none of these for the user: it stops with an
    /// AssertionError, so a line it refuses is refused here too, naming the flag to change.
    fn check_torch_fsdp2(&self) -> Result<(), MegatronArgsError> {
        let refused = |given: String, why: &str| {
            Err(MegatronArgsError::Refused {
                given,
                why: why.to_string(),
            })
        };
        if let Some(ep) = self.number("expert-model-parallel-size")?
            && ep > 1
        {
            return refused(
                format!("--use-torch-fsdp2 with --expert-model-parallel-size {ep}"),
                "Megatron-LM refuses torch FSDP2 with expert parallelism; use --expert-model-parallel-size 1, or --use-megatron-fsdp",
            );
        }
        // `--no-gradient-accumulation-fusion` is a store_false switch: fusion is on unless it
        // is given.
        if !self.switch("no-gradient-accumulation-fusion") {
            return refused(
                "--use-torch-fsdp2 without --no-gradient-accumulation-fusion".into(),
                "Megatron-LM asserts torch FSDP2 runs without gradient-accumulation fusion (arguments.py: \"--use-torch-fsdp2 is not supported with gradient accumulation fusion\"), which is on unless turned off; add --no-gradient-accumulation-fusion",
            );
        }
        if !self.switch("untie-embeddings-and-output-weights") {
            return refused(
                "--use-torch-fsdp2 without --untie-embeddings-and-output-weights".into(),
                "Megatron-LM asserts torch FSDP2 runs with separate input and output embeddings (arguments.py: \"--use-torch-fsdp2 requires --untie-embeddings-and-output-weights\"), and this line ties them; add --untie-embeddings-and-output-weights (a model with its own output layer), or use --use-megatron-fsdp",
            );
        }
        if self.switch("fp16") {
            return refused(
                "--use-torch-fsdp2 with --fp16".into(),
                "Megatron-LM does not support torch FSDP2 with fp16; use --bf16",
            );
        }
        Ok(())
    }

    /// torchrun's `--nnodes` / `--nproc_per_node`: a number is read, anything else (a shell
    /// variable, an elastic `MIN:MAX` range, `gpu`) is left to `--nodes` / `--gpus-per-node`.
    pub(super) fn launcher(&self, notes: &mut Vec<String>) -> (Option<u32>, Option<u32>, bool) {
        let mut read = |flags: &[&str], tpsim_flag: &str| {
            let (flag, value) = flags
                .iter()
                .find_map(|f| self.launcher.get(f).map(|v| (*f, *v)))?;
            match value.parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    notes.push(match super::megatron_words::shell_default(value) {
                        Some(default) => format!(
                            "torchrun --{flag} {value} is a shell variable tpsim does not expand (bash gives its default, {default}, where the variable is unset or empty); give {tpsim_flag} with the number the run uses, e.g. {tpsim_flag} {default}"
                        ),
                        None => format!(
                            "torchrun --{flag} {value} is not a number tpsim can read; give {tpsim_flag}"
                        ),
                    });
                    None
                }
            }
        };
        let nodes = read(&["nnodes"], "--nodes");
        let gpus_per_node = read(&["nproc_per_node", "nproc-per-node"], "--gpus-per-node");
        // A torchrun line without `--nnodes` runs on one node: torchrun's `--nnodes` defaults to
        // "1:1" (PyTorch torch/distributed/run.py `get_args_parser`).
        let nodes_by_default = nodes.is_none()
            && !self.launcher.contains_key("nnodes")
            && ["nproc_per_node", "nproc-per-node"]
                .iter()
                .any(|f| self.launcher.contains_key(f));
        (
            nodes.or(nodes_by_default.then_some(1)),
            gpus_per_node,
            nodes_by_default,
        )
    }
}

/// Megatron-Core's `--attention-backend` (AttnBackend enum: flash, fused, unfused, local, auto) as
/// tpsim's kernel: flash and fused (cuDNN) never store the s x s scores and auto picks one of them;
/// unfused and local are the core attention that does. `None` for any other value.
pub fn attention_backend(value: &str) -> Option<AttentionKernel> {
    match value {
        "flash" | "fused" | "auto" => Some(AttentionKernel::Flash),
        "unfused" | "local" => Some(AttentionKernel::Unfused),
        _ => None,
    }
}

/// The ZeRO stage of Megatron-LM's data-parallel arguments: `--use-distributed-optimizer` (ZeRO-1),
/// Megatron-FSDP with `--data-parallel-sharding-strategy` (arguments.py default
/// optim_grads_params: ZeRO-3; optim_grads: ZeRO-2; optim: ZeRO-1; no_shard: none; Megatron-FSDP v1,
/// the default `--megatron-fsdp-version`, has no pipeline-parallel check in arguments.py, so it runs
/// with pipelines), and torch FSDP2 (full sharding: ZeRO-3; arguments.py asserts it runs without
/// pipelines).
pub fn megatron_zero(
    distributed_optimizer: bool,
    megatron_fsdp: bool,
    torch_fsdp2: bool,
    strategy: Option<&str>,
    pp: u32,
) -> Result<u8, MegatronArgsError> {
    if torch_fsdp2 {
        if distributed_optimizer {
            // arguments.py: "--use-torch-fsdp2 is not supported with MCore's distributed optimizer".
            return Err(MegatronArgsError::Refused {
                given: "--use-torch-fsdp2 with --use-distributed-optimizer".into(),
                why: "Megatron-LM refuses torch FSDP2 with its own distributed optimizer (FSDP2 shards the optimizer states itself); drop --use-distributed-optimizer".into(),
            });
        }
        if pp > 1 {
            return Err(MegatronArgsError::Refused {
                given: format!("--use-torch-fsdp2 with --pipeline-model-parallel-size {pp}"),
                why: "Megatron-LM refuses torch FSDP2 with pipeline parallelism; drop one".into(),
            });
        }
        return Ok(3);
    }
    if !megatron_fsdp {
        return Ok(u8::from(distributed_optimizer));
    }
    let zero = match strategy.unwrap_or("optim_grads_params") {
        "no_shard" => 0,
        "optim" => 1,
        "optim_grads" => 2,
        "optim_grads_params" => 3,
        v => {
            return Err(MegatronArgsError::BadChoice {
                flag: "data-parallel-sharding-strategy".into(),
                value: v.to_string(),
                valid: "no_shard, optim, optim_grads, optim_grads_params",
            });
        }
    };
    Ok(zero)
}

/// Whether two spellings of a flag's value are the same value to Megatron-LM's argparse: the same
/// text, or numbers `int()`/`float()` read alike (`32` and `+32`, `1e-4` and `0.0001`).
fn same_value(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (a.trim().parse::<f64>(), b.trim().parse::<f64>()),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Megatron-Core's `--window-size "(LEFT,RIGHT)"` (arguments.py `tuple_type`; a query sees LEFT
/// keys before it and RIGHT after), quotes and all as `$(tpsim plan --emit megatron)` pastes it:
/// LEFT, for the causal windows tpsim models (RIGHT = 0).
pub fn window_size_keys_before(text: &str) -> Result<u32, MegatronArgsError> {
    let inner = text
        .trim()
        .trim_matches(|c| c == '\'' || c == '"')
        .trim_start_matches('(')
        .trim_end_matches(')');
    let parts: Vec<Option<u32>> = inner
        .split(',')
        .map(|x| crate::units::parse_list_item(x).ok())
        .collect();
    // The model's own bound on sequences (tpsim refuses longer ones as typos).
    const MAX_WINDOW: u32 = 1 << 24;
    match parts.as_slice() {
        [Some(left), Some(0)] if *left >= MAX_WINDOW => Err(MegatronArgsError::BadValue {
            message: format!(
                "--window-size {text}: a window of {left} tokens is longer than any sequence tpsim plans ({MAX_WINDOW}); check the value"
            ),
        }),
        [Some(left), Some(0)] => Ok(*left),
        // A LEFT past u32 is a whole number still: the same bound, not "not a pair".
        [None, Some(0)]
            if inner.split(',').next().is_some_and(|left| {
                let digits = left.trim().trim_start_matches('+');
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
            }) =>
        {
            Err(MegatronArgsError::BadValue {
                message: format!(
                    "--window-size {text}: a window of {} tokens is longer than any sequence tpsim plans ({MAX_WINDOW}); check the value",
                    inner.split(',').next().unwrap_or_default().trim()
                ),
            })
        }
        [Some(_), Some(right)] => Err(MegatronArgsError::Refused {
            given: format!("--window-size {text}"),
            why: format!(
                "a window that looks {right} tokens ahead is not causal; tpsim models causal windows \"(LEFT,0)\""
            ),
        }),
        _ => Err(MegatronArgsError::BadValue {
            message: format!(
                "--window-size {text} is not a pair of non-negative integers; write it as Megatron-LM does, e.g. --window-size \"(127,0)\""
            ),
        }),
    }
}
