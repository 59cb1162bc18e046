//! Why a pinned `plan` search found no plan at all: the pin that admits none on its own, with the
//! values that do, or the pins that only conflict together.

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::planner::{Pins, SearchOptions, search};
use crate::training::Training;
use std::collections::BTreeSet;

/// One pinned dimension: its flag, the pins with only it set, and how to read it off a plan.
struct Pin {
    flag: &'static str,
    value: String,
    alone: Pins,
    of_plan: fn(&ParallelPlan) -> String,
}

fn pins_given(pins: &Pins) -> Vec<Pin> {
    let none = Pins::default();
    let mut out = Vec::new();
    macro_rules! pin {
        ($field:ident, $flag:literal, $show:expr) => {
            if let Some(v) = pins.$field {
                out.push(Pin {
                    flag: $flag,
                    value: $show(v),
                    alone: Pins {
                        $field: Some(v),
                        ..none
                    },
                    of_plan: |p: &ParallelPlan| $show(p.$field),
                });
            }
        };
    }
    pin!(tp, "--tp", |v: u32| v.to_string());
    pin!(cp, "--cp", |v: u32| v.to_string());
    pin!(pp, "--pp", |v: u32| v.to_string());
    pin!(dp, "--dp", |v: u32| v.to_string());
    pin!(vpp, "--vpp", |v: u32| v.to_string());
    pin!(micro_batch, "--micro-batch", |v: u32| v.to_string());
    pin!(ep, "--ep", |v: u32| v.to_string());
    pin!(etp, "--etp", |v: u32| v.to_string());
    pin!(zero, "--zero", |v: u8| v.to_string());
    pin!(recompute, "--recompute", |v: crate::plan::Recompute| v
        .as_str()
        .to_string());
    pin!(sequence_parallel, "--sequence-parallel", |v: bool| v
        .to_string());
    pin!(
        reshard_after_forward,
        "--reshard-after-forward",
        |v: bool| v.to_string()
    );
    out
}

/// The reason a search with `options.pins` has no candidate, when the pins are the cause: the first
/// pin that admits no valid plan by itself, named with the values the unpinned search does offer
/// for it; else the pins together. None when even the unpinned search finds nothing (then the
/// cluster, batch or model is the cause, and the caller says so).
pub(super) fn explain(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> Option<String> {
    let given = pins_given(&options.pins);
    if given.is_empty() {
        return None;
    }
    let unpinned = search(
        model,
        cluster,
        training,
        SearchOptions {
            pins: Pins::default(),
            ..options
        },
    );
    if unpinned.ranked.is_empty() {
        return None;
    }
    for pin in &given {
        let alone = search(
            model,
            cluster,
            training,
            SearchOptions {
                pins: pin.alone,
                ..options
            },
        );
        if alone.ranked.is_empty() {
            let valid: BTreeSet<String> = unpinned
                .ranked
                .iter()
                .map(|e| (pin.of_plan)(&e.plan))
                .collect();
            let mut valid: Vec<String> = valid.into_iter().collect();
            valid.sort_by_key(|v| (v.len(), v.clone()));
            return Some(format!(
                "{} {} admits no valid plan for this model and cluster (the search offers {} {}); pin one of those or drop {}",
                pin.flag,
                pin.value,
                pin.flag,
                valid.join(", "),
                pin.flag
            ));
        }
    }
    let flags: Vec<String> = given
        .iter()
        .map(|p| format!("{} {}", p.flag, p.value))
        .collect();
    Some(format!(
        "the pins {} each admit valid plans but not together; drop one of them, or check the split with `tpsim eval` and the same flags, which names the rule it breaks",
        flags.join(" ")
    ))
}
