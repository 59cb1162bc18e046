#!/usr/bin/env python3
"""Transcribe Megatron-Bridge's 26.x performance tables into validation/mbridge_26_runs.yaml.

Reads docs/performance-summary-archive.md (NeMo containers 26.02, 26.02.01, 26.04, 26.04.01, 26.06,
26.06.01) and docs/performance-summary.md (26.08) from the git snapshot of NVIDIA-NeMo/Megatron-Bridge
(a bare git dir, read with `git show`), and writes every row in the schema of
validation/modern_runs.yaml (same keys, same conventions: model shapes copied from that file's
model_catalog, dp = gpus/(tp*pp*cp) marked derived, FSDP column mapped as the 25.11 rows map it).
Pre-training and SFT rows are kept (modern_runs.yaml has task: sft rows); LoRA rows are left out
(no convention for them in modern_runs.yaml). See validation/mbridge_26_runs.md.

Usage: scripts/transcribe_mbridge_tables.py [--repo GIT_DIR] [--out FILE]
"""
import argparse
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_REPO = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"
COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
SNAPSHOT = "snapshot 2026-08-22"
VERSIONS = ["26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08"]
FILES = {
    "docs/performance-summary-archive.md": "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary-archive.html",
    "docs/performance-summary.md": "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html",
}

# Table model names -> model_catalog keys of validation/modern_runs.yaml (or a new key, for the
# models that catalog does not have).
MODEL_KEYS = {
    "LLAMA3_70B": "llama3_70b",
    "LLAMA3.1_405B": "llama31_405b",
    "DeepSeekV3": "deepseek_v3",
    "DeepSeekV4 Flash": "deepseek_v4_flash",
    "GPT OSS 120B": "gpt_oss_120b",
    "Qwen3_30B_a3B": "qwen3_30b_a3b",
    "Qwen3_235B_a22B": "qwen3_235b_a22b",
    "Kimi_K2": "kimi_k2",
    "Nemotron_3_Nano": "nemotron3_nano",
    "Nemotron_3_Super": "nemotron3_super",
    "Nemotron_3_Ultra": "nemotron3_ultra",
    "Nemotron_3_5_Lightning": "nemotron35_lightning",
}
# Catalog entries for models modern_runs.yaml's catalog lacks: kept with the shape unfilled, as that
# catalog keeps Nemotron 3 (tpsim then says "model shape not stated" and predicts nothing).
NEW_CATALOG = {
    "deepseek_v4_flash": {
        "name": "DeepSeek-V4 Flash (sparse-attention MoE)",
        "params_b": None,
        "active_params_b": None,
        "layers": None,
        "hidden": None,
        "heads": None,
        "kv_heads": None,
        "head_dim": None,
        "ffn_hidden": None,
        "vocab": None,
        "moe": None,
        "model_source": "shape not filled: novel architecture (sparse attention, MoE) whose config Megatron-Bridge loads from HF at runtime; "
        "name from NVIDIA-NeMo/Megatron-Bridge@067f987df03b docs/performance-summary.md (26.08 table) and "
        "src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v4.py",
        "params_note": None,
        "notes": None,
    },
    "nemotron35_lightning": {
        "name": "Nemotron 3.5 Lightning (hybrid Mamba-Transformer MoE)",
        "params_b": None,
        "active_params_b": None,
        "layers": None,
        "hidden": None,
        "heads": None,
        "kv_heads": None,
        "head_dim": None,
        "ffn_hidden": None,
        "vocab": None,
        "moe": None,
        "model_source": "shape not filled: hybrid architecture whose config Megatron-Bridge loads from HF at runtime; name from "
        "NVIDIA-NeMo/Megatron-Bridge@067f987df03b docs/performance-summary.md (26.08 table)",
        "params_note": None,
        "notes": None,
    },
}
# Table precision -> the runs file's precision (modern_runs.md caveat 8: Megatron-Bridge's FP8 is
# per-tensor current scaling, the recipes' fp8_cs; MXFP8 is 32-element block scaling).
PRECISIONS = {"FP8": "fp8", "FP8-CS": "fp8", "MXFP8": "mxfp8", "FP8-MX": "mxfp8", "NVFP4": "nvfp4", "BF16": "bf16"}
TASKS = {"Pre-Training Performance": "pretrain", "SFT Performance": "sft", "LoRA Performance": None}
MOE_NOTE = "MoE benchmark: token distribution force-balanced across experts, token-dropless (page note)"
SHAPE_FIELDS = ["name", "params_b", "active_params_b", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "moe"]


class NoAliases(yaml.SafeDumper):
    """Writes a shape shared by several runs out in full under each (modern_runs.yaml has no anchors)."""

    def ignore_aliases(self, data):
        return True


def git_show(repo, path):
    return subprocess.run(["git", "-C", repo, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True).stdout


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(text):
    """A table cell's number, without a footnote marker ("661[^gpt-oss-note]")."""
    m = re.match(r"^([0-9]+(?:\.[0-9]+)?)", text)
    if not m:
        raise ValueError(f"not a number: {text!r}")
    value = float(m.group(1))
    return int(value) if value.is_integer() else value


def optional_int(text):
    return None if text.strip().lower() in ("n/a", "-", "") else int(number(text))


def footnotes(text):
    out = {}
    for line in text.split("\n"):
        m = re.match(r"^\[\^([^\]]+)\]:\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def tables(path, text):
    """Every row of the 26.x tables in `text`: (version, task section, model, line number, row dict, table notes)."""
    lines = text.split("\n")
    version = task = model = None
    header = None
    pending = []  # rows of the current table, waiting for the bullet notes under it
    out = []

    def flush(notes):
        for row in pending:
            out.append((*row, list(notes)))
        pending.clear()

    notes = []
    for i, line in enumerate(lines, start=1):
        m = re.match(r"^## (\S+) NeMo Container", line)
        if m:
            flush(notes)
            notes = []
            version = m.group(1) if m.group(1) in VERSIONS else None
            task = model = header = None
            continue
        if line.startswith("## "):
            flush(notes)
            notes = []
            version = None
            continue
        if version is None:
            continue
        m = re.match(r"^### (.+)$", line)
        if m:
            flush(notes)
            notes = []
            task = m.group(1).strip()
            model = header = None
            continue
        m = re.match(r"^#### Model: (.+)$", line)
        if m:
            flush(notes)
            notes = []
            model = m.group(1).strip()
            header = None
            continue
        if line.startswith("|"):
            c = cells(line)
            if c[0] == "System":
                header = c
            elif set(line.replace("|", "").strip()) <= set("-: "):
                continue
            elif header is not None:
                if len(c) != len(header):
                    raise ValueError(f"{path}:{i}: {len(c)} cells under a {len(header)}-column header")
                pending.append((version, task, model, i, dict(zip(header, c))))
            continue
        m = re.match(r"^-\s+(.*)$", line)
        if m and model is not None:
            notes.append(m.group(1).strip())
    flush(notes)
    return out


def llama_flops(shape, seq, causal):
    """Megatron's FLOPs per token, L*h^2*(12 + 12g/a + 18f/h + c*12s/h + 6V/(L*h)) (modern_runs.md caveat 1)."""
    L, h, a = shape["layers"], shape["hidden"], shape["heads"]
    g, f, V = shape["kv_heads"] or a, shape["ffn_hidden"], shape["vocab"]
    c = 0.5 if causal else 1.0
    return L * h * h * (12 + 12 * g / a + 18 * f / h + c * 12 * seq / h + 6 * V / (L * h))


def flop_accounting(shape, seq, implied):
    if shape.get("moe") is None and shape.get("layers") and shape["name"].startswith("Llama"):
        full, causal = llama_flops(shape, seq, False), llama_flops(shape, seq, True)
        said = f"implied {implied:.3e} FLOP/token vs formula full {full:.3e} / causal {causal:.3e}"
        if abs(implied / causal - 1) <= 0.02:
            return f"causal (halved) attention -- verified: {said}"
        if abs(implied / full - 1) <= 0.02:
            return f"full (non-causal) attention -- verified: {said}"
        return (f"unverified: implied {implied:.3e} FLOP/token matches neither full ({full:.3e}) nor causal ({causal:.3e}) "
                "Megatron formula within 2%")
    return "by version: Megatron-Bridge flop_utils counts causal (halved) core attention, 3x fwd (fwd+bwd), no recompute"


def build(repo):
    catalog = yaml.safe_load(open(os.path.join(ROOT, "validation/modern_runs.yaml")))["model_catalog"]
    runs, used, ids, left_out = [], {}, {}, []
    for path, url in FILES.items():
        text = git_show(repo, path)
        notes_by_name = footnotes(text)
        for version, section, model_name, line, row, table_notes in tables(path, text):
            task = TASKS.get(section)
            key = MODEL_KEYS[model_name]
            if task is None:
                left_out.append((version, section, model_name, line))
                continue
            shape = catalog.get(key) or NEW_CATALOG[key]
            used[key] = shape
            system = row["System"]
            gpu = system.replace("DGX-", "")
            gpus = int(row["#-GPUs"])
            tp, pp, cp = int(row["TP"]), int(row["PP"]), int(row["CP"])
            mbs, gbs, seq = int(row["MBS"]), int(row["GBS"]), int(row["Sequence Length"])
            if gpus % (tp * pp * cp):
                raise ValueError(f"{path}:{line}: {gpus} GPUs is not a multiple of tp*pp*cp")
            dp = gpus // (tp * pp * cp)
            notes, flags = [], []
            ga = None
            if gbs % (mbs * dp) == 0:
                ga = gbs // (mbs * dp)
            else:
                notes.append(f"GBS {gbs} is not a multiple of MBS*DP = {mbs * dp}: GA not derived")
            tokens = number(row["Tokens / sec / GPU"])
            tflops_cell = row["Model TFLOP / sec / GPU"]
            tflops = number(tflops_cell)
            for marker in re.findall(r"\[\^([^\]]+)\]", tflops_cell + row["Tokens / sec / GPU"]):
                notes.append(f"table footnote: {notes_by_name.get(marker, marker)}")
            notes += [f"table note: {n}" for n in table_notes if not n.startswith("In MoE training benchmarks")]
            raw_precision = row["Precision"]
            fsdp_raw = row.get("FSDP")
            is_moe = shape.get("moe") is not None or key.startswith(("nemotron3", "nemotron35", "deepseek_v4"))
            if is_moe:
                notes.append(MOE_NOTE)
            if task == "sft":
                notes.append("SFT row: the table states no dataset or packing; tpsim predicts pre-training runs only")
            precision = PRECISIONS[raw_precision]
            run_id = f"mbridge-{version}-{task}-{key}-{gpu.lower()}-{gpus}g-{precision}-gbs{gbs}"
            if run_id in ids:
                ids[run_id] += 1
                suffix = "alt" if ids[run_id] == 2 else f"alt{ids[run_id] - 1}"
                run_id = f"mbridge-{version}-{task}-{key}-{gpu.lower()}-{gpus}g-{precision}-{suffix}-gbs{gbs}"
            else:
                ids[run_id] = 1
            implied = tflops * 1e12 / tokens
            model = {f: shape.get(f) for f in SHAPE_FIELDS}
            model["seq_len"] = seq
            section_name = "Pre-Training Performance" if task == "pretrain" else section
            runs.append({
                "id": run_id,
                "source": {
                    "ref": f"NVIDIA Megatron-Bridge performance summary, {version} NeMo container",
                    "repo": "NVIDIA-NeMo/Megatron-Bridge",
                    "path": path,
                    "commit_or_version": f"{COMMIT} ({SNAPSHOT}); NeMo container {version}",
                    "table": f"{version} NeMo Container > {section_name} > Model: {model_name} (line {line})",
                    "url": url,
                },
                "task": task,
                "model_key": key,
                "model": model,
                "model_source": (f"model_catalog.{key} (shape fields from that entry; seq_len from this run)" if key in catalog else
                                 f"model_catalog.{key} (not in validation/modern_runs.yaml's catalog; shape not filled; seq_len from this run)"),
                "hardware": {"gpu": gpu, "system": system, "num_gpus": gpus, "gpus_per_node": 4 if gpu.startswith("GB") else 8},
                "plan": {
                    "tp": tp, "pp": pp, "cp": cp, "vp": optional_int(row["VP"]), "ep": optional_int(row["EP"]), "etp": None,
                    "dp": dp, "dp_derived": True, "mbs": mbs, "gbs": gbs, "ga": ga, "ga_derived": True,
                    "precision": precision, "precision_raw": raw_precision, "recompute": None,
                    "fsdp": None if fsdp_raw is None else fsdp_raw != "0", "fsdp_raw": fsdp_raw,
                    "zero": None, "overlap": None,
                },
                "results": {
                    "tokens_per_s_per_gpu": tokens,
                    "model_tflops_per_gpu": tflops,
                    "mfu": None,
                    "step_time_s": None,
                    "peak_memory_gb": None,
                    "implied_model_flops_per_token": implied,
                    "flop_accounting": flop_accounting(shape, seq, implied),
                },
                "notes": notes + ["DERIVED: ga = gbs/(mbs*dp) (the 26.x tables have no GA column)"] if ga is not None else notes,
                "flags": flags,
            })
    for key, shape in NEW_CATALOG.items():
        used.setdefault(key, shape)
    return runs, {k: used[k] for k in sorted(used)}, left_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default=DEFAULT_REPO)
    ap.add_argument("--out", default=os.path.join(ROOT, "validation/mbridge_26_runs.yaml"))
    args = ap.parse_args()
    runs, catalog, left_out = build(args.repo)
    doc = {
        "schema_version": 1,
        "generated": f"scripts/transcribe_mbridge_tables.py from NVIDIA-NeMo/Megatron-Bridge@{COMMIT} ({SNAPSHOT})",
        "description": "Megatron-Bridge performance summary, NeMo containers 26.02 to 26.08 (out-of-sample check: no tpsim setting was fitted to "
        "these rows); see validation/mbridge_26_runs.md.",
        "conventions": yaml.safe_load(open(os.path.join(ROOT, "validation/modern_runs.yaml")))["conventions"],
        "model_catalog": catalog,
        "runs": runs,
    }
    header = (
        "# Megatron-Bridge performance-summary rows of NeMo containers 26.02-26.08, transcribed by\n"
        "# scripts/transcribe_mbridge_tables.py in the schema of validation/modern_runs.yaml. Derived values are marked.\n"
        "# Read validation/mbridge_26_runs.md (and modern_runs.md's caveats) before using them.\n"
    )
    with open(args.out, "w") as f:
        f.write(header)
        f.write(yaml.dump(doc, Dumper=NoAliases, sort_keys=False, width=150, allow_unicode=True))
    by_task = {}
    for r in runs:
        by_task[r["task"]] = by_task.get(r["task"], 0) + 1
    print(f"wrote {len(runs)} runs to {args.out} ({by_task}); left out {len(left_out)} LoRA rows", file=sys.stderr)


if __name__ == "__main__":
    main()
