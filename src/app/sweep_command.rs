//! `tpsim sweep`: the best plan at each point of one varied axis (nodes, params, GPU, network
//! bandwidth, sequence length or global batch), as a table, CSV, JSON or an SVG chart.

use anyhow::{Context, Result, bail};

use super::Outcome;
use super::plan_command::why_no_valid_plan;
use super::scenario::Scenario;
use super::scenario::{input_paths, precision_of_args, resolve_scenario, tokens_of};
use crate::cli::{ClusterArgs, ModelArgs, SweepArgs, SweepAxis, SweepFormat, TrainingArgs};
use crate::planner::SearchOptions;
use crate::report::chart_sweep;
use crate::units::list_item;
use crate::{input_file, output_file, sweep};

pub(super) fn sweep_axis(axis: SweepAxis) -> sweep::Axis {
    match axis {
        SweepAxis::Nodes => sweep::Axis::Nodes,
        SweepAxis::Params => sweep::Axis::Params,
        SweepAxis::Gpu => sweep::Axis::Gpu,
        SweepAxis::NetworkBandwidth => sweep::Axis::NetworkBandwidth,
        SweepAxis::SeqLen => sweep::Axis::SeqLen,
        SweepAxis::GlobalBatch => sweep::Axis::GlobalBatch,
        SweepAxis::CpuOffloadLayers => sweep::Axis::CpuOffloadLayers,
    }
}

pub(super) fn sweep_u32(axis: sweep::Axis, value: &str, example: &str) -> Result<u32> {
    plain_point(axis, value, example, false)
}

/// [`sweep_u32`], or a count that may be 0 when `zero_ok`.
fn plain_point(axis: sweep::Axis, value: &str, example: &str, zero_ok: bool) -> Result<u32> {
    // `+8` or `016` would be read as 8 and 16 and echoed so: the table would not show the value
    // typed.
    if let Some(plain) = crate::units::plain_digits_for(value).filter(|_| !value.starts_with('-')) {
        // `000` (the second point of `1,000`) or `+0` is zero, which the axis refuses: offering
        // 0 only moved the error. A comma separates points, so a thousands separator splits one.
        if plain == "0" && !zero_ok {
            let comma = if value.len() == 3 {
                " (a comma separates points, so a thousands separator splits one number in two: write 1000, not 1,000)"
            } else {
                ""
            };
            bail!(
                "--values {value} is zero, not a positive whole number, which --axis {} needs{comma}; e.g. --values {example}",
                axis.name()
            );
        }
        bail!(
            "--values {value} is not written in plain digits (a plus sign or leading zeros); a whole number is digits only, so write {plain} in its place"
        );
    }
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        // All digits, past u32: a whole number, far past the axis's own bound.
        Err(_) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => bail!(
            "--values {value} is a whole number far too large for --axis {}; check the value, e.g. --values {example}",
            axis.name()
        ),
        _ => bail!(
            "--values {value:?} is not a positive whole number, which --axis {} needs; e.g. --values {example}",
            axis.name()
        ),
    }
}

/// A count that may be 0 (`--axis cpu-offload-layers`: 0 offloads nothing), read as
/// [`sweep_u32`] reads a positive one.
fn sweep_count(axis: sweep::Axis, value: &str, example: &str) -> Result<u32> {
    if value == "0" {
        return Ok(0);
    }
    plain_point(axis, value, example, true).map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string().replace(
                "is not a positive whole number",
                "is not a whole number (0 or more)"
            )
        )
    })
}

/// The flag whose value each point of `axis` sets (never given with it: `sweep_command` refuses
/// that), `None` for the network bandwidth, which no flag sets.
fn axis_flag(axis: sweep::Axis) -> Option<&'static str> {
    match axis {
        sweep::Axis::Nodes => Some("--nodes"),
        sweep::Axis::Params => Some("--params"),
        sweep::Axis::Gpu => Some("--gpu"),
        sweep::Axis::SeqLen => Some("--seq-len"),
        sweep::Axis::GlobalBatch => Some("--global-batch"),
        sweep::Axis::CpuOffloadLayers => Some("--cpu-offload-layers"),
        sweep::Axis::NetworkBandwidth => None,
    }
}

/// A message about one point said in the sweep's words: the point's value came from `--values`,
/// so the axis's flag, which the user did not type and may not add, reads `--values`
/// (`--nodes 100000000 is more than ...` is `--values 100000000 ...`; `change --nodes` is
/// `change --values`; `drop --nodes` is `drop that point from --values`).
pub(super) fn in_sweep_words(message: &str, axis: sweep::Axis) -> String {
    let Some(flag) = axis_flag(axis) else {
        return message.to_string();
    };
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(flag) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + flag.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_none_or(|c| !is_word(c)) && after.is_none_or(|c| !is_word(c)) {
            out.push_str("--values");
        } else {
            out.push_str(flag);
        }
        rest = &rest[at + flag.len()..];
    }
    out.push_str(rest);
    // "drop --cpu-offload-layers" cannot read "drop --values": the sweep needs its points, and
    // the fix is to leave out the one at fault.
    out.replace("drop --values", "drop that point from --values")
}

/// The inputs no point of the axis changes (the model off `--axis params`, the GPU off `--axis gpu`,
/// `--nodes` off `--axis nodes`), checked once before the points: an error in one of them is said
/// without a point, not as the first point's ("--axis global-batch at 64: --nodes is required").
fn check_outside_the_axis(args: &SweepArgs, axis: sweep::Axis) -> Result<()> {
    if axis != sweep::Axis::Params {
        let seq_len = args
            .training
            .seq_len
            .filter(|_| axis != sweep::Axis::SeqLen)
            .map(|s| (s, "--seq-len"));
        super::scenario::resolve_model(&args.model, None, seq_len)?;
    }
    // A total GPU count is refused with the --nodes that gives it, before "--nodes is required".
    // On the gpu axis the node is each point's GPU's, not the default GPU's (which no point may
    // be): counted in theirs where they agree, refused without a count where they differ.
    if axis == sweep::Axis::Gpu
        && let Some((flag, given)) = super::scenario::gpu_count_given(&args.cluster)
    {
        let profiles: Vec<_> = args
            .values
            .iter()
            .filter_map(|v| {
                super::scenario::resolve_gpu(&args.cluster, None, list_item(v).to_string())
                    .ok()
                    .map(|(gpu, _)| gpu)
            })
            .collect();
        if let Some(first) = profiles.first() {
            let names = || {
                profiles
                    .iter()
                    .map(|g| format!("{}: {} a node", g.name, g.gpus_per_node))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if args.cluster.gpus_per_node.is_none()
                && profiles
                    .iter()
                    .any(|g| g.gpus_per_node != first.gpus_per_node)
            {
                bail!(
                    "{flag} {given}: tpsim sizes a cluster as --nodes N of --gpus-per-node GPUs, not as a total, and the GPUs of --values have nodes of different sizes ({}); give --nodes N for N nodes of each GPU's own size, or --gpus-per-node with --nodes for the same GPU count at every point",
                    names()
                );
            }
            let mut every = first.clone();
            if profiles.len() > 1 {
                every.name = profiles
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            super::scenario::refuse_gpu_count(&args.cluster, &every, None)?;
        }
    }
    if axis == sweep::Axis::Gpu {
        if args.cluster.nodes.is_none() {
            bail!(
                "--nodes is required: how many nodes the cluster has at each GPU of --values (e.g. --nodes 32)"
            );
        }
        return Ok(());
    }
    let gpu = super::scenario::resolve_gpu(
        &args.cluster,
        None,
        args.cluster
            .gpu
            .clone()
            .unwrap_or_else(|| super::scenario::DEFAULT_GPU.to_string()),
    )?
    .0;
    super::scenario::refuse_gpu_count(&args.cluster, &gpu, None)?;
    if let Some(n) = args.cluster.gpus_per_node {
        super::scenario::positive("--gpus-per-node", n, "e.g. --gpus-per-node 8")?;
    }
    if args.cluster.nodes.is_none() && axis != sweep::Axis::Nodes {
        bail!(
            "--nodes is required: how many nodes of {} GPUs the cluster has (e.g. --nodes 32)",
            args.cluster.gpus_per_node.unwrap_or(gpu.gpus_per_node)
        );
    }
    Ok(())
}

pub(super) fn sweep_command(args: SweepArgs) -> Result<Outcome> {
    let axis = sweep_axis(args.axis);
    // Checked once here, so that the error is not said to be one point's.
    tokens_of(&args.training)?;
    super::scenario::price_per_gpu_hour_of(&args.training, tokens_of(&args.training)?, None)?;
    if axis == sweep::Axis::Params
        && (args.model.model.is_some()
            || args.model.layers.is_some()
            || args.model.hf_config.is_some()
            || args.model.params.is_some())
    {
        bail!(
            "--axis params derives a GPT-style model at each point; drop --params/--model/--layers/--hf-config"
        );
    }
    // A fixed flag for the quantity the axis varies would be silently replaced at every point.
    let fixed = match axis {
        sweep::Axis::Nodes => args.cluster.nodes.map(|n| format!("--nodes {n}")),
        sweep::Axis::SeqLen => args.training.seq_len.map(|n| format!("--seq-len {n}")),
        sweep::Axis::GlobalBatch => args
            .training
            .global_batch
            .map(|n| format!("--global-batch {n}")),
        sweep::Axis::Gpu => args
            .cluster
            .gpu
            .as_ref()
            .map(|g| format!("--gpu {g}"))
            .or_else(|| {
                args.cluster
                    .calibration
                    .as_ref()
                    .map(|c| format!("--calibration {c}"))
            }),
        sweep::Axis::CpuOffloadLayers => args
            .training
            .cpu_offload_layers
            .map(|n| format!("--cpu-offload-layers {n}")),
        sweep::Axis::Params | sweep::Axis::NetworkBandwidth => None,
    };
    if let Some(flag) = fixed {
        bail!(
            "{flag} conflicts with --axis {}, which sets that value at each point of --values {}; drop {flag}",
            axis.name(),
            args.values.join(",")
        );
    }
    if let Some(path) = &args.chart {
        // The chart must not replace a file the sweep reads: a spec, or a GPU file on --axis gpu.
        let mut inputs = input_paths(&args.model, &args.cluster);
        if axis == sweep::Axis::Gpu {
            inputs.extend(args.values.iter().map(|v| ("--values", list_item(v))));
        }
        output_file::refuse_input_overlap("--chart", path, &inputs)?;
        output_file::check_file("--chart", path, "sweep.svg", output_file::OutputKind::Chart)?;
        let parent = std::path::Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent
            && !dir.is_dir()
        {
            bail!(
                "--chart {path}: the folder {} does not exist; create it or write the chart elsewhere",
                dir.display()
            );
        }
    }
    check_outside_the_axis(&args, axis)?;
    let mut points = Vec::with_capacity(args.values.len());
    let mut keys: Vec<String> = Vec::with_capacity(args.values.len());
    let mut shapes: Vec<(String, crate::model::Model)> = Vec::new();
    // The model's name at each point where it has one (the chart's title names it).
    let mut named: Vec<String> = Vec::new();
    // Whose the first point's sequence length is, for the default-batch note said for all.
    let mut seq_len_source = None;
    // The flags at one point: the axis's value set over the others.
    let flags_at = |value: &str| -> Result<(ModelArgs, ClusterArgs, TrainingArgs)> {
        let (mut model, mut cluster, mut training) = (
            args.model.clone(),
            args.cluster.clone(),
            args.training.clone(),
        );
        match axis {
            sweep::Axis::Nodes => cluster.nodes = Some(sweep_u32(axis, value, "16,32,64")?),
            sweep::Axis::Params => {
                super::scenario::check_sweep_params_point(value, args.training.seq_len)?;
                model.params = Some(value.to_string())
            }
            sweep::Axis::Gpu => cluster.gpu = Some(value.to_string()),
            sweep::Axis::SeqLen => {
                let seq_len = sweep_u32(axis, value, "2048,4096")?;
                super::scenario::check_sweep_seq_len_point(
                    args.model.params.as_deref(),
                    &input_file::quote(value),
                    seq_len,
                )?;
                training.seq_len = Some(seq_len)
            }
            sweep::Axis::GlobalBatch => {
                training.global_batch = Some(sweep_u32(axis, value, "512,1024,2048")?)
            }
            // 0 is a point too: no offloading, every plan searched (Megatron-LM's default).
            sweep::Axis::CpuOffloadLayers => {
                training.cpu_offload_layers = Some(sweep_count(axis, value, "0,20,40")?)
            }
            sweep::Axis::NetworkBandwidth => {}
        }
        Ok((model, cluster, training))
    };
    let scenario_at = |value: &str| -> Result<Scenario> {
        let (model, cluster, training) = flags_at(value)?;
        resolve_scenario(&model, &cluster, &training, None)
    };
    for raw in &args.values {
        let value = list_item(raw);
        if value.is_empty() {
            bail!(
                "--values {:?} has an empty item; give comma-separated points, e.g. --values 16,32,64",
                args.values.join(",")
            );
        }
        // A value the axis cannot take is that point's error, said as it is.
        flags_at(value)?;
        let mut scenario = match scenario_at(value) {
            Ok(scenario) => scenario,
            Err(err) => {
                let message = in_sweep_words(&format!("{err:#}"), axis);
                // An error every point gives alike (a flag the model or framework refuses,
                // whatever the point) is no point's: it is said once, without one. A single
                // point is the one at fault.
                let every_point = args.values.len() > 1
                    && args.values.iter().map(|raw| list_item(raw)).all(|v| {
                        scenario_at(v)
                            .is_err_and(|e| in_sweep_words(&format!("{e:#}"), axis) == message)
                    });
                if every_point {
                    bail!("{message}");
                }
                bail!(
                    "--axis {} at {}: {message}",
                    axis.name(),
                    input_file::quote(value)
                );
            }
        };
        if axis == sweep::Axis::NetworkBandwidth {
            let range = crate::cluster::NETWORK_GB_PER_S;
            match value.parse::<f64>() {
                Ok(gb) if range.contains(gb) => scenario.cluster.gpu.network_gb_per_s = gb,
                // The value as typed (`1e400`, not the `inf` it parses to), and the range.
                Ok(_) => bail!(
                    "--values {} for --axis network-bandwidth (each point's {}) is outside {} to {} {} ({}); give GB/s per GPU in that range, e.g. --values 12.5,25,50",
                    input_file::quote(value),
                    range.key,
                    crate::cluster::show_number(range.min),
                    crate::cluster::show_number(range.max),
                    range.unit,
                    range.rule
                ),
                Err(_) => bail!(
                    "--values {value:?} is not a positive bandwidth in GB/s per GPU, which --axis network-bandwidth needs; e.g. --values 12.5,25,50 (a 400 Gb/s NIC per GPU is 50)"
                ),
            }
        }
        // A point given twice would be searched twice and printed as two rows of one answer.
        let key = match axis {
            sweep::Axis::Nodes => scenario.cluster.nodes.to_string(),
            sweep::Axis::SeqLen => scenario.training.seq_len.to_string(),
            sweep::Axis::GlobalBatch => scenario.training.global_batch.to_string(),
            sweep::Axis::CpuOffloadLayers => scenario.training.cpu_offload_layers.to_string(),
            sweep::Axis::NetworkBandwidth => scenario.cluster.gpu.network_gb_per_s.to_string(),
            // A count by its value ("512B", "512b", "512e9" and "0.512T" are one point)...
            sweep::Axis::Params => crate::units::parse_count("--values", value)
                .map_or_else(|_| value.to_string(), |count| format!("{count:.0}")),
            // ...and a GPU by its numbers: a bundled name and a profile file of that GPU (or
            // "g.yaml" and "./g.yaml") are one point, whatever the name, description and sources.
            sweep::Axis::Gpu => same_gpu_key(&scenario.cluster.gpu),
        };
        if let Some(earlier) = keys.iter().position(|k| *k == key) {
            if axis == sweep::Axis::Gpu && list_item(&args.values[earlier]) != value {
                bail!(
                    "--values lists the same point twice ({} and {} are one GPU profile, every number equal, and would print two identical rows); give each GPU once",
                    input_file::quote(list_item(&args.values[earlier])),
                    input_file::quote(value)
                );
            }
            bail!(
                "--values lists the same point twice ({} and {}); give each point once",
                input_file::quote(list_item(&args.values[earlier])),
                input_file::quote(value)
            );
        }
        keys.push(key);
        // Sizes that differ but derive one GPT-style shape (70B, 71B and 72B all derive the same
        // 71.0B model) are one point too: they printed identical rows, as if size changed nothing.
        if axis == sweep::Axis::Params {
            let m = &scenario.model;
            // Every number of the shape, not its name (which carries the size asked for).
            let shape = crate::model::Model {
                name: String::new(),
                ..m.clone()
            };
            if let Some((earlier, _)) = shapes.iter().find(|(_, s)| *s == shape) {
                bail!(
                    "--values {} and {} derive one GPT-style shape ({} params: {}, hidden {}, {}) and would print two identical rows (tpsim derives the nearest shape, hidden a multiple of 1024); give sizes further apart, or give each point once",
                    input_file::quote(earlier),
                    input_file::quote(value),
                    crate::units::format_count(m.params()),
                    crate::report::counted(m.layers, "layer"),
                    m.hidden,
                    crate::report::counted(m.heads, "head")
                );
            }
            shapes.push((value.to_string(), shape));
        }
        if !(scenario.model_origin.starts_with("derived") || scenario.model_origin == "flags") {
            named.push(scenario.model.name.clone());
        }
        seq_len_source.get_or_insert(scenario.seq_len_source);
        points.push(sweep::Point {
            value: value.to_string(),
            model: scenario.model,
            cluster: scenario.cluster,
            training: scenario.training,
        });
    }
    let options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
        // As `plan` searches: every plan at the --precision given (was dropped: bf16 plans only).
        precision: precision_of_args(&args.training),
        ..SearchOptions::default()
    };
    // What `plan` refuses before its search, at every point: the GPU must have tensor cores for
    // the precision (the GPU axis varies it), the framework must run it, and an expert all-to-all
    // overlap needs a model with experts. A precision the framework has not was searched and said
    // as "nothing fits" at every point.
    for point in &points {
        super::plan_command::check_search_input(
            &args.training,
            &point.model,
            &point.cluster,
            point.training.framework,
        )?;
    }
    if let Some(note) = unequal_gpus_note(axis, &points) {
        super::held_notes::hold(note);
    }
    if let Some(note) = one_price_note(axis, &points) {
        super::held_notes::hold(note);
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(points.len() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("sweep {bar:30} {pos}/{len} points {elapsed}")
    {
        bar.set_style(style);
    }
    let started = std::time::Instant::now();
    let tick = || bar.inc(1);
    // `--threads` sized the global pool before the command ran (`thread_env`).
    let mut result = sweep::run(axis, &points, options, &tick);
    bar.finish_and_clear();
    if named.len() == points.len() && named.iter().all(|n| *n == named[0]) {
        result.model_name = named.first().cloned();
    }
    // A point where no split is valid at all is a row saying why, as `plan` says it; only a sweep
    // where no point has a valid split is bad input (exit 2). A point whose valid plans only miss
    // memory is a row where nothing fits (exit 1 when every point is so).
    // A local batch that no split admits leaves candidates but no plan at all: that is no valid
    // plan too (it read "nothing fits (753 candidates)", exit 1, where `plan` refuses it).
    for (point, row) in points.iter().zip(&mut result.rows) {
        if row.search.candidates == 0 || !row.has_plans {
            row.no_valid_plan = Some(in_sweep_words(
                &why_no_valid_plan(&point.model, &point.cluster, &point.training, options),
                axis,
            ));
        }
    }
    if result.rows.iter().all(|r| r.no_valid_plan.is_some())
        && let Some((point, row)) = points.iter().zip(&result.rows).next()
    {
        bail!(
            "--axis {} at {}: no valid plan exists: {}",
            axis.name(),
            input_file::quote(&point.value),
            row.no_valid_plan.as_deref().unwrap_or_default()
        );
    }
    super::held_notes::print_held();
    if let Some(note) = super::cp_exchange_note::unused_by_search(
        &args.training,
        result.rows.iter().any(|r| r.searched_cp),
        "the sweep's searches",
        points.iter().map(|p| p.training.seq_len).max().unwrap_or(0),
    ) {
        eprintln!("{note}");
    }
    // Said once the sweep is known to be valid input, as `plan` says it (every point takes it); on --axis seq-len the
    // tokens per step differ from point to point, so only the sequences are.
    if args.training.global_batch.is_none() && axis != sweep::Axis::GlobalBatch {
        match (axis, points.first()) {
            (sweep::Axis::SeqLen, Some(_)) => eprintln!(
                "note: --global-batch not given: {} tokens per step at every point, in sequences of the point's length (GPT-3 175B's {} x {}, Brown et al. 2020); give the sequences per step you train with as --global-batch SEQUENCES",
                crate::units::tokens_in_words(crate::training::DEFAULT_TOKENS_PER_STEP as f64),
                crate::training::DEFAULT_GLOBAL_BATCH,
                crate::training::GPT3_SEQ_LEN
            ),
            (_, Some(point)) => eprintln!(
                "{}",
                super::scenario::default_batch_note(
                    &point.training,
                    None,
                    seq_len_source.unwrap_or(super::scenario::SeqLenSource::Model)
                )
            ),
            (_, None) => {}
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // A chart of points none of which has a plan would be empty panels: none is written, as
    // `plan --report` writes no report where no plan fits.
    let nothing_fits = result.rows.iter().all(|r| r.tp.is_none());
    if let Some(path) = args.chart.as_ref().filter(|_| nothing_fits) {
        eprintln!("no chart written to {path}: nothing fits at any point");
    }
    if let Some(path) = args.chart.as_ref().filter(|_| !nothing_fits) {
        // Drawn into a temporary file, then written atomically (`output_file`).
        let scratch = std::env::temp_dir().join(format!(
            "tpsim-chart-{}-{}.svg",
            std::process::id(),
            elapsed.to_bits()
        ));
        // Reserved with O_EXCL, so the chart never overwrites a file tpsim did not create.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&scratch)
            .with_context(|| {
                format!(
                    "--chart: cannot create a scratch file in {}",
                    std::env::temp_dir().display()
                )
            })?;
        let drawn = chart_sweep::draw(&result, &scratch.to_string_lossy())
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(std::fs::read(&scratch)?));
        let _ = std::fs::remove_file(&scratch);
        output_file::write_file(
            "--chart",
            path,
            &drawn.with_context(|| format!("--chart {}", input_file::quote(path)))?,
            output_file::OutputKind::Chart,
        )?;
        eprintln!("wrote the sweep chart to {path}");
    }
    match args.format {
        SweepFormat::Json => println!("{}", serde_json::to_string_pretty(&result)?),
        SweepFormat::Csv => print!("{}", sweep::to_csv(&result)),
        SweepFormat::Table => {
            // Named as `plan`'s search line names them: the candidates include the splits found
            // invalid (`invalid_plan`), which are counted but not evaluated.
            let candidates: u64 = result.rows.iter().map(|r| r.search.candidates).sum();
            println!(
                "sweep over {}: best plan at {} ({} candidates searched in {}){}",
                axis.title(),
                match result.rows.len() {
                    1 => "1 point".to_string(),
                    n => format!("each of {n} points"),
                },
                candidates,
                crate::units::show_search_time(elapsed),
                match (result.framework, result.kernel_fusion) {
                    (Some(framework), Some(crate::training::KernelFusion::Eager)) => format!(
                        ", as {} runs it (eager, no torch.compile)",
                        framework.as_str()
                    ),
                    (Some(framework), _) => format!(", as {} runs it", framework.as_str()),
                    _ => String::new(),
                } + &result
                    .local_batch
                    .map(|local| format!(", local batch {local} per pipeline schedule"))
                    .unwrap_or_default()
                    + &result
                        .pp_schedule
                        .filter(|s| s.v_kind().is_some())
                        .map(|s| format!(
                            ", pipeline schedule {} ({})",
                            s.as_str(),
                            s.torchtitan_name(2)
                        ))
                        .unwrap_or_default()
                    // As `plan`'s training line says it: the best-plan column shows the degrees,
                    // which do not, so the points read as plans keeping every activation.
                    + &result
                        .cpu_offload_layers
                        .map(|n| format!(
                            ", activations of the first {n} layers offloaded to host memory (--cpu-offload-layers {n})"
                        ))
                        .unwrap_or_default()
                    + &result
                        .recompute_modules
                        .filter(|_| result
                            .rows
                            .iter()
                            .any(|r| r.label.as_ref().is_some_and(|l| l.recompute == "selective")))
                        .map(|m| format!(", selective recompute = modules {}", m.describe()))
                        .unwrap_or_default()
                    + &args
                        .cluster
                        .max_memory_gib
                        .map(|limit| format!(
                            ", plans held below {limit} GiB per GPU by --max-memory-gib"
                        ))
                        .unwrap_or_default()
            );
            print!("{}", sweep::table(&result));
            let best: Vec<(String, f64, f64)> = points
                .iter()
                .zip(&result.rows)
                .filter_map(|(point, row)| {
                    Some((
                        format!("{} {}", axis.name(), row.value),
                        row.memory.total_bytes?,
                        point.cluster.gpu.device_memory().0,
                    ))
                })
                .collect();
            if let Some(line) = result
                .framework
                .and_then(|f| crate::memory_margin::sweep_margin_line(&best, f))
            {
                println!("{line}");
            }
        }
    }
    if nothing_fits {
        eprintln!("nothing fits at any point");
        return Ok(Outcome::NothingFits);
    }
    Ok(Outcome::Found)
}

/// A note when the points of a sweep that does not vary the node count run on different numbers
/// of GPUs (`--axis gpu` over profiles with 8 and 4 GPUs a node: `--nodes 16` is 128 GPUs of one,
/// 64 of the other), so a faster point is not read as a faster GPU when it only has more of them.
/// It names the counts and a `--gpus-per-node`/`--nodes` pair that gives every point the largest.
fn unequal_gpus_note(axis: sweep::Axis, points: &[sweep::Point]) -> Option<String> {
    if axis == sweep::Axis::Nodes {
        return None;
    }
    let mut counts: Vec<(u32, Vec<&str>)> = Vec::new();
    for point in points {
        let gpus = point.cluster.total_gpus();
        match counts.iter_mut().find(|(n, _)| *n == gpus) {
            Some((_, values)) => values.push(&point.value),
            None => counts.push((gpus, vec![&point.value])),
        }
    }
    if counts.len() < 2 {
        return None;
    }
    counts.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let listed = counts
        .iter()
        .map(|(n, values)| format!("{n} GPUs for {}", values.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let mut per_node: Vec<u32> = points.iter().map(|p| p.cluster.gpus_per_node).collect();
    per_node.sort_unstable();
    per_node.dedup();
    let nodes: Vec<u32> = {
        let mut v: Vec<u32> = points.iter().map(|p| p.cluster.nodes).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let target = counts[0].0;
    let smallest = per_node[0];
    let fix = if target.is_multiple_of(smallest) {
        format!(
            "; for equal counts give every point the same node size, e.g. --gpus-per-node {smallest} --nodes {} ({target} GPUs each)",
            target / smallest
        )
    } else {
        format!(
            "; for equal counts give every point the same node size, e.g. --gpus-per-node {smallest}"
        )
    };
    let why = match (per_node.as_slice(), nodes.as_slice()) {
        ([_, _, ..], [n]) => format!(
            " (the profiles hold {} GPUs a node; every point has {n} nodes)",
            per_node
                .iter()
                .rev()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ),
        _ => String::new(),
    };
    Some(format!(
        "note: the points run on different GPU counts: {listed}{why}{fix}"
    ))
}

/// A note when `--axis gpu` prices every GPU at the one `--price-per-gpu-hour`: an H100 and a
/// GB200 hour rent for different amounts, so the cost column, read across GPUs, compares time at
/// one price, not the GPUs' costs (a buyer read a GB200 job at less than half an H100 job's cost
/// at $2.50 for both). The cost is linear in the price (time x GPUs x price), so each row's cost
/// at its own price is its cost x that price / the one given; the note says so.
fn one_price_note(axis: sweep::Axis, points: &[sweep::Point]) -> Option<String> {
    if axis != sweep::Axis::Gpu {
        return None;
    }
    let price = points.first()?.training.price_per_gpu_hour?;
    points.first()?.training.tokens?;
    let mut names: Vec<&str> = points.iter().map(|p| p.value.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 2 {
        return None;
    }
    let shown = crate::units::show_number(price);
    Some(format!(
        "note: the cost column prices every GPU at the one --price-per-gpu-hour {shown}, though they rent at different prices: a row's cost at its GPU's own price is its cost x that price / {shown} (or run `tpsim plan --gpu NAME --price-per-gpu-hour PRICE` for each)"
    ))
}

/// What tells two GPU points apart: every number of the profile, not its name, description or
/// sources (text the cost model never reads).
fn same_gpu_key(gpu: &crate::cluster::GpuProfile) -> String {
    let numbers = crate::cluster::GpuProfile {
        name: String::new(),
        description: None,
        sources: Vec::new(),
        ..gpu.clone()
    };
    serde_json::to_string(&numbers).unwrap_or_else(|_| gpu.name.clone())
}
