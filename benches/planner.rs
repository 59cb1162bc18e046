//! Planner speed: one plan evaluation, and whole searches (`tpsim plan --params 512B --nodes 32`
//! and `--params 1T --nodes 512`). Figures for this machine are in BENCHMARKS.md.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

use tpsim::cluster::Cluster;
use tpsim::cost::evaluate;
use tpsim::plan::{ParallelPlan, PlanRequest, Recompute};
use tpsim::planner::{SearchOptions, enumerate, search};
use tpsim::shape::derive_shape;
use tpsim::specs::load_gpu;
use tpsim::training::{GradDtype, Training};

fn cluster(nodes: u32) -> Cluster {
    Cluster {
        gpu: load_gpu("h100-sxm-80g").unwrap(),
        nodes,
        gpus_per_node: 8,
    }
}

fn training() -> Training {
    Training {
        grad_dtype: GradDtype::Bf16,
        ..Training::with_framework(
            tpsim::training::TrainingFramework::MegatronLm2021,
            2048,
            1536,
            tpsim::training::AttentionKernel::Flash,
        )
    }
}

fn one_evaluation(c: &mut Criterion) {
    let model = derive_shape(512e9, 2048).unwrap();
    let cluster = cluster(32);
    let training = training();
    let request = PlanRequest {
        tp: 8,
        pp: 16,
        dp: 2,
        vpp: 1,
        micro_batch: 1,
        sequence_parallel: true,
        recompute: Recompute::Selective,
        zero: 1,
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let mut group = c.benchmark_group("evaluate");
    group.throughput(Throughput::Elements(1));
    group.bench_function("512b_tp8_pp16_dp2", |b| {
        b.iter(|| evaluate(black_box(&model), &cluster, &training, black_box(&plan)))
    });
    group.finish();
}

fn searches(c: &mut Criterion) {
    let options = SearchOptions {
        allow_uneven_pp: false,
        allow_cross_node_tp: false,
        ..SearchOptions::default()
    };
    let training = training();
    let mut group = c.benchmark_group("search");
    group.sample_size(20);
    for (label, params, nodes) in [("512B_32_nodes", 512e9, 32), ("1T_512_nodes", 1e12, 512)] {
        let model = derive_shape(params, 2048).unwrap();
        let cluster = cluster(nodes);
        let candidates = enumerate(&model, &cluster, &training, options).len() as u64;
        group.throughput(Throughput::Elements(candidates));
        group.bench_function(label, |b| {
            b.iter(|| search(black_box(&model), &cluster, &training, options))
        });
    }
    group.finish();
}

/// Current-stack searches with context and expert parallelism searched (issue 8: the 405B search on
/// 16,384 GPUs with cp searched under 0.5 s; issue 9: DeepSeek-V3 on 2,048 H100 and Qwen3-235B on
/// 256 GB200 under 1 s), each with the framework defaults `tpsim plan` uses.
fn current_stack_searches(c: &mut Criterion) {
    use tpsim::training::{AttentionKernel, TrainingFramework};
    let mut group = c.benchmark_group("search_current");
    group.sample_size(10);
    for (label, model, gpu, nodes, gpus_per_node, seq_len, batch, uneven) in [
        (
            "405B_16384_gpus_8k",
            "llama3-405b",
            "h100-sxm-80g",
            2048,
            8,
            8192,
            2048,
            true,
        ),
        (
            "deepseek_v3_2048_h100",
            "deepseek-v3",
            "h100-sxm-80g",
            256,
            8,
            4096,
            4096,
            false,
        ),
        (
            "deepseek_v3_2048_h100_uneven_pp",
            "deepseek-v3",
            "h100-sxm-80g",
            256,
            8,
            4096,
            4096,
            true,
        ),
        (
            "qwen3_235b_256_gb200",
            "qwen3-235b-a22b",
            "gb200-nvl72",
            64,
            4,
            4096,
            2048,
            false,
        ),
    ] {
        let model = tpsim::specs::load_model(model).unwrap();
        let cluster = Cluster {
            gpu: load_gpu(gpu).unwrap(),
            nodes,
            gpus_per_node,
        };
        // As `tpsim plan` sets it: Megatron-Core's selective recompute is the output-discarding
        // modules the model has (`--recompute-modules`' default), which the search tries as a
        // plan of its own, so the bench searches the candidates the command prints.
        let training = Training {
            recompute_modules: tpsim::training::RecomputeModules::output_discarding_for(&model),
            ..Training::with_framework(
                TrainingFramework::MegatronCore,
                seq_len,
                batch,
                AttentionKernel::Flash,
            )
        };
        let options = SearchOptions {
            allow_uneven_pp: uneven,
            ..SearchOptions::default()
        };
        let candidates = enumerate(&model, &cluster, &training, options).len() as u64;
        group.throughput(Throughput::Elements(candidates));
        group.bench_function(label, |b| {
            b.iter(|| search(black_box(&model), &cluster, &training, options))
        });
    }
    group.finish();
}

criterion_group!(benches, one_evaluation, searches, current_stack_searches);
criterion_main!(benches);
