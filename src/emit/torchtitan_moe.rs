//! torchtitan out, mixture-of-experts part: which torchtitan model module and flavor builds a
//! tpsim MoE model, what of an MoE plan the recipe cannot run as tpsim priced it, and the recipe
//! lines that differ from the Llama 3 recipe (`torchtitan.rs` writes the rest).
//!
//! Read at pytorch/torchtitan b5bcd76c66d0 (no PyTorch run here): the MoE modules are
//! torchtitan/models/qwen3 (`qwen3_configs` "30B-A3B", "235B-A22B": Qwen3 blocks with per-head q/k
//! RMSNorm, GQA, softmax top-k routing with `route_norm`, no shared experts) and
//! torchtitan/models/deepseek_v3 (`deepseekv3_configs` "16B", "236B", "671B": MLA, dense first
//! layers, shared experts, group-limited routing; its MTP, `num_mtp_layers`, with `MTPLoss`) and
//! torchtitan/models/gpt_oss (`gptoss_configs` "20b", "120b": sliding windows, attention sinks,
//! biased and clamped experts; `torchtitan_gpt_oss.rs` reads it). kimi_k2_7 (a vision encoder
//! beside the DeepSeek-V3 decoder) is not written; no
//! Mixtral, Grok or Llama 4 module ships there. Every MoE layer runs its experts as grouped GEMMs
//! (`GroupedExperts._grouped_mm`, torchtitan/models/common/moe.py: no switch), and the token
//! dispatcher is `moe_comm_backend` ("standard" all-to-all, "deepep", "hybridep",
//! "minimal_async_ep": `make_token_dispatcher_config`, torchtitan/models/common/config_utils.py).

use super::torchtitan::{TORCHTITAN_COMMIT, py_str};
use crate::model::{Model, Norm, PositionEmbedding};
use crate::plan::{ParallelPlan, Precision};
use crate::training::{MoeDispatcher, MoeRouting, Training};

/// The torchtitan model module a flavor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Module {
    Qwen3,
    DeepseekV3,
    GptOss,
}

impl Module {
    /// The Python package (`torchtitan.models.<name>`).
    pub(super) fn package(self) -> &'static str {
        match self {
            Module::Qwen3 => "qwen3",
            Module::DeepseekV3 => "deepseek_v3",
            Module::GptOss => "gpt_oss",
        }
    }
}

/// A shipped MoE flavor, its shape as its builder in torchtitan/models/<module>/__init__.py sets
/// it (b5bcd76c66d0).
struct Flavor {
    module: Module,
    name: &'static str,
    layers: u32,
    hidden: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    vocab: u32,
    experts: u32,
    router_topk: u32,
    expert_ffn: u32,
    shared_ffn: u32,
    first_dense_layers: u32,
    dense_ffn: u32,
    router_groups: u32,
    router_group_topk: u32,
    /// MLA ranks (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim).
    mla: Option<(u32, u32, u32, u32, u32)>,
    rope_theta: f64,
    /// The RoPE table's length (`max_context_length`): decoder.py `update_from_config` raises
    /// "Training sequence length ... exceeds attention RoPE maximum" past it.
    max_context: u32,
    /// Its recipe in torchtitan/models/<module>/config_registry.py (data, tokenizer, optimizer).
    recipe: Option<&'static str>,
}

const FLAVORS: [Flavor; 3] = [
    // `_30b_a3b`: dim 2048, 48 layers, 32 heads, 4 KV heads, head_dim 128, moe_hidden_dim 768,
    // 128 experts, top_k 8, vocab 151936, theta 1000000, max_context_length 40960.
    Flavor {
        module: Module::Qwen3,
        name: "30B-A3B",
        layers: 48,
        hidden: 2048,
        heads: 32,
        kv_heads: 4,
        head_dim: 128,
        vocab: 151936,
        experts: 128,
        router_topk: 8,
        expert_ffn: 768,
        shared_ffn: 0,
        first_dense_layers: 0,
        dense_ffn: 0,
        router_groups: 0,
        router_group_topk: 0,
        mla: None,
        rope_theta: 1000000.0,
        max_context: 40960,
        recipe: Some("qwen3_30b_a3b"),
    },
    // `_235b_a22b`: dim 4096, 94 layers, 64 heads, 4 KV heads, head_dim 128, moe_hidden_dim
    // 1536, 128 experts, top_k 8, vocab 151936, theta 5000000, max_context_length 40960.
    Flavor {
        module: Module::Qwen3,
        name: "235B-A22B",
        layers: 94,
        hidden: 4096,
        heads: 64,
        kv_heads: 4,
        head_dim: 128,
        vocab: 151936,
        experts: 128,
        router_topk: 8,
        expert_ffn: 1536,
        shared_ffn: 0,
        first_dense_layers: 0,
        dense_ffn: 0,
        router_groups: 0,
        router_group_topk: 0,
        mla: None,
        rope_theta: 5000000.0,
        max_context: 40960,
        recipe: None,
    },
    // `_671b`: dim 7168, 61 layers (3 dense, dense_hidden_dim 18432), 128 heads, q_lora_rank 1536,
    // kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
    // moe_hidden_dim 2048, 256 experts, 1 shared expert, top_k 8, 8 expert groups of which 4,
    // vocab 129280, theta 10000 (YaRN), max_context_length 4096 * 4.
    Flavor {
        module: Module::DeepseekV3,
        name: "671B",
        layers: 61,
        hidden: 7168,
        heads: 128,
        kv_heads: 128,
        head_dim: 128,
        vocab: 129280,
        experts: 256,
        router_topk: 8,
        expert_ffn: 2048,
        shared_ffn: 2048,
        first_dense_layers: 3,
        dense_ffn: 18432,
        router_groups: 8,
        router_group_topk: 4,
        mla: Some((1536, 512, 128, 64, 128)),
        rope_theta: 10000.0,
        max_context: 16384,
        recipe: Some("deepseek_v3_671b"),
    },
];

/// The qwen3 flavor whose builder an explicitly written Qwen3 MoE model copies.
const QWEN3_BASE_RECIPE: &str = "qwen3_30b_a3b";

/// How the recipe builds an MoE model: a shipped flavor, or a Qwen3 MoE flavor the recipe
/// registers with the model's own shape.
pub(super) struct MoeSpec {
    pub(super) module: Module,
    /// The flavor name `model_registry` is called with.
    pub(super) flavor: String,
    /// Whether the recipe registers the flavor itself (no shipped flavor has the shape).
    pub(super) explicit: bool,
    /// The recipe the data, tokenizer and optimizer come from.
    pub(super) base_recipe: &'static str,
    /// Whether that recipe is the flavor's own (false: borrowed from another flavor).
    pub(super) own_recipe: bool,
    /// The RoPE base to write over the flavor's, where the model's differs.
    pub(super) rope_theta_override: Option<f64>,
    max_context: u32,
    /// deepseek_v3's MTP depths (`model_registry(..., num_mtp_layers=N)`, trained with its
    /// `MTPLoss`: torchtitan/models/deepseek_v3/mtp.py); 0 elsewhere (`model_unsupported`).
    pub(super) mtp_layers: u32,
}

fn flavor_of(model: &Model) -> Option<&'static Flavor> {
    let moe = model.moe.as_ref()?;
    FLAVORS.iter().find(|f| {
        let mla = model.mla.as_ref().map(|m| {
            (
                m.q_lora_rank.unwrap_or(0),
                m.kv_lora_rank,
                m.qk_head_dim,
                m.qk_pos_emb_head_dim,
                m.v_head_dim,
            )
        });
        let dense_ffn = if moe.first_dense_layers > 0 {
            model.ffn_hidden
        } else {
            0
        };
        (
            f.layers,
            f.hidden,
            f.heads,
            f.kv_heads,
            f.head_dim,
            f.vocab,
            f.experts,
            f.router_topk,
            f.expert_ffn,
            f.shared_ffn,
            f.first_dense_layers,
            f.dense_ffn,
        ) == (
            model.layers,
            model.hidden,
            model.heads,
            model.kv_heads,
            model.head_dim,
            model.vocab,
            moe.experts,
            moe.router_topk,
            moe.ffn_hidden,
            moe.shared_expert_ffn_hidden,
            moe.first_dense_layers,
            dense_ffn,
        ) && (f.router_groups, f.router_group_topk) == (moe.router_groups, moe.router_group_topk)
            && f.mla == mla
            && (f.module == Module::Qwen3) == model.qk_norm
            && !model.tied_embeddings
    })
}

impl MoeSpec {
    /// How the recipe builds `model` (an MoE model that `model_unsupported` passed).
    pub(super) fn of(model: &Model, training: &Training) -> Option<MoeSpec> {
        model.moe.as_ref()?;
        let theta = model.rotary_base.unwrap_or(10000.0);
        if let Some(f) = super::torchtitan_gpt_oss::flavor_of(model) {
            return Some(MoeSpec {
                module: Module::GptOss,
                flavor: f.name.to_string(),
                explicit: false,
                base_recipe: f.recipe,
                own_recipe: true,
                rope_theta_override: (theta != super::torchtitan_gpt_oss::ROPE_THETA)
                    .then_some(theta),
                max_context: super::torchtitan_gpt_oss::MAX_CONTEXT,
                mtp_layers: 0,
            });
        }
        if let Some(f) = flavor_of(model) {
            let (base_recipe, own_recipe) = match f.recipe {
                Some(r) => (r, true),
                None => (QWEN3_BASE_RECIPE, false),
            };
            return Some(MoeSpec {
                module: f.module,
                flavor: f.name.to_string(),
                explicit: false,
                base_recipe,
                own_recipe,
                rope_theta_override: (theta != f.rope_theta).then_some(theta),
                max_context: f.max_context,
                mtp_layers: model.mtp_layers,
            });
        }
        // Qwen3-shaped: written with the model's own shape.
        (model.mla.is_none() && model.qk_norm).then(|| MoeSpec {
            module: Module::Qwen3,
            flavor: model.name.clone(),
            explicit: true,
            base_recipe: QWEN3_BASE_RECIPE,
            own_recipe: false,
            rope_theta_override: None,
            max_context: training.seq_len,
            mtp_layers: 0,
        })
    }

    /// The torchtitan dispatcher (`moe_comm_backend`) for the plan's: tpsim's all-to-all is
    /// torchtitan's "standard" `AllToAllTokenDispatcher` (one copy per routed pair, local dispatch
    /// at ep 1), its DeepEP (one copy per destination GPU) torchtitan's `DeepEPTokenDispatcher`.
    pub(super) fn comm_backend(training: &Training, plan: &ParallelPlan) -> &'static str {
        match training.moe_dispatch.dispatcher.written_for(plan.ep) {
            MoeDispatcher::Alltoall => "standard",
            MoeDispatcher::Deepep => "deepep",
        }
    }
}

/// Why no recipe can build this MoE model as tpsim priced it, whatever the plan, or None.
pub(super) fn model_unsupported(model: &Model) -> Option<String> {
    let moe = model.moe.as_ref()?;
    if super::torchtitan_gpt_oss::is_gpt_oss(model) {
        return super::torchtitan_gpt_oss::model_unsupported(model);
    }
    let name = &model.name;
    if model.mtp_layers > 0 && model.mla.is_none() {
        return Some(format!(
            "{name} has multi-token prediction (--mtp-layers {}), which torchtitan builds for its deepseek_v3 model only (MTPDecoder, torchtitan/models/deepseek_v3/mtp.py at {TORCHTITAN_COMMIT}); drop --mtp-layers, or use --framework megatron-core with --emit megatron",
            model.mtp_layers
        ));
    }
    let refuse = |part: String| {
        Some(format!(
            "{name} has {part}, and torchtitan's MoE blocks at {TORCHTITAN_COMMIT} are Qwen3's (torchtitan/models/qwen3: q/k RMSNorm, SwiGLU experts, no shared experts), DeepSeek-V3's (torchtitan/models/deepseek_v3: MLA, shared experts; flavors 16B, 236B, 671B) and GPT-OSS's (torchtitan/models/gpt_oss: biased experts clamped at 7.0, windows; flavors 20b, 120b); use --framework megatron-core with --emit megatron, or run without --emit"
        ))
    };
    if model.norm != Norm::Rmsnorm {
        return refuse("LayerNorm".into());
    }
    if !model.gated_mlp {
        return refuse("two-matrix experts (not SwiGLU)".into());
    }
    if model.linear_bias || model.qkv_bias {
        return refuse("biases on its linear layers".into());
    }
    if model.shared_layer_norm {
        return refuse("one norm shared by attention and MLP".into());
    }
    if model.dropout {
        return refuse("dropout".into());
    }
    // deepseek_v3's flavors rotate with YaRN (`ComplexRoPE.Config(scaling="yarn")`), qwen3's
    // without (`CosSinRoPE.Config`).
    let yarn_with_mla = model.position_embedding == PositionEmbedding::Yarn && model.mla.is_some();
    if model.position_embedding != PositionEmbedding::Rope && !yarn_with_mla {
        return refuse(format!("{} positions", model.position_embedding.as_str()));
    }
    if model.rotary_percent.is_some_and(|share| share != 1.0) {
        return refuse("RoPE over part of each head".into());
    }
    if moe.layer_freq != 1 {
        return refuse(format!(
            "an MoE layer every {} layers (--moe-layer-freq)",
            moe.layer_freq
        ));
    }
    if moe.shared_expert_gate {
        return refuse("a gate on its shared expert".into());
    }
    if moe.glu_clamp_limit.is_some() {
        return refuse("clamped expert activations".into());
    }
    if moe.latent_size.is_some() {
        return refuse("latent-width experts (LatentMoE)".into());
    }
    if model.mla.is_some() && flavor_of(model).is_none() {
        // deepseek_v3's builders take MLA only through their flavors' shapes.
        return Some(format!(
            "{name}'s shape (multi-latent attention, {} layers, hidden {}, {} experts) is no deepseek_v3 flavor torchtitan ships (16B, 236B, 671B in torchtitan/models/deepseek_v3/__init__.py at {TORCHTITAN_COMMIT}), and tpsim writes MLA models only as those flavors; use --framework megatron-core with --emit megatron, or run without --emit",
            model.layers, model.hidden, moe.experts
        ));
    }
    if model.mla.is_none() && !model.qk_norm {
        return refuse("no query/key norms (and no MLA)".into());
    }
    if model.mla.is_none()
        && (moe.shared_expert_ffn_hidden > 0 || moe.first_dense_layers > 0 || moe.router_groups > 0)
    {
        return refuse(
            "shared experts, dense first layers or group-limited routing without MLA".into(),
        );
    }
    if model.mla.is_none() && model.head_dim == 0 {
        return refuse("no head width".into());
    }
    None
}

/// Why the recipe cannot run this MoE plan as tpsim priced it, or None.
pub(super) fn plan_unsupported(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> Option<String> {
    let spec = MoeSpec::of(model, training)?;
    if spec.module == Module::GptOss
        && let Some(why) = super::torchtitan_gpt_oss::plan_unsupported(plan)
    {
        return Some(why);
    }
    // mtp.py `MTPDecoder.Config.update_from_config`: "MTP does not support pipeline parallelism
    // yet", "... context parallelism yet" (MTP.md's TODO).
    if spec.mtp_layers > 0 && (plan.pp > 1 || plan.cp > 1) {
        return Some(format!(
            "--mtp-layers {} with --pp {} and --cp {}: torchtitan's DeepSeek-V3 MTP raises \"MTP does not support pipeline parallelism yet\" and \"... context parallelism yet\" (torchtitan/models/deepseek_v3/mtp.py at {TORCHTITAN_COMMIT}); use --pp 1 --cp 1, or drop --mtp-layers",
            spec.mtp_layers, plan.pp, plan.cp
        ));
    }
    // The plan check holds torchtitan's expert layout (`TrainingFramework::runs_expert_tp`: whole
    // experts on the EP ranks with ep > 1, split over TP like a dense MLP with ep 1); said again
    // here for a plan that reached the emitter some other way.
    if !crate::training::TrainingFramework::Torchtitan.runs_expert_tp(plan.etp, plan.ep, plan.tp) {
        return Some(format!(
            "--etp {} with --ep {} and --tp {}: torchtitan keeps routed experts whole on its EP ranks when ep > 1 and splits them over the TP ranks when ep is 1 (torchtitan/models/common/moe_sharding.py at {TORCHTITAN_COMMIT}); evaluate the plan with --framework torchtitan",
            plan.etp, plan.ep, plan.tp
        ));
    }
    if let Some(why) = capacity_factor_unsupported(training) {
        return Some(why);
    }
    let deepep = MoeSpec::comm_backend(training, plan) == "deepep";
    // quantization/utils.py `swap_token_dispatcher`: "MoE quantization requires a token
    // dispatcher that supports padding (TorchAOTokenDispatcher or HybridEPTokenDispatcher)".
    if deepep && plan.precision == Precision::Mxfp8 {
        return Some(
            "--precision mxfp8 with --moe-dispatcher deepep: torchtitan's MXFP8GroupedExpertsConverter needs a dispatcher that pads (TorchAOTokenDispatcher or HybridEP) and raises on DeepEP (torchtitan/components/quantization/utils.py swap_token_dispatcher); use --moe-dispatcher alltoall, or --precision bf16".into(),
        );
    }
    // Under EP the MoE layer shards the micro-batch's tokens over cp x tp (moe_sharding.py: the
    // router and experts take `dense_sequence_parallel_placement`, "the caller must provide a
    // TP-divisible token count", MoE.forward in moe.py), and DeepEP sizes its buffer from that
    // share (token_dispatcher.py `update_ep_token_dispatcher_config` raises where it does not
    // divide).
    let shards = u64::from(plan.cp) * u64::from(plan.tp);
    let tokens = u64::from(plan.micro_batch) * u64::from(training.seq_len);
    if plan.ep > 1 && !tokens.is_multiple_of(shards) {
        return Some(format!(
            "--micro-batch {} x --seq-len {} tokens is not a multiple of cp x tp = {shards}, over which torchtitan's expert-parallel MoE layers shard each micro-batch's tokens (torchtitan/models/common/moe_sharding.py; token_dispatcher.py update_ep_token_dispatcher_config); give a --seq-len that is",
            plan.micro_batch, training.seq_len
        ));
    }
    if training.seq_len > spec.max_context {
        return Some(format!(
            "--seq-len {} is longer than torchtitan's {} flavor {} builds its RoPE for ({} tokens; decoder.py raises \"Training sequence length ... exceeds attention RoPE maximum\"); use --seq-len {} or less",
            training.seq_len,
            spec.module.package(),
            spec.flavor,
            spec.max_context,
            spec.max_context
        ));
    }
    None
}

/// `debug.moe_force_load_balance`: torchtitan's round-robin routing
/// (`TokenChoiceTopKRouter._debug_force_load_balance_routing`, moe.py: expert ids
/// `arange(T * K).reshape(T, K) % E`, NeMo AutoModel's `FakeBalancedGate`, tpsim's
/// `--moe-routing round-robin`) when tpsim priced that; the trained router otherwise.
pub(super) fn force_load_balance(training: &Training) -> bool {
    training.moe_dispatch.routing == MoeRouting::RoundRobin
}

fn py_float(value: f64) -> String {
    format!("{value:?}")
}

/// Lines before the recipe function that register an explicit Qwen3 MoE flavor (empty for a
/// shipped flavor): `_30b_a3b`'s build (torchtitan/models/qwen3/__init__.py) with this model's
/// shape, added to `qwen3_configs` so `model_registry` builds it with qwen3's parallelize and
/// pipelining functions.
pub(super) fn flavor_registration(model: &Model, training: &Training, spec: &MoeSpec) -> String {
    if !spec.explicit {
        return String::new();
    }
    let Some(moe) = model.moe.as_ref() else {
        return String::new();
    };
    let theta = py_float(model.rotary_base.unwrap_or(10000.0));
    let mut py = String::new();
    py.push_str(&format!(
        "def _tpsim_flavor(\n    attn_backend: str,\n    moe_comm_backend: str = \"standard\",\n) -> qwen3.Qwen3Model.Config:\n    # qwen3's _30b_a3b build (torchtitan/models/qwen3/__init__.py) with {}'s shape.\n",
        model.name
    ));
    py.push_str(&format!(
        "    return qwen3.Qwen3Model.Config(\n        vocab_size={vocab},\n        dim={dim},\n        norm=qwen3._qwen3_norm({dim}),\n        enable_weight_tying={tied},\n        tok_embeddings=Embedding.Config(\n            num_embeddings={vocab},\n            embedding_dim={dim},\n            param_init=qwen3._EMBEDDING_INIT,\n        ),\n        lm_head=Linear.Config(\n            in_features={dim},\n            out_features={vocab},\n            param_init=qwen3._LINEAR_INIT,\n        ),\n",
        vocab = model.vocab,
        dim = model.hidden,
        tied = if model.tied_embeddings { "True" } else { "False" },
    ));
    py.push_str(&format!(
        "        layers=qwen3._build_qwen3_moe_layers(\n            fuse_qkv=True,\n            n_layers={},\n            dim={},\n            n_heads={},\n            n_kv_heads={},\n            head_dim={},\n            moe_hidden_dim={},\n            num_experts={},\n            top_k={},\n            attn_backend=attn_backend,\n            rope=CosSinRoPE.Config(\n                dim={},\n                max_context_length={},\n                theta={theta},\n            ),\n            moe_comm_backend=moe_comm_backend,\n        ),\n    )\n\n\nqwen3.qwen3_configs[{}] = _tpsim_flavor\n\n\n",
        model.layers,
        model.hidden,
        model.heads,
        model.kv_heads,
        model.head_dim,
        moe.ffn_hidden,
        moe.experts,
        moe.router_topk,
        model.head_dim,
        training.seq_len,
        py_str(&spec.flavor)
    ));
    py
}

/// The imports the MoE recipe needs beyond the shared ones (sorted into them by the caller).
pub(super) fn imports(spec: &MoeSpec, plan: &ParallelPlan) -> Vec<String> {
    let package = spec.module.package();
    let mut out = vec![
        format!("from torchtitan.models.{package} import model_registry"),
        format!(
            "from torchtitan.models.{package}.config_registry import {}",
            spec.base_recipe
        ),
    ];
    if spec.explicit {
        out.push("import torchtitan.models.qwen3 as qwen3".into());
        out.push("from torchtitan.models.common import CosSinRoPE, Embedding, Linear".into());
    }
    if spec.rope_theta_override.is_some() {
        out.push("import dataclasses".into());
    }
    if spec.mtp_layers > 0 {
        out.push("from torchtitan.models.deepseek_v3.mtp import MTPLoss".into());
    }
    if plan.precision == Precision::Mxfp8 {
        out.push(
            "from torchtitan.components.quantization import MXFP8GroupedExpertsConverter".into(),
        );
    }
    out
}

/// The `model_registry(...)` call: flavor, dispatcher and, under MXFP8, the converters of
/// deepseek_v3's MXFP8 recipe (`deepseek_v3_debugmodel_mxfp8`, config_registry.py): the dense
/// linears (attention, shared experts, dense feed-forwards) and the experts' grouped GEMMs
/// (`MXFP8GroupedExpertsConverter`, pad_multiple 128 as sm_100's CuTeDSL kernel requires), the
/// router gate and the output layer kept in bf16.
pub(super) fn model_spec_call(
    spec: &MoeSpec,
    training: &Training,
    plan: &ParallelPlan,
    compiled: bool,
) -> String {
    let py_bool = |b: bool| if b { "True" } else { "False" };
    let mut args = vec![
        py_str(&spec.flavor),
        format!(
            "moe_comm_backend=\"{}\"",
            MoeSpec::comm_backend(training, plan)
        ),
    ];
    // gpt_oss's default backend, said: varlen_attn takes its windows and returns the LSE its
    // sinks need (torchtitan/models/gpt_oss/__init__.py `model_registry`).
    if spec.module == Module::GptOss {
        args.push("attn_backend=\"varlen\"".into());
    }
    // gpt_oss has no shared experts or dense feed-forwards: its attention's linears only.
    let linear_fqns = match spec.module {
        Module::GptOss => "[\"attention\"]",
        Module::Qwen3 | Module::DeepseekV3 => {
            "[\"attention\", \"shared_experts\", \"feed_forward\"]"
        }
    };
    if spec.mtp_layers > 0 {
        args.push(format!("num_mtp_layers={}", spec.mtp_layers));
    }
    if plan.precision == Precision::Mxfp8 {
        args.push(format!(
            "converters=[\n            MXFP8LinearConverter.Config(\n                fqns={linear_fqns},\n                model_compile_enabled={c},\n            ),\n            MXFP8GroupedExpertsConverter.Config(\n                pad_multiple=128,\n                model_compile_enabled={c},\n            ),\n        ]",
            c = py_bool(compiled)
        ));
    }
    let mut py = String::from("    config.model_spec = model_registry(\n");
    for arg in args {
        py.push_str(&format!("        {arg},\n"));
    }
    py.push_str("    )\n");
    if let Some(theta) = spec.rope_theta_override {
        py.push_str(&format!(
            "    # RoPE base {theta} (the model's), where the {flavor} flavor builds another.\n    for layer in config.model_spec.model.layers:\n        layer.attention.rope = dataclasses.replace(\n            layer.attention.rope, theta={py_theta}\n        )\n",
            theta = crate::emit::rotary_base_words(theta),
            flavor = spec.flavor,
            py_theta = py_float(theta)
        ));
    }
    py
}

/// What the user must know beside an MoE recipe (stderr notes, without the prefix).
pub(super) fn notes(model: &Model, training: &Training, spec: &MoeSpec) -> Vec<String> {
    let mut out = Vec::new();
    let package = spec.module.package();
    if spec.explicit {
        out.push(format!(
            "{} is no {package} flavor torchtitan ships: the recipe registers it in qwen3_configs as \"{}\", built as the 30B-A3B flavor is (qwen3's private _build_qwen3_moe_layers, _qwen3_norm and inits, torchtitan/models/qwen3/__init__.py at {TORCHTITAN_COMMIT}); data, optimizer and checkpointing come from the {} recipe: set hf_assets_path to a tokenizer of {} tokens",
            model.name, spec.flavor, spec.base_recipe, model.vocab
        ));
    } else if spec.own_recipe {
        out.push(format!(
            "{} is torchtitan's {package} flavor {}; data, tokenizer (hf_assets_path), optimizer, LR schedule and checkpointing come from its {} recipe (torchtitan/models/{package}/config_registry.py): set yours there or in the recipe",
            model.name, spec.flavor, spec.base_recipe
        ));
    } else {
        out.push(format!(
            "{} is torchtitan's {package} flavor {}, which ships no recipe; data, optimizer and checkpointing come from the {} recipe (torchtitan/models/{package}/config_registry.py): set hf_assets_path to {}'s tokenizer and weights",
            model.name, spec.flavor, spec.base_recipe, spec.flavor
        ));
    }
    if force_load_balance(training) {
        out.push(
            "debug.moe_force_load_balance is on, as tpsim priced --moe-routing round-robin: every token goes to experts t*k ... t*k+k-1 (mod experts), torchtitan's debugging router, not a trained one".into(),
        );
    } else {
        out.push(
            "tpsim prices every expert at the balanced load; torchtitan's trained router balances it with its auxiliary-loss-free expert bias (load_balance_coeff 1e-3, MoE.Config in torchtitan/models/common/moe.py), in expectation only; config.debug.moe_force_load_balance = True routes round-robin, exactly balanced (price it with --moe-routing round-robin)".into(),
        );
    }
    out
}

/// A capacity factor, which no torchtitan dispatcher tpsim writes drops tokens by, whatever the
/// plan: `plan --emit torchtitan` refuses it before the search (`torchtitan::run_unsupported`),
/// rather than finding that none of the plans that fit can run.
pub(super) fn capacity_factor_unsupported(training: &Training) -> Option<String> {
    training.moe_capacity_factor.is_some().then(|| {
        "--moe-capacity-factor drops tokens, but torchtitan's all-to-all and DeepEP dispatchers are dropless (a capacity factor is HybridEP's non_blocking_capacity_factor only, torchtitan/models/common/config_utils.py make_token_dispatcher_config); drop --moe-capacity-factor, or use --emit megatron".into()
    })
}
