//! `eval --plan FILE --framework X` evaluates the file as X runs it: the settings the file saved
//! for its own framework (context-parallel exchange, overlap, local batch, FP8 parameter gather,
//! kernel fusion) give way to X's defaults. Each one the file states and X replaces is named in
//! one note, with the flag that keeps the file's where X runs it.

use crate::cli::TrainingArgs;
use crate::specs::PlanFile;
use crate::training::{KernelFusion, Training, TrainingFramework};

/// The note naming the file's settings `--framework` replaced (the file's key and value, the
/// value used, and how to keep the file's); `None` when no `--framework` was given or nothing the
/// file states was replaced. The fixes and FP8 recipe and optimizer states the file keeps under
/// any framework are not named.
pub(super) fn replaced_settings_note(
    file: &PlanFile,
    path: &str,
    args: &TrainingArgs,
    training: &Training,
) -> Option<String> {
    args.framework?;
    let framework = training.framework;
    let name = framework.as_str();
    let mut replaced = Vec::new();
    if let Some(exchange) = file.cp_exchange
        && file.plan.cp > 1
        && args.cp_exchange.is_none()
        && exchange != training.cp_exchange
    {
        let keep = if framework.runs_cp_exchange(exchange) {
            format!("--cp-exchange {} keeps the file's", exchange.as_str())
        } else {
            format!("{name} does not run {}", exchange.as_str())
        };
        replaced.push(format!(
            "cp_exchange: {} is now {} ({keep})",
            exchange.as_str(),
            training.cp_exchange.as_str()
        ));
    }
    if let Some(saved) = file.overlap {
        let used = training.overlap;
        for (key, flag, given, was, now) in [
            (
                "tp_comm",
                "--tp-comm-overlap",
                args.tp_comm_overlap,
                saved.tp_comm,
                used.tp_comm,
            ),
            (
                "grad_reduce",
                "--overlap-grad-reduce",
                args.overlap_grad_reduce,
                saved.grad_reduce,
                used.grad_reduce,
            ),
            (
                "param_gather",
                "--overlap-param-gather",
                args.overlap_param_gather,
                saved.param_gather,
                used.param_gather,
            ),
            (
                "p2p",
                "--overlap-p2p-comm",
                args.overlap_p2p_comm,
                saved.p2p,
                used.p2p,
            ),
            (
                "moe_a2a",
                "--overlap-moe-expert-parallel-comm",
                args.overlap_moe_expert_parallel_comm,
                saved.moe_a2a,
                used.moe_a2a,
            ),
        ] {
            if given.is_some() || was == now {
                continue;
            }
            // Megatron-Core's combined 1F1B schedule is refused under any other framework.
            let keep = if key == "moe_a2a" && framework != TrainingFramework::MegatronCore {
                format!("{name} does not run it")
            } else {
                format!("{flag} {was} keeps the file's")
            };
            replaced.push(format!("overlap {key}: {was} is now {now} ({keep})"));
        }
    }
    if let Some(local) = file.local_batch
        && args.local_batch.is_none()
        && training.local_batch != Some(local)
    {
        let keep = if framework == TrainingFramework::Torchtitan {
            format!("--local-batch {local} keeps the file's")
        } else {
            format!("{name} runs the whole step in one pipeline schedule")
        };
        replaced.push(format!("local_batch: {local} is now none ({keep})"));
    }
    if let Some(gather) = file.fp8_param_gather
        && gather != training.fp8_param_gather
    {
        replaced.push(format!(
            "fp8_param_gather: {gather} is now {}",
            training.fp8_param_gather
        ));
    }
    if let Some(fusion) = file.kernel_fusion
        && args.torch_compile.is_none()
        && fusion != training.kernel_fusion
    {
        let keep = if framework == TrainingFramework::Torchtitan {
            format!(
                "--torch-compile {} keeps the file's",
                fusion == KernelFusion::Fused
            )
        } else {
            format!("{name} ships fused kernels")
        };
        replaced.push(format!(
            "kernel_fusion: {} is now {} ({keep})",
            fusion.as_str(),
            training.kernel_fusion.as_str()
        ));
    }
    if replaced.is_empty() {
        return None;
    }
    Some(format!(
        "note: --framework {name} evaluates {path} with {name}'s own settings in place of the file's: {}; drop --framework to evaluate the file as saved",
        replaced.join("; ")
    ))
}
