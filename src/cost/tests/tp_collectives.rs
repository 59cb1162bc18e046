//! The TP collectives' extra copies in a layer's compute: torchtitan's functional collectives,
//! async TP, Megatron-Core.

use crate::cluster::Cluster;
use crate::cost::cast;
use crate::cost::compute::{LayerShard, layer_time_sharded};
use crate::cost::overlap::tp_overlap_on;
use crate::cost::unit_costs::{attention_efficiency, unit_costs};
use crate::plan::{ParallelPlan, Recompute};
use crate::training::{AttentionKernel, Training, TrainingFramework};

#[test]
fn torchtitan_tp_collectives_add_a_copy_of_their_tensor_to_compute() {
    // Llama 3 8B on tp 8, nothing recomputed: each of the forward's and the backward's two
    // all-gather/reduce-scatter pairs reads and writes the full b·s·h bf16 tensor once more
    // (PyTorch's functional collectives chunk and cat along the sequence dim). Async TP fuses
    // the forward's; Megatron-Core copies nothing.
    let model = crate::specs::load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: crate::specs::load_gpu("h100-sxm-80g").unwrap(),
        nodes: 1,
        gpus_per_node: 8,
    };
    let plan_for = |training: &Training| {
        let request = crate::plan::PlanRequest {
            tp: 8,
            pp: 1,
            dp: 1,
            micro_batch: 2,
            sequence_parallel: true,
            recompute: Recompute::None,
            ..crate::plan::PlanRequest::default()
        };
        ParallelPlan::build(&request, &model, &cluster, training).unwrap()
    };
    let layer_of = |training: &Training| {
        let plan = plan_for(training);
        let units = unit_costs(&model, &cluster, training, &plan);
        let bare = layer_time_sharded(
            &model,
            &cluster,
            &LayerShard {
                micro_batch: 2,
                seq_len: 8192,
                tp: 8,
                cp: 1,
                sp: true,
                recompute: Recompute::None,
                selective: training.selective_recompute(),
                attention: training.attention,
                gemm_chunks: if tp_overlap_on(training, &plan) { 8 } else { 1 },
                attention_efficiency: attention_efficiency(&model, &cluster, training),
                kernel_fusion: training.kernel_fusion,
                sdpa_repeats_kv: training.sdpa_repeats_kv,
                rope_fusion: training.rope_fusion,
                cast: cast::CastSetting::of(training, &plan),
            },
        );
        (
            units.layer.forward - bare.forward,
            units.layer.backward - bare.backward,
        )
    };
    let pair = 8.0 * 2.0 * 8192.0 * 4096.0 * 2.0 / cluster.gpu.achieved_hbm_bandwidth().0;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 + 1e-9 * b.abs();
    let titan = Training::with_framework(
        TrainingFramework::Torchtitan,
        8192,
        8,
        AttentionKernel::Flash,
    );
    let (forward, backward) = layer_of(&titan);
    assert!(
        close(forward, pair) && close(backward, pair),
        "{forward} {backward}"
    );
    let mut async_tp = titan;
    async_tp.overlap.tp_comm = true;
    let (forward, backward) = layer_of(&async_tp);
    assert!(
        close(forward, 0.0) && close(backward, pair),
        "{forward} {backward}"
    );
    let megatron = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        8,
        AttentionKernel::Flash,
    );
    assert_eq!(layer_of(&megatron), (0.0, 0.0));
}
