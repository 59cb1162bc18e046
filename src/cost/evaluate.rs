//! `evaluate`: one plan's step as the sum of its terms (compute, each group's exposed
//! communication, bubble, optimizer, host offload copies), its memory and its throughput.

use super::comm::{Collective, Comm, GroupComm};
use super::compute::{LayerTime, optimizer_time};
use super::groups::GroupKind;
use super::memory::Memory;
use super::overlap::{grad_reduce_overlaps, tp_overlap_on};
use super::stage_times::{StageTimes, stage_times};
use super::terms::{HiddenBy, StepTerms, Term, TermKind};
use super::{
    Estimate, Infeasible, MixCosts, OVERLAP_COMPUTE_PENALTY, PassComm, StepTime, UnitCosts,
    cost_to_train,
};
use super::{
    comm, embedding_grad_sync, groups as group_links, memory, module_recompute, pipeline,
    v_schedule,
};
use crate::cluster::{Cluster, Link};
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, CpExchange, SelectiveRecompute, Training};
use crate::units::{Bytes, Seconds};

/// Activation offloading's copies (`Training::cpu_offload_layers`, pp 1), as Transformer Engine's
/// v1 handler runs them (`AsyncDoubleBufferGroupOffloadHandler`, `cpu_offload_v1.py`): N of the
/// model's L decoder layers each copy their saved tensors to host memory on a D2H stream beside
/// the next layers' forward (`layer_window_map`: copy k starts at the end of layer window(k − 1)'s
/// forward, the first at the end of layer 0's, and the compute stream waits for it at the end of
/// layer window(k)'s), and back on an H2D stream beside the backward of the layers before they are
/// needed. Between the end of layer 0 and the end of layer L − 1 the N windows cover L − 1
/// layers, (L − 1)/N each on average (exactly 1 at N = L − 1, where TE warns that nothing
/// overlaps); MTP layers run after the last window and cover none. What a copy takes beyond its
/// window's compute is exposed, per offloaded layer and micro-batch, in each direction; the copies
/// run at the host link's achieved rate (`GpuProfile::achieved_host_link_bandwidth`). TE 2.10's
/// default synchronizer (`cpu_offload.py`) queues the copies on one stream with a deadline
/// L − N − 1 layers later, which in sum also leaves about L − 1 layers to hide them behind. The
/// traffic's bytes count both directions.
fn host_offload_term(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    memory: &Memory,
    layer: &LayerTime,
    micro_batches: f64,
) -> Option<Term> {
    let decoder_layers = model.layers;
    let offloaded = training.offloaded_layers(decoder_layers);
    let bytes = memory.offloaded_layer_bytes.0;
    let bandwidth = cluster.gpu.achieved_host_link_bandwidth()?.0;
    if offloaded == 0 || bytes <= 0.0 || bandwidth <= 0.0 {
        return None;
    }
    let n = f64::from(offloaded);
    let window_layers = f64::from(decoder_layers - 1) / n;
    let copy_s = bytes / bandwidth;
    let forward_exposed = (copy_s - window_layers * layer.forward).max(0.0);
    let backward_exposed = (copy_s - window_layers * layer.backward).max(0.0);
    let exposed_s = n * micro_batches * (forward_exposed + backward_exposed);
    let time_s = n * micro_batches * 2.0 * copy_s;
    Some(Term {
        wire_bytes: Bytes(n * micro_batches * 2.0 * bytes),
        time_s: Seconds(time_s),
        exposed_s: Seconds(exposed_s),
        hidden_by: if exposed_s < time_s {
            HiddenBy::LayerCompute
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::HostOffload)
    })
}

/// Evaluates one plan.
pub fn evaluate(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
) -> Estimate {
    let seq_len = training.seq_len;
    let memory = memory::memory(model, cluster, training, plan);
    let mut mix = MixCosts::new(model, cluster, training, plan);
    let StageTimes {
        slowest,
        slowest_layers,
        slowest_moe_layers,
        slowest_ends,
        slowest_mtp_layers,
        slowest_costs,
        slowest_run,
        slowest_bf16: _,
        mean_total,
        v_chunks,
        max_layers,
    } = stage_times(model, plan, &mut mix);
    let costs = mix.costs(slowest_costs);
    let ep_layers_on_slowest = costs.ep_layers(slowest_moe_layers);
    let UnitCosts {
        tp,
        cp,
        mamba_cp,
        ep,
        pp_send_s,
        pp_send_exposed_s,
        groups,
        ..
    } = *costs;
    let m = f64::from(plan.num_microbatches);
    let v = f64::from(plan.vpp);
    let p = f64::from(plan.pp);
    let layers_on_slowest = f64::from(slowest_layers);

    let mut terms = StepTerms::default();
    terms.set(Term::exposed(TermKind::Compute, 0.0, m * slowest.compute));
    let layer_comm_term = |kind: TermKind, per_layer: &PassComm, hidden_by: HiddenBy| {
        let layers = if kind == TermKind::EpComm {
            ep_layers_on_slowest
        } else {
            layers_on_slowest
        };
        Term {
            wire_bytes: Bytes(per_layer.wire_bytes * layers * m),
            time_s: Seconds(per_layer.total_s() * layers * m),
            exposed_s: Seconds(per_layer.exposed_s() * layers * m),
            hidden_by: if per_layer.exposed_s() < per_layer.total_s() {
                hidden_by
            } else {
                HiddenBy::Nothing
            },
            ..Term::new(kind)
        }
    };
    // Without TP comm overlap only the backward's asynchronous collectives hide: the re-gather of
    // the sequence-parallel inputs (under its dgrad GEMMs) and Megatron-Core's column-parallel
    // input gradients (under their wgrad GEMMs), so the term names that, not the overlap that is off.
    // The stage's ends add their own collectives once per micro-batch (`embedding_output_tp`),
    // the output layer's backward ones under its dgrad and wgrad GEMMs.
    let mut tp_term = layer_comm_term(
        TermKind::TpComm,
        &tp,
        if tp_overlap_on(training, plan) {
            HiddenBy::NeighbouringGemms
        } else {
            HiddenBy::DgradGemms
        },
    );
    let ends = costs.ends.held(slowest_ends);
    tp_term.wire_bytes.0 += ends.wire_bytes * m;
    tp_term.time_s.0 += ends.total_s() * m;
    tp_term.exposed_s.0 += ends.exposed_s() * m;
    if tp_term.hidden_by == HiddenBy::Nothing && ends.exposed_s() < ends.total_s() {
        tp_term.hidden_by = HiddenBy::DgradGemms;
    }
    terms.set(tp_term);
    terms.set(layer_comm_term(
        TermKind::CpComm,
        &cp,
        match training.cp_exchange {
            CpExchange::KvRing => HiddenBy::AttentionBlocks,
            CpExchange::TorchAllGather => HiddenBy::DiagonalAttentionStep,
            CpExchange::KvAllGather | CpExchange::HeadAllToAll => HiddenBy::Nothing,
        },
    ));
    terms.set(layer_comm_term(
        TermKind::MambaCpComm,
        &mamba_cp,
        HiddenBy::Nothing,
    ));
    terms.set(layer_comm_term(
        TermKind::EpComm,
        &ep,
        HiddenBy::OtherMicroBatch,
    ));
    if plan.pp > 1 {
        let message = comm::pp_message_bytes(model, training, plan);
        // The word embedding's gradient all-reduce between the first and the last stage, once a
        // step after the last backward and exposed (`embedding_grad_sync`), on the PP group's
        // link; it belongs to the PP group, not to the pipeline's blocks.
        let embedding_bytes = embedding_grad_sync::grad_allreduce_bytes(model, training, plan);
        let embedding_s = if embedding_bytes > 0.0 {
            Collective::AllReduce.time(embedding_bytes, 2, groups.get(GroupKind::Pp).speed)
        } else {
            0.0
        };
        terms.set(Term {
            wire_bytes: Bytes(
                slowest.sends * message * m
                    + Collective::AllReduce.wire_factor(2) * embedding_bytes,
            ),
            time_s: Seconds(slowest.sends * pp_send_s * m + embedding_s),
            exposed_s: Seconds(m * slowest.pp + embedding_s),
            hidden_by: if pp_send_exposed_s < pp_send_s {
                HiddenBy::PipelineCompute
            } else {
                HiddenBy::Nothing
            },
            ..Term::new(TermKind::PpComm)
        });
        terms.set_after_pipeline_s(embedding_s);
    }

    // Bubble: (p − 1)/v idle slots of one micro-batch's stage time (Narayanan et al. 2021 §2.2),
    // once per pipeline schedule the step runs (torchtitan's gradient-accumulation steps).
    // The V schedules (two chunks per GPU, a split backward) leave the idle time of
    // `v_schedule::v_bubble_s`, from one chunk's forward, input and weight gradient.
    // One micro-batch's send at the mean hop of the fill and drain (`fill_hop_send_exposed_s`),
    // which both schedule families' bubbles price; no pipeline, no hop.
    let fill_send = if plan.pp > 1 {
        fill_hop_send_exposed_s(
            model,
            cluster,
            training,
            plan,
            pp_send_exposed_s,
            groups.get(GroupKind::Pp),
        )
    } else {
        0.0
    };
    let bubble_s = match (plan.pp > 1, training.pp_schedule.v_kind(), v_chunks) {
        (false, _, _) => 0.0,
        (true, Some(kind), Some([chunk, output])) => {
            // The fill and drain's hops each on their own boundary, as below: the mean chunk's
            // sends (the mean stage's 2v − 2/p over its v chunks, which its forward and input
            // gradient carry in proportion) at the mean hop (`fill_hop_send_exposed_s`, a V's
            // share of boundaries on NVLink), the steady state at the slowest (the stage time).
            let faster = (2.0 * v - 2.0 / p) / v * (pp_send_exposed_s - fill_send);
            let carried = chunk[0] + chunk[1];
            let chunk = if carried > 0.0 {
                let keep = ((carried - faster) / carried).max(0.0);
                [chunk[0] * keep, chunk[1] * keep, chunk[2]]
            } else {
                chunk
            };
            f64::from(plan.schedule_runs)
                * v_schedule::v_bubble_s(
                    kind,
                    plan.pp,
                    plan.microbatches_per_schedule(),
                    chunk,
                    output,
                )
        }
        (true, _, _) => {
            // The fill and drain cross every stage boundary, each on its own link
            // (`groups::pp_boundary_link`), where the steady state runs at the slowest boundary's
            // pace (the stage time's sends): Megatron-Core's 1F1B pairs each send with the
            // neighbour's receive (`send_forward_recv_backward`, batched isend/irecv, waited), so
            // every stage keeps the pace of the slowest hop once a micro-batch, while the bubble's
            // hops happen one after another. The mean stage's 2v − 2/p sends a micro-batch (none
            // forward from the last chunk, none backward from the first) are priced at the mean
            // hop in the bubble.
            let mean_sends = 2.0 * v - 2.0 / p;
            let mean_hop_total = mean_total - mean_sends * (pp_send_exposed_s - fill_send);
            f64::from(plan.schedule_runs) * (p - 1.0) / v * mean_hop_total
        }
    };
    // Idle over one stage's busy time: (p − 1)/(v·m) for the looped schedules.
    let bubble_ratio = match training.pp_schedule.v_kind() {
        Some(_) if plan.pp > 1 && mean_total > 0.0 => bubble_s / (m * mean_total),
        _ => pipeline::bubble_ratio(plan.pp, plan.vpp, plan.microbatches_per_schedule()),
    };
    terms.set(Term::exposed(TermKind::Bubble, 0.0, bubble_s));

    // DP (with CP) on the stage with the most parameters.
    let stage_params = memory::max_stage_params(model, training, plan);
    let memory::StageParams {
        total: params,
        expert: expert_params,
    } = stage_params;
    let dp_group = groups.get(GroupKind::Dp);
    let gather_bytes =
        comm::gather_bytes_per_param(model, training, plan, stage_params, max_layers);
    // Expert parameters are reduced and sharded over expert-DP, the rest over DP×CP.
    let expert_group = groups.get(GroupKind::ExpertDp);
    let dp_replicas = groups.get(GroupKind::DpReplica);
    let expert_replicas = groups.get(GroupKind::ExpertDpReplica);
    let dp = comm::dp_traffic(
        training,
        plan,
        params - expert_params,
        dp_group.size,
        dp_group.speed,
        dp_replicas.size,
        dp_replicas.speed,
        gather_bytes.dense,
    )
    .plus(&comm::dp_traffic(
        training,
        plan,
        expert_params,
        expert_group.size,
        expert_group.speed,
        expert_replicas.size,
        expert_replicas.speed,
        gather_bytes.expert,
    ));
    let overlap = training.overlap;
    let backward_gathers_s = dp.reduce_per_overlap_window_s * dp.overlap_windows - dp.grad_total_s;
    let grad_per_window = dp.grad_total_s / dp.overlap_windows.max(1.0);
    let (grad_not_hidden, backward_gathers_not_hidden) = if grad_reduce_overlaps(training, plan) {
        // Each window's reduction runs under that micro-batch's backward; the last bucket is
        // reduced after the backward has finished.
        let window = slowest.backward;
        let grad = dp.overlap_windows * (grad_per_window - window).max(0.0);
        let with_gathers = dp.overlap_windows * (dp.reduce_per_overlap_window_s - window).max(0.0);
        let last_bucket = dp.last_bucket_s.min(dp.grad_total_s - grad).max(0.0);
        (grad + last_bucket, with_gathers - grad)
    } else {
        (dp.grad_total_s, backward_gathers_s)
    };
    let with_penalty =
        |total: f64, not_hidden: f64| not_hidden + OVERLAP_COMPUTE_PENALTY * (total - not_hidden);
    let grad_exposed = with_penalty(dp.grad_total_s, grad_not_hidden.min(dp.grad_total_s));
    terms.set(Term {
        wire_bytes: Bytes(dp.grad_wire_bytes),
        time_s: Seconds(dp.grad_total_s),
        exposed_s: Seconds(grad_exposed),
        hidden_by: if grad_not_hidden < dp.grad_total_s {
            HiddenBy::Backward
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::DpGradReduce)
    });
    let forward_gathers_s = m * dp.forward_gather_per_mb_s;
    // ZeRO-3's gathers before each forward hide behind it only when prefetched (FSDP's forward
    // prefetch, DeepSpeed's `overlap_comm`): `--overlap-param-gather false` exposes them.
    let forward_gathers_not_hidden = if overlap.param_gather {
        m * (dp.forward_gather_per_mb_s - slowest.forward).max(0.0)
    } else {
        forward_gathers_s
    };
    // Weights FSDP keeps across micro-batches are gathered before each pipeline schedule's first
    // forward (`comm::fsdp_syncs_per_step` of them a step), each under that forward.
    let step_gathers = f64::from(comm::fsdp_syncs_per_step(training, plan));
    let step_gather_not_hidden = if overlap.param_gather {
        (dp.step_gather_s - step_gathers * slowest.forward).max(0.0)
    } else {
        dp.step_gather_s
    };
    let gathers_s = backward_gathers_s + forward_gathers_s + dp.step_gather_s;
    let gathers_not_hidden =
        backward_gathers_not_hidden + forward_gathers_not_hidden + step_gather_not_hidden;
    terms.set(Term {
        wire_bytes: Bytes(dp.wire_bytes - dp.grad_wire_bytes),
        time_s: Seconds(gathers_s),
        exposed_s: Seconds(with_penalty(gathers_s, gathers_not_hidden.min(gathers_s))),
        hidden_by: if gathers_not_hidden < gathers_s {
            HiddenBy::Forward
        } else {
            HiddenBy::Nothing
        },
        ..Term::new(TermKind::DpParamGather)
    });

    let params_updated =
        if plan.zero >= 1 || super::bf16_optimizer::shards_states_at_zero0(training, plan) {
            (params - expert_params) / f64::from(dp_group.size)
                + expert_params / f64::from(expert_group.size)
        } else {
            params
        };
    let optimizer_s = optimizer_time(
        cluster,
        params_updated,
        training.grad_dtype.bytes(),
        training.optimizer_states,
        comm::fp8_parameter_gather(training, plan),
    )
    .0;
    let (muon_bytes, muon_s) = muon_step(model, cluster, training, plan, &groups);
    terms.set(Term::exposed(
        TermKind::Optimizer,
        muon_bytes,
        optimizer_s + muon_s,
    ));
    if let Some(offload) = host_offload_term(model, cluster, training, &memory, &costs.layer, m) {
        terms.set(offload);
    }

    let time = StepTime::from_terms(&terms);
    let step_s = time.step_s.0;

    let gpus = f64::from(cluster.total_gpus());
    let model_flops = model.model_flops_per_step(plan.global_batch, seq_len).0;
    // Transformer layers every sequence passes through, the MTP layers included.
    let all_layers = f64::from(model.layers + model.mtp_layers);
    // The attention cores among them: every layer's in a transformer, the attention blocks' alone
    // in a hybrid stack (`Model::block_shares`: its Mamba and MLP layers hold none).
    let attention_core = model
        .attention_core_forward_flops(plan.global_batch, seq_len)
        .0
        * all_layers
        * model.block_shares().attention;
    let selective = training.selective_recompute();
    let recompute_flops = match (plan.recompute, selective, training.attention) {
        // The attention core where listed, and the other modules' GEMMs.
        (Recompute::Selective, SelectiveRecompute::Modules(modules), _) => {
            let core = if modules.contains(crate::training::RecomputeModule::CoreAttn) {
                attention_core
            } else {
                0.0
            };
            core + module_recompute::forward_flops_per_token(model, modules)
                * f64::from(plan.global_batch)
                * f64::from(seq_len)
        }
        (Recompute::None, _, _)
        | (Recompute::Selective, SelectiveRecompute::AttentionCore, AttentionKernel::Flash) => 0.0,
        (
            Recompute::Selective,
            SelectiveRecompute::AttentionCore | SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Unfused,
        ) => attention_core,
        // The fused kernel's forward again: the causal pairs (and windowed ones) it executes.
        (
            Recompute::Selective,
            SelectiveRecompute::CheckpointedAttention,
            AttentionKernel::Flash,
        ) => attention_core,
        (Recompute::Selective, SelectiveRecompute::AlternateMatmuls, _) => {
            model
                .alternate_matmul_recompute_flops(plan.global_batch, seq_len)
                .0
                * all_layers
        }
        // The recomputed forward runs the kernels of the first: the fused kernel only the causal
        // (and windowed) pairs, the unfused path all of them.
        (Recompute::Full, _, attention) => {
            let forward = match attention {
                AttentionKernel::Flash => {
                    model.layer_causal_forward_flops(plan.global_batch, seq_len)
                }
                AttentionKernel::Unfused => model.layer_forward_flops(plan.global_batch, seq_len),
            };
            plan.recompute_share() * forward.0 * all_layers
        }
    };
    // FlashAttention's backward recomputes QKᵀ: half the attention core's forward FLOPs again.
    let flash_flops = match training.attention {
        AttentionKernel::Flash => 0.5 * attention_core,
        AttentionKernel::Unfused => 0.0,
    };
    let recompute_flops = recompute_flops + flash_flops;
    let peak = cluster.gpu.peak_flops().0;
    let tokens_per_s = f64::from(plan.global_batch) * f64::from(seq_len) / step_s;
    let group_comm = |kinds: &[TermKind]| GroupComm {
        wire_bytes: Bytes(kinds.iter().map(|k| terms.get(*k).wire_bytes.0).sum()),
        time_s: Seconds(kinds.iter().map(|k| terms.get(*k).time_s.0).sum()),
        link: {
            let group = groups.get(kinds[0].group().unwrap_or(GroupKind::Tp));
            (group.size > 1).then_some(group.link)
        },
    };
    // Training runs whole steps: a token budget that is not a multiple of the step's tokens
    // takes one more step (and a budget below one step, one step).
    let time_to_train_s = training.tokens.map(|tokens| {
        let tokens_per_step = f64::from(plan.global_batch) * f64::from(seq_len);
        (tokens / tokens_per_step).ceil() * step_s
    });

    Estimate {
        plan: *plan,
        memory,
        comm: Comm {
            tp: group_comm(&[TermKind::TpComm]),
            cp: group_comm(&[TermKind::CpComm, TermKind::MambaCpComm]),
            // With ep 1 the MoE token traffic is expert TP's gathers and scatters: their link.
            ep: GroupComm {
                link: if plan.ep == 1 && plan.etp > 1 {
                    Some(groups.get(GroupKind::ExpertTp).link)
                } else {
                    group_comm(&[TermKind::EpComm]).link
                },
                ..group_comm(&[TermKind::EpComm])
            },
            pp: group_comm(&[TermKind::PpComm]),
            // With several copies of the sharded states the all-reduce across them may leave the
            // NVLink domain one copy sits in: the traffic's link is the slower of the two.
            // An MoE model's expert gradients go over expert-DP, which has ranks (and traffic)
            // where DP×CP has one (tp 8, ep 2 on 16 GPUs: DP 1, expert-DP 4): the traffic's link
            // is the slower of the groups that carry some.
            dp: {
                let dp = group_comm(&[TermKind::DpGradReduce, TermKind::DpParamGather]);
                let replicas = groups.get(GroupKind::DpReplica);
                // No collection: `evaluate` runs once per candidate and allocates nothing.
                let expert_links = || {
                    [GroupKind::ExpertDp, GroupKind::ExpertDpReplica]
                        .into_iter()
                        .map(|kind| groups.get(kind))
                        .filter(|group| model.moe.is_some() && group.size > 1)
                        .map(|group| group.link)
                };
                GroupComm {
                    link: match dp.link.or_else(|| expert_links().next()) {
                        Some(_)
                            if (replicas.size > 1 && replicas.link == Link::Network)
                                || expert_links().any(|link| link == Link::Network) =>
                        {
                            Some(Link::Network)
                        }
                        link => link,
                    },
                    ..dp
                }
            },
        },
        bubble_ratio,
        bubble_share: if step_s > 0.0 {
            time.bubble_s.0 / step_s
        } else {
            0.0
        },
        time,
        terms,
        model_tflops_per_gpu: model_flops / step_s / gpus / 1e12,
        hardware_tflops_per_gpu: (model_flops + recompute_flops) / step_s / gpus / 1e12,
        mfu: model_flops / (step_s * gpus * peak),
        tokens_per_s,
        time_to_train_s,
        cost_to_train: time_to_train_s
            .zip(training.price_per_gpu_hour)
            .map(|(seconds, price)| cost_to_train(seconds, gpus, price)),
        infeasible: if !memory.fits {
            Some(Infeasible::OutOfMemory {
                need_bytes: memory.total_bytes,
                have_bytes: memory.capacity_bytes,
            })
        } else if !memory.host_fits {
            Some(Infeasible::OutOfHostMemory {
                need_bytes: memory.host_bytes,
                have_bytes: memory.host_capacity_bytes,
            })
        } else {
            None
        },
        slowest_stage_layers: slowest_layers,
        slowest_stage_moe_layers: slowest_moe_layers,
        slowest_stage_mtp_layers: slowest_mtp_layers,
        slowest_stage_run: slowest_run,
    }
}

/// What Muon's step adds to the optimizer term (`cost::muon`): the wire bytes of gathering the
/// owned weights' updates whole over (expert) TP, and the time of those gathers and of the
/// Newton–Schulz iterations at the bf16 GEMM rate (`--muon-fp32-matmul-prec medium`), on the
/// heaviest stage's GPU. Nothing hides them: they run inside the optimizer step. (0, 0) for Adam.
fn muon_step(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    groups: &super::groups::Groups,
) -> (f64, f64) {
    if training.optimizer_states != crate::training::OptimizerStates::Muon {
        return (0.0, 0.0);
    }
    let (layer_params, expert_params) = memory::max_stage_layer_params(model, training, plan);
    // The layer-wise distributed optimizer shards ownership as the distributed optimizer shards
    // states: over DP×CP, the experts over expert-DP; without it every rank updates everything.
    let (owners, expert_owners) = if plan.zero >= 1 {
        (
            groups.get(GroupKind::Dp).size,
            groups.get(GroupKind::ExpertDp).size,
        )
    } else {
        (1, 1)
    };
    let work = super::muon::step_work(
        model,
        plan.tp,
        plan.etp,
        layer_params,
        expert_params,
        owners,
        expert_owners,
    );
    let gpu = &cluster.gpu;
    let iterations_s = work.flops / gpu.sustained_matmul_flops(gpu.gemm_efficiency).0;
    let gather_s = |bytes: f64, kind: GroupKind| {
        let group = groups.get(kind);
        if group.size <= 1 || bytes <= 0.0 {
            return (0.0, 0.0);
        }
        // `bytes` is what this rank receives: (n − 1)/n of the gathered tensors.
        let n = f64::from(group.size);
        let tensor = bytes * n / (n - 1.0);
        (
            bytes,
            super::comm::Collective::AllGather.time(tensor, group.size, group.speed),
        )
    };
    let (tp_bytes, tp_s) = gather_s(work.tp_gather_bytes, GroupKind::Tp);
    let (etp_bytes, etp_s) = gather_s(work.expert_tp_gather_bytes, GroupKind::ExpertTp);
    (tp_bytes + etp_bytes, iterations_s + tp_s + etp_s)
}

/// One stage-boundary send on NVLink as a multiple of the same send at the PP group's link
/// (`unit_costs::pp_send`): below 1 where the group crosses the network but a boundary stays
/// inside one NVLink domain (`groups::pp_boundary_link`), NVLink's point-to-point speed against
/// the network's; 1 where the whole group sits on NVLink. Overlap hides the same share of either.
pub(super) fn nvlink_send_ratio(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    pp: &super::groups::Group,
) -> f64 {
    if pp.link == Link::Nvlink || plan.pp <= 1 {
        return 1.0;
    }
    let message = comm::pp_message_bytes(model, training, plan);
    let at_group = Collective::SendRecv.time(message, 2, pp.speed);
    if at_group <= 0.0 {
        return 1.0;
    }
    Collective::SendRecv.time(message, 2, cluster.group_speed(Link::Nvlink, 1)) / at_group
}

/// The exposed send of the mean stage-boundary hop of the pipeline's fill and drain: the share of
/// hops inside one NVLink domain (`groups::pp_hop_nvlink_share`) at NVLink's speed
/// (`nvlink_send_ratio`), the rest at the PP group's (`send_exposed_s`).
fn fill_hop_send_exposed_s(
    model: &Model,
    cluster: &Cluster,
    training: &Training,
    plan: &ParallelPlan,
    send_exposed_s: f64,
    pp: &super::groups::Group,
) -> f64 {
    // A V's hops each wait on their own boundary, as 1F1B's (`groups::pp_chain_nvlink_share`).
    let share = if training.pp_schedule.v_kind().is_some() {
        group_links::pp_chain_nvlink_share(cluster, plan)
    } else {
        group_links::pp_hop_nvlink_share(cluster, plan)
    };
    let ratio = nvlink_send_ratio(model, cluster, training, plan, pp);
    send_exposed_s * (share * ratio + 1.0 - share)
}
