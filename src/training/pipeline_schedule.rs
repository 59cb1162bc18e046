//! Which pipeline schedule the framework runs.

use serde::{Deserialize, Serialize};

use crate::cost::v_schedule::VKind;

/// The pipeline schedule: the looped 1F1B family (interleaved with `--vpp > 1`) or one of the
/// V-shaped schedules with a split backward that PyTorch's pipelining offers
/// (`torch.distributed.pipelining.schedules`, torchtitan `pipeline_parallel_schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PipelineSchedule {
    /// 1F1B (Narayanan et al. 2021 §2.2.1), interleaved over `--vpp` chunks (§2.2.2): Megatron's
    /// schedules, PyTorch's `Schedule1F1B` / `ScheduleInterleaved1F1B`.
    #[default]
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// ZB-V (Qi et al. 2024 §6; PyTorch `ScheduleZBVZeroBubble`): two chunks per GPU in a V, the
    /// weight gradients scheduled into the bubble.
    #[serde(rename = "zbv")]
    ZeroBubbleV,
    /// DualPipeV (DeepSeek-AI 2024's DualPipe cut in half; PyTorch `ScheduleDualPipeV`).
    #[serde(rename = "dualpipev")]
    DualPipeV,
}

impl PipelineSchedule {
    /// The name the flag, plan files and JSON use.
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineSchedule::OneFOneB => "1f1b",
            PipelineSchedule::ZeroBubbleV => "zbv",
            PipelineSchedule::DualPipeV => "dualpipev",
        }
    }

    /// torchtitan's name (`parallelism.pipeline_parallel_schedule`), for `vpp` chunks per GPU.
    pub fn torchtitan_name(self, vpp: u32) -> &'static str {
        match self {
            PipelineSchedule::OneFOneB if vpp > 1 => "Interleaved1F1B",
            PipelineSchedule::OneFOneB => "1F1B",
            PipelineSchedule::ZeroBubbleV => "ZBVZeroBubble",
            PipelineSchedule::DualPipeV => "DualPipeV",
        }
    }

    /// The schedule in words, as the step-time lines print it, for `vpp` chunks per GPU.
    pub fn words(self, vpp: u32) -> &'static str {
        match self {
            PipelineSchedule::OneFOneB if vpp > 1 => "interleaved 1F1B",
            PipelineSchedule::OneFOneB => "1F1B",
            PipelineSchedule::ZeroBubbleV => "ZB-V",
            PipelineSchedule::DualPipeV => "DualPipeV",
        }
    }

    /// The closed form the search ranks on, in words: Narayanan et al.'s ratio for 1F1B, the V
    /// schedule simulated at the mean stage's chunks, the output layer on the first GPU, for the
    /// others (`cost::v_schedule::v_bubble_s`).
    pub fn closed_form_words(self) -> &'static str {
        match self {
            PipelineSchedule::OneFOneB => "(p-1)/(v·m)",
            PipelineSchedule::ZeroBubbleV | PipelineSchedule::DualPipeV => {
                "the schedule at mean chunks"
            }
        }
    }

    /// Parses the flag's value: tpsim's names or torchtitan's, any case.
    pub fn parse(text: &str) -> Result<PipelineSchedule, String> {
        match text.to_ascii_lowercase().as_str() {
            "1f1b" | "interleaved1f1b" | "interleaved-1f1b" => Ok(PipelineSchedule::OneFOneB),
            "zbv" | "zbvzerobubble" | "zb-v" => Ok(PipelineSchedule::ZeroBubbleV),
            "dualpipev" | "dualpipe-v" => Ok(PipelineSchedule::DualPipeV),
            _ => Err(format!(
                "{text:?} is not a pipeline schedule tpsim models; use 1f1b (interleaved with --vpp > 1), zbv (torchtitan's ZBVZeroBubble) or dualpipev (DualPipeV)"
            )),
        }
    }

    /// The V-shaped schedule this is, if it is one.
    pub fn v_kind(self) -> Option<VKind> {
        match self {
            PipelineSchedule::OneFOneB => None,
            PipelineSchedule::ZeroBubbleV => Some(VKind::ZeroBubbleV),
            PipelineSchedule::DualPipeV => Some(VKind::DualPipeV),
        }
    }
}
