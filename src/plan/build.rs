//! [`ParallelPlan`], the checked plan, and [`ParallelPlan::build`], the only way to make one: it
//! runs every `check_*` of the sibling files in order.

use serde::Serialize;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::training::Training;

use super::check_stages::stage_layout_or_valid;
use super::degrees::{check_degrees, check_dp_replicas, check_heads, check_tensor_placement};
use super::error::PlanError;
use super::experts::check_context_experts_precision;
use super::hybrid::check_hybrid;
use super::layer_options::{check_bf16_layers, check_cpu_offload};
use super::request::{PlanRequest, Precision, Recompute};
use super::schedule::{check_interleaving, check_v_schedule, micro_batches, schedule_runs};
use super::sequence::{check_moe_sequence_parallel, check_torchtitan_cp_sharding};
use super::stage_layout::StageLayout;

/// A checked plan. Built only through [`ParallelPlan::build`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParallelPlan {
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub dp: u32,
    pub ep: u32,
    pub etp: u32,
    pub vpp: u32,
    pub micro_batch: u32,
    pub num_microbatches: u32,
    /// Pipeline schedules run one after the other per step, `num_microbatches / schedule_runs`
    /// micro-batches each (torchtitan's gradient-accumulation steps, `Training::local_batch`); 1
    /// where one schedule covers the step.
    pub schedule_runs: u32,
    pub global_batch: u32,
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    pub zero: u8,
    pub reshard_after_forward: bool,
    pub precision: Precision,
    /// Layers of each model chunk recomputed under full recompute (0 = all).
    pub recompute_num_layers: u32,
    pub stages: StageLayout,
    /// Copies of the sharded states (`PlanRequest::dp_replicas`); 1 without ZeRO.
    pub dp_replicas: u32,
}

impl ParallelPlan {
    /// Checks a request against the model, cluster and batch; the only way to make a plan.
    pub fn build(
        request: &PlanRequest,
        model: &Model,
        cluster: &Cluster,
        training: &Training,
    ) -> Result<ParallelPlan, PlanError> {
        let r = request;
        check_degrees(r, cluster, training.framework.copies_split_cp())?;
        // Before the framework's own rules: their fixes (torchtitan's expert ranks, say) would
        // only lead to the stack's refusal of the framework.
        check_hybrid(r, model, training)?;
        if training.optimizer_states == crate::training::OptimizerStates::Muon
            && let Some(what) = crate::cost::muon::unpriced(model)
        {
            return Err(PlanError::MuonNotPriced { what });
        }
        // layer_wise_optimizer.py at d98e8a64 (`LayerWiseDistributedOptimizer.__init__`) asserts
        // "LayerWiseDistributedOptimizer does not support num_distributed_optimizer_instances > 1":
        // it owns whole parameters across the full DP×CP group and all-gathers over it.
        if training.optimizer_states == crate::training::OptimizerStates::Muon
            && r.zero >= 1
            && r.dp_replicas > 1
        {
            return Err(PlanError::MuonDpReplicas {
                replicas: r.dp_replicas,
            });
        }
        // The layer-wise optimizer's split path hands the parameters Muon does not take to a
        // DistributedOptimizer, which it cannot build for expert-parallel ones yet
        // (megatron/core/optimizer/__init__.py at d98e8a64: "Non-emerging expert-parallel param
        // groups are not yet supported on the layer-wise + DistributedOptimizer path"): experts
        // with biases (1-D, Adam's; GPT-OSS) stop a Muon run with the distributed optimizer.
        if training.optimizer_states == crate::training::OptimizerStates::Muon
            && r.zero >= 1
            && model.moe.is_some()
            && model.linear_bias
        {
            return Err(PlanError::MuonExpertBiases { zero: r.zero });
        }
        if !training.optimizer_states.allows_zero(r.zero) {
            let (rule, fix) = training.optimizer_states.zero_rule();
            return Err(PlanError::ZeroForOptimizerStates {
                zero: r.zero,
                states: training.optimizer_states.as_str(),
                rule,
                fix,
            });
        }
        check_heads(r, model, cluster, training)?;
        check_dp_replicas(r, model, training)?;
        check_torchtitan_cp_sharding(r, training)?;
        check_moe_sequence_parallel(r, model, training)?;
        check_context_experts_precision(r, model, cluster, training)?;
        check_tensor_placement(r, cluster)?;
        let stages = stage_layout_or_valid(r, model, cluster)?;
        let num_microbatches = micro_batches(r, training)?;
        let schedule_runs = schedule_runs(r, training, num_microbatches)?;
        check_v_schedule(r, training, num_microbatches / schedule_runs)?;
        check_cpu_offload(r, training)?;
        check_bf16_layers(r, model, training)?;
        check_interleaving(
            r,
            model,
            cluster,
            &stages,
            num_microbatches,
            schedule_runs,
            training,
        )?;
        Ok(ParallelPlan {
            tp: r.tp,
            pp: r.pp,
            dp: r.dp,
            vpp: r.vpp,
            micro_batch: r.micro_batch,
            num_microbatches,
            schedule_runs,
            global_batch: training.global_batch,
            sequence_parallel: r.sequence_parallel,
            recompute: r.recompute,
            zero: r.zero,
            reshard_after_forward: r.reshard_after_forward || r.zero < 3,
            precision: r.precision,
            recompute_num_layers: if r.recompute == Recompute::Full {
                r.recompute_num_layers
            } else {
                0
            },
            cp: r.cp,
            ep: r.ep,
            etp: r.etp,
            stages,
            dp_replicas: r.dp_replicas,
        })
    }

    /// Ranks over which one copy of the ZeRO-sharded dense states is sharded: the DP×CP ranks, or
    /// their share in each of `dp_replicas` copies.
    pub fn zero_shard_ranks(&self) -> u32 {
        self.dp * self.cp / self.dp_replicas.max(1)
    }

    /// Micro-batches one pipeline schedule runs (all of the step's but with a local batch).
    pub fn microbatches_per_schedule(&self) -> u32 {
        self.num_microbatches / self.schedule_runs
    }

    /// The m of the bubble ratio (p − 1)/(v·m), in words: "m=8", or "m=2 per schedule x 4
    /// schedules" where each gradient-accumulation step runs its own schedule.
    pub fn schedule_m_words(&self) -> String {
        if self.schedule_runs > 1 {
            format!(
                "m={} per schedule x {} schedules",
                self.microbatches_per_schedule(),
                self.schedule_runs
            )
        } else {
            format!("m={}", self.num_microbatches)
        }
    }

    /// Layers of one model chunk on the most loaded stage.
    pub fn layers_per_chunk(&self) -> u32 {
        if self.stages.chunk_layers > 0 {
            return self.stages.chunk_layers;
        }
        if self.stages.even {
            // Balanced chunks (`StageLayout::balanced_chunks`): the heavier ones.
            return self.stages.max_layers().div_ceil(self.vpp).max(1);
        }
        (self.stages.max_layers() / self.vpp).max(1)
    }

    /// An even split's stage in chunks of unequal size (`StageLayout::balanced_chunks`): the
    /// lighter chunks' layers and how many of the stage's `vpp` chunks (the earliest virtual
    /// stages, `cost::pipeline::ChunkLayout`) hold one layer more; None for equal chunks.
    pub fn balanced_chunk_layers(&self) -> Option<(u32, u32)> {
        let per_stage = self.stages.first;
        self.stages
            .balanced_chunks(per_stage * self.pp, self.pp, self.vpp)
            .then(|| (per_stage / self.vpp, per_stage % self.vpp))
    }

    /// Share of each stage's layers that full recompute repeats in backward: 1 for every layer,
    /// N/L for Megatron's block method with N of a chunk's L layers, 0 without full recompute.
    /// The block method recomputes the first N layers of every model chunk
    /// (megatron/core/recompute.py, `recompute_method == 'block'`, over the chunk's own layers),
    /// so chunks of unequal size (7, 7, 6 with N 6) recompute min(N, L) each: 18 of 20 layers.
    pub fn recompute_share(&self) -> f64 {
        let n = self.recompute_num_layers;
        match self.recompute {
            Recompute::Full if n == 0 => 1.0,
            Recompute::Full => match self.balanced_chunk_layers() {
                Some((light, heavier)) => {
                    let recomputed =
                        heavier * n.min(light + 1) + (self.vpp - heavier) * n.min(light);
                    f64::from(recomputed) / f64::from(light * self.vpp + heavier)
                }
                None => (f64::from(n) / f64::from(self.layers_per_chunk())).min(1.0),
            },
            Recompute::None | Recompute::Selective => 0.0,
        }
    }

    /// The request that rebuilds this plan (what `plan --save` writes).
    pub fn request(&self) -> PlanRequest {
        PlanRequest {
            tp: self.tp,
            pp: self.pp,
            dp: self.dp,
            vpp: self.vpp,
            micro_batch: self.micro_batch,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            zero: self.zero,
            allow_uneven_pp: !self.stages.even,
            allow_cross_node_tp: false,
            cp: self.cp,
            ep: self.ep,
            etp: self.etp,
            precision: self.precision,
            reshard_after_forward: self.reshard_after_forward,
            recompute_num_layers: self.recompute_num_layers,
            stage_split: self
                .stages
                .given
                .then_some((self.stages.first, self.stages.last)),
            dp_replicas: self.dp_replicas,
        }
    }
}
