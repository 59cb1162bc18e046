//! Megatron-LM arguments in: a pasted launch line (`--megatron-args`) or its switches pasted on
//! `eval`, read into tpsim's model, cluster and plan, and checked against tpsim's own flags so that
//! nothing the line says is dropped or silently overridden.

use anyhow::{Context, Result, anyhow, bail};

use super::scenario::{
    DEFAULT_VOCAB, Scenario, framework_of_args, model_file_of, precision_of_args,
};
use crate::cli::{AttentionArg, ClusterArgs, EvalArgs, GradDtypeArg, TrainingArgs};
use crate::emit;
use crate::input_file;
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, PlanRequest, Precision, Recompute};
use crate::specs::{ModelRef, PlanFile};
use crate::training::{AttentionKernel, GradDtype, Overlap, Training};

/// Megatron-LM's `--normalization` (default LayerNorm).
pub(super) fn megatron_norm(value: Option<&str>) -> Result<Norm> {
    match value {
        None | Some("LayerNorm") => Ok(Norm::Layernorm),
        Some("RMSNorm") => Ok(Norm::Rmsnorm),
        Some(other) => bail!(
            "--normalization {other} is not a Megatron-LM normalization; use LayerNorm or RMSNorm"
        ),
    }
}

/// Megatron-LM's `--position-embedding-type`, given on its own (default learned_absolute).
pub(super) fn megatron_position_embedding(value: &str) -> Result<PositionEmbedding> {
    match PositionEmbedding::from_megatron(value) {
        Some(kind) => Ok(kind),
        None => bail!(
            "--position-embedding-type {value} is not one tpsim models; use learned_absolute, rope (or its mrope/yarn variants), alibi or none"
        ),
    }
}

/// What reading and applying a launch line has to say about what it used and skipped, held
/// until its plan is known to build (`held_notes`): a line that is refused for its plan gets its
/// one-line error, not these notes before it.
fn defer_note(line: String) {
    super::held_notes::hold(line);
}

/// GPT-2's BPE vocabulary: 50257 tokens (openai-community/gpt2 `config.json` `vocab_size`), the
/// tokenizer of Megatron-LM's GPT examples (`--tokenizer-type GPT2BPETokenizer`).
const GPT2_VOCAB: u32 = 50257;
/// Megatron-LM's `--make-vocab-size-divisible-by` default (megatron/training/arguments.py at
/// d98e8a64).
const MEGATRON_VOCAB_DIVISIBLE_BY: u32 = 128;

/// GPT-2's vocabulary as Megatron-LM pads it at a line's tp, for the notes on a line without
/// `--vocab-size` (tpsim prices `DEFAULT_VOCAB`, GPT-2's as padded at tp 8, whatever the tp).
struct PaddedVocab {
    size: u64,
    divisible_by: u32,
    /// divisible_by x tp: the multiple the vocabulary is padded to.
    multiple: u64,
}

/// GPT-2's vocabulary padded as Megatron-LM pads a tokenizer's vocabulary at the line's tp: up to a
/// multiple of `--make-vocab-size-divisible-by` x tp (`vocab_size_with_padding`,
/// megatron/core/tokenizers/utils/build_tokenizer.py at d98e8a64): 50304 at tp 1, 51200 at tp 8.
/// The reader refuses a divisor of 0 (`MegatronArgs::number`).
fn gpt2_padded_vocab(launch: &emit::MegatronLaunch) -> PaddedVocab {
    let divisible_by = launch
        .vocab_divisible_by
        .unwrap_or(MEGATRON_VOCAB_DIVISIBLE_BY)
        .max(1);
    let multiple = u64::from(divisible_by) * u64::from(launch.tp.max(1));
    PaddedVocab {
        size: u64::from(GPT2_VOCAB).div_ceil(multiple) * multiple,
        divisible_by,
        multiple,
    }
}

/// The top-level keys of `text` where it reads as a tpsim plan file (`plan --save` writes one; the
/// bundled plans/*.yaml): an unindented `plan:` key (specs.rs `PlanFile::plan`) among unindented
/// `key:` lines, and no `--flag` outside `#` comments. `None` for anything else, a launch line
/// included.
fn plan_file_keys(text: &str) -> Option<Vec<&str>> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    if lines.iter().any(|l| l.contains("--")) {
        return None;
    }
    let keys: Vec<&str> = lines
        .iter()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| l.split_once(':').map(|(key, _)| key.trim()))
        .filter(|key| !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    keys.contains(&"plan").then_some(keys)
}

/// `--megatron-args "LINE"` or `--megatron-args @launch.sh`: a whole Megatron-LM launch line,
/// including arguments tpsim does not model (listed on stderr).
/// `vocab_given`: `--vocab` beside the line, which sets the vocabulary the line may leave out.
pub(super) fn read_megatron_launch(text: &str, vocab_given: bool) -> Result<emit::MegatronLaunch> {
    let line = match text.strip_prefix('@') {
        // `@` alone said `@"": cannot read it: No such file or directory`.
        Some(path) if path.trim().is_empty() => bail!(
            "--megatron-args {}: names no file after the @ (rule: @FILE reads the launch line from FILE; without the @ the value is the launch line itself); write the file's path right after the @, e.g. --megatron-args @examples/megatron/llama3-70b.sh",
            input_file::quote(text)
        ),
        // Messages quote the argument as given: "--megatron-args @launch.sh: ...".
        Some(path) => input_file::read_text("--megatron-args", path).map_err(|e| {
            anyhow::anyhow!(
                "{}",
                e.to_string()
                    .replacen("--megatron-args ", "--megatron-args @", 1)
            )
        })?,
        // One word naming a file is a path given without the `@` that reads it: said so, not
        // read as a launch line that lacks --num-layers.
        None if !text.trim().is_empty()
            && !text.trim().contains(char::is_whitespace)
            && !text.trim().starts_with('-')
            && std::path::Path::new(text.trim()).is_file() =>
        {
            bail!(
                "--megatron-args {}: a file's path is read with @ before it (the value is otherwise the launch line itself); write --megatron-args @{}",
                text.trim(),
                text.trim()
            )
        }
        None => text.to_string(),
    };
    // An empty file, or one of only comments and blank lines (bash's `#` to the end of the line),
    // holds no flag: it was read as a launch line that lacks --num-layers, the first flag missed.
    if let Some(path) = text.strip_prefix('@')
        && line.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        })
    {
        bail!(
            "--megatron-args {}: {} {} (rule: @FILE reads a Megatron-LM launch line, its --flags, from FILE); write the launch line into the file, e.g. as examples/megatron/llama3-70b.sh does, or give the line itself after --megatron-args",
            input_file::quote(text),
            input_file::quote(path),
            if line.trim().is_empty() {
                "is empty"
            } else {
                "holds only comments and blank lines, no flag"
            }
        );
    }
    // A tpsim plan file (`plan --save`, plans/*.yaml) given where a launch line is wanted was
    // read as a line that lacks --num-layers: said to be a plan file, read by --plan.
    if let (Some(path), Some(keys)) = (text.strip_prefix('@'), plan_file_keys(&line)) {
        bail!(
            "--megatron-args {}: {} is a tpsim plan file (its keys: {}), not a Megatron-LM launch line (rule: --megatron-args reads the line's --flags); evaluate it with --plan {}",
            input_file::quote(text),
            input_file::quote(path),
            keys.join(", "),
            input_file::quote(path)
        );
    }
    let launch = emit::read_megatron_args(&line).context("--megatron-args")?;
    let padded = gpt2_padded_vocab(&launch);
    // The virtual stages need no cluster: a line that cannot have them is refused before any note.
    launch
        .vpp()
        .map_err(|message| anyhow!("--megatron-args: {message}"))?;
    // Megatron-LM sizes the embedding and output layer from the tokenizer (`build_tokenizer`:
    // `padded_vocab_size` from the tokenizer's vocabulary, padded to a multiple of
    // --make-vocab-size-divisible-by x tp), so a line without --vocab-size is priced at tpsim's
    // default vocabulary, GPT-2's as padded at tp 8: said in a note of its own, with what
    // Megatron-LM pads GPT-2's to at the line's tp, and the tokenizer flags are not listed among
    // the ones that change nothing. A line naming GPT-2's tokenizer gets the note only where its
    // tp pads GPT-2's vocabulary to another size than tpsim prices. The default stays tp 8's: the
    // same shape typed as flags is priced alike, and a search's tp is not known when the model is.
    let tokenizer = tokenizer_words(&launch.ignored);
    let gpt2_named = tokenizer
        .iter()
        .any(|(flag, value)| *flag == "--tokenizer-type" && *value == "GPT2BPETokenizer");
    let vocab_unsaid = launch.vocab.is_none()
        && !vocab_given
        && (!gpt2_named || padded.size != u64::from(DEFAULT_VOCAB));
    let flags: Vec<&str> = launch
        .ignored
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("--"))
        .filter(|t| !(vocab_unsaid && tokenizer.iter().any(|(flag, _)| t.starts_with(flag))))
        .collect();
    if vocab_unsaid {
        let named: Vec<String> = tokenizer
            .iter()
            .map(|(flag, value)| {
                if value.is_empty() {
                    flag.to_string()
                } else {
                    format!("{flag} {value}")
                }
            })
            .collect();
        let at_this_tp = if padded.size == u64::from(DEFAULT_VOCAB) {
            format!(
                "at the line's tp {} too (a multiple of {} x {} = {})",
                launch.tp, padded.divisible_by, launch.tp, padded.multiple
            )
        } else {
            format!(
                "at the line's tp {} it pads GPT-2's to {} (a multiple of {} x {} = {})",
                launch.tp, padded.size, padded.divisible_by, launch.tp, padded.multiple
            )
        };
        let fix = if gpt2_named || padded.size == u64::from(DEFAULT_VOCAB) {
            format!(
                "add --vocab-size {} to the line for GPT-2's, or the tokenizer's size as --vocab-size N (Llama 3: 128256)",
                padded.size
            )
        } else {
            format!(
                "add the tokenizer's size to the line as --vocab-size N (GPT-2's at this tp: {}; Llama 3: 128256), or give --vocab N",
                padded.size
            )
        };
        defer_note(format!(
            "note: --megatron-args: the line gives no --vocab-size, so tpsim prices a vocabulary of {DEFAULT_VOCAB} tokens (tpsim's default: GPT-2's {GPT2_VOCAB} as Megatron-LM pads it at tp 8; {at_this_tp}); Megatron-LM takes the vocabulary from {} and pads it to a multiple of {} x tp, which changes the embedding and output layer: {fix}",
            if named.is_empty() {
                "its tokenizer".to_string()
            } else {
                format!("the line's tokenizer ({})", named.join(" "))
            },
            padded.divisible_by
        ));
    }
    if !flags.is_empty() {
        defer_note(format!(
            "note: --megatron-args: {} argument(s) do not change memory or time in tpsim's model and were skipped: {}",
            flags.len(),
            flags.join(" ")
        ));
    }
    // What the reader could not take (`--nnodes $NNODES`) explains the errors that follow; the
    // rest is said once the line is known to be valid, so a refused line gets its error alone.
    for note in &launch.unread {
        eprintln!("note: --megatron-args: {note}");
    }
    for note in &launch.notes {
        defer_note(format!("note: --megatron-args: {note}"));
    }
    Ok(launch)
}

/// `--attention-backend` (Megatron-Core) on tpsim's own command line, as `--attention`.
pub(super) fn attention_arg_of_backend(value: &str) -> Result<AttentionArg> {
    match emit::attention_backend(value) {
        Some(AttentionKernel::Flash) => Ok(AttentionArg::Flash),
        Some(AttentionKernel::Unfused) => Ok(AttentionArg::Unfused),
        None => bail!(
            "--attention-backend {value} is not a Megatron-Core attention backend; use flash, fused, auto, unfused or local"
        ),
    }
}

/// A shape flag given next to `--megatron-args` must not contradict the launch line: `--hidden
/// 1024` beside `--hidden-size 2048` won over the line without a word (the model kept the line's
/// name, `megatron-l8-h2048`), as --layers would (which clap refuses beside the line). The same
/// value, or one the line leaves to Megatron's default, is taken, as for `--seq-len`.
pub(super) fn check_megatron_shape(
    launch: &emit::MegatronLaunch,
    model: &crate::cli::ModelArgs,
) -> Result<()> {
    // A hybrid line's MTP depths are its pattern's '/' segments (the reader refuses
    // --mtp-num-layers beside a pattern), so the contradiction names them, not that flag.
    if launch.hybrid.is_some()
        && launch.mtp_layers > 0
        && let Some(given) = model.mtp_layers
        && given != launch.mtp_layers
    {
        let fix = if given == 0 {
            "drop the '/' segments from the line's pattern".to_string()
        } else {
            format!("write {given} '/' segments in the line's pattern")
        };
        bail!(
            "--mtp-layers {given} contradicts the --megatron-args launch line, whose --hybrid-layer-pattern has {} MTP depths ('/' segments); drop --mtp-layers or {fix}",
            launch.mtp_layers
        );
    }
    for (flag, given, line_flag, line) in [
        (
            "--hidden",
            model.hidden,
            "--hidden-size",
            Some(launch.hidden),
        ),
        (
            "--heads",
            model.heads,
            "--num-attention-heads",
            Some(launch.heads),
        ),
        (
            "--kv-heads",
            model.kv_heads,
            "--num-query-groups",
            launch.kv_heads,
        ),
        (
            "--ffn-hidden",
            model.ffn_hidden,
            "--ffn-hidden-size",
            launch.ffn_hidden,
        ),
        (
            "--head-dim",
            model.head_dim,
            "--kv-channels",
            launch.head_dim,
        ),
        ("--vocab", model.vocab, "--vocab-size", launch.vocab),
        (
            "--mtp-layers",
            model.mtp_layers,
            "--mtp-num-layers",
            (launch.mtp_layers > 0).then_some(launch.mtp_layers),
        ),
        (
            "--num-experts",
            model.num_experts,
            "--num-experts",
            launch.experts.moe.map(|moe| moe.experts),
        ),
    ] {
        if let (Some(given), Some(line)) = (given, line)
            && given != line
        {
            bail!(
                "{flag} {given} contradicts the --megatron-args launch line, which sets {line_flag} {line}; drop {flag} or change {line_flag} in the line"
            );
        }
    }
    // The experts' shape and the sliding window, likewise: `--moe-router-topk 4` beside a line's
    // experts, or `--attention-window 1024` beside its `--window-size`, won over the line without a
    // word. A line's experts carry Megatron-LM's defaults for what it leaves out, so the flag must
    // match what the line runs.
    let moe = launch.experts.moe;
    let window = launch.attention_window;
    for (flag, given, line_flag, line) in [
        (
            "--moe-router-topk",
            model.moe_router_topk,
            "--moe-router-topk",
            moe.map(|m| m.router_topk),
        ),
        (
            "--moe-ffn-hidden-size",
            model.moe_ffn_hidden_size,
            "--moe-ffn-hidden-size",
            moe.map(|m| m.ffn_hidden),
        ),
        (
            "--moe-shared-expert-intermediate-size",
            model.moe_shared_expert_intermediate_size,
            "--moe-shared-expert-intermediate-size",
            moe.map(|m| m.shared_expert_ffn_hidden),
        ),
        (
            "--moe-first-k-dense-replace",
            model.moe_first_k_dense_replace,
            "--moe-layer-freq",
            moe.map(|m| m.first_dense_layers),
        ),
        (
            "--moe-router-num-groups",
            model.moe_router_num_groups,
            "--moe-router-num-groups",
            moe.map(|m| m.router_groups),
        ),
        (
            "--moe-router-group-topk",
            model.moe_router_group_topk,
            "--moe-router-group-topk",
            moe.map(|m| m.router_group_topk),
        ),
        (
            "--attention-window",
            model.attention_window,
            "--window-size",
            window.map(|w| w.tokens),
        ),
        (
            "--window-attn-skip-freq",
            model.window_attn_skip_freq,
            "--window-attn-skip-freq",
            window.map(|w| w.full_every),
        ),
    ] {
        if let (Some(given), Some(line)) = (given, line)
            && given != line
        {
            let shown = if line_flag == "--window-size" {
                format!(
                    "--window-size \"({},0)\" ({line} tokens per query)",
                    line - 1
                )
            } else if flag == "--moe-first-k-dense-replace" {
                format!("{line} dense layers first")
            } else {
                format!("{line_flag} {line}")
            };
            bail!(
                "{flag} {given} contradicts the --megatron-args launch line, which runs {shown} (as the line gives it, or Megatron-LM's default where it does not); drop {flag} or change {line_flag} in the line"
            );
        }
    }
    // Latent attention's widths, likewise: `--kv-lora-rank 128` beside a line's `--kv-lora-rank
    // 256` won over it without a word. A latent line carries Megatron-LM's defaults for the widths
    // it leaves out (no query down-projection; qk 128, rotary 64, value 128).
    if let Some(mla) = launch.experts.mla {
        for (flag, given, line) in [
            ("--q-lora-rank", model.q_lora_rank, mla.q_lora_rank),
            ("--kv-lora-rank", model.kv_lora_rank, Some(mla.kv_lora_rank)),
            ("--qk-head-dim", model.qk_head_dim, Some(mla.qk_head_dim)),
            (
                "--qk-pos-emb-head-dim",
                model.qk_pos_emb_head_dim,
                Some(mla.qk_pos_emb_head_dim),
            ),
            ("--v-head-dim", model.v_head_dim, Some(mla.v_head_dim)),
        ] {
            let Some(given) = given else { continue };
            if line == Some(given) {
                continue;
            }
            match line {
                Some(line) => bail!(
                    "{flag} {given} contradicts the --megatron-args launch line, whose latent attention runs {flag} {line} (as the line gives it, or Megatron-LM's default where it does not); drop {flag} or change {flag} in the line"
                ),
                None => bail!(
                    "{flag} {given} contradicts the --megatron-args launch line, whose latent attention has no query down-projection (the line gives no {flag}, Megatron-LM's default); drop {flag} or add {flag} {given} to the line"
                ),
            }
        }
    }
    if let Some(given) = &model.moe_layer_freq
        && let Some(moe) = moe
        && let Ok((dense, every, _)) = crate::model::parse_moe_layer_freq(given)
        && (dense, every) != (moe.first_dense_layers, moe.layer_freq)
    {
        bail!(
            "--moe-layer-freq {given} contradicts the --megatron-args launch line, whose experts are on every {} layer(s) after {} dense ones (its --moe-layer-freq, or Megatron-LM's default 1); drop --moe-layer-freq or change it in the line",
            moe.layer_freq,
            moe.first_dense_layers
        );
    }
    Ok(())
}

/// `--dp-replicas` beside a launch line: the plan is the line's, so the flag was dropped without a
/// word; the line's `--num-distributed-optimizer-instances` (default 1) is taken, and a different
/// count is refused.
pub(super) fn check_megatron_dp_replicas(
    launch: &emit::MegatronLaunch,
    given: Option<u32>,
) -> Result<()> {
    if let Some(given) = given
        && given != launch.dp_replicas
    {
        bail!(
            "--dp-replicas {given} contradicts the --megatron-args launch line, which runs {} copies of the sharded states (--num-distributed-optimizer-instances {}, 1 where the line gives none); drop --dp-replicas or set --num-distributed-optimizer-instances {given} in the line",
            launch.dp_replicas,
            launch.dp_replicas
        );
    }
    Ok(())
}

/// The tokenizer a launch line names among the arguments tpsim skips (`--tokenizer-type T`,
/// `--tokenizer-model M`, also written `--flag=value`), as (flag, value) pairs.
fn tokenizer_words(ignored: &[String]) -> Vec<(&'static str, &str)> {
    ["--tokenizer-type", "--tokenizer-model"]
        .into_iter()
        .filter_map(|flag| {
            ignored.iter().enumerate().find_map(|(i, token)| {
                if let Some(value) = token
                    .strip_prefix(flag)
                    .and_then(|rest| rest.strip_prefix('='))
                {
                    return Some((flag, value));
                }
                (token == flag).then(|| {
                    (
                        flag,
                        ignored
                            .get(i + 1)
                            .map(String::as_str)
                            .filter(|v| !v.starts_with("--"))
                            .unwrap_or(""),
                    )
                })
            })
        })
        .collect()
}

/// A launch line's optimizer that `--framework` (typed beside it) does not run, refused in the
/// line's words: the scenario's check would name `--optimizer-states`, a tpsim flag the user
/// never typed. Muon (`--optimizer muon`/`dist_muon`) and the precision-aware optimizer
/// (`--use-precision-aware-optimizer`) are priced for Megatron-Core only
/// (`OptimizerStates::unsupported_by`): Megatron-DeepSpeed's `--optimizer` takes adam and sgd
/// (microsoft/Megatron-DeepSpeed@f4157be megatron/arguments.py), as the 2021 Megatron-LM's did.
pub(super) fn check_launch_optimizer_framework(
    states: crate::training::OptimizerStates,
    line: &str,
    framework: crate::training::TrainingFramework,
) -> Result<()> {
    use crate::training::OptimizerStates;
    if states.unsupported_by(framework).is_none() {
        return Ok(());
    }
    let framework_name = framework.as_str();
    let owner = match framework {
        crate::training::TrainingFramework::Deepspeed => "Megatron-DeepSpeed",
        _ => "the 2021 Megatron-LM",
    };
    if states == OptimizerStates::Muon {
        // The name as typed: argparse takes `--optimizer dist_muon` and `--optimizer=dist_muon`.
        let name = if line
            .split(|c: char| c.is_whitespace() || c == '=')
            .any(|t| t.trim_matches(['"', '\'']) == "dist_muon")
        {
            "dist_muon"
        } else {
            "muon"
        };
        bail!(
            "--megatron-args: the line's --optimizer {name} under --framework {framework_name}: tpsim prices Muon for Megatron-Core only ({owner}'s --optimizer takes adam and sgd); drop --framework {framework_name} to price the line as Megatron-Core runs it, or use --optimizer adam on the line"
        );
    }
    bail!(
        "--megatron-args: the line's --use-precision-aware-optimizer under --framework {framework_name} asks for {} states, {}; tpsim prices them for Megatron-Core only ({owner} has no such flag); drop --framework {framework_name} to price the line as Megatron-Core runs it, or drop --use-precision-aware-optimizer and its dtype flags from the line",
        states.as_str(),
        states.describe()
    );
}

/// A training flag given next to `--megatron-args` must not contradict the launch line: the flag
/// would silently win over what the line says.
pub(super) fn check_megatron_training(
    launch: &emit::MegatronLaunch,
    training: &TrainingArgs,
) -> Result<()> {
    if let (Some(kernel), Some(flag)) = (launch.attention, training.attention) {
        let given = match flag {
            AttentionArg::Flash => AttentionKernel::Flash,
            AttentionArg::Unfused => AttentionKernel::Unfused,
        };
        if given != kernel {
            bail!(
                "--attention {} contradicts the --megatron-args launch line, whose attention backend is {}; drop --attention or change the line",
                if given == AttentionKernel::Flash {
                    "flash"
                } else {
                    "unfused"
                },
                if kernel == AttentionKernel::Flash {
                    "flash"
                } else {
                    "unfused"
                }
            );
        }
    }
    // The batch and the sequence length: a different value beside the line would override it as
    // silently as --tp or --layers would (which clap refuses beside --megatron-args); the same
    // value, or one the line leaves to Megatron's default, is taken.
    for (flag, given, line_flag, line) in [
        (
            "--seq-len",
            training.seq_len,
            "--seq-length",
            Some(launch.seq_len),
        ),
        (
            "--global-batch",
            training.global_batch,
            "--global-batch-size",
            launch.global_batch,
        ),
    ] {
        if let (Some(given), Some(line)) = (given, line)
            && given != line
        {
            bail!(
                "{flag} {given} contradicts the --megatron-args launch line, which sets {line_flag} {line}; drop {flag} or change {line_flag} in the line"
            );
        }
    }
    // The context-parallel exchange, likewise: `--cp-exchange kv-ring` beside a line's
    // `--cp-comm-type a2a` priced the p2p ring without a word. A line without one leaves it to the
    // flag (as the framework over a plan file does).
    if let (Some(given), Some(line)) = (training.cp_exchange, launch.cp_exchange)
        && given.exchange() != line
    {
        bail!(
            "--cp-exchange {} contradicts the --megatron-args launch line, which sets --cp-comm-type {} ({}); drop --cp-exchange or change --cp-comm-type in the line",
            given.exchange().as_str(),
            line.megatron_cp_comm_type().unwrap_or("p2p"),
            line.as_str()
        );
    }
    // The expert capacity factor, likewise: a flag beside a line that sets another one would win
    // silently; beside a line without one (dropless, Megatron-LM's default) it is taken.
    if let (Some(given), Some(line)) =
        (training.moe_capacity_factor, launch.experts.capacity_factor)
        && given != line
    {
        bail!(
            "--moe-capacity-factor {given} contradicts the --megatron-args launch line, which sets --moe-expert-capacity-factor {line}; drop --moe-capacity-factor or change the line"
        );
    }
    // The offloaded layers, likewise: a flag beside a line that offloads another count would win
    // silently; beside a line that offloads none (Megatron-LM's default) it is taken.
    if let Some(given) = training.cpu_offload_layers
        && launch.cpu_offload_layers > 0
        && given != launch.cpu_offload_layers
    {
        bail!(
            "--cpu-offload-layers {given} contradicts the --megatron-args launch line, which sets --cpu-offloading-num-layers {}; drop --cpu-offload-layers or change the line",
            launch.cpu_offload_layers
        );
    }
    // The recompute modules, likewise: a line that lists other ones (under selective
    // granularity) contradicts the flag; a line without any takes it.
    if let (Some(words), Some(line)) = (&training.recompute_modules, launch.recompute_modules)
        && crate::training::RecomputeModules::parse(words).is_ok_and(|given| given != line)
    {
        bail!(
            "--recompute-modules {} contradicts the --megatron-args launch line, which sets --recompute-modules {}; drop --recompute-modules or change the line",
            words.join(" "),
            line.megatron_words()
        );
    }
    // The dispatcher, likewise (the line's --moe-token-dispatcher-type and flex backend).
    if let Some(given) = training.moe_dispatcher.map(|arg| arg.dispatcher())
        && launch.experts.moe.is_some()
        && given != launch.experts.dispatcher
    {
        bail!(
            "--moe-dispatcher {} contradicts the --megatron-args launch line, whose dispatcher is {}; drop --moe-dispatcher or change --moe-token-dispatcher-type in the line",
            given.as_str(),
            launch.experts.dispatcher.as_str()
        );
    }
    let flag = match training.grad_dtype {
        Some(GradDtypeArg::Bf16) => Some(GradDtype::Bf16),
        Some(GradDtypeArg::Fp32) => Some(GradDtype::Fp32),
        None => None,
    };
    if let Some(flag) = flag
        && flag != launch.grad_dtype
    {
        bail!(
            "--grad-dtype {} contradicts the --megatron-args launch line, whose gradients are {} (Megatron-LM with --bf16 reduces in fp32 unless --grad-reduce-in-bf16 is given); drop --grad-dtype or change the line",
            grad_name(flag),
            grad_name(launch.grad_dtype)
        );
    }
    if let Some(given) = training.optimizer_states.map(|arg| arg.states())
        && given != launch.optimizer_states
    {
        bail!(
            "--optimizer-states {} contradicts the --megatron-args launch line, whose optimizer keeps {} ({}); drop --optimizer-states or change the line",
            given.as_str(),
            launch.optimizer_states.as_str(),
            launch.optimizer_states.describe()
        );
    }
    check_megatron_bf16_layers(launch, training)?;
    check_megatron_precision_and_overlap(
        launch.precision,
        launch.overlap,
        training,
        "the --megatron-args launch line",
    )
}

/// The layers a launch line keeps in bf16 (`--first-last-layers-bf16` and its counts), against the
/// same flags beside it: a count beside a line that keeps another one won silently (and the switch
/// alone reset the line's counts to 1 and 1); the same counts, or the switch alone, are the line's
/// (`eval` then gives them as the flags, [`bf16_layers_as_flags`]). A line Megatron-Core refuses
/// (bf16 layers under delayed FP8 scaling, Megatron-LM's default recipe) is refused in its words.
fn check_megatron_bf16_layers(
    launch: &emit::MegatronLaunch,
    training: &TrainingArgs,
) -> Result<()> {
    let line = launch.bf16_layers;
    if line.is_none() {
        return Ok(());
    }
    for (end, given, kept) in [
        ("start", training.num_layers_at_start_in_bf16, line.at_start),
        ("end", training.num_layers_at_end_in_bf16, line.at_end),
    ] {
        if let Some(given) = given
            && given != kept
        {
            bail!(
                "--num-layers-at-{end}-in-bf16 {given} contradicts the --megatron-args launch line, whose --first-last-layers-bf16 keeps {kept} layer(s) at the {end} in bf16 (--num-layers-at-{end}-in-bf16 {kept}; 1 where the line gives no count); drop --num-layers-at-{end}-in-bf16 or change the line"
            );
        }
    }
    if launch.precision.precision == Precision::Fp8
        && launch.precision.fp8_scaling == Some(crate::training::Fp8Scaling::Delayed)
    {
        bail!(
            "--megatron-args: --first-last-layers-bf16 with delayed FP8 scaling (--fp8-recipe delayed, Megatron-LM's default where the line gives no --fp8-recipe): Megatron-Core refuses bf16 layers under delayed scaling (transformer_config.py: \"Delayed scaling does not support first / last layer in BF16\"); add --fp8-recipe tensorwise to the line, or drop --first-last-layers-bf16"
        );
    }
    Ok(())
}

/// The layers a launch line keeps in bf16, given as tpsim's flags (checked against those beside
/// the line by [`check_megatron_bf16_layers`]): their rules then speak of the line's own flags
/// (`--num-layers-at-start-in-bf16 40: model ... has 32 transformer layers`), not of a plan file.
pub(super) fn bf16_layers_as_flags(launch: &emit::MegatronLaunch, training: &mut TrainingArgs) {
    let line = launch.bf16_layers;
    if line.is_none() {
        return;
    }
    training.first_last_layers_bf16 = true;
    training
        .num_layers_at_start_in_bf16
        .get_or_insert(line.at_start);
    training
        .num_layers_at_end_in_bf16
        .get_or_insert(line.at_end);
}

/// The precision and overlap a launch line says, against tpsim's own flags and the framework
/// tpsim models: a contradiction is refused, never silently resolved.
fn check_megatron_precision_and_overlap(
    precision: emit::MegatronPrecision,
    overlap: Overlap,
    training: &TrainingArgs,
    source: &str,
) -> Result<()> {
    let framework = framework_of_args(training);
    if let (Some(given), Some(line)) = (training.fp8_scaling, precision.fp8_scaling) {
        let given = given.scaling();
        if given != line {
            bail!(
                "--fp8-scaling {} contradicts {source}, whose --fp8-recipe is {} ({} scaling); drop --fp8-scaling or change the line",
                given.as_str(),
                if line == crate::training::Fp8Scaling::Current {
                    "tensorwise"
                } else {
                    "delayed"
                },
                line.as_str()
            );
        }
    }
    if training.precision.is_some() {
        let given = precision_of_args(training);
        if given != precision.precision {
            bail!(
                "--precision {} contradicts {source}, whose precision is {} (--fp8-format/--fp8-recipe, --fp4-format); drop --precision or change the line",
                given.as_str(),
                precision.precision.as_str()
            );
        }
    }
    // The parameter all-gather in low precision is Megatron-Core's (`--fp8-param-gather`): a line
    // that sets it under another framework is refused; one without it is evaluated without it.
    if precision.precision != Precision::Bf16
        && precision.param_gather
        && !framework.fp8_param_gather()
    {
        let gather_flag = if precision.precision == Precision::Nvfp4 {
            "--fp4-param-gather"
        } else {
            "--fp8-param-gather"
        };
        bail!(
            "{gather_flag} in {source} keeps the {} weights as the parameters, which tpsim models for --framework megatron-core only (it is --framework {}); pass --framework megatron-core or drop {gather_flag}",
            precision.precision.as_str(),
            framework.as_str()
        );
    }
    for (flag, given, line) in [
        (
            "--tp-comm-overlap",
            training.tp_comm_overlap,
            overlap.tp_comm,
        ),
        (
            "--overlap-grad-reduce",
            training.overlap_grad_reduce,
            overlap.grad_reduce,
        ),
        (
            "--overlap-param-gather",
            training.overlap_param_gather,
            overlap.param_gather,
        ),
        ("--overlap-p2p-comm", training.overlap_p2p_comm, overlap.p2p),
        (
            "--overlap-moe-expert-parallel-comm",
            training.overlap_moe_expert_parallel_comm,
            overlap.moe_a2a,
        ),
    ] {
        if let Some(given) = given
            && given != line
        {
            bail!(
                "{flag} {given} contradicts {source}, which {} it (Megatron-LM overlaps only what its arguments turn on, and p2p unless --no-overlap-p2p-communication); drop {flag} or change the line",
                if line { "turns on" } else { "leaves off" }
            );
        }
    }
    Ok(())
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn grad_name(dtype: GradDtype) -> &'static str {
    match dtype {
        GradDtype::Bf16 => "bf16",
        GradDtype::Fp32 => "fp32",
    }
}

/// How a launch line read as a plan file ([`megatron_plan_file`]) is named where a plan file's
/// path would be: the flag, so that a key the line lacks is asked of the flags, not of a file.
pub(super) const LAUNCH_LINE_ORIGIN: &str = "--megatron-args";

/// The scenario a Megatron launch line describes, as a plan file (the plan itself is rebuilt once
/// the cluster, hence dp, is known). torchrun's `--nnodes`/`--nproc_per_node` give the cluster
/// unless `--nodes`/`--gpus-per-node` are given.
pub(super) fn megatron_plan_file(launch: &emit::MegatronLaunch) -> Result<PlanFile> {
    // A shape the line gives that is no model is refused in the line's words.
    let model = launch
        .model(DEFAULT_VOCAB)
        .map_err(|err| anyhow!(in_megatron_words(&err.to_string())))?;
    Ok(PlanFile {
        model: Some(ModelRef::Inline(Box::new(model_file_of(&model, None)))),
        params: None,
        gpu: None,
        nodes: launch.nodes,
        gpus_per_node: launch.gpus_per_node,
        max_memory_gib: None,
        seq_len: Some(launch.seq_len),
        global_batch: launch.global_batch,
        tokens: None,
        price_per_gpu_hour: None,
        local_batch: None,
        cp_exchange: launch.cp_exchange,
        fp8_scaling: launch.precision.fp8_scaling,
        bf16_layers: Some(launch.bf16_layers).filter(|b| !b.is_none()),
        // Megatron-LM runs 1F1B (interleaved with virtual stages) only.
        pp_schedule: None,
        cpu_offload_layers: (launch.cpu_offload_layers > 0).then_some(launch.cpu_offload_layers),
        recompute_modules: launch.recompute_modules,
        grad_dtype: Some(launch.grad_dtype),
        gradient_accumulation_fusion: (!launch.gradient_accumulation_fusion).then_some(false),
        // Said only where it departs from what Megatron-LM's arguments give this position type.
        rope_fusion: (launch.rope_fusion
            != crate::training::TrainingFramework::MegatronCore
                .fuses_rope_by_default(launch.position_embedding))
        .then_some(launch.rope_fusion),
        optimizer_states: Some(launch.optimizer_states),
        attention: launch.attention,
        framework: None,
        overlap: None,
        moe_imbalance: None,
        moe_capacity_factor: launch.experts.capacity_factor,
        moe_dispatch: Some(crate::training::MoeDispatch {
            dispatcher: launch.experts.dispatcher,
            routing: crate::training::MoeRouting::Random,
            router_padding: launch.experts.router_padding,
        })
        .filter(|d| *d != crate::training::MoeDispatch::default()),
        fp8_param_gather: None,
        kernel_fusion: None,
        plan: PlanRequest {
            tp: launch.tp,
            pp: launch.pp,
            dp: 1,
            vpp: 1,
            micro_batch: launch.micro_batch,
            sequence_parallel: launch.sequence_parallel,
            recompute: launch.recompute,
            zero: launch.zero,
            allow_uneven_pp: launch.split.any(),
            allow_cross_node_tp: false,
            cp: launch.cp,
            ep: launch.experts.ep,
            etp: launch.experts.etp,
            precision: launch.precision.precision,
            dp_replicas: launch.dp_replicas,
            reshard_after_forward: launch.reshard_after_forward,
            ..PlanRequest::default()
        },
        given: crate::specs::PlanKeysGiven::ALL,
    })
}

/// What the launch line decides once the cluster is known: Megatron's default global batch
/// (micro-batch x dp) when the line has none, and notes where a flag overrides the torchrun line.
pub(super) fn apply_megatron_launch(
    launch: &emit::MegatronLaunch,
    cluster_args: &ClusterArgs,
    training_args: &TrainingArgs,
    scenario: &mut Scenario,
) -> Result<LaunchBatch> {
    for (flag, given, script, what) in [
        ("--nodes", cluster_args.nodes, launch.nodes, "--nnodes"),
        (
            "--gpus-per-node",
            cluster_args.gpus_per_node,
            launch.gpus_per_node,
            "--nproc_per_node",
        ),
    ] {
        if let (Some(given), Some(script)) = (given, script)
            && given != script
        {
            defer_note(if flag == "--nodes" && launch.nodes_by_default {
                format!(
                    "note: --megatron-args: {flag} {given} overrides torchrun's default {what} {script} (the launch line gives no {what})"
                )
            } else {
                format!(
                    "note: --megatron-args: {flag} {given} overrides the launch line's torchrun {what} {script}"
                )
            });
        }
    }
    if launch.nodes_by_default && cluster_args.nodes.is_none() {
        defer_note(
            "note: --megatron-args: the launch line's torchrun gives no --nnodes, so tpsim prices torchrun's default, 1 node (torch/distributed/run.py: --nnodes defaults to 1:1); give --nodes N (or --nnodes N on the line) for a run over N nodes".to_string(),
        );
    }
    // Megatron-LM overlaps what the line says (its defaults: p2p only), whatever the framework's
    // defaults are; check_megatron_training refused tpsim flags that say otherwise.
    let defaults = scenario.training.framework.default_overlap();
    if launch.overlap != scenario.training.overlap && scenario.training.overlap == defaults {
        defer_note(format!(
            "note: --megatron-args: the line's overlap switches are used (tp comm {}, grad reduce {}, param gather {}, p2p {}{}), not --framework {}'s defaults; Megatron-LM overlaps only what {} turn on",
            on_off(launch.overlap.tp_comm),
            on_off(launch.overlap.grad_reduce),
            on_off(launch.overlap.param_gather),
            on_off(launch.overlap.p2p),
            if launch.experts.moe.is_some() {
                format!(", MoE all-to-all {}", on_off(launch.overlap.moe_a2a))
            } else {
                String::new()
            },
            scenario.training.framework.as_str(),
            if launch.experts.moe.is_some() {
                "--tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather and --overlap-moe-expert-parallel-comm"
            } else {
                "--tp-comm-overlap, --overlap-grad-reduce and --overlap-param-gather"
            }
        ));
    }
    scenario.training.overlap = launch.overlap;
    scenario.training.delay_wgrad_compute = launch.delay_wgrad_compute;
    // A low-precision line says whether its quantized weights are the parameters; in bf16 the
    // setting has nothing to act on and keeps the framework's default.
    if launch.precision.precision != Precision::Bf16 {
        scenario.training.fp8_param_gather = launch.precision.param_gather;
    }
    if let Some(scaling) = launch.precision.fp8_scaling {
        super::scenario::check_framework_runs_fp8_scaling(
            scenario.training.framework,
            scaling,
            "the --megatron-args line's --fp8-recipe",
        )?;
        scenario.training.fp8_scaling = scaling;
    }
    if launch.global_batch.is_none()
        && training_args.global_batch.is_none()
        && let Some(batch) = launch.global_batch_on(scenario.cluster.total_gpus())
        && batch > 0
    {
        defer_note(format!(
            "note: --megatron-args: no --global-batch-size, so Megatron-LM's default applies: micro-batch {} x dp {} = {} per step",
            launch.micro_batch,
            batch / launch.micro_batch,
            crate::units::count_words(batch, "sequence", "sequences")
        ));
        scenario.training.global_batch = batch;
        return Ok(LaunchBatch::MegatronDefault);
    }
    Ok(LaunchBatch::Unchanged)
}

/// Whether [`apply_megatron_launch`] set the global batch to Megatron-LM's default (its own note
/// says so, so tpsim's default-batch note would name a batch the run does not use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LaunchBatch {
    MegatronDefault,
    Unchanged,
}

/// tpsim's plan flags and the Megatron-LM flags (or, for dp, the quantity) a launch line sets them
/// with.
const MEGATRON_NAMES: [(&str, &str); 19] = [
    ("--tp", "--tensor-model-parallel-size"),
    ("--pp", "--pipeline-model-parallel-size"),
    ("--cp", "--context-parallel-size"),
    ("--ep", "--expert-model-parallel-size"),
    ("--etp", "--expert-tensor-parallel-size"),
    ("--vpp", "--num-virtual-stages-per-pipeline-rank"),
    ("--micro-batch", "--micro-batch-size"),
    ("--global-batch", "--global-batch-size"),
    ("--seq-len", "--seq-length"),
    ("--layers", "--num-layers"),
    ("--dp", "data-parallel size"),
    ("--dp-replicas", "--num-distributed-optimizer-instances"),
    ("--cpu-offload-layers", "--cpu-offloading-num-layers"),
    // The shape flags a model check names.
    ("--hidden", "--hidden-size"),
    ("--heads", "--num-attention-heads"),
    ("--kv-heads", "--num-query-groups"),
    ("--head-dim", "--kv-channels"),
    ("--ffn-hidden", "--ffn-hidden-size"),
    ("--vocab", "--vocab-size"),
];

/// A plan (or model shape) error about a pasted launch line, in the line's words: each of tpsim's
/// plan and shape flags the message names becomes the Megatron-LM flag that sets it (`--cp 2` → `--context-parallel-size
/// 2`), so the fix points at what the user wrote.
pub(super) fn in_megatron_words(message: &str) -> String {
    // A launch line turns a switch off by leaving it out.
    let message = precision_in_megatron_words(message)
        .replace(
            "or --sequence-parallel false",
            "or drop --sequence-parallel",
        )
        // A launch line has no ZeRO stage flag: the distributed optimizer is ZeRO-1.
        .replace(
            "with --zero 0: without ZeRO",
            "without --use-distributed-optimizer (or Megatron-FSDP):",
        )
        .replace(
            "give --zero 1, 2 or 3, or drop --dp-replicas",
            "add --use-distributed-optimizer, or drop --dp-replicas",
        )
        // Offloading beside recompute (`plan::CpuOffloadWithRecompute`): a launch line sets the
        // recompute with its granularity flags, and turns it off by leaving them out.
        .replace(
            "with --recompute selective: Megatron-Core offloads",
            "with selective recompute (--recompute-granularity selective, or --recompute-activations): Megatron-Core offloads",
        )
        .replace(
            "with --recompute full: Megatron-Core offloads",
            "with full recompute (--recompute-granularity full): Megatron-Core offloads",
        )
        .replace(
            "give --recompute none, or drop --cpu-offload-layers",
            "drop the recompute arguments, or drop --cpu-offload-layers",
        );
    // tpsim's window counts the query itself; Megatron-LM's `--window-size "(LEFT,0)"` the keys
    // before it (`crate::emit::window_size_keys_before`).
    let message = window_in_megatron_words(&message);
    let renamed: Vec<String> = message
        .split(' ')
        .map(|word| {
            let start = word.len() - word.trim_start_matches('(').len();
            let end = word.trim_end_matches([',', ';', ':', ')', '.']).len();
            if start >= end {
                return word.to_string();
            }
            let core = &word[start..end];
            match MEGATRON_NAMES.iter().find(|(ours, _)| *ours == core) {
                Some((_, theirs)) => format!("{}{theirs}{}", &word[..start], &word[end..]),
                None => word.to_string(),
            }
        })
        .collect();
    format!("--megatron-args: {}", renamed.join(" "))
}

/// A plan error about a pasted launch line in the line's words ([`in_megatron_words`]), except
/// that a hybrid line's virtual stages come from the '|' segments of its pattern (arguments.py
/// derives them, and refuses `--num-virtual-stages-per-pipeline-rank` beside a pattern), so an
/// interleaving refusal names the segments and the cut to give instead.
pub(super) fn plan_error_in_launch_words(
    launch: &emit::MegatronLaunch,
    err: &crate::plan::PlanError,
) -> String {
    use crate::plan::PlanError;
    let message = err.to_string();
    let Some(segments) = &launch.hybrid_segments else {
        return in_megatron_words(&message);
    };
    let chunks = segments.split('|').count();
    let pp = launch.pp;
    let given = format!(
        "--hybrid-layer-pattern's {chunks} '|' segments make {} virtual stages on each of the {pp} pipeline ranks (Megatron-LM derives them from the segments)",
        chunks / pp.max(1) as usize
    );
    let cut = |valid: &str| {
        format!(
            "cut the pattern into {pp} x V segments for V in {valid}, as `tpsim eval ... --pp {pp} --vpp V --emit megatron` writes it"
        )
    };
    match err {
        PlanError::VppLayers {
            vpp,
            per_stage,
            valid,
            ..
        } => format!(
            "--megatron-args: {given}, but a stage of {per_stage} layers cannot be cut into {vpp} chunks of at least one layer; {}",
            cut(valid)
        ),
        PlanError::VppUneven { valid, .. } => format!(
            "--megatron-args: {given}, but tpsim interleaves this uneven split only where the layers with the embedding and loss counted as one each split evenly into the chunks, or fill them front to back; {}",
            cut(valid)
        ),
        _ => {
            let vpp = format!("--vpp {} ", chunks / pp.max(1) as usize);
            match message.strip_prefix(vpp.trim_end()) {
                Some(rest) => in_megatron_words(&format!("{given}{rest}")),
                None => in_megatron_words(&message),
            }
        }
    }
}

/// `--attention-window TOKENS` said as the launch line's `--window-size "(TOKENS-1,0)"`, and a
/// bare `--attention-window` (as in "drop --attention-window") as `--window-size`.
fn window_in_megatron_words(message: &str) -> String {
    let flag = "--attention-window";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(flag) {
        out.push_str(&rest[..at]);
        let after = &rest[at + flag.len()..];
        let value = after.strip_prefix(' ').map(|a| {
            let digits = a.len() - a.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            &a[..digits]
        });
        match value.and_then(|digits| Some((digits.len(), digits.parse::<u32>().ok()?))) {
            Some((len, tokens)) => {
                out.push_str(&format!(
                    "--window-size \"({},0)\"",
                    tokens.saturating_sub(1)
                ));
                rest = &after[1 + len..];
            }
            None => {
                out.push_str("--window-size");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The switch of a launch line that selected a precision, whatever value it gave it: FP8 from
/// `--fp8-format`, MXFP8 from `--fp8-recipe mxfp8`, NVFP4 from `--fp4-format` (Megatron-LM's
/// arguments, as `emit::megatron_reader` reads them).
fn switch_that_chose(precision: Precision) -> &'static str {
    match precision {
        Precision::Bf16 => "--bf16",
        Precision::Fp8 => "--fp8-format",
        Precision::Mxfp8 => "--fp8-recipe mxfp8",
        Precision::Nvfp4 => "--fp4-format",
    }
}

/// The switches that train at `precision`, as `--emit megatron` writes them
/// (`emit::megatron_precision_args`; FP8 with current scaling).
fn switches_for(precision: Precision) -> String {
    let args =
        crate::emit::megatron_precision_args(precision, crate::training::Fp8Scaling::Current);
    match args {
        (None, _) => "--bf16 alone".to_string(),
        (Some((format, value)), Some((recipe, recipe_value))) => {
            format!("--{format} {value} --{recipe} {recipe_value}")
        }
        (Some((format, value)), None) => format!("--{format} {value}"),
    }
}

/// A precision error (`--precision nvfp4: ...; use bf16, fp8`) in the launch line's switches:
/// the one that chose the refused format, and the switches of the formats the GPU has
/// (`--fp4-format: ...; use --bf16 alone, --fp8-format hybrid --fp8-recipe tensorwise`). Other
/// messages pass unchanged.
fn precision_in_megatron_words(message: &str) -> String {
    let of_name = |name: &str| Precision::ALL.into_iter().find(|p| p.as_str() == name);
    let Some(rest) = message.strip_prefix("--precision ") else {
        return message.to_string();
    };
    let Some((name, why)) = rest.split_once(": ") else {
        return message.to_string();
    };
    let Some(refused) = of_name(name) else {
        return message.to_string();
    };
    let why = match why.rsplit_once("; use ") {
        Some((rule, valid)) => {
            let valid: Vec<String> = valid
                .split(", ")
                .map(|v| of_name(v).map_or(v.to_string(), switches_for))
                .collect();
            format!("{rule}; use {}", valid.join(", or "))
        }
        None => why.to_string(),
    };
    format!("{} ({name}): {why}", switch_that_chose(refused))
}

/// The plan a Megatron launch line runs on the scenario's cluster, checked against what
/// Megatron-LM would do with the same line. A line has no switch for a TP group past the NVLink
/// domain (Megatron-LM builds it without a word), so eval's `--allow-cross-node-tp` beside the
/// line is what allows it, as beside any other plan.
pub(super) fn megatron_request(
    launch: &emit::MegatronLaunch,
    scenario: &Scenario,
    allow_cross_node_tp: bool,
) -> Result<PlanRequest> {
    let request = PlanRequest {
        allow_cross_node_tp,
        ..launch
            .request(
                scenario.cluster.total_gpus(),
                scenario.training.global_batch,
            )
            .map_err(|message| anyhow!("--megatron-args: {message}"))?
    };
    // The split and recompute checks need the built plan; a plan that does not build is reported
    // by the caller with tpsim's own message.
    if let Ok(plan) = ParallelPlan::build(
        &request,
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
    ) {
        launch
            .check_plan(&scenario.model, &plan)
            .map_err(|message| anyhow!("--megatron-args: {message}"))?;
        // Megatron-Core refuses block recompute of more layers than a model chunk holds.
        if request.recompute_num_layers > plan.layers_per_chunk() {
            bail!(
                "--megatron-args: --recompute-num-layers {} is more than the {} layers of each model chunk, which Megatron-LM refuses; give 1 to {}",
                request.recompute_num_layers,
                plan.layers_per_chunk(),
                plan.layers_per_chunk()
            );
        }
        return Ok(PlanRequest {
            recompute_num_layers: emit::block_recompute_layers(request.recompute_num_layers, &plan),
            ..request
        });
    }
    Ok(request)
}

/// Megatron-LM's MoE and MLA switches pasted on `eval` (what `--emit megatron` writes): they must
/// describe the model and plan tpsim evaluates, never be dropped silently.
fn check_pasted_experts(args: &EvalArgs, model: &Model, plan: &ParallelPlan) -> Result<()> {
    if args.multi_latent_attention && model.mla.is_none() {
        bail!(
            "--multi-latent-attention without --kv-lora-rank: tpsim needs the latent width; add --kv-lora-rank N (DeepSeek-V3: 512)"
        );
    }
    let dispatcher = args.moe_token_dispatcher_type.as_deref();
    if model.moe.is_none() && (args.moe_grouped_gemm || dispatcher.is_some()) {
        bail!(
            "--moe-grouped-gemm / --moe-token-dispatcher-type on a dense model: add --num-experts N, or drop them"
        );
    }
    if let Some(backend) = &args.moe_flex_dispatcher_backend {
        bail!(
            "--moe-flex-dispatcher-backend {backend} pasted on eval: give tpsim's --moe-dispatcher deepep instead of the flex dispatcher's flags, or read the whole line with --megatron-args"
        );
    }
    if dispatcher == Some("alltoall")
        && plan.ep > 1
        && let Some(given) = args.training.moe_dispatcher.map(|arg| arg.dispatcher())
        && given != crate::training::MoeDispatcher::Alltoall
    {
        bail!(
            "--moe-dispatcher {} contradicts the pasted --moe-token-dispatcher-type alltoall; drop one of them",
            given.as_str()
        );
    }
    match dispatcher {
        None | Some("alltoall") => Ok(()),
        Some(v) if !["allgather", "flex"].contains(&v) => bail!(
            "--moe-token-dispatcher-type {v} is not a Megatron-LM dispatcher; use alltoall (or allgather, flex)"
        ),
        Some(_) if plan.ep == 1 => Ok(()),
        Some("flex") => bail!(
            "--moe-token-dispatcher-type flex pasted on eval: give tpsim's --moe-dispatcher deepep instead (the flex dispatcher with its DeepEP backend), or read the whole line with --megatron-args"
        ),
        Some(v) => bail!(
            "--moe-token-dispatcher-type {v}: tpsim models the all-to-all token dispatch over the expert-parallel group; use --moe-token-dispatcher-type alltoall"
        ),
    }
}

/// Megatron-LM's first/last stage layer counts pasted on `eval` hold at least one layer each
/// (arguments.py reads them as the layers of an end stage); 0 is refused by name before the
/// split is checked, whose message would be about the other stages.
pub(super) fn check_pasted_stage_layers(args: &EvalArgs) -> Result<()> {
    for (flag, given) in [
        (
            "--decoder-first-pipeline-num-layers",
            args.decoder_first_pipeline_num_layers,
        ),
        (
            "--decoder-last-pipeline-num-layers",
            args.decoder_last_pipeline_num_layers,
        ),
    ] {
        if given == Some(0) {
            bail!(
                "{flag} 0 is not allowed: an end stage holds at least 1 layer; give its layer count (e.g. {flag} 4), or drop it for an even split"
            );
        }
    }
    Ok(())
}

/// Megatron-LM's pipeline-split arguments pasted on `eval`, the layout read as the
/// `--megatron-args` reader reads it.
pub(super) fn pasted_split(args: &EvalArgs) -> Result<emit::SplitArgs> {
    let layout = match args.pipeline_model_parallel_layout.as_deref() {
        Some(text) => Some(emit::ChunkLayout::parse(text).map_err(|message| anyhow!(message))?),
        None => None,
    };
    Ok(emit::SplitArgs {
        embedding_counted: args.account_for_embedding_in_pipeline_split,
        loss_counted: args.account_for_loss_in_pipeline_split,
        first: args.decoder_first_pipeline_num_layers,
        last: args.decoder_last_pipeline_num_layers,
        layout,
    })
}

/// The virtual stages a pasted `--pipeline-model-parallel-layout` sets (its chunks over pp, as
/// Megatron-LM's arguments.py derives them), checked against `--vpp` and the MTP layers
/// (Megatron-Core `validate_layer_layout`); `None` without a layout.
pub(super) fn layout_vpp(
    split: &emit::SplitArgs,
    pp: u32,
    vpp: Option<u32>,
    mtp_layers: u32,
) -> Result<Option<u32>> {
    let Some(layout) = split.layout else {
        return Ok(None);
    };
    if pp < 2 {
        bail!(
            "--pipeline-model-parallel-layout ({} chunks) needs --pp 2 or more; give --pp, or drop the layout",
            layout.chunks
        );
    }
    if !layout.chunks.is_multiple_of(pp) {
        bail!(
            "--pipeline-model-parallel-layout has {} chunks, which is not a multiple of --pp {pp}; give pp x virtual stages entries",
            layout.chunks
        );
    }
    let from_layout = layout.chunks / pp;
    if let Some(v) = vpp
        && v != from_layout
    {
        bail!(
            "--vpp {v} contradicts --pipeline-model-parallel-layout, whose {} chunks on --pp {pp} are {from_layout} virtual stages; drop --vpp (the layout sets it)",
            layout.chunks
        );
    }
    if layout.mtp_layers != mtp_layers {
        bail!(
            "--pipeline-model-parallel-layout places {} MTP layer(s) (m) and the model has {mtp_layers}; Megatron-Core requires them to agree, so give --mtp-layers {} or change the layout",
            layout.mtp_layers,
            layout.mtp_layers
        );
    }
    Ok(Some(from_layout))
}

/// The ZeRO stage of Megatron-LM's data-parallel arguments pasted on `eval`. Torch FSDP2 is
/// refused as `--megatron-args` refuses it where Megatron-LM's `validate_args` asserts what the
/// flags leave out: gradient-accumulation fusion off, and an output layer of its own.
pub(super) fn pasted_zero(args: &EvalArgs, pp: u32, model: &crate::model::Model) -> Result<u8> {
    let zero = emit::megatron_zero(
        args.use_distributed_optimizer,
        args.use_megatron_fsdp,
        args.use_torch_fsdp2,
        args.data_parallel_sharding_strategy.as_deref(),
        pp,
    )?;
    if args.use_torch_fsdp2 && !args.no_gradient_accumulation_fusion {
        bail!(
            "--use-torch-fsdp2 without --no-gradient-accumulation-fusion: Megatron-LM asserts torch FSDP2 runs without gradient-accumulation fusion (arguments.py), which is on unless turned off; add --no-gradient-accumulation-fusion"
        );
    }
    if args.use_torch_fsdp2 && model.tied_embeddings {
        bail!(
            "--use-torch-fsdp2 with model {}, whose input and output embeddings are tied: Megatron-LM asserts --untie-embeddings-and-output-weights with torch FSDP2 (arguments.py); use a model with its own output layer, or --use-megatron-fsdp",
            model.name
        );
    }
    Ok(zero)
}

/// Megatron-LM's precision arguments pasted on `eval` (`--fp8-format`, `--fp8-recipe`,
/// `--fp8-param-gather`, `--fp4-*`), read like the `--megatron-args` reader reads them and checked
/// against the framework tpsim models; `None` when none was given.
pub(super) fn pasted_precision(
    args: &EvalArgs,
    zero: u8,
    training: &Training,
) -> Result<Option<emit::MegatronPrecision>> {
    if args.fp8_format.is_none()
        && args.fp8_recipe.is_none()
        && args.fp4_format.is_none()
        && args.fp4_recipe.is_none()
        && !args.fp8_param_gather
        && !args.fp4_param_gather
    {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let precision = emit::megatron_precision(
        emit::PrecisionArgs {
            fp8_format: args.fp8_format.as_deref(),
            fp8_recipe: args.fp8_recipe.as_deref(),
            fp4_format: args.fp4_format.as_deref(),
            fp4_recipe: args.fp4_recipe.as_deref(),
            fp8_param_gather: args.fp8_param_gather,
            fp4_param_gather: args.fp4_param_gather,
        },
        zero,
        &mut notes,
    )?;
    for note in notes {
        defer_note(format!("note: {note}"));
    }
    check_megatron_precision_and_overlap(
        precision,
        training.overlap,
        &args.training,
        "the pasted Megatron-LM arguments",
    )?;
    Ok(Some(precision))
}

/// Megatron-LM's split and recompute arguments pasted on `eval`, checked on the built plan the
/// way the `--megatron-args` reader checks them: what tpsim cannot model is refused, not ignored.
pub(super) fn check_pasted_megatron(
    args: &EvalArgs,
    model: &Model,
    plan: &ParallelPlan,
) -> Result<()> {
    check_pasted_experts(args, model, plan)?;
    // transformer_config.py: "overlap_moe_expert_parallel_comm must be enabled when enabling
    // delay_wgrad_compute".
    if args.delay_wgrad_compute && args.training.overlap_moe_expert_parallel_comm != Some(true) {
        bail!(
            "--delay-wgrad-compute without --overlap-moe-expert-parallel-comm: Megatron-Core requires the MoE all-to-all overlap with it; add --overlap-moe-expert-parallel-comm or drop --delay-wgrad-compute"
        );
    }
    let split = pasted_split(args)?;
    if split.any() && plan.pp < 2 {
        // Said in the command line's words: the split flags were typed as eval's flags beside
        // --pp, not read from a launch line's --pipeline-model-parallel-size (the reader's
        // SPLIT_NEEDS_PIPELINE says that one).
        let given: Vec<&str> = [
            (
                "--decoder-first-pipeline-num-layers",
                args.decoder_first_pipeline_num_layers.is_some(),
            ),
            (
                "--decoder-last-pipeline-num-layers",
                args.decoder_last_pipeline_num_layers.is_some(),
            ),
            (
                "--account-for-embedding-in-pipeline-split",
                args.account_for_embedding_in_pipeline_split,
            ),
            (
                "--account-for-loss-in-pipeline-split",
                args.account_for_loss_in_pipeline_split,
            ),
            (
                "--pipeline-model-parallel-layout",
                args.pipeline_model_parallel_layout.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, on)| on.then_some(flag))
        .collect();
        let pp = match (args.pp, &args.plan) {
            (Some(pp), _) => format!("--pp {pp}"),
            (None, Some(path)) => format!("pp: {} in {path}", plan.pp),
            (None, None) => format!("--pp not given ({})", plan.pp),
        };
        bail!(
            "{} {} the layers between pipeline stages, but {pp} is a single stage; give --pp 2 or more (alias --pipeline-model-parallel-size), or drop {}",
            given.join(" and "),
            if given.len() == 1 { "splits" } else { "split" },
            if given.len() == 1 { "it" } else { "them" }
        );
    }
    if split.any() {
        emit::check_split(&split, model.layers, plan).map_err(|message| anyhow!(message))?;
    }
    // `--recompute-num-layers N` without a method is tpsim's block pin (`plan` reads it so); a
    // Megatron-LM launch line always names its method.
    let method = args
        .recompute_method
        .as_deref()
        .or(args.recompute_num_layers.map(|_| "block"));
    let Some(method) = method else {
        return Ok(());
    };
    let layers = args.recompute_num_layers.unwrap_or(1);
    let full = match method {
        "uniform" => emit::FullRecompute::Uniform(layers),
        "block" => emit::FullRecompute::Block(layers),
        other => bail!(
            "--recompute-method {other} is not a Megatron-LM recompute method; use uniform or block"
        ),
    };
    match plan.recompute {
        Recompute::Full => {}
        // arguments.py: "recompute method is not yet supported for selective recomputing
        // granularity".
        Recompute::Selective => bail!(
            "--recompute-method {method} with selective recompute: Megatron-LM refuses a recompute method for selective granularity; drop --recompute-method"
        ),
        // Megatron-Core reads the method only under full granularity, as the reader does.
        Recompute::None => {
            defer_note(format!(
                "note: --recompute-method {method} is ignored without --recompute-granularity full (Megatron-Core recomputes nothing then)"
            ));
            return Ok(());
        }
    }
    emit::check_full_recompute(full, plan).map_err(|message| anyhow!(message))
}
