//! `tpsim eval` and `tpsim report`: one given plan (flags, plan file or a Megatron-LM launch line)
//! evaluated with the simulated schedule, printed, emitted or written as a report.

use anyhow::{Result, anyhow, bail};

use super::emit_commands::{emitted, framework_of, target_name};
use super::megatron_paste::{
    LaunchBatch, apply_megatron_launch, attention_arg_of_backend, check_megatron_shape,
    check_megatron_training, check_pasted_megatron, check_pasted_stage_layers, layout_vpp,
    megatron_plan_file, megatron_request, pasted_precision, pasted_split, pasted_zero,
    read_megatron_launch,
};
use super::report_commands::{Destination, check_dir, schedule_note, write_eval_report};
use super::scenario::{
    Scenario, global_batch_advice, input_paths, precision_of_args, resolve_scenario, summaries,
};
use super::{Outcome, print_report};
use crate::cli::{EvalArgs, Format, GradDtypeArg, ReportArgs};
use crate::cost::simulated::simulate_plan;
use crate::emit;
use crate::plan::{ParallelPlan, PlanError, PlanRequest, Recompute, divisors};
use crate::planner::SearchOptions;
use crate::report::{self, Report, detail_for};
use crate::specs;

/// `eval` (and `report`, `quiet`): an error about a value the plan file gave names the file's
/// key and the file (`tp: 3 in plans/x.yaml`), not a flag the user never typed.
pub(super) fn eval(args: EvalArgs, quiet: bool) -> Result<Outcome> {
    let Some(path) = args.plan.clone() else {
        return eval_given(args, quiet);
    };
    // Each plan flag typed, with its value (`--recompute` sets the block layers too, to none).
    let recompute_layers = match (args.recompute_num_layers, args.recompute) {
        (Some(layers), _) => Some(Some(layers)),
        (None, Some(_)) => Some(None),
        (None, None) => None,
    };
    let mut given: Vec<super::plan_error_words::Typed> = [
        ("--tp", args.tp.map(Some)),
        ("--pp", args.pp.map(Some)),
        ("--dp", args.dp.map(Some)),
        ("--vpp", args.vpp.map(Some)),
        ("--micro-batch", args.micro_batch.map(Some)),
        ("--cp", args.cp.map(Some)),
        ("--ep", args.ep.map(Some)),
        ("--etp", args.etp.map(Some)),
        ("--zero", args.zero.map(|z| Some(u32::from(z)))),
        ("--recompute-num-layers", recompute_layers),
        ("--dp-replicas", args.dp_replicas.map(Some)),
        // A word, typed or not.
        ("--recompute", args.recompute.map(|_| None)),
        (
            "--sequence-parallel",
            args.sequence_parallel.map(|on| Some(u32::from(on))),
        ),
    ]
    .into_iter()
    .filter_map(|(flag, value)| value.map(|v| (flag, v)))
    .collect();
    given.extend(super::plan_error_words::scenario_flags_given(
        &args.cluster,
        &args.training,
    ));
    let cluster = args.cluster.clone();
    eval_given(args, quiet)
        .map_err(|err| super::plan_error_words::with_file_words(err, &path, &given, &cluster))
}

fn eval_given(mut args: EvalArgs, quiet: bool) -> Result<Outcome> {
    if let Some(target) =
        super::scenario::framework_for_emit(args.emit, &mut args.training, args.plan.is_some())
    {
        let model = args.model.clone();
        return eval_chosen(args, quiet)
            .map_err(|err| super::scenario::in_emit_framework_words(err, &model, target));
    }
    eval_chosen(args, quiet)
}

/// `eval` once the framework is chosen.
fn eval_chosen(args: EvalArgs, quiet: bool) -> Result<Outcome> {
    check_pasted_stage_layers(&args)?;
    // Block recompute of 0 layers would read as every layer (Megatron's uniform method counts
    // chunk sizes, where 0 is no chunk either): refused as `plan` refuses it.
    if let Some(layers) = args.recompute_num_layers {
        super::scenario::positive(
            "--recompute-num-layers",
            layers,
            "give the layers of each model chunk to recompute, or drop the flag for no block recompute",
        )?;
    }
    let inputs = eval_inputs(&args, quiet);
    if let Some(dir) = &args.report {
        check_dir(if quiet { "--out" } else { "--report" }, dir, &inputs)?;
    }
    // A Megatron-LM launch line runs Megatron-Core (`pretrain_gpt.py` builds its model, optimizer
    // and schedule from megatron/core), and torchtitan is launched from its own job config
    // (torchtitan/config/job_config.py), never from these arguments: the line was priced with
    // torchtitan's kernels, FSDP2 and defaults under the line's Megatron overlap switches, a run
    // neither framework makes. DeepSpeed stays: Megatron-DeepSpeed's pretrain_gpt.py takes
    // Megatron-LM's arguments (what `--emit deepspeed` writes beside its config), and the 2021
    // Megatron-LM took them too.
    if args.megatron_args.is_some()
        && args.training.framework == Some(crate::cli::FrameworkArg::Torchtitan)
    {
        bail!(
            "--framework torchtitan beside --megatron-args: a Megatron-LM launch line runs Megatron-Core (or, with --deepspeed, Megatron-DeepSpeed), never torchtitan, which is launched from its own job config; drop --framework torchtitan to price the line as Megatron-Core runs it, or give the layout with eval's flags (--tp, --pp, --micro-batch, ...) and --framework torchtitan"
        );
    }
    let megatron = match &args.megatron_args {
        Some(text) => Some(read_megatron_launch(text, args.model.vocab.is_some())?),
        None => None,
    };
    // `--zero-stage` is Megatron-DeepSpeed's (DeepSpeed's ZeRO, read by the reader's
    // `deepspeed_zero_stage`); Megatron-LM's argparse has no such flag, so a line priced as
    // Megatron-Core would price another optimizer than the one that runs.
    // A line that says `--deepspeed` is told so: the framework priced is --framework's alone (the
    // reader keeps `--deepspeed` among the switches it does not read), so the fix is the flag.
    let deepspeed_on_line = megatron
        .as_ref()
        .is_some_and(|launch| launch.ignored.iter().any(|t| t == "--deepspeed"));
    if let Some(launch) = &megatron
        && (launch.deepspeed_zero_stage || launch.deepspeed_ulysses)
        && deepspeed_on_line
        && args.training.framework != Some(crate::cli::FrameworkArg::Deepspeed)
    {
        bail!(
            "--megatron-args: the line has --deepspeed and {}, but a --deepspeed line needs --framework deepspeed on the command line, because tpsim takes the framework it prices (DeepSpeed's ZeRO engine, kernels and overlap) from --framework alone and reads --deepspeed on the line as no choice of one; add --framework deepspeed",
            if launch.deepspeed_zero_stage {
                format!("--zero-stage {}", launch.zero)
            } else {
                format!("--ds-sequence-parallel-size {}", launch.cp)
            }
        );
    }
    if let Some(launch) = &megatron
        && launch.deepspeed_zero_stage
        && args.training.framework != Some(crate::cli::FrameworkArg::Deepspeed)
    {
        bail!(
            "--megatron-args: --zero-stage {} is Megatron-DeepSpeed's ZeRO stage (DeepSpeed's engine runs its config's zero_optimization.stage; Megatron-LM has no such flag), and the line is priced as Megatron-Core runs it unless --framework deepspeed is given; add --framework deepspeed, or for Megatron-Core drop --zero-stage and give --use-distributed-optimizer (ZeRO-1) or --use-megatron-fsdp (ZeRO-2/3)",
            launch.zero
        );
    }
    if let Some(launch) = &megatron
        && launch.deepspeed_ulysses
        && args.training.framework != Some(crate::cli::FrameworkArg::Deepspeed)
    {
        bail!(
            "--megatron-args: --ds-sequence-parallel-size {} is Megatron-DeepSpeed's DeepSpeed-Ulysses degree (Megatron-LM has no such flag), and the line is priced as Megatron-Core runs it unless --framework deepspeed is given; add --framework deepspeed to price it as Ulysses (as --framework deepspeed --cp {} does), or use Megatron-Core's --context-parallel-size with --cp-comm-type a2a",
            launch.cp,
            launch.cp
        );
    }
    // `--deepspeed` runs Megatron-DeepSpeed's engine, whose ZeRO stage is its DeepSpeed config's
    // `zero_optimization.stage` (`--deepspeed_config FILE`, which tpsim does not read): the line's
    // own switches do not set it (megatron/optimizer/__init__.py: "if args.deepspeed: return
    // optimizer", before any distributed optimizer), and `--zero-stage` (arguments.py
    // `_add_zero_args`, default 1) only repeats it for `deepspeed.zero.Init`. Without
    // `--zero-stage` (`--zero` cannot stand beside the line) the stage was taken from Megatron's
    // switches, ZeRO-0 here, with a note calling `--deepspeed` harmless; the stage moves each
    // GPU's weights, gradients and Adam states between 16 bytes a parameter (ZeRO-0) and 16/dp
    // (ZeRO-3), which decides whether a plan fits: refused, naming the stage it would have priced.
    if let Some(launch) = &megatron
        && deepspeed_on_line
        && !launch.deepspeed_zero_stage
    {
        bail!(
            "--megatron-args: --deepspeed runs Megatron-DeepSpeed, whose ZeRO stage is its DeepSpeed config's zero_optimization.stage (--deepspeed_config, which tpsim does not read), and the line gives no --zero-stage, so tpsim would price ZeRO-{} from Megatron's own switches, which DeepSpeed's engine ignores; add the config's stage to the line as --zero-stage N (Megatron-DeepSpeed's argument) and give --framework deepspeed",
            launch.zero
        );
    }
    if let (Some(launch), Some(text), Some(_)) =
        (&megatron, &args.megatron_args, args.training.framework)
    {
        super::megatron_paste::check_launch_optimizer_framework(
            launch.optimizer_states,
            text,
            super::scenario::framework_of_args(&args.training),
        )?;
    }
    let plan_file = match (&args.plan, &megatron) {
        (Some(path), _) if crate::input_file::is_absent(path) => bail!(
            "plan file {path}: no such file; give the path of a plan written by `tpsim plan --save` (e.g. plans/seed-512b-32nodes.yaml)"
        ),
        (Some(path), _) => Some((specs::load_plan(path)?, path.clone())),
        (None, Some(launch)) => Some((
            megatron_plan_file(launch)?,
            super::megatron_paste::LAUNCH_LINE_ORIGIN.to_string(),
        )),
        (None, None) => None,
    };
    if let Some(launch) = &megatron {
        check_megatron_shape(launch, &args.model)?;
        super::megatron_paste::check_megatron_dp_replicas(launch, args.dp_replicas)?;
        check_megatron_training(launch, &args.training)?;
    }
    // Megatron-LM's own training flags, pasted (what `--emit megatron` writes): as tpsim's.
    let mut training_args = args.training.clone();
    if let Some(launch) = &megatron {
        super::megatron_paste::bf16_layers_as_flags(launch, &mut training_args);
    }
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
    // Megatron-FSDP requires the flag and runs unfused whatever it says (`fuses_wgrad_accumulation`).
    if args.no_gradient_accumulation_fusion && !args.use_megatron_fsdp {
        training_args.gradient_accumulation_fusion = Some(false);
    }
    if args.no_rope_fusion {
        training_args.rope_fusion = Some(false);
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
    // Megatron-LM's `--moe-router-padding-for-fp8` pasted on eval: the padding site it sets
    // (`MoeDispatch::router_padding`), off by default as in Megatron-Core.
    if args.moe_router_padding_for_fp8 && scenario.model.moe.is_some() {
        scenario.training.moe_dispatch.router_padding = true;
    }
    let mut launch_batch = LaunchBatch::Unchanged;
    if let Some(launch) = &megatron {
        launch_batch = apply_megatron_launch(launch, &args.cluster, &training_args, &mut scenario)?;
        // A launch line names no GPU: the default is the command's, not a plan file's omission.
        scenario.gpu_note = None;
    }
    super::scenario::note_window_without_effect(&scenario, &args.model);
    super::scenario::note_routing_without_effect(&scenario.training);
    let batch_given = training_args.global_batch.is_some()
        || launch_batch == LaunchBatch::MegatronDefault
        || plan_file
            .as_ref()
            .is_some_and(|(f, _)| f.global_batch.is_some());
    // The file the default batch is a missing line of (a launch line is no file).
    let batch_file = plan_file
        .as_ref()
        .map(|(_, path)| path.as_str())
        .filter(|path| *path != super::megatron_paste::LAUNCH_LINE_ORIGIN);
    let batch_options = SearchOptions {
        allow_uneven_pp: args.allow_uneven_pp,
        allow_cross_node_tp: args.allow_cross_node_tp,
        ..SearchOptions::default()
    };
    let request = match &plan_file {
        Some(_) if megatron.is_some() => megatron_request(
            megatron.as_ref().expect("checked above"),
            &scenario,
            args.allow_cross_node_tp,
        )?,
        Some((file, path)) => {
            check_file_reshard(&file.plan, path, &args)?;
            let changes_stages = args.pp.is_some_and(|pp| pp != file.plan.pp)
                || args.vpp.is_some_and(|vpp| vpp != file.plan.vpp);
            if let (Some((first, last)), true) = (file.plan.stage_split, changes_stages) {
                bail!(
                    "--pp/--vpp change the plan file's pipeline (pp {}, vpp {}), whose first/last stage split ({first}, {last}) was made for it; delete `stage_split` from the file (tpsim then splits the layers itself) or keep its --pp and --vpp",
                    file.plan.pp,
                    file.plan.vpp
                );
            }
            // The same for the layers the split places: a shape flag that changes them.
            let changes_layers = args.model.layers.is_some() || args.model.mtp_layers.is_some();
            if let (Some((first, last)), true) = (file.plan.stage_split, changes_layers) {
                bail!(
                    "--layers/--mtp-layers change the plan file's model, whose first/last stage split ({first}, {last}) was made for its layers; delete `stage_split` from the file (tpsim then splits the layers itself) or drop those flags"
                );
            }
            let mut request = with_plan_flags(file.plan, &args);
            if args.etp.is_none() {
                request.etp = file.etp_for(
                    scenario.training.framework,
                    request.tp,
                    request.ep,
                    scenario.model.moe.is_some(),
                );
            }
            if args.sequence_parallel.is_none() {
                request.sequence_parallel = file.sequence_parallel_for(
                    &scenario.model,
                    &scenario.training,
                    request.tp,
                    request.cp,
                );
            }
            request
        }
        None => {
            // Any parallel degree says a plan: the others default (`--cp 4` alone is tp 1, pp 1,
            // dp the GPUs left), where it was answered "no plan given" and the --cp dropped.
            if args.tp.is_none()
                && args.pp.is_none()
                && args.dp.is_none()
                && args.cp.is_none()
                && args.ep.is_none()
            {
                bail!(
                    "no plan given: pass --plan FILE, or at least one of --tp, --pp, --dp, --cp and --ep (e.g. --tp 8, or --tp 8 --pp 16; the others default to 1, dp to the GPUs left); `tpsim plan` finds the best one"
                );
            }
            let tp = args.tp.unwrap_or(1);
            let pp = args.pp.unwrap_or(1);
            let cp = args.cp.unwrap_or(1);
            let gpus = scenario.cluster.total_gpus();
            let model_parallel = u64::from(tp) * u64::from(pp) * u64::from(cp);
            // A zero degree is named as such, not as a product that divides nothing.
            for (what, degree) in [("--tp", tp), ("--cp", cp), ("--pp", pp)] {
                if degree == 0 {
                    return Err(PlanError::ZeroDegree { what }.into());
                }
            }
            let dp = match args.dp {
                Some(dp) => dp,
                None if model_parallel > 0 && u64::from(gpus) % model_parallel == 0 => {
                    (u64::from(gpus) / model_parallel) as u32
                }
                // No dp makes tp x pp fit the cluster; report a degree that can never work for this
                // model first, since changing the cluster would not fix it.
                // The degrees offered are those that make tp x cp x pp divide the GPUs beside the
                // given cp and pp; where none does (`--pp 3` on 8 GPUs), cp or pp is the cause too,
                // and the product is named below.
                None if tp > 0
                    && scenario.model.heads % tp != 0
                    && !tp_degrees_dividing(&scenario, &args, cp, pp).is_empty() =>
                {
                    return Err(PlanError::TpHeads {
                        tp,
                        heads: scenario.model.heads,
                        valid: tp_degrees_dividing(&scenario, &args, cp, pp).join(", "),
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
                    "--tp {tp} x --cp {cp} x --pp {pp} = {model_parallel} does not divide the cluster's {gpus} GPUs; choose tp x cp x pp dividing {gpus}"
                ),
            };
            let split = pasted_split(&args)?;
            let layout_vpp = layout_vpp(&split, pp, args.vpp, scenario.model.mtp_layers)?;
            let vpp = match (layout_vpp, args.num_layers_per_virtual_pipeline_stage) {
                (Some(v), _) => v,
                (None, Some(n)) => emit::vpp_from_layers_per_virtual_stage(
                    split.counted_layers(scenario.model.layers),
                    pp,
                    n,
                )
                .map_err(|message| anyhow!(message))?,
                (None, None) => args.vpp.unwrap_or(1),
            };
            PlanRequest {
                tp,
                pp,
                dp,
                vpp,
                micro_batch: args.micro_batch.unwrap_or(1),
                // Megatron-LM's default is off, but Megatron-Core trains MoE layers under TP only
                // with it (`PlanError::MoeTpWithoutSequenceParallel`): not given, it is taken on
                // there, and the note says so.
                sequence_parallel: args.sequence_parallel.unwrap_or_else(|| {
                    // Where the sequence does not split over the TP ranks either, it stays off
                    // and the plan's first broken rule is said.
                    crate::plan::moe_needs_sequence_parallel(
                        &scenario.model,
                        scenario.training.framework,
                        tp,
                    ) && crate::plan::sp_splits_sequence(tp, cp, &scenario.training)
                }),
                // Listed modules are selective recompute (Megatron's --recompute-granularity
                // selective), unless --recompute says otherwise (refused below).
                recompute: match args.recompute {
                    Some(asked) => asked.into(),
                    None if args.training.recompute_modules.is_some() => Recompute::Selective,
                    // `--recompute-num-layers N` alone is tpsim's pin (as `plan` reads it): full
                    // recompute of N layers per chunk.
                    None if args.recompute_num_layers.is_some()
                        && args.recompute_method.is_none() =>
                    {
                        Recompute::Full
                    }
                    None => Recompute::None,
                },
                zero: match args.zero {
                    Some(zero) => zero,
                    // FSDP2's reshard_after_forward is a ZeRO-3 setting: given alone, it implies
                    // --zero 3, as `plan --reshard-after-forward` pins it (a pasted line's own
                    // stage below 3 is still refused below).
                    None => match pasted_zero(&args, pp, &scenario.model)? {
                        0 if args.reshard_after_forward.is_some()
                            && args.data_parallel_sharding_strategy.is_none() =>
                        {
                            3
                        }
                        zero => zero,
                    },
                },
                allow_uneven_pp: args.allow_uneven_pp || split.any(),
                allow_cross_node_tp: args.allow_cross_node_tp,
                cp: args.cp.unwrap_or(1),
                ep: args.ep.unwrap_or(1),
                // Megatron-Core's `--expert-tensor-parallel-size` (which `--etp` aliases) defaults
                // to the tensor-parallel size (`TransformerConfig.__post_init__`), as the pasted
                // launch line reads it; torchtitan's follows its EP degree, and a dense model has
                // no experts.
                etp: args.etp.unwrap_or(scenario.training.framework.default_etp(
                    tp,
                    args.ep.unwrap_or(1),
                    scenario.model.moe.is_some(),
                )),
                reshard_after_forward: args.reshard_after_forward.unwrap_or(true),
                dp_replicas: args.dp_replicas.unwrap_or(1),
                recompute_num_layers: block_recompute_layers(&args),
                // `--decoder-first/last-pipeline-num-layers` without interleaving, as Megatron-LM
                // places them, evaluated as given (other pasted splits must match tpsim's own:
                // `check_pasted_megatron`).
                stage_split: split.given_first_last(scenario.model.layers, pp, vpp),
                ..PlanRequest::default()
            }
        }
    };
    if let (Some(_), Some(recipe)) = (args.training.precision, &args.fp8_recipe) {
        anyhow::bail!(
            "--fp8-recipe {recipe} is Megatron-LM's, read with --fp8-format; beside --precision give tpsim's --fp8-scaling current|delayed instead"
        );
    }
    // Megatron-LM's parameter-gather switches are read with its --fp8-format/--fp4-format;
    // beside tpsim's --precision they would be dropped without a word.
    if let (Some(_), Some(flag)) = (
        args.training.precision,
        [
            (args.fp8_param_gather, "--fp8-param-gather"),
            (args.fp4_param_gather, "--fp4-param-gather"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag)),
    ) {
        anyhow::bail!(
            "{flag} is Megatron-LM's, read with --fp8-format/--fp4-format; beside --precision it would be ignored (--framework megatron-core gathers low-precision weights by default); drop {flag}, or give Megatron-LM's format flag instead of --precision"
        );
    }
    let pasted = match args.training.precision {
        Some(_) => None,
        None => pasted_precision(&args, request.zero, &scenario.training)?,
    };
    // Pasted low-precision flags carry the parameter gather with them: without
    // --fp8-param-gather/--fp4-param-gather the bf16 weights stay the parameters; and per-tensor
    // FP8's recipe its scaling.
    if let Some(pasted) = pasted
        && pasted.precision != crate::plan::Precision::Bf16
    {
        scenario.training.fp8_param_gather = args.fp8_param_gather || args.fp4_param_gather;
        if let Some(scaling) = pasted.fp8_scaling {
            super::scenario::check_framework_runs_fp8_scaling(
                scenario.training.framework,
                scaling,
                "the pasted --fp8-recipe",
            )?;
            scenario.training.fp8_scaling = scaling;
        }
    }
    let request = PlanRequest {
        precision: match (args.training.precision, pasted) {
            (Some(_), _) => precision_of_args(&args.training),
            (None, Some(pasted)) => pasted.precision,
            (None, None) => request.precision,
        },
        ..request
    };
    super::scenario::check_fp8_scaling_applies(&args.training, request.precision)?;
    // Pasted precision flags set the gather themselves, whatever the file said.
    if let (None, Some((file, path))) = (pasted, &plan_file) {
        super::scenario::check_file_param_gather(file, path, &training_args, request.precision)?;
    }
    // Megatron-LM's uniform method reads its layer count only under full recompute; with none or
    // selective the typed count would be dropped without a word (`--recompute-num-layers` implies
    // full recompute only without a method, as `--help` says).
    if let (Some("uniform"), Some(layers), false) = (
        args.recompute_method.as_deref(),
        args.recompute_num_layers,
        request.recompute == Recompute::Full,
    ) {
        bail!(
            "--recompute-method uniform --recompute-num-layers {layers} sets the layers per chunk of full recompute, but the plan's recompute is {}; add --recompute full (Megatron-LM's --recompute-granularity full), or drop --recompute-num-layers and --recompute-method",
            request.recompute.as_str()
        );
    }
    // A layer count is what full recompute's block method recomputes; with none or selective it
    // would be dropped without a word.
    if request.recompute != Recompute::Full && request.recompute_num_layers > 0 {
        let recompute = request.recompute.as_str();
        let given = recompute_layers_given(&args, request.recompute_num_layers);
        if given.from_file {
            bail!(
                "{} counts the layers full recompute's block method recomputes, but the file's recompute is {recompute}; set recompute: full, or delete the recompute_num_layers line",
                given.words
            );
        }
        bail!(
            "{} counts the layers full recompute's block method recomputes, but the plan's recompute is {recompute}; add --recompute full, or drop {}",
            given.words,
            given.flag
        );
    }
    // Block recompute of N layers is Megatron's; torchtitan's full AC wraps every block.
    let framework = scenario.training.framework;
    if request.recompute == Recompute::Full
        && request.recompute_num_layers > 0
        && !framework.recomputes_some_layers()
    {
        bail!(
            "block recompute ({}) recomputes only some layers of each chunk, but --framework {} checkpoints every transformer block under full recompute; pass --recompute full --recompute-method uniform, or choose --framework megatron-core",
            recompute_layers_given(&args, request.recompute_num_layers).words,
            framework.as_str()
        );
    }
    // Modules are what selective recompute recomputes; with none or full they would do nothing.
    if let Some(words) = &args.training.recompute_modules
        && request.recompute != Recompute::Selective
    {
        let (why, fix) = match args.recompute {
            Some(asked) => (
                format!("--recompute {}", Recompute::from(asked).as_str()),
                "use --recompute selective",
            ),
            None => (
                format!(
                    "the pasted launch line's recompute ({})",
                    request.recompute.as_str()
                ),
                "set --recompute-granularity selective in the line",
            ),
        };
        bail!(
            "--recompute-modules {} says what selective recompute recomputes, but {why} is not selective; {fix} or drop --recompute-modules",
            words.join(" ")
        );
    }
    // A plan file's modules, the same rule (a launch line's are said in `megatron_paste`).
    if let Some((file, path)) = &plan_file
        && megatron.is_none()
        && args.training.recompute_modules.is_none()
    {
        super::scenario::check_file_modules_apply(
            file,
            path,
            request.recompute,
            args.recompute.map(|_| "--recompute"),
        )?;
    }
    // Resharding is a ZeRO-3 setting: asked for with a lower stage, it would be silently moot.
    if args.reshard_after_forward.is_some() && request.zero < 3 {
        return Err(PlanError::ReshardWithoutZero3 { zero: request.zero }.into());
    }
    let etp_follows_tp = plan_file.is_none()
        && args.etp.is_none()
        && scenario.model.moe.is_some()
        && request.etp == request.tp;
    // ZeRO-0 is eval's default, not a stage the user typed, where no --zero, plan file or launch
    // line gave one: the refusals that hinge on the stage say so.
    let zero_defaulted = args.zero.is_none() && plan_file.is_none() && megatron.is_none();
    let built = match ParallelPlan::build(
        &request,
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
    ) {
        Ok(plan) => Ok(plan),
        // ZeRO-0 is eval's default, not a stage the user typed: the message says so.
        Err(PlanError::TorchtitanExpertRanks {
            ep,
            dp_shard,
            cp,
            tp,
            ranks,
            fix,
            ..
        }) if zero_defaulted => {
            Err(PlanError::TorchtitanExpertRanks {
                ep,
                dp_shard,
                shard_why: "--zero was not given, so eval takes ZeRO-0 (Megatron-LM's default, not torchtitan's), which replicates every rank's states".to_string(),
                cp,
                tp,
                ranks,
                fix,
            }
            .into())
        }
        Err(PlanError::TorchtitanReplicatedCp { cp, fix, .. })
            if zero_defaulted =>
        {
            Err(anyhow!(
                "--cp {cp} under --framework torchtitan, and --zero was not given, so eval takes ZeRO-0 (Megatron-LM's default, not torchtitan's), which replicates every rank's states: torchtitan shards them with FSDP2 over the context-parallel ranks whenever cp > 1 (torchtitan/distributed/parallel_dims.py: `fsdp_enabled` is `dp_shard_enabled or cp_enabled`); give {fix}"
            ))
        }
        Err(PlanError::DpReplicasWithoutZero { replicas })
            if zero_defaulted =>
        {
            // The fix is the framework's: torchtitan keeps copies only of FSDP2's shards (HSDP),
            // and DeepSpeed and 2021 Megatron-LM keep none at any stage.
            let framework = scenario.training.framework;
            Err(match framework.dp_replicas_refusal(0) {
                _ if framework == crate::training::TrainingFramework::Torchtitan => anyhow!(
                    "--dp-replicas {replicas} needs FSDP, and --zero was not given, so eval takes ZeRO-0 (Megatron-LM's default, not torchtitan's), where every data-parallel rank holds a whole copy of the states; torchtitan's HSDP (data_parallel_replicate_degree {replicas}) replicates FSDP2's shards: give --zero 3, or drop --dp-replicas"
                ),
                Some((rule, fix)) => PlanError::DpReplicasFramework {
                    replicas,
                    framework: framework.as_str(),
                    rule,
                    fix,
                }
                .into(),
                None => anyhow!(
                    "--dp-replicas {replicas} needs ZeRO, and --zero was not given, so eval takes ZeRO-0 (as Megatron-LM without --use-distributed-optimizer), where every data-parallel rank holds a whole copy of the states and there is nothing to keep in fewer copies; give --zero 1, 2 or 3 (or --use-distributed-optimizer), or drop --dp-replicas"
                ),
            })
        }
        // The recompute came from a flag that implies it (`--recompute-num-layers N` full,
        // `--recompute-modules` selective), not a typed --recompute: that flag is named.
        Err(PlanError::CpuOffloadWithRecompute { layers, recompute })
            if args.recompute.is_none()
                && plan_file.is_none()
                && megatron.is_none()
                && (args.recompute_num_layers.is_some()
                    || args.training.recompute_modules.is_some()) =>
        {
            let implied_by = match (args.recompute_num_layers, &args.training.recompute_modules) {
                (Some(n), _) => format!("--recompute-num-layers {n}"),
                (None, modules) => format!(
                    "--recompute-modules {}",
                    modules.as_deref().unwrap_or_default().join(" ")
                ),
            };
            Err(anyhow!(
                "--cpu-offload-layers {layers} with {implied_by}, which means --recompute {recompute}: Megatron-Core offloads activations only without recompute (transformer_config.py: \"CPU offloading does not work when activation recomputation is enabled\"); drop {} or --cpu-offload-layers",
                implied_by.split(' ').next().unwrap_or_default()
            ))
        }
        // `--emit deepspeed` chose DeepSpeed, which the error's fix (`--framework megatron-core`)
        // would leave its configuration with no framework to run on: the fix is another emit.
        Err(PlanError::DpReplicasFramework { replicas, .. })
            if args.emit == Some(crate::cli::EmitTarget::Deepspeed)
                && args.training.framework == Some(crate::cli::FrameworkArg::Deepspeed) =>
        {
            Err(anyhow!(
                "--emit deepspeed with --dp-replicas {replicas}: DeepSpeed keeps its sharded states in groups only through MiCS (mics_shard_size), which tpsim does not model; give --dp-replicas 1, or --emit megatron (--num-distributed-optimizer-instances {replicas})"
            ))
        }
        // The expert TP follows --tp when the user gave no --etp (and no file or line set it).
        Err(e) if etp_follows_tp => Err(super::plan_error_words::with_etp_from_tp(e, request.tp)),
        Err(e) => Err(e.into()),
    };
    // A plan read from a launch line is refused in that line's words.
    let plan = built.map_err(|e| match (&megatron, e.downcast_ref::<PlanError>()) {
        (Some(launch), Some(err)) => anyhow!(
            super::megatron_paste::plan_error_in_launch_words(launch, err)
                .replace("--context-parallel-size", launch.cp_flag())
        ),
        (Some(launch), None) => anyhow!(
            super::megatron_paste::in_megatron_words(&e.to_string())
                .replace("--context-parallel-size", launch.cp_flag())
        ),
        (None, _) => e,
    })?;
    // Megatron-Core refuses block recompute of more layers than a model chunk holds
    // (`transformer_block.py` checks recompute_num_layers against the chunk's layers).
    if plan.recompute_num_layers > plan.layers_per_chunk() {
        bail!(
            "--recompute-num-layers {} is more than the {} layers of each model chunk (pp {}, vpp {}); give 1 to {} (the chunk's layers recompute all of them), or drop --recompute-num-layers and pin --recompute full (every layer)",
            plan.recompute_num_layers,
            plan.layers_per_chunk(),
            plan.pp,
            plan.vpp,
            plan.layers_per_chunk()
        );
    }
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
    // --delay-wgrad-compute as a flag (a --megatron-args line sets it with its overlap).
    scenario.training.delay_wgrad_compute |= args.delay_wgrad_compute;
    check_delay_wgrad_with_tp_overlap(&args, &scenario, &plan)?;
    if scenario.training.delay_wgrad_compute
        && plan.tp > 1
        && scenario.training.framework == crate::training::TrainingFramework::MegatronCore
    {
        super::held_notes::hold(
            "note: --delay-wgrad-compute: Transformer Engine stores each linear's wgrad GEMM for later and waits for its input gradient's TP all-reduce or reduce-scatter at once, so that collective is priced exposed, not hidden under the wgrad GEMM".to_string(),
        );
    }
    check_tp_comm_overlap(
        args.training.tp_comm_overlap,
        &plan,
        scenario.training.framework,
    )?;
    check_moe_alltoall_overlap(
        args.training.overlap_moe_expert_parallel_comm,
        &scenario.model,
        &scenario.training,
        &plan,
    )?;
    // A plan the launch configuration cannot describe is refused before any note is said.
    if let Some(target) = args.emit
        && let Some(reason) =
            framework_of(target).unsupported(&scenario.model, &scenario.training, &plan)
    {
        bail!("--emit {}: {reason}", target_name(target));
    }
    // Said once the plan is known to be valid, so a bad flag still gets a one-line error.
    super::held_notes::print_held();
    // The plan's own cp says how many ranks share each sequence.
    let batch_options = SearchOptions {
        pins: crate::planner::Pins {
            cp: Some(plan.cp),
            ..crate::planner::Pins::default()
        },
        ..batch_options
    };
    for line in global_batch_advice(&scenario, batch_given, batch_file, batch_options) {
        eprintln!("{line}");
    }
    if plan.zero >= 2 && plan.pp > 1 && plan.zero > scenario.training.framework.max_zero_with_pp() {
        eprintln!(
            "note: ZeRO-{} with pipeline parallelism is evaluated as asked, but --framework {} runs at most ZeRO-{} with pipelines (DeepSpeed's pipeline engine rejects ZeRO-2/3; 2021 Megatron-LM offers ZeRO-1), so `tpsim plan` does not propose it; megatron-core (Megatron-FSDP) and torchtitan (FSDP2) do",
            plan.zero,
            scenario.training.framework.as_str(),
            scenario.training.framework.max_zero_with_pp()
        );
    }
    if plan.zero == 3
        && scenario.model.moe.is_some()
        && !framework.runs_zero3_with_experts(plan.tp, plan.cp, plan.etp)
    {
        eprintln!(
            "note: ZeRO-3 on a mixture-of-experts model with tp {}, cp {}, etp {} is evaluated as asked, but --framework {} runs ZeRO-3 with experts only through AutoEP, without tensor, sequence or expert-tensor parallelism (its engine refuses native MoE layers under ZeRO-3 and AutoEP beside them), so `tpsim plan` does not propose it; give --zero 2, or tp, cp and etp 1",
            plan.tp,
            plan.cp,
            plan.etp,
            framework.as_str()
        );
    }
    if !framework.runs_zero_stage(plan.zero) {
        eprintln!(
            "note: ZeRO-{} is evaluated as asked, but --framework {} has no such stage: {}, so `tpsim plan` does not propose it",
            plan.zero,
            framework.as_str(),
            framework.zero_stages_it_has()
        );
    }
    // A degree the plan file set is named by its key, not by a flag the user never gave.
    let asked = |flag: &str, key: &str, value: String, flag_given: bool| match batch_file {
        Some(path) if !flag_given => {
            format!("{key}: {value} in {}", crate::input_file::quote(path))
        }
        _ if value.is_empty() => flag.to_string(),
        _ => format!("{flag} {value}"),
    };
    if plan.pp == 1 && scenario.training.pp_schedule.v_kind().is_some() {
        // A plan file's schedule is named by its key, and so is the depth that would use it.
        let typed = args.training.pp_schedule.is_some();
        eprintln!(
            "note: {} has no pipeline to schedule at pp 1 (one stage runs every micro-batch, no bubble); it applies to plans with {} 2 or more",
            asked(
                "--pp-schedule",
                "pp_schedule",
                scenario.training.pp_schedule.as_str().to_string(),
                typed
            ),
            if batch_file.is_some() && args.pp.is_none() {
                "pp:"
            } else {
                "--pp"
            }
        );
    }
    if plan.zero == 3
        && !plan.reshard_after_forward
        && !framework.keeps_gathered_parameters(
            plan.pp,
            plan.ep,
            scenario.model.tied_embeddings,
            plan.dp_replicas,
        )
    {
        eprintln!(
            "note: ZeRO-3 keeping the gathered parameters through the backward ({}) is evaluated as asked, but --framework {} has no such setting: {}, so `tpsim plan` does not propose it",
            asked(
                "--reshard-after-forward",
                "reshard_after_forward",
                "false".to_string(),
                args.reshard_after_forward.is_some()
            ),
            framework.as_str(),
            framework.gathered_parameters_words()
        );
    }
    if plan.cp > 1 && !framework.runs_context_parallelism() {
        eprintln!(
            "note: {} is evaluated as asked (Megatron-Core's ring context parallelism), but --framework {} has no such scheme, so `tpsim plan` does not propose it; megatron-core, torchtitan and deepspeed do",
            asked("--cp", "cp", plan.cp.to_string(), args.cp.is_some()),
            framework.as_str()
        );
    }
    if plan.sequence_parallel && !framework.runs_sequence_parallelism() {
        let value = if args.sequence_parallel.is_some() {
            String::new()
        } else {
            "true".to_string()
        };
        eprintln!(
            "note: {} is evaluated as asked, but --framework {} predates sequence parallelism (Korthikanti et al. 2022), so `tpsim plan` does not propose it; megatron-core, deepspeed and torchtitan run it",
            asked(
                "--sequence-parallel",
                "sequence_parallel",
                value,
                args.sequence_parallel.is_some()
            ),
            framework.as_str()
        );
    }
    if plan.vpp > 1 && !framework.interleaves_pipeline() {
        eprintln!(
            "note: {} is evaluated as asked (interleaved 1F1B), but --framework {}'s pipeline engine runs one chunk per stage, so `tpsim plan` does not propose it",
            asked("--vpp", "vpp", plan.vpp.to_string(), args.vpp.is_some()),
            framework.as_str()
        );
    }
    // The report's search runs the scenario as `plan` would, with the modules selective recompute
    // means there (kept before they are dropped below for a plan that does not use them).
    let searched_training = scenario.training;
    // Selective recompute's modules mean nothing to a plan that does not recompute selectively
    // (a given list with such a plan was refused above): not said, as a launch line would not.
    if plan.recompute != Recompute::Selective {
        scenario.training.recompute_modules = None;
    }
    let simulated = simulate_plan(
        &scenario.model,
        &scenario.cluster,
        &scenario.training,
        &plan,
    )
    .map_err(|e| anyhow!("simulating the pipeline schedule: {e}"))?;
    let estimate = simulated.estimate;
    // Said once the plan is priced: whether it fits decides whether the recompute is named.
    if let Some(note) = defaults_unlike_plan_rows(
        &args,
        plan_file.as_ref().map(|(file, path)| (file, path.as_str())),
        &plan,
        &scenario.model,
        framework,
        estimate.fits(),
    ) {
        eprintln!("{note}");
    }
    if let Some(note) = super::cp_exchange_note::unused_with_cp_1(
        &args.training,
        plan.cp,
        "this plan has cp 1",
        "give --cp 2 or more to use it",
    ) {
        eprintln!("{note}");
    }
    // What `plan`'s nothing-fits line says where the states alone outgrow the cluster.
    if !estimate.fits()
        && let Some(words) =
            super::plan_command::states_floor_words(&scenario, estimate.memory.capacity_bytes.0)
    {
        eprintln!("note: {words}; add nodes or use a larger-memory GPU");
    }
    if let Some(target) = args.emit {
        let framework = framework_of(target);
        if !estimate.fits() {
            eprintln!(
                "warning: this plan does not fit: {}",
                crate::report::misfit_words(&estimate.memory)
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
    let schedule_line = schedule_note(&simulated.summary, plan.pp, plan.vpp);
    if let Some(dir) = &args.report {
        let flag = if quiet { "--out" } else { "--report" };
        let options = SearchOptions {
            allow_uneven_pp: request.allow_uneven_pp,
            allow_cross_node_tp: request.allow_cross_node_tp,
            precision: request.precision,
            ..SearchOptions::default()
        };
        write_eval_report(
            Destination {
                flag,
                dir,
                inputs: &inputs,
            },
            (&scenario.model, &scenario.cluster, &searched_training),
            options,
            &report,
            &simulated,
            schedule_line.clone(),
        )?;
    }
    // Printed once every file is written: a failed report prints nothing on stdout.
    if !quiet {
        print_report(&report, args.format, |r| {
            format!(
                "{}\n\n{}\n{}\n{}\n{}",
                report::scenario_line(r),
                report::breakdown(&r.plans[0], &scenario.model, &scenario.cluster, &r.training),
                schedule_line,
                crate::uncertainty::within_error_line(
                    &r.plans,
                    &r.cluster.gpu,
                    r.training.framework,
                    crate::uncertainty::ModelKind::of(r.model.moe.is_some()),
                )
                .unwrap_or_default(),
                crate::memory_margin::margin_line(
                    &r.plans[0],
                    r.cluster.gpu_memory_bytes as f64,
                    r.training.framework,
                    "this plan",
                )
                .map(|line| line + "\n")
                .unwrap_or_default()
            )
        });
    }
    if estimate.fits() {
        Ok(Outcome::Found)
    } else {
        if quiet {
            // `tpsim report` prints no breakdown, so say why the exit code is 1.
            eprintln!(
                "the plan does not fit: {} (see the report's memory figure)",
                crate::report::misfit_words(&estimate.memory)
            );
        }
        Ok(Outcome::NothingFits)
    }
}

/// Where a block-recompute layer count came from, said in that source's words.
struct RecomputeLayersGiven {
    /// `--recompute-num-layers 5`, `--recompute-method block with ...` or
    /// `recompute_num_layers: 5 in p.yaml`.
    words: String,
    /// The flag that set it, for a fix that drops it.
    flag: &'static str,
    from_file: bool,
}

/// The flag when the command line gave the count; `--recompute-method block` when it stood alone
/// (the count is Megatron-LM's default, which nobody typed); else the plan file's key.
fn recompute_layers_given(args: &EvalArgs, layers: u32) -> RecomputeLayersGiven {
    match (
        &args.plan,
        args.recompute_num_layers,
        &args.recompute_method,
    ) {
        (_, None, Some(method)) => RecomputeLayersGiven {
            words: format!(
                "--recompute-method {method} with Megatron-LM's default of {layers} layer{}",
                if layers == 1 { "" } else { "s" }
            ),
            flag: "--recompute-method",
            from_file: false,
        },
        (Some(path), None, None) => RecomputeLayersGiven {
            words: format!("recompute_num_layers: {layers} in {path}"),
            flag: "--recompute-num-layers",
            from_file: true,
        },
        // Both typed: dropping the count alone would leave the method, refused the same way.
        (_, Some(_), Some(method)) => RecomputeLayersGiven {
            words: format!("--recompute-method {method} --recompute-num-layers {layers}"),
            flag: "--recompute-num-layers and --recompute-method",
            from_file: false,
        },
        _ => RecomputeLayersGiven {
            words: format!("--recompute-num-layers {layers}"),
            flag: "--recompute-num-layers",
            from_file: false,
        },
    }
}

/// Layers per chunk that full recompute's block method recomputes: Megatron-LM's pasted
/// `--recompute-method block --recompute-num-layers N` (N defaults to 1), or tpsim's own
/// `--recompute-num-layers N` without a method (block, as `plan --recompute-num-layers` pins it);
/// 0 (every layer) otherwise.
fn block_recompute_layers(args: &EvalArgs) -> u32 {
    match args.recompute_method.as_deref() {
        Some("block") => args.recompute_num_layers.unwrap_or(1),
        Some(_) => 0,
        None => args.recompute_num_layers.unwrap_or(0),
    }
}

/// The plan settings a flag-given `eval` took as Megatron-LM takes them without their flags, where
/// that default differs from what `plan` searches and prints in its row's columns: sequence
/// parallelism off (Megatron-LM's `--sequence-parallel` is off unless given), ZeRO-0 (no
/// `--use-distributed-optimizer`), and expert TP equal to tp (Megatron-Core's
/// `--expert-tensor-parallel-size` default, `TransformerConfig.__post_init__`). A row copied
/// from `plan` without them was evaluated as another plan (Llama 3 70B on 64 H100s: 162.5 GiB,
/// not the row's 78.0; DeepSeek-V3 on 256 GB200: 17.5 s, not the row's 7.5, its experts' TP
/// group spanning two NVLink segments), with nothing said. A pasted launch line states its own
/// settings (absent is off there), so it gets no note.
///
/// A plan file (`file`, with its path) that does not write these keys in its `plan:` is run at the
/// same defaults (`specs::PlanKeysGiven`), and the note names the file and its missing keys: a
/// hand-written file was evaluated at them without a word, where the same degrees as flags were
/// told.
///
/// Recompute defaults to none as well (Megatron-LM without `--recompute-granularity`), and is
/// said where it was not given and the plan does not fit: a row pasted from `plan` without its
/// recompute read "DOES NOT FIT" with no word that the recompute was defaulted (a plan that fits
/// without it is not told, so the README's fitting examples read as they did).
fn defaults_unlike_plan_rows(
    args: &EvalArgs,
    file: Option<(&crate::specs::PlanFile, &str)>,
    plan: &ParallelPlan,
    model: &crate::model::Model,
    framework: crate::training::TrainingFramework,
    fits: bool,
) -> Option<String> {
    let pasted_line = args.megatron_args.is_some() || args.bf16;
    if pasted_line {
        return None;
    }
    let typed = crate::specs::PlanKeysGiven {
        etp: args.etp.is_some(),
        sequence_parallel: args.sequence_parallel.is_some(),
        zero: args.zero.is_some()
            || args.use_distributed_optimizer
            || args.use_megatron_fsdp
            || args.use_torch_fsdp2
            || args.data_parallel_sharding_strategy.is_some(),
        recompute: args.recompute.is_some()
            || args.recompute_num_layers.is_some()
            || args.recompute_method.is_some()
            || args.training.recompute_modules.is_some(),
        saved_without: crate::specs::SavedWithoutKeys::NONE,
    };
    plan_defaults_note("eval", typed, file, plan, model, framework, fits)
}

/// [`defaults_unlike_plan_rows`] for the settings `typed` says a flag gave, and a plan file's
/// keys: `compare --plan A --plan B` runs each file at the same defaults and says so in the
/// same words (it said nothing, where `eval --plan` printed the note), less the flags it does not
/// take.
pub(super) fn plan_defaults_note(
    command: &str,
    typed: crate::specs::PlanKeysGiven,
    file: Option<(&crate::specs::PlanFile, &str)>,
    plan: &ParallelPlan,
    model: &crate::model::Model,
    framework: crate::training::TrainingFramework,
    fits: bool,
) -> Option<String> {
    let in_file = file.map_or(crate::specs::PlanKeysGiven::NONE, |(f, _)| f.given);
    // What was taken, and the column of `plan`'s table that shows it.
    // Where the framework's own default differs from Megatron-LM's, the note names it in the
    // framework's terms: torchtitan's TP plan always shards the sequence (its norms run under
    // `SequenceParallel`, with no switch to turn it off) and shards with FSDP2 by default
    // (`data_parallel_shard_degree = -1`); DeepSpeed's `zero_optimization.stage` defaults to 0.
    use crate::training::TrainingFramework as F;
    let mut taken: Vec<(String, &str)> = Vec::new();
    if !typed.sequence_parallel
        && !in_file.sequence_parallel
        && plan.tp > 1
        && framework.runs_sequence_parallelism()
    {
        let setting = match framework {
            F::Torchtitan => {
                "sequence parallel off (--sequence-parallel; torchtitan's TP always runs it)"
            }
            _ if plan.sequence_parallel => {
                "sequence parallel on (--sequence-parallel; Megatron-LM's default is off, but Megatron-Core trains MoE layers under TP only with it, moe_layer.py)"
            }
            _ => "sequence parallel off (--sequence-parallel)",
        };
        taken.push((setting.to_string(), "sp"));
    }
    if !typed.zero && !in_file.zero && plan.zero == 0 && u64::from(plan.dp) * u64::from(plan.cp) > 1
    {
        let setting = match framework {
            F::Torchtitan => {
                "ZeRO-0 (--zero; torchtitan's default, FSDP2 with data_parallel_shard_degree -1, is --zero 3)"
            }
            F::Deepspeed => "ZeRO-0 (--zero; DeepSpeed's zero_optimization.stage, 0 unless set)",
            _ => "ZeRO-0 (--zero)",
        };
        taken.push((setting.to_string(), "zero"));
    }
    // Only where the search could have ranked the other layout (etp 1): torchtitan's EP degree
    // fixes its expert layout (`TrainingFramework::runs_expert_tp`), so etp = tp at ep 1 is its
    // own and every plan row's, no Megatron-LM default.
    if !typed.etp
        && !in_file.etp
        && model.moe.is_some()
        && plan.tp > 1
        && plan.etp == plan.tp
        && framework.runs_expert_tp(1, plan.ep, plan.tp)
    {
        taken.push((
            format!("expert tensor parallelism {} as tp (--etp)", plan.etp),
            "etp",
        ));
    }
    // The one default said only where it matters: a plan that does not fit without recompute
    // may fit with it, as `plan`'s recomp column may have ranked it.
    if !typed.recompute && !in_file.recompute && !fits && plan.recompute == Recompute::None {
        taken.push((
            "no recompute (--recompute; this plan does not fit, and --recompute selective|full recomputes activations to save their memory)".to_string(),
            "recomp",
        ));
    }
    if taken.is_empty() {
        return None;
    }
    let (settings, columns): (Vec<String>, Vec<&str>) = taken.into_iter().unzip();
    let keys: Vec<String> = columns
        .iter()
        .map(|column| match *column {
            "sp" => "sequence_parallel:".to_string(),
            "recomp" => "recompute:".to_string(),
            other => format!("{other}:"),
        })
        .collect();
    let (columns, flags) = match columns.as_slice() {
        [one] => (format!("its {one} column"), "that flag"),
        [rest @ .., last] => (
            format!("its {} and {last} columns", rest.join(", ")),
            "those flags",
        ),
        [] => unreachable!("checked above"),
    };
    let whose = match framework {
        F::Torchtitan => "Megatron-LM's defaults, not torchtitan's",
        F::Deepspeed => "Megatron-LM's defaults (DeepSpeed's too)",
        _ => "Megatron-LM's defaults",
    };
    Some(match file {
        None => format!(
            "note: not given, so eval took {whose}: {}; a `tpsim plan` row was ranked with the values in {columns}: give {flags} to evaluate that row",
            settings.join(", ")
        ),
        Some((_, path)) => format!(
            "note: {} gives no {} under plan:, so {command} took {whose}: {}; a `tpsim plan` row was ranked with the values in {columns}: write them in the file (a `tpsim plan --save` file writes every key){}",
            crate::input_file::quote(path),
            keys.join(", "),
            settings.join(", "),
            // `compare` takes no plan flags: the file is where they go.
            if command == "eval" {
                format!(" or give {flags}")
            } else {
                String::new()
            }
        ),
    })
}

/// `--delay-wgrad-compute` where TP comm overlap applies (tp > 1 with sequence parallelism,
/// `cost::overlap_applied`) is refused: Megatron-Core cannot build that model. With
/// `tp_comm_overlap` it passes `ub_bulk_wgrad=tp_comm_bulk_wgrad` (on by default,
/// model_parallel_config.py, and no Megatron-LM flag turns it off) to every Transformer Engine
/// LayerNormLinear (megatron/core/extensions/transformer_engine.py at d98e8a64), and Transformer
/// Engine's `WeightGradStore` asserts "ub_bulk_wgrad is not supported when enabling
/// delay_wgrad_compute" (transformer_engine/pytorch/module/_common.py at d0067d0da). The overlap
/// may be `--framework megatron-core`'s default, so the fix names the switch that turns it off.
fn check_delay_wgrad_with_tp_overlap(
    args: &EvalArgs,
    scenario: &super::scenario::Scenario,
    plan: &ParallelPlan,
) -> Result<()> {
    let training = &scenario.training;
    if !training.delay_wgrad_compute
        || training.framework != crate::training::TrainingFramework::MegatronCore
        || !crate::cost::overlap_applied(
            scenario.model.moe.is_some(),
            scenario.model.mtp_layers,
            training,
            plan,
        )
        .tp_comm
    {
        return Ok(());
    }
    const WHY: &str = "Transformer Engine refuses the pair (module/_common.py WeightGradStore asserts \"ub_bulk_wgrad is not supported when enabling delay_wgrad_compute\"; Megatron-Core passes its tp_comm_bulk_wgrad, on by default, to every TE LayerNormLinear under TP comm overlap)";
    if args.megatron_args.is_some() {
        bail!(
            "--megatron-args: --delay-wgrad-compute with --tp-comm-overlap at tp {} with --sequence-parallel: {WHY}; drop --tp-comm-overlap or --delay-wgrad-compute from the line",
            plan.tp
        );
    }
    let overlap = match args.training.tp_comm_overlap {
        Some(true) => "--tp-comm-overlap".to_string(),
        _ => format!(
            "TP comm overlap (--framework {}'s default at tp {} with sequence parallelism)",
            training.framework.as_str(),
            plan.tp
        ),
    };
    bail!(
        "--delay-wgrad-compute with {overlap}: {WHY}; give --tp-comm-overlap false, or drop --delay-wgrad-compute"
    )
}

/// `--tp-comm-overlap` given on the command line for a plan it cannot apply to is refused, as
/// Megatron-LM refuses it ("Tensor parallel communication/GEMM overlap can happen only when
/// sequence parallelism is enabled", arguments.py) and as a pasted launch line is refused; a
/// framework's default overlap is not a request, and the header says what the plan overlaps.
fn check_tp_comm_overlap(
    given: Option<bool>,
    plan: &ParallelPlan,
    framework: crate::training::TrainingFramework,
) -> Result<()> {
    if given != Some(true) || (plan.tp > 1 && plan.sequence_parallel) {
        return Ok(());
    }
    // torchtitan's async TP (`parallelism.enable_async_tensor_parallel`) fuses the all-gathers
    // and reduce-scatters that its TP plan, always sequence-parallel, runs: the rule is the same,
    // said in its terms rather than as a Megatron-LM assertion.
    let torchtitan = framework == crate::training::TrainingFramework::Torchtitan;
    if plan.tp == 1 {
        if torchtitan {
            bail!(
                "--tp-comm-overlap (torchtitan's async TP, parallelism.enable_async_tensor_parallel) overlaps tensor-parallel collectives, and the plan has tp 1; give --tp 2 or more (parallelism.tensor_parallel_degree) with --sequence-parallel, or drop --tp-comm-overlap"
            );
        }
        bail!(
            "--tp-comm-overlap needs tensor parallelism with --sequence-parallel (Megatron-LM arguments.py), and the plan has tp 1; give --tp 2 or more with --sequence-parallel, or drop --tp-comm-overlap"
        );
    }
    if torchtitan {
        bail!(
            "--tp-comm-overlap (torchtitan's async TP) overlaps the all-gathers and reduce-scatters of sequence-parallel TP, and the plan (tp {}) has sequence parallel off, which torchtitan's TP never runs; add --sequence-parallel or drop --tp-comm-overlap",
            plan.tp
        );
    }
    bail!(
        "--tp-comm-overlap needs --sequence-parallel (Megatron-LM arguments.py), and the plan (tp {}) has none; add --sequence-parallel or drop --tp-comm-overlap",
        plan.tp
    )
}

/// The files `eval` (or `tpsim report`, when `quiet`) reads, with the flag that names each: no
/// report file may replace one of them.
fn eval_inputs(args: &EvalArgs, quiet: bool) -> Vec<(&'static str, &str)> {
    let mut inputs = input_paths(&args.model, &args.cluster);
    let plan_flag = if quiet { "the plan FILE" } else { "--plan" };
    inputs.extend(args.plan.as_deref().map(|p| (plan_flag, p)));
    // Only `@FILE` names a file; otherwise the value is the launch line itself.
    inputs.extend(
        args.megatron_args
            .as_deref()
            .filter(|m| m.starts_with('@'))
            .map(|m| ("--megatron-args", m)),
    );
    inputs
}

/// `--overlap-moe-expert-parallel-comm` given for a plan Megatron-Core's combined 1F1B schedule
/// cannot run is refused, as Megatron-Core refuses it (`cost::moe::alltoall_overlap_refusal`) and
/// as a pasted launch line is.
fn check_moe_alltoall_overlap(
    given: Option<bool>,
    model: &crate::model::Model,
    training: &crate::training::Training,
    plan: &ParallelPlan,
) -> Result<()> {
    if given != Some(true) {
        return Ok(());
    }
    // No plan of a dense model has an all-to-all, so the fix is not another plan (as `plan`
    // says it, `plan_command::check_search_input`).
    if model.moe.is_none() {
        bail!(
            "--overlap-moe-expert-parallel-comm: model {} is dense (no experts), so no plan has an expert all-to-all to overlap; drop the flag",
            model.name
        );
    }
    match crate::cost::moe::alltoall_overlap_refusal(model, training, plan) {
        Some(why) => bail!(
            "--overlap-moe-expert-parallel-comm: {why} (Megatron-Core transformer_config.py refuses it otherwise); change the plan or drop the flag"
        ),
        None => Ok(()),
    }
}

/// `tpsim report FILE --out DIR`: `eval --plan FILE --report DIR` without the terminal breakdown.
pub(super) fn report_command(args: ReportArgs) -> Result<Outcome> {
    let plan = args.plan.or(args.plan_flag);
    // One line naming what is missing and the way out (clap's "required arguments were not
    // provided: <PLAN_FILE>" sat beside a usage that showed it optional, and said no fix).
    let missing = match (&plan, &args.out) {
        (Some(_), Some(_)) => None,
        (None, Some(_)) => Some("no plan file given"),
        (Some(_), None) => Some("no --out DIR given"),
        (None, None) => Some("no plan file and no --out DIR given"),
    };
    if let Some(missing) = missing {
        bail!(
            "report: {missing}; it writes the report of a saved plan: tpsim report PLAN_FILE --out DIR (save one with `tpsim plan ... --save PLAN_FILE`), or plan and report in one go with `tpsim plan ... --report DIR`"
        );
    }
    let eval_args = EvalArgs {
        model: args.model,
        cluster: args.cluster,
        training: args.training,
        plan,
        tp: None,
        pp: None,
        cp: None,
        ep: None,
        etp: None,
        reshard_after_forward: None,
        dp_replicas: None,
        dp: None,
        vpp: None,
        micro_batch: None,
        sequence_parallel: None,
        recompute: None,
        zero: None,
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        report: args.out,
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
        pipeline_model_parallel_layout: None,
        delay_wgrad_compute: false,
        no_gradient_accumulation_fusion: false,
        no_rope_fusion: false,
        fp8_format: None,
        fp8_recipe: None,
        fp8_param_gather: false,
        fp4_format: None,
        fp4_recipe: None,
        fp4_param_gather: false,
        no_overlap_p2p_communication: false,
        ckpt_format: None,
        moe_grouped_gemm: false,
        moe_router_padding_for_fp8: false,
        moe_token_dispatcher_type: None,
        moe_flex_dispatcher_backend: None,
        multi_latent_attention: false,
        emit: None,
        megatron_args: None,
    };
    // `report` takes the plan's degrees only from the file: a fix that offers `--dp 4` offers a
    // flag it does not have, so the fix names the file's keys (`dp: 4`), as `compare --plan` does
    // (a scenario flag typed over the file keeps its flag).
    let given =
        super::plan_error_words::scenario_flags_given(&eval_args.cluster, &eval_args.training);
    eval(eval_args, true).map_err(|err| {
        anyhow::anyhow!(super::plan_error_words::fix_in_file_keys(
            &format!("{err:#}"),
            &given
        ))
    })
}

/// A plan file's `reshard_after_forward: false` under a ZeRO stage below 3 (the file's own, or
/// `--zero` over it) is refused in the file's words: the plan builder's message names
/// `--reshard-after-forward`, a flag the user never typed, and offers to drop it.
fn check_file_reshard(file: &PlanRequest, path: &str, args: &EvalArgs) -> Result<()> {
    if file.reshard_after_forward || args.reshard_after_forward.is_some() {
        return Ok(());
    }
    match args.zero {
        None if file.zero < 3 => bail!(
            "{path}: reshard_after_forward: false needs zero: 3 (only FSDP/ZeRO-3 gathers parameters, so only it can keep them gathered until the backward), and the file has zero: {}; set zero: 3, or delete the reshard_after_forward line",
            file.zero
        ),
        Some(zero) if zero < 3 => bail!(
            "--zero {zero} with {path}'s reshard_after_forward: false: only FSDP/ZeRO-3 gathers parameters, so only it can keep them gathered until the backward; give --zero 3, or delete the file's reshard_after_forward line"
        ),
        _ => Ok(()),
    }
}

/// A plan file's plan with the plan flags given next to `--plan` in their place, as `--plan`'s help
/// says (`--sequence-parallel true|false` sets sequence parallelism either way; the allow flags add to the file's).
fn with_plan_flags(file: PlanRequest, args: &EvalArgs) -> PlanRequest {
    PlanRequest {
        tp: args.tp.unwrap_or(file.tp),
        pp: args.pp.unwrap_or(file.pp),
        dp: args.dp.unwrap_or(file.dp),
        vpp: args.vpp.unwrap_or(file.vpp),
        micro_batch: args.micro_batch.unwrap_or(file.micro_batch),
        sequence_parallel: args.sequence_parallel.unwrap_or(file.sequence_parallel),
        recompute: match args.recompute {
            Some(asked) => asked.into(),
            // Listed modules are selective recompute, whatever the file's plan recomputed.
            None if args.training.recompute_modules.is_some() => Recompute::Selective,
            // `--recompute-num-layers N` alone pins full block recompute, as without `--plan`.
            None if args.recompute_num_layers.is_some() && args.recompute_method.is_none() => {
                Recompute::Full
            }
            None => file.recompute,
        },
        zero: args.zero.unwrap_or(file.zero),
        allow_uneven_pp: file.allow_uneven_pp || args.allow_uneven_pp,
        allow_cross_node_tp: file.allow_cross_node_tp || args.allow_cross_node_tp,
        cp: args.cp.unwrap_or(file.cp),
        ep: args.ep.unwrap_or(file.ep),
        etp: args.etp.unwrap_or(file.etp),
        reshard_after_forward: args
            .reshard_after_forward
            .unwrap_or(file.reshard_after_forward),
        dp_replicas: args.dp_replicas.unwrap_or(file.dp_replicas),
        // A recompute flag replaces the file's recompute, its block layer count included.
        recompute_num_layers: match (args.recompute_method.as_deref(), args.recompute) {
            (None, None) if args.recompute_num_layers.is_none() => file.recompute_num_layers,
            _ => block_recompute_layers(args),
        },
        ..file
    }
}

/// The TP degrees `eval --tp` offers where the given one divides neither the heads nor, beside
/// `cp` and `pp`, the GPUs: divisors of the heads inside the NVLink domain (unless TP may cross
/// it; one node, or an NVL72 rack's, as `plan::valid_tp_degrees` offers and eval accepts) that
/// pass the KV-head and MLP-width rules (as `plan::check_heads` offers them) and whose
/// tp x cp x pp divides the cluster's GPUs, so that each one offered passes those checks too.
fn tp_degrees_dividing(scenario: &Scenario, args: &EvalArgs, cp: u32, pp: u32) -> Vec<String> {
    let gpus = u64::from(scenario.cluster.total_gpus());
    let model = &scenario.model;
    divisors(model.heads)
        .into_iter()
        .filter(|d| *d <= scenario.cluster.nvlink_domain() || args.allow_cross_node_tp)
        .filter(|d| model.kv_heads.is_multiple_of(*d) || d.is_multiple_of(model.kv_heads))
        .filter(|d| model.dense_layers() == 0 || model.ffn_hidden.is_multiple_of(*d))
        .filter(|d| gpus.is_multiple_of(u64::from(*d) * u64::from(cp) * u64::from(pp)))
        .map(|d| d.to_string())
        .collect()
}
