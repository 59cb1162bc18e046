#!/usr/bin/env python3
"""Residual bands of tpsim's step-time predictions, per framework and hardware family.

Input: the JSON-lines dump of tpsim's predictions on every run it is tested against, written by
    TPSIM_RESIDUALS_DUMP=$PWD/target/residuals.jsonl \
        cargo test --release --test accuracy dump_residuals -- --ignored
Output: validation/residual_bands.json (read by src/uncertainty.rs at build time).

Method: for each run, r = ln(measured / predicted). For each group (framework x hardware family x
model kind, dense or mixture-of-experts; each hardware family and kind pooled over frameworks; each
kind pooled over everything) the band is the empirical 5th and 95th
percentile of r (linear interpolation between order statistics, numpy's default "linear"
method), so a prediction p carries the range [p * exp(q05), p * exp(q95)]. Groups with fewer than
MIN_RUNS runs get no band of their own (their runs still count in the pooled family band).
vTrain's single-node runs (0.2-1.3B models on one node) are left out: tpsim does not plan for
that regime and their error is dominated by a fixed per-layer overhead.

Peak memory gets the same treatment where a source publishes it: quantiles of
ln(measured / predicted memory) per framework ("memory") and pooled ("memory_all").

Also prints, with --analysis, the per-model ranking numbers of issue 11 (Spearman, favourite's
regret, median |error|) and the residual by tensor-parallel degree, for validation/FIT.md.
Standard library only.
"""

import hashlib
import json
import math
import re
import sys
from collections import defaultdict

LOW_Q = 0.05
HIGH_Q = 0.95
MIN_RUNS = 8


def quantile(values, q):
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def family(profile):
    """Hardware family of a GPU profile name: the first token shaped like a GPU model (a100, h100)."""
    for token in profile.split("-"):
        if re.fullmatch(r"[a-z]\d{3}", token):
            return token
    return profile


def band(values, basis):
    return {
        "basis": basis,
        "runs": len(values),
        "log_ratio_q05": round(quantile(values, LOW_Q), 6),
        "log_ratio_q95": round(quantile(values, HIGH_Q), 6),
        "log_ratio_median": round(quantile(values, 0.5), 6),
    }


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb)


def analysis(rows):
    by_model = defaultdict(list)
    for row in rows:
        if row["source"] == "vtrain_multi_node":
            by_model[(row["layers"], row["hidden"])].append(row)
    print("per model: plans, Spearman, favourite's regret, median |error|")
    for key in sorted(by_model):
        g = by_model[key]
        pred = [r["predicted_step_s"] for r in g]
        meas = [r["measured_step_s"] for r in g]
        fav = min(range(len(g)), key=lambda i: pred[i])
        regret = meas[fav] / min(meas) - 1
        med = quantile([abs(p / m - 1) for p, m in zip(pred, meas)], 0.5)
        print(
            f"  L{key[0]} h{key[1]}: {len(g)} plans, rho {spearman(pred, meas):.3f}, "
            f"regret {regret * 100:.1f}%, median |error| {med * 100:.1f}%"
        )
    print("log(measured/predicted) by model and tp (mean, n)")
    cells = defaultdict(list)
    for key, g in by_model.items():
        for r in g:
            cells[(key[1], r["estimate"]["tp"])].append(
                math.log(r["measured_step_s"] / r["predicted_step_s"])
            )
    for key in sorted(cells):
        v = cells[key]
        print(f"  h{key[0]} tp{key[1]}: {sum(v) / len(v):+.3f} (n={len(v)})")


def pearson(a, b):
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def candidates(rows):
    """Issue 11: how well each candidate mechanism's time term tracks the unexplained seconds
    (measured - predicted) on the 18.4B and 39.1B models, and a what-if for one sourced mechanism."""
    g = [
        r
        for r in rows
        if r["source"] == "vtrain_multi_node" and r["hidden"] in (6144, 8192)
    ]
    extra = [r["measured_step_s"] - r["predicted_step_s"] for r in g]
    gpn = 8

    def dp_members_per_node(e):
        return min(gpn // min(e["tp"], gpn), e["dp"])

    terms = {
        "DP all-reduce time (tpsim, shared NICs)": lambda e: e["comm"]["dp"]["time_s"],
        "PP sends exposed (b*s*h/tp)": lambda e: e["time"]["pp_comm_exposed_s"],
        "micro-batches per step": lambda e: e["num_microbatches"],
        "pipeline slots m+p-1": lambda e: e["num_microbatches"] + e["pp"] - 1,
        "GEMM+element-wise compute": lambda e: e["time"]["compute_s"],
        "TP all-reduce exposed": lambda e: e["time"]["tp_comm_exposed_s"],
        "predicted memory": lambda e: e["memory"]["total_bytes"],
        "compute x [1 < DP members per node < 8]": lambda e: e["time"]["compute_s"]
        * (1 < dp_members_per_node(e) < gpn),
    }
    print("correlation of the unexplained seconds with each candidate's term (18.4B + 39.1B, n=%d)" % len(g))
    for name, f in terms.items():
        x = [f(r["estimate"]) for r in g]
        print(f"  {name:45s} Pearson {pearson(x, extra):+.2f}  Spearman {spearman(x, extra):+.2f}")
    print("what-if: DP gradient reduction after the last backward, not overlapped (DeepSpeed PipelineEngine)")
    by_model = defaultdict(list)
    for r in rows:
        if r["source"] == "vtrain_multi_node":
            by_model[(r["layers"], r["hidden"])].append(r)
    for key in sorted(by_model):
        rs = by_model[key]
        meas = [r["measured_step_s"] for r in rs]
        pred = [
            r["predicted_step_s"]
            - r["estimate"]["time"]["dp_comm_exposed_s"]
            + r["estimate"]["comm"]["dp"]["time_s"]
            for r in rs
        ]
        fav = min(range(len(rs)), key=lambda i: pred[i])
        med = quantile([abs(p / m - 1) for p, m in zip(pred, meas)], 0.5)
        print(
            f"  L{key[0]} h{key[1]}: rho {spearman(pred, meas):.3f}, regret "
            f"{(meas[fav] / min(meas) - 1) * 100:.1f}%, median |error| {med * 100:.1f}%"
        )


def plan_key(row):
    if row["source"].startswith("vtrain"):
        e = row["estimate"]
        return f"L{row['layers']}-h{row['hidden']}-tp{e['tp']}-pp{e['pp']}-dp{e['dp']}-mb{e['micro_batch']}"
    return row["id"]


def held_out_coverage(rows):
    """Checks the band method out of sample: bands from two thirds of the runs (by a hash of the
    plan, so a repeated plan stays on one side), coverage of [q05, q95] on the other third."""
    train, held = [], []
    for row in rows:
        if row["source"] == "vtrain_single_node":
            continue
        r = math.log(row["measured_step_s"] / row["predicted_step_s"])
        digest = int(hashlib.sha256(plan_key(row).encode()).hexdigest(), 16)
        (held if digest % 3 == 0 else train).append(r)
    lo, hi = quantile(train, LOW_Q), quantile(train, HIGH_Q)
    inside = sum(lo <= r <= hi for r in held)
    print(
        f"held-out check: band [{lo:+.3f}, {hi:+.3f}] from {len(train)} runs covers "
        f"{inside} of {len(held)} held-out runs ({100 * inside / len(held):.0f}%; nominal 90%)"
    )


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit("usage: vtrain_residuals.py DUMP.jsonl OUT.json [--analysis]")
    dump, out = args
    rows = [json.loads(line) for line in open(dump) if line.strip()]
    if "--analysis" in sys.argv:
        analysis(rows)
        candidates(rows)
        held_out_coverage(rows)
    # Dense and mixture-of-experts runs miss differently (tpsim's MoE errors are several times its
    # dense ones), so every band is per model kind; `all` pools everything, for the record.
    groups = defaultdict(list)
    families = defaultdict(list)
    kinds = defaultdict(list)
    every = []
    precisions = set()
    for row in rows:
        if row["source"] == "vtrain_single_node":
            continue
        # The estimate's precision where the row carries one, else the run's stated precision.
        precisions.add(row.get("precision") or row.get("estimate", {}).get("precision", "bf16"))
        r = math.log(row["measured_step_s"] / row["predicted_step_s"])
        fam = family(row["gpu_profile"])
        kind = "moe" if row.get("moe") else "dense"
        groups[(row["framework"], fam, kind)].append(r)
        families[(fam, kind)].append(r)
        kinds[kind].append(r)
        every.append(r)
    result = {
        "about": "Empirical 5th/95th percentiles of ln(measured/predicted) step time over the runs "
        "tpsim is tested against (vTrain multi-node Megatron-DeepSpeed, Megatron-LM SC'21, BLOOM, and the "
        "current-stack runs of validation/modern_runs.yaml: Megatron-Core family and torchtitan on H100/H200/B200/GB200/GB300, and the "
        "Megatron-Core MoE report's runs of validation/mcore_moe_report.yaml). "
        "Generated by scripts/vtrain_residuals.py; do not edit by hand.",
        "groups": [],
        "families": [],
        "kinds": [],
        "all": band(every, "every run, all frameworks and GPUs"),
        # The GEMM precisions the runs behind the bands train in: a plan at any other precision has
        # no measured error, and says so.
        "precisions": sorted(precisions),
    }
    # Peak memory per GPU, where a source publishes it (torchtitan's benchmark tables): the same
    # quantiles of ln(measured / predicted) memory, per framework, and pooled.
    memory = defaultdict(list)
    for row in rows:
        if "measured_memory_bytes" in row:
            memory[row["framework"]].append(
                math.log(row["measured_memory_bytes"] / row["predicted_memory_bytes"])
            )
    result["memory"] = []
    for framework, values in sorted(memory.items()):
        if len(values) >= MIN_RUNS:
            entry = band(values, f"published {framework} runs")
            entry["framework"] = framework
            result["memory"].append(entry)
    pooled = [v for values in memory.values() for v in values]
    if pooled:
        result["memory_all"] = band(
            pooled,
            "published runs that state their peak (%s)" % ", ".join(sorted(memory)),
        )
    words = {"dense": "dense", "moe": "mixture-of-experts"}
    for (framework, fam, kind), values in sorted(groups.items()):
        if len(values) >= MIN_RUNS:
            entry = band(values, f"{words[kind]} models, {framework} on {fam}")
            entry.update({"framework": framework, "family": fam, "kind": kind})
            result["groups"].append(entry)
    for (fam, kind), values in sorted(families.items()):
        if len(values) >= MIN_RUNS:
            entry = band(values, f"{words[kind]} models, all frameworks on {fam}")
            entry.update({"family": fam, "kind": kind})
            result["families"].append(entry)
    for kind, values in sorted(kinds.items()):
        entry = band(values, f"{words[kind]} models, every framework and GPU")
        entry["kind"] = kind
        result["kinds"].append(entry)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {out}: {len(every)} runs")


if __name__ == "__main__":
    main()
