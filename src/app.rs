//! Command handlers: turn flags into validated domain values, call the core, render. The only
//! module that touches files, stdout and anyhow.

use anyhow::{Context, Result, anyhow, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use crate::app_report::{
    Written, check_dir, details_of, schedule_note, write_eval_report, write_report,
};
use crate::cli::{
    AccuracyArgs, AttentionArg, ClusterArgs, Command, EvalArgs, Format, GradDtypeArg, ModelArgs,
    PlanArgs, RecomputeArg, ReportArgs, StyleArg, TrainingArgs,
};
use crate::cli::{
    Cli, CompareArgs, CompareFormat, CompletionsArgs, EmitTarget, SweepArgs, SweepAxis, SweepFormat,
};
use crate::cli::{FrameworkArg, PinArgs, PrecisionArg};
use crate::cluster::Cluster;
use crate::cost::Estimate;
use crate::cost::evaluate;
use crate::cost::simulated::simulate_plan;
use crate::emit::{self, Framework};
use crate::model::{Model, ModelFile, Norm, ShapeOverrides};
use crate::plan::Precision;
use crate::plan::{ParallelPlan, PlanError, PlanRequest, Recompute, divisors};
use crate::planner::{Pins, SearchOptions, refine_top, search};
use crate::report::{self, ClusterSummary, ModelSummary, Report, detail_for, plan_label};
use crate::shape::derive_shape;
use crate::specs::{self, ModelRef, PlanFile};
use crate::training::{
    AttentionKernel, DEFAULT_GLOBAL_BATCH, GradDtype, Overlap, Training, TrainingFramework,
};
use crate::units::{GIB, format_count, parse_count};
use crate::validation;
use crate::{chart_sweep, compare, hf_config, sweep};

/// Largest cluster we accept: beyond this the input is a typo, not a cluster.
const MAX_NODES: u32 = 131_072;
const MAX_GPUS_PER_NODE: u32 = 72;
/// Most worker threads we start for a search.
const MAX_THREADS: usize = 1024;
/// Largest global batch we accept, in sequences (GPT-3 used 1536; Llama 3 405B 16M tokens = 2048 × 8192).
const MAX_GLOBAL_BATCH: u32 = 1 << 22;
/// Largest parameter count we derive a shape for.
const MAX_PARAMS: f64 = 1e14;
/// Default sequence length for derived and flag-given shapes (GPT-3, Megatron SC'21).
const DEFAULT_SEQ_LEN: u32 = 2048;
/// Default vocabulary for flag-given shapes (Megatron-LM's padded GPT-2 vocabulary).
const DEFAULT_VOCAB: u32 = 51200;

/// What a command ended with: found plans, or valid input where nothing fits.
pub enum Outcome {
    Found,
    NothingFits,
}

pub fn run(command: Command) -> Result<Outcome> {
    match command {
        Command::Plan(args) => plan(args),
        Command::Eval(args) => eval(args, false),
        Command::Report(args) => report_command(args),
        Command::Accuracy(args) => accuracy(args),
        Command::Sweep(args) => sweep_command(args),
        Command::Compare(args) => compare_command(args),
        Command::Completions(args) => completions(args),
        Command::Calibrate(args) => calibration_commands::calibrate(args),
        Command::Validate(args) => calibration_commands::validate(args),
    }
}

/// `calibrate` and `validate` handlers (a child module, so they share `resolve_scenario`).
mod calibration_commands;
/// Megatron-LM in, framework configs out, sweep, compare, completions.
mod ecosystem_commands;
use ecosystem_commands::{
    apply_megatron_launch, attention_arg_of_backend, check_megatron_training,
    check_pasted_megatron, compare_command, completions, emit_best, emitted, framework_of,
    megatron_learned_positions, megatron_norm, megatron_plan_file, megatron_request,
    pasted_precision, pasted_split, pasted_zero, read_megatron_launch, sweep_command, target_name,
};

struct Scenario {
    model: Model,
    model_origin: String,
    cluster: Cluster,
    gpu_reference: String,
    training: Training,
}

fn positive(flag: &str, value: u32, fix: &str) -> Result<u32> {
    if value == 0 {
        bail!("{flag} 0 must be at least 1; {fix}");
    }
    Ok(value)
}

/// The model of the command line: from a source (--params, --hf-config, --model, shape flags or a
/// plan file), then the shape flags given over it (`--model grok-1 --layers 8`).
fn resolve_model(
    args: &ModelArgs,
    file: Option<(&PlanFile, &str)>,
    seq_len_flag: Option<u32>,
) -> Result<(Model, String)> {
    let (model, origin) = resolve_base_model(args, file, seq_len_flag)?;
    // The block-style switches describe a model built from shape flags; over a named model they
    // would be dropped without a word, so they are refused.
    if origin != "flags" {
        let style_flags = [
            ("--gated-mlp", args.gated_mlp),
            ("--style", args.style.is_some()),
            ("--disable-bias-linear", args.disable_bias_linear),
            (
                "--untie-embeddings-and-output-weights",
                args.untie_embeddings_and_output_weights,
            ),
            ("--normalization", args.normalization.is_some()),
            ("--hidden-dropout", args.hidden_dropout.is_some()),
            ("--attention-dropout", args.attention_dropout.is_some()),
            (
                "--position-embedding-type",
                args.position_embedding_type.is_some(),
            ),
        ];
        if let Some((flag, _)) = style_flags.iter().find(|(_, given)| *given) {
            bail!(
                "{flag} describes a model built from shape flags (--layers --hidden --heads); the model {} ({origin}) already fixes it: drop {flag}, or give the whole shape with flags",
                model.name
            );
        }
    }
    let overrides = shape_overrides(args, &model)?;
    if overrides == ShapeOverrides::default() {
        return Ok((model, origin));
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
        q_lora_rank: args.q_lora_rank,
        kv_lora_rank: args.kv_lora_rank,
        qk_head_dim: args.qk_head_dim,
        qk_pos_emb_head_dim: args.qk_pos_emb_head_dim,
        v_head_dim: args.v_head_dim,
    })
}

fn resolve_base_model(
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
        let loaded = hf_config::load(path, seq_len_flag)?;
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
        let model = Model::from_file(&ModelFile {
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
            qkv_bias: false,
            qk_norm: false,
            shared_layer_norm: false,
            mla: None,
            moe: None,
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
    if args.hidden.is_some() || args.heads.is_some() || args.num_experts.is_some() {
        bail!(
            "shape flags alone need --layers, --hidden and --heads (or --model NAME / --hf-config FILE for them to override)"
        );
    }
    bail!(
        "no model given: pass --params 512B, --model NAME|FILE (e.g. --model gpt3-175b) or --layers/--hidden/--heads"
    )
}

/// The framework `--framework` names (default: Megatron-Core, what current NVIDIA stacks run).
fn framework_of_args(args: &TrainingArgs) -> TrainingFramework {
    match args.framework {
        Some(FrameworkArg::MegatronLm2021) => TrainingFramework::MegatronLm2021,
        None | Some(FrameworkArg::MegatronCore) => TrainingFramework::MegatronCore,
        Some(FrameworkArg::Torchtitan) => TrainingFramework::Torchtitan,
        Some(FrameworkArg::Deepspeed) => TrainingFramework::Deepspeed,
    }
}

/// The framework's overlap defaults with each flag the user gave applied on top.
fn overlap_of_args(args: &TrainingArgs, framework: TrainingFramework) -> Overlap {
    let defaults = framework.default_overlap();
    Overlap {
        tp_comm: args.tp_comm_overlap.unwrap_or(defaults.tp_comm),
        grad_reduce: args.overlap_grad_reduce.unwrap_or(defaults.grad_reduce),
        param_gather: args.overlap_param_gather.unwrap_or(defaults.param_gather),
        p2p: args.overlap_p2p_comm.unwrap_or(defaults.p2p),
    }
}

/// The dimensions `plan` was pinned to, checked like `eval` checks them.
fn pins_of_args(args: &PinArgs) -> Result<Pins> {
    for (flag, value) in [
        ("--tp", args.tp),
        ("--pp", args.pp),
        ("--cp", args.cp),
        ("--dp", args.dp),
        ("--vpp", args.vpp),
        ("--micro-batch", args.micro_batch),
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
    Ok(Pins {
        tp: args.tp,
        cp: args.cp,
        pp: args.pp,
        dp: args.dp,
        vpp: args.vpp,
        micro_batch: args.micro_batch,
        recompute: args.recompute.map(|r| match r {
            RecomputeArg::None => Recompute::None,
            RecomputeArg::Selective => Recompute::Selective,
            RecomputeArg::Full => Recompute::Full,
        }),
        zero: args.zero,
        sequence_parallel: args.sequence_parallel.then_some(true),
    })
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

fn resolve_scenario(
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
    let framework = framework_of_args(training_args);
    let training = Training {
        seq_len: model.seq_len,
        global_batch,
        grad_dtype: match training_args.grad_dtype {
            Some(GradDtypeArg::Bf16) => GradDtype::Bf16,
            Some(GradDtypeArg::Fp32) => GradDtype::Fp32,
            None => plan_file
                .and_then(|f| f.grad_dtype)
                .unwrap_or(framework.default_grad_dtype()),
        },
        framework,
        overlap: overlap_of_args(training_args, framework),
        moe_imbalance: 1.0,
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

fn summaries(s: &Scenario) -> (ModelSummary, ClusterSummary) {
    (
        ModelSummary::new(&s.model, &s.model_origin),
        ClusterSummary::new(&s.cluster),
    )
}

fn print_report(report: &Report, format: Format, table: impl FnOnce(&Report) -> String) {
    match format {
        Format::Json => println!("{}", report::to_json(report)),
        Format::Yaml => print!("{}", report::to_yaml(report)),
        Format::Table => print!("{}", table(report)),
    }
}

fn model_file_of(model: &Model) -> ModelFile {
    model.to_file()
}

fn plan(args: PlanArgs) -> Result<Outcome> {
    if args.top == 0 {
        bail!("--top 0 would print nothing; give how many plans to show, e.g. --top 10");
    }
    if let Some(dir) = &args.report {
        check_dir("--report", dir)?;
    }
    let scenario = resolve_scenario(&args.model, &args.cluster, &args.training, None)?;
    let options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
        precision: precision_of_args(&args.training),
        pins: pins_of_args(&args.pins)?,
    };
    let result = match args.threads {
        Some(0) => bail!("--threads 0: give at least one thread, or omit it to use every core"),
        Some(n) if n > MAX_THREADS => bail!(
            "--threads {n} is more than {MAX_THREADS}; the search is CPU-bound, so more threads than cores only add overhead (omit it to use every core)"
        ),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .context("starting the worker threads")?
            .install(|| {
                search(
                    &scenario.model,
                    &scenario.cluster,
                    &scenario.training,
                    options,
                )
            }),
        None => search(
            &scenario.model,
            &scenario.cluster,
            &scenario.training,
            options,
        ),
    };
    if result.ranked.is_empty() {
        bail!(
            "no valid plan exists: {} GPUs cannot be split into tp x pp x dp with tp dividing the {} heads and a node, pp splitting the {} layers{} and dp dividing --global-batch {}; change --nodes, --global-batch or the model",
            scenario.cluster.total_gpus(),
            scenario.model.heads,
            scenario.model.layers,
            if options.allow_uneven_pp {
                ""
            } else {
                " evenly (see --allow-uneven-pp)"
            },
            scenario.training.global_batch
        );
    }
    let (model, cluster) = summaries(&scenario);
    let feasible = result.feasible();
    let top: Vec<_> = feasible.iter().take(args.top).copied().collect();
    // The search ranks on the closed form; the shown plans get the simulated schedule.
    let refined = refine_top(&scenario.model, &scenario.cluster, &scenario.training, &top);
    let details = details_of(
        (&scenario.model, &scenario.cluster, &scenario.training),
        &refined.plans,
        &refined.simulated,
    );
    let mut notes = Vec::new();
    if refined.reordered {
        notes.push(format!(
            "note: the event-driven schedule simulation (unequal stages) changed the order of the top {} plans from the closed-form ranking; they are shown in simulated order",
            refined.plans.len()
        ));
    }
    let report = Report {
        model,
        cluster,
        training: scenario.training,
        search: Some(result.stats.clone()),
        plans: refined.plans.clone(),
        details,
    };

    if let (Some(path), Some(best)) = (&args.save, report.plans.first()) {
        let file = PlanFile {
            model: Some(ModelRef::Inline(model_file_of(&scenario.model))),
            params: None,
            gpu: Some(scenario.gpu_reference.clone()),
            nodes: Some(scenario.cluster.nodes),
            gpus_per_node: Some(scenario.cluster.gpus_per_node),
            seq_len: Some(scenario.training.seq_len),
            global_batch: Some(scenario.training.global_batch),
            grad_dtype: Some(scenario.training.grad_dtype),
            attention: Some(scenario.training.attention),
            plan: PlanRequest {
                allow_cross_node_tp: best.plan.tp > scenario.cluster.gpus_per_node,
                ..best.plan.request()
            },
        };
        let text = format!(
            "# Written by `tpsim plan`; read it back with `tpsim eval --plan {path}`.\n{}",
            yaml_serde::to_string(&file)?
        );
        std::fs::write(path, text)
            .with_context(|| format!("--save {path}: cannot write the plan file"))?;
        eprintln!("saved the best plan to {path}");
    }

    if let Some(target) = args.emit {
        return emit_best(target, &scenario, feasible);
    }

    print_report(&report, args.format, |r| {
        let mut out = format!(
            "{}\n{}\n\n",
            report::scenario_line(r),
            report::stats_line(&result.stats)
        );
        if r.plans.is_empty() {
            return out;
        }
        // Rows that differ only in a setting that changes nothing are folded into one (issue 11).
        let folded = crate::planner::fold_equivalent(&r.plans);
        let shown: Vec<_> = folded.iter().map(|row| row.estimate).collect();
        out.push_str(&report::plans_table(
            &shown,
            scenario.training.tokens.is_some(),
        ));
        out.push('\n');
        for line in [
            crate::planner::folded_note(&folded),
            crate::uncertainty::within_error_line(&shown, &r.cluster.gpu),
        ]
        .into_iter()
        .flatten()
        {
            out.push_str(&line);
            out.push('\n');
        }
        if r.plans.iter().any(|e| e.plan.pp > 1) {
            out.push_str("step times: pipelined plans use the simulated 1F1B schedule (the output layer makes the last stage slower); the search ranked on the closed form (p-1)/(v·m)\n");
        }
        for note in &notes {
            out.push_str(note);
            out.push('\n');
        }
        out.push_str(&report::explain_best(&r.plans[0], &scenario.cluster));
        out
    });
    if let (Some(dir), Some(Some(chosen))) = (&args.report, refined.simulated.first()) {
        let labels: Vec<String> = report
            .plans
            .iter()
            .enumerate()
            .map(|(i, e)| plan_label(i + 1, e))
            .collect();
        let written = write_report(Written {
            flag: "--report",
            dir,
            model: &scenario.model,
            cluster: &scenario.cluster,
            training: &scenario.training,
            report: &report,
            chosen_label: format!("the best plan ({})", labels[0]),
            labels,
            evaluated: &result.ranked,
            chosen,
            notes: notes.clone(),
        })?;
        eprintln!("wrote {dir}/index.html and {} more files", written - 1);
    } else if let Some(dir) = &args.report {
        eprintln!("no report written to {dir}: no plan fits");
    }
    if feasible.is_empty() {
        let miss = match result.closest_miss() {
            Some(closest) => format!(
                "closest: tp {} pp {} dp {} mb {} recompute {} ZeRO-{} needs {:.1} GiB of {:.1} GiB (misses by {:.1} GiB); add nodes, use a larger-memory GPU, or shorten --seq-len",
                closest.plan.tp,
                closest.plan.pp,
                closest.plan.dp,
                closest.plan.micro_batch,
                closest.plan.recompute.as_str(),
                closest.plan.zero,
                closest.memory.total_bytes.0 / GIB,
                closest.memory.capacity_bytes.0 / GIB,
                (closest.memory.total_bytes.0 - closest.memory.capacity_bytes.0) / GIB
            ),
            None => unreachable!("an empty search returned an error above"),
        };
        eprintln!("nothing fits: {miss}");
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}

fn eval(args: EvalArgs, quiet: bool) -> Result<Outcome> {
    if let Some(dir) = &args.report {
        check_dir(if quiet { "--out" } else { "--report" }, dir)?;
    }
    let megatron = match &args.megatron_args {
        Some(text) => Some(read_megatron_launch(text)?),
        None => None,
    };
    let plan_file = match (&args.plan, &megatron) {
        (Some(path), _) => Some((specs::load_plan(path)?, path.clone())),
        (None, Some(launch)) => Some((megatron_plan_file(launch)?, "--megatron-args".to_string())),
        (None, None) => None,
    };
    if let Some(launch) = &megatron {
        check_megatron_training(launch, &args.training)?;
    }
    // Megatron-LM's own training flags, pasted (what `--emit megatron` writes): as tpsim's.
    let mut training_args = args.training.clone();
    if let Some(backend) = &args.attention_backend {
        training_args.attention = Some(attention_arg_of_backend(backend)?);
    }
    // Megatron-LM with --bf16 keeps fp32 gradients unless --grad-reduce-in-bf16 (arguments.py).
    if args.accumulate_allreduce_grads_in_fp32 {
        training_args.grad_dtype = Some(GradDtypeArg::Fp32);
    } else if args.grad_reduce_in_bf16 {
        training_args.grad_dtype = Some(GradDtypeArg::Bf16);
    } else if args.bf16 && training_args.grad_dtype.is_none() {
        training_args.grad_dtype = Some(GradDtypeArg::Fp32);
    }
    // Megatron-LM overlaps only what its arguments turn on (p2p unless
    // --no-overlap-p2p-communication): a pasted Megatron line (--bf16) means its defaults.
    if args.no_overlap_p2p_communication {
        training_args.overlap_p2p_comm = Some(false);
    }
    if args.bf16 {
        training_args.tp_comm_overlap.get_or_insert(false);
        training_args.overlap_grad_reduce.get_or_insert(false);
        training_args.overlap_param_gather.get_or_insert(false);
        training_args.overlap_p2p_comm.get_or_insert(true);
    }
    let mut scenario = resolve_scenario(
        &args.model,
        &args.cluster,
        &training_args,
        plan_file.as_ref().map(|(f, p)| (f, p.as_str())),
    )?;
    if let Some(launch) = &megatron {
        apply_megatron_launch(launch, &args.cluster, &training_args, &mut scenario);
    }
    let request = match &plan_file {
        Some(_) if megatron.is_some() => {
            megatron_request(megatron.as_ref().expect("checked above"), &scenario)?
        }
        Some((file, _)) => file.plan,
        None => {
            if args.tp.is_none() && args.pp.is_none() && args.dp.is_none() {
                bail!(
                    "no plan given: pass --plan FILE, or --tp and --pp (e.g. --tp 8 --pp 16); `tpsim plan` finds the best one"
                );
            }
            let tp = args.tp.unwrap_or(1);
            let pp = args.pp.unwrap_or(1);
            let cp = args.cp.unwrap_or(1);
            let gpus = scenario.cluster.total_gpus();
            let model_parallel = u64::from(tp) * u64::from(pp) * u64::from(cp);
            let dp = match args.dp {
                Some(dp) => dp,
                None if model_parallel > 0 && u64::from(gpus) % model_parallel == 0 => {
                    (u64::from(gpus) / model_parallel) as u32
                }
                // No dp makes tp x pp fit the cluster; report a degree that can never work for this
                // model first, since changing the cluster would not fix it.
                None if tp > 0 && scenario.model.heads % tp != 0 => {
                    let valid: Vec<String> = divisors(scenario.model.heads)
                        .into_iter()
                        .filter(|d| {
                            *d <= scenario.cluster.gpus_per_node || args.allow_cross_node_tp
                        })
                        .map(|d| d.to_string())
                        .collect();
                    return Err(PlanError::TpHeads {
                        tp,
                        heads: scenario.model.heads,
                        valid: valid.join(", "),
                    }
                    .into());
                }
                None if pp > scenario.model.layers => {
                    return Err(PlanError::PpLayers {
                        pp,
                        layers: scenario.model.layers,
                    }
                    .into());
                }
                None => bail!(
                    "--tp {tp} x --pp {pp} = {} does not divide the cluster's {gpus} GPUs; choose tp x pp dividing {gpus}",
                    u64::from(tp) * u64::from(pp)
                ),
            };
            PlanRequest {
                tp,
                pp,
                dp,
                vpp: match args.num_layers_per_virtual_pipeline_stage {
                    Some(n) => emit::vpp_from_layers_per_virtual_stage(
                        pasted_split(&args).counted_layers(scenario.model.layers),
                        pp,
                        n,
                    )
                    .map_err(|message| anyhow!(message))?,
                    None => args.vpp.unwrap_or(1),
                },
                micro_batch: args.micro_batch.unwrap_or(1),
                sequence_parallel: args.sequence_parallel,
                recompute: match args.recompute.unwrap_or(RecomputeArg::None) {
                    RecomputeArg::None => Recompute::None,
                    RecomputeArg::Selective => Recompute::Selective,
                    RecomputeArg::Full => Recompute::Full,
                },
                zero: match args.zero {
                    Some(zero) => zero,
                    None => pasted_zero(&args, pp)?,
                },
                allow_uneven_pp: args.allow_uneven_pp || pasted_split(&args).any(),
                allow_cross_node_tp: args.allow_cross_node_tp,
                cp: args.cp.unwrap_or(1),
                reshard_after_forward: args.reshard_after_forward.unwrap_or(true),
                // Megatron-LM's block recompute pasted (`--recompute-num-layers` defaults to 1).
                recompute_num_layers: match args.recompute_method.as_deref() {
                    Some("block") => args.recompute_num_layers.unwrap_or(1),
                    _ => 0,
                },
                ..PlanRequest::default()
            }
        }
    };
    let request = PlanRequest {
        precision: match args.training.precision {
            Some(_) => precision_of_args(&args.training),
            None => match pasted_precision(&args, request.zero, &scenario.training)? {
                Some(precision) => precision,
                None => request.precision,
            },
        },
        ..request
    };
    let plan = ParallelPlan::build(
        &request,
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
    )?;
    // Block recompute over a whole chunk is every layer recomputed: the same plan as uniform.
    let plan = match emit::block_recompute_layers(plan.recompute_num_layers, &plan) {
        n if n != plan.recompute_num_layers => ParallelPlan::build(
            &PlanRequest {
                recompute_num_layers: n,
                ..request
            },
            &scenario.model,
            &scenario.cluster,
            &scenario.training,
        )?,
        _ => plan,
    };
    check_pasted_megatron(&args, &scenario.model, &plan)?;
    if plan.zero >= 2 && plan.pp > 1 && plan.zero > scenario.training.framework.max_zero_with_pp() {
        eprintln!(
            "note: ZeRO-{} with pipeline parallelism is evaluated as asked, but no mainstream framework runs it (DeepSpeed's pipeline engine rejects ZeRO-2/3; Megatron-LM offers ZeRO-1); `tpsim plan` does not propose it",
            plan.zero
        );
    }
    let simulated = simulate_plan(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        &plan,
    )
    .map_err(|e| anyhow!("simulating the pipeline schedule: {e}"))?;
    let estimate = simulated.estimate;
    if let Some(target) = args.emit {
        let framework = framework_of(target);
        if let Some(reason) = framework.unsupported(&scenario.model, &scenario.training, &plan) {
            bail!("--emit {}: {reason}", target_name(target));
        }
        if !estimate.fits() {
            eprintln!(
                "warning: this plan does not fit: {:.1} GiB of {:.1} GiB on the most loaded GPU",
                estimate.memory.total_bytes.0 / GIB,
                estimate.memory.capacity_bytes.0 / GIB
            );
        }
        print!("{}", emitted(framework, &scenario, &estimate));
        return Ok(if estimate.fits() {
            Outcome::Found
        } else {
            Outcome::NothingFits
        });
    }
    let (model, cluster) = summaries(&scenario);
    let detail = detail_for(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        &plan,
        Some(simulated.summary),
    );
    let report = Report {
        model,
        cluster,
        training: scenario.training,
        search: None,
        plans: vec![estimate],
        details: vec![detail],
    };
    let schedule_line = schedule_note(&simulated.summary);
    if !quiet {
        print_report(&report, args.format, |r| {
            format!(
                "{}\n\n{}\n{}\n{}\n",
                report::scenario_line(r),
                report::breakdown(&r.plans[0]),
                schedule_line,
                crate::uncertainty::within_error_line(&r.plans, &r.cluster.gpu).unwrap_or_default()
            )
        });
    }
    if let Some(dir) = &args.report {
        let flag = if quiet { "--out" } else { "--report" };
        let options = SearchOptions {
            allow_uneven_pp: request.allow_uneven_pp,
            allow_cross_node_tp: request.allow_cross_node_tp,
            ..SearchOptions::default()
        };
        write_eval_report(
            flag,
            dir,
            (&scenario.model, &scenario.cluster, &scenario.training),
            options,
            &report,
            &simulated,
            schedule_line,
        )?;
    }
    if estimate.fits() {
        Ok(Outcome::Found)
    } else {
        if quiet {
            // `tpsim report` prints no breakdown, so say why the exit code is 1.
            eprintln!(
                "the plan does not fit: {:.1} GiB of {:.1} GiB on the most loaded GPU (see the report's memory figure)",
                estimate.memory.total_bytes.0 / GIB,
                estimate.memory.capacity_bytes.0 / GIB
            );
        }
        Ok(Outcome::NothingFits)
    }
}

/// `tpsim report FILE --out DIR`: `eval --plan FILE --report DIR` without the terminal breakdown.
fn report_command(args: ReportArgs) -> Result<Outcome> {
    let eval_args = EvalArgs {
        model: args.model,
        cluster: args.cluster,
        training: args.training,
        plan: Some(args.plan),
        tp: None,
        pp: None,
        cp: None,
        reshard_after_forward: None,
        dp: None,
        vpp: None,
        micro_batch: None,
        sequence_parallel: false,
        recompute: None,
        zero: None,
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        report: Some(args.out),
        format: Format::Table,
        num_layers_per_virtual_pipeline_stage: None,
        use_distributed_optimizer: false,
        recompute_method: None,
        recompute_num_layers: None,
        max_position_embeddings: None,
        bf16: false,
        grad_reduce_in_bf16: false,
        attention_backend: None,
        accumulate_allreduce_grads_in_fp32: false,
        use_megatron_fsdp: false,
        data_parallel_sharding_strategy: None,
        use_torch_fsdp2: false,
        account_for_embedding_in_pipeline_split: false,
        account_for_loss_in_pipeline_split: false,
        decoder_first_pipeline_num_layers: None,
        decoder_last_pipeline_num_layers: None,
        fp8_format: None,
        fp8_recipe: None,
        fp8_param_gather: false,
        fp4_format: None,
        fp4_recipe: None,
        fp4_param_gather: false,
        no_overlap_p2p_communication: false,
        ckpt_format: None,
        emit: None,
        megatron_args: None,
    };
    eval(eval_args, true)
}

fn accuracy(args: AccuracyArgs) -> Result<Outcome> {
    let (text, origin) = match &args.runs {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| {
                format!("--runs {path}: cannot read the published runs; check the path")
            })?,
            path.clone(),
        ),
        None => (
            validation::BUNDLED_PUBLISHED_RUNS.to_string(),
            "bundled validation/published_runs.yaml".to_string(),
        ),
    };
    let rows = validation::accuracy(&text, &origin)?;
    if rows.is_empty() {
        bail!(
            "{origin}: no runs tpsim can evaluate (each needs completeness: full_plan, an A100 profile and a published step time); give a file with such runs"
        );
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Format::Yaml => print!("{}", yaml_serde::to_string(&rows)?),
        Format::Table => {
            let mut table = Table::new();
            table.load_style(UTF8_FULL_CONDENSED);
            table.set_header(vec![
                "run",
                "GPUs",
                "profile",
                "plan",
                "published s",
                "predicted s",
                "error %",
                "fits",
                "mem GiB",
            ]);
            for row in &rows {
                table.add_row(vec![
                    row.id.clone(),
                    row.gpus.to_string(),
                    row.gpu_profile.clone(),
                    row.plan.clone(),
                    format!("{:.2}", row.published_step_s),
                    format!("{:.2}", row.predicted_step_s),
                    format!("{:+.1}", row.error * 100.0),
                    if row.fits { "yes" } else { "NO" }.to_string(),
                    format!("{:.1}", row.predicted_memory_gib),
                ]);
            }
            println!("{table}");
            let abs: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
            let mean = abs.iter().sum::<f64>() / abs.len().max(1) as f64;
            let worst = abs.iter().copied().fold(0.0, f64::max);
            println!(
                "{} runs: mean |error| {:.1}%, worst {:.1}%",
                rows.len(),
                mean * 100.0,
                worst * 100.0
            );
            let _ = format_count;
        }
    }
    Ok(Outcome::Found)
}
