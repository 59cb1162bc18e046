//! The PP rows: one activation send forward and one gradient send backward per micro-batch per
//! model chunk at each stage boundary (none forward from the model's last chunk, none backward
//! from its first: `Ends::boundary_sends`), b·s·h/t bytes with Megatron's scatter/gather
//! (Narayanan et al. 2021 §4.1).

use super::{Op, Pass, Rows, Scope, Step};
use crate::cost::groups::GroupKind;
use crate::cost::{comm, embedding_grad_sync};

/// Pushes the stage-boundary rows of the stage that sets the step.
pub(super) fn rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_ends,
        ..
    } = *step;
    // PP, per chunk per micro-batch, on the stage that sets the step (a V's first GPU sends one
    // chunk's activations and the other's gradients).
    if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        let [forward_sends, backward_sends] = slowest_ends.boundary_sends(f64::from(plan.vpp));
        for (pass, site, sends) in [
            (
                Pass::Forward,
                "stage boundary: activations to the next stage",
                forward_sends,
            ),
            (
                Pass::Backward,
                "stage boundary: gradients to the previous stage",
                backward_sends,
            ),
        ] {
            let count = sends * m;
            rows.push(
                GroupKind::Pp,
                Op::SendRecv,
                pass,
                site,
                Scope::PerChunkPerMicrobatch,
                count,
                2,
                message,
            );
        }
        // The word embedding's gradient, all-reduced between the first and the last stage once a
        // step after the last backward where the last stage holds a copy (`embedding_grad_sync`).
        let embedding = embedding_grad_sync::grad_allreduce_bytes(model, training, plan);
        if embedding > 0.0 {
            rows.push(
                GroupKind::Pp,
                Op::AllReduce,
                Pass::OptimizerStep,
                "word embedding gradient: first and last stage",
                Scope::PerStep,
                1.0,
                2,
                embedding,
            );
        }
    }
}
