"""Checks tpsim's emitted and read configurations with the frameworks' own classes.

Run by scripts/interop-check inside its virtualenv: `python interop_check.py TPSIM RESULTS.md`.
Each check is independent; one that cannot run (a framework that did not install or import) is
recorded as SKIP with the reason, never as a pass.
"""

import json
import subprocess
import sys
import time
import traceback

TPSIM, RESULTS = sys.argv[1], sys.argv[2]
LOG = sys.argv[3] if len(sys.argv) > 3 else "target/interop-check.log"
rows = []  # (area, check, outcome, detail)


def record(area, check, outcome, detail=""):
    rows.append((area, check, outcome, detail.replace("\n", " ").replace("|", "/")[:400]))
    print(f"{outcome:5} {area}: {check} {detail[:200]}", flush=True)


def tpsim(*args):
    """tpsim's stdout (exit 0 or 1: 1 means the plan does not fit, still printed)."""
    out = subprocess.run([TPSIM, *args], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"tpsim {' '.join(args)} exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def megatron_flags(line):
    """A Megatron-LM argument line as {flag: value or True}."""
    words, flags, i = line.split(), {}, 0
    while i < len(words):
        flag = words[i][2:]
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[flag] = words[i + 1]
            i += 2
        else:
            flags[flag] = True
            i += 1
    return flags


# Plans whose emitted configurations are checked: (label, tpsim arguments).
SCENARIOS = [
    ("README Llama-3-70B (plan, bf16 grads)",
     ["plan", "--hf-config", "models/hf/llama-3-70b.json", "--nodes", "16", "--global-batch", "512"]),
    ("README Llama-405B uneven + interleaved",
     ["plan", "--model", "llama3-405b", "--nodes", "2048", "--gpu", "h100-sxm-80g",
      "--global-batch", "2048", "--allow-uneven-pp"]),
    ("GPT-3 175B full recompute, fp32 grads",
     ["eval", "--model", "gpt3-175b", "--nodes", "128", "--gpu", "a100-sxm-80g", "--tp", "8",
      "--pp", "16", "--micro-batch", "1", "--recompute", "full", "--global-batch", "1536",
      "--grad-dtype", "fp32"]),
    ("Llama-3-8B ZeRO-3 without pipeline (Megatron-FSDP)",
     ["eval", "--model", "llama3-8b", "--nodes", "4", "--tp", "2", "--pp", "1", "--zero", "3",
      "--global-batch", "512"]),
    ("Llama-3-70B 80 layers on pp 6 (uneven, first/last)",
     ["eval", "--model", "llama3-70b", "--nodes", "12", "--tp", "8", "--pp", "6",
      "--allow-uneven-pp", "--global-batch", "480", "--zero", "1"]),
]


def stages_json(args):
    json_args = [a for a in args if a != "--emit"] + ["--format", "json"]
    if args[0] == "plan":
        json_args += ["--top", "1"]
    return json.loads(tpsim(*json_args))["plans"][0]


def check_megatron_core():
    try:
        import torch
        from megatron.core.transformer.transformer_config import TransformerConfig
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from megatron.core.distributed import DistributedDataParallelConfig
    except Exception as e:  # noqa: BLE001
        record("megatron-core", "import", "SKIP", f"{type(e).__name__}: {e}")
        return
    import megatron.core
    record("megatron-core", "import", "PASS", f"megatron-core {getattr(megatron.core, '__version__', '?')}")
    for label, args in SCENARIOS:
        try:
            line = tpsim(*args, "--emit", "megatron").strip()
            f = megatron_flags(line)
            plan = stages_json(args)
            layers = int(f["num-layers"])
            pp = int(f["pipeline-model-parallel-size"])
            counted = layers + ("account-for-embedding-in-pipeline-split" in f) + (
                "account-for-loss-in-pipeline-split" in f)
            vpp = None
            if "num-layers-per-virtual-pipeline-stage" in f:
                # arguments.py validate_args (not in the megatron-core package): counted layers
                # / pp / N.
                vpp = counted // pp // int(f["num-layers-per-virtual-pipeline-stage"])
            heads = int(f["num-attention-heads"])
            config = TransformerConfig(
                num_layers=layers,
                hidden_size=int(f["hidden-size"]),
                num_attention_heads=heads,
                num_query_groups=int(f.get("num-query-groups", heads)),
                ffn_hidden_size=int(f["ffn-hidden-size"]),
                tensor_model_parallel_size=int(f["tensor-model-parallel-size"]),
                pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp,
                sequence_parallel="sequence-parallel" in f,
                recompute_granularity=f.get("recompute-granularity"),
                recompute_method=f.get("recompute-method"),
                recompute_num_layers=int(f["recompute-num-layers"]) if "recompute-num-layers" in f else None,
                account_for_embedding_in_pipeline_split="account-for-embedding-in-pipeline-split" in f,
                account_for_loss_in_pipeline_split="account-for-loss-in-pipeline-split" in f,
                num_layers_in_first_pipeline_stage=int(f["decoder-first-pipeline-num-layers"]) if "decoder-first-pipeline-num-layers" in f else None,
                num_layers_in_last_pipeline_stage=int(f["decoder-last-pipeline-num-layers"]) if "decoder-last-pipeline-num-layers" in f else None,
                gated_linear_unit="swiglu" in f,
                add_bias_linear="disable-bias-linear" not in f,
                hidden_dropout=float(f.get("hidden-dropout", 0.1)),
                attention_dropout=float(f.get("attention-dropout", 0.1)),
                bf16=True,
                params_dtype=torch.bfloat16,
                pipeline_dtype=torch.bfloat16,
            )
            # Layers Megatron-Core builds on each stage, against tpsim's stage layout.
            per_stage = []
            for rank in range(pp):
                chunks = [None] if vpp is None else range(vpp)
                per_stage.append(sum(get_num_layers_to_build(config, vp_stage=v, pp_rank=rank) for v in chunks))
            s = plan["stages"]
            ok = sum(per_stage) == layers and per_stage[0] == s["first"] and per_stage[-1] == s["last"] and (
                pp <= 2 or max(per_stage[1:-1]) == s["middle_max"])
            record("megatron-core", f"{label}: TransformerConfig + layers per stage",
                   "PASS" if ok else "FAIL",
                   f"Megatron-Core builds {per_stage[0]}, {per_stage[1:-1][:3]}..., {per_stage[-1]}; tpsim first {s['first']} middle {s['middle_max']} last {s['last']}")
            grad_fp32 = "accumulate-allreduce-grads-in-fp32" in f or "grad-reduce-in-bf16" not in f
            DistributedDataParallelConfig(
                grad_reduce_in_fp32=grad_fp32,
                use_distributed_optimizer="use-distributed-optimizer" in f,
            )
            record("megatron-core", f"{label}: gradient precision", "PASS" if (grad_fp32 == (plan_grad(args) == "fp32")) else "FAIL",
                   f"line reduces in {'fp32' if grad_fp32 else 'bf16'}, tpsim plans {plan_grad(args)}")
        except Exception as e:  # noqa: BLE001
            record("megatron-core", label, "FAIL", f"{type(e).__name__}: {e} {traceback.format_exc(limit=1)}")


def plan_grad(args):
    json_args = [a for a in args] + ["--format", "json"]
    if args[0] == "plan":
        json_args += ["--top", "1"]
    return json.loads(tpsim(*json_args))["training"]["grad_dtype"]


def check_deepspeed():
    try:
        from deepspeed.runtime.config import DeepSpeedConfig
    except Exception as e:  # noqa: BLE001
        record("deepspeed", "import", "SKIP", f"{type(e).__name__}: {e}")
        return
    import deepspeed
    import deepspeed.runtime.config as ds_config
    record("deepspeed", "import", "PASS", f"deepspeed {deepspeed.__version__}")
    # DeepSpeedConfig asks the communication backend for the rank before it asks the mpu for the
    # data-parallel size; without a process group it falls back to a world of 1. One rank is
    # enough here: the batch identity is checked against the mpu's data-parallel size.
    ds_config.dist.get_rank = lambda *args, **kwargs: 0

    class Mpu:
        """The data-parallel size DeepSpeed asks a model-parallel unit for."""
        def __init__(self, dp):
            self.dp = dp
        def get_data_parallel_world_size(self):
            return self.dp
        def get_data_parallel_rank(self):
            return 0
        def get_model_parallel_world_size(self):
            return 1
        def get_model_parallel_rank(self):
            return 0

    for label, args in [
        ("Llama-3-70B tp 8 zero 3", ["eval", "--model", "llama3-70b", "--nodes", "16", "--tp", "8", "--pp", "1",
                                    "--zero", "3", "--micro-batch", "2", "--global-batch", "512",
                                    "--framework", "deepspeed"]),
        ("Llama-3-70B tp 8 pp 2 zero 1, fp32 grads", ["eval", "--model", "llama3-70b", "--nodes", "16", "--tp", "8",
                                                     "--pp", "2", "--zero", "1", "--global-batch", "512",
                                                     "--grad-dtype", "fp32", "--framework", "deepspeed"]),
    ]:
        try:
            config = json.loads(tpsim(*args, "--emit", "deepspeed"))
            dp = stages_json(args)["dp"]
            ds = DeepSpeedConfig(config, mpu=Mpu(dp))
            grad = getattr(ds, "grad_accum_dtype", None)
            ok = (ds.train_batch_size == config["train_batch_size"]
                  and ds.zero_optimization_stage == config["zero_optimization"]["stage"]
                  and grad == config["data_types"]["grad_accum_dtype"])
            record("deepspeed", label, "PASS" if ok else "FAIL",
                   f"train_batch_size {ds.train_batch_size}, ZeRO {ds.zero_optimization_stage}, grad_accum_dtype {grad}")
        except Exception as e:  # noqa: BLE001
            record("deepspeed", label, "FAIL", f"{type(e).__name__}: {e}")


def check_transformers():
    try:
        import glob
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except Exception as e:  # noqa: BLE001
        record("transformers", "import", "SKIP", f"{type(e).__name__}: {e}")
        return
    import transformers
    record("transformers", "import", "PASS", f"transformers {transformers.__version__}")
    for path in sorted(glob.glob("models/hf/*.json")):
        try:
            cfg = AutoConfig.from_pretrained(path)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(cfg)
            theirs = sum(p.numel() for p in model.parameters())
            ours = json.loads(tpsim("eval", "--hf-config", path, "--nodes", "1", "--tp", "1", "--pp", "1",
                                    "--seq-len", "1024", "--format", "json"))["model"]["params"]
            err = ours / theirs - 1
            record("transformers", f"{path} parameter count", "PASS" if abs(err) < 1e-3 else "FAIL",
                   f"transformers {theirs:,}, tpsim {int(ours):,} ({err:+.3%})")
        except Exception as e:  # noqa: BLE001
            record("transformers", path, "FAIL", f"{type(e).__name__}: {e}")


def bridge_field_names():
    """Field names of the ConfigContainer sections the overrides set, read from the installed
    sources (megatron-bridge imports transformer_engine, which needs CUDA): `model` is a
    GPTModelProvider, a Megatron-Core TransformerConfig; `ddp` and `optimizer` subclass
    Megatron-Core's configs; `train` and `mixed_precision` are Bridge's own dataclasses."""
    import ast
    import dataclasses
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    import os
    import megatron.core
    # Bridge's package __init__ imports transformer_engine: read its files without importing it.
    root = os.path.dirname(os.path.dirname(megatron.core.__file__))

    def annotated(module, cls):
        path = os.path.join(root, *module.split(".")[1:]) + ".py"
        tree = ast.parse(open(path).read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
                # Older releases keep some names as properties (0.3.1: GPTDatasetConfig.seq_length).
                properties = {n.name for n in node.body if isinstance(n, ast.FunctionDef)
                              and any(getattr(d, "id", None) == "property" for d in n.decorator_list)}
                return fields | properties
        raise LookupError(f"{cls} not in {path}")

    names = {
        "model": {f.name for f in dataclasses.fields(TransformerConfig)}
        | annotated("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
        "dataset": annotated("megatron.bridge.training.config", "GPTDatasetConfig"),
        "ddp": {f.name for f in dataclasses.fields(DistributedDataParallelConfig)},
        "optimizer": {f.name for f in dataclasses.fields(OptimizerConfig)},
        "train": annotated("megatron.bridge.training.config", "TrainingConfig"),
        "mixed_precision": annotated("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),
    }
    return names


def check_megatron_bridge_names():
    try:
        names = bridge_field_names()
    except Exception as e:  # noqa: BLE001
        record("megatron-bridge", "field names from the installed sources", "SKIP", f"{type(e).__name__}: {e}")
        return
    for label, args in SCENARIOS:
        if "--zero" in args and args[args.index("--zero") + 1] in ("2", "3"):
            record("megatron-bridge", f"{label}", "SKIP", "tpsim does not write ZeRO-2/3 for Megatron-Bridge yet")
            continue
        try:
            overrides = tpsim(*args, "--emit", "megatron-bridge").split()
            unknown = []
            for o in overrides:
                section, field = o.split("=", 1)[0].split(".", 1)
                if field not in names.get(section, ()):
                    unknown.append(o)
            record("megatron-bridge", f"{label}: every override names a ConfigContainer field",
                   "FAIL" if unknown else "PASS", f"unknown: {unknown}" if unknown else f"{len(overrides)} overrides")
        except Exception as e:  # noqa: BLE001
            record("megatron-bridge", label, "FAIL", f"{type(e).__name__}: {e}")


def check_megatron_bridge():
    try:
        from megatron.bridge.training.config import ConfigContainer  # noqa: F401
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
        from megatron.bridge.recipes.llama import llama3_70b_pretrain_config
    except Exception as e:  # noqa: BLE001
        record("megatron-bridge", "import", "SKIP", f"{type(e).__name__}: {e}")
        return
    record("megatron-bridge", "import", "PASS", "")
    for label, args in SCENARIOS[:1] + SCENARIOS[2:3]:
        try:
            overrides = tpsim(*args, "--emit", "megatron-bridge").split()
            cfg = llama3_70b_pretrain_config()
            cfg = process_config_with_overrides(cfg, cli_overrides=overrides)
            wanted = dict(o.split("=", 1) for o in overrides)
            got = {
                "model.tensor_model_parallel_size": cfg.model.tensor_model_parallel_size,
                "model.pipeline_model_parallel_size": cfg.model.pipeline_model_parallel_size,
                "train.global_batch_size": cfg.train.global_batch_size,
                "train.micro_batch_size": cfg.train.micro_batch_size,
                "ddp.use_distributed_optimizer": cfg.ddp.use_distributed_optimizer,
                "ddp.grad_reduce_in_fp32": cfg.ddp.grad_reduce_in_fp32,
            }
            bad = {k: v for k, v in got.items() if str(v).lower() != wanted[k].lower()}
            record("megatron-bridge", f"{label}: overrides applied", "FAIL" if bad else "PASS",
                   f"differs: {bad}" if bad else f"{len(overrides)} overrides")
        except Exception as e:  # noqa: BLE001
            record("megatron-bridge", label, "FAIL", f"{type(e).__name__}: {e}")


started = time.time()
for check in (check_megatron_core, check_deepspeed, check_transformers, check_megatron_bridge_names,
              check_megatron_bridge):
    check()
with open(RESULTS, "w") as out:
    out.write("# scripts/interop-check results\n\n")
    out.write(f"Written by `scripts/interop-check` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"{time.time() - started:.0f} s of checks). SKIP means the framework did not install or import "
              "here; it is not a pass.\n\n")
    try:
        installs = [l.strip() for l in open(LOG) if l.startswith(("installed", "FAILED"))]
    except OSError:
        installs = []
    if installs:
        out.write("Installs (from the last install run; pip from PyPI, 2 CPU cores):\n\n")
        out.write("".join(f"- {l}\n" for l in installs) + "\n")
    out.write(
        "Not checked here: Megatron-LM's own `parse_args`/`validate_args` (megatron/training is not in "
        "the megatron-core package on PyPI; the virtual-stage count of `--num-layers-per-virtual-pipeline-stage` "
        "is recomputed as arguments.py does), Megatron-Bridge's ConfigContainer with the overrides applied "
        "(its package imports transformer_engine, which needs CUDA; the override names are checked against "
        "the installed sources instead), NeMo 1.x (not installed).\n\n")
    out.write("| framework | check | outcome | detail |\n|---|---|---|---|\n")
    for area, check, outcome, detail in rows:
        out.write(f"| {area} | {check} | {outcome} | {detail} |\n")
print(f"wrote {RESULTS}")
