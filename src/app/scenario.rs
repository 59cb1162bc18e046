//! From flags (and a plan file) to one validated scenario: model, cluster and training settings.
//! Every command that evaluates plans starts here.

use crate::cli::{Fp8ScalingArg, FrameworkArg, PinArgs, PrecisionArg, RecomputeArg};
use crate::model::{PositionEmbedding, ShapeOverrides};
use crate::plan::{PlanError, Precision, Recompute};
use crate::planner::Pins;
use crate::training::{
    CpExchange, Fp8Scaling, KernelFusion, Overlap, RecomputeModules, TrainingFramework,
};
use anyhow::{Result, anyhow, bail};

use super::calibration_commands;
use super::held_notes;
use super::megatron_paste::{megatron_norm, megatron_position_embedding};
use crate::cli::{AttentionArg, ClusterArgs, GradDtypeArg, ModelArgs, StyleArg, TrainingArgs};
use crate::cluster::{Cluster, GpuProfile, MAX_GPUS_PER_NODE};
use crate::hf_config;
use crate::input_file;
use crate::model::{Model, ModelFile, Norm};
use crate::planner::{SearchOptions, tp_degrees};
use crate::report::{ClusterSummary, ModelSummary};
use crate::shape::derive_shape;
use crate::specs::{self, PlanFile};
use crate::training::{
    AttentionKernel, DEFAULT_GLOBAL_BATCH, DEFAULT_TOKENS_PER_STEP, GPT3_SEQ_LEN, GradDtype,
    Training, default_global_batch,
};
use crate::units::parse_count;

/// Largest cluster we accept: beyond this the input is a typo, not a cluster.
pub(super) const MAX_NODES: u32 = 131_072;
pub(super) use crate::training::MAX_GLOBAL_BATCH;
/// Largest parameter count we derive a shape for.
pub(super) const MAX_PARAMS: f64 = 1e14;
/// Most tokens we accept for `--tokens`: 1e16, over 600 times the 15.6T tokens Llama 3 405B was
/// pre-trained on (Grattafiori et al. 2024, "The Llama 3 Herd of Models"); beyond this the input
/// is a typo, and the time and cost to train stay finite.
pub(super) const MAX_TOKENS: f64 = 1e16;
/// Default sequence length for derived and flag-given shapes (GPT-3, Megatron SC'21).
pub(super) const DEFAULT_SEQ_LEN: u32 = 2048;
/// Default vocabulary for flag-given shapes (Megatron-LM's padded GPT-2 vocabulary).
pub(super) const DEFAULT_VOCAB: u32 = 51200;

pub(super) struct Scenario {
    pub(super) model: Model,
    pub(super) model_origin: String,
    pub(super) cluster: Cluster,
    pub(super) gpu_reference: String,
    pub(super) training: Training,
    /// Said with the other notes once the input is known to be valid (`global_batch_advice`).
    pub(super) gpu_note: Option<String>,
    /// Where the sequence length came from when neither `--seq-len` nor a plan file gave it,
    /// said in the model line as a Hugging Face config's own note is (`seq_len_default_note`).
    pub(super) seq_len_note: Option<String>,
    /// Whose the sequence length is, as the default-batch note names it (`default_batch_note`).
    pub(super) seq_len_source: SeqLenSource,
    /// The spec file (bundled or `--model FILE`) the model was read from, where the model is
    /// still that file's (no shape or MoE flag over it): `plan --save` carries what the shape
    /// does not hold, its description, sources and published counts (`model_file_of`).
    pub(super) spec_file: Option<ModelFile>,
}

/// Whose a scenario's sequence length is: the notes that build on it name it, since "this
/// model's 8192 tokens" read as the model's own length where `--seq-len` gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SeqLenSource {
    /// `--seq-len`.
    Flag,
    /// A plan file's `seq_len:`.
    PlanFile,
    /// A `--megatron-args` line's `--seq-length`.
    LaunchLine,
    /// The model's own: its spec's `seq_len`, a Hugging Face config's, or GPT-3's 2048 for a
    /// derived or flag-given shape.
    Model,
    /// A bundled spec's (or model file's) `seq_len` marked `seq_len_assumed`: no published
    /// training length.
    Assumed,
}

impl SeqLenSource {
    /// The length with whose it is: "--seq-len 8192", "this model's 8192 tokens".
    pub(super) fn words(self, seq_len: u32) -> String {
        match self {
            SeqLenSource::Flag => format!("--seq-len {seq_len}"),
            SeqLenSource::PlanFile => format!("the plan file's seq_len {seq_len}"),
            SeqLenSource::LaunchLine => format!("the launch line's --seq-length {seq_len}"),
            SeqLenSource::Model => format!("this model's {seq_len} tokens"),
            SeqLenSource::Assumed => {
                format!("the {seq_len} tokens assumed for this model, which publishes none")
            }
        }
    }
}

/// The model line's words for a sequence length nobody gave: a bundled model or a model file
/// trains on its own `seq_len` (Mixtral 8x7B's 32768), a shape from `--params` or shape flags on
/// GPT-3's 2048. A Hugging Face config says its own (`hf_config::parse_with_note`), and a plan file
/// or launch line that names the model gives its length with it. `None` where nothing was taken.
/// `assumed`: the spec marks its `seq_len` as an assumption (`ModelFile::seq_len_assumed`), said
/// as one rather than as the model's training length.
fn seq_len_default_note(origin: &str, seq_len: u32, assumed: bool) -> Option<String> {
    let why = if origin.starts_with("derived") || origin == "flags" {
        "GPT-3's"
    } else if origin.starts_with("bundled") && assumed {
        "assumed, since no training length is published for this model"
    } else if origin.starts_with("bundled") {
        "the bundled model's training length"
    } else if origin.starts_with("file") && assumed {
        "the model file's seq_len, which it marks as assumed (seq_len_assumed: true)"
    } else if origin.starts_with("file") {
        "the model file's seq_len"
    } else {
        return None;
    };
    Some(format!("--seq-len not given: {seq_len} tokens, {why}"))
}

/// `--gpus N` (or `--num-gpus`, `--world-size`), a total GPU count: tpsim sizes a cluster as
/// `--nodes` of `--gpus-per-node`, so the count is refused with the `--nodes` that gives it on
/// `gpu` (or the nearest whole numbers of nodes), rather than read as a GPU type or dropped.
pub(super) fn refuse_gpu_count(
    cluster_args: &ClusterArgs,
    gpu: &GpuProfile,
    file: Option<(&PlanFile, &str)>,
) -> Result<()> {
    let Some((flag, given)) = gpu_count_given(cluster_args) else {
        return Ok(());
    };
    // The node size the fix is counted in: --gpus-per-node, else the plan file's (or the launch
    // line's torchrun --nproc_per_node), else the profile's; a zero is refused as itself rather
    // than counted as one GPU per node.
    let (per_node, whose) = match (
        cluster_args.gpus_per_node,
        file.and_then(|(f, path)| f.gpus_per_node.map(|n| (n, path))),
    ) {
        (Some(n), _) => (n, ", as --gpus-per-node says".to_string()),
        (None, Some((n, path))) if path == super::megatron_paste::LAUNCH_LINE_ORIGIN => (
            n,
            ", as the launch line's torchrun --nproc_per_node says".to_string(),
        ),
        (None, Some((n, path))) => (n, format!(", as {path}'s gpus_per_node says")),
        (None, None) => (gpu.gpus_per_node, ", the profile's node".to_string()),
    };
    positive("--gpus-per-node", per_node, "e.g. --gpus-per-node 8")?;
    let parsed = given.trim().parse::<u64>();
    // Beside --nodes the count only repeats or contradicts it: the fix is to drop it.
    if let (Some(nodes), Ok(count)) = (cluster_args.nodes, &parsed) {
        let total = u64::from(nodes) * u64::from(per_node);
        let verb = if *count == total {
            "repeats"
        } else {
            "contradicts"
        };
        bail!(
            "{flag} {given} {verb} --nodes {nodes} of {per_node} GPUs ({total} GPUs on {}{whose}): tpsim sizes a cluster by --nodes and --gpus-per-node only; drop {flag}",
            gpu.name
        );
    }
    let fix = match parsed {
        Ok(count) if count > 0 && count % u64::from(per_node) == 0 => format!(
            "for {count} GPUs give --nodes {}",
            count / u64::from(per_node)
        ),
        Ok(count) if count > 0 && count < u64::from(per_node) => {
            format!("for {count} GPUs give --nodes 1 --gpus-per-node {count}")
        }
        Ok(count) if count > 0 => {
            let below = count / u64::from(per_node);
            format!(
                "{count} GPUs are not whole nodes of {per_node}: give --nodes {below} ({} GPUs) or --nodes {} ({} GPUs)",
                below * u64::from(per_node),
                below + 1,
                (below + 1) * u64::from(per_node)
            )
        }
        _ => "give --nodes N for N nodes".to_string(),
    };
    bail!(
        "{flag} {given}: tpsim sizes a cluster as --nodes N of --gpus-per-node GPUs ({per_node} per node on {}{whose}), not as a total; {fix}",
        gpu.name,
    )
}

/// The total GPU count given (`--gpus`, `--num-gpus` or `--world-size`), with its flag.
pub(super) fn gpu_count_given(cluster_args: &ClusterArgs) -> Option<(&'static str, &String)> {
    [
        ("--gpus", &cluster_args.gpus),
        ("--num-gpus", &cluster_args.num_gpus),
        ("--world-size", &cluster_args.world_size),
    ]
    .into_iter()
    .find_map(|(flag, value)| value.as_ref().map(|v| (flag, v)))
}

/// The GPU profile a command uses when neither `--gpu` nor a plan file names one.
pub(super) const DEFAULT_GPU: &str = "h100-sxm-80g";

pub(super) fn positive(flag: &str, value: u32, fix: &str) -> Result<u32> {
    if value == 0 {
        bail!("{flag} 0 must be at least 1; {fix}");
    }
    Ok(value)
}

/// The model of the command line: from a source (--params, --hf-config, --model, shape flags or a
/// plan file), then the shape flags given over it (`--model grok-1 --layers 8`).
/// `seq_len` is the sequence length given, if any, with its name as the user wrote it
/// (`--seq-len`, or a plan file's `seq_len:`), which an error about it names.
pub(super) fn resolve_model(
    args: &ModelArgs,
    file: Option<(&PlanFile, &str)>,
    seq_len: Option<(u32, &'static str)>,
) -> Result<(Model, String)> {
    let (mut model, origin) = resolve_shaped_model(args, file, seq_len)?;
    // Megatron-LM's switch, as an emitted launch line pastes it (`--megatron-args` reads it too).
    if args.moe_shared_expert_gate {
        match model.moe.as_mut() {
            Some(moe) if moe.shared_expert_ffn_hidden > 0 => moe.shared_expert_gate = true,
            _ => bail!(
                "--moe-shared-expert-gate gates the shared experts' output, and the model {} has no shared experts; give --moe-shared-expert-intermediate-size or drop it",
                model.name
            ),
        }
    }
    // The clamp as `--megatron-args` reads it (`emit::megatron_moe`), over any model with a
    // gated MLP in its experts: a limit given replaces the model's.
    if let Some(limit) = args.activation_func_clamp_value {
        const FLAG: &str = "--activation-func-clamp-value";
        let Some(limit) = crate::model::GluClampLimit::new(limit) else {
            bail!(
                "{FLAG} {} is not a positive, finite number (the gate is clamped from above and the linear half to [-X, X]); e.g. {FLAG} 7.0 (GPT-OSS), or drop it",
                crate::units::show_number(limit)
            );
        };
        if !model.gated_mlp {
            bail!(
                "{FLAG} {}: the model {} has no gated MLP, and the clamp acts on the two halves of a gated activation; drop it",
                limit.arg(),
                model.name
            );
        }
        match model.moe.as_mut() {
            Some(moe) => moe.glu_clamp_limit = Some(limit),
            None => bail!(
                "{FLAG} {}: the model {} is dense, and tpsim models a clamped gated activation on mixture-of-experts layers only (GPT-OSS); drop it, or give a mixture-of-experts model",
                limit.arg(),
                model.name
            ),
        }
    }
    Ok((model, origin))
}

/// [`resolve_model`] before the switches that only add to a model's MoE layers.
fn resolve_shaped_model(
    args: &ModelArgs,
    file: Option<(&PlanFile, &str)>,
    seq_len: Option<(u32, &'static str)>,
) -> Result<(Model, String)> {
    let (model, origin) = resolve_base_model(args, file, seq_len)?;
    // The block-style switches describe a model built from shape flags; over a named model they
    // would be dropped without a word, so they are refused.
    if origin != "flags" {
        let style_flags = [
            ("--gated-mlp (--swiglu)", args.gated_mlp),
            ("--style", args.style.is_some()),
            ("--disable-bias-linear", args.disable_bias_linear),
            (
                "--untie-embeddings-and-output-weights",
                args.untie_embeddings_and_output_weights,
            ),
            ("--normalization", args.normalization.is_some()),
            ("--qk-layernorm", args.qk_layernorm),
            ("--add-qkv-bias", args.add_qkv_bias),
            ("--hidden-dropout", args.hidden_dropout.is_some()),
            ("--attention-dropout", args.attention_dropout.is_some()),
            (
                "--position-embedding-type",
                args.position_embedding_type.is_some(),
            ),
            ("--rotary-percent", args.rotary_percent.is_some()),
            ("--rotary-base", args.rotary_base.is_some()),
        ];
        if let Some((flag, _)) = style_flags.iter().find(|(_, given)| *given) {
            bail!(
                "{flag} describes a model built from shape flags (--layers --hidden --heads); the model {} ({origin}) already fixes it: drop {flag}, or give the whole shape with flags",
                model.name
            );
        }
    }
    // Pasted dropout probabilities are read as Megatron-LM reads them (`--megatron-args` refuses
    // the same values): one outside [0, 1] would silently turn dropout on or off.
    for (flag, given) in [
        ("--hidden-dropout", args.hidden_dropout),
        ("--attention-dropout", args.attention_dropout),
    ] {
        if let Some(p) = given.filter(|p| !(0.0..=1.0).contains(p)) {
            bail!(
                "{flag} {} is not a probability between 0 and 1 (Megatron-LM reads it as a float and torch's dropout refuses any other); e.g. {flag} 0.1",
                crate::units::show_number(p)
            );
        }
    }
    let overrides = shape_overrides(args, &model)?;
    if overrides == ShapeOverrides::default() {
        return Ok((model, origin));
    }
    // A rotated share of each head (a model's rotary_percent) beside latent-attention flags that
    // make the model MLA: named by its source, not as a key the flags gave.
    if let (Some(share), None, Some(rank)) = (model.rotary_percent, model.mla, args.kv_lora_rank) {
        let source = match (&args.hf_config, &args.model, file) {
            (Some(path), _, _) => format!("{}'s partial_rotary_factor", input_file::quote(path)),
            (None, Some(name), _) => format!("{}'s rotary_percent", input_file::quote(name)),
            (None, None, Some((_, path))) => {
                format!("{}'s model.rotary_percent", input_file::quote(path))
            }
            (None, None, None) => "the model's rotary_percent".to_string(),
        };
        bail!(
            "{source} {} with --kv-lora-rank {rank}: latent attention rotates only each head's --qk-pos-emb-head-dim part, which is the rotated width, so a rotated share of the head has no meaning there; drop --kv-lora-rank (and the latent-attention flags), or use a model without {}",
            crate::units::show_number(share),
            source.rsplit("'s ").next().unwrap_or("rotary_percent")
        );
    }
    let overridden = model.with_overrides(&overrides)?;
    if origin == "flags" {
        return Ok((overridden, origin));
    }
    Ok((overridden, format!("{origin}, with shape flags over it")))
}

/// The shape flags as overrides of `base` (only those given). `--moe-layer-freq` is parsed here:
/// an integer or Megatron's list expression, whose length must be the layer count.
fn shape_overrides(args: &ModelArgs, base: &Model) -> Result<ShapeOverrides> {
    let (list_first_dense, layer_freq) = match &args.moe_layer_freq {
        None => (None, None),
        Some(text) => {
            let (first_dense, freq, listed) =
                crate::model::parse_moe_layer_freq(text).map_err(|message| anyhow!(message))?;
            let layers = args.layers.unwrap_or(base.layers);
            if let Some(listed) = listed
                && listed != layers
            {
                bail!(
                    "--moe-layer-freq {text} lists {listed} layers but the model has {layers}; Megatron requires one entry per layer"
                );
            }
            if listed.is_some() && args.moe_first_k_dense_replace.is_some() {
                bail!(
                    "--moe-layer-freq {text} already says which layers are dense; drop --moe-first-k-dense-replace (or give --moe-layer-freq as an integer)"
                );
            }
            (listed.map(|_| first_dense), Some(freq))
        }
    };
    Ok(ShapeOverrides {
        layers: args.layers,
        hidden: args.hidden,
        heads: args.heads,
        kv_heads: args.kv_heads,
        head_dim: args.head_dim,
        ffn_hidden: args.ffn_hidden,
        vocab: args.vocab,
        num_experts: args.num_experts,
        moe_router_topk: args.moe_router_topk,
        moe_ffn_hidden: args.moe_ffn_hidden_size,
        moe_shared_expert_ffn_hidden: args.moe_shared_expert_intermediate_size,
        moe_layer_freq: layer_freq,
        moe_first_dense_layers: args.moe_first_k_dense_replace.or(list_first_dense),
        moe_router_groups: args.moe_router_num_groups,
        moe_router_group_topk: args.moe_router_group_topk,
        q_lora_rank: args.q_lora_rank,
        kv_lora_rank: args.kv_lora_rank,
        qk_head_dim: args.qk_head_dim,
        qk_pos_emb_head_dim: args.qk_pos_emb_head_dim,
        v_head_dim: args.v_head_dim,
        mtp_layers: args.mtp_layers,
        attention_window: match &args.window_size {
            // Megatron-Core's window counts the keys before the query; tpsim's tokens include it.
            Some(text) => Some(
                crate::emit::window_size_keys_before(text).map_err(|e| anyhow!(e.to_string()))? + 1,
            ),
            None => args.attention_window,
        },
        window_attn_skip_freq: args.window_attn_skip_freq,
    })
}

/// A bare count, `--params`, a plan file's `params:` or a `sweep --axis params` point (`flag`
/// names it in errors), within the 100T bound.
fn count_of(text: &str, flag: &'static str) -> Result<f64> {
    let params = parse_count(flag, text)?;
    if params > MAX_PARAMS {
        bail!(
            "{flag} {text} is more than 100T parameters, far beyond any trained model; check the value (B = 1e9, T = 1e12)"
        );
    }
    Ok(params)
}

/// Checks one point of `sweep --axis params` in the sweep's words: the value is an item of
/// `--values`, and the fix for a count too small to shape is a larger size, not shape flags (the
/// sweep derives every point's shape and refuses them). `--params` would meet the same bounds.
pub(super) fn check_sweep_params_point(value: &str, seq_len_flag: Option<u32>) -> Result<()> {
    let params = count_of(value, "--values")?;
    derive_shape(params, seq_len_flag.unwrap_or(DEFAULT_SEQ_LEN)).map_err(|err| {
        if err.too_long.is_some() {
            return anyhow!("--values {value}: {}", err.rule());
        }
        // `7` meant as 7B: offer the same digits with the unit when that size has a shape.
        let with_unit = format!("{value}B");
        let example = if value.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && parse_count("--values", &with_unit).is_ok_and(|p| {
                p <= MAX_PARAMS && derive_shape(p, seq_len_flag.unwrap_or(DEFAULT_SEQ_LEN)).is_ok()
            }) {
            with_unit
        } else {
            "1B".to_string()
        };
        anyhow!(
            "--values {value}: {}; --axis params derives a shape at each point, so give a larger size with a unit, e.g. {example} in place of {value}",
            err.rule()
        )
    })?;
    Ok(())
}

/// A plan file's `recompute_modules` beside a recompute that is not selective: refused, as the
/// flag is, since the plan would drop them unsaid (`plan --save` writes them only for a selective
/// plan). `recompute` is the plan's after any flag; `flag` the flag that set it, if one did.
pub(super) fn check_file_modules_apply(
    file: &PlanFile,
    path: &str,
    recompute: Recompute,
    flag: Option<&str>,
) -> Result<()> {
    let Some(modules) = file.recompute_modules else {
        return Ok(());
    };
    if recompute == Recompute::Selective {
        return Ok(());
    }
    let (why, fix) = match flag {
        Some(flag) => (
            format!("{flag} {}", recompute.as_str()),
            format!("use {flag} selective"),
        ),
        // A file without `recompute:` ran eval's default, none: said so, not quoted as a
        // `recompute: none` line the file does not have.
        None if !file.given.recompute => (
            "it has no recompute: line under plan:, so eval took none, which".to_string(),
            "add recompute: selective under plan:".to_string(),
        ),
        None => (
            format!("its recompute: {}", recompute.as_str()),
            "set recompute: selective".to_string(),
        ),
    };
    bail!(
        "{}: recompute_modules ({}) say what selective recompute recomputes, but {why} is not selective; {fix} or drop recompute_modules from the file",
        crate::input_file::quote(path),
        modules.describe()
    )
}

/// Checks one point of `sweep --axis seq-len` over a `--params` count: a point too long for the
/// derived shape is named, with the points that have one (`resolve_scenario` would say "give a
/// shorter --seq-len", a flag the sweep refuses beside the axis).
pub(super) fn check_sweep_seq_len_point(
    params: Option<&str>,
    value: &str,
    seq_len: u32,
) -> Result<()> {
    // A point past any sequence is said by `resolve_scenario`, as for any model.
    let Some(text) = params.filter(|_| check_seq_len(seq_len).is_ok()) else {
        return Ok(());
    };
    // A count that is bad in itself is said by `resolve_scenario`, as for any point.
    let Ok(count) = count_of(text, "--params") else {
        return Ok(());
    };
    match derive_shape(count, seq_len) {
        Err(err) if err.too_long.is_some() => bail!(
            "--axis seq-len at {value}: --params {text}: {}; or give the shape instead (--layers --hidden --heads)",
            err.rule_with(|longest| format!(
                "replace {value} in --values with a point of at most {longest} tokens (e.g. --values 2048,{longest})"
            ))
        ),
        _ => Ok(()),
    }
}

fn resolve_base_model(
    args: &ModelArgs,
    file: Option<(&PlanFile, &str)>,
    seq_len: Option<(u32, &'static str)>,
) -> Result<(Model, String)> {
    let seq_len_for_derived = seq_len.map_or(DEFAULT_SEQ_LEN, |(s, _)| s);
    // A sequence too long for the count is named as given: `--seq-len`, or the file's `seq_len:`.
    let seq_len_name = seq_len.map_or("--seq-len", |(_, name)| name);
    let shorter = |longest: u32| {
        let name = seq_len_name.trim_end_matches(':');
        format!("give a shorter {name}, at most {longest} (e.g. {seq_len_name} 2048)")
    };
    let from_count = |text: &str, flag: &'static str| -> Result<(Model, String)> {
        let params = count_of(text, flag)?;
        let model =
            derive_shape(params, seq_len_for_derived).map_err(|err| match err.too_long {
                Some(_) => anyhow!(
                    "{flag} {text}: {}; or give the shape instead (--layers --hidden --heads)",
                    err.rule_with(shorter)
                ),
                None => anyhow!("{flag} {text}: {err}"),
            })?;
        Ok((model, format!("derived from --params {text}")))
    };
    if let Some(text) = &args.params {
        return from_count(text, "--params");
    }
    if let Some(path) = &args.hf_config {
        if input_file::is_absent(path) {
            bail!(
                "--hf-config {path}: cannot read it: no such file; give the path of a Hugging Face config.json (e.g. models/hf/llama-3-70b.json)"
            );
        }
        let text = input_file::read_structured("--hf-config", path)?;
        let loaded = hf_config::parse_with_note(
            &text,
            &input_file::quote(path),
            &hf_model_name(path),
            seq_len.map(|(s, _)| s),
        )?;
        let origin = match &loaded.seq_len_note {
            Some(note) => format!("from Hugging Face config {path}; {note}"),
            None => format!("from Hugging Face config {path}"),
        };
        return Ok((loaded.model, origin));
    }
    if let Some(name) = &args.model {
        let model = specs::load_model(name)?;
        let origin = if specs::BUNDLED_MODELS.iter().any(|(n, _)| n == name) {
            "bundled"
        } else {
            "file"
        };
        return Ok((model, origin.to_string()));
    }
    // Shape flags describe the whole model unless a plan file gives one for them to override.
    if let Some(layers) = args
        .layers
        .filter(|_| file.is_none() || args.hidden.is_some())
    {
        let hidden = args
            .hidden
            .ok_or_else(|| anyhow!("--layers needs --hidden and --heads"))?;
        let heads = args
            .heads
            .ok_or_else(|| anyhow!("--layers needs --hidden and --heads"))?;
        let llama = args.style == Some(StyleArg::Llama);
        let file = ModelFile {
            // Megatron-LM's integer `--rotary-base`, pasted from a launch line (`--emit megatron`).
            rotary_base: args.rotary_base.map(|base| base as f64),
            name: format!("custom-l{layers}-h{hidden}"),
            description: None,
            source: None,
            published_params_b: None,
            published_active_params_b: None,
            layers,
            hidden,
            heads,
            kv_heads: args.kv_heads,
            head_dim: args.head_dim,
            ffn_hidden: args.ffn_hidden,
            vocab: args.vocab.unwrap_or(DEFAULT_VOCAB),
            seq_len: seq_len_for_derived,
            seq_len_assumed: false,
            gated_mlp: args.gated_mlp,
            linear_bias: !(llama || args.disable_bias_linear),
            tied_embeddings: !(llama || args.untie_embeddings_and_output_weights),
            position_embedding_type: Some(match args.position_embedding_type.as_deref() {
                Some(kind) => megatron_position_embedding(kind)?,
                None if llama => PositionEmbedding::Rope,
                None => PositionEmbedding::LearnedAbsolute,
            }),
            learned_position_embeddings: None,
            rotary_percent: args.rotary_percent,
            norm: Some(match args.normalization.as_deref() {
                Some(norm) => megatron_norm(Some(norm))?,
                None if llama => Norm::Rmsnorm,
                None => Norm::Layernorm,
            }),
            dropout: !llama
                && args.hidden_dropout.is_none_or(|p| p > 0.0)
                && args.attention_dropout.is_none_or(|p| p > 0.0),
            qkv_bias: args.add_qkv_bias,
            qk_norm: args.qk_layernorm,
            shared_layer_norm: false,
            mla: None,
            moe: None,
            mtp_layers: 0,
            attention_window: None,
            hybrid: None,
        };
        specs::check_model_counts(&file).map_err(|m| anyhow!(m))?;
        let model = Model::from_file(&file)?;
        return Ok((model, "flags".to_string()));
    }
    if let Some((file, path)) = file {
        if let (Some(_), Some(text)) = (&file.model, &file.params) {
            bail!(
                "{path}: gives both model and params ({text}); a plan describes one model, so keep model (the shape it was planned with) and delete the params line"
            );
        }
        if let Some(reference) = &file.model {
            let model = specs::resolve_model_ref(reference, path)?;
            return Ok((model, format!("from {path}")));
        }
        if let Some(text) = &file.params {
            // The same bounds as --params, said in the file's words: its key, and the inline
            // model's keys for the shape to give instead.
            let params = count_of(text, "params:").map_err(|err| anyhow!("{path}: {err:#}"))?;
            let model = derive_shape(params, seq_len_for_derived).map_err(|err| match err.too_long {
                // The rule names no key; the fix names the sequence length as given.
                Some(_) => anyhow!(
                    "params: {text} in {path}: {}; or give the shape instead (model.layers model.hidden model.heads)",
                    err.rule_with(shorter)
                ),
                None => anyhow!(
                    "params: {text} in {path}: {}",
                    crate::model_file_words::in_model_file_words(&err.to_string(), "model.")
                ),
            })?;
            return Ok((model, format!("derived from params {text} in {path}")));
        }
        if args.hidden.is_none()
            && args.heads.is_none()
            && args.num_experts.is_none()
            && path != super::megatron_paste::LAUNCH_LINE_ORIGIN
        {
            // The file is what is short of a model: the fix is its line, a flag only as an
            // alternative.
            bail!(
                "{path} gives no model (no model or params key); add one, e.g. params: 512B or model: gpt3-175b (a bundled name, a model file, or the shape inline), or pass --params/--model"
            );
        }
    }
    if args.hidden.is_some() || args.heads.is_some() || args.num_experts.is_some() {
        bail!(
            "shape flags alone need --layers, --hidden and --heads (or --model NAME / --hf-config FILE for them to override)"
        );
    }
    bail!(
        "no model given: pass --params 512B, --model NAME|FILE (e.g. --model gpt3-175b) or --layers/--hidden/--heads"
    )
}

/// The model name of a Hugging Face config: a Hub snapshot is `<model>/config.json`, so the
/// folder names it; otherwise the file's stem (as `hf_config::load` names it).
fn hf_model_name(path: &str) -> String {
    let path = std::path::Path::new(path);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("hf-model");
    let name = if stem == "config" {
        path.parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or("hf-model")
    } else {
        stem
    };
    input_file::escape(name)
}

/// The input files a command names (for refusing an output that would replace one).
pub(super) fn input_paths<'a>(
    model: &'a ModelArgs,
    cluster: &'a ClusterArgs,
) -> Vec<(&'static str, &'a str)> {
    let mut inputs = Vec::new();
    inputs.extend(model.model.as_deref().map(|p| ("--model", p)));
    inputs.extend(model.hf_config.as_deref().map(|p| ("--hf-config", p)));
    inputs.extend(cluster.gpu.as_deref().map(|p| ("--gpu", p)));
    inputs.extend(cluster.calibration.as_deref().map(|p| ("--calibration", p)));
    inputs
}

/// Most `--price-per-gpu-hour` we accept: $10,000 per GPU-hour, thousands of times any cloud list
/// price (an H100 rents for a few dollars an hour); beyond it the input is a typo, and the cost to
/// train stays finite.
const MAX_PRICE_PER_GPU_HOUR: f64 = 1e4;
/// Least `--price-per-gpu-hour` we accept: a tenth of a cent per GPU-hour, thousands of times below
/// any rent; below it the input is a typo (1e-20 printed every cost as "$0").
const MIN_PRICE_PER_GPU_HOUR: f64 = 1e-3;

/// `--price-per-gpu-hour`, else a saved plan's `price_per_gpu_hour:` (the price `plan --save`
/// costed it at, so `eval --plan` and `report` print the cost the table printed), bounded by
/// [`MIN_PRICE_PER_GPU_HOUR`] and [`MAX_PRICE_PER_GPU_HOUR`], with the token budget (`--tokens`,
/// or a plan file's) it prices.
pub(super) fn price_per_gpu_hour_of(
    training_args: &TrainingArgs,
    tokens: Option<f64>,
    file_price: Option<(f64, &str)>,
) -> Result<Option<f64>> {
    // Named in errors as given: the flag, or the file's key after the file's path, with the fix
    // in the same words (a file's key was told "e.g. --price-per-gpu-hour 2.5" without its file,
    // where a file's `tokens:` names the file and writes `tokens: 300B`).
    let (flag, price, example, budget) = match (training_args.price_per_gpu_hour, file_price) {
        (Some(price), _) => (
            "--price-per-gpu-hour".to_string(),
            price,
            "--price-per-gpu-hour 2.5",
            "--tokens 300B",
        ),
        (None, Some((price, path))) => (
            format!("{path}: price_per_gpu_hour:"),
            price,
            "price_per_gpu_hour: 2.5 in the file (or --price-per-gpu-hour 2.5)",
            "tokens: 300B in the file, or --tokens 300B",
        ),
        (None, None) => return Ok(None),
    };
    // -1e308 and 1e308 as written, not as 309 digits (`units::show_number`).
    let shown = crate::units::show_number(price);
    if !(price.is_finite() && price > 0.0) {
        bail!("{flag} {shown} must be a positive amount per GPU-hour, e.g. {example}");
    }
    if price < MIN_PRICE_PER_GPU_HOUR {
        bail!(
            "{flag} {shown} is less than {MIN_PRICE_PER_GPU_HOUR} dollars per GPU-hour, below any GPU's rent; give the price of one GPU for one hour, e.g. {example}"
        );
    }
    if price > MAX_PRICE_PER_GPU_HOUR {
        bail!(
            "{flag} {shown} is more than {MAX_PRICE_PER_GPU_HOUR} dollars per GPU-hour; give the price of one GPU for one hour, e.g. {example}"
        );
    }
    if tokens.is_none() {
        bail!(
            "{flag} needs --tokens: the cost is the time to train that many tokens (e.g. {budget})"
        );
    }
    Ok(Some(price))
}

/// `--tokens`, parsed and bounded by [`MAX_TOKENS`].
pub(super) fn tokens_of(training_args: &TrainingArgs) -> Result<Option<f64>> {
    match &training_args.tokens {
        Some(text) => tokens_count("--tokens", text),
        None => Ok(None),
    }
}

/// A token budget as written (`300B`), named `flag` in errors (`--tokens`, or a plan file's key).
fn tokens_count(flag: &'static str, text: &str) -> Result<Option<f64>> {
    let count = parse_count(flag, text)?;
    // The example in the same words: `--tokens 300B` on the command line, `tokens: 300B` in a file.
    let example = format!("{flag} 300B");
    // A plain number under one token, or with a fraction of one (`--tokens 1.5`), most likely
    // lacks its suffix (1.5T): it was accepted as 1.5 tokens.
    let typed = text.trim();
    let plain = typed.chars().all(|c| c.is_ascii_digit() || c == '.');
    let fix = if plain && typed.parse::<f64>().is_ok_and(|v| v < 1000.0) {
        format!(
            "if it meant trillions or billions, write the suffix: {flag} {typed}T or {flag} {typed}B; otherwise give the tokens to train on, e.g. {example}"
        )
    } else {
        format!("give the tokens to train on, e.g. {example}")
    };
    if count < 1.0 {
        bail!(
            "{flag} {} is less than one token (rule: a token budget counts whole tokens, at least 1); {fix}",
            crate::input_file::quote(text)
        );
    }
    // Within the rounding of a suffix's product (1.1T is 1100000000000.0002 in binary).
    if (count - count.round()).abs() > count * 1e-12 {
        bail!(
            "{flag} {} is not a whole number of tokens ({} tokens; rule: a token budget counts whole tokens); {fix}",
            crate::input_file::quote(text),
            crate::units::show_number(count)
        );
    }
    if count > MAX_TOKENS {
        bail!(
            "{flag} {} is more than {MAX_TOKENS:e} tokens (over 600 times Llama 3's 15.6T); give the tokens to train on, e.g. {example}",
            crate::input_file::quote(text)
        );
    }
    Ok(Some(count))
}

/// The sequence-length cap lives in `Model::check`, one place for every source; a one-layer probe
/// at `seq_len` meets it before any model is resolved or derived, so the error names --seq-len
/// (and not, say, the --params the shape would be derived from).
pub(super) fn check_seq_len(seq_len: u32) -> Result<()> {
    let probe = Model {
        rotary_base: None,
        name: String::new(),
        layers: 1,
        hidden: 64,
        heads: 1,
        kv_heads: 1,
        head_dim: 64,
        ffn_hidden: 256,
        vocab: 64,
        seq_len,
        gated_mlp: false,
        linear_bias: true,
        qkv_bias: false,
        qk_norm: false,
        shared_layer_norm: false,
        tied_embeddings: true,
        position_embedding: crate::model::PositionEmbedding::Rope,
        rotary_percent: None,
        norm: Norm::Layernorm,
        dropout: false,
        mla: None,
        moe: None,
        mtp_layers: 0,
        attention_window: None,
        hybrid: None,
    };
    Ok(probe.check()?)
}

/// The framework `--framework` names (default: Megatron-Core, what current NVIDIA stacks run).
pub(super) fn framework_of_args(args: &TrainingArgs) -> TrainingFramework {
    match args.framework {
        Some(FrameworkArg::MegatronLm2021) => TrainingFramework::MegatronLm2021,
        None | Some(FrameworkArg::MegatronCore) => TrainingFramework::MegatronCore,
        Some(FrameworkArg::Torchtitan) => TrainingFramework::Torchtitan,
        Some(FrameworkArg::Deepspeed) => TrainingFramework::Deepspeed,
    }
}

/// The framework's overlap defaults with each flag the user gave applied on top.
/// `defaults` with each overlap flag the user gave applied on top.
fn overlap_over(args: &TrainingArgs, defaults: Overlap) -> Overlap {
    Overlap {
        tp_comm: args.tp_comm_overlap.unwrap_or(defaults.tp_comm),
        grad_reduce: args.overlap_grad_reduce.unwrap_or(defaults.grad_reduce),
        param_gather: args.overlap_param_gather.unwrap_or(defaults.param_gather),
        p2p: args.overlap_p2p_comm.unwrap_or(defaults.p2p),
        moe_a2a: args
            .overlap_moe_expert_parallel_comm
            .unwrap_or(defaults.moe_a2a),
    }
}

/// The dimensions `plan` was pinned to, checked like `eval` checks them.
/// The pins `plan` searches under; `recompute_modules` (`--recompute-modules`) must not contradict
/// a pinned `--recompute`.
pub(super) fn pins_of_args(
    args: &PinArgs,
    training_args_modules: &Option<Vec<String>>,
) -> Result<Pins> {
    for (flag, value) in [
        ("--tp", args.tp),
        ("--pp", args.pp),
        ("--cp", args.cp),
        ("--dp", args.dp),
        ("--vpp", args.vpp),
        ("--micro-batch", args.micro_batch),
        ("--ep", args.ep),
        ("--etp", args.etp),
    ] {
        if value == Some(0) {
            bail!(
                "{flag} 0 is not a degree; a pinned degree must be at least 1 (or omit {flag} to search it)"
            );
        }
    }
    if let Some(zero) = args.zero
        && zero > 3
    {
        return Err(PlanError::ZeroStage { zero }.into());
    }
    // Resharding is a ZeRO-3 setting: pinning it pins ZeRO-3, so a lower pinned stage contradicts it.
    if let (Some(zero), Some(_)) = (args.zero, args.reshard_after_forward)
        && zero < 3
    {
        return Err(PlanError::ReshardWithoutZero3 { zero }.into());
    }
    // Copies of the sharded states need sharded states: a pinned count above 1 contradicts ZeRO-0.
    if args.dp_replicas == Some(0) {
        return Err(PlanError::ZeroDegree {
            what: "--dp-replicas",
        }
        .into());
    }
    if let (Some(0), Some(replicas)) = (args.zero, args.dp_replicas)
        && replicas > 1
    {
        return Err(PlanError::DpReplicasWithoutZero { replicas }.into());
    }
    if let (Some(words), Some(asked @ (RecomputeArg::None | RecomputeArg::Full))) =
        (training_args_modules, args.recompute)
    {
        bail!(
            "--recompute-modules {} says what selective recompute recomputes, but --recompute {} pins plans without it; pin --recompute selective or drop one of them",
            words.join(" "),
            Recompute::from(asked).as_str()
        );
    }
    // A block-recompute layer count is full recompute's: it pins --recompute full, and
    // contradicts any other pinned recompute.
    let recompute = match (
        args.recompute_num_layers,
        args.recompute.map(Recompute::from),
    ) {
        (Some(0), _) => bail!(
            "--recompute-num-layers 0: it counts the layers of each model chunk that full recompute's block method recomputes; give 1 or more, or pin --recompute full for every layer"
        ),
        (Some(n), Some(other)) if other != Recompute::Full => bail!(
            "--recompute-num-layers {n} pins full recompute of {n} layers per chunk, but --recompute {} pins another recompute; drop one of them",
            other.as_str()
        ),
        (Some(_), _) => Some(Recompute::Full),
        (None, pinned) => pinned,
    };
    Ok(Pins {
        tp: args.tp,
        cp: args.cp,
        pp: args.pp,
        dp: args.dp,
        vpp: args.vpp,
        micro_batch: args.micro_batch,
        recompute,
        recompute_num_layers: args.recompute_num_layers,
        zero: args.zero,
        sequence_parallel: args.sequence_parallel,
        ep: args.ep,
        etp: args.etp,
        reshard_after_forward: args.reshard_after_forward,
        dp_replicas: args.dp_replicas,
        stage_split: crate::planner::StageSplitPin::Searched,
    })
}

/// The busiest expert's load over the balanced share and the expert capacity factor:
/// `--moe-imbalance` (1, balanced, when not given, as the published benchmarks force), capped by
/// `--moe-capacity-factor` (or the plan file's), which drops the tokens over capacity. Each token
/// goes to top-k distinct experts, so one expert receives at most every token once: experts/top-k
/// times the balanced share. Both flags are refused on a dense model, where there is no routing to
/// unbalance or cap. The factor is returned as given, for the emitted configurations to write.
fn moe_routing_of(
    model: &Model,
    args: &TrainingArgs,
    file: Option<(&PlanFile, &str)>,
) -> Result<(f64, Option<f64>)> {
    let plan_file = file.map(|(f, _)| f);
    let path = file.map_or("the plan file", |(_, path)| path);
    // A value is quoted as the user wrote it: the flag, or the file's key and the file.
    let quoted = |name: &str, value: f64| {
        let value = crate::units::show_number(value);
        if name.starts_with("--") {
            format!("{name} {value}")
        } else {
            format!("{name}: {value} in {path}")
        }
    };
    // A saved plan keeps the routing it was evaluated with unless the flags say otherwise: the
    // imbalance as given (`plan --save` writes it before the capacity factor caps it), under the
    // flag's capacity factor where one is given.
    let saved = plan_file.and_then(|f| f.moe_imbalance);
    let given_imbalance = args.moe_imbalance.or(saved);
    let imbalance_flag = if args.moe_imbalance.is_some() {
        "--moe-imbalance"
    } else {
        "moe_imbalance"
    };
    let (factor_flag, capacity_factor) = match args.moe_capacity_factor {
        Some(c) => ("--moe-capacity-factor", Some(c)),
        None => (
            "moe_capacity_factor",
            plan_file.and_then(|f| f.moe_capacity_factor),
        ),
    };
    let Some(moe) = model.moe else {
        let given = [
            given_imbalance.map(|f| (imbalance_flag, f)),
            capacity_factor.map(|c| (factor_flag, c)),
        ];
        if let Some((flag, value)) = given.into_iter().flatten().next() {
            let drop = if flag.starts_with("--") {
                format!("drop {flag}")
            } else {
                format!("delete the {flag} line from {path}")
            };
            bail!(
                "{}: model {} is dense (no experts), so there is no routing to unbalance or cap; {drop} or give a mixture-of-experts model (e.g. --model mixtral-8x7b, or --num-experts with --moe-router-topk)",
                quoted(flag, value),
                model.name
            );
        }
        return Ok((1.0, None));
    };
    let max_imbalance = f64::from(moe.experts) / f64::from(moe.router_topk.max(1));
    let imbalance = match given_imbalance {
        None => 1.0,
        Some(f) if f.is_finite() && f >= 1.0 && f <= max_imbalance => f,
        Some(f) => bail!(
            "{}: the busiest expert's load over the balanced share must be between 1 (balanced) and {} ({} experts / top-{}: one expert receiving every token); e.g. {}",
            quoted(imbalance_flag, f),
            // Rounded down to two places, so the bound as printed is a value accepted.
            crate::units::show_number((max_imbalance * 100.0).floor() / 100.0),
            moe.experts,
            moe.router_topk,
            if imbalance_flag.starts_with("--") {
                "--moe-imbalance 1.2"
            } else {
                "moe_imbalance: 1.2"
            }
        ),
    };
    Ok(match capacity_factor {
        None => (imbalance, None),
        Some(c) => {
            crate::training::check_moe_capacity_factor(c).map_err(|rule| {
                // The fix in the words of where the value came from, as the imbalance's says it.
                let rule = if factor_flag.starts_with("--") {
                    rule.to_string()
                } else {
                    rule.replace("--moe-capacity-factor ", "moe_capacity_factor: ")
                };
                anyhow::anyhow!("{}: {rule}", quoted(factor_flag, c))
            })?;
            (imbalance.min(c), Some(c))
        }
    })
}

/// The MoE token dispatcher and routing pattern: `--moe-dispatcher` and `--moe-routing` over the
/// plan file's, each part on its own (all-to-all and random when neither says). Refused on a dense
/// model, which dispatches nothing.
fn moe_dispatch_of(
    model: &Model,
    args: &TrainingArgs,
    plan_file: Option<&PlanFile>,
) -> Result<crate::training::MoeDispatch> {
    use crate::training::MoeDispatch;
    let dispatcher = args.moe_dispatcher.map(|arg| arg.dispatcher());
    let routing = args.moe_routing.map(|arg| arg.routing());
    if model.moe.is_none() {
        let given = [
            dispatcher.map(|d| ("--moe-dispatcher", d.as_str())),
            routing.map(|r| ("--moe-routing", r.as_str())),
        ];
        if let Some((flag, value)) = given.into_iter().flatten().next() {
            bail!(
                "{flag} {value}: model {} is dense (no experts), so no tokens are dispatched; drop {flag} or give a mixture-of-experts model (e.g. --model qwen3-30b-a3b)",
                model.name
            );
        }
        return Ok(MoeDispatch::default());
    }
    let saved = plan_file.and_then(|f| f.moe_dispatch).unwrap_or_default();
    Ok(MoeDispatch {
        dispatcher: dispatcher.unwrap_or(saved.dispatcher),
        routing: routing.unwrap_or(saved.routing),
        router_padding: saved.router_padding,
    })
}

/// Mixture-of-experts models under a framework that cannot run them the way asked: 2021 Megatron-LM
/// has no MoE layers (they came with Megatron-Core), and DeepEP's dispatcher is Megatron-Core's
/// flex dispatcher (`--moe-enable-deepep`) or NeMo AutoModel's (planned as torchtitan), not
/// DeepSpeed-MoE's all-to-all (deepspeed/moe/sharded_moe.py `_AllToAll`); LatentMoE's experts
/// (`Moe::latent_size`) are Megatron-Core's.
fn check_framework_runs_experts(
    model: &Model,
    framework: TrainingFramework,
    dispatch: crate::training::MoeDispatch,
    args: &TrainingArgs,
) -> Result<()> {
    if model.moe.is_none() {
        return Ok(());
    }
    if framework == TrainingFramework::MegatronLm2021 {
        bail!(
            "--framework megatron-lm-2021: model {} has experts, and 2021 Megatron-LM has no mixture-of-experts layers (they came with Megatron-Core); use --framework megatron-core (or deepspeed)",
            model.name
        );
    }
    // LatentMoE's two projections around the dispatch are priced as Megatron-Core builds them
    // (`MoELayer`'s `fc1_latent_proj`/`fc2_latent_proj`, `--moe-latent-size`); DeepSpeed-MoE
    // (deepspeed/moe/layer.py) and torchtitan's MoE have no such layer and run their experts on
    // the model's width.
    if let Some(latent) = model.moe.and_then(|moe| moe.latent_size)
        && framework != TrainingFramework::MegatronCore
    {
        bail!(
            "--framework {}: model {}'s experts work on a latent width of {latent} (LatentMoE), between two projections around the token dispatch that Megatron-Core's MoE layer has (fc1_latent_proj/fc2_latent_proj, --moe-latent-size) and this framework's does not; use --framework megatron-core",
            framework.as_str(),
            model.name
        );
    }
    if framework == TrainingFramework::Deepspeed
        && dispatch.dispatcher == crate::training::MoeDispatcher::Deepep
    {
        let from = if args.moe_dispatcher.is_some() {
            "--moe-dispatcher deepep"
        } else {
            "moe_dispatch deepep (from the plan file)"
        };
        bail!(
            "{from} with --framework deepspeed: DeepEP is Megatron-Core's flex dispatcher (and NeMo AutoModel's); DeepSpeed-MoE dispatches with its own all-to-all; use --moe-dispatcher alltoall, or --framework megatron-core"
        );
    }
    Ok(())
}

/// A note on stderr when the model's sliding window changes nothing for the sequences it trains
/// on ([`crate::model::AttentionWindow::no_effect`]): the table would otherwise show the window
/// with no hint that it equals full attention. A model file's `full_every: 1` (with no
/// `--window-attn-skip-freq` over it) is named by the file's key, the line the user has to change.
pub(super) fn note_window_without_effect(scenario: &Scenario, args: &ModelArgs) {
    let model = &scenario.model;
    let Some(window) = model.attention_window else {
        return;
    };
    let Some(why) = window.no_effect(model.seq_len) else {
        return;
    };
    let from_model_file = matches!(scenario.model_origin.as_str(), "file" | "bundled");
    if window.full_every == 1 && from_model_file && args.window_attn_skip_freq.is_none() {
        let why = crate::model_file_words::in_model_file_words(&why, "");
        match args.model.as_deref() {
            Some(path) if scenario.model_origin == "file" => {
                held_notes::hold(format!("note: {}: {why}", crate::input_file::quote(path)));
            }
            _ => held_notes::hold(format!("note: {why}")),
        }
        return;
    }
    held_notes::hold(format!("note: {why}"));
}

/// A note on stderr when `--moe-routing` (or a plan file's routing) changes nothing: the routing
/// pattern only moves what DeepEP's dispatcher sends (one copy per GPU reached,
/// `cost::moe::remote_copies_per_token`); the all-to-all dispatcher sends every routed copy
/// wherever its expert lives, so the plan's numbers are those of random routing.
pub(super) fn note_routing_without_effect(training: &Training) {
    use crate::training::{MoeDispatcher, MoeRouting};
    let dispatch = training.moe_dispatch;
    if dispatch.routing != MoeRouting::Random && dispatch.dispatcher == MoeDispatcher::Alltoall {
        held_notes::hold(format!(
            "note: --moe-routing {} changes only what DeepEP's dispatcher sends (one copy per GPU a token's experts sit on, and neighbouring experts share GPUs); the all-to-all dispatcher sends every routed copy whichever experts it goes to, so this plan's numbers are the same as with --moe-routing random; add --moe-dispatcher deepep to price the routing",
            dispatch.routing.as_str()
        ));
    }
}

/// `--emit deepspeed` or `--emit torchtitan` without `--framework` plans as that framework runs
/// it (its configuration runs nowhere else, and tpsim's time and memory differ between
/// frameworks); said on stderr, so the framework taken from `--emit` is never a silent change.
/// `--emit torchtitan` refused where `--emit deepspeed` chose: the two disagreed on one rule. A
/// saved plan (`plan_file`) keeps its own framework and FP8 recipe: the emit then refuses a
/// framework the configuration does not run on, rather than evaluating the file as another one.
/// Returns the emit whose framework it chose (for [`in_emit_framework_words`]).
pub(super) fn framework_for_emit(
    emit: Option<crate::cli::EmitTarget>,
    training: &mut TrainingArgs,
    plan_file: bool,
) -> Option<crate::cli::EmitTarget> {
    use crate::cli::EmitTarget;
    if plan_file {
        return None;
    }
    // NeMo 1.x's FP8 is delayed scaling only (`emit::Framework::unsupported`): plan FP8 as it runs.
    // Not with layers kept in bf16, which Megatron-Core refuses under delayed scaling: the
    // emitter says NeMo cannot write them (`emit::Framework::unsupported`).
    if emit == Some(EmitTarget::Nemo)
        && training.precision == Some(PrecisionArg::Fp8)
        && training.fp8_scaling.is_none()
        && !training.first_last_layers_bf16
        && matches!(training.framework, None | Some(FrameworkArg::MegatronCore))
    {
        training.fp8_scaling = Some(Fp8ScalingArg::Delayed);
        held_notes::hold(
            "note: --emit nemo plans fp8 as NeMo 1.x runs it, with delayed scaling; give --fp8-scaling to choose"
                .to_string(),
        );
    }
    // Activation offloading is Megatron-Core's, which neither DeepSpeed nor torchtitan runs:
    // planned as either runs it, `--cpu-offload-layers` was refused as `--framework deepspeed`, a
    // flag never typed; kept on Megatron-Core, the emitter refuses it in the emit's words.
    let offloads = training.cpu_offload_layers.is_some_and(|n| n > 0);
    if training.framework.is_some() || offloads {
        return None;
    }
    let (framework, how) = match emit? {
        EmitTarget::Deepspeed => (
            FrameworkArg::Deepspeed,
            "context parallelism as Ulysses with no TP or PP beside it, no interleaving, ZeRO-1 at most with pipelines",
        ),
        EmitTarget::Torchtitan => (
            FrameworkArg::Torchtitan,
            "data parallelism as FSDP2, ZeRO 0 or 3; eager kernels unless --torch-compile; context parallelism as PyTorch's context_parallel",
        ),
        _ => return None,
    };
    let target = emit?;
    training.framework = Some(framework);
    held_notes::hold(format!(
        "note: --emit {name} plans as --framework {name} runs it ({how}); give --framework to choose another",
        name = super::emit_commands::target_name(target)
    ));
    Some(target)
}

/// An error of a run whose framework `--emit deepspeed` or `--emit torchtitan` chose
/// ([`framework_for_emit`]; its note is dropped with the error): the message named `--framework
/// deepspeed`, a flag never typed, and offered `--framework megatron-core`, which the emit then
/// refuses (its configuration runs on that framework only). Said as the emit's choice, with the
/// emit that runs on Megatron-Core as the fix. A model that framework's configuration does not
/// describe (a hybrid stack, experts, latent attention; a model other than Llama 3 in torchtitan's
/// recipe) is said as the emit's refusal, which the framework's would otherwise hide behind a fix
/// that the emit refuses in turn.
pub(super) fn in_emit_framework_words(
    err: anyhow::Error,
    model: &ModelArgs,
    target: crate::cli::EmitTarget,
) -> anyhow::Error {
    let name = super::emit_commands::target_name(target);
    let message = format!("{err:#}");
    let flag = format!("--framework {name}");
    if !message.contains(&flag) {
        return err;
    }
    if let Ok((model, _)) = resolve_model(model, None, None)
        && let Some(why) = super::emit_commands::framework_of(target).model_unsupported(&model)
    {
        return anyhow::anyhow!("--emit {name}: {why}");
    }
    anyhow::anyhow!(
        message
            .replacen(
                &flag,
                &format!("--emit {name} (which plans as --framework {name})"),
                1
            )
            .replace("--framework megatron-core", "--emit megatron")
    )
}

/// Per-tensor FP8's scaling: `--fp8-scaling`, else the saved plan's, else the framework's. Delayed
/// scaling under torchtitan is refused (torchao deleted it, pytorch/ao#1753).
fn fp8_scaling_of(
    framework: TrainingFramework,
    args: &TrainingArgs,
    file: Option<(&PlanFile, &str)>,
) -> Result<Fp8Scaling> {
    let saved = file.map(|(f, _)| f);
    let (scaling, from) = match args.fp8_scaling.map(Fp8ScalingArg::scaling) {
        Some(Fp8Scaling::Delayed) => (Fp8Scaling::Delayed, "--fp8-scaling delayed"),
        Some(Fp8Scaling::Current) => (Fp8Scaling::Current, "--fp8-scaling current"),
        None => match saved.and_then(|f| f.fp8_scaling) {
            // A file's recipe matters only to an FP8 run. `plan --save` writes the default
            // (current) into every file, so a non-FP8 file carries that one unused; delayed
            // there was written by hand (the flag refuses it off FP8): refused, as the flag is.
            // Under a --precision that overrides an FP8 file it is said to change nothing.
            Some(s) => {
                let precision = precision_over_file(args, saved);
                if precision != Precision::Fp8 {
                    if s == Fp8Scaling::Delayed
                        && let Some((f, path)) = file
                    {
                        let path = crate::input_file::quote(path);
                        if f.plan.precision != Precision::Fp8 {
                            bail!(
                                "{path}: fp8_scaling: delayed sets how per-tensor FP8 scales its tensors, but the file's precision: {} has no per-tensor FP8 GEMMs (mxfp8 and nvfp4 scale per block); set precision: fp8, or remove fp8_scaling from the file",
                                f.plan.precision.as_str()
                            );
                        }
                        held_notes::hold(format!(
                            "note: {path}: fp8_scaling: delayed changes nothing under --precision {} (it scales per-tensor FP8 GEMMs only); it applies at the file's precision: fp8",
                            precision.as_str()
                        ));
                    }
                    return Ok(s);
                }
                (s, "fp8_scaling: delayed in the plan file")
            }
            None => (framework.default_fp8_scaling(), ""),
        },
    };
    check_framework_runs_fp8_scaling(framework, scaling, from)?;
    Ok(scaling)
}

/// The layers kept in bf16 at the ends of the stack (`--first-last-layers-bf16` with its counts,
/// else the saved plan's). Megatron-Core's switch: the counts alone do nothing there, so they are
/// refused without it, as the switch is on a bf16 run (nothing to keep), under another framework
/// (none has it), with no layer to keep, or with more layers than the model has.
fn bf16_layers_of(
    model: &Model,
    framework: TrainingFramework,
    args: &TrainingArgs,
    file: Option<(&PlanFile, &str)>,
) -> Result<crate::training::Bf16Layers> {
    let saved = file.map(|(f, _)| f);
    let counts = [
        ("start", args.num_layers_at_start_in_bf16),
        ("end", args.num_layers_at_end_in_bf16),
    ];
    if !args.first_last_layers_bf16 {
        if let Some((end, Some(n))) = counts.iter().find(|(_, n)| n.is_some()) {
            bail!(
                "--num-layers-at-{end}-in-bf16 {n} counts the layers --first-last-layers-bf16 keeps in bf16, which is not given (Megatron-Core ignores the count without it); add --first-last-layers-bf16, or drop the count"
            );
        }
        let Some((kept, path)) = file.and_then(|(f, path)| f.bf16_layers.map(|b| (b, path))) else {
            return Ok(crate::training::Bf16Layers::NONE);
        };
        let quoted = crate::input_file::quote(path);
        // `plan --save` writes bf16_layers only when it keeps some, and only off bf16 (the flag
        // refuses both): a file that keeps none, or keeps some under its own precision: bf16, was
        // edited by hand and would be dropped without a word.
        if kept.is_none() {
            bail!(
                "{quoted}: bf16_layers at_start: 0 and at_end: 0 keeps no layer in bf16 (as --first-last-layers-bf16 with both counts 0, which is refused); give a count above 0, or remove bf16_layers from the file"
            );
        }
        let precision = precision_over_file(args, saved);
        if precision == Precision::Bf16 {
            if saved.is_some_and(|f| f.plan.precision == Precision::Bf16) {
                bail!(
                    "{quoted}: bf16_layers (at_start: {}, at_end: {}) keep layers in bf16 under low-precision GEMMs, but the file's precision: bf16 has every GEMM in bf16 already; set precision: fp8, mxfp8 or nvfp4, or remove bf16_layers from the file",
                    kept.at_start,
                    kept.at_end
                );
            }
            // `--precision bf16` over a low-precision file: nothing is quantized, so there is
            // nothing to keep out of it.
            held_notes::hold(format!(
                "note: {quoted}: bf16_layers (at_start: {}, at_end: {}) change nothing under --precision bf16 (every GEMM is bf16 already); they apply at the file's precision: {}",
                kept.at_start,
                kept.at_end,
                saved.map_or("fp8", |f| f.plan.precision.as_str())
            ));
            return Ok(crate::training::Bf16Layers::NONE);
        }
        // A saved plan's (or a launch line's) layers, under the rules the flags meet. Under another
        // framework (--framework over a Megatron-Core file) they would be priced where nothing
        // keeps them; a bf16 run never uses them (kept, not refused).
        if framework != TrainingFramework::MegatronCore {
            bail!(
                "bf16_layers in the plan file (--first-last-layers-bf16) is Megatron-Core's; --framework {} has no per-layer precision; use --framework megatron-core, or remove bf16_layers from the file",
                framework.as_str()
            );
        }
        // What a quantization recipe file keeps (the accuracy runner's recipes set it) has no
        // flag, and no launch config tpsim writes could carry it.
        if kept.mtp {
            bail!(
                "bf16_layers mtp: true in the plan file keeps the MTP layers in bf16 as a Transformer Engine quantization recipe file does, which tpsim neither reads from a flag nor writes into a launch config; remove mtp from the file"
            );
        }
        if let Some((end, count)) = kept.count_past(model.layers) {
            bail!(
                "bf16_layers at_{end}: {count} in the plan file: model {} has {} transformer layers; give {} or fewer",
                model.name,
                model.layers,
                model.layers
            );
        }
        return Ok(kept);
    }
    if framework != TrainingFramework::MegatronCore {
        bail!(
            "--first-last-layers-bf16 is Megatron-Core's (fp8_utils.get_fp8_context keeps those layers out of the quantization context); --framework {} has no per-layer precision; use --framework megatron-core, or drop the flag",
            framework.as_str()
        );
    }
    let precision = precision_over_file(args, saved);
    if precision == Precision::Bf16 {
        bail!(
            "--first-last-layers-bf16 keeps layers in bf16 under low-precision GEMMs, but this run's GEMMs are already bf16; give --precision fp8, mxfp8 or nvfp4, or drop the flag"
        );
    }
    let layers = crate::training::Bf16Layers {
        at_start: args.num_layers_at_start_in_bf16.unwrap_or(1),
        at_end: args.num_layers_at_end_in_bf16.unwrap_or(1),
        mtp: false,
    };
    if layers.is_none() {
        bail!(
            "--first-last-layers-bf16 with --num-layers-at-start-in-bf16 0 and --num-layers-at-end-in-bf16 0 keeps no layer in bf16; give a count above 0, or drop the flag"
        );
    }
    if let Some((end, count)) = layers.count_past(model.layers) {
        bail!(
            "--num-layers-at-{end}-in-bf16 {count}: model {} has {} transformer layers; give {} or fewer",
            model.name,
            model.layers,
            model.layers
        );
    }
    Ok(layers)
}

/// Delayed scaling under a framework without it (torchtitan's torchao deleted it) is refused,
/// `from` naming where the recipe came from.
pub(super) fn check_framework_runs_fp8_scaling(
    framework: TrainingFramework,
    scaling: Fp8Scaling,
    from: &str,
) -> Result<()> {
    if scaling == Fp8Scaling::Delayed && !framework.runs_delayed_fp8_scaling() {
        bail!(
            "{from} (delayed scaling) with --framework {}: torchao, torchtitan's float8, has only current (tensorwise) scaling since it deleted delayed scaling (pytorch/ao#1753); use current scaling (--fp8-scaling current, --fp8-recipe tensorwise) or --framework megatron-core",
            framework.as_str()
        );
    }
    Ok(())
}

/// `--fp8-scaling` sets how per-tensor FP8 scales; given for a run in another precision it would
/// change nothing, so it is refused (as `--tp-comm-overlap` is with `--tp 1`).
pub(super) fn check_fp8_scaling_applies(args: &TrainingArgs, precision: Precision) -> Result<()> {
    if let Some(scaling) = args.fp8_scaling
        && precision != Precision::Fp8
    {
        bail!(
            "--fp8-scaling {} sets how per-tensor FP8 scales its tensors, but this run's GEMMs are {} (mxfp8 and nvfp4 scale per block); give --precision fp8, or drop --fp8-scaling",
            scaling.scaling().as_str(),
            precision.as_str()
        );
    }
    Ok(())
}

/// A plan file's `fp8_param_gather: true` on a bf16 run has no low-precision weights to gather:
/// refused, as Megatron-LM refuses `--fp8-param-gather` without `--fp8-format` (and as the pasted
/// flag is), rather than read and ignored. With `--framework` the file's value is not used.
pub(super) fn check_file_param_gather(
    file: &PlanFile,
    path: &str,
    args: &TrainingArgs,
    precision: Precision,
) -> Result<()> {
    if file.fp8_param_gather != Some(true)
        || args.framework.is_some()
        || precision != Precision::Bf16
    {
        return Ok(());
    }
    match args.precision {
        Some(_) => bail!(
            "fp8_param_gather: true in {path} all-gathers low-precision weights as the parameters, but --precision bf16 runs bf16 GEMMs, which have none (Megatron-LM refuses --fp8-param-gather without --fp8-format); give --precision fp8, mxfp8 or nvfp4, or delete the file's fp8_param_gather line"
        ),
        None => bail!(
            "fp8_param_gather: true in {path} all-gathers low-precision weights as the parameters, but the file's precision is bf16, which has none (Megatron-LM refuses --fp8-param-gather without --fp8-format); set precision: fp8 (or give --precision fp8), or delete the fp8_param_gather line"
        ),
    }
}

/// The GEMM precision of a run from a plan file: `--precision` over the file's (bf16 without
/// either).
pub(crate) fn precision_over_file(args: &TrainingArgs, file: Option<&PlanFile>) -> Precision {
    match (args.precision, file) {
        (None, Some(file)) => file.plan.precision,
        _ => precision_of_args(args),
    }
}

/// The GEMM precision `--precision` names (default bf16).
pub(crate) fn precision_of_args(args: &TrainingArgs) -> Precision {
    match args.precision {
        None | Some(PrecisionArg::Bf16) => Precision::Bf16,
        Some(PrecisionArg::Fp8) => Precision::Fp8,
        Some(PrecisionArg::Mxfp8) => Precision::Mxfp8,
        Some(PrecisionArg::Nvfp4) => Precision::Nvfp4,
    }
}

/// The GPU profile a run is evaluated on, and how it was named: `--calibration` over `--gpu`
/// over the plan file's `gpu:` (read from the plan's folder, as its model: is) over `reference`.
pub(super) fn resolve_gpu(
    cluster_args: &ClusterArgs,
    file: Option<(&PlanFile, &str)>,
    reference: String,
) -> Result<(GpuProfile, String)> {
    let file_gpu = file.and_then(|(f, path)| f.gpu.as_ref().map(|_| path));
    let named = match (&cluster_args.gpu, file_gpu) {
        (Some(_), _) => (specs::load_gpu(&reference)?, reference),
        (None, Some(plan_path)) => specs::load_plan_gpu(plan_path, &reference)?,
        (None, None) => (specs::load_bundled_gpu(&reference)?, reference),
    };
    Ok(match &cluster_args.calibration {
        Some(path) => (calibration_commands::load_calibrated(path)?, path.clone()),
        None => named,
    })
}

/// The GPUs per node of the plan file's cluster as a run without `--gpus-per-node` sees it: the
/// file's `gpus_per_node:`, else the node size of the GPU the run uses (None if that GPU cannot
/// be read). Dropping a `--gpus-per-node` equal to it changes nothing.
pub(super) fn file_gpus_per_node(
    cluster_args: &ClusterArgs,
    file: &PlanFile,
    path: &str,
) -> Option<u32> {
    file.gpus_per_node.or_else(|| {
        let reference = cluster_args
            .gpu
            .clone()
            .or(file.gpu.clone())
            .unwrap_or_else(|| DEFAULT_GPU.to_string());
        resolve_gpu(cluster_args, Some((file, path)), reference)
            .ok()
            .map(|(gpu, _)| gpu.gpus_per_node)
    })
}

pub(super) fn resolve_scenario(
    model_args: &ModelArgs,
    cluster_args: &ClusterArgs,
    training_args: &TrainingArgs,
    file: Option<(&PlanFile, &str)>,
) -> Result<Scenario> {
    let plan_file = file.map(|(f, _)| f);
    let seq_len_flag = match training_args.seq_len.or(plan_file.and_then(|f| f.seq_len)) {
        Some(s) => Some(positive(
            "--seq-len",
            s,
            "give the tokens per sequence, e.g. --seq-len 2048",
        )?),
        None => None,
    };
    if let Some(seq_len) = seq_len_flag {
        check_seq_len(seq_len)?;
    }
    let seq_len_name = if training_args.seq_len.is_some() {
        "--seq-len"
    } else {
        "seq_len:"
    };
    let (mut model, model_origin) =
        resolve_model(model_args, file, seq_len_flag.map(|s| (s, seq_len_name)))?;
    if let Some(seq_len) = seq_len_flag {
        model.seq_len = seq_len;
        model.check()?;
    }
    // The spec the model was read from, while the model is still its own (a shape or MoE flag
    // over it makes another model, whose description and counts the spec's would misstate).
    let spec_file = match &model_args.model {
        Some(name) if matches!(model_origin.as_str(), "bundled" | "file") => {
            specs::load_model_with_file(name)
                .ok()
                .filter(|(spec_model, _)| {
                    let mut spec_model = spec_model.clone();
                    spec_model.seq_len = model.seq_len;
                    spec_model == model
                })
                // A length given over the spec's is no assumption of the spec's.
                .map(|(_, mut file)| {
                    file.seq_len_assumed &= seq_len_flag.is_none();
                    file
                })
        }
        _ => None,
    };
    let seq_len_assumed =
        seq_len_flag.is_none() && spec_file.as_ref().is_some_and(|f| f.seq_len_assumed);
    let seq_len_note = seq_len_flag
        .is_none()
        .then(|| seq_len_default_note(&model_origin, model.seq_len, seq_len_assumed))
        .flatten();
    let seq_len_source = if training_args.seq_len.is_some() {
        SeqLenSource::Flag
    } else if seq_len_flag.is_some() {
        match file {
            Some((_, path)) if path == super::megatron_paste::LAUNCH_LINE_ORIGIN => {
                SeqLenSource::LaunchLine
            }
            _ => SeqLenSource::PlanFile,
        }
    } else if seq_len_assumed {
        SeqLenSource::Assumed
    } else {
        SeqLenSource::Model
    };

    let gpu_reference = cluster_args
        .gpu
        .clone()
        .or(plan_file.and_then(|f| f.gpu.clone()))
        .unwrap_or_else(|| DEFAULT_GPU.to_string());
    let gpu_note = (cluster_args.gpu.is_none()
        && cluster_args.calibration.is_none()
        && plan_file.is_some_and(|f| f.gpu.is_none()))
    .then(|| {
        format!(
            "note: the plan file gives no gpu:, so it is evaluated on {gpu_reference} (the default GPU); add gpu: to the file or pass --gpu"
        )
    });
    let (mut gpu, gpu_reference) = resolve_gpu(cluster_args, file, gpu_reference)?;
    refuse_gpu_count(cluster_args, &gpu, file)?;
    apply_memory_limit(
        &mut gpu,
        cluster_args.max_memory_gib,
        plan_file.and_then(|f| f.max_memory_gib),
    )?;
    // The node size the errors below count in: a zero is refused first, as itself.
    let given_per_node = cluster_args
        .gpus_per_node
        .or(plan_file.and_then(|f| f.gpus_per_node));
    if let Some(n) = given_per_node {
        positive("--gpus-per-node", n, "e.g. --gpus-per-node 8")?;
    }
    let per_node = given_per_node.unwrap_or(gpu.gpus_per_node);
    let nodes = cluster_args
        .nodes
        .or(plan_file.and_then(|f| f.nodes))
        .ok_or_else(|| match file {
            // The file is short of the key: its line is the fix, the flag an alternative (a
            // launch line has no such line: its torchrun sizes or the flag give the nodes).
            Some((_, path)) if path != super::megatron_paste::LAUNCH_LINE_ORIGIN => anyhow!(
                "{path} gives no nodes: how many nodes of {per_node} GPUs the cluster has; add a line such as nodes: 32, or pass --nodes"
            ),
            _ => anyhow!(
                "--nodes is required: how many nodes of {per_node} GPUs the cluster has (e.g. --nodes 32)"
            ),
        })?;
    positive("--nodes", nodes, "a cluster has at least one node")?;
    if nodes > MAX_NODES {
        bail!(
            "--nodes {nodes} is more than {MAX_NODES}, larger than any cluster built; check the value (it counts nodes, not GPUs)"
        );
    }
    let gpus_per_node = cluster_args
        .gpus_per_node
        .or(plan_file.and_then(|f| f.gpus_per_node))
        .unwrap_or(gpu.gpus_per_node);
    positive("--gpus-per-node", gpus_per_node, "e.g. --gpus-per-node 8")?;
    if gpus_per_node > MAX_GPUS_PER_NODE {
        bail!(
            "--gpus-per-node {gpus_per_node} is more than {MAX_GPUS_PER_NODE} (an NVL72 rack); check the value"
        );
    }
    // tpsim prices a node's GPUs as one NVLink domain (or whole nodes inside a rack's domain), so a
    // node larger than the GPU's NVLink domain would put GPUs that do not share NVLink on it.
    let domain = gpu.nvlink_domain();
    if gpus_per_node > domain {
        // The nodes that hold the same GPUs at the domain's size: "e.g. twice the --nodes" was
        // right only for a domain of half a node (a 1-GPU domain needs 8 x the nodes).
        let sharing = match domain {
            1 => "1 GPU (a GPU whose NVLink links to no other)".to_string(),
            _ => format!("{domain} GPUs that share NVLink"),
        };
        let same_gpus = (u64::from(nodes) * u64::from(gpus_per_node)).div_ceil(u64::from(domain));
        bail!(
            "--gpus-per-node {gpus_per_node} is more than the {sharing} on {} (one NVLink domain); tpsim counts a node's GPUs as one NVLink domain: give --gpus-per-node {domain} or fewer and count the nodes accordingly (e.g. --gpus-per-node {domain} and --nodes {same_gpus} for {nodes} x {gpus_per_node} GPUs), or a GPU profile whose nvlink_domain_gpus is larger",
            gpu.name
        );
    }
    if gpu.nvlink_domain_gpus.is_some() && !domain.is_multiple_of(gpus_per_node) {
        bail!(
            "--gpus-per-node {gpus_per_node} does not divide the {domain}-GPU NVLink domain of {}: the domain holds whole nodes (trays); give a divisor of {domain}, e.g. --gpus-per-node {}",
            gpu.name,
            gpu.gpus_per_node
        );
    }
    let cluster = Cluster {
        gpu,
        nodes,
        gpus_per_node,
    };

    let global_batch = training_args
        .global_batch
        .or(plan_file.and_then(|f| f.global_batch))
        .unwrap_or_else(|| default_global_batch(model.seq_len));
    positive(
        "--global-batch",
        global_batch,
        "give sequences per step, e.g. --global-batch 1536",
    )?;
    if global_batch > MAX_GLOBAL_BATCH {
        bail!(
            "--global-batch {global_batch} is more than {MAX_GLOBAL_BATCH} sequences per step; it counts sequences, not tokens (e.g. --global-batch 1536)"
        );
    }
    // A saved plan keeps its local batch unless --framework says otherwise (as its framework).
    let local_batch = training_args.local_batch.or(plan_file
        .filter(|_| training_args.framework.is_none())
        .and_then(|f| f.local_batch));
    if let Some(local) = local_batch {
        positive(
            "--local-batch",
            local,
            "give sequences per data-parallel rank per pipeline schedule, e.g. --local-batch 8",
        )?;
        if local > global_batch {
            bail!(
                "--local-batch {local} is more than --global-batch {global_batch}: it counts one data-parallel rank's sequences per pipeline schedule; give at most {global_batch}"
            );
        }
    }
    // The flag, else the budget a saved plan was planned for (as written: `tokens: 300B`).
    let tokens = match (
        &training_args.tokens,
        plan_file.and_then(|f| f.tokens.as_deref()),
    ) {
        (None, Some(text)) => {
            let path = file.map_or("the plan file", |(_, path)| path);
            tokens_count("tokens:", text).map_err(|err| anyhow!("{path}: {err:#}"))?
        }
        _ => tokens_of(training_args)?,
    };
    // A saved plan keeps the framework and overlap it was evaluated with, unless --framework says
    // otherwise (then that framework's defaults, under the overlap flags given).
    let saved = plan_file.filter(|_| training_args.framework.is_none());
    let framework = saved
        .and_then(|f| f.framework)
        .unwrap_or_else(|| framework_of_args(training_args));
    if training_args.overlap_moe_expert_parallel_comm == Some(true)
        && framework != TrainingFramework::MegatronCore
    {
        bail!(
            "--overlap-moe-expert-parallel-comm is Megatron-Core's combined 1F1B schedule, which --framework {} does not run; use --framework megatron-core or drop the flag",
            framework.as_str()
        );
    }
    let overlap = overlap_over(
        training_args,
        saved
            .and_then(|f| f.overlap)
            .unwrap_or(framework.default_overlap()),
    );
    let kernel_fusion = kernel_fusion_of(framework, training_args, plan_file)?;
    let (moe_imbalance, moe_capacity_factor) = moe_routing_of(&model, training_args, file)?;
    let moe_dispatch = moe_dispatch_of(&model, training_args, plan_file)?;
    check_framework_runs_experts(&model, framework, moe_dispatch, training_args)?;
    if let Some(local) = local_batch
        && framework != TrainingFramework::Torchtitan
    {
        // Said in the words of where the value came from: the flag, or the plan file's key.
        let (quoted, framework_words, fix) = match (training_args.local_batch, file) {
            (None, Some((_, path))) => (
                format!("local_batch: {local} in {path}"),
                format!("the plan's framework ({})", framework.as_str()),
                "set framework: torchtitan or delete the local_batch line",
            ),
            _ => (
                "--local-batch".to_string(),
                format!("--framework {}", framework.as_str()),
                "use --framework torchtitan or drop --local-batch",
            ),
        };
        bail!(
            "{quoted} is torchtitan's local_batch_size (one pipeline schedule per gradient-accumulation step), but {framework_words} runs every micro-batch of a step in one schedule; {fix}"
        );
    }
    // A pasted launch line's --cp-comm-type is the line's, as its overlap switches are: a
    // --framework beside it does not replace it (it did, without a word: a p2p ring priced as
    // DeepSpeed-Ulysses or torchtitan's all-gather).
    let launch_exchange = file
        .filter(|(_, path)| *path == super::megatron_paste::LAUNCH_LINE_ORIGIN)
        .and_then(|(f, _)| f.cp_exchange.filter(|_| f.plan.cp > 1))
        .filter(|_| training_args.cp_exchange.is_none());
    if let Some(exchange) = launch_exchange
        && !framework.runs_cp_exchange(exchange)
    {
        bail!(
            "--megatron-args: --cp-comm-type {} ({}) with --framework {}, which does not run it (it runs {}); drop --cp-comm-type to plan {}'s own exchange, or use --framework megatron-core",
            exchange.megatron_cp_comm_type().unwrap_or("p2p"),
            exchange.as_str(),
            framework.as_str(),
            framework.default_cp_exchange().as_str(),
            framework.as_str()
        );
    }
    let cp_exchange = match training_args.cp_exchange {
        Some(arg) => arg.exchange(),
        // A file's exchange, unless the file has no context parallelism and its framework no
        // longer runs that exchange (DeepSpeed's files from before Ulysses, 2026-12-05, say
        // kv-ring): with cp 1 nothing is exchanged and no number depends on it.
        None => match (
            launch_exchange,
            saved.and_then(|f| f.cp_exchange.map(|e| (e, f.plan.cp))),
        ) {
            (Some(exchange), _) => exchange,
            (None, Some((exchange, cp))) if cp > 1 || framework.runs_cp_exchange(exchange) => {
                exchange
            }
            _ => framework.default_cp_exchange(),
        },
    };
    if training_args.cp_exchange.is_none()
        && let Some(file) = saved
        && file.cp_exchange.is_none()
        && file.plan.cp > 1
        && framework == TrainingFramework::Torchtitan
    {
        held_notes::hold(format!(
            "note: the plan file states no cp_exchange: its context parallelism is evaluated as torchtitan runs it, {} (files written before 2026-12-02 were evaluated with kv-ring; give --cp-exchange kv-ring for that)",
            cp_exchange.as_str()
        ));
    }
    // An exchange and a framework both read from the plan file are said in its keys: the user
    // gave neither flag.
    if training_args.cp_exchange.is_none()
        && saved.is_some_and(|f| f.cp_exchange.is_some() && f.framework.is_some())
        && !framework.runs_cp_exchange(cp_exchange)
    {
        let path = file.map_or("the plan file", |(_, path)| path);
        let runs_on = match cp_exchange {
            CpExchange::TorchAllGather => TrainingFramework::Torchtitan,
            _ => TrainingFramework::MegatronCore,
        };
        bail!(
            "{path}: cp_exchange: {} runs under framework: {}, and the file says framework: {}; set cp_exchange: {} (or drop it for the framework's own), or framework: {}",
            cp_exchange.as_str(),
            runs_on.as_str(),
            framework.as_str(),
            framework.default_cp_exchange().as_str(),
            runs_on.as_str()
        );
    }
    if !framework.runs_cp_exchange(cp_exchange) {
        match (framework, cp_exchange) {
            (TrainingFramework::Deepspeed, _) => {
                let given = if training_args.cp_exchange.is_some() {
                    format!("--cp-exchange {}", cp_exchange.as_str())
                } else {
                    format!("cp_exchange: {} in the plan file", cp_exchange.as_str())
                };
                bail!(
                    "{given} with --framework deepspeed: DeepSpeed's sequence parallelism is Ulysses, the all-to-all over heads (head-all-to-all); its rings are Megatron-Core's and torchtitan's; use --cp-exchange head-all-to-all, or --framework megatron-core"
                );
            }
            (_, CpExchange::TorchAllGather) => bail!(
                "--cp-exchange torch-all-gather is PyTorch's context_parallel as torchtitan runs it, which --framework {} does not run; use --framework torchtitan or drop --cp-exchange",
                framework.as_str()
            ),
            _ => bail!(
                "--cp-exchange {} is Transformer Engine's context parallelism under Megatron-Core (--cp-comm-type {}), which --framework {} does not run; use --framework megatron-core, or drop --cp-exchange",
                cp_exchange.as_str(),
                cp_exchange.megatron_cp_comm_type().unwrap_or("p2p"),
                framework.as_str()
            ),
        }
    }
    // The file's recipe is the file's whatever --framework says (a framework that cannot run it
    // refuses it below).
    let fp8_scaling = fp8_scaling_of(framework, training_args, file)?;
    let bf16_layers = bf16_layers_of(&model, framework, training_args, file)?;
    // Megatron-Core refuses bf16 layers under delayed scaling whatever the plan: said once here, as
    // the search would otherwise refuse every plan and blame the cluster's shape.
    if !bf16_layers.is_none()
        && fp8_scaling == Fp8Scaling::Delayed
        && precision_over_file(training_args, plan_file) == Precision::Fp8
    {
        bail!("{}", PlanError::Bf16LayersWithDelayedScaling);
    }
    let recompute_modules = recompute_modules_of(&model, framework, training_args, file)?;
    let pp_schedule = pp_schedule_of(framework, kernel_fusion, training_args, plan_file)?;
    let cpu_offload_layers = cpu_offload_layers_of(
        &model,
        &cluster,
        &gpu_reference,
        framework,
        training_args,
        file,
    )?;
    let price_per_gpu_hour = price_per_gpu_hour_of(
        training_args,
        tokens,
        file.and_then(|(f, path)| f.price_per_gpu_hour.map(|price| (price, path))),
    )?;
    let training = Training {
        price_per_gpu_hour,
        module_precision: crate::training::ModulePrecision::NONE,
        bf16_layers,
        pp_schedule,
        cpu_offload_layers,
        fp8_scaling,
        local_batch,
        cp_exchange,
        recompute_modules,
        fsdp_syncs_once_per_step: false,
        pipeline_keeps_outputs: false,
        // Set from a launch line's or eval's --delay-wgrad-compute after this.
        delay_wgrad_compute: false,
        eager_glu_clamp: false,
        deepspeed_bf16_optimizer: false,
        // Only where it prices something: torchtitan builds its GPT-OSS experts (biased,
        // clamped GLU) for GPT-OSS models alone (`ExpertEpilogue::of`); a dense or other MoE
        // model's JSON claimed them.
        torchtitan_gpt_oss_experts: framework == TrainingFramework::Torchtitan
            && model.moe.is_some_and(|moe| moe.glu_clamp_limit.is_some()),
        sdpa_repeats_kv: framework.sdpa_repeats_kv(),
        gradient_accumulation_fusion: training_args
            .gradient_accumulation_fusion
            .or(plan_file.and_then(|f| f.gradient_accumulation_fusion))
            .unwrap_or(true),
        rope_fusion: rope_fusion_of(&model, framework, training_args, plan_file)?,
        seq_len: model.seq_len,
        global_batch,
        grad_dtype: match training_args.grad_dtype {
            Some(GradDtypeArg::Bf16) => GradDtype::Bf16,
            Some(GradDtypeArg::Fp32) => GradDtype::Fp32,
            None => plan_file
                .and_then(|f| f.grad_dtype)
                .unwrap_or(framework.default_grad_dtype()),
        },
        optimizer_states: match training_args.optimizer_states {
            Some(arg) => arg.states(),
            // A saved plan or a launch line keeps its states whatever --framework says; a framework
            // that cannot keep them is refused below rather than silently given its default.
            None => plan_file
                .and_then(|f| f.optimizer_states)
                .unwrap_or(framework.default_optimizer_states()),
        },
        framework,
        overlap,
        moe_imbalance,
        moe_capacity_factor,
        moe_dispatch,
        // A saved plan keeps its parameter gather (a pasted launch line sets it after this).
        fp8_param_gather: plan_file
            .and_then(|f| f.fp8_param_gather)
            .filter(|_| training_args.framework.is_none())
            .unwrap_or(framework.fp8_param_gather()),
        kernel_fusion,
        loss: framework.default_loss_kernel(kernel_fusion),
        tokens,
        attention: match training_args.attention {
            Some(AttentionArg::Flash) => AttentionKernel::Flash,
            Some(AttentionArg::Unfused) => AttentionKernel::Unfused,
            None => plan_file
                .and_then(|f| f.attention)
                .unwrap_or(AttentionKernel::Flash),
        },
    };
    // A file saved before it kept these keys says what it was evaluated with in their place.
    let from_saved_file =
        file.filter(|(_, path)| *path != super::megatron_paste::LAUNCH_LINE_ORIGIN);
    // The overlap the plan runs with is the default under the overlap flags given (`overlap_over`):
    // the note names that one, and nothing where every flag was given.
    let overlap_flags_given = [
        training_args.tp_comm_overlap.is_some(),
        training_args.overlap_grad_reduce.is_some(),
        training_args.overlap_param_gather.is_some(),
        training_args.overlap_p2p_comm.is_some(),
        training_args.overlap_moe_expert_parallel_comm.is_some(),
    ];
    super::saved_plan_keys::note_assumed_keys(
        from_saved_file,
        saved.map(|_| framework),
        saved
            .filter(|_| overlap_flags_given.contains(&false))
            .map(|_| (training.overlap, overlap_flags_given.contains(&true))),
        training_args
            .attention
            .is_none()
            .then_some(training.attention),
    );
    // The rule of `unsupported_by`'s words, without the flag fix after its last "; " (Muon's
    // rule holds a ';' of its own inside parentheses, which the first one cut in half).
    let without_fix = |why: &'static str| why.rsplit_once("; ").map_or(why, |(rule, _)| rule);
    if let Some(why) = training.optimizer_states.unsupported_by(framework) {
        // Both from the plan file: said in its keys, the fix an edit of it (the flags' message
        // named --optimizer-states and --framework, which the user never typed).
        if let (Some((_, path)), None, None) = (
            file,
            &training_args.optimizer_states,
            training_args.framework,
        ) && plan_file.is_some_and(|f| f.optimizer_states.is_some())
        {
            // The file may leave the framework out: then it is the default, and said so.
            let framework_words = if plan_file.is_some_and(|f| f.framework.is_some()) {
                format!("framework: {}", framework.as_str())
            } else {
                format!(
                    "framework: {} (the default; the file sets no framework)",
                    framework.as_str()
                )
            };
            bail!(
                "{path}: optimizer_states: {} is not how {framework_words} stores its optimizer: {}; set framework: {} or optimizer_states: fp32",
                training.optimizer_states.as_str(),
                without_fix(why),
                match training.optimizer_states {
                    crate::training::OptimizerStates::Bf16Moments
                    | crate::training::OptimizerStates::PrecisionAware
                    | crate::training::OptimizerStates::Muon => "megatron-core",
                    _ => "torchtitan",
                },
            );
        }
        // The file's states under a typed --framework: the file's key, and the fixes that keep
        // the framework asked for (the flags' message named --optimizer-states, never typed, and
        // offered the file's framework in place of the one typed).
        if let (Some((_, path)), None, Some(_)) = (
            file,
            &training_args.optimizer_states,
            training_args.framework,
        ) && path != super::megatron_paste::LAUNCH_LINE_ORIGIN
            && plan_file.is_some_and(|f| f.optimizer_states.is_some())
        {
            bail!(
                "optimizer_states: {} in {path} is not how --framework {} stores its optimizer: {}; give --optimizer-states {} (its own) with it, or drop --framework to evaluate the file as saved",
                training.optimizer_states.as_str(),
                framework.as_str(),
                without_fix(why),
                framework.default_optimizer_states().as_str()
            );
        }
        bail!(
            "--optimizer-states {} is not how --framework {} stores its optimizer: {why}",
            training.optimizer_states.as_str(),
            framework.as_str()
        );
    }
    // A stack whose matrices Muon's price does not list is refused for the scenario, before any
    // search: `plan` refused every candidate for it (`PlanError::MuonNotPriced`) and then said
    // "no valid plan exists" in the shape rules' words, with a --global-batch fix equal to the
    // batch given. Said in the words of where Muon came from.
    if training.optimizer_states == crate::training::OptimizerStates::Muon
        && let Some(what) = crate::cost::muon::unpriced(&model)
    {
        let rule = "tpsim prices Muon's Newton-Schulz step for transformer layers only";
        match file {
            Some((_, path)) if path == super::megatron_paste::LAUNCH_LINE_ORIGIN => {
                bail!("--optimizer muon with {what}: {rule}; use --optimizer adam for this model")
            }
            Some((_, path))
                if training_args.optimizer_states.is_none()
                    && plan_file.is_some_and(|f| f.optimizer_states.is_some()) =>
            {
                bail!(
                    "{path}: optimizer_states: muon with {what}: {rule}; set optimizer_states: fp32 (Adam) for this model"
                )
            }
            _ => bail!("{}", crate::plan::PlanError::MuonNotPriced { what }),
        }
    }
    if let Some((file, path)) = file
        && path != super::megatron_paste::LAUNCH_LINE_ORIGIN
        && let Some(note) =
            super::framework_over_file::replaced_settings_note(file, path, training_args, &training)
    {
        held_notes::hold(note);
    }
    Ok(Scenario {
        model,
        model_origin,
        cluster,
        gpu_reference,
        training,
        gpu_note,
        seq_len_note,
        seq_len_source,
        spec_file,
    })
}

/// Holds plans below `--max-memory-gib` (or a plan file's `max_memory_gib:`; the flag wins) on
/// this GPU. A limit at or above the GPU's memory changes nothing and is said so in a held note.
fn apply_memory_limit(
    gpu: &mut crate::cluster::GpuProfile,
    flag: Option<f64>,
    file: Option<f64>,
) -> Result<()> {
    let (limit, name) = match (flag, file) {
        (Some(limit), _) => (limit, "--max-memory-gib"),
        (None, Some(limit)) => (limit, "max_memory_gib:"),
        (None, None) => return Ok(()),
    };
    // The value as typed, short: `1e308`, not 309 digits (`units::show_number`).
    let shown = crate::units::show_number(limit);
    if !(limit.is_finite() && limit > 0.0) {
        bail!(
            "{name} {shown} is not a memory size: a plan needs a finite number of GiB above 0 per GPU; give the GiB each GPU may use, e.g. {name} {:.0}",
            (gpu.hbm_capacity_gib * 0.9).floor()
        );
    }
    // Below the floor of a profile's memory no plan fits (every plan holds the CUDA context and
    // workspaces), and the limit would print as "0.0 GiB" beside what plans need.
    let floor = crate::cluster::HBM_CAPACITY_GIB.min;
    if limit < floor {
        bail!(
            "{name} {shown} is below {floor} GiB, the least memory per GPU tpsim models (a GPU profile's hbm_capacity_gib is at least {floor}); give the GiB each GPU may use, e.g. {name} {:.0}",
            (gpu.hbm_capacity_gib * 0.9).floor()
        );
    }
    if limit >= gpu.hbm_capacity_gib {
        held_notes::hold(format!(
            "note: {name} {shown} is not below the {:.1} GiB of {}, so plans use the GPU's whole memory; give less to keep room free",
            gpu.hbm_capacity_gib, gpu.name
        ));
        return Ok(());
    }
    gpu.memory_limit_gib = Some(limit);
    Ok(())
}

/// Refuses a pinned ZeRO stage the optimizer-state format cannot run at, with the error
/// `ParallelPlan::build` gives a plan at that stage (`OptimizerStates::allows_zero`).
pub(super) fn check_zero_pin_for_optimizer_states(
    training: &Training,
    zero: Option<u8>,
) -> Result<(), PlanError> {
    match zero {
        Some(zero) if !training.optimizer_states.allows_zero(zero) => {
            let (rule, fix) = training.optimizer_states.zero_rule();
            Err(PlanError::ZeroForOptimizerStates {
                zero,
                states: training.optimizer_states.as_str(),
                rule,
                fix,
            })
        }
        _ => Ok(()),
    }
}

/// Whether rotary embeddings run as one fused kernel (`Training::rope_fusion`): as a launch line
/// (`--no-rope-fusion`) or plan file (`rope_fusion`) says, else the framework's default
/// (`TrainingFramework::fuses_rope_by_default`), so that shape flags and a pasted line with the
/// same `--position-embedding-type` get one price. Turning it off is Megatron-Core's switch:
/// torchtitan's rotation is Inductor's kernel under `torch.compile` and eager operators without
/// it (`--torch-compile`), DeepSpeed's and 2021 Megatron-LM's are not modelled apart.
fn rope_fusion_of(
    model: &Model,
    framework: TrainingFramework,
    args: &TrainingArgs,
    file: Option<&PlanFile>,
) -> Result<bool> {
    let given = args.rope_fusion.or(file.and_then(|f| f.rope_fusion));
    if given == Some(false) && framework != TrainingFramework::MegatronCore {
        bail!(
            "rope_fusion: false (Megatron-LM's --no-rope-fusion) is Megatron-Core's switch, and --framework {} runs its rotary embedding its own way; drop it, or use --framework megatron-core",
            framework.as_str()
        );
    }
    Ok(given.unwrap_or(framework.fuses_rope_by_default(model.position_embedding)))
}

/// Fused or eager element-wise kernels: `--torch-compile` under torchtitan, else what a saved plan
/// evaluated as the same framework says, else the framework's default. Other frameworks ship fused
/// kernels, so the flag, or a plan file saying `kernel_fusion: eager` for one, is refused rather than
/// ignored.
fn kernel_fusion_of(
    framework: TrainingFramework,
    args: &TrainingArgs,
    plan_file: Option<&PlanFile>,
) -> Result<KernelFusion> {
    let runs_eager = framework == TrainingFramework::Torchtitan;
    match args.torch_compile {
        Some(compile) if runs_eager => Ok(if compile {
            KernelFusion::Fused
        } else {
            KernelFusion::Eager
        }),
        Some(compile) => bail!(
            "--torch-compile {compile} applies to --framework torchtitan only ({} runs its own fused kernels); drop --torch-compile or add --framework torchtitan",
            framework.as_str()
        ),
        None => {
            let saved = plan_file
                .filter(|f| f.framework.unwrap_or(TrainingFramework::MegatronCore) == framework)
                .and_then(|f| f.kernel_fusion);
            match saved {
                Some(KernelFusion::Eager) if !runs_eager => bail!(
                    "the plan file's kernel_fusion: eager applies to framework: torchtitan only ({} runs its own fused kernels); remove the kernel_fusion line or set framework: torchtitan",
                    framework.as_str()
                ),
                Some(fusion) => Ok(fusion),
                None => Ok(framework.default_kernel_fusion()),
            }
        }
    }
}

pub(super) fn summaries(s: &Scenario) -> (ModelSummary, ClusterSummary) {
    (
        ModelSummary::new(
            &s.model,
            &match &s.seq_len_note {
                Some(note) => format!("{}; {note}", s.model_origin),
                None => s.model_origin.clone(),
            },
        ),
        ClusterSummary {
            // A `--gpu` file under a bundled GPU's name whose numbers are not that GPU's is named
            // in the cluster line as the file's profile.
            gpu_file: (s.gpu_reference != s.cluster.gpu.name)
                .then(|| specs::load_bundled_gpu(&s.cluster.gpu.name).ok())
                .flatten()
                .map(|bundled| s.cluster.gpu.differences_from(&bundled))
                .filter(|differ| !differ.is_empty())
                .map(|differ| (s.gpu_reference.clone(), differ)),
            ..ClusterSummary::new(&s.cluster)
        },
    )
}

/// The spec `plan --save` writes for `model`: its shape, and where `spec` is the file it was read
/// from (`Scenario::spec_file`), that file's description, sources and published counts (a saved
/// bundled model wrote `description: null`), and its `seq_len_assumed` while the length is its.
pub(super) fn model_file_of(model: &Model, spec: Option<&ModelFile>) -> ModelFile {
    let mut file = model.to_file();
    if let Some(spec) = spec {
        file.description = spec.description.clone();
        file.source = spec.source.clone();
        file.published_params_b = spec.published_params_b;
        file.published_active_params_b = spec.published_active_params_b;
        file.seq_len_assumed = spec.seq_len_assumed && spec.seq_len == model.seq_len;
    }
    file
}

/// The data-parallel degrees a split of `cluster` can have (tp × pp × dp = GPUs, with tp and pp
/// as the search allows them; see `planner::enumerate`).
fn dp_degrees(model: &Model, cluster: &Cluster, options: SearchOptions) -> Vec<u32> {
    let gpus = cluster.total_gpus();
    let mut dps: Vec<u32> = tp_degrees(model, cluster, options.allow_cross_node_tp)
        .into_iter()
        .flat_map(|tp| {
            (1..=model.layers.min(gpus / tp))
                .filter(move |&pp| {
                    (gpus / tp).is_multiple_of(pp)
                        && (model.layers.is_multiple_of(pp) || options.allow_uneven_pp)
                })
                .map(move |pp| gpus / (tp * pp))
        })
        .collect();
    dps.sort_unstable();
    dps.dedup();
    dps
}

/// The smallest global batch, at least `at_least` sequences, that some split divides; `None` when
/// no dp degree exists at all (the model cannot be split over this cluster).
pub(super) fn smallest_splittable_batch(
    model: &Model,
    cluster: &Cluster,
    options: SearchOptions,
    at_least: u32,
) -> Option<u32> {
    let dps = dp_degrees(model, cluster, options);
    dps.iter()
        .map(|&dp| at_least.div_ceil(dp) * dp)
        .filter(|&b| b <= MAX_GLOBAL_BATCH)
        .min()
}

/// The note for a global batch no input gave: what the default is, and where to give the batch
/// (`file`: the plan file it would be a line of; otherwise the flag). `plan`, `eval`, `report`,
/// `compare` and `sweep` all say it, so no command uses the default silently.
/// `seq_len_source` says whose the sequence length is, for the batch at a length other than
/// GPT-3's. The tokens per step it offers scale with the cluster, so a small one is named beside
/// the largest: Llama 3 8B on 8 H100s trained 128 sequences x 8192 tokens (Megatron-Bridge's
/// 25.11 performance summary, docs/performance-summary-archive.md at 067f987d, DGX-H100 line 589;
/// validation/modern_runs.yaml `mbridge-25.11-pretrain-llama3_8b-h100-8g-fp8-gbs128`), Llama 3
/// 405B 16M tokens on 16K GPUs (Dubey et al. 2024 §3.4), where the default (GPT-3's 3.1M
/// tokens) would hand those 8 GPUs three times the tokens a step they trained.
pub(super) fn default_batch_note(
    training: &Training,
    file: Option<&str>,
    seq_len_source: SeqLenSource,
) -> String {
    let batch = training.global_batch;
    let (missing, fix) = match file {
        Some(path) => (
            format!("{} gives no global_batch", input_file::quote(path)),
            "as a line global_batch: SEQUENCES in the file, or pass --global-batch SEQUENCES",
        ),
        None => (
            "--global-batch not given".to_string(),
            "as --global-batch SEQUENCES",
        ),
    };
    format!(
        "note: {missing}: {} x {} tokens = {} tokens per step ({}); give the tokens per step you train with {fix} (Llama 3 8B: 1M tokens on 8 GPUs, 128 x 8192; Llama 3 405B: 16M tokens on 16K GPUs)",
        crate::report::sequences(batch),
        training.seq_len,
        crate::units::tokens_in_words(f64::from(batch) * f64::from(training.seq_len)),
        if training.seq_len == GPT3_SEQ_LEN {
            "GPT-3 175B's batch, Brown et al. 2020".to_string()
        } else {
            format!(
                "GPT-3 175B's {} tokens, {DEFAULT_GLOBAL_BATCH} x {GPT3_SEQ_LEN}, Brown et al. 2020, in sequences of {}",
                crate::units::tokens_in_words(DEFAULT_TOKENS_PER_STEP as f64),
                seq_len_source.words(training.seq_len)
            )
        }
    )
}

/// What `plan` and `eval` say about the global batch on stderr: where the default comes from when
/// `--global-batch` was not given, and a warning when the batch is too small for the cluster.
///
/// With TP inside a node (tp ≤ GPUs per node), pp × dp ≥ nodes, and a step has m = global batch /
/// dp micro-batches of at least one sequence, so pp / m ≥ nodes / global batch: with fewer
/// sequences than nodes every split runs more pipeline stages than micro-batches and idles (the
/// bubble is (p−1)/(v·m), Narayanan et al. 2021 §2.2, at least (1 − 1/p)/v there; interleaving
/// divides it by v at the cost of v times the PP traffic). At a sequence per node or more a split
/// without that exists (TP in the node, DP over the nodes, a pipeline only as deep as memory
/// needs, interleaved): Llama 3 405B trained 2,048 sequences on 1,024 nodes at 43% MFU (Dubey et
/// al. 2024 Table 4), so a threshold of 3 or more per node would warn about a batch that works.
/// Tokens per step is the knob training runs scale with the cluster: GPT-3 175B 3.2M (Brown et
/// al. 2020 Table 2.1), Llama 3 405B 16M on 16K GPUs (Dubey et al. 2024 §3.4).
/// `file` is the plan file the batch would be a line of: the note then offers its key, the flag
/// as the alternative.
pub(super) fn global_batch_advice(
    s: &Scenario,
    given: bool,
    file: Option<&str>,
    options: SearchOptions,
) -> Vec<String> {
    let batch = s.training.global_batch;
    let nodes = s.cluster.nodes;
    let mut lines: Vec<String> = s.gpu_note.iter().cloned().collect();
    if !given {
        lines.push(default_batch_note(&s.training, file, s.seq_len_source));
    }
    // Context parallelism splits each sequence over cp ranks, so a long-context batch of few
    // sequences still fills the GPUs: count each sequence as the most CP ranks it can take (the
    // pinned cp, else the deepest the search tries, `planner::cp_degrees`).
    let cp = match options.pins.cp {
        Some(cp) => cp,
        None if s.training.framework.runs_context_parallelism() => crate::planner::cp_degrees(
            s.training.seq_len,
            s.cluster.total_gpus(),
            s.training.framework,
        )
        .into_iter()
        .max()
        .unwrap_or(1),
        None => 1,
    };
    // One node can take the whole model with TP inside it: no pipeline, no replica left idle.
    if nodes > 1 && u64::from(batch) * u64::from(cp) < u64::from(nodes) {
        let suggestion =
            smallest_splittable_batch(&s.model, &s.cluster, options, nodes.div_ceil(cp))
                .map(|b| format!("; e.g. --global-batch {b}"))
                .unwrap_or_default();
        lines.push(format!(
            "warning: --global-batch {batch} is small for {nodes} nodes: fewer sequences than nodes{}, so with TP inside a node every split has at least {} = {:.2} pipeline stages per micro-batch and the pipeline idles (bubble (p-1)/(v·m)), or no split exists; give at least {}{suggestion}",
            if cp > 1 {
                format!(" even with each sequence over cp {cp} ranks")
            } else {
                String::new()
            },
            if cp > 1 {
                "nodes/(batch·cp)"
            } else {
                "nodes/batch"
            },
            f64::from(nodes) / (f64::from(batch) * f64::from(cp)),
            if cp > 1 {
                format!("one sequence per {cp} nodes")
            } else {
                "one sequence per node".to_string()
            },
        ));
    }
    lines
}

/// Megatron-Core's selective recompute modules: `--recompute-modules`; else what a plan file or
/// launch line says (none said: Megatron-Core's default, the attention core); else, under
/// Megatron-Core, the output-discarding modules the model has
/// (`RecomputeModules::output_discarding_for`), which is what tpsim's own `--recompute
/// selective` means there, in `plan`, `eval`, `sweep` and `compare` alike: Megatron-Core's
/// default, `core_attn`, frees nothing with fused attention. Given modules are refused under
/// another framework and where the model has nothing for them (`RecomputeModules::check_model`);
/// a file's under another `--framework` are dropped with a note.
fn recompute_modules_of(
    model: &Model,
    framework: TrainingFramework,
    training_args: &TrainingArgs,
    file: Option<(&PlanFile, &str)>,
) -> Result<Option<RecomputeModules>> {
    let megatron_core = framework == TrainingFramework::MegatronCore;
    let launch_line =
        file.is_some_and(|(_, path)| path == super::megatron_paste::LAUNCH_LINE_ORIGIN);
    let (modules, origin) = match (&training_args.recompute_modules, file.map(|(f, _)| f)) {
        (Some(words), _) => (
            RecomputeModules::parse(words)
                .map_err(|why| anyhow!("--recompute-modules {}: {why}", words.join(" ")))?,
            format!("--recompute-modules {}", words.join(" ")),
        ),
        (None, Some(file)) => match file.recompute_modules {
            Some(modules) if !megatron_core => {
                held_notes::hold(format!(
                    "note: the plan's recompute_modules ({}) are Megatron-Core's; --framework {} recomputes selectively its own way, so they are not used",
                    modules.describe(),
                    framework.as_str()
                ));
                return Ok(None);
            }
            Some(modules) if launch_line => (
                modules,
                format!(
                    "--megatron-args: --recompute-modules {}",
                    modules.megatron_words()
                ),
            ),
            Some(modules) => (
                modules,
                format!("the plan's recompute_modules ({})", modules.describe()),
            ),
            // `plan --save` writes the modules only for a selective plan; for another, what
            // selective recompute means (in `eval --report`'s search) is what `plan` searched.
            None if megatron_core && file.plan.recompute != Recompute::Selective => {
                return Ok(RecomputeModules::output_discarding_for(model));
            }
            None => return Ok(None),
        },
        (None, None) if megatron_core => {
            return Ok(RecomputeModules::output_discarding_for(model));
        }
        (None, None) => return Ok(None),
    };
    if !megatron_core {
        bail!(
            "{origin} is Megatron-Core's selective recompute, which --framework {} does not run; use --framework megatron-core or drop --recompute-modules",
            framework.as_str()
        );
    }
    modules
        .check_model(model)
        .map_err(|why| anyhow!("{origin}: {why}; drop that module"))?;
    Ok(Some(modules))
}

/// Layers whose activations are offloaded to the CPU: the flag's, else the plan file's, else none.
/// Megatron-Core's (Transformer Engine's CPU offload context under `--cpu-offloading-num-layers`),
/// below the model's layer count (`TransformerConfig.__post_init__`), on a GPU whose profile
/// gives its host link.
fn cpu_offload_layers_of(
    model: &crate::model::Model,
    cluster: &crate::cluster::Cluster,
    gpu_reference: &str,
    framework: TrainingFramework,
    training_args: &crate::cli::TrainingArgs,
    saved: Option<(&PlanFile, &str)>,
) -> Result<u32> {
    let (layers, from) = match (
        training_args.cpu_offload_layers,
        saved.and_then(|(f, path)| f.cpu_offload_layers.map(|n| (n, path))),
    ) {
        (Some(n), _) => (n, format!("--cpu-offload-layers {n}")),
        // A pasted launch line is no file: its own flag is named.
        (None, Some((n, super::megatron_paste::LAUNCH_LINE_ORIGIN))) => (
            n,
            format!("--megatron-args: --cpu-offloading-num-layers {n}"),
        ),
        (None, Some((n, _))) => (n, format!("cpu_offload_layers: {n} in the plan file")),
        (None, None) => return Ok(0),
    };
    if layers == 0 {
        return Ok(0);
    }
    if framework != TrainingFramework::MegatronCore {
        // The framework as it was given: a plan file's `framework:` line is no flag typed.
        let file_framework = saved
            .filter(|(_, path)| *path != super::megatron_paste::LAUNCH_LINE_ORIGIN)
            .and_then(|(f, _)| f.framework);
        let which = match (training_args.framework, file_framework) {
            (None, Some(f)) => format!("framework: {} in the plan file", f.as_str()),
            _ => format!("--framework {}", framework.as_str()),
        };
        bail!(
            "{from} is Megatron-Core's activation offloading (--cpu-offloading-num-layers, Transformer Engine's CPU offload context), which {which} does not run; use --framework megatron-core, or drop it"
        );
    }
    if layers >= model.layers && model.layers == 1 {
        bail!(
            "{from} offloads the model's only layer; Megatron-Core offloads fewer layers than the model has (transformer_config.py: \"CPU offloading can be done only for layers less than 1\"), so a one-layer model offloads none; drop it"
        );
    }
    if layers >= model.layers {
        bail!(
            "{from} offloads {layers} of the model's {} layers; Megatron-Core offloads fewer than all (transformer_config.py: \"CPU offloading can be done only for layers less than {}\"); give at most {}",
            model.layers,
            model.layers,
            model.layers - 1
        );
    }
    let profile = if gpu_reference == cluster.gpu.name {
        cluster.gpu.name.clone()
    } else {
        format!("{} ({gpu_reference})", cluster.gpu.name)
    };
    if cluster.gpu.host_link_gb_per_s.is_none() {
        bail!(
            "{from} copies activations over the GPU's link to host memory, which the {profile} profile does not give; add host_link_gb_per_s (per GPU per direction, e.g. 64 for PCIe Gen5 x16) to the profile, or drop it"
        );
    }
    if cluster.gpu.host_memory_gib_per_gpu.is_none() {
        bail!(
            "{from} keeps activations in host memory, whose size the {profile} profile does not give; add host_memory_gib_per_gpu (the node's system memory over its GPUs, e.g. 256 for a DGX H100's 2 TiB over 8) to the profile, or drop it"
        );
    }
    Ok(layers)
}

/// The pipeline schedule: the flag's, else the plan file's, else 1F1B. The V-shaped schedules are
/// PyTorch's pipelining's (torch.distributed.pipelining.schedules), which torchtitan runs and
/// Megatron-LM and DeepSpeed do not.
fn pp_schedule_of(
    framework: TrainingFramework,
    kernel_fusion: KernelFusion,
    training_args: &crate::cli::TrainingArgs,
    saved: Option<&PlanFile>,
) -> Result<crate::training::PipelineSchedule> {
    use crate::training::PipelineSchedule;
    let (schedule, from) = match (training_args.pp_schedule, saved.and_then(|f| f.pp_schedule)) {
        (Some(s), _) => (s, format!("--pp-schedule {}", s.as_str())),
        (None, Some(s)) => (s, format!("pp_schedule: {} in the plan file", s.as_str())),
        (None, None) => return Ok(PipelineSchedule::OneFOneB),
    };
    if schedule != PipelineSchedule::OneFOneB && framework != TrainingFramework::Torchtitan {
        // A file's schedule is fixed in the file: the fix is the framework flag typed over a
        // torchtitan file, or the file's lines ("add --framework torchtitan" to a command that
        // typed --framework megatron-core, and "drop the schedule", which no flag does).
        let file_framework = saved.and_then(|f| f.framework);
        let fix = match (training_args.pp_schedule, training_args.framework) {
            (Some(_), _) => "add --framework torchtitan, or drop the schedule".to_string(),
            (None, Some(_)) if file_framework == Some(TrainingFramework::Torchtitan) => format!(
                "drop --framework {} to run the file's framework, torchtitan, or give --pp-schedule 1f1b",
                framework.as_str()
            ),
            (None, Some(_)) => "give --framework torchtitan, or --pp-schedule 1f1b".to_string(),
            (None, None) => {
                "write framework: torchtitan in the file, or pp_schedule: 1f1b".to_string()
            }
        };
        bail!(
            "{from} is PyTorch's {} schedule, which torchtitan runs and {} does not (it runs 1F1B, interleaved with --vpp > 1); {fix}",
            schedule.torchtitan_name(2),
            framework.as_str()
        );
    }
    // PyTorch splits the backward with autograd on eager modules: `ScheduleZBVZeroBubble` and
    // `ScheduleDualPipeV` call `_check_torch_compile_compatibility` ("we dont support input/weight
    // backward split with torch.compile", schedules.py), and torchtitan's own tests say
    // "torch.compile is incompatible with those eager PP schedules"
    // (experiments/graph_trainer/tests/test_numerics.py).
    if schedule != PipelineSchedule::OneFOneB && kernel_fusion == KernelFusion::Fused {
        bail!(
            "{from} splits each backward into input and weight gradients on eager modules, which PyTorch does not do under torch.compile (torchtitan: \"torch.compile is incompatible with those eager PP schedules\"); drop --torch-compile, or use --pp-schedule 1f1b"
        );
    }
    Ok(schedule)
}
