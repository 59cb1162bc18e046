//! What one training step processes, and the number formats it keeps.

use serde::{Deserialize, Serialize};

mod bf16_layers;
mod module_precision;
mod pipeline_schedule;
mod recompute_modules;
pub use bf16_layers::{Bf16Layers, mtp_runs_bf16};
pub use module_precision::{ModulePrecision, QuantModule};
pub use pipeline_schedule::PipelineSchedule;
pub use recompute_modules::{
    RecomputeModule, RecomputeModules, VALID_NAMES as RECOMPUTE_MODULE_NAMES,
};

/// Default sequences per step when `--global-batch` is not given: 1536 sequences of 2048 tokens,
/// 3.1M tokens, the batch Narayanan et al. 2021 (SC'21, Table 1) trained GPT-3 175B with; Brown
/// et al. 2020 Table 2.1 gives GPT-3 175B 3.2M tokens.
pub const DEFAULT_GLOBAL_BATCH: u32 = 1536;

/// GPT-3 175B's sequence length (Brown et al. 2020 Table 2.1: n_ctx = 2048), the length
/// [`DEFAULT_GLOBAL_BATCH`] was trained at.
pub const GPT3_SEQ_LEN: u32 = 2048;

/// Tokens per step of the default batch: [`DEFAULT_GLOBAL_BATCH`] × [`GPT3_SEQ_LEN`] =
/// 3,145,728.
pub const DEFAULT_TOKENS_PER_STEP: u64 = DEFAULT_GLOBAL_BATCH as u64 * GPT3_SEQ_LEN as u64;

/// Default sequences per step at `seq_len` when no input gives a global batch: GPT-3's tokens per
/// step ([`DEFAULT_TOKENS_PER_STEP`]) rather than its 1536 sequences, so a long context does not
/// multiply the step (1536 × 131072 = 201M tokens). The count is the 2^a or 3 × 2^a (the form of
/// 1536 = 3 × 2⁹) closest to those tokens by ratio: data-parallel degrees of power-of-two GPU
/// counts divide it up to its size, where a plain rounding (1049 at 3000 tokens, a prime) would
/// leave no data parallelism. Exactly 1536 at 2048, 24 at 131072, at least 1 sequence.
pub fn default_global_batch(seq_len: u32) -> u32 {
    let target = DEFAULT_TOKENS_PER_STEP as f64 / f64::from(seq_len.max(1));
    let distance = |count: u32| (f64::from(count) / target).ln().abs();
    let mut best = 1;
    for power in 0..=21u32 {
        for count in [1u32 << power, 3u32 << power] {
            if count <= MAX_GLOBAL_BATCH && distance(count) < distance(best) {
                best = count;
            }
        }
    }
    best
}

/// Largest global batch tpsim accepts, in sequences (GPT-3 used 1536; Llama 3 405B 16M tokens =
/// 2048 × 8192): beyond it the input is a typo (tokens for sequences), not a batch.
pub const MAX_GLOBAL_BATCH: u32 = 1 << 22;

/// Bytes per parameter of the 16-bit working weights the forward and backward read, and that
/// ZeRO-3 / FSDP all-gather (Rajbhandari et al. 2020 §3.1: 2Ψ fp16 weights, 2Ψ fp16 gradients,
/// 12Ψ fp32 master weights, momentum and variance — the optimizer states of
/// [`OptimizerStates::Fp32`]).
pub const WEIGHT_BYTES: f64 = 2.0;

/// How the parameters and Adam's states are stored between steps: what a GPU keeps per parameter
/// besides the gradient. The formats the frameworks ship:
/// - `Fp32`: 16-bit weights beside an fp32 master copy and fp32 moments, 2 + 12 bytes (ZeRO paper
///   §3.1; Megatron-LM's and DeepSpeed's mixed-precision optimizers).
/// - `Fp32Params`: the parameters themselves are fp32 and are the optimizer's, fp32 moments, no
///   16-bit copy at rest: 4 + 8 bytes. FSDP2 with a `MixedPrecisionPolicy(param_dtype=bf16)` shards
///   the fp32 parameters and casts to bf16 only when it all-gathers a unit (torchtitan builds the
///   model in fp32 and passes `mixed_precision_param = "bfloat16"`).
/// - `Bf16Moments`: Megatron-Core's precision-aware optimizer (`--use-precision-aware-optimizer
///   --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`, main params fp32): bf16 weights, the fp32
///   master kept as the 16 bits the bf16 weight lacks (`OptimizerConfig.store_param_remainders =
///   True`, the default), bf16 moments: 2 + 6 bytes. Megatron-Bridge's DeepSeek-V3 recipe
///   (`recipes/deepseek/deepseek_v3.py`: `use_precision_aware_optimizer = True`, `exp_avg_dtype =
///   exp_avg_sq_dtype = torch.bfloat16`).
/// - `PrecisionAware`: the same optimizer at its default dtypes (`--use-precision-aware-optimizer`
///   alone: `OptimizerConfig.exp_avg_dtype = exp_avg_sq_dtype = main_params_dtype = torch.float32`,
///   `store_param_remainders = True`, megatron/core/optimizer/optimizer_config.py at d98e8a64):
///   bf16 weights, the master as 16-bit remainders, fp32 moments: 2 + 10 bytes. Megatron-Bridge's
///   GPT-OSS bf16 recipes of 26.02–26.04.01 (`set_post_overrides`, validation/mbridge_26_runs.md).
/// - `Muon`: Megatron-Core's Muon (`--optimizer muon`, or the deprecated `dist_muon`; with
///   `--use-distributed-optimizer` its layer-wise distributed optimizer,
///   megatron/core/optimizer/layer_wise_optimizer.py at d98e8a64): bf16 weights, an fp32 master
///   and one fp32 momentum buffer for the 2-D weights of the layers (2 + 8 bytes), Adam's fp32
///   master and moments for the embedding, the output layer, norms and biases
///   (`_is_nonlinear_or_embedding` → `--muon-scalar-optimizer adam`,
///   megatron/core/optimizer/emerging_optimizers.py). Its step orthogonalizes each weight's update
///   by Newton–Schulz iterations (`cost::muon`).
/// - `Bf16`: a model built in bf16 with a plain `torch.optim.Adam`, whose moments take the
///   parameter's dtype and which keeps no master copy: 2 + 4 bytes (NeMo AutoModel's `from_config`
///   with its default `torch_dtype="auto"` → bf16, `nemo_automodel/_transformers/auto_model.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerStates {
    #[default]
    Fp32,
    Fp32Params,
    Bf16Moments,
    PrecisionAware,
    Muon,
    Bf16,
}

/// How the MoE token dispatcher moves a token to the GPUs of its top-k experts.
/// - `AllToAll`: one copy per routed (token, expert) pair, even when two of a token's experts
///   live on the same GPU (Megatron-Core `MoEAlltoAllTokenDispatcher`, `--moe-token-dispatcher-type
///   alltoall`; torchtitan's default all-to-all).
/// - `DeepEp`: one copy per destination GPU, which expands it to the token's experts there; the
///   combine sums a token's expert outputs on that GPU and sends one vector back. DeepEP computes
///   `is_token_in_rank[token][rank]` and `num_tokens_per_rank` before its dispatch
///   (deepseek-ai/DeepEP `csrc/kernels/layout.cu` `get_dispatch_layout`), which Megatron-Core's flex
///   dispatcher (`--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep`,
///   megatron/core/transformer/moe/fused_a2a.py) and NeMo AutoModel's `dispatcher: deepep` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoeDispatcher {
    #[default]
    Alltoall,
    Deepep,
}

impl MoeDispatcher {
    /// The name `--moe-dispatcher` takes and plan files store.
    pub fn as_str(self) -> &'static str {
        match self {
            MoeDispatcher::Alltoall => "alltoall",
            MoeDispatcher::Deepep => "deepep",
        }
    }

    /// The dispatcher a launch configuration names for a plan with `ep` expert-parallel ranks:
    /// this one, except DeepEP without expert parallelism, which Megatron-Core's flex dispatcher
    /// refuses (`MoEFlexTokenDispatcher.__init__`: "Flex token dispatcher requires TPxEP > 1";
    /// tpsim runs DeepEP at expert TP 1) and which moves no tokens anyway, so the all-to-all is
    /// written, as the launch-line reader reads an ep-1 line back.
    pub fn written_for(self, ep: u32) -> MoeDispatcher {
        if ep > 1 {
            self
        } else {
            MoeDispatcher::Alltoall
        }
    }
}

/// Which experts a token's top-k choices land on, for what a per-GPU dispatcher sends.
/// - `Random`: balanced in expectation and independent of where the experts live, as a trained
///   router's choices and Megatron-Core's benchmark routing (`--moe-router-force-load-balancing`,
///   random logits, `moe_utils.apply_random_logits`) are.
/// - `RoundRobin`: token t takes experts t·k … t·k + k − 1 (mod experts), NeMo AutoModel's
///   `FakeBalancedGate` with no noise (nemo_automodel/components/moe/layers.py, `indices =
///   arange(n_tokens * k).view(-1, k) % n_experts`), which its published MoE benchmarks use
///   (`fake_balanced_gate: true`): a token's experts are neighbours, mostly on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoeRouting {
    #[default]
    Random,
    RoundRobin,
}

impl MoeRouting {
    /// The name `--moe-routing` takes and plan files store.
    pub fn as_str(self) -> &'static str {
        match self {
            MoeRouting::Random => "random",
            MoeRouting::RoundRobin => "round-robin",
        }
    }
}

/// The token dispatcher and the routing pattern together: what one MoE all-to-all sends. A plan
/// file may give either part alone; the other keeps its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MoeDispatch {
    pub dispatcher: MoeDispatcher,
    pub routing: MoeRouting,
    /// Where low-precision expert GEMMs get each expert's rows padded to the GEMM alignment
    /// (`cost::moe::padded_copies_factor`). `true`: Megatron-Core's `--moe-router-padding-for-fp8`
    /// (`moe_router_padding_for_quantization`), which pads every expert's column of the sending
    /// rank's routing map before the all-to-all (`MoEAlltoAllTokenDispatcher.dispatch_preprocess`,
    /// `moe_utils.pad_routing_map`), so the padding rows travel the wire. `false`, Megatron-Core's
    /// default: `TEGroupedMLP` pads each local expert's received rows after the dispatch
    /// (experts.py: `Fp8Padding(self.num_local_experts)` under `config.fp8`, applied when the
    /// router does not pad), off the wire. DeepEP pads after its dispatch either way.
    pub router_padding: bool,
}

impl OptimizerStates {
    /// The name `--optimizer-states` takes, the header prints and plan files store.
    pub fn as_str(self) -> &'static str {
        match self {
            OptimizerStates::Fp32 => "fp32",
            OptimizerStates::Fp32Params => "fp32-params",
            OptimizerStates::Bf16Moments => "bf16-moments",
            OptimizerStates::PrecisionAware => "precision-aware",
            OptimizerStates::Muon => "muon",
            OptimizerStates::Bf16 => "bf16",
        }
    }

    /// What it keeps, in words (said when a flag contradicts a launch line).
    pub fn describe(self) -> &'static str {
        match self {
            OptimizerStates::Fp32 => "fp32 master weights and Adam moments",
            OptimizerStates::Fp32Params => {
                "fp32 parameters as the master (FSDP2), fp32 Adam moments"
            }
            OptimizerStates::Bf16Moments => {
                "fp32 master as 16-bit remainders, bf16 Adam moments (precision-aware optimizer)"
            }
            OptimizerStates::PrecisionAware => {
                "fp32 master as 16-bit remainders, fp32 Adam moments (precision-aware optimizer)"
            }
            OptimizerStates::Muon => {
                "fp32 master weights and Muon's fp32 momentum (Adam's moments for the embedding and output layer)"
            }
            OptimizerStates::Bf16 => "bf16 parameters and Adam moments, no master copy",
        }
    }

    /// Bytes per parameter of the parameters as stored at rest (sharded by ZeRO-3 / FSDP).
    pub fn param_bytes(self) -> f64 {
        match self {
            OptimizerStates::Fp32Params => 4.0,
            _ => WEIGHT_BYTES,
        }
    }

    /// Bytes per parameter of the master copy the optimizer updates apart from the parameters
    /// (0 when it updates the parameters themselves).
    pub fn master_bytes(self) -> f64 {
        match self {
            OptimizerStates::Fp32 | OptimizerStates::Muon => 4.0,
            OptimizerStates::Bf16Moments | OptimizerStates::PrecisionAware => 2.0,
            OptimizerStates::Fp32Params | OptimizerStates::Bf16 => 0.0,
        }
    }

    /// The master's bytes when the parameters are gathered in FP8/FP4 (`--fp8-param-gather`): the
    /// remainders rebuild an fp32 value only beside a bf16 parameter, so with low-precision
    /// parameters the precision-aware optimizer keeps a whole fp32 master.
    pub fn master_bytes_with_low_precision_params(self, low_precision_params: bool) -> f64 {
        if low_precision_params && self.keeps_remainders() {
            4.0
        } else {
            self.master_bytes()
        }
    }

    /// Bytes per parameter a GPU keeps at rest besides the gradient, before ZeRO shards them: the
    /// parameters as stored, the master copy (`master_bytes_with_low_precision_params`) and the
    /// moments. What the scenario line's "weights + states" says, plan by plan.
    pub fn bytes_at_rest(self, low_precision_params: bool) -> f64 {
        self.param_bytes() + self.optimizer_bytes_with_low_precision_params(low_precision_params)
    }

    /// Bytes per parameter of the optimizer's own states as ZeRO-1 shards them: the master copy
    /// (`master_bytes_with_low_precision_params`) and the moments. `bytes_at_rest` less the
    /// parameters, which ZeRO-3 shards instead; the memory model counts these, so the scenario
    /// line's "weights + states" and the memory breakdown read one sum.
    pub fn optimizer_bytes_with_low_precision_params(self, low_precision_params: bool) -> f64 {
        self.master_bytes_with_low_precision_params(low_precision_params) + self.moment_bytes()
    }

    /// Bytes per parameter of the moments the embedding and output layer keep: Adam's two where
    /// the optimizer is Muon (its scalar optimizer), else the format's own.
    pub fn adam_moment_bytes(self) -> f64 {
        match self {
            OptimizerStates::Muon => 8.0,
            other => other.moment_bytes(),
        }
    }

    /// Bytes per parameter of the moments (Adam's two together; Muon's momentum).
    pub fn moment_bytes(self) -> f64 {
        match self {
            OptimizerStates::Fp32
            | OptimizerStates::Fp32Params
            | OptimizerStates::PrecisionAware => 8.0,
            OptimizerStates::Bf16Moments | OptimizerStates::Bf16 => 4.0,
            // Muon's momentum, for the layers' weights; the embedding and output layer keep Adam's
            // two moments (`adam_moment_bytes`), which the memory model adds for them.
            OptimizerStates::Muon => 4.0,
        }
    }

    /// The frameworks that store states this way: Megatron's and DeepSpeed's mixed-precision
    /// optimizers keep an fp32 master (Megatron-Core also the precision-aware variant); torchtitan's
    /// FSDP2 shards fp32 parameters, and a bf16 model under FSDP2 (NeMo AutoModel) keeps bf16
    /// states. None when `framework` runs it, else why not.
    pub fn unsupported_by(self, framework: TrainingFramework) -> Option<&'static str> {
        use TrainingFramework as F;
        let runs = match self {
            OptimizerStates::Fp32 => true,
            OptimizerStates::Bf16Moments
            | OptimizerStates::PrecisionAware
            | OptimizerStates::Muon => framework == F::MegatronCore,
            OptimizerStates::Fp32Params | OptimizerStates::Bf16 => framework == F::Torchtitan,
        };
        (!runs).then_some(match self {
            OptimizerStates::Bf16Moments => {
                "bf16-moments is Megatron-Core's precision-aware optimizer; use --framework megatron-core"
            }
            OptimizerStates::PrecisionAware => {
                "precision-aware is Megatron-Core's precision-aware optimizer; use --framework megatron-core"
            }
            OptimizerStates::Muon => {
                "muon is priced as Megatron-Core runs it (--optimizer muon; torchtitan's experimental flex_shard Muon is not priced); use --framework megatron-core"
            }
            _ => {
                "fp32-params and bf16 are FSDP2 formats (the parameters are the optimizer's); use --framework torchtitan"
            }
        })
    }

    /// Whether a plan at this ZeRO stage can keep its states this way: Megatron-Core's
    /// precision-aware optimizer runs under its distributed optimizer only (ZeRO-1; Megatron-Bridge
    /// turns it off under Megatron-FSDP, `scripts/performance/utils/helpers.py`: "Disabling
    /// precision aware optimizer because it cannot work with FSDP together").
    pub fn allows_zero(self, zero: u8) -> bool {
        match self {
            _ if self.keeps_remainders() => zero == 1,
            // arguments.py: "Emerging optimizer does not support Megatron-FSDP for now."
            OptimizerStates::Muon => zero <= 1,
            _ => true,
        }
    }

    /// The rule `allows_zero` applies and its fix, for the error that names a refused stage.
    pub fn zero_rule(self) -> (&'static str, &'static str) {
        match self {
            OptimizerStates::Muon => (
                "Megatron-Core runs Muon with or without its distributed optimizer (layer-wise), not under Megatron-FSDP (arguments.py: \"Emerging optimizer does not support Megatron-FSDP\")",
                "use --zero 1 or --zero 0",
            ),
            _ => (
                "Megatron-Core's precision-aware optimizer runs only in its distributed optimizer (ZeRO-1)",
                "use --zero 1 or --optimizer-states fp32",
            ),
        }
    }

    /// Megatron-Core's precision-aware optimizer, at either moment dtype: the master kept as the
    /// 16 bits a bf16 weight lacks (Transformer Engine's FusedAdam `store_param_remainders`).
    pub fn keeps_remainders(self) -> bool {
        matches!(
            self,
            OptimizerStates::Bf16Moments | OptimizerStates::PrecisionAware
        )
    }

    /// Bytes per parameter of the optimizer's own states (master copy and moments), what ZeRO-1
    /// shards: 12 for `Fp32`, as the ZeRO paper counts.
    pub fn optimizer_bytes(self) -> f64 {
        self.optimizer_bytes_with_low_precision_params(false)
    }
}

/// Gradient storage precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradDtype {
    /// 2 bytes per gradient (ZeRO paper, DeepSpeed's default).
    Bf16,
    /// 4 bytes: Megatron-LM's fp32 `main_grad` buffer (`--accumulate-allreduce-grads-in-fp32`);
    /// DeepSpeed's `data_types.grad_accum_dtype` fp32, whose `BF16_Optimizer` keeps the bf16
    /// gradients beside the fp32 buffer and all-reduces it cast to bf16 (`cost::bf16_optimizer`).
    Fp32,
}

impl GradDtype {
    /// The name `--grad-dtype` takes and the header prints.
    pub fn as_str(self) -> &'static str {
        match self {
            GradDtype::Bf16 => "bf16",
            GradDtype::Fp32 => "fp32",
        }
    }

    pub fn bytes(self) -> f64 {
        match self {
            GradDtype::Bf16 => 2.0,
            GradDtype::Fp32 => 4.0,
        }
    }
}

/// How the attention core (QKᵀ, softmax, AV) is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Fused kernel that never writes the s×s scores to memory and recomputes them in backward
    /// (Dao et al. 2022, FlashAttention; FlashAttention-2 §3: backward runs 5 matmuls to forward's 2).
    Flash,
    /// Megatron-LM's 2021 path: scores materialised, fused scale-mask-softmax, dropout
    /// (Korthikanti et al. 2022 Table 2 counts its activations).
    Unfused,
}

impl AttentionKernel {
    /// The name `--attention` takes and the header prints.
    pub fn as_str(self) -> &'static str {
        match self {
            AttentionKernel::Flash => "flash",
            AttentionKernel::Unfused => "unfused",
        }
    }
}

/// Whether a layer's element-wise work (norms, rotary embedding, activation, copies) runs as the
/// fused kernels Megatron-Core and Transformer Engine ship, or as PyTorch eager's one kernel per
/// operator with fp32 upcasts (torchtitan without `torch.compile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelFusion {
    /// One kernel per fused block: Megatron's fused bias-dropout-add and activation, Transformer
    /// Engine's RMSNorm and rotary embedding, or Inductor's kernels under `torch.compile`, which
    /// torchtitan applies per transformer block (`apply_compile`).
    Fused,
    /// PyTorch eager, as torchtitan's Llama runs without `compile`: `RMSNorm` upcasts to fp32 and
    /// runs pow, mean, rsqrt, two multiplies and a downcast as separate kernels
    /// (torchtitan/models/norms.py); `apply_rotary_emb` upcasts Q and K to fp32 complex and back;
    /// `repeat_kv` copies K and V out to every query head; SwiGLU runs silu and the product as two
    /// kernels (torchtitan/models/llama/model.py). `compute::eager_extra_bytes_per_token` counts
    /// their traffic.
    Eager,
}

impl KernelFusion {
    /// The name plan files write (`kernel_fusion:`).
    pub fn as_str(self) -> &'static str {
        match self {
            KernelFusion::Fused => "fused",
            KernelFusion::Eager => "eager",
        }
    }
}

/// How context parallelism exchanges K/V between the ranks of a CP group (`--cp-exchange`; files
/// and JSON spell it as the command line does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpExchange {
    /// Transformer Engine's point-to-point ring (`AttnFuncWithCPAndKVP2P`, Megatron-Core's
    /// `cp_comm_type = "p2p"`, and NeMo AutoModel's TE attention): each of cp − 1 steps passes this
    /// rank's K/V chunk (the K/V heads, GQA's fewer) under that step's attention blocks.
    KvRing,
    /// PyTorch 2.6's `context_parallel`, as torchtitan runs it: K/V repeated to every query head and
    /// all-gathered, fp32 dK/dV passed around the ring, eager fp32 merges (`cost::torch_ring`).
    TorchAllGather,
    /// Transformer Engine's K/V all-gather (`AttnFuncWithCPAndKVAllGather`, Megatron-Core's
    /// `cp_comm_type = "all_gather"`; the Llama 3 paper's §3.3.2 scheme): every rank's K/V
    /// all-gathered before the attention and again in backward, dK/dV reduce-scattered back, all
    /// exposed ("KV all-gather between CP ranks is exposed", its docstring); runs sliding windows,
    /// which the ring refuses (`cost::context_parallel`).
    KvAllGather,
    /// Transformer Engine's all-to-all over heads (`AttnFuncWithCPAndQKVOA2A`, Megatron-Core's
    /// `cp_comm_type = "a2a"`; DeepSpeed-Ulysses, Jacobs et al. 2023): Q, K and V trade sequence
    /// shards for head shards before the attention and the output trades back, the gradients
    /// mirrored in backward, all on the critical path; each TP rank's query and K/V heads must
    /// split over the CP ranks (`cost::context_parallel`).
    HeadAllToAll,
}

impl CpExchange {
    pub fn as_str(self) -> &'static str {
        match self {
            CpExchange::KvRing => "kv-ring",
            CpExchange::TorchAllGather => "torch-all-gather",
            CpExchange::KvAllGather => "kv-all-gather",
            CpExchange::HeadAllToAll => "head-all-to-all",
        }
    }

    /// Megatron-Core's `--cp-comm-type` for this exchange, as Transformer Engine spells it
    /// (`attn_forward_func_with_cp`: "p2p", "all_gather", "a2a"); None for PyTorch's ring, which
    /// Megatron-Core does not run.
    pub fn megatron_cp_comm_type(self) -> Option<&'static str> {
        match self {
            CpExchange::KvRing => Some("p2p"),
            CpExchange::KvAllGather => Some("all_gather"),
            CpExchange::HeadAllToAll => Some("a2a"),
            CpExchange::TorchAllGather => None,
        }
    }

    /// The exchange a Megatron-Core `--cp-comm-type` value names, if tpsim models it.
    pub fn from_megatron_cp_comm_type(value: &str) -> Option<CpExchange> {
        [
            CpExchange::KvRing,
            CpExchange::KvAllGather,
            CpExchange::HeadAllToAll,
        ]
        .into_iter()
        .find(|e| e.megatron_cp_comm_type() == Some(value))
    }

    /// Whether the exchange runs attention with a sliding window: Transformer Engine refuses
    /// windows on its point-to-point ring ("Context parallelism does not support sliding window
    /// attention with cp_comm_type='p2p'", `attn_forward_func_with_cp`) and supports them for
    /// all_gather and a2a; PyTorch's ring takes no window.
    pub fn runs_sliding_windows(self) -> bool {
        matches!(self, CpExchange::KvAllGather | CpExchange::HeadAllToAll)
    }

    /// How the training line names the exchange (where it is not Megatron-Core's ring), as
    /// `framework` runs it.
    pub fn training_words(self, framework: TrainingFramework) -> &'static str {
        match self {
            CpExchange::HeadAllToAll if framework == TrainingFramework::Deepspeed => {
                "DeepSpeed-Ulysses (sequence_parallel_size: Q, K, V and the output trade sequence for heads, exposed; no TP or PP beside it)"
            }
            CpExchange::KvRing => "Transformer Engine's K/V ring",
            CpExchange::TorchAllGather => {
                "PyTorch's context_parallel (K/V repeated to every query head and all-gathered, fp32 merges)"
            }
            CpExchange::KvAllGather => {
                "Transformer Engine's K/V all-gather (Megatron-Core's --cp-comm-type all_gather: gathers exposed, dK/dV reduce-scattered)"
            }
            CpExchange::HeadAllToAll => {
                "Transformer Engine's all-to-all over heads (Megatron-Core's --cp-comm-type a2a, Ulysses: Q, K, V and the output trade sequence for heads, exposed)"
            }
        }
    }

    /// What the CP line of the breakdown says moves, as `framework` runs it.
    pub fn comm_words(self, framework: TrainingFramework) -> &'static str {
        match self {
            CpExchange::HeadAllToAll if framework == TrainingFramework::Deepspeed => {
                "Q, K, V and the attention output all-to-all among the sequence-parallel ranks in every layer (sequence shards for head shards), their gradients in bwd: DeepSpeed-Ulysses, on the critical path"
            }
            CpExchange::KvRing => {
                "K/V exchanged among the context-parallel ranks in every layer, fwd and bwd: Transformer Engine's K/V ring (cp − 1 point-to-point steps)"
            }
            CpExchange::TorchAllGather => {
                "K/V exchanged among the context-parallel ranks in every layer, fwd and bwd: PyTorch's context_parallel (K/V repeated to every query head and all-gathered, fp32 dK/dV around the ring)"
            }
            CpExchange::KvAllGather => {
                "K/V all-gathered among the context-parallel ranks in every layer, fwd and again bwd, dK/dV reduce-scattered: Transformer Engine's all_gather, on the critical path"
            }
            CpExchange::HeadAllToAll => {
                "Q, K, V and the attention output all-to-all among the context-parallel ranks in every layer (sequence shards for head shards), their gradients in bwd: Transformer Engine's a2a, on the critical path"
            }
        }
    }
}

/// How per-tensor FP8 finds its scale (`--fp8-scaling`; files and JSON spell it as the command
/// line does). It changes the cast's traffic (`cost::cast`), not the GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Scaling {
    /// The scale of earlier steps' amax history; the cast records this tensor's amax as it goes
    /// (Transformer Engine's `DelayedScaling`, Megatron-LM `--fp8-recipe delayed`, NeMo 2's
    /// `bf16_with_fp8_mixed`).
    Delayed,
    /// This tensor's own amax, computed before the cast (Transformer Engine's
    /// `Float8CurrentScaling`, Megatron-LM `--fp8-recipe tensorwise`, Megatron-Bridge's
    /// `bf16_with_fp8_current_scaling_mixed`; torchao's tensorwise float8).
    Current,
}

impl Fp8Scaling {
    pub fn as_str(self) -> &'static str {
        match self {
            Fp8Scaling::Delayed => "delayed",
            Fp8Scaling::Current => "current",
        }
    }
}

/// The cross-entropy kernel, which sets how many bytes per b·s·V/t logit element the loss holds at
/// its peak (the start of the backward, with every activation still saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossKernel {
    /// Megatron's vocab-parallel cross-entropy: keeps the fp32 softmax and writes its gradient into
    /// it in place (megatron/core/tensor_parallel/cross_entropy.py, `VocabParallelCrossEntropy.
    /// backward`: "grad_input = softmax"), one fp32 copy (Korthikanti et al. 2022 §4.3): 4 bytes.
    VocabParallel,
    /// PyTorch eager `cross_entropy(pred.float(), labels)` (torchtitan's loss): in
    /// `log_softmax_backward` three fp32 tensors coexist, the saved log-softmax output,
    /// `nll_loss_backward`'s dense gradient and the result: 12 bytes.
    EagerFp32,
    /// The same eager kernel on bf16 logits without the upcast (NeMo AutoModel's
    /// `MaskedCrossEntropy` with `fp32_upcast: false`, its benchmark configs' setting): 6 bytes.
    EagerBf16,
    /// The loss under `torch.compile` (torchtitan since 2025-04): the compiled graph saves the
    /// bf16 logits and the log-sum-exp and writes the bf16 gradient in one fused kernel: 4 bytes.
    Compiled,
}

impl LossKernel {
    /// Bytes per logit element the loss holds at its peak; `loss_parallel`: the logits are
    /// sharded over the vocabulary by PyTorch's `loss_parallel()` (torchtitan under TP,
    /// `TrainingFramework::runs_loss_parallel`). There the eager fp32 loss runs PyTorch's own
    /// decomposition (torch/distributed/tensor/parallel/loss.py): its fused backward
    /// `_nll_loss_and_log_softmax_backward` computes `(grad_input + torch.exp(x)) * grad_output`
    /// with `grad_input = torch.zeros_like(x)`, so the saved log-softmax output, that zeroed
    /// gradient, the exponential and the sum (or, a step later, the product) are four fp32
    /// tensors at once: 16 bytes where the single-GPU kernel holds 12. (Its forward, `_log_softmax`,
    /// holds the upcast input, `shifted`, `exp(shifted)` and the bf16 logits: 14.)
    pub fn bytes_per_logit(self, loss_parallel: bool) -> f64 {
        match self {
            LossKernel::VocabParallel | LossKernel::Compiled => 4.0,
            LossKernel::EagerBf16 => 6.0,
            LossKernel::EagerFp32 if loss_parallel => 16.0,
            LossKernel::EagerFp32 => 12.0,
        }
    }
}

/// The training framework whose behaviour the cost model mirrors: which communication it overlaps,
/// its gradient precision, its attention kernel and which sharding shapes it can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainingFramework {
    /// Megatron-LM as of the SC'21 paper (Narayanan et al. 2021): synchronous TP and PP
    /// communication, gradient reduction after the backward, ZeRO-1 at most with pipelines.
    /// Spelled as `--framework` spells it; kebab-case alone gives `megatron-lm2021`, which plan
    /// files written before were given, so that spelling is still read.
    #[serde(rename = "megatron-lm-2021", alias = "megatron-lm2021")]
    MegatronLm2021,
    /// Megatron-Core (Megatron-LM, NeMo 2, Megatron-Bridge): distributed optimizer, overlapped
    /// gradient reduce-scatter and parameter all-gather, TP communication overlap (userbuffers),
    /// overlapped p2p in the interleaved schedule, fp32 gradient reduction, Megatron FSDP.
    MegatronCore,
    /// torchtitan: FSDP2 with TP (async TP optional), PP and CP; fp32 gradient reduction.
    Torchtitan,
    /// DeepSpeed: ZeRO 1-3 without pipelines, ZeRO-1 with its pipeline engine; bf16 gradients.
    Deepspeed,
}

/// The copies a framework's sharded data parallelism makes around its collectives
/// (`TrainingFramework::sharded_dp_copies`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardedDpCopies {
    /// Every gathered parameter read and written once more after its all-gather.
    pub gathered_parameters: bool,
    /// Every gradient read and written (in the reduce dtype) into the reduce-scatter's input.
    pub reduced_gradients: bool,
}

impl TrainingFramework {
    pub fn as_str(self) -> &'static str {
        match self {
            TrainingFramework::MegatronLm2021 => "megatron-lm-2021",
            TrainingFramework::MegatronCore => "megatron-core",
            TrainingFramework::Torchtitan => "torchtitan",
            TrainingFramework::Deepspeed => "deepspeed",
        }
    }

    /// Gradient dtype the framework reduces in by default: Megatron-Core keeps fp32 `main_grad`
    /// buffers and reduces in fp32 unless `--grad-reduce-in-bf16` (megatron/training/arguments.py,
    /// `accumulate_allreduce_grads_in_fp32`); NeMo 2 / Megatron-Bridge recipes set
    /// `grad_reduce_in_fp32=True`; torchtitan's FSDP2 `mixed_precision_reduce = "float32"`;
    /// DeepSpeed's bf16 optimizer keeps bf16 gradients. The 2021 baseline keeps tpsim's earlier bf16.
    pub fn default_grad_dtype(self) -> GradDtype {
        match self {
            TrainingFramework::MegatronLm2021 | TrainingFramework::Deepspeed => GradDtype::Bf16,
            TrainingFramework::MegatronCore | TrainingFramework::Torchtitan => GradDtype::Fp32,
        }
    }

    /// How the framework stores parameters and Adam's states unless told otherwise: torchtitan's
    /// FSDP2 keeps fp32 parameters as the master (the model is built in fp32, `train.py`
    /// `model.to_empty` + `init_weights` under the default dtype, and `MixedPrecisionPolicy(
    /// param_dtype=bfloat16, reduce_dtype=float32)` casts only the gathered copy); the others keep
    /// 16-bit weights beside an fp32 master (Megatron's `Float16OptimizerWithFloat16Params` and
    /// distributed optimizer, DeepSpeed's bf16 optimizer).
    pub fn default_optimizer_states(self) -> OptimizerStates {
        match self {
            TrainingFramework::Torchtitan => OptimizerStates::Fp32Params,
            TrainingFramework::MegatronLm2021
            | TrainingFramework::MegatronCore
            | TrainingFramework::Deepspeed => OptimizerStates::Fp32,
        }
    }

    /// Communication overlap the framework runs by default (the settings its published performance
    /// recipes use; a user overrides each with its flag).
    pub fn default_overlap(self) -> Overlap {
        match self {
            // Megatron-LM 2021's local DDP all-reduces the gradients after the last backward
            // (megatron/model/distributed.py `allreduce_gradients`, called from the training step),
            // as DeepSpeed's pipeline engine does (`_exec_reduce_grads` after the schedule).
            TrainingFramework::MegatronLm2021 => Overlap {
                tp_comm: false,
                grad_reduce: false,
                param_gather: false,
                p2p: false,
                moe_a2a: false,
            },
            // NVIDIA's Megatron-Bridge / NeMo performance recipes: `tp_comm_overlap=True`,
            // `overlap_grad_reduce=True`, `overlap_param_gather=True`, `overlap_p2p_comm=True` with
            // interleaving (Megatron-Bridge `recipes/utils` comm-overlap defaults).
            TrainingFramework::MegatronCore => Overlap {
                tp_comm: true,
                grad_reduce: true,
                param_gather: true,
                p2p: true,
                moe_a2a: false,
            },
            // FSDP2 prefetches the next all-gather and reduce-scatters during backward; async TP is
            // opt-in (`enable_async_tensor_parallel = false`).
            TrainingFramework::Torchtitan => Overlap {
                tp_comm: false,
                grad_reduce: true,
                param_gather: true,
                p2p: false,
                moe_a2a: false,
            },
            // `overlap_comm: true` in ZeRO configs; no TP-communication overlap.
            TrainingFramework::Deepspeed => Overlap {
                tp_comm: false,
                grad_reduce: true,
                param_gather: false,
                p2p: false,
                moe_a2a: false,
            },
        }
    }

    /// Share of the bf16 peak the framework's fused attention kernel reaches on `gpu`: Transformer
    /// Engine's cuDNN fused attention (FlashAttention-3 class on Hopper) for Megatron-Core; PyTorch
    /// SDPA's FlashAttention-2 for torchtitan and DeepSpeed; the 2021 baseline keeps the GEMM
    /// efficiency it was validated with.
    pub fn attention_efficiency(self, gpu: &crate::cluster::GpuProfile) -> f64 {
        match self {
            TrainingFramework::MegatronLm2021 => gpu.gemm_efficiency,
            TrainingFramework::MegatronCore => gpu
                .fused_attention_efficiency
                .unwrap_or(gpu.gemm_efficiency),
            // Without a measured FA2 share, no better than the fused kernel where that one is
            // measured (FlashAttention-2 trails cuDNN/FA3 on every published comparison).
            TrainingFramework::Torchtitan | TrainingFramework::Deepspeed => {
                gpu.fa2_attention_efficiency.unwrap_or(
                    gpu.fused_attention_efficiency
                        .map_or(gpu.gemm_efficiency, |fused| fused.min(gpu.gemm_efficiency)),
                )
            }
        }
    }

    /// The framework's fused attention kernel at the model's query/key head width, relative to its
    /// rate at 128 (the width every profile's `fused_attention_efficiency` and
    /// `fa2_attention_efficiency` was measured at). FlashAttention-3's paper charts each kernel's
    /// forward on H100 SXM5 at head dimensions 64, 128 and 256 (Shah et al. 2024, Figure 5, bf16,
    /// no causal mask; the bar labels averaged over 4K, 8K and 16K tokens, as a third-party
    /// reading of the figure gives them, not yet checked against the paper's own labels):
    /// - cuDNN, which Transformer Engine runs for Megatron-Core: 411, 601 and 496 TFLOP/s, so
    ///   0.683, 1 and 0.825;
    /// - FlashAttention-2, PyTorch SDPA's flash kernel in torchtitan and DeepSpeed: 322, 369 and
    ///   296 TFLOP/s, so 0.873, 1 and 0.801.
    ///
    /// Linear between those widths and flat beyond them (MLA's 192-wide queries and keys take the
    /// midpoint of 128 and 256). Measured on Hopper only and taken for every GPU. The 2021
    /// Megatron-LM baseline keeps its validated GEMM efficiency at every width.
    pub fn attention_head_width_factor(self, qk_head_dim: f64) -> f64 {
        const CUDNN: [(f64, f64); 3] = [(64.0, 0.683), (128.0, 1.0), (256.0, 0.825)];
        const FLASH_ATTENTION_2: [(f64, f64); 3] = [(64.0, 0.873), (128.0, 1.0), (256.0, 0.801)];
        let points = match self {
            TrainingFramework::MegatronLm2021 => return 1.0,
            TrainingFramework::MegatronCore => CUDNN,
            TrainingFramework::Torchtitan | TrainingFramework::Deepspeed => FLASH_ATTENTION_2,
        };
        let (first, last) = (points[0], points[points.len() - 1]);
        if qk_head_dim <= first.0 {
            return first.1;
        }
        if qk_head_dim >= last.0 {
            return last.1;
        }
        points
            .windows(2)
            .find(|pair| qk_head_dim <= pair[1].0)
            .map_or(1.0, |pair| {
                let ((w0, f0), (w1, f1)) = (pair[0], pair[1]);
                f0 + (f1 - f0) * (qk_head_dim - w0) / (w1 - w0)
            })
    }

    /// Whether FP8 training keeps the quantized weights as the model's parameters and all-gathers
    /// them in FP8 (Megatron-Core `--fp8-param-gather`, which NVIDIA's performance recipes set:
    /// Megatron-Bridge docs "When training in fp8 computing precision, setting
    /// `fp8_param_gather=True` conducts the parameter all-gather in fp8"; NVIDIA
    /// dgxc-benchmarking configs `FP8_PARAM_GATHER=true`); it needs the distributed optimizer
    /// (ZeRO >= 1). Others keep bf16 weights and add the quantized copies.
    pub fn fp8_param_gather(self) -> bool {
        matches!(self, TrainingFramework::MegatronCore)
    }

    /// The per-tensor FP8 scaling the framework runs unless told otherwise: current scaling for
    /// Megatron-Core, as tpsim's emitters write it (`--fp8-recipe tensorwise`) and as NVIDIA's
    /// Megatron-Bridge performance recipes publish their FP8 runs ("FP8-CS"), although
    /// Megatron-Core's own `TransformerConfig.fp8_recipe` defaults to delayed; torchao's
    /// tensorwise float8, torchtitan's, has no delayed scaling left (deprecated in torchao 0.9, deleted
    /// in 0.10: pytorch/ao#1680, #1753).
    /// DeepSpeed's FP8 comes from the model code's Transformer Engine layers (its config has no FP8
    /// key), with the same default here; its norms are not assumed fused with the cast.
    pub fn default_fp8_scaling(self) -> Fp8Scaling {
        Fp8Scaling::Current
    }

    /// Whether the framework's norm kernel quantizes the norm-fed linears' inputs (QKV, MLP up):
    /// Megatron-Core's Transformer Engine layer spec builds them as `TELayerNormColumnParallelLinear`
    /// (`cost::cast`); torchtitan casts with torchao after its own norm.
    pub fn quantizes_in_the_norm(self) -> bool {
        matches!(self, TrainingFramework::MegatronCore)
    }

    /// Whether the framework's FP8 GEMMs read a column-wise operand where the GPU allows it, so no
    /// transposed copy is made on Blackwell: Transformer Engine (Megatron-Core, and DeepSpeed's
    /// FP8, which is Transformer Engine's layers) runs non-TN FP8 GEMMs there
    /// (`is_non_tn_fp8_gemm_supported`). torchao calls `torch._scaled_mm`, which wants its second
    /// operand column-major on every GPU ("mat2 must be col_major"), so `float8_mm` makes the
    /// contiguous transposed copies in the backward on Blackwell too (torchao `float8_ops.py`,
    /// `preprocess_addmm`).
    pub fn reads_columnwise_fp8_where_supported(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether rotary embeddings run as one fused kernel unless a run says otherwise
    /// (`Training::rope_fusion`): everywhere but Megatron-Core on a rotary variant (yarn, mrope),
    /// which Megatron-LM's arguments run unfused (`PositionEmbedding::megatron_lm_fuses_rope`).
    /// The one rule for the scenario, the launch-line reader and what a saved plan writes.
    pub fn fuses_rope_by_default(self, position: crate::model::PositionEmbedding) -> bool {
        !(self == TrainingFramework::MegatronCore
            && position.is_rotary()
            && !position.megatron_lm_fuses_rope())
    }

    /// Whether the weight-gradient GEMMs of a plan at ZeRO stage `zero` accumulate in place into
    /// the gradient buffer (cuBLAS with beta = 1: the buffer read and written in its dtype) instead
    /// of writing a fresh bf16 gradient that a backward hook then adds (`param.main_grad.add_`).
    /// Megatron-Core's gradient-accumulation fusion, which Megatron-LM's arguments turn on by
    /// default (`--no-gradient-accumulation-fusion` turns it off; the bare `ModelParallelConfig`
    /// field defaults to False) and Megatron-Bridge's providers enable wherever the fused kernel is
    /// installed (`fusions.can_enable_gradient_accumulation_fusion`); Transformer Engine's linears
    /// and grouped linears run it as `general_gemm(..., out=weight.main_grad,
    /// accumulate=accumulate_wgrad_into_param_main_grad)` when `fuse_wgrad_accumulation` is set
    /// (`module/linear.py`, `grouped_linear.py`). Not under Megatron-FSDP (ZeRO-2/3 here): its user
    /// guide lists `--no-gradient-accumulation-fusion` among the required flags
    /// (docs/discussions/megatron-fsdp-user-guide). torchtitan's FSDP2 and DeepSpeed take the
    /// gradient from autograd. Megatron-LM 2021 stays as fitted (vTrain's and SC'21's A100 GEMMs
    /// are compute-bound either way).
    pub fn fuses_wgrad_accumulation(self, zero: u8) -> bool {
        matches!(self, TrainingFramework::MegatronCore) && zero < 2
    }

    /// Whether low-precision training keeps quantized copies of the weights between uses
    /// (Transformer Engine's `Float8Tensor` with its transpose, counted in `cost::memory`). torchao's
    /// `Float8Linear`, torchtitan's, casts the weight in every forward and backward and saves the
    /// high-precision one (`matmul_with_hp_or_float8_args`: `ctx.save_for_backward(input_hp,
    /// weight_hp_t)`): no copy outlives the GEMM.
    pub fn keeps_quantized_weight_copies(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether low-precision GEMMs save their inputs quantized for the backward. Transformer Engine
    /// does (`inputmat` in FP8). torchao's `Float8Linear` saves what it is given: the bf16 input,
    /// unless torchtitan's float8 tensor-parallel classes cast it before the linear
    /// (`Float8ColwiseParallel`/`PrepareFloat8ModuleInput` before the all-gather,
    /// `Float8RowwiseParallel` before the row-split GEMM), i.e. only with TP.
    pub fn saves_quantized_inputs(self, tp: u32) -> bool {
        !matches!(self, TrainingFramework::Torchtitan) || tp > 1
    }

    /// Whether the framework can run delayed FP8 scaling: not torchtitan (torchao deleted it, pytorch/ao#1753).
    pub fn runs_delayed_fp8_scaling(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// How context parallelism exchanges K/V in this framework (`CpExchange`): DeepSpeed's is
    /// Ulysses, the all-to-all over heads (`sequence_parallel_size`).
    pub fn default_cp_exchange(self) -> CpExchange {
        match self {
            TrainingFramework::Torchtitan => CpExchange::TorchAllGather,
            TrainingFramework::Deepspeed => CpExchange::HeadAllToAll,
            _ => CpExchange::KvRing,
        }
    }

    /// The context-parallel exchanges tpsim evaluates under the framework: Megatron-Core's three
    /// (`--cp-comm-type p2p|all_gather|a2a`); torchtitan's PyTorch ring, and Transformer Engine's
    /// ring as NeMo AutoModel's TE attention runs it on the same FSDP2 stack; DeepSpeed's Ulysses
    /// all-to-all; and for 2021 Megatron-LM, which has none, the ring `eval` prices as asked.
    pub fn runs_cp_exchange(self, exchange: CpExchange) -> bool {
        match self {
            TrainingFramework::MegatronCore => exchange != CpExchange::TorchAllGather,
            TrainingFramework::Torchtitan => {
                matches!(exchange, CpExchange::TorchAllGather | CpExchange::KvRing)
            }
            TrainingFramework::Deepspeed => exchange == CpExchange::HeadAllToAll,
            TrainingFramework::MegatronLm2021 => exchange == CpExchange::KvRing,
        }
    }

    /// Whether the all-to-all exchange repeats K/V heads where there are fewer than CP ranks:
    /// DeepSpeed's Ulysses does ("if we have 4 kv heads and sp 8, we need to replicate kv heads
    /// 2x", `kv_replication_factor` and `repeat_interleave` in
    /// deepspeed/runtime/sequence_parallel/ulysses_sp.py `UlyssesSPAttentionHF`), so cp needs only
    /// to divide the K/V heads or be a multiple of them; Transformer Engine's a2a requires both
    /// head counts to split (`AttnFuncWithCPAndQKVOA2A`).
    pub fn replicates_kv_heads_over_cp(self) -> bool {
        matches!(self, TrainingFramework::Deepspeed)
    }

    /// Whether the framework shards a mixture-of-experts model with ZeRO-3 at these degrees.
    /// DeepSpeed's native MoE layers refuse ZeRO-3 ("Native DeepSpeed MoE is not supported with
    /// ZeRO Stage 3. Use AutoEP or choose ZeRO stage 1/2"), and AutoEP's layers run it without
    /// tensor parallelism, sequence parallelism or expert TP ("AutoEP with ZeRO Stage 3 does not
    /// support AutoTP yet", "... sequence parallelism yet", "only supports
    /// expert_tensor_parallel_size 1": deepspeed/runtime/engine.py
    /// `_validate_zero3_moe_compatibility`). Megatron-Core (Megatron-FSDP) and torchtitan/AutoModel
    /// (FSDP2 beside EP) shard experts at any degree.
    pub fn runs_zero3_with_experts(self, tp: u32, cp: u32, etp: u32) -> bool {
        !matches!(self, TrainingFramework::Deepspeed) || (tp <= 1 && cp <= 1 && etp <= 1)
    }

    /// The ranks the framework's expert-parallel group must divide, where it draws that group from
    /// fewer than a stage's tp x cp x dp GPUs (None where it folds the experts over all of them, as
    /// Megatron-Core does, `PlanError::EpFolding`), with the data-parallel ranks FSDP shards over
    /// among them. torchtitan builds its EP mesh from FSDP2's shard ranks
    /// (`data_parallel_shard_degree`: dp / copies under ZeRO-3, HSDP's copies being
    /// `data_parallel_replicate_degree`; 1 under ZeRO-0, which replicates), the CP ranks and the
    /// TP ranks: `ParallelDims._validate` (torchtitan/distributed/parallel_dims.py) raises
    /// "expert_parallel_degree must divide dp_shard * cp * tp" (#4258; the experts' `efsdp` mesh
    /// is `dp_shard * cp * tp // ep`); EP never takes ranks from the replicas. (Before #3167
    /// removed expert tensor parallelism, etp = tp left the TP ranks out; `runs_expert_tp` now
    /// allows it only with EP off.)
    pub fn expert_parallel_ranks(
        self,
        tp: u32,
        cp: u32,
        dp: u32,
        zero: u8,
        dp_replicas: u32,
    ) -> Option<(u64, u32)> {
        if self != TrainingFramework::Torchtitan {
            return None;
        }
        let dp_shard = if zero == 3 {
            dp / dp_replicas.max(1)
        } else {
            1
        };
        Some((
            u64::from(dp_shard) * u64::from(cp) * u64::from(tp),
            dp_shard,
        ))
    }

    /// Whether the framework splits experts over expert-TP degree `etp` beside TP degree `tp` and
    /// expert-parallel degree `ep`. torchtitan keeps the routed experts whole on its EP ranks when
    /// EP is on (no expert TP since "[MoE][4/n] deprecate expert tensor parallel (ETP)", #3167:
    /// the `ExpertTensorParallel` classes, the `etp` mesh axis and `expert_tensor_parallel_degree`
    /// removed), and with EP off splits them over the TP ranks as it splits a dense MLP
    /// (torchtitan/models/common/moe_sharding.py `expert_param_placement_dense`, "EP disabled,
    /// TP > 1"; MOE_SHARDING.md: routed expert weights "TP-sharded (colwise/rowwise)"): etp 1
    /// with ep > 1, etp = tp with ep 1. Megatron-Core splits them over any degree that folds into
    /// the stage.
    pub fn runs_expert_tp(self, etp: u32, ep: u32, tp: u32) -> bool {
        self != TrainingFramework::Torchtitan || etp == self.default_etp(tp, ep, true)
    }

    /// The expert-TP degree a plan runs when none is given: Megatron-Core's
    /// `expert_tensor_parallel_size` defaults to the TP size (`TransformerConfig.__post_init__`),
    /// torchtitan's is fixed by its EP degree (`runs_expert_tp`), and a dense model has no experts
    /// to split.
    pub fn default_etp(self, tp: u32, ep: u32, has_experts: bool) -> u32 {
        match self {
            _ if !has_experts => 1,
            TrainingFramework::Torchtitan if ep > 1 => 1,
            _ => tp,
        }
    }

    /// Whether the framework can keep ZeRO-3's gathered parameters from a layer's forward through
    /// its backward (FSDP2's `reshard_after_forward=False`, tpsim's `reshard_after_forward: false`)
    /// for a plan of these pipeline and expert degrees on a model whose embeddings are tied or not.
    /// torchtitan can, at any degree: `fsdp_reshard_after_forward = "never"` (torchtitan
    /// config/configs.py, resolved in distributed/fsdp.py `get_fsdp_reshard_after_forward_policy`).
    /// Megatron-Core can only through torch FSDP2: `--use-torch-fsdp2
    /// --torch-fsdp2-no-reshard-after-forward` (megatron/training/arguments.py; training.py
    /// `get_megatron_ddp_config` passes it to `fully_shard` in
    /// megatron/core/distributed/torch_fully_sharded_data_parallel.py), which arguments.py runs
    /// only without pipeline or expert parallelism and with untied embeddings ("--use-torch-fsdp2
    /// is not supported with pipeline parallelism", "... with expert parallelism", "... requires
    /// --untie-embeddings-and-output-weights"); Megatron-FSDP releases every FSDP unit's parameters
    /// after its forward (megatron_fsdp.py `_post_forward`), whatever its settings. DeepSpeed's
    /// ZeRO-3 has no such setting: it releases a module's parameters after its forward unless they
    /// are reused within `stage3_max_reuse_distance` parameters
    /// (deepspeed/runtime/zero/partitioned_param_coordinator.py `release_sub_module`,
    /// `__params_to_release`). 2021 Megatron-LM has no FSDP at all.
    /// Torch FSDP2 under Megatron-LM also shards over the whole data-parallel group whatever
    /// `--num-distributed-optimizer-instances` says (torch_fully_sharded_data_parallel.py), so it
    /// keeps one copy of the sharded states (`dp_replicas` 1); torchtitan's HSDP keeps them with
    /// any number of copies.
    pub fn keeps_gathered_parameters(
        self,
        pp: u32,
        ep: u32,
        tied_embeddings: bool,
        dp_replicas: u32,
    ) -> bool {
        match self {
            TrainingFramework::Torchtitan => true,
            TrainingFramework::MegatronCore => {
                pp <= 1 && ep <= 1 && !tied_embeddings && dp_replicas <= 1
            }
            TrainingFramework::Deepspeed | TrainingFramework::MegatronLm2021 => false,
        }
    }

    /// How the framework handles ZeRO-3's gathered parameters where it cannot keep them
    /// (`keeps_gathered_parameters`), in the words `eval`'s note and `plan`'s pin error both use.
    pub fn gathered_parameters_words(self) -> &'static str {
        match self {
            TrainingFramework::Torchtitan => {
                "FSDP2 keeps them with fsdp_reshard_after_forward = \"never\""
            }
            TrainingFramework::MegatronCore => {
                "Megatron-FSDP releases them after every forward, and torch FSDP2's --torch-fsdp2-no-reshard-after-forward runs only with pp 1, ep 1, untied embeddings and one copy of the sharded states"
            }
            TrainingFramework::Deepspeed => {
                "DeepSpeed's ZeRO-3 releases them after each module's forward, keeping only those reused within stage3_max_reuse_distance parameters, and has no setting that keeps them"
            }
            TrainingFramework::MegatronLm2021 => "2021 Megatron-LM has no FSDP to keep them with",
        }
    }

    /// Whether Megatron's sequence parallelism can run beside context parallelism:
    /// Megatron-DeepSpeed refuses `--sequence-parallel` with `--ds-sequence-parallel-size` above 1
    /// ("DeepSpeed's sequence parallel, which is not compatible with Megatron-LM's sequence
    /// parallel. Remove --sequence_parallel", megatron/initialize.py); Megatron-Core and torchtitan
    /// run both.
    pub fn runs_sequence_parallelism_beside_cp(self) -> bool {
        !matches!(self, TrainingFramework::Deepspeed)
    }

    /// Whether the framework runs a model whose output layer shares the input embedding (tied
    /// embeddings) under pipeline parallelism. torchtitan refuses it: its decoder's
    /// `update_from_config` raises `NotImplementedError("Weight tying is not supported with
    /// Pipeline Parallel.")` when `enable_weight_tying and pipeline_parallel_degree > 1`
    /// (torchtitan/models/common/decoder.py at b5bcd76c6, in that file since d92336fee; its unit test
    /// `test_pp_guard_raises_when_weight_tying_and_pp_enabled`), whatever the schedule, V ones
    /// included. Megatron-LM, Megatron-Core and DeepSpeed keep a copy on the last stage and
    /// all-reduce its gradient (`cost::embedding_grad_sync`).
    pub fn runs_tied_embeddings_with_pp(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether context parallelism runs beside tensor or pipeline parallelism. DeepSpeed-Ulysses
    /// does not: Megatron-DeepSpeed asserts "DeepSpeed's sequence parallel does not work with tensor
    /// parallel or pipeline parallel" (`initialize_model_parallel`, megatron/core/parallel_state.py
    /// of deepspeedai/Megatron-DeepSpeed), its tutorial says the same (docs/_tutorials/ds-sequence.md:
    /// "incompatible with Megatron-LM's tensor or pipeline parallelism"), and ALST's
    /// `UlyssesSPAttentionHF` (deepspeed/runtime/sequence_parallel/ulysses_sp.py) wraps a Hugging
    /// Face model's attention with neither. Megatron-Core and torchtitan run all three together.
    pub fn runs_cp_beside_tp_or_pp(self) -> bool {
        !matches!(self, TrainingFramework::Deepspeed)
    }

    /// Whether context parallelism splits the sequence into 2·cp chunks for causal load balancing
    /// (Megatron-Core's and Transformer Engine's rings give rank i chunks i and 2cp−1−i; torchtitan's
    /// `context_parallel` load-balances the same way), so the sequence must be a multiple of 2·cp.
    /// DeepSpeed-Ulysses gives each rank one contiguous seq/cp shard and runs the whole causal
    /// attention on its heads, balanced by construction: it needs only seq % cp == 0
    /// (Megatron-DeepSpeed pretrain_gpt.py `get_batch`: `assert seq_length %
    /// seq_parallel_world_size == 0`; ALST's `UlyssesSPDataLoaderAdapter`, ulysses_sp.py: "batch's
    /// seqlen isn't divisible by sp-size").
    pub fn cp_balances_causal_chunks(self) -> bool {
        !matches!(self, TrainingFramework::Deepspeed)
    }

    /// Whether TP-communication overlap also hides the backward pass's collectives. Megatron-Core's
    /// userbuffers overlap splits the backward all-gathers and reduce-scatters under the dgrad and
    /// wgrad GEMMs too (`tp_comm_bulk_dgrad`, `tp_comm_bulk_wgrad`, `tp_comm_overlap_rs_dgrad`).
    /// torchtitan's async TP fuses all-gather→matmul and matmul→reduce-scatter in the forward graph;
    /// its authors measured "up to ~29% forward pass speedup and ~8% E2E speedup" on Llama 3 8B and
    /// 20%/8% on 70B (PyTorch dev-discuss, "Introducing Async Tensor Parallelism in PyTorch", 2024):
    /// with the forward about a third of the step, an 8% step gain is the forward's alone, so the
    /// backward's collectives stay exposed — and with them the recomputed forward's under
    /// activation checkpointing, which runs inside the backward graph (torch.compile's AOTAutograd
    /// partitioner puts the recomputed nodes in the backward graph).
    pub fn tp_overlap_in_backward(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether the framework shards the logits over the vocabulary with PyTorch's
    /// `loss_parallel()` when tensor parallelism is on: torchtitan's output layer is
    /// `ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)` and its loss runs under
    /// `loss_parallel()` unless `disable_loss_parallel` (default off; `parallelize_llama.py`,
    /// `ParallelDims.loss_parallel_enabled = tp > 1 and not disable_loss_parallel`).
    pub fn runs_loss_parallel(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    /// The loss kernel the framework runs with these element-wise kernels: Megatron's
    /// vocab-parallel cross-entropy everywhere but torchtitan, whose loss is compiled when the
    /// model is (torchtitan `build_cross_entropy_loss`: `torch.compile(loss_fn)` under
    /// `training.compile`) and eager PyTorch otherwise.
    pub fn default_loss_kernel(self, kernel_fusion: KernelFusion) -> LossKernel {
        match (self, kernel_fusion) {
            (TrainingFramework::Torchtitan, KernelFusion::Fused) => LossKernel::Compiled,
            (TrainingFramework::Torchtitan, _) => LossKernel::EagerFp32,
            _ => LossKernel::VocabParallel,
        }
    }

    /// What `--recompute selective` recomputes in this framework.
    pub fn selective_recompute(self) -> SelectiveRecompute {
        match self {
            TrainingFramework::Torchtitan => SelectiveRecompute::AlternateMatmuls,
            TrainingFramework::MegatronCore => SelectiveRecompute::CheckpointedAttention,
            TrainingFramework::MegatronLm2021 | TrainingFramework::Deepspeed => {
                SelectiveRecompute::AttentionCore
            }
        }
    }

    /// Whether a TP collective copies its whole tensor once more on the compute stream. torchtitan
    /// keeps activations as [batch, sequence, hidden] and shards them over the sequence (DTensor
    /// `Shard(1)`), and PyTorch's functional collectives gather and scatter along dim 0 only:
    /// `all_gather_tensor` with `gather_dim != 0` ends in `torch.cat(torch.chunk(res, group_size,
    /// dim=0), dim=gather_dim)` and `reduce_scatter_tensor` with `scatter_dim != 0` starts with
    /// `torch.cat(torch.chunk(self, group_size, dim=scatter_dim))`
    /// (torch/distributed/_functional_collectives.py): one read and one write of the full b·s·h
    /// tensor per collective. Megatron's [sequence, batch, hidden] layout gathers along dim 0 in
    /// place. torchtitan's async TP hands the shard to `fused_all_gather_matmul`, which consumes it
    /// in place (Inductor restrides the shard so `movedim(gather_dim, 0)` is contiguous), so only
    /// the vanilla collectives copy.
    pub fn tp_collectives_copy_their_tensor(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    /// How the framework runs element-wise kernels unless told otherwise: Megatron-Core and
    /// DeepSpeed (Megatron's fused kernels) fused; torchtitan eager, its default
    /// (`training.compile = false` in torchtitan's JobConfig; `--torch-compile` says otherwise).
    pub fn default_kernel_fusion(self) -> KernelFusion {
        match self {
            TrainingFramework::Torchtitan => KernelFusion::Eager,
            TrainingFramework::MegatronLm2021
            | TrainingFramework::MegatronCore
            | TrainingFramework::Deepspeed => KernelFusion::Fused,
        }
    }

    /// What the framework's sharded data parallelism at ZeRO stage `zero` copies once more on the
    /// compute stream's path around its collectives.
    /// - FSDP2 (torchtitan's, and NeMo AutoModel's) shards each parameter on its own and gathers a
    ///   whole block's shards into one flat buffer, so after each all-gather
    ///   `foreach_all_gather_copy_out` splits the buffer into the parameters
    ///   (`split_with_sizes_copy`, after `current_stream().wait_event(all_gather_event)`), and
    ///   before each reduce-scatter `foreach_reduce` interleaves the unsharded gradients into its
    ///   input (`foreach_reduce_scatter_copy_in`, `chunk_cat`, casting to the reduce dtype) on the
    ///   current stream before handing it to the reduce-scatter stream
    ///   (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py). The copy into the all-gather
    ///   input runs on its own stream and moves only the local shard.
    /// - DeepSpeed's ZeRO-3 concatenates each gathered parameter out of the coalesced buffer
    ///   (`AllGatherCoalescedHandle.wait`: `param.data = torch.cat(partitions)`,
    ///   deepspeed/runtime/zero/partition_parameters.py) when the module is fetched, on the
    ///   all-gather stream that the compute stream then waits for
    ///   (`PartitionedParameterCoordinator.fetch_sub_module`: `wait()` inside
    ///   `stream(self.__allgather_stream)`, then `current_stream().wait_stream(...)`). Its gradient
    ///   copies (each gradient into the contiguous bucket, `__add_grad_to_ipg_bucket`; the reduced
    ///   partition into its fp32 buffer, `partition_grads`) run on `reduce_and_partition_stream`,
    ///   which waits for the compute stream but is not waited on until the backward ends
    ///   (`independent_gradient_partition_epilogue`; deepspeed/runtime/zero/stage3.py): they ride
    ///   beside the backward with the reduce-scatter itself, so they are not charged to it.
    /// - Megatron-Core's buffers and Megatron-FSDP hold parameters and gradients as views of the
    ///   buffers the collectives use; DeepSpeed's ZeRO-1/2 likewise (flat bit16 groups).
    pub fn sharded_dp_copies(self, zero: u8) -> ShardedDpCopies {
        match self {
            TrainingFramework::Torchtitan if zero >= 2 => ShardedDpCopies {
                gathered_parameters: true,
                reduced_gradients: true,
            },
            TrainingFramework::Deepspeed if zero == 3 => ShardedDpCopies {
                gathered_parameters: true,
                reduced_gradients: false,
            },
            _ => ShardedDpCopies::default(),
        }
    }

    /// Whether FSDP under pipeline parallelism reduces gradients once per step, after the whole
    /// schedule, from unsharded gradients accumulated over the micro-batches. PyTorch's pipelining
    /// (which torchtitan uses) runs every micro-batch's backward with FSDP's gradient sync and
    /// post-backward resharding off (torch/distributed/pipelining/stage.py
    /// `backward_maybe_with_nosync`: `set_requires_gradient_sync(False)`,
    /// `set_reshard_after_backward(False)`) and reduce-scatters in `_post_backward` after the last
    /// backward; FSDP2 accumulates those gradients in its reduce dtype (`FSDPParam.
    /// to_accumulated_grad_if_needed`, fp32 under torchtitan's mixed precision).
    pub fn fsdp_reduces_after_pipeline_schedule(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether the framework's pipeline keeps a boundary tensor per micro-batch beyond the layers'
    /// own activations, as PyTorch's pipelining (torchtitan's) does (torch/distributed/pipelining/
    /// stage.py): each stage keeps every in-flight micro-batch's output for its backward
    /// (`fwd_cache[mb] = (output_tuple, ...)`, used by `torch.autograd.backward(stage_output,
    /// grad_tensors=...)`), where Megatron-Core frees the output's data once sent
    /// (`deallocate_output_tensor`), and it allocates a receive buffer per micro-batch for the
    /// activations (`_prepare_forward_infra`: `args_recv_info[chunk_id]`) and for the gradients
    /// (`_prepare_backward_infra`: `grad_recv_info[mb_index]`, `_make_tensor_from_meta`), kept for
    /// the run.
    /// Whether the framework's models expand K and V to every query head before attention
    /// (`Training::sdpa_repeats_kv`): torchtitan's do (`repeat_kv`, then PyTorch's SDPA,
    /// torchtitan/models/llama3/model.py); Megatron's and DeepSpeed's hand grouped K and V to
    /// their fused attention.
    pub fn sdpa_repeats_kv(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    pub fn keeps_pipeline_buffers_per_microbatch(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether the framework splits the sequence over GPUs: Megatron-Core's
    /// `--context-parallel-size` and torchtitan's `context_parallel_degree` (rings), DeepSpeed's
    /// sequence parallelism (Ulysses, `sequence_parallel_size`: an all-to-all over heads; Jacobs et
    /// al. 2023, arXiv 2309.14509); 2021 Megatron-LM predates it.
    pub fn runs_context_parallelism(self) -> bool {
        !matches!(self, TrainingFramework::MegatronLm2021)
    }

    /// Whether the framework runs Megatron's sequence parallelism (the norm and dropout regions split
    /// over the TP group, all-gather/reduce-scatter in place of each all-reduce): Korthikanti et al.
    /// 2022 introduced it (Megatron-LM's `--sequence-parallel`, 2022), after the SC'21 code tpsim's
    /// `megatron-lm-2021` models; Megatron-Core, Megatron-DeepSpeed and torchtitan's TP plans run it.
    pub fn runs_sequence_parallelism(self) -> bool {
        !matches!(self, TrainingFramework::MegatronLm2021)
    }

    /// Whether sequence parallelism keeps the gathered, full-length inputs of the column-parallel
    /// linears for the backward: torchtitan's DTensor plan does (its linears save what they were
    /// given, the replicated input `PrepareModuleInput` gathered); Megatron-LM and Transformer
    /// Engine save the sequence shard and all-gather it again for the weight gradient
    /// (megatron/core/tensor_parallel/layers.py `LinearWithGradAccumulationAndAsyncCommunication`).
    pub fn sp_keeps_gathered_inputs(self) -> bool {
        matches!(self, TrainingFramework::Torchtitan)
    }

    /// Whether the vocabulary-parallel embedding sums its shards' lookups with a reduce-scatter
    /// over the sequence under sequence parallelism (`learned_positions`: the model adds a learned
    /// position table after the lookup). Megatron-Core does where no position table follows
    /// (`LanguageModelEmbedding.reduce_scatter_embeddings`, megatron/core/models/common/embeddings/
    /// language_model_embedding.py at d98e8a64; `VocabParallelEmbedding.forward`,
    /// megatron/core/tensor_parallel/layers.py), else it all-reduces and splits the sum; torchtitan's
    /// `tok_embeddings` goes from partial to sequence-sharded (`set_decoder_sharding_config`,
    /// torchtitan/models/common/decoder_sharding.py at b5bcd76c6: a reduce-scatter) and has no
    /// learned-position model. Megatron-DeepSpeed's `VocabParallelEmbedding.forward` always
    /// all-reduces (`reduce_from_tensor_model_parallel_region`, megatron/core/tensor_parallel/
    /// layers.py at f4157bea) and its `Embedding.forward` splits the sum afterwards
    /// (`scatter_to_sequence_parallel_region`, megatron/model/language_model.py); 2021 Megatron-LM
    /// has no sequence parallelism.
    pub fn embedding_reduce_scatters_under_sp(self, learned_positions: bool) -> bool {
        match self {
            TrainingFramework::MegatronCore | TrainingFramework::Torchtitan => !learned_positions,
            TrainingFramework::Deepspeed | TrainingFramework::MegatronLm2021 => false,
        }
    }

    /// Whether the output layer's backward TP collectives run asynchronously under its own GEMMs:
    /// Megatron's `LinearWithGradAccumulationAndAsyncCommunication.backward` (Megatron-LM
    /// `megatron/core/tensor_parallel/layers.py` at d98e8a64) issues the re-gather of a
    /// sequence-parallel input before the dgrad GEMM and the input gradient's reduce-scatter
    /// (all-reduce without sequence parallelism) before the wgrad GEMM, `async_op=True`, waiting
    /// after each; Megatron-DeepSpeed's `parallel_lm_logits` runs the same function
    /// (`megatron/model/language_model.py`, async unless `--no-async-tensor-model-parallel-allreduce`).
    /// The SC'21 code's `copy_to_tensor_model_parallel_region` all-reduced in autograd, after the
    /// GEMMs, and torchtitan's eager `ColwiseParallel` output layer (outside the compiled blocks)
    /// redistributes its input gradient after them too.
    pub fn output_layer_grad_collectives_async(self) -> bool {
        matches!(
            self,
            TrainingFramework::MegatronCore | TrainingFramework::Deepspeed
        )
    }

    /// Whether a stage boundary's replicated activation is split over the TP ranks for the send and
    /// gathered after it when sequence parallelism does not split it already: 2021 Megatron-LM's
    /// scatter/gather optimization (Narayanan et al. 2021 §4.1) and DeepSpeed's partitioned pipeline
    /// messages (`pipe_partitioned`); Megatron-Core and torchtitan send it whole
    /// (`comm::pp_message_bytes`).
    pub fn scatters_pipeline_messages(self) -> bool {
        matches!(
            self,
            TrainingFramework::MegatronLm2021 | TrainingFramework::Deepspeed
        )
    }

    /// Whether an MoE layer takes the rank's sequence shard straight into its token dispatcher, so
    /// that its MLP has no TP all-gather / reduce-scatter of its own (only its shared experts do):
    /// Megatron-Core's (its dispatchers talk over the expert groups only, `moe/token_dispatcher.py`:
    /// the dispatcher's TP group is expert TP, "not attention TP"; MoE with TP requires sequence
    /// parallelism). Elsewhere tpsim keeps the dense layers' pair.
    pub fn moe_takes_sequence_shard(self) -> bool {
        matches!(self, TrainingFramework::MegatronCore)
    }

    /// Whether the framework has a configuration for ZeRO stage `zero`. torchtitan replicates
    /// (`data_parallel_replicate_degree`, DDP: ZeRO-0) or shards parameters, gradients and optimizer
    /// states with FSDP2 (`data_parallel_shard_degree`: ZeRO-3, whose `fsdp_reshard_after_forward =
    /// "never"` keeps the gathered parameters through the backward, tpsim's
    /// `reshard_after_forward: false`, close to ZeRO-2 in memory and traffic); it has no stage that
    /// shards the optimizer states or gradients alone (torchtitan `config/job_config.py`,
    /// `Parallelism`). Megatron-Core has all four (distributed optimizer; Megatron-FSDP's
    /// `optim`, `optim_grads`, `optim_grads_params`), DeepSpeed too (ZeRO 1–3), Megatron-LM 2021
    /// 0–1 (its search stops there, `max_zero_with_pp` aside, by the flags it had).
    pub fn runs_zero_stage(self, zero: u8) -> bool {
        match self {
            TrainingFramework::Torchtitan => matches!(zero, 0 | 3),
            _ => true,
        }
    }

    /// Why the framework cannot keep its ZeRO-sharded states in several copies (hybrid sharding,
    /// `ParallelPlan::dp_replicas`) at ZeRO stage `zero`, and what to give instead; None where it
    /// can. Megatron-Core splits its distributed optimizer and Megatron-FSDP into partial instances
    /// (`--num-distributed-optimizer-instances`: megatron/core/parallel_state.py builds the
    /// intra-instance groups from consecutive ranks of the dp-cp group;
    /// distributed/param_and_grad_buffer.py reduce-scatters inside an instance, then all-reduces
    /// each shard across instances; distributed/fsdp/mcore_fsdp_adapter.py `enable_hsdp`).
    /// torchtitan runs it for FSDP only (HSDP: `data_parallel_replicate_degree` x
    /// `data_parallel_shard_degree`). DeepSpeed's partial sharding is MiCS (`mics_shard_size`, ZeRO-3),
    /// whose hierarchical gathers tpsim does not model; 2021 Megatron-LM had none.
    pub fn dp_replicas_refusal(self, zero: u8) -> Option<(&'static str, &'static str)> {
        match self {
            TrainingFramework::MegatronCore => None,
            TrainingFramework::Torchtitan if zero == 3 => None,
            TrainingFramework::Torchtitan => Some((
                "keeps several copies only of FSDP's sharded states (HSDP, --zero 3)",
                ", or --zero 3",
            )),
            TrainingFramework::Deepspeed => Some((
                "shards states in groups only through MiCS (mics_shard_size), which tpsim does not model",
                ", or --framework megatron-core (--num-distributed-optimizer-instances)",
            )),
            TrainingFramework::MegatronLm2021 => Some((
                "had no partial distributed optimizer",
                ", or --framework megatron-core (--num-distributed-optimizer-instances)",
            )),
        }
    }

    /// Whether copies of the sharded states split the data-parallel ranks with the CP ranks among
    /// them: Megatron-Core cuts the dp-cp group into consecutive slices (parallel_state.py asserts
    /// `(data_parallel_size * context_parallel_size) % num_distributed_optimizer_instances == 0`
    /// and builds the intra-instance groups from `ranks_with_cp`), so a copy may hold part of a CP
    /// group's ranks; torchtitan's HSDP replicates over `data_parallel_replicate_degree`, a factor
    /// of dp alone (`dp_replicate * dp_shard * cp * tp * pp` is the world, FSDP sharding over
    /// dp_shard × cp). Other frameworks keep no copies (`dp_replicas_refusal`).
    pub fn copies_split_cp(self) -> bool {
        self == TrainingFramework::MegatronCore
    }

    /// What a framework lacking some ZeRO stages (`runs_zero_stage`) offers instead, in the words
    /// `eval`'s note and `plan`'s pin error both use.
    pub fn zero_stages_it_has(self) -> &'static str {
        match self {
            TrainingFramework::Torchtitan => {
                "it replicates (--zero 0) or shards parameters, gradients and optimizer states with FSDP2 (--zero 3; --reshard-after-forward false keeps the gathered parameters through the backward, close to ZeRO-2)"
            }
            _ => "it has ZeRO 0 to 3",
        }
    }

    /// Whether the pipeline schedule interleaves model chunks: Megatron-LM's interleaved 1F1B
    /// (Narayanan et al. 2021 §2.2, `--num-layers-per-virtual-pipeline-stage`) and torchtitan's
    /// `Interleaved1F1B` do; DeepSpeed's `PipelineEngine` runs one chunk per stage.
    pub fn interleaves_pipeline(self) -> bool {
        !matches!(self, TrainingFramework::Deepspeed)
    }

    /// Whether the framework takes the layers of every model chunk as given, so that a stage's
    /// chunks may hold different layer counts: Megatron-Core's `--pipeline-model-parallel-layout`
    /// (megatron/core/transformer/pipeline_parallel_layer_layout.py; Megatron-LM `arguments.py`
    /// derives the virtual stages from it) and torchtitan's `module_fqns_per_model_part`
    /// (torchtitan/distributed/pipeline_parallel.py). 2021's Megatron-LM split every stage into
    /// `--num-layers-per-virtual-pipeline-stage` layers, which must divide it.
    pub fn takes_chunk_layouts(self) -> bool {
        matches!(
            self,
            TrainingFramework::MegatronCore | TrainingFramework::Torchtitan
        )
    }

    /// Whether full recompute can cover only some layers of each chunk. Megatron-LM's
    /// `--recompute-method block --recompute-num-layers N` (2021 `--activations-checkpoint-method
    /// block`) and DeepSpeed's `number_checkpoints` can; torchtitan's `mode = "full"` wraps every
    /// transformer block (torchtitan/distributed/activation_checkpoint.py `apply_ac`), so its full
    /// recompute is all layers.
    pub fn recomputes_some_layers(self) -> bool {
        !matches!(self, TrainingFramework::Torchtitan)
    }

    /// Highest ZeRO stage the framework runs together with pipeline parallelism: DeepSpeed's
    /// PipelineEngine and 2021 Megatron-LM only shard the optimizer (ZeRO-1); Megatron-Core FSDP
    /// (`--use-megatron-fsdp`, `optim_grads_params`) and torchtitan's FSDP2 + PP shard everything.
    pub fn max_zero_with_pp(self) -> u8 {
        match self {
            TrainingFramework::MegatronLm2021 | TrainingFramework::Deepspeed => 1,
            TrainingFramework::MegatronCore | TrainingFramework::Torchtitan => 3,
        }
    }
}

/// What a framework's selective activation recompute keeps and what it runs again in backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectiveRecompute {
    /// Megatron's selective recompute: only the attention core (QKᵀ, softmax, dropout, AV) is
    /// recomputed (Korthikanti et al. 2022 §5); with FlashAttention that is what the kernel's
    /// backward does anyway, so nothing extra runs (Megatron-LM's flash path is not checkpointed:
    /// `ParallelAttention` calls `core_attention_flash` directly).
    AttentionCore,
    /// Megatron-Core's selective recompute (`--recompute-granularity selective`, default
    /// `recompute_modules = ["core_attn"]`): the attention core is checkpointed through Transformer
    /// Engine's `DotProductAttention(checkpoint_core_attention=True)`, which wraps the fused
    /// (flash/cuDNN) kernel too (`_checkpointed_attention_forward(self.fused_attention, …)`), so
    /// the fused attention forward runs again in backward, before its own backward kernel. It keeps
    /// almost nothing more than no recompute does (the kernel's output and log-sum-exp), so the
    /// search never proposes it with fused attention; `eval` prices it when asked.
    CheckpointedAttention,
    /// torchtitan's per-op selective AC (`selective_ac_option = "op"`, the default of its Llama
    /// configs; torchtitan/distributed/activation_checkpoint.py `_get_custom_policy`): inside each
    /// block it saves the outputs of matmuls, SDPA and reduce-scatters "except every second mm",
    /// and recomputes everything else in backward. In a Llama block's forward order (wq, wk, wv,
    /// SDPA, wo, w1, w3, w2) the second, fourth and sixth matmuls (wk, wo, w3) run again, as do the
    /// norms, RoPE and the activation, and, under TP with sequence parallelism, the all-gathers
    /// (their outputs are not in the save list); the reduce-scatters are saved.
    AlternateMatmuls,
    /// Megatron-Core's selective recompute of the modules the user lists (`--recompute-modules`,
    /// `training::RecomputeModules`); what each keeps and runs again is `cost::module_recompute`.
    Modules(RecomputeModules),
}

impl SelectiveRecompute {
    pub fn describe(self) -> String {
        match self {
            SelectiveRecompute::AttentionCore => "attention core only (Megatron selective)".into(),
            SelectiveRecompute::CheckpointedAttention => {
                "attention core, its fused kernel's forward run again in backward (Megatron-Core selective)".into()
            }
            SelectiveRecompute::AlternateMatmuls => {
                "torchtitan per-op SAC: every second matmul, the norms and the TP all-gathers run again".into()
            }
            SelectiveRecompute::Modules(modules) => {
                format!("Megatron-Core modules {}", modules.describe())
            }
        }
    }

    /// Share of one layer's forward TP collectives (the all-reduce-equivalent pair) that the
    /// recompute runs again: per-op SAC repeats the two all-gathers of sequence parallelism (half
    /// the pair) or, without it, both all-reduces.
    /// Module recompute repeats the MLP's pair of the layers whose MLP it recomputes (`mlp`: the
    /// dense MLPs, `dense_share` of the layers, `moe`: the MoE layers, `moe_share` of them;
    /// `RecomputeModules::mlp_pair_repeats`).
    pub fn tp_forward_share(
        self,
        sequence_parallel: bool,
        dense_share: f64,
        moe_share: f64,
        moe_pair: bool,
    ) -> f64 {
        match (self, sequence_parallel) {
            (SelectiveRecompute::AttentionCore | SelectiveRecompute::CheckpointedAttention, _) => {
                0.0
            }
            (SelectiveRecompute::Modules(modules), _) => {
                0.5 * modules.mlp_pair_repeats(dense_share, moe_share, moe_pair)
            }
            (SelectiveRecompute::AlternateMatmuls, true) => 0.5,
            (SelectiveRecompute::AlternateMatmuls, false) => 1.0,
        }
    }
}

/// Which communication a framework hides behind compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlap {
    /// TP all-gathers and reduce-scatters split into chunks under the neighbouring GEMMs
    /// (Megatron-Core `--tp-comm-overlap` userbuffers, torchtitan async TP).
    pub tp_comm: bool,
    /// Bucketed gradient reduction during backward (`--overlap-grad-reduce`, DDP buckets, FSDP).
    pub grad_reduce: bool,
    /// The distributed optimizer's parameter all-gather under the next forward
    /// (`--overlap-param-gather`, FSDP forward prefetch).
    pub param_gather: bool,
    /// Pipeline sends and receives overlapped with compute in the interleaved schedule
    /// (`--overlap-p2p-communication`).
    pub p2p: bool,
    /// MoE dispatch/combine all-to-alls of one micro-batch under another's compute in the combined
    /// 1F1B schedule (Megatron-Core `--overlap-moe-expert-parallel-comm`): off by default in
    /// Megatron-Core, on in the recipes that set it. Absent from plan files written before it.
    #[serde(default)]
    pub moe_a2a: bool,
}

/// The expert capacity factors tpsim plans with: at least 1 (below it tokens are dropped even
/// when routing is balanced) and at most 64. `Err` carries the rule and an example, for the caller
/// to put after the flag and value it read.
pub fn check_moe_capacity_factor(factor: f64) -> Result<(), &'static str> {
    if factor.is_finite() && (1.0..=64.0).contains(&factor) {
        Ok(())
    } else {
        Err(
            "the expert capacity over the balanced share must be between 1 and 64 (below 1 drops tokens even when routing is balanced); e.g. --moe-capacity-factor 1.25",
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Training {
    pub seq_len: u32,
    /// Sequences per optimizer step across all replicas.
    pub global_batch: u32,
    pub grad_dtype: GradDtype,
    /// How parameters and Adam's states are stored (`--optimizer-states`; the framework's own by
    /// default, `TrainingFramework::default_optimizer_states`).
    pub optimizer_states: OptimizerStates,
    /// Tokens to train on, for the time-to-train estimate.
    pub tokens: Option<f64>,
    /// Price of one GPU-hour (`--price-per-gpu-hour`), for `Estimate::cost_to_train`.
    pub price_per_gpu_hour: Option<f64>,
    pub attention: AttentionKernel,
    pub framework: TrainingFramework,
    pub overlap: Overlap,
    /// Tokens the busiest expert gets over the balanced share (1.0: balanced routing, as the
    /// published MoE benchmarks force; `--moe-imbalance`), capped by the capacity factor when one
    /// is set (tokens over capacity are dropped, Megatron `--moe-capacity-factor`).
    pub moe_imbalance: f64,
    /// The expert capacity factor the user set (`--moe-capacity-factor`, Megatron-Core
    /// `--moe-expert-capacity-factor`): kept so that the emitted configurations say it (its effect
    /// on time and memory is already folded into `moe_imbalance` as a cap). `None`: dropless.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_capacity_factor: Option<f64>,
    /// The MoE token dispatcher and routing pattern (`--moe-dispatcher`, `--moe-routing`).
    pub moe_dispatch: MoeDispatch,
    /// Whether low-precision training all-gathers its quantized weights as the parameters
    /// (Megatron-Core `--fp8-param-gather` / `--fp4-param-gather`): the framework's default
    /// (`TrainingFramework::fp8_param_gather`), or what a pasted launch line says.
    pub fp8_param_gather: bool,
    /// Fused or eager element-wise kernels (`--torch-compile` under torchtitan).
    pub kernel_fusion: KernelFusion,
    /// The cross-entropy kernel (`TrainingFramework::default_loss_kernel`).
    pub loss: LossKernel,
    /// Sequences per data-parallel rank in one pipeline schedule run (torchtitan's
    /// `training.local_batch_size`, NeMo AutoModel's `step_scheduler.local_batch_size`;
    /// `--local-batch`). PyTorch's pipelining runs one schedule per gradient-accumulation step
    /// (torchtitan `train.py` and AutoModel `recipes/llm/benchmark.py` call `schedule.step` once
    /// per local batch), each with its own fill and drain. `None`: one schedule over the whole
    /// step, as Megatron-LM and DeepSpeed's pipeline engine run it.
    pub local_batch: Option<u32>,
    /// How context parallelism exchanges K/V (`--cp-exchange`; the framework's by default).
    pub cp_exchange: CpExchange,
    /// Per-tensor FP8's scaling recipe (`--fp8-scaling`; the framework's by default).
    pub fp8_scaling: Fp8Scaling,
    /// What selective recompute recomputes under Megatron-Core when the user lists modules
    /// (`--recompute-modules`); `None`: the framework's own selective kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recompute_modules: Option<RecomputeModules>,
    /// With several pipeline schedules per step (`local_batch`), FSDP under PyTorch's pipelining
    /// reshards and reduce-scatters at the end of every schedule (torch/distributed/pipelining/
    /// stage.py `backward_maybe_with_nosync`: `set_reshard_after_backward(True)`,
    /// `set_requires_gradient_sync(True)` on each schedule's last backward), as torchtitan runs
    /// it; NeMo AutoModel's MoE models patch that method to do it once, before the optimizer
    /// step (`nemo_automodel/components/moe/fsdp_mixin.py`, `MoEFSDPSyncMixin`): `true` here.
    /// Not on the command line (tpsim has no AutoModel framework); the accuracy runner sets it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fsdp_syncs_once_per_step: bool,
    /// PyTorch's pipelining keeps every micro-batch's output on the last stage until the step
    /// ends, to merge and return them (torch/distributed/pipelining/stage.py `forward_one_chunk`:
    /// "Output chunks is only used for the last stage", `output_chunks.append(output)`, cleared by
    /// the next `step`), and the model's output there is its logits. PyTorch PR #165822 let a
    /// caller skip that (`step(return_outputs=False)`), which torchtitan passes since its commit
    /// e5ef99a (2025-10-22, "Update PP to release memory earlier"): `true` for torchtitan runs
    /// before it. Not on the command line (`--framework torchtitan` is today's torchtitan); the
    /// accuracy runner sets it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pipeline_keeps_outputs: bool,
    /// Megatron-Core's `--delay-wgrad-compute` (a launch line's or `eval`'s flag; Megatron-Core
    /// takes it only with the MoE all-to-all overlap): every Transformer Engine linear stores its
    /// wgrad GEMM for later (`wgrad_store.put`) and waits for its input gradient's all-reduce or
    /// reduce-scatter at once (`dgrad_work.wait()`; TE `pytorch/module/linear.py` and
    /// `layernorm_linear.py` at d0067d0da), so that collective no longer hides under the wgrad
    /// GEMM (`cost::column_grad_collective_async`). Not in plan files.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub delay_wgrad_compute: bool,
    /// Megatron-Core before Megatron-LM #5940 (2026-08-13) clamps a clamped GLU's halves with
    /// kernels of their own before the fused activation (`cost::moe::ExpertEpilogue`); today's
    /// fuses the clamp. Not on the command line (`--framework megatron-core` is today's); the
    /// accuracy runner sets it for the releases its runs used.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub eager_glu_clamp: bool,
    /// The run trained under DeepSpeed's `BF16_Optimizer` as its 2022 code ran it beside a
    /// framework tpsim models otherwise (BLOOM: Megatron-DeepSpeed on deepspeed@olruwase/bf16-updates
    /// 5ea1c60f8, ZeRO stage 0 in the config, "it implements its own zero stage 1 equivalent"):
    /// an unsharded fp32 gradient buffer beside the bf16 `.grad`s (`cost::bf16_optimizer`). Not on
    /// the command line: `--framework deepspeed` runs it where today's DeepSpeed picks it
    /// (`cost::bf16_optimizer::accumulates_in`); the accuracy runner sets it for BLOOM.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deepspeed_bf16_optimizer: bool,
    /// The experts are torchtitan's own GPT-OSS code (`GptOssGroupedExperts`,
    /// torchtitan/models/gpt_oss/moe.py at b5bcd76c66d0), whose bias adds and clamped SwiGLU run
    /// as eager kernels of their own without `torch.compile` (`cost::moe::ExpertEpilogue`). On for
    /// `--framework torchtitan` on the command line with a model that has such experts (MoE with a
    /// clamped GLU: torchtitan's gpt_oss module is its only one), so the JSON names it only where
    /// it prices something; the accuracy runner leaves it off: NeMo
    /// AutoModel's GPT-OSS rows, planned as torchtitan, run AutoModel's model code, not this.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub torchtitan_gpt_oss_experts: bool,
    /// The model code expands K and V to every query head before calling attention, as
    /// torchtitan's models do (`repeat_kv`, then PyTorch's SDPA), where Megatron-Core's and
    /// Transformer Engine's fused attention take grouped-query K and V as they are: a copy of K and
    /// V at the query width in every layer, compiled or not (`torch.compile` cannot hand an
    /// expanded view to SDPA's kernel). On for `--framework torchtitan`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sdpa_repeats_kv: bool,
    /// Megatron-Core's gradient-accumulation fusion (on unless a launch line or plan file says
    /// `--no-gradient-accumulation-fusion`): the weight-gradient GEMMs accumulate into the
    /// gradient buffer (`TrainingFramework::fuses_wgrad_accumulation`); off, a separate add per
    /// micro-batch does. Other frameworks take their gradients from autograd either way.
    pub gradient_accumulation_fusion: bool,
    /// Rotary embeddings as one fused kernel: Megatron-Core's `apply_rope_fusion` (on unless a
    /// launch line says `--no-rope-fusion` or a plan file `rope_fusion: false`), and the kernel
    /// `torch.compile` makes of torchtitan's. Off, Megatron-Core rotates Q and K with separate
    /// PyTorch operators, about six times the bytes (`cost::compute::rope_bytes_per_token`).
    pub rope_fusion: bool,
    /// The pipeline schedule (`--pp-schedule`; 1F1B, interleaved with `--vpp > 1`, by default).
    pub pp_schedule: PipelineSchedule,
    /// Transformer layers whose activations go to host memory during the forward and come back
    /// for the backward (`--cpu-offload-layers N`, Megatron-Core's `--cpu-offloading
    /// --cpu-offloading-num-layers N` through Transformer Engine's `get_cpu_offload_context`); 0:
    /// none. Megatron-Core allows it only below the model's layer count, without a pipeline and
    /// without recompute (`transformer_config.py`), which `ParallelPlan` checks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_offload_layers: u32,
    /// Decoder layers kept in bf16 at the ends of the stack under low-precision GEMMs
    /// (`--first-last-layers-bf16`, Megatron-Core's; none by default).
    #[serde(skip_serializing_if = "Bf16Layers::is_none")]
    pub bf16_layers: Bf16Layers,
    /// Linear modules a quantization recipe runs at their own precision inside low-precision
    /// layers (`ModulePrecision`). Not on the command line; the accuracy runner sets it from the
    /// recipes.
    #[serde(skip_serializing_if = "ModulePrecision::is_none")]
    pub module_precision: ModulePrecision,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Training {
    /// The layers whose activations are offloaded to the CPU, of `decoder_layers` (the model's
    /// transformer layers, MTP layers aside): the asked count, below the layer count as
    /// Megatron-Core requires (`cpu_offload_layers_of` refuses more; this keeps memory, time and
    /// the breakdown on one count whatever reaches them).
    pub fn offloaded_layers(&self, decoder_layers: u32) -> u32 {
        self.cpu_offload_layers
            .min(decoder_layers.saturating_sub(1))
    }

    /// Whether the weight-gradient GEMMs of a plan at ZeRO stage `zero` accumulate in place: the
    /// framework's rule (`TrainingFramework::fuses_wgrad_accumulation`) and the launch line's
    /// `--no-gradient-accumulation-fusion`. One rule for the time, the extra pass and the emitters.
    pub fn wgrad_accumulation_fused(&self, zero: u8) -> bool {
        self.gradient_accumulation_fusion && self.framework.fuses_wgrad_accumulation(zero)
    }

    /// Whether `recompute` is torchtitan's per-op selective AC here (the framework's selective
    /// kind is `SelectiveRecompute::AlternateMatmuls`), which memory, the ledger and the emitters
    /// treat apart from Megatron's attention-core recompute.
    pub fn per_op_sac(&self, recompute: crate::plan::Recompute) -> bool {
        recompute == crate::plan::Recompute::Selective
            && self.selective_recompute() == SelectiveRecompute::AlternateMatmuls
    }

    /// What `--recompute selective` recomputes here: the listed modules, or the framework's own
    /// kind. Only the attention core listed is Megatron-Core's default, `CheckpointedAttention`.
    pub fn selective_recompute(&self) -> SelectiveRecompute {
        match self.recompute_modules {
            Some(modules) if !modules.is_core_attn_only() => SelectiveRecompute::Modules(modules),
            _ => self.framework.selective_recompute(),
        }
    }

    /// A training setup with the framework's own defaults for gradient dtype and overlap.
    pub fn with_framework(
        framework: TrainingFramework,
        seq_len: u32,
        global_batch: u32,
        attention: AttentionKernel,
    ) -> Training {
        Training {
            price_per_gpu_hour: None,
            module_precision: crate::training::ModulePrecision::NONE,
            bf16_layers: crate::training::Bf16Layers::NONE,
            seq_len,
            global_batch,
            grad_dtype: framework.default_grad_dtype(),
            optimizer_states: framework.default_optimizer_states(),
            tokens: None,
            attention,
            framework,
            overlap: framework.default_overlap(),
            moe_imbalance: 1.0,
            moe_capacity_factor: None,
            moe_dispatch: MoeDispatch::default(),
            fp8_param_gather: framework.fp8_param_gather(),
            kernel_fusion: framework.default_kernel_fusion(),
            loss: framework.default_loss_kernel(framework.default_kernel_fusion()),
            local_batch: None,
            cp_exchange: framework.default_cp_exchange(),
            fp8_scaling: framework.default_fp8_scaling(),
            recompute_modules: None,
            fsdp_syncs_once_per_step: false,
            pipeline_keeps_outputs: false,
            delay_wgrad_compute: false,
            eager_glu_clamp: false,
            deepspeed_bf16_optimizer: false,
            torchtitan_gpt_oss_experts: false,
            sdpa_repeats_kv: framework.sdpa_repeats_kv(),
            gradient_accumulation_fusion: true,
            rope_fusion: true,
            pp_schedule: PipelineSchedule::OneFOneB,
            cpu_offload_layers: 0,
        }
    }
}

#[cfg(test)]
impl Training {
    /// 2021 Megatron-LM's defaults with flash attention (`with_framework`): the setup most unit
    /// tests plan with, one place for them all.
    pub(crate) fn megatron_lm_2021(seq_len: u32, global_batch: u32) -> Training {
        Training::with_framework(
            TrainingFramework::MegatronLm2021,
            seq_len,
            global_batch,
            AttentionKernel::Flash,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_attention_rate_follows_the_head_width() {
        let core = TrainingFramework::MegatronCore;
        assert_eq!(core.attention_head_width_factor(128.0), 1.0);
        assert_eq!(core.attention_head_width_factor(64.0), 0.683);
        assert_eq!(core.attention_head_width_factor(32.0), 0.683);
        assert_eq!(core.attention_head_width_factor(256.0), 0.825);
        // MLA's 192-wide queries and keys: halfway between 128 and 256.
        assert!((core.attention_head_width_factor(192.0) - 0.9125).abs() < 1e-12);
        let titan = TrainingFramework::Torchtitan;
        assert!((titan.attention_head_width_factor(96.0) - 0.9365).abs() < 1e-12);
        assert_eq!(
            TrainingFramework::MegatronLm2021.attention_head_width_factor(64.0),
            1.0
        );
    }

    #[test]
    fn files_spell_each_framework_as_the_command_line_does() {
        for framework in [
            TrainingFramework::MegatronLm2021,
            TrainingFramework::MegatronCore,
            TrainingFramework::Torchtitan,
            TrainingFramework::Deepspeed,
        ] {
            let written = serde_json::to_string(&framework).unwrap();
            assert_eq!(written, format!("\"{}\"", framework.as_str()));
            let read: TrainingFramework = serde_json::from_str(&written).unwrap();
            assert_eq!(read, framework);
        }
        // The spelling plan files were written with before.
        let old: TrainingFramework = serde_json::from_str("\"megatron-lm2021\"").unwrap();
        assert_eq!(old, TrainingFramework::MegatronLm2021);
    }
}
