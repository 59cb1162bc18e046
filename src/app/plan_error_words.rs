//! A plan error said in the words of the input that caused it: `eval` builds its plan from flags,
//! a flag's default (the expert TP follows `--tp`), a plan file, or a Megatron-LM launch line, and
//! the core's `PlanError` knows only the degrees. This module names what the user gave.

use anyhow::{Error, anyhow};

use crate::plan::PlanError;

/// `err` of a plan whose expert-TP degree the user never gave: Megatron-Core's
/// `--expert-tensor-parallel-size` defaults to the tensor-parallel size, so an expert MLP width or
/// a stage the expert TP does not fit is the user's `--tp` (`TpFfn` and `EpFolding` name `--etp`).
pub(super) fn with_etp_from_tp(err: PlanError, tp: u32) -> Error {
    match err {
        PlanError::TpFfn {
            flag: "--etp",
            tp: etp,
            ffn,
            valid,
            ..
        } if etp == tp => anyhow!(
            "--tp {tp} does not divide the expert MLP width {ffn}, which the expert TP splits too (--etp defaults to --tp, as in Megatron-Core; Megatron and DeepSpeed split it evenly over the ranks, and tpsim models even splits); keep --tp {tp} and give --etp, valid: {valid}"
        ),
        PlanError::EpFolding {
            ep,
            etp,
            stage_gpus,
        } if etp == tp => anyhow!(
            "--ep {ep} x --tp {tp} does not divide the {stage_gpus} GPUs of a pipeline stage (tp x cp x dp), over which Megatron-Core folds the experts (--etp defaults to --tp, as in Megatron-Core); give --etp with ep x etp dividing {stage_gpus}, or another --ep"
        ),
        other => other.into(),
    }
}
