//! torchtitan out: a Python recipe, a function returning torchtitan's `Trainer.Config`, that sets
//! every parallel degree, batch size, recompute mode, precision and compile choice of a plan
//! evaluated as `--framework torchtitan` runs it; what the recipe cannot carry is refused here
//! ([`unsupported`]), what the user must still supply is said beside it ([`notes`]).
//!
//! Written against pytorch/torchtitan at commit b5bcd76c66d0 (2026-08-21), [`TORCHTITAN_COMMIT`].
//! There a run is "a function that returns a complete `Trainer.Config`", selected with
//! `--module`/`--config` (torchtitan/config/README.md); the `--section.option` flags are frozen.
//! The fields set come from torchtitan/config/configs.py (`TrainingConfig`, `ParallelismConfig`,
//! `CompileConfig`), torchtitan/trainer.py (`Trainer.Config`: `activation_checkpoint` defaults to
//! `SelectiveAC.Config()`, so it is always written) and torchtitan/models/llama3/ (`model_registry`,
//! `config_registry.py`'s `llama3_8b`/`llama3_70b`/`llama3_405b` recipes).

use super::torchtitan_moe::MoeSpec;
pub(super) use super::torchtitan_refusals::{model_unsupported, run_unsupported, unsupported};
use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{KernelFusion, Training};

/// The torchtitan commit the recipe is written against.
pub const TORCHTITAN_COMMIT: &str = "b5bcd76c66d0";

/// A Llama 3 flavor torchtitan ships: `llama3_configs` in torchtitan/models/llama3/__init__.py
/// (b5bcd76c66d0), its FFN width `compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier)`
/// (torchtitan/models/common/feed_forward.py) worked out, RoPE theta 500000 in every flavor.
struct Flavor {
    name: &'static str,
    layers: u32,
    hidden: u32,
    heads: u32,
    kv_heads: u32,
    ffn_hidden: u32,
    vocab: u32,
    tied_embeddings: bool,
    /// The recipe in torchtitan/models/llama3/config_registry.py that sets data, tokenizer,
    /// optimizer and checkpoints for this flavor (None: 1B and 3B have none).
    recipe: Option<&'static str>,
}

const LLAMA3_FLAVORS: [Flavor; 5] = [
    // `_1b`: dim 2048, 16 layers, 32 heads, 8 KV heads, multiple_of 1024, multiplier 1.5, tied.
    Flavor {
        name: "1B",
        layers: 16,
        hidden: 2048,
        heads: 32,
        kv_heads: 8,
        ffn_hidden: 8192,
        vocab: 128256,
        tied_embeddings: true,
        recipe: None,
    },
    // `_3b`: dim 3072, 28 layers, 24 heads, 8 KV heads, multiple_of 1024, multiplier 1.0, tied.
    Flavor {
        name: "3B",
        layers: 28,
        hidden: 3072,
        heads: 24,
        kv_heads: 8,
        ffn_hidden: 8192,
        vocab: 128256,
        tied_embeddings: true,
        recipe: None,
    },
    // `_8b`: dim 4096, 32 layers, 32 heads, 8 KV heads, multiple_of 1024, multiplier 1.3.
    Flavor {
        name: "8B",
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn_hidden: 14336,
        vocab: 128256,
        tied_embeddings: false,
        recipe: Some("llama3_8b"),
    },
    // `_70b`: dim 8192, 80 layers, 64 heads, 8 KV heads, multiple_of 4096, multiplier 1.3.
    Flavor {
        name: "70B",
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        ffn_hidden: 28672,
        vocab: 128256,
        tied_embeddings: false,
        recipe: Some("llama3_70b"),
    },
    // `_405b`: dim 16384, 126 layers, 128 heads, 8 KV heads, multiple_of 4096, multiplier 1.2.
    Flavor {
        name: "405B",
        layers: 126,
        hidden: 16384,
        heads: 128,
        kv_heads: 8,
        ffn_hidden: 53248,
        vocab: 128256,
        tied_embeddings: false,
        recipe: Some("llama3_405b"),
    },
];

/// The RoPE base every shipped flavor uses (`ComplexRoPE.Config(theta=500000)`).
const LLAMA3_ROPE_THETA: f64 = 500000.0;

/// The shipped flavor whose shape is `model`'s, if any.
fn flavor_of(model: &Model) -> Option<&'static Flavor> {
    LLAMA3_FLAVORS.iter().find(|f| {
        (
            f.layers,
            f.hidden,
            f.heads,
            f.kv_heads,
            f.ffn_hidden,
            f.vocab,
            f.tied_embeddings,
        ) == (
            model.layers,
            model.hidden,
            model.heads,
            model.kv_heads,
            model.ffn_hidden,
            model.vocab,
            model.tied_embeddings,
        ) && model.rotary_base == Some(LLAMA3_ROPE_THETA)
    })
}

/// Whether the plan runs torchtitan's async TP (`CompileConfig.enable_async_tensor_parallel`).
pub(super) fn async_tp(training: &Training, plan: &ParallelPlan) -> bool {
    training.overlap.tp_comm && plan.tp > 1
}

/// What the tokens of one micro-batch must divide by (trainer.py `seq_len_divisor`).
pub(super) fn token_divisor(plan: &ParallelPlan) -> u64 {
    let tp = if plan.sequence_parallel { plan.tp } else { 1 };
    let cp = if plan.cp > 1 { 2 * plan.cp } else { 1 };
    u64::from(tp) * u64::from(cp)
}

/// Transformer layers of each model chunk in depth order (the order torchtitan's
/// `module_fqns_per_model_part` lists stages in, for looped and V schedules alike:
/// `_get_pp_rank_to_stage_indices_mapping`, torchtitan/distributed/pipeline_parallel.py), as
/// tpsim places them: one chunk per stage (`cost::simulated::layers_per_stage`), equal chunks,
/// even stages in unequal chunks (`StageLayout::balanced_chunks`), or chunks filled front to back
/// with the remainder last (`StageLayout::filled_chunks`). None for
/// an interleaved uneven split of another kind.
pub(super) fn chunk_layers(model: &Model, plan: &ParallelPlan) -> Option<Vec<u32>> {
    if plan.vpp <= 1 {
        return Some(crate::cost::simulated::layers_per_stage(model, plan));
    }
    let chunks = plan.pp * plan.vpp;
    if plan.stages.even && model.layers.is_multiple_of(chunks) {
        return Some(vec![model.layers / chunks; chunks as usize]);
    }
    if plan.stages.balanced_chunks(model.layers, plan.pp, plan.vpp) {
        // Even stages in unequal chunks (`StageLayout::balanced_chunks`).
        let layout = crate::cost::pipeline::ChunkLayout::of(model, plan);
        return Some(
            (0..chunks)
                .map(|chunk| {
                    let (start, end) = layout.range(chunk);
                    end - start
                })
                .collect(),
        );
    }
    let per_chunk = plan.stages.chunk_layers;
    if per_chunk > 0 {
        let last = model.layers.checked_sub(per_chunk * (chunks - 1))?;
        let mut out = vec![per_chunk; chunks as usize - 1];
        out.push(last);
        return Some(out);
    }
    None
}

/// The recipe's function name: `tpsim_` and the model's name in Python's identifier letters.
fn function_name(model: &Model) -> String {
    let slug: String = model
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("tpsim_{slug}")
}

/// `text` as a Python string literal: double-quoted, with backslashes, quotes and control
/// characters escaped (Python's string-literal escapes, docs.python.org/3/reference/
/// lexical_analysis.html#escape-sequences). A model named from a file such as `l"x.json` wrote
/// `model_registry("l"x")`, which Python does not parse.
pub(super) fn py_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The flavor `model_registry` is called with: the shipped one, or the model's own name, which
/// the user adds to `llama3_configs` (`notes` says so).
fn flavor_name(model: &Model) -> String {
    flavor_of(model).map_or_else(|| model.name.clone(), |f| f.name.to_string())
}

/// What the user must supply or know beside the recipe (stderr `note:` lines, without the prefix).
pub fn notes(
    model: &Model,
    training: &Training,
    cluster: &Cluster,
    plan: &ParallelPlan,
) -> Vec<String> {
    let mut out = Vec::new();
    let function = function_name(model);
    let gpus = cluster.total_gpus();
    let launch = if cluster.nodes == 1 {
        format!("NGPU={gpus} MODULE=torchtitan_recipes.tpsim_plan CONFIG={function} ./run_train.sh")
    } else {
        format!(
            "torchrun --nnodes {} --nproc_per_node {} (with your rendezvous) -m torchtitan.train --module torchtitan_recipes.tpsim_plan --config {function} on every node",
            cluster.nodes, cluster.gpus_per_node
        )
    };
    out.push(format!(
        "save the recipe below as torchtitan_recipes/tpsim_plan.py in a torchtitan checkout (written against {TORCHTITAN_COMMIT}) and run it on {gpus} GPUs = {} x {} x {} x {} (dp x cp x tp x pp): {launch}",
        plan.dp, plan.cp, plan.tp, plan.pp
    ));
    let spec = MoeSpec::of(model, training);
    if let Some(spec) = &spec {
        out.extend(super::torchtitan_moe::notes(model, training, spec));
    } else {
        out.push(llama3_flavor_note(model));
    }
    // gpt_oss runs varlen attention with sinks: its own note (`torchtitan_gpt_oss::notes`).
    if spec.is_some_and(|spec| spec.module == super::torchtitan_moe::Module::GptOss) {
        out.extend(super::torchtitan_gpt_oss::notes(training));
        return out;
    }
    // tpsim's torchtitan attention (`TrainingFramework::Torchtitan`: SDPA's FlashAttention-2
    // efficiency, `sdpa_repeats_kv`) predates this commit's `get_attention_config`, which refuses
    // sdpa for language models.
    out.push(format!(
        "tpsim prices torchtitan's attention as PyTorch SDPA's FlashAttention-2 kernel with K/V repeated to every query head; at {TORCHTITAN_COMMIT} torchtitan runs language models on FlexAttention (model_registry's default attn_backend \"flex\"; \"sdpa\" is refused) with grouped K/V and per-document block-causal masks, so its attention time and memory can differ from tpsim's"
    ));
    out
}

/// The note naming the Llama 3 flavor (or the one to add) a dense model is written as.
fn llama3_flavor_note(model: &Model) -> String {
    match flavor_of(model) {
        Some(Flavor {
            name,
            recipe: Some(recipe),
            ..
        }) => format!(
            "{} is torchtitan's llama3 flavor {name}; data, tokenizer (hf_assets_path), optimizer, LR schedule and checkpointing come from its {recipe} recipe (torchtitan/models/llama3/config_registry.py): set yours there or in the recipe",
            model.name
        ),
        Some(Flavor { name, .. }) => format!(
            "{} is torchtitan's llama3 flavor {name}, which ships no recipe; data, optimizer and checkpointing come from the llama3_8b recipe (torchtitan/models/llama3/config_registry.py): set hf_assets_path to {name}'s tokenizer and weights",
            model.name
        ),
        None => format!(
            "{name} is no llama3 flavor torchtitan ships (1B, 3B, 8B, 70B, 405B): add {key} to llama3_configs in torchtitan/models/llama3/__init__.py, built as _8b is with dim={}, n_layers={}, n_heads={}, n_kv_heads={}, hidden_dim={}, vocab_size={}, RoPE theta={}{}; data, optimizer and checkpointing come from the llama3_8b recipe: set hf_assets_path to a tokenizer of {} tokens",
            model.hidden,
            model.layers,
            model.heads,
            model.kv_heads,
            model.ffn_hidden,
            model.vocab,
            crate::emit::rotary_base_words(model.rotary_base.unwrap_or(10000.0)),
            if model.tied_embeddings {
                ", enable_weight_tying=True"
            } else {
                ""
            },
            model.vocab,
            name = model.name,
            key = py_str(&model.name)
        ),
    }
}

/// The recipe: one Python module holding one function that returns `Trainer.Config`.
pub fn torchtitan_recipe(model: &Model, training: &Training, plan: &ParallelPlan) -> String {
    let flavor = flavor_of(model);
    let moe = MoeSpec::of(model, training);
    let base = match &moe {
        Some(spec) => spec.base_recipe,
        None => flavor.and_then(|f| f.recipe).unwrap_or("llama3_8b"),
    };
    let function = function_name(model);
    let compiled = training.kernel_fusion == KernelFusion::Fused;
    let async_tp = async_tp(training, plan);
    let seq = training.seq_len;
    let py_bool = |b: bool| if b { "True" } else { "False" };
    let mut imports = Vec::new();
    if moe.as_ref().is_none_or(|spec| spec.mtp_layers == 0) {
        imports.push("from torchtitan.components.loss import CrossEntropyLoss".to_string());
    }
    imports.push("from torchtitan.config import CompileConfig, ParallelismConfig".to_string());
    let ac = match plan.recompute {
        Recompute::None => "None",
        Recompute::Selective => "SelectiveAC.Config()",
        Recompute::Full => "FullAC.Config()",
    };
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => imports
            .push("from torchtitan.distributed.activation_checkpoint import SelectiveAC".into()),
        Recompute::Full => {
            imports.push("from torchtitan.distributed.activation_checkpoint import FullAC".into())
        }
    }
    if plan.precision == Precision::Mxfp8 {
        imports.push("from torchtitan.components.quantization import MXFP8LinearConverter".into());
    }
    imports
        .push("from torchtitan.models.common.config_utils import decoder_vocab_size".to_string());
    match &moe {
        Some(spec) => {
            for line in super::torchtitan_moe::imports(spec, plan) {
                // Plain `import` lines first, as isort keeps them.
                if line.starts_with("import dataclasses") {
                    imports.insert(0, line);
                } else {
                    imports.push(line);
                }
            }
        }
        None => {
            imports.push("from torchtitan.models.llama3 import model_registry".to_string());
            imports.push(format!(
                "from torchtitan.models.llama3.config_registry import {base}"
            ));
        }
    }
    imports.push("from torchtitan.trainer import Trainer".to_string());

    let mut py = String::new();
    py.push_str(&format!(
        "# torchtitan recipe written by tpsim for {}.\n",
        crate::report::plan_words(plan)
    ));
    py.push_str(&format!(
        "# For pytorch/torchtitan at {TORCHTITAN_COMMIT}: a function returning Trainer.Config (torchtitan/config/README.md).\n"
    ));
    py.push_str(&imports.join("\n"));
    py.push_str("\n\n\n");
    if let Some(spec) = &moe {
        py.push_str(&super::torchtitan_moe::flavor_registration(
            model, training, spec,
        ));
    }
    if plan.pp > 1 {
        py.push_str(
            "def _layers(start: int, stop: int) -> list[str]:\n    return [f\"layers.{i}\" for i in range(start, stop)]\n\n\n",
        );
    }
    py.push_str(&format!("def {function}() -> Trainer.Config:\n"));
    py.push_str(&format!(
        "    # Data, tokenizer, optimizer, LR schedule and checkpointing: torchtitan's {base} recipe.\n    config = {base}()\n"
    ));
    // Compile: tpsim's kernel fusion (`--torch-compile`), async TP with it.
    py.push_str(&format!(
        "    config.compile = CompileConfig(\n        enable={},\n        enable_async_tensor_parallel={},\n    )\n",
        py_bool(compiled),
        py_bool(async_tp)
    ));
    // Precision: MXFP8 on the transformer layers' linears, the output layer kept in bf16 as tpsim
    // prices it (`fqns=["layers"]`, as config_registry.py's NVFP4 recipe leaves lm_head stock).
    let converters = match plan.precision {
        Precision::Mxfp8 => format!(
            ",\n        converters=[\n            MXFP8LinearConverter.Config(\n                fqns=[\"layers\"],\n                model_compile_enabled={},\n            ),\n        ],\n    ",
            py_bool(compiled)
        ),
        _ => String::new(),
    };
    let flavor_name = flavor_name(model);
    if let Some(spec) = &moe {
        py.push_str(&super::torchtitan_moe::model_spec_call(
            spec, training, plan, compiled,
        ));
    } else if converters.is_empty() {
        py.push_str(&format!(
            "    config.model_spec = model_registry({})\n",
            py_str(&flavor_name)
        ));
    } else {
        py.push_str(&format!(
            "    config.model_spec = model_registry(\n        {}{converters})\n",
            py_str(&flavor_name)
        ));
    }
    let mtp = moe.as_ref().is_some_and(|spec| spec.mtp_layers > 0);
    py.push_str(if mtp {
        // deepseek_v3's MTP trains only with `MTPLoss` (mtp.py: a list of logits, main first).
        "    # The main cross-entropy plus the MTP depths' (MTPLoss, mtp_scale 0.3), unchunked, as tpsim prices it.\n    config.loss = MTPLoss.Config(\n        global_vocab_size=decoder_vocab_size(config.model_spec),\n    )\n"
    } else {
        "    # Plain cross-entropy, as tpsim prices it (compiled with the model under compile).\n    config.loss = CrossEntropyLoss.Config(\n        global_vocab_size=decoder_vocab_size(config.model_spec),\n    )\n"
    });
    // Batch: torchtitan counts tokens (configs.py `TrainingConfig`; trainer.py derives the
    // gradient-accumulation steps as num_tokens_per_train_step / (tokens per dp rank x dp)).
    py.push_str(&format!(
        "    # {} x {seq}-token sequences per micro-batch, {} per step; {}.\n",
        plan.micro_batch,
        plan.global_batch,
        grad_accumulation_words(plan)
    ));
    py.push_str(&format!(
        "    config.training.max_context_length = {seq}\n    config.training.num_tokens_per_microbatch_per_dp_rank = {} * {seq}\n    config.training.num_tokens_per_train_step = {} * {seq}\n",
        plan.micro_batch, plan.global_batch
    ));
    py.push_str(
        "    # fp32 parameters and Adam states, bf16 compute, fp32 gradient reduction.\n    config.training.dtype = \"float32\"\n    config.training.mixed_precision_param = \"bfloat16\"\n    config.training.mixed_precision_reduce = \"float32\"\n    config.training.enable_cpu_offload = False\n",
    );
    // tpsim prices eager (or compiled) steps, not a captured CUDA graph replayed per micro-batch,
    // which `disable_cuda_graphs = False` (the default) runs at pp 1 (trainer.py
    // `wrap_with_cuda_graph`); at pp > 1 torchtitan refuses graphs ("CUDA graphs do not support
    // pipeline parallelism yet", `_validate_cuda_graphs`).
    py.push_str("    config.training.disable_cuda_graphs = True\n");
    // Data parallelism: replicate (ZeRO-0) or FSDP2 shards, HSDP with copies.
    let (replicate, shard) = if plan.zero == 3 {
        (plan.dp_replicas, plan.dp / plan.dp_replicas.max(1))
    } else {
        (plan.dp, 1)
    };
    py.push_str("    config.parallelism = ParallelismConfig(\n");
    let mut field = |name: &str, value: String| {
        py.push_str(&format!("        {name}={value},\n"));
    };
    field("data_parallel_replicate_degree", replicate.to_string());
    field("data_parallel_shard_degree", shard.to_string());
    field(
        "fsdp_reshard_after_forward",
        format!(
            "\"{}\"",
            if plan.reshard_after_forward {
                "always"
            } else {
                "never"
            }
        ),
    );
    field("tensor_parallel_degree", plan.tp.to_string());
    field(
        "enable_sequence_parallel",
        py_bool(plan.sequence_parallel).to_string(),
    );
    field("context_parallel_degree", plan.cp.to_string());
    if plan.cp > 1 {
        // The head-tail split tpsim assumes (2·cp chunks, `cp_balances_causal_chunks`).
        field("context_parallel_load_balancer", "\"headtail\"".to_string());
    }
    field("pipeline_parallel_degree", plan.pp.to_string());
    if plan.pp > 1 {
        field(
            "pipeline_parallel_schedule",
            format!("\"{}\"", training.pp_schedule.torchtitan_name(plan.vpp)),
        );
        field(
            "num_pp_microbatches",
            (plan.num_microbatches / plan.schedule_runs.max(1)).to_string(),
        );
        field("module_fqns_per_model_part", module_fqns_words(model, plan));
    }
    // Expert parallelism over ep of the dp_shard x cp x tp ranks (parallel_dims.py), one
    // expert-parallel rank per expert group, experts whole (no expert TP).
    field("expert_parallel_degree", plan.ep.to_string());
    py.push_str("    )\n");
    if moe.is_some() {
        let force = super::torchtitan_moe::force_load_balance(training);
        py.push_str(&format!(
            "    # {}\n    config.debug.moe_force_load_balance = {}\n",
            if force {
                "Round-robin routing, as tpsim priced it (--moe-routing round-robin)."
            } else {
                "The trained router (auxiliary-loss-free balancing); tpsim priced balanced experts."
            },
            py_bool(force)
        ));
    }
    py.push_str(&format!("    config.activation_checkpoint = {ac}\n"));
    py.push_str("    return config\n");
    py
}

/// How the step splits into schedules or micro-batches, in words for the recipe's comment.
fn grad_accumulation_words(plan: &ParallelPlan) -> String {
    if plan.pp > 1 {
        let runs = plan.schedule_runs.max(1);
        format!(
            "{} micro-batches per pipeline schedule, {} gradient-accumulation step{}",
            plan.num_microbatches / runs,
            runs,
            if runs == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "{} gradient-accumulation step{}",
            plan.num_microbatches,
            if plan.num_microbatches == 1 { "" } else { "s" }
        )
    }
}

/// `module_fqns_per_model_part` as Python: the embedding on the first chunk, the final norm and
/// the output layer on the last (the module names `_generate_llm_fqn_per_model_part` uses).
fn module_fqns_words(model: &Model, plan: &ParallelPlan) -> String {
    let chunks = chunk_layers(model, plan).unwrap_or_default();
    let last = chunks.len().saturating_sub(1);
    let mut start = 0;
    let mut out = String::from("[\n");
    for (i, layers) in chunks.iter().enumerate() {
        let mut parts = Vec::new();
        if i == 0 {
            parts.push("\"tok_embeddings\"".to_string());
        }
        parts.push(format!("*_layers({start}, {})", start + layers));
        if i == last {
            parts.push("\"norm\"".to_string());
            parts.push("\"lm_head\"".to_string());
        }
        out.push_str(&format!("            [{}],\n", parts.join(", ")));
        start += layers;
    }
    out.push_str("        ]");
    out
}
