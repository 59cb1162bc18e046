//! Two plans side by side, term by term, and the one sentence that says which term decides
//! between them. Consumes two [`Estimate`]s from the pure cost model; renders nothing but a
//! comfy-table and a serde value.
//!
//! "Points" are percentage points of the slower plan's step time: the time terms' differences,
//! so expressed, add up exactly to the gap between the two step times (step = compute + exposed
//! TP + PP + DP + bubble + optimizer, `cost::evaluate`).

use comfy_table::{CellAlignment, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use crate::cost::Estimate;
use crate::cost::simulated::ScheduleSummary;
use crate::cost::terms::TermKind;
use crate::uncertainty::Interval;
use crate::units::{GIB, show_step_s};

/// One compared quantity.
#[derive(Debug, Clone, Serialize)]
pub struct Term {
    pub group: &'static str,
    pub name: &'static str,
    pub unit: &'static str,
    pub a: f64,
    pub b: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a_label: String,
    pub b_label: String,
    pub terms: Vec<Term>,
    pub verdict: String,
    pub a: Estimate,
    pub b: Estimate,
    /// How each plan's step time was obtained (the simulated schedule, as `plan` and `eval`), and
    /// which pipeline schedule it ran (`ScheduleSummary::schedule`).
    pub a_schedule: Option<ScheduleSummary>,
    pub b_schedule: Option<ScheduleSummary>,
    /// Whether the model has experts: the table's plan labels then show ep and etp even at 1
    /// (`sweep::LabelDims`); the JSON has each plan's degrees in `a.plan` and `b.plan`.
    #[serde(skip)]
    pub experts: bool,
    /// Layers each plan offloads to host memory (`--cpu-offload-layers`, a plan file's
    /// `cpu_offload_layers`): a training setting, not one of the plan's degrees, so two plans of
    /// one layout may differ in it; the table's plan labels then name it.
    #[serde(default, skip_serializing_if = "no_offload")]
    pub offload_layers: [u32; 2],
    /// Each plan's step and tokens/s range, the 5th–95th percentile of tpsim's error
    /// (`uncertainty::interval` over `uncertainty::band_for`, the numbers `eval --plan` prints),
    /// and whether the gap between the plans lies inside it: set by [`Comparison::with_ranges`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Ranges>,
}

/// Both plans' ranges and what they say about the gap between the plans.
#[derive(Debug, Clone, Serialize)]
pub struct Ranges {
    pub a: Interval,
    pub b: Interval,
    /// What the band rests on, as `plan`'s and `eval`'s range lines say it.
    pub basis: String,
    /// The slower plan's range reaches down to the faster plan's: the gap is within tpsim's
    /// error, as `plan`'s "within the model's error of the best" counts it
    /// (`uncertainty::within_error_of_best`). None unless both plans fit.
    pub within_error: Option<bool>,
}

impl Comparison {
    /// The two plans' ranges on the band of their scenario (one GPU profile, framework and model
    /// kind: `compare` refuses two scenarios).
    pub fn with_ranges(
        mut self,
        profile: &str,
        framework: crate::training::TrainingFramework,
        kind: crate::uncertainty::ModelKind,
    ) -> Comparison {
        let (band, measured) = crate::uncertainty::band_for(profile, framework, kind);
        let (a, b) = (&self.a, &self.b);
        let (fast, slow) = if b.time.step_s.0 < a.time.step_s.0 {
            (b, a)
        } else {
            (a, b)
        };
        let within_error = (a.fits() && b.fits())
            .then(|| !crate::uncertainty::within_error_of_best(&[*fast, *slow], band).is_empty());
        self.ranges = Some(Ranges {
            a: crate::uncertainty::interval(a, band),
            b: crate::uncertainty::interval(b, band),
            basis: crate::uncertainty::band_words(
                band,
                measured,
                profile,
                &[a.plan.precision, b.plan.precision],
            ),
            within_error,
        });
        self
    }

    /// The line between the table and the verdict: each plan's range and whether the gap is within tpsim's error,
    /// in the words of `plan`'s and `eval`'s range lines.
    pub fn range_line(&self) -> Option<String> {
        let r = self.ranges.as_ref()?;
        let plan = |label: &str, i: &Interval| {
            format!(
                "{label} takes {}–{} s per step ({:.0}–{:.0} tokens/s)",
                show_step_s(i.step_s_low),
                show_step_s(i.step_s_high),
                i.tokens_per_s_low,
                i.tokens_per_s_high
            )
        };
        let mut line = format!(
            "range: {}, {} (5th–95th percentile of tpsim's error on {})",
            plan(&self.a_label, &r.a),
            plan(&self.b_label, &r.b),
            r.basis
        );
        let (sa, sb) = (self.a.time.step_s.0, self.b.time.step_s.0);
        let (fast, slow) = if sb < sa {
            (&self.b_label, &self.a_label)
        } else {
            (&self.a_label, &self.b_label)
        };
        match r.within_error {
            Some(true) if sa == sb => {}
            Some(true) => line.push_str(&format!(
                "; the gap is within the model's error: {slow}'s range reaches below {fast}'s high end"
            )),
            Some(false) => line.push_str(&format!(
                "; {fast} is faster beyond the model's error: {slow}'s range starts above {fast}'s high end"
            )),
            None => {}
        }
        Some(line)
    }
}

fn no_offload(layers: &[u32; 2]) -> bool {
    *layers == [0, 0]
}

/// Time terms (every term of the step, `cost::terms`) with the words the verdict uses for them.
fn time_terms(e: &Estimate) -> Vec<(&'static str, &'static str, f64)> {
    TermKind::ALL
        .iter()
        .map(|&kind| {
            let words = match kind {
                TermKind::Compute => "compute",
                TermKind::TpComm => "TP comm",
                TermKind::CpComm => "CP comm",
                TermKind::MambaCpComm => "the Mamba mixers' CP exchange",
                TermKind::PpComm => "PP comm",
                TermKind::EpComm => "EP comm",
                TermKind::DpGradReduce => "DP gradient reduction",
                TermKind::DpParamGather => "DP parameter gathers",
                TermKind::HostOffload => "CPU offload copies",
                TermKind::Bubble => "pipeline bubble",
                TermKind::Optimizer => "optimizer step",
            };
            (kind.label(), words, e.terms.exposed(kind))
        })
        .collect()
}

pub fn compare(a: &Estimate, b: &Estimate, a_label: &str, b_label: &str) -> Comparison {
    let mut terms = Vec::new();
    let (ma, mb) = (&a.memory, &b.memory);
    for (name, x, y) in [
        ("weights", ma.weights_bytes.0, mb.weights_bytes.0),
        ("gradients", ma.gradients_bytes.0, mb.gradients_bytes.0),
        ("optimizer", ma.optimizer_bytes.0, mb.optimizer_bytes.0),
        (
            "activations",
            ma.activations_bytes.0,
            mb.activations_bytes.0,
        ),
        ("other", ma.other_bytes.0, mb.other_bytes.0),
        ("total", ma.total_bytes.0, mb.total_bytes.0),
    ] {
        terms.push(Term {
            group: "memory per GPU",
            name,
            unit: "GiB",
            a: x / GIB,
            b: y / GIB,
        });
    }
    // Activations offloaded to host memory (`--cpu-offload-layers`), as `eval` prints them beside
    // the device total ("offloaded X GiB of Y GiB host memory per GPU"), where either plan
    // offloads: they are in neither plan's device total, so without the row a plan that moves
    // activations to the host reads as one that needs less memory.
    if ma.host_bytes.0 > 0.0 || mb.host_bytes.0 > 0.0 {
        terms.push(Term {
            group: "host memory per GPU",
            name: "offloaded",
            unit: "GiB",
            a: ma.host_bytes.0 / GIB,
            b: mb.host_bytes.0 / GIB,
        });
    }
    // Neither plan pipelined: no stage boundaries and no bubble, rows `eval`'s breakdown leaves out.
    let no_pipeline = a.plan.pp == 1 && b.plan.pp == 1;
    for ((name, _, x), (_, _, y)) in time_terms(a).into_iter().zip(time_terms(b)) {
        // CP and EP only where either plan has them, as in the traffic rows below; PP and the
        // bubble only where either plan has a pipeline.
        if matches!(name, "CP comm" | "Mamba CP comm" | "EP comm") && x == 0.0 && y == 0.0 {
            continue;
        }
        if matches!(name, "PP comm" | "bubble") && no_pipeline {
            continue;
        }
        // Offload copies only where either plan offloads (the row even when both hide them).
        let offloads = |e: &Estimate| e.terms.get(TermKind::HostOffload).time_s.0 > 0.0;
        if name == TermKind::HostOffload.label() && !offloads(a) && !offloads(b) {
            continue;
        }
        terms.push(Term {
            group: "time per step",
            name,
            unit: "s",
            a: x,
            b: y,
        });
    }
    terms.push(Term {
        group: "time per step",
        name: "step",
        unit: "s",
        a: a.time.step_s.0,
        b: b.time.step_s.0,
    });
    for (name, x, y) in [
        ("TP", a.comm.tp.wire_bytes.0, b.comm.tp.wire_bytes.0),
        ("CP", a.comm.cp.wire_bytes.0, b.comm.cp.wire_bytes.0),
        ("PP", a.comm.pp.wire_bytes.0, b.comm.pp.wire_bytes.0),
        ("EP", a.comm.ep.wire_bytes.0, b.comm.ep.wire_bytes.0),
        ("DP", a.comm.dp.wire_bytes.0, b.comm.dp.wire_bytes.0),
    ] {
        // CP and EP only where either plan has them, PP where either has a pipeline.
        if matches!(name, "CP" | "EP") && x == 0.0 && y == 0.0 {
            continue;
        }
        if name == "PP" && no_pipeline {
            continue;
        }
        terms.push(Term {
            group: "traffic per GPU per step",
            name,
            unit: "GB",
            a: x / 1e9,
            b: y / 1e9,
        });
    }
    for (name, unit, x, y) in [
        ("tokens/s", "tokens/s", a.tokens_per_s, b.tokens_per_s),
        ("MFU", "%", 100.0 * a.mfu, 100.0 * b.mfu),
    ] {
        terms.push(Term {
            group: "throughput",
            name,
            unit,
            a: x,
            b: y,
        });
    }
    // With `--tokens`, the time to train on them, as `plan`'s `train` column and `eval`'s "time
    // to train" line give it, in the unit `report::duration` picks for the longer of the two
    // (`time_to_train_s` in the JSON).
    if let (Some(x), Some(y)) = (a.time_to_train_s, b.time_to_train_s) {
        let (unit, scale) = match x.max(y) {
            s if s >= 86400.0 => ("days", 86400.0),
            s if s >= 360.0 => ("h", 3600.0),
            s if s >= 60.0 => ("min", 60.0),
            _ => ("s", 1.0),
        };
        terms.push(Term {
            group: "throughput",
            name: "time to train",
            unit,
            a: x / scale,
            b: y / scale,
        });
    }
    // With `--price-per-gpu-hour`, what each costs (`cost::cost_to_train`; `cost_to_train` in the
    // JSON): two plans on the same GPUs differ as their times do, two clusters do not.
    if let (Some(x), Some(y)) = (a.cost_to_train, b.cost_to_train) {
        terms.push(Term {
            group: "throughput",
            name: "cost to train",
            unit: "$",
            a: x,
            b: y,
        });
    }
    Comparison {
        a_label: a_label.to_string(),
        b_label: b_label.to_string(),
        terms,
        verdict: verdict(a, b, a_label, b_label),
        a: *a,
        b: *b,
        a_schedule: None,
        b_schedule: None,
        experts: false,
        offload_layers: [0, 0],
        ranges: None,
    }
}

/// The one sentence: which plan wins and the term that decides it, with the largest term that
/// works the other way.
pub fn verdict(a: &Estimate, b: &Estimate, a_label: &str, b_label: &str) -> String {
    let gib = |e: &Estimate| e.memory.total_bytes.0 / GIB;
    let cap = a.memory.capacity_bytes.0 / GIB;
    // A plan that fits the GPU but not the host memory its offloaded activations need is said so.
    let host_miss = |e: &Estimate, label: &str| {
        e.memory.misses_only_host().then(|| {
            format!(
                "{label} does not fit: {}",
                crate::report::misfit_words(&e.memory)
            )
        })
    };
    match (a.fits(), b.fits()) {
        (false, false) if host_miss(a, a_label).is_some() || host_miss(b, b_label).is_some() => {
            let words = |e: &Estimate, label: &str| {
                host_miss(e, label).unwrap_or_else(|| {
                    format!(
                        "{label} does not fit: {}",
                        crate::report::misfit_words(&e.memory)
                    )
                })
            };
            return format!(
                "neither plan fits: {}; {}",
                words(a, a_label),
                words(b, b_label)
            );
        }
        (true, false) | (false, true)
            if host_miss(a, a_label).is_some() || host_miss(b, b_label).is_some() =>
        {
            let (fits, missed) = if a.fits() {
                (a_label, host_miss(b, b_label))
            } else {
                (b_label, host_miss(a, a_label))
            };
            return format!(
                "{fits} is the one that runs: {}",
                missed.unwrap_or_default()
            );
        }
        (false, false) => {
            return format!(
                "neither plan fits: {a_label} needs {:.1} GiB and {b_label} {:.1} GiB of {cap:.1} GiB",
                gib(a),
                gib(b)
            );
        }
        (true, false) | (false, true) => {
            let (fits, misses, f, m) = if a.fits() {
                (a_label, b_label, a, b)
            } else {
                (b_label, a_label, b, a)
            };
            // As the table's activations row prints the two, to 0.1 GiB.
            let act = crate::units::shown_gib_difference(
                m.memory.activations_bytes.0,
                f.memory.activations_bytes.0,
            );
            return format!(
                "{fits} is the one that runs: {misses} needs {:.1} GiB of {cap:.1} GiB ({act:+.1} GiB of activations against {fits})",
                gib(m)
            );
        }
        (true, true) => {}
    }
    let (sa, sb) = (a.time.step_s.0, b.time.step_s.0);
    let (fast, slow, fast_label, slow_label) = if sb < sa {
        (b, a, b_label, a_label)
    } else {
        (a, b, a_label, b_label)
    };
    let slow_step = slow.time.step_s.0;
    let speedup = 100.0 * (slow_step / fast.time.step_s.0 - 1.0);
    if speedup < 0.05 {
        // As the table's total row subtracts them.
        let dm = crate::units::shown_gib_difference(a.memory.total_bytes.0, b.memory.total_bytes.0);
        let memory = if dm.abs() < 0.05 {
            "and the same memory".to_string()
        } else if dm > 0.0 {
            format!("{b_label} needs {dm:.1} GiB less memory per GPU")
        } else {
            format!("{a_label} needs {:.1} GiB less memory per GPU", -dm)
        };
        let (shown_a, shown_b) = (show_step_s(sa), show_step_s(sb));
        let steps = if shown_a == shown_b {
            format!("{shown_a} s per step")
        } else {
            format!("{shown_a} and {shown_b} s per step, within 0.05%")
        };
        return format!("{a_label} and {b_label} are equally fast ({steps}); {memory}");
    }
    // Points of the slower plan's step: positive = the faster plan spends less there.
    let diffs: Vec<(&str, f64)> = time_terms(slow)
        .into_iter()
        .zip(time_terms(fast))
        .map(|((_, words, s), (_, _, f))| (words, 100.0 * (s - f) / slow_step))
        .collect();
    // Every term that moved, largest first, with its sign: the points add up to the gap.
    let mut moved: Vec<(&str, f64)> = diffs.into_iter().filter(|d| d.1.abs() >= 0.05).collect();
    moved.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    let because = |term: &str| {
        cause(term, fast, slow)
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    };
    let parts: Vec<String> = moved
        .iter()
        .map(|(words, points)| {
            if *points > 0.0 {
                format!("{words} {} points less{}", figure(*points), because(words))
            } else {
                format!("{words} {} points more{}", figure(-*points), because(words))
            }
        })
        .collect();
    let gap = 100.0 * (slow_step - fast.time.step_s.0) / slow_step;
    format!(
        "{fast_label} is {}% faster than {slow_label} ({} points of {slow_label}'s step): {}",
        figure(speedup),
        figure(gap),
        parts.join(", ")
    )
}

/// 11.3 → "11", 4.66 → "4.7": whole numbers once they are large enough to read that way.
fn figure(x: f64) -> String {
    if x >= 9.95 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Two bubble ratios with the fewest decimals (3 at least, 6 at most) that tell them apart: at
/// three, 3/640 and 7/1280 both read 0.005 beside "bubble 0.1 points less", one value where the
/// sentence says two differ. Equal ratios keep three decimals.
fn distinct_ratios(a: f64, b: f64) -> (String, String) {
    let mut decimals = 3;
    while decimals < 6 && format!("{a:.decimals$}") == format!("{b:.decimals$}") && a != b {
        decimals += 1;
    }
    (format!("{a:.decimals$}"), format!("{b:.decimals$}"))
}

/// Whether two bubble ratios read differently at the most decimals [`distinct_ratios`] gives.
fn ratios_differ(a: f64, b: f64) -> bool {
    let (a, b) = distinct_ratios(a, b);
    a != b
}

/// The plan difference that moves a term, in the cost model's terms: GEMM shapes and recompute
/// for compute, (p−1)/(v·m) for the bubble (Narayanan et al. 2021 §2.2), the TP group and its
/// collectives for TP, stage boundaries × vpp for PP, the ZeRO stage, dp and the copies of the
/// sharded states for DP.
fn cause(term: &str, fast: &Estimate, slow: &Estimate) -> Option<String> {
    let (f, s) = (&fast.plan, &slow.plan);
    let pair = |what: &str, a: String, b: String| Some(format!("{what} {a} against {b}"));
    // Recompute as the table labels it ("full 1/4" for Megatron's block method).
    let (f_recompute, s_recompute) = (
        crate::report::recompute_label(f),
        crate::report::recompute_label(s),
    );
    let zero = |p: &crate::plan::ParallelPlan| {
        crate::report::zero_stage_label(p.zero, p.reshard_after_forward, 1)
    };
    let (f_zero, s_zero) = (zero(f), zero(s));
    // The layers per stage, first/middle/last, as `plan`'s `layers` column reads them.
    let split = |p: &crate::plan::ParallelPlan| {
        format!(
            "{}/{}/{}",
            p.stages.first, p.stages.middle_max, p.stages.last
        )
    };
    let (f_split, s_split) = (split(f), split(s));
    match term {
        "compute" if f.precision != s.precision => pair(
            "precision",
            f.precision.as_str().into(),
            s.precision.as_str().into(),
        ),
        "compute" if f.micro_batch != s.micro_batch => pair(
            "micro-batch",
            f.micro_batch.to_string(),
            s.micro_batch.to_string(),
        ),
        "compute" if f_recompute != s_recompute => pair("recompute", f_recompute, s_recompute),
        // The bubble follows (p−1)/(v·m) first; the layer split only where that ratio is equal.
        // m is the micro-batches of one schedule (`ParallelPlan::schedule_m_words`, as plan's
        // "why" line writes it): a step of several schedules runs each with its own bubble. No
        // comma inside: the verdict's terms are separated by commas.
        // Equal ratios of different (p, v, m) (p=2 v=1 m=32 and p=4 v=3 m=32 both 1/32) are no
        // cause of a bubble that differs: "0.031 against 0.031" read as the reason.
        "pipeline bubble"
            if (f.pp, f.vpp, f.microbatches_per_schedule())
                != (s.pp, s.vpp, s.microbatches_per_schedule())
                && ratios_differ(fast.bubble_ratio, slow.bubble_ratio) =>
        {
            let (fast_ratio, slow_ratio) = distinct_ratios(fast.bubble_ratio, slow.bubble_ratio);
            Some(format!(
                "(p-1)/(v·m) = {fast_ratio} (p={} v={} {}) against {slow_ratio} (p={} v={} {})",
                f.pp,
                f.vpp,
                f.schedule_m_words(),
                s.pp,
                s.vpp,
                s.schedule_m_words()
            ))
        }
        // The slowest stage sets the pace: a different split of the layers over the stages.
        "compute" | "pipeline bubble" if f_split != s_split => {
            pair("layers per stage (first/middle/last)", f_split, s_split)
        }
        "compute" | "TP comm" if f.tp != s.tp => pair("tp", f.tp.to_string(), s.tp.to_string()),
        "TP comm" if f_recompute != s_recompute => pair("recompute", f_recompute, s_recompute),
        // The same tp and recompute: the TP traffic is the slowest stage's layers' (`eval`'s
        // "a GPU of the slowest stage"), so a different split moves it. Nemotron-H 56B on pp 4,
        // 30/30/28 against 29/30/29 (vpp 6): 1449.55 against 1401.23 GB, and the verdict said
        // "TP comm 0.1 points more" with no cause.
        "TP comm" if f_split != s_split => {
            pair("layers per stage (first/middle/last)", f_split, s_split)
        }
        // The ring passes K/V chunks of the rank's TP share of the KV heads
        // (`cost::comm::cp_kv_chunk_bytes`), so tp moves it too; the CP degree is named either way.
        "CP comm" if f.cp != s.cp => pair("cp", f.cp.to_string(), s.cp.to_string()),
        "CP comm" if f.tp != s.tp => {
            Some(format!("tp {} against {}, cp {} in both", f.tp, s.tp, f.cp))
        }
        "CP comm" => Some(format!("cp {} in both", f.cp)),
        // The mixers trade the rank's TP share of z, x, B, C, dt and y (`cost::hybrid::MambaExchange`).
        "Mamba CP comm" if f.cp != s.cp => pair("cp", f.cp.to_string(), s.cp.to_string()),
        "Mamba CP comm" if f.tp != s.tp => {
            Some(format!("tp {} against {}, cp {} in both", f.tp, s.tp, f.cp))
        }
        "Mamba CP comm" => Some(format!("cp {} in both", f.cp)),
        "EP comm" if f.ep != s.ep => pair("ep", f.ep.to_string(), s.ep.to_string()),
        "EP comm" if f.etp != s.etp => pair("etp", f.etp.to_string(), s.etp.to_string()),
        // The same degrees: each all-to-all pays one latency per peer (`cost::comm::alltoall_s`),
        // so more, smaller micro-batches take more all-to-alls (DeepSeek-V3 on 256 GB200, tp 4
        // mb 4 against tp 2 mb 4: 8 against 4 micro-batches, 9% more EP time). In bf16 they move
        // the same bytes; in low precision with `--moe-router-padding-for-fp8` the all-to-all
        // dispatcher pads every expert's rows to the GEMM alignment in each micro-batch before
        // the dispatch (`moe::padded_copies_factor`), so they also send more rows (DeepSeek-V3 in
        // fp8 on 256 GB200, mb 2 against 1, 1438.97 against 1479.93 GB when physics round 28
        // costed every plan so), which the traffic rows show and the cause leaves out.
        "EP comm" if f.num_microbatches != s.num_microbatches => {
            let latency = format!(
                "ep {} etp {} in both; all-to-alls in {} against {} micro-batches: one latency per peer each",
                f.ep, f.etp, f.num_microbatches, s.num_microbatches
            );
            // At the traffic rows' precision (GB, two decimals); no comma inside (the verdict's
            // terms are separated by commas).
            let (fast_gb, slow_gb) = (
                format!("{:.2}", fast.comm.ep.wire_bytes.0 / 1e9),
                format!("{:.2}", slow.comm.ep.wire_bytes.0 / 1e9),
            );
            let padded = f.precision == s.precision
                && crate::cost::moe::expert_row_alignment(f.precision).is_some()
                && f_split == s_split
                && f_recompute == s_recompute;
            Some(if fast_gb == slow_gb {
                latency
            } else if padded {
                format!(
                    "{latency}; {fast_gb} against {slow_gb} GB sent as each micro-batch pads every expert's rows to the {} alignment before the dispatch",
                    f.precision.as_str()
                )
            } else {
                format!("{latency}; {fast_gb} against {slow_gb} GB sent")
            })
        }
        "EP comm" => Some(format!("ep {} etp {} in both", f.ep, f.etp)),
        "pipeline bubble" | "PP comm" if f.vpp != s.vpp => {
            pair("vpp", f.vpp.to_string(), s.vpp.to_string())
        }
        "pipeline bubble" | "PP comm" if f.pp != s.pp => {
            pair("pp", f.pp.to_string(), s.pp.to_string())
        }
        "pipeline bubble" if f.micro_batch != s.micro_batch => pair(
            "micro-batch",
            f.micro_batch.to_string(),
            s.micro_batch.to_string(),
        ),
        // The stage as `plan`'s zero column reads it; the gathers also tell ZeRO-3 keeping its
        // gathered parameters from ZeRO-3 regathering them ("ZeRO 3 keep against 3"), which
        // reduce the same gradients.
        "DP gradient reduction" if f.zero != s.zero => pair("ZeRO", f_zero, s_zero),
        "DP parameter gathers" if f_zero != s_zero => pair("ZeRO", f_zero, s_zero),
        "DP gradient reduction" | "DP parameter gathers" if f.dp != s.dp => {
            pair("dp", f.dp.to_string(), s.dp.to_string())
        }
        // Each copy of the sharded states reduces within itself, then all-reduces its shard
        // across the copies (`ParallelPlan::dp_replicas`).
        "DP gradient reduction" | "DP parameter gathers" if f.dp_replicas != s.dp_replicas => pair(
            "copies of the sharded states",
            f.dp_replicas.to_string(),
            s.dp_replicas.to_string(),
        ),
        // The same stage and dp: ZeRO-3 gathers the weights before every micro-batch's forward
        // and backward, and ZeRO-2/3 reduce-scatter the gradients after every micro-batch's
        // backward (Rajbhandari et al. 2020; the ledger's `per_microbatch` DP rows), so the count
        // of micro-batches moves them (DeepSeek-V3 on 256 GB200, ZeRO-3 at micro-batch 4 against
        // 2: the gathers 22 points less, said with no cause before).
        "DP parameter gathers" if f.zero == 3 && f.num_microbatches != s.num_microbatches => {
            Some(format!(
                "ZeRO-3 gathers the weights every micro-batch: {} against {} micro-batches",
                f.num_microbatches, s.num_microbatches
            ))
        }
        "DP gradient reduction" if f.zero >= 2 && f.num_microbatches != s.num_microbatches => {
            Some(format!(
                "ZeRO-{} reduce-scatters the gradients every micro-batch: {} against {} micro-batches",
                f.zero, f.num_microbatches, s.num_microbatches
            ))
        }
        _ => None,
    }
}

/// The comparison as a terminal table followed by the verdict.
pub fn table(c: &Comparison) -> String {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "group".to_string(),
        "term".to_string(),
        "unit".to_string(),
        c.a_label.clone(),
        c.b_label.clone(),
        format!("{} − {}", c.b_label, c.a_label),
    ]);
    let labels = [
        crate::sweep::PlanLabel::of(&c.a.plan),
        crate::sweep::PlanLabel::of(&c.b.plan),
    ];
    let dims = crate::sweep::LabelDims::of(&labels, c.experts);
    // The pipeline schedule, named where either plan runs a V schedule (`--pp-schedule`): it is
    // not part of the plan's degrees, and two plans alike in them may differ in it.
    let schedules = [c.a_schedule, c.b_schedule].map(|s| {
        s.map_or(crate::training::PipelineSchedule::OneFOneB, |s| {
            s.pipeline_schedule()
        })
    });
    let named = schedules
        .iter()
        .any(|s| *s != crate::training::PipelineSchedule::OneFOneB);
    let pps = [c.a.plan.pp, c.b.plan.pp];
    let plan = |i: usize| {
        let label = crate::sweep::plan_label(&labels[i], dims);
        let label = if named && pps[i] > 1 {
            format!("{label} {}", schedules[i].as_str())
        } else {
            label
        };
        // Named where either plan offloads, as the schedule is.
        match c.offload_layers {
            [0, 0] => label,
            layers => format!("{label} offload {}", layers[i]),
        }
    };
    table.add_row(vec![
        "plan".to_string(),
        String::new(),
        String::new(),
        plan(0),
        plan(1),
        String::new(),
    ]);
    // The memory parts as they add up to each plan's printed total, as `eval`'s breakdown prints
    // them (the JSON keeps the exact values).
    let (parts_a, parts_b) = (
        crate::report::shown_memory_parts(&c.a.memory),
        crate::report::shown_memory_parts(&c.b.memory),
    );
    for t in &c.terms {
        let shown = |parts: &[(&str, f64)], exact: f64| {
            parts
                .iter()
                .find(|(name, _)| t.group == "memory per GPU" && *name == t.name)
                .map_or(exact, |&(_, gib)| gib)
        };
        let (a, b) = (shown(&parts_a, t.a), shown(&parts_b, t.b));
        // Seconds to the millisecond, so a difference the verdict calls 0.1% does not read 0.00.
        // GiB and % to one decimal, as `plan`, `eval` and the report print memory and MFU: at two,
        // a value `plan` prints as 52.9 read 52.95 here.
        let digits = match t.unit {
            "tokens/s" => 0,
            "s" => 3,
            "GiB" | "%" | "days" | "h" | "min" => 1,
            // Whole currency units from 10 on, as the sweep's cost column (`sweep::cost_text`).
            "$" if a.abs().max(b.abs()) >= 10.0 => 0,
            _ => 2,
        };
        // Rates as `eval`'s throughput line shows them: a positive one is never shown as 0, and
        // their difference to the places the larger of the two is shown with. A cost below a
        // cent (a one-step budget at a low price) reads as `eval` prints it ($0.00293), not 0.00.
        let places = |v: f64| match t.unit {
            "tokens/s" | "%" | "days" | "h" | "min" | "$" => {
                crate::units::measured_places(v, digits)
            }
            _ => digits,
        };
        let diff_places = places(a.abs().max(b.abs()));
        // The difference of the two values as printed, so the row reads as a subtraction (20.1 and
        // 17.8 GiB of activations differ by 2.3 here, not by the 2.4 of the unrounded values).
        let rounded = |v: f64| {
            let scale = 10f64.powi(i32::try_from(diff_places).unwrap_or(0));
            (v * scale).round() / scale
        };
        let mut row = vec![
            t.group.to_string(),
            t.name.to_string(),
            t.unit.to_string(),
            format!("{:.*}", places(a), a),
            format!("{:.*}", places(b), b),
            format!("{:+.*}", diff_places, rounded(b) - rounded(a)),
        ];
        for cell in row.iter_mut().skip(3) {
            if cell
                .trim_start_matches(['+', '-'])
                .chars()
                .all(|c| c == '0' || c == '.')
            {
                *cell = format!("{:.*}", digits, 0.0);
            }
        }
        table.add_row(row);
    }
    for column in 3..6 {
        if let Some(col) = table.column_mut(column) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    // The ranges before the verdict, which stays the last line (scripts and tests read it there).
    let range = c.range_line().map(|l| l + "\n").unwrap_or_default();
    format!("{table}\n{range}{}\n", c.verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::cost::evaluate;
    use crate::plan::{ParallelPlan, PlanRequest, Recompute};
    use crate::specs;
    use crate::training::Training;

    #[test]
    fn bubble_ratios_that_differ_print_differently() {
        // 3/640 and 7/1280 (pp 4 and 8 at vpp 10, m 64 and 128) both round to 0.005.
        assert_eq!(
            distinct_ratios(3.0 / 640.0, 7.0 / 1280.0),
            ("0.0047".to_string(), "0.0055".to_string())
        );
        assert_eq!(
            distinct_ratios(0.25, 0.125),
            ("0.250".to_string(), "0.125".to_string())
        );
        assert_eq!(
            distinct_ratios(0.005, 0.005),
            ("0.005".to_string(), "0.005".to_string())
        );
    }

    fn estimate(pp: u32, vpp: u32) -> Estimate {
        let model = specs::load_model("gpt3-175b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("a100-sxm-80g").unwrap(),
            nodes: 64,
            gpus_per_node: 8,
        };
        let training = Training::megatron_lm_2021(2048, 1536);
        let request = PlanRequest {
            tp: 8,
            pp,
            dp: 512 / 8 / pp,
            vpp,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::Selective,
            zero: 1,
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        evaluate(&model, &cluster, &training, &plan)
    }

    #[test]
    fn time_terms_add_up_to_the_step() {
        let e = estimate(8, 1);
        let sum: f64 = time_terms(&e).iter().map(|t| t.2).sum();
        assert!((sum / e.time.step_s.0 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn interleaving_wins_on_the_bubble() {
        // Same layout, vpp 3 against 1: the bubble shrinks by a factor 3 (Narayanan et al. 2021
        // §2.2) and the PP traffic grows by 3; the verdict must name both.
        let (a, b) = (estimate(8, 1), estimate(8, 3));
        let sentence = verdict(&a, &b, "plan A", "plan B");
        assert!(
            sentence.starts_with("plan B is ") && sentence.contains("pipeline bubble"),
            "{sentence}"
        );
        let c = compare(&a, &b, "plan A", "plan B");
        let bubble = c.terms.iter().find(|t| t.name == "bubble").unwrap();
        assert!(bubble.a / bubble.b > 2.5, "{bubble:?}");
    }

    #[test]
    fn identical_plans_are_equally_fast() {
        let a = estimate(8, 1);
        let sentence = verdict(&a, &a, "A", "B");
        assert!(sentence.contains("equally fast"), "{sentence}");
    }
}
