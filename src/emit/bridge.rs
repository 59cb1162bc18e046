//! Megatron-Bridge out: `ConfigContainer` overrides for `scripts/training/run_recipe.py`, the
//! configuration NVIDIA's current stack launches (issue 13 item 6).

use super::{MegatronSplit, megatron_precision_args};
use crate::model::Model;
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{GradDtype, OptimizerStates, RecomputeModule, RecomputeModules, Training};

/// Megatron-Bridge `ConfigContainer` overrides (`KEY=VALUE`, one a line) for
/// `scripts/training/run_recipe.py` on top of a recipe of the same model. Names from
/// NVIDIA-NeMo/Megatron-Bridge `src/megatron/bridge/training/config.py` (`ConfigContainer.model`,
/// `.train`, `.ddp`, `.optimizer`, `.mixed_precision`) and the Megatron-Core `TransformerConfig`
/// fields `cfg.model` carries (`scripts/translate_mlm_to_bridge.py` maps the Megatron-LM flags to
/// them).
pub fn bridge_overrides(model: &Model, training: &Training, plan: &ParallelPlan) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut set = |key: &str, value: String| lines.push(format!("{key}={value}"));
    set("model.num_layers", model.layers.to_string());
    for (key, value) in bridge_hybrid_overrides(model, plan) {
        set(key, value);
    }
    set("model.hidden_size", model.hidden.to_string());
    set("model.ffn_hidden_size", model.ffn_hidden.to_string());
    set("model.num_attention_heads", model.heads.to_string());
    set("model.num_query_groups", model.kv_heads.to_string());
    // Megatron-Core `TransformerConfig.kv_channels` (Megatron-Bridge maps HF `head_dim` to it):
    // written out, since a recipe whose provider leaves it None gets hidden_size //
    // num_attention_heads at `finalize()` (transformer_config.py `__post_init__`), another width
    // where the model's heads are not hidden / heads wide.
    set("model.kv_channels", model.head_dim.to_string());
    // run_recipe.py: "The selected dataset owns the sequence length"; the runner copies it to
    // model.seq_length, which is written too so both agree.
    set("dataset.seq_length", training.seq_len.to_string());
    set("model.seq_length", training.seq_len.to_string());
    let dropout = if model.dropout { "0.1" } else { "0.0" };
    set("model.hidden_dropout", dropout.into());
    set("model.attention_dropout", dropout.into());
    for (key, value) in bridge_expert_overrides(
        model,
        plan,
        training.moe_capacity_factor,
        training.moe_dispatch,
    ) {
        set(key, value);
    }
    set("model.tensor_model_parallel_size", plan.tp.to_string());
    set("model.context_parallel_size", plan.cp.to_string());
    // Megatron-Core's TransformerConfig.cp_comm_type (None runs p2p), written where CP runs.
    if plan.cp > 1
        && let Some(kind) = training.cp_exchange.megatron_cp_comm_type()
    {
        set("model.cp_comm_type", kind.to_string());
    }
    set("model.pipeline_model_parallel_size", plan.pp.to_string());
    set(
        "model.virtual_pipeline_model_parallel_size",
        if plan.vpp > 1 {
            plan.vpp.to_string()
        } else {
            "null".into()
        },
    );
    let (embedding, loss, first, last) = match MegatronSplit::of(model, plan) {
        MegatronSplit::EmbeddingAndLossCounted => (true, true, None, None),
        MegatronSplit::FirstLast { first, last } => (false, false, Some(first), Some(last)),
        MegatronSplit::Even
        | MegatronSplit::Layout { .. }
        | MegatronSplit::PatternSegments { .. }
        | MegatronSplit::Inexpressible { .. } => (false, false, None, None),
    };
    set(
        "model.account_for_embedding_in_pipeline_split",
        embedding.to_string(),
    );
    set("model.account_for_loss_in_pipeline_split", loss.to_string());
    let or_null = |v: Option<u32>| v.map_or("null".to_string(), |v| v.to_string());
    set("model.num_layers_in_first_pipeline_stage", or_null(first));
    set("model.num_layers_in_last_pipeline_stage", or_null(last));
    // Recipes that build a pipeline layout (DeepSeek-V3's) get tpsim's own: null where the split
    // arguments above say it, the filled-chunk layout otherwise.
    set(
        "model.pipeline_model_parallel_layout",
        match MegatronSplit::of(model, plan) {
            MegatronSplit::Layout { layout } => format!("'{layout}'"),
            _ => "null".to_string(),
        },
    );
    set(
        "model.sequence_parallel",
        plan.sequence_parallel.to_string(),
    );
    let (granularity, method, layers) = match plan.recompute {
        Recompute::None => ("null", "null", "null"),
        Recompute::Selective => ("selective", "null", "null"),
        Recompute::Full if plan.recompute_num_layers > 0 => ("full", "block", ""),
        Recompute::Full => ("full", "uniform", "1"),
    };
    set("model.recompute_granularity", granularity.into());
    // `TransformerConfig.recompute_modules`, a list, written under selective granularity even when
    // it is Megatron-Core's default (core_attn; `None` here, as Megatron-Core runs it): the
    // overrides apply on top of a recipe, and an absent key leaves the recipe's own modules (e.g.
    // DeepSeek-V3's) in force. Under full or no recompute a recipe's leftover list does nothing:
    // Megatron-Core checks and reads recompute_modules only when `recompute_granularity ==
    // "selective"` (transformer_config.py `__post_init__`; attention.py `checkpoint_core_attention`,
    // transformer_layer.py), so nothing is written.
    if plan.recompute == Recompute::Selective {
        let modules = training
            .recompute_modules
            .unwrap_or(RecomputeModules::of(&[RecomputeModule::CoreAttn]));
        let names: Vec<&str> = modules.iter().map(|m| m.as_str()).collect();
        set("model.recompute_modules", format!("[{}]", names.join(",")));
    }
    set("model.recompute_method", method.into());
    set(
        "model.recompute_num_layers",
        if method == "block" {
            plan.recompute_num_layers.to_string()
        } else {
            layers.into()
        },
    );
    // TransformerConfig's layer-level CPU offloading, written either way so that a recipe's own
    // (Megatron-Bridge's Llama 3 70B GB200/GB300 recipes offload) does not stay in force unseen.
    let offload = training.cpu_offload_layers;
    set("model.cpu_offloading", (offload > 0).to_string());
    set("model.cpu_offloading_num_layers", offload.to_string());
    if offload > 0 {
        // Activations only, as NVIDIA's performance scripts set it beside the layer count
        // (Megatron-Bridge `scripts/performance/utils/overrides.py`): Megatron-Core's default was
        // `cpu_offloading_weights=True` until 2025-09, and Transformer Engine 1.x moved the
        // weights too, which tpsim does not price.
        set("model.cpu_offloading_weights", "false".into());
    }
    set("train.global_batch_size", plan.global_batch.to_string());
    set("train.micro_batch_size", plan.micro_batch.to_string());
    // config.py `_validate_and_sync_distributed_optimizer_settings` turns both on when either is
    // on, so ZeRO-0 must switch both off; Megatron-FSDP runs with it on
    // (`_validate_and_apply_megatron_fsdp_v1_configs`: "use_distributed_optimizer=True is required
    // for Megatron-FSDP").
    // Muon shards its states with the layer-wise optimizer, which `optimizer: dist_muon` selects
    // (training/optim.py: `layer_wise_distributed_optimizer="dist" in optimizer_config.optimizer`)
    // with Megatron-Core's distributed optimizer off, as Megatron-Bridge's Kimi K2 recipe sets it
    // ("Muon needs this to be False", recipes/kimi/kimi_k2.py:199-200 at v0.3.1..v0.5.0).
    let muon = training.optimizer_states == OptimizerStates::Muon;
    let distributed = (plan.zero >= 1 && !muon).to_string();
    set("ddp.use_distributed_optimizer", distributed.clone());
    set("optimizer.use_distributed_optimizer", distributed);
    if muon {
        let name = if plan.zero >= 1 { "dist_muon" } else { "muon" };
        set("optimizer.optimizer", name.to_string());
        // What tpsim prices (`cost::muon`): Megatron-Core's default, where Megatron-Bridge's
        // `distributed_muon_with_cosine_annealing` writes blockwise.
        set("optimizer.muon_tp_mode", "duplicated".to_string());
    }
    // ZeRO-2 and ZeRO-3 are Megatron-FSDP with its sharding strategy, as NVIDIA's FSDP recipes
    // write them (perf_recipes/llama/gb200/llama3.py, deepseek/common.py): the model built on the
    // meta device so that no GPU materializes every weight first, and the `fsdp_dtensor`
    // checkpoint format the FSDP path requires (config.py: "Megatron-FSDP requires the
    // fsdp_dtensor checkpointing format!"). Written off below ZeRO-2, in both the `dist` and
    // `ddp` configs (config.py turns Megatron-FSDP on when either says so), so that a recipe's
    // own FSDP does not stay in force unseen.
    let fsdp = plan.zero >= 2;
    set("dist.use_megatron_fsdp", fsdp.to_string());
    set("ddp.use_megatron_fsdp", fsdp.to_string());
    if fsdp {
        set(
            "ddp.data_parallel_sharding_strategy",
            super::sharding_strategy(plan.zero).into(),
        );
        set("model.init_model_with_meta_device", "true".into());
        set("checkpoint.ckpt_format", "fsdp_dtensor".into());
    }
    // Copies of the sharded states (Megatron-Core's `DistributedDataParallelConfig`).
    if plan.zero >= 1 && plan.dp_replicas > 1 {
        set(
            "ddp.num_distributed_optimizer_instances",
            plan.dp_replicas.to_string(),
        );
    }
    // `MixedPrecisionConfig.setup` copies its own grad_reduce_in_fp32 onto the DDP config, so the
    // mixed-precision value must say the same (perf_recipes/_common.py sets both).
    let fp32_grads = (training.grad_dtype == GradDtype::Fp32).to_string();
    set("mixed_precision.grad_reduce_in_fp32", fp32_grads.clone());
    set("ddp.grad_reduce_in_fp32", fp32_grads);
    // The providers turn it on wherever the fused kernel is installed; said only when off.
    if super::runs_unfused_in_megatron(training, plan) {
        set("model.gradient_accumulation_fusion", "false".to_string());
    }
    // Written out either way for rotary models: the benchmark recipes turn it on
    // (perf_recipes/_common.py), some providers off (deepseek_v3_bridge.py).
    if model.position_embedding.is_rotary() {
        // GPTModelProvider.rotary_percent (default 1.0; model_bridge.py maps HF
        // partial_rotary_factor onto it).
        set(
            "model.rotary_percent",
            model.rotary_percent.unwrap_or(1.0).to_string(),
        );
        set("model.apply_rope_fusion", training.rope_fusion.to_string());
        // GPTModelProvider.rotary_base (`int = 10000`, gpt_provider.py): written either way, so a
        // recipe of another model (or a provider's own default) does not set the frequencies.
        set(
            "model.rotary_base",
            super::rotary_base_words(
                model
                    .rotary_base
                    .unwrap_or(crate::model::DEFAULT_ROTARY_BASE),
            ),
        );
    }
    // Megatron-Core's precision-aware optimizer (OptimizerConfig): on for the two formats that
    // keep the master as remainders, and written off otherwise because some recipes (DeepSeek-V3)
    // turn it on. Dtype fields take a string that `omegaconf_utils.apply_overrides` turns back
    // into a torch dtype.
    let precision_aware = training.optimizer_states.keeps_remainders();
    set(
        "optimizer.use_precision_aware_optimizer",
        precision_aware.to_string(),
    );
    if precision_aware {
        let moments = if training.optimizer_states == OptimizerStates::Bf16Moments {
            "torch.bfloat16"
        } else {
            "torch.float32"
        };
        set("optimizer.main_params_dtype", "torch.float32".to_string());
        set("optimizer.exp_avg_dtype", moments.to_string());
        set("optimizer.exp_avg_sq_dtype", moments.to_string());
    }
    // MixedPrecisionConfig fields (src/megatron/bridge/training/mixed_precision.py), written one by
    // one rather than as a recipe name: bf16_with_fp8_current_scaling_mixed also keeps the first and
    // last layer in bf16 (`first_last_layers_bf16=True`), which is written as the plan keeps them
    // (`training::Bf16Layers`; off unless asked).
    let (format, recipe) = megatron_precision_args(plan.precision, training.fp8_scaling);
    let or_null = |v: Option<(&str, &str)>| v.map_or("null".to_string(), |(_, v)| v.to_string());
    let fp4 = plan.precision == Precision::Nvfp4;
    let gather = plan.precision != Precision::Bf16 && training.fp8_param_gather;
    set(
        "mixed_precision.fp8",
        if fp4 { "null".into() } else { or_null(format) },
    );
    if !fp4 && let Some((_, r)) = recipe {
        set("mixed_precision.fp8_recipe", r.into());
    }
    set(
        "mixed_precision.fp8_param_gather",
        (gather && !fp4).to_string(),
    );
    let bf16_layers = training.bf16_layers;
    let keeps_bf16 = !bf16_layers.is_none() && plan.precision != Precision::Bf16;
    set(
        "mixed_precision.first_last_layers_bf16",
        keeps_bf16.to_string(),
    );
    if keeps_bf16 {
        set(
            "mixed_precision.num_layers_at_start_in_bf16",
            bf16_layers.at_start.to_string(),
        );
        set(
            "mixed_precision.num_layers_at_end_in_bf16",
            bf16_layers.at_end.to_string(),
        );
    }
    set(
        "mixed_precision.fp4",
        if fp4 { or_null(format) } else { "null".into() },
    );
    if fp4 && let Some((_, r)) = recipe {
        set("mixed_precision.fp4_recipe", r.into());
    }
    set(
        "mixed_precision.fp4_param_gather",
        (gather && fp4).to_string(),
    );
    // Overlap: Megatron-Core's DistributedDataParallelConfig for the data-parallel side, Bridge's
    // CommOverlapConfig (comm_overlap.py) for TP and p2p, which it only turns on where Megatron-Core
    // allows (tp > 1 with sequence parallelism, interleaved pipelines).
    let overlap = &training.overlap;
    let tp_overlap = overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel;
    set("comm_overlap.tp_comm_overlap", tp_overlap.to_string());
    // p2p overlap exists only in the interleaved schedule (as the NeMo writer and the cost model read it).
    set(
        "comm_overlap.overlap_p2p_comm",
        (overlap.p2p && plan.vpp > 1).to_string(),
    );
    let moe_overlap = super::moe_alltoall_overlap(model, training, plan);
    set(
        "comm_overlap.overlap_moe_expert_parallel_comm",
        moe_overlap.to_string(),
    );
    // Only where the plan was priced with it (`Training::delay_wgrad_compute`; `emit::megatron`).
    set(
        "comm_overlap.delay_wgrad_compute",
        (moe_overlap && training.delay_wgrad_compute).to_string(),
    );
    set("ddp.overlap_grad_reduce", overlap.grad_reduce.to_string());
    set(
        "ddp.overlap_param_gather",
        (overlap.param_gather && plan.zero >= 1).to_string(),
    );
    lines.join("\n")
}

/// The MoE and MLA fields of Megatron-Core's `TransformerConfig` / `MLATransformerConfig` that
/// `cfg.model` carries (Megatron-Bridge recipes set the same names, e.g. `cfg.model.
/// expert_model_parallel_size`, `cfg.model.moe_token_dispatcher_type = "alltoall"`), for `model`
/// under `plan` with the expert capacity factor the plan was evaluated with (`None`: dropless);
/// nothing for a dense model with multi-head attention.
fn bridge_expert_overrides(
    model: &Model,
    plan: &ParallelPlan,
    capacity_factor: Option<f64>,
    dispatch: crate::training::MoeDispatch,
) -> Vec<(&'static str, String)> {
    let dispatcher = dispatch.dispatcher;
    let mut out = Vec::new();
    // MTP depths as estimated; with MLA written out even when 0, because Megatron-Bridge's
    // DeepSeek providers take `num_nextn_predict_layers` (1) from the HF config by default.
    if model.mtp_layers > 0 || model.mla.is_some() {
        out.push((
            "model.mtp_num_layers",
            if model.mtp_layers > 0 {
                model.mtp_layers.to_string()
            } else {
                "null".to_string()
            },
        ));
    }
    // Megatron-Core `TransformerConfig.window_size` (keys before, after) and
    // `window_attn_skip_freq`, as Megatron-Bridge's GPT-OSS provider sets them.
    // Written out either way: Megatron-Bridge's GPT-OSS provider sets a window by default.
    let (window_size, skip_freq) = match model.attention_window {
        Some(w) => (
            format!("[{},0]", w.tokens.saturating_sub(1)),
            if w.full_every > 0 {
                w.full_every.to_string()
            } else {
                "null".to_string()
            },
        ),
        None => ("null".to_string(), "null".to_string()),
    };
    out.push(("model.window_size", window_size));
    out.push(("model.window_attn_skip_freq", skip_freq));
    if let Some(mla) = &model.mla {
        out.push(("model.multi_latent_attention", "true".to_string()));
        out.push((
            "model.q_lora_rank",
            mla.q_lora_rank
                .map_or("null".to_string(), |q| q.to_string()),
        ));
        out.push(("model.kv_lora_rank", mla.kv_lora_rank.to_string()));
        out.push(("model.qk_head_dim", mla.qk_head_dim.to_string()));
        out.push((
            "model.qk_pos_emb_head_dim",
            mla.qk_pos_emb_head_dim.to_string(),
        ));
        out.push(("model.v_head_dim", mla.v_head_dim.to_string()));
    }
    let Some(moe) = &model.moe else {
        return out;
    };
    out.push(("model.num_moe_experts", moe.experts.to_string()));
    out.push(("model.moe_router_topk", moe.router_topk.to_string()));
    // Megatron-Core `activation_func_clamp_value`, written out either way: Megatron-Bridge's
    // GPT-OSS provider sets 7.0 itself (gpt_oss_bridge.py), which a model without the clamp
    // must not inherit.
    out.push((
        "model.activation_func_clamp_value",
        moe.glu_clamp_limit
            .map_or("null".to_string(), |limit| limit.arg()),
    ));
    // Group-limited routing (Megatron-Core `moe_router_num_groups` / `moe_router_group_topk`,
    // None without it), written out either way: the DeepSeek providers set 8 / 4 themselves.
    let (groups, group_topk) = if moe.router_groups > 0 {
        (
            moe.router_groups.to_string(),
            moe.router_group_topk.to_string(),
        )
    } else {
        ("null".to_string(), "null".to_string())
    };
    out.push(("model.moe_router_num_groups", groups));
    out.push(("model.moe_router_group_topk", group_topk));
    out.push(("model.moe_ffn_hidden_size", moe.ffn_hidden.to_string()));
    // LatentMoE's width (`moe_latent_size`, None without it), written out either way: the
    // Nemotron-H bridge copies it from the HF config (nemotron_h_bridge.py).
    out.push((
        "model.moe_latent_size",
        moe.latent_size
            .map_or("null".to_string(), |latent| latent.to_string()),
    ));
    out.push((
        "model.moe_shared_expert_intermediate_size",
        if moe.shared_expert_ffn_hidden > 0 {
            moe.shared_expert_ffn_hidden.to_string()
        } else {
            "null".to_string()
        },
    ));
    out.push((
        "model.moe_shared_expert_gate",
        moe.shared_expert_gate.to_string(),
    ));
    // One entry per layer (Megatron-Core's list form of moe_layer_freq), explicit so that no
    // override parser has to evaluate an expression.
    let pattern: Vec<&str> = (0..model.layers)
        .map(|i| {
            let moe_layer = i >= moe.first_dense_layers
                && (i - moe.first_dense_layers).is_multiple_of(moe.layer_freq.max(1));
            if moe_layer { "1" } else { "0" }
        })
        .collect();
    // A hybrid stack's MoE blocks are its pattern's 'E's (the hybrid stack builds each symbol's
    // block), so the default is written for it rather than a per-layer list it does not read.
    let freq = if model.is_hybrid() {
        "1".to_string()
    } else {
        format!("[{}]", pattern.join(","))
    };
    out.push(("model.moe_layer_freq", freq));
    out.push(("model.moe_grouped_gemm", "true".to_string()));
    // Recipes pick DeepEP/HybridEP (`moe_flex_dispatcher_backend`), which
    // `apply_flex_dispatcher_backend` turns into the flex dispatcher; tpsim models the plain
    // all-to-all or DeepEP (the flex dispatcher with the deepep backend), without shared-expert
    // overlap; dropless routing unless a capacity factor was
    // planned (Megatron-Core `TransformerConfig.moe_expert_capacity_factor`, None: dropless), with
    // the tokens over capacity dropped and no padding to capacity (the default
    // `moe_pad_expert_input_to_capacity` False, written out), as tpsim models it.
    let (dispatcher_type, backend) = match dispatcher.written_for(plan.ep) {
        crate::training::MoeDispatcher::Alltoall => ("alltoall", "null"),
        crate::training::MoeDispatcher::Deepep => ("flex", "deepep"),
    };
    out.push((
        "model.moe_token_dispatcher_type",
        dispatcher_type.to_string(),
    ));
    out.push(("model.moe_flex_dispatcher_backend", backend.to_string()));
    out.push((
        "model.moe_expert_capacity_factor",
        capacity_factor.map_or("null".to_string(), |c| c.to_string()),
    ));
    out.push((
        "model.moe_pad_expert_input_to_capacity",
        "false".to_string(),
    ));
    out.push(("model.moe_shared_expert_overlap", "false".to_string()));
    // Low-precision expert GEMMs with each expert's rows padded to their alignment in the routing
    // map before the dispatch, when the plan was evaluated so (`MoeDispatch::router_padding`,
    // `cost::moe::padded_copies_factor`); otherwise the experts pad after it.
    out.push((
        "model.moe_router_padding_for_fp8",
        (plan.precision != crate::plan::Precision::Bf16 && dispatch.router_padding).to_string(),
    ));
    out.push(("model.expert_model_parallel_size", plan.ep.to_string()));
    out.push(("model.expert_tensor_parallel_size", plan.etp.to_string()));
    out
}

/// A hybrid stack's `HybridModelProvider` fields (NVIDIA-NeMo/Megatron-Bridge
/// `src/megatron/bridge/models/hybrid/hybrid_provider.py` at 067f987df03b, and the Megatron-Core
/// `TransformerConfig` Mamba fields it inherits): the pattern as `hybrid_layer_pattern`, cut by '|'
/// into the plan's pipeline chunks, with the deprecated `hybrid_override_pattern` a Nemotron-H
/// provider built from its HF config carries set to null (`finalize` asserts that only one is
/// set); the MTP block as `mtp_hybrid_override_pattern` with its depths, which `finalize` appends
/// as '/' segments; the Mamba-2 mixer's shape. Written null where the model has no MTP, so that a
/// Nemotron 3 recipe's own depths do not stay in force unseen. Nothing for a transformer.
fn bridge_hybrid_overrides(model: &Model, plan: &ParallelPlan) -> Vec<(&'static str, String)> {
    let Some(hybrid) = &model.hybrid else {
        return Vec::new();
    };
    let main = super::hybrid_main_pattern(model, hybrid, plan);
    let mut out = vec![
        ("model.hybrid_override_pattern", "null".to_string()),
        ("model.hybrid_layer_pattern", format!("'{main}'")),
    ];
    if model.mtp_layers > 0 {
        // `bridge_expert_overrides` writes `model.mtp_num_layers`.
        out.push((
            "model.mtp_hybrid_override_pattern",
            format!("'{}'", super::hybrid_mtp_block(hybrid)),
        ));
    } else {
        out.push(("model.mtp_hybrid_override_pattern", "null".into()));
        out.push(("model.mtp_num_layers", "null".into()));
    }
    out.push((
        "model.mtp_use_repeated_layer",
        (model.mtp_layers > 0 && hybrid.mtp_shared_weights).to_string(),
    ));
    out.push(("model.mamba_num_heads", hybrid.mamba_heads.to_string()));
    out.push(("model.mamba_head_dim", hybrid.mamba_head_dim.to_string()));
    out.push(("model.mamba_state_dim", hybrid.mamba_state_dim.to_string()));
    out.push(("model.mamba_num_groups", hybrid.mamba_groups.to_string()));
    out
}
