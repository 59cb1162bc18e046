//! From flags (and a plan file) to one validated scenario: model, cluster and training settings.
//! Every command that evaluates plans starts here.

use anyhow::{Context, Result, anyhow, bail};

use super::calibration_commands;
use super::ecosystem_commands::{megatron_learned_positions, megatron_norm};
use crate::cli::{AttentionArg, ClusterArgs, GradDtypeArg, ModelArgs, StyleArg, TrainingArgs};
use crate::cluster::Cluster;
use crate::hf_config;
use crate::model::{Model, ModelFile, Norm};
use crate::planner::{SearchOptions, tp_degrees};
use crate::report::{ClusterSummary, ModelSummary};
use crate::shape::derive_shape;
use crate::specs::{self, PlanFile};
use crate::training::{AttentionKernel, DEFAULT_GLOBAL_BATCH, GradDtype, Training};
use crate::units::parse_count;

/// Largest cluster we accept: beyond this the input is a typo, not a cluster.
pub(super) const MAX_NODES: u32 = 131_072;
pub(super) const MAX_GPUS_PER_NODE: u32 = 72;
/// Largest global batch we accept, in sequences (GPT-3 used 1536; Llama 3 405B 16M tokens = 2048 × 8192).
pub(super) const MAX_GLOBAL_BATCH: u32 = 1 << 22;
/// Largest parameter count we derive a shape for.
pub(super) const MAX_PARAMS: f64 = 1e14;
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
}

pub(super) fn positive(flag: &str, value: u32, fix: &str) -> Result<u32> {
    if value == 0 {
        bail!("{flag} 0 must be at least 1; {fix}");
    }
    Ok(value)
}

pub(super) fn resolve_model(
    args: &ModelArgs,
    file: Option<(&PlanFile, &str)>,
    seq_len_flag: Option<u32>,
) -> Result<(Model, String)> {
    let seq_len_for_derived = seq_len_flag.unwrap_or(DEFAULT_SEQ_LEN);
    let from_count = |text: &str, flag: &'static str| -> Result<(Model, String)> {
        let params = parse_count(flag, text)?;
        if params > MAX_PARAMS {
            bail!(
                "{flag} {text} is more than 100T parameters, far beyond any trained model; check the value (B = 1e9, T = 1e12)"
            );
        }
        let model =
            derive_shape(params, seq_len_for_derived).with_context(|| format!("{flag} {text}"))?;
        Ok((model, format!("derived from --params {text}")))
    };
    if let Some(text) = &args.params {
        return from_count(text, "--params");
    }
    if let Some(path) = &args.hf_config {
        if !std::path::Path::new(path).exists() {
            bail!(
                "--hf-config {path}: cannot read it: no such file; give the path of a Hugging Face config.json (e.g. models/hf/llama-3-70b.json)"
            );
        }
        let model = hf_config::load(path, seq_len_flag)?;
        return Ok((model, format!("from Hugging Face config {path}")));
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
    if let Some(layers) = args.layers {
        let hidden = args
            .hidden
            .ok_or_else(|| anyhow!("--layers needs --hidden and --heads"))?;
        let heads = args
            .heads
            .ok_or_else(|| anyhow!("--layers needs --hidden and --heads"))?;
        let llama = args.style == Some(StyleArg::Llama);
        let model = Model::from_file(&ModelFile {
            name: format!("custom-l{layers}-h{hidden}"),
            description: None,
            source: None,
            published_params_b: None,
            layers,
            hidden,
            heads,
            kv_heads: args.kv_heads,
            ffn_hidden: args.ffn_hidden,
            vocab: args.vocab.unwrap_or(DEFAULT_VOCAB),
            seq_len: seq_len_for_derived,
            gated_mlp: args.gated_mlp,
            linear_bias: !(llama || args.disable_bias_linear),
            tied_embeddings: !(llama || args.untie_embeddings_and_output_weights),
            learned_position_embeddings: match args.position_embedding_type.as_deref() {
                Some(kind) => megatron_learned_positions(Some(kind))?,
                None => !llama,
            },
            norm: Some(match args.normalization.as_deref() {
                Some(norm) => megatron_norm(Some(norm))?,
                None if llama => Norm::Rmsnorm,
                None => Norm::Layernorm,
            }),
            dropout: !llama
                && args.hidden_dropout.is_none_or(|p| p > 0.0)
                && args.attention_dropout.is_none_or(|p| p > 0.0),
        })?;
        return Ok((model, "flags".to_string()));
    }
    if let Some((file, path)) = file {
        if let Some(reference) = &file.model {
            let model = specs::resolve_model_ref(reference, path)?;
            return Ok((model, format!("from {path}")));
        }
        if let Some(text) = &file.params {
            let params = parse_count("params", text).with_context(|| format!("in {path}"))?;
            let model = derive_shape(params, seq_len_for_derived)
                .with_context(|| format!("params {text} in {path}"))?;
            return Ok((model, format!("derived from params {text} in {path}")));
        }
    }
    bail!(
        "no model given: pass --params 512B, --model NAME|FILE (e.g. --model gpt3-175b) or --layers/--hidden/--heads"
    )
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
    let (mut model, model_origin) = resolve_model(model_args, file, seq_len_flag)?;
    if let Some(seq_len) = seq_len_flag {
        model.seq_len = seq_len;
    }

    let gpu_reference = cluster_args
        .gpu
        .clone()
        .or(plan_file.and_then(|f| f.gpu.clone()))
        .unwrap_or_else(|| "h100-sxm-80g".to_string());
    let gpu = specs::load_gpu(&gpu_reference)?;
    let (gpu, gpu_reference) = match &cluster_args.calibration {
        Some(path) => (calibration_commands::load_calibrated(path)?, path.clone()),
        None => (gpu, gpu_reference),
    };
    let nodes = cluster_args
        .nodes
        .or(plan_file.and_then(|f| f.nodes))
        .ok_or_else(|| {
            anyhow!(
                "--nodes is required: how many nodes of {} GPUs the cluster has (e.g. --nodes 32)",
                gpu.gpus_per_node
            )
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
    let cluster = Cluster {
        gpu,
        nodes,
        gpus_per_node,
    };

    let global_batch = training_args
        .global_batch
        .or(plan_file.and_then(|f| f.global_batch))
        .unwrap_or(DEFAULT_GLOBAL_BATCH);
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
    let tokens = match &training_args.tokens {
        Some(text) => Some(parse_count("--tokens", text)?),
        None => None,
    };
    let training = Training {
        seq_len: model.seq_len,
        global_batch,
        grad_dtype: match training_args.grad_dtype {
            Some(GradDtypeArg::Bf16) => GradDtype::Bf16,
            Some(GradDtypeArg::Fp32) => GradDtype::Fp32,
            None => plan_file
                .and_then(|f| f.grad_dtype)
                .unwrap_or(GradDtype::Bf16),
        },
        tokens,
        attention: match training_args.attention {
            Some(AttentionArg::Flash) => AttentionKernel::Flash,
            Some(AttentionArg::Unfused) => AttentionKernel::Unfused,
            None => plan_file
                .and_then(|f| f.attention)
                .unwrap_or(AttentionKernel::Flash),
        },
    };
    Ok(Scenario {
        model,
        model_origin,
        cluster,
        gpu_reference,
        training,
    })
}

pub(super) fn summaries(s: &Scenario) -> (ModelSummary, ClusterSummary) {
    (
        ModelSummary::new(&s.model, &s.model_origin),
        ClusterSummary::new(&s.cluster),
    )
}

pub(super) fn model_file_of(model: &Model) -> ModelFile {
    ModelFile {
        name: model.name.clone(),
        description: None,
        source: None,
        published_params_b: None,
        layers: model.layers,
        hidden: model.hidden,
        heads: model.heads,
        kv_heads: Some(model.kv_heads),
        ffn_hidden: Some(model.ffn_hidden),
        vocab: model.vocab,
        seq_len: model.seq_len,
        gated_mlp: model.gated_mlp,
        linear_bias: model.linear_bias,
        tied_embeddings: model.tied_embeddings,
        learned_position_embeddings: model.learned_position_embeddings,
        norm: Some(model.norm),
        dropout: model.dropout,
    }
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

/// What `plan` and `eval` say about the global batch on stderr: where the default comes from when
/// `--global-batch` was not given, and a warning when the batch is too small for the cluster.
///
/// With TP inside a node (tp ≤ GPUs per node), pp × dp ≥ nodes, and a step has m = global batch /
/// dp micro-batches of at least one sequence, so pp / m ≥ nodes / global batch: below 4 sequences
/// per node every split keeps the pipeline idle for at least a quarter of its work (the bubble is
/// (p−1)/(v·m), Narayanan et al. 2021 §2.2; interleaving divides it by v at the cost of v times
/// the PP traffic). Tokens per step is the knob training runs scale with the cluster: GPT-3 175B
/// 3.2M (Brown et al. 2020 Table 2.1), Llama 3 405B 16M on 16K GPUs (Dubey et al. 2024 §3.4).
pub(super) fn global_batch_advice(
    s: &Scenario,
    given: bool,
    options: SearchOptions,
) -> Vec<String> {
    let batch = s.training.global_batch;
    let nodes = s.cluster.nodes;
    let mut lines = Vec::new();
    if !given {
        lines.push(format!(
            "note: --global-batch not given: {batch} sequences x {} tokens = {:.1}M tokens per step, GPT-3 175B's batch (Brown et al. 2020); give the tokens per step you train with as --global-batch SEQUENCES (Llama 3 405B: 16M tokens on 16K GPUs)",
            s.training.seq_len,
            f64::from(batch) * f64::from(s.training.seq_len) / 1e6,
        ));
    }
    let per_node = 4;
    if u64::from(batch) < u64::from(per_node) * u64::from(nodes) {
        let suggestion = smallest_splittable_batch(
            &s.model,
            &s.cluster,
            options,
            nodes.saturating_mul(per_node),
        )
        .map(|b| format!("; e.g. --global-batch {b}"))
        .unwrap_or_default();
        lines.push(format!(
            "warning: --global-batch {batch} is small for {nodes} nodes: with TP inside a node every split has at least nodes/batch = {:.2} pipeline stages or replicas per micro-batch, so GPUs idle (bubble (p-1)/(v·m)) or no split exists; give at least {per_node} sequences per node{suggestion}",
            f64::from(nodes) / f64::from(batch),
        ));
    }
    lines
}
