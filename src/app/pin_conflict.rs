//! Why a pinned `plan` search found no plan at all: the pin that admits none on its own, with the
//! values that do, or the pins that only conflict together.

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::ParallelPlan;
use crate::planner::{Pins, SearchOptions, search};
use crate::training::Training;
use std::collections::BTreeSet;

/// One pinned dimension: its flag, its plan key, the pins with only it set, and how to read it
/// off a plan.
struct Pin {
    flag: &'static str,
    /// The `Pins` field, which is the plan key (`micro_batch`, `recompute_num_layers`).
    key: &'static str,
    value: String,
    /// The value as JSON writes it (a number, a bool, the recompute's name).
    json: serde_json::Value,
    alone: Pins,
    /// The other pins, this one dropped: what a replacement value must agree with.
    others: Pins,
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
                    key: stringify!($field),
                    value: $show(v),
                    json: serde_json::json!(v),
                    alone: Pins {
                        $field: Some(v),
                        ..none
                    },
                    others: Pins {
                        $field: None,
                        ..*pins
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
    pin!(recompute_num_layers, "--recompute-num-layers", |v: u32| v
        .to_string());
    pin!(sequence_parallel, "--sequence-parallel", |v: bool| v
        .to_string());
    pin!(
        reshard_after_forward,
        "--reshard-after-forward",
        |v: bool| v.to_string()
    );
    pin!(dp_replicas, "--dp-replicas", |v: u32| v.to_string());
    out
}

/// The line under `plan`'s `search:` line when dimensions were pinned: the pins as the flags that
/// gave them, and what `ruled_out_by_pins` counts, so a team that fixed `--tp 8 --pp 4` reads what
/// was searched without counting the table's columns. Pinning `--recompute selective` adds the
/// selective plans the unpinned search leaves out (they keep what recompute none keeps and take
/// longer, README "What the output means"), which is why such a search can count more candidates
/// than one without pins. None without pins.
pub(super) fn pins_line(pins: &Pins, ruled_out: u64) -> Option<String> {
    let given = pins_given(pins);
    if given.is_empty() {
        return None;
    }
    let flags: Vec<String> = given
        .iter()
        .map(|p| format!("{} {}", p.flag, p.value))
        .collect();
    let selective = if pins.recompute == Some(crate::plan::Recompute::Selective) {
        "; --recompute selective also adds the selective plans an unpinned search leaves out (they keep what recompute none keeps and take longer)"
    } else {
        ""
    };
    Some(format!(
        "pinned: {} (the search kept only plans with these values; ruled_out_by_pins counts the {ruled_out} candidates where one differs{selective})",
        flags.join(" ")
    ))
}

/// The pins for `plan`'s JSON and YAML (`search.pinned`): each pinned dimension by its plan key,
/// from the pins [`pins_line`] names as flags, in its order. Empty without pins.
pub(super) fn pins_json(pins: &Pins) -> Vec<(String, serde_json::Value)> {
    pins_given(pins)
        .into_iter()
        .map(|p| (p.key.to_string(), p.json))
        .collect()
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
    let unpinned = unpinned_search(model, cluster, training, options);
    if unpinned.ranked.is_empty() {
        // A pinned --cp that a setting rules out (Ulysses's heads, a window, the framework) is
        // the reason even where the unpinned search finds nothing either: the split rules the
        // caller names otherwise leave cp out, and pinning it may be all a cluster needs.
        return options
            .pins
            .cp
            .and_then(|cp| cp_pin_reason(cp, model, cluster, training));
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
            if let Some(reason) =
                v_schedule_pin_reason(pin, model, cluster, training, options, &unpinned)
            {
                return Some(reason);
            }
            // Activation offloading allows only pp 1 and no recompute (`ParallelPlan::build`):
            // a pin outside them is that rule, not a shortage of plans.
            let offload = training.cpu_offload_layers;
            if offload > 0 && pin.flag == "--pp" && options.pins.pp.is_some_and(|pp| pp > 1) {
                return Some(format!(
                    "--pp {} with --cpu-offload-layers {offload}: Megatron-Core offloads activations only without a pipeline; pin --pp 1, or drop --cpu-offload-layers",
                    pin.value
                ));
            }
            if offload > 0
                && pin.flag == "--recompute"
                && options
                    .pins
                    .recompute
                    .is_some_and(|r| r != crate::plan::Recompute::None)
            {
                // `--recompute-num-layers N` implies full recompute: the flag typed is named.
                if let Some(n) = options.pins.recompute_num_layers.filter(|n| *n > 0) {
                    return Some(format!(
                        "--recompute-num-layers {n} (full recompute of {n} layers) with --cpu-offload-layers {offload}: Megatron-Core offloads activations only without recompute; drop --recompute-num-layers (and any --recompute but none), or drop --cpu-offload-layers"
                    ));
                }
                return Some(format!(
                    "--recompute {} with --cpu-offload-layers {offload}: Megatron-Core offloads activations only without recompute; pin --recompute none, or drop --cpu-offload-layers",
                    pin.value
                ));
            }
            // A dense model has no experts to split: said as `eval` says it, not as a search
            // that happens to offer --ep 1.
            if model.moe.is_none() && (pin.flag == "--ep" || pin.flag == "--etp") {
                let expert_pins: Vec<_> = given
                    .iter()
                    .filter(|p| (p.flag == "--ep" || p.flag == "--etp") && p.value != "1")
                    .collect();
                let typed: Vec<String> = expert_pins
                    .iter()
                    .map(|p| format!("{} {}", p.flag, p.value))
                    .collect();
                let flags: Vec<&str> = expert_pins.iter().map(|p| p.flag).collect();
                return Some(format!(
                    "{}: expert parallelism needs a mixture-of-experts model ({} is dense, so every plan has ep 1 and etp 1); drop {}",
                    typed.join(" "),
                    model.name,
                    flags.join(" and ")
                ));
            }
            // torchtitan refuses tied embeddings under a pipeline (`planner::enumerate` skips
            // them), in `eval`'s words.
            if let Some(pp) = options.pins.pp.filter(|_| pin.flag == "--pp")
                && crate::plan::refuses_tied_embeddings_with_pp(pp, model, training)
            {
                return Some(crate::plan::PlanError::TiedEmbeddingsWithPp { pp }.to_string());
            }
            // Megatron-Core's limit on the layers kept in bf16 per stage, in its own words.
            if let Some(pp) = options.pins.pp.filter(|_| pin.flag == "--pp")
                && let Some(reason) =
                    crate::plan::bf16_layers_pp_refusal(pp, options.precision, model, training)
            {
                return Some(reason);
            }
            if let Some(cp) = options.pins.cp.filter(|_| pin.flag == "--cp")
                && let Some(reason) = cp_pin_reason(cp, model, cluster, training)
            {
                return Some(reason);
            }
            // A stage the framework has no configuration for (`runs_zero_stage`).
            if let Some(zero) = options.pins.zero.filter(|_| pin.flag == "--zero")
                && !training.framework.runs_zero_stage(zero)
            {
                return Some(format!(
                    "--zero {zero}: --framework {} has no ZeRO-{zero}: {}; pin one of those, or price ZeRO-{zero} as asked with `tpsim eval`",
                    training.framework.as_str(),
                    training.framework.zero_stages_it_has()
                ));
            }
            // Kept gathered parameters the framework cannot run (`keeps_gathered_parameters`).
            if pin.flag == "--reshard-after-forward"
                && let Some(rule) = kept_parameters_rule(model, training, &options.pins)
            {
                return Some(rule);
            }
            if let Some(replicas) = options
                .pins
                .dp_replicas
                .filter(|_| pin.flag == "--dp-replicas")
                && let Some(reason) = dp_replicas_pin_reason(
                    model, cluster, training, options, replicas, pin.others, &given,
                )
            {
                return Some(reason);
            }
            // An uneven split or TP across nodes may be all the pin needs.
            for (allowed, flag) in [
                (options.allow_uneven_pp, "--allow-uneven-pp"),
                (options.allow_cross_node_tp, "--allow-cross-node-tp"),
            ] {
                if allowed {
                    continue;
                }
                let widened = SearchOptions {
                    pins: pin.alone,
                    allow_uneven_pp: options.allow_uneven_pp || flag == "--allow-uneven-pp",
                    allow_cross_node_tp: options.allow_cross_node_tp
                        || flag == "--allow-cross-node-tp",
                    ..options
                };
                if !search(model, cluster, training, widened).ranked.is_empty() {
                    return Some(format!(
                        "{} {} needs {flag} here ({}); add {flag}, or drop {}",
                        pin.flag,
                        pin.value,
                        if flag == "--allow-uneven-pp" {
                            format!("its stages cannot hold the {} layers evenly", model.layers)
                        } else {
                            "its groups do not fit in one node".to_string()
                        },
                        pin.flag
                    ));
                }
            }
            // The values to offer are those the other pins accept too (--etp with --ep 8 folds
            // into fewer GPUs than --etp alone): the search with this pin dropped. Where the other
            // pins admit no plan with any value, the unpinned search's values are offered, and
            // said to be so.
            let others: Vec<String> = given
                .iter()
                .filter(|p| p.flag != pin.flag)
                .map(|p| format!("{} {}", p.flag, p.value))
                .collect();
            let with_others = if others.is_empty() {
                None
            } else {
                Some(search(
                    model,
                    cluster,
                    training,
                    SearchOptions {
                        pins: pin.others,
                        ..options
                    },
                ))
            };
            let offered = |result: &crate::planner::SearchResult| {
                // recompute_num_layers 0 is how a plan says "every layer", which the flag
                // refuses: offer only the counts the flag takes.
                let valid: BTreeSet<String> = result
                    .ranked
                    .iter()
                    .map(|e| (pin.of_plan)(&e.plan))
                    .filter(|v| !(pin.flag == "--recompute-num-layers" && v == "0"))
                    .collect();
                let mut valid: Vec<String> = valid.into_iter().collect();
                valid.sort_by_key(|v| (v.len(), v.clone()));
                valid.join(", ")
            };
            let offer = match &with_others {
                None => format!("the search offers {} {}", pin.flag, offered(&unpinned)),
                Some(result) if !result.ranked.is_empty() => format!(
                    "with {} the search offers {} {}",
                    others.join(" "),
                    pin.flag,
                    offered(result)
                ),
                Some(_) => format!(
                    "the search offers {} {} without the other pins, and {} admit no plan with any {}",
                    pin.flag,
                    offered(&unpinned),
                    others.join(" "),
                    pin.flag
                ),
            };
            return Some(format!(
                "{} {} admits no valid plan for this model and cluster ({offer}); pin one of those or drop {}",
                pin.flag, pin.value, pin.flag
            ));
        }
    }
    if let Some(rule) = pair_rule(model, cluster, training, &options.pins) {
        return Some(rule);
    }
    // Kept parameters with the other pins that rule them out (Megatron-LM's copies, pp, ep).
    if let Some(rule) = kept_parameters_rule(model, training, &options.pins) {
        return Some(rule);
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

/// The rule two pins break together, where it is one of the plan's own rules: `eval` names it
/// for one plan, and `plan` said only that the pins "each admit valid plans but not together".
fn pair_rule(model: &Model, cluster: &Cluster, training: &Training, pins: &Pins) -> Option<String> {
    let gpus = u64::from(cluster.total_gpus());
    let degrees: Vec<(&str, u32)> = [
        ("--tp", pins.tp),
        ("--cp", pins.cp),
        ("--pp", pins.pp),
        ("--dp", pins.dp),
    ]
    .into_iter()
    .filter_map(|(flag, pin)| Some((flag, pin?)))
    .collect();
    let product: u64 = degrees.iter().map(|(_, d)| u64::from(*d)).product();
    let all_four = degrees.len() == 4;
    if degrees.len() > 1 && (!gpus.is_multiple_of(product) || (all_four && product != gpus)) {
        let words: Vec<String> = degrees.iter().map(|(f, d)| format!("{f} {d}")).collect();
        return Some(format!(
            "{} make {product} GPUs, which {} the {gpus} GPUs of the cluster (rule: tp x cp x pp x dp = GPUs); pin degrees whose product {}, or change --nodes",
            words.join(" x "),
            if all_four {
                "is not"
            } else {
                "does not divide"
            },
            if all_four {
                "is the GPU count"
            } else {
                "divides the GPU count"
            },
        ));
    }
    // DeepSpeed-Ulysses beside Megatron's sequence parallelism, TP or PP, which the search never
    // proposes (`planner::enumerate`, `push_pipeline_variants`).
    if let Some(cp) = pins.cp.filter(|&cp| cp > 1) {
        if pins.sequence_parallel == Some(true)
            && !training.framework.runs_sequence_parallelism_beside_cp()
        {
            return Some(
                crate::plan::PlanError::ulysses_with_sequence_parallel(cp, pins.tp).to_string(),
            );
        }
        if let Some(err) = crate::plan::ulysses_model_parallel_error(
            cp,
            pins.tp.unwrap_or(1),
            pins.pp.unwrap_or(1),
            training,
        ) {
            return Some(err.to_string());
        }
    }
    // The all-to-all exchange's heads rule, which the search applies (`planner::enumerate`).
    if let (Some(tp), Some(cp)) = (pins.tp, pins.cp)
        && let Some(err) = crate::plan::cp_heads_error(cp, tp, model, training)
    {
        return Some(err.to_string());
    }
    // A V runs two chunks per GPU on any pipeline (`plan::check_v_schedule`), which eval names.
    if let (Some(2..), Some(vpp)) = (pins.pp, pins.vpp)
        && vpp != 2
        && training.pp_schedule.v_kind().is_some()
    {
        return Some(
            crate::plan::PlanError::VScheduleChunks {
                schedule: training.pp_schedule.as_str(),
                vpp,
            }
            .to_string(),
        );
    }
    if let (Some(vpp), Some(1)) = (pins.vpp.filter(|v| *v > 1), pins.pp) {
        return Some(format!(
            "--vpp {vpp} with --pp 1: virtual pipeline stages interleave the chunks of a pipeline, and pp 1 has none; pin --pp 2 or more, or drop --vpp"
        ));
    }
    if let (Some(true), Some(1)) = (pins.sequence_parallel, pins.tp) {
        return Some(
            "--sequence-parallel with --tp 1: sequence parallelism splits the tensor-parallel region's norms and dropouts over the TP group, and tp 1 has none; pin --tp 2 or more, or drop --sequence-parallel"
                .to_string(),
        );
    }
    let most = training.framework.max_zero_with_pp();
    if let (Some(zero), Some(pp)) = (pins.zero.filter(|z| *z > most), pins.pp.filter(|p| *p > 1)) {
        return Some(format!(
            "--zero {zero} with --pp {pp}: --framework {} runs at most ZeRO-{most} with pipelines, so the search does not propose it (megatron-core and torchtitan shard everything with pipelines); pin --zero {most} or --pp 1, or price it as asked with `tpsim eval`",
            training.framework.as_str()
        ));
    }
    None
}

/// A pin that admits no plan under a V schedule, for the schedule's own rule: a `--vpp` other
/// than the V's two chunks (or one, without a pipeline), a pin that leaves DualPipeV fewer
/// micro-batches per schedule than its 2 x pp (the same pin finds plans under ZB-V, which has no
/// such rule), or one whose stages two chunks of whole layers do not split (it finds plans under
/// 1F1B). The search said only "admits no valid plan ... (the search offers --pp 1, 2, 4)", where
/// `eval` names the rule. None for another pin or schedule.
fn v_schedule_pin_reason(
    pin: &Pin,
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
    unpinned: &crate::planner::SearchResult,
) -> Option<String> {
    use crate::cost::v_schedule::VKind;
    use crate::training::PipelineSchedule;
    let kind = training.pp_schedule.v_kind()?;
    let name = training.pp_schedule.as_str();
    if pin.flag == "--vpp" && pin.value != "1" && pin.value != "2" {
        return Some(format!(
            "--vpp {} admits no valid plan under --pp-schedule {name}, which runs exactly two model chunks per GPU in a V (PyTorch refuses any other count): pipelined plans take --vpp 2, plans without a pipeline --vpp 1; pin one of those or drop --vpp",
            pin.value
        ));
    }
    let pins = SearchOptions {
        pins: pin.alone,
        ..options
    };
    let finds_under = |schedule: PipelineSchedule| {
        let other = Training {
            pp_schedule: schedule,
            ..*training
        };
        !search(model, cluster, &other, pins).ranked.is_empty()
    };
    let offered: BTreeSet<String> = unpinned
        .ranked
        .iter()
        .map(|e| (pin.of_plan)(&e.plan))
        .collect();
    let mut offered: Vec<String> = offered.into_iter().collect();
    offered.sort_by_key(|v| (v.len(), v.clone()));
    let offered = format!("the search offers {} {}", pin.flag, offered.join(", "));
    let dualpipev_rule = kind == VKind::DualPipeV && finds_under(PipelineSchedule::ZeroBubbleV);
    if !dualpipev_rule {
        // The V's two chunks of whole layers per GPU: the pin finds plans under 1F1B, whose
        // stages need not split in two.
        if !finds_under(PipelineSchedule::OneFOneB) {
            return None;
        }
        let split = match pin.flag {
            "--pp" => pin
                .value
                .parse::<u32>()
                .ok()
                .filter(|pp| model.layers.is_multiple_of(*pp))
                .map(|pp| {
                    format!(
                        ": the {} layers leave {} on each of its {pp} stages",
                        model.layers,
                        model.layers / pp
                    )
                }),
            _ => None,
        };
        return Some(format!(
            "{} {} admits no valid plan under --pp-schedule {name}, which runs two model chunks of whole layers per GPU (vpp 2) on a pipeline, and no stage's layers split in two with it{} ({offered}); pin one of those, or use --pp-schedule 1f1b",
            pin.flag,
            pin.value,
            split.unwrap_or_default()
        ));
    }
    let need = match pin.flag {
        "--pp" => format!("2 x pp = {}", pin.value.parse::<u32>().ok()? * 2),
        _ => "2 x pp".to_string(),
    };
    let batch = match training.local_batch {
        Some(local) => format!("--local-batch {local}"),
        None => format!("--global-batch {}", training.global_batch),
    };
    Some(format!(
        "{} {} admits no valid plan under --pp-schedule dualpipev, which needs at least {need} micro-batches per pipeline schedule (PyTorch's ScheduleDualPipeV refuses fewer), and {batch} splits into fewer with it at every data-parallel degree and micro-batch ({offered}); raise {}, pin one of those, or use --pp-schedule zbv",
        pin.flag,
        pin.value,
        batch.split(' ').next().unwrap_or("--global-batch"),
    ))
}

/// A pinned `--dp-replicas` that admits no plan: the framework's rule where it keeps no copies at
/// any ZeRO stage the search may try (DeepSpeed, 2021 Megatron-LM), as `eval` says it; else the
/// copies that do admit plans beside the other pins. The unpinned search offers only copies that
/// each fit an NVLink domain (`planner::dp_replica_choices`), but a pin takes any count that
/// splits dp into copies of 2 or more ranks, so offering the unpinned search's values left out
/// pins that run (`--dp-replicas 3` was offered 1, 2, 4 where 8 and 16 find plans). None where
/// no count finds a plan with the other pins (the caller says so).
fn dp_replicas_pin_reason(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
    replicas: u32,
    others: Pins,
    given: &[Pin],
) -> Option<String> {
    let framework = training.framework;
    let stages: Vec<u8> = match options.pins.zero {
        Some(zero) => vec![zero],
        None => (1..=3).filter(|&z| framework.runs_zero_stage(z)).collect(),
    };
    if let Some((rule, fix)) = stages
        .iter()
        .map(|&zero| framework.dp_replicas_refusal(zero))
        .collect::<Option<Vec<_>>>()
        .and_then(|refusals| refusals.first().copied())
    {
        return Some(
            crate::plan::PlanError::DpReplicasFramework {
                replicas,
                framework: framework.as_str(),
                rule,
                fix,
            }
            .to_string(),
        );
    }
    let valid: Vec<String> = crate::plan::divisors(cluster.total_gpus())
        .into_iter()
        .filter(|&r| r != replicas)
        .filter(|&r| {
            let pins = Pins {
                dp_replicas: Some(r),
                ..others
            };
            !search(model, cluster, training, SearchOptions { pins, ..options })
                .ranked
                .is_empty()
        })
        .map(|r| r.to_string())
        .collect();
    if valid.is_empty() {
        return None;
    }
    let with: Vec<String> = given
        .iter()
        .filter(|p| p.flag != "--dp-replicas")
        .map(|p| format!(" {} {}", p.flag, p.value))
        .collect();
    Some(format!(
        "--dp-replicas {replicas} admits no valid plan for this model and cluster (each copy of the sharded states is sharded over dp x cp / N ranks, so N must divide {} and leave each copy 2 or more ranks; {}the search finds plans with --dp-replicas {}); pin one of those or drop --dp-replicas",
        if framework.copies_split_cp() {
            "dp x cp"
        } else {
            "dp"
        },
        if with.is_empty() {
            String::new()
        } else {
            format!("with{} ", with.concat())
        },
        valid.join(", ")
    ))
}

/// `--reshard-after-forward false` under a framework that cannot keep ZeRO-3's gathered
/// parameters, which the search never proposes (`planner::push_pipeline_variants`); in the words
/// of `eval`'s note.
fn kept_parameters_rule(model: &Model, training: &Training, pins: &Pins) -> Option<String> {
    let framework = training.framework;
    // Unpinned degrees are searched, so the least restrictive (1) is one the search can take.
    if pins.reshard_after_forward != Some(false)
        || framework.keeps_gathered_parameters(
            pins.pp.unwrap_or(1),
            pins.ep.unwrap_or(1),
            model.tied_embeddings,
            pins.dp_replicas.unwrap_or(1),
        )
    {
        return None;
    }
    Some(format!(
        "--reshard-after-forward false: --framework {} cannot keep ZeRO-3's gathered parameters through the backward, so the search does not propose it: {}; pin --reshard-after-forward true, or price it as asked with `tpsim eval`",
        framework.as_str(),
        framework.gathered_parameters_words()
    ))
}

/// Why the search offers no `--cp` above 1 here when a setting of the training or the model rules
/// it out (the search skips those degrees, `planner::enumerate`), in the words `eval` uses for the
/// same plan; `None` when the cluster or the sequence split is the cause (the caller lists the
/// degrees the search does offer).
fn cp_pin_reason(cp: u32, model: &Model, cluster: &Cluster, training: &Training) -> Option<String> {
    use crate::plan::PlanError;
    if cp <= 1 {
        return None;
    }
    if training.attention == crate::training::AttentionKernel::Unfused {
        return Some(PlanError::CpWithUnfusedAttention { cp }.to_string());
    }
    if !training.framework.runs_context_parallelism() {
        return Some(format!(
            "--cp {cp} with --framework {}: it has no context-parallel scheme, so the search does not propose one (megatron-core, torchtitan and deepspeed do); use --framework megatron-core, or drop --cp (`tpsim eval` evaluates it as Megatron-Core's ring)",
            training.framework.as_str()
        ));
    }
    if !training.cp_exchange.runs_sliding_windows()
        && model
            .attention_window
            .is_some_and(|w| w.windows_some_layer())
    {
        return Some(PlanError::cp_with_window(cp, training).to_string());
    }
    // The all-to-all exchange splits each TP rank's heads over cp: tp 1 leaves the most heads
    // per rank (any split of a larger tp divides them), so where cp splits none there, it splits
    // none at any tp.
    if let Some(err) = crate::plan::cp_heads_error(cp, 1, model, training) {
        return Some(err.to_string());
    }
    // A --seq-len that cp splits is no fix where cp does not divide the cluster's GPUs (`--cp 3`
    // on 8): the search offers no cp 3 at any length, so the caller lists what it does offer.
    if !crate::plan::cp_splits_sequence(cp, training.seq_len, training.framework)
        && cluster.total_gpus().is_multiple_of(cp)
    {
        return Some(
            PlanError::cp_sequence(
                cp,
                training.seq_len,
                crate::plan::cp_degrees_splitting(
                    training.seq_len,
                    cluster.total_gpus(),
                    training.framework,
                ),
                training.framework,
            )
            .to_string(),
        );
    }
    None
}

/// When the pinned plans all miss memory but unpinned ones fit: the hint that the pins are the
/// cause, with the best plan that fits. None without pins or when nothing fits unpinned either.
pub(super) fn fit_hint(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> Option<String> {
    let given = pins_given(&options.pins);
    if given.is_empty() {
        return None;
    }
    let unpinned = unpinned_search(model, cluster, training, options);
    // The plan `plan` without the pins prints first, at the time it prints: the top 10 (its
    // default --top) with their pipeline schedules simulated, as `sweep` takes its best.
    let top: Vec<_> = unpinned.feasible().iter().take(10).copied().collect();
    let refined = crate::planner::refine_top(model, cluster, training, &top);
    let best = refined.plans.first()?;
    let flags: Vec<String> = given
        .iter()
        .map(|p| format!("{} {}", p.flag, p.value))
        .collect();
    Some(format!(
        "the pins {} rule out every plan that fits: without them {} plans fit, the fastest {} ({} s per step)",
        flags.join(" "),
        unpinned.stats.feasible,
        degrees_words(&best.plan),
        crate::units::show_step_s(best.time.step_s.0)
    ))
}

/// A plan's degrees in words for one-line messages: tp, pp and dp always, cp and ep where the plan
/// uses them, and etp beside any ep (as `plan`'s table shows their columns).
pub(super) fn degrees_words(p: &crate::plan::ParallelPlan) -> String {
    let mut out = format!("tp {}", p.tp);
    if p.cp > 1 {
        out += &format!(" cp {}", p.cp);
    }
    out += &format!(" pp {} dp {}", p.pp, p.dp);
    if p.ep > 1 {
        out += &format!(" ep {}", p.ep);
    }
    // Named whenever experts are split, 1 included: `eval` and Megatron-LM take --etp as --tp when
    // it is not given, so "tp 2 ... ep 16" read back without it is another plan (etp 2).
    if p.ep > 1 || p.etp > 1 {
        out += &format!(" etp {}", p.etp);
    }
    out
}

/// The same search without its pins: what the pins are measured against.
fn unpinned_search(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    options: SearchOptions,
) -> crate::planner::SearchResult {
    search(
        model,
        cluster,
        training,
        SearchOptions {
            pins: Pins::default(),
            ..options
        },
    )
}
