#!/usr/bin/env python3
"""Exploration: run tpsim on the dense runs of validation/modern_runs.yaml with their published plan
pinned and the unstated settings (recompute, ZeRO) searched; print predicted vs published tokens/s
per GPU. The CI check is tests/modern_accuracy.rs; this script is for looking at the residuals.
Usage: scripts/modern_accuracy.py [filter-substring]"""
import json, subprocess, sys, statistics, yaml, os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPSIM = os.path.join(ROOT, "target/release/tpsim")
GPUS = {"H100": "h100-sxm-80g", "H200": "h200-sxm-141g", "B200": "b200-sxm-180g",
        "GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "B300": "b300-sxm-288g"}

def args_for(run):
    m, hw, p = run["model"], run["hardware"], run["plan"]
    if m.get("moe") or "Mamba" in m["name"] or "LatentMoE" in m["name"]:
        return None, "moe/hybrid"
    if run["task"] != "pretrain":
        return None, "sft"
    if "maxtext" in run["id"]:
        return None, "maxtext (JAX)"
    if any("SUSPECT" in f or "source_inconsistency" in f for f in run.get("flags", [])):
        return None, "flagged"
    gpu = GPUS.get(hw["gpu"])
    if gpu is None:
        return None, "gpu " + hw["gpu"]
    name = m["name"]
    a = ["--layers", str(m["layers"]), "--hidden", str(m["hidden"]), "--heads", str(m["heads"]),
         "--kv-heads", str(m["kv_heads"] or m["heads"]), "--ffn-hidden", str(m["ffn_hidden"]),
         "--vocab", str(m["vocab"] or 256000)]
    if name.startswith("GPT-3"):
        a += ["--style", "gpt"]
    else:
        a += ["--style", "llama"]
        if "Llama" in name:
            a += ["--gated-mlp"]
    gpn = hw["gpus_per_node"]
    nodes = hw["num_gpus"] // gpn
    a += ["--gpu", gpu, "--nodes", str(nodes), "--gpus-per-node", str(gpn),
          "--seq-len", str(m["seq_len"]), "--global-batch", str(p["gbs"])]
    fw = "torchtitan" if run["id"].startswith(("torchtitan", "automodel")) else "megatron-core"
    a += ["--framework", fw, "--precision", p["precision"]]
    for flag, key in [("--tp", "tp"), ("--pp", "pp"), ("--cp", "cp"), ("--dp", "dp")]:
        if p.get(key):
            a += [flag, str(p[key])]
    a += ["--vpp", str(p.get("vp") or 1)]
    if p.get("pp") and m["layers"] % p["pp"]:
        a += ["--allow-uneven-pp"]
    if p.get("mbs"):
        a += ["--micro-batch", str(p["mbs"])]
    rc = str(p.get("recompute") or "")
    if rc.startswith("full"):
        a += ["--recompute", "full"]
    elif "selective" in rc:
        a += ["--recompute", "none"]  # flash attention: selective = none (see planner)
    if p.get("fsdp"):
        a += ["--zero", "3"]
    return a, None

def main():
    d = yaml.safe_load(open(os.path.join(ROOT, "validation/modern_runs.yaml")))
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    errs = []
    for run in d["runs"]:
        if flt not in run["id"]:
            continue
        want = run["results"].get("tokens_per_s_per_gpu")
        a, why = args_for(run)
        if a is None or not want:
            continue
        out = subprocess.run([TPSIM, "plan", "--top", "1", "--format", "json"] + a,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{run['id']:70s} rc={out.returncode} {out.stderr.strip()[:150]}")
            continue
        j = json.loads(out.stdout)
        best = j["plans"][0]
        gpus = run["hardware"]["num_gpus"]
        got = best["tokens_per_s"] / gpus
        err = got / want - 1
        errs.append((err, run["id"]))
        t = best["time"]
        print(f"{run['id']:70s} pub {want:8.0f} got {got:8.0f} err {err:+6.1%} rc={best['recompute']} z={best['zero']} "
              f"c={t['compute_s']:.2f} tp={t['tp_comm_exposed_s']:.2f} cp={t['cp_comm_exposed_s']:.2f} pp={t['pp_comm_exposed_s']:.2f} "
              f"dp={t['dp_comm_exposed_s']:.2f} b={t['bubble_s']:.2f} step={t['step_s']:.2f}")
    a = [abs(e) for e, _ in errs]
    if a:
        print(f"n={len(a)} median |err| {statistics.median(a):.1%} max {max(a):.1%} mean signed {statistics.mean(e for e,_ in errs):+.1%}")

main()
