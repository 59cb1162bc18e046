//! Plan files `plan --save` wrote before the `framework:`, `attention:` and `overlap:` keys
//! existed (2026-11-29/30, commits 31381a1 and 0d897b5) load with today's defaults for them. A
//! saved plan should evaluate as it was saved or say what it assumed: one note per missing key,
//! naming the key and the value taken, written as the line to add to the file to keep it.

use super::held_notes;
use crate::specs::PlanFile;
use crate::training::{AttentionKernel, Overlap, TrainingFramework};

/// What a scenario took for the keys a tpsim-saved `file` (at `path`) lacks: `framework` and
/// `overlap` where `--framework` was not given (it replaces both), `attention` where
/// `--attention` was not given. `overlap` is the one evaluated (the default under the overlap
/// flags given) and whether any overlap flag was given; None where every one was. Nothing for a
/// launch line, a hand-written file or no file.
pub(super) fn note_assumed_keys(
    file: Option<(&PlanFile, &str)>,
    framework: Option<TrainingFramework>,
    overlap: Option<(Overlap, bool)>,
    attention: Option<AttentionKernel>,
) {
    let Some((file, path)) = file else {
        return;
    };
    let lacking = file.given.saved_without;
    let quoted = crate::input_file::quote(path);
    let say = |key: &str, value: String, under_flags: &str, fix: &str| {
        held_notes::hold(format!(
            "note: {quoted} was saved before plan files kept {key}:, so it is evaluated with today's default{under_flags}, {key}: {value}; if the plan was made with another, add its {key}: line to the file (or {fix})"
        ));
    };
    if let Some(framework) = framework.filter(|_| lacking.framework) {
        say(
            "framework",
            framework.as_str().to_string(),
            "",
            "pass --framework",
        );
    }
    if let Some((overlap, flag_given)) = overlap.filter(|_| lacking.overlap) {
        say(
            "overlap",
            overlap_flow_mapping(overlap),
            if flag_given {
                " under the overlap flags given"
            } else {
                ""
            },
            "pass --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather, --overlap-p2p-comm, --overlap-moe-expert-parallel-comm",
        );
    }
    if let Some(attention) = attention.filter(|_| lacking.attention) {
        say(
            "attention",
            attention.as_str().to_string(),
            "",
            "pass --attention",
        );
    }
}

/// An overlap as the one-line YAML mapping a plan file's `overlap:` takes.
fn overlap_flow_mapping(o: Overlap) -> String {
    format!(
        "{{tp_comm: {}, grad_reduce: {}, param_gather: {}, p2p: {}, moe_a2a: {}}}",
        o.tp_comm, o.grad_reduce, o.param_gather, o.p2p, o.moe_a2a
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlap_mapping_reads_back_as_the_same_overlap() {
        let overlap = TrainingFramework::MegatronCore.default_overlap();
        let text = overlap_flow_mapping(overlap);
        let back: Overlap = yaml_serde::from_str(&text).unwrap();
        assert_eq!(back, overlap, "{text}");
    }
}
