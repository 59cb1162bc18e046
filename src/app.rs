//! Command handlers: turn flags into validated domain values, call the core, render. The only
//! module that touches files, stdout and anyhow.

use anyhow::{Context, Result, anyhow, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use crate::cli::{
    AccuracyArgs, ClusterArgs, Command, EvalArgs, Format, GradDtypeArg, ModelArgs, PlanArgs,
    RecomputeArg, TrainingArgs,
};
use crate::cluster::Cluster;
use crate::cost::evaluate;
use crate::model::{Model, ModelFile, Norm};
use crate::plan::{ParallelPlan, PlanError, PlanRequest, Recompute, divisors};
use crate::planner::{SearchOptions, search};
use crate::report::{self, ClusterSummary, ModelSummary, Report};
use crate::shape::derive_shape;
use crate::specs::{self, ModelRef, PlanFile};
use crate::training::{DEFAULT_GLOBAL_BATCH, GradDtype, Training};
use crate::units::{GIB, format_count, parse_count};
use crate::validation;

/// Largest cluster we accept: beyond this the input is a typo, not a cluster.
const MAX_NODES: u32 = 131_072;
const MAX_GPUS_PER_NODE: u32 = 72;
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
        Command::Eval(args) => eval(args),
        Command::Accuracy(args) => accuracy(args),
        Command::Calibrate(args) => calibration_commands::calibrate(args),
        Command::Validate(args) => calibration_commands::validate(args),
    }
}

/// `calibrate` and `validate` handlers (a child module, so they share `resolve_scenario`).
mod calibration_commands;

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

fn resolve_model(
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
            linear_bias: true,
            tied_embeddings: true,
            learned_position_embeddings: true,
            norm: Some(Norm::Layernorm),
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
    let tokens = match &training_args.tokens {
        Some(text) => Some(parse_count("--tokens", text)?),
        None => None,
    };
    let training = Training {
        seq_len: model.seq_len,
        global_batch,
        grad_dtype: match training_args.grad_dtype {
            GradDtypeArg::Bf16 => GradDtype::Bf16,
            GradDtypeArg::Fp32 => GradDtype::Fp32,
        },
        tokens,
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
    }
}

fn plan(args: PlanArgs) -> Result<Outcome> {
    if args.top == 0 {
        bail!("--top 0 would print nothing; give how many plans to show, e.g. --top 10");
    }
    let scenario = resolve_scenario(&args.model, &args.cluster, &args.training, None)?;
    let options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
    };
    let result = match args.threads {
        Some(0) => bail!("--threads 0: give at least one thread, or omit it to use every core"),
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
    let (model, cluster) = summaries(&scenario);
    let feasible = result.feasible();
    let shown: Vec<_> = feasible.iter().take(args.top).copied().collect();
    let report = Report {
        model,
        cluster,
        training: scenario.training,
        search: Some(result.stats.clone()),
        plans: shown,
    };

    if let (Some(path), Some(best)) = (&args.save, feasible.first()) {
        let file = PlanFile {
            model: Some(ModelRef::Inline(model_file_of(&scenario.model))),
            params: None,
            gpu: Some(scenario.gpu_reference.clone()),
            nodes: Some(scenario.cluster.nodes),
            gpus_per_node: Some(scenario.cluster.gpus_per_node),
            seq_len: Some(scenario.training.seq_len),
            global_batch: Some(scenario.training.global_batch),
            plan: best.plan.request(),
        };
        let text = format!(
            "# Written by `tpsim plan`; read it back with `tpsim eval --plan {path}`.\n{}",
            yaml_serde::to_string(&file)?
        );
        std::fs::write(path, text)
            .with_context(|| format!("--save {path}: cannot write the plan file"))?;
        eprintln!("saved the best plan to {path}");
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
        out.push_str(&report::plans_table(
            &r.plans,
            scenario.training.tokens.is_some(),
        ));
        out.push('\n');
        out.push_str(&report::explain_best(&r.plans[0], &scenario.cluster));
        out
    });
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
            None => format!(
                "no valid plan exists: {} GPUs cannot be split into tp x pp x dp with dp dividing --global-batch {}; change --nodes or --global-batch",
                scenario.cluster.total_gpus(),
                scenario.training.global_batch
            ),
        };
        eprintln!("nothing fits: {miss}");
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}

fn eval(args: EvalArgs) -> Result<Outcome> {
    let plan_file = match &args.plan {
        Some(path) => Some((specs::load_plan(path)?, path.clone())),
        None => None,
    };
    let scenario = resolve_scenario(
        &args.model,
        &args.cluster,
        &args.training,
        plan_file.as_ref().map(|(f, p)| (f, p.as_str())),
    )?;
    let request = match &plan_file {
        Some((file, _)) => file.plan,
        None => {
            if args.tp.is_none() && args.pp.is_none() && args.dp.is_none() {
                bail!(
                    "no plan given: pass --plan FILE, or --tp and --pp (e.g. --tp 8 --pp 16); `tpsim plan` finds the best one"
                );
            }
            let tp = args.tp.unwrap_or(1);
            let pp = args.pp.unwrap_or(1);
            let gpus = scenario.cluster.total_gpus();
            let dp = match args.dp {
                Some(dp) => dp,
                None if tp > 0 && pp > 0 && gpus % (tp * pp) == 0 => gpus / (tp * pp),
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
                vpp: args.vpp.unwrap_or(1),
                micro_batch: args.micro_batch.unwrap_or(1),
                sequence_parallel: args.sequence_parallel,
                recompute: match args.recompute.unwrap_or(RecomputeArg::None) {
                    RecomputeArg::None => Recompute::None,
                    RecomputeArg::Selective => Recompute::Selective,
                    RecomputeArg::Full => Recompute::Full,
                },
                zero: args.zero.unwrap_or(0),
                allow_uneven_pp: args.allow_uneven_pp,
                allow_cross_node_tp: args.allow_cross_node_tp,
            }
        }
    };
    let plan = ParallelPlan::build(
        &request,
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
    )?;
    let estimate = evaluate(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        &plan,
    );
    let (model, cluster) = summaries(&scenario);
    let report = Report {
        model,
        cluster,
        training: scenario.training,
        search: None,
        plans: vec![estimate],
    };
    print_report(&report, args.format, |r| {
        format!(
            "{}\n\n{}",
            report::scenario_line(r),
            report::breakdown(&r.plans[0])
        )
    });
    if estimate.fits() {
        Ok(Outcome::Found)
    } else {
        Ok(Outcome::NothingFits)
    }
}

fn accuracy(args: AccuracyArgs) -> Result<Outcome> {
    let text = std::fs::read_to_string(&args.runs)
        .with_context(|| format!("--runs {}: cannot read the published runs", args.runs))?;
    let rows = validation::accuracy(&text, &args.runs)?;
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
