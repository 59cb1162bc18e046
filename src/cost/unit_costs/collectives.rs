//! The communication steps of a stage's average layer (`UnitCosts`): TP, CP, a hybrid stack's
//! Mamba exchange, EP and the pipeline send, each with the copies it runs on the compute stream;
//! and the TP collectives of the model's ends, once per micro-batch.

use super::{Inputs, LayerCompute};
use crate::cost::comm::{self, Collective};
use crate::cost::compute::{self, LayerTime};
use crate::cost::embedding_output_tp::{EndsComm, ends_comm};
use crate::cost::groups::GroupKind;
use crate::cost::overlap::PassComm;
use crate::cost::{
    OVERLAP_COMPUTE_PENALTY, column_grad_collective_async, context_parallel, exposed_under, hybrid,
    module_recompute, moe, recomputed_modules, sp_regathers_in_backward, torch_ring, tp_pairs_at,
    tp_recompute_share,
};
use crate::training::CpExchange;

/// What the TP steps share: the collectives' tensor, how many all-reduce equivalents a layer's
/// forward runs and how they overlap.
pub(super) struct TpSetting {
    /// Bytes of one collective's tensor (`comm::tp_tensor_bytes`).
    tensor: f64,
    /// The forward's all-reduce equivalents (2 for a dense layer; MoE layers without shared
    /// experts have only the attention's under Megatron-Core).
    pairs: f64,
    /// The forward pairs recompute runs again (`tp_recompute_share`).
    recompute_share: f64,
    /// Whether TP communication overlaps the GEMMs (`overlap::tp_overlap_on`).
    overlap: bool,
    /// Whether TP overlap covers the backward graph too (Megatron-Core) or the forward only
    /// (torchtitan).
    overlap_reaches_backward: bool,
    /// Under sequence parallelism with low-precision training the all-gathers carry the quantized
    /// copies (`comm::sp_gather_scale`), cast on the sequence shard; the reduce-scatters bf16.
    gather_scale: comm::SpGatherScale,
}

impl TpSetting {
    #[inline(always)]
    pub(super) fn of(inputs: &Inputs, tp_overlap: bool) -> TpSetting {
        let Inputs {
            model,
            training,
            plan,
            mix,
            ..
        } = *inputs;
        TpSetting {
            tensor: comm::tp_tensor_bytes(model, training, plan),
            pairs: tp_pairs_at(model, training, mix),
            recompute_share: tp_recompute_share(model, training, plan, mix),
            overlap: tp_overlap,
            overlap_reaches_backward: training.framework.tp_overlap_in_backward(),
            gather_scale: comm::sp_gather_scale(training, plan),
        }
    }
}

/// torchtitan's functional collectives copy the full tensor around each all-gather and
/// reduce-scatter (`TrainingFramework::tp_collectives_copy_their_tensor`): a read and a write
/// per collective, two collectives per all-reduce equivalent and two equivalents per layer
/// pass. Each copy is the size of what its collective carries: under float8 the all-gathers
/// move torchao's FP8 copies (`gather_scale`), the reduce-scatters bf16. The copies are
/// memory-bound kernels on the compute stream, so they are compute time, not communication.
/// Async TP fuses the forward's into its matmuls; the backward's stay vanilla
/// (`tp_overlap_in_backward`), and so do the recomputed forward's: under activation
/// checkpointing the recomputation is part of the backward graph (AOTAutograd's partitioner
/// places recomputed nodes there).
#[inline(always)]
pub(super) fn add_tp_collective_copies(inputs: &Inputs, tp: &TpSetting, layer: &mut LayerTime) {
    let Inputs {
        cluster,
        training,
        plan,
        ..
    } = *inputs;
    if plan.tp <= 1 || !training.framework.tp_collectives_copy_their_tensor() {
        return;
    }
    let copies = |gathered_scale: f64| {
        2.0 * 2.0 * (gathered_scale + 1.0) * tp.tensor / cluster.gpu.achieved_hbm_bandwidth().0
    };
    let (forward_copies, backward_copies) = (
        copies(tp.gather_scale.forward),
        copies(tp.gather_scale.grad),
    );
    if tp.overlap {
        // The recomputed forward runs in the backward graph, where the collectives stay vanilla.
        let unfused_recompute = if tp.overlap_reaches_backward {
            0.0
        } else {
            tp.recompute_share
        };
        layer.backward += backward_copies + forward_copies * unfused_recompute;
    } else {
        layer.forward += forward_copies;
        layer.backward += backward_copies + forward_copies * tp.recompute_share;
    }
}

/// The GEMM windows a layer's column-parallel linears hide their own asynchronous backward
/// collectives under, one per linear: Megatron-Core's `LinearWithGradAccumulationAndAsyncCommunication`
/// and Transformer Engine's `linear.py`, `layernorm_linear.py`, `layernorm_mlp.py` and
/// `ops/basic/basic_linear.py` (d0067d0da) issue the sequence-parallel re-gather before that
/// linear's dgrad GEMM and wait for it before its wgrad GEMM, and the input gradient's all-reduce or
/// reduce-scatter after the dgrad GEMM, waited after the same linear's wgrad GEMM. The QKV's
/// collective cannot borrow the MLP up projection's GEMM (its backward has finished and waited
/// before the attention's starts). Each window is the linear's forward GEMM time (its dgrad and
/// wgrad GEMMs have the forward's FLOPs at the same rate, `compute::layer_time_sharded`). The
/// attention and Mamba blocks share one mean window per block (QKV, Mamba's in-projection: a hybrid
/// average layer keeps their sum only); an MoE layer's MLP side is its shared experts' fc1, narrower
/// than the dense fc1 by shared width / ffn (the routed experts' `GroupedLinear` runs no TP
/// collective, `moe::moe_mlp_has_tp_pair`).
struct ColumnWindows {
    /// Attention and Mamba blocks per layer, and the window of each.
    mixer_blocks: f64,
    mixer_s: f64,
    /// Dense-MLP blocks per layer, and the dense fc1's window.
    dense_mlp_blocks: f64,
    dense_fc1_s: f64,
    /// MoE-MLP blocks per layer with a TP pair, and the shared experts' fc1 window.
    moe_mlp_blocks: f64,
    shared_fc1_s: f64,
}

impl ColumnWindows {
    #[inline(always)]
    fn of(inputs: &Inputs, layer: &LayerTime) -> ColumnWindows {
        let Inputs {
            model,
            training,
            mix,
            ..
        } = *inputs;
        let shares = mix.blocks;
        let mixer_blocks = shares.attention + shares.mamba;
        let mixer_gemms = layer.column_gemm_forward - layer.mlp_column_gemm_forward;
        // `mlp_column_gemm_forward` is one dense fc1 at the MLP blocks' share (`hybrid::average_layer`).
        let dense_fc1_s = if shares.mlp > 0.0 {
            layer.mlp_column_gemm_forward / shares.mlp
        } else {
            0.0
        };
        let shared_fc1_share = model.moe.map_or(0.0, |moe| {
            (f64::from(moe.shared_expert_ffn_hidden) / f64::from(model.ffn_hidden.max(1))).min(1.0)
        });
        let moe_pair =
            moe::mlp_tp_pair_share_at(model, training, mix.moe_share) - 1.0 + mix.moe_share;
        ColumnWindows {
            mixer_blocks,
            mixer_s: if mixer_blocks > 0.0 {
                mixer_gemms.max(0.0) / mixer_blocks
            } else {
                0.0
            },
            dense_mlp_blocks: (shares.mlp - mix.moe_share).max(0.0),
            dense_fc1_s,
            moe_mlp_blocks: moe_pair.max(0.0),
            shared_fc1_s: shared_fc1_share * dense_fc1_s,
        }
    }

    /// Exposed time of one collective of `one_s` per column-parallel linear, each under its own
    /// linear's window at the SM penalty (`exposed_under`), summed over the layer's linears.
    #[inline(always)]
    fn exposed(&self, one_s: f64) -> f64 {
        self.mixer_blocks * exposed_under(one_s, self.mixer_s)
            + self.dense_mlp_blocks * exposed_under(one_s, self.dense_fc1_s)
            + self.moe_mlp_blocks * exposed_under(one_s, self.shared_fc1_s)
    }
}

/// TP: two all-reduce equivalents per layer forward and two in backward (Shoeybi et al. 2019
/// §3), the forward pair again under full recompute (`comm::tp_collectives_per_layer`), hidden
/// under the layer's GEMMs where TP overlap runs.
#[inline(always)]
pub(super) fn tp_comm(inputs: &Inputs, tp: &TpSetting, layer: &LayerTime) -> PassComm {
    let Inputs {
        training,
        plan,
        groups,
        ..
    } = *inputs;
    if plan.tp <= 1 {
        return PassComm::default();
    }
    let tp_group = groups.get(GroupKind::Tp);
    let (tp_tensor, pairs, gather_scale) = (tp.tensor, tp.pairs, tp.gather_scale);
    let one = Collective::AllReduce.time(tp_tensor, plan.tp, tp_group.speed);
    let reduce_scatter_one = Collective::ReduceScatter.time(tp_tensor, plan.tp, tp_group.speed);
    // A forward pair and a backward pair in one all-reduce's time, at `gather_scale`.
    let gather_and_scatter = |gather_scale: f64| {
        if gather_scale == 1.0 {
            one
        } else {
            Collective::AllGather.time(gather_scale * tp_tensor, plan.tp, tp_group.speed)
                + reduce_scatter_one
        }
    };
    let forward_one = gather_and_scatter(gather_scale.forward);
    let backward_one = gather_and_scatter(gather_scale.grad);
    let recompute_pair = 2.0 * forward_one * tp.recompute_share;
    // Megatron's column-parallel linears under sequence parallelism keep only the sequence shard
    // of their input and all-gather it again in the backward for the weight gradient, issued
    // before the dgrad GEMM and waited after it (Megatron-Core `tensor_parallel/layers.py`
    // `LinearWithGradAccumulationAndAsyncCommunication.backward`; Transformer Engine
    // `linear.py`/`layernorm_linear.py`, with userbuffers `ub_bulk_dgrad`): one more all-gather
    // per pair, under the column-parallel dgrad GEMMs. torchtitan keeps the gathered inputs
    // instead (`TrainingFramework::sp_keeps_gathered_inputs`, counted in memory).
    let regathers = sp_regathers_in_backward(training, plan);
    let regather_one = if regathers {
        Collective::AllGather.time(gather_scale.regather * tp_tensor, plan.tp, tp_group.speed)
    } else {
        0.0
    };
    let regather_s = pairs * regather_one;
    // Without userbuffers the re-gather still hides under its own dgrad GEMM (async in both paths)
    // and Megatron-Core's column-parallel input gradients (their all-reduce, or reduce-scatter
    // under sequence parallelism) under their own wgrad GEMM, which takes as long as the linear's
    // forward GEMM (`tp_collectives::column_grad_collective_async`); the row-parallel side's
    // backward all-gather under sequence parallelism feeds its dgrad GEMM and stays exposed. Each
    // hides under its own linear's GEMM only (`ColumnWindows`).
    // The input gradients' hiding counts only where TP overlap is off (userbuffers hide them
    // otherwise), and the windows are built only where something hides under them.
    let async_grad = !tp.overlap && column_grad_collective_async(training, plan);
    let windows = (regathers || async_grad).then(|| ColumnWindows::of(inputs, layer));
    let regather_exposed_s = match &windows {
        Some(windows) if regathers => windows.exposed(regather_one),
        _ => 0.0,
    };
    let async_grad_one = if plan.sequence_parallel {
        reduce_scatter_one
    } else {
        backward_one
    };
    let (async_grad_s, async_grad_exposed_s) = match &windows {
        Some(windows) if async_grad => (pairs * async_grad_one, windows.exposed(async_grad_one)),
        _ => (0.0, 0.0),
    };
    let (forward_s, backward_s) = (
        pairs * forward_one,
        pairs * backward_one + recompute_pair + regather_s,
    );
    let (forward_exposed_s, backward_exposed_s) = if tp.overlap {
        // Forward collectives under the forward linear GEMMs; backward ones under the dgrad and
        // wgrad GEMMs (twice the forward FLOPs), the recompute pair under its own forward —
        // where the overlap reaches the backward at all (Megatron-Core's userbuffers); where it
        // does not (torchtitan), the recompute pair runs in the backward and stays exposed.
        let recompute_exposed = if tp.overlap_reaches_backward {
            2.0 * tp.recompute_share / pairs
                * exposed_under(pairs * forward_one, layer.linear_gemm_forward)
        } else {
            recompute_pair
        };
        let backward_exposed_s = if tp.overlap_reaches_backward {
            exposed_under(
                pairs * backward_one + regather_s,
                2.0 * layer.linear_gemm_forward,
            )
        } else {
            pairs * backward_one + regather_exposed_s
        };
        (
            exposed_under(pairs * forward_one, layer.linear_gemm_forward),
            backward_exposed_s + recompute_exposed,
        )
    } else {
        // Synchronous collectives, but for the re-gather under its dgrad GEMM and Megatron-Core's
        // input-gradient collectives under their wgrad GEMMs.
        (
            forward_s,
            pairs * backward_one - async_grad_s
                + async_grad_exposed_s
                + recompute_pair
                + regather_exposed_s,
        )
    };
    let gather_wire = Collective::AllGather.wire_factor(plan.tp) * tp_tensor;
    let regather_wire = if regathers {
        pairs * gather_scale.regather * gather_wire
    } else {
        0.0
    };
    // An all-gather and a reduce-scatter per forward pair (each half an all-reduce's wire).
    let forward_wire = (gather_scale.forward + 1.0) * gather_wire;
    let backward_wire = (1.0 + gather_scale.grad) * gather_wire;
    PassComm {
        forward_s,
        backward_s,
        forward_exposed_s,
        backward_exposed_s,
        wire_bytes: (pairs + 2.0 * tp.recompute_share) * forward_wire
            + pairs * backward_wire
            + regather_wire,
    }
}

/// The TP collectives of the model's ends (`embedding_output_tp`) on the TP group, the output
/// layer's and MTP projections' backward ones under their own GEMMs.
#[inline(always)]
pub(super) fn ends_tp(
    inputs: &Inputs,
    tp_overlap: bool,
    windows: compute::OutputLayerTime,
) -> EndsComm {
    let Inputs {
        model,
        training,
        plan,
        groups,
        ..
    } = *inputs;
    if plan.tp <= 1 {
        return EndsComm::default();
    }
    ends_comm(
        model,
        training,
        plan,
        tp_overlap,
        groups.get(GroupKind::Tp).speed,
        windows.logits_gemm_s,
        windows.projection_gemm_s,
    )
}

/// CP: cp − 1 ring steps per layer forward, each passing a K/V chunk under one step's attention
/// blocks; backward passes K/V and their gradients (twice the bytes) under the backward's
/// attention blocks (`compute::flash_backward_time_over_forward`); full recompute repeats the
/// forward ring. The all-gather and all-to-all exchanges' copies go on the layer's compute.
/// `attention_forward`: one transformer layer's attention forward, before a hybrid stack's
/// average.
#[inline(always)]
pub(super) fn cp_comm(inputs: &Inputs, attention_forward: f64, layer: &mut LayerTime) -> PassComm {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        groups,
    } = *inputs;
    if plan.cp <= 1 {
        return PassComm::default();
    }
    // Full recompute's share of the layers, or every layer where selective recompute re-runs
    // Transformer Engine's attention with its exchange (`context_parallel::exchange_repeats`).
    let cp_repeats = context_parallel::exchange_repeats(training, plan);
    // A hybrid stack's average layer holds `attention_share` attention blocks (1 in a
    // transformer): the attention exchange and its copies are theirs, each at one block's
    // attention time (`transformer_layer`'s, before the average).
    let attention_share = mix.blocks.attention;
    let speed = groups.get(GroupKind::Cp).speed;
    if training.cp_exchange == CpExchange::TorchAllGather {
        let step_attention = attention_forward / f64::from(plan.cp);
        let comm = torch_ring::pass_comm(
            torch_ring::repeated_kv_bytes(model, training, plan),
            plan.cp,
            speed,
            step_attention,
            compute::flash_backward_time_over_forward() * step_attention,
            cp_repeats,
        );
        // The eager fp32 merges and accumulators run on the compute stream.
        let (query, output) = torch_ring::elements(model, training, plan);
        let (merge_forward, merge_backward) = torch_ring::merge_times_s(
            query,
            output,
            plan.cp,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += attention_share * merge_forward;
        layer.backward += attention_share * merge_backward;
        layer.recompute += attention_share * cp_repeats * merge_forward;
        comm.scaled(attention_share)
    } else if training.cp_exchange != CpExchange::KvRing {
        // Transformer Engine's all-gather and all-to-all exchanges: their copies run on the
        // compute stream, their collectives on the critical path.
        let (copy_forward, copy_backward) = context_parallel::copy_times_s(
            model,
            training,
            plan,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += attention_share * copy_forward;
        layer.backward += attention_share * copy_backward;
        layer.recompute += attention_share * cp_repeats * copy_forward;
        let comm = if training.cp_exchange == CpExchange::KvAllGather {
            context_parallel::kv_all_gather_pass_comm(
                comm::cp_kv_chunk_bytes(model, training, plan),
                plan.cp,
                speed,
                cp_repeats,
            )
        } else {
            let (qkv, output) = context_parallel::all_to_all_tensor_bytes(model, training, plan);
            context_parallel::head_all_to_all_pass_comm(qkv, output, plan.cp, speed, cp_repeats)
        };
        comm.scaled(attention_share)
    } else {
        let step_attention = attention_forward / f64::from(plan.cp);
        context_parallel::kv_ring_pass_comm(
            comm::cp_kv_chunk_bytes(model, training, plan),
            plan.cp,
            speed,
            step_attention,
            compute::flash_backward_time_over_forward() * step_attention,
            cp_repeats,
        )
        .scaled(attention_share)
    }
}

/// A hybrid stack's Mamba mixers trade sequence shards for head shards around the conv and the
/// scan (`hybrid::MambaExchange`): six synchronous all-to-alls per mixer forward, their
/// gradients' in backward, the forward's again on full recompute's share (Megatron-Core's
/// hybrid block checkpoints whole layers, `hybrid_block.py`; selective recompute runs no Mamba
/// layer again), and the copies around them on the compute stream, at the stage's Mamba share.
#[inline(always)]
pub(super) fn mamba_cp_comm(inputs: &Inputs, layer: &mut LayerTime) -> PassComm {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        groups,
    } = *inputs;
    let mamba_share = mix.blocks.mamba;
    if plan.cp > 1 && mamba_share > 0.0 {
        let recompute_share = plan.recompute_share();
        let exchange = hybrid::mamba_exchange(model, training.seq_len, plan);
        let (copies_forward, copies_backward) = hybrid::mamba_exchange_copy_s(
            model,
            plan,
            &exchange,
            cluster.gpu.achieved_hbm_bandwidth().0,
        );
        layer.forward += mamba_share * copies_forward;
        layer.backward += mamba_share * copies_backward;
        layer.recompute += mamba_share * recompute_share * copies_forward;
        context_parallel::tensor_all_to_all_pass_comm(
            &exchange.tensors(),
            plan.cp,
            groups.get(GroupKind::Cp).speed,
            recompute_share,
        )
        .scaled(mamba_share)
    } else {
        PassComm::default()
    }
}

/// EP: a dispatch and a combine all-to-all per MoE layer in forward, their gradients in
/// backward, the forward pair again under full recompute; with expert TP, an all-gather of the
/// dispatched tokens and a reduce-scatter of the expert outputs beside each pair (`moe.rs`).
/// Megatron-Core runs them on the critical path unless the combined 1F1B schedule pairs the
/// micro-batches (`moe::alltoall_overlap_applies`).
#[inline(always)]
pub(super) fn ep_comm(inputs: &Inputs, compute: &LayerCompute) -> PassComm {
    let Inputs {
        model,
        cluster,
        training,
        plan,
        mix,
        groups,
    } = *inputs;
    let moe_share = mix.moe_share;
    if (plan.ep > 1 || plan.etp > 1) && moe_share > 0.0 {
        let seq_len = training.seq_len;
        let bytes = moe::alltoall_bytes(
            model,
            plan,
            seq_len,
            moe::wire_load(model, training, plan),
            training.moe_dispatch,
        );
        let speed = moe::ep_dispatch_speed(
            model,
            cluster,
            plan,
            training.moe_dispatch,
            groups.get(GroupKind::Ep),
        );
        let alltoall = comm::alltoall_s(bytes, plan.ep, speed);
        let gathered = moe::expert_tp_gather_bytes(model, plan, seq_len, compute.routed_load);
        let etp_speed = groups.get(GroupKind::ExpertTp).speed;
        let expert_tp = Collective::AllGather.time(gathered, plan.etp, etp_speed)
            + Collective::ReduceScatter.time(gathered, plan.etp, etp_speed);
        let expert_tp_wire = (Collective::AllGather.wire_factor(plan.etp)
            + Collective::ReduceScatter.wire_factor(plan.etp))
            * gathered;
        let one_pair = 2.0 * alltoall + expert_tp;
        // Full recompute's share of the layers, or the whole MoE layer under `--recompute-modules moe`.
        let moe_repeats = plan.recompute_share()
            + module_recompute::moe_alltoall_repeats(recomputed_modules(training, plan));
        let forward_s = one_pair * moe_share;
        let backward_s = (1.0 + moe_repeats) * one_pair * moe_share;
        let (forward_exposed_s, backward_exposed_s) =
            if training.overlap.moe_a2a && moe::alltoall_overlap_applies(model, training, plan) {
                // A paired MoE layer runs its four all-to-alls beside the compute Megatron-Core's
                // fine-grained schedule puts next to each (`moe::paired_layer_exposed_s`); the warmup
                // forwards and cooldown backwards have no partner.
                let unpaired = moe::unpaired_share(plan);
                let paired_exposed = moe_share
                    * moe::paired_layer_exposed_s(
                        one_pair / 2.0,
                        compute.attention_side,
                        compute.moe_time,
                        OVERLAP_COMPUTE_PENALTY,
                    );
                (
                    unpaired * forward_s + (1.0 - unpaired) * paired_exposed / 2.0,
                    unpaired * backward_s + (1.0 - unpaired) * paired_exposed / 2.0,
                )
            } else {
                (forward_s, backward_s)
            };
        PassComm {
            forward_s,
            backward_s,
            forward_exposed_s,
            backward_exposed_s,
            wire_bytes: (2.0 + moe_repeats) * (2.0 * bytes + expert_tp_wire) * moe_share,
        }
    } else {
        PassComm::default()
    }
}

/// One stage-boundary send of a micro-batch's activations and what of it is exposed (0 without
/// pipeline parallelism).
#[inline(always)]
pub(super) fn pp_send(inputs: &Inputs) -> (f64, f64) {
    let Inputs {
        model,
        training,
        plan,
        groups,
        ..
    } = *inputs;
    if plan.pp <= 1 {
        return (0.0, 0.0);
    }
    let send = Collective::SendRecv.time(
        comm::pp_message_bytes(model, training, plan),
        2,
        groups.get(GroupKind::Pp).speed,
    );
    // The interleaved schedule posts its sends and receives asynchronously and runs another
    // chunk's compute meanwhile (Megatron-Core `overlap_p2p_comm`, only with vpp > 1).
    let exposed = if training.overlap.p2p && plan.vpp > 1 {
        OVERLAP_COMPUTE_PENALTY * send
    } else {
        send
    };
    (send, exposed)
}
