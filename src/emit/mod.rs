//! Plans out, and Megatron-LM plans back in: the last stop of the data flow for users who launch
//! jobs. Writers for Megatron-LM arguments (`megatron/training/arguments.py` names), Megatron-Bridge
//! `ConfigContainer` overrides (`src/megatron/bridge/training/config.py`), a NeMo 1.x
//! `megatron_gpt_config.yaml` fragment and a DeepSpeed config JSON (DeepSpeed "Configuration JSON"
//! docs: `train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
//! data-parallel size`); the reader of Megatron arguments lives in [`megatron_reader`], so that a
//! written plan reads back to the same plan.

mod bridge;
mod deepspeed;
mod megatron_args;
mod megatron_moe;
mod megatron_precision;
mod megatron_reader;
mod megatron_refused;
mod megatron_words;
pub(crate) use megatron_words::edit_distance;
mod nemo;
mod pipeline_split;
mod torchtitan;
mod torchtitan_gpt_oss;
mod torchtitan_moe;
mod torchtitan_refusals;

pub use bridge::bridge_overrides;
pub use deepspeed::{deepspeed_json, megatron_deepspeed_args};
pub use nemo::nemo_yaml;
pub use torchtitan::{TORCHTITAN_COMMIT, notes as torchtitan_notes, torchtitan_recipe};

pub use megatron_args::window_size_keys_before;
pub use megatron_moe::{ExpertArgs, megatron_expert_args, moe_layer_freq_arg};
pub use megatron_reader::{
    FullRecompute, MegatronArgsError, MegatronLaunch, MegatronPrecision, PrecisionArgs,
    attention_backend, block_recompute_layers, check_full_recompute, check_split, megatron_overlap,
    megatron_precision, megatron_zero, read_megatron_args, vpp_from_layers_per_virtual_stage,
};
pub use pipeline_split::{ChunkLayout, MegatronSplit, SplitArgs};

use crate::model::{Model, Norm};
use crate::plan::{ParallelPlan, Precision, Recompute};
use crate::training::{AttentionKernel, GradDtype, OptimizerStates, Training, TrainingFramework};

/// A framework `--emit` can write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Megatron,
    MegatronBridge,
    Nemo,
    DeepSpeed,
    Torchtitan,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::Megatron => "Megatron-LM",
            Framework::MegatronBridge => "Megatron-Bridge",
            Framework::Nemo => "NeMo",
            Framework::DeepSpeed => "DeepSpeed",
            Framework::Torchtitan => "torchtitan",
        }
    }

    /// The framework tpsim models when it evaluates this configuration: the Megatron-LM line, the
    /// Megatron-Bridge overrides and the NeMo config all run on Megatron-Core (today's Megatron-LM
    /// flags such as `--attention-backend` and `--use-megatron-fsdp` exist only there, and
    /// `eval --megatron-args` reads a line back as megatron-core); the DeepSpeed config runs in
    /// DeepSpeed, the torchtitan recipe in torchtitan.
    pub fn runs_as(self) -> TrainingFramework {
        match self {
            Framework::Megatron | Framework::MegatronBridge | Framework::Nemo => {
                TrainingFramework::MegatronCore
            }
            Framework::DeepSpeed => TrainingFramework::Deepspeed,
            Framework::Torchtitan => TrainingFramework::Torchtitan,
        }
    }

    /// Why a configuration for this framework cannot carry a plan evaluated as `evaluated` runs it,
    /// or `None` when it can. The framework decides more than the configuration writes (attention
    /// kernel efficiency, FP8 parameter gather, when FSDP reduces under pipelines, the loss's
    /// logit copies, what selective recompute repeats; see `TrainingFramework`), so the time and
    /// memory printed beside the configuration are only those of the framework that runs it
    /// (issue 8 item 4: `--emit` stays consistent with `--framework`).
    pub fn framework_mismatch(self, evaluated: TrainingFramework) -> Option<String> {
        let runs_as = self.runs_as();
        (evaluated != runs_as).then(|| {
            format!(
                "the {} configuration runs on {} (--framework {}), but the plan is evaluated as {} runs it (--framework {}), and tpsim's time and memory differ between the two; use --framework {}",
                self.name(),
                match runs_as {
                    TrainingFramework::Deepspeed => "DeepSpeed",
                    TrainingFramework::Torchtitan => "torchtitan",
                    _ => "Megatron-Core",
                },
                runs_as.as_str(),
                evaluated.as_str(),
                evaluated.as_str(),
                runs_as.as_str()
            )
        })
    }

    /// Why this framework's configuration cannot describe `model` whatever the plan (experts,
    /// latent attention, multi-token prediction or a sliding window outside the Megatron-LM and
    /// Megatron-Bridge writers; a model other than Llama 3 in torchtitan's recipe), or `None`: an
    /// input error, not a plan that does not fit. Said before the framework the plan was evaluated
    /// for (`framework_mismatch`), whose fix would otherwise lead to this refusal.
    pub fn model_unsupported(self, model: &Model) -> Option<String> {
        let name = self.name();
        if let Some(hybrid) = &model.hybrid {
            // Megatron-LM's line (`pretrain_hybrid.py`, `megatron_args`) has flags for the
            // pattern and the mixer's shape, Megatron-Bridge's `HybridModelProvider` fields
            // (`bridge_hybrid_overrides`); the other configurations have none.
            if !matches!(self, Framework::Megatron | Framework::MegatronBridge) {
                return Some(format!(
                    "hybrid Mamba-Transformer models (pattern {:?}) are not written for {name} yet; use --emit megatron, whose pretrain_hybrid.py line carries the pattern and the Mamba-2 shape, or --emit megatron-bridge",
                    hybrid.pattern
                ));
            }
            // `MambaMixer` takes `d_conv` 4 from its constructor; no argument sets another.
            if hybrid.mamba_conv_kernel != 4 {
                return Some(format!(
                    "a Mamba-2 convolution {} wide is not written for {name}: Megatron-Core's MambaMixer builds d_conv 4 and no argument sets another; give a convolution 4 wide (hybrid.mamba_conv_kernel in a model file, \"conv_kernel\" or \"mamba_d_conv\" in a Hugging Face config) or run without --emit",
                    hybrid.mamba_conv_kernel
                ));
            }
        }
        if matches!(self, Framework::Megatron | Framework::MegatronBridge) {
            return None;
        }
        // The torchtitan recipe writes its MoE models (and DeepSeek-V3's MLA with them) itself:
        // `torchtitan_moe::model_unsupported` says which.
        let torchtitan_moe = self == Framework::Torchtitan && model.moe.is_some();
        if model.moe.is_some() && !torchtitan_moe {
            return Some(format!(
                "mixture-of-experts models are not written for {name} yet; use --framework megatron-core with --emit megatron or --emit megatron-bridge"
            ));
        }
        if model.mla.is_some() && !torchtitan_moe {
            return Some(format!(
                "multi-latent attention is not written for {name} yet; use --framework megatron-core with --emit megatron or --emit megatron-bridge"
            ));
        }
        // torchtitan builds DeepSeek-V3's MTP (`model_registry(..., num_mtp_layers=N)` with its
        // `MTPLoss`, torchtitan/models/deepseek_v3/MTP.md), which its MoE recipe writes
        // (`torchtitan_moe`), and GPT-OSS's windows (torchtitan/models/gpt_oss,
        // `torchtitan_gpt_oss`).
        if model.mtp_layers > 0 && !torchtitan_moe {
            return Some(format!(
                "multi-token prediction (--mtp-layers {}) is not written for {name} yet; use --framework megatron-core with --emit megatron or --emit megatron-bridge",
                model.mtp_layers
            ));
        }
        // A window that changes nothing (as wide as the sequence, or no layer windowed) is full
        // attention, which these configurations write; the plan says so in a note.
        if let Some(window) = model.effective_attention_window()
            && !(torchtitan_moe && torchtitan_gpt_oss::is_gpt_oss(model))
        {
            return Some(format!(
                "sliding-window attention (--attention-window {}) is not written for {name} yet; use --framework megatron-core with --emit megatron or --emit megatron-bridge",
                window.tokens
            ));
        }
        // The torchtitan recipe writes torchtitan's Llama 3 model and its MoE flavors only: a
        // block of another shape (LayerNorm, biases, a two-matrix MLP) is no plan's to change
        // either.
        if self == Framework::Torchtitan {
            return torchtitan::model_unsupported(model);
        }
        None
    }

    /// Why this framework's configuration can write no plan of `model` with `training` in
    /// `precision`, whatever the degrees (the torchtitan recipe's model, precision, gradient and
    /// optimizer rules), or `None`: `plan --emit` says it before the search.
    pub fn run_unsupported(
        self,
        model: &Model,
        training: &Training,
        precision: Precision,
    ) -> Option<String> {
        match self {
            Framework::Torchtitan => torchtitan::run_unsupported(model, training, precision),
            _ => None,
        }
    }

    /// Why this framework's configuration cannot keep the optimizer states `training` plans with
    /// whatever the plan (NeMo 1.x's optimizers keep fp32 master weights and moments), or `None`.
    pub fn optimizer_states_unsupported(self, training: &Training) -> Option<String> {
        (self == Framework::Nemo && training.optimizer_states != OptimizerStates::Fp32).then(|| {
            format!(
                "optimizer states {} are not written for NeMo 1.x yet (its optimizers keep fp32 master weights and moments); use --emit megatron or --emit megatron-bridge, or --optimizer-states fp32",
                training.optimizer_states.as_str()
            )
        })
    }

    /// What the configuration cannot carry of `training`'s routing imbalance (`--moe-imbalance`),
    /// or `None` when routing is balanced: a tpsim planning assumption about the busiest expert's
    /// load, not a framework setting. Megatron-LM has no argument for it (arguments.py
    /// `_add_moe_args` says how the router balances the load, `--moe-router-load-balancing-type`,
    /// `--moe-aux-loss-coeff`, `--moe-router-force-load-balancing`, never an imbalance to expect),
    /// nor has Megatron-Bridge's `TransformerConfig`, so the written configuration, evaluated
    /// again, is balanced unless `--moe-imbalance` is given with it. The value is the one the
    /// plan was evaluated with (already capped at the capacity factor, which the configuration
    /// carries).
    pub fn unsaid_moe_imbalance(self, training: &Training) -> Option<String> {
        let imbalance = training.moe_imbalance;
        (imbalance != 1.0).then(|| {
            let value = crate::units::show_number(imbalance);
            let capped = if training.moe_capacity_factor == Some(imbalance) {
                ", capped at the capacity factor"
            } else {
                ""
            };
            let again = match self {
                Framework::Megatron => format!(
                    "re-evaluate the line with `tpsim eval --megatron-args \"<line>\" --moe-imbalance {value}`"
                ),
                _ => format!("evaluate this plan again with --moe-imbalance {value}"),
            };
            format!(
                "tpsim's step time and memory for this plan assume --moe-imbalance {value} (the busiest expert gets {value} x the balanced load{capped}), a tpsim planning assumption that the {name} configuration cannot carry ({name} has no routing-imbalance setting: the load is whatever its router produces); {again}",
                name = self.name()
            )
        })
    }

    /// The overlaps `training` asks for that a Megatron-LM line leaves off because this plan has
    /// nothing for them, or `None`: Megatron-LM refuses `--tp-comm-overlap` without tensor and
    /// sequence parallelism, `--overlap-param-gather` without a sharded optimizer, and the MoE
    /// all-to-all overlap where transformer_config.py does (`cost::moe::alltoall_overlap_refusal`).
    /// The line read back says them off; the plan uses none of them, so its step time is the same.
    pub fn unsaid_overlap(
        self,
        model: &Model,
        training: &Training,
        plan: &ParallelPlan,
    ) -> Option<String> {
        if self != Framework::Megatron {
            return None;
        }
        let overlap = &training.overlap;
        let mut left_off = Vec::new();
        if overlap.tp_comm && !(plan.tp > 1 && plan.sequence_parallel) {
            left_off.push(format!(
                "--tp-comm-overlap (Megatron-LM needs tensor parallelism with --sequence-parallel; this plan has tp {}, sequence parallel {})",
                plan.tp,
                if plan.sequence_parallel { "on" } else { "off" }
            ));
        }
        if overlap.param_gather && plan.zero == 0 {
            left_off.push(
                "--overlap-param-gather (Megatron-LM needs --use-distributed-optimizer; this plan is ZeRO-0)"
                    .into(),
            );
        }
        if overlap.moe_a2a && model.moe.is_some() && !moe_alltoall_overlap(model, training, plan) {
            left_off.push(
                "--overlap-moe-expert-parallel-comm (Megatron-Core refuses it on this plan)".into(),
            );
        }
        (!left_off.is_empty()).then(|| {
            format!(
                "the line below leaves off {}: this plan has nothing for {}, so `tpsim eval --megatron-args` reads {} back as off with the same step time",
                left_off.join(" and "),
                if left_off.len() == 1 { "it" } else { "them" },
                if left_off.len() == 1 { "it" } else { "them" }
            )
        })
    }

    /// What a Megatron-LM line cannot carry of `model`'s block, or `None`: attention and MLP
    /// reading one shared input norm (Falcon-7B's parallel block, `shared_layer_norm`) has no
    /// Megatron-LM argument (arguments.py and Megatron-Core's `TransformerConfig` have none;
    /// `TransformerLayer` runs the MLP after the attention's residual, behind its own
    /// `pre_mlp_layernorm`), so the line, read back, prices one more norm per layer.
    pub fn unsaid_model(self, model: &Model) -> Option<String> {
        if self == Framework::MegatronBridge && model.is_hybrid() {
            return Some(format!(
                "apply these overrides to a Nemotron-H or Nemotron 3 recipe (recipes/nemotronh/): its HybridModelProvider builds the stack, with no position embedding and {}; a pipeline's stages are the '|' segments of model.hybrid_layer_pattern, which Megatron-Core reads from core_v0.17.0 on",
                if model.gated_mlp {
                    "its MLP activation (the model's MLPs are gated: set model.gated_linear_unit=true and the activation in the recipe)"
                } else {
                    "squared-ReLU MLPs (activation_func, a callable no override sets)"
                }
            ));
        }
        if self == Framework::Megatron && model.is_hybrid() {
            return Some(format!(
                "run the line below with pretrain_hybrid.py, Megatron-LM's entry point for hybrid stacks (pretrain_mamba.py before it); it gives the pattern{} with --hybrid-layer-pattern, cut by '|' into the plan's pipeline chunks (stages and virtual stages; Megatron-Core reads them from core_v0.17.0 on), from which Megatron-LM takes the layer count, and {}",
                if model.mtp_layers > 0 {
                    " and its MTP depths ('/' segments, each an attention and an MLP block of the last layer's kind)"
                } else {
                    ""
                },
                if model.gated_mlp {
                    "the gated MLPs as --swiglu"
                } else {
                    "the MLPs' activation as squared ReLU (--squared-relu, Nemotron-H's; tpsim prices every two-matrix MLP alike, so give another activation if the model has one)"
                }
            ));
        }
        (self == Framework::Megatron && model.shared_layer_norm).then(|| {
            let per_layer = model.layer_norm_params();
            format!(
                "the model's attention and MLP share one input norm (Falcon-7B's parallel block), which Megatron-LM has no argument for (Megatron-Core's TransformerLayer gives the MLP its own norm after the attention's residual); the line below, read back, prices a separate norm for each: {} more parameters ({} layers x {}) than this plan",
                crate::sweep::thousands(f64::from(model.layers) * per_layer),
                model.layers,
                crate::sweep::thousands(per_layer)
            )
        })
    }

    /// What a Megatron-LM line leaves out of a model whose experts clamp their GLU as GPT-OSS's
    /// do, or `None`: Megatron-Bridge's GPT-OSS provider (gpt_oss_bridge.py `provider_bridge`)
    /// also sets `activation_func = quick_gelu` with `glu_linear_offset = 1.0` (transformers'
    /// `(up + 1) * gate * sigmoid(1.702 * gate)`), `softmax_type = "learnable"` (the attention
    /// sinks) and `position_embedding_type = "yarn"` (factor 32 over 4096 positions). tpsim's
    /// model carries none of them (a gated MLP is `--swiglu`, positions are rope), so the line
    /// cannot write them; said rather than dropped. Megatron-Bridge's recipe sets them itself.
    /// With context parallelism other than a2a the sinks cannot be added
    /// (`gpt_oss_sinks_refuse`), which the note says.
    pub fn unsaid_gpt_oss_details(
        self,
        model: &Model,
        training: &Training,
        plan: &ParallelPlan,
    ) -> Option<String> {
        let limit = model.moe.and_then(|moe| moe.glu_clamp_limit)?;
        (self == Framework::Megatron).then(|| {
            format!(
                "the model clamps its experts' GLU as GPT-OSS does (--activation-func-clamp-value {}), and the line below leaves out GPT-OSS's other architecture details, which tpsim's model does not carry: its quick-GELU gate with a +1 on the linear half (--quick-geglu --glu-linear-offset 1.0 in place of --swiglu), its learnable attention sinks (--softmax-type learnable) and its YaRN rope (--position-embedding-type yarn, factor 32 over 4096 positions), as Megatron-Bridge's GPT-OSS provider sets them; add them to train GPT-OSS itself (tpsim prices the plan without them){}",
                limit.arg(),
                if plan.cp > 1 && gpt_oss_sinks_refuse(model, training.cp_exchange) {
                    format!(
                        "; but not --softmax-type learnable beside --context-parallel-size {} with this exchange ({}): Transformer Engine runs learnable sinks under context parallelism only with --cp-comm-type a2a (attn_forward_func_with_cp), so plan with --cp-exchange head-all-to-all to add them",
                        plan.cp,
                        training.cp_exchange.as_str()
                    )
                } else {
                    String::new()
                }
            )
        })
    }

    /// What a Megatron-LM line says of the model's positions that Megatron-LM itself runs
    /// otherwise, or `None`: BLOOM's `alibi` is BigScience's Megatron-DeepSpeed value, which
    /// Megatron-LM's arguments refuse; a rotary variant (yarn, mrope) that the plan runs fused
    /// runs unfused under Megatron-LM's arguments (`PositionEmbedding::megatron_lm_fuses_rope`),
    /// where Megatron-Bridge's `model.apply_rope_fusion` keeps it fused.
    pub fn unsaid_positions(self, model: &Model, training: &Training) -> Option<String> {
        if self != Framework::Megatron {
            return None;
        }
        let kind = model.position_embedding;
        if kind == crate::model::PositionEmbedding::Alibi {
            return Some("the line below says --position-embedding-type alibi, BigScience's Megatron-DeepSpeed value (BLOOM's); Megatron-LM's own arguments take learned_absolute, rope, yarn, mrope or none and refuse it".to_string());
        }
        (training.rope_fusion && !TrainingFramework::MegatronCore.fuses_rope_by_default(kind)).then(|| {
            format!(
                "tpsim priced this plan with fused RoPE, but Megatron-LM's arguments run --position-embedding-type {} unfused (arguments.py turns apply_rope_fusion off for every type but rope), so the line below runs slower than priced; --emit megatron-bridge keeps it fused (model.apply_rope_fusion=true)",
                kind.as_str()
            )
        })
    }

    /// Why this framework's configuration cannot route tokens as `training` plans: NeMo AutoModel's
    /// round-robin benchmark gate (`--moe-routing round-robin`) has no Megatron-LM counterpart
    /// (its forced balancing, `--moe-router-force-load-balancing`, draws random logits).
    /// torchtitan runs that gate as `debug.moe_force_load_balance` (`torchtitan_moe`).
    pub fn moe_routing_unsupported(self, training: &Training) -> Option<String> {
        let routing = training.moe_dispatch.routing;
        let torchtitan_round_robin =
            self == Framework::Torchtitan && routing == crate::training::MoeRouting::RoundRobin;
        (routing != crate::training::MoeRouting::Random && !torchtitan_round_robin).then(|| {
            format!(
                "--moe-routing {} is NeMo AutoModel's benchmark gate, which only the torchtitan recipe writes (debug.moe_force_load_balance; Megatron-LM's forced balancing routes at random); use --moe-routing random, or --framework torchtitan with --emit torchtitan",
                training.moe_dispatch.routing.as_str()
            )
        })
    }

    /// Why the configuration cannot keep the sharded states in `replicas` copies (None where it
    /// can, or where there is one copy): `unsupported` for a plan, and `plan`'s refusal of a pinned
    /// `--dp-replicas` before a search whose every plan would be refused.
    pub fn dp_replicas_unsupported(self, replicas: u32) -> Option<String> {
        match self {
            // NeMo 1.x's megatron_gpt_config.yaml has no key for Megatron-Core's distributed
            // optimizer instances that tpsim can vouch for.
            Framework::Nemo if replicas > 1 => Some(format!(
                "{replicas} copies of the sharded states (--dp-replicas) have no NeMo 1.x model-config setting tpsim can vouch for; use --emit megatron (--num-distributed-optimizer-instances) or --emit megatron-bridge (ddp.num_distributed_optimizer_instances)"
            )),
            // DeepSpeed shards in groups only through MiCS (`mics_shard_size`), which tpsim does not
            // model; the search does not propose such plans under --framework deepspeed.
            Framework::DeepSpeed if replicas > 1 => Some(format!(
                "{replicas} copies of the sharded states (--dp-replicas) would be DeepSpeed's MiCS (mics_shard_size), which tpsim does not model; use --dp-replicas 1"
            )),
            _ => None,
        }
    }

    /// Why this framework's configuration cannot carry `training`'s activation offloading
    /// (`--cpu-offload-layers`, Megatron-Core's): every plan alike, so `plan --emit` says it
    /// before the search (it was exit 1, "none of the plans that fit can run").
    pub fn cpu_offload_unsupported(self, training: &Training) -> Option<String> {
        let megatron_family = matches!(self, Framework::Megatron | Framework::MegatronBridge);
        (training.cpu_offload_layers > 0 && !megatron_family).then(|| {
            format!(
                "activation offloading (--cpu-offload-layers {}) is Megatron-Core's, not written for {}; use --emit megatron or --emit megatron-bridge, or drop --cpu-offload-layers",
                training.cpu_offload_layers,
                self.name()
            )
        })
    }

    /// Why this framework cannot run `plan` of `model` with `training` as tpsim models it, or
    /// `None` when it can: first what no plan of the run can be written with (offloading, the
    /// model), then a plan evaluated for another framework, then what the configuration cannot
    /// express.
    pub fn unsupported(
        self,
        model: &Model,
        training: &Training,
        plan: &ParallelPlan,
    ) -> Option<String> {
        // Offloading is Megatron-Core's whatever the framework evaluated: said first, as the
        // mismatch's fix (`--framework deepspeed`) would refuse it in turn; so is a model the
        // configuration cannot describe (`--emit torchtitan` on a hybrid stack was told to use
        // `--framework torchtitan`, under which the recipe refuses the stack).
        if let Some(why) = self.cpu_offload_unsupported(training) {
            return Some(why);
        }
        if let Some(why) = self.model_unsupported(model) {
            return Some(why);
        }
        if let Some(why) = self.framework_mismatch(training.framework) {
            return Some(why);
        }
        let megatron_family = matches!(self, Framework::Megatron | Framework::MegatronBridge);
        let megatron_like = megatron_family || self == Framework::Nemo;
        let low_precision = plan.precision != Precision::Bf16;
        let param_gather = low_precision && training.fp8_param_gather;
        let tp_overlap = training.overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel;
        // Megatron-Bridge's `HybridModelProvider.provide` asserts no virtual stages ("Virtual
        // pipeline model parallelism is temporarily unsupported in Hybrid models",
        // hybrid_provider.py at 067f987df03b), where Megatron-LM takes them from the pattern.
        if self == Framework::MegatronBridge && model.is_hybrid() && plan.vpp > 1 {
            return Some(format!(
                "--vpp {} with the hybrid Mamba-Transformer model {}: Megatron-Bridge's HybridModelProvider refuses virtual pipeline stages (\"temporarily unsupported in Hybrid models\", hybrid_provider.py); use --emit megatron, whose pattern's '|' segments carry them, or --vpp 1",
                plan.vpp, model.name
            ));
        }
        // Only the Megatron-LM, Megatron-Bridge and torchtitan writers carry experts and latent
        // attention so far; the others would write a dense model with a different parameter
        // count (torchtitan's expert rules: `torchtitan_moe`).
        let writes_experts = megatron_family || self == Framework::Torchtitan;
        if !writes_experts && (model.moe.is_some() || plan.ep > 1 || plan.etp > 1) {
            return Some(format!(
                "mixture-of-experts models and expert parallelism (--ep {} --etp {}) are not written for {} yet; use --framework megatron-core with --emit megatron or --emit megatron-bridge",
                plan.ep,
                plan.etp,
                self.name()
            ));
        }
        match self {
            // A precision NeMo 1.x cannot write fails every plan of the search alike, so it is
            // said before what a plan's ZeRO stage or schedule could change.
            // NeMo 1.x's megatron_gpt_config.yaml has `fp8`/`fp8_hybrid`/`fp8_params` (per-tensor
            // delayed scaling) and no MXFP8 or NVFP4 recipe.
            // ... and its FP8 is delayed scaling (Transformer Engine's DelayedScaling with the
            // config's amax history): current scaling has no NeMo 1.x setting.
            Framework::Nemo if plan.precision == Precision::Fp8 && !training.bf16_layers.is_none() => {
                Some(
                    "--first-last-layers-bf16 under FP8 has no NeMo 1.x setting: its fp8 is delayed scaling, with which Megatron-Core refuses layers in bf16 (transformer_config.py); use --emit megatron-bridge or --emit megatron, or drop --first-last-layers-bf16"
                        .into(),
                )
            }
            Framework::Nemo
                if plan.precision == Precision::Fp8
                    && training.fp8_scaling == crate::training::Fp8Scaling::Current =>
            {
                Some(
                    "FP8 current scaling has no NeMo 1.x setting (its fp8 is delayed scaling); use --fp8-scaling delayed, or --emit megatron-bridge or --emit megatron"
                        .into(),
                )
            }
            Framework::Nemo if matches!(plan.precision, Precision::Mxfp8 | Precision::Nvfp4) => {
                Some(format!(
                    "--precision {} has no NeMo 1.x setting (its config has per-tensor FP8 only); use --emit megatron-bridge or --emit megatron",
                    plan.precision.as_str()
                ))
            }
            // Megatron-FSDP releases the gathered parameters after each module's forward and
            // gathers them again for its backward (megatron_fsdp.py `_post_forward`): FSDP2's
            // reshard_after_forward=True, always.
            // Megatron-LM keeps them only through torch FSDP2, written by `--emit megatron` where
            // it runs (pp 1, ep 1, untied embeddings); Megatron-Bridge and NeMo write
            // Megatron-FSDP or nothing at ZeRO-3.
            _ if megatron_like
                && plan.zero == 3
                && !plan.reshard_after_forward
                && (self != Framework::Megatron
                    || !crate::training::TrainingFramework::MegatronCore.keeps_gathered_parameters(
                        plan.pp,
                        plan.ep,
                        model.tied_embeddings,
                        // Copies are refused by the arm below, in their own words.
                        1,
                    )) =>
            {
                Some(format!(
                    "ZeRO-3 keeping the gathered parameters from forward to backward (reshard_after_forward false) has no {} setting here: Megatron-FSDP releases them after every forward, and torch FSDP2's --torch-fsdp2-no-reshard-after-forward (written by --emit megatron) runs only with pp 1, ep 1 and untied embeddings; use --reshard-after-forward true",
                    self.name()
                ))
            }
            // ... and torch FSDP2 shards over the whole data-parallel group whatever
            // --num-distributed-optimizer-instances says (torch_fully_sharded_data_parallel.py
            // builds its mesh from the whole dp-cp group; `megatron_reader` reads the line back as
            // one copy): the line would run another plan than the one priced.
            Framework::Megatron
                if plan.zero == 3 && !plan.reshard_after_forward && plan.dp_replicas > 1 =>
            {
                Some(format!(
                    "ZeRO-3 keeping the gathered parameters from forward to backward (reshard_after_forward false) with {} copies of the sharded states (--dp-replicas) has no Megatron-LM setting: it is torch FSDP2 (--torch-fsdp2-no-reshard-after-forward), which shards over the whole data-parallel group and ignores --num-distributed-optimizer-instances; use --dp-replicas 1, or --reshard-after-forward true (Megatron-FSDP keeps the copies)",
                    plan.dp_replicas
                ))
            }
            // arguments.py: '--fp8-param-gather only supported with distributed optimizer, torch
            // fsdp2, megatron fsdp, or inference mode'.
            _ if megatron_like && param_gather && plan.zero == 0 => Some(format!(
                "{} FP8/FP4 training with the parameter all-gather in low precision ({} models --fp8-param-gather) needs the distributed optimizer, which ZeRO-0 lacks; use --zero 1 or more",
                self.name(),
                training.framework.as_str()
            )),
            // arguments.py: "When interleaved schedule is used and p2p communication overlap is
            // disabled, pipeline-model-parallel size should be greater than 2".
            _ if megatron_like && plan.vpp > 1 && !training.overlap.p2p && plan.pp <= 2 => Some(
                "the interleaved schedule without p2p overlap needs --pp 3 or more in Megatron-LM; use --overlap-p2p-comm or another pp".into(),
            ),
            // arguments.py: 'Must use --overlap-param-gather with --overlap-grad-reduce'.
            _ if megatron_like
                && plan.zero >= 1
                && training.overlap.param_gather
                && !training.overlap.grad_reduce =>
            {
                Some(format!(
                    "{} overlaps the parameter all-gather only together with the gradient reduction; use --overlap-grad-reduce or --overlap-param-gather false",
                    self.name()
                ))
            }
            // NeMo 1.x: `mcore_distributed_optim` is Megatron-Core's distributed optimizer (ZeRO-1),
            // `distributed_fused_adam` Apex's DistributedFusedAdam, which shards gradients too (ZeRO-2).
            Framework::Nemo if plan.zero > 2 => Some(format!(
                "ZeRO-{} has no NeMo 1.x optimizer (mcore_distributed_optim is ZeRO-1, distributed_fused_adam ZeRO-2); use --zero 0, 1 or 2",
                plan.zero
            )),
            // NeMo 1.x reads `optim.overlap_grad_sync` for its distributed optimizers only; at
            // ZeRO-0 (`fused_adam`, `megatron_amp_O2: True` in megatron_gpt_config.yaml) the
            // gradients are all-reduced during the backward only with pp 1, no sequence
            // parallelism and no gradient_accumulation_fusion (megatron_base_model.py
            // `configure_optimizers`: `async_grad_allreduce`), else after it
            // (megatron_gpt_model.py `training_step`: `allreduce_main_grads`; NVIDIA/NeMo 8cfedd7203).
            Framework::Nemo
                if plan.zero == 0
                    && training.overlap.grad_reduce
                    && plan.dp * plan.cp > 1
                    && (plan.pp > 1
                        || plan.sequence_parallel
                        || !runs_unfused_in_megatron(training, plan)) =>
            {
                Some(
                    "--overlap-grad-reduce true with ZeRO-0 does not run in NeMo 1.x: its fused_adam path reads no overlap_grad_sync and all-reduces the gradients after the backward under pipeline or sequence parallelism or gradient_accumulation_fusion (megatron_base_model.py configure_optimizers, async_grad_allreduce); use --overlap-grad-reduce false, or --zero 1".into(),
                )
            }
            _ if self.optimizer_states_unsupported(training).is_some() => {
                self.optimizer_states_unsupported(training)
            }
            _ if model.moe.is_some() && self.moe_routing_unsupported(training).is_some() => {
                self.moe_routing_unsupported(training)
            }
            Framework::Nemo
                if plan.recompute == Recompute::Selective
                    && training
                        .recompute_modules
                        .is_some_and(|m| !m.is_core_attn_only()) =>
            {
                Some(format!(
                    "--recompute-modules {} has no NeMo 1.x setting (its selective recompute is the attention core); use --framework megatron-core with --emit megatron or --emit megatron-bridge",
                    training.recompute_modules.map(|m| m.megatron_words()).unwrap_or_default()
                ))
            }
            // Megatron-Bridge's GPT-OSS provider turns the attention sinks on itself
            // (gpt_oss_bridge.py: `softmax_type = "learnable"`), which Transformer Engine runs
            // under context parallelism only with a2a (`attn_forward_func_with_cp`: "Context
            // parallelism only supports softmax_type=... with cp_comm_type = 'a2a'"); its GPT-OSS
            // recipes set `cp_comm_type = "a2a"`.
            Framework::MegatronBridge
                if plan.cp > 1 && gpt_oss_sinks_refuse(model, training.cp_exchange) =>
            {
                Some(format!(
                    "--cp {} with --cp-exchange {} on a GPT-OSS model: Megatron-Bridge's GPT-OSS provider turns its learnable attention sinks on (softmax_type learnable), which Transformer Engine runs under context parallelism only with cp_comm_type a2a; use --cp-exchange head-all-to-all (as its GPT-OSS recipes do), or --cp 1",
                    plan.cp,
                    training.cp_exchange.as_str()
                ))
            }
            // NeMo 1.x's model config carries no context-parallel communication type tpsim can
            // vouch for, and its fragment would run the default p2p ring instead.
            Framework::Nemo
                if plan.cp > 1
                    && !matches!(training.cp_exchange, crate::training::CpExchange::KvRing) =>
            {
                Some(format!(
                    "--cp-exchange {} has no NeMo 1.x model-config setting tpsim can vouch for (the fragment would run Megatron-Core's p2p ring); use --emit megatron (--cp-comm-type) or --emit megatron-bridge (model.cp_comm_type)",
                    training.cp_exchange.as_str()
                ))
            }
            _ if self.dp_replicas_unsupported(plan.dp_replicas).is_some() => {
                self.dp_replicas_unsupported(plan.dp_replicas)
            }
            Framework::Nemo if !plan.stages.even => Some(
                "uneven pipeline stages are not expressible in a NeMo 1.x model config; use a pp that divides the layers".into(),
            ),
            Framework::Nemo if plan.stages.balanced_chunks(model.layers, plan.pp, plan.vpp) => {
                let per_stage = model.layers / plan.pp;
                Some(format!(
                    "--vpp {} on {per_stage} layers per stage makes model chunks of unequal size, which a NeMo 1.x model config cannot say (its virtual_pipeline_model_parallel_size splits each stage equally: Megatron-Core get_num_layers_to_build); use --emit megatron or --emit megatron-bridge (they write a --pipeline-model-parallel-layout), or a --vpp dividing {per_stage}",
                    plan.vpp
                ))
            }
            _ if megatron_family => match MegatronSplit::of(model, plan) {
                MegatronSplit::Inexpressible { why } => Some(why),
                _ => None,
            },
            // DeepSpeed's ZeRO-3 releases a module's gathered parameters after its forward and
            // gathers them again for its backward, unless they are reused within
            // `stage3_max_reuse_distance` parameters (DeepSpeed config docs, "ZeRO Optimizations";
            // deepspeed/runtime/zero/partitioned_param_coordinator.py `release_sub_module`): a
            // config of `stage: 3` does not keep them from forward to backward as the plan does.
            Framework::DeepSpeed if plan.zero == 3 && !plan.reshard_after_forward => Some(
                "ZeRO-3 keeping the gathered parameters from forward to backward (reshard_after_forward false) has no DeepSpeed config setting (DeepSpeed's ZeRO-3 releases them after each module's forward, keeping only those reused within stage3_max_reuse_distance parameters); use --reshard-after-forward true".into(),
            ),
            // A first/last split (given or searched) is a Megatron-LM argument; DeepSpeed's
            // pipeline engine partitions by its own method (`partition_method`).
            Framework::DeepSpeed if plan.stages.given => Some(format!(
                "the first/last stage split {}/{}/{} has no DeepSpeed config setting (its pipeline engine partitions layers itself); use --emit megatron, or a plan without it",
                plan.stages.first, plan.stages.middle_max, plan.stages.last
            )),
            // DeepSpeed's context parallelism is Ulysses, the all-to-all over heads
            // (`sequence_parallel_size`); the scenario refuses any other exchange under
            // --framework deepspeed, so this guards a plan evaluated elsewhere.
            Framework::DeepSpeed
                if plan.cp > 1
                    && training.cp_exchange != crate::training::CpExchange::HeadAllToAll =>
            {
                Some(format!(
                    "--cp {} with --cp-exchange {}: DeepSpeed's sequence parallelism is Ulysses, the all-to-all over heads; use --cp-exchange head-all-to-all, or --cp 1",
                    plan.cp,
                    training.cp_exchange.as_str()
                ))
            }
            // The DeepSpeed config has no FP8/FP4 training key (Transformer Engine is wired in by
            // the model code, not by ds_config).
            Framework::DeepSpeed if low_precision => Some(format!(
                "--precision {} is not a DeepSpeed config setting; use --precision bf16",
                plan.precision.as_str()
            )),
            // deepspeed/runtime/pipe/engine.py asserts the ZeRO stage is below 2 with pipelines,
            // and its schedule has no interleaving.
            Framework::DeepSpeed if plan.pp > 1 && plan.zero > 1 => Some(format!(
                "ZeRO-{} cannot run with pipeline parallelism in DeepSpeed (its pipeline engine allows ZeRO-0/1); use --zero 1 or --pp 1",
                plan.zero
            )),
            // Megatron-DeepSpeed hands a pipeline to DeepSpeed's PipelineModule, whose
            // `activation_checkpoint_interval` it sets from `--recompute-method uniform` alone
            // (megatron/model/gpt_model.py `GPTModelPipe.__init__`: "deepspeed's pipeline doesn't
            // support the block recompute method", interval 0 otherwise): recomputing some layers of
            // a stage and keeping the others' activations would run with no recompute at all.
            Framework::DeepSpeed
                if plan.pp > 1 && plan.recompute == Recompute::Full && plan.recompute_share() < 1.0 =>
            {
                Some(format!(
                    "full recompute of {} of each stage's {} layers has no Megatron-DeepSpeed setting with pipelines (its pipeline model checkpoints every layer with --recompute-method uniform and drops --recompute-method block, recomputing nothing); use --recompute full without --recompute-num-layers, or --pp 1",
                    plan.recompute_num_layers,
                    plan.layers_per_chunk()
                ))
            }
            Framework::DeepSpeed if plan.vpp > 1 => Some(
                "DeepSpeed's pipeline engine has no interleaved schedule; use --vpp 1".into(),
            ),
            Framework::DeepSpeed if tp_overlap => Some(
                "TP communication overlap (--tp-comm-overlap) does not exist in DeepSpeed / Megatron-DeepSpeed; use --tp-comm-overlap false".into(),
            ),
            // ZeRO-1/2 gather the updated parameters after the optimizer step, not under the next
            // forward (ZeRO-3 prefetches them, stage3_prefetch_bucket_size).
            Framework::DeepSpeed
                if (plan.zero == 1 || plan.zero == 2) && training.overlap.param_gather =>
            {
                Some(format!(
                    "ZeRO-{} in DeepSpeed gathers the updated parameters after the optimizer step, not under the next forward (--overlap-param-gather); use --overlap-param-gather false",
                    plan.zero
                ))
            }
            // DeepSpeed picks its optimizer wrapper from the model and gradient dtypes
            // (deepspeed/runtime/engine.py `_do_optimizer_sanity_check`, deepspeedai/DeepSpeed at
            // edaa7221): without ZeRO a bf16 model must accumulate bf16 gradients, and any other
            // mix raises NotImplementedError("unsupported mix of model_dtype ... and
            // grad_accum_dtype ...") at `deepspeed.initialize`.
            Framework::DeepSpeed if plan.zero == 0 && training.grad_dtype == GradDtype::Fp32 => {
                Some(
                    "--grad-dtype fp32 with ZeRO-0 is refused by DeepSpeed: without ZeRO a bf16 model takes only bf16 gradients (data_types.grad_accum_dtype fp32 raises \"unsupported mix of model_dtype and grad_accum_dtype\", engine.py _do_optimizer_sanity_check); use --grad-dtype bf16, or --zero 1".into(),
                )
            }
            Framework::Torchtitan => torchtitan::unsupported(model, training, plan),
            _ => None,
        }
    }
}

impl Framework {
    /// Why none of `plans` (fastest first) can run in this framework: every distinct reason, the
    /// fastest plan's first. The fastest plan's reason alone sent the reader to a fix (say
    /// `--zero 2`) under which the other plans still fail for another reason.
    pub fn why_none_can_run<'a>(
        self,
        model: &Model,
        training: &Training,
        plans: impl IntoIterator<Item = &'a ParallelPlan>,
    ) -> String {
        let mut reasons: Vec<String> = Vec::new();
        for plan in plans {
            let why = self.unsupported(model, training, plan).unwrap_or_default();
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        }
        match reasons.len() {
            0 | 1 => reasons.pop().unwrap_or_default(),
            n => format!(
                "each for one of these {n} reasons: {}",
                reasons.join("; and ")
            ),
        }
    }
}

/// Whether the plan runs without gradient-accumulation fusion as Megatron-Core runs it (the flag
/// given, or Megatron-FSDP, whose user guide requires it off: `fuses_wgrad_accumulation`), which
/// the Megatron line and Megatron-Bridge's overrides then say.
pub(super) fn runs_unfused_in_megatron(training: &Training, plan: &ParallelPlan) -> bool {
    !(training.gradient_accumulation_fusion
        && TrainingFramework::MegatronCore.fuses_wgrad_accumulation(plan.zero))
}

/// Megatron-FSDP's `--data-parallel-sharding-strategy` for a ZeRO stage (arguments.py choices:
/// no_shard, optim, optim_grads, optim_grads_params).
pub fn sharding_strategy(zero: u8) -> &'static str {
    match zero {
        0 => "no_shard",
        1 => "optim",
        2 => "optim_grads",
        _ => "optim_grads_params",
    }
}

/// Megatron-LM `pretrain_gpt.py` arguments for the plan, on one line (so `$(...)` pastes it).
/// Whether GPT-OSS's learnable attention sinks (which tpsim's model leaves out; a model that
/// clamps its experts' GLU is GPT-OSS's, as `Framework::unsaid_gpt_oss_details` reads it) cannot
/// run with this context-parallel exchange: Transformer Engine's `attn_forward_func_with_cp`
/// asserts `softmax_type == "vanilla" or cp_comm_type == "a2a"`.
fn gpt_oss_sinks_refuse(model: &Model, exchange: crate::training::CpExchange) -> bool {
    model.moe.is_some_and(|moe| moe.glu_clamp_limit.is_some())
        && exchange != crate::training::CpExchange::HeadAllToAll
}

/// A hybrid stack's `--hybrid-layer-pattern` value: the main pattern ([`hybrid_main_pattern`])
/// and, per MTP depth, a '/' segment of an attention block and one of the last layer's MLP kind
/// (`Model::check_hybrid` keeps MTP to stacks ending in one), unquoted.
pub(crate) fn hybrid_layer_pattern(
    model: &Model,
    hybrid: &crate::model::Hybrid,
    plan: &ParallelPlan,
) -> String {
    format!(
        "{}{}",
        hybrid_main_pattern(model, hybrid, plan),
        hybrid_mtp_segments(model, hybrid)
    )
}

/// A hybrid stack's main pattern, cut by '|' into the plan's model chunks where it has a pipeline
/// (`MegatronSplit::PatternSegments`): Megatron-Bridge's `hybrid_layer_pattern`, and what
/// `--megatron-args` checks a cut line against.
pub(crate) fn hybrid_main_pattern(
    model: &Model,
    hybrid: &crate::model::Hybrid,
    plan: &ParallelPlan,
) -> String {
    match MegatronSplit::of(model, plan) {
        MegatronSplit::PatternSegments { pattern } => pattern,
        _ => hybrid.pattern.clone(),
    }
}

/// The '/' MTP segments of a hybrid pattern: one `*` and the last layer's MLP kind per depth.
fn hybrid_mtp_segments(model: &Model, hybrid: &crate::model::Hybrid) -> String {
    format!("/{}", hybrid_mtp_block(hybrid)).repeat(model.mtp_layers as usize)
}

/// The block one MTP depth of a hybrid stack runs: an attention block and one of the last layer's
/// MLP kind (NVIDIA's "*E", Megatron-Bridge's `mtp_hybrid_override_pattern`).
pub(crate) fn hybrid_mtp_block(hybrid: &crate::model::Hybrid) -> String {
    let last = hybrid.pattern.chars().last().unwrap_or('-');
    format!("*{last}")
}

pub fn megatron_args(model: &Model, training: &Training, plan: &ParallelPlan) -> String {
    let mut args: Vec<String> = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        args.push(format!("--{flag}"));
        if let Some(v) = value {
            args.push(v);
        }
    };
    let n = |v: u32| Some(v.to_string());
    // A hybrid stack's layers are its pattern's symbols, from which Megatron-LM takes the count
    // (arguments.py); its MTP depths follow as '/' segments (`ParsedHybridPattern`), each the
    // block tpsim prices: an attention block and one of the last layer's MLP kind.
    match &model.hybrid {
        Some(hybrid) => push(
            "hybrid-layer-pattern",
            Some(format!("'{}'", hybrid_layer_pattern(model, hybrid, plan))),
        ),
        None => push("num-layers", n(model.layers)),
    }
    push("hidden-size", n(model.hidden));
    push("num-attention-heads", n(model.heads));
    if model.kv_heads != model.heads {
        push("group-query-attention", None);
        push("num-query-groups", n(model.kv_heads));
    }
    // arguments.py: `--kv-channels` defaults to hidden / heads; another head width (Qwen3) is
    // written out. MLA's query/key/value widths are its own arguments, but the model's head width
    // is written too (NeMo's DeepSeekV3Config sets kv_channels 128), so the line read back keeps
    // it rather than falling to hidden / heads.
    if model.heads > 0 && model.head_dim != model.hidden / model.heads {
        push("kv-channels", n(model.head_dim));
    }
    push("ffn-hidden-size", n(model.ffn_hidden));
    for (flag, value) in megatron_expert_args(
        model,
        plan,
        training.moe_capacity_factor,
        training.moe_dispatch,
    ) {
        push(flag, value);
    }
    if let Some(hybrid) = &model.hybrid {
        push("mamba-num-heads", n(hybrid.mamba_heads));
        push("mamba-head-dim", n(hybrid.mamba_head_dim));
        push("mamba-state-dim", n(hybrid.mamba_state_dim));
        push("mamba-num-groups", n(hybrid.mamba_groups));
        // Every depth runs one MTP block's weights (Megatron-Core `mtp_use_repeated_layer`).
        if model.mtp_layers > 0 && hybrid.mtp_shared_weights {
            push("mtp-use-repeated-layer", None);
        }
    } else if model.mtp_layers > 0 {
        push("mtp-num-layers", n(model.mtp_layers));
    }
    // Megatron-Core's window counts the keys before the query; tpsim's tokens include it.
    if let Some(window) = model.attention_window {
        push(
            "window-size",
            Some(format!("'({},0)'", window.tokens.saturating_sub(1))),
        );
        if window.full_every > 0 {
            push("window-attn-skip-freq", n(window.full_every));
        }
    }
    if model.gated_mlp {
        push("swiglu", None);
    } else if model.is_hybrid() {
        // Nemotron-H's MLPs (`unsaid_model` says so).
        push("squared-relu", None);
    }
    // Megatron-Core `activation_func_clamp_value` (a `TransformerConfig` field, so arguments.py's
    // generated `--activation-func-clamp-value`): the experts' clamped GLU, with its limit.
    if let Some(limit) = model.moe.and_then(|moe| moe.glu_clamp_limit) {
        push("activation-func-clamp-value", Some(limit.arg()));
    }
    if !model.linear_bias {
        push("disable-bias-linear", None);
        // arguments.py: `--add-qkv-bias` keeps the query/key/value biases when the other linear
        // layers have none (with biases everywhere they are there already).
        if model.qkv_bias {
            push("add-qkv-bias", None);
        }
    }
    if model.qk_norm {
        push("qk-layernorm", None);
    }
    if !model.tied_embeddings {
        push("untie-embeddings-and-output-weights", None);
    }
    if model.norm == Norm::Rmsnorm {
        push("normalization", Some("RMSNorm".into()));
    }
    // learned_absolute is Megatron-LM's default; alibi is BigScience's Megatron-DeepSpeed value
    // (BLOOM's), which Megatron-LM itself refuses rather than training another model.
    if !model.learned_position_embeddings() {
        push(
            "position-embedding-type",
            Some(model.position_embedding.as_str().into()),
        );
    }
    // Megatron-LM's default rotates the whole head.
    if let Some(share) = model.rotary_percent {
        push("rotary-percent", Some(share.to_string()));
    }
    // Megatron-LM's `--rotary-base` defaults to 10000 (arguments.py); Llama 3 trains at 500000.
    if let Some(base) = model.rotary_base {
        push("rotary-base", Some(rotary_base_words(base)));
    }
    if !model.dropout {
        push("hidden-dropout", Some("0".into()));
        push("attention-dropout", Some("0".into()));
    }
    push("vocab-size", n(model.vocab));
    push("seq-length", n(training.seq_len));
    push("max-position-embeddings", n(training.seq_len));
    push("tensor-model-parallel-size", n(plan.tp));
    if plan.cp > 1 {
        push("context-parallel-size", n(plan.cp));
        // Megatron-LM's default is p2p; the other exchanges are written as Transformer Engine
        // spells them (`CpExchange::megatron_cp_comm_type`).
        if let Some(kind) = training
            .cp_exchange
            .megatron_cp_comm_type()
            .filter(|kind| *kind != "p2p")
        {
            push("cp-comm-type", Some(kind.to_string()));
        }
    }
    push("pipeline-model-parallel-size", n(plan.pp));
    match MegatronSplit::of(model, plan) {
        MegatronSplit::Even => {}
        MegatronSplit::EmbeddingAndLossCounted => {
            push("account-for-embedding-in-pipeline-split", None);
            push("account-for-loss-in-pipeline-split", None);
        }
        MegatronSplit::FirstLast { first, last } => {
            push("decoder-first-pipeline-num-layers", n(first));
            push("decoder-last-pipeline-num-layers", n(last));
        }
        // The layout sets the virtual stages too (Megatron-LM arguments.py derives
        // `virtual_pipeline_model_parallel_size` from it and refuses the per-virtual-stage count).
        MegatronSplit::Layout { ref layout } => {
            push(
                "pipeline-model-parallel-layout",
                Some(format!("'{layout}'")),
            );
        }
        // `Framework::unsupported` keeps such plans from being written (`eval --emit` refuses them,
        // `plan --emit` takes the next plan).
        MegatronSplit::Inexpressible { .. } => {}
        // The pattern's '|' segments, written with the pattern above, set the stages and the
        // virtual stages (arguments.py derives `virtual_pipeline_model_parallel_size` from them).
        MegatronSplit::PatternSegments { .. } => {}
    }
    if plan.vpp > 1
        && !matches!(
            MegatronSplit::of(model, plan),
            MegatronSplit::Layout { .. } | MegatronSplit::PatternSegments { .. }
        )
    {
        push(
            "num-layers-per-virtual-pipeline-stage",
            n(MegatronSplit::layers_per_virtual_stage(model, plan)),
        );
    }
    push("micro-batch-size", n(plan.micro_batch));
    push("global-batch-size", n(plan.global_batch));
    if plan.sequence_parallel {
        push("sequence-parallel", None);
    }
    match plan.recompute {
        Recompute::None => {}
        Recompute::Selective => {
            push("recompute-granularity", Some("selective".into()));
            // nargs='*': the module names as separate words (Megatron-Core's default, core_attn,
            // needs none).
            if let Some(modules) = training
                .recompute_modules
                .filter(|m| !m.is_core_attn_only())
            {
                push("recompute-modules", Some(modules.megatron_words()));
            }
        }
        // Megatron-Core recompute.py: block recomputes the first N layers of each model chunk;
        // uniform with 1 recomputes every layer.
        Recompute::Full if plan.recompute_num_layers > 0 => {
            push("recompute-granularity", Some("full".into()));
            push("recompute-method", Some("block".into()));
            push("recompute-num-layers", n(plan.recompute_num_layers));
        }
        Recompute::Full => {
            push("recompute-granularity", Some("full".into()));
            push("recompute-method", Some("uniform".into()));
            push("recompute-num-layers", n(1));
        }
    }
    // Megatron-LM's arguments.py turns `cpu_offloading` on when N > 0.
    if training.cpu_offload_layers > 0 {
        push("cpu-offloading-num-layers", n(training.cpu_offload_layers));
    }
    match plan.zero {
        0 => {}
        1 => push("use-distributed-optimizer", None),
        // Megatron-FSDP v1 (the default --megatron-fsdp-version) turns the distributed
        // optimizer on itself; v2 refuses it next to --use-megatron-fsdp, so it is not written.
        // v1 runs with pipeline parallelism (arguments.py has no pipeline check for it); v2 would
        // refuse tp, pp and cp > 1 (mcore_fsdp_adapter.py), so the version is left at 1.
        // ZeRO-3 keeping the gathered parameters through the backward: torch FSDP2, which
        // Megatron-LM runs without pipeline or expert parallelism and with untied embeddings
        // (`TrainingFramework::keeps_gathered_parameters`; arguments.py asserts the rest:
        // gradient-accumulation fusion off, written below).
        3 if !plan.reshard_after_forward => {
            push("use-torch-fsdp2", None);
            push("torch-fsdp2-no-reshard-after-forward", None);
        }
        z => {
            push("use-megatron-fsdp", None);
            push(
                "data-parallel-sharding-strategy",
                Some(sharding_strategy(z).into()),
            );
            // arguments.py: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format."
            push("ckpt-format", Some("fsdp_dtensor".into()));
        }
    }
    // Copies of the sharded states: Megatron-Core's partial distributed optimizer (and
    // Megatron-FSDP's hybrid sharding), `--num-distributed-optimizer-instances`.
    if plan.zero >= 1 && plan.dp_replicas > 1 {
        push("num-distributed-optimizer-instances", n(plan.dp_replicas));
    }
    // Megatron-Core's precision-aware optimizer (arguments.py; the main params stay fp32, kept as
    // 16-bit remainders by default), with bf16 moments or at its default fp32 ones.
    if training.optimizer_states.keeps_remainders() {
        let moments = if training.optimizer_states == OptimizerStates::Bf16Moments {
            "bf16"
        } else {
            "fp32"
        };
        push("use-precision-aware-optimizer", None);
        push("main-params-dtype", Some("fp32".into()));
        push("exp-avg-dtype", Some(moments.into()));
        push("exp-avg-sq-dtype", Some(moments.into()));
    }
    // Muon (arguments.py: with --use-distributed-optimizer its layer-wise distributed optimizer).
    if training.optimizer_states == OptimizerStates::Muon {
        push("optimizer", Some("muon".into()));
    }
    // Megatron-Core's `--attention-backend` (AttnBackend: flash, fused, unfused, local, auto):
    // written out so that reading the line back models the same attention kernel.
    push(
        "attention-backend",
        Some(
            match training.attention {
                AttentionKernel::Flash => "flash",
                AttentionKernel::Unfused => "unfused",
            }
            .into(),
        ),
    );
    push("bf16", None);
    // With --bf16, Megatron-LM keeps fp32 main_grad buffers and reduces in fp32 unless
    // --grad-reduce-in-bf16 is given (arguments.py validate_args: `elif not
    // args.accumulate_allreduce_grads_in_fp32 and args.main_grads_dtype == torch.float32:
    // args.accumulate_allreduce_grads_in_fp32 = True`); the fp32 case is written out anyway so the
    // line says what it means.
    match training.grad_dtype {
        GradDtype::Bf16 => push("grad-reduce-in-bf16", None),
        GradDtype::Fp32 => push("accumulate-allreduce-grads-in-fp32", None),
    }
    if runs_unfused_in_megatron(training, plan) {
        push("no-gradient-accumulation-fusion", None);
    }
    // The rotary variants run unfused under Megatron-LM's arguments whatever the line says.
    if model.position_embedding.megatron_lm_fuses_rope() && !training.rope_fusion {
        push("no-rope-fusion", None);
    }
    // Transformer Engine recipes (Megatron-Core transformer_config.py `fp8`, `fp8_recipe`, `fp4`,
    // `fp4_recipe`): tpsim's fp8 is per-tensor scaling, current (`tensorwise`, as Megatron-Bridge's
    // bf16_with_fp8_current_scaling_mixed) or delayed (`delayed`) as --fp8-scaling says; mxfp8 and
    // nvfp4 as Megatron-Bridge's bf16_with_mxfp8_mixed (format e4m3) and bf16_with_nvfp4_mixed
    // write them.
    let (format, recipe) = megatron_precision_args(plan.precision, training.fp8_scaling);
    if let (Some((format_flag, format)), Some((recipe_flag, recipe))) = (format, recipe) {
        push(format_flag, Some(format.into()));
        push(recipe_flag, Some(recipe.into()));
        if training.fp8_param_gather {
            push(
                if plan.precision == Precision::Nvfp4 {
                    "fp4-param-gather"
                } else {
                    "fp8-param-gather"
                },
                None,
            );
        }
        // Layers kept in bf16 (`training::Bf16Layers`), both counts written (Megatron-Core's
        // defaults are 1 and 1).
        let bf16_layers = training.bf16_layers;
        if !bf16_layers.is_none() {
            push("first-last-layers-bf16", None);
            push(
                "num-layers-at-start-in-bf16",
                Some(bf16_layers.at_start.to_string()),
            );
            push(
                "num-layers-at-end-in-bf16",
                Some(bf16_layers.at_end.to_string()),
            );
        }
    }
    // Communication overlap (arguments.py: --overlap-grad-reduce, --overlap-param-gather and
    // --tp-comm-overlap are off unless given; p2p overlap is on unless
    // --no-overlap-p2p-communication). Megatron-LM refuses --tp-comm-overlap without sequence
    // parallelism and --overlap-param-gather without a sharded optimizer, so those are written only
    // where they apply.
    let overlap = &training.overlap;
    if overlap.tp_comm && plan.tp > 1 && plan.sequence_parallel {
        push("tp-comm-overlap", None);
    }
    if overlap.grad_reduce {
        push("overlap-grad-reduce", None);
    }
    if overlap.param_gather && plan.zero >= 1 {
        push("overlap-param-gather", None);
    }
    if !overlap.p2p {
        push("no-overlap-p2p-communication", None);
    }
    // transformer_config.py refuses the MoE all-to-all overlap without expert parallelism, with
    // full recompute, or with a pipeline but no virtual stages. Megatron-Bridge turns on
    // `delay_wgrad_compute` with it (`set_moe_a2a_overlap_overrides`), which changes what TP hides
    // (`cost::column_grad_collective_async`): written only where the plan was priced with it
    // (`Training::delay_wgrad_compute`), so the line runs what was priced.
    if moe_alltoall_overlap(model, training, plan) {
        push("overlap-moe-expert-parallel-comm", None);
        if training.delay_wgrad_compute {
            push("delay-wgrad-compute", None);
        }
    }
    args.join(" ")
}

/// Whether a written config turns on Megatron-Core's MoE all-to-all overlap: asked for, and
/// allowed on this plan (`cost::moe::alltoall_overlap_applies`).
pub(super) fn moe_alltoall_overlap(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
) -> bool {
    training.overlap.moe_a2a && crate::cost::moe::alltoall_overlap_applies(model, training, plan)
}

/// Megatron-LM's (`--fp8-format`|`--fp4-format`, `--fp8-recipe`|`--fp4-recipe`) for a precision;
/// `None` for bf16.
#[allow(clippy::type_complexity)]
pub(crate) fn megatron_precision_args(
    precision: Precision,
    fp8_scaling: crate::training::Fp8Scaling,
) -> (
    Option<(&'static str, &'static str)>,
    Option<(&'static str, &'static str)>,
) {
    match precision {
        Precision::Bf16 => (None, None),
        Precision::Fp8 => (
            Some(("fp8-format", "hybrid")),
            Some((
                "fp8-recipe",
                match fp8_scaling {
                    crate::training::Fp8Scaling::Current => "tensorwise",
                    crate::training::Fp8Scaling::Delayed => "delayed",
                },
            )),
        ),
        Precision::Mxfp8 => (Some(("fp8-format", "e4m3")), Some(("fp8-recipe", "mxfp8"))),
        Precision::Nvfp4 => (Some(("fp4-format", "e2m1")), Some(("fp4-recipe", "nvfp4"))),
    }
}

/// A model's rotary base as the frameworks' integer field takes it (`Model::check` keeps it a
/// whole number): 500000, not 500000.0 or 5e5, which Megatron-LM's `type=int` refuses.
pub(crate) fn rotary_base_words(base: f64) -> String {
    format!("{}", base as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::plan::{PlanRequest, Recompute};
    use crate::specs;

    fn scenario() -> (Model, Cluster, Training) {
        let model = specs::load_model("llama3-70b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 16,
            gpus_per_node: 8,
        };
        let training = Training::megatron_lm_2021(model.seq_len, 512);
        (model, cluster, training)
    }

    #[test]
    fn megatron_args_read_back_to_the_same_plan_and_model() {
        let (model, cluster, training) = scenario();
        for request in [
            PlanRequest {
                tp: 8,
                pp: 4,
                dp: 4,
                vpp: 5,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Selective,
                zero: 1,
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            },
            PlanRequest {
                tp: 4,
                pp: 8,
                dp: 4,
                vpp: 1,
                micro_batch: 2,
                sequence_parallel: false,
                recompute: Recompute::Full,
                zero: 0,
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            },
            // Context parallelism, FP8 and block recompute of 3 of each chunk's 10 layers.
            PlanRequest {
                tp: 4,
                cp: 2,
                pp: 4,
                dp: 4,
                vpp: 2,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Full,
                recompute_num_layers: 3,
                zero: 1,
                precision: crate::plan::Precision::Fp8,
                ..PlanRequest::default()
            },
        ] {
            // FP8 plans as Megatron-Core runs them (the 2021 Megatron-LM has no FP8).
            let training = if request.precision == crate::plan::Precision::Bf16 {
                training
            } else {
                let core = crate::training::TrainingFramework::MegatronCore;
                Training {
                    framework: core,
                    overlap: core.default_overlap(),
                    ..training
                }
            };
            let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
            let text = megatron_args(&model, &training, &plan);
            let launch = read_megatron_args(&text).unwrap();
            assert!(launch.ignored.is_empty(), "{:?}", launch.ignored);
            let mut back_model = launch.model(0).unwrap();
            back_model.name = model.name.clone();
            assert_eq!(back_model, model, "{text}");
            let back = launch
                .request(cluster.total_gpus(), training.global_batch)
                .unwrap();
            assert_eq!(back, request, "{text}");
            assert_eq!(launch.global_batch, Some(training.global_batch));
        }
    }

    #[test]
    fn megatron_precision_arguments_map_to_tpsim_precisions() {
        use crate::plan::Precision;
        let read = |fp8: Option<&str>, recipe: Option<&str>, fp4: Option<&str>, gather: bool| {
            let args = PrecisionArgs {
                fp8_format: fp8,
                fp8_recipe: recipe,
                fp4_format: fp4,
                fp8_param_gather: gather,
                ..PrecisionArgs::default()
            };
            megatron_precision(args, 1, &mut Vec::new())
        };
        use crate::training::Fp8Scaling;
        for (format, recipe, want, scaling) in [
            ("hybrid", None, Precision::Fp8, Some(Fp8Scaling::Delayed)),
            (
                "hybrid",
                Some("tensorwise"),
                Precision::Fp8,
                Some(Fp8Scaling::Current),
            ),
            (
                "e4m3",
                Some("delayed"),
                Precision::Fp8,
                Some(Fp8Scaling::Delayed),
            ),
            ("e4m3", Some("mxfp8"), Precision::Mxfp8, None),
        ] {
            assert_eq!(
                read(Some(format), recipe, None, true).unwrap(),
                MegatronPrecision {
                    precision: want,
                    param_gather: true,
                    fp8_scaling: scaling,
                }
            );
        }
        assert_eq!(
            read(None, None, Some("e2m1"), false).unwrap().precision,
            Precision::Nvfp4
        );
        assert_eq!(
            read(None, None, None, false).unwrap().precision,
            Precision::Bf16
        );
        let err = read(Some("hybrid"), Some("blockwise"), None, false).unwrap_err();
        assert!(err.to_string().contains("--fp8-recipe blockwise"), "{err}");
        let err = read(Some("hybrid"), None, Some("e2m1"), false).unwrap_err();
        assert!(err.to_string().contains("contradict"), "{err}");
        let gather = PrecisionArgs {
            fp8_format: Some("hybrid"),
            fp8_param_gather: true,
            ..PrecisionArgs::default()
        };
        let err = megatron_precision(gather, 0, &mut Vec::new()).unwrap_err();
        assert!(
            err.to_string().contains("--use-distributed-optimizer"),
            "{err}"
        );
    }

    #[test]
    fn reader_skips_what_it_does_not_model() {
        let launch = read_megatron_args(
            "torchrun pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \\\n --seq-length 2048 --global-batch-size 256 --lr 3e-4 --data-path /data/x --use-flash-attn",
        )
        .unwrap();
        assert_eq!((launch.layers, launch.tp, launch.pp), (24, 1, 1));
        assert!(launch.ignored.contains(&"--lr".to_string()));
        // --use-flash-attn changes the attention activations: modelled, not skipped.
        assert!(!launch.ignored.contains(&"--use-flash-attn".to_string()));
        assert_eq!(launch.attention, Some(AttentionKernel::Flash));
        let commented = read_megatron_args(
            "# --num-layers 2\n--num-layers 24 --hidden-size 2048 --num-attention-heads 16 # --tensor-model-parallel-size 4\n--seq-length 2048 --global-batch-size 256",
        )
        .unwrap();
        assert_eq!((commented.layers, commented.tp), (24, 1));
        let err = read_megatron_args("--num-layers $NLAYERS")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"$NLAYERS\"") && err.contains("expand shell variables"),
            "{err}"
        );
    }

    #[test]
    fn virtual_stage_layers_are_validated() {
        assert_eq!(vpp_from_layers_per_virtual_stage(80, 4, 5), Ok(4));
        let err = vpp_from_layers_per_virtual_stage(80, 4, 3).unwrap_err();
        assert!(err.contains("valid: 1, 2, 4, 5, 10, 20"), "{err}");
    }

    #[test]
    fn deepspeed_batch_identity_holds() {
        // DeepSpeed: train_batch_size = micro × accumulation × dp.
        let (model, cluster, training) = scenario();
        let request = PlanRequest {
            tp: 8,
            pp: 2,
            dp: 8,
            vpp: 1,
            micro_batch: 2,
            sequence_parallel: true,
            recompute: Recompute::None,
            zero: 1,
            allow_uneven_pp: false,
            allow_cross_node_tp: false,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&deepspeed_json(&training, &plan)).unwrap();
        let get = |k: &str| json[k].as_u64().unwrap();
        assert_eq!(
            get("train_batch_size"),
            get("train_micro_batch_size_per_gpu") * get("gradient_accumulation_steps") * 8
        );
        assert_eq!(json["zero_optimization"]["stage"], 1);
    }

    #[test]
    fn uneven_middle_stages_are_not_written_as_first_last() {
        // 80 layers on pp 9: tpsim's split of 82 units is 8, 10, 9 x 6, 8 (the remainder on one
        // middle stage), which --decoder-first/last-pipeline-num-layers cannot say
        // (Megatron-Core splits the middle layers evenly); 80 on pp 6 (12, 14 x 4, 12) it can.
        let (model, _, training) = scenario();
        // Evaluated as the line runs (a 2021-framework plan is refused before the split check).
        let training = Training {
            framework: crate::training::TrainingFramework::MegatronCore,
            ..training
        };
        let build = |pp: u32| {
            let cluster = Cluster {
                gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
                nodes: pp,
                gpus_per_node: 8,
            };
            let request = PlanRequest {
                tp: 8,
                pp,
                dp: 1,
                vpp: 1,
                micro_batch: 1,
                sequence_parallel: true,
                recompute: Recompute::Selective,
                zero: 1,
                allow_uneven_pp: true,
                allow_cross_node_tp: false,
                ..PlanRequest::default()
            };
            ParallelPlan::build(&request, &model, &cluster, &training).unwrap()
        };
        let nine = build(9);
        let why = Framework::Megatron
            .unsupported(&model, &training, &nine)
            .unwrap();
        assert!(
            why.contains("--decoder-first/last-pipeline-num-layers"),
            "{why}"
        );
        assert!(
            Framework::MegatronBridge
                .unsupported(&model, &training, &nine)
                .is_some()
        );
        let six = build(6);
        assert_eq!(
            Framework::Megatron.unsupported(&model, &training, &six),
            None
        );
        assert_eq!(
            MegatronSplit::of(&model, &six),
            MegatronSplit::FirstLast {
                first: 12,
                last: 12
            }
        );
        let line = megatron_args(&model, &training, &six);
        assert!(
            line.contains(
                "--decoder-first-pipeline-num-layers 12 --decoder-last-pipeline-num-layers 12"
            ),
            "{line}"
        );
    }
}
